package controlplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodeapi"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// joinCluster is a control plane with a cluster CA and no node of its own, for join tests.
type joinCluster struct {
	t   *testing.T
	s   *Service
	ca  *cluster.CA
	clk *clock
	// hosts are what nodes join with.
	hosts []string
}

// newJoinCluster starts a joinCluster whose control plane reaches nodes with dial (nil: fake nodes).
func newJoinCluster(t *testing.T, dial func(c *joinCluster, id, addr string, pinned func(string) error) (Node, error)) *joinCluster {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := &joinCluster{t: t, ca: testClusterCA(t, st), clk: &clock{t: time.Now()}, hosts: []string{"10.0.0.5"}}
	if dial == nil {
		dial = func(*joinCluster, string, string, func(string) error) (Node, error) { return newFakeNode(t), nil }
	}
	c.s, err = New(Config{Store: st, Now: c.clk.Now, ReapInterval: time.Hour, Logger: slog.New(slog.DiscardHandler), Cluster: c.ca,
		DialNode: func(id, addr string, pinned func(string) error) (Node, error) { return dial(c, id, addr, pinned) }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// token makes a join token as o says (good for an hour).
func (c *joinCluster) token(o cluster.JoinTokenOptions) string {
	c.t.Helper()
	o.TTL = time.Hour
	tok, _, err := c.s.CreateJoinToken(context.Background(), o)
	if err != nil {
		c.t.Fatal(err)
	}
	return tok
}

// host is a node's host: its key, and the certificate it was given when it last joined.
type host struct {
	key     *ecdsa.PrivateKey
	certPEM []byte
}

// attempt is a join as the CLI sends it, with the new key it asks a certificate for.
type attempt struct {
	req JoinRequest
	key *ecdsa.PrivateKey
}

// request makes a join of id from h, with a new key, and the proof of h's key if prove.
func (c *joinCluster) request(h *host, id, token string, prove, replace bool) attempt {
	c.t.Helper()
	key, csr, err := cluster.NewKey()
	if err != nil {
		c.t.Fatal(err)
	}
	req := JoinRequest{Token: token, NodeID: id, CSR: csr, Hosts: c.hosts, Replace: replace}
	if prove {
		p, err := cluster.SignJoinProof(h.key, h.certPEM, id, csr, req.Hosts, c.clk.Now())
		if err != nil {
			c.t.Fatal(err)
		}
		req.Proof = &p
	}
	return attempt{req: req, key: key}
}

// join sends a and, if it went through, keeps the new key and certificate on h.
func (c *joinCluster) join(h *host, a attempt) (Joined, error) {
	c.t.Helper()
	j, err := c.s.JoinNode(context.Background(), a.req)
	if err == nil {
		if cert := parseCert(c.t, j.CertPEM); !a.key.PublicKey.Equal(cert.PublicKey) {
			c.t.Fatalf("the certificate of %s is not for the key it asked one for", a.req.NodeID)
		}
		h.key, h.certPEM = a.key, j.CertPEM
	}
	return j, err
}

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatal("no PEM certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNodeIdentityIsTheNodes: the holder of a node's join token (root on another node's host, say)
// cannot take that node's ID, with or without replace, nor join another node with a token already used;
// a multi-use token names the IDs it may join and cannot replace. Positive controls: the node itself
// re-joins with the proof of its key (keeping its bound and draining), a fresh node joins with its own
// token, and a replace the operator approved (a token made to replace that ID) goes through; the
// certificate it replaced is let in no more.
func TestNodeIdentityIsTheNodes(t *testing.T) {
	ctx := context.Background()
	c := newJoinCluster(t, nil)
	tokA := c.token(cluster.JoinTokenOptions{})
	a := &host{}
	if _, err := c.join(a, c.request(a, "node-a", tokA, false, false)); err != nil {
		t.Fatalf("node-a joins with its token: %v", err)
	}
	recA, err := c.s.nodeRecord(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	// node-a's first heartbeat sets its bound; the operator drains it.
	if _, err := c.s.updateNodeRecord(ctx, "node-a", func(r *NodeRecord) error {
		r.Bound = &nodecontract.Capacity{CPUMillicores: 1000, MemoryMB: 1024, MaxSandboxes: 2}
		r.Draining = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Another host holds node-a's join token (and a key and certificate of its own).
	b := &host{}
	if _, err := c.join(b, c.request(b, "node-b", c.token(cluster.JoinTokenOptions{}), false, false)); err != nil {
		t.Fatalf("node-b joins with its token: %v", err)
	}
	for name, tc := range map[string]struct {
		req  func() attempt
		want error
	}{
		"node-a's token, node-a's ID":          {func() attempt { return c.request(b, "node-a", tokA, false, false) }, errdefs.ErrAlreadyExists},
		"node-a's token, node-a's ID, replace": {func() attempt { return c.request(b, "node-a", tokA, false, true) }, errdefs.ErrPermissionDenied},
		"node-a's token, a new ID":             {func() attempt { return c.request(b, "node-c", tokA, false, false) }, errdefs.ErrPermissionDenied},
		"a fresh token, node-a's ID, replace":  {func() attempt { return c.request(b, "node-a", c.token(cluster.JoinTokenOptions{}), false, true) }, errdefs.ErrPermissionDenied},
		"a token for node-a, not to replace": {func() attempt {
			return c.request(b, "node-a", c.token(cluster.JoinTokenOptions{NodeIDs: []string{"node-a"}}), false, true)
		}, errdefs.ErrPermissionDenied},
		"proof by its own key, node-a's ID":          {func() attempt { return c.request(b, "node-a", tokA, true, false) }, errdefs.ErrPermissionDenied},
		"proof by its own key, node-a's ID, replace": {func() attempt { return c.request(b, "node-a", tokA, true, true) }, errdefs.ErrPermissionDenied},
		"no token, no proof":                         {func() attempt { return c.request(b, "node-a", "", false, false) }, errdefs.ErrAlreadyExists},
		"no token, a new ID":                         {func() attempt { return c.request(b, "node-z", "", false, false) }, errdefs.ErrPermissionDenied},
	} {
		_, err := c.join(b, tc.req())
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v; want %v", name, err, tc.want)
		}
	}
	if rec, err := c.s.nodeRecord(ctx, "node-a"); err != nil || rec.CertFingerprint != recA.CertFingerprint {
		t.Fatalf("node-a's record after the refused joins: %+v, %v; want its certificate still %s", rec, err, recA.CertFingerprint)
	}

	// A certificate the CA issued for node-a that is not the one recorded (as from before it last
	// joined) proves nothing.
	stale := &host{}
	staleKey, staleCSR, err := cluster.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if stale.certPEM, err = c.ca.IssueCSR(cluster.Identity{Role: cluster.RoleNode, ID: "node-a"}, staleCSR, nil); err != nil {
		t.Fatal(err)
	}
	stale.key = staleKey
	if _, err := c.join(stale, c.request(stale, "node-a", "", true, false)); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a proof by a certificate of node-a's that is not its recorded one: %v; want permission denied", err)
	}

	// Positive control: node-a itself re-joins with the proof of its key, and no token; what the
	// operator set of it stays, and the certificate it had is no longer its own.
	oldFP := recA.CertFingerprint
	re := c.request(a, "node-a", "", true, false)
	j, err := c.join(a, re)
	if err != nil {
		t.Fatalf("node-a re-joins with the proof of its key: %v", err)
	}
	if j.Node.Bound == nil || j.Node.Bound.MaxSandboxes != 2 || !j.Node.Draining || j.Node.JoinToken != recA.JoinToken {
		t.Errorf("node-a after it re-joined: %+v; want its bound, draining and join token kept", j.Node)
	}
	if err := c.s.CheckNode(ctx, "node-a", oldFP); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("node-a's certificate from before it re-joined: %v; want permission denied", err)
	}
	if err := c.s.CheckNode(ctx, "node-a", j.Node.CertFingerprint); err != nil {
		t.Errorf("node-a's new certificate: %v", err)
	}
	// The same proof again (replayed) no longer holds: its certificate is not node-a's now.
	if _, err := c.s.JoinNode(ctx, re.req); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a join proof replayed: %v; want permission denied", err)
	}
	// A proof made too long ago does not hold.
	late := c.request(a, "node-a", "", true, false)
	c.clk.Add(cluster.JoinProofSkew + time.Minute)
	if _, err := c.s.JoinNode(ctx, late.req); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a join proof past the skew: %v; want permission denied", err)
	}

	// A token for many nodes names the IDs they may join as, and cannot replace.
	many := c.token(cluster.JoinTokenOptions{NodePrefix: "k8s-", Uses: 10})
	k1 := &host{}
	if _, err := c.join(k1, c.request(k1, "k8s-1", many, false, false)); err != nil {
		t.Fatalf("k8s-1 joins with the prefix token: %v", err)
	}
	k2 := &host{}
	if _, err := c.join(k2, c.request(k2, "k8s-1", many, false, false)); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("another host joins as k8s-1 with the prefix token: %v; want already exists", err)
	}
	if _, err := c.join(k2, c.request(k2, "k8s-1", many, false, true)); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("another host replaces k8s-1 with the prefix token: %v; want permission denied", err)
	}
	if _, err := c.join(k2, c.request(k2, "node-q", many, false, false)); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a join with the prefix token outside its prefix: %v; want permission denied", err)
	}
	if _, err := c.join(k2, c.request(k2, "k8s-2", many, false, false)); err != nil {
		t.Errorf("k8s-2 joins with the prefix token: %v", err)
	}
	if _, err := c.join(k1, c.request(k1, "k8s-1", "", true, false)); err != nil {
		t.Errorf("k8s-1 re-joins with the proof of its key: %v", err)
	}

	// Positive control: the operator approves a new host for node-a (its old one is lost): a token
	// made to replace node-a takes its place, once; the bound set for the old host goes with it.
	fpBefore := j.Node.CertFingerprint
	approve := c.token(cluster.JoinTokenOptions{NodeIDs: []string{"node-a"}, Replace: true})
	n := &host{}
	if _, err := c.join(n, c.request(n, "node-a", approve, false, false)); !errors.Is(err, errdefs.ErrAlreadyExists) || !strings.Contains(err.Error(), "--replace") {
		t.Errorf("a join with a replace token that does not ask to replace: %v; want already exists, saying how", err)
	}
	jr, err := c.join(n, c.request(n, "node-a", approve, false, true))
	if err != nil {
		t.Fatalf("an approved replace: %v", err)
	}
	if jr.Node.Bound != nil || jr.Node.Draining {
		t.Errorf("node-a replaced: %+v; want a fresh record", jr.Node)
	}
	if err := c.s.CheckNode(ctx, "node-a", fpBefore); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("the replaced host's certificate: %v; want permission denied", err)
	}
	if _, err := c.join(b, c.request(b, "node-a", approve, false, true)); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("the replace token again: %v; want permission denied (used up)", err)
	}
	// The old host's key proves nothing now.
	if _, err := c.join(a, c.request(a, "node-a", "", true, false)); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("the replaced host re-joins with its key: %v; want permission denied", err)
	}

	// A bad request uses no token up.
	fresh := c.token(cluster.JoinTokenOptions{})
	bad := c.request(&host{}, "node-d", fresh, false, false)
	bad.req.Hosts = []string{"*.example.com"}
	if _, err := c.s.JoinNode(ctx, bad.req); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a join with a bad host: %v; want invalid argument", err)
	}
	d := &host{}
	if _, err := c.join(d, c.request(d, "node-d", fresh, false, false)); err != nil {
		t.Errorf("a fresh node joins with its own token after a bad request with it: %v", err)
	}
}

// tlsCert is h's key and certificate, to serve with.
func (h *host) tlsCert(t *testing.T) tls.Certificate {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(h.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(h.certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// linklessNode is a fake node served over the node API (no daemon channels).
type linklessNode struct{ *fakeNode }

func (linklessNode) LinkMux(context.Context, string) (*link.Mux, error) {
	return nil, fmt.Errorf("no daemon channels here: %w", errdefs.ErrFailedPrecondition)
}

// TestDialPinsTheRecordedCertificate: the control plane's connections to a node take only the
// certificate recorded for it, not any certificate the cluster's CA issued for its ID: one of node-a's
// that is not recorded (as from before it joined again), at the address node-a reports, gets no call
// (positive control: the recorded one does, before and after node-a re-joined).
func TestDialPinsTheRecordedCertificate(t *testing.T) {
	ctx := context.Background()
	var cpCert tls.Certificate
	c := newJoinCluster(t, func(c *joinCluster, id, addr string, pinned func(string) error) (Node, error) {
		return nodeapi.NewClient(nodeapi.ClientConfig{NodeID: id, Addr: addr, Cert: cpCert, Roots: c.ca.Pool(), Pinned: pinned,
			Logger: slog.New(slog.DiscardHandler)})
	})
	var err error
	if cpCert, err = c.ca.IssueTLS(cluster.Identity{Role: cluster.RoleControlPlane, ID: "cp-1"}, nil); err != nil {
		t.Fatal(err)
	}
	c.hosts = []string{"127.0.0.1"}
	serve := func(cert tls.Certificate) string {
		h, err := nodeapi.NewHandler(linklessNode{newFakeNode(t)}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(h)
		srv.TLS = cluster.ServerTLS(cert, c.ca.Pool(), cluster.RoleControlPlane)
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().String()
	}
	a := &host{}
	j, err := c.join(a, c.request(a, "node-a", c.token(cluster.JoinTokenOptions{}), false, false))
	if err != nil {
		t.Fatal(err)
	}
	capacity := nodecontract.Capacity{CPUMillicores: 4000, MemoryMB: 2048, MaxSandboxes: 3}
	// reported has node-a report addr (with the certificate it was given) and returns the control
	// plane's client of it, once it looked again.
	reported := func(addr string) Node {
		t.Helper()
		if err := c.s.NodeHeartbeat(ctx, "node-a", j.Node.CertFingerprint, nodeapi.Heartbeat{Addr: addr, Boot: "b1", Capacity: capacity}); err != nil {
			t.Fatal(err)
		}
		c.clk.Add(nodeapi.HeartbeatInterval)
		n, err := c.s.node(ctx, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	good := serve(a.tlsCert(t))
	if _, err := reported(good).Sandboxes(ctx); err != nil {
		t.Fatalf("a call to node-a, which presents its recorded certificate: %v", err)
	}

	// Another certificate of node-a's, from the cluster's CA, that is not recorded.
	stale := &host{}
	key, csr, err := cluster.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if stale.certPEM, err = c.ca.IssueCSR(cluster.Identity{Role: cluster.RoleNode, ID: "node-a"}, csr, c.hosts); err != nil {
		t.Fatal(err)
	}
	stale.key = key
	impostor := reported(serve(stale.tlsCert(t)))
	if _, err := impostor.Sandboxes(ctx); err == nil || !strings.Contains(err.Error(), "not the one it was last given") {
		t.Errorf("a call to an address that presents a certificate of node-a's not recorded: %v; want refused", err)
	}
	if err := impostor.CreateSandbox(ctx, nodecontract.CreateRequest{ID: "sb_1", TenantID: "tn_1"}); err == nil || !strings.Contains(err.Error(), "not the one it was last given") {
		t.Errorf("a create sent to a certificate of node-a's not recorded: %v; want refused", err)
	}
	if _, err := impostor.Link(ctx, "sb_1"); err == nil || !strings.Contains(err.Error(), "not the one it was last given") {
		t.Errorf("a daemon channel to a certificate of node-a's not recorded: %v; want refused", err)
	}

	// node-a re-joins (the proof of its key): its new certificate is taken, the one before is not.
	before := a.tlsCert(t)
	if j, err = c.join(a, c.request(a, "node-a", "", true, false)); err != nil {
		t.Fatal(err)
	}
	if _, err := reported(serve(a.tlsCert(t))).Sandboxes(ctx); err != nil {
		t.Errorf("a call to node-a after it re-joined, with its new certificate: %v", err)
	}
	if _, err := reported(serve(before)).Sandboxes(ctx); err == nil || !strings.Contains(err.Error(), "not the one it was last given") {
		t.Errorf("a call to node-a's certificate from before it re-joined: %v; want refused", err)
	}
}
