//go:build !race

// Built without the race detector only: a VM boots the default template's image (740 MB, installed in
// seconds without it, minutes under it) under QEMU's emulation; scripts/test.sh runs these tests in its
// second pass.

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/app"
	"github.com/airlockrun/airlock/internal/runtime/vm"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// requireVMs skips t where this host cannot run the QEMU microVM runtime, and returns the default
// template's image VMs boot.
func requireVMs(t *testing.T) (image string, kernel vm.Kernel) {
	t.Helper()
	testenv.RequireSandboxes(t)
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("QEMU is not installed (scripts/install.sh installs it)")
	}
	k, err := vm.FindKernel("")
	if err != nil {
		t.Skipf("no guest kernel (scripts/install.sh unpacks it): %v", err)
	}
	image = filepath.Join("/usr/local/lib/airlock", app.DefaultImageName)
	if _, err := os.Stat(image); err != nil {
		t.Skipf("needs the default template's image, which scripts/install.sh builds: %v", err)
	}
	return image, k
}

// TestVMs: microVMs as a user reaches them, from the CLI and the API. "--runtime vm" routes to the QEMU
// driver (TCG here), whose sandbox runs the guest kernel, behind the same egress gateway (default deny);
// a VM session's pause and resume go through the node's snapshot pipeline and keep a process's memory
// (a counter goes on, same PID), and its forks continue from it apart (their own host names and
// counters); the operator forces VMs on a template; another tenant gets VMs only once allowed.
func TestVMs(t *testing.T) {
	img, k := requireVMs(t)
	e := testenv.Start(t, testenv.Options{DefaultImage: img})
	ctx := ctxT(t, 15*time.Minute)
	cli := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(append([]string{"--url", e.URL, "--api-key", e.APIKey}, args...)...)
		if code != 0 {
			t.Fatalf("airlock %s: %d %s %s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	var sb airlock.Sandbox
	start := time.Now()
	if err := json.Unmarshal([]byte(cli("--json", "sandbox", "create", "--runtime", "vm")), &sb); err != nil {
		t.Fatal(err)
	}
	t.Logf("first VM sandbox (the template's disk image made first) in %v", time.Since(start).Round(time.Millisecond))
	if sb.Runtime != "vm:qemu" || !strings.Contains(sb.RuntimeReason, "VM") || strings.Join(sb.Abilities, ",") != "memory_snapshots,fork" {
		t.Errorf("a vm sandbox: runtime %q (%q), abilities %v; want vm:qemu with memory snapshots", sb.Runtime, sb.RuntimeReason, sb.Abilities)
	}
	if res := sh(t, e, sb.ID, "uname -r; id -un; hostname"); res.Stdout != k.Release+"\nuser\n"+sb.ID+"\n" {
		t.Errorf("in the VM: %q (stderr %q); want the guest kernel %s, the sandbox user and its host name", res.Stdout, res.Stderr, k.Release)
	}
	if _, err := e.Client.WriteFile(ctx, sb.ID, "/home/user/in.txt", strings.NewReader("through the file API\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := e.Client.ReadFile(ctx, sb.ID, "/home/user/in.txt"); err != nil || string(b) != "through the file API\n" {
		t.Errorf("file API in a VM: %q, %v", b, err)
	}
	if res := sh(t, e, sb.ID, "timeout 5 python3 -c 'import socket; socket.create_connection((\"10.255.255.1\", 80), 3)'"); res.ExitCode == 0 {
		t.Error("a VM reached an address no rule allows")
	}
	if res := sh(t, e, sb.ID, "getent hosts example.com >/dev/null && echo resolved || echo refused"); !strings.Contains(res.Stdout, "refused") {
		t.Errorf("DNS for a name no rule allows, from a VM: %q", res.Stdout)
	}

	// A session: memory carries over a pause and resume, and into forks.
	se := newSession(t, e, airlock.CreateSessionRequest{Runtime: "vm", MemoryMB: 256, IdleTimeoutSeconds: never()})
	if se.Runtime != "vm:qemu" {
		t.Errorf("a vm session runs on %q", se.Runtime)
	}
	run(t, e, se.ID, airlock.ExecRequest{Cmd: []string{"bash", "-c",
		`setsid nohup python3 -c '
import os, time
n = 0
while True:
    n += 1
    with open("/tmp/count.tmp", "w") as f: f.write("%d %d" % (os.getpid(), n))
    os.rename("/tmp/count.tmp", "/tmp/count")
    time.sleep(0.05)
' >/dev/null 2>&1 &
for i in $(seq 600); do [ -s /tmp/count ] && break; sleep 0.1; done`}}) // python starts slowly under emulation
	count := func(id string) (pid, n int) {
		t.Helper()
		f := strings.Fields(sh(t, e, id, "cat /tmp/count").Stdout)
		if len(f) != 2 {
			t.Fatalf("session %s: the counter reads %q", id, f)
		}
		pid, _ = strconv.Atoi(f[0])
		n, _ = strconv.Atoi(f[1])
		return pid, n
	}
	pid0, n0 := count(se.ID)
	t0 := time.Now()
	if _, err := e.Client.PauseSession(ctx, se.ID); err != nil {
		t.Fatal(err)
	}
	paused := time.Since(t0)
	t0 = time.Now()
	if got, err := e.Client.ResumeSession(ctx, se.ID); err != nil || got.State != airlock.SessionRunning {
		t.Fatalf("resume: %+v, %v", got, err)
	}
	t.Logf("VM session: pause %v, resume %v (through the node's snapshot pipeline)", paused.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	pid1, n1 := count(se.ID)
	if pid1 != pid0 || n1 <= n0 {
		t.Errorf("after pause and resume the counter is pid %d at %d; before, pid %d at %d: want the same process counting on", pid1, n1, pid0, n0)
	}
	f, err := e.Client.ForkSession(ctx, se.ID, airlock.ForkSessionRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]bool{}
	for _, fs := range f.Sessions {
		t.Cleanup(func() { _ = e.Client.DeleteSession(ctxT(t, time.Minute), fs.ID) })
		if fs.Runtime != "vm:qemu" {
			t.Errorf("fork %s runs on %q", fs.ID, fs.Runtime)
		}
		pid, n := count(fs.ID)
		if pid != pid0 || n < n1 {
			t.Errorf("fork %s: counter pid %d at %d; want pid %d from %d on", fs.ID, pid, n, pid0, n1)
		}
		sh(t, e, fs.ID, "echo "+fs.ID+" > /home/user/who")
		hosts[strings.TrimSpace(sh(t, e, fs.ID, "hostname").Stdout)] = true
	}
	if len(hosts) != 2 {
		t.Errorf("the forks' host names: %v; want two of their own", hosts)
	}
	for _, fs := range f.Sessions {
		if got := strings.TrimSpace(sh(t, e, fs.ID, "cat /home/user/who").Stdout); got != fs.ID {
			t.Errorf("fork %s reads %q: the forks are not apart", fs.ID, got)
		}
	}

	// The operator forces VMs on the default template; another tenant gets them only once allowed.
	if out := cli("template", "runtimes", "default", "vm"); !strings.Contains(out, "vm") {
		t.Errorf("template runtimes: %q", out)
	}
	other, err := e.Client.CreateTenant(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	oc := airlock.New(e.URL, airlock.WithAPIKey(other.APIKey.Key))
	if _, err := oc.CreateSandbox(ctx, airlock.CreateSandboxRequest{}); err == nil || !strings.Contains(err.Error(), "may not") {
		t.Errorf("a tenant without VMs creates from a VM-only template: %v; want refused", err)
	}
	cli("tenant", "runtimes", other.Tenant.ID, "gvisor", "vm")
	osb, err := oc.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
	if err != nil || osb.Runtime != "vm:qemu" || !strings.Contains(osb.RuntimeReason, "template") {
		t.Fatalf("a tenant allowed VMs, default runtime of a VM-only template: %+v, %v", osb, err)
	}
	_ = oc.DeleteSandbox(ctx, osb.ID)
	cli("template", "runtimes", "default", "*")
	if g := create(t, e, airlock.CreateSandboxRequest{}); g.Runtime != "gvisor" {
		t.Errorf("after the template's setting is cleared: %q", g.Runtime)
	}
}

// TestRedTeamVM runs the red-team battery (redteam_test.go) on microVMs: every attack as root inside a
// VM, through the API; the host's canaries, a bystander VM and the API stay as they were.
func TestRedTeamVM(t *testing.T) {
	img, _ := requireVMs(t)
	redTeam(t, "vm:qemu", testenv.Options{DefaultImage: img})
}

// TestEgressBypassAttemptsVM runs TestEgressBypassAttempts's attempts from microVMs: a guest kernel
// of its own changes nothing of what reaches out of the sandbox.
func TestEgressBypassAttemptsVM(t *testing.T) {
	img, _ := requireVMs(t)
	egressBypass(t, startNetEnvWith(t, "vm:qemu", testenv.Options{DefaultImage: img}))
}
