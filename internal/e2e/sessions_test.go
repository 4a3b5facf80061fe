package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// agentState is what testdata/agent.py answers.
type agentState struct {
	PID        int    `json:"pid"`
	Counter    int    `json:"counter"`
	SHA256     string `json:"sha256"`
	AtStart    string `json:"at_start"`
	Cwd        string `json:"cwd"`
	Env        string `json:"env"`
	Marker     string `json:"marker"`
	FD         string `json:"fd"`
	Child      int    `json:"child"`
	ChildAlive bool   `json:"child_alive"`
}

// startAgent puts the agent into the session (or sandbox) id, starts it detached and waits for its
// listener.
func startAgent(t *testing.T, e *testenv.Env, id string, size int) agentState {
	t.Helper()
	script, err := os.ReadFile("testdata/agent.py")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.WriteFile(ctxT(t, time.Minute), id, "/home/user/agent.py", bytes.NewReader(script), 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, e, id, fmt.Sprintf("setsid nohup python3 /home/user/agent.py %d >/home/user/agent.out 2>&1 &", size))
	deadline := time.Now().Add(time.Minute)
	for {
		st, ok := queryAgent(t, e, id)
		if ok {
			return st
		}
		if time.Now().After(deadline) {
			out := sh(t, e, id, "cat /home/user/agent.out")
			t.Fatalf("the agent did not come up: %s", out.Stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func queryAgent(t *testing.T, e *testenv.Env, id string) (agentState, bool) {
	t.Helper()
	res := run(t, e, id, airlock.ExecRequest{Cmd: []string{"python3", "-c", `
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", 9000), timeout=10)
except OSError:
    sys.exit(3)
print(s.makefile().readline().strip())`}})
	if res.ExitCode == 3 {
		return agentState{}, false
	}
	var st agentState
	if err := json.Unmarshal([]byte(res.Stdout), &st); err != nil {
		t.Fatalf("agent answered %q (%s): %v", res.Stdout, res.Stderr, err)
	}
	return st, true
}

func newSession(t *testing.T, e *testenv.Env, req airlock.CreateSessionRequest) *airlock.Session {
	t.Helper()
	se, err := e.Client.CreateSession(ctxT(t, 2*time.Minute), req)
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	if se.State != airlock.SessionRunning {
		t.Fatalf("created session is %s (%s)", se.State, se.Reason)
	}
	t.Cleanup(func() { _ = e.Client.DeleteSession(context.Background(), se.ID) })
	return se
}

func never() *int { n := 0; return &n }

// TestSessionPauseResumeKeepsLiveState: a Python process holding a 256 MiB object and a counter is
// paused and resumed; the object's hash, the counter, its PID, cwd, environment, an open file, a child
// process and a TCP listener inside all carry over. A second pause of the idle session adds little to
// the blob store, and nothing at rest holds the marker the process keeps in memory and in a file.
func TestSessionPauseResumeKeepsLiveState(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 5*time.Minute)
	mark := fmt.Sprintf("%x", time.Now().UnixNano())
	se := newSession(t, e, airlock.CreateSessionRequest{MemoryMB: 1024, Env: map[string]string{"MARK": mark}, IdleTimeoutSeconds: never(),
		TimeoutSeconds: 3600, OnTimeout: "pause"})
	if se.EndsAt == nil || se.EndsAt.Before(time.Now().Add(59*time.Minute)) || se.OnTimeout != "pause" {
		t.Fatalf("a session made with an hour's timeout: ends at %v, on timeout %q", se.EndsAt, se.OnTimeout)
	}
	before := startAgent(t, e, se.ID, 256<<20)
	if before.SHA256 != before.AtStart || before.Env != mark {
		t.Fatalf("agent state %+v", before)
	}
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	paused, err := e.Client.PauseSession(ctx, se.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pause of a 256 MiB session: %v", time.Since(start))
	if paused.State != airlock.SessionPaused || paused.SandboxID != "" || paused.HeadSnapshotID == "" {
		t.Fatalf("paused: %+v", paused)
	}
	start = time.Now()
	resumed, err := e.Client.ResumeSession(ctx, se.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("resume of a 256 MiB session: %v", time.Since(start))
	if resumed.State != airlock.SessionRunning || resumed.SandboxID == se.SandboxID {
		t.Fatalf("resumed: %+v", resumed)
	}
	after, ok := queryAgent(t, e, se.ID)
	if !ok {
		t.Fatalf("the agent's listener did not survive the pause: %s", sh(t, e, se.ID, "cat /home/user/agent.out; ps aux").Stdout)
	}
	if after.SHA256 != before.SHA256 || after.PID != before.PID || after.Cwd != before.Cwd || after.Env != mark ||
		after.FD != before.FD || after.Child != before.Child || !after.ChildAlive || after.Counter <= before.Counter {
		t.Errorf("after pause and resume: %+v\nbefore: %+v", after, before)
	}
	// The counter continued from its value at the pause, not from 1: its log has no gap and no restart.
	lines := strings.Fields(sh(t, e, se.ID, "cat /home/user/work/counter.log").Stdout)
	for i := 1; i < len(lines); i++ {
		if lines[i] != fmt.Sprint(i+1) {
			t.Fatalf("counter log line %d is %s", i+1, lines[i])
		}
	}

	// Pause again, idle, straight away, by its timeout (on_timeout pause): little new data.
	first := snapshotOf(t, e, se.ID, paused.HeadSnapshotID)
	if _, err := e.Client.SetSessionTimeout(ctx, se.ID, 1); err != nil {
		t.Fatal(err)
	}
	var again *airlock.Session
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if again, err = e.Client.GetSession(ctx, se.ID); err != nil {
			t.Fatal(err)
		}
		if again.State == airlock.SessionPaused || time.Now().After(deadline) {
			break
		}
	}
	if again.State != airlock.SessionPaused || again.Reason != "timeout" || again.EndsAt != nil {
		t.Fatalf("a minute after its timeout of 1 s: %s %q, ends at %v; want paused by the timeout", again.State, again.Reason, again.EndsAt)
	}
	second := snapshotOf(t, e, se.ID, again.HeadSnapshotID)
	ratio := float64(second.StoredBytes) / float64(first.StoredBytes)
	t.Logf("first pause stored %d bytes (logical %d); the second %d (%.2f%%)", first.StoredBytes, first.LogicalBytes, second.StoredBytes, 100*ratio)
	if ratio >= 0.05 {
		t.Errorf("a second pause of an idle session stored %.1f%% of the first's bytes; want under 5%%", 100*ratio)
	}
	// Nothing at rest is plaintext: not the marker, in memory and in a file, nor the environment.
	assertNotInDir(t, filepath.Join(e.DataDir, "blobs"), "airlock-marker-"+mark, mark)
	for _, db := range []string{"airlock.db", "airlock.db-wal"} {
		if b, err := os.ReadFile(filepath.Join(e.DataDir, db)); err == nil && bytes.Contains(b, []byte(mark)) {
			t.Errorf("%s holds the marker", db)
		}
	}
	// Work on the paused session resumes it (auto-resume is the default); without a bound now, its run
	// has no end.
	if _, err := e.Client.SetSessionTimeout(ctx, se.ID, 0); err != nil {
		t.Fatal(err)
	}
	if st, ok := queryAgent(t, e, se.ID); !ok || st.SHA256 != before.SHA256 {
		t.Errorf("after auto-resume: %+v %v", st, ok)
	}
}

// snapshotOf waits until the snapshot is complete in the snapshot store (a pause returns once its
// image is saved on the node) and returns it.
func snapshotOf(t *testing.T, e *testenv.Env, sessionID, id string) airlock.Snapshot {
	t.Helper()
	sn, err := e.Client.WaitSnapshot(ctxT(t, 2*time.Minute), sessionID, id)
	if err != nil {
		t.Fatal(err)
	}
	return *sn
}

// TestSessionFork10: ten forks of one snapshot all run and diverge; none sees another's files, and the
// parent sees none of theirs.
func TestSessionFork10(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 5*time.Minute)
	parent := newSession(t, e, airlock.CreateSessionRequest{IdleTimeoutSeconds: never()})
	base := startAgent(t, e, parent.ID, 1<<20)
	sh(t, e, parent.ID, "echo parent > /home/user/shared.txt")
	start := time.Now()
	res, err := e.Client.ForkSession(ctx, parent.ID, airlock.ForkSessionRequest{Count: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sessions) != 10 {
		t.Fatalf("%d forks", len(res.Sessions))
	}
	for _, f := range res.Sessions {
		t.Cleanup(func() { _ = e.Client.DeleteSession(context.Background(), f.ID) })
		if f.State != airlock.SessionRunning {
			t.Fatalf("fork %s is %s (%s)", f.ID, f.State, f.Reason)
		}
	}
	for i, f := range res.Sessions {
		sh(t, e, f.ID, fmt.Sprintf("echo %d > /home/user/fork-%d.txt", i, i))
	}
	t.Logf("fork 10 until each ran a first command: %v", time.Since(start))
	for i, f := range res.Sessions {
		st, ok := queryAgent(t, e, f.ID)
		if !ok || st.PID != base.PID || st.SHA256 != base.SHA256 || st.Counter < base.Counter {
			t.Errorf("fork %d's agent: %+v %v; want the parent's, continued", i, st, ok)
		}
		ls := strings.Fields(sh(t, e, f.ID, "cd /home/user && ls fork-*.txt; cat shared.txt").Stdout)
		want := []string{fmt.Sprintf("fork-%d.txt", i), "parent"}
		if strings.Join(ls, " ") != strings.Join(want, " ") {
			t.Errorf("fork %d sees %v; want %v", i, ls, want)
		}
	}
	if out := sh(t, e, parent.ID, "ls /home/user/fork-*.txt 2>/dev/null | wc -l").Stdout; strings.TrimSpace(out) != "0" {
		t.Errorf("the parent sees %s fork files", out)
	}
}

// TestSessionNetworkAfterResume: a resumed session and its forks keep the session's egress policy and
// the interception CA their trust store holds, so a credential binding still works: the upstream gets
// the secret after pause, resume and fork.
func TestSessionNetworkAfterResume(t *testing.T) {
	n := startNetEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	const secret = "session-secret-4b8e"
	if _, err := n.Client.CreateSecret(ctx, "up-token", secret); err != nil {
		t.Fatal(err)
	}
	se := newSession(t, n.Env, airlock.CreateSessionRequest{IdleTimeoutSeconds: never(), Network: &airlock.NetworkPolicy{
		Rules:       []airlock.NetworkRule{{Action: "allow", Host: "api.example.test", Ports: []airlock.PortRange{"443"}}},
		Credentials: []airlock.CredentialBinding{{Name: "bearer", Host: "api.example.test", Secret: "up-token", Header: "Authorization", Format: "Bearer {secret}"}},
	}})
	call := func(id string) string {
		t.Helper()
		res := run(t, n.Env, id, airlock.ExecRequest{Cmd: []string{"python3", "-c", `
import urllib.request
print(urllib.request.urlopen("https://api.example.test/v1/x", timeout=5).read().decode())
try:
    urllib.request.urlopen("https://other.example.test/", timeout=5)
    print("OTHER-REACHED")
except Exception as e:
    print("other refused")`}})
		return res.Stdout + res.Stderr
	}
	if out := call(se.ID); !strings.Contains(out, `auth="Bearer `+secret+`"`) || strings.Contains(out, "OTHER-REACHED") {
		t.Fatalf("before pause: %q", out)
	}
	if _, err := n.Client.PauseSession(ctx, se.ID); err != nil {
		t.Fatal(err)
	}
	if out := call(se.ID); !strings.Contains(out, `auth="Bearer `+secret+`"`) || strings.Contains(out, "OTHER-REACHED") {
		t.Errorf("after pause and auto-resume: %q; want the policy and the injected secret as before", out)
	}
	forks, err := n.Client.ForkSession(ctx, se.ID, airlock.ForkSessionRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forks.Sessions {
		t.Cleanup(func() { _ = n.Client.DeleteSession(context.Background(), f.ID) })
		if out := call(f.ID); !strings.Contains(out, `auth="Bearer `+secret+`"`) || strings.Contains(out, "OTHER-REACHED") {
			t.Errorf("in fork %s: %q", f.ID, out)
		}
	}
}

// TestSessionHostileSandbox: code inside cannot break its session's pause: a bound host socket of its
// own makes the checkpoint fail cleanly (the session runs on, its processes intact), stray wake signals
// to the daemon change nothing, and once the socket is gone the pause works.
func TestSessionHostileSandbox(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 3*time.Minute)
	se := newSession(t, e, airlock.CreateSessionRequest{IdleTimeoutSeconds: never()})
	before := startAgent(t, e, se.ID, 1<<20)
	// Stray wakes: the daemon is not quiesced, so they do nothing.
	res := run(t, e, se.ID, airlock.ExecRequest{User: "root", Cmd: []string{"bash", "-c", "for i in $(seq 20); do kill -USR2 1; done; echo sent"}})
	if !strings.Contains(res.Stdout, "sent") {
		t.Fatalf("kill: %+v", res)
	}
	// A socket bound where the daemon's is, a host socket gVisor cannot save.
	sh(t, e, se.ID, "true")
	res = run(t, e, se.ID, airlock.ExecRequest{User: "root", Cmd: []string{"bash", "-c", `setsid nohup python3 -c '
import socket, time
s = socket.socket(socket.AF_UNIX)
s.bind("/run/airlock/evil.sock")
s.listen(1)
time.sleep(100000)' >/dev/null 2>&1 &
echo $! > /tmp/evil.pid
for i in $(seq 50); do test -S /run/airlock/evil.sock && echo bound && exit 0; sleep 0.1; done; echo not-bound`}})
	if strings.Contains(res.Stdout, "bound") && !strings.Contains(res.Stdout, "not-bound") {
		_, err := e.Client.PauseSession(ctx, se.ID)
		if !errors.Is(err, airlock.ErrFailedPrecondition) || !strings.Contains(err.Error(), "evil.sock") {
			t.Fatalf("pause with a host socket bound inside: %v; want a failed precondition that says why", err)
		}
		t.Logf("pause with a bound host socket: %v", err)
		got, err := e.Client.GetSession(ctx, se.ID)
		if err != nil || got.State != airlock.SessionRunning || got.SandboxID != se.SandboxID {
			t.Fatalf("after the failed pause: %+v %v; want it running in its sandbox", got, err)
		}
		if st, ok := queryAgent(t, e, se.ID); !ok || st.PID != before.PID || st.SHA256 != before.SHA256 {
			t.Fatalf("after the failed pause the agent is %+v %v", st, ok)
		}
		res = run(t, e, se.ID, airlock.ExecRequest{User: "root", Cmd: []string{"bash", "-c", "kill $(cat /tmp/evil.pid); rm -f /run/airlock/evil.sock; ls /run/airlock"}})
		if strings.Contains(res.Stdout, "evil") {
			t.Fatalf("could not remove the socket: %q %q", res.Stdout, res.Stderr)
		}
	} else {
		t.Logf("the sandbox could not bind a socket in /run/airlock (%q); nothing to break", res.Stdout)
	}
	if _, err := e.Client.PauseSession(ctx, se.ID); err != nil {
		t.Fatalf("pause once the socket is gone: %v", err)
	}
	if st, ok := queryAgent(t, e, se.ID); !ok || st.PID != before.PID || st.SHA256 != before.SHA256 {
		t.Fatalf("after pause and resume: %+v %v", st, ok)
	}
}

// TestSessionIdempotency: a retried create or fork with the same Idempotency-Key gets the first answer
// and makes nothing new; the same key with another body is a conflict.
func TestSessionIdempotency(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 2*time.Minute)
	req := airlock.CreateSessionRequest{IdleTimeoutSeconds: never(), Metadata: map[string]string{"try": "1"}}
	var replayed bool
	first, err := e.Client.CreateSession(ctx, req, airlock.WithIdempotencyKey("create-1"), airlock.WithReplayed(&replayed))
	if err != nil || replayed {
		t.Fatalf("first create: %+v %v replayed=%v", first, err, replayed)
	}
	t.Cleanup(func() { _ = e.Client.DeleteSession(context.Background(), first.ID) })
	again, err := e.Client.CreateSession(ctx, req, airlock.WithIdempotencyKey("create-1"), airlock.WithReplayed(&replayed))
	if err != nil || !replayed || again.ID != first.ID {
		t.Fatalf("retried create: %+v %v replayed=%v; want the first session again", again, err, replayed)
	}
	req.Metadata["try"] = "2"
	if _, err := e.Client.CreateSession(ctx, req, airlock.WithIdempotencyKey("create-1")); !errors.Is(err, airlock.ErrConflict) {
		t.Errorf("same key, other body: %v; want a conflict", err)
	}
	forks, err := e.Client.ForkSession(ctx, first.ID, airlock.ForkSessionRequest{Count: 2}, airlock.WithIdempotencyKey("fork-1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forks.Sessions {
		t.Cleanup(func() { _ = e.Client.DeleteSession(context.Background(), f.ID) })
	}
	retry, err := e.Client.ForkSession(ctx, first.ID, airlock.ForkSessionRequest{Count: 2}, airlock.WithIdempotencyKey("fork-1"), airlock.WithReplayed(&replayed))
	if err != nil || !replayed || len(retry.Sessions) != 2 || retry.Sessions[0].ID != forks.Sessions[0].ID {
		t.Fatalf("retried fork: %+v %v replayed=%v; want the same two forks", retry, err, replayed)
	}
	l, err := e.Client.ListSessions(ctx, airlock.ListOptions{})
	if err != nil || len(l.Sessions) != 3 {
		t.Errorf("sessions after the retries: %d (%v); want 3", len(l.Sessions), err)
	}
}

// TestSessionSurvivesUpgrade: a session paused under one build of Airlock resumes under another, its
// process counting on from its memory (the restored daemon is the one the image was made with: another
// build's code would crash it at once); new sessions run the new build.
func TestSessionSurvivesUpgrade(t *testing.T) {
	dir, err := os.MkdirTemp("", "airlock-upgrade-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := testenv.Start(t, testenv.Options{DataDir: dir})
	se := newSession(t, e, airlock.CreateSessionRequest{})
	sh(t, e, se.ID, `setsid nohup python3 -c '
import os, time
n = 0
while True:
    n += 1
    with open("/tmp/count.new", "w") as f:
        f.write(str(n))
    os.replace("/tmp/count.new", "/tmp/count")
    time.sleep(0.05)
' >/dev/null 2>&1 &
until [ "$(cat /tmp/count 2>/dev/null || echo 0)" -ge 5 ]; do sleep 0.05; done`)
	if _, err := e.Client.PauseSession(ctxT(t, time.Minute), se.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}

	// Another build, as far as a checksum can tell.
	bin, err := os.ReadFile(testenv.DaemonBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(t.TempDir(), "airlock-daemon")
	if err := os.WriteFile(next, append(bin, "another build"...), 0o755); err != nil {
		t.Fatal(err)
	}
	e2 := testenv.Start(t, testenv.Options{DataDir: dir, DaemonBinary: next})
	if got, err := e2.Client.ResumeSession(ctxT(t, time.Minute), se.ID); err != nil || got.State != airlock.SessionRunning {
		t.Fatalf("resume after the upgrade: %+v %v", got, err)
	}
	count := func() int {
		n, err := strconv.Atoi(strings.TrimSpace(sh(t, e2, se.ID, "cat /tmp/count").Stdout))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// It had counted to 5 or more before the pause; a process started afresh would be back near 1.
	first := count()
	time.Sleep(300 * time.Millisecond)
	if then := count(); then <= first || first < 5 {
		t.Errorf("the resumed process counted %d then %d; want it to go on from 5 or more", first, then)
	}
	daemon := func(id string) string {
		return strings.TrimSpace(sh(t, e2, id, "sha256sum /.airlock/init | cut -d' ' -f1").Stdout)
	}
	// (This stand-in for another build differs only past the code, so the check that counts is this one.)
	if got, sum := daemon(se.ID), sha256.Sum256(bin); got != hex.EncodeToString(sum[:]) {
		t.Errorf("the resumed session runs the daemon %s; want the one it was paused with", got)
	}
	fresh := newSession(t, e2, airlock.CreateSessionRequest{})
	if got, sum := daemon(fresh.ID), sha256.Sum256(append(bin, "another build"...)); got != hex.EncodeToString(sum[:]) {
		t.Errorf("a new session runs the daemon %s; want the new build's", got)
	}
}

// TestSessionOOMThenPause: a session whose sandbox the kernel kills for memory, paused right after, ends
// with the reason it died for (the pause's reconnect to the daemon sees the sandbox gone instead of
// retrying on and calling it unreachable).
func TestSessionOOMThenPause(t *testing.T) {
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 2*time.Minute)
	se := newSession(t, e, airlock.CreateSessionRequest{MemoryMB: 128, IdleTimeoutSeconds: never()})
	_, _ = e.Client.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c", "x = bytearray(1 << 30); print(len(x))"}, TimeoutSeconds: 60})
	_, _ = e.Client.PauseSession(ctx, se.ID) // fails: there is nothing left to pause
	got := waitState(t, e, se.SandboxID, airlock.StateFailed, 30*time.Second)
	if !strings.Contains(got.Reason, "out of memory") {
		t.Errorf("sandbox %s, reason %q; want failed, out of memory", got.State, got.Reason)
	}
}

// TestSessionCrashResumes: a session whose sandbox's runtime is killed from outside (not out of memory)
// goes on from its latest snapshot, with the memory it had then, in a new sandbox; one that keeps
// crashing is resumed crashResumes (3) times, then stays failed. One out of memory stays failed
// (TestSessionOOMThenPause).
func TestSessionCrashResumes(t *testing.T) {
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 5*time.Minute)
	se := newSession(t, e, airlock.CreateSessionRequest{IdleTimeoutSeconds: never(), RollingIntervalSeconds: never()})
	// The count is replaced whole (a rename), so that a snapshot never holds it half written.
	sh(t, e, se.ID, "nohup setsid bash -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done' >/dev/null 2>&1 &")
	time.Sleep(500 * time.Millisecond)
	if _, err := e.Client.SnapshotSession(ctx, se.ID, airlock.CreateSnapshotRequest{}); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		t.Helper()
		n, err := strconv.Atoi(strings.TrimSpace(sh(t, e, se.ID, "cat /tmp/count").Stdout))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	sb := se.SandboxID
	for i := 1; i <= 4; i++ {
		killRunsc(t, e.DataDir, sb)
		deadline := time.Now().Add(60 * time.Second)
		for {
			got, err := e.Client.GetSession(ctx, se.ID)
			if err != nil {
				t.Fatal(err)
			}
			if i <= 3 && got.State == airlock.SessionRunning && got.SandboxID != sb {
				sb = got.SandboxID
				break
			}
			if i == 4 && got.State == airlock.SessionFailed {
				if !strings.Contains(got.Reason, "sandbox failed") {
					t.Errorf("after the 4th crash: failed for %q", got.Reason)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("after crash %d: session %s (%s), sandbox %s", i, got.State, got.Reason, got.SandboxID)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// Its processes go on from the snapshot's memory: the counter runs again.
		a := count()
		time.Sleep(300 * time.Millisecond)
		if b := count(); b <= a {
			t.Fatalf("after crash %d the counter does not go on: %d then %d", i, a, b)
		}
	}
	t.Fatal("the session was resumed after a 4th crash within 10 minutes")
}

// killRunsc kills the runsc sandbox process of sandbox id, under dataDir, with SIGKILL.
func killRunsc(t *testing.T, dataDir, id string) {
	t.Helper()
	pid, ok := testenv.RunscSandboxes(dataDir)[id]
	if !ok {
		t.Fatalf("no runsc-sandbox process of %s", id)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}
