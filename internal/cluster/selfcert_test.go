package cluster

import (
	"bytes"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/keys/master"
	"github.com/airlockrun/airlock/internal/store/sqlite/sqlitetest"
)

// TestSelfCertRenews: a replica's certificate is issued anew once a third of its lifetime is left, and
// kept until then.
func TestSelfCertRenews(t *testing.T) {
	mk, err := master.New(bytes.Repeat([]byte{5}, master.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(t.Context(), sqlitetest.Open(t), mk)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ca.NewSelfCert(Identity{Role: RoleControlPlane, ID: "cp-1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Current()
	if err != nil {
		t.Fatal(err)
	}
	again, _ := s.Current()
	if again.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) != 0 {
		t.Error("a fresh certificate was issued anew")
	}
	// Ten days left: less than a third of thirty.
	aged := *first.Leaf
	aged.NotAfter = time.Now().Add(10 * 24 * time.Hour)
	s.mu.Lock()
	s.cert.Leaf = &aged
	s.mu.Unlock()
	renewed, err := s.Current()
	if err != nil {
		t.Fatal(err)
	}
	if renewed.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 || time.Until(renewed.Leaf.NotAfter) < 29*24*time.Hour {
		t.Errorf("not renewed: serial %v, valid until %v", renewed.Leaf.SerialNumber, renewed.Leaf.NotAfter)
	}
	if id, err := IdentityOf(renewed.Leaf); err != nil || id.ID != "cp-1" {
		t.Errorf("renewed certificate names %v, %v", id, err)
	}
}
