package store

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// SessionState is where a session is in its lifecycle. Every change of state is a transition the table
// below allows; anything else is an error, never a silent no-op.
//
//	creating → running | failed | deleting
//	running  → pausing | resuming | failed | deleting   (running → resuming: restore to another snapshot)
//	pausing  → paused | running | failed | deleting     (pausing → running: the pause was abandoned)
//	paused   → resuming | deleting
//	resuming → running | paused | failed | deleting     (resuming → paused: the resume failed, the snapshot is intact)
//	failed   → resuming | deleting
//	deleting → deleted
//	deleted  (terminal)
type SessionState string

// The session states.
const (
	SessionCreating SessionState = "creating" // its first sandbox is being placed and booted
	SessionRunning  SessionState = "running"  // has a running sandbox; accepts work
	SessionPausing  SessionState = "pausing"  // being snapshotted; its sandbox is destroyed once the snapshot is complete
	SessionPaused   SessionState = "paused"   // no sandbox; resumes from HeadSnapshotID
	SessionResuming SessionState = "resuming" // a new sandbox is being restored from a snapshot
	SessionFailed   SessionState = "failed"   // broke; may be resumed from its last complete snapshot
	SessionDeleting SessionState = "deleting" // its sandbox and snapshots are being removed
	SessionDeleted  SessionState = "deleted"  // nothing of it is left but the record; terminal
)

// sessionTransitions is the session state machine: for each state, the states it may move to.
var sessionTransitions = map[SessionState][]SessionState{
	SessionCreating: {SessionRunning, SessionFailed, SessionDeleting},
	SessionRunning:  {SessionPausing, SessionResuming, SessionFailed, SessionDeleting},
	SessionPausing:  {SessionPaused, SessionRunning, SessionFailed, SessionDeleting},
	SessionPaused:   {SessionResuming, SessionDeleting},
	SessionResuming: {SessionRunning, SessionPaused, SessionFailed, SessionDeleting},
	SessionFailed:   {SessionResuming, SessionDeleting},
	SessionDeleting: {SessionDeleted},
	SessionDeleted:  nil,
}

// SessionStates returns every valid session state, in lifecycle order.
func SessionStates() []SessionState {
	return []SessionState{SessionCreating, SessionRunning, SessionPausing, SessionPaused, SessionResuming,
		SessionFailed, SessionDeleting, SessionDeleted}
}

// Valid reports whether s is one of the defined session states.
func (s SessionState) Valid() bool {
	_, ok := sessionTransitions[s]
	return ok
}

// Terminal reports whether no transition leaves s.
func (s SessionState) Terminal() bool {
	return s.Valid() && len(sessionTransitions[s]) == 0
}

// CanTransition reports whether the session state machine allows moving from s to to. Staying in the same
// state is not a transition and reports false; invalid states report false.
func (s SessionState) CanTransition(to SessionState) bool {
	return slices.Contains(sessionTransitions[s], to)
}

// String returns the state's name.
func (s SessionState) String() string { return string(s) }

// CheckSessionTransition reports whether a session stored in state from may be saved in state to: nil when
// to equals from (an update that changes other fields only) or when from.CanTransition(to); otherwise an
// error wrapping errdefs.ErrConflict that names both states (errdefs.ErrInvalidArgument if to is not a
// state at all).
func CheckSessionTransition(from, to SessionState) error {
	if !to.Valid() {
		return fmt.Errorf("session state %q: %w", to, errdefs.ErrInvalidArgument)
	}
	if from == to || from.CanTransition(to) {
		return nil
	}
	return fmt.Errorf("illegal session state transition from %s to %s: %w", from, to, errdefs.ErrConflict)
}

// SessionSpec is what every sandbox of a session is started with. Zero resources mean "the default".
//
// The environment variables are deliberately not part of it: they may hold secrets, and the store keeps
// nothing that does.
type SessionSpec struct {
	Template string
	// Runtime names the runtime the session's sandboxes run on ("": gVisor, for sessions made before
	// runtimes were chosen).
	Runtime       string
	CPUMillicores int // 1000 = one CPU
	MemoryMB      int
	DiskMB        int
	// NetworkPolicy is the session's egress policy as JSON, opaque to the Store (the gateway's policy
	// package reads it); nil when none was given, which means deny everything.
	NetworkPolicy []byte
}

// Session is what users hold for long work: a spec, a timeline of snapshots and, while it runs, one
// sandbox. Pausing snapshots it and destroys the sandbox; resuming restores a new sandbox, on any node,
// from HeadSnapshotID.
type Session struct {
	ID       string // "se_" + random; see NewID
	TenantID string
	State    SessionState
	Reason   string // why the session failed, or what its last transition was for; "" otherwise
	Spec     SessionSpec
	Metadata map[string]string // the user's labels; never nil when returned by a Store
	// IdleTimeoutSeconds is how long a running session may go without activity (see TouchSession) before
	// ListIdleSessions reports it for auto-pause; 0 means never.
	IdleTimeoutSeconds int
	AutoResume         bool // resume a paused session when work arrives for it
	// TimeoutSeconds bounds each run of the session: whenever it starts running (created or resumed),
	// the control plane sets EndsAt that far ahead; 0 means no bound. The Store keeps it as given.
	TimeoutSeconds int
	// OnTimeout is what becomes of the session once EndsAt passes ("" is SessionTimeoutDelete).
	OnTimeout SessionTimeoutAction
	// EndsAt is when the running session times out (see ListEndedSessions); nil when it does not.
	EndsAt    *time.Time
	SandboxID string // the sandbox it runs in; "" when none
	// RollingIntervalSeconds is how often a rolling snapshot (TriggerRolling) is taken while the session
	// runs; 0 means never. The Store keeps it as given: the control plane applies defaults and minimums.
	RollingIntervalSeconds int
	// Retention is how long the session's snapshots are kept; its zero fields inherit the tenant's.
	Retention RetentionSpec
	// HeadSnapshotID is the usable snapshot (uploading or complete; see SnapshotState.Usable) the session
	// would resume from, "" when none. It may be a snapshot of another session of the tenant (a fork
	// resumes from its source); the Store refuses to delete a snapshot that a session not yet deleted has
	// as its head.
	HeadSnapshotID       string
	ParentSessionID      string // the session this one was forked from; "" when none; never changes
	ForkedFromSnapshotID string // the snapshot this one was forked from; "" when none; never changes
	CreatedAt            time.Time
	UpdatedAt            time.Time
	// LastActivityAt is when the session was last used. It only moves forward (see TouchSession).
	LastActivityAt time.Time
	PausedAt       *time.Time // when it was last paused; set by the caller
	Version        int64      // optimistic concurrency: UpdateSession succeeds only from the stored Version
}

// Validate checks the fields of se that every engine relies on, and returns an error wrapping
// errdefs.ErrInvalidArgument naming the first bad one: ID and TenantID must be set, State must be a valid
// state, Spec resources, IdleTimeoutSeconds, RollingIntervalSeconds and TimeoutSeconds must not be
// negative, OnTimeout must be "" or a SessionTimeoutAction, Retention must
// be valid (see RetentionSpec.Validate), metadata keys must not be empty and Version must not be negative.
// It does not judge state transitions (see CheckSessionTransition) nor whether the IDs it refers to exist.
func (se Session) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("session %q: %s: %w", se.ID, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
	}
	switch {
	case se.ID == "":
		return bad("ID is empty")
	case se.TenantID == "":
		return bad("tenant ID is empty")
	case !se.State.Valid():
		return bad("unknown state %q", se.State)
	case se.Spec.CPUMillicores < 0, se.Spec.MemoryMB < 0, se.Spec.DiskMB < 0:
		return bad("negative resource in spec (cpu %d, memory %d, disk %d)", se.Spec.CPUMillicores, se.Spec.MemoryMB, se.Spec.DiskMB)
	case se.IdleTimeoutSeconds < 0:
		return bad("negative idle timeout %d", se.IdleTimeoutSeconds)
	case se.RollingIntervalSeconds < 0:
		return bad("negative rolling interval %d", se.RollingIntervalSeconds)
	case se.TimeoutSeconds < 0:
		return bad("negative timeout %d", se.TimeoutSeconds)
	case !se.OnTimeout.Valid():
		return bad("unknown timeout action %q", se.OnTimeout)
	case se.Version < 0:
		return bad("negative version %d", se.Version)
	}
	if err := se.Retention.Validate(); err != nil {
		return fmt.Errorf("session %q: %w", se.ID, err)
	}
	for k := range se.Metadata {
		if k == "" {
			return bad("metadata key is empty")
		}
	}
	return nil
}

// SessionTimeoutAction is what becomes of a running session whose EndsAt passed.
type SessionTimeoutAction string

// The timeout actions.
const (
	SessionTimeoutDelete SessionTimeoutAction = "delete" // its sandbox and snapshots are removed
	SessionTimeoutPause  SessionTimeoutAction = "pause"  // it is paused (memory kept) and can be resumed
)

// Valid reports whether a is "" (SessionTimeoutDelete) or one of the timeout actions.
func (a SessionTimeoutAction) Valid() bool {
	return a == "" || a == SessionTimeoutDelete || a == SessionTimeoutPause
}

// InitialSessionState reports whether a session may be created in state s: creating (a new session),
// or paused or resuming (a fork of a snapshot).
func InitialSessionState(s SessionState) bool {
	return s == SessionCreating || s == SessionPaused || s == SessionResuming
}

// SessionFilter selects and pages the sessions ListSessions returns. The zero value lists the first
// DefaultListLimit sessions of every state.
type SessionFilter struct {
	States   []SessionState    // match any of these; empty matches every state
	Metadata map[string]string // every pair must be present with exactly this value; empty matches all
	Limit    int               // page size; see NormalizeLimit
	Cursor   string            // "" for the first page, else the cursor the previous page returned
	// Descending lists newest first (CreatedAt, then ID, both descending) instead of oldest first. A
	// cursor continues in the order of the listing that returned it.
	Descending bool
}

// Validate checks f and returns an error wrapping errdefs.ErrInvalidArgument if a state is unknown, a
// metadata key is empty, the limit is negative or the cursor does not parse.
func (f SessionFilter) Validate() error {
	for _, s := range f.States {
		if !s.Valid() {
			return fmt.Errorf("filter state %q: %w", s, errdefs.ErrInvalidArgument)
		}
	}
	for k := range f.Metadata {
		if k == "" {
			return fmt.Errorf("filter metadata key is empty: %w", errdefs.ErrInvalidArgument)
		}
	}
	return validatePage(f.Limit, f.Cursor)
}

// SnapshotState is where a snapshot is in its life: it is written once (possibly first to one node's disk,
// then to the snapshot store in the background), then complete or failed for good.
//
//	writing   → uploading | complete | failed
//	uploading → complete | failed
//	complete  (terminal; only Name and Pinned may still change)
//	failed    (terminal)
//
// A snapshot is usable (see Usable) once it is uploading or complete.
type SnapshotState string

// The snapshot states.
const (
	SnapshotWriting SnapshotState = "writing" // its data is being stored; not usable yet
	// SnapshotUploading is a snapshot whose checkpoint image is saved durably on the local disk of the
	// node that took it and is being written into the snapshot store in the background. A session may
	// already resume or fork from it, on that node; elsewhere only once it is complete.
	SnapshotUploading SnapshotState = "uploading"
	SnapshotComplete  SnapshotState = "complete" // all its data is in the snapshot store; a session can resume from it anywhere
	SnapshotFailed    SnapshotState = "failed"   // writing or uploading it failed; its data may need collecting
)

// snapshotTransitions is the snapshot state machine: for each state, the states it may move to.
var snapshotTransitions = map[SnapshotState][]SnapshotState{
	SnapshotWriting:   {SnapshotUploading, SnapshotComplete, SnapshotFailed},
	SnapshotUploading: {SnapshotComplete, SnapshotFailed},
	SnapshotComplete:  nil,
	SnapshotFailed:    nil,
}

// SnapshotStates returns every valid snapshot state, in lifecycle order.
func SnapshotStates() []SnapshotState {
	return []SnapshotState{SnapshotWriting, SnapshotUploading, SnapshotComplete, SnapshotFailed}
}

// Usable reports whether a session can resume or fork from a snapshot in state s: true for uploading
// and complete, false for every other state, invalid ones included. The Store does not know where an
// uploading snapshot's image is: the caller must restore it on the node that holds it.
func (s SnapshotState) Usable() bool {
	return s == SnapshotUploading || s == SnapshotComplete
}

// Valid reports whether s is one of the defined snapshot states.
func (s SnapshotState) Valid() bool {
	_, ok := snapshotTransitions[s]
	return ok
}

// Terminal reports whether no transition leaves s.
func (s SnapshotState) Terminal() bool {
	return s.Valid() && len(snapshotTransitions[s]) == 0
}

// CanTransition reports whether the snapshot state machine allows moving from s to to. Staying in the
// same state is not a transition and reports false; invalid states report false.
func (s SnapshotState) CanTransition(to SnapshotState) bool {
	return slices.Contains(snapshotTransitions[s], to)
}

// String returns the state's name.
func (s SnapshotState) String() string { return string(s) }

// CheckSnapshotTransition reports whether a snapshot stored in state from may be saved in state to: nil
// when to equals from or when from.CanTransition(to); otherwise an error wrapping errdefs.ErrConflict that
// names both states (errdefs.ErrInvalidArgument if to is not a state at all).
func CheckSnapshotTransition(from, to SnapshotState) error {
	if !to.Valid() {
		return fmt.Errorf("snapshot state %q: %w", to, errdefs.ErrInvalidArgument)
	}
	if from == to || from.CanTransition(to) {
		return nil
	}
	return fmt.Errorf("illegal snapshot state transition from %s to %s: %w", from, to, errdefs.ErrConflict)
}

// CheckSnapshotUpdate reports whether the stored snapshot cur may be saved as next: the state change must
// pass CheckSnapshotTransition, and a snapshot stored complete or failed is immutable, except that a
// complete one may change Name and Pinned (a writing or uploading one may change anything). A forbidden change is an error wrapping errdefs.ErrConflict.
// It compares only what UpdateSnapshot may change (not ID, TenantID, SessionID, ParentID, Trigger,
// CreatedAt nor Version).
func CheckSnapshotUpdate(cur, next Snapshot) error {
	if err := CheckSnapshotTransition(cur.State, next.State); err != nil {
		return err
	}
	if !cur.State.Terminal() {
		return nil
	}
	content := cur.Reason == next.Reason && cur.LogicalBytes == next.LogicalBytes && cur.StoredBytes == next.StoredBytes &&
		equalTimePtr(cur.CompletedAt, next.CompletedAt) && maps.Equal(cur.Meta, next.Meta)
	labels := cur.Name == next.Name && cur.Pinned == next.Pinned
	if content && (labels || cur.State == SnapshotComplete) {
		return nil
	}
	return fmt.Errorf("snapshot %s is %s: only the name and pinned flag of a complete snapshot may change: %w",
		cur.ID, cur.State, errdefs.ErrConflict)
}

// equalTimePtr reports whether a and b are both nil or the same time as a Store keeps it.
func equalTimePtr(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return NormalizeTime(*a).Equal(NormalizeTime(*b))
}

// SnapshotTrigger is why a snapshot was taken.
type SnapshotTrigger string

// The snapshot triggers.
const (
	TriggerManual  SnapshotTrigger = "manual"  // a user asked for it
	TriggerPause   SnapshotTrigger = "pause"   // taken to pause the session
	TriggerFork    SnapshotTrigger = "fork"    // starts a session forked from another's snapshot
	TriggerRolling SnapshotTrigger = "rolling" // taken on the session's rolling schedule while it runs
)

// SnapshotTriggers returns every valid trigger.
func SnapshotTriggers() []SnapshotTrigger {
	return []SnapshotTrigger{TriggerManual, TriggerPause, TriggerFork, TriggerRolling}
}

// Valid reports whether t is one of the defined triggers.
func (t SnapshotTrigger) Valid() bool { return slices.Contains(SnapshotTriggers(), t) }

// String returns the trigger's name.
func (t SnapshotTrigger) String() string { return string(t) }

// Snapshot is the record of one point-in-time state of a session: live memory, process tree and files.
// The data itself lives in the blob store, listed by a manifest the snapshot package keeps; the record
// says where the snapshot sits in its session's timeline and whether it is usable.
type Snapshot struct {
	ID        string // "sn_" + random; see NewID
	TenantID  string
	SessionID string
	// ParentID is the previous snapshot in the session's lineage ("" for none): a snapshot of the same
	// tenant, possibly of the session this one was forked from, possibly since deleted. It never changes.
	ParentID string
	// Name is an optional label, unique among the session's snapshots ("" for none).
	Name    string
	Trigger SnapshotTrigger
	State   SnapshotState
	Reason  string // why the snapshot failed; "" otherwise
	Pinned  bool   // kept by retention whatever its age
	// LogicalBytes is the size of the state the snapshot captures; StoredBytes is what it added to the
	// blob store (the data earlier snapshots did not already hold).
	LogicalBytes int64
	StoredBytes  int64
	Meta         map[string]string // the snapshot package's annotations; never nil when returned by a Store
	CreatedAt    time.Time
	CompletedAt  *time.Time // when it became complete or failed; set by the caller
	Version      int64      // optimistic concurrency: UpdateSnapshot succeeds only from the stored Version
}

// Validate checks the fields of sn that every engine relies on, and returns an error wrapping
// errdefs.ErrInvalidArgument naming the first bad one: ID, TenantID and SessionID must be set, State and
// Trigger must be valid, byte counts must not be negative, meta keys must not be empty and Version must
// not be negative. It does not judge state changes (see CheckSnapshotUpdate).
func (sn Snapshot) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("snapshot %q: %s: %w", sn.ID, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
	}
	switch {
	case sn.ID == "":
		return bad("ID is empty")
	case sn.TenantID == "":
		return bad("tenant ID is empty")
	case sn.SessionID == "":
		return bad("session ID is empty")
	case !sn.State.Valid():
		return bad("unknown state %q", sn.State)
	case !sn.Trigger.Valid():
		return bad("unknown trigger %q", sn.Trigger)
	case sn.LogicalBytes < 0, sn.StoredBytes < 0:
		return bad("negative size (logical %d, stored %d)", sn.LogicalBytes, sn.StoredBytes)
	case sn.Version < 0:
		return bad("negative version %d", sn.Version)
	}
	for k := range sn.Meta {
		if k == "" {
			return bad("meta key is empty")
		}
	}
	return nil
}

// SnapshotFilter selects and pages the snapshots ListSnapshots returns. The zero value lists the first
// DefaultListLimit snapshots of every session of the tenant, in every state.
type SnapshotFilter struct {
	SessionID string          // only this session's snapshots; "" for every session of the tenant
	States    []SnapshotState // match any of these; empty matches every state
	Limit     int             // page size; see NormalizeLimit
	Cursor    string          // "" for the first page, else the cursor the previous page returned
}

// Validate checks f and returns an error wrapping errdefs.ErrInvalidArgument if a state is unknown, the
// limit is negative or the cursor does not parse.
func (f SnapshotFilter) Validate() error {
	for _, s := range f.States {
		if !s.Valid() {
			return fmt.Errorf("filter state %q: %w", s, errdefs.ErrInvalidArgument)
		}
	}
	return validatePage(f.Limit, f.Cursor)
}

// validatePage checks a filter's limit and cursor.
func validatePage(limit int, cursor string) error {
	if _, err := NormalizeLimit(limit); err != nil {
		return err
	}
	if cursor != "" {
		if _, err := ParseCursor(cursor); err != nil {
			return err
		}
	}
	return nil
}
