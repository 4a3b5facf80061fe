package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

func TestPingInfo(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	ctx := testCtx(t)
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if info.Version == "" || info.ProtocolVersion != proto.Version || info.Uptime <= 0 || info.PID != os.Getpid() {
		t.Errorf("Info = %+v; want version, protocol %d, positive uptime, pid %d", info, proto.Version, os.Getpid())
	}
}

func TestExec(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	cwd := t.TempDir()
	tests := []struct {
		name       string
		req        proto.ExecRequest
		wantCode   int
		wantSignal string
		wantOut    string
		wantErrOut string
		wantTrunc  bool
		wantTimed  bool
	}{
		{name: "true", req: proto.ExecRequest{Argv: []string{"true"}}},
		{name: "false", req: proto.ExecRequest{Argv: []string{"false"}}, wantCode: 1},
		{name: "exit code", req: proto.ExecRequest{Argv: []string{"sh", "-c", "exit 42"}}, wantCode: 42},
		{name: "stdout and stderr", req: proto.ExecRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2"}}, wantOut: "out\n", wantErrOut: "err\n"},
		{name: "env", req: proto.ExecRequest{Argv: []string{"sh", "-c", `echo "$FOO|$HOME"`}, Env: []string{"FOO=bar", "HOME=/h"}}, wantOut: "bar|/h\n"},
		{name: "default env", req: proto.ExecRequest{Argv: []string{"sh", "-c", `echo "$HOME"`}}, wantOut: d.home + "\n"},
		{name: "cwd", req: proto.ExecRequest{Argv: []string{"pwd"}, Cwd: cwd}, wantOut: cwd + "\n"},
		{name: "default cwd is home", req: proto.ExecRequest{Argv: []string{"pwd"}}, wantOut: d.home + "\n"},
		{name: "stdin", req: proto.ExecRequest{Argv: []string{"cat"}, Stdin: []byte("piped")}, wantOut: "piped"},
		{name: "empty stdin", req: proto.ExecRequest{Argv: []string{"cat"}, Stdin: []byte{}}},
		{name: "absolute path", req: proto.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo hi"}}, wantOut: "hi\n"},
		{name: "killed by signal", req: proto.ExecRequest{Argv: []string{"sh", "-c", "kill -TERM $$"}}, wantCode: -1, wantSignal: "SIGTERM"},
		{name: "truncated", req: proto.ExecRequest{Argv: []string{"sh", "-c", "printf 0123456789abcdef"}, MaxOutput: 10}, wantOut: "0123456789", wantTrunc: true},
		{name: "timeout", req: proto.ExecRequest{Argv: []string{"sh", "-c", "echo start; sleep 30"}, Timeout: 200 * time.Millisecond}, wantCode: -1, wantSignal: "SIGKILL", wantOut: "start\n", wantTimed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := c.Exec(testCtx(t), tt.req)
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			got := []any{res.ExitCode, res.Signal, string(res.Stdout), string(res.Stderr), res.StdoutTruncated, res.TimedOut}
			want := []any{tt.wantCode, tt.wantSignal, tt.wantOut, tt.wantErrOut, tt.wantTrunc, tt.wantTimed}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Exec result (code, signal, stdout, stderr, truncated, timed out) mismatch (-want +got):\n%s", diff)
			}
			if res.EndTime.Before(res.StartTime) {
				t.Errorf("end time %v before start time %v", res.EndTime, res.StartTime)
			}
		})
	}
}

func TestExecErrors(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
	tests := []struct {
		name string
		req  proto.ExecRequest
		want error
	}{
		{"empty argv", proto.ExecRequest{}, errdefs.ErrInvalidArgument},
		{"missing executable", proto.ExecRequest{Argv: []string{"no-such-binary-xyz"}}, errdefs.ErrNotFound},
		{"missing cwd", proto.ExecRequest{Argv: []string{"true"}, Cwd: "/no/such/dir"}, errdefs.ErrNotFound},
		{"cwd is a file", proto.ExecRequest{Argv: []string{"true"}, Cwd: file}, errdefs.ErrInvalidArgument},
		{"relative cwd", proto.ExecRequest{Argv: []string{"true"}, Cwd: "tmp"}, errdefs.ErrInvalidArgument},
		{"bad env", proto.ExecRequest{Argv: []string{"true"}, Env: []string{"NOEQUALS"}}, errdefs.ErrInvalidArgument},
		{"unknown user", proto.ExecRequest{Argv: []string{"true"}, User: "no-such-user-xyz"}, errdefs.ErrInvalidArgument},
		{"not executable", proto.ExecRequest{Argv: []string{file}}, errdefs.ErrPermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Exec(testCtx(t), tt.req)
			if !errors.Is(err, tt.want) {
				t.Errorf("Exec error = %v; want %v", err, tt.want)
			}
		})
	}
}

func TestExecAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run processes as another user")
	}
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	for _, tt := range []struct{ user, want string }{
		{"root", "0:0"},
		{"4321", "4321:4321"},
	} {
		res, err := c.Exec(testCtx(t), proto.ExecRequest{Argv: []string{"sh", "-c", "echo $(id -u):$(id -g)"}, User: tt.user, Cwd: "/"})
		if err != nil {
			t.Fatalf("Exec as %s: %v", tt.user, err)
		}
		if got := strings.TrimSpace(string(res.Stdout)); got != tt.want {
			t.Errorf("Exec as %s: id = %q; want %q", tt.user, got, tt.want)
		}
	}
}

func TestExecCancelKills(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithCancel(testCtx(t))
	errc := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, proto.ExecRequest{Argv: []string{"sh", "-c", "echo $$ > " + pidFile + "; exec sleep 30"}})
		errc <- err
	}()
	pid := waitPidFile(t, pidFile)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Exec after cancel = %v; want context.Canceled", err)
	}
	waitGone(t, pid)
	if err := c.Ping(testCtx(t)); err != nil {
		t.Errorf("Ping after a canceled call: %v", err)
	}
}

func waitPidFile(t *testing.T, path string) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile(path)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return pid
		}
	}
	t.Fatalf("no pid in %s", path)
	return 0
}

// waitGone waits until pid no longer exists (it was killed and reaped).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
	}
	t.Errorf("process %d still exists", pid)
}

func TestExecConcurrent(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.Exec(testCtx(t), proto.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("echo %d; exit %d", i, i%7)}})
			switch {
			case err != nil:
				errs <- err
			case string(res.Stdout) != fmt.Sprintf("%d\n", i) || res.ExitCode != i%7:
				errs <- fmt.Errorf("exec %d: got stdout %q code %d", i, res.Stdout, res.ExitCode)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestExecLargeOutput(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	// 3 MiB on each stream: more than the flow-control window, so credit must flow back.
	res, err := c.Exec(testCtx(t), proto.ExecRequest{Argv: []string{"sh", "-c", "head -c 3145728 /dev/zero; head -c 3145728 /dev/zero >&2"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 3<<20 || len(res.Stderr) != 3<<20 || res.StdoutTruncated {
		t.Errorf("got %d stdout and %d stderr bytes (truncated %v); want %d each", len(res.Stdout), len(res.Stderr), res.StdoutTruncated, 3<<20)
	}
}

func TestStartStdinEcho(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	ctx := testCtx(t)
	var out, errOut syncBuffer
	p, err := c.Start(ctx, proto.StartRequest{Argv: []string{"cat"}, Stdin: true}, link.ProcessOptions{Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatal(err)
	}
	if p.ID() == "" || p.Info().PID == 0 || p.Info().State != proto.StateRunning {
		t.Errorf("Info = %+v; want an id, a pid, running", p.Info())
	}
	if _, err := p.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "hello\n") // echoed while the process still runs
	big := strings.Repeat("x", 3<<20)
	if _, err := p.Write([]byte(big)); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.ExitCode != 0 {
		t.Errorf("exit code %d; want 0", st.ExitCode)
	}
	if got := out.String(); got != "hello\n"+big {
		t.Errorf("stdout has %d bytes; want %d", len(got), len("hello\n"+big))
	}
	if _, err := p.Write([]byte("late")); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Write after close = %v; want ErrFailedPrecondition", err)
	}
}

func TestStartSeparateStreams(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	ctx := testCtx(t)
	var out, errOut syncBuffer
	p, err := c.Start(ctx, proto.StartRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}}, link.ProcessOptions{Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := []any{st.ExitCode, out.String(), errOut.String()}, []any{3, "out\n", "err\n"}; !cmp.Equal(got, want) {
		t.Errorf("got %v; want %v", got, want)
	}
	if _, err := p.Write([]byte("x")); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Write to a process without stdin = %v; want ErrFailedPrecondition", err)
	}
}

func TestStartErrors(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	_, err := c.Start(testCtx(t), proto.StartRequest{Argv: []string{"no-such-binary-xyz"}}, link.ProcessOptions{})
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Start missing binary = %v; want ErrNotFound", err)
	}
	_, err = c.Attach(testCtx(t), "nosuchid", link.ProcessOptions{})
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Attach unknown id = %v; want ErrNotFound", err)
	}
}

func TestPTY(t *testing.T) {
	if _, err := os.Stat("/dev/ptmx"); err != nil {
		t.Skip("no /dev/ptmx")
	}
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	ctx := testCtx(t)

	t.Run("tty", func(t *testing.T) {
		var out syncBuffer
		p, err := c.Start(ctx, proto.StartRequest{Argv: []string{"sh", "-c", "tty; echo term=$TERM; echo err >&2"}, PTY: &proto.PTYSize{Rows: 24, Cols: 80}}, link.ProcessOptions{Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		if !p.Info().PTY {
			t.Errorf("Info.PTY = false")
		}
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		got := out.String()
		for _, want := range []string{"/dev/pts/", "term=xterm-256color", "err"} {
			if !strings.Contains(got, want) {
				t.Errorf("PTY output %q does not contain %q", got, want)
			}
		}
	})

	t.Run("resize", func(t *testing.T) {
		var out syncBuffer
		p, err := c.Start(ctx, proto.StartRequest{
			Argv: []string{"sh", "-c", "stty size; read a; stty size; read b; echo got $b"},
			PTY:  &proto.PTYSize{Rows: 24, Cols: 80},
		}, link.ProcessOptions{Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		out.waitFor(t, "24 80")
		if err := p.Resize(ctx, 40, 100); err != nil {
			t.Fatal(err)
		}
		p.Write([]byte("\n"))
		out.waitFor(t, "40 100")
		p.Write([]byte("word\n"))
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "got word") {
			t.Errorf("output %q does not contain %q", out.String(), "got word")
		}
		if err := p.Resize(ctx, 10, 10); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("Resize after exit = %v; want ErrFailedPrecondition", err)
		}
	})

	t.Run("interactive bash", func(t *testing.T) {
		if _, err := os.Stat("/bin/bash"); err != nil {
			t.Skip("no bash")
		}
		var out syncBuffer
		p, err := c.Start(ctx, proto.StartRequest{Argv: []string{"bash", "--norc", "--noprofile", "-i"}, PTY: &proto.PTYSize{}}, link.ProcessOptions{Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		p.Write([]byte("echo $((6*7))\n"))
		out.waitFor(t, "42")
		p.Write([]byte("exit 5\n"))
		st, err := p.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.ExitCode != 5 {
			t.Errorf("bash exit code %d; want 5", st.ExitCode)
		}
	})

	t.Run("resize non-pty", func(t *testing.T) {
		p, err := c.Start(ctx, proto.StartRequest{Argv: []string{"sleep", "30"}}, link.ProcessOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Resize(ctx, 10, 10); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("Resize of a non-PTY process = %v; want ErrFailedPrecondition", err)
		}
		p.Signal(ctx, "KILL")
		p.Wait(ctx)
	})
}

func TestSignal(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	ctx := testCtx(t)
	for _, tt := range []struct{ sig, want string }{
		{"SIGTERM", "SIGTERM"},
		{"int", "SIGINT"},
		{"9", "SIGKILL"},
	} {
		t.Run(tt.sig, func(t *testing.T) {
			p, err := c.Start(ctx, proto.StartRequest{Argv: []string{"sleep", "30"}}, link.ProcessOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Signal(ctx, tt.sig); err != nil {
				t.Fatal(err)
			}
			st, err := p.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.ExitCode != -1 || st.Signal != tt.want {
				t.Errorf("exit = %+v; want code -1, signal %s", st, tt.want)
			}
			if err := c.SignalProcess(ctx, p.ID(), "TERM"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Errorf("signal after exit = %v; want ErrFailedPrecondition", err)
			}
		})
	}
	t.Run("group", func(t *testing.T) {
		pidFile := filepath.Join(t.TempDir(), "pid")
		p, err := c.Start(ctx, proto.StartRequest{Argv: []string{"sh", "-c", "sleep 30 & echo $! > " + pidFile + "; wait"}}, link.ProcessOptions{})
		if err != nil {
			t.Fatal(err)
		}
		child := waitPidFile(t, pidFile)
		if err := c.SignalProcessGroup(ctx, p.ID(), "KILL"); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		waitGone(t, child)
	})
	t.Run("errors", func(t *testing.T) {
		p, err := c.Start(ctx, proto.StartRequest{Argv: []string{"sleep", "30"}}, link.ProcessOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { p.Signal(ctx, "KILL"); p.Wait(ctx) }()
		if err := p.Signal(ctx, "SIGNOPE"); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("unknown signal = %v; want ErrInvalidArgument", err)
		}
		if err := c.SignalProcess(ctx, "nosuchid", "TERM"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("unknown process = %v; want ErrNotFound", err)
		}
	})
}

func TestListAndWait(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	ctx := testCtx(t)
	quick, err := c.Start(ctx, proto.StartRequest{Argv: []string{"sh", "-c", "exit 7"}}, link.ProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.WaitProcess(ctx, quick.ID())
	if err != nil || st.ExitCode != 7 {
		t.Fatalf("WaitProcess = %+v, %v; want exit code 7", st, err)
	}
	quick.Wait(ctx)
	slow, err := c.Start(ctx, proto.StartRequest{Argv: []string{"sleep", "30"}, PTY: &proto.PTYSize{}}, link.ProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.ListProcesses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		ID    string
		Argv  []string
		State proto.ProcessState
		PTY   bool
		Code  int
	}
	var got []row
	for _, p := range list {
		r := row{p.ID, p.Argv, p.State, p.PTY, 0}
		if p.Exit != nil {
			r.Code = p.Exit.ExitCode
		}
		if p.PID == 0 || p.StartTime.IsZero() || p.User == "" {
			t.Errorf("listed process %+v lacks pid, start time or user", p)
		}
		got = append(got, r)
	}
	want := []row{
		{quick.ID(), []string{"sh", "-c", "exit 7"}, proto.StateExited, false, 7},
		{slow.ID(), []string{"sleep", "30"}, proto.StateRunning, true, 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListProcesses mismatch (-want +got):\n%s", diff)
	}
	slow.Signal(ctx, "KILL")
	slow.Wait(ctx)
	if _, err := c.WaitProcess(ctx, "nosuchid"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("WaitProcess unknown = %v; want ErrNotFound", err)
	}
}

func TestExitedRetention(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxExited = 3
	d := startDaemon(t, cfg)
	c := d.dial(t, link.Options{})
	ctx := testCtx(t)
	var ids []string
	for range 5 {
		p, err := c.Start(ctx, proto.StartRequest{Argv: []string{"true"}}, link.ProcessOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Wait(ctx)
		ids = append(ids, p.ID())
	}
	var got []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		list, err := c.ListProcesses(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, p := range list {
			got = append(got, p.ID)
		}
		if len(got) == 3 {
			break
		}
	}
	if diff := cmp.Diff(ids[2:], got); diff != "" {
		t.Errorf("listed ids mismatch (-want +got):\n%s", diff)
	}
}

func TestReattach(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	ctx := testCtx(t)
	c1 := d.dial(t, link.Options{})
	var out1 syncBuffer
	p, err := c1.Start(ctx, proto.StartRequest{Argv: []string{"sh", "-c", "echo first; read x; echo second $x; echo err >&2"}, Stdin: true}, link.ProcessOptions{Stdout: &out1})
	if err != nil {
		t.Fatal(err)
	}
	out1.waitFor(t, "first\n")
	id := p.ID()
	c1.Close()
	<-p.Done()
	if _, err := p.Wait(ctx); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Wait after Close = %v; want ErrUnavailable", err)
	}

	// A new connection; the process is still waiting for input.
	c2 := d.dial(t, link.Options{})
	var out2, err2 syncBuffer
	p2, err := c2.Attach(ctx, id, link.ProcessOptions{Stdout: &out2, Stderr: &err2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Write([]byte("again\n")); err != nil {
		t.Fatal(err)
	}
	st, err := p2.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.ExitCode != 0 || out2.String() != "second again\n" || err2.String() != "err\n" {
		t.Errorf("after re-attach: exit %d, stdout %q, stderr %q; want 0, %q, %q", st.ExitCode, out2.String(), err2.String(), "second again\n", "err\n")
	}

	// Exited but still listed: attach again from explicit offsets replays everything.
	var out3 syncBuffer
	zero := int64(0)
	p3, err := c2.Attach(ctx, id, link.ProcessOptions{Stdout: &out3, StdoutOffset: &zero, StderrOffset: &zero})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p3.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := out3.String(), "first\nsecond again\n"; got != want {
		t.Errorf("replay from offset 0 = %q; want %q", got, want)
	}
	if so, se := p3.Offsets(); so != int64(len("first\nsecond again\n")) || se != 4 {
		t.Errorf("Offsets = %d, %d; want %d, 4", so, se, len("first\nsecond again\n"))
	}
}

func TestReattachDropped(t *testing.T) {
	cfg := testConfig(t)
	cfg.OutputBuffer = 1024
	d := startDaemon(t, cfg)
	ctx := testCtx(t)
	c1 := d.dial(t, link.Options{})
	// The output comes once the test says so: after the daemon has let go of c1's attachment (a fixed
	// sleep lost that race on a loaded machine).
	trigger := filepath.Join(t.TempDir(), "go")
	p, err := c1.Start(ctx, proto.StartRequest{Argv: []string{"sh", "-c", "while [ ! -e " + trigger + " ]; do sleep 0.02; done; head -c 5000 /dev/zero | tr '\\0' a"}}, link.ProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := p.ID()
	c1.Close() // nobody is attached while the output is produced
	c2 := d.dial(t, link.Options{})
	// c2 replaced c1 once the daemon answers on it; its attachment's end is then under way.
	if err := c2.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := os.WriteFile(trigger, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.WaitProcess(ctx, id); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	var mu sync.Mutex
	var drops []proto.Dropped
	p2, err := c2.Attach(ctx, id, link.ProcessOptions{Stdout: &out, OnDropped: func(d proto.Dropped) {
		mu.Lock()
		drops = append(drops, d)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	want := []proto.Dropped{{Channel: proto.ChannelStdout, Offset: 0, Bytes: 5000 - 1024}}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, drops); diff != "" {
		t.Errorf("dropped events mismatch (-want +got):\n%s", diff)
	}
	if got := out.String(); got != strings.Repeat("a", 1024) {
		t.Errorf("got %d bytes of output; want the last 1024", len(got))
	}
	if p2.Dropped() != 5000-1024 {
		t.Errorf("Dropped() = %d; want %d", p2.Dropped(), 5000-1024)
	}
}

func TestDetach(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c := d.dial(t, link.Options{})
	ctx := testCtx(t)
	var out syncBuffer
	p, err := c.Start(ctx, proto.StartRequest{Argv: []string{"sh", "-c", "echo a; read x; echo b"}, Stdin: true}, link.ProcessOptions{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "a\n")
	p.Detach()
	<-p.Done()
	if _, err := p.Wait(ctx); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Wait after Detach = %v; want ErrFailedPrecondition", err)
	}
	var out2 syncBuffer
	p2, err := c.Attach(ctx, p.ID(), link.ProcessOptions{Stdout: &out2})
	if err != nil {
		t.Fatal(err)
	}
	p2.Write([]byte("\n"))
	if _, err := p2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if out2.String() != "b\n" {
		t.Errorf("after re-attach got %q; want %q", out2.String(), "b\n")
	}
}

func TestNewConnectionReplacesOld(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	c1 := d.dial(t, link.Options{})
	if err := c1.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	c2 := d.dial(t, link.Options{})
	select {
	case <-c1.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("old connection not closed after a new one was made")
	}
	if !errors.Is(c1.Err(), errdefs.ErrUnavailable) {
		t.Errorf("old client Err = %v; want ErrUnavailable", c1.Err())
	}
	if err := c1.Ping(testCtx(t)); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Ping on old client = %v; want ErrUnavailable", err)
	}
	if err := c2.Ping(testCtx(t)); err != nil {
		t.Errorf("Ping on new client: %v", err)
	}
}

func TestServeKillsProcessesOnShutdown(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	var pid int
	t.Run("serve", func(t *testing.T) {
		d := startDaemon(t, testConfig(t))
		c := d.dial(t, link.Options{})
		if _, err := c.Start(testCtx(t), proto.StartRequest{Argv: []string{"sh", "-c", "echo $$ > " + pidFile + "; exec sleep 60"}}, link.ProcessOptions{}); err != nil {
			t.Fatal(err)
		}
		pid = waitPidFile(t, pidFile)
	}) // the cleanup stops Serve
	waitGone(t, pid)
}

// TestReapAllMode runs process operations with the PID-1 style reaper (every child reaped on SIGCHLD)
// instead of per-process waiters.
func TestReapAllMode(t *testing.T) {
	cfg := testConfig(t)
	cfg.ReapAll = true
	d := startDaemon(t, cfg)
	c := d.dial(t, link.Options{})
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.Exec(ctx, proto.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("echo %d; exit %d", i, i%5)}})
			if err != nil || res.ExitCode != i%5 || string(res.Stdout) != fmt.Sprintf("%d\n", i) {
				errs <- fmt.Errorf("exec %d: %+v, %v", i, res, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	p, err := c.Start(ctx, proto.StartRequest{Argv: []string{"sleep", "30"}}, link.ProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(ctx, "TERM"); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || st.Signal != "SIGTERM" {
		t.Errorf("Wait = %+v, %v; want SIGTERM", st, err)
	}
	res, err := c.Exec(ctx, proto.ExecRequest{Argv: []string{"sleep", "30"}, Timeout: 100 * time.Millisecond})
	if err != nil || !res.TimedOut {
		t.Errorf("Exec with timeout = %+v, %v; want timed out", res, err)
	}
}

// gateWriter blocks writes until open is closed, then counts bytes.
type gateWriter struct {
	open chan struct{}
	mu   sync.Mutex
	n    int64
}

func (w *gateWriter) Write(p []byte) (int, error) {
	<-w.open
	w.mu.Lock()
	w.n += int64(len(p))
	w.mu.Unlock()
	return len(p), nil
}

// TestSlowConsumer: while a client is attached, output is back-pressured (the process blocks) instead
// of dropped or buffered without bound; other calls on the connection are not held up, and once the
// consumer resumes every byte arrives.
func TestSlowConsumer(t *testing.T) {
	cfg := testConfig(t)
	cfg.OutputBuffer = 64 << 10
	d := startDaemon(t, cfg)
	c := d.dial(t, link.Options{})
	ctx := testCtx(t)
	w := &gateWriter{open: make(chan struct{})}
	const total = 20 << 20
	p, err := c.Start(ctx, proto.StartRequest{Argv: []string{"head", "-c", strconv.Itoa(total), "/dev/zero"}}, link.ProcessOptions{Stdout: w})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping while a consumer is stalled: %v", err)
	}
	list, err := c.ListProcesses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].State != proto.StateRunning || list[0].StdoutEnd > 4<<20 {
		t.Errorf("while stalled: %+v; want the process running, blocked after a few MiB", list)
	}
	close(w.open)
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n != total || p.Dropped() != 0 {
		t.Errorf("delivered %d, dropped %d; want %d, 0", w.n, p.Dropped(), total)
	}
}

// slowWriter blocks writes until open is closed, then takes pause over each of the first slow writes.
type slowWriter struct {
	open  chan struct{}
	pause time.Duration
	mu    sync.Mutex
	slow  int
	n     int64
}

func (w *slowWriter) Write(p []byte) (int, error) {
	<-w.open
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.slow > 0 {
		w.slow--
		time.Sleep(w.pause)
	}
	w.n += int64(len(p))
	return len(p), nil
}

// TestSlowConsumerAfterExit: a client that keeps up slowly after the process exited (pauses far longer
// than DrainTimeout, as across a slow network) still gets every byte: only a client stalled for
// StallTimeout makes the rest be dropped.
func TestSlowConsumerAfterExit(t *testing.T) {
	cfg := testConfig(t)
	cfg.OutputBuffer = 64 << 10
	cfg.DrainTimeout = 20 * time.Millisecond
	d := startDaemon(t, cfg)
	c := d.dial(t, link.Options{})
	ctx := testCtx(t)
	w := &slowWriter{open: make(chan struct{}), pause: 200 * time.Millisecond, slow: 4}
	// More than the stream's window (proto.InitialWindow) and the ring hold, less than they and the
	// pipe do: the process exits with output left waiting for the client.
	const total = proto.InitialWindow + 96<<10
	p, err := c.Start(ctx, proto.StartRequest{Argv: []string{"head", "-c", strconv.Itoa(total), "/dev/zero"}}, link.ProcessOptions{Stdout: w})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitProcess(ctx, p.ID()); err != nil {
		t.Fatal(err)
	}
	close(w.open)
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n != total || p.Dropped() != 0 {
		t.Errorf("delivered %d, dropped %d; want %d, 0", w.n, p.Dropped(), total)
	}
}

// TestStalledConsumerAfterExit: a process that exits while its only client is stalled finishes anyway;
// what did not fit in the buffer is reported dropped.
func TestStalledConsumerAfterExit(t *testing.T) {
	cfg := testConfig(t)
	cfg.OutputBuffer = 64 << 10
	cfg.DrainTimeout = 50 * time.Millisecond
	cfg.StallTimeout = 50 * time.Millisecond
	d := startDaemon(t, cfg)
	c := d.dial(t, link.Options{})
	ctx := testCtx(t)
	w := &gateWriter{open: make(chan struct{})}
	p, err := c.Start(ctx, proto.StartRequest{Argv: []string{"sh", "-c", "head -c 10485760 /dev/zero & sleep 0.2; kill -9 $$"}}, link.ProcessOptions{Stdout: w})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitProcess(ctx, p.ID()); err != nil {
		t.Fatal(err)
	}
	close(w.open)
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n+p.Dropped() > 10<<20 || w.n == 0 {
		t.Errorf("delivered %d + dropped %d; want some delivered, at most 10 MiB in all", w.n, p.Dropped())
	}
}
