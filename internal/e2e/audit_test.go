package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestAuditLog: a tenant's audit log holds its API calls, its sandboxes' daemon messages and its egress
// decisions, chained by hashes; `airlock audit verify` accepts the export and names the line that was
// tampered with, in an exported file and in the database itself.
func TestAuditLog(t *testing.T) {
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 3*time.Minute)
	c := e.Client
	// A host rule on port 80 sends that port's connections to the gateway (any other port a default-deny
	// policy leaves closed is refused by the kernel at the SYN, before the gateway could record it).
	sb := create(t, e, airlock.CreateSandboxRequest{Network: &airlock.NetworkPolicy{Rules: []airlock.NetworkRule{
		{Action: "allow", Host: "api.example.test", Ports: []airlock.PortRange{"80"}}}}})
	run(t, e, sb.ID, airlock.ExecRequest{Cmd: []string{"echo", "audited"}})
	// An egress attempt the gateway refuses (a private address, which no rule names).
	sh(t, e, sb.ID, "python3 -c 'import socket; s=socket.socket(); s.settimeout(3); s.connect((\"10.255.255.1\", 80))' || true")
	if _, err := c.GetSandbox(ctx, "sb_aaaaaaaaaaaaaaaaaaaaaaaaaa"); err == nil {
		t.Fatal("a missing sandbox was found")
	}

	export := func() []byte { return exportAudit(t, c) }
	var data []byte
	kinds := map[string]bool{}
	sawGet := false
	deadline := time.Now().Add(20 * time.Second)
	for len(kinds) < 3 && time.Now().Before(deadline) {
		data = export()
		kinds = map[string]bool{}
		for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			var en airlock.AuditEntry
			if err := json.Unmarshal(line, &en); err != nil {
				t.Fatalf("export line %q: %v", line, err)
			}
			kinds[en.Kind] = true
			if en.Kind == "api" && strings.Contains(en.Action, "/v1/sandboxes/{id}") && en.Target == "sb_aaaaaaaaaaaaaaaaaaaaaaaaaa" {
				sawGet = true
				if en.Action != "GET /v1/sandboxes/{id}" || en.Result != "404" || en.Actor == "" {
					t.Errorf("the failed get is recorded as %+v; want GET /v1/sandboxes/{id}, 404, the key's ID", en)
				}
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	if !sawGet {
		t.Error("the failed get is not in the audit log")
	}
	for _, k := range []string{"api", "daemon", "egress"} {
		if !kinds[k] {
			t.Errorf("the audit log has no %s entry:\n%s", k, truncate(string(data)))
		}
	}
	if bytes.Contains(data, []byte(e.APIKey)) {
		t.Error("the audit log holds an API key")
	}

	verify := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := cli.Run(context.Background(), append([]string{"--url", e.URL, "--api-key", e.APIKey, "audit", "verify"}, args...),
			cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errb})
		return code, out.String() + errb.String()
	}
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := verify(file); code != 0 || !strings.HasPrefix(out, "ok: ") {
		t.Fatalf("verify of an untouched export = %d %q", code, out)
	}
	// Tamper with line 3 of the file: verify names it.
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) < 4 {
		t.Fatalf("only %d audit lines", len(lines))
	}
	lines[2] = strings.Replace(lines[2], `"result":"`, `"result":"x`, 1)
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := verify(file); code != 1 || !strings.Contains(out, "line 3 ") {
		t.Errorf("verify of a file with line 3 changed = %d %q; want it to name line 3", code, out)
	}
	// Removing a line is found too.
	gone := append(append([]string{}, lines[:1]...), lines[2:]...)
	if err := os.WriteFile(file, []byte(strings.Join(gone, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := verify(file); code != 1 || !strings.Contains(out, "line 2 ") {
		t.Errorf("verify of a file with line 2 removed = %d %q; want it to name line 2", code, out)
	}

	// Tamper with entry 2 in the database itself: verify, fetching from the server, names it.
	db, err := sql.Open("sqlite", filepath.Join(e.DataDir, "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "UPDATE audit_log SET actor = 'someone-else' WHERE seq = 2"); err != nil {
		t.Fatal(err)
	}
	if code, out := verify(); code != 1 || !strings.Contains(out, "(seq 2)") {
		t.Errorf("verify after entry 2 was changed in the database = %d %q; want it to name seq 2", code, out)
	}
}

// exportAudit returns c's tenant's whole audit export.
func exportAudit(t *testing.T, c *airlock.Client) []byte {
	t.Helper()
	rc, err := c.ExportAudit(ctxT(t, time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLogRetention: an admin sets how long the tenant's logs are kept (`airlock audit retention`); the
// server deletes the older audit entries and records the cut, and `airlock audit verify` still passes on
// the log and its export; a sandbox's node keeps its flow log's retention beside it; other keys cannot
// set it, and bad values get a 400.
func TestLogRetention(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{PruneInterval: time.Second})
	ctx := ctxT(t, 3*time.Minute)
	c := e.Client
	cli := func(args ...string) (int, string) {
		t.Helper()
		code, out, errOut := runCLI(append([]string{"--url", e.URL, "--api-key", e.APIKey}, args...)...)
		return code, out + errOut
	}

	// Only an admin key sets it; bad values are refused with a message, and change nothing.
	wk, err := c.CreateAPIKey(ctx, "writer", airlock.ScopeWrite)
	if err != nil {
		t.Fatal(err)
	}
	_, err = airlock.New(e.URL, airlock.WithAPIKey(wk.Key)).SetLogRetention(ctx, 60)
	wantCode(t, "a write key sets the log retention", err, 403)
	for _, n := range []int64{-1, 100*365*86400 + 1} {
		_, err := c.SetLogRetention(ctx, n)
		wantCode(t, fmt.Sprintf("log retention %d", n), err, 400)
	}
	if lr, err := c.LogRetention(ctx); err != nil || lr.Seconds != 0 || lr.EffectiveSeconds != 0 {
		t.Fatalf("log retention after refused changes = %+v, %v; want the default, forever", lr, err)
	}
	if code, out := cli("audit", "retention"); code != 0 || !strings.Contains(out, "logs kept forever (the server's default)") {
		t.Errorf("audit retention = %d %q", code, out)
	}

	// Some entries, then a retention of 3 seconds.
	for range 5 {
		if _, err := c.ListSandboxes(ctx, airlock.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if code, out := cli("audit", "retention", "3s"); code != 0 || !strings.Contains(out, "logs kept 3s (your setting)") {
		t.Fatalf("audit retention 3s = %d %q", code, out)
	}
	// A sandbox created now has its flow log kept as long, on its node.
	sb := create(t, e, airlock.CreateSandboxRequest{})
	if b, err := os.ReadFile(filepath.Join(e.DataDir, "node", "flows", sb.ID+".jsonl.keep")); err != nil || string(b) != "3" {
		t.Errorf("the node keeps the sandbox's flow log retention as %q, %v; want 3 (seconds)", b, err)
	}

	// The older entries go; a record of the cut follows; the chain verifies from the new first entry.
	var entries []airlock.AuditEntry
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := c.ListSandboxes(ctx, airlock.ListOptions{}); err != nil { // an entry newer than the cut
			t.Fatal(err)
		}
		entries = entries[:0]
		for _, line := range bytes.Split(bytes.TrimSpace(exportAudit(t, c)), []byte("\n")) {
			var en airlock.AuditEntry
			if err := json.Unmarshal(line, &en); err != nil {
				t.Fatalf("export line %q: %v", line, err)
			}
			entries = append(entries, en)
		}
		cut := false
		for _, en := range entries {
			cut = cut || (en.Kind == "audit" && en.Action == "prune")
		}
		if entries[0].Seq > 1 && cut {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no cut within 30s of a 3s retention; the log starts at %d", entries[0].Seq)
		}
		time.Sleep(time.Second)
	}
	if code, out := cli("audit", "verify"); code != 0 || !strings.Contains(out, "chain intact") {
		t.Errorf("audit verify of the cut log = %d %q", code, out)
	}
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(file, exportAudit(t, c), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := cli("audit", "verify", file); code != 0 || !strings.Contains(out, "chain intact") {
		t.Errorf("audit verify of the cut log's export = %d %q", code, out)
	}
	// Positive control: the same export without its records of cuts does not verify.
	var kept []string
	for _, line := range strings.Split(strings.TrimSpace(string(exportAudit(t, c))), "\n") {
		if !strings.Contains(line, `"kind":"audit"`) {
			kept = append(kept, line)
		}
	}
	if err := os.WriteFile(file, []byte(strings.Join(kept, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := cli("audit", "verify", file); code != 1 || !strings.Contains(out, "does not hold") {
		t.Errorf("audit verify of the cut log without its records of cuts = %d %q; want 1", code, out)
	}

	// Back to the server's default.
	if code, out := cli("audit", "retention", "default"); code != 0 || !strings.Contains(out, "logs kept forever (the server's default)") {
		t.Errorf("audit retention default = %d %q", code, out)
	}
}
