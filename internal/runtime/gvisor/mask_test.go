package gvisor_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/template"
)

// TestRestoreKeepsImageMasks: runsc restores only with the mounts an image was made with, so a
// sandbox is restored with the masks it was booted with whatever the host hides now: a restore after
// more host entries became hidden, and one of an image made without masks (before they existed),
// both succeed; the entries hidden at boot stay hidden after the restore.
func TestRestoreKeepsImageMasks(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	host, err := os.MkdirTemp("", "gvisor-masks-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(host) })
	for name, mode := range map[string]os.FileMode{"a": 0o600, "b": 0o644} {
		if err := os.WriteFile(filepath.Join(host, name), []byte("content of "+name+"\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(host, 0o755); err != nil {
		t.Fatal(err)
	}
	const dest = "/mnt/masks"
	scan := func() []runtime.Mask {
		t.Helper()
		m, err := template.ScanHidden(host, dest)
		if err != nil {
			t.Fatal(err)
		}
		return append(append([]runtime.Mask(nil), r.tpl.Masks...), m...)
	}
	spec := func(id string, masks []runtime.Mask) runtime.Spec {
		s, _ := r.spec(t, id)
		s.Mounts = append(append([]runtime.Mount(nil), s.Mounts...), runtime.Mount{Source: host, Destination: dest, ReadOnly: true})
		s.Masks = masks
		return s
	}
	read := func(id string) string {
		t.Helper()
		c := r.dial(t, runtime.Sandbox{ID: id})
		return sh(t, c, "cat "+dest+"/a "+dest+"/b 2>/dev/null; true")
	}
	checkpoint := func(id string) string {
		t.Helper()
		c := r.dial(t, runtime.Sandbox{ID: id})
		if err := c.Quiesce(ctx); err != nil {
			t.Fatal(err)
		}
		img := filepath.Join(r.dir, "img-"+id)
		if err := r.d.Checkpoint(ctx, id, img, runtime.CheckpointOptions{LeaveRunning: true}); err != nil {
			t.Fatal(err)
		}
		return img
	}
	boot := func(s runtime.Spec, img string) {
		t.Helper()
		var err error
		if img == "" {
			_, err = r.d.Create(ctx, s)
		} else {
			_, err = r.d.Restore(ctx, s, img)
		}
		if err != nil {
			t.Fatalf("boot %s: %v", s.ID, err)
		}
		t.Cleanup(func() { _ = r.d.Destroy(context.Background(), s.ID) })
	}

	// Booted hiding a; b is readable (the positive control).
	boot(spec("mask-a", scan()), "")
	if got := read("mask-a"); got != "content of b" {
		t.Fatalf("booted hiding a: %q; want b only", got)
	}
	img := checkpoint("mask-a")
	// b is hidden now too; a restore of the image keeps the image's masks.
	if err := os.Chmod(filepath.Join(host, "b"), 0o600); err != nil {
		t.Fatal(err)
	}
	boot(spec("mask-a-restored", scan()), img)
	if got := read("mask-a-restored"); strings.Contains(got, "content of a") {
		t.Errorf("restored: %q; want a still hidden", got)
	}
	// A new boot hides both.
	boot(spec("mask-new", scan()), "")
	if got := read("mask-new"); got != "" {
		t.Errorf("a new boot: %q; want a and b hidden", got)
	}
	// An image made without masks restores, without them, where the host hides both now.
	boot(spec("mask-none", nil), "")
	img = checkpoint("mask-none")
	boot(spec("mask-none-restored", scan()), img)
	if got := sh(t, r.dial(t, runtime.Sandbox{ID: "mask-none-restored"}), "echo up"); got != "up" {
		t.Errorf("restored from an image without masks: %q", got)
	}
}
