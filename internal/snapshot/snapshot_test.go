package snapshot_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/snapshot"
)

// TestNewRequiresBlobs: a Store needs its blobs; one without a key provider (a node's) is made, and
// TestGrant checks what it can do.
func TestNewRequiresBlobs(t *testing.T) {
	e := newEnv(t)
	for _, cfg := range []snapshot.Config{{}, {Keys: e.keyring}} {
		if _, err := snapshot.New(cfg); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("New(%+v) = %v; want ErrInvalidArgument", cfg, err)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	files := map[string][]byte{
		"checkpoint/pages.img":  randomBytes(1, 40<<20),
		"checkpoint/memory.img": memoryImage(2, 12<<20),
		"checkpoint/meta.json":  []byte(`{"pid":1}`),
		"fs/upper.tar":          bytes.Repeat([]byte("tar "), 100_000),
		"empty":                 {},
	}
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	st, err := snapshot.New(snapshot.Config{Blobs: e.blobs, Keys: e.keyring, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	e.st = st
	m := e.write(t, "tenant-a", "s1", files)
	if m.CreatedAt != now || m.Tenant != "tenant-a" || m.ID != "s1" || m.Version != 1 {
		t.Errorf("Commit reported %s/%s v%d at %v; want tenant-a/s1 v1 at %v", m.Tenant, m.ID, m.Version, m.CreatedAt, now)
	}
	var total int64
	for _, f := range files {
		total += int64(len(f))
	}
	if m.Stats.LogicalBytes != total {
		t.Errorf("Stats.LogicalBytes = %d; want %d", m.Stats.LogicalBytes, total)
	}
	if m.Stats.NewChunks == 0 || m.Stats.ReusedChunks != m.Stats.Chunks-m.Stats.NewChunks {
		t.Errorf("Stats = %+v; want new chunks, and reused = chunks - new", m.Stats)
	}
	t.Logf("stats: %+v", m.Stats)

	got, err := e.st.Manifest(ctx, "tenant-a", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(m, got); diff != "" {
		t.Errorf("Manifest differs from what Commit reported (-commit +read):\n%s", diff)
	}
	for name, want := range files {
		data, err := e.readFile(t, "tenant-a", "s1", name)
		if err != nil {
			t.Errorf("ReadFile(%s): %v", name, err)
		} else if !bytes.Equal(data, want) {
			t.Errorf("ReadFile(%s) returned %d bytes differing from the %d written", name, len(data), len(want))
		}
	}

	dir := filepath.Join(t.TempDir(), "restore", "here")
	if err := e.st.Restore(ctx, "tenant-a", "s1", dir); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	restored := map[string][]byte{}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		restored[filepath.ToSlash(rel)], err = os.ReadFile(path)
		if info, _ := d.Info(); info.Mode().Perm() != 0o600 {
			t.Errorf("restored %s has mode %v; want 0600", rel, info.Mode().Perm())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sortedKeys(restored), sortedKeys(files); !cmp.Equal(got, want) {
		t.Errorf("restored files %q; want %q", got, want)
	}
	for name, want := range files {
		if got := restored[name]; !bytes.Equal(got, want) {
			t.Errorf("restored %s has %d bytes differing from the %d written", name, len(got), len(want))
		}
	}

	// A snapshot without files.
	w, err := e.st.NewWriter(ctx, "tenant-a", "nothing")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(ctx, nil); err != nil {
		t.Fatalf("Commit(no files): %v", err)
	}
	if m, err := e.st.Manifest(ctx, "tenant-a", "nothing"); err != nil || len(m.Files) != 0 {
		t.Errorf("Manifest(no files) = %+v, %v; want no files", m, err)
	}
	if err := e.st.Restore(ctx, "tenant-a", "nothing", filepath.Join(t.TempDir(), "n")); err != nil {
		t.Errorf("Restore(no files): %v", err)
	}
}

func TestListAndDelete(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if got, err := e.st.List(ctx, "tenant-a"); err != nil || len(got) != 0 {
		t.Fatalf("List(new tenant) = %v, %v; want nothing", got, err)
	}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st, err := snapshot.New(snapshot.Config{Blobs: e.blobs, Keys: e.keyring, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"c", "a", "b"} {
		clock = clock.Add(time.Minute)
		writeWith(t, st, "tenant-a", id, map[string][]byte{"f": bytes.Repeat([]byte{byte(i)}, 10*(i+1))})
	}
	writeWith(t, st, "tenant-b", "other", map[string][]byte{"f": []byte("b")})
	got, err := e.st.List(ctx, "tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, info := range got {
		ids = append(ids, info.ID)
	}
	if want := []string{"c", "a", "b"}; !cmp.Equal(ids, want) {
		t.Errorf("List IDs = %q; want %q (by creation time)", ids, want)
	}
	if got[1].Size != 20 || got[1].Files != 1 || got[1].Meta["by"] != "test" || got[1].CreatedAt.IsZero() {
		t.Errorf("List()[1] = %+v; want 20 bytes in 1 file, meta by=test, a creation time", got[1])
	}

	if err := e.st.Delete(ctx, "tenant-a", "a"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := e.st.Manifest(ctx, "tenant-a", "a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Manifest after Delete = %v; want ErrNotFound", err)
	}
	if err := e.st.Delete(ctx, "tenant-a", "a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Delete again = %v; want ErrNotFound", err)
	}
	if got, _ := e.st.List(ctx, "tenant-a"); len(got) != 2 {
		t.Errorf("List after Delete has %d snapshots; want 2", len(got))
	}
	// The ID can be used again.
	e.write(t, "tenant-a", "a", map[string][]byte{"g": []byte("again")})
}

func TestNotFound(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if _, err := e.st.Manifest(ctx, "tenant-a", "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Manifest(unknown tenant) = %v; want ErrNotFound", err)
	}
	e.write(t, "tenant-a", "s1", map[string][]byte{"f": []byte("x")})
	if _, err := e.st.Manifest(ctx, "tenant-a", "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Manifest(unknown) = %v; want ErrNotFound", err)
	}
	if _, err := e.readFile(t, "tenant-a", "nope", "f"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("ReadFile(unknown snapshot) = %v; want ErrNotFound", err)
	}
	if _, err := e.readFile(t, "tenant-a", "s1", "g"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("ReadFile(unknown file) = %v; want ErrNotFound", err)
	}
	dir := filepath.Join(t.TempDir(), "r")
	if err := e.st.Restore(ctx, "tenant-a", "nope", dir); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Restore(unknown) = %v; want ErrNotFound", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("failed Restore left %s behind", dir)
	}
}

func TestValidation(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	for _, tc := range []struct{ tenant, id string }{
		{"", "s"}, {"t/x", "s"}, {"..", "s"}, {".t", "s"}, {"t x", "s"}, {strings.Repeat("t", 129), "s"},
		{"t", ""}, {"t", "a.b"}, {"t", "a/b"}, {"t", strings.Repeat("s", 129)}, {"t", "ü"},
	} {
		if _, err := e.st.NewWriter(ctx, tc.tenant, tc.id); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("NewWriter(%q, %q) = %v; want ErrInvalidArgument", tc.tenant, tc.id, err)
		}
		if _, err := e.st.Manifest(ctx, tc.tenant, tc.id); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Manifest(%q, %q) = %v; want ErrInvalidArgument", tc.tenant, tc.id, err)
		}
	}
	if _, err := e.st.GC(ctx, "t", -time.Second); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("GC(negative grace) = %v; want ErrInvalidArgument", err)
	}

	w, err := e.st.NewWriter(ctx, "tenant-a", "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	if err := w.AddFile(ctx, "a/b", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want error
	}{
		{"", errdefs.ErrInvalidArgument}, {"/abs", errdefs.ErrInvalidArgument}, {"../up", errdefs.ErrInvalidArgument},
		{"a/../b", errdefs.ErrInvalidArgument}, {"./a", errdefs.ErrInvalidArgument}, {"a//b", errdefs.ErrInvalidArgument},
		{"dir/", errdefs.ErrInvalidArgument}, {".", errdefs.ErrInvalidArgument}, {"a\\b", errdefs.ErrInvalidArgument},
		{"a\nb", errdefs.ErrInvalidArgument}, {strings.Repeat("n", snapshot.MaxFileNameSize+1), errdefs.ErrInvalidArgument},
		{"a/b", errdefs.ErrAlreadyExists},     // duplicate
		{"a", errdefs.ErrInvalidArgument},     // the directory of a/b
		{"a/b/c", errdefs.ErrInvalidArgument}, // under the file a/b
	} {
		if err := w.AddFile(ctx, tc.name, strings.NewReader("x")); !errors.Is(err, tc.want) {
			t.Errorf("AddFile(%q) = %v; want %v", tc.name, err, tc.want)
		}
	}
	// A rejected name leaves the Writer usable.
	if err := w.AddFile(ctx, "a/c", strings.NewReader("y")); err != nil {
		t.Errorf("AddFile after rejected names: %v", err)
	}
	if _, err := w.Commit(ctx, map[string]string{"": "empty key"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Commit(empty meta key) = %v; want ErrInvalidArgument", err)
	}
	if _, err := w.Commit(ctx, map[string]string{"k": strings.Repeat("v", 65<<10)}); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("Commit(huge meta) = %v; want ErrTooLarge", err)
	}
	m, err := w.Commit(ctx, map[string]string{"k": "v"})
	if err != nil {
		t.Fatalf("Commit after rejected meta: %v", err)
	}
	if len(m.Files) != 2 {
		t.Errorf("committed %d files; want 2", len(m.Files))
	}
}

func TestWriterLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.write(t, "tenant-a", "exists", map[string][]byte{"f": []byte("x")})
	if _, err := e.st.NewWriter(ctx, "tenant-a", "exists"); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("NewWriter(committed ID) = %v; want ErrAlreadyExists", err)
	}

	w, err := e.st.NewWriter(ctx, "tenant-a", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.NewWriter(ctx, "tenant-a", "s1"); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("NewWriter(ID being written) = %v; want ErrAlreadyExists", err)
	}
	w.Abort()
	w.Abort()
	if err := w.AddFile(ctx, "f", strings.NewReader("x")); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("AddFile after Abort = %v; want ErrFailedPrecondition", err)
	}
	if _, err := w.Commit(ctx, nil); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Commit after Abort = %v; want ErrFailedPrecondition", err)
	}
	if _, err := e.st.Manifest(ctx, "tenant-a", "s1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Manifest of aborted snapshot = %v; want ErrNotFound", err)
	}

	// Abort freed the ID.
	w, err = e.st.NewWriter(ctx, "tenant-a", "s1")
	if err != nil {
		t.Fatalf("NewWriter after Abort: %v", err)
	}
	if _, err := w.Commit(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(ctx, nil); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("second Commit = %v; want ErrFailedPrecondition", err)
	}
	w.Abort() // harmless after Commit
	if _, err := e.st.Manifest(ctx, "tenant-a", "s1"); err != nil {
		t.Errorf("Manifest after Abort following Commit: %v", err)
	}

	// A failing reader fails the Writer; nothing is committed.
	w, err = e.st.NewWriter(ctx, "tenant-a", "s2")
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err = w.AddFile(ctx, "f", io.MultiReader(bytes.NewReader(randomBytes(3, 3<<20)), iotestErrReader{boom}))
	if !errors.Is(err, boom) {
		t.Errorf("AddFile(failing reader) = %v; want the reader's error", err)
	}
	if err := w.AddFile(ctx, "g", strings.NewReader("x")); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("AddFile after a failure = %v; want ErrFailedPrecondition", err)
	}
	if _, err := w.Commit(ctx, nil); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Commit after a failure = %v; want ErrFailedPrecondition", err)
	}
	w.Abort()
	if _, err := e.st.Manifest(ctx, "tenant-a", "s2"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Manifest of failed snapshot = %v; want ErrNotFound", err)
	}

	// A canceled context fails AddFile.
	w, err = e.st.NewWriter(ctx, "tenant-a", "s3")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := w.AddFile(cctx, "f", bytes.NewReader(randomBytes(4, 2<<20))); !errors.Is(err, context.Canceled) {
		t.Errorf("AddFile(canceled) = %v; want context.Canceled", err)
	}
}

type iotestErrReader struct{ err error }

func (r iotestErrReader) Read([]byte) (int, error) { return 0, r.err }

// TestCommitRace has two Stores (as two processes would) write the same snapshot ID: one Commit
// wins, the other fails with ErrAlreadyExists, and the winner's snapshot is intact.
func TestCommitRace(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	other := e.newStore(t)
	w1, err := e.st.NewWriter(ctx, "tenant-a", "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Abort()
	w2, err := other.NewWriter(ctx, "tenant-a", "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Abort()
	for i, w := range []*snapshot.Writer{w1, w2} {
		if err := w.AddFile(ctx, "f", strings.NewReader(fmt.Sprint("writer ", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w1.Commit(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := w2.Commit(ctx, nil); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second Commit of one ID = %v; want ErrAlreadyExists", err)
	}
	if got, err := e.readFile(t, "tenant-a", "s1", "f"); err != nil || string(got) != "writer 0" {
		t.Errorf("ReadFile = %q, %v; want the first writer's content", got, err)
	}
}

func TestDedupIdentical(t *testing.T) {
	e := newEnv(t)
	data := memoryImage(10, 64<<20)
	m1 := e.write(t, "tenant-a", "s1", map[string][]byte{"checkpoint/pages.img": data})
	before := e.storedBytes(t)
	m2 := e.write(t, "tenant-a", "s2", map[string][]byte{"checkpoint/pages.img": data})
	added := e.storedBytes(t) - before
	t.Logf("first write: %d chunks, %d new, %d bytes stored for %d logical", m1.Stats.Chunks, m1.Stats.NewChunks, m1.Stats.NewStoredBytes, m1.Stats.LogicalBytes)
	t.Logf("identical rewrite: %d new chunks, %d new stored bytes; blob store grew by %d bytes (the manifest)", m2.Stats.NewChunks, m2.Stats.NewStoredBytes, added)
	if m2.Stats.NewChunks != 0 || m2.Stats.ReusedChunks != m2.Stats.Chunks {
		t.Errorf("identical rewrite stats = %+v; want no new chunks", m2.Stats)
	}
	if limit := int64(len(data)) / 100; added >= limit {
		t.Errorf("identical rewrite grew the blob store by %d bytes; want < 1%% (%d)", added, limit)
	}
	if m1.Stats.NewStoredBytes >= int64(len(data)) {
		t.Errorf("first write stored %d bytes for %d of memory-like data; want compression and zero-page dedup", m1.Stats.NewStoredBytes, len(data))
	}
	if got, err := e.readFile(t, "tenant-a", "s2", "checkpoint/pages.img"); err != nil || !bytes.Equal(got, data) {
		t.Errorf("ReadFile(rewrite) = %d bytes, %v; want the data", len(got), err)
	}
}

func TestDedupAfterChange(t *testing.T) {
	e := newEnv(t)
	data := randomBytes(11, 64<<20)
	m1 := e.write(t, "tenant-a", "s1", map[string][]byte{"pages.img": data})
	changed := bytes.Clone(data)
	copy(changed[32<<20:], randomBytes(12, 1<<20))
	m2 := e.write(t, "tenant-a", "s2", map[string][]byte{"pages.img": changed})
	t.Logf("64 MiB with 1 MiB changed in the middle: %d of %d chunks new, %.2f MiB stored (first write: %d chunks, %.2f MiB)",
		m2.Stats.NewChunks, m2.Stats.Chunks, float64(m2.Stats.NewStoredBytes)/(1<<20), m1.Stats.Chunks, float64(m1.Stats.NewStoredBytes)/(1<<20))
	if m2.Stats.NewChunks > 6 || m2.Stats.NewStoredBytes > 6<<20 {
		t.Errorf("a 1 MiB change added %d chunks, %d bytes; want only a few", m2.Stats.NewChunks, m2.Stats.NewStoredBytes)
	}
	// An insertion shifts everything after it; chunk boundaries resynchronize.
	inserted := append(append(bytes.Clone(data[:20<<20]), []byte("inserted bytes")...), data[20<<20:]...)
	m3 := e.write(t, "tenant-a", "s3", map[string][]byte{"pages.img": inserted})
	t.Logf("14 bytes inserted at 20 MiB: %d of %d chunks new, %.2f MiB stored", m3.Stats.NewChunks, m3.Stats.Chunks, float64(m3.Stats.NewStoredBytes)/(1<<20))
	if m3.Stats.NewChunks > 3 {
		t.Errorf("a 14-byte insertion added %d chunks; want at most 3", m3.Stats.NewChunks)
	}
	for id, want := range map[string][]byte{"s1": data, "s2": changed, "s3": inserted} {
		if got, err := e.readFile(t, "tenant-a", id, "pages.img"); err != nil || !bytes.Equal(got, want) {
			t.Errorf("ReadFile(%s) = %d bytes, %v; want the data", id, len(got), err)
		}
	}
}

// TestDedupScatteredPages measures the case memory images are about: pages dirtied all over.
func TestDedupScatteredPages(t *testing.T) {
	e := newEnv(t)
	const size, page = 64 << 20, 4 << 10
	data := memoryImage(20, size)
	m1 := e.write(t, "tenant-a", "s1", map[string][]byte{"pages.img": data})
	changed := bytes.Clone(data)
	dirty := randomBytes(21, size/page/100*page)
	for i := 0; i < len(dirty); i += page { // 1% of the pages, spread evenly
		off := (i / page) * 100 * page
		copy(changed[off:off+page], dirty[i:i+page])
	}
	m2 := e.write(t, "tenant-a", "s2", map[string][]byte{"pages.img": changed})
	t.Logf("64 MiB memory image, 1%% of pages dirtied evenly: %d of %d chunks new, %.2f MiB stored (first write %.2f MiB)",
		m2.Stats.NewChunks, m2.Stats.Chunks, float64(m2.Stats.NewStoredBytes)/(1<<20), float64(m1.Stats.NewStoredBytes)/(1<<20))
}

func TestConcurrentWriters(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	shared := memoryImage(30, 16<<20)
	const writers = 6
	var wg sync.WaitGroup
	want := make([][]byte, writers)
	errs := make([]error, writers)
	for i := range writers {
		want[i] = append(bytes.Clone(shared), randomBytes(uint64(40+i), 2<<20)...)
		wg.Go(func() {
			w, err := e.st.NewWriter(ctx, "tenant-a", fmt.Sprint("s", i))
			if err != nil {
				errs[i] = err
				return
			}
			defer w.Abort()
			if err := w.AddFile(ctx, "pages.img", bytes.NewReader(want[i])); err != nil {
				errs[i] = err
				return
			}
			_, errs[i] = w.Commit(ctx, nil)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	unique := map[string]bool{}
	for i := range writers {
		id := fmt.Sprint("s", i)
		if got, err := e.readFile(t, "tenant-a", id, "pages.img"); err != nil || !bytes.Equal(got, want[i]) {
			t.Errorf("ReadFile(%s) = %d bytes, %v; want the data", id, len(got), err)
		}
		m, err := e.st.Manifest(ctx, "tenant-a", id)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range m.Files[0].Chunks {
			unique[c.ID] = true
		}
	}
	if got := len(e.chunkFiles(t, "tenant-a")); got != len(unique) {
		t.Errorf("blob store holds %d chunks; want the %d distinct ones", got, len(unique))
	}
}

func TestRedaction(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	w, err := e.st.NewWriter(ctx, "tenant-a", "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	dek := e.dataKey(t, "tenant-a")
	var logged bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logged, nil))
	log.Info("objects", "store", e.st, "writer", w)
	for _, out := range []string{
		fmt.Sprintf("%v %+v %#v %s %x %q", e.st, e.st, e.st, e.st, e.st, e.st),
		fmt.Sprintf("%v %+v %#v %s %x %q", w, w, w, w, w, w),
		logged.String(),
	} {
		if !strings.Contains(out, "REDACTED") {
			t.Errorf("output %q does not say REDACTED", out)
		}
		for _, secret := range []string{string(dek), fmt.Sprintf("%x", dek), fmt.Sprint(dek)} {
			if strings.Contains(out, secret) {
				t.Errorf("output %q contains the data key", out)
			}
		}
	}
}

// TestNoPlaintextAtRest writes a marker in incompressible content, a file name and the metadata, and
// greps every file under the blob store for it.
func TestNoPlaintextAtRest(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	const marker = "AIRLOCK-PLAINTEXT-MARKER-7f3a9c"
	content := randomBytes(50, 4<<20)
	for off := 0; off+len(marker) < len(content); off += 64 << 10 {
		copy(content[off:], marker)
	}
	w, err := e.st.NewWriter(ctx, "tenant-a", "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	for name, r := range map[string]io.Reader{
		"random-" + marker: bytes.NewReader(content),
		"text":             strings.NewReader(strings.Repeat(marker+"\n", 1000)),
	} {
		if err := w.AddFile(ctx, name, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Commit(ctx, map[string]string{"note": marker}); err != nil {
		t.Fatal(err)
	}
	n := 0
	err = filepath.WalkDir(e.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		n++
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(data, []byte(marker)) || strings.Contains(path, marker) {
			t.Errorf("%s holds the marker in the clear", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 3 {
		t.Fatalf("found only %d files under the blob store", n)
	}
}
