package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/template"
)

// Routing: which runtime runs a sandbox. A create names one (CreateRequest.Runtime: "gvisor", "runc",
// "vm:qemu", "vm:firecracker", …), names the class RuntimeVM (the best VM runtime a node has), asks for
// RuntimeAuto, or names none (the default). Two operator settings bound it: the runtimes a tenant may
// use (SetTenantRuntimes: the operator's tenant every one, any other gVisor only until the operator
// allows more, runc being weaker isolation) and the runtimes a template's sandboxes may run on
// (SetTemplateRuntimes: none set, any). "vm" in either allows every VM runtime. A setting of one runtime
// forces it: the default is the template's first runtime, else gVisor where the tenant may use it, else
// the tenant's first. A node that is up must have the runtime (nodes report their runtimes, and a VM
// runtime whether KVM runs its guests, in heartbeats). RuntimeAuto picks, of what the tenant and the
// template allow and a node has, for a session a runtime whose pauses keep memory and processes (gVisor,
// then VMs), for a sandbox the fastest to start (runc, gVisor, then VMs); VMs with KVM before those
// emulated, Firecracker before QEMU. The choice and its reason are in the sandbox's metadata
// (RuntimeMetadataKey, RuntimeReasonMetadataKey) and the tenant's audit log.

// Runtime names a create may give.
const (
	RuntimeAuto    = "auto"
	DefaultRuntime = "gvisor"
	// RuntimeVM is the class of the microVM runtimes, named "vm:…" ("vm:qemu", "vm:firecracker").
	RuntimeVM = "vm"
	// AnyRuntime, in a tenant's allowed runtimes, allows every one.
	AnyRuntime = "*"
	// runtimeRunc is the runtime RuntimeAuto prefers for a sandbox, where the tenant may use it: it
	// starts fastest.
	runtimeRunc = "runc"
)

// RuntimeMetadataKey and RuntimeReasonMetadataKey hold, in a sandbox's metadata, the runtime that runs
// it and why it was chosen.
const (
	RuntimeMetadataKey       = "airlock.runtime"
	RuntimeReasonMetadataKey = "airlock.runtime_reason"
	// AbilitiesMetadataKey lists, comma-separated, what the runtime can do (nodecontract.Runtime.Abilities).
	AbilitiesMetadataKey = "airlock.abilities"
)

// runtimePattern is a runtime's name: a word, or a class and a word ("vm:qemu").
var runtimePattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}(:[a-z][a-z0-9-]{0,31})?$`)

// isVM reports whether runtime name is a VM runtime.
func isVM(name string) bool { return strings.HasPrefix(name, RuntimeVM+":") }

// checkRuntimeName checks a runtime a setting names: a runtime's name, or the class RuntimeVM.
func checkRuntimeName(n string) error {
	if !runtimePattern.MatchString(n) || n == RuntimeAuto {
		return invalid("runtime %q is not a runtime's name (gvisor, runc, vm, vm:qemu, vm:firecracker, …)", n)
	}
	if c, _, ok := strings.Cut(n, ":"); ok && c != RuntimeVM {
		return invalid("runtime %q: the only class of runtimes is %s", n, RuntimeVM)
	}
	return nil
}

// allows reports whether a list of runtimes (nil: every one) allows runtime name: it names it, or
// names its class.
func allows(list []string, name string) bool {
	if list == nil {
		return true
	}
	for _, n := range list {
		if n == name || (n == RuntimeVM && isVM(name)) {
			return true
		}
	}
	return false
}

// tenantRuntimesDoc is the Store document of a tenant's allowed runtimes.
func tenantRuntimesDoc(tenantID string) string { return "tenant-runtimes/" + tenantID }

type tenantRuntimes struct {
	Runtimes []string `json:"runtimes"`
}

// TenantRuntimes reports the runtimes tenantID may use, and whether that is the default (no list was
// set): every runtime for the operator's tenant (nil), gVisor for the others.
func (s *accounts) TenantRuntimes(ctx context.Context, tenantID string) (names []string, isDefault bool, err error) {
	d, err := s.store.GetDoc(ctx, tenantRuntimesDoc(tenantID))
	if err == nil {
		var tr tenantRuntimes
		if err := json.Unmarshal(d.Value, &tr); err != nil {
			return nil, false, fmt.Errorf("runtimes of tenant %s: %w", tenantID, err)
		}
		for _, n := range tr.Runtimes {
			if n == AnyRuntime {
				return nil, false, nil
			}
		}
		return tr.Runtimes, false, nil
	}
	if !errors.Is(err, errdefs.ErrNotFound) {
		return nil, false, err
	}
	t, err := s.store.GetTenant(ctx, tenantID)
	if err != nil {
		return nil, false, err
	}
	if t.Operator {
		return nil, true, nil
	}
	return []string{DefaultRuntime}, true, nil
}

// SetTenantRuntimes sets the runtimes tenantID may use (the operator's call), in order of preference
// (the first is its default where gVisor is not among them). An empty list restores the default.
func (s *accounts) SetTenantRuntimes(ctx context.Context, tenantID string, names []string) ([]string, error) {
	if _, err := s.store.GetTenant(ctx, tenantID); err != nil {
		return nil, err
	}
	clean, err := cleanRuntimes(names)
	if err != nil {
		return nil, err
	}
	if err := putRuntimes(ctx, s.store, tenantRuntimesDoc(tenantID), clean); err != nil {
		return nil, err
	}
	if len(clean) == 0 {
		got, _, err := s.TenantRuntimes(ctx, tenantID)
		return got, err
	}
	return clean, nil
}

// cleanRuntimes checks a setting's runtimes and drops repeats, keeping the order.
func cleanRuntimes(names []string) ([]string, error) {
	if len(names) > 16 {
		return nil, invalid("%d runtimes: at most 16", len(names))
	}
	var clean []string
	for _, n := range names {
		if n != AnyRuntime {
			if err := checkRuntimeName(n); err != nil {
				return nil, err
			}
		}
		if !slices.Contains(clean, n) {
			clean = append(clean, n)
		}
	}
	return clean, nil
}

// putRuntimes writes a runtimes document (none: removes it).
func putRuntimes(ctx context.Context, st store.Store, key string, names []string) error {
	if len(names) == 0 {
		cur, err := st.GetDoc(ctx, key)
		if err == nil {
			err = st.DeleteDoc(ctx, key, cur.Version)
		}
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
		return nil
	}
	b, err := json.Marshal(tenantRuntimes{Runtimes: names})
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		cur, err := st.GetDoc(ctx, key)
		version := int64(0)
		if err == nil {
			version = cur.Version
		} else if !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
		_, err = st.PutDoc(ctx, store.Doc{Key: key, Value: b, Version: version})
		if err == nil || !errors.Is(err, errdefs.ErrConflict) || attempt >= 5 {
			return err
		}
	}
}

// templateRuntimesDoc is the Store document of the runtimes a template's sandboxes may run on. It is
// the name's, apart from the template's own document: a new image under the name keeps it.
func templateRuntimesDoc(name string) string { return "template-runtimes/" + name }

// TemplateRuntimes reports the runtimes the operator set for the sandboxes of template name, in order
// of preference; nil: every one.
func (s *placer) TemplateRuntimes(ctx context.Context, name string) ([]string, error) {
	if template.IsDefault(name) {
		name = template.DefaultName
	}
	d, err := s.store.GetDoc(ctx, templateRuntimesDoc(name))
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var tr tenantRuntimes
	if err := json.Unmarshal(d.Value, &tr); err != nil {
		return nil, fmt.Errorf("runtimes of template %s: %w", name, err)
	}
	if slices.Contains(tr.Runtimes, AnyRuntime) {
		return nil, nil
	}
	return tr.Runtimes, nil
}

// templateRuntimeLists returns the runtime lists that bind a sandbox of template reference ref
// (NAME@DIGEST or "default"): its name's (primary, the order of preference; where the name has none,
// that of another template of the image), and those of every template whose image is ref's — a
// reference may give an image under any name, and the lists of the image's templates bind it all the
// same.
func (s *placer) templateRuntimeLists(ctx context.Context, ref string) (primary []string, all [][]string, err error) {
	name, digest, _ := strings.Cut(ref, "@")
	if primary, err = s.TemplateRuntimes(ctx, name); err != nil {
		return nil, nil, err
	}
	if digest == "" {
		return primary, nil, nil
	}
	ts, err := s.ListTemplates(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, t := range ts {
		if t.Digest == digest && t.Runtimes != nil {
			all = append(all, t.Runtimes)
		}
	}
	if primary == nil && len(all) > 0 {
		primary = all[0]
	}
	return primary, all, nil
}

// checkRuntimeAllowed refuses (403) a new session of tenantID on runtime name from template ref
// (a fork, a session from a kept snapshot) that the operator's lists no longer allow.
func (s *placer) checkRuntimeAllowed(ctx context.Context, tenantID, ref, name string) error {
	if name == "" {
		name = DefaultRuntime
	}
	allowed, _, err := s.accounts.TenantRuntimes(ctx, tenantID)
	if err != nil {
		return err
	}
	if !allows(allowed, name) {
		return fmt.Errorf("tenant %s may no longer use the %s runtime this session runs on (it may use %s): %w",
			tenantID, name, strings.Join(allowed, ", "), errdefs.ErrPermissionDenied)
	}
	primary, all, err := s.templateRuntimeLists(ctx, ref)
	if err != nil {
		return err
	}
	for _, l := range append(all, primary) {
		if !allows(l, name) {
			tplName, _, _ := strings.Cut(ref, "@")
			return fmt.Errorf("template %s's sandboxes may no longer run on the %s runtime this session runs on (they may on %s): %w",
				tplName, name, strings.Join(l, ", "), errdefs.ErrPermissionDenied)
		}
	}
	return nil
}

// SetTemplateRuntimes sets the runtimes the sandboxes of template name may run on (the operator's
// call), in order of preference: the first is their default, and one alone forces it. An empty list
// (or "*") allows every one again.
func (s *placer) SetTemplateRuntimes(ctx context.Context, name string, names []string) (Template, error) {
	t, err := s.GetTemplate(ctx, name)
	if err != nil {
		return Template{}, err
	}
	clean, err := cleanRuntimes(names)
	if err != nil {
		return Template{}, err
	}
	if slices.Contains(clean, AnyRuntime) {
		clean = nil
	}
	if err := putRuntimes(ctx, s.store, templateRuntimesDoc(t.Name), clean); err != nil {
		return Template{}, err
	}
	t.Runtimes = clean
	return t, nil
}

// nodeRuntimes reports the runtimes of the node with ID id as last heard (the in-process node's: now).
// A node that reports none is an older one: gVisor.
func (s *placer) nodeRuntimes(ctx context.Context, id string) []nodecontract.Runtime {
	if s.nodes.isLocal(id) {
		if rs, err := s.nodes.local.Runtimes(ctx); err == nil {
			return rs
		}
	} else if l, err := s.nodeLive(ctx, id); err == nil && len(l.Runtimes) > 0 {
		return l.Runtimes
	}
	return []nodecontract.Runtime{{Name: DefaultRuntime, Abilities: []string{nodecontract.AbilityMemorySnapshots, nodecontract.AbilityFork}}}
}

// runtimeOf reports rt as node id has it (its abilities there), or rt.
func (s *placer) runtimeOf(ctx context.Context, id string, rt nodecontract.Runtime) nodecontract.Runtime {
	if r, ok := s.runtimeOn(ctx, id, rt.Name); ok {
		return r
	}
	return rt
}

// runtimeOn reports the runtime named name of node id, if it has it.
func (s *placer) runtimeOn(ctx context.Context, id, name string) (nodecontract.Runtime, bool) {
	for _, r := range s.nodeRuntimes(ctx, id) {
		if r.Name == name {
			return r, true
		}
	}
	return nodecontract.Runtime{}, false
}

// chooseRuntime decides the runtime of a new sandbox of tenantID (of a session, if session) from
// template ref tpl (a sandbox's record of it: NAME@DIGEST or "default") and the requested runtime, and
// says why.
func (s *placer) chooseRuntime(ctx context.Context, tenantID, tpl, requested string, session bool) (rt nodecontract.Runtime, reason string, err error) {
	allowed, _, err := s.accounts.TenantRuntimes(ctx, tenantID)
	if err != nil {
		return nodecontract.Runtime{}, "", err
	}
	tplName, _, _ := strings.Cut(tpl, "@")
	forTemplate, templates, err := s.templateRuntimeLists(ctx, tpl)
	if err != nil {
		return nodecontract.Runtime{}, "", err
	}
	caps, err := s.placeable(ctx)
	if err != nil {
		return nodecontract.Runtime{}, "", err
	}
	available := map[string]nodecontract.Runtime{}
	for id := range caps {
		for _, r := range s.nodeRuntimes(ctx, id) {
			// A VM runtime that some node runs with KVM counts as such.
			if cur, seen := available[r.Name]; !seen || (r.Accel == nodecontract.AccelKVM && cur.Accel != nodecontract.AccelKVM) {
				available[r.Name] = r
			}
		}
	}
	name, reason, err := pickRuntime(runtimeChoice{tenantID: tenantID, template: tplName, requested: requested, session: session,
		tenant: allowed, forTemplate: forTemplate, templates: templates, available: available, anyUp: len(caps) > 0})
	if err != nil {
		return nodecontract.Runtime{}, "", err
	}
	if isVM(name) && imageOfRef(tpl) == "" {
		return nodecontract.Runtime{}, "", invalid("the %s runtime boots image templates only, and template %q is the host's own files (install the default image, or use another template)", name, tplName)
	}
	if r, ok := available[name]; ok {
		return r, reason, nil
	}
	return nodecontract.Runtime{Name: name, Abilities: []string{}}, reason, nil
}

// runtimeChoice is what pickRuntime decides from.
type runtimeChoice struct {
	tenantID, template, requested string
	session                       bool
	// tenant and forTemplate are the runtimes the tenant may use and the template's sandboxes may run
	// on (nil: every one); templates are the lists of every template of the same image, which bind
	// too.
	tenant, forTemplate []string
	templates           [][]string
	// available are the runtimes the nodes up have; anyUp says whether there is a node up to judge by.
	available map[string]nodecontract.Runtime
	anyUp     bool
}

// pickRuntime is chooseRuntime's decision, by name.
func pickRuntime(c runtimeChoice) (name, reason string, err error) {
	byTemplates := func(n string) bool {
		for _, l := range c.templates {
			if !allows(l, n) {
				return false
			}
		}
		return allows(c.forTemplate, n)
	}
	may := func(n string) bool { return allows(c.tenant, n) && byTemplates(n) }
	has := func(n string) bool { _, ok := c.available[n]; return ok }
	// bestVM is the VM runtime to run, of those allowed: one a node has, KVM first, then Firecracker;
	// "" if none.
	bestVM := func() string {
		var vms []nodecontract.Runtime
		for n, r := range c.available {
			if isVM(n) && may(n) {
				vms = append(vms, r)
			}
		}
		slices.SortFunc(vms, func(a, b nodecontract.Runtime) int {
			if d := vmRank(a) - vmRank(b); d != 0 {
				return d
			}
			return strings.Compare(a.Name, b.Name)
		})
		if len(vms) == 0 {
			return ""
		}
		return vms[0].Name
	}
	// resolve turns the class RuntimeVM into a VM runtime.
	resolve := func(n string) string {
		if n == RuntimeVM {
			if vm := bestVM(); vm != "" {
				return vm
			}
		}
		return n
	}
	// first is the first of list that is allowed and on a node that is up (or, with none up, allowed),
	// else list's first.
	first := func(list []string) string {
		for _, n := range list {
			if r := resolve(n); may(r) && (has(r) || !c.anyUp) {
				return r
			}
		}
		return resolve(list[0])
	}
	switch c.requested {
	case "":
		switch {
		case len(c.forTemplate) > 0:
			name, reason = first(c.forTemplate), fmt.Sprintf("the runtime the operator set for template %s", c.template)
		case may(DefaultRuntime):
			name, reason = DefaultRuntime, "the default runtime"
		case len(c.tenant) > 0:
			name, reason = first(c.tenant), "the runtime the operator set for the tenant"
		default:
			name, reason = DefaultRuntime, "the default runtime"
		}
	case RuntimeVM:
		name, reason = resolve(RuntimeVM), "requested a VM: "+vmReason
	case RuntimeAuto:
		prefer := []string{runtimeRunc, DefaultRuntime, RuntimeVM}
		why := "auto: the fastest start the tenant and the template allow"
		if c.session {
			prefer = []string{DefaultRuntime, RuntimeVM, runtimeRunc}
			why = "auto: a session's pauses keep memory and processes, which gvisor's and VMs' snapshots do"
		}
		for _, p := range prefer {
			if n := resolve(p); may(n) && (has(n) || !c.anyUp && n == DefaultRuntime) {
				name, reason = n, why
				break
			}
		}
		if name == "" {
			if c.anyUp && slices.ContainsFunc(append([]string{runtimeRunc, DefaultRuntime, "vm:qemu", "vm:firecracker"}, slices.Collect(maps.Keys(c.available))...), may) {
				return "", "", fmt.Errorf("auto: no node that is up has a runtime that tenant %s and template %s may use: %w", c.tenantID, c.template, errdefs.ErrUnavailable)
			}
			name, reason = DefaultRuntime, "auto: the default runtime"
		}
	default:
		name, reason = c.requested, "requested"
	}
	if name == RuntimeVM {
		// No VM runtime that is allowed is on a node: say which of the two it is.
		vms := []string{"vm:qemu", "vm:firecracker"}
		for _, l := range [][]string{c.tenant, c.forTemplate, slices.Collect(maps.Keys(c.available))} {
			for _, n := range l {
				if isVM(n) {
					vms = append(vms, n)
				}
			}
		}
		if !slices.ContainsFunc(vms, may) {
			return "", "", fmt.Errorf("tenant %s may not use VM runtimes with template %s; the operator allows runtimes per tenant and per template: %w",
				c.tenantID, c.template, errdefs.ErrPermissionDenied)
		}
		if !c.anyUp {
			return "", "", fmt.Errorf("no node is up to run a VM: %w", errdefs.ErrUnavailable)
		}
		return "", "", fmt.Errorf("no node that is up has a VM runtime: %w", errdefs.ErrUnavailable)
	}
	if !allows(c.tenant, name) {
		return "", "", fmt.Errorf("tenant %s may not use the %s runtime (it may use %s); the operator allows runtimes per tenant: %w",
			c.tenantID, name, strings.Join(c.tenant, ", "), errdefs.ErrPermissionDenied)
	}
	if !byTemplates(name) {
		return "", "", fmt.Errorf("template %s's sandboxes may not run on the %s runtime (they may on %s); the operator sets runtimes per template: %w",
			c.template, name, strings.Join(c.forTemplate, ", "), errdefs.ErrPermissionDenied)
	}
	if !has(name) && c.anyUp {
		return "", "", fmt.Errorf("no node that is up has the %s runtime: %w", name, errdefs.ErrUnavailable)
	}
	return name, reason, nil
}

// vmReason says how pickRuntime ranks VM runtimes.
const vmReason = "the best a node has (with KVM before emulated, QEMU before Firecracker)"

// vmRank orders VM runtimes, best first: with KVM before emulated, then QEMU before Firecracker (whose
// driver has passed the conformance suite only against fakes so far), then by name.
func vmRank(r nodecontract.Runtime) int {
	rank := 0
	if r.Accel != nodecontract.AccelKVM {
		rank += 10
	}
	if r.Name != "vm:qemu" {
		rank++
	}
	return rank
}

// withRuntime returns meta with the runtime chosen, why, and what it can do.
func withRuntime(meta map[string]string, rt nodecontract.Runtime, reason string) map[string]string {
	out := cloneMap(meta)
	if out == nil {
		out = map[string]string{}
	}
	out[RuntimeMetadataKey], out[RuntimeReasonMetadataKey] = rt.Name, reason
	out[AbilitiesMetadataKey] = strings.Join(rt.Abilities, ",")
	return out
}

// auditRuntime records in the tenant's audit log which runtime a sandbox got, and why.
func (s *placer) auditRuntime(tenantID, sandboxID, name, reason string) {
	if s.audit == nil {
		return
	}
	detail, _ := json.Marshal(map[string]string{"runtime": name, "reason": reason})
	s.audit(store.AuditEntry{TenantID: tenantID, Time: s.now(), Kind: store.AuditAPI, Actor: "control-plane", Action: "choose runtime",
		Target: sandboxID, Result: "ok", Detail: string(detail)})
}

// orDefault returns s, or def when s is empty.
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
