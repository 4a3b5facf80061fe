package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodeapi"
	"github.com/airlockrun/airlock/internal/nodecontract"
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
	n.runtimes = []nodecontract.Runtime{{Name: "gvisor", Abilities: []string{nodecontract.AbilityMemorySnapshots, nodecontract.AbilityFork}},
		{Name: "runc", Abilities: []string{nodecontract.AbilityFilesSnapshots, nodecontract.AbilityFork}}}
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
	capacity := nodecontract.Capacity{CPUMillicores: 4000, MemoryMB: 1 << 16, MaxSandboxes: 64}
	if err := c.s.NodeHeartbeat(ctx, "node-a", "fp-node-a", nodeapi.Heartbeat{Addr: "10.0.0.1:7444", Boot: "a1", Capacity: capacity}); err != nil {
		t.Fatal(err)
	}
	runc := []nodecontract.Runtime{{Name: "gvisor", Abilities: []string{nodecontract.AbilityMemorySnapshots, nodecontract.AbilityFork}},
		{Name: "runc", Abilities: []string{nodecontract.AbilityFilesSnapshots}}}
	if err := c.s.NodeHeartbeat(ctx, "node-b", "fp-node-b", nodeapi.Heartbeat{Addr: "10.0.0.1:7445", Boot: "b1", Capacity: capacity, Runtimes: runc}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		sb, err := c.s.CreateSandbox(ctx, c.tenant, CreateRequest{Runtime: "runc"})
		if err != nil {
			t.Fatal(err)
		}
		if sb.NodeID != "node-b" || sb.Metadata[AbilitiesMetadataKey] != nodecontract.AbilityFilesSnapshots {
			t.Errorf("a runc sandbox on %s with abilities %q; want node-b's runc", sb.NodeID, sb.Metadata[AbilitiesMetadataKey])
		}
	}
	for _, bad := range [][]nodecontract.Runtime{{{Name: "runc", Abilities: []string{"root"}}}, {{Name: "Not A Name"}}, make([]nodecontract.Runtime, 9)} {
		err := c.s.NodeHeartbeat(ctx, "node-b", "fp-node-b", nodeapi.Heartbeat{Addr: "10.0.0.1:7445", Boot: "b1", Capacity: capacity, Runtimes: bad})
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("a heartbeat reporting runtimes %+v: %v; want invalid argument", bad, err)
		}
	}
}

// TestVMRouting: "vm" picks the best VM runtime a node has (KVM first, then Firecracker); the operator
// allows VM runtimes per tenant and per template, and a setting of one runtime forces it; auto knows
// VMs (a tenant allowed only VMs gets one); a VM never boots the host template; heartbeats report
// VMs' accelerators, checked.
func TestVMRouting(t *testing.T) {
	ctx := context.Background()
	s, st, n, _, op := setup(t)
	gvisor := nodecontract.Runtime{Name: "gvisor", Abilities: []string{nodecontract.AbilityMemorySnapshots, nodecontract.AbilityFork}}
	qemu := nodecontract.Runtime{Name: "vm:qemu", Abilities: []string{nodecontract.AbilityMemorySnapshots, nodecontract.AbilityFork}, Accel: nodecontract.AccelTCG}
	n.runtimes = []nodecontract.Runtime{gvisor, qemu}
	// An image template (a VM boots images only).
	b, _ := json.Marshal(templateDoc{Digest: "sha256:" + strings.Repeat("1", 64), Layers: 1})
	if _, err := st.PutDoc(ctx, store.Doc{Key: templateDocPrefix + "app", Value: b}); err != nil {
		t.Fatal(err)
	}
	create := func(tenant, tpl, rt string) (string, string, error) {
		t.Helper()
		sb, err := s.CreateSandbox(ctx, tenant, CreateRequest{Template: tpl, Runtime: rt})
		return sb.Metadata[RuntimeMetadataKey], sb.Metadata[RuntimeReasonMetadataKey], err
	}
	for _, c := range []struct{ ask, want string }{{"vm", "vm:qemu"}, {"vm:qemu", "vm:qemu"}, {"", "gvisor"}, {"auto", "gvisor"}} {
		if got, why, err := create(op, "app", c.ask); err != nil || got != c.want || why == "" {
			t.Errorf("operator asks %q: %q (%q), %v; want %s", c.ask, got, why, err, c.want)
		}
	}
	if _, _, err := create(op, "app", "vm:firecracker"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("firecracker, which no node has: %v; want unavailable", err)
	}
	if _, _, err := create(op, "app", "vm:Bad"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a malformed VM runtime: %v; want invalid argument", err)
	}
	if _, _, err := create(op, "app", "container:runc"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a class that is not vm: %v; want invalid argument", err)
	}
	if _, _, err := create(op, "", "vm"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a VM of the host template: %v; want invalid argument", err)
	}
	// With KVM on one of two VM runtimes, that one first; QEMU first among equals.
	fc := nodecontract.Runtime{Name: "vm:firecracker", Abilities: qemu.Abilities, Accel: nodecontract.AccelKVM}
	n.runtimes = []nodecontract.Runtime{gvisor, qemu, fc}
	if got, _, err := create(op, "app", "vm"); err != nil || got != "vm:firecracker" {
		t.Errorf("vm with firecracker on KVM: %q, %v", got, err)
	}
	n.runtimes = []nodecontract.Runtime{gvisor, {Name: "vm:qemu", Abilities: qemu.Abilities, Accel: nodecontract.AccelKVM}, {Name: "vm:firecracker", Accel: nodecontract.AccelTCG}}
	if got, _, err := create(op, "app", "vm"); err != nil || got != "vm:qemu" {
		t.Errorf("vm with qemu on KVM, firecracker not: %q, %v", got, err)
	}
	n.runtimes = []nodecontract.Runtime{gvisor, {Name: "vm:qemu", Abilities: qemu.Abilities, Accel: nodecontract.AccelKVM}, fc}
	if got, _, err := create(op, "app", "vm"); err != nil || got != "vm:qemu" {
		t.Errorf("vm with both on KVM: %q, %v; want qemu", got, err)
	}
	n.runtimes = []nodecontract.Runtime{gvisor, qemu}

	// Another tenant: no VMs until the operator allows them; then only VMs forces them.
	other, _, _, err := s.CreateTenant(ctx, "other", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := create(other.ID, "app", "vm"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("another tenant asks vm: %v; want permission denied", err)
	}
	if _, err := s.SetTenantRuntimes(ctx, other.ID, []string{"vm"}); err != nil {
		t.Fatal(err)
	}
	for _, ask := range []string{"", "auto", "vm", "vm:qemu"} {
		if got, why, err := create(other.ID, "app", ask); err != nil || got != "vm:qemu" {
			t.Errorf("a tenant allowed only VMs asks %q: %q (%q), %v; want vm:qemu", ask, got, why, err)
		}
	}
	if _, _, err := create(other.ID, "app", "gvisor"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a tenant allowed only VMs asks gvisor: %v; want permission denied", err)
	}
	if _, err := s.SetTenantRuntimes(ctx, other.ID, []string{"gvisor", "vm:qemu"}); err != nil {
		t.Fatal(err)
	}

	// Per template: the operator forces VMs on py; its first runtime is the default.
	if _, err := s.SetTemplateRuntimes(ctx, "app", []string{"vm", "auto"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a template allowed auto: %v; want invalid argument", err)
	}
	if _, err := s.SetTemplateRuntimes(ctx, "nope", []string{"vm"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("runtimes of a template that does not exist: %v; want not found", err)
	}
	tpl, err := s.SetTemplateRuntimes(ctx, "app", []string{"vm"})
	if err != nil || len(tpl.Runtimes) != 1 {
		t.Fatalf("SetTemplateRuntimes: %+v, %v", tpl, err)
	}
	if got, err := s.GetTemplate(ctx, "app"); err != nil || len(got.Runtimes) != 1 || got.Runtimes[0] != "vm" {
		t.Errorf("GetTemplate after the setting: %v, %v", got.Runtimes, err)
	}
	// The image under another name is bound by the same list.
	if _, _, err := create(other.ID, "alias@sha256:"+strings.Repeat("1", 64), "gvisor"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("the VM-only template's image under another name, on gvisor: %v; want permission denied", err)
	}
	if err := s.checkRuntimeAllowed(ctx, other.ID, "app@sha256:"+strings.Repeat("1", 64), "gvisor"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a fork of a gvisor session of the VM-only template: %v; want permission denied", err)
	}
	if err := s.checkRuntimeAllowed(ctx, other.ID, "app@sha256:"+strings.Repeat("1", 64), "vm:qemu"); err != nil {
		t.Errorf("a fork of a VM session of the VM-only template: %v", err)
	}
	for _, tenant := range []string{op, other.ID} {
		if got, why, err := create(tenant, "app", ""); err != nil || got != "vm:qemu" || !strings.Contains(why, "template app") {
			t.Errorf("default runtime of a VM template for %s: %q (%q), %v", tenant, got, why, err)
		}
		if got, _, err := create(tenant, "app", "auto"); err != nil || got != "vm:qemu" {
			t.Errorf("auto of a VM template for %s: %q, %v", tenant, got, err)
		}
		if _, _, err := create(tenant, "app", "gvisor"); !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("gvisor asked of a VM template for %s: %v; want permission denied", tenant, err)
		}
	}
	// auto for a session: gVisor first, then VMs, never runc while a VM is allowed.
	avail := map[string]nodecontract.Runtime{"gvisor": gvisor, "runc": {Name: "runc"}, "vm:qemu": qemu}
	for _, c := range []struct {
		tenant []string
		want   string
	}{{nil, "gvisor"}, {[]string{"runc", "vm"}, "vm:qemu"}, {[]string{"runc"}, "runc"}} {
		got, _, err := pickRuntime(runtimeChoice{requested: "auto", session: true, tenant: c.tenant, available: avail, anyUp: true})
		if err != nil || got != c.want {
			t.Errorf("auto for a session of a tenant allowed %v: %q, %v; want %s", c.tenant, got, err, c.want)
		}
	}
	// A tenant without VMs cannot use the template at all, and is told why.
	if _, err := s.SetTenantRuntimes(ctx, other.ID, []string{"gvisor"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := create(other.ID, "app", ""); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a tenant without VMs creates from a VM template: %v; want permission denied", err)
	}
	if err := s.checkRuntimeAllowed(ctx, other.ID, "app@sha256:"+strings.Repeat("1", 64), "vm:qemu"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a fork of a VM session once the tenant may not use VMs: %v; want permission denied", err)
	}
	// A template preferring VMs, then gvisor: a tenant without VMs gets gvisor by default.
	if _, err := s.SetTemplateRuntimes(ctx, "app", []string{"vm", "gvisor"}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := create(other.ID, "app", ""); err != nil || got != "gvisor" {
		t.Errorf("template vm then gvisor, tenant gvisor: %q, %v; want gvisor", got, err)
	}
	if got, _, err := create(op, "app", ""); err != nil || got != "vm:qemu" {
		t.Errorf("template vm then gvisor, the operator: %q, %v; want vm:qemu", got, err)
	}
	// auto with nothing allowed on a node: unavailable, not a refusal.
	if _, _, err := pickRuntime(runtimeChoice{requested: "auto", tenant: []string{"vm"}, available: map[string]nodecontract.Runtime{"gvisor": gvisor}, anyUp: true}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("auto for a VM-only tenant without VM nodes: %v; want unavailable", err)
	}
	if _, err := s.SetTemplateRuntimes(ctx, "app", nil); err != nil {
		t.Fatal(err)
	}
	if got, _, err := create(other.ID, "app", ""); err != nil || got != "gvisor" {
		t.Errorf("after the template's setting is cleared: %q, %v", got, err)
	}

	// Heartbeats: a VM runtime says its accelerator, another runtime none; "vm" is no runtime's name.
	c := newRemoteNodes(t, "node-a")
	capacity := nodecontract.Capacity{CPUMillicores: 4000, MemoryMB: 1 << 16, MaxSandboxes: 64}
	good := []nodecontract.Runtime{gvisor, qemu}
	if err := c.s.NodeHeartbeat(ctx, "node-a", "fp-node-a", nodeapi.Heartbeat{Addr: "10.0.0.1:7444", Boot: "a1", Capacity: capacity, Runtimes: good}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]nodecontract.Runtime{{{Name: "vm:qemu", Accel: "fast"}}, {{Name: "vm:qemu"}}, {{Name: "gvisor", Accel: "kvm"}}, {{Name: "vm", Accel: "kvm"}}} {
		err := c.s.NodeHeartbeat(ctx, "node-a", "fp-node-a", nodeapi.Heartbeat{Addr: "10.0.0.1:7444", Boot: "a1", Capacity: capacity, Runtimes: bad})
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("a heartbeat reporting runtimes %+v: %v; want invalid argument", bad, err)
		}
	}
}
