package mitm

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

func mustCA(t testing.TB, id string) *CA {
	t.Helper()
	ca, err := NewCA(id)
	if err != nil {
		t.Fatalf("NewCA(%q): %v", id, err)
	}
	return ca
}

// handshake runs a TLS handshake over a pipe between a server using srv and a client using cli, and
// reports the client's error.
func handshake(t *testing.T, srv, cli *tls.Config) error {
	t.Helper()
	cs, ss := net.Pipe()
	defer cs.Close()
	defer ss.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	srvErr := make(chan error, 1)
	go func() {
		s := tls.Server(ss, srv)
		err := s.HandshakeContext(ctx)
		if err == nil {
			_, err = s.Write([]byte("hello"))
		}
		ss.Close()
		srvErr <- err
	}()
	c := tls.Client(cs, cli)
	err := c.HandshakeContext(ctx)
	if err == nil {
		buf := make([]byte, 5)
		if _, err = c.Read(buf); err == nil && string(buf) != "hello" {
			err = fmt.Errorf("read %q; want %q", buf, "hello")
		}
	}
	cs.Close()
	<-srvErr
	return err
}

func TestHandshake(t *testing.T) {
	ca := mustCA(t, "sb_1")
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca.CertPEM()) {
		t.Fatal("CertPEM is not a PEM certificate")
	}
	for _, host := range []string{"api.github.com", "example.com", "localhost", "Mixed.Case.Example"} {
		t.Run(host, func(t *testing.T) {
			if err := handshake(t, ca.ServerConfig(), &tls.Config{RootCAs: roots, ServerName: host}); err != nil {
				t.Errorf("handshake with a client trusting CertPEM: %v", err)
			}
		})
	}
	t.Run("TLS1.2", func(t *testing.T) {
		if err := handshake(t, ca.ServerConfig(), &tls.Config{RootCAs: roots, ServerName: "example.com", MaxVersion: tls.VersionTLS12}); err != nil {
			t.Errorf("TLS 1.2 handshake: %v", err)
		}
	})
}

func TestHandshakeUntrusted(t *testing.T) {
	ca := mustCA(t, "sb_1")
	other := mustCA(t, "sb_2")
	otherRoots := x509.NewCertPool()
	otherRoots.AppendCertsFromPEM(other.CertPEM())
	tests := []struct {
		name string
		cli  *tls.Config
	}{
		{"SystemRoots", &tls.Config{ServerName: "example.com"}}, // nil RootCAs: the system's
		{"AnotherSandboxCA", &tls.Config{RootCAs: otherRoots, ServerName: "example.com"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := handshake(t, ca.ServerConfig(), tt.cli)
			var uae x509.UnknownAuthorityError
			var ve *tls.CertificateVerificationError
			if !errors.As(err, &uae) && !errors.As(err, &ve) {
				t.Errorf("handshake: err = %v; want a certificate verification error", err)
			}
		})
	}
}

func TestHandshakeWithoutSNI(t *testing.T) {
	ca := mustCA(t, "sb_1")
	// Dialing an IP address sends no SNI.
	if err := handshake(t, ca.ServerConfig(), &tls.Config{InsecureSkipVerify: true}); err == nil {
		t.Errorf("handshake without SNI succeeded")
	}
}

func TestLeaf(t *testing.T) {
	ca := mustCA(t, "sb_1")
	c, err := ca.Leaf("Api.Example.COM.")
	if err != nil {
		t.Fatal(err)
	}
	leaf := c.Leaf
	if got, want := leaf.DNSNames, []string{"api.example.com"}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("DNSNames = %v; want %v", got, want)
	}
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life > LeafLifetime+backdate {
		t.Errorf("leaf lifetime %v; want at most %v", life, LeafLifetime+backdate)
	}
	if leaf.IsCA {
		t.Errorf("leaf is a CA")
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "api.example.com", Roots: roots}); err != nil {
		t.Errorf("Verify: %v", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "other.example.com", Roots: roots}); err == nil {
		t.Errorf("Verify for another host succeeded")
	}
	again, err := ca.Leaf("api.example.com")
	if err != nil || again != c {
		t.Errorf("Leaf again = %p, %v; want the cached %p", again, err, c)
	}
}

func TestLeafInvalidHost(t *testing.T) {
	ca := mustCA(t, "sb_1")
	for _, host := range []string{
		"", ".", "1.2.3.4", "::1", "[::1]", "*.example.com", "exa mple.com", "example..com", "-bad.com",
		"bad-.com", "example.com:443", "ex/ample.com", "ünicode.com", strings.Repeat("a", 64) + ".com",
		strings.Repeat("a.", 127) + "com", "example.123", "a\x00b.com",
	} {
		if c, err := ca.Leaf(host); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Leaf(%q) = %v, %v; want ErrInvalidArgument", host, c != nil, err)
		}
	}
	if got := ca.lru.Len(); got != 0 {
		t.Errorf("cache holds %d entries after invalid hosts; want 0", got)
	}
}

func TestCacheBounded(t *testing.T) {
	ca := mustCA(t, "sb_1")
	ca.cacheSize = 3
	leaves := map[string]*tls.Certificate{}
	for i := range 5 {
		host := fmt.Sprintf("h%d.example.com", i)
		c, err := ca.Leaf(host)
		if err != nil {
			t.Fatal(err)
		}
		leaves[host] = c
		if i == 2 {
			// Touch h0 so that h1 is the least recently used.
			if c, err := ca.Leaf("h0.example.com"); err != nil || c != leaves["h0.example.com"] {
				t.Fatalf("Leaf(h0) not from cache: %v", err)
			}
		}
	}
	if n, m := ca.lru.Len(), len(ca.entries); n != 3 || m != 3 {
		t.Errorf("cache holds %d/%d entries; want 3", n, m)
	}
	for host, want := range map[string]bool{"h0.example.com": true, "h1.example.com": false, "h2.example.com": false, "h3.example.com": true, "h4.example.com": true} {
		if _, ok := ca.entries[host]; ok != want {
			t.Errorf("%s cached = %v; want %v", host, ok, want)
		}
	}
	c, err := ca.Leaf("h1.example.com")
	if err != nil || c == leaves["h1.example.com"] {
		t.Errorf("Leaf(evicted h1) = same %v, %v; want a fresh certificate", c == leaves["h1.example.com"], err)
	}
}

func TestLeafRenewedBeforeExpiry(t *testing.T) {
	ca := mustCA(t, "sb_1")
	now := time.Now()
	ca.now = func() time.Time { return now }
	c1, err := ca.Leaf("example.com")
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(LeafLifetime - leafRenewBefore + time.Minute)
	c2, err := ca.Leaf("example.com")
	if err != nil {
		t.Fatal(err)
	}
	if c1 == c2 || !c2.Leaf.NotAfter.After(c1.Leaf.NotAfter) {
		t.Errorf("leaf near expiry was not renewed")
	}
	if ca.lru.Len() != 1 {
		t.Errorf("cache holds %d entries; want 1", ca.lru.Len())
	}
}

func TestConcurrent(t *testing.T) {
	ca := mustCA(t, "sb_1")
	ca.cacheSize = 8
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for j := range 50 {
				host := fmt.Sprintf("h%d.example.com", (i+j)%12)
				c, err := ca.Leaf(host)
				if err != nil {
					t.Errorf("Leaf(%s): %v", host, err)
					return
				}
				if c.Leaf.DNSNames[0] != host {
					t.Errorf("Leaf(%s) is for %v", host, c.Leaf.DNSNames)
					return
				}
			}
		})
	}
	for i := range 4 {
		wg.Go(func() {
			host := fmt.Sprintf("tls%d.example.com", i)
			if err := handshake(t, ca.ServerConfig(), &tls.Config{RootCAs: roots, ServerName: host}); err != nil {
				t.Errorf("handshake for %s: %v", host, err)
			}
		})
	}
	wg.Wait()
	if n := ca.lru.Len(); n > 8 || n != len(ca.entries) {
		t.Errorf("cache holds %d entries (map %d); want at most 8 and equal", n, len(ca.entries))
	}
}

func TestConcurrentSameHostMintsOnce(t *testing.T) {
	ca := mustCA(t, "sb_1")
	var wg sync.WaitGroup
	got := make([]*tls.Certificate, 16)
	for i := range got {
		wg.Go(func() {
			c, err := ca.Leaf("example.com")
			if err != nil {
				t.Error(err)
			}
			got[i] = c
		})
	}
	wg.Wait()
	for i, c := range got {
		if c != got[0] {
			t.Errorf("call %d got a different certificate", i)
		}
	}
}

// xorWrap is a stand-in for real encryption in tests: it only has to be reversible and not the identity.
func xorWrap(b []byte) ([]byte, error) {
	out := make([]byte, len(b))
	for i := range b {
		out[i] = b[i] ^ 0x5a
	}
	return out, nil
}

func TestMarshalLoad(t *testing.T) {
	ca := mustCA(t, "sb_1")
	var handed []byte
	data, err := ca.Marshal(func(p []byte) ([]byte, error) {
		handed = p
		return xorWrap(p)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(handed) == 0 || !bytes.Equal(handed, make([]byte, len(handed))) {
		t.Errorf("Marshal did not clear the clear-text key it handed to wrap")
	}
	loaded, err := Load("sb_1", data, xorWrap)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !bytes.Equal(loaded.CertPEM(), ca.CertPEM()) || !loaded.key.Equal(ca.key) {
		t.Errorf("loaded CA differs from the original")
	}
	// A leaf of the loaded CA verifies against the original's certificate.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	if err := handshake(t, loaded.ServerConfig(), &tls.Config{RootCAs: roots, ServerName: "example.com"}); err != nil {
		t.Errorf("handshake with the loaded CA: %v", err)
	}

	t.Run("Errors", func(t *testing.T) {
		other := mustCA(t, "sb_2")
		otherData, err := other.Marshal(xorWrap)
		if err != nil {
			t.Fatal(err)
		}
		// other's key with ca's certificate.
		mixed := bytes.Replace(otherData, []byte(`"sb_2"`), []byte(`"sb_1"`), 1)
		mixed = bytes.Replace(mixed, []byte(b64(other.cert.Raw)), []byte(b64(ca.cert.Raw)), 1)
		unwrapErr := errors.New("key revoked")
		tests := []struct {
			name   string
			id     string
			data   []byte
			unwrap func([]byte) ([]byte, error)
			want   error
		}{
			{"WrongSandbox", "sb_2", data, xorWrap, errdefs.ErrInvalidArgument},
			{"Garbage", "sb_1", []byte("{"), xorWrap, errdefs.ErrInvalidArgument},
			{"UnwrapFails", "sb_1", data, func([]byte) ([]byte, error) { return nil, unwrapErr }, unwrapErr},
			{"WrongUnwrap", "sb_1", data, func(b []byte) ([]byte, error) { return b, nil }, errdefs.ErrInvalidArgument},
			{"KeyNotForCert", "sb_1", mixed, xorWrap, errdefs.ErrInvalidArgument},
			{"NilUnwrap", "sb_1", data, nil, errdefs.ErrInvalidArgument},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if _, err := Load(tt.id, tt.data, tt.unwrap); !errors.Is(err, tt.want) {
					t.Errorf("Load: err = %v; want %v", err, tt.want)
				}
			})
		}
		if _, err := ca.Marshal(nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Marshal(nil): err = %v; want ErrInvalidArgument", err)
		}
		wrapErr := errors.New("kms down")
		if _, err := ca.Marshal(func([]byte) ([]byte, error) { return nil, wrapErr }); !errors.Is(err, wrapErr) {
			t.Errorf("Marshal(failing wrap): err = %v; want %v", err, wrapErr)
		}
	})
}

func b64(b []byte) string {
	out, _ := jsonString(b)
	return out
}

func TestKeyNeverPrinted(t *testing.T) {
	ca := mustCA(t, "sb_1")
	d := ca.key.D.Text(16)
	dDec := ca.key.D.String()
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("ca", "ca", ca)
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("ca", "ca", ca)
	outs := []string{logged.String()}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x"} {
		outs = append(outs, fmt.Sprintf(verb, ca), fmt.Sprintf(verb, []any{ca}))
	}
	for _, out := range outs {
		if strings.Contains(out, d) || strings.Contains(out, dDec) {
			t.Errorf("printed CA %q contains its key", out)
		}
	}
	if !strings.Contains(outs[0], "REDACTED") {
		t.Errorf("logged CA = %q; want REDACTED", outs[0])
	}
}

func TestNewCAInvalidSandboxID(t *testing.T) {
	for _, id := range []string{"", "a b", "a/b", strings.Repeat("x", 129)} {
		if _, err := NewCA(id); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("NewCA(%q): err = %v; want ErrInvalidArgument", id, err)
		}
	}
}

func TestCACertificate(t *testing.T) {
	ca := mustCA(t, "sb_1")
	c := ca.Certificate()
	if !c.IsCA || !c.MaxPathLenZero || c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("CA certificate: IsCA %v, MaxPathLenZero %v, KeyUsage %v; want a path-length-0 signing CA", c.IsCA, c.MaxPathLenZero, c.KeyUsage)
	}
	if len(c.ExcludedIPRanges) != 2 {
		t.Errorf("ExcludedIPRanges = %v; want all IPv4 and IPv6", c.ExcludedIPRanges)
	}
	if !strings.Contains(c.Subject.CommonName, "sb_1") {
		t.Errorf("CommonName = %q; want it to name the sandbox", c.Subject.CommonName)
	}
}

func BenchmarkLeafCached(b *testing.B) {
	ca := mustCA(b, "sb_1")
	for b.Loop() {
		if _, err := ca.Leaf("example.com"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLeafMint(b *testing.B) {
	ca := mustCA(b, "sb_1")
	for b.Loop() {
		if _, err := ca.mint("example.com"); err != nil {
			b.Fatal(err)
		}
	}
}

func jsonString(b []byte) (string, error) {
	out, err := json.Marshal(b)
	return strings.Trim(string(out), `"`), err
}
