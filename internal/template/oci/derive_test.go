package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime/sandboxdir"
	"github.com/airlockrun/airlock/internal/template/oci/ocitest"
)

// TestDeriveAndExport: images derived from an imported one (a layer on top, config only) and from
// scratch mount what their layers say; the same step over the same parent is the same image; an exported
// image imported into another store is the same image with the same files.
func TestDeriveAndExport(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	base := ocitest.Layer(t,
		ocitest.Entry{Name: "etc/", Type: tar.TypeDir},
		ocitest.Entry{Name: "etc/os-release", Body: "ID=test\n"},
		ocitest.Entry{Name: "old", Body: "old"},
	)
	s := &Store{Dir: t.TempDir()}
	parent, err := s.Import(ctx, ocitest.WriteLayout(t, ocitest.Image(t, v1.Config{Env: []string{"PATH=/bin"}}, base)))
	if err != nil {
		t.Fatal(err)
	}
	top := ocitest.Layer(t,
		ocitest.Entry{Name: ".wh.old"},
		ocitest.Entry{Name: "app/", Type: tar.TypeDir},
		ocitest.Entry{Name: "app/main.py", Body: "print(42)\n", Mode: 0o755},
	)
	cfg := Config{Env: []string{"PATH=/bin", "APP=1"}, WorkingDir: "/app", User: "1000", Cmd: []string{"python3", "main.py"}}
	child, err := s.Derive(ctx, parent.Digest, Step{Layer: bytes.NewReader(top), Config: cfg, CreatedBy: "COPY . /app"})
	if err != nil {
		t.Fatal(err)
	}
	if len(child.Layers) != 2 || child.Layers[0] != parent.Layers[0] || child.Config.WorkingDir != "/app" || strings.Join(child.Config.Cmd, " ") != "python3 main.py" {
		t.Errorf("derived image %+v; want the parent's layer, one more and the new config", child)
	}
	again, err := s.Derive(ctx, parent.Digest, Step{Layer: bytes.NewReader(top), Config: cfg, CreatedBy: "COPY . /app"})
	if err != nil || again.Digest != child.Digest {
		t.Errorf("the same step again: %s, %v; want the same image %s", again.Digest, err, child.Digest)
	}
	cfgOnly, err := s.Derive(ctx, child.Digest, Step{Config: Config{Env: cfg.Env, User: "0"}, CreatedBy: "USER 0"})
	if err != nil || len(cfgOnly.Layers) != 2 || cfgOnly.Config.User != "0" || cfgOnly.Digest == child.Digest {
		t.Errorf("config-only step: %+v, %v; want the same layers, user 0, a new digest", cfgOnly, err)
	}
	root, err := s.Mount(child.Digest)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Unmount(child.Digest) })
	if b, err := os.ReadFile(filepath.Join(root, "app/main.py")); err != nil || string(b) != "print(42)\n" {
		t.Errorf("app/main.py: %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "old")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old, whited out by the derived layer: %v; want it gone", err)
	}
	scratch, err := s.Derive(ctx, Scratch, Step{Layer: bytes.NewReader(base), CreatedBy: "COPY rootfs /"})
	if err != nil || len(scratch.Layers) != 1 || scratch.Layers[0] != parent.Layers[0] {
		t.Errorf("from scratch: %+v, %v; want one layer, the one imported before", scratch, err)
	}

	var archive bytes.Buffer
	if err := s.Export(ctx, child.Digest, &archive); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "export.tar")
	if err := os.WriteFile(p, archive.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	other := &Store{Dir: t.TempDir()}
	back, err := other.Import(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if back.Digest != child.Digest || strings.Join(back.Config.Env, " ") != "PATH=/bin APP=1" {
		t.Errorf("exported and imported again: %+v; want image %s", back, child.Digest)
	}
	root2, err := other.Mount(back.Digest)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Unmount(back.Digest) })
	if b, err := os.ReadFile(filepath.Join(root2, "app/main.py")); err != nil || string(b) != "print(42)\n" {
		t.Errorf("app/main.py in the re-imported image: %q, %v", b, err)
	}

	// Refused: a bad config, a parent the store does not hold, a layer that is not a tar.
	if _, err := s.Derive(ctx, parent.Digest, Step{Config: Config{WorkingDir: "relative"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("WorkingDir relative: %v; want invalid argument", err)
	}
	missing := "sha256:" + strings.Repeat("0", 64)
	if _, err := s.Derive(ctx, missing, Step{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown parent: %v; want not found", err)
	}
	if _, err := s.Derive(ctx, parent.Digest, Step{Layer: strings.NewReader("not a tar at all, just some text that goes on")}); !errors.Is(err, ErrBadLayer) {
		t.Errorf("a layer that is not a tar: %v; want %v", err, ErrBadLayer)
	}
}

// TestImportRefusesABlobNotItsDigest: a layout whose layer blob is not what its digest names is refused,
// and the store keeps nothing of it under that digest.
func TestImportRefusesABlobNotItsDigest(t *testing.T) {
	needRoot(t)
	img := ocitest.Image(t, v1.Config{}, ocitest.Layer(t, ocitest.Entry{Name: "f", Body: "real"}))
	dir := ocitest.WriteLayout(t, img)
	ls, _ := img.Layers()
	d, _ := ls[0].Digest()
	blob := filepath.Join(dir, "blobs", "sha256", d.Hex)
	fake, _ := ocitest.Image(t, v1.Config{}, ocitest.Layer(t, ocitest.Entry{Name: "f", Body: "fake"})).Layers()
	rc, _ := fake[0].Compressed()
	var b bytes.Buffer
	_, _ = b.ReadFrom(rc)
	rc.Close()
	if err := os.WriteFile(blob, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Store{Dir: t.TempDir()}
	if _, err := s.Import(context.Background(), dir); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("import of a layout whose layer blob was swapped: %v; want it refused", err)
	}
	if _, err := os.Lstat(s.blobPath(d)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("blob %s after the refused import: %v; want none", d, err)
	}
}

// TestDeriveFromAnOverlay: what a sandbox did over an image — through a real overlayfs, as in a sandbox:
// a file deleted, a directory replaced, files added, a socket left — archived as its writable layer is,
// turned into an OCI layer by FromOverlay and derived on the image, gives an image whose root is what
// the sandbox saw. A file named like a whiteout is refused.
func TestDeriveFromAnOverlay(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	s := &Store{Dir: t.TempDir()}
	parent, err := s.Import(ctx, ocitest.WriteLayout(t, ocitest.Image(t, v1.Config{}, ocitest.Layer(t,
		ocitest.Entry{Name: "gone", Body: "x"},
		ocitest.Entry{Name: "d/", Type: tar.TypeDir},
		ocitest.Entry{Name: "d/old", Body: "old"},
		ocitest.Entry{Name: "keep", Body: "keep"},
	))))
	if err != nil {
		t.Fatal(err)
	}
	lower, err := s.Mount(parent.Digest)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Unmount(parent.Digest) })
	work := t.TempDir()
	upper, ovl, merged := filepath.Join(work, "upper"), filepath.Join(work, "work"), filepath.Join(work, "merged")
	for _, d := range []string{upper, ovl, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("overlay", merged, "overlay", 0, "lowerdir="+lower+",upperdir="+upper+",workdir="+ovl); err != nil {
		t.Fatal(err)
	}
	unmounted := false
	t.Cleanup(func() {
		if !unmounted {
			unix.Unmount(merged, unix.MNT_DETACH)
		}
	})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Remove(filepath.Join(merged, "gone")))
	must(os.RemoveAll(filepath.Join(merged, "d")))
	must(os.Mkdir(filepath.Join(merged, "d"), 0o750))
	must(os.WriteFile(filepath.Join(merged, "d", "new"), []byte("new"), 0o644))
	must(os.WriteFile(filepath.Join(merged, "added"), []byte("added"), 0o600))
	must(os.Symlink("added", filepath.Join(merged, "link")))
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	must(err)
	must(unix.Bind(fd, &unix.SockaddrUnix{Name: filepath.Join(merged, "sock")}))
	unix.Close(fd)
	must(unix.Unmount(merged, 0))
	unmounted = true

	archive := filepath.Join(work, "fs.tar")
	must(sandboxdir.WriteLayerTar(upper, archive))
	f, err := os.Open(archive)
	must(err)
	defer f.Close()
	var layer bytes.Buffer
	must(FromOverlay(f, &layer))
	child, err := s.Derive(ctx, parent.Digest, Step{Layer: &layer, CreatedBy: "RUN changes"})
	must(err)
	root, err := s.Mount(child.Digest)
	must(err)
	t.Cleanup(func() { s.Unmount(child.Digest) })
	var got []string
	must(filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		got = append(got, rel)
		return nil
	}))
	if want := "added d d/new keep link"; strings.Join(got, " ") != want {
		t.Errorf("the derived image holds %q; want %q (d/old hidden by the opaque directory, gone whited out, no socket)", strings.Join(got, " "), want)
	}
	if fi, err := os.Stat(filepath.Join(root, "d")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("d: %v, %v; want mode 0750", fi, err)
	}

	// A file the sandbox named like a whiteout would delete a file of the image below: refused.
	evil := ocitest.Layer(t, ocitest.Entry{Name: ".wh.keep", Body: ""})
	if err := FromOverlay(bytes.NewReader(evil), io.Discard); !errors.Is(err, ErrBadLayer) || !strings.Contains(err.Error(), ".wh.keep") {
		t.Errorf("a file named .wh.keep: %v; want it refused, named", err)
	}
	for _, bad := range []string{"../x", "/etc/x", "a/../../x"} {
		l := ocitest.Layer(t, ocitest.Entry{Name: bad, Body: "x"})
		if err := FromOverlay(bytes.NewReader(l), io.Discard); !errors.Is(err, ErrBadLayer) {
			t.Errorf("entry %q: %v; want refused", bad, err)
		}
	}
}

// TestDeriveInto: a layer copied into an image (a build's COPY) goes where the image's symbolic links
// lead, as Docker's COPY does, without leaving the image's root (a link that climbs out resolves
// inside it) and without replacing the links; a directory the image has keeps its mode; a link loop is
// refused. Nothing on the host is touched: the result is a layer.
func TestDeriveInto(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	s := &Store{Dir: t.TempDir()}
	parent, err := s.Import(ctx, ocitest.WriteLayout(t, ocitest.Image(t, v1.Config{}, ocitest.Layer(t,
		ocitest.Entry{Name: "usr/", Type: tar.TypeDir},
		ocitest.Entry{Name: "usr/bin/", Type: tar.TypeDir, Mode: 0o755},
		ocitest.Entry{Name: "bin", Type: tar.TypeSymlink, Link: "usr/bin"},
		ocitest.Entry{Name: "etc/", Type: tar.TypeDir},
		ocitest.Entry{Name: "out", Type: tar.TypeSymlink, Link: "../../../../etc"},
		ocitest.Entry{Name: "abs", Type: tar.TypeSymlink, Link: "/usr/bin/../../etc"},
		ocitest.Entry{Name: "loop", Type: tar.TypeSymlink, Link: "loop"},
		ocitest.Entry{Name: "tmp/", Type: tar.TypeDir, Mode: 0o1777},
	))))
	if err != nil {
		t.Fatal(err)
	}
	layer := ocitest.Layer(t,
		ocitest.Entry{Name: "bin/", Type: tar.TypeDir, Mode: 0o700},
		ocitest.Entry{Name: "bin/tool", Body: "tool", Mode: 0o755},
		ocitest.Entry{Name: "tmp/", Type: tar.TypeDir, Mode: 0o755},
		ocitest.Entry{Name: "tmp/x", Body: "x"},
		ocitest.Entry{Name: "out/y", Body: "y"},
		ocitest.Entry{Name: "abs/z", Body: "z"},
	)
	img, err := s.Derive(ctx, parent.Digest, Step{Layer: bytes.NewReader(layer), Into: true, CreatedBy: "COPY"})
	if err != nil {
		t.Fatal(err)
	}
	root, err := s.Mount(img.Digest)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Unmount(img.Digest) })
	for name, body := range map[string]string{"usr/bin/tool": "tool", "tmp/x": "x", "etc/y": "y", "etc/z": "z"} {
		if b, err := os.ReadFile(filepath.Join(root, name)); err != nil || string(b) != body {
			t.Errorf("/%s: %q, %v; want %q", name, b, err, body)
		}
	}
	if l, err := os.Readlink(filepath.Join(root, "bin")); err != nil || l != "usr/bin" {
		t.Errorf("/bin: %q, %v; want the image's link to usr/bin kept", l, err)
	}
	for name, mode := range map[string]os.FileMode{"tmp": os.ModeDir | os.ModeSticky | 0o777, "usr/bin": os.ModeDir | 0o755} {
		if fi, err := os.Lstat(filepath.Join(root, name)); err != nil || fi.Mode() != mode {
			t.Errorf("/%s: %v, %v; want the image's mode %v", name, fi.Mode(), err, mode)
		}
	}
	if _, err := s.Derive(ctx, parent.Digest, Step{Layer: bytes.NewReader(ocitest.Layer(t, ocitest.Entry{Name: "loop/a", Body: "a"})), Into: true}); !errors.Is(err, ErrBadLayer) {
		t.Errorf("a copy through a link loop: %v; want %v", err, ErrBadLayer)
	}
}
