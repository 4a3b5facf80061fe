package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/blob/local"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
	keyslocal "github.com/airlockrun/airlock/internal/keys/local"
	"github.com/airlockrun/airlock/internal/node"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/fake"
	"github.com/airlockrun/airlock/internal/snapshot"
	"github.com/airlockrun/airlock/internal/template"
)

// templates is a registry of one template, the default, with an empty root.
type templates struct{ root string }

func (r templates) Get(ctx context.Context, name string) (template.Template, error) {
	if !template.IsDefault(name) {
		return template.Template{}, fmt.Errorf("template %q: %w", name, errdefs.ErrNotFound)
	}
	return template.Template{Name: template.DefaultName, RootFS: r.root, Env: []string{"FROM_TEMPLATE=t"}}, nil
}

func (r templates) List(ctx context.Context) ([]string, error) {
	return []string{template.DefaultName}, nil
}

// exit is one call of Config.OnExit.
type exit struct{ id, reason string }

// env is a node over the fake driver, with a snapshot store over a local blob store, and the control
// plane's store (with a real keyring) that makes the grants.
type env struct {
	cfg   node.Config
	n     *node.Local
	d     *fake.Driver
	cp    *snapshot.Store
	exits chan exit
	// state is the driver's state directory.
	state string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the node makes a network namespace for every sandbox, which needs root")
	}
	dir := t.TempDir()
	d, err := fake.New(fake.Config{StateDir: filepath.Join(dir, "driver")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	blobs, err := local.New(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	keyring, err := keyslocal.New(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := snapshot.New(snapshot.Config{Blobs: blobs, Keys: keyring})
	if err != nil {
		t.Fatal(err)
	}
	nodeStore, err := snapshot.New(snapshot.Config{Blobs: blobs})
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "template")
	bin := filepath.Join(dir, "airlock-daemon")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("a daemon binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := &env{d: d, cp: cp, exits: make(chan exit, 16), state: filepath.Join(dir, "driver")}
	e.cfg = node.Config{
		DataDir:      filepath.Join(dir, "node"),
		Driver:       d,
		Templates:    templates{root: root},
		DaemonBinary: bin,
		Snapshots:    nodeStore,
		OnExit: func(id, reason string) {
			select {
			case e.exits <- exit{id, reason}:
			default:
				t.Errorf("OnExit(%s, %q): too many exits", id, reason)
			}
		},
		Logger: slog.New(slog.DiscardHandler),
	}
	e.n = e.newNode(t)
	// Whatever a test left running goes before the driver closes (cleanups run last first): the node
	// unmounts the sandboxes' network namespaces.
	t.Cleanup(func() {
		ctx := context.Background()
		ids, _ := e.n.Sandboxes(ctx)
		for _, id := range ids {
			if err := e.n.DestroySandbox(ctx, id); err != nil {
				t.Errorf("destroy %s: %v", id, err)
			}
		}
		e.n.Shutdown(ctx)
	})
	return e
}

// newNode makes a node over the env's data directory and driver.
func (e *env) newNode(t *testing.T) *node.Local {
	t.Helper()
	n, err := node.New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *env) create(t *testing.T, id string, reqEnv ...string) {
	t.Helper()
	if err := e.n.CreateSandbox(t.Context(), nodecontract.CreateRequest{ID: id, TenantID: "tn_1", Template: "default", Env: reqEnv}); err != nil {
		t.Fatalf("CreateSandbox(%s): %v", id, err)
	}
}

// sh runs script in sandbox id through the node's link and returns its trimmed stdout.
func (e *env) sh(t *testing.T, id, script string) string {
	t.Helper()
	cl, err := e.n.Link(t.Context(), id)
	if err != nil {
		t.Fatalf("Link(%s): %v", id, err)
	}
	res, err := cl.Exec(t.Context(), proto.ExecRequest{Argv: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("%s: %q: %v", id, script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("%s: %q: exit %d: %s", id, script, res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

func (e *env) info(t *testing.T, id string) fake.Info {
	t.Helper()
	info, err := e.d.Info(id)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func (e *env) grant(t *testing.T, tenant string) *snapshot.Grant {
	t.Helper()
	g, err := e.cp.Grant(t.Context(), tenant, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Clear)
	return g
}

// leftovers lists what the driver's state directory and the node's netns directory hold.
func (e *env) leftovers(t *testing.T) []string {
	t.Helper()
	var left []string
	for _, dir := range []string{filepath.Join(e.cfg.DataDir, "netns"), filepath.Join(e.state, "sandboxes")} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, de := range entries {
			left = append(left, filepath.Join(dir, de.Name()))
		}
	}
	return left
}

// noExit fails the test if OnExit was called.
func (e *env) noExit(t *testing.T) {
	t.Helper()
	select {
	case x := <-e.exits:
		t.Errorf("OnExit(%s, %q) for a sandbox that did not stop by itself", x.id, x.reason)
	default:
	}
}

// waitExit waits for OnExit.
func (e *env) waitExit(t *testing.T) exit {
	t.Helper()
	select {
	case x := <-e.exits:
		return x
	case <-time.After(10 * time.Second):
		t.Fatal("OnExit was not called")
		return exit{}
	}
}

// TestCreateExecDestroy: a created sandbox gets the template's and the request's environment, its own
// network namespace, the pinned daemon binary and the node's init; commands run through its link; a
// second create of its ID is refused; destroy leaves nothing of it, and of an unknown ID succeeds.
func TestCreateExecDestroy(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.create(t, "sb_1", "FROM_REQUEST=r")
	if got := e.sh(t, "sb_1", `echo "$FROM_TEMPLATE$FROM_REQUEST"`); got != "tr" {
		t.Errorf("exec prints %q; want the template's and the request's environment", got)
	}
	spec := e.info(t, "sb_1").Spec
	if want := filepath.Join(e.cfg.DataDir, "netns", "sb_1"); spec.NetNS != want {
		t.Errorf("the sandbox's network namespace is %q; want %q", spec.NetNS, want)
	}
	if !cmp.Equal(spec.Init, node.InitArgs()) || spec.ControlDir != node.ControlDir {
		t.Errorf("init %q, control directory %q; want %q, %q", spec.Init, spec.ControlDir, node.InitArgs(), node.ControlDir)
	}
	if filepath.Dir(spec.InitBinary) != filepath.Join(e.cfg.DataDir, "daemons") {
		t.Errorf("the sandbox runs the daemon binary %s; want the node's pinned copy", spec.InitBinary)
	}
	if ids, err := e.n.Sandboxes(ctx); err != nil || !slices.Equal(ids, []string{"sb_1"}) {
		t.Errorf("Sandboxes = %v, %v; want [sb_1]", ids, err)
	}

	err := e.n.CreateSandbox(ctx, nodecontract.CreateRequest{ID: "sb_1", TenantID: "tn_1", Template: "default"})
	if !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a second CreateSandbox(sb_1) = %v; want already exists", err)
	}
	if got := e.sh(t, "sb_1", "echo still"); got != "still" {
		t.Errorf("after the refused create: %q", got)
	}
	if err := e.n.CreateSandbox(ctx, nodecontract.CreateRequest{ID: "sb_2", TenantID: "tn_1", Template: "nope"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("CreateSandbox of an unknown template = %v; want not found", err)
	}

	if err := e.n.DestroySandbox(ctx, "sb_1"); err != nil {
		t.Fatal(err)
	}
	if left := e.leftovers(t); len(left) != 0 {
		t.Errorf("destroy left %v", left)
	}
	if _, err := e.n.Link(ctx, "sb_1"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Link of a destroyed sandbox = %v; want failed precondition", err)
	}
	if ids, err := e.n.Sandboxes(ctx); err != nil || len(ids) != 0 {
		t.Errorf("Sandboxes after destroy = %v, %v", ids, err)
	}
	if _, err := os.Stat(e.n.AuditPath("sb_1")); err != nil {
		t.Errorf("the audit log does not outlive the sandbox: %v", err)
	}
	// The channel log records the frames (the exec above among them), never their arguments: a command
	// line is the tenant's, sealed in its own audit log.
	if raw, err := os.ReadFile(e.n.AuditPath("sb_1")); err != nil || !bytes.Contains(raw, []byte(`"op":"exec"`)) {
		t.Errorf("the channel log has no exec request (%v):\n%.2000s", err, raw)
	} else if bytes.Contains(raw, []byte("echo still")) {
		t.Errorf("the channel log holds a command line:\n%.2000s", raw)
	}
	for _, id := range []string{"sb_1", "sb_never"} {
		if err := e.n.DestroySandbox(ctx, id); err != nil {
			t.Errorf("DestroySandbox(%s) = %v; want success", id, err)
		}
	}
	e.noExit(t)
}

// TestFailedCreateLeavesNothing: a create that fails in the driver, or after it (the daemon cannot be
// reached), leaves no sandbox, network namespace or registration behind, and the ID can be used again.
func TestFailedCreateLeavesNothing(t *testing.T) {
	e := newEnv(t)
	boom := errors.New("boom")
	for _, op := range []fake.Op{fake.OpCreate, fake.OpDialLink} {
		t.Run(string(op), func(t *testing.T) {
			e.d.Fail(op, boom)
			// The node retries dialing until its ctx ends.
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			err := e.n.CreateSandbox(ctx, nodecontract.CreateRequest{ID: "sb_1", TenantID: "tn_1", Template: "default"})
			cancel()
			e.d.Fail(op, nil)
			if err == nil {
				t.Fatal("CreateSandbox succeeded")
			}
			if left := e.leftovers(t); len(left) != 0 {
				t.Errorf("a failed create left %v", left)
			}
			if _, err := e.n.Link(t.Context(), "sb_1"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Errorf("Link after a failed create = %v; want failed precondition", err)
			}
			e.create(t, "sb_1")
			e.sh(t, "sb_1", "true")
			if err := e.n.DestroySandbox(t.Context(), "sb_1"); err != nil {
				t.Fatal(err)
			}
		})
	}
	e.noExit(t)
}

// TestOnExit: a sandbox that stops by itself is reported through OnExit with the runtime's reason; one
// the node destroys is not.
func TestOnExit(t *testing.T) {
	e := newEnv(t)
	e.create(t, "sb_1")
	e.create(t, "sb_2")
	const reason = "out of memory (limit 512 MiB)"
	if err := e.d.Exit("sb_1", reason); err != nil {
		t.Fatal(err)
	}
	if x := e.waitExit(t); x != (exit{"sb_1", reason}) {
		t.Errorf("OnExit(%s, %q); want (sb_1, %q)", x.id, x.reason, reason)
	}
	if err := e.n.DestroySandbox(t.Context(), "sb_2"); err != nil {
		t.Fatal(err)
	}
	if err := e.n.DestroySandbox(t.Context(), "sb_1"); err != nil {
		t.Fatal(err)
	}
	if left := e.leftovers(t); len(left) != 0 {
		t.Errorf("destroy left %v", left)
	}
	select {
	case x := <-e.exits:
		t.Errorf("OnExit(%s, %q) after the node destroyed it", x.id, x.reason)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestCheckpointStoreRestore: a checkpoint that leaves the sandbox running and one that pauses it are
// stored with a grant; a restore uses the image the node keeps, and, once the node dropped it, fetches
// it from the blob store with a grant; each restored sandbox has its image's files and reports it. The
// paused sandbox runs again after UnpauseSandbox.
func TestCheckpointStoreRestore(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.create(t, "sb_1", "FROM_REQUEST=r")
	e.sh(t, "sb_1", "echo one > f")

	img, err := e.n.CheckpointSandbox(ctx, "sb_1", nodecontract.CheckpointRequest{SnapshotID: "sn_1", LeaveRunning: true})
	if err != nil {
		t.Fatal(err)
	}
	if img.Bytes == 0 || img.FilesPart != fake.ImageFSFile {
		t.Errorf("CheckpointSandbox = %+v; want a size and the files part %q", img, fake.ImageFSFile)
	}
	// Running on, and linked again.
	if info := e.info(t, "sb_1"); info.Status != (runtime.Status{Running: true}) || info.Checkpoints != 1 {
		t.Errorf("after a checkpoint that leaves it running: %+v", info)
	}
	e.sh(t, "sb_1", "echo two > f")

	if _, err := e.n.CheckpointSandbox(ctx, "sb_1", nodecontract.CheckpointRequest{SnapshotID: "sn_2"}); err != nil {
		t.Fatal(err)
	}
	if st := e.info(t, "sb_1").Status; st != (runtime.Status{Running: true, Paused: true}) {
		t.Errorf("after a checkpoint that pauses it: %+v", st)
	}
	if ids, err := e.n.PendingImages(ctx); err != nil || !slices.Equal(ids, []string{"sn_1", "sn_2"}) {
		t.Errorf("PendingImages = %v, %v; want [sn_1 sn_2]", ids, err)
	}

	g := e.grant(t, "tn_1")
	for _, id := range []string{"sn_1", "sn_2"} {
		stats, err := e.n.StoreImage(ctx, nodecontract.StoreRequest{TenantID: "tn_1", SnapshotID: id, Grant: g})
		if err != nil || stats.LogicalBytes == 0 {
			t.Fatalf("StoreImage(%s) = %+v, %v", id, stats, err)
		}
	}
	if ids, _ := e.n.PendingImages(ctx); len(ids) != 0 {
		t.Errorf("pending after the stores: %v", ids)
	}
	// The control plane reads what the node stored.
	var rec bytes.Buffer
	if err := e.cp.ReadFile(ctx, "tn_1", "sn_2", fake.ImageFile, &rec); err != nil {
		t.Fatal(err)
	}
	var stored fake.Image
	if err := json.Unmarshal(rec.Bytes(), &stored); err != nil || stored.ID != "sb_1" || stored.Checkpoint != 2 {
		t.Errorf("the stored image records %+v, %v; want sb_1's second checkpoint", stored, err)
	}

	restore := func(id, snap string, g *snapshot.Grant) error {
		return e.n.RestoreSandbox(ctx, nodecontract.CreateRequest{ID: id, TenantID: "tn_1", Template: "default"}, nodecontract.ImageSource{SnapshotID: snap, Grant: g})
	}
	// From the image the node keeps: no grant needed.
	if err := restore("sb_2", "sn_1", nil); err != nil {
		t.Fatal(err)
	}
	want := fake.Image{ID: "sb_1", Env: []string{"FROM_TEMPLATE=t", "FROM_REQUEST=r"}, Checkpoint: 1}
	if got := e.info(t, "sb_2").RestoredFrom; got == nil || !cmp.Equal(*got, want) {
		t.Errorf("sb_2 restored from %+v; want %+v", got, want)
	}
	if got := e.sh(t, "sb_2", `cat f; echo "$FROM_REQUEST"`); got != "one\nr" {
		t.Errorf("sb_2: %q; want the first image's file and environment", got)
	}

	// Dropped from the node: fetched from the blob store, with a grant only.
	if err := e.n.DropImages(ctx, []string{"sn_1", "sn_2"}); err != nil {
		t.Fatal(err)
	}
	if err := restore("sb_3", "sn_2", nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a restore of a dropped image without a grant = %v; want invalid argument", err)
	}
	if err := restore("sb_3", "sn_2", g); err != nil {
		t.Fatal(err)
	}
	if got := e.info(t, "sb_3").RestoredFrom; got == nil || got.ID != "sb_1" || got.Checkpoint != 2 {
		t.Errorf("sb_3 restored from %+v; want sb_1's second checkpoint", got)
	}
	if got := e.sh(t, "sb_3", "cat f"); got != "two" {
		t.Errorf("sb_3's file holds %q; want the second image's", got)
	}
	if err := restore("sb_3", "sn_2", g); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a restore into a running ID = %v; want already exists", err)
	}

	// The paused original runs again.
	if err := e.n.UnpauseSandbox(ctx, "sb_1"); err != nil {
		t.Fatal(err)
	}
	if got := e.sh(t, "sb_1", "cat f"); got != "two" {
		t.Errorf("sb_1 after UnpauseSandbox: %q", got)
	}
	for _, id := range []string{"sb_1", "sb_2", "sb_3"} {
		if err := e.n.DestroySandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if left := e.leftovers(t); len(left) != 0 {
		t.Errorf("destroy left %v", left)
	}
	e.noExit(t)
}

// TestPauseImageNamesFilesPart: the image of a checkpoint that pauses the sandbox names its files part
// too, as that of one that leaves it running does: the control plane records it to read the snapshot's
// files.
func TestPauseImageNamesFilesPart(t *testing.T) {
	e := newEnv(t)
	e.create(t, "sb_1")
	img, err := e.n.CheckpointSandbox(t.Context(), "sb_1", nodecontract.CheckpointRequest{SnapshotID: "sn_1"})
	if err != nil {
		t.Fatal(err)
	}
	if img.FilesPart != fake.ImageFSFile {
		t.Errorf("CheckpointSandbox without LeaveRunning reports %+v, without the files part %q", img, fake.ImageFSFile)
	}
}

// TestFailedCheckpointRunsOn: a checkpoint that fails leaves the sandbox running (the node unpauses it)
// and linked, keeps no image, and reports no exit.
func TestFailedCheckpointRunsOn(t *testing.T) {
	e := newEnv(t)
	boom := errors.New("boom")
	for i, leave := range []bool{true, false} {
		t.Run(fmt.Sprintf("LeaveRunning=%v", leave), func(t *testing.T) {
			ctx := t.Context()
			id := fmt.Sprintf("sb_%d", i)
			e.create(t, id)
			e.d.Fail(fake.OpCheckpoint, boom)
			_, err := e.n.CheckpointSandbox(ctx, id, nodecontract.CheckpointRequest{SnapshotID: "sn_" + id, LeaveRunning: leave})
			e.d.Fail(fake.OpCheckpoint, nil)
			if !errors.Is(err, boom) {
				t.Fatalf("CheckpointSandbox = %v; want the driver's error", err)
			}
			info := e.info(t, id)
			if info.Status != (runtime.Status{Running: true}) || !info.Listening || info.Unpauses != 1 {
				t.Errorf("after a failed checkpoint: %+v; want running, listening, unpaused once", info)
			}
			if got := e.sh(t, id, "echo alive"); got != "alive" {
				t.Errorf("after a failed checkpoint: %q", got)
			}
			if ids, _ := e.n.PendingImages(ctx); len(ids) != 0 {
				t.Errorf("a failed checkpoint left pending images %v", ids)
			}
		})
	}
	e.noExit(t)
}

// TestCheckpointOutlivesItsCaller: a checkpoint whose caller went away (its context canceled, as when a
// control plane dies mid-request) runs to its end, and the sandbox runs on.
func TestCheckpointOutlivesItsCaller(t *testing.T) {
	e := newEnv(t)
	e.create(t, "sb_1")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	img, err := e.n.CheckpointSandbox(ctx, "sb_1", nodecontract.CheckpointRequest{SnapshotID: "sn_1", LeaveRunning: true})
	if err != nil || img.Bytes == 0 {
		t.Fatalf("CheckpointSandbox with its caller gone = %+v, %v; want it done", img, err)
	}
	if got := e.sh(t, "sb_1", "echo alive"); got != "alive" {
		t.Errorf("after the checkpoint: %q", got)
	}
	if ids, _ := e.n.PendingImages(t.Context()); len(ids) != 1 || ids[0] != "sn_1" {
		t.Errorf("pending images %v; want sn_1's", ids)
	}
	e.noExit(t)
}

// TestRecover: a node made again on the same data directory and driver re-adopts the sandboxes that
// still run (a paused one included, which it lets run), skips those that stopped or never were, and
// watches the adopted ones again.
func TestRecover(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	for _, id := range []string{"sb_1", "sb_2", "sb_3"} {
		e.create(t, id)
	}
	e.sh(t, "sb_1", "echo kept > f")
	if _, err := e.n.CheckpointSandbox(ctx, "sb_3", nodecontract.CheckpointRequest{SnapshotID: "sn_1"}); err != nil {
		t.Fatal(err)
	}
	if err := e.n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.n.CreateSandbox(ctx, nodecontract.CreateRequest{ID: "sb_4", TenantID: "tn_1", Template: "default"}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("CreateSandbox after Shutdown = %v; want unavailable", err)
	}
	// While no node watches, sb_2 dies.
	if err := e.d.Exit("sb_2", "sandbox exited"); err != nil {
		t.Fatal(err)
	}

	e.n = e.newNode(t)
	if ids, err := e.n.Sandboxes(ctx); err != nil || !slices.Equal(ids, []string{"sb_1", "sb_2", "sb_3"}) {
		t.Errorf("Sandboxes on the new node = %v, %v", ids, err)
	}
	var reqs []nodecontract.RecoverRequest
	for _, id := range []string{"sb_1", "sb_2", "sb_3", "sb_9"} {
		reqs = append(reqs, nodecontract.RecoverRequest{ID: id, TenantID: "tn_1", Limits: nodecontract.Limits{CPUMillis: 2500}})
	}
	adopted, err := e.n.Recover(ctx, reqs)
	if err != nil || !slices.Equal(adopted, []string{"sb_1", "sb_3"}) {
		t.Fatalf("Recover = %v, %v; want [sb_1 sb_3]", adopted, err)
	}
	// Its metrics count the CPUs of the limits the request gave.
	if ss, err := e.n.SandboxMetrics(ctx, "sb_3", time.Time{}, time.Time{}); err != nil || len(ss) != 1 || ss[0].CPUCount != 3 {
		t.Errorf("the metrics of the adopted sb_3: %+v, %v; want one reading of 3 CPUs", ss, err)
	}
	if got := e.sh(t, "sb_1", "cat f"); got != "kept" {
		t.Errorf("sb_1 after Recover: %q", got)
	}
	if info := e.info(t, "sb_3"); info.Status != (runtime.Status{Running: true}) {
		t.Errorf("the paused sb_3 after Recover: %+v; want running", info.Status)
	}
	e.sh(t, "sb_3", "true")
	// The new node watches what it adopted.
	if err := e.d.Exit("sb_1", "gone"); err != nil {
		t.Fatal(err)
	}
	if x := e.waitExit(t); x != (exit{"sb_1", "gone"}) {
		t.Errorf("OnExit(%s, %q); want (sb_1, gone)", x.id, x.reason)
	}
	for _, id := range []string{"sb_1", "sb_2", "sb_3"} {
		if err := e.n.DestroySandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if left := e.leftovers(t); len(left) != 0 {
		t.Errorf("destroy left %v", left)
	}
	e.noExit(t)
}

// TestRecoverRunning: a Recover of a sandbox the node runs already (another control plane reconciling
// the node) leaves it linked and watched, and does not report it as exited.
func TestRecoverRunning(t *testing.T) {
	e := newEnv(t)
	e.create(t, "sb_1")
	adopted, err := e.n.Recover(t.Context(), []nodecontract.RecoverRequest{{ID: "sb_1", TenantID: "tn_1"}})
	if err != nil || !slices.Equal(adopted, []string{"sb_1"}) {
		t.Fatalf("Recover = %v, %v; want [sb_1]", adopted, err)
	}
	// The node's watcher waits 2 s for the runtime's word before it counts a lost link as an exit.
	select {
	case x := <-e.exits:
		t.Errorf("Recover of a sandbox the node runs reported OnExit(%s, %q) for it", x.id, x.reason)
	case <-time.After(3 * time.Second):
	}
	e.sh(t, "sb_1", "true")
}

// TestFencing: the node refuses a sandbox of a session whose fencing token is smaller than the largest
// it has seen for the session; an equal or larger one, another session's, or none is accepted.
func TestFencing(t *testing.T) {
	e := newEnv(t)
	for i, tc := range []struct {
		caid  string
		fence int64
		ok    bool
	}{
		{"se_1", 5, true},
		{"se_1", 4, false}, // a control plane whose lease was taken over
		{"se_1", 5, true},
		{"se_1", 7, true},
		{"se_1", 6, false},
		{"se_1", 0, true}, // no token: not fenced
		{"se_2", 1, true}, // another session has its own
		{"", 3, true},     // no session: not fenced
	} {
		id := fmt.Sprintf("sb_%d", i)
		err := e.n.CreateSandbox(t.Context(), nodecontract.CreateRequest{ID: id, TenantID: "tn_1", Template: "default", CAID: tc.caid, Fence: tc.fence})
		switch {
		case tc.ok && err != nil:
			t.Errorf("%d: CreateSandbox(%s, session %q, fence %d) = %v; want success", i, id, tc.caid, tc.fence, err)
		case !tc.ok && !errors.Is(err, errdefs.ErrConflict):
			t.Errorf("%d: CreateSandbox(%s, session %q, fence %d) = %v; want conflict", i, id, tc.caid, tc.fence, err)
		}
		if !tc.ok {
			if _, err := e.d.Info(id); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("%d: a refused sandbox reached the driver: %v", i, err)
			}
		}
	}
}

// TestIdentity: a sandbox gets an identity of its own at boot (the identity file, the machine ID); a
// restore of its session's own snapshot keeps it, and a restore that is not (a fork's) gets another.
func TestIdentity(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.create(t, "sb_1")
	read := func(id string) proto.IdentityFileContents {
		t.Helper()
		var c proto.IdentityFileContents
		raw := e.sh(t, id, "cat etc/airlock/identity")
		if err := json.Unmarshal([]byte(raw), &c); err != nil || len(c.InterpreterKey) != 2*proto.InterpreterKeySize || len(c.Epoch) != 2*proto.IdentityEpochSize {
			t.Fatalf("%s's identity file: %q, %v", id, raw, err)
		}
		if mid := e.sh(t, id, "cat etc/machine-id"); mid != c.MachineID {
			t.Errorf("%s's machine ID %q; want the identity's %q", id, mid, c.MachineID)
		}
		return c
	}
	first := read("sb_1")
	if first.Hostname != "sb_1" {
		t.Errorf("the identity's host name %q; want the sandbox's ID", first.Hostname)
	}
	if _, err := e.n.CheckpointSandbox(ctx, "sb_1", nodecontract.CheckpointRequest{SnapshotID: "sn_1", LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	restore := func(id string, fresh bool) {
		t.Helper()
		err := e.n.RestoreSandbox(ctx, nodecontract.CreateRequest{ID: id, TenantID: "tn_1", Template: "default", NewIdentity: fresh}, nodecontract.ImageSource{SnapshotID: "sn_1"})
		if err != nil {
			t.Fatal(err)
		}
	}
	restore("sb_own", false)
	if got := read("sb_own"); got != first {
		t.Errorf("a resume of the session's own snapshot: identity %+v; want the one it had, %+v", got, first)
	}
	restore("sb_fork", true)
	fork := read("sb_fork")
	if fork.Epoch == first.Epoch || fork.InterpreterKey == first.InterpreterKey || fork.Seed == first.Seed || fork.MachineID == first.MachineID || fork.Hostname != "sb_fork" {
		t.Errorf("a fork's identity %+v; want all of it its own, not %+v", fork, first)
	}
}
