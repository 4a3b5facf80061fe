package firecracker

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestJailerArgs(t *testing.T) {
	cfg := Config{Firecracker: "/opt/fc/firecracker-v1.9.1", ChrootBase: "/var/lib/airlock/fc/jail", CgroupParent: "/airlock-fc"}
	j := newJail(cfg.ChrootBase, cfg.Firecracker, DefaultUIDBase, 7)
	if j.ID != "airlock-7" || j.UID != DefaultUIDBase+7 || j.Root != "/var/lib/airlock/fc/jail/firecracker-v1.9.1/airlock-7/root" {
		t.Fatalf("jail %+v", j)
	}
	got := jailerArgs(cfg, j, limits{CPUMillis: 1500, MemoryBytes: 512 << 20}, "/run/airlock/netns/sb1")
	want := []string{
		"--id", "airlock-7",
		"--exec-file", "/opt/fc/firecracker-v1.9.1",
		"--uid", "536936455", "--gid", "536936455",
		"--chroot-base-dir", "/var/lib/airlock/fc/jail",
		"--cgroup-version", "1",
		"--parent-cgroup", "airlock-fc",
		"--cgroup", "cpu.cfs_period_us=100000",
		"--cgroup", "cpu.cfs_quota_us=150000",
		"--cgroup", "cpuacct.usage=0",
		"--cgroup", "memory.limit_in_bytes=671088640", // 512 MiB of RAM and 128 MiB of Firecracker's own
		"--cgroup", "pids.max=64",
		"--netns", "/run/airlock/netns/sb1",
		"--", "--api-sock", "/run/firecracker.socket", "--level", "Warning",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("jailer argv (-want +got):\n%s", diff)
	}
	if DefaultUIDBase+7 != 536936455 {
		t.Fatalf("DefaultUIDBase moved: %d", DefaultUIDBase)
	}
	// No namespace: the node's own (no --netns).
	for _, a := range jailerArgs(cfg, j, limits{CPUMillis: 1000, MemoryBytes: 1 << 30}, "") {
		if a == "--netns" {
			t.Fatal("--netns without a namespace")
		}
	}
}

// TestJailLayout builds a boot's and a restore's jails and checks their files: at the paths the API
// calls name, hard links of the node's files, shared ones read-only and root's, the disk the VM's.
func TestJailLayout(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the jail's files belong to the VM's uid")
	}
	src := t.TempDir()
	file := func(name string, mode os.FileMode) string {
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, []byte(name), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kernel, initrd, root, disk := file("vmlinux", 0o444), file("initramfs", 0o644), file("root.erofs", 0o444), file("disk.img", 0o600)
	state, mem := file("vmstate", 0o444), file("memory", 0o444)
	type entry struct {
		Host  string
		Mode  os.FileMode
		Owner uint32
	}
	check := func(j jail, want map[string]entry) {
		t.Helper()
		got := map[string]entry{}
		filepath.Walk(j.Root, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(j.Root, p)
			st := fi.Sys().(*syscall.Stat_t)
			host := ""
			for _, h := range []string{kernel, initrd, root, disk, state, mem} {
				if hs, err := os.Stat(h); err == nil && os.SameFile(hs, fi) {
					host = filepath.Base(h)
				}
			}
			got["/"+rel] = entry{host, fi.Mode().Perm(), st.Uid}
			return nil
		})
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("jail files (-want +got):\n%s", diff)
		}
		for _, d := range jailDirs {
			fi, err := os.Stat(j.path(d))
			if err != nil || fi.Sys().(*syscall.Stat_t).Uid != uint32(j.UID) || fi.Mode().Perm() != 0o700 {
				t.Errorf("%s: %v, %v; want the VM's, 0700", d, fi, err)
			}
		}
	}
	base := t.TempDir()
	j := newJail(base, "/usr/bin/firecracker", DefaultUIDBase, 1)
	if err := j.build(layout(kernel, initrd, root, disk, "", "")); err != nil {
		t.Fatal(err)
	}
	vmUID := uint32(j.UID)
	check(j, map[string]entry{
		jailKernel:    {"vmlinux", 0o444, 0},
		jailInitramfs: {"initramfs", 0o444, 0},
		jailRoot:      {"root.erofs", 0o444, 0},
		jailDisk:      {"disk.img", 0o600, vmUID},
	})
	r := newJail(base, "/usr/bin/firecracker", DefaultUIDBase, 2)
	disk2 := file("disk2.img", 0o600)
	if err := r.build(layout(kernel, initrd, root, disk2, state, mem)); err != nil {
		t.Fatal(err)
	}
	check(r, map[string]entry{
		jailRoot:      {"root.erofs", 0o444, 0},
		jailDisk:      {"", 0o600, uint32(r.UID)},
		jailLoadState: {"vmstate", 0o444, 0},
		jailLoadMem:   {"memory", 0o444, 0},
	})
	// The paths a snapshot records are the same in both jails.
	if j.path(jailDisk)[len(j.Root):] != r.path(jailDisk)[len(r.Root):] {
		t.Fatal("the disk's path differs between jails")
	}
}
