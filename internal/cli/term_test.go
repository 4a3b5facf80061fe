package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/creack/pty"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// openPTY returns the terminal side of a new pseudo-terminal of 33x101.
func openPTY(t *testing.T) *os.File {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close(); tty.Close() })
	if err := pty.Setsize(tty, &pty.Winsize{Rows: 33, Cols: 101}); err != nil {
		t.Fatal(err)
	}
	return tty
}

func TestRawModeRestores(t *testing.T) {
	tty := openPTY(t)
	fd := int(tty.Fd())
	if !isTerminal(fd) {
		t.Fatal("isTerminal(pty): got false")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if isTerminal(int(r.Fd())) {
		t.Error("isTerminal(pipe): got true")
	}
	before, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	restore, err := makeRaw(fd)
	if err != nil {
		t.Fatalf("makeRaw: %v", err)
	}
	raw, _ := unix.IoctlGetTermios(fd, unix.TCGETS)
	if raw.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG) != 0 || raw.Oflag&unix.OPOST != 0 || raw.Iflag&unix.ICRNL != 0 {
		t.Errorf("raw mode keeps echo, line editing, signals or output processing: %+v", raw)
	}
	if err := restore(); err != nil {
		t.Fatalf("restore: %v", err)
	}
	after, _ := unix.IoctlGetTermios(fd, unix.TCGETS)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("terminal after restore (-before +after):\n%s", diff)
	}
	if rows, cols, err := termSize(fd); err != nil || rows != 33 || cols != 101 {
		t.Errorf("termSize: got %d, %d, %v; want 33, 101", rows, cols, err)
	}
}

func TestShell(t *testing.T) {
	f, url := newFakeServer(t)
	tty := openPTY(t)
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TERM", "screen")
	var out, errOut bytes.Buffer
	code := Run(context.Background(), []string{"--url", url, "--api-key", "k", "shell", sbA, "exit", "3"},
		Streams{In: tty, Out: &out, Err: &errOut})
	if code != 3 {
		t.Errorf("shell: exit %d, stderr %q; want 3", code, errOut.String())
	}
	var req airlock.ExecRequest
	if err := json.Unmarshal([]byte(f.body("EXEC")), &req); err != nil {
		t.Fatal(err)
	}
	want := airlock.ExecRequest{Cmd: []string{"exit", "3"}, Env: map[string]string{"TERM": "screen"}, PTY: &airlock.PTYSize{Rows: 33, Cols: 101}}
	if diff := cmp.Diff(want, req); diff != "" {
		t.Errorf("exec request (-want +got):\n%s", diff)
	}
	after, _ := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("terminal not restored (-before +after):\n%s", diff)
	}

	// A shell needs a terminal on stdin.
	code = Run(context.Background(), []string{"--url", url, "--api-key", "k", "shell", sbA}, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	if code != 1 || !strings.Contains(errOut.String(), "needs a terminal") {
		t.Errorf("shell without a terminal: exit %d, stderr %q", code, errOut.String())
	}
}
