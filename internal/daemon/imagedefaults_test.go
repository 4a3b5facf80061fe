package daemon_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/daemon"
	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// TestWorkDir: an image's working directory is where a process without a cwd starts; one that is not
// a directory falls back to the user's home; a request's own cwd wins.
func TestWorkDir(t *testing.T) {
	work := t.TempDir()
	file := filepath.Join(work, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		workDir, cwd, want string
	}{
		{work, "", work},
		{file, "", ""}, // home
		{"/no/such/dir", "", ""},
		{work, "/", "/"},
	} {
		t.Run(c.workDir+"|"+c.cwd, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.WorkDir = c.workDir
			d := startDaemon(t, cfg)
			want := c.want
			if want == "" {
				want = d.home
			}
			res, err := d.dial(t, link.Options{}).Exec(testCtx(t), proto.ExecRequest{Argv: []string{"pwd"}, Cwd: c.cwd})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(res.Stdout)); got != want {
				t.Errorf("workdir %q, cwd %q: pwd = %q; want %q", c.workDir, c.cwd, got, want)
			}
		})
	}
}

// TestDefaultArgv: a process whose request names no command runs the image's (Entrypoint, then Cmd),
// as an exec and as a started process, with the request's own arguments and environment; a request's
// own argv wins; with no image command such a request is refused, saying why.
func TestDefaultArgv(t *testing.T) {
	cfg := testConfig(t)
	cfg.DefaultArgv = []string{"sh", "-c", `echo "from the image: $GREETING"`}
	d := startDaemon(t, cfg)
	c := d.dial(t, link.Options{})
	ctx := testCtx(t)
	res, err := c.Exec(ctx, proto.ExecRequest{Env: []string{"GREETING=hi"}})
	if err != nil || string(res.Stdout) != "from the image: hi\n" {
		t.Errorf("exec with no argv: %q, %v; want the image's command", res.Stdout, err)
	}
	if res, err := c.Exec(ctx, proto.ExecRequest{Argv: []string{"echo", "mine"}}); err != nil || string(res.Stdout) != "mine\n" {
		t.Errorf("exec with an argv: %q, %v; want it", res.Stdout, err)
	}
	w := &gateWriter{open: make(chan struct{})}
	close(w.open)
	p, err := c.Start(ctx, proto.StartRequest{Env: []string{"GREETING=started"}}, link.ProcessOptions{Stdout: w})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if w.n != int64(len("from the image: started\n")) {
		t.Errorf("a started process with no argv wrote %d bytes; want the image's command's line", w.n)
	}

}

// TestNoDefaultArgv: with no image command, a request that names no command is refused, saying why.
func TestNoDefaultArgv(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	_, err := d.dial(t, link.Options{}).Exec(testCtx(t), proto.ExecRequest{})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "Entrypoint and Cmd") {
		t.Errorf("exec with no argv and no image command: %v; want invalid argument saying why", err)
	}
}

// TestImageUser: an image's User resolves by name or number, with a group by name or number; a name
// the root does not have is an error (the daemon keeps its default user then).
func TestImageUser(t *testing.T) {
	for spec, want := range map[string]daemon.User{
		"root":      {Name: "root", UID: 0, GID: 0, Home: "/root"},
		"0":         {Name: "root", UID: 0, GID: 0, Home: "/root"},
		"0:0":       {Name: "root", UID: 0, GID: 0, Home: "/root"},
		"root:4242": {Name: "root", UID: 0, GID: 4242, Home: "/root"},
		"54321":     {Name: "54321", UID: 54321, GID: 54321, Home: "/"},
	} {
		got, err := daemon.ImageUser(spec)
		if err != nil || got != want {
			t.Errorf("ImageUser(%q) = %+v, %v; want %+v", spec, got, err, want)
		}
	}
	for _, spec := range []string{"no-such-user-xyz", "root:no-such-group-xyz"} {
		if u, err := daemon.ImageUser(spec); err == nil {
			t.Errorf("ImageUser(%q) = %+v; want an error", spec, u)
		}
	}
}
