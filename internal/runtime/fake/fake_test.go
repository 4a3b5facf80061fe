package fake

import (
	"archive/tar"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime"
)

// env is a driver under test with what its specs need.
type env struct {
	d        *Driver
	state    string
	rootfs   string
	initBin  string
	imageDir string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{state: filepath.Join(dir, "state"), rootfs: filepath.Join(dir, "rootfs"), initBin: filepath.Join(dir, "daemon"), imageDir: filepath.Join(dir, "images")}
	if err := os.Mkdir(e.rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.initBin, []byte("not a real binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{StateDir: e.state})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	e.d = d
	return e
}

func (e *env) spec(id string, env ...string) runtime.Spec {
	return runtime.Spec{ID: id, RootFS: e.rootfs, Init: []string{"/.airlock/init", "-socket", "/run/airlock/daemon.sock"},
		InitBinary: e.initBin, ControlDir: "/.airlock/ctl", Env: env}
}

func (e *env) create(t *testing.T, id string, env ...string) {
	t.Helper()
	if _, err := e.d.Create(t.Context(), e.spec(id, env...)); err != nil {
		t.Fatalf("Create(%s): %v", id, err)
	}
}

// dial connects to sandbox id's daemon as the node does: through DialLink, proving its key.
func (e *env) dial(t *testing.T, id string) *link.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, key, err := e.d.DialLink(ctx, id)
	if err != nil {
		t.Fatalf("DialLink(%s): %v", id, err)
	}
	if len(key) != proto.LinkKeySize {
		t.Fatalf("DialLink(%s) reports a key of %d bytes; want %d", id, len(key), proto.LinkKeySize)
	}
	c, err := link.Connect(ctx, conn, link.Options{Key: key})
	if err != nil {
		t.Fatalf("connect to %s: %v", id, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sh runs script in the sandbox of c and returns its trimmed stdout; a failure fails the test.
func sh(t *testing.T, c *link.Client, script string) string {
	t.Helper()
	res, err := c.Exec(t.Context(), proto.ExecRequest{Argv: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("%q: %v", script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("%q: exit %d: %s", script, res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

func (e *env) info(t *testing.T, id string) Info {
	t.Helper()
	info, err := e.d.Info(id)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// entries lists what the state directory holds for sandboxes.
func (e *env) entries(t *testing.T) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(e.state, "sandboxes"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// TestLifecycle: a created sandbox's daemon proves its key and runs commands in the sandbox's layer with
// the spec's environment; a second create of the ID is refused; Destroy kills its processes and
// removes everything of it, and is idempotent.
func TestLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.create(t, "sb_1", "GREETING=hello")
	c := e.dial(t, "sb_1")
	info := e.info(t, "sb_1")
	if got := sh(t, c, `echo "$GREETING"; pwd`); got != "hello\n"+info.Layer {
		t.Errorf("exec prints %q; want the spec's environment and the layer %s as the working directory", got, info.Layer)
	}
	if st, err := e.d.Status(ctx, "sb_1"); err != nil || !st.Running || st.Paused {
		t.Errorf("Status = %+v, %v; want running", st, err)
	}
	if ids, err := e.d.List(ctx); err != nil || !slices.Equal(ids, []string{"sb_1"}) {
		t.Errorf("List = %v, %v; want [sb_1]", ids, err)
	}
	if _, err := e.d.Create(ctx, e.spec("sb_1")); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a second Create(sb_1) = %v; want already exists", err)
	}
	if got := sh(t, c, "echo still"); got != "still" {
		t.Errorf("after the refused create: %q", got)
	}

	// A wrong key: the daemon cannot prove it holds it. (Its connection replaced c's: dial again.)
	conn, _, err := e.d.DialLink(ctx, "sb_1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := link.Connect(ctx, conn, link.Options{Key: make([]byte, proto.LinkKeySize)}); !errors.Is(err, link.ErrNotProven) {
		t.Errorf("connect with a wrong key = %v; want not proven", err)
	}
	c = e.dial(t, "sb_1")

	p, err := c.Start(ctx, proto.StartRequest{Argv: []string{"sleep", "600"}}, link.ProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.Info().PID
	if err := e.d.Destroy(ctx, "sb_1"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
		t.Errorf("the sandbox's process %d after Destroy: kill 0 = %v; want gone", pid, err)
	}
	if left := e.entries(t); len(left) != 0 {
		t.Errorf("Destroy left %v", left)
	}
	if _, err := e.d.Status(ctx, "sb_1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Status after Destroy = %v; want not found", err)
	}
	if _, _, err := e.d.DialLink(ctx, "sb_1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("DialLink after Destroy = %v; want not found", err)
	}
	for _, id := range []string{"sb_1", "sb_never"} {
		if err := e.d.Destroy(ctx, id); err != nil {
			t.Errorf("Destroy(%s) of a gone sandbox = %v", id, err)
		}
	}
	if err := e.d.Destroy(ctx, "../x"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Destroy(../x) = %v; want invalid argument", err)
	}
}

// TestBadSpecs: specs a real driver refuses for their form are refused, and leave nothing.
func TestBadSpecs(t *testing.T) {
	e := newEnv(t)
	for name, change := range map[string]func(*runtime.Spec){
		"id":         func(s *runtime.Spec) { s.ID = "../sb" },
		"init":       func(s *runtime.Spec) { s.Init = []string{"init"} },
		"no init":    func(s *runtime.Spec) { s.Init = nil },
		"control":    func(s *runtime.Spec) { s.ControlDir = "" },
		"rootfs":     func(s *runtime.Spec) { s.RootFS = filepath.Join(e.rootfs, "missing") },
		"binary":     func(s *runtime.Spec) { s.InitBinary = filepath.Join(e.rootfs, "missing") },
		"netns path": func(s *runtime.Spec) { s.NetNS = filepath.Join(e.rootfs, "missing") },
	} {
		t.Run(name, func(t *testing.T) {
			spec := e.spec("sb_bad")
			change(&spec)
			if _, err := e.d.Create(t.Context(), spec); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("Create = %v; want invalid argument", err)
			}
			if left := e.entries(t); len(left) != 0 {
				t.Errorf("a refused create left %v", left)
			}
		})
	}
}

// TestExit: a sandbox made to exit stops its daemon and its processes, Wait and Status report the
// reason, and it stays listed until Destroy.
func TestExit(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.create(t, "sb_1")
	c := e.dial(t, "sb_1")
	waited := make(chan runtime.Status, 1)
	go func() {
		st, err := e.d.Wait(ctx, "sb_1")
		if err != nil {
			t.Error(err)
		}
		waited <- st
	}()
	select {
	case st := <-waited:
		t.Fatalf("Wait returned %+v before the sandbox stopped", st)
	case <-time.After(50 * time.Millisecond):
	}
	const reason = "out of memory (limit 512 MiB)"
	if err := e.d.Exit("sb_1", reason); err != nil {
		t.Fatal(err)
	}
	if st := <-waited; st.Running || st.Reason != reason {
		t.Errorf("Wait = %+v; want stopped for %q", st, reason)
	}
	if st, err := e.d.Status(ctx, "sb_1"); err != nil || st.Running || st.Reason != reason {
		t.Errorf("Status = %+v, %v; want stopped for %q", st, err, reason)
	}
	// Wait on a stopped sandbox returns at once.
	if st, err := e.d.Wait(ctx, "sb_1"); err != nil || st.Reason != reason {
		t.Errorf("a second Wait = %+v, %v", st, err)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Error("the daemon's connection outlived the sandbox")
	}
	if _, _, err := e.d.DialLink(ctx, "sb_1"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("DialLink of a stopped sandbox = %v; want unavailable", err)
	}
	if ids, _ := e.d.List(ctx); !slices.Equal(ids, []string{"sb_1"}) {
		t.Errorf("List = %v; want the stopped sandbox until it is destroyed", ids)
	}
	if err := e.d.Exit("sb_none", "x"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Exit of an unknown sandbox = %v; want not found", err)
	}
	if err := e.d.Destroy(ctx, "sb_1"); err != nil {
		t.Fatal(err)
	}
	if left := e.entries(t); len(left) != 0 {
		t.Errorf("Destroy left %v", left)
	}
}

// TestCheckpointRestore: a checkpoint needs a quiesced daemon; one that leaves the sandbox running
// wakes the daemon; the image records the sandbox and its layer; restores into two IDs get the layer
// and the image's environment and report where they came from; a checkpoint that does not leave it
// running leaves it paused until Unpause.
func TestCheckpointRestore(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.create(t, "sb_1", "A=1")
	c := e.dial(t, "sb_1")
	sh(t, c, "mkdir -p d && echo layer > d/f && ln -s d/f link")
	img1 := filepath.Join(e.imageDir, "one")
	if err := e.d.Checkpoint(ctx, "sb_1", img1, runtime.CheckpointOptions{LeaveRunning: true}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Checkpoint of a daemon that listens = %v; want failed precondition", err)
	}
	if err := c.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if info := e.info(t, "sb_1"); info.Listening {
		t.Fatal("the daemon listens after Quiesce")
	}
	if err := e.d.Checkpoint(ctx, "sb_1", img1, runtime.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	info := e.info(t, "sb_1")
	if !info.Listening || info.Checkpoints != 1 || info.Status != (runtime.Status{Running: true}) {
		t.Errorf("after a checkpoint that leaves it running: %+v", info)
	}
	want := Image{ID: "sb_1", Env: []string{"A=1"}, Checkpoint: 1}
	if got, err := ReadImage(img1); err != nil || !cmp.Equal(got, want) {
		t.Errorf("ReadImage = %+v, %v; want %+v", got, err, want)
	}
	if _, err := os.Stat(filepath.Join(img1, e.d.FilesPart())); err != nil {
		t.Errorf("the image has no layer archive: %v", err)
	}
	c = e.dial(t, "sb_1")
	sh(t, c, "echo later > d/f")

	for _, id := range []string{"sb_2", "sb_3"} {
		if _, err := e.d.Restore(ctx, e.spec(id, "A=other"), img1); err != nil {
			t.Fatalf("Restore(%s): %v", id, err)
		}
		rc := e.dial(t, id)
		if got := sh(t, rc, `cat d/f link; echo "$A"`); got != "layer\nlayer\n1" {
			t.Errorf("%s: %q; want the image's layer and environment", id, got)
		}
		info := e.info(t, id)
		if info.RestoredFrom == nil || !cmp.Equal(*info.RestoredFrom, want) || info.Checkpoints != 1 {
			t.Errorf("%s restored from %+v after %d checkpoints; want %+v after 1", id, info.RestoredFrom, info.Checkpoints, want)
		}
	}
	if info := e.info(t, "sb_1"); info.RestoredFrom != nil {
		t.Errorf("a created sandbox reports a restore from %+v", info.RestoredFrom)
	}

	// Paused: the daemon answers nobody until Unpause.
	if err := c.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	img2 := filepath.Join(e.imageDir, "two")
	if err := e.d.Checkpoint(ctx, "sb_1", img2, runtime.CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	if st, err := e.d.Status(ctx, "sb_1"); err != nil || st != (runtime.Status{Running: true, Paused: true}) {
		t.Errorf("Status after a checkpoint = %+v, %v; want running and paused", st, err)
	}
	if _, _, err := e.d.DialLink(ctx, "sb_1"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("DialLink of a paused sandbox = %v; want unavailable", err)
	}
	if img, err := ReadImage(img2); err != nil || img.Checkpoint != 2 {
		t.Errorf("the second image: %+v, %v; want checkpoint 2", img, err)
	}
	if err := e.d.Unpause(ctx, "sb_1"); err != nil {
		t.Fatal(err)
	}
	if info := e.info(t, "sb_1"); info.Status != (runtime.Status{Running: true}) || !info.Listening || info.Unpauses != 1 {
		t.Errorf("after Unpause: %+v", info)
	}
	if got := sh(t, e.dial(t, "sb_1"), "cat d/f"); got != "later" {
		t.Errorf("after Unpause the layer holds %q", got)
	}
	// Unpause of a running sandbox leaves it alone.
	if err := e.d.Unpause(ctx, "sb_1"); err != nil {
		t.Errorf("Unpause of a running sandbox: %v", err)
	}

	if _, err := e.d.Restore(ctx, e.spec("sb_4"), t.TempDir()); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Restore from a directory without an image = %v; want invalid argument", err)
	}
	if _, err := e.d.Restore(ctx, e.spec("sb_2"), img1); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("Restore into a taken ID = %v; want already exists", err)
	}
}

// TestFail: injected failures fail their operation and leave what the driver documents.
func TestFail(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	boom := errors.New("boom")

	e.d.Fail(OpCreate, boom)
	if _, err := e.d.Create(ctx, e.spec("sb_1")); !errors.Is(err, boom) {
		t.Errorf("Create = %v; want the injected error", err)
	}
	if left := e.entries(t); len(left) != 0 {
		t.Errorf("a failed create left %v", left)
	}
	e.d.Fail(OpCreate, nil)
	e.create(t, "sb_1")
	c := e.dial(t, "sb_1")

	// A failed checkpoint leaves the sandbox paused and quiesced, for Unpause.
	e.d.Fail(OpCheckpoint, boom)
	if err := c.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.d.Checkpoint(ctx, "sb_1", filepath.Join(e.imageDir, "x"), runtime.CheckpointOptions{LeaveRunning: true}); !errors.Is(err, boom) {
		t.Errorf("Checkpoint = %v; want the injected error", err)
	}
	if info := e.info(t, "sb_1"); !info.Status.Paused || info.Listening || info.Checkpoints != 0 {
		t.Errorf("after a failed checkpoint: %+v; want paused, quiesced, no checkpoint counted", info)
	}
	e.d.Fail(OpCheckpoint, nil)
	if err := e.d.Unpause(ctx, "sb_1"); err != nil {
		t.Fatal(err)
	}
	sh(t, e.dial(t, "sb_1"), "true")

	for _, tc := range []struct {
		op   Op
		call func() error
	}{
		{OpRestore, func() error { _, err := e.d.Restore(ctx, e.spec("sb_2"), t.TempDir()); return err }},
		{OpUnpause, func() error { return e.d.Unpause(ctx, "sb_1") }},
		{OpDestroy, func() error { return e.d.Destroy(ctx, "sb_1") }},
		{OpDialLink, func() error { _, _, err := e.d.DialLink(ctx, "sb_1"); return err }},
	} {
		e.d.Fail(tc.op, boom)
		if err := tc.call(); !errors.Is(err, boom) {
			t.Errorf("%s = %v; want the injected error", tc.op, err)
		}
		e.d.Fail(tc.op, nil)
	}
	if st, err := e.d.Status(ctx, "sb_1"); err != nil || !st.Running {
		t.Errorf("after the failed calls: %+v, %v; want running", st, err)
	}
}

// TestClose: Close stops every daemon, leaving the sandboxes' directories, which a driver made again
// on the state directory reports as stopped and destroys; no goroutine of the driver's is left.
func TestClose(t *testing.T) {
	before := goruntime.NumGoroutine()
	e := newEnv(t)
	ctx := t.Context()
	e.create(t, "sb_1")
	e.create(t, "sb_2")
	c := e.dial(t, "sb_1")
	sh(t, c, "true")
	if err := e.d.Close(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	d2, err := New(Config{StateDir: e.state})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := d2.List(ctx)
	if err != nil || !slices.Equal(ids, []string{"sb_1", "sb_2"}) {
		t.Errorf("List by a new driver = %v, %v; want both sandboxes", ids, err)
	}
	if st, err := d2.Status(ctx, "sb_1"); err != nil || st.Running || st.Reason == "" {
		t.Errorf("Status by a new driver = %+v, %v; want stopped, with a reason", st, err)
	}
	if st, err := d2.Wait(ctx, "sb_1"); err != nil || st.Running {
		t.Errorf("Wait by a new driver = %+v, %v; want stopped at once", st, err)
	}
	for _, id := range ids {
		if err := d2.Destroy(ctx, id); err != nil {
			t.Error(err)
		}
	}
	if left := e.entries(t); len(left) != 0 {
		t.Errorf("left after Destroy: %v", left)
	}
	deadline := time.Now().Add(10 * time.Second)
	for goruntime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := goruntime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Close; %d before:\n%s", n, before, buf[:goruntime.Stack(buf, true)])
	}
}

// TestLongStateDir: a state directory deeper than a socket address can name works.
func TestLongStateDir(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, strings.Repeat("d", 100), strings.Repeat("e", 100))
	d, err := New(Config{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	e := &env{d: d, state: state, rootfs: dir, initBin: dir}
	e.create(t, "sb_1")
	c := e.dial(t, "sb_1")
	if err := c.Quiesce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(state, "sandboxes", "sb_1", SocketName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the socket file of a quiesced daemon: %v; want it removed", err)
	}
	if err := d.Unpause(t.Context(), "sb_1"); err != nil {
		t.Fatal(err)
	}
	sh(t, e.dial(t, "sb_1"), "true")
}

// TestLayerTar: the layer archive keeps directories, files and links, and unpacking it cannot write
// outside the layer, by a name or through a link.
func TestLayerTar(t *testing.T) {
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "d", "f"), []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d/f", filepath.Join(src, "l")); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), ImageFSFile)
	if err := writeLayerTar(src, archive); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := readLayerTar(archive, dst); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "l")); err != nil || string(b) != "x" {
		t.Errorf("unpacked l -> d/f: %q %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "d", "f")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("unpacked d/f: %v %v; want mode 0640", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "d", "e")); err != nil || !fi.IsDir() {
		t.Errorf("unpacked d/e: %v %v; want a directory", fi, err)
	}

	outside := t.TempDir()
	for _, name := range []string{"../x", "/x", "out/x"} {
		t.Run(name, func(t *testing.T) {
			dst := t.TempDir()
			if err := os.Symlink(outside, filepath.Join(dst, "out")); err != nil {
				t.Fatal(err)
			}
			a := filepath.Join(t.TempDir(), ImageFSFile)
			f, err := os.Create(a)
			if err != nil {
				t.Fatal(err)
			}
			tw := tar.NewWriter(f)
			if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}); err != nil {
				t.Fatal(err)
			}
			tw.Write([]byte("x"))
			tw.Close()
			f.Close()
			if err := readLayerTar(a, dst); err == nil {
				t.Errorf("an entry %q was unpacked", name)
			}
			if entries, _ := os.ReadDir(outside); len(entries) != 0 {
				t.Errorf("an entry %q reached outside the layer", name)
			}
		})
	}
}
