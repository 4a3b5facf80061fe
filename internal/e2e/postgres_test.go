package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/internal/testenv/pgtest"
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
