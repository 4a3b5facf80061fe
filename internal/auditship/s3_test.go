package auditship_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/airlockrun/airlock/internal/auditship"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/testenv/s3test"
)

// bucketObjects returns the keys under prefix in name order and the objects' contents concatenated
// in that order.
func bucketObjects(t *testing.T, srv s3test.Server, prefix string) ([]string, []byte) {
	t.Helper()
	c, err := minio.New(srv.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var keys []string
	var all []byte
	for o := range c.ListObjectsIter(ctx, srv.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
		obj, err := c.GetObject(ctx, srv.Bucket, o.Key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(obj)
		obj.Close()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return keys, all
}

// TestS3Sink ships to a real S3-compatible server (versitygw): a batch an object under
// PREFIX/TENANT/FIRST-LAST.jsonl, the objects in name order verify as one export, a batch shipped
// again overwrites its own object, and a shipper started again without a state file ships only what
// the bucket lacks.
func TestS3Sink(t *testing.T) {
	srv := s3test.Start(t)
	cfg := auditship.S3Config{Endpoint: "http://" + srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PathStyle: true,
		Bucket: srv.Bucket, Prefix: "audit/prod"}
	s, err := auditship.NewS3(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := newFakeLog("tn_a", 10)
	ship := func() auditship.Stats {
		t.Helper()
		st, err := (&auditship.Shipper{Source: l.Source, Sink: s, BatchEntries: 4}).Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	ship()
	keys, data := bucketObjects(t, srv, "audit/")
	want := []string{
		"audit/prod/tn_a/00000000000000000001-00000000000000000004.jsonl",
		"audit/prod/tn_a/00000000000000000005-00000000000000000008.jsonl",
		"audit/prod/tn_a/00000000000000000009-00000000000000000010.jsonl",
	}
	if diff := cmp.Diff(want, keys); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	if !bytes.Equal(data, l.export(0)) {
		t.Errorf("the objects concatenated:\n%s\nwant the log:\n%s", data, l.export(0))
	}
	verify(t, data)

	if st := ship(); st.Entries != 0 {
		t.Errorf("a second run with nothing new shipped %+v", st)
	}
	if seq, _, err := s.Holds(context.Background(), "tn_a"); err != nil || seq != 10 {
		t.Errorf("Holds = %d, %v; want 10", seq, err)
	}
	l.add(3)
	if st := ship(); st.First != 11 || st.Last != 13 {
		t.Errorf("after 3 more: shipped %+v; want 11..13", st)
	}
	// A batch shipped again (a crash before the state file was written) overwrites its object.
	if err := s.Ship(context.Background(), entries(t, l)[10:13]); err != nil {
		t.Fatal(err)
	}
	keys, data = bucketObjects(t, srv, "audit/")
	if len(keys) != 4 || !bytes.Equal(data, l.export(0)) {
		t.Errorf("after a batch shipped again: %d objects %v, holding:\n%s\nwant 4, the log", len(keys), keys, data)
	}

	// An entry with no tenant goes under "audit".
	if k, err := auditship.ObjectKey("p", "", 1, 2); err != nil || k != "p/audit/00000000000000000001-00000000000000000002.jsonl" {
		t.Errorf("ObjectKey of no tenant = %q, %v", k, err)
	}
	if _, err := auditship.ObjectKey("p", "../x", 1, 2); err == nil {
		t.Error("a tenant ID with a slash made a key")
	}

	// Refusals retrying does not mend are permanent: a wrong secret, a missing bucket.
	for name, c := range map[string]auditship.S3Config{
		"wrong secret":   {Endpoint: cfg.Endpoint, AccessKey: srv.AccessKey, SecretKey: "wrong", PathStyle: true, Bucket: srv.Bucket},
		"missing bucket": {Endpoint: cfg.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PathStyle: true, Bucket: "no-such-bucket"},
	} {
		s, err := auditship.NewS3(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Ship(context.Background(), entries(t, l)[:1])
		if !auditship.IsPermanent(err) {
			t.Errorf("%s: Ship = %v; want a permanent error", name, err)
		}
	}
}

func TestNewS3Refuses(t *testing.T) {
	for name, c := range map[string]auditship.S3Config{
		"bad bucket":      {Bucket: "Not_A_Bucket"},
		"prefix dot-dot":  {Bucket: "b-1", Prefix: "a/../b"},
		"prefix slash":    {Bucket: "b-1", Prefix: "a//b"},
		"endpoint path":   {Bucket: "b-1", Endpoint: "https://s3.example.com/x"},
		"endpoint scheme": {Bucket: "b-1", Endpoint: "ftp://s3.example.com"},
	} {
		if _, err := auditship.NewS3(c, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: NewS3 = %v; want ErrInvalidArgument", name, err)
		}
	}
	// The secret is not in what a config prints or logs.
	c := auditship.S3Config{Bucket: "b", AccessKey: "AKIA1", SecretKey: "s3cr3t-value"}
	var logged syncBuf
	testLog(&logged).Info("cfg", "s3", c)
	if s := c.String() + logged.String(); bytes.Contains([]byte(s), []byte("s3cr3t-value")) {
		t.Errorf("the secret is printed: %s", s)
	}
}

func TestParseDest(t *testing.T) {
	for _, c := range []struct {
		in   string
		want auditship.Dest
	}{
		{"", auditship.Dest{Kind: auditship.KindStdout}},
		{"-", auditship.Dest{Kind: auditship.KindStdout}},
		{"audit.jsonl", auditship.Dest{Kind: auditship.KindFile, Path: "audit.jsonl"}},
		{"/var/log/a:b.jsonl", auditship.Dest{Kind: auditship.KindFile, Path: "/var/log/a:b.jsonl"}},
		{"s3://my-audit", auditship.Dest{Kind: auditship.KindS3, Bucket: "my-audit"}},
		{"s3://my-audit/", auditship.Dest{Kind: auditship.KindS3, Bucket: "my-audit"}},
		{"s3://my-audit/airlock/prod/", auditship.Dest{Kind: auditship.KindS3, Bucket: "my-audit", Prefix: "airlock/prod"}},
		{"syslog+udp://127.0.0.1:514", auditship.Dest{Kind: auditship.KindSyslog, Network: "udp", Addr: "127.0.0.1:514"}},
		{"syslog+tcp://logs.example.com:601", auditship.Dest{Kind: auditship.KindSyslog, Network: "tcp", Addr: "logs.example.com:601"}},
		{"SYSLOG+TLS://[::1]:6514/", auditship.Dest{Kind: auditship.KindSyslog, Network: "tls", Addr: "[::1]:6514"}},
	} {
		got, err := auditship.ParseDest(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseDest(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if err == nil && got.Kind != auditship.KindStdout {
			if again, err := auditship.ParseDest(got.String()); err != nil || again != got {
				t.Errorf("ParseDest(%q.String() = %q) = %+v, %v", c.in, got.String(), again, err)
			}
		}
	}
	for _, in := range []string{
		"s3://", "s3://Bad_Bucket/x", "s3://b-1:9000/x", "s3://b-1/a/../b", "s3://b-1/x?versionId=1", "s3://user@b-1/x",
		"syslog+udp://127.0.0.1", "syslog+tcp://:514", "syslog+tls://host:6514/path", "syslog://host:514", "http://example.com/",
	} {
		if _, err := auditship.ParseDest(in); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParseDest(%q) = %v; want ErrInvalidArgument", in, err)
		}
	}
}
