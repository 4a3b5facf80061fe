package snapshot_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

const benchSize = 256 << 20

// BenchmarkWrite256MiB writes a 256 MiB memory image to an empty store: every chunk is new.
func BenchmarkWrite256MiB(b *testing.B) {
	data := memoryImage(100, benchSize)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var stored int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := newEnv(b)
		b.StartTimer()
		m := e.write(b, "tenant-a", "s1", map[string][]byte{"pages.img": data})
		stored = m.Stats.NewStoredBytes
	}
	b.ReportMetric(float64(stored)/float64(len(data)), "stored/logical")
}

// BenchmarkRewriteUnchanged writes the same 256 MiB memory image again as new snapshots: every chunk
// is found stored.
func BenchmarkRewriteUnchanged(b *testing.B) {
	data := memoryImage(101, benchSize)
	e := newEnv(b)
	e.write(b, "tenant-a", "base", map[string][]byte{"pages.img": data})
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if m := e.write(b, "tenant-a", fmt.Sprint("s", i), map[string][]byte{"pages.img": data}); m.Stats.NewChunks != 0 {
			b.Fatalf("rewrite stored %d new chunks", m.Stats.NewChunks)
		}
	}
}

// BenchmarkRestore restores a 256 MiB memory image to a directory.
func BenchmarkRestore(b *testing.B) {
	data := memoryImage(102, benchSize)
	e := newEnv(b)
	e.write(b, "tenant-a", "s1", map[string][]byte{"checkpoint/pages.img": data})
	dir := b.TempDir()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out := filepath.Join(dir, fmt.Sprint(i))
		if err := e.st.Restore(b.Context(), "tenant-a", "s1", out); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if got, err := os.ReadFile(filepath.Join(out, "checkpoint/pages.img")); err != nil || !bytes.Equal(got, data) {
			b.Fatalf("restored file: %d bytes, %v", len(got), err)
		}
		os.RemoveAll(out)
		b.StartTimer()
	}
}

// BenchmarkReadFile reads a 256 MiB memory image to io.Discard, without the file system's cost.
func BenchmarkReadFile(b *testing.B) {
	data := memoryImage(103, benchSize)
	e := newEnv(b)
	e.write(b, "tenant-a", "s1", map[string][]byte{"pages.img": data})
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := e.st.ReadFile(b.Context(), "tenant-a", "s1", "pages.img", io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}
