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
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// entry is one tar entry of a test layer.
type entry struct {
	name, body, link string
	typ              byte
	mode             int64
	xattrs           map[string]string
	size             int64 // header size when set (the body is then not written)
}

// layerTar makes an uncompressed layer tar of es.
func layerTar(t *testing.T, es ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if h.Typeflag == tar.TypeChar {
			h.Devmajor, h.Devminor = 1, 3
		}
		for k, v := range e.xattrs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
		if e.size > 0 {
			h.Size = e.size
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			return buf.Bytes() // a header promising more than follows
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// image makes an image of layers (uncompressed tars, gzipped into it) with cfg.
func image(t *testing.T, cfg v1.Config, layers ...[]byte) v1.Image {
	t.Helper()
	img := empty.Image
	for _, l := range layers {
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(l)), nil })
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", "amd64", cfg
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// writeLayout writes img as an OCI image layout in a new directory.
func writeLayout(t *testing.T, img v1.Image) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return dir
}

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
	base := layerTar(t,
		entry{name: "etc/", typ: tar.TypeDir},
		entry{name: "etc/os-release", body: "ID=test\n"},
		entry{name: "a/", typ: tar.TypeDir},
		entry{name: "a/x", body: "x"},
		entry{name: "a/y", body: "y"},
		entry{name: "b/", typ: tar.TypeDir},
		entry{name: "b/old", body: "old"},
		entry{name: "bin/", typ: tar.TypeDir},
		entry{name: "bin/tool", body: "#!/bin/sh\n", mode: 0o4755, xattrs: map[string]string{"user.note": "kept", "trusted.overlay.redirect": "/etc"}},
		entry{name: "bin/tool-link", typ: tar.TypeLink, link: "bin/tool"},
		entry{name: "usr-python", typ: tar.TypeSymlink, link: "/usr/bin/python3"},
	)
	top := layerTar(t,
		entry{name: "a/.wh.x"},
		entry{name: "b/.wh..wh..opq"},
		entry{name: "b/new", body: "new"},
		entry{name: "etc/os-release", body: "ID=top\n"},
	)
	cfg := v1.Config{Env: []string{"PATH=/bin", "LANG=C.UTF-8"}, WorkingDir: "/a", User: "1000", Cmd: []string{"sleep", "1"}}
	img := image(t, cfg, base, top)
	dir := writeLayout(t, img)
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
	var many []entry
	for i := range 300 {
		many = append(many, entry{name: "f" + strings.Repeat("x", i%50) + string(rune('a'+i%26)) + time.Duration(i).String()})
	}
	cases := []struct {
		name  string
		layer []byte
		want  error
		says  string
	}{
		{"dot-dot", layerTar(t, entry{name: "../../../../outside-file", body: "pwned"}), ErrBadLayer, "climbs out"},
		{"absolute", layerTar(t, entry{name: "/etc/pwned", body: "pwned"}), ErrBadLayer, "absolute"},
		{"through a symlink", layerTar(t, entry{name: "esc", typ: tar.TypeSymlink, link: "../../../.."}, entry{name: "esc/pwned", body: "pwned"}), ErrBadLayer, "esc/pwned"},
		{"through an absolute symlink", layerTar(t, entry{name: "etc", typ: tar.TypeSymlink, link: "/etc"}, entry{name: "etc/pwned", body: "pwned"}), ErrBadLayer, "etc/pwned"},
		{"hard link out", layerTar(t, entry{name: "passwd", typ: tar.TypeLink, link: "../../../../etc/passwd"}), ErrBadLayer, "hard link"},
		{"hard link absolute", layerTar(t, entry{name: "passwd", typ: tar.TypeLink, link: "/etc/passwd"}), ErrBadLayer, "hard link"},
		{"device node", layerTar(t, entry{name: "dev-null", typ: tar.TypeChar}), ErrBadLayer, "device node"},
		{"10 GiB file", layerTar(t, entry{name: "huge", size: 10 << 30}), errdefs.ErrTooLarge, "limit of bytes"},
		{"zip bomb", bomb.Bytes(), errdefs.ErrTooLarge, "limit of bytes"},
		{"entry flood", layerTar(t, many...), errdefs.ErrTooLarge, "limit of entries"},
	}
	outer := t.TempDir()
	s := &Store{Dir: filepath.Join(outer, "store"), Limits: Limits{Bytes: 64 << 20, Entries: 200}}
	before := listTree(t, outer)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Import(ctx, writeLayout(t, image(t, v1.Config{}, tc.layer)))
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
	if _, err := s.Import(ctx, writeLayout(t, image(t, v1.Config{}, layerTar(t, entry{name: "ok", body: "fine"})))); err != nil {
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
	img := image(t, v1.Config{}, layerTar(t, entry{name: "a", body: "a"}))
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
	if _, err := s.Import(context.Background(), writeLayout(t, bad)); !errors.Is(err, ErrBadLayer) || !strings.Contains(err.Error(), "digest") {
		t.Errorf("import of a layer whose content is not its diff ID: %v; want refused", err)
	}
}
