package gvisor_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/testenv"
)

// TestLinkDirPlantedFiles: root in a sandbox fills its link directory with symlinks to host files
// (under the names the host once wrote: wake, and the control files' names), FIFOs, sockets and
// directories; the sandbox is checkpointed three times and restored: no host file changes or appears,
// every checkpoint and the restore work, and the restored sandbox finds what was planted. A positive
// control first: a host file written through a link planted by the test itself does change.
func TestLinkDirPlantedFiles(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	can := testenv.NewCanaries(t)
	canaries := can.Dir

	// Positive control: following the planted link from the host is what would hurt.
	ctl := filepath.Join(t.TempDir(), "wake")
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("x"), 0o600)
	os.Symlink(victim, ctl)
	if err := os.WriteFile(ctl, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); len(b) != 0 {
		t.Fatal("positive control: writing through a symlink did not truncate its target")
	}

	spec, _ := r.spec(t, "plant-a")
	a, err := r.d.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.d.Destroy(context.Background(), "plant-a") })
	c := r.dial(t, a)
	sh(t, c, `set -e
cd /run/airlock
ln -s `+canaries+`/master.key wake
ln -s `+canaries+`/airlock.db key
ln -s `+canaries+`/shadow wake.tmp
ln -s `+canaries+`/new-file created
ln -s /proc/self/root escape
mkfifo fifo
mkdir -p sub/deeper
ln -s `+canaries+` sub/dir-link
echo data > sub/deeper/file
python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.bind("/run/airlock/bound.sock")'
ls -la /run/airlock >/dev/null`)
	img := filepath.Join(r.dir, "plant-img")
	for i := range 3 {
		if err := c.Quiesce(ctx); err != nil {
			t.Fatal(err)
		}
		dir := img
		if i < 2 {
			dir = filepath.Join(r.dir, "plant-img-"+string(rune('0'+i)))
		}
		if err := r.d.Checkpoint(ctx, "plant-a", dir, runtime.CheckpointOptions{LeaveRunning: true}); err != nil {
			t.Fatalf("checkpoint %d with files planted in the link directory: %v", i, err)
		}
		c = r.dial(t, a)
		can.Check(t, "a checkpoint")
	}
	spec, _ = r.spec(t, "plant-b")
	b, err := r.d.Restore(ctx, spec, img)
	if err != nil {
		t.Fatalf("restore with files planted in the link directory: %v", err)
	}
	t.Cleanup(func() { _ = r.d.Destroy(context.Background(), "plant-b") })
	got := sh(t, r.dial(t, b), `cd /run/airlock; for f in wake key created fifo sub/dir-link bound.sock; do
  if [ -L $f ]; then echo "$f -> $(readlink $f)"; elif [ -p $f ]; then echo "$f fifo"; elif [ -S $f ]; then echo "$f socket"; fi
done; cat sub/deeper/file`)
	want := strings.Join([]string{
		"wake -> " + canaries + "/master.key", "key -> " + canaries + "/airlock.db", "created -> " + canaries + "/new-file",
		"fifo fifo", "sub/dir-link -> " + canaries, "bound.sock socket", "data"}, "\n")
	if got != want {
		t.Errorf("the restored link directory holds\n%s\nwant\n%s", got, want)
	}
	can.Check(t, "the restore")
}

// TestLinkDirFlood: the link directory is a small file system of its own: filling it fills nothing of
// the host's, and the daemon goes on answering.
func TestLinkDirFlood(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	spec, _ := r.spec(t, "flood-a")
	a, err := r.d.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.d.Destroy(context.Background(), "flood-a") })
	c := r.dial(t, a)
	got := sh(t, c, `cd /run/airlock
dd if=/dev/zero of=big bs=64k count=1024 2>/dev/null; echo "dd $?"
i=0; while [ $i -lt 500 ] && touch f$i 2>/dev/null; do i=$((i+1)); done; echo "files $i"
du -sk big | cut -f1`)
	lines := strings.Split(got, "\n")
	if len(lines) != 3 || lines[0] == "dd 0" {
		t.Fatalf("filling the link directory: %q; want dd to fail", got)
	}
	if files := strings.TrimPrefix(lines[1], "files "); files == "500" {
		t.Errorf("made 500 files in the link directory; want it to run out of inodes first")
	}
	if kb := lines[2]; len(kb) > 3 {
		t.Errorf("a %s KiB file in the link directory; want at most 64 KiB", kb)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("the daemon after the flood: %v", err)
	}
}

// TestDaemonRedirect: root in sandbox A keeps pointing its daemon's socket at sandbox B's, as the
// attack on the old link did; after A's checkpoint the host connects to A's daemon or to nothing,
// never to B's: a daemon that cannot prove A's key is refused.
func TestDaemonRedirect(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	specB, _ := r.spec(t, "redir-b")
	b, err := r.d.Create(ctx, specB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.d.Destroy(context.Background(), "redir-b") })
	if got := sh(t, r.dial(t, b), "hostname"); got != "redir-b" {
		t.Fatalf("B's hostname %q", got)
	}
	specA, _ := r.spec(t, "redir-a")
	a, err := r.d.Create(ctx, specA)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.d.Destroy(context.Background(), "redir-a") })
	c := r.dial(t, a)
	sh(t, c, `setsid nohup sh -c 'while :; do ln -sfn ../../redir-b/link/daemon.sock /run/airlock/daemon.sock; done' >/dev/null 2>&1 &
sleep 0.2`)
	if err := c.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	cerr := r.d.Checkpoint(cctx, "redir-a", filepath.Join(r.dir, "redir-img"), runtime.CheckpointOptions{LeaveRunning: true})
	t.Logf("checkpoint while the socket is redirected: %v", cerr)
	// Whatever the host can connect to as A's daemon in a few seconds is A's. Positive control: a dial
	// that follows the path, as the old link did, reaches B.
	deadline := time.Now().Add(3 * time.Second)
	reached, hijacked := 0, 0
	sock := filepath.Join(r.dir, "runtime", "sandboxes", "redir-a", "link", "daemon.sock")
	for time.Now().Before(deadline) {
		if cl, err := link.Dial(ctx, sock, link.Options{}); err == nil {
			if res, err := cl.Exec(ctx, proto.ExecRequest{Argv: []string{"hostname"}}); err == nil && strings.TrimSpace(string(res.Stdout)) == "redir-b" {
				hijacked++
			}
			cl.Close()
		}
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, key, err := r.d.DialLink(dctx, "redir-a")
		if err == nil {
			var cl *link.Client
			if cl, err = link.Connect(dctx, conn, link.Options{Key: key}); err == nil {
				res, err := cl.Exec(dctx, proto.ExecRequest{Argv: []string{"hostname"}})
				if err == nil && strings.TrimSpace(string(res.Stdout)) != "redir-a" {
					t.Fatalf("the host's channel to A ran a command in %q", res.Stdout)
				}
				reached++
				cl.Close()
			}
		}
		cancel()
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("reached A's own daemon %d times; a path-following dial reached B %d times", reached, hijacked)
	if hijacked == 0 {
		t.Error("positive control: a path-following dial never reached B; the attack did not run")
	}
	// B is untouched and still answers its own host.
	if got := sh(t, r.dial(t, b), "hostname"); got != "redir-b" {
		t.Fatalf("B's hostname after the attack %q", got)
	}
}
