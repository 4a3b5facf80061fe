// Package controlplane is the control plane: it authenticates callers, keeps every sandbox's state in the
// Store through the sandbox state machine, places sandboxes on a node, and runs the lifecycle loops
// (timeouts, failures reported by nodes, reconciliation after a restart). Service is made of one part per
// concern (accounts, keyring, placer, nodeCalls, sandboxes, sessions, snapshotBook, loops, sandboxIO),
// each with only the dependencies it uses, composed in wiring.go.
//
// It keeps no state of its own beyond what is in the Store, except a keyed lock that serializes the calls
// on one sandbox within this process.
package controlplane

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/connections"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/keys"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/retention"
	"github.com/airlockrun/airlock/internal/secrets"
	"github.com/airlockrun/airlock/internal/snapshot"
	"github.com/airlockrun/airlock/internal/store"
)

// Node is what the control plane needs of a node: *node.Local in single-binary mode, *nodeapi.Client for
// a node in a process of its own.
type Node = nodecontract.Node

// Defaults and bounds of sandbox requests.
const (
	DefaultTimeout = 5 * time.Minute
	MaxTimeout     = 24 * time.Hour
	DefaultCPU     = 1000
	MaxCPU         = 8000
	DefaultMemMB   = 512
	MinMemMB       = 64
	MaxMemMB       = 16384
	DefaultDiskMB  = 1024
	MinDiskMB      = 64
	MaxDiskMB      = 65536
)

// Config configures a Service.
type Config struct {
	// Store keeps all state. Required.
	Store store.Store
	// Guards are the operator's egress guards: tenants' network rules into guarded ranges it has not
	// opened are refused (policy.Guards.Check). Nil: no guarded range may be opened.
	Guards *policy.Guards
	// Node is the node in this process (single-binary mode). Nil: none; sandboxes run on the nodes
	// DialNode reaches. One of Node and DialNode is required.
	Node Node
	// DialNode, if set, returns a client of a node in a process of its own that joined the cluster,
	// at the address of its API it reported (nodes.go), whose connections check the node's certificate
	// with pinned (nodeapi.ClientConfig.Pinned): the one recorded for it. Nil: only Node runs sandboxes.
	DialNode func(id, addr string, pinned func(fingerprint string) error) (Node, error)
	// TemplateRoot reports the directory, on this host, of a template's root filesystem (reading a
	// snapshot's files needs the template it was taken on). Nil: the in-process node's; with none,
	// reading snapshots' files answers failed precondition.
	TemplateRoot func(ctx context.Context, name string) (string, error)
	// ReplicaID names this control plane among the replicas (the leader's lease names it; failover.go).
	// Empty: "cp-" and a random suffix.
	ReplicaID string
	// Logger receives logs. Nil: slog.Default().
	Logger *slog.Logger
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// ReapInterval is how often expired sandboxes are looked for. Zero: 1s.
	ReapInterval time.Duration
	// Secrets keeps the tenants' credentials for the gateway to inject. Nil: the secrets API answers
	// failed precondition.
	Secrets *secrets.Store
	// Connections signs in to OAuth providers and keeps the tokens. Nil: the connections API answers
	// failed precondition. Start picks up the stored connections; the caller closes it.
	Connections *connections.Manager
	// Snapshots keeps the sessions' snapshots: the control plane makes grants with it for the nodes,
	// which write and read the images themselves, and reads manifests and file layers, deletes and
	// collects. Nil: the sessions API answers failed precondition.
	Snapshots *snapshot.Store
	// Retention is the server's default snapshot retention (tenants and sessions override it field by
	// field). Zero fields: retention.Default's.
	Retention retention.Policy
	// LogRetention is how long a tenant's logs (its audit log) are kept unless the tenant says; zero:
	// forever. MinLogRetention is the shortest a tenant may say; zero: no floor. Logs are pruned every
	// PruneInterval.
	LogRetention, MinLogRetention time.Duration
	// RollInterval is how often the rolling loop looks for sessions due a rolling snapshot, and
	// PruneInterval how often retention is applied. Zero: 1s and 5 minutes.
	RollInterval  time.Duration
	PruneInterval time.Duration
	// IdleInterval is how often idle and timed-out sessions are looked for. Zero: 2s.
	IdleInterval time.Duration
	// GCInterval is how often the snapshot store's unreferenced chunks are collected, and the records
	// of deleted sessions nothing needs any more dropped. Zero: 10 minutes.
	GCInterval time.Duration
	// Keys checks, rotates and revokes tenants' keys. Nil: no key checks (tests of other things).
	Keys TenantKeys
	// KeyCheckInterval is how often the keys of tenants with sandboxes up are checked. Zero:
	// DefaultKeyCheckInterval; at most MaxKeyCheckInterval.
	KeyCheckInterval time.Duration
	// GCGrace keeps unreferenced chunks younger than it (a snapshot being written elsewhere may use
	// them). Zero: 1 hour.
	GCGrace time.Duration
	// ImageGCGrace is how long a template's image nothing uses is kept before it is removed from the
	// nodes (a create may be about to record it). Zero: 1 hour.
	ImageGCGrace time.Duration
	// Cluster is the cluster's certificate authority, which issues nodes their certificates when they
	// join (cluster.go). Nil: the node routes answer failed precondition.
	Cluster *cluster.CA
	// KeyProvider wraps and unwraps data keys for nodes in processes of their own (their interception
	// CAs'; nodecalls.go). Nil: those calls answer failed precondition.
	KeyProvider keys.KeyProvider
	// Audit appends entries to the tenants' audit logs, for the daemon and egress entries nodes in
	// processes of their own send. Nil: those calls answer failed precondition.
	Audit func(store.AuditEntry)
}

// New returns a control plane. Call Start to run its loops and Shutdown to stop them.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || (cfg.Node == nil && cfg.DialNode == nil) {
		return nil, fmt.Errorf("controlplane: Store, and Node or DialNode, are required: %w", errdefs.ErrInvalidArgument)
	}
	var localCap nodecontract.Capacity
	if cfg.Node != nil {
		var err error
		if localCap, err = nodecontract.HostCapacity(0); err != nil {
			return nil, fmt.Errorf("controlplane: the host's capacity: %w", err)
		}
		if cfg.TemplateRoot == nil {
			cfg.TemplateRoot = cfg.Node.TemplateRoot
		}
	}
	if cfg.ReplicaID == "" {
		cfg.ReplicaID = "cp-" + strings.ToLower(store.NewID("r")[2:12])
	}
	if cfg.TemplateRoot == nil {
		cfg.TemplateRoot = func(context.Context, string) (string, error) {
			return "", fmt.Errorf("this control plane has no templates to read snapshots' files with: %w", errdefs.ErrFailedPrecondition)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ReapInterval <= 0 {
		cfg.ReapInterval = time.Second
	}
	if err := cfg.Retention.Validate(); err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	if cfg.LogRetention < 0 || cfg.MinLogRetention < 0 {
		return nil, fmt.Errorf("controlplane: log retention %s or its floor %s is negative: %w", cfg.LogRetention, cfg.MinLogRetention, errdefs.ErrInvalidArgument)
	}
	if cfg.RollInterval <= 0 {
		cfg.RollInterval = time.Second
	}
	if cfg.PruneInterval <= 0 {
		cfg.PruneInterval = 5 * time.Minute
	}
	if cfg.IdleInterval <= 0 {
		cfg.IdleInterval = 2 * time.Second
	}
	if cfg.GCInterval <= 0 {
		cfg.GCInterval = 10 * time.Minute
	}
	if cfg.GCGrace <= 0 {
		cfg.GCGrace = time.Hour
	}
	if cfg.ImageGCGrace <= 0 {
		cfg.ImageGCGrace = time.Hour
	}
	switch {
	case cfg.KeyCheckInterval <= 0:
		cfg.KeyCheckInterval = DefaultKeyCheckInterval
	case cfg.KeyCheckInterval > MaxKeyCheckInterval:
		return nil, fmt.Errorf("controlplane: key check interval %s is above %s: %w", cfg.KeyCheckInterval, MaxKeyCheckInterval, errdefs.ErrInvalidArgument)
	}
	return wire(cfg, localCap), nil
}

// keyedMutex serializes work per key (sandbox ID) within this process.
type keyedMutex struct {
	mu sync.Mutex
	// m holds one entry per key while someone holds or waits for it; guarded by mu.
	m map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

// entryLocked returns key's entry, made if missing. The caller holds k.mu.
func (k *keyedMutex) entryLocked(key string) *keyedEntry {
	if k.m == nil {
		k.m = map[string]*keyedEntry{}
	}
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{}
		k.m[key] = e
	}
	return e
}

// TryLock locks key if no one holds it, and reports whether it did.
func (k *keyedMutex) TryLock(key string) (unlock func(), ok bool) {
	k.mu.Lock()
	e := k.entryLocked(key)
	if !e.mu.TryLock() {
		if e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
		return nil, false
	}
	e.refs++
	k.mu.Unlock()
	return k.release(key, e), true
}

// Lock locks key and returns its unlock function.
func (k *keyedMutex) Lock(key string) (unlock func()) {
	k.mu.Lock()
	e := k.entryLocked(key)
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return k.release(key, e)
}

// release returns the function that unlocks e, the held entry of key.
func (k *keyedMutex) release(key string, e *keyedEntry) func() {
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}

// GetIdempotency returns the tenant's record of an Idempotency-Key.
func (s *accounts) GetIdempotency(ctx context.Context, tenantID, key string) (store.IdempotencyRecord, error) {
	return s.store.GetIdempotency(ctx, tenantID, key)
}

// PutIdempotency remembers the response to a request made with an Idempotency-Key.
func (s *accounts) PutIdempotency(ctx context.Context, rec store.IdempotencyRecord) error {
	return s.store.PutIdempotency(ctx, rec)
}
