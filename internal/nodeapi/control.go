package nodeapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/httperr"
	"github.com/airlockrun/airlock/internal/keys"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/snapshot"
	"github.com/airlockrun/airlock/internal/store"
)

// Control is what a node asks of the control plane: the calls its gateway, its CA store and its
// watchers make in single-binary mode in-process. Each names the node that asks (from its verified
// certificate), and the control plane answers only for the sandboxes it placed on that node: a node
// taken over reaches no other node's tenants, secrets or keys.
type Control interface {
	// CheckNode checks that nodeID is a node of the cluster and the certificate of that fingerprint
	// its current one; every call is refused otherwise.
	CheckNode(ctx context.Context, nodeID, fingerprint string) error
	// NodeSecret returns a secret that the policy of sandbox (of tenant, on node) binds.
	NodeSecret(ctx context.Context, nodeID, tenantID, sandboxID, name string) ([]byte, error)
	// NodeToken returns the access token of an OAuth connection that the sandbox's policy binds.
	NodeToken(ctx context.Context, nodeID, tenantID, sandboxID, connection string) ([]byte, error)
	// NodeWrapKey and NodeUnwrapKey wrap and unwrap data keys (of the node's interception CAs) under the
	// key of a tenant with a sandbox on the node (keys.KeyProvider).
	NodeWrapKey(ctx context.Context, nodeID, tenantID string, dek []byte) ([]byte, string, error)
	NodeUnwrapKey(ctx context.Context, nodeID, tenantID, keyID string, wrapped []byte) ([]byte, error)
	// NodeAudit appends daemon and egress entries of the node's sandboxes to their tenants' audit logs.
	NodeAudit(ctx context.Context, nodeID string, entries []store.AuditEntry) error
	// NodeSandboxExit reports a sandbox of the node that stopped by itself.
	NodeSandboxExit(ctx context.Context, nodeID, sandboxID, reason string) error
	// NodeHeartbeat records that the node is up, where its API is and what it offers.
	// fingerprint names the certificate the node called with (one CheckNode accepted).
	NodeHeartbeat(ctx context.Context, nodeID, fingerprint string, hb Heartbeat) error
	// NodeRenew issues the node a new certificate for the key of csrPEM (a PEM certificate request),
	// which is its own from then on; the one it called with (of fingerprint) stays its own until the
	// new one is first used, in case the answer is lost.
	NodeRenew(ctx context.Context, nodeID, fingerprint string, csrPEM []byte) ([]byte, error)
	// NodeCAGet returns the interception CA of a session the node runs a sandbox of (mitm.CA.Marshal with
	// the key in the clear), or ErrNotFound; NodeCAPut keeps the one the node made for it.
	NodeCAGet(ctx context.Context, nodeID, tenantID, sessionID string) ([]byte, error)
	NodeCAPut(ctx context.Context, nodeID, tenantID, sessionID string, ca []byte) error
	// NodeSnapshotSaved takes the node's word that it saved rep.Image for rep's snapshot, which puts it
	// on record; errdefs.ErrNotFound if the snapshot waits for no image from this node
	// (nodecontract.SnapshotCalls).
	NodeSnapshotSaved(ctx context.Context, nodeID string, rep nodecontract.SnapshotReport) error
	// NodeSnapshotGrant returns the grant that opens the tenant's snapshots, for the node to store
	// snapshotID, which it took; errdefs.ErrNotFound if the snapshot no longer waits for its image
	// from this node (nodecontract.SnapshotCalls).
	NodeSnapshotGrant(ctx context.Context, nodeID, tenantID, snapshotID string) (*snapshot.Grant, error)
	// NodeSnapshotStored takes the node's report of a snapshot stored or lost; errdefs.ErrNotFound if
	// the snapshot no longer waits for it (nodecontract.SnapshotCalls).
	NodeSnapshotStored(ctx context.Context, nodeID string, rep nodecontract.SnapshotReport) error
}

// Heartbeat is what a node reports every HeartbeatInterval: the control planes place sandboxes only on
// nodes heard from lately.
type Heartbeat struct {
	// Addr is the host:port of the node's API; its host must be one the node joined with.
	Addr string `json:"addr"`
	// Boot names this run of the node process (random at start): a new one tells the control plane the
	// node restarted, and that it must be given its running sandboxes back (nodecontract.Node.Recover).
	Boot string `json:"boot"`
	// Capacity is what the node offers sandboxes.
	Capacity nodecontract.Capacity `json:"capacity"`
	// Sandboxes counts the sandboxes the node has.
	Sandboxes int `json:"sandboxes"`
	// Version is the node's Airlock version.
	Version string `json:"version,omitempty"`
	// Leaving says the node is shutting down: no sandbox is to be placed on it any more.
	Leaving bool `json:"leaving,omitempty"`
	// Runtimes are the node's runtime drivers and their abilities, the default first (none: an older
	// node, gVisor only).
	Runtimes []nodecontract.Runtime `json:"runtimes,omitempty"`
	// Host names the machine the node runs on (node.HostID: a hash, not the machine's ID), and
	// HostCapacity is what that whole machine offers, so that nodes sharing one can be told apart
	// from nodes that each have their own (empty: an older node).
	Host         string                 `json:"host,omitempty"`
	HostCapacity *nodecontract.Capacity `json:"host_capacity,omitempty"`
	// Images are the digests of the template images the node holds (at most MaxImages), so that
	// placement prefers a node that need not fetch one from the blob store.
	Images []string `json:"images,omitempty"`
}

// MaxImages bounds a heartbeat's Images.
const MaxImages = 256

// HeartbeatInterval is how often a node reports. A node that could not report for FenceAfter destroys
// its sandboxes itself: a control plane gives a node up for gone later (controlplane.NodeDownAfter) and
// resumes its sessions elsewhere, and by then they must have stopped here.
const (
	HeartbeatInterval = 3 * time.Second
	FenceAfter        = 9 * time.Second
)

// ControlHandler serves Control to nodes. Serve it over TLS with cluster.ServerTLS allowing nodes only.
type ControlHandler struct {
	c   Control
	log *slog.Logger
	mux *http.ServeMux
}

// NewControlHandler returns the handler of the calls nodes make to c.
func NewControlHandler(c Control, log *slog.Logger) *ControlHandler {
	if log == nil {
		log = slog.Default()
	}
	h := &ControlHandler{c: c, log: log, mux: http.NewServeMux()}
	h.mux.HandleFunc("POST /cluster/v1/secret", h.credential(c.NodeSecret))
	h.mux.HandleFunc("POST /cluster/v1/token", h.credential(c.NodeToken))
	h.mux.HandleFunc("POST /cluster/v1/keys/wrap", h.wrap)
	h.mux.HandleFunc("POST /cluster/v1/keys/unwrap", h.unwrap)
	h.mux.HandleFunc("POST /cluster/v1/audit", h.audit)
	h.mux.HandleFunc("POST /cluster/v1/exit", h.exit)
	h.mux.HandleFunc("POST /cluster/v1/heartbeat", h.heartbeat)
	h.mux.HandleFunc("POST /cluster/v1/renew", h.renew)
	h.mux.HandleFunc("POST /cluster/v1/ca/get", h.caGet)
	h.mux.HandleFunc("POST /cluster/v1/ca/put", h.caPut)
	h.mux.HandleFunc("POST /cluster/v1/snapshots/saved", h.snapshotReport(c.NodeSnapshotSaved))
	h.mux.HandleFunc("POST /cluster/v1/snapshots/grant", h.snapshotGrant)
	h.mux.HandleFunc("POST /cluster/v1/snapshots/stored", h.snapshotReport(c.NodeSnapshotStored))
	return h
}

// ServeHTTP serves a node's call; a caller that is not a node of the cluster is refused.
func (h *ControlHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, err := verifiedPeer(r, cluster.RoleNode)
	if err == nil {
		err = h.c.CheckNode(r.Context(), id.ID, cluster.CertFingerprint(r.TLS.PeerCertificates[0].Raw))
	}
	if err != nil {
		h.log.Warn("a caller of the cluster port refused", "peer", id.String(), "err", err)
		writeError(w, err)
		return
	}
	h.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), nodeKey{}, id.ID)))
}

type nodeKey struct{}

func callerNode(r *http.Request) string { s, _ := r.Context().Value(nodeKey{}).(string); return s }

// answer writes v as JSON, or err.
func (h *ControlHandler) answer(w http.ResponseWriter, r *http.Request, v any, err error) {
	switch {
	case err != nil && r.URL.Path == "/cluster/v1/ca/get" && errors.Is(err, errdefs.ErrNotFound):
		// A new session has no CA yet: the node makes one and puts it. The normal path, not a warning.
		h.log.Debug("node asked for a session CA there is none of yet", "node", callerNode(r), "err", err)
	case err != nil:
		h.log.Warn("node call refused or failed", "node", callerNode(r), "path", r.URL.Path, "err", err)
	}
	reply(w, v, err)
}

// credentialBody asks for a secret (Name) or a connection's token (Name is the connection).
type credentialBody struct {
	Tenant  string `json:"tenant"`
	Sandbox string `json:"sandbox"`
	Name    string `json:"name"`
}

// valueBody carries a secret value, a token or a key (base64 in JSON).
type valueBody struct {
	Value []byte `json:"value"`
	KeyID string `json:"key_id,omitempty"`
}

// credential serves a secret's or a connection token's value, from fetch.
func (h *ControlHandler) credential(fetch func(ctx context.Context, nodeID, tenantID, sandboxID, name string) ([]byte, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var b credentialBody
		if err := decode(r.Body, &b); err != nil {
			h.answer(w, r, nil, err)
			return
		}
		v, err := fetch(r.Context(), callerNode(r), b.Tenant, b.Sandbox, b.Name)
		h.answer(w, r, valueBody{Value: v}, err)
		clear(v)
	}
}

type keyBody struct {
	Tenant string `json:"tenant"`
	KeyID  string `json:"key_id,omitempty"`
	Key    []byte `json:"key"`
}

func (h *ControlHandler) wrap(w http.ResponseWriter, r *http.Request) {
	var b keyBody
	if err := decode(r.Body, &b); err != nil {
		h.answer(w, r, nil, err)
		return
	}
	wrapped, keyID, err := h.c.NodeWrapKey(r.Context(), callerNode(r), b.Tenant, b.Key)
	clear(b.Key)
	h.answer(w, r, valueBody{Value: wrapped, KeyID: keyID}, err)
}

func (h *ControlHandler) unwrap(w http.ResponseWriter, r *http.Request) {
	var b keyBody
	if err := decode(r.Body, &b); err != nil {
		h.answer(w, r, nil, err)
		return
	}
	dek, err := h.c.NodeUnwrapKey(r.Context(), callerNode(r), b.Tenant, b.KeyID, b.Key)
	h.answer(w, r, valueBody{Value: dek}, err)
	clear(dek)
}

func (h *ControlHandler) audit(w http.ResponseWriter, r *http.Request) {
	var entries []store.AuditEntry
	if err := decode(r.Body, &entries); err != nil {
		h.answer(w, r, nil, err)
		return
	}
	if len(entries) > maxAuditBatch {
		h.answer(w, r, nil, fmt.Errorf("%d audit entries: at most %d a call: %w", len(entries), maxAuditBatch, errdefs.ErrInvalidArgument))
		return
	}
	h.answer(w, r, nil, h.c.NodeAudit(r.Context(), callerNode(r), entries))
}

type exitBody struct {
	Sandbox string `json:"sandbox"`
	Reason  string `json:"reason"`
}

func (h *ControlHandler) exit(w http.ResponseWriter, r *http.Request) {
	var b exitBody
	if err := decode(r.Body, &b); err != nil {
		h.answer(w, r, nil, err)
		return
	}
	h.answer(w, r, nil, h.c.NodeSandboxExit(r.Context(), callerNode(r), b.Sandbox, b.Reason))
}

func (h *ControlHandler) heartbeat(w http.ResponseWriter, r *http.Request) {
	var b Heartbeat
	if err := decode(r.Body, &b); err != nil {
		h.answer(w, r, nil, err)
		return
	}
	h.answer(w, r, nil, h.c.NodeHeartbeat(r.Context(), callerNode(r), cluster.CertFingerprint(r.TLS.PeerCertificates[0].Raw), b))
}

// renewBody carries a certificate request, or the certificate issued for it (PEM).
type renewBody struct {
	CSR         string `json:"csr,omitempty"`
	Certificate string `json:"certificate,omitempty"`
}

func (h *ControlHandler) renew(w http.ResponseWriter, r *http.Request) {
	var b renewBody
	if err := decode(r.Body, &b); err != nil {
		h.answer(w, r, nil, err)
		return
	}
	cert, err := h.c.NodeRenew(r.Context(), callerNode(r), cluster.CertFingerprint(r.TLS.PeerCertificates[0].Raw), []byte(b.CSR))
	h.answer(w, r, renewBody{Certificate: string(cert)}, err)
}

// caBody names a session's interception CA, and carries it.
type caBody struct {
	Tenant  string `json:"tenant"`
	Session string `json:"session"`
	CA      []byte `json:"ca,omitempty"`
}

func (h *ControlHandler) caGet(w http.ResponseWriter, r *http.Request) {
	var b caBody
	if err := decode(r.Body, &b); err != nil {
		h.answer(w, r, nil, err)
		return
	}
	ca, err := h.c.NodeCAGet(r.Context(), callerNode(r), b.Tenant, b.Session)
	h.answer(w, r, caBody{Tenant: b.Tenant, Session: b.Session, CA: ca}, err)
	clear(ca)
}

func (h *ControlHandler) caPut(w http.ResponseWriter, r *http.Request) {
	var b caBody
	if err := decode(r.Body, &b); err != nil {
		h.answer(w, r, nil, err)
		return
	}
	err := h.c.NodeCAPut(r.Context(), callerNode(r), b.Tenant, b.Session, b.CA)
	clear(b.CA)
	h.answer(w, r, nil, err)
}

// snapshotRef names a snapshot a node took, of a tenant.
type snapshotRef struct {
	Tenant   string `json:"tenant"`
	Snapshot string `json:"snapshot"`
}

// snapshotGrant answers the tenant's grant (snapshot.Grant.MarshalBinary) for a snapshot the node took.
func (h *ControlHandler) snapshotGrant(w http.ResponseWriter, r *http.Request) {
	var b snapshotRef
	if err := decode(r.Body, &b); err != nil {
		h.answer(w, r, nil, err)
		return
	}
	g, err := h.c.NodeSnapshotGrant(r.Context(), callerNode(r), b.Tenant, b.Snapshot)
	if err == nil && g == nil {
		err = fmt.Errorf("no grant for snapshot %s: %w", b.Snapshot, errdefs.ErrInternal)
	}
	if err != nil {
		h.answer(w, r, nil, err)
		return
	}
	defer g.Clear()
	key, err := g.MarshalBinary()
	h.answer(w, r, valueBody{Value: key}, err)
	clear(key)
}

// snapshotReport serves a node's word about a snapshot it took (saved, or stored or lost), to take.
func (h *ControlHandler) snapshotReport(take func(ctx context.Context, nodeID string, rep nodecontract.SnapshotReport) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var rep nodecontract.SnapshotReport
		if err := decode(r.Body, &rep); err != nil {
			h.answer(w, r, nil, err)
			return
		}
		if len(rep.Lost) > nodecontract.MaxLostReason {
			h.answer(w, r, nil, fmt.Errorf("a lost snapshot's reason of %d bytes: at most %d: %w", len(rep.Lost), nodecontract.MaxLostReason, errdefs.ErrInvalidArgument))
			return
		}
		h.answer(w, r, nil, take(r.Context(), callerNode(r), rep))
	}
}

// maxAuditBatch bounds the audit entries of one call.
const maxAuditBatch = 512

// ControlClientConfig configures a ControlClient.
type ControlClientConfig struct {
	// URL is the control planes' cluster address (https://host:port, a load balancer or one replica).
	// Required.
	URL string
	// More are the cluster addresses of other replicas: a call that cannot reach one goes to the next.
	More []string
	// Cert is the node's certificate (or Held, one it renews) and Roots the cluster CA's. Required.
	Cert  tls.Certificate
	Held  *cluster.HeldCert
	Roots *x509.CertPool
	// Logger receives logs. Nil: slog.Default().
	Logger *slog.Logger
}

// ControlClient is a node's client of the control plane: it gives the node's gateway its secrets and
// tokens (Secret, Token), its CA store a key provider (WrapKey, UnwrapKey), and carries audit entries
// (Record, batched) and sandbox exits (SandboxExit) back.
type ControlClient struct {
	urls []string
	// cur indexes the URL that answered last: calls go there first.
	cur atomic.Int32
	// hc is the HTTP client, made anew (with fresh connections) once the node's certificate was renewed.
	hc        atomic.Pointer[http.Client]
	clientTLS *tls.Config
	log       *slog.Logger

	queue   chan store.AuditEntry
	dropped atomic.Int64
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

// auditQueue bounds the audit entries waiting to be sent; past it entries are dropped and counted.
const auditQueue = 8192

// NewControlClient returns a node's client of the control plane and starts its audit sender; Close
// stops it.
func NewControlClient(cfg ControlClientConfig) (*ControlClient, error) {
	urls := append([]string{cfg.URL}, cfg.More...)
	for i, u := range urls {
		if !strings.HasPrefix(u, "https://") {
			return nil, fmt.Errorf("control plane client: %q: an https URL is required: %w", u, errdefs.ErrInvalidArgument)
		}
		urls[i] = strings.TrimSuffix(u, "/")
	}
	if cfg.Roots == nil || (len(cfg.Cert.Certificate) == 0 && cfg.Held == nil) {
		return nil, fmt.Errorf("control plane client: Cert (or Held) and Roots are required: %w", errdefs.ErrInvalidArgument)
	}
	want := cluster.Identity{Role: cluster.RoleControlPlane}
	clientTLS := cluster.ClientTLS(cfg.Cert, cfg.Roots, want)
	if cfg.Held != nil {
		clientTLS = cfg.Held.ClientTLS(cfg.Roots, want)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &ControlClient{urls: urls, clientTLS: clientTLS, log: cfg.Logger, queue: make(chan store.AuditEntry, auditQueue), stop: make(chan struct{})}
	c.hc.Store(c.newHTTP())
	c.wg.Add(1)
	go c.sendAudit() // owner: ControlClient; ends on Close
	return c, nil
}

// Close sends what audit entries are queued (within a few seconds) and stops. Later calls do nothing.
func (c *ControlClient) Close() error {
	c.once.Do(func() { close(c.stop) })
	c.wg.Wait()
	c.client().CloseIdleConnections()
	return nil
}

// newHTTP makes an HTTP client with connections of its own. HTTP/2 pings find a replica gone silent.
func (c *ControlClient) newHTTP() *http.Client {
	tr := &http.Transport{
		TLSClientConfig:     c.clientTLS,
		DialContext:         (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: dialTimeout,
		ForceAttemptHTTP2:   true,
		IdleConnTimeout:     90 * time.Second,
		HTTP2:               &http.HTTP2Config{SendPingTimeout: 5 * time.Second, PingTimeout: 5 * time.Second},
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func (c *ControlClient) client() *http.Client { return c.hc.Load() }

// replicaTryTimeout bounds a call's try of one replica when others are left to try.
const replicaTryTimeout = 2 * time.Second

func (c *ControlClient) call(ctx context.Context, path string, in, out any) error {
	// The replica that answered last first, then the others in turn while they cannot be reached. Each
	// but the last try has a deadline of its own: a replica that went silent (its host down) must not
	// use up the whole call.
	start := int(c.cur.Load())
	var err error
	for i := range c.urls {
		k := (start + i) % len(c.urls)
		actx, cancel := ctx, context.CancelFunc(func() {})
		if i < len(c.urls)-1 {
			actx, cancel = context.WithTimeout(ctx, replicaTryTimeout)
		}
		err = callJSON(actx, c.client(), "control plane", http.MethodPost, c.urls[k]+path, in, out)
		cancel()
		if err == nil {
			if k != start {
				c.cur.Store(int32(k))
			}
			return nil
		}
		if ctx.Err() != nil || !(errors.Is(err, errdefs.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)) {
			return err
		}
		c.cur.Store(int32((k + 1) % len(c.urls)))
	}
	return err
}

// Secret returns a secret the sandbox's policy binds (gateway.Config.Secret).
func (c *ControlClient) Secret(ctx context.Context, tenantID, sandboxID, name string) ([]byte, error) {
	var v valueBody
	err := c.call(ctx, "/cluster/v1/secret", credentialBody{Tenant: tenantID, Sandbox: sandboxID, Name: name}, &v)
	return v.Value, err
}

// Token returns the access token of a connection the sandbox's policy binds (gateway.Config.Token).
func (c *ControlClient) Token(ctx context.Context, tenantID, sandboxID, connection string) ([]byte, error) {
	var v valueBody
	err := c.call(ctx, "/cluster/v1/token", credentialBody{Tenant: tenantID, Sandbox: sandboxID, Name: connection}, &v)
	return v.Value, err
}

// WrapKey wraps dek under the tenant's key (keys.KeyProvider).
func (c *ControlClient) WrapKey(ctx context.Context, tenantID string, dek []byte) ([]byte, string, error) {
	var v valueBody
	err := c.call(ctx, "/cluster/v1/keys/wrap", keyBody{Tenant: tenantID, Key: dek}, &v)
	return v.Value, v.KeyID, err
}

// UnwrapKey unwraps a key WrapKey wrapped (keys.KeyProvider).
func (c *ControlClient) UnwrapKey(ctx context.Context, tenantID, keyID string, wrapped []byte) ([]byte, error) {
	var v valueBody
	err := c.call(ctx, "/cluster/v1/keys/unwrap", keyBody{Tenant: tenantID, KeyID: keyID, Key: wrapped}, &v)
	return v.Value, err
}

// SandboxExit reports a sandbox that stopped by itself, trying for a while if the control plane cannot
// be reached (node.Config.OnExit; it blocks).
func (c *ControlClient) SandboxExit(id, reason string) {
	for i := 0; i < 10; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := c.call(ctx, "/cluster/v1/exit", exitBody{Sandbox: id, Reason: reason}, nil)
		cancel()
		if err == nil || httperr.Status(err) < 500 {
			return
		}
		c.log.Warn("report a sandbox's exit to the control plane", "sandbox", id, "err", err)
		select {
		case <-c.stop:
			return
		case <-time.After(time.Duration(i+1) * time.Second):
		}
	}
}

// Heartbeat reports the node up (Heartbeat).
func (c *ControlClient) Heartbeat(ctx context.Context, hb Heartbeat) error {
	return c.call(ctx, "/cluster/v1/heartbeat", hb, nil)
}

// Renew asks for a new certificate for the key of csrPEM and returns it (PEM). Connections made with
// the old one are refused once the new one is in use: call Reconnect once it is held.
func (c *ControlClient) Renew(ctx context.Context, csrPEM []byte) ([]byte, error) {
	var b renewBody
	err := c.call(ctx, "/cluster/v1/renew", renewBody{CSR: string(csrPEM)}, &b)
	return []byte(b.Certificate), err
}

// SessionCA returns the interception CA the control plane keeps for a session this node runs
// (castore.Remote's Get).
func (c *ControlClient) SessionCA(ctx context.Context, tenantID, sessionID string) ([]byte, error) {
	var b caBody
	err := c.call(ctx, "/cluster/v1/ca/get", caBody{Tenant: tenantID, Session: sessionID}, &b)
	return b.CA, err
}

// KeepSessionCA hands the control plane the interception CA this node made for a session
// (castore.Remote's Put).
func (c *ControlClient) KeepSessionCA(ctx context.Context, tenantID, sessionID string, ca []byte) error {
	return c.call(ctx, "/cluster/v1/ca/put", caBody{Tenant: tenantID, Session: sessionID, CA: ca}, nil)
}

// SnapshotSaved says that this node saved rep.Image for rep's snapshot (nodecontract.SnapshotCalls).
func (c *ControlClient) SnapshotSaved(ctx context.Context, rep nodecontract.SnapshotReport) error {
	return c.call(ctx, "/cluster/v1/snapshots/saved", rep, nil)
}

// SnapshotGrant returns the grant that opens the tenant's snapshots, for storing snapshotID, which this
// node took (nodecontract.SnapshotCalls); the caller clears it.
func (c *ControlClient) SnapshotGrant(ctx context.Context, tenantID, snapshotID string) (*snapshot.Grant, error) {
	var v valueBody
	err := c.call(ctx, "/cluster/v1/snapshots/grant", snapshotRef{Tenant: tenantID, Snapshot: snapshotID}, &v)
	defer clear(v.Value)
	if err != nil {
		return nil, err
	}
	return snapshot.UnmarshalGrant(tenantID, v.Value)
}

// SnapshotStored reports a snapshot this node stored, or lost (nodecontract.SnapshotCalls).
func (c *ControlClient) SnapshotStored(ctx context.Context, rep nodecontract.SnapshotReport) error {
	return c.call(ctx, "/cluster/v1/snapshots/stored", rep, nil)
}

// Reconnect makes the next calls use new connections (handshakes with the certificate held now); the
// old connections close once idle.
func (c *ControlClient) Reconnect() {
	old := c.hc.Swap(c.newHTTP())
	old.CloseIdleConnections()
}

// Record queues an audit entry for the control plane (audit.Func); past auditQueue waiting it is
// dropped and counted (Dropped).
func (c *ControlClient) Record(e store.AuditEntry) {
	select {
	case c.queue <- e:
	default:
		c.dropped.Add(1)
	}
}

// Dropped reports the audit entries Record dropped.
func (c *ControlClient) Dropped() int64 { return c.dropped.Load() }

// sendAudit sends the queued audit entries in batches, retrying a failed batch until it is sent or the
// client closes.
func (c *ControlClient) sendAudit() {
	defer c.wg.Done()
	var batch []store.AuditEntry
	send := func(deadline time.Duration) bool {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		err := c.call(ctx, "/cluster/v1/audit", batch, nil)
		if err != nil && httperr.Status(err) >= 500 {
			c.log.Warn("send audit entries to the control plane", "entries", len(batch), "err", err)
			return false
		}
		if err != nil {
			c.log.Warn("the control plane refused audit entries", "entries", len(batch), "err", err)
		}
		batch = batch[:0]
		return true
	}
	for {
		select {
		case e := <-c.queue:
			batch = append(batch, e)
			for len(batch) < maxAuditBatch {
				select {
				case e := <-c.queue:
					batch = append(batch, e)
					continue
				default:
				}
				break
			}
			for !send(10 * time.Second) {
				select {
				case <-c.stop:
					return
				case <-time.After(time.Second):
				}
			}
		case <-c.stop:
			for {
				select {
				case e := <-c.queue:
					batch = append(batch, e)
					if len(batch) < maxAuditBatch {
						continue
					}
				default:
				}
				if len(batch) == 0 || !send(3*time.Second) {
					return
				}
			}
		}
	}
}

var (
	_ keys.KeyProvider           = (*ControlClient)(nil)
	_ nodecontract.SnapshotCalls = (*ControlClient)(nil)
)
