package nodecontract

import (
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/policy"
)

// LocalID names the node in the control plane's own process (single-binary mode). No node of a
// cluster may join under it: the control plane would answer it for the sandboxes of its own node.
const LocalID = "local"

// CreateRequest asks the node for a sandbox.
type CreateRequest struct {
	// ID names the sandbox.
	ID string
	// TenantID names the sandbox's owner, recorded in its network flows.
	TenantID string
	// Template is the template name.
	Template string
	// Runtime names the runtime driver ("": the node's default). A restore must name the driver the
	// snapshot was taken with.
	Runtime string
	// Env is the base environment of the sandbox's processes ("K=V").
	Env []string
	// Limits are the resource limits; zero fields take the driver's defaults.
	Limits Limits
	// Network is the sandbox's egress policy (the zero value denies everything).
	Network policy.Policy
	// CAID names the gateway's interception CA for the sandbox: empty for the sandbox's own (forgotten
	// with it); a session's ID for a CA the session's sandboxes share (see gateway.RegisterWithCA).
	CAID string
	// Fence is the fencing token of the session's lease the sandbox runs under (with CAID the session's
	// ID; 0: none). The node refuses a sandbox of a session with a smaller token than one it has seen:
	// an order from a control plane whose lease on the session was taken over since.
	Fence int64
	// Start, for a create of a template with a start command, has the sandbox handed over with the
	// command running and ready (start.go). A restore from a snapshot ignores it.
	Start *Start
	// FlowKey, if set, seals the sandbox's flow log (flowlog.Log.SetKey): its tenant's flow key, which
	// the node holds while the sandbox runs here and never stores.
	FlowKey []byte
	// LogRetention is how long the sandbox's flow log is kept once its newest flow is older (its
	// tenant's log retention; 0: the node's default, flowlog.Log.SetDefaultRetention).
	LogRetention time.Duration
	// NewIdentity, for a restore, says the snapshot is not the session's own (a fork's, a kept
	// snapshot's): the sandbox gets an identity of its own (identity.go), as a boot and a restore of a
	// template's start snapshot always do. A session's own resume keeps the identity it had.
	NewIdentity bool
}

// RecoverRequest names a sandbox a previous run of the node left running, with its owner and its egress
// policy.
type RecoverRequest struct {
	ID       string
	TenantID string
	// Runtime is the sandbox's CreateRequest.Runtime.
	Runtime string
	Network policy.Policy
	// CAID is the sandbox's CreateRequest.CAID.
	CAID string
	// Limits are the sandbox's CreateRequest.Limits, for what the node reports of its resource use (the
	// node's record of them did not survive its restart).
	Limits Limits
	// FlowKey and LogRetention are the sandbox's CreateRequest's.
	FlowKey      []byte
	LogRetention time.Duration
}

// ErrBusy is what a snapshot with SnapshotRequest.IfIdle answers while calls or streams are in
// progress on the sandbox's channel, from this node or any control plane.
var ErrBusy = fmt.Errorf("calls or streams are in progress on the sandbox: %w", errdefs.ErrConflict)

// Start is a template's start command as a create asks for it.
type Start struct {
	// Key names the template's start snapshot ("<image digest hex>-<16 hex>"); the node restores from
	// it if it holds it.
	Key string
	// Cmd is the command's argv, run in the background as User in Cwd ("": the image's).
	Cmd       []string
	User, Cwd string
	// ReadyCmd, if set, is run until it exits 0: the sandbox is ready then. Without it, the sandbox is
	// ready once Cmd has run for a second.
	ReadyCmd []string
	// Timeout bounds the wait for ready (zero: DefaultStartTimeout).
	Timeout time.Duration
}

// DefaultStartTimeout bounds the wait for a start command's ready check.
const DefaultStartTimeout = 5 * time.Minute

// SampleInterval is how often the node reads each sandbox's resource use.
const SampleInterval = 5 * time.Second

// Sample is one reading of a sandbox's resource use.
type Sample struct {
	// Time is when it was taken.
	Time time.Time `json:"time"`
	// CPUCount is the sandbox's CPU limit in whole cores, rounded up (at least 1).
	CPUCount int `json:"cpu_count"`
	// CPUUsedPct is the CPU time the sandbox used since the reading before, as a percentage of CPUCount
	// cores over that interval, 0 to 100.
	CPUUsedPct float64 `json:"cpu_used_pct"`
	// MemUsed, MemCache and MemTotal are runtime.Stats's MemoryUsed, MemoryCache and MemoryLimit.
	MemUsed  int64 `json:"mem_used"`
	MemCache int64 `json:"mem_cache"`
	MemTotal int64 `json:"mem_total"`
	// DiskUsed and DiskTotal are the bytes used and the size of the sandbox's writable disk.
	DiskUsed  int64 `json:"disk_used"`
	DiskTotal int64 `json:"disk_total"`
}

// Limits are a sandbox's resource limits; zero fields take the driver's defaults (runtime.Limits, which
// has the same fields).
type Limits struct {
	// CPUMillis is the CPU quota in thousandths of a core (1000 = one core).
	CPUMillis int64
	// MemoryBytes caps the sandbox's memory; above it the sandbox is killed.
	MemoryBytes int64
	// DiskBytes caps the sandbox's writable layer.
	DiskBytes int64
	// Processes caps the number of processes the sandbox's non-root user may run at once.
	Processes int64
}
