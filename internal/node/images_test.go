package node

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/blob/local"
	"github.com/airlockrun/airlock/internal/errdefs"
	keyslocal "github.com/airlockrun/airlock/internal/keys/local"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/snapshot"
)

// imagesEnv is a node's image pipeline over a real local blob store, and the control plane's snapshot
// store (with a real keyring) that makes the grants.
type imagesEnv struct {
	n     *Local
	cp    *snapshot.Store
	blobs string
}

func newImagesEnv(t *testing.T, budget int64) *imagesEnv {
	t.Helper()
	dir := t.TempDir()
	blobs, err := local.New(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	keyring, err := keyslocal.New(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := snapshot.New(snapshot.Config{Blobs: blobs, Keys: keyring})
	if err != nil {
		t.Fatal(err)
	}
	nodeStore, err := snapshot.New(snapshot.Config{Blobs: blobs})
	if err != nil {
		t.Fatal(err)
	}
	im, err := newImages(filepath.Join(dir, "node", "images"), nodeStore, budget, nil, "node-t", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return &imagesEnv{n: &Local{cfg: Config{ID: "node-t"}, log: slog.New(slog.DiscardHandler), images: im}, cp: cp, blobs: filepath.Join(dir, "blobs")}
}

// save puts an image for snapID in the node's pending images, as a checkpoint would.
func (e *imagesEnv) save(t *testing.T, snapID string, memory []byte) {
	t.Helper()
	dir := e.n.images.pendingDir(snapID)
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory"), memory, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "fs.tar"), []byte("layer of "+snapID), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (e *imagesEnv) grant(t *testing.T, tenant string) *snapshot.Grant {
	t.Helper()
	g, err := e.cp.Grant(t.Context(), tenant, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Clear)
	return g
}

// TestStoreAndRestoreImages: the node stores a saved image into the blob store with a grant (the
// control plane's store reads it back), a second store of it is a no-op, a restore uses the image the
// node keeps, a node that has lost it fetches it once for concurrent restores, and a lost image that was
// never stored is not found.
func TestStoreAndRestoreImages(t *testing.T) {
	e := newImagesEnv(t, 0)
	ctx := t.Context()
	memory := bytes.Repeat([]byte("page"), 300_000)
	e.save(t, "sn_1", memory)
	if ids := e.n.images.pendingImages(); len(ids) != 1 || ids[0] != "sn_1" {
		t.Fatalf("pendingImages = %v", ids)
	}
	g := e.grant(t, "tn_1")
	stats, err := e.n.images.storeImage(ctx, "tn_1", "sn_1", g, map[string]string{"session": "se_1"})
	if err != nil || stats.LogicalBytes != int64(len(memory))+int64(len("layer of sn_1")) || stats.NewChunks == 0 {
		t.Fatalf("storeImage = %+v, %v", stats, err)
	}
	var got bytes.Buffer
	if err := e.cp.ReadFile(ctx, "tn_1", "sn_1", "memory", &got); err != nil || !bytes.Equal(got.Bytes(), memory) {
		t.Fatalf("the control plane reads %d bytes, %v", got.Len(), err)
	}
	if ids := e.n.images.pendingImages(); len(ids) != 0 {
		t.Errorf("pending after the store: %v", ids)
	}
	// Again (a retry after a lost answer): the stored snapshot's statistics, nothing written.
	again, err := e.n.images.storeImage(ctx, "tn_1", "sn_1", g, nil)
	if err != nil || again.NewChunks != stats.NewChunks {
		t.Errorf("storeImage again = %+v, %v", again, err)
	}
	// Kept in the cache: a restore needs no grant.
	dir, release, err := e.n.images.prepare(ctx, "tn_1", nodecontract.ImageSource{SnapshotID: "sn_1"})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sub", "fs.tar")); err != nil || string(b) != "layer of sn_1" {
		t.Errorf("restore copy: %q %v", b, err)
	}
	release()
	// Lost (a new disk): fetched once, with the grant, for concurrent restores.
	clearDir(e.n.images.cache)
	if _, _, err := e.n.images.prepare(ctx, "tn_1", nodecontract.ImageSource{SnapshotID: "sn_1"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("restore of an image the node lacks, without a grant: %v", err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir, release, err := e.n.images.prepare(ctx, "tn_1", nodecontract.ImageSource{SnapshotID: "sn_1", Grant: g})
			if err != nil {
				t.Error(err)
				return
			}
			defer release()
			if b, err := os.ReadFile(filepath.Join(dir, "memory")); err != nil || !bytes.Equal(b, memory) {
				t.Errorf("fetched memory: %d bytes, %v", len(b), err)
			}
		}()
	}
	wg.Wait()
	if entries, _ := os.ReadDir(e.n.images.work); len(entries) != 0 {
		t.Errorf("restore copies left: %d", len(entries))
	}
	// Another tenant's grant does not open it.
	clearDir(e.n.images.cache)
	if _, _, err := e.n.images.prepare(ctx, "tn_2", nodecontract.ImageSource{SnapshotID: "sn_1", Grant: e.grant(t, "tn_2")}); err == nil {
		t.Error("another tenant's grant restored tn_1's snapshot")
	}
	// Never stored and gone from the node: lost.
	if _, err := e.n.images.storeImage(ctx, "tn_1", "sn_9", g, nil); !errors.Is(err, errdefs.ErrNotFound) || !errors.Is(err, errImageLost) {
		t.Errorf("storeImage of a lost image = %v; want not found (lost)", err)
	}
	if _, err := e.n.images.storeImage(ctx, "tn_1", "../x", g, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("storeImage of a path = %v; want invalid argument", err)
	}
	if _, err := e.n.images.storeImage(ctx, "tn_2", "sn_1", g, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("storeImage with another tenant's grant = %v; want invalid argument", err)
	}
	// DropImages removes pending and cached images.
	e.save(t, "sn_2", []byte("two"))
	if err := e.n.DropImages(ctx, []string{"sn_1", "sn_2", "../../etc"}); err != nil {
		t.Fatal(err)
	}
	if ids := e.n.images.pendingImages(); len(ids) != 0 {
		t.Errorf("pending after DropImages: %v", ids)
	}
}

// TestImageCacheBudget: the cache keeps to its budget, least recently used out first; with no cache a
// restore still fetches.
func TestImageCacheBudget(t *testing.T) {
	e := newImagesEnv(t, 3<<20)
	ctx := t.Context()
	g := e.grant(t, "tn_1")
	for i, id := range []string{"sn_a", "sn_b", "sn_c"} {
		e.save(t, id, bytes.Repeat([]byte{byte(i)}, 1<<20+i))
		if _, err := e.n.images.storeImage(ctx, "tn_1", id, g, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // distinct times of use
	}
	if total := treeBytes(e.n.images.cache); total > 3<<20 {
		t.Errorf("cache holds %d bytes; budget 3 MiB", total)
	}
	if _, err := os.Stat(filepath.Join(e.n.images.cache, "sn_a")); err == nil {
		t.Error("the least recently used image is still cached")
	}
	none := newImagesEnv(t, -1)
	none.n.images.store = e.n.images.store
	dir, release, err := none.n.images.prepare(ctx, "tn_1", nodecontract.ImageSource{SnapshotID: "sn_a", Grant: g})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if b, err := os.ReadFile(filepath.Join(dir, "memory")); err != nil || len(b) != 1<<20 {
		t.Errorf("restore without a cache: %d bytes, %v", len(b), err)
	}
	if entries, _ := os.ReadDir(none.n.images.cache); len(entries) != 0 {
		t.Errorf("a node without a cache cached %d images", len(entries))
	}
}

// TestUrgentGate: stores' reads wait while urgent work runs and go on when it ends.
func TestUrgentGate(t *testing.T) {
	g := newUrgentGate()
	if err := g.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	leave := g.enter()
	leave2 := g.enter()
	done := make(chan error, 1)
	go func() { done <- g.wait(context.Background()) }()
	leave()
	select {
	case err := <-done:
		t.Fatalf("wait returned (%v) while urgent work still ran", err)
	case <-time.After(100 * time.Millisecond):
	}
	leave2()
	leave2() // leaving twice is harmless
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	leave = g.enter()
	defer leave()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("wait with a cancelled context: %v", err)
	}
}
