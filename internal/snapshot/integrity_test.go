package snapshot_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/httperr"
	"github.com/airlockrun/airlock/internal/keys"
	"github.com/airlockrun/airlock/internal/snapshot"
)

// damaged writes a snapshot s1 of tenant-a with three files and returns its manifest.
func damaged(t *testing.T, e *env) snapshot.Manifest {
	t.Helper()
	return e.write(t, "tenant-a", "s1", map[string][]byte{
		"a/first.img":          randomBytes(60, 3<<20),
		"checkpoint/pages.img": randomBytes(61, 6<<20),
		"z/last.img":           randomBytes(62, 3<<20),
	})
}

// wantCorrupt checks that err reports damage to chunk of file (or the manifest if chunk is empty) of
// snapshot s1, saying reason.
func wantCorrupt(t *testing.T, what string, err error, file, chunk, reason string) {
	t.Helper()
	var ce *snapshot.CorruptError
	switch {
	case err == nil:
		t.Fatalf("%s succeeded on damaged data", what)
	case !errors.Is(err, snapshot.ErrCorrupt) || !errors.Is(err, errdefs.ErrInternal) || !errors.As(err, &ce):
		t.Fatalf("%s: err = %v; want a *CorruptError matching ErrCorrupt and ErrInternal", what, err)
	}
	for _, s := range []string{"snapshot s1", file, chunk, reason} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: err = %q; want it to contain %q", what, err, s)
		}
	}
	if ce.Snapshot != "s1" || ce.File != file || ce.Chunk != chunk {
		t.Errorf("%s: CorruptError{%q, %q, %q}; want {s1, %q, %q}", what, ce.Snapshot, ce.File, ce.Chunk, file, chunk)
	}
	if got := httperr.Status(err); got != http.StatusInternalServerError {
		t.Errorf("%s: HTTP status %d; want 500", what, got)
	}
}

// checkReadsFail checks that reading the file and restoring the snapshot fail as wantCorrupt says, and
// that the failed Restore left nothing behind.
func checkReadsFail(t *testing.T, e *env, file, chunk, reason string) {
	t.Helper()
	_, err := e.readFile(t, "tenant-a", "s1", file)
	wantCorrupt(t, "ReadFile", err, file, chunk, reason)

	parent := t.TempDir()
	if err := os.WriteFile(filepath.Join(parent, "unrelated"), []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{parent, filepath.Join(parent, "new", "dir")} {
		err = e.st.Restore(t.Context(), "tenant-a", "s1", dir)
		wantCorrupt(t, "Restore", err, file, chunk, reason)
	}
	var left []string
	filepath.WalkDir(parent, func(path string, _ fs.DirEntry, _ error) error {
		rel, _ := filepath.Rel(parent, path)
		left = append(left, rel)
		return nil
	})
	if strings.Join(left, " ") != ". unrelated" {
		t.Errorf("failed Restores left %q; want only what was there before", left)
	}
}

func TestTamperedChunk(t *testing.T) {
	e := newEnv(t)
	m := damaged(t, e)
	f := m.Files[1] // checkpoint/pages.img
	c := f.Chunks[len(f.Chunks)/2].ID
	path := e.chunkFile("tenant-a", c)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, 5, len(data) / 2, len(data) - 1} {
		bad := append([]byte(nil), data...)
		bad[i] ^= 0x40
		if err := os.WriteFile(path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		reason := "does not authenticate (corrupted)"
		if i < 2 {
			reason = "malformed (corrupted)" // the header
		}
		checkReadsFail(t, e, f.Name, c, reason)
	}
	// Truncated.
	if err := os.WriteFile(path, data[:10], 0o600); err != nil {
		t.Fatal(err)
	}
	checkReadsFail(t, e, f.Name, c, "malformed")
	// Other files still read.
	if _, err := e.readFile(t, "tenant-a", "s1", "z/last.img"); err != nil {
		t.Errorf("ReadFile(undamaged file): %v", err)
	}
}

func TestMissingChunk(t *testing.T) {
	e := newEnv(t)
	m := damaged(t, e)
	f := m.Files[2] // z/last.img, so Restore has written the others before it fails
	c := f.Chunks[len(f.Chunks)-1].ID
	if err := os.Remove(e.chunkFile("tenant-a", c)); err != nil {
		t.Fatal(err)
	}
	checkReadsFail(t, e, f.Name, c, "missing")
}

func TestSwappedChunks(t *testing.T) {
	e := newEnv(t)
	m := damaged(t, e)
	f := m.Files[1]
	a, b := f.Chunks[0].ID, f.Chunks[1].ID
	pa, pb := e.chunkFile("tenant-a", a), e.chunkFile("tenant-a", b)
	da, _ := os.ReadFile(pa)
	db, _ := os.ReadFile(pb)
	if err := os.WriteFile(pa, db, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pb, da, 0o600); err != nil {
		t.Fatal(err)
	}
	checkReadsFail(t, e, f.Name, a, "does not authenticate")
}

func TestChunkFromAnotherTenant(t *testing.T) {
	e := newEnv(t)
	m := damaged(t, e)
	data := randomBytes(61, 6<<20) // checkpoint/pages.img of tenant-a
	mb := e.write(t, "tenant-b", "s1", map[string][]byte{"checkpoint/pages.img": data})
	// Same content, other tenant: other chunk IDs, so no one learns that two tenants share content.
	if a, b := m.Files[1].Chunks[0].ID, mb.Files[0].Chunks[0].ID; a == b {
		t.Errorf("tenants share chunk ID %s for equal content; want IDs keyed per tenant", a)
	}
	// tenant-b's chunk replaced by tenant-a's blob of the same content.
	f := mb.Files[0]
	c := f.Chunks[0].ID
	src, err := os.ReadFile(e.chunkFile("tenant-a", m.Files[1].Chunks[0].ID))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.chunkFile("tenant-b", c), src, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = e.readFile(t, "tenant-b", "s1", f.Name)
	wantCorrupt(t, "ReadFile(chunk of another tenant)", err, f.Name, c, "does not authenticate")
}

func TestTamperedManifest(t *testing.T) {
	e := newEnv(t)
	damaged(t, e)
	e.write(t, "tenant-a", "s2", map[string][]byte{"other": []byte("x")})
	path := e.manifestFile("tenant-a", "s1")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	other, err := os.ReadFile(e.manifestFile("tenant-a", "s2"))
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)/2] ^= 1
	for _, tc := range []struct {
		name   string
		data   []byte
		reason string
	}{
		{"flipped", flipped, "manifest does not authenticate (corrupted)"},
		{"truncated", data[:20], "manifest malformed"},
		{"empty", nil, "manifest malformed"},
		{"another snapshot's", other, "manifest does not authenticate"},
		{"plain JSON", []byte(`{"version":1,"tenant":"tenant-a","id":"s1","files":[]}`), "manifest malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := e.st.Manifest(t.Context(), "tenant-a", "s1")
			wantCorrupt(t, "Manifest", err, "", "", tc.reason)
			_, err = e.readFile(t, "tenant-a", "s1", "a/first.img")
			wantCorrupt(t, "ReadFile", err, "", "", tc.reason)
			_, err = e.st.List(t.Context(), "tenant-a")
			wantCorrupt(t, "List", err, "", "", tc.reason)
			_, err = e.st.GC(t.Context(), "tenant-a", 0)
			wantCorrupt(t, "GC", err, "", "", tc.reason)
		})
	}
	if n := len(e.chunkFiles(t, "tenant-a")); n == 0 {
		t.Errorf("GC deleted chunks although a manifest could not be read")
	}
}

func TestOtherTenantCannotRead(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	damaged(t, e)
	e.write(t, "tenant-b", "mine", map[string][]byte{"f": []byte("b's")})
	if _, err := e.st.Manifest(ctx, "tenant-b", "s1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Manifest(tenant-b, s1 of tenant-a) = %v; want ErrNotFound", err)
	}
	// tenant-a's manifest planted among tenant-b's: tenant-b's key does not open it.
	data, err := os.ReadFile(e.manifestFile("tenant-a", "s1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.manifestFile("tenant-b", "s1"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = e.st.Manifest(ctx, "tenant-b", "s1")
	wantCorrupt(t, "Manifest(planted)", err, "", "", "manifest does not authenticate")

	// tenant-a's wrapped data key planted as tenant-b's: the key provider refuses to unwrap it.
	dk, err := os.ReadFile(filepath.Join(e.root, "tenants", "tenant-a", "datakey@"))
	if err != nil {
		t.Fatal(err)
	}
	dk = []byte(strings.Replace(string(dk), `"tenant":"tenant-a"`, `"tenant":"tenant-b"`, 1))
	if err := os.WriteFile(filepath.Join(e.root, "tenants", "tenant-b", "datakey@"), dk, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = e.st.Manifest(ctx, "tenant-b", "s1")
	if !errors.Is(err, snapshot.ErrCorrupt) || errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("Manifest with another tenant's data key = %v; want ErrCorrupt", err)
	}
}

func TestRevokedKey(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	damaged(t, e)
	open, err := e.st.NewWriter(ctx, "tenant-a", "open")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Abort()
	if err := open.AddFile(ctx, "f", strings.NewReader("before revocation")); err != nil {
		t.Fatal(err)
	}
	e.write(t, "tenant-b", "s1", map[string][]byte{"f": []byte("b")})
	if err := e.keyring.RevokeKey(ctx, "tenant-a"); err != nil {
		t.Fatal(err)
	}
	if err := e.keyring.RevokeKey(ctx, "tenant-new"); err != nil {
		t.Fatal(err)
	}
	denied := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("%s after revocation = %v; want ErrPermissionDenied", what, err)
		}
	}
	_, err = e.st.Manifest(ctx, "tenant-a", "s1")
	denied("Manifest", err)
	_, err = e.readFile(t, "tenant-a", "s1", "a/first.img")
	denied("ReadFile", err)
	dir := filepath.Join(t.TempDir(), "r")
	denied("Restore", e.st.Restore(ctx, "tenant-a", "s1", dir))
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("denied Restore created %s", dir)
	}
	_, err = e.st.List(ctx, "tenant-a")
	denied("List", err)
	_, err = e.st.NewWriter(ctx, "tenant-a", "s9")
	denied("NewWriter", err)
	_, err = e.st.NewWriter(ctx, "tenant-new", "s1")
	denied("NewWriter(new tenant)", err)
	_, err = open.Commit(ctx, nil)
	denied("Commit of a Writer opened before", err)
	if _, err := os.Stat(e.manifestFile("tenant-a", "open")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("denied Commit wrote a manifest")
	}
	_, err = e.st.GC(ctx, "tenant-a", 0)
	denied("GC", err)
	if n := len(e.chunkFiles(t, "tenant-a")); n == 0 {
		t.Errorf("denied GC deleted chunks")
	}
	// Other tenants are untouched.
	if got, err := e.readFile(t, "tenant-b", "s1", "f"); err != nil || string(got) != "b" {
		t.Errorf("ReadFile(tenant-b) after revoking tenant-a = %q, %v", got, err)
	}
}

func TestRestoreRefusesToEscapeOrClobber(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.write(t, "tenant-a", "s1", map[string][]byte{"checkpoint/pages.img": []byte("pages"), "a": []byte("a")})

	// A symbolic link in the target pointing outside it.
	dir, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "checkpoint")); err != nil {
		t.Fatal(err)
	}
	if err := e.st.Restore(ctx, "tenant-a", "s1", dir); err == nil {
		t.Errorf("Restore through a symbolic link out of the directory succeeded")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("Restore wrote %v outside its directory", ents)
	}
	if _, err := os.Lstat(filepath.Join(dir, "a")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("failed Restore left file a behind")
	}

	// An existing file is not overwritten, and stays.
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.st.Restore(ctx, "tenant-a", "s1", dir); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("Restore over an existing file = %v; want ErrAlreadyExists", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "a")); string(got) != "mine" {
		t.Errorf("existing file holds %q after Restore; want it untouched", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "checkpoint")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("failed Restore left directory checkpoint behind")
	}
}

// downKeys is a KeyProvider that is unreachable.
type downKeys struct{ keys.KeyProvider }

func (downKeys) UnwrapKey(context.Context, string, string, []byte) ([]byte, error) {
	return nil, fmt.Errorf("kms: connection refused: %w", errdefs.ErrUnavailable)
}

func TestKeyProviderUnavailable(t *testing.T) {
	e := newEnv(t)
	damaged(t, e)
	st, err := snapshot.New(snapshot.Config{Blobs: e.blobs, Keys: downKeys{e.keyring}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Manifest(t.Context(), "tenant-a", "s1")
	if !errors.Is(err, errdefs.ErrUnavailable) || errors.Is(err, snapshot.ErrCorrupt) {
		t.Errorf("Manifest with the key provider down = %v; want ErrUnavailable, not ErrCorrupt", err)
	}
	_, err = st.NewWriter(t.Context(), "tenant-a", "s2")
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("NewWriter with the key provider down = %v; want ErrUnavailable", err)
	}
}
