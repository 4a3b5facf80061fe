package nodecontract

import (
	"context"
	"net"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/gateway"
	"github.com/airlockrun/airlock/internal/gateway/flowlog"
	"github.com/airlockrun/airlock/internal/gateway/policy"
)

// Node is what a control plane needs of a node: node.Local implements it in the control plane's
// process, and so does the client of a node in another process (nodeapi.Client).
type Node interface {
	// ID names the node.
	ID() string
	// Runtimes reports the node's runtime drivers and their abilities, the default first.
	Runtimes(ctx context.Context) ([]Runtime, error)
	// CheckTemplate reports whether the node can boot the template: nil, or an error wrapping
	// errdefs.ErrNotFound.
	CheckTemplate(ctx context.Context, name string) error
	// CreateSandbox boots a sandbox and returns once it accepts work.
	CreateSandbox(ctx context.Context, req CreateRequest) error
	// DestroySandbox removes a sandbox and everything of it from the node; unknown IDs succeed.
	DestroySandbox(ctx context.Context, id string) error
	// Link returns the channel to the sandbox's daemon.
	Link(ctx context.Context, id string) (*link.Client, error)
	// Sandboxes reports the IDs of the sandboxes the node has, running or left over.
	Sandboxes(ctx context.Context) ([]string, error)
	// Recover re-adopts those of the sandboxes that still run after a restart and reports their IDs;
	// an error means the node could not tell (it was not reached), not that they are gone.
	Recover(ctx context.Context, sbs []RecoverRequest) ([]string, error)
	// SetNetwork replaces a running sandbox's egress policy.
	SetNetwork(ctx context.Context, id string, p policy.Policy) error
	// RestoreSandbox boots a sandbox from a snapshot's checkpoint image, which the node keeps or fetches
	// from the snapshot store, and returns once it accepts work.
	RestoreSandbox(ctx context.Context, req CreateRequest, src ImageSource) error
	// Snapshot saves a running sandbox as snapshot req.SnapshotID and then does with it what req.Then
	// says, in one call. The node keeps the image and stores it into the snapshot store in the
	// background: it asks the control plane for the tenant's grant and reports the outcome through
	// SnapshotCalls, retrying until the image is stored, lost, or no longer wanted (across restarts of
	// the node). With ThenDestroy the sandbox goes only once the control plane has the image on record
	// (SnapshotSaved answered): otherwise it runs on and the snapshot fails. With req.IfIdle, a sandbox
	// with calls or streams in progress is ErrBusy and nothing is taken. A failed snapshot leaves the
	// sandbox running.
	Snapshot(ctx context.Context, id string, req SnapshotRequest) (Image, error)
	// DropImages removes the images of these snapshots from the node, pending or kept, and stops their
	// stores.
	DropImages(ctx context.Context, snapIDs []string) error
	// CopyCA gives toID the interception CA stored under fromID; ForgetCA removes one.
	CopyCA(ctx context.Context, fromID, toID, tenantID string) error
	ForgetCA(caID string)
	// RewrapCAs wraps the keys of the tenant's CAs again under its current key-encryption key.
	RewrapCAs(ctx context.Context, tenantID string) (int, error)
	// TemplateRoot reports the host directory of a template's root filesystem (read-only).
	TemplateRoot(ctx context.Context, name string) (string, error)
	// SandboxCPU reports the CPU time a running sandbox used so far.
	SandboxCPU(ctx context.Context, id string) (time.Duration, error)
	// SandboxMetrics reports a running sandbox's resource use: the readings the node keeps taken in
	// [start, end] (a zero bound is none), oldest first, and one taken now if end is zero or not before
	// now (see Local.SandboxMetrics).
	SandboxMetrics(ctx context.Context, id string, start, end time.Time) ([]Sample, error)
	// Flows returns a sandbox's network flows that f selects, newest first, also once it is gone.
	Flows(ctx context.Context, id string, f flowlog.Filter) ([]gateway.Flow, error)
	// DialPort opens a TCP connection from the node into a running sandbox, to port on its own address;
	// nothing listening is errdefs.ErrPortClosed.
	DialPort(ctx context.Context, id string, port int) (net.Conn, error)
}
