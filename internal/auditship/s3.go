package auditship

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// S3Config says where an S3 sink writes. It holds a secret: it logs and prints without it.
type S3Config struct {
	// Endpoint is the service's URL ("https://s3.eu-west-1.amazonaws.com", "http://127.0.0.1:9000") or
	// host[:port] (HTTPS). Empty: AWS's global endpoint.
	Endpoint string
	// Region of the bucket; empty: "us-east-1".
	Region string
	// Bucket must exist. Prefix, if set, goes before the keys ("audit/prod", no slash at either end).
	Bucket, Prefix string
	// AccessKey, SecretKey and SessionToken authenticate (AWS signature v4); all empty: anonymous.
	AccessKey, SecretKey, SessionToken string
	// PathStyle addresses the bucket in the URL's path (endpoint/bucket/key), as most S3-compatible
	// services want; false: as the client picks for the endpoint (virtual-hosted for AWS).
	PathStyle bool
}

// LogValue implements slog.LogValuer, without the secret.
func (c S3Config) LogValue() slog.Value {
	return slog.GroupValue(slog.String("endpoint", c.Endpoint), slog.String("region", c.Region), slog.String("bucket", c.Bucket),
		slog.String("prefix", c.Prefix), slog.String("access_key", c.AccessKey), slog.Bool("path_style", c.PathStyle))
}

// String describes c without the secret.
func (c S3Config) String() string {
	return fmt.Sprintf("s3://%s/%s (endpoint %q, region %q, access key %q)", c.Bucket, c.Prefix, c.Endpoint, c.Region, c.AccessKey)
}

// S3 is a Sink that stores each batch as one object of JSON lines (the export's format), named
// <prefix>/<tenant>/<first seq>-<last seq>.jsonl with both numbers 20 digits wide: the names sort in
// the log's order, a batch shipped again after a crash overwrites its own object, and the objects
// concatenated in the order of their names verify as one export. It is a Holder: it lists the
// tenant's objects to find the last entry the bucket holds.
type S3 struct {
	c      *minio.Client
	bucket string
	prefix string
	log    *slog.Logger
}

var (
	_ Sink   = (*S3)(nil)
	_ Holder = (*S3)(nil)
)

// NewS3 returns an S3 sink for cfg. It makes no request.
func NewS3(cfg S3Config, log *slog.Logger) (*S3, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := s3utils.CheckValidBucketNameStrict(cfg.Bucket); err != nil {
		return nil, fmt.Errorf("bucket %q: %v: %w", cfg.Bucket, err, errdefs.ErrInvalidArgument)
	}
	if !validPrefix(cfg.Prefix) {
		return nil, fmt.Errorf("key prefix %q: want segments separated by single slashes, none . or .., at most 512 bytes: %w", cfg.Prefix, errdefs.ErrInvalidArgument)
	}
	host, secure, err := ParseS3Endpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	creds := credentials.New(&credentials.Static{})
	if cfg.AccessKey != "" || cfg.SecretKey != "" {
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken)
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	c, err := minio.New(host, &minio.Options{Creds: creds, Secure: secure, Region: region, BucketLookup: lookup})
	if err != nil {
		return nil, fmt.Errorf("s3 endpoint %q: %v: %w", cfg.Endpoint, err, errdefs.ErrInvalidArgument)
	}
	return &S3{c: c, bucket: cfg.Bucket, prefix: cfg.Prefix, log: log}, nil
}

// ParseS3Endpoint reads an S3 endpoint: a URL (its scheme says whether to use TLS) or host[:port]
// (TLS); "" is AWS's global endpoint. It returns the host[:port].
func ParseS3Endpoint(s string) (host string, secure bool, err error) {
	if s == "" {
		return "s3.amazonaws.com", true, nil
	}
	full := s
	if !strings.Contains(s, "://") {
		full = "https://" + s
	}
	u, err := url.Parse(full)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", false, fmt.Errorf("s3 endpoint %q: want http(s)://host[:port] or host[:port]: %w", s, errdefs.ErrInvalidArgument)
	}
	return u.Host, u.Scheme == "https", nil
}

// validPrefix reports whether p is a key prefix: "" or segments separated by single slashes, none
// "." or "..", without control characters, at most 512 bytes.
func validPrefix(p string) bool {
	if p == "" {
		return true
	}
	if len(p) > 512 || strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return false
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// tenantSegment is the key segment of a tenant's objects: the tenant's ID, or "audit" if the
// entries name none.
func tenantSegment(tenant string) (string, error) {
	if tenant == "" {
		return "audit", nil
	}
	if !safeSegment.MatchString(tenant) || tenant == "." || tenant == ".." {
		return "", Permanent(fmt.Errorf("tenant ID %q cannot be a key segment: %w", tenant, errdefs.ErrInvalidArgument))
	}
	return tenant, nil
}

var safeSegment = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// objectName matches the last segment of a batch's object name.
var objectName = regexp.MustCompile(`^([0-9]{20})-([0-9]{20})\.jsonl$`)

func (s *S3) dir(tenant string) (string, error) {
	seg, err := tenantSegment(tenant)
	if err != nil {
		return "", err
	}
	return path.Join(s.prefix, seg) + "/", nil
}

// ObjectKey returns the key of the object holding entries first..last of tenant's log under prefix.
func ObjectKey(prefix, tenant string, first, last int64) (string, error) {
	seg, err := tenantSegment(tenant)
	if err != nil {
		return "", err
	}
	return path.Join(prefix, seg, fmt.Sprintf("%020d-%020d.jsonl", first, last)), nil
}

// Ship implements Sink: one PutObject (atomic: the object is there whole, or not).
func (s *S3) Ship(ctx context.Context, entries []Entry) error {
	first, last := entries[0], entries[len(entries)-1]
	key, err := ObjectKey(s.prefix, first.Tenant, first.Seq, last.Seq)
	if err != nil {
		return err
	}
	b := joinLines(entries)
	if _, err := s.c.PutObject(ctx, s.bucket, key, bytes.NewReader(b), int64(len(b)),
		minio.PutObjectOptions{ContentType: "application/x-ndjson", DisableMultipart: true}); err != nil {
		return fmt.Errorf("put s3://%s/%s: %w", s.bucket, key, s3Err(err))
	}
	return nil
}

// Holds implements Holder: the highest last sequence number among the names of the tenant's objects.
// Credentials that may write but not list (AccessDenied) make it report 0, and a warning: the
// shipper then resumes from its state file.
func (s *S3) Holds(ctx context.Context, tenant string) (int64, string, error) {
	dir, err := s.dir(tenant)
	if err != nil {
		return 0, "", err
	}
	var held int64
	for o := range s.c.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: dir}) {
		if o.Err != nil {
			if minio.ToErrorResponse(o.Err).Code == "AccessDenied" {
				s.log.Warn("audit shipper: cannot list the bucket to see what it holds; resuming from the state file or --after", "bucket", s.bucket, "prefix", dir, "err", o.Err)
				return 0, "", nil
			}
			return 0, "", fmt.Errorf("list s3://%s/%s: %w", s.bucket, dir, s3Err(o.Err))
		}
		m := objectName.FindStringSubmatch(strings.TrimPrefix(o.Key, dir))
		if m == nil {
			continue
		}
		if n, err := strconv.ParseInt(m[2], 10, 64); err == nil && n > held {
			held = n
		}
	}
	return held, "", nil
}

// Close implements Sink.
func (s *S3) Close() error { return nil }

// s3Err marks the errors retrying does not mend as permanent: refused credentials, a missing bucket.
func s3Err(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.Code == "NoSuchBucket":
		return Permanent(fmt.Errorf("%w: %w", errdefs.ErrNotFound, err))
	case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized:
		return Permanent(fmt.Errorf("%w: %w", errdefs.ErrPermissionDenied, err))
	}
	return err
}
