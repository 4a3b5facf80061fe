package vm

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"time"
)

// ProbeKernelArgs are the kernel arguments of a KVM probe's guest: it has no root, so a kernel that
// runs reaches its panic at once.
const ProbeKernelArgs = "panic=-1 root=/dev/airlock-no-such"

// KVMProbeTime is how long a KVM guest has to reach its kernel's panic: well under a second on a
// working host.
const KVMProbeTime = 8 * time.Second

// ProbeKVM reports whether KVM guests make progress here. /dev/kvm can exist and accept a VM whose guest
// then never runs (nested virtualisation without support), so the probe runs command (a VMM booting the
// guest kernel under KVM, with ProbeKernelArgs and its console on standard output), bounded by
// KVMProbeTime through its ctx, and looks for the kernel's panic in what it printed.
func ProbeKVM(ctx context.Context, command func(ctx context.Context) *exec.Cmd) bool {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, KVMProbeTime)
	defer cancel()
	out, _ := command(ctx).Output()
	return strings.Contains(string(out), "Kernel panic")
}
