package firecracker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/runtime/vm"
)

// Each VM's Firecracker runs under Firecracker's jailer (docs/jailer.md): as the VM's own uid and gid,
// in the sandbox's network namespace, in cgroups (v1) the jailer makes under the driver's parent with
// the VM's limits, chrooted (pivot_root in a new mount namespace) into a directory that holds only the
// VM's files, hard links of the node's (made before the jailer starts; the jailer then gives the
// directory to the VM's uid). The node reaches the API and vsock sockets in that directory, which the
// VM's uid can write, without following a link (openBeneath).

// jail is one VM's jail.
type jail struct {
	// ID is the jailer's --id: "airlock-N", N the VM's uid's number in the driver's range (the jailer
	// takes letters, digits and hyphens; a sandbox ID may hold underscores).
	ID string
	// Root is the chroot: ChrootBase/<exec file's name>/ID/root.
	Root string
	// UID is the VM's uid and gid.
	UID int
}

// newJail returns the jail of the VM whose uid is number n of the range starting at base.
func newJail(chrootBase, firecracker string, base, n int) jail {
	id := "airlock-" + strconv.Itoa(n)
	return jail{ID: id, Root: filepath.Join(chrootBase, filepath.Base(firecracker), id, "root"), UID: base + n}
}

// path returns the host path of p, a path inside the jail.
func (j jail) path(p string) string { return filepath.Join(j.Root, p) }

// jailerArgs are the jailer's arguments to start Firecracker for a VM of limits l in j: cgroups with
// the CPU quota (the vCPUs' share), the memory limit (the guest's RAM and Firecracker's own) and a
// bound on threads, and cpuacct for the readings; the sandbox's network namespace (none: the node's
// own, with no tap there); and Firecracker's API socket in the jail.
func jailerArgs(cfg Config, j jail, l limits, netns string) []string {
	const period = 100_000
	args := []string{
		"--id", j.ID,
		"--exec-file", cfg.Firecracker,
		"--uid", strconv.Itoa(j.UID),
		"--gid", strconv.Itoa(j.UID),
		"--chroot-base-dir", cfg.ChrootBase,
		"--cgroup-version", "1",
		"--parent-cgroup", strings.TrimPrefix(cfg.CgroupParent, "/"),
		"--cgroup", "cpu.cfs_period_us=" + strconv.Itoa(period),
		"--cgroup", "cpu.cfs_quota_us=" + strconv.FormatInt(l.CPUMillis*period/1000, 10),
		"--cgroup", "cpuacct.usage=0",
		"--cgroup", "memory.limit_in_bytes=" + strconv.FormatInt(l.MemoryBytes+overhead, 10),
		"--cgroup", "pids.max=" + strconv.Itoa(maxThreads),
	}
	if netns != "" {
		args = append(args, "--netns", netns)
	}
	return append(args, "--", "--api-sock", jailAPI, "--level", "Warning")
}

// limits are what the jailer's cgroups hold a VM to.
type limits struct {
	CPUMillis   int64
	MemoryBytes int64
}

// overhead is Firecracker's own memory beyond the guest's RAM that its cgroup allows.
const overhead = 128 << 20

// maxThreads bounds Firecracker's threads (its API and VMM threads and one per vCPU).
const maxThreads = 64

// jailFile is one file of the node's that a VM's jail holds.
type jailFile struct {
	host string // the node's file
	in   string // its path inside the jail
	// owned gives the file to the VM's uid (its writable disk); the others stay root's and read-only
	// (the kernel, initramfs, the template's image, an image's snapshot: shared by VMs).
	owned bool
}

// layout is the files a VM's jail holds: for a boot, the kernel, initramfs, the template's image and
// the VM's disk; for a restore, the template's image, the disk and the snapshot to load (a snapshot
// records the drives' paths, which are the same in every jail).
func layout(kernel, initramfs, root, disk, snapState, snapMem string) []jailFile {
	files := []jailFile{{host: root, in: jailRoot}, {host: disk, in: jailDisk, owned: true}}
	if snapState != "" {
		return append(files, jailFile{host: snapState, in: jailLoadState}, jailFile{host: snapMem, in: jailLoadMem})
	}
	return append(files, jailFile{host: kernel, in: jailKernel}, jailFile{host: initramfs, in: jailInitramfs})
}

// jailDirs are the jail's directories the VM's Firecracker writes: its API socket's, and where it
// writes snapshots.
var jailDirs = []string{"/run", jailSnapDir, jailLoadDir}

// build makes the jail's root with files in it (hard links where the node's file is on the same file
// system, copies otherwise) and the directories Firecracker writes, given to the VM's uid.
func (j jail) build(files []jailFile) error {
	if err := os.MkdirAll(j.Root, 0o700); err != nil {
		return err
	}
	for _, d := range jailDirs {
		p := j.path(d)
		if err := os.Mkdir(p, 0o700); err != nil {
			return err
		}
		if err := os.Chown(p, j.UID, j.UID); err != nil {
			return err
		}
	}
	for _, f := range files {
		dst := j.path(f.in)
		if err := os.Link(f.host, dst); err != nil {
			if !errors.Is(err, unix.EXDEV) || f.owned {
				// The VM's own files (its disk) must be the node's, not copies: checkpoints and
				// readings use the node's.
				return fmt.Errorf("jail %s (the jail must be on the state directory's file system): %w", f.in, err)
			}
			if err := copyFile(f.host, dst); err != nil {
				return fmt.Errorf("jail %s: %w", f.in, err)
			}
		}
		if f.owned {
			if err := os.Chown(dst, j.UID, j.UID); err != nil {
				return err
			}
		} else if err := os.Chmod(dst, 0o444); err != nil {
			return err
		}
	}
	return nil
}

// copyFile copies from to the new file to, sparsely.
func copyFile(from, to string) error { return vm.CopySparse(from, to) }

// openBeneath opens p, a path inside the jail, without following a link or leaving the jail
// (openat2's RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS): the VM's uid can write the jail.
func (j jail) openBeneath(p string, flags int) (*os.File, error) {
	root, err := unix.Open(j.Root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, strings.TrimPrefix(p, "/"), &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, fmt.Errorf("open %s in the jail: %w", p, err)
	}
	return os.NewFile(uintptr(fd), j.path(p)), nil
}

// dial connects to the unix socket at p inside the jail, owned by the VM's uid, without following a
// link: through /proc/self/fd of a descriptor openBeneath opened.
func (j jail) dial(ctx context.Context, p string) (net.Conn, error) {
	f, err := j.openBeneath(p, unix.O_PATH)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || int(st.Uid) != j.UID {
		return nil, fmt.Errorf("%s in the jail is not the VM's socket", p)
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(int(f.Fd())))
}

// takeOut moves the regular file p inside the jail to dst, outside (a snapshot Firecracker wrote):
// a hard link of the file the path names (not following a link) where dst is on the same file system,
// a copy otherwise; then it removes p and makes dst root's and read-only.
func (j jail) takeOut(p, dst string) error {
	f, err := j.openBeneath(p, unix.O_RDONLY)
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		return fmt.Errorf("%s in the jail is not a file of the VM's own", p)
	}
	os.Remove(dst)
	err = unix.Linkat(int(f.Fd()), "", unix.AT_FDCWD, dst, unix.AT_EMPTY_PATH)
	if errors.Is(err, unix.EXDEV) {
		err = copyFrom(f, dst, st.Size)
	}
	if err != nil {
		return fmt.Errorf("take %s out of the jail: %w", p, err)
	}
	if err := os.Chown(dst, 0, 0); err != nil {
		return err
	}
	if err := os.Chmod(dst, 0o444); err != nil {
		return err
	}
	dir, err := j.openBeneath(filepath.Dir(p), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer dir.Close()
	return unix.Unlinkat(int(dir.Fd()), filepath.Base(p), 0)
}

// remove removes p in the jail, if it is there, without following a link the VM's uid planted on the
// way (its directories are the VM's).
func (j jail) remove(p string) {
	dir, err := j.openBeneath(filepath.Dir(p), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return
	}
	defer dir.Close()
	_ = unix.Unlinkat(int(dir.Fd()), filepath.Base(p), 0)
}

// copyFrom copies size bytes of f to the new file dst.
func copyFrom(f *os.File, dst string, size int64) error {
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, io.NewSectionReader(f, 0, size)); err != nil {
		out.Close()
		os.Remove(dst)
		return err
	}
	return out.Close()
}
