package controlplane

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/gateway"
	"github.com/airlockrun/airlock/internal/gateway/flowlog"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/store"
)

// countingNode counts the calls of every method of the node contract (but ID, which asks the node
// nothing) and passes them on. It names each method: a method added to the contract does not compile
// here until it is counted.
type countingNode struct {
	inner Node
	mu    sync.Mutex
	n     map[string]int
}

func (c *countingNode) count(m string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[m]++
}

// take returns the counts so far and starts again from none.
func (c *countingNode) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = nil
	return n
}

func (c *countingNode) ID() string { return c.inner.ID() }
func (c *countingNode) Runtimes(ctx context.Context) ([]nodecontract.Runtime, error) {
	c.count("Runtimes")
	return c.inner.Runtimes(ctx)
}
func (c *countingNode) CheckTemplate(ctx context.Context, name string) error {
	c.count("CheckTemplate")
	return c.inner.CheckTemplate(ctx, name)
}
func (c *countingNode) CreateSandbox(ctx context.Context, req nodecontract.CreateRequest) error {
	c.count("CreateSandbox")
	return c.inner.CreateSandbox(ctx, req)
}
func (c *countingNode) DestroySandbox(ctx context.Context, id string) error {
	c.count("DestroySandbox")
	return c.inner.DestroySandbox(ctx, id)
}
func (c *countingNode) Link(ctx context.Context, id string) (*link.Client, error) {
	c.count("Link")
	return c.inner.Link(ctx, id)
}
func (c *countingNode) Sandboxes(ctx context.Context) ([]string, error) {
	c.count("Sandboxes")
	return c.inner.Sandboxes(ctx)
}
func (c *countingNode) Recover(ctx context.Context, sbs []nodecontract.RecoverRequest) ([]string, error) {
	c.count("Recover")
	return c.inner.Recover(ctx, sbs)
}
func (c *countingNode) SetNetwork(ctx context.Context, id string, p policy.Policy) error {
	c.count("SetNetwork")
	return c.inner.SetNetwork(ctx, id, p)
}
func (c *countingNode) RestoreSandbox(ctx context.Context, req nodecontract.CreateRequest, src nodecontract.ImageSource) error {
	c.count("RestoreSandbox")
	return c.inner.RestoreSandbox(ctx, req, src)
}
func (c *countingNode) Snapshot(ctx context.Context, id string, req nodecontract.SnapshotRequest) (nodecontract.Image, error) {
	c.count("Snapshot")
	return c.inner.Snapshot(ctx, id, req)
}
func (c *countingNode) DropImages(ctx context.Context, snapIDs []string) error {
	c.count("DropImages")
	return c.inner.DropImages(ctx, snapIDs)
}
func (c *countingNode) CopyCA(ctx context.Context, fromID, toID, tenantID string) error {
	c.count("CopyCA")
	return c.inner.CopyCA(ctx, fromID, toID, tenantID)
}
func (c *countingNode) ForgetCA(caID string) {
	c.count("ForgetCA")
	c.inner.ForgetCA(caID)
}
func (c *countingNode) RewrapCAs(ctx context.Context, tenantID string) (int, error) {
	c.count("RewrapCAs")
	return c.inner.RewrapCAs(ctx, tenantID)
}
func (c *countingNode) TemplateRoot(ctx context.Context, name string) (string, error) {
	c.count("TemplateRoot")
	return c.inner.TemplateRoot(ctx, name)
}
func (c *countingNode) SandboxCPU(ctx context.Context, id string) (time.Duration, error) {
	c.count("SandboxCPU")
	return c.inner.SandboxCPU(ctx, id)
}
func (c *countingNode) SandboxMetrics(ctx context.Context, id string, start, end time.Time) ([]nodecontract.Sample, error) {
	c.count("SandboxMetrics")
	return c.inner.SandboxMetrics(ctx, id, start, end)
}
func (c *countingNode) Flows(ctx context.Context, id string, f flowlog.Filter) ([]gateway.Flow, error) {
	c.count("Flows")
	return c.inner.Flows(ctx, id, f)
}
func (c *countingNode) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	c.count("DialPort")
	return c.inner.DialPort(ctx, id, port)
}

var _ Node = (*countingNode)(nil)

// TestPauseIsOneNodeCall: a pause is one call to the sandbox's node (Snapshot), which saves the image,
// destroys the sandbox and stores the image behind; the snapshot is complete once the node reports it.
// A resume, the counter's positive control, counts its restore (RestoreSandbox, with the placement's
// questions).
func TestPauseIsOneNodeCall(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	e.s.Shutdown(ctx)
	cn := &countingNode{inner: e.n}
	s, err := New(Config{Store: e.st, Node: cn, Now: e.clk.Now, ReapInterval: time.Hour, IdleInterval: time.Hour, Snapshots: e.s.snapshotBook.snapshots})
	if err != nil {
		t.Fatal(err)
	}
	e.n.bind(s)
	e.s = s
	t.Cleanup(func() { s.Shutdown(context.Background()); e.n.stopStores() })
	se := e.create(t, SessionRequest{})
	settle(t, s)
	cn.take()
	paused, err := s.PauseSession(ctx, e.tenant, se.ID)
	if err != nil || paused.State != store.SessionPaused {
		t.Fatalf("pause: %+v %v", paused, err)
	}
	settle(t, s)
	if diff := cmp.Diff(map[string]int{"Snapshot": 1}, cn.take()); diff != "" {
		t.Errorf("node calls of a pause (-want +got):\n%s", diff)
	}
	if sn, err := e.st.GetSnapshot(ctx, e.tenant, paused.HeadSnapshotID); err != nil || sn.State != store.SnapshotComplete {
		t.Errorf("the pause's snapshot once its node reported: %+v %v; want complete", sn, err)
	}
	if e.n.isRunning(se.SandboxID) {
		t.Errorf("sandbox %s still runs on the node after the pause", se.SandboxID)
	}
	if sb, err := e.st.GetSandbox(ctx, e.tenant, se.SandboxID); err != nil || sb.State != store.StateStopped {
		t.Errorf("the paused sandbox's record: %+v %v; want stopped", sb, err)
	}
	if _, err := s.ResumeSession(ctx, e.tenant, se.ID); err != nil {
		t.Fatal(err)
	}
	settle(t, s)
	if got := cn.take(); got["RestoreSandbox"] != 1 {
		t.Errorf("node calls of a resume: %v; want one RestoreSandbox among them", got)
	}
}
