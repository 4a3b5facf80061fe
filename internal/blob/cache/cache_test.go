package cache_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/blob"
	"github.com/airlockrun/airlock/internal/blob/blobtest"
	"github.com/airlockrun/airlock/internal/blob/cache"
	"github.com/airlockrun/airlock/internal/blob/local"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// remote is a blob.Store (and not a blob.Creator) that counts the Gets it is asked and can fail or
// hold them.
type remote struct {
	blob.Store
	// hook, if set, runs before each Get; an error it returns is Get's.
	hook func(ctx context.Context, key string) error

	mu   sync.Mutex
	gets map[string]int // guarded by mu
}

func newRemote(t *testing.T) *remote {
	t.Helper()
	s, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &remote{Store: s, gets: map[string]int{}}
}

func (r *remote) Get(ctx context.Context, key string) ([]byte, error) {
	r.mu.Lock()
	r.gets[key]++
	r.mu.Unlock()
	if r.hook != nil {
		if err := r.hook(ctx, key); err != nil {
			return nil, err
		}
	}
	return r.Store.Get(ctx, key)
}

// getsOf reports how many times key was fetched.
func (r *remote) getsOf(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gets[key]
}

func (r *remote) put(t *testing.T, key string, data []byte) {
	t.Helper()
	if err := r.Store.Put(t.Context(), key, data); err != nil {
		t.Fatalf("remote Put(%q): %v", key, err)
	}
}

func all(string) bool { return true }

func chunks(key string) bool { return strings.HasPrefix(key, "chunks/") }

func newCache(t *testing.T, cfg cache.Config) cache.Store {
	t.Helper()
	c, err := cache.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func mustGet(t *testing.T, s blob.Store, key string, want []byte) {
	t.Helper()
	got, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%q) = %q; want %q", key, got, want)
	}
}

func wantGets(t *testing.T, r *remote, key string, want int) {
	t.Helper()
	if got := r.getsOf(key); got != want {
		t.Errorf("remote Gets of %q = %d; want %d", key, got, want)
	}
}

func wantStats(t *testing.T, c cache.Store, want cache.Stats) {
	t.Helper()
	if diff := cmp.Diff(want, c.Stats()); diff != "" {
		t.Errorf("Stats mismatch (-want +got):\n%s", diff)
	}
}

// idOf and fileOf follow the layout the package documents.
func idOf(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func fileOf(dir, key string, data []byte) string {
	id := idOf(key)
	crc := crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))
	return filepath.Join(dir, id[:2], fmt.Sprintf("%s-%d-%08x", id, len(data), crc))
}

// held reports whether dir holds a file for key.
func held(t *testing.T, dir, key string) bool {
	t.Helper()
	id := idOf(key)
	m, err := filepath.Glob(filepath.Join(dir, id[:2], id+"-*"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m) > 0
}

func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cacheable func(string) bool
		maxBytes  int64
		creator   bool
	}{
		{"PassThrough", nil, 1 << 30, true},
		{"CacheAll", all, 1 << 30, true},
		{"CacheAllEvictingAlways", all, 64, true},
		{"NoCreator", all, 1 << 30, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			blobtest.Run(t, func(t *testing.T) blob.Store {
				var r blob.Store = newRemote(t)
				if tc.creator {
					r = r.(*remote).Store // the local store itself
				}
				return newCache(t, cache.Config{Remote: r, Dir: t.TempDir(), MaxBytes: tc.maxBytes, Cacheable: tc.cacheable})
			})
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	r := newRemote(t)
	for _, tc := range []struct {
		name string
		cfg  cache.Config
	}{
		{"NoRemote", cache.Config{Dir: t.TempDir(), MaxBytes: 1}},
		{"NoDir", cache.Config{Remote: r, MaxBytes: 1}},
		{"ZeroMaxBytes", cache.Config{Remote: r, Dir: t.TempDir()}},
		{"NegativeMaxBytes", cache.Config{Remote: r, Dir: t.TempDir(), MaxBytes: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := cache.New(tc.cfg); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("New = %v; want ErrInvalidArgument", err)
			}
		})
	}
}

func TestCreatorFollowsRemote(t *testing.T) {
	r := newRemote(t)
	for _, tc := range []struct {
		name   string
		remote blob.Store
	}{
		{"Creator", r.Store},
		{"NotCreator", r},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, cache.Config{Remote: tc.remote, Dir: t.TempDir(), MaxBytes: 1})
			_, want := tc.remote.(blob.Creator)
			if _, got := c.(blob.Creator); got != want {
				t.Errorf("cache is a blob.Creator: %v; want %v, as its remote", got, want)
			}
		})
	}
}

func TestLayout(t *testing.T) {
	r := newRemote(t)
	dir := filepath.Join(t.TempDir(), "cache")
	c := newCache(t, cache.Config{Remote: r, Dir: dir, MaxBytes: 1 << 20, Cacheable: all})
	key, data := "tenants/t1/chunks/ab/abcdef", []byte("ciphertext")
	r.put(t, key, data)
	mustGet(t, c, key, data)
	got := map[string]fs.FileMode{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		got[path] = info.Mode()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	file := fileOf(dir, key, data)
	want := map[string]fs.FileMode{
		dir:                fs.ModeDir | 0o700,
		filepath.Dir(file): fs.ModeDir | 0o700,
		file:               0o600,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("files in the cache directory (-want +got):\n%s", diff)
	}
}

func TestHits(t *testing.T) {
	r := newRemote(t)
	dir := t.TempDir()
	c := newCache(t, cache.Config{Remote: r, Dir: dir, MaxBytes: 1 << 20, Cacheable: chunks})
	objects := map[string][]byte{"chunks/a": []byte("aaa"), "chunks/b": []byte("bbbb"), "meta": []byte("m")}
	for k, v := range objects {
		if err := c.Put(t.Context(), k, v); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		for k, v := range objects {
			mustGet(t, c, k, v)
		}
	}
	wantGets(t, r, "chunks/a", 1)
	wantGets(t, r, "chunks/b", 1)
	wantGets(t, r, "meta", 3) // not cacheable
	wantStats(t, c, cache.Stats{Hits: 4, Misses: 2, Objects: 2, Bytes: 7})
	if held(t, dir, "meta") {
		t.Error("the cache holds a key Cacheable rejects")
	}
}

func TestRemoteErrorsPassThrough(t *testing.T) {
	r := newRemote(t)
	errDown := fmt.Errorf("s3 is down: %w", errdefs.ErrUnavailable)
	r.hook = func(context.Context, string) error { return errDown }
	c := newCache(t, cache.Config{Remote: r, Dir: t.TempDir(), MaxBytes: 1 << 20, Cacheable: chunks})
	for _, key := range []string{"chunks/a", "meta"} {
		if _, err := c.Get(t.Context(), key); err != errDown {
			t.Errorf("Get(%q) = %v; want the remote's error %v", key, err, errDown)
		}
	}
	r.hook = nil
	_, err := c.Get(t.Context(), "chunks/missing")
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "chunks/missing") {
		t.Errorf("Get(missing) = %v; want the remote's ErrNotFound naming the key", err)
	}
}

// TestWritesDropCachedCopy checks that Put, Create and Delete drop a cached copy, so that this node
// reads its own writes.
func TestWritesDropCachedCopy(t *testing.T) {
	r := newRemote(t)
	dir := t.TempDir()
	c := newCache(t, cache.Config{Remote: r.Store, Dir: dir, MaxBytes: 1 << 20, Cacheable: all})
	ctx := t.Context()
	r.put(t, "k", []byte("v1"))
	mustGet(t, c, "k", []byte("v1"))

	if err := c.Put(ctx, "k", []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if held(t, dir, "k") {
		t.Error("Put left a cached copy")
	}
	mustGet(t, c, "k", []byte("v2"))

	if err := c.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if held(t, dir, "k") {
		t.Error("Delete left a cached copy")
	}
	if _, err := c.Get(ctx, "k"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get after Delete = %v; want ErrNotFound", err)
	}

	if err := c.(blob.Creator).Create(ctx, "k", []byte("v3")); err != nil {
		t.Fatal(err)
	}
	mustGet(t, c, "k", []byte("v3"))
	wantStats(t, c, cache.Stats{Misses: 4, Objects: 1, Bytes: 2})
}

// TestStatAsksRemote checks the documented choice: Stat does not answer from the cache, Get does.
func TestStatAsksRemote(t *testing.T) {
	r := newRemote(t)
	c := newCache(t, cache.Config{Remote: r, Dir: t.TempDir(), MaxBytes: 1 << 20, Cacheable: all})
	r.put(t, "k", []byte("v"))
	mustGet(t, c, "k", []byte("v"))
	if err := r.Delete(t.Context(), "k"); err != nil { // as another node's GC would
		t.Fatal(err)
	}
	if _, err := c.Stat(t.Context(), "k"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Stat of an object deleted remotely = %v; want ErrNotFound", err)
	}
	mustGet(t, c, "k", []byte("v"))
}

func TestEvictionOrder(t *testing.T) {
	r := newRemote(t)
	dir := t.TempDir()
	c := newCache(t, cache.Config{Remote: r, Dir: dir, MaxBytes: 30, Cacheable: all})
	val := func(k string) []byte { return bytes.Repeat([]byte(k), 10) }
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		r.put(t, k, val(k))
	}
	step := func(k string, wantHeld []string) {
		t.Helper()
		mustGet(t, c, k, val(k))
		var got []string
		for _, k := range []string{"a", "b", "c", "d", "e"} {
			if held(t, dir, k) {
				got = append(got, k)
			}
		}
		if !cmp.Equal(got, wantHeld) {
			t.Fatalf("after Get(%q) the cache holds %q; want %q", k, got, wantHeld)
		}
	}
	step("a", []string{"a"})
	step("b", []string{"a", "b"})
	step("c", []string{"a", "b", "c"})
	step("a", []string{"a", "b", "c"}) // a is now the most recently used
	step("d", []string{"a", "c", "d"}) // b was the least
	step("c", []string{"a", "c", "d"}) // order, oldest first: a d c
	step("e", []string{"c", "d", "e"}) // a goes
	step("b", []string{"b", "c", "e"}) // d goes
	wantGets(t, r, "a", 1)
	wantGets(t, r, "b", 2)
	wantStats(t, c, cache.Stats{Hits: 2, Misses: 6, Evictions: 3, Objects: 3, Bytes: 30})
}

func TestTooLargeIsNotCached(t *testing.T) {
	r := newRemote(t)
	dir := t.TempDir()
	c := newCache(t, cache.Config{Remote: r, Dir: dir, MaxBytes: 10, Cacheable: all})
	r.put(t, "small", []byte("0123456789"))
	r.put(t, "large", []byte("0123456789A"))
	mustGet(t, c, "small", []byte("0123456789"))
	for range 2 {
		mustGet(t, c, "large", []byte("0123456789A"))
	}
	wantGets(t, r, "large", 2)
	if held(t, dir, "large") || !held(t, dir, "small") {
		t.Error("an object larger than MaxBytes was cached or evicted a smaller one")
	}
	wantStats(t, c, cache.Stats{Misses: 3, Objects: 1, Bytes: 10})
}

// TestDamagedFile damages a cached file as a crash or bad disk might; Get must still return the
// object, fetched again, and cache it anew.
func TestDamagedFile(t *testing.T) {
	data := []byte("the bytes of a chunk")
	for _, tc := range []struct {
		name   string
		damage func(path string) error
	}{
		{"Truncated", func(p string) error { return os.Truncate(p, 5) }},
		{"Empty", func(p string) error { return os.Truncate(p, 0) }},
		{"Longer", func(p string) error { return os.WriteFile(p, append(bytes.Clone(data), 'x'), 0o600) }},
		{"FlippedByte", func(p string) error {
			b := bytes.Clone(data)
			b[3] ^= 1
			return os.WriteFile(p, b, 0o600)
		}},
		{"Removed", os.Remove},
		{"Unreadable", func(p string) error {
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Mkdir(p, 0o700) // reading a directory fails
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRemote(t)
			dir := t.TempDir()
			c := newCache(t, cache.Config{Remote: r, Dir: dir, MaxBytes: 1 << 20, Cacheable: all})
			r.put(t, "k", data)
			mustGet(t, c, "k", data)
			if err := tc.damage(fileOf(dir, "k", data)); err != nil {
				t.Fatal(err)
			}
			mustGet(t, c, "k", data)
			wantGets(t, r, "k", 2)
			mustGet(t, c, "k", data)
			wantGets(t, r, "k", 2)
			if got, err := os.ReadFile(fileOf(dir, "k", data)); err != nil || !bytes.Equal(got, data) {
				t.Errorf("cached file after the damage = %q, %v; want %q", got, err, data)
			}
			wantStats(t, c, cache.Stats{Hits: 1, Misses: 2, Objects: 1, Bytes: int64(len(data))})
		})
	}
}

func TestConcurrentGets(t *testing.T) {
	r := newRemote(t)
	var inFlight, maxInFlight atomic.Int32
	r.hook = func(context.Context, string) error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		time.Sleep(time.Millisecond) // widen the window for Gets of one key to meet
		return nil
	}
	c := newCache(t, cache.Config{Remote: r, Dir: t.TempDir(), MaxBytes: 1 << 20, Cacheable: all})
	const keys, readers = 8, 32
	want := map[string][]byte{}
	var order []string
	for i := range keys {
		k := fmt.Sprintf("chunks/%d", i)
		want[k] = bytes.Repeat([]byte{byte(i)}, 1000+i)
		r.put(t, k, want[k])
		order = append(order, k)
	}
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for i := range readers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 0))
			ks := append([]string(nil), order...)
			rng.Shuffle(len(ks), func(a, b int) { ks[a], ks[b] = ks[b], ks[a] })
			for _, k := range ks {
				got, err := c.Get(t.Context(), k)
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, want[k]) {
					errs <- fmt.Errorf("Get(%q) returned %d wrong bytes", k, len(got))
					return
				}
				got[0] ^= 0xff // the caller owns the slice; no other Get may see this
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, k := range order {
		wantGets(t, r, k, 1)
	}
	st := c.Stats()
	if st.Hits+st.Misses != keys*readers || st.Objects != keys {
		t.Errorf("Stats = %+v; want %d Gets and %d objects", st, keys*readers, keys)
	}
	t.Logf("at most %d remote fetches ran at once", maxInFlight.Load())
}

// TestCanceledGetDoesNotFailOthers cancels the Get whose fetch another Get waits for: the other Get
// must fetch anew rather than fail.
func TestCanceledGetDoesNotFailOthers(t *testing.T) {
	r := newRemote(t)
	entered := make(chan struct{})
	var first atomic.Bool
	r.hook = func(ctx context.Context, _ string) error {
		if first.CompareAndSwap(false, true) {
			close(entered)
			<-ctx.Done()
			return fmt.Errorf("fetch: %w", ctx.Err())
		}
		return nil
	}
	c := newCache(t, cache.Config{Remote: r, Dir: t.TempDir(), MaxBytes: 1 << 20, Cacheable: all})
	r.put(t, "k", []byte("v"))

	ctx, cancel := context.WithCancel(t.Context())
	firstErr := make(chan error)
	go func() {
		_, err := c.Get(ctx, "k")
		firstErr <- err
	}()
	<-entered
	type result struct {
		data []byte
		err  error
	}
	second := make(chan result)
	go func() {
		data, err := c.Get(t.Context(), "k")
		second <- result{data, err}
	}()
	// Give the second Get time to join the first's fetch. Should it not have, it fetches on its own
	// and the test holds all the same.
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-firstErr; !errors.Is(err, context.Canceled) {
		t.Errorf("canceled Get = %v; want context.Canceled", err)
	}
	if res := <-second; res.err != nil || string(res.data) != "v" {
		t.Errorf("Get waiting for a canceled Get = %q, %v; want %q", res.data, res.err, "v")
	}
	mustGet(t, c, "k", []byte("v"))
	wantGets(t, r, "k", 2)
}

// TestReopen checks that New finds what an earlier Store cached, ranks it by modification time and
// cleans up what a crash leaves behind.
func TestReopen(t *testing.T) {
	r := newRemote(t)
	dir := t.TempDir()
	c1 := newCache(t, cache.Config{Remote: r, Dir: dir, MaxBytes: 1 << 20, Cacheable: all})
	val := func(k string) []byte { return bytes.Repeat([]byte(k), 10) }
	now := time.Now()
	for _, k := range []string{"a", "b", "c"} {
		r.put(t, k, val(k))
		mustGet(t, c1, k, val(k))
	}
	// Recency, oldest first: a c b.
	for k, age := range map[string]time.Duration{"a": 3 * time.Hour, "c": 2 * time.Hour, "b": time.Hour} {
		if err := os.Chtimes(fileOf(dir, k, val(k)), now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	// What a crash leaves: a temporary file, a file shorter than its name says and an older copy of c.
	aDir := filepath.Dir(fileOf(dir, "a", val("a")))
	tmp := filepath.Join(aDir, ".tmp-"+idOf("x")+"-0123456789abcdef")
	torn := fileOf(dir, "torn", []byte("full length"))
	oldC := fileOf(dir, "c", []byte("CCCCCCCCCC"))
	stranger := filepath.Join(dir, "README")
	for path, data := range map[string]string{tmp: "half", torn: "full", oldC: "CCCCCCCCCC", stranger: "not the cache's"} {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(oldC, now.Add(-4*time.Hour), now.Add(-4*time.Hour)); err != nil {
		t.Fatal(err)
	}

	c2 := newCache(t, cache.Config{Remote: r, Dir: dir, MaxBytes: 20, Cacheable: all})
	wantStats(t, c2, cache.Stats{Evictions: 1, Objects: 2, Bytes: 20})
	for _, path := range []string{tmp, torn, oldC, fileOf(dir, "a", val("a"))} {
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after New: %v; want it removed", path, err)
		}
	}
	if _, err := os.Lstat(stranger); err != nil {
		t.Errorf("a file not of the cache's layout: %v; want it left alone", err)
	}
	for _, k := range []string{"b", "c"} {
		mustGet(t, c2, k, val(k))
		wantGets(t, r, k, 1)
	}
	mustGet(t, c2, "a", val("a"))
	wantGets(t, r, "a", 2)
}

// TestWriteFailure makes the cache's directory for a key unusable: Get must still return the object
// and log a warning.
func TestWriteFailure(t *testing.T) {
	var logs syncBuffer
	r := newRemote(t)
	dir := t.TempDir()
	c := newCache(t, cache.Config{
		Remote: r, Dir: dir, MaxBytes: 1 << 20, Cacheable: all,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	r.put(t, "k", []byte("v"))
	blocker := filepath.Join(dir, idOf("k")[:2])
	if err := os.WriteFile(blocker, nil, 0o600); err != nil { // a file where a directory should be
		t.Fatal(err)
	}
	mustGet(t, c, "k", []byte("v"))
	if !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("log after a failed cache write = %q; want a warning", logs.String())
	}
	wantStats(t, c, cache.Stats{Misses: 1})

	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	mustGet(t, c, "k", []byte("v"))
	mustGet(t, c, "k", []byte("v"))
	wantGets(t, r, "k", 2)
}

// TestNoEscapeThroughSymlink plants a link from the cache directory to another: the cache must not
// write through it.
func TestNoEscapeThroughSymlink(t *testing.T) {
	r := newRemote(t)
	dir, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, idOf("k")[:2])); err != nil {
		t.Fatal(err)
	}
	c := newCache(t, cache.Config{Remote: r, Dir: dir, MaxBytes: 1 << 20, Cacheable: all})
	r.put(t, "k", []byte("v"))
	mustGet(t, c, "k", []byte("v"))
	mustGet(t, c, "k", []byte("v"))
	des, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(des) != 0 {
		t.Errorf("the cache wrote %d files outside its directory", len(des))
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
