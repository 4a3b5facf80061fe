package bench

import (
	"archive/tar"
	"context"
	"os"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlockrun/airlock/internal/template/oci/ocitest"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// BenchmarkCreateFromImageTemplate: create → first exec in a sandbox of an image template (host
// programs and their libraries as an OCI image, imported through the API) against the default
// template, on gVisor (target of issue 21: within 10%). The image root is mounted once, on first use,
// outside the timing, as the default root is built once.
func BenchmarkCreateFromImageTemplate(b *testing.B) {
	e := testenv.Start(b, testenv.Options{})
	img := ocitest.Image(b, v1.Config{Env: []string{"LANG=C.UTF-8"}},
		ocitest.HostPrograms(b, "/usr/bin/bash", "/usr/bin/true", "/usr/bin/cat", "/usr/bin/ls"),
		ocitest.Layer(b, ocitest.Entry{Name: "srv/", Type: tar.TypeDir}, ocitest.Entry{Name: "srv/app", Body: "app\n"}))
	f, err := os.Open(ocitest.WriteArchive(b, img, "example.test/bench:1"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := e.Client.ImportTemplate(context.Background(), "bench", f); err != nil {
		b.Fatal(err)
	}
	for _, tpl := range []string{"default", "bench"} {
		b.Run(tpl, func(b *testing.B) {
			coldCreateFrom(b, e, airlock.CreateSandboxRequest{Template: tpl, TimeoutSeconds: 600})
		})
	}
}
