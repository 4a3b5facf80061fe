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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/audit"
	"github.com/airlockrun/airlock/internal/blob"
	bloblocal "github.com/airlockrun/airlock/internal/blob/local"
	blobs3 "github.com/airlockrun/airlock/internal/blob/s3"
	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/connections"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/daemon/link"
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
func Run(ctx context.Context, cfg Config) (err error) {
	if cfg.DataDir == "" {
		cfg.DataDir = DefaultDataDir
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.ImageCacheBytes == 0 {
		cfg.ImageCacheBytes = DefaultImageCacheBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	log := cfg.Logger
	if cfg.DaemonBinary == "" && !cfg.NoLocalNode {
		var err error
		if cfg.DaemonBinary, err = FindDaemon(); err != nil {
			return err
		}
	}
	if os.Geteuid() != 0 && !cfg.NoLocalNode {
		return errors.New("airlock up must run as root: sandboxes need mounts, cgroups and network namespaces")
	}
	if cfg.NoLocalNode && cfg.ClusterListen == "" {
		return errors.New("a control plane with no node of its own needs a cluster port for the nodes (ClusterListen)")
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if err := os.Chmod(dataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}

	var st interface {
		store.Store
		Close() error
	}
	if cfg.PostgresDSN != "" {
		st, err = postgres.Open(ctx, cfg.PostgresDSN)
	} else {
		st, err = sqlite.Open(ctx, filepath.Join(dataDir, "airlock.db"))
	}
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	// The tenants' audit logs. Closed (what is queued written) before the store, after everything that
	// records into it stopped (deferred calls run last-in first-out).
	auditLog := audit.New(st, log)
	defer auditLog.Close()

	tag := InstanceTag(dataDir)
	// The registry of this instance's metrics, served at /metrics. Not the global default: two
	// instances in one process (tests) keep theirs apart.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	masterPath := cfg.MasterKeyFile
	if masterPath == "" {
		masterPath = filepath.Join(dataDir, "keys", "master.key")
	}
	masterBytes, err := master.LoadFile(masterPath, true)
	if err != nil {
		return err
	}
	masterKey, err := master.New(masterBytes)
	clear(masterBytes)
	if err != nil {
		return err
	}
	localKeys, err := local.NewInStore(ctx, st, masterKey)
	if err != nil {
		return err
	}
	// The cluster's CA, made on first start: nodes that join get their certificates from it.
	clusterCA, err := cluster.LoadCA(ctx, st, masterKey)
	if err != nil {
		return err
	}
	if err := importFiles(ctx, log, localKeys, st, dataDir); err != nil {
		return err
	}
	providers := map[string]keys.KeyProvider{KeyProviderLocal: localKeys}
	if cfg.PKCS11.Module != "" {
		p11, err := pkcs11.New(pkcs11.Config{Helper: cfg.PKCS11.Helper, Module: cfg.PKCS11.Module, TokenLabel: cfg.PKCS11.TokenLabel,
			PIN: cfg.PKCS11.PIN, Env: cfg.PKCS11.Env, Dir: filepath.Join(dataDir, "keys"), Logger: log})
		if err != nil {
			return err
		}
		defer p11.Close()
		providers[KeyProviderPKCS11] = p11
	}
	keyring, err := keys.NewRouter(providers, KeyProviderLocal, func(ctx context.Context, tenantID string) (string, error) {
		t, err := st.GetTenant(ctx, tenantID)
		if err != nil {
			return "", err
		}
		return t.KeyProvider, nil
	})
	if err != nil {
		return err
	}
	secretDocs, err := secrets.NewDocStorage(st, SecretsDocPrefix)
	if err != nil {
		return err
	}
	secretStore, err := secrets.New(secrets.Config{Keys: keyring, Storage: secretDocs})
	if err != nil {
		return err
	}
	// The audit entries' payloads are sealed under their tenant's key: a revoked key leaves them unreadable.
	auditLog.SetSealer(func(ctx context.Context, tenantID string) (audit.Sealer, error) {
		return secretStore.Sealer(ctx, tenantID, controlplane.AuditSealPurpose, true)
	})
	// Bound now, so that the OAuth callback URL can name the port even when Listen asked for any.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	defer ln.Close() // a no-op after the shutdown below closed it
	publicURL := strings.TrimSuffix(cfg.PublicURL, "/")
	if publicURL == "" {
		publicURL = "http://" + ln.Addr().String()
	}
	guards, stopGuards, err := egressGuards(cfg.EgressAllowPrivate, log)
	if err != nil {
		return err
	}
	defer stopGuards()
	connDocs, err := secrets.NewDocStorage(st, ConnectionsDocPrefix)
	if err != nil {
		return err
	}
	conns, err := connections.New(connections.Config{Keys: keyring, Storage: connDocs, RedirectURL: publicURL + "/v1/oauth/callback", Guards: guards, Logger: log})
	if err != nil {
		return err
	}
	// Closed after the control plane and the gateway stopped (deferred calls run last-in first-out).
	defer func() { err = errors.Join(err, conns.Close()) }()
	roots, err := extraRoots(cfg.ExtraRootsPEM)
	if err != nil {
		return err
	}
	blobs, err := openBlobs(ctx, dataDir, cfg.S3)
	if err != nil {
		return err
	}
	// The control plane's store makes grants with the keyring; the node of this process writes and
	// reads images through the same store (so snapshot GC sees its writers).
	snaps, err := snapshot.New(snapshot.Config{Blobs: blobs, Keys: keyring, Logger: log})
	if err != nil {
		return err
	}
	var cp *controlplane.Service
	var nd *node.Local
	if !cfg.NoLocalNode {
		var closeNode func() error
		nd, closeNode, err = startHostNode(hostNode{id: nodecontract.LocalID, dataDir: dataDir, tag: tag, runsc: cfg.Runsc, daemon: cfg.DaemonBinary,
			debug: cfg.Debug, hostsOnly: cfg.HostsOnly, hosts: cfg.Hosts, roots: roots, guards: guards, log: log, keys: keyring, reg: reg,
			snapshots: snaps, imageCacheBytes: cfg.ImageCacheBytes, warmPool: cfg.WarmPool, logRetention: cfg.LogRetention,
			// In one process the node needs no check of which sandbox asks: the gateway asks only for
			// its sandboxes' bindings.
			secret: func(ctx context.Context, tenantID, _, name string) ([]byte, error) {
				return secretStore.Reveal(ctx, tenantID, name)
			},
			token: func(ctx context.Context, tenantID, _, connection string) ([]byte, error) {
				return conns.Token(ctx, tenantID, connection)
			},
			audit: auditLog.Record,
			onExit: func(id, reason string) {
				if cp != nil {
					go cp.HandleSandboxExit(id, reason)
				}
			}})
		if err != nil {
			return err
		}
		// Closed after the sandboxes are gone (deferred, so last in first out with the shutdown below).
		defer func() { err = errors.Join(err, closeNode()) }()
	}
	// With a cluster port, the control plane gives itself a certificate from the cluster CA, with
	// which it calls the nodes that joined and serves their calls.
	var self *cluster.SelfCert
	if cfg.ClusterListen != "" {
		replica, err := replicaID(dataDir)
		if err != nil {
			return err
		}
		if self, err = clusterCA.NewSelfCert(cluster.Identity{Role: cluster.RoleControlPlane, ID: replica}, nil); err != nil {
			return fmt.Errorf("cluster port: %w", err)
		}
	}
	templates := template.NewCatalog(filepath.Join(dataDir, "templates"))
	templates.Host.Logger = log
	defer templates.Close()
	cpCfg := controlplane.Config{Store: st, Logger: log, Secrets: secretStore, Connections: conns,
		Snapshots: snaps,
		Retention: cfg.Retention, PruneInterval: cfg.PruneInterval, GCInterval: cfg.GCInterval, GCGrace: cfg.GCGrace,
		ImageGCGrace: cfg.ImageGCGrace, LogRetention: cfg.LogRetention, MinLogRetention: cfg.MinLogRetention,
		Keys: keyring, KeyCheckInterval: cfg.KeyCheckInterval, Cluster: clusterCA, KeyProvider: keyring, Audit: auditLog.Record}
	if nd != nil {
		cpCfg.Node = nd
	} else {
		cpCfg.TemplateRoot = func(ctx context.Context, name string) (string, error) {
			t, err := templates.Get(ctx, name)
			if err != nil {
				return "", err
			}
			return t.RootFS, nil
		}
	}
	if self != nil {
		cpCfg.ReplicaID = self.Identity().ID
		cpCfg.DialNode = func(id, addr string, pinned func(string) error) (controlplane.Node, error) {
			return nodeapi.NewClient(nodeapi.ClientConfig{NodeID: id, Addr: addr, Self: self, Roots: clusterCA.Pool(), Pinned: pinned, Templates: templates, Logger: log,
				LinkAudit: func(ctx context.Context, sandboxID string) link.Audit {
					sb, err := st.GetSandboxAnyTenant(ctx, sandboxID)
					if err != nil {
						return nil
					}
					return audit.DaemonAudit{Tenant: sb.TenantID, Sandbox: sandboxID, Sink: auditLog.Record}
				}})
		}
	}
	cpCfg.Guards = guards
	cp, err = controlplane.New(cpCfg)
	if err != nil {
		return err
	}
	key, err := cp.Bootstrap(ctx)
	if err != nil {
		return err
	}
	if key != "" {
		keyPath := cfg.KeyFile
		if keyPath == "" {
			keyPath = DefaultKeyFile()
		}
		if err := os.MkdirAll(filepath.Dir(keyPath), 0o700); err != nil {
			return fmt.Errorf("save API key: %w", err)
		}
		if err := fsutil.WriteFileAtomic(keyPath, []byte(key+"\n"), 0o600); err != nil {
			return fmt.Errorf("save API key: %w", err)
		}
		if cfg.ShowKey {
			fmt.Fprintf(cfg.Out, "Created the operator tenant. Its first API key (shown once; saved to %s, mode 0600):\n\n    %s\n\n", keyPath, key)
		} else {
			fmt.Fprintf(cfg.Out, "Created the operator tenant. Its first API key is saved to %s (mode 0600).\n", keyPath)
		}
	}
	if err := cp.Start(ctx); err != nil {
		return err
	}
	if !cfg.NoLocalNode && cfg.DefaultImage != "none" {
		img := cfg.DefaultImage
		if img == "" {
			img = DefaultImagePath()
		}
		if img != "" {
			t0 := time.Now()
			t, installed, err := cp.InstallDefaultImage(ctx, img)
			switch {
			case err != nil:
				return fmt.Errorf("install the default template: %w", err)
			case installed:
				fmt.Fprintf(cfg.Out, "Installed the default template from %s (%s, in %s).\n", img, t.Digest, time.Since(t0).Round(time.Millisecond))
			case t.Digest == "":
				log.Warn("no default template image: sandboxes of the default template boot the host's /usr (scripts/install.sh builds the image)", "path", img)
			}
		}
	}

	var clusterSrv *http.Server
	if cfg.ClusterListen != "" {
		if clusterSrv, err = serveCluster(cfg, clusterCA, self, cp, log); err != nil {
			return err
		}
		defer clusterSrv.Close()
	}

	apiServer := api.New(cp, log, promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	apiServer.SetAudit(auditLog)
	apiServer.SetIngressDomain(cfg.IngressDomain)
	if err := apiServer.SetPublicURL(cfg.PublicURL); err != nil {
		return err
	}
	apiServer.SetIngressLimit(cfg.IngressMaxConns)
	// HTTP/1.1 and cleartext HTTP/2 (prior knowledge, as gRPC clients speak it) on one listener.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Protocols:         &protocols,
		Handler:           apiServer,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("airlock is up", "addr", ln.Addr().String(), "data_dir", dataDir)
	fmt.Fprintf(cfg.Out, "Airlock is listening on http://%s (data in %s)\n", ln.Addr(), dataDir)
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr().String())
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Stop taking requests first (streams are closed by their sandboxes going away), then stop every
	// sandbox, then the node's watchers.
	go func() {
		_ = srv.Shutdown(sctx)
	}()
	_ = ln.Close()
	errs := []error{}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		errs = append(errs, serveErr)
	}
	if clusterSrv != nil {
		_ = clusterSrv.Shutdown(sctx)
	}
	if err := cp.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("stop sandboxes: %w", err))
	}
	if nd != nil {
		if err := nd.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("stop node: %w", err))
		}
	}
	_ = srv.Close()
	log.Info("stopped")
	return errors.Join(errs...)
}

// serveCluster starts the cluster port (Config.ClusterListen): the calls of nodes, over mutual TLS with a
// certificate this replica issues itself from the cluster CA (renewed while it runs).
func serveCluster(cfg Config, ca *cluster.CA, self *cluster.SelfCert, cp *controlplane.Service, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", cfg.ClusterListen)
	if err != nil {
		return nil, fmt.Errorf("cluster port: listen on %s: %w", cfg.ClusterListen, err)
	}
	tlsCfg := self.ServerTLS(ca.Pool(), cluster.RoleNode)
	tlsCfg.NextProtos = []string{"h2", "http/1.1"}
	srv := &http.Server{
		Handler:           nodeapi.NewControlHandler(cp, log),
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() { _ = srv.Serve(tls.NewListener(ln, tlsCfg)) }() // owner: Run; ends on its Shutdown or Close
	log.Info("cluster port is up", "addr", ln.Addr().String(), "replica", self.Identity().String())
	fmt.Fprintf(cfg.Out, "Nodes reach this control plane at https://%s\n", ln.Addr())
	if cfg.ClusterReady != nil {
		cfg.ClusterReady(ln.Addr().String())
	}
	return srv, nil
}

// hostNode configures the node of this host: the one in the control plane's process, or a node in a
// process of its own (RunNode).
type hostNode struct {
	id, dataDir, tag string
	runsc, daemon    string
	debug, hostsOnly bool
	hosts            map[string][]netip.Addr
	roots            *x509.CertPool
	guards           *policy.Guards
	log              *slog.Logger
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
	// snapshots is the store the node writes and reads checkpoint images with (nil: none);
	// imageCacheBytes bounds its image cache (node.Config).
	snapshots       *snapshot.Store
	imageCacheBytes int64
	// warmPool sizes its warm pool (node.Config).
	warmPool int
	// logRetention is how long the flows of sandboxes whose tenant keeps logs forever are kept (0:
	// forever; flowlog.Log.SetDefaultRetention).
	logRetention time.Duration
}

// flowSweepEvery is how often a node deletes the flow logs past their retention.
const flowSweepEvery = 10 * time.Minute

// startHostNode starts the node of this host: its runtime, flow log, gateway and node. closeNode stops
// what it started, once the sandboxes are gone.
func startHostNode(h hostNode) (nd *node.Local, closeNode func() error, err error) {
	var closers []func() error
	closeNode = func() error {
		var errs []error
		for i := len(closers) - 1; i >= 0; i-- {
			errs = append(errs, closers[i]())
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, closeNode())
		}
	}()
	driver, more, dclose, err := openDrivers(h)
	closers = append(closers, dclose...)
	if err != nil {
		return nil, nil, err
	}
	flows, err := flowlog.Open(filepath.Join(h.dataDir, "node", "flows"), h.log)
	if err != nil {
		return nil, nil, err
	}
	// Closed after the gateway, which records into it.
	closers = append(closers, flows.Close)
	flows.SetDefaultRetention(h.logRetention)
	stopSweep := make(chan struct{})
	sweepDone := make(chan struct{})
	go func() {
		defer close(sweepDone)
		t := time.NewTicker(flowSweepEvery)
		defer t.Stop()
		for {
			if n, err := flows.Sweep(time.Now()); err != nil {
				h.log.Warn("sweep flow logs", "err", err)
			} else if n > 0 {
				h.log.Info("flow logs past their retention deleted", "files", n)
			}
			select {
			case <-stopSweep:
				return
			case <-t.C:
			}
		}
	}()
	closers = append(closers, func() error { close(stopSweep); <-sweepDone; return nil })
	sinks := gateway.FlowSinks{flows, audit.FlowSink{Sink: h.audit}}
	if h.reg != nil {
		egressMetrics, err := flowlog.NewMetrics(h.reg)
		if err != nil {
			return nil, nil, err
		}
		sinks = append(sinks, egressMetrics)
	}
	local, err := castore.New(filepath.Join(h.dataDir, "node", "ca"), h.keys)
	if err != nil {
		return nil, nil, err
	}
	var cas gateway.CAStore = local
	if h.sessionCA != nil {
		cas = &castore.Remote{Local: local, Get: h.sessionCA, Put: h.keepSessionCA}
	}
	gw, err := gateway.New(gateway.Config{
		CAs:           cas,
		Secret:        h.secret,
		Token:         h.token,
		UpstreamRoots: h.roots,
		Table:         "airlock_" + h.tag,
		IfacePrefix:   "al" + h.tag,
		SharedPrefix:  "al",
		Hosts:         h.hosts,
		HostsOnly:     h.hostsOnly,
		Guards:        h.guards,
		// What no rule could allow is reset by the kernel at the SYN: nothing looks open.
		KernelRefusals: true,
		Flows:          sinks,
		Logger:         h.log,
	})
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, gw.Close)
	nodeDir := filepath.Join(h.dataDir, "node")
	if err := moveOldImages(h.dataDir, nodeDir, h.log); err != nil {
		return nil, nil, err
	}
	templates := template.NewCatalog(filepath.Join(h.dataDir, "templates"))
	templates.Host.Logger = h.log
	closers = append(closers, templates.Close)
	nd, err = node.New(node.Config{
		ID:           h.id,
		Gateway:      gw,
		FlowLog:      flows,
		IfacePrefix:  "al" + h.tag,
		DataDir:      nodeDir,
		Driver:       driver,
		More:         more,
		Templates:    templates,
		DaemonBinary: h.daemon,
		TenantAudit: func(tenantID, sandboxID string) link.Audit {
			return audit.DaemonAudit{Tenant: tenantID, Sandbox: sandboxID, Sink: h.audit}
		},
		OnExit:          h.onExit,
		Logger:          h.log,
		Snapshots:       h.snapshots,
		ImageCacheBytes: h.imageCacheBytes,
		WarmPool:        h.warmPool,
	})
	if err != nil {
		return nil, nil, err
	}
	if h.reg != nil {
		if err := registerStartMetrics(h.reg, nd); err != nil {
			return nil, nil, err
		}
	}
	return nd, closeNode, nil
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

// openBlobs opens the blob store of the snapshots: the S3 bucket, or else DATA/blobs.
func openBlobs(ctx context.Context, dataDir string, s3 *blobs3.Config) (blob.Store, error) {
	if s3 != nil {
		return blobs3.New(ctx, *s3)
	}
	return bloblocal.New(filepath.Join(dataDir, "blobs"))
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
