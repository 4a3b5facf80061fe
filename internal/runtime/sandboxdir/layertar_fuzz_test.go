package sandboxdir

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// A fuzzed archive is built from the input, fuzzEntrySize bytes an entry (a shorter tail is dropped, at
// most fuzzMaxEntries entries): raw tar bytes would mostly fail the header checksum, while entries drawn
// from small tables of names and link targets collide, nest and pass through one another's links.
//
//	byte 0  type: fuzzTypes[b % 8]
//	byte 1  name: fuzzNames[b % len]
//	byte 2-3 mode: big-endian, & 0o7777
//	byte 4  owner (uid and gid): fuzzOwners[b % 4]
//	byte 5  link target (symlinks and hard links): fuzzTargets[b % len]; "@" stands for the sentinel
//	        directory beside the root, "^" for enough "../" to climb to /
//	byte 6  flags: 1 trusted.f xattr, 2 user.f xattr, 4 a file capability, 8 times from byte 7,
//	        16 contents (byte 7 bytes)
//	byte 7  device minor / time / contents length
const (
	fuzzEntrySize  = 8
	fuzzMaxEntries = 64
)

var (
	fuzzTypes  = []byte{tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo, tar.TypeChar, 's', tar.TypeBlock}
	fuzzOwners = []int{0, 1000, 4242, 65534}
	fuzzNames  = []string{"a", "b", "a/b", "a/b/c", "b/c", "l", "l/f", "l/d", "a/l", "a/l/f", "a/l/d/e",
		"victim", "victimdir", "victimdir/inner", "s", "p", "a/", ".", "..", "../x", "/abs", "a/../b", "a//b", "./a", ""}
	fuzzTargets = []string{"@", "@/victim", "@/victimdir", "@/victimdir/inner", "^@/victim", "^@",
		"../outside/victim", "../outside/victimdir", "../../outside/victimdir", "/proc/self/root@/victim",
		"a", "a/b", "a/b/c", "l", "l/f", "b", "victim", "victimdir/inner", ".", "..", "", "/", "l/inner"}
)

// fuzzArchive builds the archive the input describes; outside is the sentinel directory's path.
func fuzzArchive(data []byte, outside string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i := 0; i+fuzzEntrySize <= len(data) && i/fuzzEntrySize < fuzzMaxEntries; i += fuzzEntrySize {
		b := data[i : i+fuzzEntrySize]
		typ := fuzzTypes[int(b[0])%len(fuzzTypes)]
		h := tar.Header{Name: fuzzNames[int(b[1])%len(fuzzNames)], Mode: (int64(b[2])<<8 | int64(b[3])) & 0o7777,
			Format: tar.FormatPAX}
		h.Uid = fuzzOwners[int(b[4])%len(fuzzOwners)]
		h.Gid = h.Uid
		target := fuzzTargets[int(b[5])%len(fuzzTargets)]
		target = strings.ReplaceAll(target, "^", strings.Repeat("../", 40))
		target = strings.ReplaceAll(target, "@", outside)
		h.PAXRecords = map[string]string{}
		switch typ {
		case tar.TypeDir:
			h.Typeflag = tar.TypeDir
			if !strings.HasSuffix(h.Name, "/") {
				h.Name += "/"
			}
		case 's':
			h.Typeflag, h.PAXRecords[socketRecord] = tar.TypeReg, "socket"
		case tar.TypeSymlink, tar.TypeLink:
			h.Typeflag, h.Linkname = typ, target
		case tar.TypeChar, tar.TypeBlock:
			h.Typeflag, h.Devminor = typ, int64(b[7]%4)
		default:
			h.Typeflag = typ
		}
		if b[6]&1 != 0 {
			h.PAXRecords[xattrPrefix+"trusted.f"] = "t"
		}
		if b[6]&2 != 0 {
			h.PAXRecords[xattrPrefix+"user.f"] = "u"
		}
		if b[6]&4 != 0 {
			h.PAXRecords[xattrPrefix+"security.capability"] = string([]byte{1, 0, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
		}
		if b[6]&8 != 0 {
			h.ModTime = time.Unix(int64(b[7])*1e6, int64(b[7]))
			h.AccessTime = h.ModTime.Add(time.Second)
		}
		var body []byte
		if h.Typeflag == tar.TypeReg && h.PAXRecords[socketRecord] == "" && b[6]&16 != 0 {
			body = bytes.Repeat([]byte{'x'}, int(b[7]))
		}
		h.Size = int64(len(body))
		if tw.WriteHeader(&h) != nil {
			break // a header the writer refuses ends the archive
		}
		tw.Write(body)
	}
	tw.Close()
	return buf.Bytes()
}

// FuzzReadLayerTar restores archives built from the input (see fuzzArchive) into a fresh root beside a
// sentinel tree that their links point at: whatever ReadLayerTar reports, no file of the sentinel
// changes (mode, owner, times, ctime, xattrs, contents), nothing appears beside the root, nothing in
// the root is a hard link to a sentinel file, and nothing panics. The seed corpus in
// testdata/fuzz/FuzzReadLayerTar holds the attacks of TestLayerTarNeverFollowsLinks.
func FuzzReadLayerTar(f *testing.F) {
	if os.Geteuid() != 0 {
		f.Skip("needs root: a restore chowns, and sets trusted.* xattrs and device nodes")
	}
	base := f.TempDir()
	outside := filepath.Join(base, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		f.Fatal(err)
	}
	makeSentinel(f, outside)
	// Owner and times no entry gives, so that a change shows even where the ctime's clock is coarse.
	for _, p := range []string{outside, filepath.Join(outside, "victim"), filepath.Join(outside, "victimdir"), filepath.Join(outside, "victimdir/inner")} {
		if err := os.Lchown(p, 4321, 4321); err != nil {
			f.Fatal(err)
		}
		if err := os.Chtimes(p, time.Unix(12345, 6789), time.Unix(12345, 6789)); err != nil {
			f.Fatal(err)
		}
	}
	sentinel := snapshotTree(f, outside)
	inodes := map[[2]uint64]string{} // (dev, inode) → the sentinel's file
	for _, p := range []string{"victim", "victimdir", "victimdir/inner"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(outside, p), &st); err != nil {
			f.Fatal(err)
		}
		inodes[[2]uint64{st.Dev, st.Ino}] = p
	}
	archive := filepath.Join(f.TempDir(), "fs.tar")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(archive, fuzzArchive(data, outside), 0o600); err != nil {
			t.Fatal(err)
		}
		root, err := os.MkdirTemp(base, "root")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(root)
		err = ReadLayerTar(archive, root)
		if diff := cmp.Diff(sentinel, snapshotTree(t, outside)); diff != "" {
			t.Fatalf("ReadLayerTar (%v) changed the sentinel beside the root (-before +after):\n%s", err, diff)
		}
		names, rerr := os.ReadDir(base)
		if rerr != nil {
			t.Fatal(rerr)
		}
		for _, n := range names {
			if n.Name() != "outside" && n.Name() != filepath.Base(root) {
				t.Fatalf("ReadLayerTar (%v) made %s beside the root", err, n.Name())
			}
		}
		filepath.WalkDir(root, func(p string, _ os.DirEntry, werr error) error {
			var st unix.Stat_t
			if werr == nil && unix.Lstat(p, &st) == nil {
				if s, ok := inodes[[2]uint64{st.Dev, st.Ino}]; ok {
					t.Errorf("%s in the root is the sentinel's %s", p, s)
				}
			}
			return nil
		})
	})
}
