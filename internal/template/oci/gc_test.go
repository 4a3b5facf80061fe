package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/template/oci/ocitest"
)

// TestRemove: removing an image unmounts its root and frees the layers and blobs no other image uses;
// what another image shares stays, and that image still mounts and exports; removing the rest leaves
// no layer and no blob behind.
func TestRemove(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	s := &Store{Dir: t.TempDir()}
	shared := ocitest.Layer(t, ocitest.Entry{Name: "etc/", Type: tar.TypeDir}, ocitest.Entry{Name: "etc/os-release", Body: "ID=test\n"})
	a, err := s.Import(ctx, ocitest.WriteLayout(t, ocitest.Image(t, v1.Config{}, shared, ocitest.Layer(t, ocitest.Entry{Name: "a", Body: "a"}))))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Derive(ctx, a.Digest, Step{Layer: bytes.NewReader(ocitest.Layer(t, ocitest.Entry{Name: "b", Body: "b"})), CreatedBy: "b"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Import(ctx, ocitest.WriteLayout(t, ocitest.Image(t, v1.Config{}, shared)))
	if err != nil {
		t.Fatal(err)
	}
	root, err := s.Mount(a.Digest)
	if err != nil {
		t.Fatal(err)
	}
	count := func(dir string) int {
		ents, _ := os.ReadDir(filepath.Join(s.Dir, dir))
		return len(ents)
	}
	layers, blobs := count("layers"), count(filepath.Join("blobs", "sha256"))
	if layers != 3 {
		t.Fatalf("%d layers; want 3 (shared, a, b)", layers)
	}

	st, err := s.Remove([]string{a.Digest, b.Digest})
	if err != nil {
		t.Fatal(err)
	}
	if st.Images != 2 || st.Layers != 2 || count("layers") != 1 || st.Blobs == 0 || count(filepath.Join("blobs", "sha256")) != blobs-st.Blobs {
		t.Errorf("removed %+v, %d layers and %d blobs left (of %d, %d); want 2 images and 2 layers gone, the shared one kept", st, count("layers"), count(filepath.Join("blobs", "sha256")), layers, blobs)
	}
	if mounted(root) {
		t.Errorf("%s is still mounted", root)
	}
	if _, err := s.Get(a.Digest); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a removed image: %v; want not found", err)
	}
	left, err := s.List()
	if err != nil || len(left) != 1 || left[0].Digest != c.Digest {
		t.Errorf("List after removing: %+v, %v; want only %s", left, err, c.Digest)
	}
	rootC, err := s.Mount(c.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(rootC, "etc/os-release")); err != nil || string(got) != "ID=test\n" {
		t.Errorf("the kept image's file: %q, %v", got, err)
	}
	if err := s.Export(ctx, c.Digest, io.Discard); err != nil {
		t.Errorf("export of the kept image: %v", err)
	}
	if _, err := s.Remove([]string{c.Digest}); err != nil {
		t.Fatal(err)
	}
	if n, m := count("layers"), count(filepath.Join("blobs", "sha256")); n != 0 || m != 0 {
		t.Errorf("after removing every image: %d layers, %d blobs; want none", n, m)
	}
	if _, err := s.Remove([]string{"sha256:../../etc"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a digest that is a path: %v; want invalid argument", err)
	}
}
