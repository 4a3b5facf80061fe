//go:build !race

package qemu_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/runtime"
)

// BenchmarkBootToExec measures a VM's create (QEMU's start, the guest kernel's boot, the daemon's
// start) to its first exec answered. The template's disk and the initramfs are made before the timer
// starts; each VM is destroyed outside the timer.
func BenchmarkBootToExec(b *testing.B) {
	d, _, _ := newDriver(b)
	boot(b, "w") // makes the template's disk and the initramfs
	b.ResetTimer()
	for range b.N {
		id, c := boot(b, "b")
		if res := run(b, c, "true"); res.ExitCode != 0 {
			b.Fatalf("exec: %+v", res)
		}
		b.StopTimer()
		c.Close()
		if err := d.Destroy(context.Background(), id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkPauseResume measures a pause and a resume as the node makes them of a 256 MiB guest: a
// checkpoint that leaves it stopped (its memory, devices and disk to an image), its destroy, and a
// restore from the image to the first exec answered.
func BenchmarkPauseResume(b *testing.B) {
	d, _, _ := newDriver(b)
	id, c := bootWith(b, "p", runtime.Limits{MemoryBytes: 256 << 20})
	// What a guest holds: a process that touched 128 MiB.
	run(b, c, `(setsid nohup python3 -c "
import time
b = bytearray(128 << 20)
b[::4096] = b'x' * len(b[::4096])
time.sleep(100000)
" >/dev/null 2>&1 &); sleep 3`)
	var pause, resume time.Duration
	b.ResetTimer()
	for range b.N {
		ctx := context.Background()
		t0 := time.Now()
		if err := c.Quiesce(ctx); err != nil {
			b.Fatal(err)
		}
		img := b.TempDir() + "/img"
		if err := d.Checkpoint(ctx, id, img, runtime.CheckpointOptions{}); err != nil {
			b.Fatal(err)
		}
		if err := d.Destroy(ctx, id); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		id, _, c = restore(b, img)
		if res := run(b, c, "true"); res.ExitCode != 0 {
			b.Fatalf("exec: %+v", res)
		}
		pause += t1.Sub(t0)
		resume += time.Since(t1)
	}
	b.ReportMetric(float64(pause.Milliseconds())/float64(b.N), "ms-pause/op")
	b.ReportMetric(float64(resume.Milliseconds())/float64(b.N), "ms-resume/op")
}

// BenchmarkFork3 measures three VMs restored one after the other from one checkpoint of a running
// 256 MiB guest, each to its first exec answered.
func BenchmarkFork3(b *testing.B) {
	d, _, _ := newDriver(b)
	id, c := bootWith(b, "k", runtime.Limits{MemoryBytes: 256 << 20})
	ctx := context.Background()
	if err := c.Quiesce(ctx); err != nil {
		b.Fatal(err)
	}
	img := b.TempDir() + "/img"
	if err := d.Checkpoint(ctx, id, img, runtime.CheckpointOptions{LeaveRunning: true}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		for range 3 {
			_, _, fc := restore(b, img)
			if res := run(b, fc, "true"); res.ExitCode != 0 {
				b.Fatalf("exec: %+v", res)
			}
		}
	}
}
