package castore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/mitm"
	"github.com/airlockrun/airlock/internal/keys/local"
)

func TestSaveLoadDelete(t *testing.T) {
	ctx := context.Background()
	kr, err := local.New(filepath.Join(t.TempDir(), "keys"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(filepath.Join(t.TempDir(), "ca"), kr)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := mitm.NewCA("sb_one")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, "sb_one", "tn_a", ca); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(s.dir, "sb_one.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("CA file: %v, %v; want mode 0600", fi, err)
	}
	got, err := s.Load(ctx, "sb_one", "tn_a")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.CertPEM(), ca.CertPEM()) {
		t.Errorf("loaded CA has another certificate")
	}
	if _, err := got.Leaf("api.example.test"); err != nil {
		t.Errorf("loaded CA cannot mint: %v", err)
	}
	if _, err := s.Load(ctx, "sb_one", "tn_b"); err == nil {
		t.Errorf("Load as another tenant succeeded")
	}
	if _, err := s.Load(ctx, "sb_two", "tn_a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Load of a missing CA = %v; want ErrNotFound", err)
	}
	if _, err := s.Load(ctx, "../etc", "tn_a"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Load of a bad id = %v; want ErrInvalidArgument", err)
	}
	if err := kr.RevokeKey(ctx, "tn_a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, "sb_one", "tn_a"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("Load after revoking the tenant key = %v; want ErrPermissionDenied", err)
	}
	if err := s.Delete("sb_one"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("sb_one"); err != nil {
		t.Errorf("second Delete: %v", err)
	}
}
