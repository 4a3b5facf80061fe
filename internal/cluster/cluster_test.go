package cluster_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/keys/master"
	"github.com/airlockrun/airlock/internal/store/sqlite"
	"github.com/airlockrun/airlock/internal/store/sqlite/sqlitetest"
)

func newStore(t *testing.T) *sqlite.Store { return sqlitetest.Open(t) }

func masterKey(t *testing.T, b byte) *master.Key {
	t.Helper()
	k, err := master.New(bytes.Repeat([]byte{b}, master.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// issue makes a key and a certificate from ca for id, as a tls.Certificate.
func issue(t *testing.T, ca *cluster.CA, id cluster.Identity) tls.Certificate {
	t.Helper()
	key, csr, err := cluster.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.IssueCSR(id, csr, []string{"127.0.0.1", "node-a.internal"})
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestCAKeptInStore(t *testing.T) {
	ctx := t.Context()
	st := newStore(t)
	ca, err := cluster.LoadCA(ctx, st, masterKey(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	again, err := cluster.LoadCA(ctx, st, masterKey(t, 1))
	if err != nil || !bytes.Equal(again.CertPEM(), ca.CertPEM()) {
		t.Fatalf("LoadCA again: %v; want the same CA", err)
	}
	if _, err := cluster.LoadCA(ctx, st, masterKey(t, 2)); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "master key") {
		t.Errorf("LoadCA with another master key: %v; want ErrFailedPrecondition naming the master key", err)
	}
	d, err := st.GetDoc(ctx, "cluster/ca")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(d.Value, []byte("PRIVATE KEY")) {
		t.Error("the CA's key is in the Store in the clear")
	}
	if !strings.HasPrefix(ca.Fingerprint(), "sha256:") || len(ca.Fingerprint()) != 7+64 {
		t.Errorf("fingerprint %q", ca.Fingerprint())
	}

	// Someone who can write the Store but lacks the master key swaps in a CA certificate of theirs:
	// the server refuses it rather than trust it.
	other, err := cluster.LoadCA(ctx, newStore(t), masterKey(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(d.Value, &doc); err != nil {
		t.Fatal(err)
	}
	doc["cert_pem"] = other.CertPEM()
	d.Value, _ = json.Marshal(doc)
	if _, err := st.PutDoc(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.LoadCA(ctx, st, masterKey(t, 1)); err == nil {
		t.Error("LoadCA took a CA certificate swapped in the Store")
	}
}

func TestIssueChecksInput(t *testing.T) {
	ca, err := cluster.LoadCA(t.Context(), newStore(t), masterKey(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	_, csr, err := cluster.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id    cluster.Identity
		csr   []byte
		hosts []string
	}{
		{cluster.Identity{Role: "admin", ID: "a"}, csr, nil},
		{cluster.Identity{Role: cluster.RoleNode, ID: "Bad_ID"}, csr, nil},
		{cluster.Identity{Role: cluster.RoleNode, ID: ""}, csr, nil},
		{cluster.Identity{Role: cluster.RoleNode, ID: "a"}, []byte("not pem"), nil},
		{cluster.Identity{Role: cluster.RoleNode, ID: "a"}, tamper(csr), nil},
		{cluster.Identity{Role: cluster.RoleNode, ID: "a"}, csr, []string{"bad host/x"}},
		{cluster.Identity{Role: cluster.RoleNode, ID: "a"}, csr, []string{"*.corp"}},
		{cluster.Identity{Role: cluster.RoleNode, ID: "a"}, csr, []string{"a..b"}},
	} {
		if _, err := ca.IssueCSR(tc.id, tc.csr, tc.hosts); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("IssueCSR(%+v, %d hosts): %v; want ErrInvalidArgument", tc.id, len(tc.hosts), err)
		}
	}
}

// tamper changes a byte of the signature of a PEM certificate request.
func tamper(csrPEM []byte) []byte {
	b, _ := pem.Decode(csrPEM)
	der := append([]byte(nil), b.Bytes...)
	der[len(der)-2] ^= 0xff
	return pem.EncodeToMemory(&pem.Block{Type: b.Type, Bytes: der})
}

// handshake serves one TLS connection with srv and dials it with cli; it reports the client's error.
func handshake(t *testing.T, srv, cli *tls.Config) error {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if tc, ok := c.(*tls.Conn); ok && tc.Handshake() == nil {
			c.Write([]byte("ok"))
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	d := tls.Dialer{Config: cli}
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	defer c.Close()
	// With TLS 1.3 the server's verdict on the client's certificate arrives after the handshake.
	b := make([]byte, 2)
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	return nil
}

func TestMutualTLS(t *testing.T) {
	ctx := t.Context()
	ca, err := cluster.LoadCA(ctx, newStore(t), masterKey(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	other, err := cluster.LoadCA(ctx, newStore(t), masterKey(t, 1)) // another cluster
	if err != nil {
		t.Fatal(err)
	}
	nodeA := cluster.Identity{Role: cluster.RoleNode, ID: "node-a"}
	cp := cluster.Identity{Role: cluster.RoleControlPlane, ID: "cp-1"}
	nodeCert, cpCert := issue(t, ca, nodeA), issue(t, ca, cp)
	nodeServer := cluster.ServerTLS(nodeCert, ca.Pool(), cluster.RoleControlPlane)

	if err := handshake(t, nodeServer, cluster.ClientTLS(cpCert, ca.Pool(), nodeA)); err != nil {
		t.Fatalf("control plane to node: %v", err)
	}
	// Another node's certificate does not get in: nodes do not talk to nodes.
	otherNode := issue(t, ca, cluster.Identity{Role: cluster.RoleNode, ID: "node-b"})
	if err := handshake(t, nodeServer, cluster.ClientTLS(otherNode, ca.Pool(), nodeA)); err == nil {
		t.Error("a node's certificate was taken as a control plane's")
	}
	// A control plane that meant node-b does not take node-a.
	if err := handshake(t, nodeServer, cluster.ClientTLS(cpCert, ca.Pool(), cluster.Identity{Role: cluster.RoleNode, ID: "node-b"})); err == nil || !strings.Contains(err.Error(), "node-a") {
		t.Errorf("dialing node-b reached node-a: %v", err)
	}
	// Certificates of another cluster are refused both ways.
	foreignCP := issue(t, other, cp)
	if err := handshake(t, nodeServer, cluster.ClientTLS(foreignCP, ca.Pool(), nodeA)); err == nil {
		t.Error("another cluster's control plane got in")
	}
	foreignNode := cluster.ServerTLS(issue(t, other, nodeA), other.Pool(), cluster.RoleControlPlane)
	if err := handshake(t, foreignNode, cluster.ClientTLS(cpCert, ca.Pool(), nodeA)); err == nil {
		t.Error("a control plane took another cluster's node")
	}
	// A node calls whichever control plane answers, but only a control plane.
	cpServer := cluster.ServerTLS(cpCert, ca.Pool(), cluster.RoleNode)
	anyCP := cluster.Identity{Role: cluster.RoleControlPlane}
	if err := handshake(t, cpServer, cluster.ClientTLS(nodeCert, ca.Pool(), anyCP)); err != nil {
		t.Errorf("node to any control plane: %v", err)
	}
	if err := handshake(t, cluster.ServerTLS(otherNode, ca.Pool(), cluster.RoleNode), cluster.ClientTLS(nodeCert, ca.Pool(), anyCP)); err == nil {
		t.Error("a node that asked for any control plane took another node")
	}
	// No client certificate at all.
	if err := handshake(t, nodeServer, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}); err == nil {
		t.Error("a client without a certificate got in")
	}
}

func TestJoinTokens(t *testing.T) {
	ctx := t.Context()
	st := newStore(t)
	tok, rec, err := cluster.CreateJoinToken(ctx, st, cluster.JoinTokenOptions{TTL: time.Hour, Description: "rack 4"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, "alj_") || strings.Contains(tok, " ") {
		t.Fatalf("token %q", tok)
	}
	if got, err := cluster.CheckJoinToken(ctx, st, tok); err != nil || got.ID != rec.ID {
		t.Fatalf("CheckJoinToken: %+v, %v", got, err)
	}
	// Checking it does not use it up (UseJoinToken does: TestJoinTokenUses).
	if _, err := cluster.CheckJoinToken(ctx, st, tok); err != nil {
		t.Fatalf("second check: %v", err)
	}
	for _, bad := range []string{"", "alj_", "alj_x.y", tok + "x", strings.Replace(tok, ".", ".a", 1), "alj_../../etc.x", tok[:len(tok)-1]} {
		if _, err := cluster.CheckJoinToken(ctx, st, bad); !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("CheckJoinToken(%q): %v; want ErrPermissionDenied", bad, err)
		}
	}
	d, err := st.GetDoc(ctx, "cluster/join/"+rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if secret := tok[strings.Index(tok, ".")+1:]; bytes.Contains(d.Value, []byte(secret)) {
		t.Error("the Store holds the token's secret")
	}
	list, err := cluster.ListJoinTokens(ctx, st)
	if err != nil || len(list) != 1 || list[0].Description != "rack 4" {
		t.Fatalf("ListJoinTokens: %+v, %v", list, err)
	}
	if err := cluster.DeleteJoinToken(ctx, st, rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.CheckJoinToken(ctx, st, tok); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a deleted token: %v; want ErrPermissionDenied", err)
	}
	if err := cluster.DeleteJoinToken(ctx, st, rec.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("deleting it again: %v; want ErrNotFound", err)
	}

	// An expired token is refused.
	short, _, err := cluster.CreateJoinToken(ctx, st, cluster.JoinTokenOptions{TTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := cluster.CheckJoinToken(ctx, st, short); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("an expired token: %v; want ErrPermissionDenied", err)
	}
	for _, ttl := range []time.Duration{0, -time.Second, cluster.MaxJoinTokenTTL + time.Second} {
		if _, _, err := cluster.CreateJoinToken(ctx, st, cluster.JoinTokenOptions{TTL: ttl}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("CreateJoinToken(ttl %v): %v; want ErrInvalidArgument", ttl, err)
		}
	}
}
