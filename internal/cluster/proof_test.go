package cluster_test

import (
	"crypto/ecdsa"
	"encoding/pem"
	"errors"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// TestJoinProof: a join proof holds only for the request it was made for, by the key of the certificate
// it carries, naming the node, within JoinProofSkew; the fingerprint it reports is its certificate's.
func TestJoinProof(t *testing.T) {
	ctx := t.Context()
	ca, err := cluster.LoadCA(ctx, newStore(t), masterKey(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	nodeA := cluster.Identity{Role: cluster.RoleNode, ID: "node-a"}
	cert := issue(t, ca, nodeA)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})
	key := cert.PrivateKey.(*ecdsa.PrivateKey)
	other := issue(t, ca, cluster.Identity{Role: cluster.RoleNode, ID: "node-b"})
	otherPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: other.Certificate[0]})
	cp := issue(t, ca, cluster.Identity{Role: cluster.RoleControlPlane, ID: "cp-1"})
	cpPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cp.Certificate[0]})
	_, csr, err := cluster.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	_, csr2, err := cluster.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"10.0.0.5"}
	now := time.Now()
	sign := func(k *ecdsa.PrivateKey, c []byte, id string, at time.Time) cluster.JoinProof {
		t.Helper()
		p, err := cluster.SignJoinProof(k, c, id, csr, hosts, at)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := sign(key, certPEM, "node-a", now)
	fp, err := cluster.VerifyJoinProof(good, "node-a", csr, hosts, now)
	if err != nil || fp != cluster.CertFingerprint(cert.Certificate[0]) {
		t.Fatalf("VerifyJoinProof of a good proof: %q, %v; want the certificate's fingerprint", fp, err)
	}
	// Signed a little off this clock (within the skew) holds too.
	if _, err := cluster.VerifyJoinProof(sign(key, certPEM, "node-a", now.Add(-4*time.Minute)), "node-a", csr, hosts, now); err != nil {
		t.Errorf("a proof 4 minutes old: %v", err)
	}
	bent := good
	bent.Signature = append([]byte(nil), good.Signature...)
	bent.Signature[len(bent.Signature)-1] ^= 1
	for name, tc := range map[string]struct {
		p     cluster.JoinProof
		id    string
		csr   []byte
		hosts []string
	}{
		"another node's ID": {good, "node-b", csr, hosts},
		"another CSR (the key it asks a certificate for)": {good, "node-a", csr2, hosts},
		"other hosts":                        {good, "node-a", csr, []string{"10.0.0.6"}},
		"a signature changed":                {bent, "node-a", csr, hosts},
		"signed by another key":              {sign(other.PrivateKey.(*ecdsa.PrivateKey), certPEM, "node-a", now), "node-a", csr, hosts},
		"another node's certificate and key": {sign(other.PrivateKey.(*ecdsa.PrivateKey), otherPEM, "node-a", now), "node-a", csr, hosts},
		"a control plane's certificate":      {sign(cp.PrivateKey.(*ecdsa.PrivateKey), cpPEM, "node-a", now), "node-a", csr, hosts},
		"too old":                            {sign(key, certPEM, "node-a", now.Add(-6*time.Minute)), "node-a", csr, hosts},
		"from the future":                    {sign(key, certPEM, "node-a", now.Add(6*time.Minute)), "node-a", csr, hosts},
		"no certificate":                     {cluster.JoinProof{SignedAt: good.SignedAt, Signature: good.Signature}, "node-a", csr, hosts},
	} {
		if fp, err := cluster.VerifyJoinProof(tc.p, tc.id, tc.csr, tc.hosts, now); !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("%s: %q, %v; want ErrPermissionDenied", name, fp, err)
		}
	}
}
