package gvisor_test

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/gvisor"
	"github.com/airlockrun/airlock/internal/runtime/sandboxdir"
	"github.com/airlockrun/airlock/internal/testenv"
)

// TestRestoreRefusesHostileLayer (red-team battery: a snapshot another node tampered with): a sandbox
// is checkpointed with a set-uid file in its writable layer, and the image's layer archive is then
// rewritten as a compromised node could before another node restores it, with entries appended that
// plant symlinks to the host's canaries and send directory entries through them (`x -> <canary>`, then
// `x/` mode 04755; `d -> <canary dir>`, then `d/` mode 0777). The restore is refused and no canary's
// mode, owner or ctime moves. Positive controls: a chmod through such a link on the host does change
// its target, and the untampered image restores with the set-uid bit in place.
func TestRestoreRefusesHostileLayer(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	can := testenv.NewCanaries(t)

	// Positive control: a chmod through a symlink changes its target: what the restore must not do.
	decoy := filepath.Join(t.TempDir(), "decoy")
	link := filepath.Join(t.TempDir(), "link")
	if err := errors.Join(os.WriteFile(decoy, nil, 0o600), os.Symlink(decoy, link), unix.Chmod(link, 0o4755)); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(decoy); err != nil || fi.Mode()&fs.ModeSetuid == 0 {
		t.Fatalf("positive control: a chmod through a symlink left its target %v, %v; want it set-uid", fi.Mode(), err)
	}

	spec, _ := r.spec(t, "hostile-layer-a")
	a, err := r.d.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.d.Destroy(context.Background(), "hostile-layer-a") })
	c := r.dial(t, a)
	sh(t, c, "set -e; cp /bin/true /home/user/tool; chmod 4755 /home/user/tool; mkdir -p /home/user/work")
	if err := c.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(r.dir, "hostile-layer-img")
	if err := r.d.Checkpoint(ctx, "hostile-layer-a", img, runtime.CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = r.d.Destroy(ctx, "hostile-layer-a")

	// The tampered copy: the image's files hard-linked, its layer archive rewritten with the attack
	// appended.
	bad := filepath.Join(r.dir, "hostile-layer-tampered")
	copyImage(t, img, bad)
	canaryDir := can.Dir
	shadow := filepath.Join(canaryDir, "shadow")
	appendEntries(t, filepath.Join(img, gvisor.ImageFSFile), filepath.Join(bad, gvisor.ImageFSFile), []tar.Header{
		{Name: "home/user/x", Typeflag: tar.TypeSymlink, Linkname: shadow, Mode: 0o777},
		{Name: "home/user/x/", Typeflag: tar.TypeDir, Mode: 0o4755},
		{Name: "home/user/d", Typeflag: tar.TypeSymlink, Linkname: "../../../../../../../../../../../../" + canaryDir, Mode: 0o777},
		{Name: "home/user/d/", Typeflag: tar.TypeDir, Mode: 0o777, Uid: 1000, Gid: 1000},
	})
	before := map[string]unix.Stat_t{shadow: lstat(t, shadow), canaryDir: lstat(t, canaryDir)}

	spec, _ = r.spec(t, "hostile-layer-c")
	_, err = r.d.Restore(ctx, spec, bad)
	t.Cleanup(func() { _ = r.d.Destroy(context.Background(), "hostile-layer-c") })
	if !errors.Is(err, sandboxdir.ErrBadLayerArchive) {
		t.Errorf("restore of the tampered image: %v; want it refused (ErrBadLayerArchive)", err)
	} else {
		t.Logf("refused: %v", err)
	}
	for p, was := range before {
		now := lstat(t, p)
		if now.Mode != was.Mode || now.Uid != was.Uid || now.Gid != was.Gid || now.Ctim != was.Ctim {
			t.Errorf("host %s: mode %o uid %d gid %d ctime %v; was %o %d %d %v", p, now.Mode, now.Uid, now.Gid, now.Ctim, was.Mode, was.Uid, was.Gid, was.Ctim)
		}
	}
	can.Check(t, "the restore of a tampered image")

	// Positive control: the same image untampered restores, set-uid file and all.
	spec, _ = r.spec(t, "hostile-layer-b")
	b, err := r.d.Restore(ctx, spec, img)
	if err != nil {
		t.Fatalf("restore of the untampered image: %v", err)
	}
	t.Cleanup(func() { _ = r.d.Destroy(context.Background(), "hostile-layer-b") })
	if got := sh(t, r.dial(t, b), "stat -c %a /home/user/tool"); got != "4755" {
		t.Errorf("restored /home/user/tool has mode %s; want 4755", got)
	}
}

// lstat stats p without following it.
func lstat(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// copyImage makes dst a copy of the image directory src, its files hard-linked (the layer archive is
// written afresh by appendEntries).
func copyImage(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		switch {
		case d.IsDir():
			return os.Mkdir(filepath.Join(dst, rel), 0o700)
		case rel == gvisor.ImageFSFile:
			return nil
		}
		return os.Link(p, filepath.Join(dst, rel))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// appendEntries writes to dst the layer archive src with entries appended.
func appendEntries(t *testing.T, src, dst string, entries []tar.Header) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tr, tw := tar.NewReader(in), tar.NewWriter(out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range entries {
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}
