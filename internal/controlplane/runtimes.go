package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/node"
	"github.com/airlockrun/airlock/internal/store"
)

// Routing: which runtime runs a sandbox. A create names one (CreateRequest.Runtime: "gvisor", "runc",
// …), asks for RuntimeAuto, or names none (DefaultRuntime). The tenant must be allowed it — the
// operator's tenant may use every runtime, any other gVisor only until the operator allows more
// (SetTenantRuntimes): runc is weaker isolation — and a node that is up must have it (nodes report
// their runtimes in heartbeats). RuntimeAuto picks gVisor for a session (its pauses keep memory and
// processes, which runc's do not) and for a sandbox the fastest to start the tenant may use. The choice
// and its reason are in the sandbox's metadata (RuntimeMetadataKey, RuntimeReasonMetadataKey) and the
// tenant's audit log.

// Runtime names a create may give.
const (
	RuntimeAuto    = "auto"
	DefaultRuntime = "gvisor"
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
	// AbilitiesMetadataKey lists, comma-separated, what the runtime can do (node.Runtime.Abilities).
	AbilitiesMetadataKey = "airlock.abilities"
)

var runtimePattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

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

// SetTenantRuntimes sets the runtimes tenantID may use (the operator's call). An empty list restores
// the default.
func (s *accounts) SetTenantRuntimes(ctx context.Context, tenantID string, names []string) ([]string, error) {
	if _, err := s.store.GetTenant(ctx, tenantID); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var clean []string
	for _, n := range names {
		if n != AnyRuntime && (!runtimePattern.MatchString(n) || n == RuntimeAuto) {
			return nil, invalid("runtime %q is not a runtime's name (gvisor, runc, …, or * for every one)", n)
		}
		if !seen[n] {
			seen[n] = true
			clean = append(clean, n)
		}
	}
	sort.Strings(clean)
	if len(clean) == 0 {
		cur, err := s.store.GetDoc(ctx, tenantRuntimesDoc(tenantID))
		if err == nil {
			err = s.store.DeleteDoc(ctx, tenantRuntimesDoc(tenantID), cur.Version)
		}
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return nil, err
		}
		got, _, err := s.TenantRuntimes(ctx, tenantID)
		return got, err
	}
	b, err := json.Marshal(tenantRuntimes{Runtimes: clean})
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		cur, err := s.store.GetDoc(ctx, tenantRuntimesDoc(tenantID))
		version := int64(0)
		if err == nil {
			version = cur.Version
		} else if !errors.Is(err, errdefs.ErrNotFound) {
			return nil, err
		}
		_, err = s.store.PutDoc(ctx, store.Doc{Key: tenantRuntimesDoc(tenantID), Value: b, Version: version})
		if err == nil || !errors.Is(err, errdefs.ErrConflict) || attempt >= 5 {
			return clean, err
		}
	}
}

// nodeRuntimes reports the runtimes of the node with ID id as last heard (the in-process node's: now).
// A node that reports none is an older one: gVisor.
func (s *placer) nodeRuntimes(ctx context.Context, id string) []node.Runtime {
	if s.nodes.isLocal(id) {
		if rs, err := s.nodes.local.Runtimes(ctx); err == nil {
			return rs
		}
	} else if l, err := s.nodeLive(ctx, id); err == nil && len(l.Runtimes) > 0 {
		return l.Runtimes
	}
	return []node.Runtime{{Name: DefaultRuntime, Abilities: []string{node.AbilityMemorySnapshots, node.AbilityFork}}}
}

// runtimeOf reports rt as node id has it (its abilities there), or rt.
func (s *placer) runtimeOf(ctx context.Context, id string, rt node.Runtime) node.Runtime {
	if r, ok := s.runtimeOn(ctx, id, rt.Name); ok {
		return r
	}
	return rt
}

// runtimeOn reports the runtime named name of node id, if it has it.
func (s *placer) runtimeOn(ctx context.Context, id, name string) (node.Runtime, bool) {
	for _, r := range s.nodeRuntimes(ctx, id) {
		if r.Name == name {
			return r, true
		}
	}
	return node.Runtime{}, false
}

// chooseRuntime decides the runtime of a new sandbox of tenantID (of a session, if session) from the
// requested one, and says why.
func (s *placer) chooseRuntime(ctx context.Context, tenantID, requested string, session bool) (rt node.Runtime, reason string, err error) {
	allowed, _, err := s.accounts.TenantRuntimes(ctx, tenantID)
	if err != nil {
		return node.Runtime{}, "", err
	}
	caps, err := s.placeable(ctx)
	if err != nil {
		return node.Runtime{}, "", err
	}
	available := map[string]node.Runtime{}
	for id := range caps {
		for _, r := range s.nodeRuntimes(ctx, id) {
			if _, seen := available[r.Name]; !seen {
				available[r.Name] = r
			}
		}
	}
	name, reason, err := pickRuntime(tenantID, requested, session, allowed, available, len(caps) > 0)
	if err != nil {
		return node.Runtime{}, "", err
	}
	if r, ok := available[name]; ok {
		return r, reason, nil
	}
	return node.Runtime{Name: name, Abilities: []string{}}, reason, nil
}

// pickRuntime is chooseRuntime's decision, by name, from the runtimes the tenant may use (nil: every
// one) and those the nodes up have (anyUp: there is a node up to judge by).
func pickRuntime(tenantID, requested string, session bool, allowed []string, available map[string]node.Runtime, anyUp bool) (name, reason string, err error) {
	may := func(n string) bool { return allowed == nil || slices.Contains(allowed, n) }
	_, hasRunc := available[runtimeRunc]
	switch requested {
	case "":
		name, reason = DefaultRuntime, "the default runtime"
	case RuntimeAuto:
		switch {
		case session:
			name, reason = DefaultRuntime, "auto: a session's pauses keep memory and processes, which gvisor's snapshots do"
		case may(runtimeRunc) && hasRunc:
			name, reason = runtimeRunc, "auto: the fastest start the tenant may use"
		default:
			name, reason = DefaultRuntime, "auto: the tenant may not use runc, or no node has it"
		}
	default:
		name, reason = requested, "requested"
	}
	if !may(name) {
		return "", "", fmt.Errorf("tenant %s may not use the %s runtime (it may use %s); the operator allows runtimes per tenant: %w",
			tenantID, name, strings.Join(allowed, ", "), errdefs.ErrPermissionDenied)
	}
	if _, ok := available[name]; !ok && anyUp {
		return "", "", fmt.Errorf("no node that is up has the %s runtime: %w", name, errdefs.ErrUnavailable)
	}
	return name, reason, nil
}

// withRuntime returns meta with the runtime chosen, why, and what it can do.
func withRuntime(meta map[string]string, rt node.Runtime, reason string) map[string]string {
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
