package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodeapi"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// runCLI runs the airlock CLI in-process and returns its exit code, stdout and stderr.
func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := cli.Run(context.Background(), args, cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}

// TestNodeJoin: the operator makes a join token; a node joins with it through the CLI, which keeps its
// key on the node and saves a certificate from the cluster CA naming the node; the token can be
// revoked; other tenants do not see the node routes; a bad token learns nothing.
func TestNodeJoin(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{Cluster: true})
	ctx := ctxT(t, 2*time.Minute)
	op := []string{"--url", e.URL, "--api-key", e.APIKey}

	code, tok, errOut := runCLI(append(op, "node", "token", "create", "--ttl", "1h", "--description", "rack 4")...)
	tok = strings.TrimSpace(tok)
	if code != 0 || !strings.HasPrefix(tok, "alj_") {
		t.Fatalf("node token create: %d %q %s", code, tok, errOut)
	}
	i := strings.Index(errOut, "--ca-fingerprint ")
	if i < 0 {
		t.Fatalf("node token create printed no CA fingerprint: %s", errOut)
	}
	fingerprint := strings.Fields(errOut[i+len("--ca-fingerprint "):])[0]
	nodeDir := t.TempDir()
	join := func(extra ...string) (int, string, string) {
		return runCLI(append([]string{"--url", e.URL, "--data-dir", nodeDir, "node", "join", "--token", tok, "--id", "node-a",
			"--host", "127.0.0.1", "--host", "node-a.internal"}, extra...)...)
	}
	// A pinned fingerprint that is not the cluster's, and a join token sent in the clear off this host,
	// are refused before anything is saved. (The control plane that answered recorded the join, and
	// its token is spent: the operator removes the node.)
	wrongPin := "sha256:" + strings.Repeat("0", 64)
	pinTok, err := e.Client.CreateJoinToken(ctx, airlock.CreateJoinTokenRequest{TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI("--url", e.URL, "--data-dir", nodeDir, "node", "join", "--token", pinTok.Token, "--id", "node-pin",
		"--ca-fingerprint", wrongPin); code == 0 || !strings.Contains(errOut, "not to be trusted") {
		t.Errorf("join with a wrong CA fingerprint: %d %s; want refused", code, errOut)
	}
	if err := e.Client.RemoveNode(ctx, "node-pin"); err != nil {
		t.Errorf("remove the node of the join with a wrong CA fingerprint: %v", err)
	}
	if err := e.Client.DeleteJoinToken(ctx, pinTok.ID); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI("--url", "http://192.0.2.1:7070", "--data-dir", nodeDir, "node", "join", "--token", tok, "--id", "node-x"); code == 0 || !strings.Contains(errOut, "https") {
		t.Errorf("join over plain http off this host: %d %s; want refused", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(nodeDir, cli.NodeClusterDir)); !os.IsNotExist(err) {
		t.Fatalf("a refused join saved files (%v)", err)
	}
	if code, out, errOut := join("--ca-fingerprint", fingerprint); code != 0 || !strings.Contains(out, "node-a joined") {
		t.Fatalf("node join: %d %s %s", code, out, errOut)
	}
	dir := filepath.Join(nodeDir, cli.NodeClusterDir)
	for _, f := range []string{cli.NodeKeyFile, cli.NodeCertFile, cli.NodeCAFile, cli.NodeInfoFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v; want mode 0600", f, st, err)
		}
	}
	certPEM, _ := os.ReadFile(filepath.Join(dir, cli.NodeCertFile))
	keyPEM, _ := os.ReadFile(filepath.Join(dir, cli.NodeKeyFile))
	caPEM, _ := os.ReadFile(filepath.Join(dir, cli.NodeCAFile))
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("the saved key and certificate do not match: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA certificate saved")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "node-a.internal", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the node's certificate does not verify against the cluster CA: %v", err)
	}
	if id, err := cluster.IdentityOf(leaf); err != nil || id != (cluster.Identity{Role: cluster.RoleNode, ID: "node-a"}) {
		t.Errorf("the node's certificate names %+v (%v); want node node-a", id, err)
	}

	// The joined node reaches the control plane's cluster port with its certificate, and is answered
	// for its own sandboxes only: it has none yet.
	cc, err := nodeapi.NewControlClient(nodeapi.ControlClientConfig{URL: e.ClusterURL, Cert: pair, Roots: roots})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sb, err := e.Client.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tenants, err := e.Client.ListTenants(ctx)
	if err != nil || len(tenants.Tenants) != 1 {
		t.Fatalf("ListTenants: %+v %v", tenants, err)
	}
	tenant := tenants.Tenants[0].ID
	if _, err := cc.Secret(ctx, tenant, sb.ID, "anything"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a node got a secret of another node's sandbox: %v; want permission denied", err)
	}
	if _, _, err := cc.WrapKey(ctx, "tn_nope", make([]byte, 32)); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a node had a key wrapped for a tenant that does not exist: %v; want permission denied", err)
	}
	// Its own keys go there and back.
	wrapped, keyID, err := cc.WrapKey(ctx, tenant, bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := cc.UnwrapKey(ctx, tenant, keyID, wrapped); err != nil || !bytes.Equal(got, bytes.Repeat([]byte{7}, 32)) {
		t.Errorf("unwrap of the node's own key: %x %v", got, err)
	}
	// Without a node's certificate, the cluster port does not answer.
	plain := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test wants in without a certificate
	if resp, err := plain.Post(e.ClusterURL+"/cluster/v1/secret", "application/json", strings.NewReader("{}")); err == nil {
		resp.Body.Close()
		t.Error("the cluster port answered a client without a certificate")
	}
	// The ID of the control plane's own node cannot be joined.
	if code, _, errOut := runCLI("--url", e.URL, "--data-dir", t.TempDir(), "node", "join", "--token", tok, "--id", "local"); code == 0 || !strings.Contains(errOut, "own node") {
		t.Errorf("joining as the control plane's own node: %d %s; want refused", code, errOut)
	}

	nodes, err := e.Client.ListNodes(ctx)
	if err != nil || len(nodes.Nodes) != 1 || nodes.Nodes[0].ID != "node-a" || len(nodes.Nodes[0].Hosts) != 2 ||
		nodes.Nodes[0].CertFingerprint != cluster.CertFingerprint(leaf.Raw) {
		t.Fatalf("ListNodes: %+v %v; want node-a with the fingerprint of the saved certificate", nodes, err)
	}
	if code, out, _ := runCLI(append(op, "node", "ls")...); code != 0 || !strings.Contains(out, "node-a") {
		t.Errorf("node ls: %d %s", code, out)
	}

	// The same ID again: from another host, not with node-a's token (with or without --replace); from
	// node-a's host, whose key proves it (the token is spent: it joins one node once).
	if code, _, errOut := runCLI("--url", e.URL, "--data-dir", t.TempDir(), "node", "join", "--token", tok, "--id", "node-a"); code == 0 || !strings.Contains(errOut, "joined already") {
		t.Errorf("another host joins with node-a's ID and token: %d %s; want refused", code, errOut)
	}
	if code, _, errOut := runCLI("--url", e.URL, "--data-dir", t.TempDir(), "node", "join", "--token", tok, "--id", "node-a", "--replace"); code == 0 || !strings.Contains(errOut, "may not take the place") {
		t.Errorf("another host replaces node-a with its token: %d %s; want refused", code, errOut)
	}
	if code, out, errOut := join(); code != 0 || !strings.Contains(out, "joined again with its key") {
		t.Errorf("node-a re-joins from its host: %d %s %s", code, out, errOut)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, cli.NodeKeyFile)); !bytes.Equal(again, keyPEM) {
		t.Error("node-a's key changed when it re-joined; want it kept")
	}
	// Another token's holder cannot take node-a's identity.
	other, err := e.Client.CreateJoinToken(ctx, airlock.CreateJoinTokenRequest{TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI("--url", e.URL, "--data-dir", t.TempDir(), "node", "join", "--token", other.Token, "--id", "node-a", "--replace"); code == 0 || !strings.Contains(errOut, "may not take the place") {
		t.Errorf("replacing node-a with another token: %d %s; want refused", code, errOut)
	}
	if err := e.Client.DeleteJoinToken(ctx, other.ID); err != nil {
		t.Fatal(err)
	}

	// Bad tokens and bad requests.
	anon := airlock.New(e.URL)
	_, csr, err := cluster.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "alj_x.y", tok + "0", strings.Replace(tok, ".", ".x", 1)} {
		_, err := anon.JoinNode(ctx, airlock.JoinRequest{Token: bad, NodeID: "node-b", CSR: string(csr)})
		wantCode(t, "join with a bad token", err, http.StatusForbidden)
	}
	_, err = anon.JoinNode(ctx, airlock.JoinRequest{Token: tok, NodeID: "Node_B", CSR: string(csr)})
	wantCode(t, "join with a bad ID", err, http.StatusBadRequest)
	_, err = anon.JoinNode(ctx, airlock.JoinRequest{Token: tok, NodeID: "node-b", CSR: "junk"})
	wantCode(t, "join with a bad CSR", err, http.StatusBadRequest)
	_, err = anon.JoinNode(ctx, airlock.JoinRequest{Token: tok, NodeID: "node-b", CSR: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte{1, 2, 3}}))})
	wantCode(t, "join with a broken CSR", err, http.StatusBadRequest)
	if l, _ := e.Client.ListNodes(ctx); len(l.Nodes) != 1 {
		t.Errorf("refused joins left %d nodes; want 1", len(l.Nodes))
	}

	// Other tenants do not see the node routes; no API key does not either.
	otherTenant, err := e.Client.CreateTenant(ctx, "not-operator")
	if err != nil {
		t.Fatal(err)
	}
	oc := airlock.New(e.URL, airlock.WithAPIKey(otherTenant.APIKey.Key))
	_, err = oc.ListJoinTokens(ctx)
	wantCode(t, "another tenant lists join tokens", err, http.StatusNotFound)
	_, err = oc.CreateJoinToken(ctx, airlock.CreateJoinTokenRequest{})
	wantCode(t, "another tenant makes a join token", err, http.StatusNotFound)
	_, err = oc.ListNodes(ctx)
	wantCode(t, "another tenant lists nodes", err, http.StatusNotFound)
	_, err = anon.ListNodes(ctx)
	wantCode(t, "no API key lists nodes", err, http.StatusUnauthorized)
	_, err = oc.SetNodeBound(ctx, "node-a", airlock.NodeCapacity{MaxSandboxes: 1})
	wantCode(t, "another tenant bounds a node", err, http.StatusNotFound)
	// Bounds: node-a has not reported (so all three are needed), none negative, of a node that joined.
	for name, tc := range map[string]struct {
		id   string
		b    airlock.NodeCapacity
		code int
	}{
		"partial, before the node reported": {"node-a", airlock.NodeCapacity{MaxSandboxes: 1}, http.StatusBadRequest},
		"negative":                          {"node-a", airlock.NodeCapacity{CPUMillicores: 1000, MemoryMB: -1, MaxSandboxes: 1}, http.StatusBadRequest},
		"of a bad node ID":                  {"Node_A", airlock.NodeCapacity{CPUMillicores: 1000, MemoryMB: 1024, MaxSandboxes: 1}, http.StatusBadRequest},
		"of a node that never joined":       {"node-z", airlock.NodeCapacity{CPUMillicores: 1000, MemoryMB: 1024, MaxSandboxes: 1}, http.StatusNotFound},
	} {
		_, err = e.Client.SetNodeBound(ctx, tc.id, tc.b)
		wantCode(t, "a bound "+name, err, tc.code)
	}
	if n, err := e.Client.SetNodeBound(ctx, "node-a", airlock.NodeCapacity{CPUMillicores: 1000, MemoryMB: 1024, MaxSandboxes: 1}); err != nil || n.Bound == nil || n.Bound.MaxSandboxes != 1 {
		t.Errorf("a full bound: %+v, %v", n, err)
	}
	_, err = e.Client.CreateJoinToken(ctx, airlock.CreateJoinTokenRequest{TTLSeconds: 31 * 24 * 3600})
	wantCode(t, "a join token over 30 days", err, http.StatusBadRequest)

	// Revoked: nobody joins with it any more.
	list, err := e.Client.ListJoinTokens(ctx)
	if err != nil || len(list.JoinTokens) != 1 || list.JoinTokens[0].Description != "rack 4" {
		t.Fatalf("ListJoinTokens: %+v %v", list, err)
	}
	if code, _, errOut := runCLI(append(op, "node", "token", "rm", list.JoinTokens[0].ID)...); code != 0 {
		t.Fatalf("node token rm: %d %s", code, errOut)
	}
	_, err = anon.JoinNode(ctx, airlock.JoinRequest{Token: tok, NodeID: "node-c", CSR: string(csr)})
	wantCode(t, "join with a revoked token", err, http.StatusForbidden)
	if strings.Contains(e.Logs(), strings.SplitN(tok, ".", 2)[1]) {
		t.Error("the join token's secret is in the server's log")
	}
}
