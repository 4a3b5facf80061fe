package gvisor_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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

// BenchmarkCreateMasks: a create (until the daemon listens) of a sandbox whose spec hides n entries of
// a host directory it shows, half files and half directories: what the default template's masks cost
// a boot. The network namespace is made, and the sandbox destroyed, outside the timing.
func BenchmarkCreateMasks(b *testing.B) {
	r := newRig(b)
	for _, n := range []int{0, 10, 100} {
		b.Run(fmt.Sprintf("masks=%d", n), func(b *testing.B) {
			host, err := os.MkdirTemp("", "gvisor-bench-masks-")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { os.RemoveAll(host) })
			if err := os.Chmod(host, 0o755); err != nil {
				b.Fatal(err)
			}
			for i := range n {
				p := filepath.Join(host, fmt.Sprintf("e%03d", i))
				if i%2 == 0 {
					err = os.WriteFile(p, []byte("secret"), 0o600)
				} else {
					err = os.Mkdir(p, 0o700)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			masks, err := template.ScanHidden(host, "/mnt/bench")
			if err != nil || len(masks) != n {
				b.Fatalf("scan: %d masks, %v; want %d", len(masks), err, n)
			}
			var times []time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				id := fmt.Sprintf("bm%d-%d", n, i)
				s, _ := r.spec(b, id)
				s.Mounts = append(append([]runtime.Mount(nil), s.Mounts...), runtime.Mount{Source: host, Destination: "/mnt/bench", ReadOnly: true})
				s.Masks = append(append([]runtime.Mask(nil), s.Masks...), masks...)
				b.StartTimer()
				start := time.Now()
				if _, err := r.d.Create(context.Background(), s); err != nil {
					b.Fatal(err)
				}
				times = append(times, time.Since(start))
				b.StopTimer()
				if err := r.d.Destroy(context.Background(), id); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2])/float64(time.Millisecond), "p50_ms")
		})
	}
}
