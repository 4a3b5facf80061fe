package sandboxdir

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// A layer archive is restored as root from the shared snapshot store, where a compromised node can put
// one it wrote itself: every entry is hostile. These tests plant links in the archive (absolute and
// climbing, to a file and to a directory of a sentinel tree beside the root) and then send entries
// through them; the sentinel tree must not change in any way (its inodes' ctimes included: a chmod,
// chown, xattr or utimes that touched one would move it) and the restore must fail.

// layerEntry is one entry of a test archive: its header and, for a regular file, its contents.
type layerEntry struct {
	hdr  tar.Header
	body string
}

// writeLayerArchive writes entries as a PAX tar (the format WriteLayerTar writes) and returns its path.
func writeLayerArchive(t testing.TB, entries []layerEntry) string {
	t.Helper()
	var buf bytes.Buffer
	if err := encodeLayerArchive(&buf, entries); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "fs.tar")
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// encodeLayerArchive writes entries as a PAX tar into buf.
func encodeLayerArchive(buf *bytes.Buffer, entries []layerEntry) error {
	tw := tar.NewWriter(buf)
	for _, e := range entries {
		h := e.hdr
		h.Format = tar.FormatPAX
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			return err
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			return err
		}
	}
	return tw.Close()
}

// sentinelState is what a sentinel tree's entry looks like from outside: everything a restore could
// change through a link, ctime included.
type sentinelState struct {
	Mode, Uid, Gid   uint32
	Size             int64
	Mtime, Ctime     int64
	Xattrs, Contents string
}

// makeSentinel makes a sentinel tree in dir: a file (victim), a directory (victimdir) with a file in it,
// owned by root with modes 0644/0755, and returns the paths.
func makeSentinel(t testing.TB, dir string) (victim, victimDir string) {
	t.Helper()
	victim, victimDir = filepath.Join(dir, "victim"), filepath.Join(dir, "victimdir")
	for _, err := range []error{
		os.WriteFile(victim, []byte("host file\n"), 0o644),
		os.Mkdir(victimDir, 0o755),
		os.WriteFile(filepath.Join(victimDir, "inner"), []byte("inner\n"), 0o644),
		os.Chmod(victim, 0o644), // past the umask
		os.Chmod(victimDir, 0o755),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return victim, victimDir
}

// snapshotTree records every entry under dir (dir itself included) without following links.
func snapshotTree(t testing.TB, dir string) map[string]sentinelState {
	t.Helper()
	out := map[string]sentinelState{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		s := sentinelState{Mode: st.Mode, Uid: st.Uid, Gid: st.Gid, Size: st.Size,
			Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(), Xattrs: listXattrs(p)}
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s.Contents = string(b)
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = s
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// listXattrs lists the names and values of p's xattrs (not following a link), sorted.
func listXattrs(p string) string {
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(p, buf)
	if err != nil || n <= 0 {
		return ""
	}
	var kv []string
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		v := make([]byte, 64<<10)
		vn, err := unix.Lgetxattr(p, name, v)
		if err != nil {
			vn = 0
		}
		kv = append(kv, name+"="+string(v[:max(vn, 0)]))
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

// TestLayerTarNeverFollowsLinks sends an archive's entries through symlinks that earlier entries of the
// same archive planted: the sentinel tree beside the root (the host's files) keeps its modes, owners,
// times, xattrs and contents, and the restore fails. The positive control is
// TestLayerTarRestoresMetadataExactly: the same kinds of entries, without the links, take effect.
func TestLayerTarNeverFollowsLinks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a restore chowns, and sets trusted.* xattrs and device nodes")
	}
	when := time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC)
	climb := strings.Repeat("../", 40)
	dir := func(name string, mode int64) layerEntry {
		return layerEntry{hdr: tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: mode}}
	}
	sym := func(name, target string) layerEntry {
		return layerEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}}
	}
	for _, tc := range []struct {
		name    string
		entries func(victim, victimDir string) []layerEntry
	}{
		{"setuid through a symlink to a host file", func(v, _ string) []layerEntry {
			return []layerEntry{sym("x", v), dir("x", 0o4755)}
		}},
		{"setuid through a climbing symlink", func(v, _ string) []layerEntry {
			return []layerEntry{sym("x", climb+v), dir("x", 0o4755)}
		}},
		{"chmod through a symlink to a host directory", func(_, vd string) []layerEntry {
			return []layerEntry{sym("d", vd), dir("d", 0o777)}
		}},
		{"nested symlink", func(v, _ string) []layerEntry {
			return []layerEntry{dir("a", 0o755), dir("a/b", 0o755), sym("a/b/x", v), dir("a/b/x", 0o6777)}
		}},
		{"owner and times through a symlink", func(v, _ string) []layerEntry {
			e := dir("x", 0o644)
			e.hdr.Uid, e.hdr.Gid, e.hdr.ModTime, e.hdr.AccessTime = 4242, 4242, when, when
			return []layerEntry{sym("x", v), e}
		}},
		{"xattrs through a symlink", func(v, _ string) []layerEntry {
			e := dir("x", 0o644)
			e.hdr.PAXRecords = map[string]string{xattrPrefix + "trusted.evil": "y"}
			return []layerEntry{sym("x", v), e}
		}},
		{"file through a symlink to a host directory", func(_, vd string) []layerEntry {
			return []layerEntry{sym("d", vd), {hdr: tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o4755}, body: "evil"}}
		}},
		{"file over a symlink to a host file", func(v, _ string) []layerEntry {
			return []layerEntry{sym("x", v), {hdr: tar.Header{Name: "x", Typeflag: tar.TypeReg, Mode: 0o4755}, body: "evil"}}
		}},
		{"socket through a symlink to a host directory", func(_, vd string) []layerEntry {
			return []layerEntry{sym("d", climb+vd), {hdr: tar.Header{Name: "d/s", Typeflag: tar.TypeReg, Mode: 0o777,
				PAXRecords: map[string]string{socketRecord: "socket"}}}}
		}},
		{"FIFO through a symlink to a host directory", func(_, vd string) []layerEntry {
			return []layerEntry{sym("d", vd), {hdr: tar.Header{Name: "d/p", Typeflag: tar.TypeFifo, Mode: 0o666}}}
		}},
		{"hard link to a symlink", func(v, _ string) []layerEntry {
			return []layerEntry{sym("l", v), {hdr: tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "l"}}}
		}},
		{"hard link through a symlink to a host directory", func(_, vd string) []layerEntry {
			return []layerEntry{sym("d", vd), {hdr: tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "d/inner"}}}
		}},
		{"symlink over a symlink", func(v, vd string) []layerEntry {
			return []layerEntry{sym("x", vd), sym("x", v)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
			for _, d := range []string{root, outside} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			victim, victimDir := makeSentinel(t, outside)
			archive := writeLayerArchive(t, tc.entries(victim, victimDir))
			before := snapshotTree(t, outside)
			time.Sleep(10 * time.Millisecond) // a change within the same clock tick would keep the ctime
			err := ReadLayerTar(archive, root)
			if diff := cmp.Diff(before, snapshotTree(t, outside)); diff != "" {
				t.Errorf("the host files beside the root changed (-before +after):\n%s", diff)
			}
			if !errors.Is(err, ErrBadLayerArchive) {
				t.Errorf("ReadLayerTar: %v; want a refusal (ErrBadLayerArchive)", err)
			} else {
				t.Logf("refused: %v", err)
			}
		})
	}
}

// TestLayerTarRefusesTypeClashes: an entry whose name an earlier entry made as another type is refused
// (a directory over a directory merges, as overlayfs's own layers may), and a hard link only links a
// regular file of the archive.
func TestLayerTarRefusesTypeClashes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a restore chowns and makes device nodes")
	}
	reg := func(name string, mode int64) layerEntry {
		return layerEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode}, body: "x"}
	}
	dir := func(name string, mode int64) layerEntry {
		return layerEntry{hdr: tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: mode}}
	}
	for _, tc := range []struct {
		name    string
		entries []layerEntry
		ok      bool
	}{
		{"directory over a directory", []layerEntry{dir("d", 0o755), dir("d", 0o700)}, true},
		{"directory over a file", []layerEntry{reg("f", 0o644), dir("f", 0o4755)}, false},
		{"directory over a FIFO", []layerEntry{{hdr: tar.Header{Name: "p", Typeflag: tar.TypeFifo, Mode: 0o644}}, dir("p", 0o755)}, false},
		{"directory over a whiteout", []layerEntry{{hdr: tar.Header{Name: "w", Typeflag: tar.TypeChar}}, dir("w", 0o755)}, false},
		{"file over a directory", []layerEntry{dir("d", 0o755), reg("d", 0o644)}, false},
		{"file over a file", []layerEntry{reg("f", 0o644), reg("f", 0o4755)}, false},
		{"hard link to a FIFO", []layerEntry{{hdr: tar.Header{Name: "p", Typeflag: tar.TypeFifo, Mode: 0o644}}, {hdr: tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "p"}}}, false},
		{"hard link to a directory", []layerEntry{dir("d", 0o755), {hdr: tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "d"}}}, false},
		{"hard link to nothing", []layerEntry{{hdr: tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "nothing"}}}, false},
		{"the root itself", []layerEntry{dir(".", 0o777)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			err := ReadLayerTar(writeLayerArchive(t, tc.entries), root)
			if tc.ok && err != nil {
				t.Errorf("ReadLayerTar: %v; want it restored", err)
			}
			if !tc.ok {
				if !errors.Is(err, ErrBadLayerArchive) {
					t.Errorf("ReadLayerTar: %v; want a refusal (ErrBadLayerArchive)", err)
				} else {
					t.Logf("refused: %v", err)
				}
			}
		})
	}
}

// restoredState is what TestLayerTarRestoresMetadataExactly checks of a restored entry.
type restoredState struct {
	Type, Mode, Uid, Gid uint32
	Rdev                 uint64
	Atime, Mtime         int64
	Xattrs, Contents     string
	Link                 string
}

// restoredTree records every entry under root (not root itself), reading files without moving their
// access times.
func restoredTree(t *testing.T, root string) map[string]restoredState {
	t.Helper()
	out := map[string]restoredState{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		s := restoredState{Type: st.Mode & unix.S_IFMT, Mode: st.Mode & 0o7777, Uid: st.Uid, Gid: st.Gid, Rdev: st.Rdev,
			Atime: st.Atim.Nano(), Mtime: st.Mtim.Nano(), Xattrs: listXattrs(p)}
		switch s.Type {
		case unix.S_IFREG:
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOATIME|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			f := os.NewFile(uintptr(fd), p)
			b := make([]byte, 64)
			n, _ := f.Read(b)
			f.Close()
			s.Contents = string(b[:n])
		case unix.S_IFLNK:
			s.Link, _ = os.Readlink(p)
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = s
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLayerTarRestoresMetadataExactly is the positive control of TestLayerTarNeverFollowsLinks: entries
// like the attacks' but without the links under them restore exactly: setuid and setgid modes, owners,
// nanosecond times (directories' set last), xattrs (trusted.*, user.*, file capabilities), a symlink's own
// owner, times and xattrs (its target, a host file, untouched), a merged directory, a hard link, a FIFO,
// a whiteout and a socket file.
func TestLayerTarRestoresMetadataExactly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a restore chowns, and sets trusted.* xattrs and device nodes")
	}
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	victim, _ := makeSentinel(t, outside)
	at := func(sec int) time.Time { return time.Date(2020, 5, 6, 7, 8, sec, 123456789+sec, time.UTC) }
	// A file capability (VFS_CAP_REVISION_2, effective): cap_net_bind_service permitted.
	capability := string([]byte{1, 0, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	h := func(name string, typ byte, mode int64, uid, sec int) tar.Header {
		return tar.Header{Name: name, Typeflag: typ, Mode: mode, Uid: uid, Gid: uid + 1, ModTime: at(sec), AccessTime: at(sec + 1)}
	}
	x := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[xattrPrefix+kv[i]] = kv[i+1]
		}
		return m
	}
	entries := []layerEntry{
		{hdr: h("d/", tar.TypeDir, 0o2775, 1234, 1)},
		{hdr: h("d/x", tar.TypeReg, 0o4755, 1234, 3), body: "setuid\n"},
		{hdr: h("d/h", tar.TypeLink, 0, 0, 0)},
		{hdr: h("d/l", tar.TypeSymlink, 0o777, 1234, 5)},
		{hdr: h("d/p", tar.TypeFifo, 0o640, 1000, 7)},
		{hdr: h("d/w", tar.TypeChar, 0, 0, 9)},
		{hdr: h("d/s", tar.TypeReg, 0o755, 1000, 11)},
		{hdr: h("d/e/", tar.TypeDir, 0o700, 0, 13)},
		{hdr: h("d/e/", tar.TypeDir, 0o751, 1000, 15)},
		{hdr: h("top", tar.TypeReg, 0o6755, 0, 17), body: "setuid root\n"},
	}
	entries[0].hdr.PAXRecords = x("trusted.overlay.opaque", "y")
	entries[1].hdr.PAXRecords = x("user.a", "1", "security.capability", capability)
	entries[2].hdr.Linkname = "d/x"
	entries[3].hdr.Linkname, entries[3].hdr.PAXRecords = victim, x("trusted.link", "mine")
	entries[6].hdr.PAXRecords = map[string]string{socketRecord: "socket"}
	before := snapshotTree(t, outside)
	if err := ReadLayerTar(writeLayerArchive(t, entries), root); err != nil {
		t.Fatalf("ReadLayerTar: %v", err)
	}
	ns := func(sec int) int64 { return at(sec).UnixNano() }
	setuidFile := restoredState{Type: unix.S_IFREG, Mode: 0o4755, Uid: 1234, Gid: 1235, Atime: ns(4), Mtime: ns(3),
		Xattrs: "security.capability=" + capability + ",user.a=1", Contents: "setuid\n"}
	want := map[string]restoredState{
		"d":   {Type: unix.S_IFDIR, Mode: 0o2775, Uid: 1234, Gid: 1235, Atime: ns(2), Mtime: ns(1), Xattrs: "trusted.overlay.opaque=y"},
		"d/x": setuidFile,
		"d/h": setuidFile,
		"d/l": {Type: unix.S_IFLNK, Mode: 0o777, Uid: 1234, Gid: 1235, Atime: ns(6), Mtime: ns(5), Xattrs: "trusted.link=mine", Link: victim},
		"d/p": {Type: unix.S_IFIFO, Mode: 0o640, Uid: 1000, Gid: 1001, Atime: ns(8), Mtime: ns(7)},
		"d/w": {Type: unix.S_IFCHR, Mode: 0, Uid: 0, Gid: 1, Atime: ns(10), Mtime: ns(9)},
		"d/s": {Type: unix.S_IFSOCK, Mode: 0o755, Uid: 1000, Gid: 1001, Atime: ns(12), Mtime: ns(11)},
		"d/e": {Type: unix.S_IFDIR, Mode: 0o751, Uid: 1000, Gid: 1001, Atime: ns(16), Mtime: ns(15)},
		"top": {Type: unix.S_IFREG, Mode: 0o6755, Uid: 0, Gid: 1, Atime: ns(18), Mtime: ns(17), Contents: "setuid root\n"},
	}
	if diff := cmp.Diff(want, restoredTree(t, root)); diff != "" {
		t.Errorf("restored tree (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, snapshotTree(t, outside)); diff != "" {
		t.Errorf("the symlink's target, a host file, changed (-before +after):\n%s", diff)
	}
}
