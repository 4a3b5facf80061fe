package pkcs11_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	bloblocal "github.com/airlockrun/airlock/internal/blob/local"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/keys/pkcs11/softhsm"
	"github.com/airlockrun/airlock/internal/snapshot"
)

// TestSnapshotUnreadableOnceKeyDestroyed stores a snapshot under a tenant key in a SoftHSM2 token,
// destroys the key in the token, and finds the stored bytes impossible to decrypt: every read fails with
// the key unavailable, and nothing of the plaintext is in the blob store.
func TestSnapshotUnreadableOnceKeyDestroyed(t *testing.T) {
	tok := softhsm.NewToken(t)
	p := newProvider(t, tok)
	blobDir := t.TempDir()
	blobs, err := bloblocal.New(blobDir)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.New(snapshot.Config{Blobs: blobs, Keys: p})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	marker := bytes.Repeat([]byte("pkcs11-snapshot-marker "), 4096)
	w, err := snaps.NewWriter(ctx, "tn_a", "sn_one")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile(ctx, "memory", bytes.NewReader(marker)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(ctx, nil); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := snaps.ReadFile(ctx, "tn_a", "sn_one", "memory", &got); err != nil || !bytes.Equal(got.Bytes(), marker) {
		t.Fatalf("read back with the key: %d bytes, %v", got.Len(), err)
	}

	tok.DeleteKey(t, "airlock/tn_a/1")
	got.Reset()
	err = snaps.ReadFile(ctx, "tn_a", "sn_one", "memory", &got)
	if !errors.Is(err, errdefs.ErrKeyUnavailable) || got.Len() != 0 {
		t.Errorf("read after the key was destroyed: %d bytes, %v; want nothing and the key unavailable", got.Len(), err)
	}
	if err := snaps.Restore(ctx, "tn_a", "sn_one", t.TempDir()); !errors.Is(err, errdefs.ErrKeyUnavailable) {
		t.Errorf("restore after the key was destroyed: %v; want the key unavailable", err)
	}
	_ = filepath.WalkDir(blobDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if b, _ := os.ReadFile(path); bytes.Contains(b, []byte("pkcs11-snapshot-marker")) {
			t.Errorf("%s holds the snapshot's plaintext", path)
		}
		return nil
	})
}
