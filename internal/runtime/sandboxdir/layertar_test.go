package sandboxdir

import (
	"archive/tar"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestLayerTarRoundTrip(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: whiteouts are character devices and opaque dirs need trusted.* xattrs")
	}
	src, dst := t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "home/user/deep"), 0o750))
	must(os.WriteFile(filepath.Join(src, "home/user/a.txt"), []byte("hello"), 0o640))
	must(os.Link(filepath.Join(src, "home/user/a.txt"), filepath.Join(src, "home/user/deep/hard")))
	must(os.Symlink("../a.txt", filepath.Join(src, "home/user/deep/sym")))
	must(os.WriteFile(filepath.Join(src, "home/user/empty"), nil, 0o600))
	must(unix.Mknod(filepath.Join(src, "home/user/whiteout"), unix.S_IFCHR|0o000, 0))
	// A socket file a process left behind (bound, then gone).
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	must(err)
	must(unix.Bind(sock, &unix.SockaddrUnix{Name: filepath.Join(src, "home/user/app.sock")}))
	unix.Close(sock)
	must(os.Chown(filepath.Join(src, "home/user/app.sock"), 1000, 1000))
	must(unix.Setxattr(filepath.Join(src, "home/user/deep"), "trusted.overlay.opaque", []byte("y"), 0))
	must(os.Chown(filepath.Join(src, "home/user/a.txt"), 1000, 1000))
	when := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	must(os.Chtimes(filepath.Join(src, "home/user/a.txt"), when, when))
	must(os.Chtimes(filepath.Join(src, "home/user/deep"), when, when))
	tarPath := filepath.Join(t.TempDir(), "fs.tar")
	must(WriteLayerTar(src, tarPath))
	must(ReadLayerTar(tarPath, dst))

	var st unix.Stat_t
	must(unix.Lstat(filepath.Join(dst, "home/user/whiteout"), &st))
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("whiteout came back as mode %o rdev %d", st.Mode, st.Rdev)
	}
	must(unix.Lstat(filepath.Join(dst, "home/user/app.sock"), &st))
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Uid != 1000 {
		t.Errorf("socket file came back as mode %o uid %d; want a socket of uid 1000", st.Mode, st.Uid)
	}
	b, err := os.ReadFile(filepath.Join(dst, "home/user/deep/hard"))
	if err != nil || string(b) != "hello" {
		t.Errorf("hard link: %q %v", b, err)
	}
	var a, h unix.Stat_t
	must(unix.Stat(filepath.Join(dst, "home/user/a.txt"), &a))
	must(unix.Stat(filepath.Join(dst, "home/user/deep/hard"), &h))
	if a.Ino != h.Ino || a.Uid != 1000 || a.Mode&0o7777 != 0o640 || a.Mtim.Nano() != when.UnixNano() {
		t.Errorf("a.txt: ino %d/%d uid %d mode %o mtime %d; want a shared inode, 1000, 640, %d", a.Ino, h.Ino, a.Uid, a.Mode&0o7777, a.Mtim.Nano(), when.UnixNano())
	}
	if l, err := os.Readlink(filepath.Join(dst, "home/user/deep/sym")); err != nil || l != "../a.txt" {
		t.Errorf("symlink: %q %v", l, err)
	}
	v := make([]byte, 8)
	n, err := unix.Getxattr(filepath.Join(dst, "home/user/deep"), "trusted.overlay.opaque", v)
	if err != nil || string(v[:n]) != "y" {
		t.Errorf("opaque xattr: %q %v", v[:n], err)
	}
	var d unix.Stat_t
	must(unix.Stat(filepath.Join(dst, "home/user/deep"), &d))
	if d.Mtim.Nano() != when.UnixNano() || d.Mode&0o7777 != 0o750 {
		t.Errorf("dir mtime %d mode %o; want %d 750", d.Mtim.Nano(), d.Mode&0o7777, when.UnixNano())
	}
}

// TestLayerTarRefusesEscapes: an archive is unpacked only inside its root, whatever its entries say.
func TestLayerTarRefusesEscapes(t *testing.T) {
	for name, entries := range map[string][]tar.Header{
		"dot-dot":          {{Name: "../evil", Typeflag: tar.TypeReg}},
		"absolute":         {{Name: "/etc/evil", Typeflag: tar.TypeReg}},
		"through symlink":  {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/tmp"}, {Name: "l/evil", Typeflag: tar.TypeReg}},
		"hard link out":    {{Name: "h", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}},
		"hard link via ln": {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, {Name: "h", Typeflag: tar.TypeLink, Linkname: "l/passwd"}},
		"unclean":          {{Name: "a/./b", Typeflag: tar.TypeReg}},
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "fs.tar")
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			tw := tar.NewWriter(f)
			for _, h := range entries {
				h.Mode = 0o644
				if err := tw.WriteHeader(&h); err != nil {
					t.Fatal(err)
				}
			}
			tw.Close()
			f.Close()
			root := t.TempDir()
			err = ReadLayerTar(p, root)
			if err == nil {
				t.Fatalf("unpacked; want a refusal")
			}
			if _, serr := os.Stat("/tmp/evil"); serr == nil {
				t.Errorf("a file escaped to /tmp/evil")
			}
		})
	}
}
