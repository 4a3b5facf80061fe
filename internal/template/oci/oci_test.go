package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/template/oci/ocitest"
)

// tarDir writes the files under dir into a tar at a new path (an OCI archive of a layout).
func tarDir(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "archive.tar")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: layers keep owners, whiteouts are device nodes, roots are mounts")
	}
}

// TestImportAndMount: an image imported from a layout, an OCI archive or a docker save tarball unpacks
// its layers once each; its mounted root is the layers merged as the OCI spec says (whiteouts, opaque
// directories, links, modes, owners, the xattrs an image may set and not overlayfs's), read-only.
func TestImportAndMount(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	base := ocitest.Layer(t,
		ocitest.Entry{Name: "etc/", Type: tar.TypeDir},
		ocitest.Entry{Name: "etc/os-release", Body: "ID=test\n"},
		ocitest.Entry{Name: "a/", Type: tar.TypeDir},
		ocitest.Entry{Name: "a/x", Body: "x"},
		ocitest.Entry{Name: "a/y", Body: "y"},
		ocitest.Entry{Name: "b/", Type: tar.TypeDir},
		ocitest.Entry{Name: "b/old", Body: "old"},
		ocitest.Entry{Name: "bin/", Type: tar.TypeDir},
		ocitest.Entry{Name: "bin/tool", Body: "#!/bin/sh\n", Mode: 0o4755, Xattrs: map[string]string{"user.note": "kept", "trusted.overlay.redirect": "/etc"}},
		ocitest.Entry{Name: "bin/tool-link", Type: tar.TypeLink, Link: "bin/tool"},
		ocitest.Entry{Name: "usr-python", Type: tar.TypeSymlink, Link: "/usr/bin/python3"},
	)
	top := ocitest.Layer(t,
		ocitest.Entry{Name: "a/.wh.x"},
		ocitest.Entry{Name: "b/.wh..wh..opq"},
		ocitest.Entry{Name: "b/new", Body: "new"},
		ocitest.Entry{Name: "etc/os-release", Body: "ID=top\n"},
	)
	cfg := v1.Config{Env: []string{"PATH=/bin", "LANG=C.UTF-8"}, WorkingDir: "/a", User: "1000", Cmd: []string{"sleep", "1"}}
	img := ocitest.Image(t, cfg, base, top)
	dir := ocitest.WriteLayout(t, img)
	docker := filepath.Join(t.TempDir(), "save.tar")
	if err := tarball.WriteToFile(docker, name.MustParseReference("test/image:1"), img); err != nil {
		t.Fatal(err)
	}
	s := &Store{Dir: t.TempDir()}
	var digests []string
	for _, src := range []string{dir, tarDir(t, dir), docker} {
		got, err := s.Import(ctx, src)
		if err != nil {
			t.Fatalf("import %s: %v", src, err)
		}
		if len(got.Layers) != 2 || got.Config.WorkingDir != "/a" || got.Config.User != "1000" || strings.Join(got.Config.Env, " ") != "PATH=/bin LANG=C.UTF-8" {
			t.Errorf("import %s: %+v", src, got)
		}
		digests = append(digests, got.Digest)
	}
	want, _ := img.Digest()
	if digests[0] != want.String() || digests[1] != want.String() {
		t.Errorf("digests %v; want the layout and the archive to be %s", digests, want)
	}
	if ls, _ := os.ReadDir(filepath.Join(s.Dir, "layers")); len(ls) != 2 {
		t.Errorf("%d layer directories after three imports of one image's two layers; want 2", len(ls))
	}
	root, err := s.Mount(digests[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Unmount(digests[0]) })
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	for p, want := range map[string]string{"a/y": "y", "b/new": "new", "etc/os-release": "ID=top\n"} {
		if got := read(p); got != want {
			t.Errorf("%s = %q; want %q", p, got, want)
		}
	}
	for _, p := range []string{"a/x", "b/old"} {
		if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s, whited out: %v; want it gone", p, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(root, "usr-python")); err != nil || l != "/usr/bin/python3" {
		t.Errorf("symlink: %q, %v", l, err)
	}
	var st, lst unix.Stat_t
	if unix.Stat(filepath.Join(root, "bin/tool"), &st) != nil || unix.Stat(filepath.Join(root, "bin/tool-link"), &lst) != nil || st.Ino != lst.Ino {
		t.Errorf("hard link: inodes %d and %d; want one", st.Ino, lst.Ino)
	}
	if st.Mode&0o7777 != 0o4755 {
		t.Errorf("bin/tool mode %o; want 4755", st.Mode&0o7777)
	}
	buf := make([]byte, 64)
	if n, err := unix.Lgetxattr(filepath.Join(root, "bin/tool"), "user.note", buf); err != nil || string(buf[:n]) != "kept" {
		t.Errorf("user.note xattr: %q, %v", buf[:max(n, 0)], err)
	}
	if _, err := unix.Lgetxattr(filepath.Join(s.Dir, "layers", fileName(mustLayers(t, s, digests[0])[0]), "bin/tool"), "trusted.overlay.redirect", buf); err == nil {
		t.Error("the image set trusted.overlay.redirect on a layer's file")
	}
	if err := os.WriteFile(filepath.Join(root, "new-file"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write into a template's root: %v; want read-only", err)
	}
	if again, err := s.Mount(digests[0]); err != nil || again != root {
		t.Errorf("mount again: %q, %v", again, err)
	}
}

func mustLayers(t *testing.T, s *Store, digest string) []string {
	t.Helper()
	img, err := s.Get(digest)
	if err != nil {
		t.Fatal(err)
	}
	return img.Layers
}

// TestHostileLayers: a layer that would write outside its directory, through a link it planted, or a
// device node, or that expands past the import's limits, is refused with an error naming what; nothing
// is written outside the store and no half-unpacked layer stays in it.
func TestHostileLayers(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	var bomb bytes.Buffer // a tar of 200 MiB of zeros: gzipped in the image, about 200 KiB
	{
		tw := tar.NewWriter(&bomb)
		if err := tw.WriteHeader(&tar.Header{Name: "zeros", Mode: 0o644, Size: 200 << 20, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyN(tw, zeroReader{}, 200<<20); err != nil {
			t.Fatal(err)
		}
		tw.Close()
	}
	var many []ocitest.Entry
	for i := range 300 {
		many = append(many, ocitest.Entry{Name: "f" + strings.Repeat("x", i%50) + string(rune('a'+i%26)) + time.Duration(i).String()})
	}
	cases := []struct {
		name  string
		layer []byte
		want  error
		says  string
	}{
		{"dot-dot", ocitest.Layer(t, ocitest.Entry{Name: "../../../../outside-file", Body: "pwned"}), ErrBadLayer, "climbs out"},
		{"absolute", ocitest.Layer(t, ocitest.Entry{Name: "/etc/pwned", Body: "pwned"}), ErrBadLayer, "absolute"},
		{"through a symlink", ocitest.Layer(t, ocitest.Entry{Name: "esc", Type: tar.TypeSymlink, Link: "../../../.."}, ocitest.Entry{Name: "esc/pwned", Body: "pwned"}), ErrBadLayer, "esc/pwned"},
		{"through an absolute symlink", ocitest.Layer(t, ocitest.Entry{Name: "etc", Type: tar.TypeSymlink, Link: "/etc"}, ocitest.Entry{Name: "etc/pwned", Body: "pwned"}), ErrBadLayer, "etc/pwned"},
		{"hard link out", ocitest.Layer(t, ocitest.Entry{Name: "passwd", Type: tar.TypeLink, Link: "../../../../etc/passwd"}), ErrBadLayer, "hard link"},
		{"hard link absolute", ocitest.Layer(t, ocitest.Entry{Name: "passwd", Type: tar.TypeLink, Link: "/etc/passwd"}), ErrBadLayer, "hard link"},
		{"device node", ocitest.Layer(t, ocitest.Entry{Name: "dev-null", Type: tar.TypeChar}), ErrBadLayer, "device node"},
		{"10 GiB file", ocitest.Layer(t, ocitest.Entry{Name: "huge", Size: 10 << 30}), errdefs.ErrTooLarge, "limit of bytes"},
		{"zip bomb", bomb.Bytes(), errdefs.ErrTooLarge, "limit of bytes"},
		{"entry flood", ocitest.Layer(t, many...), errdefs.ErrTooLarge, "limit of entries"},
	}
	outer := t.TempDir()
	s := &Store{Dir: filepath.Join(outer, "store"), Limits: Limits{Bytes: 64 << 20, Entries: 200}}
	before := listTree(t, outer)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Import(ctx, ocitest.WriteLayout(t, ocitest.Image(t, v1.Config{}, tc.layer)))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("import = %v; want %v saying %q", err, tc.want, tc.says)
			}
		})
	}
	after := listTree(t, outer)
	for p := range after {
		if !before[p] && !strings.HasPrefix(p, "store") {
			t.Errorf("%s appeared outside the store", p)
		}
	}
	if ls, _ := os.ReadDir(filepath.Join(s.Dir, "layers")); len(ls) != 0 {
		t.Errorf("refused layers left %d entries in the store", len(ls))
	}
	if _, err := os.Lstat("/etc/pwned"); err == nil {
		t.Error("/etc/pwned exists")
	}
	// The positive control: a fair layer under the same limits goes in.
	if _, err := s.Import(ctx, ocitest.WriteLayout(t, ocitest.Image(t, v1.Config{}, ocitest.Layer(t, ocitest.Entry{Name: "ok", Body: "fine"})))); err != nil {
		t.Errorf("a fair image under the same limits: %v", err)
	}
}

// zeroReader reads zeros.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// listTree lists the paths under dir, relative to it.
func listTree(t *testing.T, dir string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if rel, _ := filepath.Rel(dir, p); rel != "." {
			out[rel] = true
		}
		return nil
	})
	return out
}

// TestImportRefusesAWrongDiffID: a layer whose uncompressed content is not the diff ID the image's config
// names is refused.
func TestImportRefusesAWrongDiffID(t *testing.T) {
	needRoot(t)
	img := ocitest.Image(t, v1.Config{}, ocitest.Layer(t, ocitest.Entry{Name: "a", Body: "a"}))
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	other, _ := v1.NewHash("sha256:" + strings.Repeat("ab", 32))
	cf.RootFS.DiffIDs[0] = other
	bad, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{Dir: t.TempDir()}
	if _, err := s.Import(context.Background(), ocitest.WriteLayout(t, bad)); !errors.Is(err, ErrBadLayer) || !strings.Contains(err.Error(), "digest") {
		t.Errorf("import of a layer whose content is not its diff ID: %v; want refused", err)
	}
}

// TestImportRefusesABadConfig: a config a sandbox could not take as its defaults is refused, naming the
// field, and nothing is recorded.
func TestImportRefusesABadConfig(t *testing.T) {
	layer := ocitest.Layer(t, ocitest.Entry{Name: "f", Body: "x"})
	for name, cfg := range map[string]v1.Config{
		"User":       {User: "a b"},
		"WorkingDir": {WorkingDir: "relative/dir"},
		"Env":        {Env: []string{"NOEQUALS"}},
	} {
		s := &Store{Dir: t.TempDir()}
		_, err := s.Import(context.Background(), ocitest.WriteLayout(t, ocitest.Image(t, cfg, layer)))
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), name) {
			t.Errorf("an image with a bad %s: %v; want invalid argument naming it", name, err)
		}
		if ents, _ := os.ReadDir(filepath.Join(s.Dir, "images")); len(ents) != 0 {
			t.Errorf("an image with a bad %s was recorded", name)
		}
	}
	if _, err := (&Store{Dir: t.TempDir()}).Import(context.Background(), ocitest.WriteLayout(t, ocitest.Image(t, v1.Config{User: "1000:1000", WorkingDir: "/app/", Env: []string{"A=b=c"}}, layer))); err != nil {
		t.Errorf("a good config: %v", err)
	}
}

// TestImportLeavesRoomFree: an import stops before the store's file system would have less than
// MinFree left, refused as resource exhausted, leaving no half layer; a small image goes in (the
// positive control).
func TestImportLeavesRoomFree(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	s := &Store{Dir: filepath.Join(dir, "store"), Limits: Limits{Bytes: 1 << 30, Entries: 100, MinFree: 40 << 20}}
	big := ocitest.Layer(t, ocitest.Entry{Name: "big", Body: strings.Repeat("x", 32<<20)})
	_, err := s.Import(context.Background(), ocitest.WriteLayout(t, ocitest.Image(t, v1.Config{}, big)))
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "free") {
		t.Errorf("an image that would leave too little free: %v; want resource exhausted", err)
	}
	if ls, _ := os.ReadDir(filepath.Join(s.Dir, "layers")); len(ls) != 0 {
		t.Errorf("the refused import left %d entries", len(ls))
	}
	small := ocitest.Layer(t, ocitest.Entry{Name: "small", Body: strings.Repeat("x", 4<<20)})
	if _, err := s.Import(context.Background(), ocitest.WriteLayout(t, ocitest.Image(t, v1.Config{}, small))); err != nil {
		t.Errorf("a small image: %v", err)
	}
}
