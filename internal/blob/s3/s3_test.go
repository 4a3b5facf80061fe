package s3_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/airlockrun/airlock/internal/blob"
	"github.com/airlockrun/airlock/internal/blob/blobtest"
	"github.com/airlockrun/airlock/internal/blob/s3"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/testenv/s3test"
)

var prefixes atomic.Int64

// TestConformance runs the blob.Store suite against a real S3-compatible server (versitygw), each
// subtest under a prefix of its own in one bucket, as installations sharing a bucket would be.
func TestConformance(t *testing.T) {
	srv := s3test.Start(t)
	blobtest.Run(t, func(t *testing.T) blob.Store {
		s, err := s3.New(t.Context(), s3.Config{Endpoint: srv.Endpoint, Insecure: true, Bucket: srv.Bucket,
			AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Prefix: fmt.Sprintf("run%d/", prefixes.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestNewRefuses(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		cfg  s3.Config
		want error
	}{
		{"no bucket", s3.Config{Endpoint: srv.Endpoint}, errdefs.ErrInvalidArgument},
		{"bad prefix", s3.Config{Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: "no-slash"}, errdefs.ErrInvalidArgument},
		{"missing bucket", s3.Config{Endpoint: srv.Endpoint, Insecure: true, Bucket: "no-such-bucket", AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}, errdefs.ErrNotFound},
		{"wrong secret", s3.Config{Endpoint: srv.Endpoint, Insecure: true, Bucket: srv.Bucket, AccessKey: srv.AccessKey, SecretKey: "wrong"}, errdefs.ErrPermissionDenied},
	} {
		if _, err := s3.New(ctx, c.cfg); !errors.Is(err, c.want) {
			t.Errorf("%s: %v; want %v", c.name, err, c.want)
		}
	}
}
