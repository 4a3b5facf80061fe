package nodecontract

import (
	"bufio"
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
)

// Capacity is what a node offers its sandboxes, for placement: the control plane places a sandbox on a
// node whose capacity the sandboxes placed there already leave room for.
type Capacity struct {
	// CPUMillicores and MemoryMB are the host's CPUs (1000 a core) and memory set aside for sandboxes.
	CPUMillicores int64 `json:"cpu_millicores"`
	MemoryMB      int64 `json:"memory_mb"`
	// MaxSandboxes bounds the sandboxes the node runs at once.
	MaxSandboxes int `json:"max_sandboxes"`
}

// Bounds of a capacity a node reports (a node's report is checked against them).
const (
	MaxCapacityCPU       = 1 << 20 // 1024 cores
	MaxCapacityMemoryMB  = 1 << 24 // 16 TiB
	MaxCapacitySandboxes = 100000
)

// Check reports whether c is within the bounds above, and offers something; its error names the first
// field that is not.
func (c Capacity) Check() error {
	for _, f := range []struct {
		name     string
		v, limit int64
	}{
		{"cpu_millicores", c.CPUMillicores, MaxCapacityCPU},
		{"memory_mb", c.MemoryMB, MaxCapacityMemoryMB},
		{"max_sandboxes", int64(c.MaxSandboxes), MaxCapacitySandboxes},
	} {
		if f.v <= 0 || f.v > f.limit {
			return fmt.Errorf("capacity %s %d: want 1 to %d", f.name, f.v, f.limit)
		}
	}
	return nil
}

// Min returns the smaller of c and o in each field.
func (c Capacity) Min(o Capacity) Capacity {
	return Capacity{CPUMillicores: min(c.CPUMillicores, o.CPUMillicores), MemoryMB: min(c.MemoryMB, o.MemoryMB),
		MaxSandboxes: min(c.MaxSandboxes, o.MaxSandboxes)}
}

// Over-commit ratios of HostCapacity: sandboxes seldom use all of the CPU and memory they may, so a node
// offers more than it has (memory less so: a sandbox past its limit is killed, a host past its memory
// kills anything).
const (
	cpuOvercommit    = 4
	memoryOvercommit = 1.5
	// reservedMemoryMB is kept for the host, the node and its gateway.
	reservedMemoryMB = 1024
	// sandboxesPerCore bounds the sandboxes per CPU core by default.
	sandboxesPerCore = 32
)

// HostCapacity reports what this host offers sandboxes: its CPUs and memory (less a reserve for the host
// itself), over-committed by the ratios above. maxSandboxes > 0 overrides the default bound of
// sandboxes.
func HostCapacity(maxSandboxes int) (Capacity, error) {
	memMB, err := hostMemoryMB()
	if err != nil {
		return Capacity{}, err
	}
	cores := goruntime.NumCPU()
	avail := memMB - reservedMemoryMB
	if avail < memMB/2 {
		avail = memMB / 2
	}
	c := Capacity{
		CPUMillicores: int64(cores) * 1000 * cpuOvercommit,
		MemoryMB:      int64(float64(avail) * memoryOvercommit),
		MaxSandboxes:  cores * sandboxesPerCore,
	}
	if maxSandboxes > 0 {
		c.MaxSandboxes = maxSandboxes
	}
	c.CPUMillicores = min(c.CPUMillicores, MaxCapacityCPU)
	c.MemoryMB = min(c.MemoryMB, MaxCapacityMemoryMB)
	c.MaxSandboxes = min(c.MaxSandboxes, MaxCapacitySandboxes)
	return c, c.Check()
}

// hostMemoryMB reads MemTotal from /proc/meminfo.
func hostMemoryMB() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("meminfo: %w", err)
			}
			return kb / 1024, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("meminfo: no MemTotal")
}
