// Package app wires Airlock's single-binary mode: the control plane on the embedded store (SQLite in WAL
// mode) and a local node, in one process, with all state under one data directory.
//
// Data directory layout:
//
//	airlock.db       the Store (SQLite, WAL): also the local keyring's per-tenant key-encryption keys,
//	                 encrypted under the master key, and the tenants' secrets and OAuth connections,
//	                 encrypted under data keys the keyring wraps
//	keys/master.key  the master key (0600), unless Config.MasterKeyFile names another file; the pkcs11
//	                 provider's state (pkcs11.json)
//	templates/       template root filesystems
//	runtime/         runsc state and each sandbox's directory (removed with the sandbox)
//	node/netns/      each sandbox's network namespace (removed with the sandbox)
//	node/audit/      each sandbox's channel audit log (kept)
//	node/ca/         each running sandbox's interception CA, its key wrapped by the tenant's key
//	node/flows/      each sandbox's network flow log, <sandbox-id>.jsonl (kept)
//
// The API listener also serves GET /metrics (Prometheus text format) without authentication: counters
// of the whole instance, no per-sandbox labels. Keep Listen on loopback, or have the proxy in front
// refuse /metrics to those who should not see it.
package app

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/audit"
	"github.com/airlockrun/airlock/internal/blob"
	blobcache "github.com/airlockrun/airlock/internal/blob/cache"
	bloblocal "github.com/airlockrun/airlock/internal/blob/local"
	blobs3 "github.com/airlockrun/airlock/internal/blob/s3"
	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/connections"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/fsutil"
	"github.com/airlockrun/airlock/internal/gateway"
	"github.com/airlockrun/airlock/internal/gateway/castore"
	"github.com/airlockrun/airlock/internal/gateway/flowlog"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/keys"
	"github.com/airlockrun/airlock/internal/keys/local"
	"github.com/airlockrun/airlock/internal/keys/master"
	"github.com/airlockrun/airlock/internal/keys/pkcs11"
	"github.com/airlockrun/airlock/internal/node"
	"github.com/airlockrun/airlock/internal/nodeapi"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/retention"
	"github.com/airlockrun/airlock/internal/secrets"
	"github.com/airlockrun/airlock/internal/snapshot"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/postgres"
	"github.com/airlockrun/airlock/internal/store/sqlite"
	"github.com/airlockrun/airlock/internal/template"
)

// The key providers' names.
const (
	KeyProviderLocal  = "local"
	KeyProviderPKCS11 = "pkcs11"
)

// Defaults.
const (
	DefaultDataDir = "/var/lib/airlock"
	DefaultListen  = "127.0.0.1:7070"
	// DefaultImageCacheBytes is the default bound of the checkpoint image cache.
	DefaultImageCacheBytes = 4 << 30
	// APIKeyFile is the name, in the data directory, of the file where versions before tenancy kept the
	// first API key. The CLI still reads it when the key file is missing.
	APIKeyFile = "api-key"
	// DaemonName is the file name of the in-sandbox daemon's binary (cmd/airlock-daemon), which the
	// server finds next to its own executable, or on PATH.
	DaemonName = "airlock-daemon"
)

// Config configures Run. Zero values take the defaults above.
type Config struct {
	// DataDir holds all state.
	DataDir string
	// KeyFile is where the first start writes the operator tenant's first API key (0600), for the CLI:
	// outside the data directory, which holds no credential in the clear. Empty: DefaultKeyFile().
	KeyFile string
	// ShowKey prints the first API key itself on Out, not only where it was saved (for a person at a
	// terminal; never into a log).
	ShowKey bool
	// Listen is the API's address. Keep it on loopback unless a TLS proxy fronts it (which should also
	// keep the unauthenticated GET /metrics to itself).
	Listen string
	// Runsc is the runsc binary; empty: from PATH.
	Runsc string
	// DaemonBinary is the static binary run as each sandbox's daemon (cmd/airlock-daemon). Empty:
	// DaemonName next to this executable, else on PATH (see FindDaemon).
	DaemonBinary string
	// Debug keeps runsc debug logs in each sandbox's directory.
	Debug bool
	// Logger receives logs. Nil: slog.Default().
	Logger *slog.Logger
	// Out receives what is meant for the person who started Airlock: the first API key, the address.
	// Nil: os.Stdout.
	Out io.Writer
	// Ready, if set, is called with the API's address once it accepts connections.
	Ready func(addr string)
	// Hosts are static names the network gateway resolves before DNS (on-prem services; tests).
	Hosts map[string][]netip.Addr
	// HostsOnly makes the gateway resolve nothing but Hosts (offline installations; tests).
	HostsOnly bool
	// ExtraRootsPEM are CA certificates the gateway trusts, besides the host's roots, when it verifies
	// an upstream it re-encrypts to (on-prem services; tests).
	ExtraRootsPEM []byte
	// EgressAllowPrivate are the guarded ranges (private, link-local, loopback, CGNAT, metadata, the
	// host's own addresses, …) that tenants' network rules may open (airlock up --egress-allow-private;
	// see policy.Guards). Empty: none; a tenant's rule into a guarded range is refused with a 400.
	EgressAllowPrivate []netip.Prefix
	// ImageCacheBytes bounds the node's cache of recent checkpoint images (fast resumes and forks).
	// Zero: DefaultImageCacheBytes; negative: no cache.
	ImageCacheBytes int64
	// WarmPool is how many sandboxes the node keeps restored ahead per kind of create of a template's
	// start snapshot (node.Config). Zero: node.DefaultWarmPool; negative: none.
	WarmPool int
	// Retention is the default snapshot retention (tenants and sessions override it). Zero fields:
	// retention.Default's.
	Retention retention.Policy
	// PruneInterval, GCInterval and GCGrace pace the time machine's upkeep: how often retention is
	// applied, how often unreferenced snapshot chunks are collected, and how old an unreferenced chunk
	// must be to go. Zero: the control plane's defaults (5 minutes, 10 minutes, 1 hour).
	PruneInterval, GCInterval, GCGrace time.Duration
	// LogRetention is how long a tenant's logs are kept unless it says (zero: forever); MinLogRetention
	// is the shortest a tenant may say (zero: no floor).
	LogRetention, MinLogRetention time.Duration
	// ImageGCGrace is how long a template's image nothing uses stays on the node (zero: 1 hour).
	ImageGCGrace time.Duration
	// DefaultImage is the OCI archive the default template is installed from at start (see
	// controlplane.InstallDefaultImage): "" is DefaultImagePath(); "none" keeps the built-in template
	// (the host's /usr). A missing file keeps it too.
	DefaultImage string
	// PKCS11 configures the pkcs11 key provider, for tenants whose keys are in a customer's HSM or KMS.
	// A zero Module: none (every tenant uses the local keyring).
	PKCS11 PKCS11Config
	// KeyCheckInterval is how often each tenant with running sandboxes has its key checked; the
	// sandboxes of a tenant whose key is revoked or unreachable are stopped. Zero: 15 s; at most 60 s.
	KeyCheckInterval time.Duration
	// PublicURL is the URL under which people's browsers reach this API; OAuth providers redirect to
	// PublicURL + "/v1/oauth/callback" at the end of the authorization code flow. Empty:
	// "http://" + the address Listen bound.
	PublicURL string
	// IngressDomain is the base domain of the ingress's host form: <port>-<sandbox id>.<domain>, with
	// the ID's underscore as a dash, reaches a sandbox's port (a wildcard DNS name, or *.localhost,
	// must lead to the API). Empty: no host form; the path form /v1/sandboxes/{id}/ports/{port}/ works
	// anyway.
	IngressDomain string
	// IngressMaxConns bounds the requests and tunnels in progress through the ingress per sandbox; past
	// it they are refused (429). Zero: api.DefaultMaxPortConns.
	IngressMaxConns int
	// PostgresDSN, if set, keeps the Store in that PostgreSQL database (a libpq connection string or a
	// postgres:// URL) instead of the SQLite file in the data directory.
	PostgresDSN string
	// S3, if set, keeps the snapshot store's chunks and manifests in that bucket instead of DATA/blobs.
	S3 *blobs3.Config
	// MasterKeyFile holds the master key, which encrypts the local keyring's keys in the Store (64 hex
	// digits, mode 0600; made with a fresh key if missing). Every server on one database must be given
	// the same one. Empty: DATA/keys/master.key.
	MasterKeyFile string
	// ClusterListen, if set, is the address of the cluster port: nodes that joined call it (mutual TLS
	// with certificates from the cluster CA) for their sandboxes' secrets, tokens and key wraps, and
	// to send audit entries and sandbox exits. Empty: no cluster port.
	ClusterListen string
	// ClusterReady, if set, is called with the cluster port's address once it accepts connections.
	ClusterReady func(addr string)
	// NoLocalNode runs a control plane only (airlock server): no sandbox runs in this process; they
	// run on the nodes that joined and report to the cluster port (ClusterListen is required). Many
	// such replicas can serve one database and bucket.
	NoLocalNode bool
}

// The prefixes of the Store's documents holding the tenants' secrets and OAuth connections.
const (
	SecretsDocPrefix     = "secrets/"
	ConnectionsDocPrefix = "connections/"
)

// importFiles moves what versions before the keyring, secrets and connections were kept in the Store
// left in the data directory into the Store: DATA/keys/keyring.json (each tenant's keys merged with any
// the Store has), DATA/secrets and DATA/connections (a tenant's records the Store has already are kept,
// and that file left where it is, with a warning).
func importFiles(ctx context.Context, log *slog.Logger, kr *local.Keyring, st store.Docs, dataDir string) error {
	moved, merged, err := local.ImportFile(ctx, kr, filepath.Join(dataDir, "keys"))
	if err != nil {
		return err
	}
	if moved > 0 || merged > 0 {
		log.Info("moved the keyring file into the store", "tenants", moved, "merged", merged)
	}
	for _, kind := range []struct{ dir, prefix string }{{"secrets", SecretsDocPrefix}, {"connections", ConnectionsDocPrefix}} {
		files, err := secrets.NewFileStorage(filepath.Join(dataDir, kind.dir))
		if err != nil {
			return err
		}
		docs, err := secrets.NewDocStorage(st, kind.prefix)
		if err != nil {
			return err
		}
		moved, skipped, err := secrets.ImportFiles(ctx, files, docs)
		if err != nil {
			return fmt.Errorf("move %s into the store: %w", kind.dir, err)
		}
		if moved > 0 {
			log.Info("moved files into the store", "what", kind.dir, "tenants", moved)
		}
		if len(skipped) > 0 {
			log.Warn("files not moved into the store: it has records of these tenants already; the files stay", "what", kind.dir, "tenants", skipped)
		}
		// The directory goes once it is empty.
		_ = os.Remove(filepath.Join(dataDir, kind.dir))
	}
	return nil
}

// DefaultIngressDomain is the CLI's ingress domain: browsers send every *.localhost name to loopback.
const DefaultIngressDomain = "airlock.localhost"

// PKCS11Config configures the pkcs11 key provider.
type PKCS11Config struct {
	// Module is the token's PKCS#11 module (.so); TokenLabel the token; PIN its user PIN.
	Module, TokenLabel, PIN string
	// Helper is the airlock-pkcs11 binary; empty: next to this executable, or on PATH.
	Helper string
	// Env is added to the helper's environment (module settings such as SOFTHSM2_CONF).
	Env []string
}

// DefaultKeyFile is where the CLI looks for an API key and the first start saves one:
// $XDG_CONFIG_HOME/airlock/api-key, or ~/.config/airlock/api-key.
func DefaultKeyFile() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		dir = "/root/.config"
	}
	return filepath.Join(dir, "airlock", "api-key")
}

// InstanceTag is a short tag, derived from the data directory, that keeps the host-wide names of one
// Airlock instance (its nftables table, veth prefix and cgroup parent) apart from another's on the same
// host.
func InstanceTag(dataDir string) string {
	sum := sha256.Sum256([]byte(dataDir))
	return hex.EncodeToString(sum[:2])
}

// DefaultImageName is the default template's image that scripts/install.sh builds, in PREFIX/lib/airlock.
const DefaultImageName = "default-image.tar"

// DefaultImagePath is where scripts/install.sh puts the default template's image: lib/airlock/ beside
// the bin/ directory of this executable.
func DefaultImagePath() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(filepath.Dir(exe)), "lib", "airlock", DefaultImageName)
}

// FindDaemon returns the in-sandbox daemon's binary: DaemonName next to this executable (where
// scripts/install.sh puts it, built with the server from one source), else on PATH. The node checks,
// on every connection, that the daemon speaks its protocol (it must prove itself with OpHello).
func FindDaemon() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), DaemonName)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath(DaemonName); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("the in-sandbox daemon %s is neither next to this executable nor on PATH (scripts/install.sh installs it)", DaemonName)
}

// egressGuards returns the operator's egress guards: the guarded ranges open lets tenants open, and
// the host's own addresses, which it reads again every hostAddressesEvery until stop is called (an
// address the host takes later, by DHCP or a new interface, is guarded from then on).
func egressGuards(open []netip.Prefix, log *slog.Logger) (g *policy.Guards, stop func(), err error) {
	g, err = policy.NewGuards(open, hostAddresses())
	if err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() { // owner: the caller, through stop
		defer close(ended)
		t := time.NewTicker(hostAddressesEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := g.SetHost(hostAddresses()); err != nil {
					log.Warn("refresh the host's addresses for the egress guard", "err", err)
				}
			}
		}
	}()
	return g, func() { close(done); <-ended }, nil
}

// hostAddressesEvery is how often the egress guard reads the host's addresses again.
const hostAddressesEvery = 5 * time.Second

// hostAddresses reports the host's own addresses, which no sandbox may reach unless the operator
// opened them and a rule names them.
func hostAddresses() []netip.Prefix {
	var out []netip.Prefix
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
				ip = ip.Unmap()
				out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
			}
		}
	}
	return out
}

// Run starts Airlock and serves until ctx ends; then it shuts down cleanly: the API stops accepting
// requests, every sandbox is stopped and removed from the host, and the store is closed.
func Run(ctx context.Context, cfg Config) error {
	s, err := newServer(cfg)
	if err != nil {
		return err
	}
	return s.run(ctx, s.serveUntil,
		s.openDataDir,         // DATA, mode 0700
		s.openStore,           // the Store, the audit logs on it, the metrics registry
		s.openKeys,            // the master key, the keyring, the cluster CA, pkcs11
		s.openSecrets,         // the tenants' secrets, which seal the audit entries
		s.listen,              // the API's address
		s.openEgress,          // the egress guards and extra roots
		s.openConnections,     // the tenants' OAuth connections
		s.openSnapshots,       // the snapshot store: S3, or DATA/blobs
		s.startNode,           // the node of this process, unless NoLocalNode
		s.openClusterIdentity, // with a cluster port: this replica's certificate
		s.startControlPlane,   // bootstrapped, its first API key saved
		s.installDefaultImage, // the default template
		s.serveCluster,        // the cluster port, if any
		s.serveAPI)            // the API and /metrics
}

// server is the system Run builds: the control plane on its store, and the node of this process
// unless Config.NoLocalNode.
type server struct {
	system
	cfg Config

	store interface {
		store.Store
		Close() error
	}
	// audit is the tenants' audit logs; reg the registry of this instance's metrics, served at
	// /metrics (not the global default: two instances in one process, as in tests, keep theirs apart).
	audit *audit.Recorder
	reg   *prometheus.Registry
	// keyring routes each tenant to its key provider; localKeys is the local one, under masterKey,
	// which also seals the cluster's CA.
	masterKey *master.Key
	localKeys *local.Keyring
	keyring   *keys.Router
	clusterCA *cluster.CA
	secrets   *secrets.Store
	conns     *connections.Manager
	// ln is the API's listener, bound early so that publicURL can name its port.
	ln        net.Listener
	publicURL string
	// self is the control plane's certificate from the cluster CA, with a cluster port (else nil).
	self      *cluster.SelfCert
	templates *template.Catalog
	cp        *controlplane.Service
	// nodeCP is cp, for the node of this process, whose background stores may call it from the start
	// (localSnapshotCalls).
	nodeCP     atomic.Pointer[controlplane.Service]
	clusterSrv *http.Server
	api        *http.Server
	served     chan error // what the API's Serve returned
}

// newServer checks cfg and fills its defaults.
func newServer(cfg Config) (*server, error) {
	if cfg.DataDir == "" {
		cfg.DataDir = DefaultDataDir
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.ImageCacheBytes == 0 {
		cfg.ImageCacheBytes = DefaultImageCacheBytes
	}
	cfg.Logger, cfg.Out = defaultOutputs(cfg.Logger, cfg.Out)
	if !cfg.NoLocalNode {
		if err := checkHost("airlock up", &cfg.DaemonBinary); err != nil {
			return nil, err
		}
	}
	if cfg.NoLocalNode && cfg.ClusterListen == "" {
		return nil, errors.New("a control plane with no node of its own needs a cluster port for the nodes (ClusterListen)")
	}
	host := NodeConfig{Runsc: cfg.Runsc, DaemonBinary: cfg.DaemonBinary, Debug: cfg.Debug, Hosts: cfg.Hosts, HostsOnly: cfg.HostsOnly,
		ExtraRootsPEM: cfg.ExtraRootsPEM, EgressAllowPrivate: cfg.EgressAllowPrivate,
		ImageCacheBytes: cfg.ImageCacheBytes, WarmPool: cfg.WarmPool, LogRetention: cfg.LogRetention}
	return &server{cfg: cfg, system: system{log: cfg.Logger, out: cfg.Out, host: host}}, nil
}

// openDataDir makes the data directory, mode 0700.
func (s *server) openDataDir(context.Context) error { return s.setDataDir(s.cfg.DataDir, true) }

// openStore opens the Store (PostgreSQL with a DSN, else SQLite in the data directory), the tenants'
// audit logs on it, and the metrics registry.
func (s *server) openStore(ctx context.Context) error {
	var err error
	if s.cfg.PostgresDSN != "" {
		s.store, err = postgres.Open(ctx, s.cfg.PostgresDSN)
	} else {
		s.store, err = sqlite.Open(ctx, filepath.Join(s.dataDir, "airlock.db"))
	}
	if err != nil {
		return err
	}
	s.onClose(s.store.Close)
	// Closed (what is queued written) before the store, after everything that records into it stopped.
	s.audit = audit.New(s.store, s.log)
	s.onCloseQuietly(s.audit.Close)
	s.reg = prometheus.NewRegistry()
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return nil
}

// openKeys opens the master key, the local keyring in the Store, the cluster's CA (made on first start:
// nodes that join get their certificates from it), and the pkcs11 provider if configured, and routes
// each tenant to its provider. It moves what older versions kept in files into the Store.
func (s *server) openKeys(ctx context.Context) error {
	masterPath := s.cfg.MasterKeyFile
	if masterPath == "" {
		masterPath = filepath.Join(s.dataDir, "keys", "master.key")
	}
	masterBytes, err := master.LoadFile(masterPath, true)
	if err != nil {
		return err
	}
	s.masterKey, err = master.New(masterBytes)
	clear(masterBytes)
	if err != nil {
		return err
	}
	if s.localKeys, err = local.NewInStore(ctx, s.store, s.masterKey); err != nil {
		return err
	}
	if s.clusterCA, err = cluster.LoadCA(ctx, s.store, s.masterKey); err != nil {
		return err
	}
	if err := importFiles(ctx, s.log, s.localKeys, s.store, s.dataDir); err != nil {
		return err
	}
	providers := map[string]keys.KeyProvider{KeyProviderLocal: s.localKeys}
	if p := s.cfg.PKCS11; p.Module != "" {
		p11, err := pkcs11.New(pkcs11.Config{Helper: p.Helper, Module: p.Module, TokenLabel: p.TokenLabel,
			PIN: p.PIN, Env: p.Env, Dir: filepath.Join(s.dataDir, "keys"), Logger: s.log})
		if err != nil {
			return err
		}
		s.onCloseQuietly(func() { _ = p11.Close() })
		providers[KeyProviderPKCS11] = p11
	}
	s.keyring, err = keys.NewRouter(providers, KeyProviderLocal, func(ctx context.Context, tenantID string) (string, error) {
		t, err := s.store.GetTenant(ctx, tenantID)
		if err != nil {
			return "", err
		}
		return t.KeyProvider, nil
	})
	return err
}

// openSecrets opens the tenants' secrets, and seals the audit entries' payloads under their tenant's
// key with it: a revoked key leaves them unreadable.
func (s *server) openSecrets(context.Context) error {
	docs, err := secrets.NewDocStorage(s.store, SecretsDocPrefix)
	if err != nil {
		return err
	}
	if s.secrets, err = secrets.New(secrets.Config{Keys: s.keyring, Storage: docs}); err != nil {
		return err
	}
	s.audit.SetSealer(func(ctx context.Context, tenantID string) (audit.Sealer, error) {
		return s.secrets.Sealer(ctx, tenantID, controlplane.AuditSealPurpose, true)
	})
	return nil
}

// listen binds the API's address now, so that the OAuth callback URL can name the port even when Listen
// asked for any.
func (s *server) listen(context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Listen, err)
	}
	s.ln = ln
	s.onCloseQuietly(func() { _ = ln.Close() }) // a no-op after the shutdown closed it
	s.publicURL = strings.TrimSuffix(s.cfg.PublicURL, "/")
	if s.publicURL == "" {
		s.publicURL = "http://" + ln.Addr().String()
	}
	return nil
}

// openConnections opens the tenants' OAuth connections (closed after the control plane and the
// gateway stopped).
func (s *server) openConnections(context.Context) error {
	docs, err := secrets.NewDocStorage(s.store, ConnectionsDocPrefix)
	if err != nil {
		return err
	}
	s.conns, err = connections.New(connections.Config{Keys: s.keyring, Storage: docs, RedirectURL: s.publicURL + "/v1/oauth/callback", Guards: s.guards, Logger: s.log})
	if err != nil {
		return err
	}
	s.onClose(s.conns.Close)
	return nil
}

// openSnapshots opens the snapshot store on the S3 bucket or DATA/blobs. The control plane's store
// makes grants with the keyring; the node of this process writes and reads images through the same
// store (so snapshot GC sees its writers).
func (s *server) openSnapshots(ctx context.Context) error {
	blobs, err := openBlobs(ctx, s.cfg.S3, filepath.Join(s.dataDir, "blobs"), "", s.log)
	if err != nil {
		return err
	}
	s.snaps, err = snapshot.New(snapshot.Config{Blobs: blobs, Keys: s.keyring, Logger: s.log})
	return err
}

// startNode starts the node of this process, unless NoLocalNode; it is stopped after the sandboxes are
// gone.
func (s *server) startNode(context.Context) error {
	if s.cfg.NoLocalNode {
		return nil
	}
	return s.startHostNode(hostNode{id: nodecontract.LocalID, keys: s.keyring, reg: s.reg, audit: s.audit.Record,
		// In one process the node needs no check of which sandbox asks: the gateway asks only for
		// its sandboxes' bindings.
		secret: func(ctx context.Context, tenantID, _, name string) ([]byte, error) {
			return s.secrets.Reveal(ctx, tenantID, name)
		},
		token: func(ctx context.Context, tenantID, _, connection string) ([]byte, error) {
			return s.conns.Token(ctx, tenantID, connection)
		},
		onExit: func(id, reason string) {
			if cp := s.cp; cp != nil {
				go cp.HandleSandboxExit(id, reason)
			}
		},
		snapshots: localSnapshotCalls{cp: &s.nodeCP}})
}

// localSnapshotCalls is what the node of this process asks of its control plane for the snapshots it
// stores (nodecontract.SnapshotCalls): the control plane's own calls, for nodecontract.LocalID. The
// node starts before the control plane is made: until then it is told to try again.
type localSnapshotCalls struct {
	cp *atomic.Pointer[controlplane.Service]
}

func (c localSnapshotCalls) service() (*controlplane.Service, error) {
	cp := c.cp.Load()
	if cp == nil {
		return nil, fmt.Errorf("the control plane is not up yet: %w", errdefs.ErrUnavailable)
	}
	return cp, nil
}

// SnapshotSaved implements nodecontract.SnapshotCalls.
func (c localSnapshotCalls) SnapshotSaved(ctx context.Context, rep nodecontract.SnapshotReport) error {
	cp, err := c.service()
	if err != nil {
		return err
	}
	return cp.NodeSnapshotSaved(ctx, nodecontract.LocalID, rep)
}

// SnapshotGrant implements nodecontract.SnapshotCalls.
func (c localSnapshotCalls) SnapshotGrant(ctx context.Context, tenantID, snapshotID string) (*snapshot.Grant, error) {
	cp, err := c.service()
	if err != nil {
		return nil, err
	}
	return cp.NodeSnapshotGrant(ctx, nodecontract.LocalID, tenantID, snapshotID)
}

// SnapshotStored implements nodecontract.SnapshotCalls.
func (c localSnapshotCalls) SnapshotStored(ctx context.Context, rep nodecontract.SnapshotReport) error {
	cp, err := c.service()
	if err != nil {
		return err
	}
	return cp.NodeSnapshotStored(ctx, nodecontract.LocalID, rep)
}

// openClusterIdentity gives the control plane, with a cluster port, a certificate from the cluster CA,
// with which it calls the nodes that joined and serves their calls.
func (s *server) openClusterIdentity(context.Context) error {
	if s.cfg.ClusterListen == "" {
		return nil
	}
	replica, err := replicaID(s.dataDir)
	if err != nil {
		return err
	}
	if s.self, err = s.clusterCA.NewSelfCert(cluster.Identity{Role: cluster.RoleControlPlane, ID: replica}, nil); err != nil {
		return fmt.Errorf("cluster port: %w", err)
	}
	return nil
}

// startControlPlane makes the control plane, bootstraps the operator tenant (saving its first API key)
// and starts it.
func (s *server) startControlPlane(ctx context.Context) error {
	s.templates = template.NewCatalog(filepath.Join(s.dataDir, "templates"))
	s.templates.Host.Logger = s.log
	s.onCloseQuietly(func() { _ = s.templates.Close() })
	cfg := s.cfg
	cpCfg := controlplane.Config{Store: s.store, Logger: s.log, Secrets: s.secrets, Connections: s.conns,
		Snapshots: s.snaps,
		Retention: cfg.Retention, PruneInterval: cfg.PruneInterval, GCInterval: cfg.GCInterval, GCGrace: cfg.GCGrace,
		ImageGCGrace: cfg.ImageGCGrace, LogRetention: cfg.LogRetention, MinLogRetention: cfg.MinLogRetention,
		Keys: s.keyring, KeyCheckInterval: cfg.KeyCheckInterval, Cluster: s.clusterCA, KeyProvider: s.keyring, Audit: s.audit.Record,
		Guards: s.guards}
	if s.node != nil {
		cpCfg.Node = s.node
	} else {
		cpCfg.TemplateRoot = func(ctx context.Context, name string) (string, error) {
			t, err := s.templates.Get(ctx, name)
			if err != nil {
				return "", err
			}
			return t.RootFS, nil
		}
	}
	if s.self != nil {
		cpCfg.ReplicaID = s.self.Identity().ID
		cpCfg.DialNode = s.dialNode
	}
	cp, err := controlplane.New(cpCfg)
	if err != nil {
		return err
	}
	s.cp = cp
	s.nodeCP.Store(cp)
	key, err := cp.Bootstrap(ctx)
	if err != nil {
		return err
	}
	if err := s.saveFirstKey(key); err != nil {
		return err
	}
	return cp.Start(ctx)
}

// dialNode is the control plane's client of the node id at addr (controlplane.Config.DialNode).
func (s *server) dialNode(id, addr string, pinned func(string) error) (controlplane.Node, error) {
	return nodeapi.NewClient(nodeapi.ClientConfig{NodeID: id, Addr: addr, Self: s.self, Roots: s.clusterCA.Pool(), Pinned: pinned, Templates: s.templates, Logger: s.log,
		LinkAudit: func(ctx context.Context, sandboxID string) link.Audit {
			sb, err := s.store.GetSandboxAnyTenant(ctx, sandboxID)
			if err != nil {
				return nil
			}
			return audit.DaemonAudit{Tenant: sb.TenantID, Sandbox: sandboxID, Sink: s.audit.Record}
		}})
}

// saveFirstKey saves the operator tenant's first API key, made by the first start ("": none), to the
// key file, and says where (and, with ShowKey, what it is).
func (s *server) saveFirstKey(key string) error {
	if key == "" {
		return nil
	}
	keyPath := s.cfg.KeyFile
	if keyPath == "" {
		keyPath = DefaultKeyFile()
	}
	if err := os.MkdirAll(filepath.Dir(keyPath), 0o700); err != nil {
		return fmt.Errorf("save API key: %w", err)
	}
	if err := fsutil.WriteFileAtomic(keyPath, []byte(key+"\n"), 0o600); err != nil {
		return fmt.Errorf("save API key: %w", err)
	}
	if s.cfg.ShowKey {
		fmt.Fprintf(s.out, "Created the operator tenant. Its first API key (shown once; saved to %s, mode 0600):\n\n    %s\n\n", keyPath, key)
	} else {
		fmt.Fprintf(s.out, "Created the operator tenant. Its first API key is saved to %s (mode 0600).\n", keyPath)
	}
	return nil
}

// installDefaultImage installs the default template from its image (Config.DefaultImage), on a
// control plane with a node of its own.
func (s *server) installDefaultImage(ctx context.Context) error {
	if s.cfg.NoLocalNode || s.cfg.DefaultImage == "none" {
		return nil
	}
	img := s.cfg.DefaultImage
	if img == "" {
		img = DefaultImagePath()
	}
	if img == "" {
		return nil
	}
	t0 := time.Now()
	t, installed, err := s.cp.InstallDefaultImage(ctx, img)
	switch {
	case err != nil:
		return fmt.Errorf("install the default template: %w", err)
	case installed:
		fmt.Fprintf(s.out, "Installed the default template from %s (%s, in %s).\n", img, t.Digest, time.Since(t0).Round(time.Millisecond))
	case t.Digest == "":
		s.log.Warn("no default template image: sandboxes of the default template boot the host's /usr (scripts/install.sh builds the image)", "path", img)
	}
	return nil
}

// serveCluster starts the cluster port (Config.ClusterListen), if any: the calls of nodes, over mutual
// TLS with a certificate this replica issues itself from the cluster CA (renewed while it runs).
func (s *server) serveCluster(context.Context) error {
	if s.cfg.ClusterListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.ClusterListen)
	if err != nil {
		return fmt.Errorf("cluster port: listen on %s: %w", s.cfg.ClusterListen, err)
	}
	s.clusterSrv = newHTTPServer(nodeapi.NewControlHandler(s.cp, s.log), s.log)
	s.onCloseQuietly(func() { _ = s.clusterSrv.Close() })
	serveTLS(s.clusterSrv, ln, s.self.ServerTLS(s.clusterCA.Pool(), cluster.RoleNode)) // ends on its Shutdown or Close
	s.log.Info("cluster port is up", "addr", ln.Addr().String(), "replica", s.self.Identity().String())
	fmt.Fprintf(s.out, "Nodes reach this control plane at https://%s\n", ln.Addr())
	if s.cfg.ClusterReady != nil {
		s.cfg.ClusterReady(ln.Addr().String())
	}
	return nil
}

// serveAPI serves the API, and /metrics, on the listener: HTTP/1.1 and cleartext HTTP/2 (prior
// knowledge, as gRPC clients speak it).
func (s *server) serveAPI(context.Context) error {
	h := api.New(s.cp, s.log, promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}))
	h.SetAudit(s.audit)
	h.SetIngressDomain(s.cfg.IngressDomain)
	if err := h.SetPublicURL(s.cfg.PublicURL); err != nil {
		return err
	}
	h.SetIngressLimit(s.cfg.IngressMaxConns)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	s.api = newHTTPServer(h, s.log)
	s.api.Protocols = &protocols
	s.served = make(chan error, 1)
	go func() { s.served <- s.api.Serve(s.ln) }() // owner: Run; ends on the API's Shutdown or Close
	s.log.Info("airlock is up", "addr", s.ln.Addr().String(), "data_dir", s.dataDir)
	fmt.Fprintf(s.out, "Airlock is listening on http://%s (data in %s)\n", s.ln.Addr(), s.dataDir)
	if s.cfg.Ready != nil {
		s.cfg.Ready(s.ln.Addr().String())
	}
	return nil
}

// serveUntil serves until ctx ends or the API's server fails, then shuts down: it stops taking requests
// first (streams are closed by their sandboxes going away), then stops every sandbox, then the node's
// watchers.
func (s *server) serveUntil(ctx context.Context) error {
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-s.served:
	}
	s.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() {
		_ = s.api.Shutdown(sctx)
	}()
	_ = s.ln.Close()
	errs := []error{}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		errs = append(errs, serveErr)
	}
	if s.clusterSrv != nil {
		_ = s.clusterSrv.Shutdown(sctx)
	}
	if err := s.cp.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("stop sandboxes: %w", err))
	}
	if s.node != nil {
		if err := s.node.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("stop node: %w", err))
		}
	}
	_ = s.api.Close()
	s.log.Info("stopped")
	return errors.Join(errs...)
}

// system is what Run and RunNode build, one named step at a time (see run): each step keeps what it
// builds here and pushes what undoes it (onClose), and close undoes it all in reverse order on the way
// out, as deferred calls would: what was built first is closed last.
type system struct {
	log     *slog.Logger
	out     io.Writer
	dataDir string // absolute
	tag     string // InstanceTag(dataDir)
	// host configures the node of this host: RunNode's config, or what Run's shares with it.
	host NodeConfig

	// roots are the host's roots with the operator's extra ones (nil: the host's); guards are the
	// egress guards (openEgress).
	roots  *x509.CertPool
	guards *policy.Guards
	// snaps is the snapshot store (nil: a node with none); node is the node of this process (nil:
	// none; startHostNode).
	snaps *snapshot.Store
	node  *node.Local

	closers []func() error
}

// step is one named step of building a system.
type step func(ctx context.Context) error

// run builds the system with steps, in order, up to the first that fails; once all are done, it serves
// with serve. On the way out it closes what the steps opened, in reverse order, and reports the first
// error with those of closing.
func (s *system) run(ctx context.Context, serve step, steps ...step) (err error) {
	defer func() { err = errors.Join(err, s.close()) }()
	for _, st := range steps {
		if err := st(ctx); err != nil {
			return err
		}
	}
	return serve(ctx)
}

// onClose pushes f onto what close runs; its error is reported.
func (s *system) onClose(f func() error) { s.closers = append(s.closers, f) }

// onCloseQuietly pushes f onto what close runs; its error, if any, is not reported.
func (s *system) onCloseQuietly(f func()) {
	s.onClose(func() error { f(); return nil })
}

// close runs what the steps pushed, in reverse order, and reports their errors.
func (s *system) close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// checkHost finds the in-sandbox daemon's binary unless one is given, and checks that this process is
// root, as a node's sandboxes need; command names the command in the error.
func checkHost(command string, daemon *string) error {
	if *daemon == "" {
		var err error
		if *daemon, err = FindDaemon(); err != nil {
			return err
		}
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s must run as root: sandboxes need mounts, cgroups and network namespaces", command)
	}
	return nil
}

// defaultOutputs returns log and out, or their defaults (slog.Default(), os.Stdout) where nil.
func defaultOutputs(log *slog.Logger, out io.Writer) (*slog.Logger, io.Writer) {
	if log == nil {
		log = slog.Default()
	}
	if out == nil {
		out = os.Stdout
	}
	return log, out
}

// setDataDir resolves the data directory (made, mode 0700, if mkdir) and the instance's tag.
func (s *system) setDataDir(dir string, mkdir bool) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if mkdir {
		if err := os.MkdirAll(abs, 0o700); err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		if err := os.Chmod(abs, 0o700); err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
	}
	s.dataDir, s.tag = abs, InstanceTag(abs)
	return nil
}

// openEgress reads the operator's extra roots and starts the egress guards (stopped on close).
func (s *system) openEgress(context.Context) error {
	roots, err := extraRoots(s.host.ExtraRootsPEM)
	if err != nil {
		return err
	}
	guards, stop, err := egressGuards(s.host.EgressAllowPrivate, s.log)
	if err != nil {
		return err
	}
	s.roots, s.guards = roots, guards
	s.onCloseQuietly(stop)
	return nil
}

// newHTTPServer is an HTTP server of h with the timeouts and error log every listener of Airlock has.
func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// serveTLS serves srv on ln over TLS with tlsCfg (HTTP/2 or HTTP/1.1) until srv shuts down or closes,
// and sends what Serve returned on the channel it returns.
func serveTLS(srv *http.Server, ln net.Listener, tlsCfg *tls.Config) <-chan error {
	tlsCfg.NextProtos = []string{"h2", "http/1.1"}
	srv.TLSConfig = tlsCfg
	served := make(chan error, 1)
	go func() { served <- srv.Serve(tls.NewListener(ln, tlsCfg)) }() // owner: the caller; ends on srv's Shutdown or Close
	return served
}

// hostNode is what the node of this host is given by the process it runs in: the control plane's
// (Run), or a process of its own (RunNode). The rest comes from the system (its hostConfig).
type hostNode struct {
	id string
	// keys wraps the interception CAs' keys; secret and token give the gateway credentials.
	keys          keys.KeyProvider
	secret, token func(ctx context.Context, tenantID, sandboxID, name string) ([]byte, error)
	// audit receives the daemon and egress entries for the tenants' audit logs.
	audit audit.Func
	// sessionCA and keepSessionCA, if set, reach the CAs of sessions the control plane keeps (a node of
	// its own: a session's CA moves with it; castore.Remote).
	sessionCA     func(ctx context.Context, tenantID, sessionID string) ([]byte, error)
	keepSessionCA func(ctx context.Context, tenantID, sessionID string, ca []byte) error
	// reg, if set, gets the egress metrics.
	reg    *prometheus.Registry
	onExit func(id, reason string)
	// snapshots is what the node asks of the control plane for the snapshots it stores.
	snapshots nodecontract.SnapshotCalls
}

// flowSweepEvery is how often a node deletes the flow logs past their retention.
const flowSweepEvery = 10 * time.Minute

// startHostNode starts the node of this host: its runtime drivers, flow log, gateway and node, on the
// snapshot store s.snaps. What it started is stopped on close, after the sandboxes are gone.
func (s *system) startHostNode(h hostNode) error {
	driver, more, err := s.openDrivers()
	if err != nil {
		return err
	}
	flows, err := s.openFlowLog()
	if err != nil {
		return err
	}
	gw, err := s.openGateway(h, flows)
	if err != nil {
		return err
	}
	nodeDir := filepath.Join(s.dataDir, "node")
	if err := moveOldImages(s.dataDir, nodeDir, s.log); err != nil {
		return err
	}
	templates := template.NewCatalog(filepath.Join(s.dataDir, "templates"))
	templates.Host.Logger = s.log
	s.onClose(templates.Close)
	nd, err := node.New(node.Config{
		ID:           h.id,
		Gateway:      gw,
		FlowLog:      flows,
		IfacePrefix:  "al" + s.tag,
		DataDir:      nodeDir,
		Driver:       driver,
		More:         more,
		Templates:    templates,
		DaemonBinary: s.host.DaemonBinary,
		TenantAudit: func(tenantID, sandboxID string) link.Audit {
			return audit.DaemonAudit{Tenant: tenantID, Sandbox: sandboxID, Sink: h.audit}
		},
		OnExit:          h.onExit,
		Logger:          s.log,
		Snapshots:       s.snaps,
		SnapshotCalls:   h.snapshots,
		ImageCacheBytes: s.host.ImageCacheBytes,
		WarmPool:        s.host.WarmPool,
	})
	if err != nil {
		return err
	}
	if h.reg != nil {
		if err := registerStartMetrics(h.reg, nd); err != nil {
			return err
		}
	}
	s.node = nd
	return nil
}

// openFlowLog opens the node's flow log and sweeps it of what is past its retention every
// flowSweepEvery, until close (which closes it after the gateway, which records into it).
func (s *system) openFlowLog() (*flowlog.Log, error) {
	flows, err := flowlog.Open(filepath.Join(s.dataDir, "node", "flows"), s.log)
	if err != nil {
		return nil, err
	}
	s.onClose(flows.Close)
	flows.SetDefaultRetention(s.host.LogRetention)
	stopSweep := make(chan struct{})
	sweepDone := make(chan struct{})
	go func() { // owner: the system; ends on close
		defer close(sweepDone)
		t := time.NewTicker(flowSweepEvery)
		defer t.Stop()
		for {
			if n, err := flows.Sweep(time.Now()); err != nil {
				s.log.Warn("sweep flow logs", "err", err)
			} else if n > 0 {
				s.log.Info("flow logs past their retention deleted", "files", n)
			}
			select {
			case <-stopSweep:
				return
			case <-t.C:
			}
		}
	}()
	s.onCloseQuietly(func() { close(stopSweep); <-sweepDone })
	return flows, nil
}

// openGateway opens the node's network gateway, recording flows into flows, the tenants' audit logs
// and (with h.reg) the egress metrics.
func (s *system) openGateway(h hostNode, flows *flowlog.Log) (*gateway.Gateway, error) {
	sinks := gateway.FlowSinks{flows, audit.FlowSink{Sink: h.audit}}
	if h.reg != nil {
		egressMetrics, err := flowlog.NewMetrics(h.reg)
		if err != nil {
			return nil, err
		}
		sinks = append(sinks, egressMetrics)
	}
	local, err := castore.New(filepath.Join(s.dataDir, "node", "ca"), h.keys)
	if err != nil {
		return nil, err
	}
	var cas gateway.CAStore = local
	if h.sessionCA != nil {
		cas = &castore.Remote{Local: local, Get: h.sessionCA, Put: h.keepSessionCA}
	}
	gw, err := gateway.New(gateway.Config{
		CAs:           cas,
		Secret:        h.secret,
		Token:         h.token,
		UpstreamRoots: s.roots,
		Table:         "airlock_" + s.tag,
		IfacePrefix:   "al" + s.tag,
		SharedPrefix:  "al",
		Hosts:         s.host.Hosts,
		HostsOnly:     s.host.HostsOnly,
		Guards:        s.guards,
		// What no rule could allow is reset by the kernel at the SYN: nothing looks open.
		KernelRefusals: true,
		Flows:          sinks,
		Logger:         s.log,
	})
	if err != nil {
		return nil, err
	}
	s.onClose(gw.Close)
	return gw, nil
}

// registerStartMetrics registers on reg the node's counts of the creates of templates' start
// snapshots (node.StartStats):
//
//	airlock_start_creates_total{how="warm"|"restored"|"booted"}  creates, by how they were served
//	airlock_warm_sandboxes                                       warm sandboxes ready now
func registerStartMetrics(reg prometheus.Registerer, nd *node.Local) error {
	for how, f := range map[string]func(node.StartStats) uint64{
		"warm":     func(s node.StartStats) uint64 { return s.Warm },
		"restored": func(s node.StartStats) uint64 { return s.Restored },
		"booted":   func(s node.StartStats) uint64 { return s.Booted },
	} {
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "airlock_start_creates_total",
			Help:        "Creates of templates' start snapshots on this node, by how they were served: warm (a sandbox restored ahead), restored (from the start snapshot when asked) or booted (the command started anew).",
			ConstLabels: prometheus.Labels{"how": how},
		}, func() float64 { return float64(f(nd.StartStats())) })
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register start metrics: %w", err)
		}
	}
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "airlock_warm_sandboxes",
		Help: "Sandboxes this node keeps restored ahead from templates' start snapshots, ready for a create.",
	}, func() float64 { return float64(nd.StartStats().Ready) })
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("register start metrics: %w", err)
	}
	return nil
}

// openBlobs opens the blob store of the snapshots: the S3 bucket s3 (behind a cache of its chunks in
// cacheDir, unless that is ""), or else the directory dir; nil if neither is given.
func openBlobs(ctx context.Context, s3 *blobs3.Config, dir, cacheDir string, log *slog.Logger) (blob.Store, error) {
	switch {
	case s3 != nil && cacheDir != "":
		remote, err := blobs3.New(ctx, *s3)
		if err != nil {
			return nil, err
		}
		// Chunks are immutable: a restore on this node fetches only those it has not read before.
		return blobcache.New(blobcache.Config{Remote: remote, Dir: cacheDir,
			MaxBytes: DefaultChunkCacheBytes, Cacheable: snapshot.IsChunkKey, Logger: log})
	case s3 != nil:
		return blobs3.New(ctx, *s3)
	case dir != "":
		return bloblocal.New(dir)
	}
	return nil, nil
}

// moveOldImages moves what an older version left in the data directory when control planes still
// carried checkpoint images: the images of snapshots still waiting for their upload (DATA/pending) go
// to the node's pending images, which it now stores itself; the image cache, scratch and transfer
// directories are removed.
func moveOldImages(dataDir, nodeDir string, log *slog.Logger) error {
	old := filepath.Join(dataDir, "pending")
	entries, err := os.ReadDir(old)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if len(entries) > 0 {
		to := filepath.Join(nodeDir, "images", "pending")
		if err := os.MkdirAll(to, 0o700); err != nil {
			return err
		}
		for _, e := range entries {
			if err := os.Rename(filepath.Join(old, e.Name()), filepath.Join(to, e.Name())); err != nil {
				return fmt.Errorf("move the pending image %s to the node: %w", e.Name(), err)
			}
		}
		log.Info("moved the images of snapshots waiting for their upload to the node", "images", len(entries))
	}
	for _, d := range []string{old, filepath.Join(dataDir, "images"), filepath.Join(dataDir, "scratch"), filepath.Join(nodeDir, "transfer")} {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	return nil
}

// replicaID names this control-plane replica: "cp-" and 8 hex digits, made once and kept in the data
// directory, so that a replica that restarts finds the snapshots it was writing (and no other's).
func replicaID(dataDir string) (string, error) {
	p := filepath.Join(dataDir, "replica-id")
	if b, err := os.ReadFile(p); err == nil {
		id := strings.TrimSpace(string(b))
		if err := cluster.CheckID(id); err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		return id, nil
	} else if !os.IsNotExist(err) {
		return "", err
	}
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", err
	}
	id := "cp-" + hex.EncodeToString(rnd[:])
	if err := fsutil.WriteFileAtomic(p, []byte(id+"\n"), 0o600); err != nil {
		return "", err
	}
	return id, nil
}

// extraRoots is the host's roots with pemCerts added (nil for none: the host's roots).
func extraRoots(pemCerts []byte) (*x509.CertPool, error) {
	if len(pemCerts) == 0 {
		return nil, nil
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if !roots.AppendCertsFromPEM(pemCerts) {
		return nil, errors.New("extra roots: no certificate in the PEM given")
	}
	return roots, nil
}
