package daemon_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

func testIdentity(b byte, restored bool) proto.IdentityRequest {
	return proto.IdentityRequest{Epoch: bytes.Repeat([]byte{b}, proto.IdentityEpochSize), Seed: bytes.Repeat([]byte{b + 1}, proto.IdentitySeedSize),
		MachineID: strings.Repeat(hex.EncodeToString([]byte{b}), 16), Hostname: "sb-test", InterpreterKey: bytes.Repeat([]byte{b + 2}, proto.InterpreterKeySize),
		Restored: restored}
}

// identityDaemon serves a daemon whose identity files go under a directory of their own (never the
// host's /etc), which it returns.
func identityDaemon(t *testing.T) (*link.Client, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the identity's files are root's and its hooks run as root")
	}
	root := t.TempDir()
	cfg := testConfig(t)
	cfg.DefaultUser.GID = 4242 // the group that may read the identity file
	cfg.IdentityRoot = root
	d := startDaemon(t, cfg)
	return d.dial(t, link.Options{}), root
}

// TestIdentity: the daemon replaces the machine ID and writes the identity file (root's, readable by
// the default user's group only), each time anew; a bad identity is refused whole.
func TestIdentity(t *testing.T) {
	c, root := identityDaemon(t)
	ctx := testCtx(t)
	for _, b := range []byte{0x11, 0x22} {
		id := testIdentity(b, false)
		if err := c.SetIdentity(ctx, id); err != nil {
			t.Fatal(err)
		}
		checkFile(t, filepath.Join(root, proto.MachineIDFile), id.MachineID+"\n", 0o444, 0)
		var got proto.IdentityFileContents
		p := filepath.Join(root, proto.IdentityFile)
		b, err := os.ReadFile(p)
		if err != nil || json.Unmarshal(b, &got) != nil {
			t.Fatalf("the identity file: %q, %v", b, err)
		}
		want := proto.IdentityFileContents{Epoch: hex.EncodeToString(id.Epoch), Seed: hex.EncodeToString(id.Seed), MachineID: id.MachineID,
			Hostname: id.Hostname, InterpreterKey: hex.EncodeToString(id.InterpreterKey)}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the identity file (-want +got):\n%s", diff)
		}
		checkFile(t, p, string(b), 0o640, 4242)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "etc/airlock")); len(ents) != 1 {
		t.Errorf("etc/airlock holds %d entries; want the identity file alone (no temporary file left)", len(ents))
	}
	for _, bad := range []func(*proto.IdentityRequest){
		func(r *proto.IdentityRequest) { r.InterpreterKey = r.InterpreterKey[:5] },
		func(r *proto.IdentityRequest) { r.Seed = nil },
		func(r *proto.IdentityRequest) { r.MachineID = strings.Repeat("G", 32) },
		func(r *proto.IdentityRequest) { r.Hostname = "a/b" },
	} {
		id := testIdentity(0x33, false)
		bad(&id)
		if err := c.SetIdentity(ctx, id); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("a bad identity: %v; want invalid argument", err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, proto.MachineIDFile)); strings.Contains(string(b), "33") {
		t.Error("a bad identity was applied")
	}
}

// checkFile checks a file's contents, mode, owner (root) and group.
func checkFile(t *testing.T, p, contents string, mode os.FileMode, gid int) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	st := fi.Sys().(*syscall.Stat_t)
	if string(b) != contents || fi.Mode() != mode || st.Uid != 0 || int(st.Gid) != gid {
		t.Errorf("%s: %q mode %v owner %d:%d; want %q mode %v owner 0:%d", p, b, fi.Mode(), st.Uid, st.Gid, contents, mode, gid)
	}
}

// TestIdentityLinks: links a process in the sandbox planted are never followed: a link in place of the
// identity's directory fails the identity and nothing is written where it points; a link in place of
// a file is replaced, its target untouched.
func TestIdentityLinks(t *testing.T) {
	c, root := identityDaemon(t)
	ctx := testCtx(t)
	elsewhere := t.TempDir()
	target := filepath.Join(elsewhere, "target")
	if err := os.WriteFile(target, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(root, proto.MachineIDFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(root, "etc/airlock")); err != nil {
		t.Fatal(err)
	}
	if err := c.SetIdentity(ctx, testIdentity(0x44, false)); err == nil {
		t.Error("an identity directory that is a link: no error")
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 1 {
		t.Errorf("the link's target directory holds %d entries; want its own file alone", len(ents))
	}
	if b, _ := os.ReadFile(target); string(b) != "precious" {
		t.Errorf("the machine ID link's target: %q; want it untouched", b)
	}
	if fi, err := os.Lstat(filepath.Join(root, proto.MachineIDFile)); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the machine ID: %v, %v; want a file in place of the link", fi, err)
	}
	// Positive control: without the planted directory link, the identity is written.
	if err := os.Remove(filepath.Join(root, "etc/airlock")); err != nil {
		t.Fatal(err)
	}
	if err := c.SetIdentity(ctx, testIdentity(0x44, false)); err != nil {
		t.Errorf("the identity after the link went: %v", err)
	}
}

// TestIdentityHooks: after a restore (and only then) the template's hooks run, in name order, as root,
// with the identity file as their argument; a hook or a hook directory others may write, a hidden file
// and a file that is not executable do not run.
func TestIdentityHooks(t *testing.T) {
	c, root := identityDaemon(t)
	ctx := testCtx(t)
	hooks := filepath.Join(root, proto.IdentityHooks)
	if err := os.MkdirAll(hooks, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "ran")
	hook := func(name string, mode os.FileMode) {
		script := "#!/bin/sh\necho \"" + name + " $(id -u) $1\" >> " + out + "\n"
		if err := os.WriteFile(filepath.Join(hooks, name), []byte(script), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(hooks, name), mode); err != nil {
			t.Fatal(err)
		}
	}
	hook("20-second", 0o755)
	hook("10-first", 0o700)
	hook("30-writable", 0o777)
	hook("40-not-executable", 0o644)
	hook(".hidden", 0o755)
	if err := c.SetIdentity(ctx, testIdentity(0x55, false)); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(out); err == nil {
		t.Errorf("hooks ran at a boot (not a restore): %q", b)
	}
	if err := c.SetIdentity(ctx, testIdentity(0x55, true)); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, proto.IdentityFile)
	want := "10-first 0 " + file + "\n20-second 0 " + file + "\n"
	if b, _ := os.ReadFile(out); string(b) != want {
		t.Errorf("hooks after a restore ran %q; want %q", b, want)
	}
	// A hook directory others may write is not the template's: nothing in it runs.
	os.Remove(out)
	if err := os.Chmod(hooks, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := c.SetIdentity(ctx, testIdentity(0x66, true)); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(out); err == nil {
		t.Errorf("hooks of a directory others may write ran: %q", b)
	}
}
