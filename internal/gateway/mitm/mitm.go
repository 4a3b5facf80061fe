// Package mitm holds the per-sandbox certificate authority the gateway uses to intercept a sandbox's
// TLS connections (so that it can check HTTP rules and inject credentials, then re-encrypt to the
// real upstream with full verification).
//
// Each sandbox gets its own CA: an ECDSA P-256 key and a self-signed certificate. Only the certificate
// (CertPEM) goes into the sandbox's trust store; the key never leaves this package in the clear: no
// method returns it, it is never printed or logged, and Marshal hands it only to the caller's wrap
// function (which encrypts it). Leaf certificates are minted on demand per host name, short-lived,
// and kept in a bounded LRU cache.
package mitm

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

const (
	// CALifetime is how long a CA certificate is valid. A sandbox restored from a snapshot keeps the
	// CA of its trust store, so this outlives any sandbox's retention.
	CALifetime = 10 * 365 * 24 * time.Hour
	// LeafLifetime is how long a minted leaf certificate is valid.
	LeafLifetime = 24 * time.Hour
	// leafRenewBefore is how long before a cached leaf expires it is minted again.
	leafRenewBefore = 2 * time.Hour
	// backdate covers clock skew between the gateway and the sandbox (the daemon fixes the sandbox's
	// clock after a restore, but not before the first connection can happen).
	backdate = time.Hour
	// DefaultCacheSize is the number of leaf certificates a CA keeps.
	DefaultCacheSize = 1000
	marshalVersion   = 1
)

var sandboxIDRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// CA is a sandbox's certificate authority. Safe for concurrent use.
type CA struct {
	sandboxID string
	cert      *x509.Certificate
	certPEM   []byte
	key       *ecdsa.PrivateKey // never returned, printed or marshaled in the clear
	now       func() time.Time
	cacheSize int

	mu sync.Mutex
	// lru orders the cached leaves, most recently used first; entries maps host to its element.
	lru     *list.List
	entries map[string]*list.Element
}

// leaf is a cache entry. ready is closed when cert or err is set; until then other callers wait
// for the one minting it.
type leaf struct {
	host  string
	ready chan struct{}
	cert  *tls.Certificate
	err   error
}

// NewCA creates a CA with a fresh key for the sandbox sandboxID ([A-Za-z0-9_.-]{1,128}).
func NewCA(sandboxID string) (*CA, error) {
	if !sandboxIDRE.MatchString(sandboxID) {
		return nil, fmt.Errorf("new CA: bad sandbox ID %q: %w", sandboxID, errdefs.ErrInvalidArgument)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("new CA for sandbox %s: %w", sandboxID, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, fmt.Errorf("new CA for sandbox %s: %w", sandboxID, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"Airlock"}, CommonName: "Airlock sandbox " + sandboxID},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(CALifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true, // it signs leaves only, never another CA
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		// Name constraint: the CA cannot vouch for any IP address, only for DNS names.
		ExcludedIPRanges: []*net.IPNet{
			{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
			{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
		},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("new CA for sandbox %s: %w", sandboxID, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("new CA for sandbox %s: %w", sandboxID, err)
	}
	return newCA(sandboxID, cert, key), nil
}

func newCA(sandboxID string, cert *x509.Certificate, key *ecdsa.PrivateKey) *CA {
	return &CA{
		sandboxID: sandboxID,
		cert:      cert,
		certPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		key:       key,
		now:       time.Now,
		cacheSize: DefaultCacheSize,
		lru:       list.New(),
		entries:   map[string]*list.Element{},
	}
}

// ForSandbox returns the same CA (certificate and key) bound to another ID, for storage under it: the
// sandboxes of a fork trust the CA their parent's trust store holds.
func (c *CA) ForSandbox(id string) *CA {
	return newCA(id, c.cert, c.key)
}

// SandboxID reports the sandbox the CA belongs to.
func (c *CA) SandboxID() string { return c.sandboxID }

// CertPEM returns the CA certificate, PEM-encoded: what goes into the sandbox's trust store.
// The caller may modify the returned slice.
func (c *CA) CertPEM() []byte { return append([]byte(nil), c.certPEM...) }

// Certificate returns the parsed CA certificate (public). The caller must not modify it.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// LogValue prints the sandbox ID and the certificate's expiry; the key is REDACTED.
func (c *CA) LogValue() slog.Value {
	return slog.GroupValue(slog.String("sandbox", c.sandboxID), slog.Time("not_after", c.cert.NotAfter), slog.String("key", "REDACTED"))
}

// Format prints the sandbox ID only, with the key REDACTED, for every verb.
func (c *CA) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "mitm.CA{sandbox: %q, key: REDACTED}", c.sandboxID)
}

// Leaf returns a certificate for host (a DNS name; not an IP address or a wildcard) signed by the CA,
// valid for LeafLifetime, with the CA certificate as its chain. Leaves are cached per host (an LRU of
// DefaultCacheSize) and minted again shortly before they expire; concurrent calls for one host mint
// once. It fails with ErrInvalidArgument for an invalid host.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	host, err := canonicalHost(host)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate: %w", err)
	}
	for {
		c.mu.Lock()
		if el, ok := c.entries[host]; ok {
			l := el.Value.(*leaf)
			c.lru.MoveToFront(el)
			c.mu.Unlock()
			<-l.ready
			if l.err == nil && c.now().Before(l.cert.Leaf.NotAfter.Add(-leafRenewBefore)) {
				return l.cert, nil
			}
			// Failed or about to expire: drop it (unless someone already replaced it) and mint anew.
			c.mu.Lock()
			if cur, ok := c.entries[host]; ok && cur == el {
				c.lru.Remove(el)
				delete(c.entries, host)
			}
			c.mu.Unlock()
			if l.err != nil {
				return nil, l.err
			}
			continue
		}
		l := &leaf{host: host, ready: make(chan struct{})}
		c.entries[host] = c.lru.PushFront(l)
		for c.lru.Len() > c.cacheSize {
			old := c.lru.Back()
			c.lru.Remove(old)
			delete(c.entries, old.Value.(*leaf).host)
		}
		c.mu.Unlock()

		l.cert, l.err = c.mint(host)
		close(l.ready)
		if l.err != nil {
			c.mu.Lock()
			if cur, ok := c.entries[host]; ok && cur.Value == l {
				c.lru.Remove(cur)
				delete(c.entries, host)
			}
			c.mu.Unlock()
			return nil, l.err
		}
		return l.cert, nil
	}
}

// mint makes a leaf certificate for host, with its own key.
func (c *CA) mint(host string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", host, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", host, err)
	}
	now := c.now()
	notAfter := now.Add(LeafLifetime)
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: host},
		DNSNames:              []string{host},
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", host, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", host, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key, Leaf: cert}, nil
}

// ServerConfig returns a fresh TLS server configuration that presents, for each connection, a leaf
// for the name the client sent in SNI. A client that sends no SNI (or an IP address) fails the
// handshake. The caller may set more fields (NextProtos, for one) before use.
func (c *CA) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName == "" {
				return nil, errors.New("mitm: client sent no server name")
			}
			return c.Leaf(hello.ServerName)
		},
	}
}

// Marshal encodes the CA for storage, its key encrypted by wrap. wrap is given the key (PKCS #8 DER),
// which it must not keep, and returns it encrypted, for instance with AES-GCM under a key from the
// node's KeyProvider, bound to the sandbox ID as additional data. Marshal clears the clear-text key
// after wrap returns. Load reverses it.
func (c *CA) Marshal(wrap func(plaintext []byte) ([]byte, error)) ([]byte, error) {
	if wrap == nil {
		return nil, fmt.Errorf("marshal CA: nil wrap function: %w", errdefs.ErrInvalidArgument)
	}
	der, err := x509.MarshalPKCS8PrivateKey(c.key)
	if err != nil {
		return nil, fmt.Errorf("marshal CA of sandbox %s: %w", c.sandboxID, err)
	}
	wrapped, err := wrap(der)
	clear(der)
	if err != nil {
		return nil, fmt.Errorf("marshal CA of sandbox %s: wrap key: %w", c.sandboxID, err)
	}
	if len(wrapped) == 0 {
		return nil, fmt.Errorf("marshal CA of sandbox %s: wrap returned nothing: %w", c.sandboxID, errdefs.ErrInvalidArgument)
	}
	return json.Marshal(marshaled{Version: marshalVersion, SandboxID: c.sandboxID, Cert: c.cert.Raw, WrappedKey: wrapped})
}

type marshaled struct {
	Version    int    `json:"version"`
	SandboxID  string `json:"sandbox_id"`
	Cert       []byte `json:"cert"`        // DER
	WrappedKey []byte `json:"wrapped_key"` // PKCS #8 DER, as encrypted by the wrap function
}

// Load decodes a CA that Marshal encoded for sandboxID, decrypting its key with unwrap. It fails with
// ErrInvalidArgument if data is malformed, belongs to another sandbox, or the key does not match the
// certificate; errors from unwrap are returned wrapped.
func Load(sandboxID string, data []byte, unwrap func(wrapped []byte) ([]byte, error)) (*CA, error) {
	if unwrap == nil {
		return nil, fmt.Errorf("load CA: nil unwrap function: %w", errdefs.ErrInvalidArgument)
	}
	var m marshaled
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("load CA of sandbox %s: %v: %w", sandboxID, err, errdefs.ErrInvalidArgument)
	}
	if m.Version != marshalVersion {
		return nil, fmt.Errorf("load CA of sandbox %s: format version %d: %w", sandboxID, m.Version, errdefs.ErrInvalidArgument)
	}
	if m.SandboxID != sandboxID {
		return nil, fmt.Errorf("load CA of sandbox %s: data is for sandbox %q: %w", sandboxID, m.SandboxID, errdefs.ErrInvalidArgument)
	}
	cert, err := x509.ParseCertificate(m.Cert)
	if err != nil {
		return nil, fmt.Errorf("load CA of sandbox %s: %v: %w", sandboxID, err, errdefs.ErrInvalidArgument)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !cert.IsCA || !ok {
		return nil, fmt.Errorf("load CA of sandbox %s: not an ECDSA CA certificate: %w", sandboxID, errdefs.ErrInvalidArgument)
	}
	der, err := unwrap(m.WrappedKey)
	if err != nil {
		return nil, fmt.Errorf("load CA of sandbox %s: unwrap key: %w", sandboxID, err)
	}
	defer clear(der)
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("load CA of sandbox %s: key: %v: %w", sandboxID, err, errdefs.ErrInvalidArgument)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(pub) {
		return nil, fmt.Errorf("load CA of sandbox %s: key does not match the certificate: %w", sandboxID, errdefs.ErrInvalidArgument)
	}
	return newCA(sandboxID, cert, key), nil
}

// labelRE matches one DNS label: letters, digits, hyphens (not first or last) and underscores.
var labelRE = regexp.MustCompile(`^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$`)

// canonicalHost lowercases host and drops one trailing dot, and reports ErrInvalidArgument unless it
// is a DNS name (not an IP address, not a wildcard).
func canonicalHost(host string) (string, error) {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if h == "" || len(h) > 253 {
		return "", fmt.Errorf("host %q: not a DNS name: %w", host, errdefs.ErrInvalidArgument)
	}
	if net.ParseIP(h) != nil {
		return "", fmt.Errorf("host %q: an IP address, not a DNS name: %w", host, errdefs.ErrInvalidArgument)
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if !labelRE.MatchString(l) {
			return "", fmt.Errorf("host %q: not a DNS name: %w", host, errdefs.ErrInvalidArgument)
		}
	}
	// A name whose last label is all digits would parse as an IPv4 address in some resolvers.
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "", fmt.Errorf("host %q: numeric top-level label: %w", host, errdefs.ErrInvalidArgument)
	}
	return h, nil
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}
