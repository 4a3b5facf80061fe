package sandboxdir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
)

func TestParseMemoryStat(t *testing.T) {
	got, err := ParseMemoryStat([]byte("cache 4096\nrss 8192\n\ntotal_cache 12288\ntotal_inactive_file 18446744073709551615\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"cache": 4096, "rss": 8192, "total_cache": 12288, "total_inactive_file": 1<<63 - 1}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ParseMemoryStat (-want +got):\n%s", d)
	}
	for _, bad := range []string{"cache\n", "cache 1 2\n", "cache -1\n", "cache 0x10\n"} {
		if _, err := ParseMemoryStat([]byte(bad)); err == nil {
			t.Errorf("ParseMemoryStat(%q) succeeded; want an error", bad)
		}
	}
}

// TestDiskUsage: a mounted disk's use is counted and grows with what is written; a directory that is
// not a mount point (a disk unmounted, or never mounted) and a link in the disk's place are not found,
// never the node's own file system counted as the sandbox's.
func TestDiskUsage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a loop device")
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "disk")
	if err := MakeDisk(filepath.Join(dir, "disk.img"), mnt, 32<<20); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Unmount(mnt) })
	used, total, err := DiskUsage(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if total > 32<<20 || total < 28<<20 || used < 0 || used > 1<<20 {
		t.Errorf("an empty 32 MiB disk: used %d of %d", used, total)
	}
	if err := os.WriteFile(filepath.Join(mnt, "f"), make([]byte, 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	used2, _, err := DiskUsage(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if d := used2 - used; d < 8<<20 || d > 9<<20 {
		t.Errorf("an 8 MiB file grew the disk's use by %d bytes", d)
	}

	if err := os.Symlink(mnt, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "plain"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, "link"), filepath.Join(dir, "plain"), filepath.Join(dir, "none")} {
		if _, _, err := DiskUsage(p); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("DiskUsage(%s): %v; want not found", filepath.Base(p), err)
		}
	}
}

// BenchmarkStats is one reading of a sandbox, what the node's sampler does for each sandbox every 5 s:
// here of the root cgroup (its files are a sandbox's, its memory.stat the costliest) and a mounted disk.
func BenchmarkStats(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root to mount a loop device")
	}
	dir := b.TempDir()
	mnt := filepath.Join(dir, "disk")
	if err := MakeDisk(filepath.Join(dir, "disk.img"), mnt, 32<<20); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = Unmount(mnt) })
	for b.Loop() {
		if _, err := Stats("", mnt); err != nil {
			b.Fatal(err)
		}
	}
}
