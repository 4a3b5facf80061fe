package oci

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlockrun/airlock/internal/blob/local"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/template/oci/ocitest"
)

// TestPublishFetch: an image one node imported and published is fetched by another from the blob store
// as the same image (digest, config, layers, files), in chunks past ShareChunk; publishing again writes
// nothing new; an image nobody published is not found; a blob store whose layer chunk was changed, or
// whose manifest is another image's, gets nothing into the store.
func TestPublishFetch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mounts)")
	}
	ctx := context.Background()
	bs, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("0123456789abcdef", (ShareChunk+ShareChunk/2)/16) // a layer over one chunk, even compressed
	img := ocitest.Image(t, v1.Config{WorkingDir: "/srv", Cmd: []string{"true"}},
		ocitest.Layer(t, ocitest.Entry{Name: "srv/", Type: tar.TypeDir}, ocitest.Entry{Name: "srv/version", Body: "one\n"}),
		ocitest.Layer(t, ocitest.Entry{Name: "big", Body: big}))
	a := &Store{Dir: t.TempDir()}
	in, err := a.Import(ctx, ocitest.WriteLayout(t, img))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(ctx, bs, in.Digest); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		n := 0
		bs.List(ctx, sharedPrefix, func(string, int64, time.Time) error { n++; return nil })
		return n
	}
	objects := count()
	if err := a.Publish(ctx, bs, in.Digest); err != nil || count() != objects {
		t.Errorf("publish again: %v, %d objects (was %d)", err, count(), objects)
	}

	b := &Store{Dir: t.TempDir()}
	got, err := b.Fetch(ctx, bs, in.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != in.Digest || got.Config.WorkingDir != "/srv" || len(got.Layers) != 2 || strings.Join(got.Config.Cmd, " ") != "true" {
		t.Errorf("fetched %+v; want %+v", got, in)
	}
	root, err := b.Mount(got.Digest)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Unmount(got.Digest) })
	if v, err := os.ReadFile(filepath.Join(root, "srv/version")); err != nil || string(v) != "one\n" {
		t.Errorf("the fetched image's srv/version: %q, %v", v, err)
	}
	if v, err := os.ReadFile(filepath.Join(root, "big")); err != nil || string(v) != big {
		t.Errorf("the fetched image's big file: %d bytes, %v; want %d", len(v), err, len(big))
	}

	if _, err := (&Store{Dir: t.TempDir()}).Fetch(ctx, bs, "sha256:"+strings.Repeat("0", 64)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("fetch of an image nobody published: %v; want not found", err)
	}

	// A changed chunk of the big layer: refused, nothing kept.
	m, _ := img.Manifest()
	key := sharedKey(m.Layers[1].Digest, "00000000")
	chunk, err := bs.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	chunk[100] ^= 0xff
	if err := bs.Put(ctx, key, chunk); err != nil {
		t.Fatal(err)
	}
	c := &Store{Dir: t.TempDir()}
	if _, err := c.Fetch(ctx, bs, in.Digest); !errors.Is(err, ErrBadLayer) {
		t.Errorf("fetch with a changed layer chunk: %v; want a bad layer", err)
	}
	if imgs, _ := c.List(); len(imgs) != 0 {
		t.Errorf("a refused fetch left images %v", imgs)
	}
	// Another image's manifest under this digest: refused.
	other := ocitest.Image(t, v1.Config{}, ocitest.Layer(t, ocitest.Entry{Name: "x", Body: "x"}))
	od, _ := other.Digest()
	raw, _ := other.RawManifest()
	want, _ := v1.NewHash(in.Digest)
	if err := bs.Put(ctx, sharedKey(want, "00000000"), raw); err != nil {
		t.Fatal(err)
	}
	if err := bs.Put(ctx, sharedKey(want, "size"), []byte(strconv.Itoa(len(raw))+" 1")); err != nil {
		t.Fatal(err)
	}
	if _, err := (&Store{Dir: t.TempDir()}).Fetch(ctx, bs, in.Digest); !errors.Is(err, ErrBadLayer) || !strings.Contains(err.Error(), od.String()) {
		t.Errorf("fetch of a manifest that is %s's: %v; want refused", od, err)
	}
}
