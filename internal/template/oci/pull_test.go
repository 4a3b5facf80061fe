package oci

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/template/oci/ocitest"
	"github.com/airlockrun/airlock/internal/testenv/registrytest"
)

// TestPull: an image pulled from a real registry (docker-registry) is the image pushed, by digest; a
// registry on plain HTTP is refused unless named insecure (even on loopback); a registry that wants
// credentials refuses none and wrong ones and takes the right ones; a multi-platform index gives
// linux/amd64; a missing tag is not found.
func TestPull(t *testing.T) {
	ctx := context.Background()
	img := ocitest.Image(t, v1.Config{Env: []string{"A=1"}}, ocitest.Layer(t, ocitest.Entry{Name: "hello", Body: "hi"}))
	want, _ := img.Digest()

	open := registrytest.Start(t, "", "")
	ref := open.Push(t, img, "tiny:1")
	s := &Store{Dir: t.TempDir()}
	if _, err := s.Pull(ctx, ref, PullOptions{}); !errors.Is(err, ErrPlainHTTP) || !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("pull over plain HTTP, not named insecure: %v; want refused", err)
	}
	got, err := s.Pull(ctx, ref, PullOptions{Insecure: true})
	if err != nil || got.Digest != want.String() || len(got.Layers) != 1 || got.Config.Env[0] != "A=1" {
		t.Fatalf("pull = %+v, %v; want digest %s", got, err, want)
	}
	if _, err := s.Pull(ctx, open.Host+"/tiny:no-such-tag", PullOptions{Insecure: true}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("pull of a missing tag: %v; want not found", err)
	}

	// A multi-platform index: linux/amd64 is taken.
	arm := ocitest.Image(t, v1.Config{Env: []string{"ARCH=arm64"}}, ocitest.Layer(t, ocitest.Entry{Name: "arm", Body: "arm"}))
	armCF, _ := arm.ConfigFile()
	armCF = armCF.DeepCopy()
	armCF.Architecture = "arm64"
	arm, _ = mutate.ConfigFile(arm, armCF)
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}})
	iref, err := name.ParseReference(open.Host+"/multi:1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(iref, idx); err != nil {
		t.Fatal(err)
	}
	if got, err := (&Store{Dir: t.TempDir()}).Pull(ctx, iref.String(), PullOptions{Insecure: true}); err != nil || got.Digest != want.String() {
		t.Errorf("pull of an index = %+v, %v; want the amd64 image %s", got, err, want)
	}

	locked := registrytest.Start(t, "bob", "s3cret")
	lref := locked.Push(t, img, "private/tiny:1")
	for _, o := range []PullOptions{{Insecure: true}, {Insecure: true, Username: "bob", Password: []byte("wrong")}} {
		if _, err := (&Store{Dir: t.TempDir()}).Pull(ctx, lref, o); !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("pull with user %q: %v; want permission denied", o.Username, err)
		}
	}
	got, err = (&Store{Dir: t.TempDir()}).Pull(ctx, lref, PullOptions{Insecure: true, Username: "bob", Password: []byte("s3cret")})
	if err != nil || got.Digest != want.String() {
		t.Errorf("pull with the right credentials = %+v, %v", got, err)
	}
}
