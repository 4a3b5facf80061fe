package app

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/blob"
	blobcache "github.com/airlockrun/airlock/internal/blob/cache"
	bloblocal "github.com/airlockrun/airlock/internal/blob/local"
	blobs3 "github.com/airlockrun/airlock/internal/blob/s3"
	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/daemon"
	"github.com/airlockrun/airlock/internal/fsutil"
	"github.com/airlockrun/airlock/internal/gateway/hostnet"
	"github.com/airlockrun/airlock/internal/node"
	"github.com/airlockrun/airlock/internal/nodeapi"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/snapshot"
)

// Files a node keeps in <data dir>/cluster once it joined (airlock node join).
const (
	NodeClusterDir = "cluster"
	NodeKeyFile    = "node.key"  // its private key (0600)
	NodeCertFile   = "node.crt"  // its certificate
	NodeCAFile     = "ca.crt"    // the cluster CA's certificate
	NodeInfoFile   = "node.json" // its ID and the control plane it joined
)

// NodeInfo is what NodeInfoFile holds.
type NodeInfo struct {
	ID           string    `json:"id"`
	ControlPlane string    `json:"control_plane"`
	Hosts        []string  `json:"hosts"`
	JoinedAt     time.Time `json:"joined_at"`
}

// DefaultNodeListen is the node API's default address.
const DefaultNodeListen = ":7444"

// NodeConfig configures RunNode. Zero values take the defaults.
type NodeConfig struct {
	// DataDir holds the node's state, and in DataDir/cluster what airlock node join saved. Required.
	DataDir string
	// ControlPlanes are the control planes' cluster ports (https://host:port; a load balancer, or the
	// replicas, tried in turn). At least one is required.
	ControlPlanes []string
	// Listen is the node API's address. Empty: DefaultNodeListen.
	Listen string
	// Advertise is the host:port control planes reach the node API at; its host must be one the node
	// joined with. Empty: the first host it joined with, and Listen's port.
	Advertise string
	// MaxSandboxes bounds the sandboxes the node runs at once. Zero: 32 per CPU core.
	MaxSandboxes int
	// MemoryMB and CPUMillicores bound the memory and CPU the node offers (its share of a host it
	// shares with other nodes). Zero: the host's (nodecontract.HostCapacity).
	MemoryMB      int64
	CPUMillicores int64
	// SandboxAddresses is the range the node's sandboxes get their /30s from (nodes sharing a host can
	// each have one of their own). Invalid prefix (the zero value): hostnet.Pool.
	SandboxAddresses netip.Prefix
	// Runsc, DaemonBinary, Debug, Hosts, HostsOnly, ExtraRootsPEM and EgressAllowPrivate are as in
	// Config. (The control planes refuse tenants' rules into ranges they have not opened; the node's
	// gateway refuses connections into ranges it has not.)
	Runsc              string
	DaemonBinary       string
	Debug              bool
	Hosts              map[string][]netip.Addr
	HostsOnly          bool
	ExtraRootsPEM      []byte
	EgressAllowPrivate []netip.Prefix
	// BlobDir or S3 is the blob store of the cluster's snapshots, which the node writes checkpoint
	// images into and restores them from, with the grants control planes give it: the control planes'
	// S3 bucket, or their blob directory (DATA/blobs of an airlock server on the same host or a shared
	// file system). Neither: the node keeps no snapshots (sessions cannot pause on it).
	BlobDir string
	S3      *blobs3.Config
	// ImageCacheBytes bounds the node's cache of checkpoint images (node.Config). Zero:
	// DefaultImageCacheBytes; negative: none.
	ImageCacheBytes int64
	// WarmPool sizes the node's warm pool (node.Config). Zero: node.DefaultWarmPool; negative: none.
	WarmPool int
	// LogRetention is how long the flow logs of sandboxes whose tenant keeps logs forever are kept (0:
	// forever); a tenant's own retention comes with each sandbox.
	LogRetention time.Duration
	// Logger receives logs. Nil: slog.Default().
	Logger *slog.Logger
	// Out receives what is meant for the person who started the node. Nil: os.Stdout.
	Out io.Writer
	// Ready, if set, is called with the node API's address once it accepts connections.
	Ready func(addr string)
	// KeeperBinary is the airlock binary the node runs its fence keeper with (airlock node keeper; see
	// internal/keeper): the process that stops the node's sandboxes once the node's lease lapses, also
	// after the node process died. Empty: no keeper (a node killed leaves its sandboxes running until it
	// starts again), with a warning.
	KeeperBinary string
}

// DefaultChunkCacheBytes bounds a node's cache of snapshot chunks fetched from S3.
const DefaultChunkCacheBytes = 4 << 30

// nodeSnapshots opens the snapshot store of a node in its own process: the blob store cfg names,
// without a key provider (the control planes send grants). Nil without one.
func nodeSnapshots(ctx context.Context, cfg NodeConfig, dataDir string, log *slog.Logger) (*snapshot.Store, error) {
	var blobs blob.Store
	var err error
	switch {
	case cfg.S3 != nil && cfg.BlobDir != "":
		return nil, errors.New("give the node one blob store: --blob-dir or --s3-*")
	case cfg.S3 != nil:
		var remote blob.Store
		if remote, err = blobs3.New(ctx, *cfg.S3); err != nil {
			return nil, err
		}
		// Chunks are immutable: a restore on this node fetches only those it has not read before.
		blobs, err = blobcache.New(blobcache.Config{Remote: remote, Dir: filepath.Join(dataDir, "node", "chunks"),
			MaxBytes: DefaultChunkCacheBytes, Cacheable: snapshot.IsChunkKey, Logger: log})
	case cfg.BlobDir != "":
		blobs, err = bloblocal.New(cfg.BlobDir)
	default:
		log.Warn("this node has no snapshot store (--blob-dir or --s3-*): sessions cannot pause or resume on it")
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return snapshot.New(snapshot.Config{Blobs: blobs, Logger: log})
}

// joined is what a node's join left in its data directory.
type joined struct {
	info  NodeInfo
	cert  tls.Certificate
	roots *x509.CertPool
}

func loadJoined(dataDir string) (joined, error) {
	dir := filepath.Join(dataDir, NodeClusterDir)
	var j joined
	b, err := os.ReadFile(filepath.Join(dir, NodeInfoFile))
	if err != nil {
		return j, fmt.Errorf("no node joined with data directory %s (airlock --data-dir DIR node join, then node run with the same --data-dir): %w", dataDir, err)
	}
	if err := json.Unmarshal(b, &j.info); err != nil {
		return j, fmt.Errorf("%s: %w", NodeInfoFile, err)
	}
	if err := cluster.CheckID(j.info.ID); err != nil {
		return j, fmt.Errorf("%s: %w", NodeInfoFile, err)
	}
	certPEM, err := os.ReadFile(filepath.Join(dir, NodeCertFile))
	if err != nil {
		return j, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, NodeKeyFile))
	if err != nil {
		return j, err
	}
	defer clear(keyPEM)
	if j.cert, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return j, fmt.Errorf("the node's key and certificate: %w", err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, NodeCAFile))
	if err != nil {
		return j, err
	}
	j.roots = x509.NewCertPool()
	if !j.roots.AppendCertsFromPEM(caPEM) {
		return j, fmt.Errorf("%s: no certificate", NodeCAFile)
	}
	id, err := cluster.IdentityOf(j.cert.Leaf)
	if err != nil || id != (cluster.Identity{Role: cluster.RoleNode, ID: j.info.ID}) {
		return j, fmt.Errorf("the node's certificate names %v, not node %s", id, j.info.ID)
	}
	if time.Now().After(j.cert.Leaf.NotAfter) {
		return j, fmt.Errorf("the node's certificate expired at %s: join again from this host with the same data directory (airlock node join --id %s: its key here proves it is the node; no token needed)",
			j.cert.Leaf.NotAfter.Format(time.RFC3339), j.info.ID)
	}
	return j, nil
}

// RunNode runs a node in a process of its own, which joined a cluster (airlock node join): it serves the
// node API to the control planes over mutual TLS, reports to them in heartbeats, and asks them for its
// sandboxes' credentials and key wraps at the moment it needs them; nothing of a tenant is stored here
// but its sandboxes. It serves until ctx ends; then it destroys its sandboxes (reporting them to the
// control plane) and stops.
func RunNode(ctx context.Context, cfg NodeConfig) (err error) {
	if cfg.Listen == "" {
		cfg.Listen = DefaultNodeListen
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	if cfg.DaemonBinary == "" {
		var err error
		if cfg.DaemonBinary, err = FindDaemon(); err != nil {
			return err
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("airlock node run must run as root: sandboxes need mounts, cgroups and network namespaces")
	}
	if cfg.DataDir == "" || len(cfg.ControlPlanes) == 0 {
		return errors.New("a node needs its data directory and the control plane's cluster URL")
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return err
	}
	j, err := loadJoined(dataDir)
	if err != nil {
		return err
	}
	if cfg.SandboxAddresses.IsValid() {
		if err := hostnet.SetPool(cfg.SandboxAddresses); err != nil {
			return err
		}
	}
	log := cfg.Logger.With("node", j.info.ID)
	hostCap, err := nodecontract.HostCapacity(0)
	if err != nil {
		return err
	}
	capacity, err := nodecontract.HostCapacity(cfg.MaxSandboxes)
	if err != nil {
		return err
	}
	// Nodes sharing a host each offer a share of it (--memory-mb, --cpu-millicores).
	if cfg.MemoryMB > 0 {
		capacity.MemoryMB = min(capacity.MemoryMB, cfg.MemoryMB)
	}
	if cfg.CPUMillicores > 0 {
		capacity.CPUMillicores = min(capacity.CPUMillicores, cfg.CPUMillicores)
	}
	hostID := node.HostID()
	// The node's certificate is renewed while it runs (renewCert); every handshake presents the current one.
	held := cluster.NewHeldCert(j.cert)
	cc, err := nodeapi.NewControlClient(nodeapi.ControlClientConfig{URL: cfg.ControlPlanes[0], More: cfg.ControlPlanes[1:], Held: held, Roots: j.roots, Logger: log})
	if err != nil {
		return err
	}
	// Closed last (deferred calls run last-in first-out): the exits and audit entries of the shutdown
	// go out first.
	defer cc.Close()

	roots, err := extraRoots(cfg.ExtraRootsPEM)
	if err != nil {
		return err
	}
	guards, stopGuards, err := egressGuards(cfg.EgressAllowPrivate, log)
	if err != nil {
		return err
	}
	defer stopGuards()
	snaps, err := nodeSnapshots(ctx, cfg, dataDir, log)
	if err != nil {
		return err
	}
	// The interception CAs' keys are wrapped by the control plane, under their tenants' keys, bound to
	// this node: a revoked tenant key means no CA, and the files here are of no use elsewhere.
	nd, closeNode, err := startHostNode(hostNode{id: j.info.ID, dataDir: dataDir, tag: InstanceTag(dataDir), runsc: cfg.Runsc,
		snapshots: snaps, imageCacheBytes: cfg.ImageCacheBytes, warmPool: cfg.WarmPool, logRetention: cfg.LogRetention,
		daemon: cfg.DaemonBinary, debug: cfg.Debug, hostsOnly: cfg.HostsOnly, hosts: cfg.Hosts, roots: roots, guards: guards, log: log,
		keys: cc, secret: cc.Secret, token: cc.Token, audit: cc.Record, onExit: cc.SandboxExit,
		sessionCA: cc.SessionCA, keepSessionCA: cc.KeepSessionCA})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeNode()) }()
	h, err := nodeapi.NewHandler(nd, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("node API: listen on %s: %w", cfg.Listen, err)
	}
	defer ln.Close()
	advertise := cfg.Advertise
	if advertise == "" {
		if len(j.info.Hosts) == 0 {
			return errors.New("the node joined with no host: give --advertise host:port")
		}
		advertise = net.JoinHostPort(j.info.Hosts[0], strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	boot := hex.EncodeToString(rnd[:])
	beat := func(ctx context.Context, leaving bool) error {
		ids, err := nd.Sandboxes(ctx)
		if err != nil {
			return err
		}
		rts, err := nd.Runtimes(ctx)
		if err != nil {
			return err
		}
		return cc.Heartbeat(ctx, nodeapi.Heartbeat{Addr: advertise, Boot: boot, Capacity: capacity, Sandboxes: len(ids),
			Version: daemon.Version, Leaving: leaving, Runtimes: rts, Host: hostID, HostCapacity: &hostCap, Images: nd.ImageDigests()})
	}
	// The first heartbeat says the node started anew (the control plane settles what a previous run
	// left) before it serves: a control plane cannot reach it at that address before.
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = beat(hctx, false)
	cancel()
	if err != nil {
		return fmt.Errorf("report to the control plane at %s: %w", strings.Join(cfg.ControlPlanes, ", "), err)
	}

	tlsCfg := held.ServerTLS(j.roots, cluster.RoleControlPlane)
	tlsCfg.NextProtos = []string{"h2", "http/1.1"}
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// The keeper holds the sandboxes to the same lease as the fence below, from outside this process:
	// attached before any sandbox can be placed here.
	keep := startKeeper(ctx, cfg, dataDir, nd, log)
	defer keep.close()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(tls.NewListener(ln, tlsCfg)) }() // owner: RunNode; ends on Shutdown
	log.Info("node is up", "addr", ln.Addr().String(), "advertise", advertise, "control_planes", cfg.ControlPlanes, "capacity", capacity)
	fmt.Fprintf(cfg.Out, "Node %s serves control planes at %s (data in %s)\n", j.info.ID, advertise, dataDir)
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr().String())
	}

	// Heartbeats go out on their own, so that a slow one does not hold up the fence below. reached is
	// when the last heartbeat that got through was sent (a control plane saw it after that).
	var reached lastReached
	reached.set(time.Now())
	beats := make(chan struct{}, 2)
	bctx, stopBeats := context.WithCancel(ctx)
	defer stopBeats()
	go func() { // owner: RunNode; ends with bctx
		defer func() { beats <- struct{}{} }()
		t := time.NewTicker(nodeapi.HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-bctx.Done():
				return
			case <-t.C:
			}
			sent := time.Now()
			// Room to try a second replica if the first went silent.
			hctx, cancel := context.WithTimeout(bctx, 2*nodeapi.HeartbeatInterval)
			err := beat(hctx, false)
			cancel()
			if err == nil {
				reached.set(sent)
			} else if bctx.Err() == nil {
				log.Warn("heartbeat to the control plane failed", "err", err)
			}
		}
	}()
	go func() { // owner: RunNode; ends with bctx. Apart from the fence below, which it must not hold up.
		defer func() { beats <- struct{}{} }()
		t := time.NewTicker(renewEvery)
		defer t.Stop()
		for {
			if err := renewCert(bctx, cc, held, j, dataDir); err != nil && bctx.Err() == nil {
				log.Error("renew the node's certificate", "err", err)
			}
			select {
			case <-bctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	fenceTick := time.NewTicker(time.Second)
	defer fenceTick.Stop()
	var serveErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case serveErr = <-errc:
			break loop
		case <-fenceTick.C:
			// Cut off from the control planes for FenceAfter: they are about to give this node up and
			// resume its sessions elsewhere, so its sandboxes stop here first (a session never runs
			// in two places), and so does any placed on it meanwhile. They are reported when a
			// control plane is reached again.
			cut := reached.since()
			if cut >= nodeapi.FenceAfter {
				fence(ctx, nd, cc, log, cut)
			}
			keep.renew(ctx, nodeapi.FenceAfter+KeeperSlack-cut)
		}
	}
	stopBeats()
	<-beats
	<-beats
	log.Info("shutting down")
	sctx, scancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer scancel()
	// No more sandboxes for this node.
	hctx, hcancel := context.WithTimeout(sctx, nodeapi.HeartbeatInterval)
	if err := beat(hctx, true); err != nil {
		log.Warn("tell the control plane the node leaves", "err", err)
	}
	hcancel()
	// The sandboxes go with the node (its gateway, their only way out, stops with it); each is reported
	// to the control plane, which fails it (a session's resumes from its latest snapshot).
	ids, lerr := nd.Sandboxes(sctx)
	var reports sync.WaitGroup
	for _, id := range ids {
		if err := nd.DestroySandbox(sctx, id); err != nil {
			log.Error("destroy sandbox at shutdown", "sandbox", id, "err", err)
		}
		reports.Add(1)
		go func() { defer reports.Done(); cc.SandboxExit(id, "its node shut down") }()
	}
	reported := make(chan struct{})
	go func() { reports.Wait(); close(reported) }()
	select {
	case <-reported:
	case <-sctx.Done():
	}
	_ = srv.Shutdown(sctx)
	if lerr == nil {
		keep.release(sctx) // the sandboxes are gone: nothing left to guard
	}
	errs := []error{lerr}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		errs = append(errs, serveErr)
	}
	if err := nd.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("stop node: %w", err))
	}
	log.Info("stopped")
	return errors.Join(errs...)
}

// renewEvery is how often a node checks whether its certificate is due for renewal.
const renewEvery = time.Hour

// renewCert renews the node's certificate through the cluster port once a third of its lifetime or less
// is left: for the same key, checked to be from the cluster's CA and to name the node, saved in place
// of the old one, and presented from then on.
func renewCert(ctx context.Context, cc *nodeapi.ControlClient, held *cluster.HeldCert, j joined, dataDir string) error {
	cur, _ := held.Current()
	if !cluster.RenewDue(cur.Leaf.NotAfter, time.Now()) {
		return nil
	}
	signer, ok := cur.PrivateKey.(crypto.Signer)
	if !ok {
		return errors.New("the node's key cannot sign")
	}
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, signer)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	certPEM, err := cc.Renew(rctx, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER}))
	if err != nil {
		return err
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return errors.New("the control plane answered no certificate")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: j.roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("the renewed certificate: %w", err)
	}
	if id, err := cluster.IdentityOf(leaf); err != nil || id != (cluster.Identity{Role: cluster.RoleNode, ID: j.info.ID}) {
		return fmt.Errorf("the renewed certificate names %v, not node %s", id, j.info.ID)
	}
	if !signer.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(leaf.PublicKey) {
		return errors.New("the renewed certificate is not for the node's key")
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dataDir, NodeClusterDir, NodeCertFile), certPEM, 0o600); err != nil {
		return err
	}
	held.Set(tls.Certificate{Certificate: [][]byte{block.Bytes}, PrivateKey: cur.PrivateKey, Leaf: leaf})
	cc.Reconnect()
	return nil
}

// lastReached is when the last heartbeat that got through was sent (a time with its monotonic reading:
// a step of the wall clock does not move the fence).
type lastReached struct {
	mu sync.Mutex
	t  time.Time // guarded by mu
}

func (l *lastReached) set(t time.Time) { l.mu.Lock(); l.t = t; l.mu.Unlock() }

func (l *lastReached) since() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Since(l.t)
}

// fence destroys every sandbox of the node, all at once (the control planes give the node up
// NodeDownAfter after its last heartbeat; the fence must be done well before), and reports each.
func fence(ctx context.Context, nd *node.Local, cc *nodeapi.ControlClient, log *slog.Logger, cut time.Duration) {
	ids, err := nd.Sandboxes(ctx)
	if len(ids) == 0 && err == nil {
		return
	}
	log.Error("no control plane reached: stopping every sandbox of this node", "for", cut.Round(time.Second), "sandboxes", len(ids), "err", err)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := nd.DestroySandbox(ctx, id); err != nil {
				log.Error("fence: destroy sandbox", "sandbox", id, "err", err)
			}
		}()
		go cc.SandboxExit(id, "its node lost the control plane") // retries until reached, or Close
	}
	wg.Wait()
}
