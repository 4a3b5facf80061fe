package controlplane

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/connections"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/keys"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/retention"
	"github.com/airlockrun/airlock/internal/secrets"
	"github.com/airlockrun/airlock/internal/snapshot"
	"github.com/airlockrun/airlock/internal/store"
)

// Service is the control plane: the nine parts below, one per concern, each holding only what it needs,
// composed by wire. Its methods are the parts' exported ones: the API and the node routes call it as
// one service, and no part reaches into another's fields.
type Service struct {
	*accounts
	*keyring
	*placer
	*nodeCalls
	*sandboxes
	*sessions
	*snapshotBook
	*loops
	*sandboxIO
	*builder
}

// accounts keeps the tenants and what is theirs alone: API keys and access tokens, quotas, allowed
// runtimes, retention overrides, secrets, connections, idempotency records and the audit log
// (auth.go, quotas.go, secrets.go, connections.go, runtimes.go, timemachine.go).
type accounts struct {
	keyring *keyring

	store       store.Store
	keys        TenantKeys
	secrets     *secrets.Store
	connections *connections.Manager
	// retention is the server's default policy (timemachine.go).
	retention retention.Policy
	// logRetention is how long a tenant's logs are kept unless it says (0: forever), and
	// minLogRetention the shortest it may say (logretention.go).
	logRetention, minLogRetention time.Duration
	log                           *slog.Logger
	now                           func() time.Time
}

// keyring checks, rotates and revokes tenants' keys, and stops what a revoked key may no longer run
// (keys.go); it seals the sessions' interception CAs with them (sessionca.go).
type keyring struct {
	placer    *placer
	sandboxes *sandboxes
	book      *snapshotBook

	store       store.Store
	nodes       *nodeSet
	locks       *keyedMutex
	keys        TenantKeys
	keyProvider keys.KeyProvider
	secrets     *secrets.Store
	connections *connections.Manager
	snapshots   *snapshot.Store
	log         *slog.Logger
	// keysGone holds the tenants whose key the last check found unavailable; guarded by keysMu.
	keysMu   sync.Mutex
	keysGone map[string]bool
}

// placer knows the nodes: their records and liveness (nodes.go), joining the cluster (cluster.go),
// the runtimes they run and the choice of one (runtimes.go), and where a sandbox goes.
type placer struct {
	accounts  *accounts
	sandboxes *sandboxes

	store store.Store
	nodes *nodeSet
	// localCapacity is what the in-process node offers.
	localCapacity nodecontract.Capacity
	// ca issues the certificates of nodes that join; nil without a cluster.
	ca    *cluster.CA
	audit func(store.AuditEntry)
	bg    *sync.WaitGroup
	log   *slog.Logger
	now   func() time.Time
}

// nodeCalls answers the nodes: heartbeats and renewals, sandbox exits, and what a node in a process
// of its own asks for its sandboxes (secrets, tokens, CA keys, audit entries; nodecalls.go).
type nodeCalls struct {
	keyring   *keyring
	placer    *placer
	sandboxes *sandboxes

	store       store.Store
	nodes       *nodeSet
	keyProvider keys.KeyProvider
	secrets     *secrets.Store
	connections *connections.Manager
	audit       func(store.AuditEntry)
	log         *slog.Logger
	now         func() time.Time
}

// sandboxes runs the sandbox state machine: create, get, delete, timeouts, network, ports, the work in
// progress on each, exits and reconciliation with the nodes (sandboxes.go, ports.go, timemachine.go).
type sandboxes struct {
	accounts *accounts
	keyring  *keyring
	placer   *placer
	sessions *sessions

	store  store.Store
	nodes  *nodeSet
	locks  *keyedMutex
	guards *policy.Guards
	// work counts the calls and streams in progress per sandbox.
	work workTracker
	bg   *sync.WaitGroup
	log  *slog.Logger
	now  func() time.Time
}

// sessions runs the sessions: create, pause, resume, snapshot, fork, restore, delete, the idle pause
// and rolling snapshots, and the leases that keep one sandbox per session (sessions.go,
// timemachine.go, failover.go).
type sessions struct {
	accounts  *accounts
	keyring   *keyring
	placer    *placer
	sandboxes *sandboxes
	book      *snapshotBook

	store     store.Store
	nodes     *nodeSet
	locks     *keyedMutex
	snapshots *snapshot.Store
	// ops holds this replica's leases on session operations in progress (failover.go).
	ops     *sessionOps
	replica string
	// rolls is the rolling loop's memory (timemachine.go); crashes counts the automatic resumes of
	// sessions whose sandbox crashed (failover.go).
	rolls   roller
	crashes crashBudget
	bg      *sync.WaitGroup
	log     *slog.Logger
	now     func() time.Time
}

// snapshotBook keeps the snapshots' records: the nodes' stores of them (uploads.go), the grants and
// sources of restores, reading their files (snapview.go), retention and collection (timemachine.go).
type snapshotBook struct {
	accounts *accounts
	keyring  *keyring
	placer   *placer
	sessions *sessions

	store        store.Store
	nodes        *nodeSet
	locks        *keyedMutex
	snapshots    *snapshot.Store
	templateRoot func(ctx context.Context, name string) (string, error)
	replica      string
	log          *slog.Logger
	now          func() time.Time
}

// builder runs template builds (builds.go, buildctx.go): RUN steps in sandboxes, layers and the cache.
type builder struct {
	placer    *placer
	sandboxes *sandboxes
	io        *sandboxIO

	store store.Store
	log   *slog.Logger
	now   func() time.Time
}

// loops runs the background work on its schedule and the replica's leases: the leader's lease, and
// what only the leader does (failover.go, sandboxes.go).
type loops struct {
	accounts  *accounts
	keyring   *keyring
	placer    *placer
	sandboxes *sandboxes
	sessions  *sessions
	book      *snapshotBook

	store       store.Store
	nodes       *nodeSet
	locks       *keyedMutex
	snapshots   *snapshot.Store
	connections *connections.Manager
	ops         *sessionOps
	replica     string
	// replicaLeaseStop stops renewing this replica's lease (failover.go); replicaSeen is how the leader
	// saw the other replicas' leases, guarded by replicaMu. leading is set while it holds the leader's
	// lease.
	replicaLeaseStop func()
	replicaMu        sync.Mutex
	replicaSeen      map[string]leaseSeen
	leading          atomic.Bool

	reap, idle, rollEvery, pruneEvery, gcEvery, gcGrace, imageGrace, keysEvery time.Duration

	log *slog.Logger
	now func() time.Time
	// stop ends the loops, wg waits for them, and bg tracks work a request left running behind it (the
	// teardown of a paused session's sandbox).
	stop chan struct{}
	wg   *sync.WaitGroup
	bg   *sync.WaitGroup
}

// sandboxIO runs exec, processes and files in a running sandbox over its daemon link, in types of its
// own (sandboxio.go): the API speaks no daemon protocol.
type sandboxIO struct {
	sandboxes *sandboxes
}

// wire makes the parts of a control plane from a checked cfg and links them.
func wire(cfg Config, localCap nodecontract.Capacity) *Service {
	var (
		nodes = newNodeSet(cfg.Node, cfg.DialNode)
		locks = &keyedMutex{}
		ops   = &sessionOps{m: map[string]context.CancelFunc{}}
		bg    = &sync.WaitGroup{}
		stop  = make(chan struct{})
	)
	a := &accounts{store: cfg.Store, keys: cfg.Keys, secrets: cfg.Secrets, connections: cfg.Connections,
		retention: cfg.Retention.WithDefaults(), logRetention: cfg.LogRetention, minLogRetention: cfg.MinLogRetention,
		log: cfg.Logger, now: cfg.Now}
	k := &keyring{store: cfg.Store, nodes: nodes, locks: locks, keys: cfg.Keys, keyProvider: cfg.KeyProvider,
		secrets: cfg.Secrets, connections: cfg.Connections, snapshots: cfg.Snapshots, log: cfg.Logger,
		keysGone: map[string]bool{}}
	p := &placer{store: cfg.Store, nodes: nodes, localCapacity: localCap, ca: cfg.Cluster, audit: cfg.Audit,
		bg: bg, log: cfg.Logger, now: cfg.Now}
	nc := &nodeCalls{store: cfg.Store, nodes: nodes, keyProvider: cfg.KeyProvider, secrets: cfg.Secrets,
		connections: cfg.Connections, audit: cfg.Audit, log: cfg.Logger, now: cfg.Now}
	sb := &sandboxes{store: cfg.Store, nodes: nodes, locks: locks, guards: cfg.Guards,
		work: workTracker{n: map[string]int{}, ports: map[string]int{}}, bg: bg, log: cfg.Logger, now: cfg.Now}
	se := &sessions{store: cfg.Store, nodes: nodes, locks: locks, snapshots: cfg.Snapshots, ops: ops,
		replica: cfg.ReplicaID, rolls: roller{m: map[string]rollState{}}, crashes: crashBudget{store: cfg.Store, log: cfg.Logger, now: cfg.Now}, bg: bg, log: cfg.Logger, now: cfg.Now}
	b := &snapshotBook{store: cfg.Store, nodes: nodes, locks: locks, snapshots: cfg.Snapshots,
		templateRoot: cfg.TemplateRoot, replica: cfg.ReplicaID, log: cfg.Logger, now: cfg.Now}
	l := &loops{store: cfg.Store, nodes: nodes, locks: locks, snapshots: cfg.Snapshots, connections: cfg.Connections,
		ops: ops, replica: cfg.ReplicaID, reap: cfg.ReapInterval, idle: cfg.IdleInterval, rollEvery: cfg.RollInterval,
		pruneEvery: cfg.PruneInterval, gcEvery: cfg.GCInterval, gcGrace: cfg.GCGrace, imageGrace: cfg.ImageGCGrace, keysEvery: cfg.KeyCheckInterval,
		log: cfg.Logger, now: cfg.Now, stop: stop, wg: &sync.WaitGroup{}, bg: bg}

	a.keyring = k
	k.placer, k.sandboxes, k.book = p, sb, b
	p.accounts, p.sandboxes = a, sb
	nc.keyring, nc.placer, nc.sandboxes = k, p, sb
	sb.accounts, sb.keyring, sb.placer, sb.sessions = a, k, p, se
	se.accounts, se.keyring, se.placer, se.sandboxes, se.book = a, k, p, sb, b
	b.accounts, b.keyring, b.placer, b.sessions = a, k, p, se
	l.accounts, l.keyring, l.placer, l.sandboxes, l.sessions, l.book = a, k, p, sb, se, b
	sio := &sandboxIO{sandboxes: sb}
	return &Service{accounts: a, keyring: k, placer: p, nodeCalls: nc, sandboxes: sb, sessions: se, snapshotBook: b, loops: l,
		sandboxIO: sio, builder: &builder{placer: p, sandboxes: sb, io: sio, store: cfg.Store, log: cfg.Logger, now: p.now}}
}
