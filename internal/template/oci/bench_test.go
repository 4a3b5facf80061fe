package oci

import (
	"archive/tar"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlockrun/airlock/internal/template/oci/ocitest"
)

// BenchmarkImport300MB: importing a `docker save` tarball of a ~300 MB image (three gzipped layers of
// 100 MB of incompressible files each, like a language runtime's) into an empty store: reading the
// archive, gunzipping, checking each layer's digest and unpacking it. Run:
//
//	sudo go test -run '^$' -bench Import300MB -benchtime 5x ./internal/template/oci/
func BenchmarkImport300MB(b *testing.B) {
	rng := rand.New(rand.NewChaCha8([32]byte{1}))
	var layers [][]byte
	for l := range 3 {
		var es []ocitest.Entry
		es = append(es, ocitest.Entry{Name: fmt.Sprintf("layer%d/", l), Type: tar.TypeDir})
		for f := range 100 {
			body := make([]byte, 1<<20)
			for i := range body {
				body[i] = byte(rng.Uint32())
			}
			es = append(es, ocitest.Entry{Name: fmt.Sprintf("layer%d/file%03d", l, f), Body: string(body)})
		}
		layers = append(layers, ocitest.Layer(b, es...))
	}
	archive := ocitest.WriteArchive(b, ocitest.Image(b, v1.Config{}, layers...), "example.test/big:1")
	var d []time.Duration
	b.ResetTimer()
	for range b.N {
		s := &Store{Dir: b.TempDir()}
		start := time.Now()
		if _, err := s.Import(context.Background(), archive); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(start))
	}
	b.StopTimer()
	reportMedian(b, d)
}

func reportMedian(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	s := slices.Clone(d)
	slices.Sort(s)
	b.ReportMetric(float64(s[(len(s)-1)/2])/float64(time.Millisecond), "p50_ms")
}
