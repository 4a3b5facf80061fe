package e2e

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestRuntimes: as a user would, from the CLI and the API. A sandbox on runc is root in a user
// namespace (uid 0 maps to the sandbox range) where gVisor's is not, both behind the same egress
// gateway; auto gives a session gVisor; a runc session pauses into files-only snapshots, resumes and
// forks with its files and its processes started anew; another tenant may use runc only once the
// operator allows it; the choice and its reason are in the sandbox and the audit log.
func TestRuntimes(t *testing.T) {
	testenv.RequireSandboxes(t)
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("runc is not installed (scripts/install.sh installs it)")
	}
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 10*time.Minute)
	cli := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(append([]string{"--url", e.URL, "--api-key", e.APIKey}, args...)...)
		if code != 0 {
			t.Fatalf("airlock %s: %d %s %s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	var sb airlock.Sandbox
	if err := json.Unmarshal([]byte(cli("--json", "sandbox", "create", "--runtime", "runc")), &sb); err != nil {
		t.Fatal(err)
	}
	if sb.Runtime != "runc" || sb.RuntimeReason != "requested" || strings.Join(sb.Abilities, ",") != "files_snapshots,fork" {
		t.Errorf("a runc sandbox: runtime %q (%q), abilities %v", sb.Runtime, sb.RuntimeReason, sb.Abilities)
	}
	if m := strings.Fields(sh(t, e, sb.ID, "cat /proc/self/uid_map").Stdout); len(m) != 3 || m[1] == "0" {
		t.Errorf("uid map in a runc sandbox: %q; want 0 mapped to the sandbox range", m)
	}
	g := create(t, e, airlock.CreateSandboxRequest{})
	if g.Runtime != "gvisor" || !strings.Contains(strings.Join(g.Abilities, ","), "memory_snapshots") {
		t.Errorf("a default sandbox: %q %v; want gvisor with memory snapshots", g.Runtime, g.Abilities)
	}
	// Both behind the gateway: default deny.
	for _, id := range []string{sb.ID, g.ID} {
		if res := sh(t, e, id, "timeout 5 python3 -c 'import socket; socket.create_connection((\"10.255.255.1\", 80), 3)'"); res.ExitCode == 0 {
			t.Errorf("sandbox %s reached an address no rule allows", id)
		}
	}

	// auto: a session gets gVisor.
	var se airlock.Session
	if err := json.Unmarshal([]byte(cli("--json", "session", "create", "--runtime", "auto")), &se); err != nil {
		t.Fatal(err)
	}
	if se.Runtime != "gvisor" || !strings.Contains(se.RuntimeReason, "auto") {
		t.Errorf("an auto session: %q (%q); want gvisor", se.Runtime, se.RuntimeReason)
	}

	// A runc session: files-only snapshots.
	rs, err := e.Client.CreateSession(ctx, airlock.CreateSessionRequest{Runtime: "runc"})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, e, rs.SandboxID, "echo kept > /home/user/kept; (setsid nohup sleep 600 >/dev/null 2>&1 &)")
	paused, err := e.Client.PauseSession(ctx, rs.ID)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := e.Client.GetSnapshot(ctx, rs.ID, paused.HeadSnapshotID)
	if err != nil || snap.Kind != "files" {
		t.Errorf("a runc session's snapshot: %+v, %v; want kind files", snap, err)
	}
	resumed, err := e.Client.ResumeSession(ctx, rs.ID)
	if err != nil || resumed.Runtime != "runc" {
		t.Fatalf("resume a runc session: %+v, %v", resumed, err)
	}
	if got := sh(t, e, resumed.SandboxID, "cat /home/user/kept; pgrep -x sleep || echo no-sleep").Stdout; got != "kept\nno-sleep\n" {
		t.Errorf("the resumed runc session holds %q; want its file and no process of before", got)
	}
	forks, err := e.Client.ForkSession(ctx, rs.ID, airlock.ForkSessionRequest{Count: 2})
	if err != nil || len(forks.Sessions) != 2 {
		t.Fatalf("fork a runc session: %+v, %v", forks, err)
	}
	for _, f := range forks.Sessions {
		if f.Runtime != "runc" {
			t.Errorf("a fork of a runc session runs on %q", f.Runtime)
		}
		if got := sh(t, e, f.SandboxID, "cat /home/user/kept").Stdout; got != "kept\n" {
			t.Errorf("a fork holds %q", got)
		}
	}

	// Another tenant: gVisor only, until the operator allows runc.
	ct, err := e.Client.CreateTenant(ctx, "runtimes-other")
	if err != nil {
		t.Fatal(err)
	}
	other := airlock.New(e.URL, airlock.WithAPIKey(ct.APIKey.Key))
	_, err = other.CreateSandbox(ctx, airlock.CreateSandboxRequest{Runtime: "runc"})
	wantCode(t, "another tenant asks runc", err, 403)
	if a, err := other.CreateSandbox(ctx, airlock.CreateSandboxRequest{Runtime: "auto"}); err != nil || a.Runtime != "gvisor" {
		t.Errorf("another tenant asks auto: %+v, %v; want gvisor", a, err)
	}
	if out := cli("tenant", "runtimes", ct.Tenant.ID, "gvisor", "runc"); !strings.Contains(out, "gvisor, runc") {
		t.Errorf("tenant runtimes: %q", out)
	}
	if r, err := other.CreateSandbox(ctx, airlock.CreateSandboxRequest{Runtime: "runc"}); err != nil || r.Runtime != "runc" {
		t.Errorf("another tenant allowed runc: %+v, %v", r, err)
	}
	_, err = e.Client.CreateSandbox(ctx, airlock.CreateSandboxRequest{Runtime: "Bad Name"})
	wantCode(t, "a malformed runtime", err, 400)
	_, err = e.Client.CreateSandbox(ctx, airlock.CreateSandboxRequest{Runtime: "firecracker"})
	wantCode(t, "a runtime no node has", err, 503)

	// The audit log says which runtime each sandbox got, and why.
	rc, err := e.Client.ExportAudit(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	found := false
	dec := json.NewDecoder(rc)
	for {
		var a airlock.AuditEntry
		if err := dec.Decode(&a); err != nil {
			break
		}
		if a.Action == "choose runtime" && a.Target == sb.ID && strings.Contains(a.Detail, `"runtime":"runc"`) {
			found = true
		}
	}
	if !found {
		t.Errorf("no audit entry for the runtime of %s", sb.ID)
	}
}
