package snapshot

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockrun/airlock/internal/blob/local"
	keyslocal "github.com/airlockrun/airlock/internal/keys/local"
)

// TestSegmentedFile: a large file read at offsets is cut in segments in parallel; it reads back whole,
// and a later snapshot of it with a change in the middle stores only the chunks near the change.
func TestSegmentedFile(t *testing.T) {
	old := segmentSize
	segmentSize = 1 << 20
	t.Cleanup(func() { segmentSize = old })
	dir := t.TempDir()
	blobs, err := local.New(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := keyslocal.New(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := New(Config{Blobs: blobs, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 9<<20+12345)
	for i := range data {
		if (i/4096)%3 != 0 { // a third of the pages zero, as memory has
			data[i] = byte(rng.Uint32())
		}
	}
	write := func(id string, content []byte) Manifest {
		t.Helper()
		p := filepath.Join(dir, id)
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		w, err := st.NewWriter(context.Background(), "tn_a", id)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Abort()
		if err := w.AddFile(context.Background(), "memory/pages.img", f); err != nil {
			t.Fatal(err)
		}
		m, err := w.Commit(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m1 := write("s1", data)
	var got bytes.Buffer
	if err := st.ReadFile(context.Background(), "tn_a", "s1", "memory/pages.img", &got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), data) || m1.Files[0].Size != int64(len(data)) {
		t.Fatalf("read back %d bytes (manifest %d); want the %d written", got.Len(), m1.Files[0].Size, len(data))
	}
	changed := bytes.Clone(data)
	for i := 4<<20 + 100; i < 4<<20+100+64<<10; i++ {
		changed[i] ^= 0xff
	}
	m2 := write("s2", changed)
	if m2.Stats.NewChunks > 3 || m2.Stats.Chunks != m1.Stats.Chunks {
		t.Errorf("a 64 KiB change stored %d new chunks of %d (first write %d); want at most 3", m2.Stats.NewChunks, m2.Stats.Chunks, m1.Stats.Chunks)
	}
	got.Reset()
	if err := st.ReadFile(context.Background(), "tn_a", "s2", "memory/pages.img", &got); err != nil || !bytes.Equal(got.Bytes(), changed) {
		t.Fatalf("second snapshot reads back wrong: %v", err)
	}
	t.Logf("first write %d chunks; the change stored %d new (%d bytes)", m1.Stats.Chunks, m2.Stats.NewChunks, m2.Stats.NewStoredBytes)
}
