package vm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
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

// ProbeCached returns what probe answers, kept in file cache ("": not kept) for the files the probe
// depends on (the VMM and the kernel, and /dev/kvm) as they are now: a later call with the same files
// unchanged reads the answer instead of probing again.
func ProbeCached(cache string, files []string, probe func() bool) bool {
	key := ""
	for _, p := range append(files, "/dev/kvm") {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			key += p + ":none;"
			continue
		}
		key += fmt.Sprintf("%s:%d:%d:%d:%d;", p, st.Ino, st.Size, st.Mtim.Nano(), st.Rdev)
	}
	if cache != "" {
		if b, err := os.ReadFile(cache); err == nil {
			if k, v, ok := strings.Cut(string(b), "\n"); ok && k == key && (v == "kvm" || v == "tcg") {
				return v == "kvm"
			}
		}
	}
	ok := probe()
	if cache != "" {
		v := "tcg"
		if ok {
			v = "kvm"
		}
		if err := os.MkdirAll(filepath.Dir(cache), 0o755); err == nil {
			tmp := cache + ".tmp" + strconv.Itoa(os.Getpid())
			if os.WriteFile(tmp, []byte(key+"\n"+v), 0o644) == nil {
				_ = os.Rename(tmp, cache)
			}
		}
	}
	return ok
}
