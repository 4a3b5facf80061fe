// Package testenv starts real Airlock instances for tests: the whole single-binary wiring (SQLite store,
// gVisor node, API on a loopback port) in the test process, with the real daemon binary built from this
// module. Tests that need root or runsc call Require* first and skip with the reason when they are missing.
package testenv

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/app"
	blobs3 "github.com/airlockrun/airlock/internal/blob/s3"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// RequireSandboxes skips the test unless it runs as root with runsc on PATH: what real sandboxes need.
func RequireSandboxes(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: sandboxes need mounts, cgroups and network namespaces")
	}
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("needs runsc on PATH (scripts/install.sh installs it)")
	}
}

// built is a binary of this module built once per test process.
type built struct {
	once sync.Once
	path string
	err  error
}

// binDir is the one directory of the binaries built for the tests, so that each finds the others
// next to itself, as installed (airlock finds airlock-daemon and airlock-pkcs11 there).
var binDir struct {
	once sync.Once
	dir  string
	err  error
}

// get builds pkg (with cgo or without) on first use and returns the binary's path.
func (b *built) get(t testing.TB, pkg, name string, cgo bool) string {
	t.Helper()
	b.once.Do(func() {
		binDir.once.Do(func() { binDir.dir, binDir.err = os.MkdirTemp("", "airlock-bin-") })
		if binDir.err != nil {
			b.err = binDir.err
			return
		}
		b.path = filepath.Join(binDir.dir, name)
		cmd := exec.Command("go", "build", "-o", b.path, pkg)
		env := "CGO_ENABLED=0"
		if cgo {
			env = "CGO_ENABLED=1"
		}
		cmd.Env = append(os.Environ(), env)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("build %s: %v: %s", name, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

var airlockBin, daemonBin, pkcs11Bin, portServerBin built

// DaemonBinary returns the path of the in-sandbox daemon (cmd/airlock-daemon) built (static, once per
// test process) from this module, next to Binary's.
func DaemonBinary(t testing.TB) string {
	t.Helper()
	return daemonBin.get(t, "github.com/airlockrun/airlock/cmd/airlock-daemon", "airlock-daemon", false)
}

// Binary returns the path of the airlock binary built (static, once per test process) from this module,
// with the daemon (DaemonBinary) next to it, where a server it runs finds it.
func Binary(t testing.TB) string {
	t.Helper()
	DaemonBinary(t)
	return airlockBin.get(t, "github.com/airlockrun/airlock/cmd/airlock", "airlock", false)
}

// PKCS11Helper returns the path of airlock-pkcs11 built (with cgo, once per test process) from this
// module.
func PKCS11Helper(t testing.TB) string {
	t.Helper()
	return pkcs11Bin.get(t, "github.com/airlockrun/airlock/cmd/airlock-pkcs11", "airlock-pkcs11", true)
}

// PortServer returns the path of the test server of internal/testenv/portserver built (static, once per
// test process) from this module. Tests of port forwarding copy it into sandboxes and run it there.
func PortServer(t testing.TB) string {
	t.Helper()
	return portServerBin.get(t, "github.com/airlockrun/airlock/internal/testenv/portserver", "airlock-portserver", false)
}

// KeyFile is where a test instance on dataDir keeps its first API key: next to the data directory, not
// in it, as airlock up keeps it outside.
func KeyFile(dataDir string) string { return filepath.Clean(dataDir) + ".api-key" }

// Env is a running Airlock.
type Env struct {
	// URL is the API's base URL.
	URL string
	// APIKey is the default tenant's key.
	APIKey string
	// DataDir is the instance's data directory.
	DataDir string
	// KeyFile holds the operator tenant's first API key (outside the data directory).
	KeyFile string
	// Client is an SDK client with the key.
	Client *airlock.Client
	// ClusterURL is the cluster port's URL (Options.Cluster), or "".
	ClusterURL string

	cancel context.CancelFunc
	done   chan error
	log    *syncBuffer
}

// Options tune Start.
type Options struct {
	// DataDir reuses a data directory (to test restarts); empty: a new temporary one.
	DataDir string
	// Hosts are static names for the network gateway (test upstreams).
	Hosts map[string][]netip.Addr
	// ExtraRootsPEM are CAs the gateway trusts for upstreams it re-encrypts to (test upstreams).
	ExtraRootsPEM []byte
	// EgressAllowPrivate are the guarded ranges tenants' rules may open (the operator's setting).
	EgressAllowPrivate []netip.Prefix
	// DaemonBinary is the sandboxes' daemon (to test upgrades); empty: the one built for the tests.
	DaemonBinary string
	// PKCS11 configures the pkcs11 key provider (with Helper empty: the helper built for the tests).
	PKCS11 app.PKCS11Config
	// KeyCheckInterval is how often tenants' keys are checked; zero: the default.
	KeyCheckInterval time.Duration
	// GCInterval paces the collection of snapshot data and templates' images; ImageGCGrace is how long
	// an image nothing uses stays. Zero: the defaults.
	GCInterval, ImageGCGrace time.Duration
	// PruneInterval paces retention (snapshots', logs'); zero: the default.
	PruneInterval time.Duration
	// IngressMaxConns bounds the requests and tunnels through the ingress per sandbox; zero: the default.
	IngressMaxConns int
	// PostgresDSN, if set, keeps the server's Store in that PostgreSQL database (see pgtest.Start).
	PostgresDSN string
	// S3, if set, keeps the snapshot store in that bucket (see s3test.Start).
	S3 *blobs3.Config
	// MasterKeyFile is the server's master key file; empty: the data directory's.
	MasterKeyFile string
	// APIKey is the operator tenant's key, for a server joining a database another one made (it writes
	// no key file then); empty: the one the first start saved.
	APIKey string
	// Cluster opens the cluster port on loopback (Env.ClusterURL).
	Cluster bool
	// NoLocalNode runs a control plane only (airlock server; implies Cluster): sandboxes run on nodes
	// StartNode starts.
	NoLocalNode bool
	// DefaultImage is the archive the default template is installed from at start; empty: none (the
	// built-in template, the host's /usr, whatever the machine has installed).
	DefaultImage string
	// WarmPool sizes the node's warm pool (app.Config); zero: the default.
	WarmPool int
}

// startWait is how long Start waits for Airlock to listen: longer when it installs a default image
// first (hundreds of MB to unpack).
func startWait(opts Options) time.Duration {
	if opts.DefaultImage != "" {
		return 5 * time.Minute
	}
	return 60 * time.Second
}

// Start runs Airlock for the test and stops it (cleanly, as SIGTERM would) when the test ends.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	RequireSandboxes(t)
	bin := DaemonBinary(t)
	if opts.DaemonBinary != "" {
		bin = opts.DaemonBinary
	}
	if opts.PKCS11.Module != "" && opts.PKCS11.Helper == "" {
		opts.PKCS11.Helper = PKCS11Helper(t)
	}
	dir := opts.DataDir
	if dir == "" {
		var err error
		// Not t.TempDir: the data directory is 0700 and holds mounts while Airlock runs; it is removed
		// after the instance stopped.
		dir, err = os.MkdirTemp("", "airlock-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	keyFile := KeyFile(dir)
	// The key outlives a restart within the test (only a first start writes it), not the test.
	t.Cleanup(func() { os.Remove(keyFile) })
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Env{DataDir: dir, KeyFile: keyFile, cancel: cancel, done: make(chan error, 1), log: logs}
	ready := make(chan string, 1)
	clusterListen := ""
	if opts.Cluster || opts.NoLocalNode {
		clusterListen = "127.0.0.1:0"
	}
	go func() {
		e.done <- app.Run(ctx, app.Config{
			DataDir:            dir,
			KeyFile:            keyFile,
			Listen:             "127.0.0.1:0",
			DaemonBinary:       bin,
			Logger:             slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Out:                io.Discard,
			Ready:              func(addr string) { ready <- addr },
			Hosts:              opts.Hosts,
			HostsOnly:          true, // tests never send a DNS query off this machine
			ExtraRootsPEM:      opts.ExtraRootsPEM,
			EgressAllowPrivate: opts.EgressAllowPrivate,

			PKCS11:           opts.PKCS11,
			KeyCheckInterval: opts.KeyCheckInterval,
			GCInterval:       opts.GCInterval,
			PruneInterval:    opts.PruneInterval,
			ImageGCGrace:     opts.ImageGCGrace,
			IngressDomain:    app.DefaultIngressDomain,
			IngressMaxConns:  opts.IngressMaxConns,
			PostgresDSN:      opts.PostgresDSN,
			S3:               opts.S3,
			MasterKeyFile:    opts.MasterKeyFile,
			ClusterListen:    clusterListen,
			ClusterReady:     func(addr string) { e.ClusterURL = "https://" + addr },
			NoLocalNode:      opts.NoLocalNode,
			DefaultImage:     cmp.Or(opts.DefaultImage, "none"),
			WarmPool:         opts.WarmPool,
		})
	}()
	select {
	case addr := <-ready:
		e.URL = "http://" + addr
	case err := <-e.done:
		cancel()
		t.Fatalf("airlock did not start: %v\n%s", err, logs.String())
	case <-time.After(startWait(opts)):
		cancel()
		t.Fatalf("airlock did not start within %s\n%s", startWait(opts), logs.String())
	}
	e.APIKey = opts.APIKey
	if e.APIKey == "" {
		key, err := os.ReadFile(keyFile)
		if err != nil {
			t.Fatal(err)
		}
		e.APIKey = strings.TrimSpace(string(key))
	}
	e.Client = airlock.New(e.URL, airlock.WithAPIKey(e.APIKey))
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stop airlock: %v", err)
		}
		if t.Failed() {
			t.Logf("airlock log:\n%s", logs.String())
		}
	})
	return e
}

// Stop shuts the instance down cleanly and reports what Run returned. Calling it again is harmless.
func (e *Env) Stop() error {
	if e.cancel == nil {
		return nil
	}
	e.cancel()
	e.cancel = nil
	select {
	case err := <-e.done:
		return err
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("airlock did not stop within 2 minutes")
	}
}

// Logs returns what the instance logged so far.
func (e *Env) Logs() string { return e.log.String() }

type syncBuffer struct {
	mu sync.Mutex
	// b is guarded by mu.
	b strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
