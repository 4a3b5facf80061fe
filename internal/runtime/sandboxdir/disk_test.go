package sandboxdir

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// TestDiskOnAFullHost: a sandbox's disk keeps every write its file system accepted when the node's own
// file system fills up under it (the image's blocks are the node's from the start), so a directory and
// files written after the host is full read back whole once the kernel has dropped its caches; a disk
// larger than the room left is refused as resource exhausted (the positive control).
func TestDiskOnAFullHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs and a loop device")
	}
	host := t.TempDir()
	if err := unix.Mount("tmpfs", host, "tmpfs", 0, "size=96m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(host, unix.MNT_DETACH) })
	mnt := filepath.Join(host, "disk")
	if err := MakeDisk(filepath.Join(host, "disk.img"), mnt, 64<<20); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Unmount(mnt) })

	// The host fills to the last page.
	f, err := os.OpenFile(filepath.Join(host, "filler"), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for off, chunk := int64(0), int64(1<<20); chunk >= 4096; {
		if err := unix.Fallocate(int(f.Fd()), 0, off, chunk); err != nil {
			chunk /= 2
			continue
		}
		off += chunk
	}
	f.Close()

	// The sandbox writes a directory of files, about half its disk, and syncs it.
	want := map[string][]byte{}
	dir := filepath.Join(mnt, "upper", "work")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		name := filepath.Join(dir, fmt.Sprintf("f%03d", i))
		b := bytes.Repeat([]byte{byte(i)}, 150<<10)
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatalf("write %s on a full host: %v", name, err)
		}
		want[name] = b
	}
	if err := unix.Syncfs(fdOf(t, mnt)); err != nil {
		t.Fatalf("sync the sandbox's disk on a full host: %v", err)
	}
	// Read it back from the device, not the cache: unmount and mount the image again.
	if err := Unmount(mnt); err != nil {
		t.Fatal(err)
	}
	if err := remount(filepath.Join(host, "disk.img"), mnt); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read the directory back: %v", err)
	}
	if len(ents) != len(want) {
		t.Fatalf("%d files back; want %d", len(ents), len(want))
	}
	for name, b := range want {
		got, err := os.ReadFile(name)
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("%s back: %d bytes, %v; want %d bytes as written", name, len(got), err, len(b))
		}
	}

	// The positive control: no room for another disk of that size.
	err = MakeDisk(filepath.Join(host, "disk2.img"), filepath.Join(host, "disk2"), 64<<20)
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("MakeDisk on a full host = %v; want resource exhausted", err)
	}
	if _, err := os.Stat(filepath.Join(host, "disk2.img")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused disk left its image: %v", err)
	}
}

func fdOf(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return int(f.Fd())
}

// remount mounts the existing image img at dir again.
func remount(img, dir string) error {
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	loop, err := attachLoop(f)
	if err != nil {
		return err
	}
	defer loop.Close()
	return unix.Mount(loop.Name(), dir, "ext4", 0, "")
}
