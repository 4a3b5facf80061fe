// Package store defines the control plane's persistent state: tenants, API keys, sandboxes, sessions,
// snapshots and idempotency records, the Store interface every storage engine implements, and the state
// machines of sandboxes, sessions and snapshots.
//
// All control-plane state lives in a Store; replicas keep nothing of their own, so any replica can serve the
// next request. Engines live in subpackages (store/sqlite is the embedded default; store/postgres comes later)
// and all of them pass the conformance suite in store/storetest.
//
// Contract shared by every engine:
//   - Errors wrap the sentinels of internal/errdefs: ErrNotFound, ErrAlreadyExists, ErrConflict,
//     ErrInvalidArgument. Match them with errors.Is.
//   - Tenant-scoped methods take the tenant ID and treat another tenant's object exactly like a missing one
//     (ErrNotFound), so nothing about it leaks.
//   - Times are returned in UTC with microsecond precision (what PostgreSQL keeps); the store truncates the
//     times it is given with NormalizeTime, and the values a Create or Update method returns are the stored
//     ones.
//   - Every method is safe for concurrent use by many goroutines.
package store

import (
	"context"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Store keeps all control-plane state. Methods take ctx first, then IDs, then options.
type Store interface {
	// CreateTenant stores t and returns it as stored. An empty ID is assigned with NewID("tn"); a zero
	// CreatedAt is set to now. Name must not be empty and Retention must be valid (ErrInvalidArgument; see
	// RetentionSpec.Validate). A taken ID, or a second operator tenant, is ErrAlreadyExists.
	CreateTenant(ctx context.Context, t Tenant) (Tenant, error)
	// GetTenant returns the tenant with the given ID, or ErrNotFound.
	GetTenant(ctx context.Context, id string) (Tenant, error)
	// ListTenants returns every tenant ordered by CreatedAt, then ID. Tenants are few; there is no paging.
	ListTenants(ctx context.Context) ([]Tenant, error)
	// UpdateTenantRetention replaces the tenant's Retention with r and returns the tenant as stored. An
	// invalid r is ErrInvalidArgument (see RetentionSpec.Validate); an unknown tenant is ErrNotFound.
	UpdateTenantRetention(ctx context.Context, id string, r RetentionSpec) (Tenant, error)
	// UpdateTenantLogRetention replaces the tenant's LogRetentionSeconds and returns the tenant as stored.
	// A negative value is ErrInvalidArgument; an unknown tenant is ErrNotFound.
	UpdateTenantLogRetention(ctx context.Context, id string, seconds int64) (Tenant, error)
	// SetTenantDisabled disables the tenant from the given time (at non-nil; a disabled tenant keeps its
	// first DisabledAt) or enables it again (at nil), and returns the tenant as stored. An unknown tenant
	// is ErrNotFound; the operator tenant cannot be disabled (ErrFailedPrecondition).
	SetTenantDisabled(ctx context.Context, id string, at *time.Time) (Tenant, error)
	// SetTenantQuotas replaces the tenant's Quotas and returns the tenant as stored. Negative quotas are
	// ErrInvalidArgument; an unknown tenant is ErrNotFound. Lowering a quota below the usage removes
	// nothing: it refuses what would add more.
	SetTenantQuotas(ctx context.Context, id string, q TenantQuotas) (Tenant, error)
	// SetTenantKeyProvider names the KeyProvider that wraps the tenant's new data keys ("" for the
	// server's default) and returns the tenant as stored. A name over 64 bytes is ErrInvalidArgument;
	// an unknown tenant is ErrNotFound.
	SetTenantKeyProvider(ctx context.Context, id, provider string) (Tenant, error)
	// TenantUsage reports what counts against the tenant's quotas now. An unknown tenant uses nothing.
	TenantUsage(ctx context.Context, id string) (TenantUsage, error)

	// CreateAPIKey stores k and returns it as stored. An empty ID is assigned with NewID("key"); a zero
	// CreatedAt is set to now. TenantID, Name, Hash and a valid Scope are required (ErrInvalidArgument);
	// an unknown tenant is ErrNotFound; a taken ID or Hash is ErrAlreadyExists.
	CreateAPIKey(ctx context.Context, k APIKey) (APIKey, error)
	// GetAPIKeyByHash returns the key whose Hash equals hash, or ErrNotFound. A revoked key is returned
	// too, with RevokedAt set: the caller must check it (so it can tell "revoked" from "unknown").
	GetAPIKeyByHash(ctx context.Context, hash []byte) (APIKey, error)
	// TouchAPIKey records that the key was used at the given time. LastUsedAt only moves forward: an
	// older time than the stored one is ignored. An unknown key (or another tenant's) is ErrNotFound.
	TouchAPIKey(ctx context.Context, tenantID, id string, at time.Time) error
	// RevokeAPIKey marks the key revoked at the given time, and with it, in the same transaction, every
	// access token the key made (CreatedBy) that was not revoked yet: a token dies with the key that
	// minted it. Revoking a revoked key succeeds and keeps the first RevokedAt. An unknown key (or
	// another tenant's) is ErrNotFound.
	RevokeAPIKey(ctx context.Context, tenantID, id string, at time.Time) error
	// ListAPIKeys returns the tenant's keys, revoked ones included, ordered by CreatedAt, then ID.
	// An unknown tenant has no keys (an empty list, not an error).
	ListAPIKeys(ctx context.Context, tenantID string) ([]APIKey, error)

	// CreateAccessToken stores tok and returns it as stored. An empty ID is assigned with NewID("tok"); a
	// zero CreatedAt is set to now. tok must pass AccessToken.Validate (ErrInvalidArgument). An unknown
	// tenant, or a SandboxID or SessionID that is not one of the tenant's, is ErrNotFound; a taken ID or
	// Hash is ErrAlreadyExists. A CreatedBy that names a revoked API key is ErrPermissionDenied (the key
	// was revoked while it asked). Past a bound of lim (the live tokens, unrevoked and unexpired at
	// tok.CreatedAt, of the token's sandbox or session, or of its tenant) it is ErrResourceExhausted.
	CreateAccessToken(ctx context.Context, tok AccessToken, lim TokenLimits) (AccessToken, error)
	// GetAccessTokenByHash returns the token whose Hash equals hash, or ErrNotFound. Revoked and expired
	// tokens are returned too: the caller checks RevokedAt and ExpiresAt.
	GetAccessTokenByHash(ctx context.Context, hash []byte) (AccessToken, error)
	// ListAccessTokens returns the tenant's tokens that expire after now, revoked ones included, ordered
	// by CreatedAt, then ID; with f's SandboxID or SessionID set, only the tokens of that object. An
	// unknown tenant has none (an empty list).
	ListAccessTokens(ctx context.Context, tenantID string, now time.Time, f AccessTokenFilter) ([]AccessToken, error)
	// RevokeAccessToken marks the token revoked at the given time; a revoked token keeps its first
	// RevokedAt. An unknown token (or another tenant's) is ErrNotFound.
	RevokeAccessToken(ctx context.Context, tenantID, id string, at time.Time) error
	// DeleteAccessTokensExpiredBefore removes every token, of every tenant, that expired before the
	// given time, and reports how many it removed.
	DeleteAccessTokensExpiredBefore(ctx context.Context, before time.Time) (int64, error)

	// CreateSandbox stores sb and returns it as stored, with Version 1 and UpdatedAt = CreatedAt. An empty
	// ID is assigned with NewID("sb"); a zero CreatedAt is set to now; an empty State means StateCreating,
	// and any other initial state is ErrInvalidArgument (see Sandbox.Validate for the other checks). An
	// unknown tenant is ErrNotFound. A taken ID, in any tenant, is ErrAlreadyExists. A tenant whose
	// RunningSandboxes quota is reached is ErrResourceExhausted.
	CreateSandbox(ctx context.Context, sb Sandbox) (Sandbox, error)
	// GetSandbox returns the tenant's sandbox with the given ID. A missing sandbox, or one of another
	// tenant, is ErrNotFound.
	GetSandbox(ctx context.Context, tenantID, id string) (Sandbox, error)
	// GetSandboxAnyTenant returns the sandbox with the given ID whatever its tenant, or ErrNotFound. It is
	// for the lifecycle loops and node callbacks, never for a tenant's request.
	GetSandboxAnyTenant(ctx context.Context, id string) (Sandbox, error)
	// ListSandboxes returns one page of the tenant's sandboxes matching f, ordered by CreatedAt, then ID,
	// and the cursor of the next page ("" when this page is the last). Pages are stable: paging through
	// while sandboxes are created returns each sandbox that existed throughout exactly once. A bad cursor,
	// state or limit in f is ErrInvalidArgument.
	ListSandboxes(ctx context.Context, tenantID string, f SandboxFilter) ([]Sandbox, string, error)
	// UpdateSandbox saves sb over the stored sandbox (found by sb.TenantID and sb.ID) if and only if the
	// stored Version equals sb.Version, and returns it as stored, with Version incremented and UpdatedAt
	// set to now. A missing sandbox (or another tenant's) is ErrNotFound; a stale Version is ErrConflict;
	// a state change the state machine forbids (see CheckTransition) is ErrConflict. ID, TenantID and
	// CreatedAt never change: the stored values are kept.
	UpdateSandbox(ctx context.Context, sb Sandbox) (Sandbox, error)
	// ListSandboxesByState returns up to limit sandboxes of every tenant whose State is one of states
	// (any state when states is empty), least recently updated first (UpdatedAt, then ID), so a loop that
	// updates what it handles works through all of them. limit follows NormalizeLimit.
	ListSandboxesByState(ctx context.Context, states []SandboxState, limit int) ([]Sandbox, error)
	// ListSandboxesOnNode returns up to limit sandboxes of every tenant placed on node nodeID whose State
	// is one of states (any state when states is empty), in ID order, starting after afterID ("" for the
	// first page): the next page starts after the last ID of this one. limit follows NormalizeLimit.
	ListSandboxesOnNode(ctx context.Context, nodeID string, states []SandboxState, afterID string, limit int) ([]Sandbox, error)
	// NodeUsage returns, for each node that has sandboxes whose State is one of states (at least one
	// state), how many it has and the memory they were given.
	NodeUsage(ctx context.Context, states []SandboxState) (map[string]NodeUse, error)
	// ListExpiredSandboxes returns up to limit sandboxes of every tenant that are creating or running and
	// whose EndsAt is set and not after now, earliest EndsAt first (then ID). limit follows NormalizeLimit.
	ListExpiredSandboxes(ctx context.Context, now time.Time, limit int) ([]Sandbox, error)
	// DeleteSandbox removes a stopped sandbox's record for good (garbage collection). A missing sandbox
	// (or another tenant's) is ErrNotFound; a sandbox in any state but stopped is ErrConflict, so a record
	// whose resources may still exist on a node is never forgotten.
	DeleteSandbox(ctx context.Context, tenantID, id string) error

	// CreateSession stores se and returns it as stored, with Version 1 and UpdatedAt = CreatedAt. An empty
	// ID is assigned with NewID("se"); a zero CreatedAt is set to now; a zero LastActivityAt is set to
	// CreatedAt. An empty State means SessionCreating; a fork of a snapshot may also start paused or
	// resuming (see InitialSessionState); any other initial state is ErrInvalidArgument (see
	// Session.Validate for the other checks). An unknown tenant is ErrNotFound, and so is a
	// HeadSnapshotID, ParentSessionID or ForkedFromSnapshotID that is not one of the tenant's; a
	// HeadSnapshotID or ForkedFromSnapshotID naming a snapshot that is not usable (uploading or complete;
	// see SnapshotState.Usable) is ErrFailedPrecondition; a ForkedFromSnapshotID that is not a snapshot of
	// ParentSessionID (when both are set) is ErrInvalidArgument. A taken ID, in any tenant, is
	// ErrAlreadyExists. A tenant whose Sessions quota is reached is ErrResourceExhausted.
	CreateSession(ctx context.Context, se Session) (Session, error)
	// GetSession returns the tenant's session with the given ID. A missing session, or one of another
	// tenant, is ErrNotFound.
	GetSession(ctx context.Context, tenantID, id string) (Session, error)
	// GetSessionAnyTenant returns the session with the given ID whatever its tenant, or ErrNotFound. It is
	// for the lifecycle loops and node callbacks, never for a tenant's request.
	GetSessionAnyTenant(ctx context.Context, id string) (Session, error)
	// ListSessions returns one page of the tenant's sessions matching f, ordered by CreatedAt, then ID
	// (both descending with f.Descending), and the cursor of the next page ("" when this page is the last). Pages are stable: paging through
	// while sessions are created returns each session that existed throughout exactly once. A bad cursor,
	// state or limit in f is ErrInvalidArgument. An unknown tenant has no sessions (an empty list).
	ListSessions(ctx context.Context, tenantID string, f SessionFilter) ([]Session, string, error)
	// UpdateSession saves se over the stored session (found by se.TenantID and se.ID) if and only if the
	// stored Version equals se.Version, and returns it as stored, with Version incremented and UpdatedAt
	// set to now. A missing session (or another tenant's) is ErrNotFound; a stale Version is ErrConflict;
	// a state change the state machine forbids (see CheckSessionTransition) is ErrConflict. A changed
	// HeadSnapshotID must name a usable (uploading or complete) snapshot of the tenant (ErrNotFound,
	// ErrFailedPrecondition). Every other field may change, RollingIntervalSeconds and Retention included.
	// ID, TenantID, ParentSessionID, ForkedFromSnapshotID and CreatedAt never change: the stored values
	// are kept. LastActivityAt never moves backwards: the later of the stored and the given time is kept,
	// so an update made from a copy read before a TouchSession loses no activity.
	UpdateSession(ctx context.Context, se Session) (Session, error)
	// TouchSession records activity of the session at the given time. LastActivityAt only moves forward:
	// an older time than the stored one is ignored. It changes neither Version nor UpdatedAt, so activity,
	// however frequent, never makes a concurrent UpdateSession conflict. An unknown session (or another
	// tenant's) is ErrNotFound.
	TouchSession(ctx context.Context, tenantID, id string, at time.Time) error
	// ListSessionsByState returns up to limit sessions of every tenant whose State is one of states (any
	// state when states is empty), least recently updated first (UpdatedAt, then ID), so a loop that
	// updates what it handles works through all of them. limit follows NormalizeLimit; an unknown state is
	// ErrInvalidArgument.
	ListSessionsByState(ctx context.Context, states []SessionState, limit int) ([]Session, error)
	// ListIdleSessions returns up to limit sessions of every tenant that are running, have an
	// IdleTimeoutSeconds above 0 and whose LastActivityAt plus IdleTimeoutSeconds is not after now, least
	// recently active first (LastActivityAt, then ID). limit follows NormalizeLimit.
	ListIdleSessions(ctx context.Context, now time.Time, limit int) ([]Session, error)
	// ListEndedSessions returns up to limit sessions of every tenant that are running and whose EndsAt
	// is set and not after now, soonest ended first (EndsAt, then ID). limit follows NormalizeLimit.
	ListEndedSessions(ctx context.Context, now time.Time, limit int) ([]Session, error)
	// DeleteSession removes a deleted session's record for good, with the records of all its snapshots and
	// their names (garbage collection). A missing session (or another tenant's) is ErrNotFound; a session
	// in any state but deleted is ErrConflict, so a record whose sandbox or data may still exist is never
	// forgotten; so is a session one of whose snapshots is the HeadSnapshotID of another session not yet
	// deleted (a fork that would resume from it).
	DeleteSession(ctx context.Context, tenantID, id string) error

	// CreateSnapshot stores sn and returns it as stored, with Version 1. An empty ID is assigned with
	// NewID("sn"); a zero CreatedAt is set to now. An empty State means SnapshotWriting; SnapshotComplete
	// is allowed too (a record of data already stored, such as a fork's); any other state (uploading,
	// reached only from writing once the image is on the node's disk, or failed) is ErrInvalidArgument
	// (see Snapshot.Validate for the other checks). A session, or a ParentID, that is not one of the
	// tenant's is ErrNotFound. A non-empty Name another snapshot of the session has, or a taken ID in any
	// tenant, is ErrAlreadyExists.
	CreateSnapshot(ctx context.Context, sn Snapshot) (Snapshot, error)
	// GetSnapshot returns the tenant's snapshot with the given ID. A missing snapshot, or one of another
	// tenant, is ErrNotFound.
	GetSnapshot(ctx context.Context, tenantID, id string) (Snapshot, error)
	// ListSnapshots returns one page of the tenant's snapshots matching f, ordered by CreatedAt, then ID
	// (both ascending: oldest first), and the cursor of the next page ("" when this page is the last), with
	// the paging guarantees of ListSessions: following the cursors from "" lists every snapshot that
	// existed throughout exactly once, in that order across pages. A bad cursor, state or limit in f is ErrInvalidArgument; an f.SessionID that is not
	// one of the tenant's sessions is ErrNotFound. An unknown tenant has no snapshots (an empty list).
	ListSnapshots(ctx context.Context, tenantID string, f SnapshotFilter) ([]Snapshot, string, error)
	// UpdateSnapshot saves sn over the stored snapshot (found by sn.TenantID and sn.ID) if and only if the
	// stored Version equals sn.Version, and returns it as stored, with Version incremented. A missing
	// snapshot (or another tenant's) is ErrNotFound; a stale Version is ErrConflict; a change
	// CheckSnapshotUpdate forbids (a state change other than writing → uploading | complete | failed or
	// uploading → complete | failed, or a change to a complete snapshot other than its Name and Pinned, or
	// to a failed one) is ErrConflict; a non-empty Name another snapshot of the session has is
	// ErrAlreadyExists. ID, TenantID, SessionID, ParentID, Trigger and CreatedAt never change: the stored
	// values are kept.
	UpdateSnapshot(ctx context.Context, sn Snapshot) (Snapshot, error)
	// DeleteSnapshot removes the snapshot's record, in any state. A missing snapshot (or another tenant's)
	// is ErrNotFound; a snapshot that is the HeadSnapshotID of a session not yet deleted is ErrConflict,
	// so no session loses what it would resume from. Snapshots naming it as ParentID keep that ID.
	DeleteSnapshot(ctx context.Context, tenantID, id string) error
	// ListSnapshotsByState returns up to limit snapshots of every tenant whose State is one of states (any
	// state when states is empty), oldest first (CreatedAt, then ID): crash recovery finds the snapshots
	// left writing or uploading with it. limit follows NormalizeLimit; an unknown state is
	// ErrInvalidArgument.
	ListSnapshotsByState(ctx context.Context, states []SnapshotState, limit int) ([]Snapshot, error)

	// AppendAudit appends entries (each passing AuditEntry.Validate; ErrInvalidArgument otherwise, and
	// nothing is appended) to their tenants' audit logs, in order, in one transaction: it assigns each
	// its Seq, Prev and Hash, continuing the tenant's hash chain. Times are normalized. An unknown
	// tenant is ErrNotFound.
	AppendAudit(ctx context.Context, entries []AuditEntry) error
	// ListAudit returns up to limit entries of the tenant's audit log with Seq above afterSeq, in
	// order. limit follows NormalizeLimit. An unknown tenant has none.
	ListAudit(ctx context.Context, tenantID string, afterSeq int64, limit int) ([]AuditEntry, error)
	// PruneAudit deletes the oldest entries of the tenant's audit log: those before its first entry
	// timed at or after before, at most limit of them (NormalizeLimit), never the newest entry. In the
	// same transaction it appends an entry recording the cut (AuditPrune), which keeps the chain
	// verifiable from its new start (VerifyAudit). A cut that would delete only such records deletes
	// nothing. It returns how many entries it deleted; an unknown tenant has none.
	PruneAudit(ctx context.Context, tenantID string, before time.Time, limit int) (int, error)

	// GetIdempotency returns the tenant's record for key, or ErrNotFound.
	GetIdempotency(ctx context.Context, tenantID, key string) (IdempotencyRecord, error)
	// PutIdempotency stores rec (a zero CreatedAt is set to now). TenantID and Key are required
	// (ErrInvalidArgument); an unknown tenant is ErrNotFound; a key the tenant already used is
	// ErrAlreadyExists and leaves the stored record as it was.
	PutIdempotency(ctx context.Context, rec IdempotencyRecord) error
	// DeleteIdempotencyBefore removes every record, of every tenant, created before the given time and
	// reports how many it removed. It is how records expire.
	DeleteIdempotencyBefore(ctx context.Context, before time.Time) (int64, error)

	// AcquireLease gives resource to holder for ttl (from the store's clock) and returns the lease: if
	// nobody holds it, or its lease expired, with a Token one above the resource's last (1 for a new
	// resource); if holder holds it already, with its expiry moved and the same Token. A lease another
	// holder holds and that has not expired is ErrConflict, naming the holder. Empty resource or holder, or
	// a ttl that is not positive, is ErrInvalidArgument.
	AcquireLease(ctx context.Context, resource, holder string, ttl time.Duration) (Lease, error)
	// RenewLease moves the expiry of holder's lease on resource with token to ttl from now. A lease that
	// expired (even if nobody took it since), that another holder took, or whose Token is not token, is
	// ErrConflict: the caller lost it and must stop acting on the resource. A resource without a lease is
	// ErrNotFound.
	RenewLease(ctx context.Context, resource, holder string, token int64, ttl time.Duration) (Lease, error)
	// ReleaseLease ends holder's lease on resource with token now (the record stays, expired, so Tokens
	// keep growing). A lease already expired is released already (nil); one another holder took, or
	// whose Token is not token, is ErrConflict; a resource without a lease is ErrNotFound.
	ReleaseLease(ctx context.Context, resource, holder string, token int64) error
	// GetLease returns the lease record of resource, expired or not, or ErrNotFound.
	GetLease(ctx context.Context, resource string) (Lease, error)

	Docs

	// Close releases the store's resources. It is safe to call more than once; other methods fail after it.
	Close() error
}

// Docs keeps the documents (see Doc): the part of the Store the keyring, the secrets and the cluster use.
type Docs interface {
	// GetDoc returns the document named key, or ErrNotFound.
	GetDoc(ctx context.Context, key string) (Doc, error)
	// PutDoc stores d and returns it as stored. A d.Version of 0 creates the document (ErrAlreadyExists
	// if key has one); otherwise the stored Version must equal d.Version (ErrConflict if it does not,
	// ErrNotFound if there is none), and it is replaced. The stored Version is one above the old (1 for
	// a new document). A key outside CheckDocKey, or a value over MaxDocSize, is ErrInvalidArgument.
	PutDoc(ctx context.Context, d Doc) (Doc, error)
	// DeleteDoc removes the document named key if its Version is version (ErrConflict otherwise); a
	// missing one is ErrNotFound.
	DeleteDoc(ctx context.Context, key string, version int64) error
	// ListDocs returns the documents whose key starts with prefix, in key order (an empty prefix is every
	// document).
	ListDocs(ctx context.Context, prefix string) ([]Doc, error)
}

// Doc is a small versioned value a component keeps in the Store so that every control-plane replica sees
// the same: a keyring's tenant state, a tenant's encrypted secrets. The Store treats Value as opaque bytes;
// whoever writes it encrypts what must not be read in the Store. Version makes changes compare-and-swap.
type Doc struct {
	Key       string // e.g. "keys/local/<tenant>"
	Value     []byte
	Version   int64
	UpdatedAt time.Time
}

// MaxDocSize bounds a Doc's Value.
const MaxDocSize = 4 << 20

// CheckDocKey reports whether key names a document: 1 to 512 bytes of printable ASCII.
func CheckDocKey(key string) error {
	if key == "" || len(key) > 512 {
		return fmt.Errorf("document key %q: want 1 to 512 bytes: %w", key, errdefs.ErrInvalidArgument)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return fmt.Errorf("document key %q: want printable ASCII without spaces: %w", key, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// DocKeyPart returns s as a part of a document key: s itself when it is only ASCII letters, digits, '_',
// '.' and '-' (as IDs are), else "~" and the unpadded base64url of s. Different strings give different
// parts.
func DocKeyPart(s string) string {
	plain := s != ""
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
	}
	if plain {
		return s
	}
	return "~" + base64.RawURLEncoding.EncodeToString([]byte(s))
}

// Lease is one holder's claim on a resource for a while, what keeps a session from running in two places
// at once. Token is its fencing token: each new holder of the resource gets a larger one, so whoever
// carries out a holder's orders (a node) can refuse those of a holder whose lease was taken over, by
// remembering the largest Token it has seen.
type Lease struct {
	Resource   string // what is held, e.g. "session/se_…"
	Holder     string // who holds it, e.g. a node's or a control plane's ID
	Token      int64
	AcquiredAt time.Time // when this holder got it (renewals keep it)
	ExpiresAt  time.Time
}

// Expired reports whether the lease is over at now.
func (l Lease) Expired(now time.Time) bool { return !now.Before(l.ExpiresAt) }

// Tenant is the boundary for everything: API keys, sandboxes, sessions, snapshots and idempotency records
// belong to one.
type Tenant struct {
	ID        string
	Name      string
	CreatedAt time.Time
	// Retention is how long the snapshots of the tenant's sessions are kept; its zero fields inherit the
	// server's defaults. It changes only with UpdateTenantRetention.
	Retention RetentionSpec
	// LogRetentionSeconds is how long the tenant's logs (its audit log and its sandboxes' flow logs) are
	// kept; 0 inherits the server's default. It changes only with UpdateTenantLogRetention.
	LogRetentionSeconds int64
	// Operator marks the tenant of the people who run Airlock: its admin keys also manage the other
	// tenants. Bootstrap makes the first tenant the operator; the flag never changes.
	Operator bool
	// DisabledAt is when the tenant was disabled (nil while enabled): its keys and tokens are refused.
	DisabledAt *time.Time
	// KeyProvider names the KeyProvider of the tenant's key-encryption keys ("" is the server's
	// default, the local keyring; "pkcs11" is the customer's token).
	KeyProvider string
	// Quotas bound what the tenant holds at once. CreateSandbox and CreateSession enforce the first two
	// atomically (ErrResourceExhausted); the control plane checks SnapshotBytes before it snapshots.
	Quotas TenantQuotas
}

// TenantQuotas bound what a tenant may hold at once; a zero field is no limit.
type TenantQuotas struct {
	RunningSandboxes int64 // sandboxes creating, running or stopping (a session's included)
	Sessions         int64 // sessions not deleting or deleted
	SnapshotBytes    int64 // bytes the tenant's snapshots added to the snapshot store
}

// Validate returns an error wrapping errdefs.ErrInvalidArgument if a quota is negative.
func (q TenantQuotas) Validate() error {
	if q.RunningSandboxes < 0 || q.Sessions < 0 || q.SnapshotBytes < 0 {
		return fmt.Errorf("quotas %+v: negative: %w", q, errdefs.ErrInvalidArgument)
	}
	return nil
}

// TenantUsage is what counts against a tenant's quotas.
type TenantUsage struct {
	RunningSandboxes int64
	Sessions         int64
	SnapshotBytes    int64
}

// RetentionSpec says how long a session's snapshots are kept, by age (see internal/retention). Zero
// fields inherit: a session's from its tenant's, a tenant's from the server's defaults.
type RetentionSpec struct {
	KeepAllSeconds    int64 // every snapshot younger than this
	KeepHourlySeconds int64 // then the newest of each hour, younger than this
	KeepDailySeconds  int64 // then the newest of each day, younger than this
}

// Validate returns an error wrapping errdefs.ErrInvalidArgument if a field of r is negative. It does not
// compare the fields with each other: a zero field inherits, so only the resolved spec can be judged.
func (r RetentionSpec) Validate() error {
	if r.KeepAllSeconds < 0 || r.KeepHourlySeconds < 0 || r.KeepDailySeconds < 0 {
		return fmt.Errorf("retention (keep all %ds, hourly %ds, daily %ds): negative duration: %w",
			r.KeepAllSeconds, r.KeepHourlySeconds, r.KeepDailySeconds, errdefs.ErrInvalidArgument)
	}
	return nil
}

// APIKey is a tenant's key for the control API. The key itself is never stored: only Hash, a digest the
// auth layer computes (and looks keys up by), and Prefix, the first characters of the key, shown to people
// so they can tell their keys apart.
type APIKey struct {
	ID         string
	TenantID   string
	Name       string
	Scope      Scope
	Prefix     string
	Hash       []byte
	CreatedAt  time.Time
	LastUsedAt *time.Time // nil until first used
	RevokedAt  *time.Time // nil while the key is valid
}

// NodeUse is what a node holds of the sandboxes counted by NodeUsage.
type NodeUse struct {
	Sandboxes int
	MemoryMB  int64 // the sum of their Spec.MemoryMB
}

// SandboxSpec is the resources and timeout a sandbox was asked for. Zero fields mean "the default".
type SandboxSpec struct {
	CPUMillicores  int // 1000 = one CPU
	MemoryMB       int
	DiskMB         int
	TimeoutSeconds int // lifetime from start; EndsAt holds the resulting deadline
}

// Sandbox is one isolated, disposable runtime instance on one node.
//
// The environment variables a sandbox is started with are deliberately not part of it: they may hold
// secrets, and the store keeps nothing that does.
type Sandbox struct {
	ID       string // "sb_" + random; see NewID
	TenantID string
	NodeID   string // "" until placed
	Template string
	State    SandboxState
	Reason   string // why the sandbox failed or stopped; "" otherwise
	Spec     SandboxSpec
	Metadata map[string]string // the user's labels; never nil when returned by a Store
	// NetworkPolicy is the sandbox's egress policy as JSON, opaque to the Store (the gateway's policy
	// package reads it); nil when none was given, which means deny everything.
	NetworkPolicy []byte
	CreatedAt     time.Time
	UpdatedAt     time.Time
	StartedAt     *time.Time // when it became running
	EndsAt        *time.Time // timeout deadline; ListExpiredSandboxes reports it once passed
	StoppedAt     *time.Time // when it became stopped or failed
	Version       int64      // optimistic concurrency: UpdateSandbox succeeds only from the stored Version
}

// IdempotencyRecord remembers the response to a create made with an Idempotency-Key, so that a retry
// gets the same response instead of a second object.
type IdempotencyRecord struct {
	TenantID       string
	Key            string // the client's Idempotency-Key
	Op             string // what the key was used for, e.g. "POST /v1/sandboxes"; a retry must match it
	RequestHash    []byte // digest of the request body; a retry with another body must be refused
	ResponseStatus int
	ResponseBody   []byte
	CreatedAt      time.Time
}

// NormalizeTime returns t as every Store keeps it: in UTC, truncated to the microsecond, with no
// monotonic clock reading.
func NormalizeTime(t time.Time) time.Time {
	return t.UTC().Truncate(time.Microsecond)
}

// NormalizeTimePtr is NormalizeTime for optional times; nil stays nil. It never modifies *t.
func NormalizeTimePtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	n := NormalizeTime(*t)
	return &n
}
