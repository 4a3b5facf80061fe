package snapshot_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/snapshot"
)

// TestGrant: a node's store, with no key provider, writes and restores a tenant's snapshots with the
// Grant the control plane's store gave it; what it writes reads back through the control plane's store
// and the other way round. A Grant opens its own tenant's snapshots only, a cleared one nothing, a
// revoked key gives none, and it never prints its keys.
func TestGrant(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	nodeStore, err := snapshot.New(snapshot.Config{Blobs: e.blobs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodeStore.Grant(ctx, "t1", true); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Grant from a store without a provider: %v; want failed precondition", err)
	}
	if _, err := nodeStore.NewWriter(ctx, "t1", "s0"); err == nil {
		t.Fatal("NewWriter without a provider succeeded")
	}
	g, err := e.st.Grant(ctx, "t1", true)
	if err != nil {
		t.Fatal(err)
	}
	// Through the wire form, as the node API carries it.
	b, err := g.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	ng, err := snapshot.UnmarshalGrant("t1", b)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"memory": bytes.Repeat([]byte("page"), 100_000), "fs.tar": []byte("files")}
	w, err := nodeStore.NewWriterWith(ctx, ng, "s1")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range sortedKeys(files) {
		if err := w.AddFile(ctx, name, bytes.NewReader(files[name])); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Commit(ctx, map[string]string{"by": "node"}); err != nil {
		t.Fatal(err)
	}
	// The control plane's store reads what the node wrote.
	for name, want := range files {
		got, err := e.readFile(t, "t1", "s1", name)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read %s written with a grant: %d bytes, %v", name, len(got), err)
		}
	}
	// The node restores what the control plane's store wrote, and reads its manifest.
	e.write(t, "t1", "s2", map[string][]byte{"a": []byte("alpha")})
	dir := filepath.Join(t.TempDir(), "img")
	if err := nodeStore.RestoreWith(ctx, ng, "s2", dir); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "a")); err != nil || string(got) != "alpha" {
		t.Fatalf("restored a: %q, %v", got, err)
	}
	if m, err := nodeStore.ManifestWith(ctx, ng, "s1"); err != nil || m.Meta["by"] != "node" {
		t.Fatalf("manifest with a grant: %+v, %v", m, err)
	}
	// Another tenant's snapshot does not open with t1's keys, even when the grant claims to be t2's.
	e.write(t, "t2", "s3", map[string][]byte{"b": []byte("beta")})
	forged, err := snapshot.UnmarshalGrant("t2", b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodeStore.ManifestWith(ctx, forged, "s3"); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Fatalf("t2's snapshot with t1's keys: %v; want corrupt", err)
	}
	if err := nodeStore.RestoreWith(ctx, forged, "s3", filepath.Join(t.TempDir(), "x")); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Fatalf("restore t2's snapshot with t1's keys: %v; want corrupt", err)
	}
	// Printing a grant shows no key.
	for _, s := range []string{fmt.Sprint(ng), fmt.Sprintf("%v %+v %#v %s %x", ng, ng, ng, ng, ng)} {
		if strings.Contains(s, string(b[:8])) || strings.Contains(s, fmt.Sprintf("%x", b[:8])) || !strings.Contains(s, "REDACTED") {
			t.Fatalf("a grant printed as %q", s)
		}
	}
	// A cleared grant opens nothing.
	ng.Clear()
	if _, err := nodeStore.ManifestWith(ctx, ng, "s1"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("manifest with a cleared grant: %v", err)
	}
	if _, err := nodeStore.NewWriterWith(ctx, ng, "s4"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("writer with a cleared grant: %v", err)
	}
	if _, err := snapshot.UnmarshalGrant("t1", b[:10]); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("a short grant: %v", err)
	}
	// A revoked key gives no grant.
	if err := e.keyring.RevokeKey(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Grant(ctx, "t1", false); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("grant with a revoked key: %v; want permission denied", err)
	}
}
