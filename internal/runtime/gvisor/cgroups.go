package gvisor

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A sandbox's CPU limit is a CFS quota per period. Booting, restoring and checkpointing are the
// platform's work, but runsc does them in the sandbox's own processes, on several threads at once: under
// a quota of one core per 100 ms they are throttled, and the agent waits (a restore of 256 MiB here:
// ≈0.61 s throttled, ≈0.50 s not; the freeze of a rolling snapshot of 256 MiB: ≈0.26–0.30 s, ≈0.22 s).
//
//   - A sandbox boots (or is restored) with the same share of the CPU over a period of 1 s (bootCPUPeriod):
//     the boot, done in well under that, can use every core, and the sandbox can never use more than its
//     share of a second. settleCPUQuota then sets the period to the usual 100 ms (cpuPeriod), keeping the
//     share. (A crash in between leaves a sandbox still being created, which the restart destroys.)
//   - While a sandbox is paused for a checkpoint its quota is lifted (nothing in it runs), and settled
//     before it runs again. Its CPU time still counts in its cgroup; rolling snapshots take their
//     baseline after the checkpoint.
//
// Moving the paused processes into cgroups of their own instead would also keep the image's page cache
// out of the sandbox's memory limit, but each move waits for an RCU grace period (≈10–25 ms here, twice
// per checkpoint), which costs an idle sandbox more than it saves.
const (
	cpuPeriod     = 100_000   // µs
	bootCPUPeriod = 1_000_000 // µs, the longest the kernel allows
)

// liftCPUQuota removes the CPU quota of sandbox id, which must be paused.
func (d *Driver) liftCPUQuota(id string) error {
	return d.writeCPU(id, "cpu.cfs_quota_us", -1)
}

// settleCPUQuota gives sandbox id its share of the CPU (its spec's) over the usual period. It is safe
// to call whatever the quota and period are.
func (d *Driver) settleCPUQuota(id string) error {
	spec, err := d.readSpec(id)
	if err != nil {
		return fmt.Errorf("cpu quota: %w", err)
	}
	quota := int64(-1)
	if l := spec.Linux; l != nil && l.Resources != nil && l.Resources.CPU != nil {
		if c := l.Resources.CPU; c.Quota != nil && *c.Quota > 0 && c.Period != nil && *c.Period > 0 {
			quota = max(1000, *c.Quota*cpuPeriod/int64(*c.Period)) // the kernel's least quota is 1 ms
		}
	}
	// Quota first: between the two writes the sandbox has less than its share, never more.
	if err := d.writeCPU(id, "cpu.cfs_quota_us", quota); err != nil {
		return err
	}
	return d.writeCPU(id, "cpu.cfs_period_us", cpuPeriod)
}

// writeCPU sets a file of sandbox id's cpu cgroup to v, unless it holds v already.
//
// A host without the cgroup v1 cpu hierarchy (cgroup v2 only) has nothing here to write: runsc set the
// spec's quota and period there, and they stay.
func (d *Driver) writeCPU(id, file string, v int64) error {
	if !d.cpuV1 {
		return nil
	}
	p := filepath.Join("/sys/fs/cgroup/cpu", d.cgroupPath(id), file)
	s := strconv.FormatInt(v, 10)
	if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == s {
		return nil
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		return fmt.Errorf("cpu quota: %w", err)
	}
	return nil
}
