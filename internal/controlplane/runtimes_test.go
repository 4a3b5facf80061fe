package controlplane

import (
	"context"
	"errors"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/node"
	"github.com/airlockrun/airlock/internal/nodeapi"
	"github.com/airlockrun/airlock/internal/store"
)

// TestRuntimeRouting: a create names a runtime, asks for auto, or takes the default; the tenant must
// be allowed it (the operator's may use every one, the others gvisor until the operator allows more)
// and a node must have it; the choice and its reason are in the sandbox's metadata and the audit log.
func TestRuntimeRouting(t *testing.T) {
	ctx := context.Background()
	s, _, n, _, op := setup(t)
	var audited []string
	s.placer.audit = func(e store.AuditEntry) {
		if e.Action == "choose runtime" {
			audited = append(audited, e.Target+" "+e.Detail)
		}
	}
	n.runtimes = []node.Runtime{{Name: "gvisor", Abilities: []string{node.AbilityMemorySnapshots, node.AbilityFork}},
		{Name: "runc", Abilities: []string{node.AbilityFilesSnapshots, node.AbilityFork}}}
	create := func(tenant, rt string) (string, string, error) {
		t.Helper()
		sb, err := s.CreateSandbox(ctx, tenant, CreateRequest{Runtime: rt})
		return sb.Metadata[RuntimeMetadataKey], sb.Metadata[RuntimeReasonMetadataKey], err
	}
	for _, c := range []struct{ ask, want string }{{"", "gvisor"}, {"gvisor", "gvisor"}, {"runc", "runc"}, {"auto", "runc"}} {
		got, why, err := create(op, c.ask)
		if err != nil || got != c.want || why == "" {
			t.Errorf("operator asks %q: %q (%q), %v; want %s", c.ask, got, why, err, c.want)
		}
	}
	if len(audited) != 4 {
		t.Errorf("audit log has %d runtime choices: %v; want 4", len(audited), audited)
	}
	if _, _, err := create(op, "vm"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("a runtime no node has: %v; want unavailable", err)
	}
	if _, _, err := create(op, "Bad Name"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a malformed runtime: %v; want invalid argument", err)
	}
	// Another tenant: gvisor only, until the operator allows runc.
	other, _, _, err := s.CreateTenant(ctx, "other", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := create(other.ID, "runc"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("another tenant asks runc: %v; want permission denied", err)
	}
	if got, why, err := create(other.ID, "auto"); err != nil || got != "gvisor" {
		t.Errorf("another tenant asks auto: %q (%q), %v; want gvisor", got, why, err)
	}
	if _, err := s.SetTenantRuntimes(ctx, other.ID, []string{"runc", "gvisor", "runc"}); err != nil {
		t.Fatal(err)
	}
	if names, def, err := s.TenantRuntimes(ctx, other.ID); err != nil || def || len(names) != 2 {
		t.Errorf("TenantRuntimes = %v %v %v; want gvisor and runc", names, def, err)
	}
	if got, _, err := create(other.ID, "runc"); err != nil || got != "runc" {
		t.Errorf("another tenant allowed runc asks it: %q, %v", got, err)
	}
	if _, err := s.SetTenantRuntimes(ctx, other.ID, []string{"auto"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("allowing auto: %v; want invalid argument", err)
	}
	if _, err := s.SetTenantRuntimes(ctx, other.ID, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := create(other.ID, "runc"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("after the default is restored: %v; want permission denied", err)
	}
}

// TestRuntimePlacement: a sandbox goes to a node whose heartbeat reports its runtime; a heartbeat that
// reports a malformed runtime is refused.
func TestRuntimePlacement(t *testing.T) {
	ctx := context.Background()
	c := newRemoteNodes(t, "node-a", "node-b")
	capacity := node.Capacity{CPUMillicores: 4000, MemoryMB: 1 << 16, MaxSandboxes: 64}
	if err := c.s.NodeHeartbeat(ctx, "node-a", "fp-node-a", nodeapi.Heartbeat{Addr: "10.0.0.1:7444", Boot: "a1", Capacity: capacity}); err != nil {
		t.Fatal(err)
	}
	runc := []node.Runtime{{Name: "gvisor", Abilities: []string{node.AbilityMemorySnapshots, node.AbilityFork}},
		{Name: "runc", Abilities: []string{node.AbilityFilesSnapshots}}}
	if err := c.s.NodeHeartbeat(ctx, "node-b", "fp-node-b", nodeapi.Heartbeat{Addr: "10.0.0.1:7445", Boot: "b1", Capacity: capacity, Runtimes: runc}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		sb, err := c.s.CreateSandbox(ctx, c.tenant, CreateRequest{Runtime: "runc"})
		if err != nil {
			t.Fatal(err)
		}
		if sb.NodeID != "node-b" || sb.Metadata[AbilitiesMetadataKey] != node.AbilityFilesSnapshots {
			t.Errorf("a runc sandbox on %s with abilities %q; want node-b's runc", sb.NodeID, sb.Metadata[AbilitiesMetadataKey])
		}
	}
	for _, bad := range [][]node.Runtime{{{Name: "runc", Abilities: []string{"root"}}}, {{Name: "Not A Name"}}, make([]node.Runtime, 9)} {
		err := c.s.NodeHeartbeat(ctx, "node-b", "fp-node-b", nodeapi.Heartbeat{Addr: "10.0.0.1:7445", Boot: "b1", Capacity: capacity, Runtimes: bad})
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("a heartbeat reporting runtimes %+v: %v; want invalid argument", bad, err)
		}
	}
}
