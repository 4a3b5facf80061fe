// Package cluster is the trust between control-plane replicas and nodes that run as processes of their
// own: a certificate authority the control plane keeps in the Store (sealed under the master key), the
// certificates it issues (to nodes that join with a join token, and to each control-plane replica), and
// the mutual-TLS configurations both sides use.
//
// Identities are URI SANs: airlock://node/<id> and airlock://control-plane/<replica>. A node accepts
// only control planes; a control plane checks that a node's certificate names the node it meant to dial.
package cluster

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/keys/master"
	"github.com/airlockrun/airlock/internal/store"
)

// Roles a certificate can give.
const (
	RoleNode         = "node"
	RoleControlPlane = "control-plane"
)

const (
	caDocKey = "cluster/ca"
	// caLifetime is how long the cluster's CA is valid; CertLifetime how long the certificates it
	// issues are.
	caLifetime   = 10 * 365 * 24 * time.Hour
	CertLifetime = 30 * 24 * time.Hour
	// clockSkew backdates certificates so that a peer whose clock is a little behind accepts them.
	clockSkew = 5 * time.Minute
)

// Identity is who a certificate names.
type Identity struct {
	Role string // RoleNode or RoleControlPlane
	ID   string // the node's ID, or the replica's
}

// URI is the identity as a certificate's URI SAN.
func (id Identity) URI() *url.URL {
	return &url.URL{Scheme: "airlock", Host: id.Role, Path: "/" + id.ID}
}

func (id Identity) String() string { return id.URI().String() }

// CheckID reports whether id can name a node or a replica: 1 to 64 of [a-z0-9-], not starting with '-'.
func CheckID(id string) error {
	ok := id != "" && len(id) <= 64 && id[0] != '-'
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
	}
	if !ok {
		return fmt.Errorf("ID %q: want 1 to 64 of a-z, 0-9 and '-', not starting with '-': %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// IdentityOf reads the identity of a certificate the cluster issued.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	for _, u := range cert.URIs {
		if u.Scheme != "airlock" || (u.Host != RoleNode && u.Host != RoleControlPlane) {
			continue
		}
		id := Identity{Role: u.Host, ID: strings.TrimPrefix(u.Path, "/")}
		if CheckID(id.ID) != nil {
			break
		}
		return id, nil
	}
	return Identity{}, fmt.Errorf("certificate %q names no Airlock node or control plane: %w", cert.Subject.CommonName, errdefs.ErrPermissionDenied)
}

// CA is the cluster's certificate authority.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	pem  []byte
}

// caDoc is the CA as kept in the Store: its key sealed under the master key.
type caDoc struct {
	CertPEM   []byte `json:"cert_pem"`
	SealedKey []byte `json:"sealed_key"`
}

// LoadCA returns the cluster's CA from docs, making it on first use (of replicas starting at once on
// an empty database, one makes it and the others load it). A CA whose key does not open under mk (the
// server was given another master key) is ErrFailedPrecondition.
func LoadCA(ctx context.Context, docs store.Docs, mk *master.Key) (*CA, error) {
	for range 3 {
		d, err := docs.GetDoc(ctx, caDocKey)
		if err == nil {
			return openCA(d, mk)
		}
		if !errors.Is(err, errdefs.ErrNotFound) {
			return nil, fmt.Errorf("cluster CA: %w", err)
		}
		value, err := newCADoc(mk)
		if err != nil {
			return nil, fmt.Errorf("cluster CA: %w", err)
		}
		d, err = docs.PutDoc(ctx, store.Doc{Key: caDocKey, Value: value})
		if err == nil {
			return openCA(d, mk)
		}
		if !errors.Is(err, errdefs.ErrAlreadyExists) {
			return nil, fmt.Errorf("cluster CA: save: %w", err)
		}
	}
	return nil, fmt.Errorf("cluster CA: could not be made or read: %w", errdefs.ErrUnavailable)
}

func newCADoc(mk *master.Key) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Airlock cluster CA", Organization: []string{"Airlock"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	defer clear(keyDER)
	sealed, err := mk.Seal(caKeyContext(der), keyDER)
	if err != nil {
		return nil, err
	}
	return json.Marshal(caDoc{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), SealedKey: sealed})
}

// caKeyContext binds the CA's sealed key to its certificate: a certificate swapped in the Store by
// someone without the master key makes the key fail to open.
func caKeyContext(certDER []byte) string {
	sum := sha256.Sum256(certDER)
	return caDocKey + "\x00" + hex.EncodeToString(sum[:])
}

// Fingerprint is the SHA-256 of the CA's certificate, "sha256:<hex>", which a joining node can pin.
func (ca *CA) Fingerprint() string { return CertFingerprint(ca.cert.Raw) }

// CertFingerprint is the SHA-256 of a DER certificate, "sha256:<hex>".
func CertFingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func openCA(d store.Doc, mk *master.Key) (*CA, error) {
	var doc caDoc
	if err := json.Unmarshal(d.Value, &doc); err != nil {
		return nil, fmt.Errorf("cluster CA: %w", err)
	}
	block, _ := pem.Decode(doc.CertPEM)
	if block == nil {
		return nil, errors.New("cluster CA: no certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("cluster CA: %w", err)
	}
	keyDER, err := mk.Open(caKeyContext(block.Bytes), doc.SealedKey)
	if err != nil {
		return nil, fmt.Errorf("cluster CA: its key is not sealed under this server's master key (every server on one database needs the same master key): %w", errdefs.ErrFailedPrecondition)
	}
	defer clear(keyDER)
	k, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return nil, fmt.Errorf("cluster CA: %w", err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("cluster CA: the key cannot sign")
	}
	if pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("cluster CA: the certificate is not the key's")
	}
	return &CA{cert: cert, key: signer, pem: doc.CertPEM}, nil
}

// CertPEM returns the CA's certificate, PEM encoded: what nodes trust.
func (ca *CA) CertPEM() []byte { return append([]byte(nil), ca.pem...) }

// Pool returns a pool holding the CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// dnsName is a DNS name of letters, digits and hyphens in labels of at most 63 bytes.
var dnsName = regexp.MustCompile(`^([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)*[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$`)

// Issue signs a certificate for pub naming id, valid for CertLifetime, for both TLS client and server
// use, with hosts (DNS names or IP addresses) as further SANs, and returns it PEM encoded.
func (ca *CA) Issue(id Identity, pub crypto.PublicKey, hosts []string) ([]byte, error) {
	if id.Role != RoleNode && id.Role != RoleControlPlane {
		return nil, fmt.Errorf("issue certificate: unknown role %q: %w", id.Role, errdefs.ErrInvalidArgument)
	}
	if err := CheckID(id.ID); err != nil {
		return nil, fmt.Errorf("issue certificate: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: id.String(), Organization: []string{"Airlock"}},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(CertLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{id.URI()},
	}
	if err := CheckHosts(hosts); err != nil {
		return nil, fmt.Errorf("issue certificate: %w", err)
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("issue certificate: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// CheckHosts reports whether hosts can be a certificate's further names: at most 16 IP addresses or DNS
// names without wildcards (ErrInvalidArgument otherwise).
func CheckHosts(hosts []string) error {
	if len(hosts) > 16 {
		return fmt.Errorf("%d hosts; at most 16: %w", len(hosts), errdefs.ErrInvalidArgument)
	}
	for _, h := range hosts {
		if net.ParseIP(h) == nil && (len(h) > 253 || !dnsName.MatchString(h)) {
			return fmt.Errorf("host %q: want an IP address or a DNS name (no wildcards): %w", h, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// ParseCSR parses a PEM certificate signing request and checks its signature (proof that the requester
// holds the key); anything wrong with it is ErrInvalidArgument.
func ParseCSR(csrPEM []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("certificate request: not a PEM CERTIFICATE REQUEST: %w", errdefs.ErrInvalidArgument)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certificate request: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("certificate request: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return csr, nil
}

// IssueCSR is Issue for the key of a certificate signing request, which must carry a valid signature
// (proof that the requester holds the key). Nothing else of the request is used.
func (ca *CA) IssueCSR(id Identity, csrPEM []byte, hosts []string) ([]byte, error) {
	csr, err := ParseCSR(csrPEM)
	if err != nil {
		return nil, err
	}
	return ca.Issue(id, csr.PublicKey, hosts)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}
