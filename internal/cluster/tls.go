package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// NewKey makes a private key for a node or a replica, and a certificate signing request for it (PEM).
func NewKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	csr, err := NewCSR(key)
	if err != nil {
		return nil, nil, err
	}
	return key, csr, nil
}

// NewCSR makes a certificate signing request (PEM) for key: a node's that keeps its key.
func NewCSR(key crypto.Signer) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "airlock"}}, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// ServerTLS returns the configuration of a listener that takes only clients with a certificate roots
// verifies and whose identity has one of roles.
func ServerTLS(cert tls.Certificate, roots *x509.CertPool, roles ...string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    roots,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("no client certificate: %w", errdefs.ErrPermissionDenied)
			}
			id, err := IdentityOf(cs.PeerCertificates[0])
			if err != nil {
				return err
			}
			if !slices.Contains(roles, id.Role) {
				return fmt.Errorf("%s may not connect here: %w", id, errdefs.ErrPermissionDenied)
			}
			return nil
		},
	}
}

// ClientTLS returns the configuration of a connection to a peer that must present a certificate roots
// verifies naming want (host names are not checked: the identity is). A want with an empty ID accepts
// any peer of want's role: a node calls whichever control-plane replica a load balancer picks.
func ClientTLS(cert tls.Certificate, roots *x509.CertPool, want Identity) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		// The chain and the identity are checked below instead of the host name.
		InsecureSkipVerify: true, //nolint:gosec // VerifyConnection verifies the chain and the identity
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyPeer(cs, roots, want)
		},
	}
}

func verifyPeer(cs tls.ConnectionState, roots *x509.CertPool, want Identity) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%s presented no certificate: %w", want, errdefs.ErrPermissionDenied)
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	leaf := cs.PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("%s: certificate not from this cluster: %v: %w", want, err, errdefs.ErrPermissionDenied)
	}
	got, err := IdentityOf(leaf)
	if err != nil {
		return err
	}
	if got != want && (want.ID != "" || got.Role != want.Role) {
		return fmt.Errorf("dialed %s, but the peer is %s: %w", want, got, errdefs.ErrPermissionDenied)
	}
	return nil
}

// PeerIdentity reports the identity of the verified peer of a connection a ServerTLS listener
// accepted.
func PeerIdentity(cs *tls.ConnectionState) (Identity, error) {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return Identity{}, errors.New("no verified client certificate")
	}
	return IdentityOf(cs.PeerCertificates[0])
}

// IssueTLS makes a key and a certificate for id, valid for hosts, and returns them ready to serve or
// dial with: how a control-plane replica, which holds the CA, gets its own certificate at start.
func (ca *CA) IssueTLS(id Identity, hosts []string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	certPEM, err := ca.Issue(id, key.Public(), hosts)
	if err != nil {
		return tls.Certificate{}, err
	}
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return tls.Certificate{}, errors.New("issue certificate: no PEM block")
	}
	der := b.Bytes
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// SelfCert is the certificate of a process that holds the CA (a control-plane replica), issued anew
// when a third of its lifetime is left, so that a replica that runs for months keeps a valid one.
type SelfCert struct {
	ca    *CA
	id    Identity
	hosts []string

	mu   sync.Mutex
	cert tls.Certificate // guarded by mu
}

// NewSelfCert issues id's first certificate.
func (ca *CA) NewSelfCert(id Identity, hosts []string) (*SelfCert, error) {
	c, err := ca.IssueTLS(id, hosts)
	if err != nil {
		return nil, err
	}
	return &SelfCert{ca: ca, id: id, hosts: hosts, cert: c}, nil
}

// Current returns the certificate, renewed first if a third of its lifetime or less is left (if the
// renewal fails, the old one while it lasts).
func (s *SelfCert) Current() (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if RenewDue(s.cert.Leaf.NotAfter, time.Now()) {
		c, err := s.ca.IssueTLS(s.id, s.hosts)
		if err != nil && time.Now().After(s.cert.Leaf.NotAfter) {
			return nil, err
		}
		if err == nil {
			s.cert = c
		}
	}
	c := s.cert
	return &c, nil
}

// ServerTLS is ServerTLS with the renewing certificate.
func (s *SelfCert) ServerTLS(roots *x509.CertPool, roles ...string) *tls.Config {
	cert, _ := s.Current()
	cfg := ServerTLS(*cert, roots, roles...)
	cfg.Certificates = nil
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.Current() }
	return cfg
}

// ClientTLS is ClientTLS with the renewing certificate.
func (s *SelfCert) ClientTLS(roots *x509.CertPool, want Identity) *tls.Config {
	cert, _ := s.Current()
	cfg := ClientTLS(*cert, roots, want)
	cfg.Certificates = nil
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return s.Current() }
	return cfg
}

// Identity reports whom the certificate names.
func (s *SelfCert) Identity() Identity { return s.id }

// HeldCert is a certificate that can be replaced while connections use it: a node's, renewed through
// the cluster port (its key stays the same).
type HeldCert struct {
	mu   sync.Mutex
	cert tls.Certificate // guarded by mu
}

// NewHeldCert holds cert.
func NewHeldCert(cert tls.Certificate) *HeldCert { return &HeldCert{cert: cert} }

// Current returns the certificate held now.
func (h *HeldCert) Current() (*tls.Certificate, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.cert
	return &c, nil
}

// Set replaces the certificate: new handshakes present it.
func (h *HeldCert) Set(cert tls.Certificate) {
	h.mu.Lock()
	h.cert = cert
	h.mu.Unlock()
}

// ServerTLS is ServerTLS with the held certificate.
func (h *HeldCert) ServerTLS(roots *x509.CertPool, roles ...string) *tls.Config {
	cert, _ := h.Current()
	cfg := ServerTLS(*cert, roots, roles...)
	cfg.Certificates = nil
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return h.Current() }
	return cfg
}

// ClientTLS is ClientTLS with the held certificate.
func (h *HeldCert) ClientTLS(roots *x509.CertPool, want Identity) *tls.Config {
	cert, _ := h.Current()
	cfg := ClientTLS(*cert, roots, want)
	cfg.Certificates = nil
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return h.Current() }
	return cfg
}

// RenewDue reports whether a certificate valid until notAfter should be renewed at now: when a third of
// CertLifetime or less is left.
func RenewDue(notAfter, now time.Time) bool { return notAfter.Sub(now) < CertLifetime/3 }
