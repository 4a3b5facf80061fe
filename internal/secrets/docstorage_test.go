package secrets_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/airlockrun/airlock/internal/keys/local"
	"github.com/airlockrun/airlock/internal/keys/master"
	"github.com/airlockrun/airlock/internal/secrets"
	"github.com/airlockrun/airlock/internal/secrets/storagetest"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
	"github.com/airlockrun/airlock/internal/store/sqlite/sqlitetest"
)

func newSQLite(t *testing.T) *sqlite.Store { return sqlitetest.Open(t) }

func newDocStorage(t *testing.T, docs store.Docs) *secrets.DocStorage {
	t.Helper()
	s, err := secrets.NewDocStorage(docs, "secrets/")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDocStorageConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) secrets.Storage { return newDocStorage(t, newSQLite(t)) })
}

// TestDocStorageReplicas: secrets stores of two control-plane replicas on one Store, each with its own
// DocStorage and keyring instance, create secrets of one tenant at once; every secret lands, and each
// replica reveals what the other wrote.
func TestDocStorageReplicas(t *testing.T) {
	ctx := t.Context()
	db := newSQLite(t)
	master, err := master.New(bytes.Repeat([]byte{5}, master.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	var replicas []*secrets.Store
	for range 2 {
		kr, err := local.NewInStore(ctx, db, master)
		if err != nil {
			t.Fatal(err)
		}
		s, err := secrets.New(secrets.Config{Keys: kr, Storage: newDocStorage(t, db)})
		if err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, s)
	}
	const each = 8
	var wg sync.WaitGroup
	errs := make(chan error, 2*each)
	for i, s := range replicas {
		for j := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.Create(ctx, "t1", fmt.Sprintf("s%d-%d", i, j), []byte(fmt.Sprintf("value %d %d", i, j))); err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range replicas {
		for j := range each {
			other := replicas[1-i]
			if got := reveal(t, other, "t1", fmt.Sprintf("s%d-%d", i, j)); got != fmt.Sprintf("value %d %d", i, j) {
				t.Errorf("replica %d reveals %q for s%d-%d", 1-i, got, i, j)
			}
		}
	}
	if list, err := replicas[0].List(ctx, "t1"); err != nil || len(list) != 2*each {
		t.Errorf("List = %d secrets, %v; want %d", len(list), err, 2*each)
	}
	// The Store holds no value in the clear.
	docs, err := db.ListDocs(ctx, "secrets/")
	if err != nil || len(docs) != 1 {
		t.Fatalf("secrets documents: %d, %v; want 1", len(docs), err)
	}
	if bytes.Contains(docs[0].Value, []byte("value 0 0")) {
		t.Error("the secrets document holds a value in the clear")
	}
}

func TestImportFiles(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "secrets")
	kr, err := local.New(filepath.Join(t.TempDir(), "keys"))
	if err != nil {
		t.Fatal(err)
	}
	files := newFileStorage(t, dir)
	fromFiles, err := secrets.New(secrets.Config{Keys: kr, Storage: files})
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"t1", "t 2"} {
		if _, err := fromFiles.Create(ctx, tenant, "token", []byte("from file "+tenant)); err != nil {
			t.Fatal(err)
		}
	}
	db := newSQLite(t)
	docs := newDocStorage(t, db)
	fromDocs, err := secrets.New(secrets.Config{Keys: kr, Storage: docs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fromDocs.Create(ctx, "t1", "token", []byte("already in the store")); err != nil {
		t.Fatal(err)
	}
	moved, skipped, err := secrets.ImportFiles(ctx, files, docs)
	if err != nil {
		t.Fatal(err)
	}
	if moved != 1 || len(skipped) != 1 || skipped[0] != "t1" {
		t.Errorf("ImportFiles moved %d, skipped %v; want 1 and [t1]", moved, skipped)
	}
	if got := reveal(t, fromDocs, "t 2", "token"); got != "from file t 2" {
		t.Errorf("imported secret reveals %q", got)
	}
	if got := reveal(t, fromDocs, "t1", "token"); got != "already in the store" {
		t.Errorf("the Store's own secret was replaced: %q", got)
	}
	left, err := files.Tenants()
	if err != nil || len(left) != 1 || left[0] != "t1" {
		t.Errorf("files left: %v, %v; want only t1's (skipped)", left, err)
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		t.Error("the directory went with a skipped file still in it")
	}
}
