package e2e

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	blobs3 "github.com/airlockrun/airlock/internal/blob/s3"
	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/internal/testenv/pgtest"
	"github.com/airlockrun/airlock/internal/testenv/s3test"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestPostgresStore runs Airlock with its Store in a real PostgreSQL database: sandboxes, a session
// paused and resumed, a tenant and its audit chain; then a restart on the same database finds it all,
// and nothing of the state went to an SQLite file.
func TestPostgresStore(t *testing.T) {
	testenv.RequireSandboxes(t)
	dsn := pgtest.Start(t)
	dir, err := os.MkdirTemp("", "airlock-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := testenv.Start(t, testenv.Options{DataDir: dir, PostgresDSN: dsn})
	ctx := ctxT(t, 5*time.Minute)

	sb := create(t, e, airlock.CreateSandboxRequest{Metadata: map[string]string{"engine": "postgres"}})
	if res := sh(t, e, sb.ID, "echo $((6*7))"); res.Stdout != "42\n" {
		t.Fatalf("exec: %+v", res)
	}
	se := newSession(t, e, airlock.CreateSessionRequest{})
	sh(t, e, se.ID, "echo kept > /home/user/state")
	if _, err := e.Client.PauseSession(ctx, se.ID); err != nil {
		t.Fatal(err)
	}
	if res := sh(t, e, se.ID, "cat /home/user/state"); res.Stdout != "kept\n" { // resumes it first
		t.Fatalf("after pause and resume: %+v", res)
	}
	if _, err := e.Client.CreateTenant(ctx, "on-postgres"); err != nil {
		t.Fatal(err)
	}
	if l, err := e.Client.ListSandboxes(ctx, airlock.ListOptions{Metadata: map[string]string{"engine": "postgres"}}); err != nil || len(l.Sandboxes) != 1 {
		t.Fatalf("list by metadata: %+v %v", l, err)
	}
	var out, errb bytes.Buffer
	if code := cli.Run(context.Background(), []string{"--url", e.URL, "--api-key", e.APIKey, "audit", "verify"},
		cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 || !strings.HasPrefix(out.String(), "ok: ") {
		t.Errorf("audit verify: %d %s %s", code, out.String(), errb.String())
	}

	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "airlock.db")); !os.IsNotExist(err) {
		t.Errorf("an SQLite file was made next to PostgreSQL: %v", err)
	}
	e2 := testenv.Start(t, testenv.Options{DataDir: dir, PostgresDSN: dsn})
	if e2.APIKey != e.APIKey {
		t.Errorf("API key changed across the restart")
	}
	if got, err := e2.Client.GetSandbox(ctx, sb.ID); err != nil || got.State != airlock.StateStopped || got.Metadata["engine"] != "postgres" {
		t.Errorf("sandbox after the restart: %+v %v", got, err)
	}
	if res := sh(t, e2, se.ID, "cat /home/user/state"); res.Stdout != "kept\n" {
		t.Errorf("session after the restart: %+v", res)
	}
}

// TestScaleOutStores runs Airlock on PostgreSQL and a real S3-compatible server (versitygw) together:
// a session's pause writes its snapshot to the bucket, not the data directory, and a resume reads it
// back; nothing in the bucket holds the marker the session keeps in memory and in a file.
func TestScaleOutStores(t *testing.T) {
	testenv.RequireSandboxes(t)
	dsn := pgtest.Start(t)
	srv := s3test.Start(t)
	cfg := &blobs3.Config{Endpoint: srv.Endpoint, Insecure: true, Bucket: srv.Bucket, Prefix: "airlock/",
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
	master := filepath.Join(t.TempDir(), "master.key")
	e := testenv.Start(t, testenv.Options{PostgresDSN: dsn, S3: cfg, MasterKeyFile: master})
	ctx := ctxT(t, 5*time.Minute)

	const marker = "s3-marker-7f3a9c"
	se := newSession(t, e, airlock.CreateSessionRequest{})
	sh(t, e, se.ID, "echo "+marker+" > /home/user/m && (setsid nohup python3 -c 'import time; m = \""+marker+"\" * 1000; time.sleep(3600)' >/dev/null 2>&1 &) && sleep 0.5")
	if _, err := e.Client.PauseSession(ctx, se.ID); err != nil {
		t.Fatal(err)
	}
	snaps, err := e.Client.ListSnapshots(ctx, se.ID, airlock.ListOptions{})
	if err != nil || len(snaps.Snapshots) == 0 {
		t.Fatalf("snapshots: %+v %v", snaps, err)
	}
	if _, err := e.Client.WaitSnapshot(ctx, se.ID, snaps.Snapshots[0].ID); err != nil {
		t.Fatal(err)
	}
	if res := sh(t, e, se.ID, "cat /home/user/m"); res.Stdout != marker+"\n" {
		t.Fatalf("after resume: %+v", res)
	}
	if entries, _ := os.ReadDir(filepath.Join(e.DataDir, "blobs")); len(entries) != 0 {
		t.Errorf("the data directory's blobs hold %d entries; want the bucket to hold them", len(entries))
	}
	c, err := minio.New(srv.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for obj := range c.ListObjects(ctx, srv.Bucket, minio.ListObjectsOptions{Prefix: "airlock/", Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		n++
		o, err := c.GetObject(ctx, srv.Bucket, obj.Key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(o)
		o.Close()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte(marker)) {
			t.Errorf("object %s holds the marker in plain text", obj.Key)
		}
	}
	if n == 0 {
		t.Fatal("the bucket holds nothing after a pause")
	}
	t.Logf("%d objects in the bucket after one pause", n)

	// Another server, with a data directory of its own (another host) and the same database, bucket
	// and master key, resumes the session the first one paused: the snapshot comes from the bucket,
	// the tenant's keys from the database. A secret made through the first can be changed through the
	// second.
	if _, err := e.Client.CreateSecret(ctx, "shared-token", "s3cr3t-value"); err != nil {
		t.Fatal(err)
	}
	sh(t, e, se.ID, "echo second >> /home/user/m")
	if _, err := e.Client.PauseSession(ctx, se.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	e2 := testenv.Start(t, testenv.Options{PostgresDSN: dsn, S3: cfg, MasterKeyFile: master, APIKey: e.APIKey})
	if e2.DataDir == e.DataDir {
		t.Fatal("the second server shares the first one's data directory")
	}
	if res := sh(t, e2, se.ID, "cat /home/user/m"); res.Stdout != marker+"\nsecond\n" {
		t.Fatalf("resumed on the second server: %+v", res)
	}
	// An update unwraps the tenant's secrets key: the second server has the first one's keyring.
	if s, err := e2.Client.UpdateSecret(ctx, "shared-token", "s3cr3t-value-2"); err != nil || s.Version != 2 {
		t.Errorf("update a secret on the second server: %+v, %v", s, err)
	}
	assertNotInDir(t, e2.DataDir, "s3cr3t-value")
}
