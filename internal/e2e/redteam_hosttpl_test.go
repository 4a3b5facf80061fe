package e2e

import (
	"archive/tar"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestRedTeamHostTemplateFiles (the red-team battery, issue 40): the legacy host template (airlock up
// --default-image none) shows the host's /usr read-only, and gVisor reads host files as host root
// would; files there that only the host's root may read (mode 0600, or in a 0700 directory) are not
// readable by root inside, by any means, while what every host user may read is. One that appears
// after the node started (as a package upgrade's would) is hidden from the sandboxes booted after, and
// the masks survive a pause and resume.
func TestRedTeamHostTemplateFiles(t *testing.T) {
	testenv.RequireSandboxes(t)
	h := newHostTemplateFiles(t)
	e := testenv.Start(t, testenv.Options{DataDir: dataDir(t)}) // DefaultImage unset: the host template
	ctx := ctxT(t, 10*time.Minute)
	rootSh := func(t *testing.T, id, script string) *airlock.ExecResult {
		t.Helper()
		return run(t, e, id, airlock.ExecRequest{User: "root", TimeoutSeconds: 120, Cmd: []string{"sh", "-c", script}})
	}
	// attack reads the hidden files every way root has inside, and through the file API (the daemon
	// reads as root), and fails the test for every secret it gets; the readable file beside them is the
	// positive control.
	attack := func(t *testing.T, id string, hidden ...string) {
		t.Helper()
		d := h.dir
		res := rootSh(t, id, "cat "+d+"/readable; ls "+d+" | tr '\\n' ' '")
		if want := h.readable + "\n" + h.listing(); res.Stdout != want {
			t.Fatalf("positive control: the host directory shows %q (%s); want %q", res.Stdout, res.Stderr, want)
		}
		for _, script := range []string{
			"cat " + d + "/root-only " + d + "/private/inner " + d + "/later",
			"head -c 4096 " + d + "/root-only; dd if=" + d + "/root-only bs=1 2>/dev/null; base64 " + d + "/root-only",
			"cp " + d + "/root-only /tmp/copy; cat /tmp/copy; cp -r " + d + "/private /tmp/priv; cat /tmp/priv/*",
			"ls -la " + d + "/private; find " + d + " -type f -exec cat {} +",
			"python3 -c 'import os,sys\nfor p in sys.argv[1:]:\n  try:\n    fd=os.open(p, os.O_RDONLY); print(os.read(fd, 4096))\n  except OSError as e: print(e)' " +
				d + "/root-only " + d + "/private/inner " + d + "/later",
			"tar cf /tmp/all.tar " + d + " 2>/dev/null; tar xOf /tmp/all.tar",
			"stat -c '%n %s %a %U' " + d + "/root-only " + d + "/private; ls " + d + "/private",
		} {
			res := rootSh(t, id, script)
			if leaked(res.Stdout+res.Stderr, hidden) {
				t.Errorf("root in the sandbox read a root-only host file: %q printed %q", script, res.Stdout)
			}
		}
		// The mask, not the file, is what root sees: empty, and nobody's to read.
		if res := rootSh(t, id, "stat -c '%s %a' "+d+"/root-only; ls -A "+d+"/private | wc -l"); res.Stdout != "0 0\n0\n" {
			t.Errorf("the root-only file and the private directory show as %q; want an empty file and an empty directory, mode 0", res.Stdout)
		}
		for _, p := range []string{d + "/root-only", d + "/private/inner"} {
			if b, err := e.Client.ReadFile(ctx, id, p); err == nil && leaked(string(b), hidden) {
				t.Errorf("the file API read a root-only host file %s: %q", p, b)
			}
		}
		if rc, err := e.Client.DownloadTar(ctx, id, d); err == nil {
			tr := tar.NewReader(rc)
			for {
				_, err := tr.Next()
				if err != nil {
					break
				}
				if b, _ := io.ReadAll(tr); leaked(string(b), hidden) {
					t.Errorf("the file API's tar of %s holds a root-only host file: %q", d, b)
				}
			}
			rc.Close()
		}
	}

	sb := create(t, e, airlock.CreateSandboxRequest{})
	t.Run("root-only files present at start", func(t *testing.T) {
		attack(t, sb.ID, h.rootOnly, h.inner)
	})
	t.Run("a root-only file that appears later", func(t *testing.T) {
		late := h.addLate(t)
		later := create(t, e, airlock.CreateSandboxRequest{})
		attack(t, later.ID, h.rootOnly, h.inner, late)
	})
	t.Run("after a pause and a resume", func(t *testing.T) {
		se, err := e.Client.CreateSession(ctx, airlock.CreateSessionRequest{IdleTimeoutSeconds: never()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Client.PauseSession(ctx, se.ID); err != nil {
			t.Fatal(err)
		}
		if s, err := e.Client.ResumeSession(ctx, se.ID); err != nil || s.State != airlock.SessionRunning {
			t.Fatalf("resume: %+v, %v", s, err)
		}
		attack(t, se.ID, h.rootOnly, h.inner, h.late)
	})
}

// leaked reports whether out holds one of the secrets.
func leaked(out string, secrets []string) bool {
	for _, s := range secrets {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}

// hostTemplateFiles is a directory the test makes in the host's /usr/share (which the host template
// shows at the same path): a world-readable file, a root-only file, a root-only directory with a
// readable file in it, and later another root-only file; each file holds a string of its own.
type hostTemplateFiles struct {
	dir string
	// What the files hold: readable, root-only, private/inner and later.
	readable, rootOnly, inner, late string
	hasLate                         bool // later was made
}

// newHostTemplateFiles makes the directory, removed when the test ends, and checks (the positive
// control) that host root reads every file in it.
func newHostTemplateFiles(t *testing.T) *hostTemplateFiles {
	t.Helper()
	tag := make([]byte, 8)
	if _, err := rand.Read(tag); err != nil {
		t.Fatal(err)
	}
	id := hex.EncodeToString(tag)
	h := &hostTemplateFiles{
		dir:      filepath.Join("/usr/share", "airlock-redteam-"+id),
		readable: "readable-" + id, rootOnly: "root-only-secret-" + id, inner: "private-dir-secret-" + id, late: "later-secret-" + id,
	}
	if err := os.Mkdir(h.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(h.dir) })
	for _, f := range []struct {
		path, content string
		mode          os.FileMode
	}{{"readable", h.readable, 0o644}, {"root-only", h.rootOnly, 0o600}, {"private/inner", h.inner, 0o644}} {
		p := filepath.Join(h.dir, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(h.dir, "private"), 0o700); err != nil {
		t.Fatal(err)
	}
	h.hostReads(t, "root-only", h.rootOnly)
	h.hostReads(t, "private/inner", h.inner)
	return h
}

// addLate adds the root-only file "later" and returns its contents.
func (h *hostTemplateFiles) addLate(t *testing.T) string {
	t.Helper()
	p := filepath.Join(h.dir, "later")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(h.late + "\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	h.hasLate = true
	h.hostReads(t, "later", h.late)
	return h.late
}

// listing is what ls lists of the directory, each name followed by a space: every entry is there,
// hidden or not.
func (h *hostTemplateFiles) listing() string {
	names := "private readable root-only "
	if h.hasLate {
		names = "later " + names
	}
	return names
}

// hostReads checks that host root reads name and finds want in it, and that others may not read it.
func (h *hostTemplateFiles) hostReads(t *testing.T, name, want string) {
	t.Helper()
	p := filepath.Join(h.dir, name)
	b, err := os.ReadFile(p)
	if err != nil || !strings.Contains(string(b), want) {
		t.Fatalf("positive control: host root reads %s as %q, %v; want %q", p, b, err, want)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	parent, err := os.Stat(filepath.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o004 != 0 && parent.Mode().Perm()&0o005 == 0o005 {
		t.Fatal(errors.New("the test's secret is readable by others on the host"))
	}
}
