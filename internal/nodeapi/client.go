package nodeapi

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway"
	"github.com/airlockrun/airlock/internal/gateway/flowlog"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/template"
	"github.com/airlockrun/airlock/internal/template/oci"
)

// dialTimeout bounds the connection and TLS handshake to a node.
const dialTimeout = 10 * time.Second

// ClientConfig configures a Client.
type ClientConfig struct {
	// NodeID is the node's ID: its certificate must name airlock://node/<NodeID>. Required.
	NodeID string
	// Addr is the node API's host:port. Required.
	Addr string
	// Cert is this control plane's certificate (or Self, one it renews), and Roots the cluster CA's.
	// Required.
	Cert  tls.Certificate
	Self  *cluster.SelfCert
	Roots *x509.CertPool
	// Pinned, if set, is asked about the certificate of every connection to the node, by fingerprint
	// (cluster.CertFingerprint), once its chain and identity checked out: an error refuses the
	// connection. The control plane pins the certificate it recorded for the node, so that another
	// certificate the cluster's CA issued for the node's ID (one from before it last joined) does not
	// get the node's calls.
	Pinned func(fingerprint string) error
	// LinkAudit, if set, gives the audit that records the frames this control plane exchanges with a
	// sandbox's daemon (the tenant's audit log). Nil: not recorded here (the node records every frame in
	// its own audit file either way).
	LinkAudit func(ctx context.Context, sandboxID string) link.Audit
	// Templates resolves template roots on this host for TemplateRoot (reading a snapshot's files needs
	// the template it was taken on). Nil: TemplateRoot answers failed precondition.
	Templates template.Registry
	// Logger receives logs. Nil: slog.Default().
	Logger *slog.Logger
}

// Client calls a node in another process. It implements controlplane.Node and is safe for concurrent use.
type Client struct {
	cfg  ClientConfig
	tls  *tls.Config // for the upgrades: HTTP/1.1 only
	http *http.Client
	base string
	log  *slog.Logger

	mu sync.Mutex
	// links holds this control plane's channel to each sandbox's daemon through the node, by sandbox ID,
	// dialed on first use and again once it ends; guarded by mu.
	links map[string]*link.Client
}

// NewClient returns a client of the node cfg names. It connects on first use.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.NodeID == "" || cfg.Addr == "" || cfg.Roots == nil || (len(cfg.Cert.Certificate) == 0 && cfg.Self == nil) {
		return nil, fmt.Errorf("node API client: NodeID, Addr, Cert (or Self) and Roots are required: %w", errdefs.ErrInvalidArgument)
	}
	if err := cluster.CheckID(cfg.NodeID); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	want := cluster.Identity{Role: cluster.RoleNode, ID: cfg.NodeID}
	clientTLS := func() *tls.Config {
		var c *tls.Config
		if cfg.Self != nil {
			c = cfg.Self.ClientTLS(cfg.Roots, want)
		} else {
			c = cluster.ClientTLS(cfg.Cert, cfg.Roots, want)
		}
		if pinned := cfg.Pinned; pinned != nil {
			verify := c.VerifyConnection
			c.VerifyConnection = func(cs tls.ConnectionState) error {
				if err := verify(cs); err != nil {
					return err
				}
				return pinned(cluster.CertFingerprint(cs.PeerCertificates[0].Raw))
			}
		}
		return c
	}
	tr := &http.Transport{
		TLSClientConfig:     clientTLS(),
		DialContext:         (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: dialTimeout,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
	up := clientTLS()
	up.NextProtos = []string{"http/1.1"}
	return &Client{cfg: cfg, tls: up, http: &http.Client{Transport: tr}, base: "https://" + cfg.Addr,
		log: cfg.Logger.With("node", cfg.NodeID), links: map[string]*link.Client{}}, nil
}

// ID names the node.
func (c *Client) ID() string { return c.cfg.NodeID }

// Close closes the daemon channels and idle connections.
func (c *Client) Close() error {
	c.mu.Lock()
	links := c.links
	c.links = map[string]*link.Client{}
	c.mu.Unlock()
	for _, l := range links {
		l.Close()
	}
	c.http.CloseIdleConnections()
	return nil
}

// call sends a JSON request (in, if not nil) and decodes the JSON answer into out (if not nil).
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	return callJSON(ctx, c.http, c.peer(), method, c.base+path, in, out)
}

// do sends a request and returns a successful answer; a failed one becomes an error.
func (c *Client) do(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	return send(ctx, c.http, c.peer(), method, c.base+path, body)
}

func (c *Client) peer() string { return "node " + c.cfg.NodeID }

func sandboxPath(id string, rest string) string {
	return "/node/v1/sandboxes/" + url.PathEscape(id) + rest
}

// Info asks the node who it is.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var i Info
	err := c.call(ctx, http.MethodGet, "/node/v1/info", nil, &i)
	return i, err
}

// CheckTemplate reports whether the node can boot the template.
func (c *Client) CheckTemplate(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodPost, "/node/v1/templates/check", nameBody{Name: name}, nil)
}

// TemplateRoot resolves the template on this host (see ClientConfig.Templates).
func (c *Client) TemplateRoot(ctx context.Context, name string) (string, error) {
	if c.cfg.Templates == nil {
		return "", fmt.Errorf("templates are not on this host: %w", errdefs.ErrFailedPrecondition)
	}
	t, err := c.cfg.Templates.Get(ctx, name)
	if err != nil {
		return "", err
	}
	return t.RootFS, nil
}

// ImportImage streams the image archive r to the node, which imports it (see node.Local.ImportImage).
func (c *Client) ImportImage(ctx context.Context, r io.Reader) (oci.Image, error) {
	resp, err := c.do(ctx, http.MethodPost, "/node/v1/templates/images", r)
	if err != nil {
		return oci.Image{}, err
	}
	defer resp.Body.Close()
	var img oci.Image
	if err := decode(resp.Body, &img); err != nil {
		return oci.Image{}, fmt.Errorf("%s: import image: %w", c.peer(), err)
	}
	return img, nil
}

// PullImage has the node pull the image ref from its registry (see node.Local.PullImage).
func (c *Client) PullImage(ctx context.Context, ref string, opts oci.PullOptions) (oci.Image, error) {
	var img oci.Image
	err := c.call(ctx, http.MethodPost, "/node/v1/templates/images/pull", pullBody{Ref: ref, Insecure: opts.Insecure, Username: opts.Username, Password: opts.Password}, &img)
	return img, err
}

// PublishImage has the node write the image digest into the blob store, for the other nodes.
func (c *Client) PublishImage(ctx context.Context, digest string) error {
	return c.call(ctx, http.MethodPost, "/node/v1/templates/images/publish", digestBody{Digest: digest}, nil)
}

// CreateSandbox boots a sandbox on the node.
func (c *Client) CreateSandbox(ctx context.Context, req nodecontract.CreateRequest) error {
	return c.call(ctx, http.MethodPost, "/node/v1/sandboxes", req, nil)
}

// DestroySandbox removes a sandbox from the node.
func (c *Client) DestroySandbox(ctx context.Context, id string) error {
	c.dropLink(id)
	return c.call(ctx, http.MethodDelete, sandboxPath(id, ""), nil, nil)
}

// Sandboxes reports the sandboxes the node has.
func (c *Client) Sandboxes(ctx context.Context) ([]string, error) {
	var ids []string
	err := c.call(ctx, http.MethodGet, "/node/v1/sandboxes", nil, &ids)
	return ids, err
}

// Recover has the node re-adopt the sandboxes that still run.
func (c *Client) Recover(ctx context.Context, sbs []nodecontract.RecoverRequest) ([]string, error) {
	if sbs == nil {
		sbs = []nodecontract.RecoverRequest{}
	}
	var ids []string
	err := c.call(ctx, http.MethodPost, "/node/v1/recover", sbs, &ids)
	return ids, err
}

// SetNetwork replaces a sandbox's egress policy.
func (c *Client) SetNetwork(ctx context.Context, id string, p policy.Policy) error {
	return c.call(ctx, http.MethodPut, sandboxPath(id, "/network"), p, nil)
}

// RestoreSandbox has the node boot the sandbox from the snapshot's image, which it keeps or fetches
// from the snapshot store with src.Grant.
func (c *Client) RestoreSandbox(ctx context.Context, req nodecontract.CreateRequest, src nodecontract.ImageSource) error {
	c.dropLink(req.ID)
	body := restoreBody{Sandbox: req, SnapshotID: src.SnapshotID}
	if src.Grant != nil {
		g, err := src.Grant.MarshalBinary()
		if err != nil {
			return err
		}
		defer clear(g)
		body.Grant = g
	}
	return c.call(ctx, http.MethodPost, "/node/v1/sandboxes/restore", body, nil)
}

// Snapshot has the node save the sandbox as the snapshot's image, then let it run on or destroy it;
// the node stores the image in the background.
func (c *Client) Snapshot(ctx context.Context, id string, req nodecontract.SnapshotRequest) (nodecontract.Image, error) {
	var img nodecontract.Image
	err := c.call(ctx, http.MethodPost, sandboxPath(id, "/snapshot"), snapshotBody{Tenant: req.TenantID, SnapshotID: req.SnapshotID, Then: req.Then, IfIdle: req.IfIdle, Meta: req.Meta}, &img)
	if err == nil {
		// The checkpoint replaced the node's channel to the daemon (or the sandbox is gone), and the
		// node is closing this control plane's (after telling it which calls to send again:
		// link.ErrNotStarted).
		c.forgetLink(id)
	}
	return img, err
}

// DropImages has the node remove the images of these snapshots.
func (c *Client) DropImages(ctx context.Context, snapIDs []string) error {
	return c.call(ctx, http.MethodPost, "/node/v1/images/drop", snapIDs, nil)
}

// Runtimes reports the node's runtime drivers and their abilities.
func (c *Client) Runtimes(ctx context.Context) ([]nodecontract.Runtime, error) {
	var rs []nodecontract.Runtime
	err := c.call(ctx, http.MethodGet, "/node/v1/runtimes", nil, &rs)
	return rs, err
}

// CopyCA gives toID the interception CA stored under fromID.
func (c *Client) CopyCA(ctx context.Context, fromID, toID, tenantID string) error {
	return c.call(ctx, http.MethodPost, "/node/v1/cas/copy", caCopyBody{From: fromID, To: toID, Tenant: tenantID}, nil)
}

// ForgetCA removes a stored CA; a node that cannot be reached keeps it (logged).
func (c *Client) ForgetCA(caID string) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	if err := c.call(ctx, http.MethodDelete, "/node/v1/cas/"+url.PathEscape(caID), nil, nil); err != nil {
		c.log.Warn("forget an interception CA", "ca", caID, "err", err)
	}
}

// RewrapCAs wraps the keys of the tenant's CAs again under its current key-encryption key.
func (c *Client) RewrapCAs(ctx context.Context, tenantID string) (int, error) {
	var out rewrapBody
	err := c.call(ctx, http.MethodPost, "/node/v1/cas/rewrap", rewrapBody{Tenant: tenantID}, &out)
	return out.Count, err
}

// SandboxCPU reports the CPU time a sandbox used so far.
func (c *Client) SandboxCPU(ctx context.Context, id string) (time.Duration, error) {
	var out cpuBody
	err := c.call(ctx, http.MethodGet, sandboxPath(id, "/cpu"), nil, &out)
	return time.Duration(out.Nanos), err
}

// SandboxMetrics reports a sandbox's resource use in [start, end] (a zero bound is none).
func (c *Client) SandboxMetrics(ctx context.Context, id string, start, end time.Time) ([]nodecontract.Sample, error) {
	q := url.Values{}
	if !start.IsZero() {
		q.Set("start", start.Format(time.RFC3339Nano))
	}
	if !end.IsZero() {
		q.Set("end", end.Format(time.RFC3339Nano))
	}
	path := sandboxPath(id, "/metrics")
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out []nodecontract.Sample
	if err := c.call(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	if out == nil {
		out = []nodecontract.Sample{}
	}
	return out, nil
}

// Flows returns a sandbox's network flows.
func (c *Client) Flows(ctx context.Context, id string, f flowlog.Filter) ([]gateway.Flow, error) {
	var flows []gateway.Flow
	err := c.call(ctx, http.MethodPost, sandboxPath(id, "/flows"), f, &flows)
	return flows, err
}

// DialPort opens a TCP connection, through the node, to port of a sandbox.
func (c *Client) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: %w", port, errdefs.ErrInvalidArgument)
	}
	return c.upgrade(ctx, sandboxPath(id, "/ports/"+strconv.Itoa(port)), protoPort)
}

// Link returns this control plane's channel to the sandbox's daemon, through the node.
func (c *Client) Link(ctx context.Context, id string) (*link.Client, error) {
	c.mu.Lock()
	l := c.links[id]
	c.mu.Unlock()
	if l != nil && l.Err() == nil {
		return l, nil
	}
	conn, err := c.upgrade(ctx, sandboxPath(id, "/link"), protoLink)
	if err != nil {
		return nil, err
	}
	opts := link.Options{Logger: c.log.With("sandbox", id)}
	if c.cfg.LinkAudit != nil {
		opts.Audit = c.cfg.LinkAudit(ctx, id)
	}
	nl := link.NewClient(conn, opts)
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.links[id]; cur != nil && cur != l && cur.Err() == nil {
		// Another call dialed meanwhile: use its channel.
		go nl.Close()
		return cur, nil
	}
	if l != nil {
		go l.Close()
	}
	c.links[id] = nl
	go func() { // owner: nl; ends when its connection does, which forgets it (a sandbox gone elsewhere)
		<-nl.Done()
		c.mu.Lock()
		if c.links[id] == nl {
			delete(c.links, id)
		}
		c.mu.Unlock()
	}()
	return nl, nil
}

// linkGrace is how long a forgotten channel to a daemon may take to be closed by the node before this
// control plane closes it.
const linkGrace = 10 * time.Second

// forgetLink stops using this control plane's channel to a sandbox's daemon, which the node is replacing:
// the next call dials anew. The old channel is left for the node to close, so that its calls learn which
// of them never started (link.ErrNotStarted), and closed here after linkGrace at the latest.
func (c *Client) forgetLink(id string) {
	c.mu.Lock()
	l := c.links[id]
	delete(c.links, id)
	c.mu.Unlock()
	if l != nil {
		go func() { // owner: l; ends when the node closed it or after linkGrace
			t := time.NewTimer(linkGrace)
			defer t.Stop()
			select {
			case <-l.Done():
			case <-t.C:
			}
			l.Close()
		}()
	}
}

// dropLink closes this control plane's channel to a sandbox's daemon.
func (c *Client) dropLink(id string) {
	c.mu.Lock()
	l := c.links[id]
	delete(c.links, id)
	c.mu.Unlock()
	if l != nil {
		l.Close()
	}
}

// upgrade opens a connection to the node that, after an HTTP/1.1 upgrade of path to proto, carries
// proto's bytes.
func (c *Client) upgrade(ctx context.Context, path, proto string) (net.Conn, error) {
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: dialTimeout}, Config: c.tls}
	raw, err := d.DialContext(ctx, "tcp", c.cfg.Addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("node %s: %v: %w", c.cfg.NodeID, err, errdefs.ErrUnavailable)
	}
	conn := raw.(*tls.Conn)
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(dialTimeout))
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	if err == nil {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", proto)
		err = req.Write(conn)
	}
	var resp *http.Response
	br := bufio.NewReader(conn)
	if err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if !stop() {
		err = ctx.Err()
	}
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("node %s: %v: %w", c.cfg.NodeID, err, errdefs.ErrUnavailable)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		return nil, readError(resp)
	}
	_ = conn.SetDeadline(time.Time{})
	return bufferedConn(conn, br), nil
}
