package snapshot_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/blob/local"
	keyslocal "github.com/airlockrun/airlock/internal/keys/local"
	"github.com/airlockrun/airlock/internal/snapshot"
)

// env is a Store over a real local blob store and a real local keyring, in a temporary directory.
type env struct {
	st      *snapshot.Store
	blobs   *local.Store
	keyring *keyslocal.Keyring
	// root is the blob store's directory.
	root string
}

func newEnv(tb testing.TB) *env {
	tb.Helper()
	dir := tb.TempDir()
	e := &env{root: filepath.Join(dir, "blobs")}
	var err error
	if e.blobs, err = local.New(e.root); err != nil {
		tb.Fatal(err)
	}
	if e.keyring, err = keyslocal.New(filepath.Join(dir, "keys")); err != nil {
		tb.Fatal(err)
	}
	e.st = e.newStore(tb)
	return e
}

// newStore returns another Store over the same blobs and keys, as another process would have.
func (e *env) newStore(tb testing.TB) *snapshot.Store {
	tb.Helper()
	st, err := snapshot.New(snapshot.Config{Blobs: e.blobs, Keys: e.keyring})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// write writes a snapshot of files (name → content, added in name order) and returns its manifest.
func (e *env) write(tb testing.TB, tenant, id string, files map[string][]byte) snapshot.Manifest {
	tb.Helper()
	return writeWith(tb, e.st, tenant, id, files)
}

func writeWith(tb testing.TB, st *snapshot.Store, tenant, id string, files map[string][]byte) snapshot.Manifest {
	tb.Helper()
	ctx := tb.Context()
	w, err := st.NewWriter(ctx, tenant, id)
	if err != nil {
		tb.Fatalf("NewWriter(%s, %s): %v", tenant, id, err)
	}
	defer w.Abort()
	for _, name := range sortedKeys(files) {
		if err := w.AddFile(ctx, name, bytes.NewReader(files[name])); err != nil {
			tb.Fatalf("AddFile(%s): %v", name, err)
		}
	}
	m, err := w.Commit(ctx, map[string]string{"by": "test"})
	if err != nil {
		tb.Fatalf("Commit(%s): %v", id, err)
	}
	return m
}

func (e *env) readFile(tb testing.TB, tenant, id, name string) ([]byte, error) {
	tb.Helper()
	var buf bytes.Buffer
	err := e.st.ReadFile(tb.Context(), tenant, id, name, &buf)
	return buf.Bytes(), err
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// chunkFile returns the file of a chunk blob in the local blob store.
func (e *env) chunkFile(tenant, id string) string {
	return filepath.Join(e.root, "tenants", tenant, "chunks", id[:2], id+local.Suffix)
}

func (e *env) manifestFile(tenant, id string) string {
	return filepath.Join(e.root, "tenants", tenant, "snapshots", id+local.Suffix)
}

// chunkFiles lists the chunk blobs of tenant in the blob store's directory.
func (e *env) chunkFiles(tb testing.TB, tenant string) []string {
	tb.Helper()
	var out []string
	dir := filepath.Join(e.root, "tenants", tenant, "chunks")
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if os.IsNotExist(err) {
			return filepath.SkipDir
		}
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && strings.HasSuffix(path, local.Suffix) {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// storedBytes is the total size of the files under the blob store's directory.
func (e *env) storedBytes(tb testing.TB) int64 {
	tb.Helper()
	var n int64
	err := filepath.WalkDir(e.root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// age sets the modification time of files to d ago.
func age(tb testing.TB, d time.Duration, files ...string) {
	tb.Helper()
	t := time.Now().Add(-d)
	for _, f := range files {
		if err := os.Chtimes(f, t, t); err != nil {
			tb.Fatal(err)
		}
	}
}

// randomBytes returns n pseudo-random bytes determined by seed.
func randomBytes(seed uint64, n int) []byte {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	b := make([]byte, n)
	rand.NewChaCha8(s).Read(b)
	return b
}

// memoryImage returns n bytes (a multiple of 4 KiB) that look like a process's memory: runs of zero
// pages, runs of random pages (heap, compressed data), and runs of low-entropy pages (code, text).
func memoryImage(seed uint64, n int) []byte {
	const page = 4 << 10
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	src := randomBytes(seed+1, n)
	for off := 0; off < n; {
		run := (1 + r.IntN(64)) * page
		end := min(off+run, n)
		switch kind := r.IntN(10); {
		case kind < 4: // zero pages
		case kind < 8: // random pages
			copy(b[off:end], src[off:end])
		default: // low entropy: a few distinct words
			var pat [page]byte
			for i := 0; i < page; i += 8 {
				binary.LittleEndian.PutUint64(pat[i:], uint64(r.IntN(16))*0x0101010101010101)
			}
			for i := off; i < end; i += page {
				copy(b[i:], pat[:])
			}
		}
		off = end
	}
	return b
}

// dataKey returns tenant's data key in the clear, unwrapped from the blob store with the keyring.
func (e *env) dataKey(tb testing.TB, tenant string) []byte {
	tb.Helper()
	data, err := e.blobs.Get(tb.Context(), "tenants/"+tenant+"/datakey")
	if err != nil {
		tb.Fatal(err)
	}
	var rec struct {
		KeyID   string `json:"key_id"`
		Wrapped []byte `json:"wrapped"`
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		tb.Fatal(err)
	}
	dek, err := e.keyring.UnwrapKey(tb.Context(), tenant, rec.KeyID, rec.Wrapped)
	if err != nil {
		tb.Fatal(err)
	}
	return dek
}
