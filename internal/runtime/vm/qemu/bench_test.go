//go:build !race

package qemu_test

import (
	"context"
	"testing"
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
