package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
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
