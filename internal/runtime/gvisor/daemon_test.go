package gvisor_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/node"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/gvisor"
)

// TestRestoreUsesTheImagesDaemon: an image is restored with the daemon binary it was made with, not the
// one the node runs now (after an upgrade); if that binary is gone the restore says so; an image that
// names its binary with a path is refused.
func TestRestoreUsesTheImagesDaemon(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	daemons := filepath.Join(r.dir, "daemons")
	oldBin := copyBinary(t, r.bin, filepath.Join(daemons, "old"), "")
	newBin := copyBinary(t, r.bin, filepath.Join(daemons, "new"), "another build")

	spec, _ := r.spec(t, "dmn-a")
	spec.InitBinary = oldBin
	a, err := r.d.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.d.Destroy(context.Background(), "dmn-a") })
	if err := r.dial(t, a).Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(r.dir, "dmn-img")
	if err := r.d.Checkpoint(ctx, "dmn-a", img, runtime.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(img, gvisor.ImageDaemonFile)); strings.TrimSpace(string(b)) != "old" {
		t.Fatalf("the image names %q as its daemon; want old", b)
	}

	spec, _ = r.spec(t, "dmn-b")
	spec.InitBinary = newBin
	b, err := r.d.Restore(ctx, spec, img)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.d.Destroy(context.Background(), "dmn-b") })
	if got, want := sh(t, r.dial(t, b), "sha256sum "+node.InitPath+" | cut -d' ' -f1"), fileSum(t, oldBin); got != want {
		t.Errorf("the restored sandbox runs the daemon %s; want the image's, %s", got, want)
	}

	if err := os.Remove(oldBin); err != nil {
		t.Fatal(err)
	}
	spec, _ = r.spec(t, "dmn-c")
	spec.InitBinary = newBin
	_, err = r.d.Restore(ctx, spec, img)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "not on this node") {
		t.Errorf("restore without the image's daemon: %v; want a failed precondition naming it", err)
	}

	if err := os.WriteFile(filepath.Join(img, gvisor.ImageDaemonFile), []byte("../../../bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	spec, _ = r.spec(t, "dmn-d")
	spec.InitBinary = newBin
	if _, err = r.d.Restore(ctx, spec, img); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("restore of an image naming its daemon by a path: %v; want invalid argument", err)
	}
}

// copyBinary copies the binary src to dst, with extra bytes at its end (another build, as far as a
// checksum can tell).
func copyBinary(t *testing.T, src, dst, extra string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if _, err := out.WriteString(extra); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

func fileSum(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestRestoreKeepsTheImagesArgv: runsc restores only with the argv the checkpoint was made with, so a
// restore repeats the image's recorded argv whatever the node would start a daemon with now (an
// upgrade that changed the daemon's flags). Positive control: without the recorded argv, the restore
// fails on the mismatch.
func TestRestoreKeepsTheImagesArgv(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	spec, _ := r.spec(t, "argv-a")
	spec.Init = node.InitArgs("-log-level", "debug")
	a, err := r.d.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.d.Destroy(context.Background(), "argv-a") })
	if err := r.dial(t, a).Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(r.dir, "argv-img")
	if err := r.d.Checkpoint(ctx, "argv-a", img, runtime.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	spec, _ = r.spec(t, "argv-b") // today's argv: no -log-level
	b, err := r.d.Restore(ctx, spec, img)
	if err != nil {
		t.Fatalf("restore with another argv today: %v", err)
	}
	t.Cleanup(func() { _ = r.d.Destroy(context.Background(), "argv-b") })
	if got := sh(t, r.dial(t, b), "tr '\\0' ' ' < /proc/1/cmdline"); !strings.Contains(got, "-log-level debug") {
		t.Errorf("restored daemon's argv %q; want the image's", got)
	}

	// Positive control: an image without the argv (as if from before) restored with today's fails.
	p := filepath.Join(img, gvisor.ImageLinkFile)
	b2, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	stripped := strings.Replace(string(b2), `"init":`, `"init_was":`, 1)
	if err := os.WriteFile(p, []byte(stripped), 0o600); err != nil {
		t.Fatal(err)
	}
	spec, _ = r.spec(t, "argv-c")
	if _, err := r.d.Restore(ctx, spec, img); err == nil || !strings.Contains(err.Error(), "Args") {
		_ = r.d.Destroy(context.Background(), "argv-c")
		t.Errorf("restore of an image without its argv, with another argv: %v; want runsc's mismatch", err)
	}
}
