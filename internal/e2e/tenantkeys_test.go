package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/app"
	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/keys/pkcs11/softhsm"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// wantKeyUnavailable fails t unless err is the API's tenant_key_unavailable.
func wantKeyUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	var ae *airlock.APIError
	if !errors.As(err, &ae) || ae.Code != "tenant_key_unavailable" {
		t.Errorf("%s: got %v; want tenant_key_unavailable", what, err)
	}
}

// keyedSession starts a session of c holding a marker in a file and in a process's memory, pauses it
// and returns it with its snapshot.
func keyedSession(t *testing.T, c *airlock.Client, marker string) (*airlock.Session, string) {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	se, err := c.CreateSession(ctx, airlock.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The marker goes in as a file, never on a command line (the node's audit log records those).
	if _, err := c.WriteFile(ctx, se.ID, "/home/user/marker", strings.NewReader(marker+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"bash", "-c",
		"(python3 -c 'import time; s=open(\"/home/user/marker\").read()*1000; time.sleep(3600)' &)"}}); err != nil {
		t.Fatal(err)
	}
	p, err := c.PauseSession(ctx, se.ID)
	if err != nil || p.State != "paused" {
		t.Fatalf("pause = %+v, %v", p, err)
	}
	if _, err := c.WaitSnapshot(ctx, se.ID, p.HeadSnapshotID); err != nil {
		t.Fatal(err)
	}
	return p, p.HeadSnapshotID
}

// waitStopped waits (up to limit) until the sandbox is no longer running, and reports how long it took.
func waitStopped(t *testing.T, c *airlock.Client, id string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < limit {
		sb, err := c.GetSandbox(ctxT(t, 10*time.Second), id)
		if err == nil && sb.State != airlock.StateRunning && sb.State != airlock.StateCreating {
			return time.Since(start)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("sandbox %s still runs %s after its tenant's key went away", id, limit)
	return 0
}

// TestTenantKeyPKCS11 runs a tenant whose key is in a PKCS#11 token (SoftHSM2): its sessions pause and
// resume; once the key is destroyed in the token (with pkcs11-tool, as its owner would), its running
// sandboxes stop within the check interval, creates and resumes fail with tenant_key_unavailable, and
// its stored snapshots cannot be read. Nothing of it was ever stored in the clear.
func TestTenantKeyPKCS11(t *testing.T) {
	tok := softhsm.NewToken(t)
	e := testenv.Start(t, testenv.Options{
		PKCS11:           app.PKCS11Config{Module: tok.Module, TokenLabel: tok.Label, PIN: tok.PIN, Env: tok.Env},
		KeyCheckInterval: 2 * time.Second,
	})
	ctx := ctxT(t, 5*time.Minute)
	ct, err := e.Client.CreateTenantWith(ctx, airlock.CreateTenantRequest{Name: "hsm", KeyProvider: "pkcs11"})
	if err != nil || ct.Tenant.KeyProvider != "pkcs11" {
		t.Fatalf("create pkcs11 tenant = %+v, %v", ct, err)
	}
	c := airlock.New(e.URL, airlock.WithAPIKey(ct.APIKey.Key))
	marker := "hsm-marker-5a1c0ffee"
	se, snap := keyedSession(t, c, marker)
	if r, err := c.ResumeSession(ctx, se.ID); err != nil || r.State != "running" {
		t.Fatalf("resume on the pkcs11 key = %+v, %v", r, err)
	}
	if res, err := c.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"cat", "/home/user/marker"}}); err != nil || res.Stdout != marker+"\n" {
		t.Fatalf("after resume: %+v, %v", res, err)
	}
	sb, err := c.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if k, err := c.TenantKey(ctx); err != nil || k.Provider != "pkcs11" || k.Status != "available" {
		t.Errorf("key status = %+v, %v", k, err)
	}
	// Other tenants, on the local keyring, are not affected by any of it.
	other := create(t, e, airlock.CreateSandboxRequest{})

	// A rotation re-wraps every data key under the new key in the token: the old one can then be
	// destroyed and nothing is lost.
	if _, err := c.CreateSecret(ctx, "hsm-secret", "s3cret-value-in-hsm-tenant"); err != nil {
		t.Fatal(err)
	}
	rot, err := c.RotateTenantKey(ctx)
	if err != nil || rot.KeyID != "airlock/"+ct.Tenant.ID+"/2" {
		t.Fatalf("rotate = %+v, %v", rot, err)
	}
	tok.DeleteKey(t, "airlock/"+ct.Tenant.ID+"/1")
	time.Sleep(5 * time.Second) // two key checks
	if got, err := c.GetSandbox(ctx, sb.ID); err != nil || got.State != airlock.StateRunning {
		t.Fatalf("after the rotated-out key was destroyed, the sandbox = %+v, %v; want it running", got, err)
	}
	if got, err := c.ReadSnapshotFile(ctx, se.ID, snap, "/home/user/marker"); err != nil || string(got) != marker+"\n" {
		t.Errorf("a snapshot from before the rotation, its old key destroyed: %q, %v", got, err)
	}
	if p, err := c.PauseSession(ctx, se.ID); err != nil || p.State != "paused" {
		t.Fatalf("pause after the rotation = %+v, %v", p, err)
	}
	if r, err := c.ResumeSession(ctx, se.ID); err != nil || r.State != "running" {
		t.Fatalf("resume after the rotation = %+v, %v", r, err)
	}

	tok.DeleteKey(t, "airlock/"+ct.Tenant.ID+"/2")
	took := waitStopped(t, c, sb.ID, 60*time.Second)
	t.Logf("the tenant's sandboxes stopped %s after its key was destroyed in the token", took.Round(10*time.Millisecond))
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		s, err := c.GetSession(ctx, se.ID)
		if err == nil && s.State != "running" {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("session after the key was destroyed = %+v, %v; want it stopped", s, err)
		}
	}
	_, err = c.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
	wantKeyUnavailable(t, "create sandbox", err)
	_, err = c.CreateSession(ctx, airlock.CreateSessionRequest{})
	wantKeyUnavailable(t, "create session", err)
	_, err = c.ResumeSession(ctx, se.ID)
	wantKeyUnavailable(t, "resume", err)
	if got, err := c.ReadSnapshotFile(ctx, se.ID, snap, "/home/user/marker"); err == nil {
		ls, _ := exec.Command("find", e.DataDir+"/node/images", "-maxdepth", "2").CombinedOutput()
		t.Errorf("a snapshot of the tenant was read after its key was destroyed: %q\n%s", got, ls)
	}
	if k, err := c.TenantKey(ctx); err != nil || k.Status != "unavailable" {
		t.Errorf("key status after the destroy = %+v, %v", k, err)
	}
	if got, err := e.Client.GetSandbox(ctx, other.ID); err != nil || got.State != airlock.StateRunning {
		t.Errorf("another tenant's sandbox = %+v, %v; want it running", got, err)
	}
	// Nothing of the tenant is at rest in the clear: not in the blobs, the database, anywhere.
	assertNotInDir(t, e.DataDir, marker)
}

// TestTenantKeyLocalRevokeAndRotate: after a rotation, old snapshots still restore; after a revoke
// through the API, the tenant's sandboxes stop at once and creates and resumes fail with
// tenant_key_unavailable.
func TestTenantKeyLocalRevokeAndRotate(t *testing.T) {
	e := testenv.Start(t, testenv.Options{KeyCheckInterval: 2 * time.Second})
	ctx := ctxT(t, 5*time.Minute)
	ct, err := e.Client.CreateTenant(ctx, "loc")
	if err != nil {
		t.Fatal(err)
	}
	c := airlock.New(e.URL, airlock.WithAPIKey(ct.APIKey.Key))
	marker := "local-marker-77e1d"
	se, before := keyedSession(t, c, marker)

	rot, err := c.RotateTenantKey(ctx)
	if err != nil || rot.KeyID == "" {
		t.Fatalf("rotate = %+v, %v", rot, err)
	}
	// A snapshot taken before the rotation restores, and so do new ones.
	if r, err := c.ResumeSession(ctx, se.ID); err != nil || r.State != "running" {
		t.Fatalf("resume after rotation = %+v, %v", r, err)
	}
	if res, err := c.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"bash", "-c", "echo after >> /home/user/marker"}}); err != nil || res.ExitCode != 0 {
		t.Fatal(err)
	}
	if _, err := c.PauseSession(ctx, se.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RestoreSession(ctx, se.ID, airlock.RestoreSessionRequest{SnapshotID: before}); err != nil {
		t.Fatalf("restore to the snapshot from before the rotation: %v", err)
	}
	if res, err := c.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"cat", "/home/user/marker"}}); err != nil || res.Stdout != marker+"\n" {
		t.Errorf("restored from before the rotation: %+v, %v", res, err)
	}

	// A host rule on port 80 sends that port's connections to the gateway, which refuses the private
	// address below and records the flow (sealed under the tenant's key on the node).
	sb, err := c.CreateSandbox(ctx, airlock.CreateSandboxRequest{Network: &airlock.NetworkPolicy{Rules: []airlock.NetworkRule{
		{Action: "allow", Host: "api.example.test", Ports: []airlock.PortRange{"80"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	const flowDst = "10.255.255.1"
	if _, err := c.Exec(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c",
		"import socket; s=socket.socket(); s.settimeout(3)\ntry: s.connect(('" + flowDst + "', 80))\nexcept Exception: pass"}}); err != nil {
		t.Fatal(err)
	}
	if !eventually(10*time.Second, func() bool {
		l, err := c.Egress(ctx, sb.ID, airlock.EgressOptions{})
		return err == nil && len(l.Flows) > 0 && l.Flows[0].DstIP == flowDst
	}) {
		t.Fatal("positive control: the refused connection is not in the sandbox's flow log while the key lives")
	}
	wrong := c.RevokeTenantKey(ctx, "tn_not_mine")
	wantCode(t, "revoke without the right confirmation", wrong, http.StatusBadRequest)
	// The audit log's payloads (here a command line) are sealed under the tenant's key: readable with it
	// (the positive control), unreadable once it is revoked, and the chain verifies either way.
	argv := "argv-marker-5e2a9"
	if _, err := c.Exec(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"true", argv}}); err != nil {
		t.Fatal(err)
	}

	verifyAudit := func() (int, string) {
		var out bytes.Buffer
		code := cli.Run(context.Background(), []string{"--url", e.URL, "--api-key", ct.APIKey.Key, "audit", "verify"},
			cli.Streams{In: strings.NewReader(""), Out: &out, Err: &out})
		return code, out.String()
	}
	if !eventually(10*time.Second, func() bool { return strings.Contains(string(exportAudit(t, c)), argv) }) {
		t.Fatal("positive control: the command line is not in the audit export while the key lives")
	}
	if code, out := verifyAudit(); code != 0 {
		t.Fatalf("audit verify with the key = %d %s", code, out)
	}
	start := time.Now()
	if err := c.RevokeTenantKey(ctx, ct.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	after := string(exportAudit(t, c))
	if strings.Contains(after, argv) {
		t.Error("the audit export after the key's revoke holds the command line")
	}
	for _, line := range strings.Split(strings.TrimSpace(after), "\n") {
		var en airlock.AuditEntry
		if err := json.Unmarshal([]byte(line), &en); err != nil {
			t.Fatalf("export line %q: %v", line, err)
		}
		if en.Sealed == "" || en.Action != "" || en.Target != "" || en.Detail != "" || en.Actor != "" {
			t.Fatalf("an entry after the key's revoke: %+v; want the chain and times only", en)
		}
	}
	if code, out := verifyAudit(); code != 0 || !strings.HasPrefix(out, "ok: ") {
		t.Errorf("audit verify after the key's revoke = %d %s; want the chain intact", code, out)
	}
	waitStopped(t, c, sb.ID, 5*time.Second)
	t.Logf("revoke through the API stopped the tenant's sandboxes in %s", time.Since(start).Round(10*time.Millisecond))
	_, err = c.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
	wantKeyUnavailable(t, "create after revoke", err)
	_, err = c.ResumeSession(ctx, se.ID)
	wantKeyUnavailable(t, "resume after revoke", err)
	_, err = c.ReadSnapshotFile(ctx, se.ID, before, "/home/user/marker")
	if err == nil {
		t.Error("a snapshot was read after the tenant's key was revoked")
	}
	// The keyring is in the Store (encrypted under the master key), not in a file of its own, and nothing
	// of the tenant is in the clear anywhere.
	if _, err := os.Stat(filepath.Join(e.DataDir, "keys", "keyring.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a keyring file is in the data directory (%v); want the keys in the Store", err)
	}
	assertNotInDir(t, e.DataDir, marker)
	// The flow log is sealed under the tenant's key: unreadable now, through the API and on the node.
	_, err = c.Egress(ctx, sb.ID, airlock.EgressOptions{})
	wantKeyUnavailable(t, "the flow log after revoke", err)
	assertNotInDir(t, filepath.Join(e.DataDir, "node", "flows"), flowDst)
}
