package firecracker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/vm"
)

// call is one request the fake Firecracker received: method, path and the JSON body, compacted.
type call struct {
	Method, Path, Body string
}

// fakeFirecracker serves Firecracker's API on a unix socket as Firecracker does (204 to every call,
// unless answer says otherwise) and records the calls. With a jail, /snapshot/create writes the
// snapshot's files where Firecracker would, in the jail.
type fakeFirecracker struct {
	t    *testing.T
	jail *jail
	// answer, if set, answers a call instead: a status and a body.
	answer func(c call) (int, string)

	mu    sync.Mutex
	calls []call // guarded by mu
}

// serve serves the API on a new socket at sock and returns a client of it.
func (f *fakeFirecracker) serve(sock string) *api {
	f.t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		f.t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var buf bytes.Buffer
		if len(b) > 0 {
			if err := json.Compact(&buf, b); err != nil {
				f.t.Errorf("%s %s: a body that is not JSON: %q", r.Method, r.URL.Path, b)
			}
		}
		c := call{r.Method, r.URL.Path, buf.String()}
		f.mu.Lock()
		f.calls = append(f.calls, c)
		f.mu.Unlock()
		if r.Header.Get("Content-Type") != "application/json" {
			f.t.Errorf("%s %s: Content-Type %q", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		if f.answer != nil {
			if code, body := f.answer(c); code != 0 {
				w.WriteHeader(code)
				io.WriteString(w, body)
				return
			}
		}
		if c.Path == "/snapshot/create" && f.jail != nil {
			var sc snapshotCreate
			json.Unmarshal(b, &sc)
			os.WriteFile(f.jail.path(sc.SnapshotPath), []byte("vm state"), 0o600)
			os.WriteFile(f.jail.path(sc.MemFilePath), bytes.Repeat([]byte{1}, 4096), 0o600)
			os.Chown(f.jail.path(sc.SnapshotPath), f.jail.UID, f.jail.UID)
			os.Chown(f.jail.path(sc.MemFilePath), f.jail.UID, f.jail.UID)
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go srv.Serve(ln)
	f.t.Cleanup(func() { srv.Close() })
	return newAPI(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
}

func (f *fakeFirecracker) took() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// TestConfigure checks the calls that configure and start a VM, in order, and their bodies, with the
// swagger's field names.
func TestConfigure(t *testing.T) {
	f := &fakeFirecracker{t: t}
	a := f.serve(filepath.Join(t.TempDir(), "api.sock"))
	m := machine{MemoryMiB: 512, CPUs: 2, MAC: "02:00:00:00:00:01", BootArgs: "console=ttyS0 vminit"}
	if err := a.configure(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	want := []call{
		{"PUT", "/boot-source", `{"kernel_image_path":"/vmlinux","initrd_path":"/initramfs.cpio","boot_args":"console=ttyS0 vminit"}`},
		{"PUT", "/machine-config", `{"vcpu_count":2,"mem_size_mib":512}`},
		{"PUT", "/drives/root", `{"drive_id":"root","path_on_host":"/root.img","is_root_device":false,"is_read_only":true}`},
		{"PUT", "/drives/disk", `{"drive_id":"disk","path_on_host":"/disk.img","is_root_device":false,"is_read_only":false}`},
		{"PUT", "/network-interfaces/eth0", `{"iface_id":"eth0","host_dev_name":"tap0","guest_mac":"02:00:00:00:00:01"}`},
		{"PUT", "/vsock", `{"guest_cid":3,"uds_path":"/v.sock"}`},
		{"PUT", "/entropy", `{}`},
		{"PUT", "/actions", `{"action_type":"InstanceStart"}`},
	}
	if diff := cmp.Diff(want, f.took()); diff != "" {
		t.Fatalf("calls (-want +got):\n%s", diff)
	}
	// Without a network, no interface.
	m.MAC = ""
	if err := a.configure(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	for _, c := range f.took() {
		if strings.HasPrefix(c.Path, "/network-interfaces/") {
			t.Fatalf("a VM without a network got %v", c)
		}
	}
}

// TestSnapshotCalls checks the bodies of the snapshot and state calls.
func TestSnapshotCalls(t *testing.T) {
	f := &fakeFirecracker{t: t}
	a := f.serve(filepath.Join(t.TempDir(), "api.sock"))
	ctx := context.Background()
	for _, step := range []func(context.Context) error{a.pause, a.snapshot, a.resume, a.load} {
		if err := step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := []call{
		{"PATCH", "/vm", `{"state":"Paused"}`},
		{"PUT", "/snapshot/create", `{"snapshot_type":"Full","snapshot_path":"/snapshot/state","mem_file_path":"/snapshot/memory"}`},
		{"PATCH", "/vm", `{"state":"Resumed"}`},
		{"PUT", "/snapshot/load", `{"snapshot_path":"/restore/state","mem_backend":{"backend_type":"File","backend_path":"/restore/memory"},"resume_vm":true}`},
	}
	if diff := cmp.Diff(want, f.took()); diff != "" {
		t.Fatalf("calls (-want +got):\n%s", diff)
	}
}

// TestAPIErrors: a fault_message surfaces; an oversized or garbage answer is refused.
func TestAPIErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		code   int
		body   string
		want   error
		inErr  string
		notErr string
	}{
		{"fault", 400, `{"fault_message":"The requested operation is not supported after starting the microVM."}`, errdefs.ErrFailedPrecondition, "not supported after starting", ""},
		{"server fault", 500, `{"fault_message":"Internal error"}`, errdefs.ErrInternal, "Internal error", ""},
		{"garbage", 400, "<html>\x00\x01", errdefs.ErrFailedPrecondition, "not an error object", "<html>"},
		{"oversized", 400, `{"fault_message":"` + strings.Repeat("x", maxAnswer) + `"}`, errdefs.ErrInvalidArgument, "over 65536 bytes", "xxxx"},
		{"oversized success", 200, strings.Repeat("x", maxAnswer+10), errdefs.ErrInvalidArgument, "over", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeFirecracker{t: t, answer: func(call) (int, string) { return tc.code, tc.body }}
			a := f.serve(filepath.Join(t.TempDir(), "api.sock"))
			err := a.pause(context.Background())
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.inErr) {
				t.Fatalf("pause: %v; want %v mentioning %q", err, tc.want, tc.inErr)
			}
			if tc.notErr != "" && strings.Contains(err.Error(), tc.notErr) {
				t.Fatalf("the error repeats the answer: %.200v", err)
			}
		})
	}
}

// fakeGuest stands in for Firecracker's vsock socket and the guest's daemon behind it: it answers a
// CONNECT to the control port with OK and then each control message with a report of it (listening),
// and refuses other ports. It counts the connections and records the messages.
type fakeGuest struct {
	mu    sync.Mutex
	conns int
	msgs  []proto.VMControl
}

func (g *fakeGuest) serve(t *testing.T, sock string, uid int) {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	os.Chown(sock, uid, uid)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				line, _ := r.ReadString('\n')
				if line != "CONNECT 1023\n" {
					return
				}
				g.mu.Lock()
				g.conns++
				g.mu.Unlock()
				io.WriteString(c, "OK 1073741824\n")
				for {
					var m proto.VMControl
					if err := proto.ReadVMLine(r, &m); err != nil {
						return
					}
					g.mu.Lock()
					g.msgs = append(g.msgs, m)
					g.mu.Unlock()
					proto.WriteVMLine(c, proto.VMReport{Seq: m.Seq, Listening: true})
				}
			}()
		}
	}()
}

// testDriver makes a driver with its state in a temporary directory and a sandbox that looks booted:
// its directory, record, disk, uid and jail, with a fake Firecracker's API and vsock sockets in the
// jail. It needs root (the jail's files are the VM's uid's).
func testDriver(t *testing.T, id string) (*Driver, *fakeFirecracker, *fakeGuest, jail) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the jail's files belong to the VM's uid")
	}
	state := t.TempDir()
	d := &Driver{cfg: Config{StateDir: state, ChrootBase: filepath.Join(state, "jail"), Firecracker: "/usr/bin/firecracker",
		Jailer: "/usr/bin/jailer", CgroupParent: "/airlock-test-fc", UIDBase: DefaultUIDBase},
		log:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		uids: vm.UIDs{Dir: filepath.Join(state, "uids"), Base: DefaultUIDBase}, consoles: map[string]*ring{}}
	for _, p := range []string{d.uids.Dir, d.dir(id)} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	uid, err := d.uids.Take(id, d.dir(id))
	if err != nil {
		t.Fatal(err)
	}
	j := newJail(d.cfg.ChrootBase, d.cfg.Firecracker, d.cfg.UIDBase, uid-d.cfg.UIDBase)
	disk := filepath.Join(d.dir(id), "disk.img")
	if err := os.WriteFile(disk, []byte("ext4"), 0o600); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(state, "root.erofs")
	os.WriteFile(root, []byte("erofs"), 0o444)
	kernel := filepath.Join(state, "vmlinux")
	os.WriteFile(kernel, []byte("ELF"), 0o444)
	if err := j.build(layout(kernel, kernel, root, disk, "", "")); err != nil {
		t.Fatal(err)
	}
	os.Chown(j.Root, j.UID, j.UID) // as the jailer does
	vm.WriteJSON(filepath.Join(d.dir(id), "machine.json"), imageRecord{Driver: "vm:firecracker", MemoryMiB: 256, CPUs: 1, Root: "root.erofs"})
	f := &fakeFirecracker{t: t, jail: &j}
	f.serve(j.path(jailAPI))
	os.Chown(j.path(jailAPI), j.UID, j.UID)
	g := &fakeGuest{}
	g.serve(t, j.path(jailVsock), j.UID)
	return d, f, g, j
}

// TestCheckpoint checks a checkpoint's calls, that the snapshot is moved out of the jail into the image
// with the disk and the record, and that a guest left running is woken over a new control connection.
func TestCheckpoint(t *testing.T) {
	d, f, g, j := testDriver(t, "fc1")
	img := t.TempDir()
	ctx := context.Background()
	if err := d.Checkpoint(ctx, "fc1", img, runtime.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	want := []call{
		{"PATCH", "/vm", `{"state":"Paused"}`},
		{"PUT", "/snapshot/create", `{"snapshot_type":"Full","snapshot_path":"/snapshot/state","mem_file_path":"/snapshot/memory"}`},
		{"PATCH", "/vm", `{"state":"Resumed"}`},
	}
	if diff := cmp.Diff(want, f.took()); diff != "" {
		t.Fatalf("calls (-want +got):\n%s", diff)
	}
	for _, name := range []string{StateFile, MemoryFile, DiskFile, ImageFile} {
		fi, err := os.Stat(filepath.Join(img, name))
		if err != nil {
			t.Fatalf("the image has no %s: %v", name, err)
		}
		if name == StateFile || name == MemoryFile {
			if fi.Mode().Perm() != 0o444 {
				t.Errorf("%s: mode %v; want 0444", name, fi.Mode())
			}
		}
	}
	for _, p := range []string{jailSnapState, jailSnapMem} {
		if _, err := os.Lstat(j.path(p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still in the jail: %v", p, err)
		}
	}
	g.mu.Lock()
	if len(g.msgs) != 1 || !g.msgs[0].Wake {
		t.Errorf("the guest got %+v; want one wake", g.msgs)
	}
	g.mu.Unlock()
	if st, _ := d.Status(ctx, "fc1"); st.Paused {
		t.Errorf("a checkpoint that left the VM running marked it paused")
	}

	// Paused: no resume until Unpause, which resumes and wakes.
	img2 := t.TempDir()
	if err := d.Checkpoint(ctx, "fc1", img2, runtime.CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := f.took(); len(got) != 2 || got[1].Path != "/snapshot/create" {
		t.Fatalf("a pausing checkpoint made %v; want pause and snapshot only", got)
	}
	if _, err := os.Stat(filepath.Join(d.dir("fc1"), vm.PausedFile)); err != nil {
		t.Fatalf("not marked paused: %v", err)
	}
	if err := d.Unpause(ctx, "fc1"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]call{{"PATCH", "/vm", `{"state":"Resumed"}`}}, f.took()); diff != "" {
		t.Fatalf("unpause calls (-want +got):\n%s", diff)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.msgs) != 2 || !g.msgs[1].Wake || g.conns != 2 {
		t.Errorf("after unpause the guest had %d connections and %+v; want a second connection and wake", g.conns, g.msgs)
	}
}

// TestCheckpointFails: a snapshot Firecracker refuses resumes the guest and reports the fault.
func TestCheckpointFails(t *testing.T) {
	d, f, _, _ := testDriver(t, "fc2")
	f.answer = func(c call) (int, string) {
		if c.Path == "/snapshot/create" {
			return 400, `{"fault_message":"Cannot create snapshot: no space left"}`
		}
		return 0, ""
	}
	err := d.Checkpoint(context.Background(), "fc2", t.TempDir(), runtime.CheckpointOptions{})
	if err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("Checkpoint: %v; want the fault", err)
	}
	got := f.took()
	if len(got) != 3 || got[2] != (call{"PATCH", "/vm", `{"state":"Resumed"}`}) {
		t.Fatalf("calls %v; want pause, snapshot, resume", got)
	}
	if _, err := os.Stat(filepath.Join(d.dir("fc2"), vm.PausedFile)); err == nil {
		t.Fatal("a failed checkpoint marked the VM paused")
	}
}

// TestTakeOutRefusesLinks: a snapshot file the VM replaced with a link (to a file of the host's) is not
// taken out.
func TestTakeOutRefusesLinks(t *testing.T) {
	_, _, _, j := testDriver(t, "fc3")
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("host"), 0o600)
	if err := os.Symlink(secret, j.path(jailSnapMem)); err != nil {
		t.Fatal(err)
	}
	if err := j.takeOut(jailSnapMem, filepath.Join(t.TempDir(), "memory")); err == nil {
		t.Fatal("took out a symlink")
	}
	os.Remove(j.path(jailSnapMem))
	if err := os.Link(secret, j.path(jailSnapMem)); err != nil {
		t.Fatal(err)
	}
	if err := j.takeOut(jailSnapMem, filepath.Join(t.TempDir(), "memory")); err == nil {
		t.Fatal("took out a hard link of a host file")
	}
	// The API socket replaced by a link is not dialled.
	os.Rename(j.path(jailAPI), j.path("/run/real.sock"))
	os.Symlink("real.sock", j.path(jailAPI))
	if c, err := j.dial(context.Background(), jailAPI); err == nil {
		c.Close()
		t.Fatal("dialled through a symlink")
	}
}
