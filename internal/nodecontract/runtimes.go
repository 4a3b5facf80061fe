package nodecontract

// Runtime describes a runtime driver a node has, by the abilities it declares.
type Runtime struct {
	// Name is the driver's name ("gvisor", "runc").
	Name string `json:"name"`
	// Abilities are what its sandboxes can do beyond running: AbilityMemorySnapshots (a snapshot
	// holds memory and processes: a resume continues them), AbilityFilesSnapshots (files only: a
	// resume starts the processes anew), AbilityFork (a snapshot restores into several sandboxes).
	Abilities []string `json:"abilities"`
	// Accel, for a VM runtime, says how its guests run: AccelKVM (hardware virtualisation) or
	// AccelTCG (emulated: slower, the same isolation).
	Accel string `json:"accel,omitempty"`
}

// The accelerators a VM runtime may report.
const (
	AccelKVM = "kvm"
	AccelTCG = "tcg"
)

// The abilities a Runtime may declare.
const (
	AbilityMemorySnapshots = "memory_snapshots"
	AbilityFilesSnapshots  = "files_snapshots"
	AbilityFork            = "fork"
)

// Has reports whether the runtime declares ability a.
func (r Runtime) Has(a string) bool {
	for _, x := range r.Abilities {
		if x == a {
			return true
		}
	}
	return false
}
