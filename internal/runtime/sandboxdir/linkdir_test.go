package sandboxdir

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"golang.org/x/sys/unix"
)

// TestTouchWakeOnAFullDisk: waking a quiesced daemon changes the wake file even with not a page left on
// its file system (it renames the spare made beforehand), again and again once space is back; without a
// spare a full disk refuses the wake (the positive control).
func TestTouchWakeOnAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	d := Dir(filepath.Join(mnt, "sb_1"))
	if err := os.Mkdir(string(d), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := d.MakeControlDir(0); err != nil {
		t.Fatal(err)
	}
	wake := filepath.Join(d.Control(), proto.ControlWake)
	read := func() []byte {
		t.Helper()
		b, err := os.ReadFile(wake)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	fill := func() {
		t.Helper()
		f, err := os.OpenFile(filepath.Join(mnt, "filler"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for {
			if _, err := f.Write(make([]byte, 4096)); err != nil {
				if !errors.Is(err, unix.ENOSPC) {
					t.Fatal(err)
				}
				return
			}
		}
	}
	before := read()
	fill()
	if err := d.TouchWake(); err != nil {
		t.Fatalf("TouchWake on a full disk: %v", err)
	}
	after := read()
	if bytes.Equal(before, after) {
		t.Fatalf("the wake file did not change: %q", after)
	}
	// The page of the wake file it replaced held the next spare; with it spent, every wake still goes.
	if err := d.TouchWake(); err != nil || bytes.Equal(after, read()) {
		t.Fatalf("a second TouchWake on the full disk: %v, wake file %q", err, read())
	}
	// Without a spare, a full disk refuses the wake (the positive control).
	if err := os.Remove(filepath.Join(d.Control(), wakeSpare)); err != nil {
		t.Fatal(err)
	}
	fill()
	if err := d.TouchWake(); !errors.Is(err, unix.ENOSPC) {
		t.Errorf("TouchWake on a full disk, no spare = %v; want no space left", err)
	}
	if err := os.Remove(filepath.Join(mnt, "filler")); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		prev := read()
		if err := d.TouchWake(); err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(prev, read()) {
			t.Fatalf("the wake file did not change: %q", prev)
		}
	}
}
