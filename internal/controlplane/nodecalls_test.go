package controlplane

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/keys/local"
	"github.com/airlockrun/airlock/internal/nodeapi"
	"github.com/airlockrun/airlock/internal/secrets"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// TestNodeCalls: a node gets the secrets its sandboxes' policies bind, has its own keys wrapped and
// unwrapped and records its sandboxes' audit entries, over mutual TLS with the certificate it joined
// with; it gets nothing of another node's sandboxes, unbound secrets, other tenants, stopped sandboxes,
// or the tenant's other wrapped keys, and an older certificate of its own is refused.
func TestNodeCalls(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	keyring, err := local.New(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	storage, err := secrets.NewFileStorage(filepath.Join(dir, "secrets"))
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.New(secrets.Config{Keys: keyring, Storage: storage})
	if err != nil {
		t.Fatal(err)
	}
	ca := testClusterCA(t, st)
	var mu sync.Mutex
	var audited []store.AuditEntry
	n := newFakeNode(t)
	n.id = "node-a" // the sandboxes are placed on node-a
	s, err := New(Config{Store: st, Node: n, ReapInterval: time.Hour, Secrets: sec, KeyProvider: keyring, Cluster: ca,
		Audit: func(e store.AuditEntry) { mu.Lock(); audited = append(audited, e); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	key, err := s.Bootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Authenticate(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	tn := p.TenantID
	other, _, _, err := s.CreateTenant(ctx, "other", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bound", "unbound"} {
		if _, err := sec.Create(ctx, tn, name, []byte("value of "+name)); err != nil {
			t.Fatal(err)
		}
	}
	pol := &policy.Policy{Credentials: []policy.Credential{{Name: "api", Host: "api.test", Secret: "bound", Header: "Authorization"}}}
	sb, err := s.CreateSandbox(ctx, tn, CreateRequest{Network: pol})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := s.CreateSandbox(ctx, tn, CreateRequest{Network: pol})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox(ctx, tn, gone.ID); err != nil {
		t.Fatal(err)
	}

	// Over the wire, as nodes call: the control plane's handler; node-a and node-b join and call.
	cpCert, err := ca.IssueTLS(cluster.Identity{Role: cluster.RoleControlPlane, ID: "cp-1"}, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nodeapi.NewControlHandler(s, nil))
	srv.TLS = cluster.ServerTLS(cpCert, ca.Pool(), cluster.RoleNode)
	srv.StartTLS()
	defer srv.Close()
	tok, _, err := s.CreateJoinToken(ctx, cluster.JoinTokenOptions{TTL: time.Hour, NodeIDs: []string{"node-a", "node-b"}})
	if err != nil {
		t.Fatal(err)
	}
	client := func(cert tls.Certificate) *nodeapi.ControlClient {
		c, err := nodeapi.NewControlClient(nodeapi.ControlClientConfig{URL: srv.URL, Cert: cert, Roots: ca.Pool()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	keys := map[string]*ecdsa.PrivateKey{}
	certs := map[string]tls.Certificate{}
	join := func(id string) *nodeapi.ControlClient {
		k, csr, err := cluster.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		j, err := s.JoinNode(ctx, JoinRequest{Token: tok, NodeID: id, CSR: csr})
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(j.CertPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
		if err != nil {
			t.Fatal(err)
		}
		keys[id], certs[id] = k, cert
		return client(cert)
	}
	mine, theirs := join("node-a"), join("node-b")
	// A certificate of node-a's that is not the one it joined with (as after it joined again).
	stale, err := ca.IssueTLS(cluster.Identity{Role: cluster.RoleNode, ID: "node-a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	old := client(stale)

	if v, err := mine.Secret(ctx, tn, sb.ID, "bound"); err != nil || string(v) != "value of bound" {
		t.Errorf("bound secret = %q, %v", v, err)
	}
	tenantKey, tenantKeyID, err := keyring.WrapKey(ctx, tn, bytes.Repeat([]byte{1}, 32)) // as a snapshot's
	if err != nil {
		t.Fatal(err)
	}
	denied := map[string]func() error{
		"unbound secret":          func() error { _, err := mine.Secret(ctx, tn, sb.ID, "unbound"); return err },
		"another node's":          func() error { _, err := theirs.Secret(ctx, tn, sb.ID, "bound"); return err },
		"an older certificate":    func() error { _, err := old.Secret(ctx, tn, sb.ID, "bound"); return err },
		"another tenant named":    func() error { _, err := mine.Secret(ctx, other.ID, sb.ID, "bound"); return err },
		"stopped sandbox":         func() error { _, err := mine.Secret(ctx, tn, gone.ID, "bound"); return err },
		"unknown sandbox":         func() error { _, err := mine.Secret(ctx, tn, "sb_nope", "bound"); return err },
		"unbound connection":      func() error { _, err := mine.Token(ctx, tn, sb.ID, "github"); return err },
		"wrap for no tenant":      func() error { _, _, err := mine.WrapKey(ctx, "tn_nope", make([]byte, 32)); return err },
		"the tenant's other keys": func() error { _, err := mine.UnwrapKey(ctx, tn, tenantKeyID, tenantKey); return err },
	}
	for name, f := range denied {
		if err := f(); !errors.Is(err, errdefs.ErrPermissionDenied) && !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("%s: %v; want permission denied", name, err)
		}
	}

	// As large as what nodes wrap: an interception CA's ECDSA P-256 key in DER.
	dek := bytes.Repeat([]byte{9}, 138)
	wrapped, keyID, err := mine.WrapKey(ctx, tn, dek)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := mine.UnwrapKey(ctx, tn, keyID, wrapped); err != nil || !bytes.Equal(got, dek) {
		t.Errorf("unwrap = %x, %v", got, err)
	}
	if _, _, err := mine.WrapKey(ctx, tn, make([]byte, maxNodeDataKey+1)); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("wrap of a key past the bound: %v; want invalid argument", err)
	}
	if _, err := theirs.UnwrapKey(ctx, tn, keyID, wrapped); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("another node unwrapped: %v", err)
	}

	// Renewal: node-b gets a new certificate for its key through the cluster port; from then on the
	// one it had is refused and the new one answered.
	held := cluster.NewHeldCert(certs["node-b"])
	renewer, err := nodeapi.NewControlClient(nodeapi.ControlClientConfig{URL: srv.URL, Held: held, Roots: ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	defer renewer.Close()
	if _, err := renewer.Renew(ctx, []byte("junk")); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("renew with a junk request: %v; want invalid argument", err)
	}
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, keys["node-b"])
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := renewer.Renew(ctx, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER}))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(renewed)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := cluster.IdentityOf(leaf); err != nil || id.ID != "node-b" || !keys["node-b"].PublicKey.Equal(leaf.PublicKey) {
		t.Errorf("renewed certificate names %v (%v); want node-b, for its key", id, err)
	}
	// Until the node uses the new certificate, the old one is still its own (the answer may be lost).
	if _, _, err := client(certs["node-b"]).WrapKey(ctx, tn, dek); err != nil {
		t.Errorf("a call with the certificate renewed from, before the new one is used: %v", err)
	}
	held.Set(tls.Certificate{Certificate: [][]byte{block.Bytes}, PrivateKey: keys["node-b"], Leaf: leaf})
	renewer.Reconnect()
	if _, _, err := renewer.WrapKey(ctx, tn, dek); err != nil {
		t.Errorf("a call with the renewed certificate: %v", err)
	}
	if _, _, err := client(certs["node-b"]).WrapKey(ctx, tn, dek); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a call with the certificate before the renewal: %v; want permission denied", err)
	}
	if recs, err := s.ListNodes(ctx); err != nil || len(recs) != 2 || recs[1].CertFingerprint != cluster.CertFingerprint(block.Bytes) {
		t.Errorf("node records after the renewal: %+v %v; want node-b's new fingerprint", recs, err)
	}

	// Audit: the node's entries for its sandbox arrive, also for one that stopped; those of another
	// kind, or from another node, do not, and do not take the good ones down with them.
	mine.Record(store.AuditEntry{TenantID: tn, Kind: store.AuditEgress, Actor: sb.ID, Action: "tls", Target: "api.test:443", Result: "allow"})
	mine.Record(store.AuditEntry{TenantID: tn, Kind: store.AuditAPI, Actor: "key", Action: "DELETE /v1/x", Result: "200"})
	mine.Record(store.AuditEntry{TenantID: tn, Kind: store.AuditEgress, Actor: gone.ID, Action: "tls", Target: "last.test:443", Result: "allow"})
	theirs.Record(store.AuditEntry{TenantID: tn, Kind: store.AuditEgress, Actor: sb.ID, Action: "tls", Target: "evil.test:443", Result: "allow"})
	mine.Close()
	theirs.Close()
	mu.Lock()
	defer mu.Unlock()
	var targets []string
	for _, e := range audited {
		if e.Action == "choose runtime" {
			continue // the control plane's own, for the sandboxes it made
		}
		targets = append(targets, e.Target)
	}
	if strings.Join(targets, ",") != "api.test:443,last.test:443" {
		t.Errorf("audited %q; want node-a's two entries of its sandboxes", targets)
	}
}
