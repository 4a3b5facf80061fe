// Package s3 is a blob.Store in a bucket of S3 or any S3-compatible service (MinIO, Ceph RGW, versitygw,
// …), through github.com/minio/minio-go. Objects are stored under an optional key prefix, so several
// Airlock installations (or a test per run) can share a bucket.
//
// The object with key "a/b" is named <prefix>a/b!. The suffix, which no key contains, lets "a" and
// "a/b" both exist, as the blob.Store contract wants, also on services that keep objects as files (a
// file "a" could not be a directory "a" too: versitygw's posix backend, MinIO's gateway modes), and it
// tells Airlock's objects from anything else in the bucket. '!' sorts below every character of a key,
// so S3's listing in byte order of names is the order of keys too.
//
// Put is one PutObject (atomic in S3: readers see the old object or the new one). Create is PutObject
// with "If-None-Match: *", which S3 and the S3-compatible services that support conditional writes
// answer with 412 when the key is taken; a service that ignores the header cannot give Create's
// guarantee, so New checks it once and refuses such a service.
package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/airlockrun/airlock/internal/blob"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// Config says where the bucket is.
type Config struct {
	// Endpoint is the service's host[:port], e.g. "s3.eu-west-1.amazonaws.com" or "127.0.0.1:9000".
	Endpoint string
	// Insecure uses plain HTTP (a service on loopback or a private network); the default is HTTPS.
	Insecure bool
	// Region of the bucket; empty lets the client find out.
	Region string
	// Bucket must exist.
	Bucket string
	// Prefix, if set, goes before every key ("airlock/" …): a valid key prefix ending in '/', of at most
	// MaxPrefix bytes.
	Prefix string
	// AccessKey and SecretKey authenticate (AWS signature v4). Empty: anonymous.
	AccessKey, SecretKey string
}

// MaxPrefix is the longest Config.Prefix: with the suffix and blob.MaxKeySize it stays within S3's 1024.
const MaxPrefix = 1024 - blob.MaxKeySize - len(suffix)

// suffix ends every object's name (see the package documentation).
const suffix = "!"

// Store is a blob.Store in an S3 bucket. It also implements blob.Creator. Safe for concurrent use.
type Store struct {
	c      *minio.Client
	bucket string
	prefix string
}

var (
	_ blob.Store   = (*Store)(nil)
	_ blob.Creator = (*Store)(nil)
)

// New connects to the bucket cfg names and checks that it exists and honours conditional writes.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, fmt.Errorf("s3 blob store: endpoint and bucket are required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Prefix != "" && (!strings.HasSuffix(cfg.Prefix, "/") || blob.ValidatePrefix(cfg.Prefix) != nil || len(cfg.Prefix) > MaxPrefix) {
		return nil, fmt.Errorf("s3 blob store: prefix %q: want key segments ending in '/', at most %d bytes: %w", cfg.Prefix, MaxPrefix, errdefs.ErrInvalidArgument)
	}
	var creds *credentials.Credentials
	if cfg.AccessKey != "" {
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	} else {
		creds = credentials.New(&credentials.Static{})
	}
	c, err := minio.New(cfg.Endpoint, &minio.Options{Creds: creds, Secure: !cfg.Insecure, Region: cfg.Region})
	if err != nil {
		return nil, fmt.Errorf("s3 blob store %s: %w", cfg.Endpoint, err)
	}
	s := &Store{c: c, bucket: cfg.Bucket, prefix: cfg.Prefix}
	ok, err := c.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("s3 blob store %s: bucket %s: %w", cfg.Endpoint, cfg.Bucket, mapErr(err))
	}
	if !ok {
		return nil, fmt.Errorf("s3 blob store %s: bucket %s does not exist: %w", cfg.Endpoint, cfg.Bucket, errdefs.ErrNotFound)
	}
	if err := s.checkConditional(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// checkConditional makes sure the service refuses a conditional write to a taken key.
func (s *Store) checkConditional(ctx context.Context) error {
	key := fmt.Sprintf("airlock-check/create-%d", time.Now().UnixNano())
	if err := s.Create(ctx, key, []byte("1")); err != nil {
		return fmt.Errorf("s3 blob store: check conditional writes: %w", err)
	}
	defer s.Delete(context.WithoutCancel(ctx), key)
	err := s.Create(ctx, key, []byte("2"))
	if !errors.Is(err, errdefs.ErrAlreadyExists) {
		return fmt.Errorf("s3 blob store: the service does not honour If-None-Match on PutObject (a second create of one key gave %v), so snapshots could be overwritten: %w", err, errdefs.ErrFailedPrecondition)
	}
	return nil
}

func (s *Store) name(key string) string { return s.prefix + key + suffix }

// Put implements blob.Store.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if err := blob.ValidateKey(key); err != nil {
		return err
	}
	if _, err := s.c.PutObject(ctx, s.bucket, s.name(key), bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true}); err != nil {
		return fmt.Errorf("put blob %s: %w", key, mapErr(err))
	}
	return nil
}

// Create implements blob.Creator.
func (s *Store) Create(ctx context.Context, key string, data []byte) error {
	if err := blob.ValidateKey(key); err != nil {
		return err
	}
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true}
	opts.SetMatchETagExcept("*")
	if _, err := s.c.PutObject(ctx, s.bucket, s.name(key), bytes.NewReader(data), int64(len(data)), opts); err != nil {
		if code := minio.ToErrorResponse(err).StatusCode; code == http.StatusPreconditionFailed || code == http.StatusConflict {
			// The client retries a PUT whose answer was lost; the retry then finds our own first write. The
			// same bytes there are our object, not someone else's.
			if have, gerr := s.Get(ctx, key); gerr == nil && bytes.Equal(have, data) {
				return nil
			}
			return fmt.Errorf("create blob %s: %w", key, errdefs.ErrAlreadyExists)
		}
		return fmt.Errorf("create blob %s: %w", key, mapErr(err))
	}
	return nil
}

// Get implements blob.Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := blob.ValidateKey(key); err != nil {
		return nil, err
	}
	obj, err := s.c.GetObject(ctx, s.bucket, s.name(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("get blob %s: %w", key, mapErr(err))
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		return nil, fmt.Errorf("get blob %s: %w", key, mapErr(err))
	}
	return data, nil
}

// Stat implements blob.Store.
func (s *Store) Stat(ctx context.Context, key string) (int64, error) {
	if err := blob.ValidateKey(key); err != nil {
		return 0, err
	}
	info, err := s.c.StatObject(ctx, s.bucket, s.name(key), minio.StatObjectOptions{})
	if err != nil {
		return 0, fmt.Errorf("stat blob %s: %w", key, mapErr(err))
	}
	return info.Size, nil
}

// Delete implements blob.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := blob.ValidateKey(key); err != nil {
		return err
	}
	if err := s.c.RemoveObject(ctx, s.bucket, s.name(key), minio.RemoveObjectOptions{}); err != nil {
		if minio.ToErrorResponse(err).StatusCode == http.StatusNotFound {
			return nil
		}
		return fmt.Errorf("delete blob %s: %w", key, mapErr(err))
	}
	return nil
}

// List implements blob.Store. S3 lists keys in byte order (ListObjectsV2).
func (s *Store) List(ctx context.Context, prefix string, fn func(key string, size int64, modTime time.Time) error) error {
	if err := blob.ValidatePrefix(prefix); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	objs := s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true})
	defer func() {
		// Stop the client's listing goroutine when fn stops early, and take what it still sends: it
		// blocks on its last send otherwise, and stays.
		cancel()
		for range objs {
		}
	}()
	for obj := range objs {
		if obj.Err != nil {
			return fmt.Errorf("list blobs %q: %w", prefix, mapErr(obj.Err))
		}
		key, ok := strings.CutSuffix(strings.TrimPrefix(obj.Key, s.prefix), suffix)
		if !ok || blob.ValidateKey(key) != nil {
			continue // not an object of ours (another tool's, sharing the bucket)
		}
		if err := fn(key, obj.Size, obj.LastModified); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// mapErr adds the errdefs sentinel that matches an S3 error: a missing key or bucket is ErrNotFound,
// refused credentials ErrPermissionDenied, a throttled or failing service ErrUnavailable. A context that
// ended is returned as it is.
func mapErr(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.Code == "NoSuchKey" || resp.Code == "NoSuchBucket":
		return fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
	case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("%w: %w", errdefs.ErrPermissionDenied, err)
	case resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests ||
		resp.StatusCode >= 500 || resp.StatusCode == 0:
		return fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
	}
	return err
}
