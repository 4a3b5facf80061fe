package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway"
	"github.com/airlockrun/airlock/internal/gateway/flowlog"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/template"
)

// CreateRequest asks for a new sandbox. Zero fields take the defaults.
type CreateRequest struct {
	Template       string
	Env            map[string]string
	CPUMillicores  int
	MemoryMB       int
	DiskMB         int
	TimeoutSeconds int
	Metadata       map[string]string
	// Network is the egress policy; nil denies everything.
	Network *policy.Policy
	// Runtime names the runtime to run on ("gvisor", "runc", …), RuntimeAuto to let the control plane
	// choose, or "" for DefaultRuntime (runtimes.go).
	Runtime string

	// start, set by a build, is the start command to run (templatestart.go); else the template's own.
	start *nodecontract.Start
}

var (
	envNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	metaKeyPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,62}$`)
)

// Limits on what a request may carry.
const (
	maxEnvVars      = 256
	maxEnvBytes     = 128 << 10
	maxMetadataKeys = 64
	maxMetaValueLen = 512
)

func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// normalize fills defaults and checks bounds; every problem is ErrInvalidArgument with a clear message.
func (r *CreateRequest) normalize() error {
	if r.Template == "" {
		r.Template = "default"
	}
	if _, _, err := template.ParseRef(r.Template); err != nil {
		return invalid("template %q: want a template's name (1-63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit), or NAME@sha256:<digest>", r.Template)
	}
	if r.Runtime != "" && r.Runtime != RuntimeAuto && checkRuntimeName(r.Runtime) != nil {
		return invalid("runtime %q must be gvisor, runc, vm, vm:qemu, vm:firecracker, auto or another runtime's name", r.Runtime)
	}
	if r.CPUMillicores == 0 {
		r.CPUMillicores = DefaultCPU
	}
	if r.CPUMillicores < 100 || r.CPUMillicores > MaxCPU {
		return invalid("cpu must be between 100 and %d millicores, got %d", MaxCPU, r.CPUMillicores)
	}
	if r.MemoryMB == 0 {
		r.MemoryMB = DefaultMemMB
	}
	if r.MemoryMB < MinMemMB || r.MemoryMB > MaxMemMB {
		return invalid("memory_mb must be between %d and %d, got %d", MinMemMB, MaxMemMB, r.MemoryMB)
	}
	if r.DiskMB == 0 {
		r.DiskMB = DefaultDiskMB
	}
	if r.DiskMB < MinDiskMB || r.DiskMB > MaxDiskMB {
		return invalid("disk_mb must be between %d and %d, got %d", MinDiskMB, MaxDiskMB, r.DiskMB)
	}
	if err := checkTimeout(r.TimeoutSeconds, true); err != nil {
		return err
	}
	if r.TimeoutSeconds == 0 {
		r.TimeoutSeconds = int(DefaultTimeout / time.Second)
	}
	if len(r.Env) > maxEnvVars {
		return invalid("env has %d variables; at most %d are allowed", len(r.Env), maxEnvVars)
	}
	size := 0
	for k, v := range r.Env {
		if !envNamePattern.MatchString(k) {
			return invalid("env name %q is not a valid variable name", k)
		}
		if containsNUL(v) {
			return invalid("env %s holds a NUL byte", k)
		}
		size += len(k) + len(v)
	}
	if size > maxEnvBytes {
		return invalid("env is %d bytes; at most %d are allowed", size, maxEnvBytes)
	}
	if r.Network != nil {
		if err := r.Network.Validate(); err != nil {
			return fmt.Errorf("network: %w", err)
		}
	}
	return checkMetadata(r.Metadata)
}

// checkMetadata checks a request's metadata: bounded, well-formed keys outside "airlock.", values
// without NUL.
func checkMetadata(meta map[string]string) error {
	if len(meta) > maxMetadataKeys {
		return invalid("metadata has %d keys; at most %d are allowed", len(meta), maxMetadataKeys)
	}
	for k, v := range meta {
		if reservedMetadata(k) {
			return invalid("metadata key %q: keys under \"airlock.\" are reserved", k)
		}
		if !metaKeyPattern.MatchString(k) {
			return invalid("metadata key %q must be 1-63 letters, digits or _.-/ and start with a letter or digit", k)
		}
		if len(v) > maxMetaValueLen || containsNUL(v) {
			return invalid("metadata %s: value must be at most %d bytes, without NUL", k, maxMetaValueLen)
		}
	}
	return nil
}

func checkTimeout(secs int, zeroOK bool) error {
	if secs == 0 && zeroOK {
		return nil
	}
	if secs <= 0 || time.Duration(secs)*time.Second > MaxTimeout {
		return invalid("timeout_seconds must be between 1 and %d, got %d", int(MaxTimeout/time.Second), secs)
	}
	return nil
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// CreateSandbox records a new sandbox, boots it on the node, and returns it running, or failed with the
// reason when the boot failed (the error then says why too).
func (s *sandboxes) CreateSandbox(ctx context.Context, tenantID string, req CreateRequest) (store.Sandbox, error) {
	if err := req.normalize(); err != nil {
		return store.Sandbox{}, err
	}
	if err := s.checkNetwork(req.Network); err != nil {
		return store.Sandbox{}, err
	}
	if err := s.keyring.checkKey(ctx, tenantID); err != nil {
		return store.Sandbox{}, err
	}
	ref, err := s.placer.resolveTemplate(ctx, req.Template)
	if err != nil {
		return store.Sandbox{}, err
	}
	req.Template = ref // what the sandbox records: the image's digest, whatever the name points at later
	spec := store.SandboxSpec{CPUMillicores: req.CPUMillicores, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB,
		TimeoutSeconds: req.TimeoutSeconds}
	rt, why, err := s.placer.chooseRuntime(ctx, tenantID, req.Template, req.Runtime, false)
	if err != nil {
		return store.Sandbox{}, err
	}
	pl, err := s.placer.place(ctx, spec, "", rt.Name, imageOfRef(req.Template))
	if err != nil {
		return store.Sandbox{}, err
	}
	defer pl.done()
	if err := pl.n.CheckTemplate(ctx, req.Template); err != nil {
		return store.Sandbox{}, err
	}
	var netPolicy policy.Policy
	var netJSON []byte
	if req.Network != nil {
		netPolicy = *req.Network
		var err error
		if netJSON, err = json.Marshal(netPolicy); err != nil {
			return store.Sandbox{}, fmt.Errorf("encode network policy: %w", err)
		}
	}
	start := req.start
	if start == nil {
		start = s.placer.startFor(ctx, req.Template, rt.Name, pl.n.ID())
	}
	env := make([]string, 0, len(req.Env))
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	nreq := nodecontract.CreateRequest{
		TenantID: tenantID,
		Template: req.Template,
		Runtime:  rt.Name,
		Env:      env,
		Limits: nodecontract.Limits{
			CPUMillis:   int64(req.CPUMillicores),
			MemoryBytes: int64(req.MemoryMB) << 20,
			DiskBytes:   int64(req.DiskMB) << 20,
		},
		Network: netPolicy,
		Start:   start,
	}
	if nreq.FlowKey, nreq.LogRetention, err = s.accounts.flowLog(ctx, tenantID); err != nil {
		return store.Sandbox{}, err
	}
	now := s.now()
	ends := now.Add(time.Duration(req.TimeoutSeconds) * time.Second)
	sb, err := s.store.CreateSandbox(ctx, store.Sandbox{
		NetworkPolicy: netJSON,
		ID:            s.placer.newSandboxID(ctx, pl.n, nreq),
		TenantID:      tenantID,
		NodeID:        pl.n.ID(),
		Template:      req.Template,
		State:         store.StateCreating,
		Spec:          spec,
		Metadata:      withRuntime(req.Metadata, s.placer.runtimeOf(ctx, pl.n.ID(), rt), why),
		CreatedAt:     now,
		EndsAt:        &ends,
	})
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("create sandbox: %w", err)
	}
	unlock := s.locks.Lock(sb.ID)
	defer unlock()

	// The boot goes on if the caller goes away: the record exists and must end in a settled state.
	bootFor := 2 * time.Minute
	if start != nil {
		bootFor += max(start.Timeout, nodecontract.DefaultStartTimeout)
	}
	bootCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bootFor)
	defer cancel()
	// The record counts on the node now (place).
	pl.done()
	s.placer.auditRuntime(tenantID, sb.ID, rt.Name, why)
	nreq.ID = sb.ID
	berr := pl.n.CreateSandbox(bootCtx, nreq)
	if berr != nil {
		s.log.Error("boot sandbox", "sandbox", sb.ID, "err", berr)
		reason := "boot failed"
		if errors.Is(berr, errdefs.ErrResourceExhausted) || errors.Is(berr, errdefs.ErrUnavailable) {
			reason = "boot failed: " + berr.Error()
		}
		failed, err := s.transition(bootCtx, sb, store.StateFailed, reason)
		if err != nil {
			return store.Sandbox{}, errors.Join(berr, err)
		}
		return failed, fmt.Errorf("create sandbox %s: %w", sb.ID, berr)
	}
	started := s.now()
	ends = started.Add(time.Duration(req.TimeoutSeconds) * time.Second)
	return s.update(bootCtx, sb, func(sb *store.Sandbox) error {
		if err := store.CheckTransition(sb.State, store.StateRunning); err != nil {
			return err
		}
		sb.State, sb.StartedAt, sb.EndsAt = store.StateRunning, &started, &ends
		return nil
	})
}

// update applies f to the stored sandbox and saves it, re-reading and retrying when another writer
// changed it in between.
func (s *sandboxes) update(ctx context.Context, sb store.Sandbox, f func(*store.Sandbox) error) (store.Sandbox, error) {
	for attempt := 0; ; attempt++ {
		next := sb
		if err := f(&next); err != nil {
			return sb, err
		}
		saved, err := s.store.UpdateSandbox(ctx, next)
		if err == nil {
			return saved, nil
		}
		if !errors.Is(err, errdefs.ErrConflict) || attempt >= 5 {
			return sb, fmt.Errorf("update sandbox %s: %w", sb.ID, err)
		}
		fresh, gerr := s.store.GetSandbox(ctx, sb.TenantID, sb.ID)
		if gerr != nil {
			return sb, fmt.Errorf("update sandbox %s: %w", sb.ID, gerr)
		}
		if fresh.Version == sb.Version {
			return sb, fmt.Errorf("update sandbox %s: %w", sb.ID, err) // an illegal transition, not a race
		}
		sb = fresh
	}
}

// transition moves sb to state to with reason, stamping StoppedAt for stopped and failed.
func (s *sandboxes) transition(ctx context.Context, sb store.Sandbox, to store.SandboxState, reason string) (store.Sandbox, error) {
	return s.update(ctx, sb, func(sb *store.Sandbox) error {
		if err := store.CheckTransition(sb.State, to); err != nil {
			return err
		}
		sb.State = to
		if reason != "" {
			sb.Reason = reason
		}
		if to == store.StateStopped || to == store.StateFailed {
			t := s.now()
			sb.StoppedAt = &t
		}
		return nil
	})
}

// GetSandbox returns the tenant's sandbox.
func (s *sandboxes) GetSandbox(ctx context.Context, tenantID, id string) (store.Sandbox, error) {
	sb, err := s.store.GetSandbox(ctx, tenantID, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return sb, fmt.Errorf("sandbox %s not found: %w", id, errdefs.ErrNotFound)
	}
	return sb, err
}

// ListSandboxes returns one page of the tenant's sandboxes.
func (s *sandboxes) ListSandboxes(ctx context.Context, tenantID string, f store.SandboxFilter) ([]store.Sandbox, string, error) {
	return s.store.ListSandboxes(ctx, tenantID, f)
}

// DeleteSandbox destroys the tenant's sandbox now. Deleting a sandbox that already stopped succeeds.
func (s *sandboxes) DeleteSandbox(ctx context.Context, tenantID, id string) error {
	unlock := s.locks.Lock(id)
	defer unlock()
	sb, err := s.GetSandbox(ctx, tenantID, id)
	if err != nil {
		return err
	}
	if se := sb.Metadata[SessionMetadataKey]; se != "" && sb.State != store.StateStopped {
		return fmt.Errorf("sandbox %s runs session %s: pause or delete the session instead: %w", id, se, errdefs.ErrConflict)
	}
	_, err = s.destroyLocked(context.WithoutCancel(ctx), sb, "deleted")
	return err
}

// destroyLocked tears sb down on its node and records it stopped with reason. The caller holds sb's lock.
func (s *sandboxes) destroyLocked(ctx context.Context, sb store.Sandbox, reason string) (store.Sandbox, error) {
	return s.endLocked(ctx, sb, reason, true)
}

// endLocked records sb stopping, destroys it on its node if onNode, and records it stopped with reason.
func (s *sandboxes) endLocked(ctx context.Context, sb store.Sandbox, reason string, onNode bool) (store.Sandbox, error) {
	if sb.State == store.StateStopped {
		return sb, nil
	}
	var err error
	if sb.State != store.StateStopping {
		if sb, err = s.transition(ctx, sb, store.StateStopping, ""); err != nil {
			return sb, err
		}
	}
	var derr error
	if onNode {
		var n Node
		if n, derr = s.placer.sandboxNode(ctx, sb); derr == nil {
			derr = n.DestroySandbox(ctx, sb.ID)
		}
	}
	if derr != nil && s.placer.nodeGone(ctx, sb.NodeID) {
		// Its node is down or left: what is left of the sandbox there goes when the node starts again
		// (reconcileRemote destroys what the Store does not want).
		s.log.Warn("the sandbox's node is down: recorded stopped, to be removed when the node is back", "sandbox", sb.ID, "node", sb.NodeID, "err", derr)
		derr = nil
	}
	if derr != nil {
		s.log.Error("destroy sandbox", "sandbox", sb.ID, "err", derr)
		sb, err = s.transition(ctx, sb, store.StateFailed, "destroy failed: "+derr.Error())
		return sb, errors.Join(fmt.Errorf("destroy sandbox %s: %w", sb.ID, derr), err)
	}
	if sb.Reason != "" && sb.State == store.StateStopping && reason == "deleted" {
		reason = "" // keep the first reason (e.g. a failure) when the user deletes afterwards
	}
	return s.transition(ctx, sb, store.StateStopped, reason)
}

// SetTimeout makes the tenant's running sandbox end secs seconds from now.
func (s *sandboxes) SetTimeout(ctx context.Context, tenantID, id string, secs int) (store.Sandbox, error) {
	if err := checkTimeout(secs, false); err != nil {
		return store.Sandbox{}, err
	}
	unlock := s.locks.Lock(id)
	defer unlock()
	sb, err := s.GetSandbox(ctx, tenantID, id)
	if err != nil {
		return store.Sandbox{}, err
	}
	if se := sb.Metadata[SessionMetadataKey]; se != "" {
		return sb, fmt.Errorf("sandbox %s runs session %s: set the session's timeout instead: %w", id, se, errdefs.ErrConflict)
	}
	return s.update(ctx, sb, func(sb *store.Sandbox) error {
		if sb.State != store.StateRunning {
			return fmt.Errorf("sandbox %s is %s, not running: %w", sb.ID, sb.State, errdefs.ErrFailedPrecondition)
		}
		ends := s.now().Add(time.Duration(secs) * time.Second)
		sb.EndsAt = &ends
		sb.Spec.TimeoutSeconds = secs
		return nil
	})
}

// NetworkPolicy decodes a sandbox's stored egress policy (the zero Policy, deny all, when none was given).
func NetworkPolicy(sb store.Sandbox) (policy.Policy, error) {
	var p policy.Policy
	if len(sb.NetworkPolicy) == 0 {
		return p, nil
	}
	if err := json.Unmarshal(sb.NetworkPolicy, &p); err != nil {
		return p, fmt.Errorf("sandbox %s: stored network policy: %w", sb.ID, err)
	}
	return p, nil
}

// checkNetwork refuses a tenant's policy (nil: none) whose rules would open a guarded range the
// operator has not opened (policy.Guards.Check). The gateway refuses such connections anyway; this
// says so at once, with a 400 that names the range.
func (s *sandboxes) checkNetwork(p *policy.Policy) error {
	if p == nil {
		return nil
	}
	if err := s.guards.Check(*p); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	return nil
}

// SetNetwork replaces the egress policy of the tenant's running sandbox. New connections follow it at once.
func (s *sandboxes) SetNetwork(ctx context.Context, tenantID, id string, p policy.Policy) (store.Sandbox, error) {
	sb, err := s.setNetwork(ctx, tenantID, id, p)
	if err != nil {
		return sb, err
	}
	// A session's sandbox: the session keeps the policy for the sandboxes it resumes into.
	if se := sb.Metadata[SessionMetadataKey]; se != "" {
		if err := s.sessions.setSessionNetwork(ctx, tenantID, se, sb.NetworkPolicy); err != nil {
			return sb, err
		}
	}
	return sb, nil
}

func (s *sandboxes) setNetwork(ctx context.Context, tenantID, id string, p policy.Policy) (store.Sandbox, error) {
	if err := p.Validate(); err != nil {
		return store.Sandbox{}, fmt.Errorf("network: %w", err)
	}
	if err := s.checkNetwork(&p); err != nil {
		return store.Sandbox{}, err
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return store.Sandbox{}, err
	}
	unlock := s.locks.Lock(id)
	defer unlock()
	sb, err := s.GetSandbox(ctx, tenantID, id)
	if err != nil {
		return store.Sandbox{}, err
	}
	sb, err = s.update(ctx, sb, func(sb *store.Sandbox) error {
		if sb.State != store.StateRunning {
			return fmt.Errorf("sandbox %s is %s, not running: %w", sb.ID, sb.State, errdefs.ErrFailedPrecondition)
		}
		sb.NetworkPolicy = raw
		return nil
	})
	if err != nil {
		return sb, err
	}
	n, err := s.placer.sandboxNode(ctx, sb)
	if err == nil {
		err = n.SetNetwork(ctx, id, p)
	}
	if err != nil {
		return sb, fmt.Errorf("sandbox %s: apply network policy: %w", id, err)
	}
	return sb, nil
}

// Egress returns the network flows of the tenant's sandbox that f selects, newest first (see
// flowlog.Log.Read). A stopped or failed sandbox's flows stay readable. Another tenant's sandbox is not
// found.
func (s *sandboxes) Egress(ctx context.Context, tenantID, id string, f flowlog.Filter) ([]gateway.Flow, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	sb, err := s.GetSandbox(ctx, tenantID, id)
	if err != nil {
		return nil, err
	}
	n, err := s.placer.sandboxNode(ctx, sb)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: egress flows: %w", id, err)
	}
	if f.Key, err = s.accounts.flowKey(ctx, tenantID); err != nil {
		return nil, fmt.Errorf("sandbox %s: egress flows: %w", id, err)
	}
	flows, err := n.Flows(ctx, sb.ID, f)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: egress flows: %w", id, err)
	}
	// The log is per sandbox and sandbox IDs are unique; keep only the tenant's flows all the same.
	out := flows[:0]
	for _, fl := range flows {
		if fl.TenantID == tenantID {
			out = append(out, fl)
		}
	}
	return out, nil
}

// link returns the channel to the daemon of the tenant's running sandbox, for the sandbox I/O calls
// (sandboxio.go).
func (s *sandboxes) link(ctx context.Context, tenantID, id string) (*link.Client, error) {
	sb, err := s.GetSandbox(ctx, tenantID, id)
	if err != nil {
		return nil, err
	}
	if sb.State != store.StateRunning {
		msg := fmt.Sprintf("sandbox %s is %s", sb.ID, sb.State)
		if sb.Reason != "" {
			msg += " (" + sb.Reason + ")"
		}
		return nil, fmt.Errorf("%s: %w", msg, errdefs.ErrFailedPrecondition)
	}
	n, err := s.placer.sandboxNode(ctx, sb)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	l, err := n.Link(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	return l, nil
}

// HandleSandboxExit is how the in-process node reports a sandbox that stopped by itself (its daemon or
// runtime died, or it ran out of memory): the sandbox is marked failed with the reason and cleaned up on
// the node.
func (s *nodeCalls) HandleSandboxExit(id, reason string) {
	if s.nodes.local != nil {
		s.sandboxes.sandboxExited(s.nodes.local.ID(), id, reason)
	}
}

// sandboxExited handles the exit of sandbox id that nodeID reported.
func (s *sandboxes) sandboxExited(nodeID, id, reason string) {
	if tenantID, sessionID := s.handleSandboxExit(nodeID, id, reason); sessionID != "" {
		s.sessions.sessionSandboxExited(tenantID, sessionID, id, reason)
	}
}

// handleSandboxExit records the exit and reports the sandbox's session, if it runs one.
func (s *sandboxes) handleSandboxExit(nodeID, id, reason string) (tenantID, sessionID string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	unlock := s.locks.Lock(id)
	defer unlock()
	n, err := s.placer.node(ctx, nodeID)
	if err != nil {
		s.log.Warn("sandbox exit from a node out of reach", "node", nodeID, "sandbox", id, "err", err)
		return "", ""
	}
	sb, err := s.store.GetSandboxAnyTenant(ctx, id)
	if err != nil || sb.NodeID != nodeID {
		s.log.Warn("sandbox exit for a sandbox not of the node", "node", nodeID, "sandbox", id, "err", err)
		_ = n.DestroySandbox(ctx, id)
		return "", ""
	}
	if sb.State != store.StateRunning && sb.State != store.StateCreating {
		return "", "" // already being stopped or settled: the exit is expected
	}
	s.log.Warn("sandbox failed", "sandbox", id, "reason", reason)
	if sb, err = s.transition(ctx, sb, store.StateFailed, reason); err != nil {
		s.log.Error("mark sandbox failed", "sandbox", id, "err", err)
		return "", ""
	}
	// A node gone stopped it already, or removes it when it starts again (reconcileRemote).
	if !s.placer.nodeGone(ctx, nodeID) {
		if err := n.DestroySandbox(ctx, id); err != nil {
			s.log.Error("clean up failed sandbox", "sandbox", id, "err", err)
		}
	}
	return sb.TenantID, sb.Metadata[SessionMetadataKey]
}

// Start reconciles the Store with what the node runs, then starts the lifecycle loops.
func (s *loops) Start(ctx context.Context) error {
	if err := s.sandboxes.reconcile(ctx); err != nil {
		return err
	}
	if err := s.sessions.reconcileSessions(ctx); err != nil {
		return err
	}
	if s.connections != nil {
		ts, err := s.store.ListTenants(ctx)
		if err != nil {
			return fmt.Errorf("start: %w", err)
		}
		ids := make([]string, len(ts))
		for i, t := range ts {
			ids[i] = t.ID
		}
		if err := s.connections.Start(ctx, ids); err != nil {
			return fmt.Errorf("start: %w", err)
		}
	}
	// Of several replicas, one runs the loops at a time: the leader (failover.go).
	s.holdReplicaLease()
	s.lead()
	s.every(leaderEvery, s.lead)
	s.every(s.reap, s.ifLeader(s.sandboxes.reapExpired))
	s.every(s.idle, s.ifLeader(s.sessions.pauseIdleSessions))
	s.every(s.idle, s.ifLeader(s.sessions.endSessions))
	s.every(s.gcEvery, s.ifLeader(s.accounts.expireRecords))
	s.every(s.pruneEvery, s.ifLeader(s.accounts.pruneLogs))
	s.every(s.keysEvery, s.ifLeader(s.keyring.checkTenantKeys))
	s.every(lostSweepEvery, s.ifLeader(s.sandboxes.sweepLost))
	if s.nodes.clustered() {
		s.every(failOverEvery, s.ifLeader(s.failOver))
		s.every(opLeaseEvery, s.ifLeader(s.adoptOrphanOps))
		s.every(time.Minute, s.ifLeader(s.settleOrphanSnapshots))
	}
	if s.nodes.local != nil {
		unkept := map[string]time.Time{} // the image GC's, on this loop's goroutine only
		s.every(s.gcEvery, s.ifLeader(func() { s.placer.collectImages(unkept, s.imageGrace) }))
	}
	if s.snapshots != nil {
		s.every(s.gcEvery, s.ifLeader(func() { s.book.collectSnapshots(s.gcGrace) }))
		s.every(s.rollEvery, s.ifLeader(s.sessions.rollSnapshots))
		s.every(s.pruneEvery, s.ifLeader(s.book.pruneSnapshots))
	}
	return nil
}

// every runs f every interval in a goroutine the Service owns, until Shutdown.
func (s *loops) every(interval time.Duration, f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				f()
			}
		}
	}()
}

// reapExpired destroys the sandboxes whose timeout passed.
func (s *sandboxes) reapExpired() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sbs, err := s.store.ListExpiredSandboxes(ctx, s.now(), 100)
	if err != nil {
		s.log.Error("list expired sandboxes", "err", err)
		return
	}
	for _, sb := range sbs {
		if !s.nodes.serves(sb.NodeID) {
			continue
		}
		unlock := s.locks.Lock(sb.ID)
		fresh, err := s.store.GetSandbox(ctx, sb.TenantID, sb.ID)
		if err == nil && fresh.State == store.StateRunning && fresh.EndsAt != nil && !fresh.EndsAt.After(s.now()) {
			s.log.Info("sandbox timed out", "sandbox", sb.ID)
			if _, err := s.destroyLocked(ctx, fresh, "timeout"); err != nil {
				s.log.Error("destroy timed-out sandbox", "sandbox", sb.ID, "err", err)
			}
		}
		unlock()
	}
}

// reconcile settles what a previous run left on the in-process node: running sandboxes the node can
// re-adopt stay running; those it lost are failed; half-done creates and deletes are finished;
// sandboxes the node has but the Store does not want are destroyed. (A node of its own is settled when
// it restarts: reconcileRemote.)
func (s *sandboxes) reconcile(ctx context.Context) error {
	if s.nodes.local == nil {
		return nil
	}
	return s.reconcileNode(ctx, s.nodes.local, time.Time{})
}

// reconcileRemote settles the sandboxes of node nodeID, whose process started again (its first
// heartbeat arrived at since): as reconcile, except that creates recorded since are left alone (they
// were sent to the new process).
func (s *sandboxes) reconcileRemote(ctx context.Context, nodeID string, since time.Time) error {
	n, err := s.placer.node(ctx, nodeID)
	if err != nil {
		return err
	}
	return s.reconcileNode(ctx, n, since)
}

// reconcileNode settles n's sandboxes after n (or this control plane with it) started again. Sandboxes
// being created since createdSince (if not zero) are left alone.
func (s *sandboxes) reconcileNode(ctx context.Context, n Node, createdSince time.Time) error {
	sbs, err := s.placer.sandboxesOnNode(ctx, n.ID(), activeSandbox)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	var running []nodecontract.RecoverRequest
	// keep are the sandboxes the node may have that are not to be destroyed as orphans.
	keep := map[string]bool{}
	for _, sb := range sbs {
		switch {
		case sb.State == store.StateRunning:
			p, err := NetworkPolicy(sb)
			if err != nil {
				s.log.Error("reconcile", "sandbox", sb.ID, "err", err)
				continue // not adopted: failed below, and destroyed
			}
			key, keepFlows, err := s.accounts.flowLog(ctx, sb.TenantID)
			if errors.Is(err, errdefs.ErrKeyUnavailable) {
				// The tenant's key is gone: its sandbox runs no longer (failed below, and destroyed).
				s.log.Error("reconcile", "sandbox", sb.ID, "err", err)
				continue
			}
			if err != nil {
				// Not known now (the Store, say): fail nothing, try again later.
				return fmt.Errorf("reconcile: %w", err)
			}
			running = append(running, nodecontract.RecoverRequest{ID: sb.ID, TenantID: sb.TenantID, Network: p, CAID: sb.Metadata[SessionMetadataKey],
				Runtime: sb.Metadata[RuntimeMetadataKey], Limits: nodecontract.Limits{CPUMillis: int64(sb.Spec.CPUMillicores),
					MemoryBytes: int64(sb.Spec.MemoryMB) << 20, DiskBytes: int64(sb.Spec.DiskMB) << 20}, FlowKey: key, LogRetention: keepFlows})
		case sb.State == store.StateCreating && !createdSince.IsZero() && !sb.CreatedAt.Before(createdSince):
			keep[sb.ID] = true
		}
	}
	ids, err := n.Recover(ctx, running)
	if err != nil {
		// A node that cannot answer has not lost its sandboxes: fail none of them.
		return fmt.Errorf("reconcile node %s: %w", n.ID(), err)
	}
	for _, id := range ids {
		keep[id] = true
	}
	for _, sb := range sbs {
		if keep[sb.ID] {
			continue
		}
		switch sb.State {
		case store.StateRunning:
			_ = n.DestroySandbox(ctx, sb.ID)
			_, err = s.transition(ctx, sb, store.StateFailed, "lost: the sandbox was gone after airlock restarted")
			if se := sb.Metadata[SessionMetadataKey]; err == nil && se != "" && !createdSince.IsZero() {
				// A node of its own lost it: the session goes on from its latest snapshot.
				s.bg.Add(1)
				go func() {
					defer s.bg.Done()
					s.sessions.sessionSandboxExited(sb.TenantID, se, sb.ID, nodeLostReason+n.ID()+" restarted without it")
				}()
			}
		case store.StateCreating:
			_ = n.DestroySandbox(ctx, sb.ID)
			_, err = s.transition(ctx, sb, store.StateFailed, "interrupted: airlock restarted during create")
		default: // stopping
			_, err = s.destroyLocked(ctx, sb, "")
		}
		if err != nil && !(errors.Is(err, errdefs.ErrConflict) && s.settledMeanwhile(ctx, sb)) {
			return fmt.Errorf("reconcile %s: %w", sb.ID, err)
		}
	}
	onNode, err := n.Sandboxes(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	// Sandboxes recorded on the node since sbs was listed are not orphans: creates and restores that
	// started meanwhile (among them the resumes of the sessions failed above, which may well be placed
	// on this node). A create is recorded before the node is asked, so listing again after the node
	// answered finds every one the node could have reported.
	later, err := s.placer.sandboxesOnNode(ctx, n.ID(), activeSandbox)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	listed := make(map[string]bool, len(sbs))
	for _, sb := range sbs {
		listed[sb.ID] = true
	}
	for _, sb := range later {
		if !listed[sb.ID] {
			keep[sb.ID] = true
		}
	}
	for _, id := range onNode {
		if !keep[id] {
			s.log.Info("destroying orphan sandbox", "node", n.ID(), "sandbox", id)
			if err := n.DestroySandbox(ctx, id); err != nil {
				s.log.Error("destroy orphan", "sandbox", id, "err", err)
			}
		}
	}
	return nil
}

// settledMeanwhile reports whether sb reached stopped or failed after reconcile listed it: another
// control plane, or the teardown a previous run of this one left behind, finished it first.
func (s *sandboxes) settledMeanwhile(ctx context.Context, sb store.Sandbox) bool {
	cur, err := s.store.GetSandbox(ctx, sb.TenantID, sb.ID)
	return err == nil && (cur.State == store.StateStopped || cur.State == store.StateFailed)
}

// Shutdown stops the loops, then stops every sandbox of this node and records them stopped, so that a
// later start finds them settled and nothing of them remains on the host.
func (s *loops) Shutdown(ctx context.Context) error {
	// This replica's lease lasts until everything below is done (its pauses write snapshots).
	defer s.releaseReplicaLease()
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.wg.Wait()
	s.resign(ctx)
	// Sessions are paused, not lost: a restart resumes them where they were.
	s.sessions.pauseAllForShutdown(ctx)
	s.bg.Wait()
	// The clients of the other nodes close last, after the leases on operations are given up.
	defer s.nodes.close()
	defer s.ops.stopAll()
	// Only the in-process node's sandboxes: the other nodes run on without this replica.
	if s.nodes.local == nil {
		return nil
	}
	var errs []error
	for {
		sbs, err := s.placer.sandboxesOnNode(ctx, s.nodes.local.ID(), activeSandbox)
		if err != nil {
			return err
		}
		n := 0
		for _, sb := range sbs {
			n++
			unlock := s.locks.Lock(sb.ID)
			if fresh, err := s.store.GetSandbox(ctx, sb.TenantID, sb.ID); err == nil {
				if _, err := s.sandboxes.destroyLocked(ctx, fresh, "airlock shut down"); err != nil {
					errs = append(errs, err)
				}
			}
			unlock()
		}
		if n == 0 || len(errs) > 0 {
			break
		}
	}
	return errors.Join(errs...)
}
