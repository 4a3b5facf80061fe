package snapshot_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// storedDataKey is the data-key record as stored at tenants/<tenant>/datakey.
type storedDataKey struct {
	Version   int       `json:"version"`
	Tenant    string    `json:"tenant"`
	KeyID     string    `json:"key_id"`
	Wrapped   []byte    `json:"wrapped"`
	CreatedAt time.Time `json:"created_at"`
}

func dataKeyBlob(tenant string) string { return "tenants/" + tenant + "/datakey" }

// dataKeyRecord reads tenant's data-key record from the blob store, raw and decoded.
func (e *env) dataKeyRecord(tb testing.TB, tenant string) ([]byte, storedDataKey) {
	tb.Helper()
	data, err := e.blobs.Get(tb.Context(), dataKeyBlob(tenant))
	if err != nil {
		tb.Fatalf("Get(%s): %v", dataKeyBlob(tenant), err)
	}
	var rec storedDataKey
	if err := json.Unmarshal(data, &rec); err != nil {
		tb.Fatalf("data key record of %s: %v", tenant, err)
	}
	return data, rec
}

// tenantFiles reads every file of tenant in the blob store's directory but its data key record.
func (e *env) tenantFiles(tb testing.TB, tenant string) map[string][]byte {
	tb.Helper()
	out := map[string][]byte{}
	dir := filepath.Join(e.root, "tenants", tenant)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if strings.HasPrefix(filepath.ToSlash(rel), "datakey") {
			return nil
		}
		out[rel], err = os.ReadFile(path)
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// sameFiles reports the files that differ between before and after.
func sameFiles(t *testing.T, what string, before, after map[string][]byte) {
	t.Helper()
	for name, b := range before {
		if a, ok := after[name]; !ok {
			t.Errorf("%s removed %s", what, name)
		} else if !bytes.Equal(a, b) {
			t.Errorf("%s rewrote %s", what, name)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			t.Errorf("%s added %s", what, name)
		}
	}
}

// TestRewrapDataKey rotates a tenant's key and re-wraps its snapshot data key: the record names the new
// key, the data key is the same, nothing else is rewritten, and the snapshots still read back.
func TestRewrapDataKey(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()

	// A tenant without any snapshot has no data key to re-wrap, and gets none.
	ok, err := e.st.RewrapDataKey(ctx, "tenant-none")
	if ok || err != nil {
		t.Fatalf("RewrapDataKey(tenant without snapshots) = %v, %v; want false, nil", ok, err)
	}
	if _, err := e.blobs.Get(ctx, dataKeyBlob("tenant-none")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("data key of a tenant without snapshots after RewrapDataKey: err = %v; want ErrNotFound", err)
	}

	files := map[string][]byte{
		"checkpoint/pages.img": randomBytes(1, 3<<20),
		"checkpoint/meta.json": []byte(`{"pid":1}`),
		"fs/upper.tar":         bytes.Repeat([]byte("tar "), 50_000),
		"empty":                {},
	}
	e.write(t, "tenant-a", "s1", files)
	e.write(t, "tenant-b", "s1", map[string][]byte{"f": []byte("tenant b's file")})

	// A writer open across the rotation and re-wrap.
	open, err := e.st.NewWriter(ctx, "tenant-a", "open")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Abort()
	if err := open.AddFile(ctx, "f", strings.NewReader("before rotation")); err != nil {
		t.Fatal(err)
	}

	rawA, oldA := e.dataKeyRecord(t, "tenant-a")
	rawB, _ := e.dataKeyRecord(t, "tenant-b")
	dekA := e.dataKey(t, "tenant-a")
	blobsA := e.tenantFiles(t, "tenant-a")
	if len(blobsA) == 0 {
		t.Fatal("no blobs of tenant-a on disk")
	}

	newID, err := e.keyring.RotateKey(ctx, "tenant-a")
	if err != nil {
		t.Fatalf("RotateKey: %v", err)
	}
	if newID == oldA.KeyID || !strings.HasPrefix(newID, "lk_") {
		t.Fatalf("RotateKey = %q; want a new lk_ key ID (was %q)", newID, oldA.KeyID)
	}
	if raw, _ := e.dataKeyRecord(t, "tenant-a"); !bytes.Equal(raw, rawA) {
		t.Fatalf("RotateKey alone changed the data key record")
	}

	ok, err = e.st.RewrapDataKey(ctx, "tenant-a")
	if !ok || err != nil {
		t.Fatalf("RewrapDataKey(tenant-a) = %v, %v; want true, nil", ok, err)
	}
	_, newA := e.dataKeyRecord(t, "tenant-a")
	want := oldA
	want.KeyID, want.Wrapped = newID, newA.Wrapped
	if d := cmp.Diff(want, newA); d != "" {
		t.Errorf("data key record after RewrapDataKey (-want +got):\n%s", d)
	}
	if bytes.Equal(newA.Wrapped, oldA.Wrapped) {
		t.Errorf("data key record still has the old wrapped key")
	}
	if !bytes.Equal(e.dataKey(t, "tenant-a"), dekA) {
		t.Errorf("RewrapDataKey changed the data key itself")
	}
	sameFiles(t, "RewrapDataKey", blobsA, e.tenantFiles(t, "tenant-a"))
	if raw, _ := e.dataKeyRecord(t, "tenant-b"); !bytes.Equal(raw, rawB) {
		t.Errorf("data key record of tenant-b changed")
	}

	// The snapshot reads back byte-identical, through this store and a new one.
	check := func(what string) {
		t.Helper()
		for name, want := range files {
			var buf bytes.Buffer
			if err := e.st.ReadFile(ctx, "tenant-a", "s1", name, &buf); err != nil {
				t.Errorf("%s: ReadFile(%s): %v", what, name, err)
			} else if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("%s: ReadFile(%s) returned %d bytes differing from the %d written", what, name, buf.Len(), len(want))
			}
		}
	}
	check("after RewrapDataKey")
	dir := filepath.Join(t.TempDir(), "restore")
	if err := e.st.Restore(ctx, "tenant-a", "s1", dir); err != nil {
		t.Fatalf("Restore after RewrapDataKey: %v", err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("restored %s: %d bytes, %v; want the %d bytes written", name, len(got), err, len(want))
		}
	}
	e.st = e.newStore(t)
	check("through a new Store")
	var buf bytes.Buffer
	if err := e.st.ReadFile(ctx, "tenant-b", "s1", "f", &buf); err != nil || buf.String() != "tenant b's file" {
		t.Errorf("ReadFile(tenant-b) = %q, %v; want %q", buf.String(), err, "tenant b's file")
	}

	// The writer opened before commits, and a new snapshot deduplicates against the old one (same data key).
	if _, err := open.Commit(ctx, nil); err != nil {
		t.Errorf("Commit of a writer opened before the re-wrap: %v", err)
	}
	m := e.write(t, "tenant-a", "s2", files)
	if m.Stats.NewChunks != 0 || m.Stats.ReusedChunks == 0 {
		t.Errorf("snapshot of the same files after RewrapDataKey: stats %+v; want every chunk reused", m.Stats)
	}
	if _, rec := e.dataKeyRecord(t, "tenant-a"); rec.KeyID != newID {
		t.Errorf("data key record names %q after a new snapshot; want %q", rec.KeyID, newID)
	}

	// Again without a rotation: wrapped anew under the same current key.
	ok, err = e.st.RewrapDataKey(ctx, "tenant-a")
	if !ok || err != nil {
		t.Fatalf("RewrapDataKey(tenant-a) again = %v, %v; want true, nil", ok, err)
	}
	if _, rec := e.dataKeyRecord(t, "tenant-a"); rec.KeyID != newID || !bytes.Equal(e.dataKey(t, "tenant-a"), dekA) {
		t.Errorf("data key record after a second RewrapDataKey names %q; want %q and the same data key", rec.KeyID, newID)
	}
	check("after a second RewrapDataKey")
}

func TestRewrapDataKeyRevoked(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.write(t, "tenant-a", "s1", map[string][]byte{"f": []byte("a")})
	raw, _ := e.dataKeyRecord(t, "tenant-a")
	if _, err := e.keyring.RotateKey(ctx, "tenant-a"); err != nil {
		t.Fatal(err)
	}
	if err := e.keyring.RevokeKey(ctx, "tenant-a"); err != nil {
		t.Fatal(err)
	}
	ok, err := e.st.RewrapDataKey(ctx, "tenant-a")
	if ok || !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("RewrapDataKey(revoked) = %v, %v; want false, ErrPermissionDenied", ok, err)
	}
	if got, _ := e.dataKeyRecord(t, "tenant-a"); !bytes.Equal(got, raw) {
		t.Errorf("a failed RewrapDataKey changed the data key record")
	}
}
