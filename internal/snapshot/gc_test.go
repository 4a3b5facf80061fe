package snapshot_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/blob"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/snapshot"
)

func chunkIDs(m snapshot.Manifest) map[string]bool {
	ids := map[string]bool{}
	for _, f := range m.Files {
		for _, c := range f.Chunks {
			ids[c.ID] = true
		}
	}
	return ids
}

func (e *env) chunkPaths(m snapshot.Manifest) []string {
	var out []string
	for id := range chunkIDs(m) {
		out = append(out, e.chunkFile(m.Tenant, id))
	}
	return out
}

func exist(paths []string) (n int) {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			n++
		}
	}
	return n
}

func TestGC(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	const grace = time.Hour
	kept := e.write(t, "tenant-a", "kept", map[string][]byte{"f": randomBytes(70, 3<<20)})
	oldOrphan := e.write(t, "tenant-a", "old", map[string][]byte{"f": randomBytes(71, 3<<20)})
	heldData := randomBytes(72, 3<<20)
	heldOrphan := e.write(t, "tenant-a", "held", map[string][]byte{"f": heldData})
	youngOrphan := e.write(t, "tenant-a", "young", map[string][]byte{"f": randomBytes(73, 3<<20)})
	other := e.write(t, "tenant-b", "other", map[string][]byte{"f": randomBytes(74, 3<<20)})
	for _, id := range []string{"old", "held", "young"} {
		if err := e.st.Delete(ctx, "tenant-a", id); err != nil {
			t.Fatal(err)
		}
	}
	// Everything but the young orphans is older than the grace period.
	for _, m := range []snapshot.Manifest{kept, oldOrphan, heldOrphan, other} {
		age(t, 2*grace, e.chunkPaths(m)...)
	}
	// An open Writer reuses the held orphans.
	w, err := e.st.NewWriter(ctx, "tenant-a", "reuse")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	if err := w.AddFile(ctx, "f", bytes.NewReader(heldData)); err != nil {
		t.Fatal(err)
	}

	st, err := e.st.GC(ctx, "tenant-a", grace)
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	n := func(m snapshot.Manifest) int { return len(chunkIDs(m)) }
	want := snapshot.GCStats{
		Snapshots:    1,
		Chunks:       n(kept) + n(oldOrphan) + n(heldOrphan) + n(youngOrphan),
		Referenced:   n(kept),
		Deleted:      n(oldOrphan),
		DeletedBytes: st.DeletedBytes,
		KeptYoung:    n(youngOrphan),
		KeptHeld:     n(heldOrphan),
	}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("GC stats (-want +got):\n%s", diff)
	}
	if st.DeletedBytes < 3<<20 {
		t.Errorf("GC deleted %d bytes; want about 3 MiB", st.DeletedBytes)
	}
	for _, tc := range []struct {
		what string
		m    snapshot.Manifest
		want int
	}{
		{"referenced", kept, n(kept)},
		{"old orphan", oldOrphan, 0},
		{"orphan held by a Writer", heldOrphan, n(heldOrphan)},
		{"young orphan", youngOrphan, n(youngOrphan)},
		{"other tenant's", other, n(other)},
	} {
		if got := exist(e.chunkPaths(tc.m)); got != tc.want {
			t.Errorf("after GC %d of the %s chunks exist; want %d", got, tc.what, tc.want)
		}
	}
	// The Writer commits after GC: its snapshot is whole.
	if _, err := w.Commit(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := e.readFile(t, "tenant-a", "reuse", "f"); err != nil || !bytes.Equal(got, heldData) {
		t.Errorf("ReadFile(committed after GC) = %d bytes, %v; want the data", len(got), err)
	}
	if got, err := e.readFile(t, "tenant-a", "kept", "f"); err != nil || len(got) != 3<<20 {
		t.Errorf("ReadFile(kept) after GC = %d bytes, %v", len(got), err)
	}

	// With every snapshot deleted and no grace, GC empties the tenant's chunks; a second run finds
	// nothing to do.
	for _, id := range []string{"kept", "reuse"} {
		if err := e.st.Delete(ctx, "tenant-a", id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.st.GC(ctx, "tenant-a", 0); err != nil {
		t.Fatal(err)
	}
	if left := e.chunkFiles(t, "tenant-a"); len(left) != 0 {
		t.Errorf("GC(no snapshots, no grace) left %d chunks", len(left))
	}
	st, err = e.st.GC(ctx, "tenant-a", 0)
	if err != nil || st != (snapshot.GCStats{}) {
		t.Errorf("second GC = %+v, %v; want nothing done", st, err)
	}
	if got := exist(e.chunkPaths(other)); got != n(other) {
		t.Errorf("GC of tenant-a deleted chunks of tenant-b")
	}
}

func TestGCIgnoresStrangers(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.write(t, "tenant-a", "s1", map[string][]byte{"f": []byte("x")})
	for _, key := range []string{"tenants/tenant-a/chunks/zz/not-a-chunk", "tenants/tenant-a/chunks/readme",
		"tenants/tenant-a/chunks/00/11" + string(bytes.Repeat([]byte("0"), 62))} {
		if err := e.blobs.Put(ctx, key, []byte("?")); err != nil {
			t.Fatal(err)
		}
		age(t, time.Hour, filepath.Join(e.root, filepath.FromSlash(key)+"@"))
	}
	if _, err := e.st.GC(ctx, "tenant-a", 0); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"tenants/tenant-a/chunks/zz/not-a-chunk", "tenants/tenant-a/chunks/readme"} {
		if _, err := e.blobs.Stat(ctx, key); err != nil {
			t.Errorf("GC deleted %s, which is not a chunk: %v", key, err)
		}
	}
}

// TestGCRacesWriters runs GC with no grace period in a loop while Writers commit snapshots sharing
// chunks with each other and with deleted snapshots: only the in-process registry protects the chunks
// they reuse, and every committed snapshot must read back whole.
func TestGCRacesWriters(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	base := make([][]byte, 4)
	for i := range base {
		base[i] = memoryImage(uint64(80+i), 2<<20)
	}
	var stop atomic.Bool
	var gcs atomic.Int64
	var wg sync.WaitGroup
	gcErr := make(chan error, 1)
	wg.Go(func() {
		for !stop.Load() {
			if _, err := e.st.GC(ctx, "tenant-a", 0); err != nil {
				gcErr <- err
				return
			}
			gcs.Add(1)
		}
	})
	const writers, rounds = 3, 6
	type written struct {
		id   string
		data []byte
	}
	results := make([][]written, writers)
	errs := make([]error, writers)
	var wwg sync.WaitGroup
	for i := range writers {
		wwg.Go(func() {
			for r := range rounds {
				id := fmt.Sprintf("w%d-r%d", i, r)
				data := append(bytes.Clone(base[(i+r)%len(base)]), randomBytes(uint64(1000*i+r), 300<<10)...)
				w, err := e.st.NewWriter(ctx, "tenant-a", id)
				if err != nil {
					errs[i] = err
					return
				}
				if err := w.AddFile(ctx, "f", bytes.NewReader(data)); err != nil {
					w.Abort()
					errs[i] = err
					return
				}
				if _, err := w.Commit(ctx, nil); err != nil {
					errs[i] = err
					return
				}
				results[i] = append(results[i], written{id, data})
				if r%2 == 1 { // delete every other snapshot, making orphans for GC
					prev := results[i][len(results[i])-2]
					if err := e.st.Delete(ctx, "tenant-a", prev.id); err != nil {
						errs[i] = err
						return
					}
					results[i] = append(results[i][:len(results[i])-2], results[i][len(results[i])-1])
				}
			}
		})
	}
	wwg.Wait()
	stop.Store(true)
	wg.Wait()
	select {
	case err := <-gcErr:
		t.Fatalf("GC: %v", err)
	default:
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	t.Logf("%d GC runs raced %d writers", gcs.Load(), writers)
	for _, rs := range results {
		for _, r := range rs {
			if got, err := e.readFile(t, "tenant-a", r.id, "f"); err != nil || !bytes.Equal(got, r.data) {
				t.Errorf("ReadFile(%s) = %d bytes, %v; want the data", r.id, len(got), err)
			}
		}
	}
}

// killingBlobs is a blob store whose Deletes fail after the first few, as if the process died there.
// It hides blob.Creator, so the Store falls back to Stat and Put.
type killingBlobs struct {
	blob.Store
	deletes   atomic.Int32
	failAfter int32
}

func (k *killingBlobs) Delete(ctx context.Context, key string) error {
	if k.deletes.Add(1) > k.failAfter {
		return errors.New("killed")
	}
	return k.Store.Delete(ctx, key)
}

// TestCrashes interrupts a write (the Writer's process dies before Commit) and then GC after each
// possible number of deletes: committed snapshots always read back whole, the dead write never
// appears, and a later GC finishes the job.
func TestCrashes(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	keep := map[string][]byte{"f": memoryImage(90, 4<<20)}
	e.write(t, "tenant-a", "keep", keep)
	e.write(t, "tenant-a", "gone", map[string][]byte{"f": randomBytes(91, 4<<20)})
	if err := e.st.Delete(ctx, "tenant-a", "gone"); err != nil {
		t.Fatal(err)
	}
	// A process dies while writing: its chunks are stored, its manifest never is.
	dead := e.newStore(t)
	w, err := dead.NewWriter(ctx, "tenant-a", "dead")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile(ctx, "f", bytes.NewReader(append(bytes.Clone(keep["f"]), randomBytes(92, 2<<20)...))); err != nil {
		t.Fatal(err)
	}
	if infos, err := e.st.List(ctx, "tenant-a"); err != nil || len(infos) != 1 || infos[0].ID != "keep" {
		t.Fatalf("List with a dead write = %+v, %v; want only keep", infos, err)
	}
	orphans := len(e.chunkFiles(t, "tenant-a"))
	for n := int32(0); ; n++ {
		kb := &killingBlobs{Store: e.blobs, failAfter: n}
		st, err := snapshot.New(snapshot.Config{Blobs: kb, Keys: e.keyring})
		if err != nil {
			t.Fatal(err)
		}
		_, gcErr := st.GC(ctx, "tenant-a", 0)
		if got, err := e.readFile(t, "tenant-a", "keep", "f"); err != nil || !bytes.Equal(got, keep["f"]) {
			t.Fatalf("after GC killed at delete %d: ReadFile(keep) = %d bytes, %v", n, len(got), err)
		}
		if gcErr == nil {
			break
		}
		if n > int32(orphans) {
			t.Fatalf("GC still failing after %d deletes: %v", n, gcErr)
		}
	}
	m, err := e.st.Manifest(ctx, "tenant-a", "keep")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(e.chunkFiles(t, "tenant-a")), len(chunkIDs(m)); got != want {
		t.Errorf("after GC completed %d chunks remain; want keep's %d", got, want)
	}
	// The non-Creator path still refuses to commit over an existing snapshot.
	st, err := snapshot.New(snapshot.Config{Blobs: &killingBlobs{Store: e.blobs}, Keys: e.keyring})
	if err != nil {
		t.Fatal(err)
	}
	writeWith(t, st, "tenant-a", "plain", map[string][]byte{"f": []byte("x")})
	if _, err := st.NewWriter(ctx, "tenant-a", "plain"); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("NewWriter(existing) without blob.Creator = %v; want ErrAlreadyExists", err)
	}
}
