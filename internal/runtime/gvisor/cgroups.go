package gvisor

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A sandbox's CPU limit is a CFS quota per period. Booting, restoring and checkpointing are the
// platform's work, but runsc does them in the sandbox's own processes, on several threads at once: under
// a quota of one core per 100 ms they are throttled, and the agent waits (a restore of 256 MiB here:
// ≈0.61 s throttled, ≈0.50 s not; the freeze of a rolling snapshot of 256 MiB: ≈0.26–0.30 s, ≈0.22 s).
//
//   - A sandbox boots (or is restored) with the same share of the CPU over a period of 1 s (bootCPUPeriod):
//     the boot, done in well under that, can use every core, and the sandbox can never use more than its
//     share of a second. Then the period becomes the usual 100 ms (cpuPeriod), in two steps
//     (settleAfterBoot): the kernel re-arms a group's period timer only when it fires, so the boot's
//     1 s timer keeps running after the period is shortened, and a group throttled before it fires waits
//     for it (measured: a first exec after a restore throttled ≈0.4–0.7 s). So first the period is
//     shortened with the quota kept at the share of a whole second, the budget of the boot period still
//     running; as soon as that period's timer fired (the group's nr_periods goes up; polled every 5 ms),
//     settleCPUQuota lowers the quota to the share of 100 ms.
//     (A crash in between leaves a sandbox still being created, which the restart destroys.)
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
	d.stopSettle(id) // the checkpoint settles it after
	return d.writeCPU(id, "cpu.cfs_quota_us", -1)
}

// settleAfterBoot ends sandbox id's boot period (see above): the usual period now, with the budget of
// the boot's, and its share of it as soon as the boot's period timer has fired (the group's count of
// periods, cpu.stat nr_periods, goes up; at most bootCPUPeriod and a period from now).
func (d *Driver) settleAfterBoot(id string) error {
	if !d.cpuV1 {
		return nil
	}
	periods := func() int64 {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", d.cgroupPath(id), "cpu.stat"))
		if err != nil {
			return -1
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "nr_periods "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return -1
	}
	before := periods()
	if err := d.writeCPU(id, "cpu.cfs_period_us", cpuPeriod); err != nil {
		return err
	}
	stop := make(chan struct{})
	d.settleMu.Lock()
	if d.settles == nil {
		d.settles = map[string]chan struct{}{}
	}
	if old := d.settles[id]; old != nil {
		close(old)
	}
	d.settles[id] = stop
	d.settleMu.Unlock()
	go func() { // owner: the sandbox; ends once settled, or when stopSettle says so
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		deadline := time.Now().Add((bootCPUPeriod + 2*cpuPeriod) * time.Microsecond)
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if n := periods(); n >= 0 && n <= before && time.Now().Before(deadline) {
				continue
			}
			d.settleMu.Lock()
			if d.settles[id] != stop {
				d.settleMu.Unlock()
				return
			}
			delete(d.settles, id)
			err := d.settleCPUQuota(id)
			d.settleMu.Unlock()
			if err != nil {
				d.log.Debug("settle the CPU quota after boot", "sandbox", id, "err", err)
			}
			return
		}
	}()
	return nil
}

// stopSettle cancels the settling settleAfterBoot began for sandbox id, if it is still to come (the
// sandbox is destroyed, or a checkpoint settles it itself).
func (d *Driver) stopSettle(id string) {
	d.settleMu.Lock()
	defer d.settleMu.Unlock()
	if stop := d.settles[id]; stop != nil {
		close(stop)
		delete(d.settles, id)
	}
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
