package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"runtime"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"
)

// InNetns runs f with the calling goroutine's thread in the namespace at path: sockets f opens live
// there for good.
func InNetns(t testing.TB, path string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		orig, err := vnetns.Get()
		if err != nil {
			t.Error(err)
			return
		}
		defer orig.Close()
		target, err := vnetns.GetFromPath(path)
		if err != nil {
			t.Error(err)
			return
		}
		defer target.Close()
		if err := vnetns.Set(target); err != nil {
			t.Error(err)
			return
		}
		f()
		if err := vnetns.Set(orig); err != nil {
			t.Error(err) // the thread stays locked, and dies with this goroutine
			return
		}
		runtime.UnlockOSThread()
	}()
	<-done
}

// NewTestCA makes a CA that plays a public root for servers a test runs.
func NewTestCA(t testing.TB) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Airlock test root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key
}

// NewTestLeaf makes a server certificate for names, signed by the CA.
func NewTestLeaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, names ...string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
