package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// JoinProof is a node's proof, in a join, that it holds the key of a certificate the cluster issued it:
// a signature by that key over the join request (the node's ID, its certificate signing request and
// hosts) and the time it was made. The control plane takes it only for the certificate it recorded for
// that node ID, within JoinProofSkew of its clock: the same host, set up again, re-joins with it; a
// holder of a join token, or of a certificate the node was given before it last joined, cannot.
type JoinProof struct {
	// CertPEM is the certificate (PEM) whose key signed; it may have expired.
	CertPEM []byte
	// SignedAt is when it was signed, in Unix seconds.
	SignedAt int64
	// Signature is the key's ECDSA signature (ASN.1) over the SHA-256 of joinProofMessage.
	Signature []byte
}

// JoinProofSkew bounds how far a join proof's time may be from the control plane's clock.
const JoinProofSkew = 5 * time.Minute

// joinProofMessage is what a join proof signs: the request it is part of, and when.
func joinProofMessage(nodeID string, signedAt int64, csrPEM []byte, hosts []string) []byte {
	csrSum := sha256.Sum256(csrPEM)
	var b strings.Builder
	b.WriteString("airlock node join proof v1\x00")
	b.WriteString(nodeID)
	b.WriteString("\x00")
	b.WriteString(strconv.FormatInt(signedAt, 10))
	b.WriteString("\x00")
	b.Write(csrSum[:])
	for _, h := range hosts {
		b.WriteString("\x00")
		b.WriteString(h)
	}
	return []byte(b.String())
}

// SignJoinProof makes the proof, for a join of node nodeID with the certificate signing request csrPEM
// and hosts, that the node holds key, the key of certPEM (its certificate from an earlier join).
func SignJoinProof(key crypto.Signer, certPEM []byte, nodeID string, csrPEM []byte, hosts []string, now time.Time) (JoinProof, error) {
	if _, ok := key.Public().(*ecdsa.PublicKey); !ok {
		return JoinProof{}, fmt.Errorf("join proof: the node's key is a %T; want ECDSA", key.Public())
	}
	at := now.Unix()
	sum := sha256.Sum256(joinProofMessage(nodeID, at, csrPEM, hosts))
	sig, err := key.Sign(rand.Reader, sum[:], crypto.SHA256)
	if err != nil {
		return JoinProof{}, fmt.Errorf("join proof: %w", err)
	}
	return JoinProof{CertPEM: append([]byte(nil), certPEM...), SignedAt: at, Signature: sig}, nil
}

// VerifyJoinProof checks a join proof for a join of node nodeID with csrPEM and hosts at now: its
// certificate names the node, its key signed this request, within JoinProofSkew of now. It returns the
// certificate's fingerprint, which the caller compares with the one it recorded for the node: a
// certificate of the cluster's that is not that one proves nothing. Every failure wraps
// ErrPermissionDenied.
func VerifyJoinProof(p JoinProof, nodeID string, csrPEM []byte, hosts []string, now time.Time) (string, error) {
	refuse := func(format string, args ...any) (string, error) {
		return "", fmt.Errorf("join proof: "+format+": %w", append(args, errdefs.ErrPermissionDenied)...)
	}
	block, _ := pem.Decode(p.CertPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return refuse("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return refuse("its certificate: %v", err)
	}
	if id, err := IdentityOf(cert); err != nil || id != (Identity{Role: RoleNode, ID: nodeID}) {
		return refuse("its certificate does not name node %s", nodeID)
	}
	signed := time.Unix(p.SignedAt, 0)
	if d := now.Sub(signed); d > JoinProofSkew || d < -JoinProofSkew {
		return refuse("signed at %s, %v from this server's clock (at most %v)", signed.UTC().Format(time.RFC3339), d.Round(time.Second), JoinProofSkew)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return refuse("its certificate's key is a %T; want ECDSA", cert.PublicKey)
	}
	sum := sha256.Sum256(joinProofMessage(nodeID, p.SignedAt, csrPEM, hosts))
	if !ecdsa.VerifyASN1(pub, sum[:], p.Signature) {
		return refuse("the signature is not by its certificate's key over this request")
	}
	return CertFingerprint(block.Bytes), nil
}
