package firecracker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/vm"
)

// The driver's boot, checkpoint, restore and destroy run here end to end with a fake jailer: this test
// binary, run by the driver as its jailer, does what the jailer does that the driver relies on (the
// cgroups under the parent with the values given, the jail's root given to the VM's uid) and stands in
// for Firecracker behind it: it serves the API on the socket the arguments name, records the calls in
// the jail's directory, writes snapshots where Firecracker would, and once the VM "starts", answers on
// its vsock socket as the guest's daemon would. What it cannot show is a real guest.

func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "--id" {
		os.Exit(fakeJailer(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeJailer is the fake jailer and Firecracker; it runs until killed.
func fakeJailer(args []string) int {
	var id, execFile, base, parent, api string
	uid := -1
	var cgroups []string
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--id":
			id = args[i+1]
		case "--exec-file":
			execFile = args[i+1]
		case "--uid":
			uid, _ = strconv.Atoi(args[i+1])
		case "--chroot-base-dir":
			base = args[i+1]
		case "--parent-cgroup":
			parent = args[i+1]
		case "--cgroup":
			cgroups = append(cgroups, args[i+1])
		case "--api-sock":
			api = args[i+1]
		}
	}
	root := filepath.Join(base, filepath.Base(execFile), id, "root")
	for _, c := range cgroups {
		file, val, _ := strings.Cut(c, "=")
		ctrl, _, _ := strings.Cut(file, ".")
		dir := filepath.Join("/sys/fs/cgroup", ctrl, parent, id)
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, file), []byte(val), 0o644)
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return 3
		}
	}
	os.Chown(root, uid, uid)
	log, err := os.OpenFile(filepath.Join(root, "..", "calls"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 3
	}
	ln, err := net.Listen("unix", filepath.Join(root, api))
	if err != nil {
		return 3
	}
	os.Chown(filepath.Join(root, api), uid, uid)
	started := false
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		json.NewEncoder(log).Encode(call{r.Method, r.URL.Path, string(b)})
		switch r.URL.Path {
		case "/actions", "/snapshot/load":
			if !started {
				started = true
				guest(filepath.Join(root, jailVsock), uid)
			}
		case "/snapshot/create":
			var sc snapshotCreate
			json.Unmarshal(b, &sc)
			for _, p := range []string{sc.SnapshotPath, sc.MemFilePath} {
				os.WriteFile(filepath.Join(root, p), []byte("snapshot of "+id), 0o600)
				os.Chown(filepath.Join(root, p), uid, uid)
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	return 0
}

// guest answers on the vsock socket as the guest's daemon: the control port reports every message as
// applied and the daemon listening; the link port is accepted.
func guest(sock string, uid int) {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return
	}
	os.Chown(sock, uid, uid)
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
				switch line {
				case "CONNECT 1023\n":
					io.WriteString(c, "OK 1073741825\n")
					for {
						var m proto.VMControl
						if err := proto.ReadVMLine(r, &m); err != nil {
							return
						}
						seq := m.Seq
						if m.Argv != nil {
							seq = 0 // the daemon the init execs reports with its own numbering
						}
						proto.WriteVMLine(c, proto.VMReport{Seq: seq, Listening: true})
					}
				case "CONNECT 1022\n":
					io.WriteString(c, "OK 1073741826\n")
					io.Copy(c, r)
				}
			}()
		}
	}()
}

// readCalls reads the calls the fake recorded in jail j.
func readCalls(t *testing.T, j jail) []call {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(j.Root), "calls"))
	if err != nil {
		t.Fatal(err)
	}
	var calls []call
	dec := json.NewDecoder(strings.NewReader(string(b)))
	for {
		var c call
		if err := dec.Decode(&c); err != nil {
			break
		}
		c.Body = compact(c.Body)
		calls = append(calls, c)
	}
	return calls
}

func compact(s string) string {
	var v any
	if json.Unmarshal([]byte(s), &v) != nil {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// TestBootWithFakeJailer creates a VM, checkpoints it, restores the image into a second VM and
// destroys both, through the driver, with the fake jailer.
func TestBootWithFakeJailer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: jails, cgroups")
	}
	k, err := vm.FindKernel("")
	if err != nil {
		t.Skipf("no guest kernel (the initramfs is made of its modules): %v", err)
	}
	for _, tool := range []string{"mkfs.erofs", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/pids/cgroup.procs"); err != nil {
		t.Skip("needs v1 cgroups")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	vmlinux := filepath.Join(state, "vmlinux-fake")
	os.WriteFile(vmlinux, []byte("ELF"), 0o444)
	cfg := Config{Firecracker: "/usr/local/bin/firecracker", Jailer: self, StateDir: state, ChrootBase: filepath.Join(state, "jail"),
		CgroupParent: "/airlock-test-fc-" + strconv.Itoa(os.Getpid()), UIDBase: DefaultUIDBase}
	d := &Driver{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil)), kernel: k, vmlinux: vmlinux,
		images:   &vm.RootImages{Dir: filepath.Join(state, "images")},
		uids:     vm.UIDs{Dir: filepath.Join(state, "uids"), Base: cfg.UIDBase},
		consoles: map[string]*ring{}}
	for _, p := range []string{d.uids.Dir, filepath.Join(state, "sandboxes"), cfg.ChrootBase} {
		os.MkdirAll(p, 0o700)
	}
	t.Cleanup(func() { d.Close() })
	rootfs := t.TempDir()
	os.WriteFile(filepath.Join(rootfs, "hello"), []byte("hi"), 0o644)
	spec := runtime.Spec{ID: "fcboot1", RootFS: rootfs, Init: []string{"/.airlock/init", "-control", "/.airlock/ctl"},
		ControlDir: "/.airlock/ctl", InitBinary: daemonStandIn(t), Limits: runtime.Limits{MemoryBytes: 256 << 20, CPUMillis: 1500}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := d.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Destroy(context.Background(), "fcboot1") })
	j, ok := d.jailOf("fcboot1")
	if !ok {
		t.Fatal("no jail")
	}
	calls := readCalls(t, j)
	var paths []string
	for _, c := range calls {
		paths = append(paths, c.Method+" "+c.Path)
	}
	want := []string{"PUT /boot-source", "PUT /machine-config", "PUT /drives/root", "PUT /drives/disk", "PUT /vsock", "PUT /entropy", "PUT /actions"}
	if diff := cmp.Diff(want, paths); diff != "" {
		t.Fatalf("create's calls (-want +got):\n%s", diff)
	}
	if got := calls[1].Body; got != `{"mem_size_mib":256,"vcpu_count":2}` {
		t.Errorf("machine config %s; want 256 MiB and 2 vCPUs", got)
	}
	if !strings.Contains(calls[0].Body, `airlock.vsock=1022,1023 vminit`) {
		t.Errorf("boot source %s; want the vsock ports and vminit", calls[0].Body)
	}
	cg := filepath.Join("/sys/fs/cgroup/cpu", cfg.CgroupParent, j.ID, "cpu.cfs_quota_us")
	if b, _ := os.ReadFile(cg); strings.TrimSpace(string(b)) != "150000" {
		t.Errorf("%s = %q; want 150000", cg, b)
	}
	if st, err := d.Status(ctx, "fcboot1"); err != nil || !st.Running {
		t.Fatalf("Status = %+v, %v; want running", st, err)
	}
	conn, key, err := d.DialLink(ctx, "fcboot1")
	if err != nil || len(key) != proto.LinkKeySize {
		t.Fatalf("DialLink: %v (key %d bytes)", err, len(key))
	}
	conn.Close()

	img := t.TempDir()
	if err := d.Checkpoint(ctx, "fcboot1", img, runtime.CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	spec2 := spec
	spec2.ID = "fcboot2"
	if _, err := d.Restore(ctx, spec2, img); err != nil {
		t.Fatal(err)
	}
	j2, _ := d.jailOf("fcboot2")
	if j2.ID == j.ID || j2.UID == j.UID {
		t.Fatalf("the restored VM shares the jail or uid of the first: %+v %+v", j, j2)
	}
	want2 := []call{{"PUT", "/snapshot/load", `{"mem_backend":{"backend_path":"/restore/memory","backend_type":"File"},"resume_vm":true,"snapshot_path":"/restore/state"}`}}
	if diff := cmp.Diff(want2, readCalls(t, j2)); diff != "" {
		t.Fatalf("restore's calls (-want +got):\n%s", diff)
	}
	if b, err := os.ReadFile(j2.path(jailLoadMem)); err != nil || string(b) != "snapshot of "+j.ID {
		t.Fatalf("the restore's memory file: %q, %v", b, err)
	}
	for _, id := range []string{"fcboot1", "fcboot2"} {
		jj, _ := d.jailOf(id)
		if err := d.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{d.dir(id), filepath.Dir(jj.Root), filepath.Join("/sys/fs/cgroup/pids", cfg.CgroupParent, jj.ID)} {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s is left after Destroy: %v", p, err)
			}
		}
	}
	if ents, _ := os.ReadDir(d.uids.Dir); len(ents) != 0 {
		t.Errorf("uids left claimed: %v", ents)
	}
}

// daemonStandIn is a file to put in the initramfs as the daemon: the fake jailer boots no guest, so any
// binary does (the test's own; testenv's daemon would import the app, which imports this package).
func daemonStandIn(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
