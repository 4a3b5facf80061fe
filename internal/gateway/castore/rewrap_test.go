package castore

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/mitm"
	"github.com/airlockrun/airlock/internal/keys/local"
)

// fileKeyID reads the ID of the key-encryption key named in the CA file of sandbox id.
func fileKeyID(t *testing.T, s *Store, id string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(s.dir, id+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		WrappedKey []byte `json:"wrapped_key"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("CA file of %s: %v", id, err)
	}
	keyID, _, err := splitWrapped(m.WrappedKey)
	if err != nil {
		t.Fatalf("CA file of %s: %v", id, err)
	}
	return keyID
}

func readCAFile(t *testing.T, s *Store, id string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(s.dir, id+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// checkLoads loads the CA of sandbox id as tenant and checks it is want and can mint.
func checkLoads(t *testing.T, s *Store, id, tenant string, want *mitm.CA) {
	t.Helper()
	got, err := s.Load(t.Context(), id, tenant)
	if err != nil {
		t.Errorf("Load(%s, %s): %v", id, tenant, err)
		return
	}
	if !bytes.Equal(got.CertPEM(), want.CertPEM()) {
		t.Errorf("Load(%s, %s) returned another certificate", id, tenant)
	}
	if _, err := got.Leaf("api.example.test"); err != nil {
		t.Errorf("CA %s cannot mint after loading: %v", id, err)
	}
}

func TestRewrap(t *testing.T) {
	ctx := t.Context()
	kr, err := local.New(filepath.Join(t.TempDir(), "keys"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(filepath.Join(t.TempDir(), "ca"), kr)
	if err != nil {
		t.Fatal(err)
	}
	cas := map[string]*mitm.CA{}
	owner := map[string]string{"sb_a1": "tn_a", "sb_a2": "tn_a", "sb_b1": "tn_b"}
	for id, tenant := range owner {
		ca, err := mitm.NewCA(id)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Save(ctx, id, tenant, ca); err != nil {
			t.Fatal(err)
		}
		cas[id] = ca
	}
	// Files Rewrap must pass over.
	for name, data := range map[string]string{"notes.txt": "x", "bad id.json": "{}", ".hidden.json": "{}"} {
		if err := os.WriteFile(filepath.Join(s.dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(s.dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}

	// A tenant without CAs (or without any key) has nothing to re-wrap.
	if n, err := s.Rewrap(ctx, "tn_none"); n != 0 || err != nil {
		t.Errorf("Rewrap(tenant without CAs) = %d, %v; want 0, nil", n, err)
	}

	oldA := fileKeyID(t, s, "sb_a1")
	if got := fileKeyID(t, s, "sb_a2"); got != oldA {
		t.Fatalf("CAs of tn_a name keys %q and %q; want the same", oldA, got)
	}
	fileA1, fileB := readCAFile(t, s, "sb_a1"), readCAFile(t, s, "sb_b1")
	keyB := fileKeyID(t, s, "sb_b1")

	newA, err := kr.RotateKey(ctx, "tn_a")
	if err != nil {
		t.Fatal(err)
	}
	if newA == oldA || !strings.HasPrefix(newA, "lk_") {
		t.Fatalf("RotateKey = %q; want a new lk_ key ID (was %q)", newA, oldA)
	}
	if !bytes.Equal(readCAFile(t, s, "sb_a1"), fileA1) {
		t.Fatalf("RotateKey alone changed a CA file")
	}

	n, err := s.Rewrap(ctx, "tn_a")
	if n != 2 || err != nil {
		t.Fatalf("Rewrap(tn_a) = %d, %v; want 2, nil", n, err)
	}
	for _, id := range []string{"sb_a1", "sb_a2"} {
		if got := fileKeyID(t, s, id); got != newA {
			t.Errorf("CA file of %s names key %q after Rewrap; want %q", id, got, newA)
		}
		checkLoads(t, s, id, "tn_a", cas[id])
		if fi, err := os.Stat(filepath.Join(s.dir, id+".json")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("CA file of %s after Rewrap: %v, %v; want mode 0600", id, fi, err)
		}
	}
	if !bytes.Equal(readCAFile(t, s, "sb_b1"), fileB) {
		t.Errorf("Rewrap(tn_a) changed the CA file of tn_b's sandbox")
	}
	checkLoads(t, s, "sb_b1", "tn_b", cas["sb_b1"])
	if _, err := s.Load(ctx, "sb_a1", "tn_b"); err == nil {
		t.Errorf("a re-wrapped CA of tn_a loads as tn_b")
	}
	for name, want := range map[string]string{"notes.txt": "x", "bad id.json": "{}", ".hidden.json": "{}"} {
		if got, err := os.ReadFile(filepath.Join(s.dir, name)); err != nil || string(got) != want {
			t.Errorf("%s after Rewrap = %q, %v; want %q", name, got, err, want)
		}
	}

	// tn_b, never rotated: re-wrapped under its same current key.
	if n, err := s.Rewrap(ctx, "tn_b"); n != 1 || err != nil {
		t.Errorf("Rewrap(tn_b) = %d, %v; want 1, nil", n, err)
	}
	if got := fileKeyID(t, s, "sb_b1"); got != keyB {
		t.Errorf("CA file of sb_b1 names key %q; want still %q", got, keyB)
	}
	checkLoads(t, s, "sb_b1", "tn_b", cas["sb_b1"])
	for _, id := range []string{"sb_a1", "sb_a2"} {
		if got := fileKeyID(t, s, id); got != newA {
			t.Errorf("Rewrap(tn_b) changed the key of %s to %q", id, got)
		}
	}

	// A revoked tenant cannot re-wrap; the others still can, and nothing is changed.
	fileA1 = readCAFile(t, s, "sb_a1")
	if err := kr.RevokeKey(ctx, "tn_a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rewrap(ctx, "tn_a"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("Rewrap(revoked tn_a): err = %v; want ErrPermissionDenied", err)
	}
	if !bytes.Equal(readCAFile(t, s, "sb_a1"), fileA1) {
		t.Errorf("a failed Rewrap changed a CA file")
	}
	if n, err := s.Rewrap(ctx, "tn_b"); n != 1 || err != nil {
		t.Errorf("Rewrap(tn_b) with tn_a revoked = %d, %v; want 1, nil", n, err)
	}
	checkLoads(t, s, "sb_b1", "tn_b", cas["sb_b1"])
}
