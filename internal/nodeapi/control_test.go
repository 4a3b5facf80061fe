package nodeapi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodeapi"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/snapshot"
)

// fakeControl is a control plane's side of the calls nodes make: it takes the word that sn_1's image is
// saved, hands out a grant for snapshot sn_1 of tn_1 and takes reports of sn_1, and records what it was
// asked. The calls it does not serve are nodeapi.Control's (nil: they panic).
type fakeControl struct {
	nodeapi.Control

	mu    sync.Mutex
	calls []string
	// saved and reports are the words that an image is saved, and the reports of snapshots stored,
	// taken.
	saved, reports []nodecontract.SnapshotReport
}

func (f *fakeControl) record(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

// CheckNode lets every node in.
func (f *fakeControl) CheckNode(context.Context, string, string) error { return nil }

// grantKey is the grant fakeControl hands out.
var grantKey = bytes.Repeat([]byte{0xcd}, 96)

func (f *fakeControl) NodeSnapshotSaved(_ context.Context, nodeID string, rep nodecontract.SnapshotReport) error {
	f.record("saved %s %s %s", nodeID, rep.TenantID, rep.SnapshotID)
	if rep.SnapshotID != "sn_1" {
		return fmt.Errorf("snapshot %s waits for no image: %w", rep.SnapshotID, errdefs.ErrNotFound)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.saved = append(f.saved, rep)
	return nil
}

func (f *fakeControl) NodeSnapshotGrant(_ context.Context, nodeID, tenantID, snapshotID string) (*snapshot.Grant, error) {
	f.record("grant %s %s %s", nodeID, tenantID, snapshotID)
	if tenantID != "tn_1" || snapshotID != "sn_1" {
		return nil, fmt.Errorf("snapshot %s of %s waits for no image from %s: %w", snapshotID, tenantID, nodeID, errdefs.ErrNotFound)
	}
	return snapshot.UnmarshalGrant(tenantID, grantKey)
}

func (f *fakeControl) NodeSnapshotStored(_ context.Context, nodeID string, rep nodecontract.SnapshotReport) error {
	f.record("stored %s %s %s", nodeID, rep.TenantID, rep.SnapshotID)
	if rep.SnapshotID != "sn_1" {
		return fmt.Errorf("snapshot %s waits for no image: %w", rep.SnapshotID, errdefs.ErrNotFound)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reports = append(f.reports, rep)
	return nil
}

// TestSnapshotCalls: a node's ControlClient says a snapshot's image is saved, asks for a snapshot grant
// and reports a snapshot stored through the cluster port; the grant arrives intact and for its tenant,
// the word and the report whole, each call
// names the node its certificate does, a snapshot that waits for nothing is not found at the node too,
// and an overlong lost reason is refused before it reaches the control plane.
func TestSnapshotCalls(t *testing.T) {
	tc := newCluster(t)
	fc := &fakeControl{}
	addr := serve(t, nodeapi.NewControlHandler(fc, nil), cluster.ServerTLS(tc.cp, tc.ca.Pool(), cluster.RoleNode))
	cc, err := nodeapi.NewControlClient(nodeapi.ControlClientConfig{URL: "https://" + addr, Cert: tc.node, Roots: tc.ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx := t.Context()

	saved := nodecontract.SnapshotReport{TenantID: "tn_1", SnapshotID: "sn_1", Image: nodecontract.Image{Bytes: 3 << 20, Runtime: "gvisor", FilesPart: "fs.tar"}}
	if err := cc.SnapshotSaved(ctx, saved); err != nil {
		t.Fatal(err)
	}
	if err := cc.SnapshotSaved(ctx, nodecontract.SnapshotReport{TenantID: "tn_1", SnapshotID: "sn_gone"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("saved of a snapshot nobody waits for = %v; want not found", err)
	}
	g, err := cc.SnapshotGrant(ctx, "tn_1", "sn_1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := g.MarshalBinary()
	if err != nil || g.Tenant() != "tn_1" || !bytes.Equal(b, grantKey) {
		t.Errorf("grant for %s, %x..., %v; want tn_1's, intact", g.Tenant(), b[:4], err)
	}
	g.Clear()
	if _, err := cc.SnapshotGrant(ctx, "tn_1", "sn_gone"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("grant for a snapshot nobody waits for = %v; want not found", err)
	}

	rep := nodecontract.SnapshotReport{TenantID: "tn_1", SnapshotID: "sn_1", Image: nodecontract.Image{Bytes: 3 << 20, Runtime: "gvisor", FilesPart: "fs.tar"},
		LogicalBytes: 3 << 20, NewStoredBytes: 1 << 20, StoreMillis: 42}
	if err := cc.SnapshotStored(ctx, rep); err != nil {
		t.Fatal(err)
	}
	if err := cc.SnapshotStored(ctx, nodecontract.SnapshotReport{TenantID: "tn_1", SnapshotID: "sn_gone"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("report of a snapshot nobody waits for = %v; want not found", err)
	}
	lost := nodecontract.SnapshotReport{TenantID: "tn_1", SnapshotID: "sn_1", Lost: strings.Repeat("x", nodecontract.MaxLostReason)}
	if err := cc.SnapshotStored(ctx, lost); err != nil {
		t.Errorf("report with a lost reason of the largest size: %v", err)
	}
	lost.Lost += "x"
	if err := cc.SnapshotStored(ctx, lost); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("report with an overlong lost reason = %v; want invalid argument", err)
	}

	fc.mu.Lock()
	defer fc.mu.Unlock()
	want := []string{"saved node-a tn_1 sn_1", "saved node-a tn_1 sn_gone", "grant node-a tn_1 sn_1", "grant node-a tn_1 sn_gone", "stored node-a tn_1 sn_1", "stored node-a tn_1 sn_gone", "stored node-a tn_1 sn_1"}
	if diff := cmp.Diff(want, fc.calls); diff != "" {
		t.Errorf("the control plane saw (-want +got):\n%s", diff)
	}
	if len(fc.saved) != 1 || !cmp.Equal(fc.saved[0], saved) {
		t.Errorf("words taken %+v; want %+v", fc.saved, saved)
	}
	if len(fc.reports) != 2 || !cmp.Equal(fc.reports[0], rep) {
		t.Errorf("reports taken %+v; want %+v first", fc.reports, rep)
	}
}
