package qemu

// QEMU's jail. Each VM's QEMU is chrooted into a directory of its own, StateDir/sandboxes/ID/root,
// that holds only the files QEMU opens by name: its binary, the shared libraries and the accelerator
// module it loads, the microvm machine's two firmware files, the guest kernel and the initramfs. They
// are read-only hard links, all root's, of copies the driver keeps under StateDir/jail (so the jail
// never holds an inode of the host's own files). Under KVM it also holds /dev/kvm. There is no /proc,
// /sys, /etc or /tmp, and nothing QEMU's uid can write: every disk, socket and the tap are
// descriptors the node opened. QEMU's root is set before it drops to its uid, which cannot chroot
// again (it has no capability).

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/runtime/vm"
)

// jailFile is a file of the jail: the path QEMU opens (also its path in the jail) and the host file
// whose content it has.
type jailFile struct {
	in, host string
}

// qemuFiles is what every jail holds of QEMU's.
type qemuFiles struct {
	binary  string     // QEMU's binary, the path it runs as (argv[0]; QEMU finds its modules and firmware from it)
	files   []jailFile // the binary, the loader, libraries, modules, firmware
	libPath string     // LD_LIBRARY_PATH: the directories the libraries are found in, in order
}

// firmware is what QEMU's microvm machine loads from its data directory: its BIOS (qboot) and the
// option ROM that loads a kernel given by -kernel.
var firmware = []string{"bios-microvm.bin", "linuxboot_dma.bin"}

// findQEMUFiles finds the files QEMU at path (resolved of links) opens by name: the binary, its ELF
// interpreter and shared libraries (transitively), its accelerator modules and their libraries, and
// the firmware. QEMU looks for modules and firmware beside its binary (../lib/*/qemu,
// ../share/qemu) before its built-in directories, so the jail holds them there.
func findQEMUFiles(path string) (qemuFiles, error) {
	bin, err := filepath.EvalSymlinks(path)
	if err != nil {
		return qemuFiles{}, err
	}
	bin, err = filepath.Abs(bin)
	if err != nil {
		return qemuFiles{}, err
	}
	q := qemuFiles{binary: bin}
	r := &libResolver{search: librarySearchPath(), seen: map[string]bool{}}
	if err := r.add(bin, bin, true); err != nil {
		return qemuFiles{}, err
	}
	exeDir := filepath.Dir(bin)
	var modules []string
	for _, pattern := range []string{"../lib/*/qemu/accel-*.so", "../lib/qemu/accel-*.so"} {
		m, _ := filepath.Glob(filepath.Join(exeDir, pattern))
		modules = append(modules, m...)
	}
	for _, m := range modules {
		if err := r.add(m, m, false); err != nil {
			return qemuFiles{}, err
		}
	}
	for _, name := range firmware {
		in := filepath.Join(exeDir, "..", "share", "qemu", name)
		host, err := filepath.EvalSymlinks(in)
		if err != nil {
			return qemuFiles{}, fmt.Errorf("QEMU's firmware %s beside %s: %w", name, bin, err)
		}
		r.files = append(r.files, jailFile{in: in, host: host})
	}
	q.files = r.files
	q.libPath = strings.Join(r.dirs, ":")
	return q, nil
}

// librarySearchPath is where the host's loader finds libraries: the directories of /etc/ld.so.conf.d
// (the order of its cache), then the defaults.
func librarySearchPath() []string {
	var dirs []string
	confs, _ := filepath.Glob("/etc/ld.so.conf.d/*.conf")
	for _, c := range confs {
		b, err := os.ReadFile(c)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "/") {
				dirs = append(dirs, filepath.Clean(line))
			}
		}
	}
	return append(dirs, "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
}

// libResolver collects an ELF object's interpreter and libraries as the loader finds them.
type libResolver struct {
	search []string
	seen   map[string]bool // paths in the jail already added
	files  []jailFile
	dirs   []string // the libraries' directories, in the order found
}

// add adds the object host, opened as in, and every library it needs not yet added; interp: also its
// ELF interpreter.
func (r *libResolver) add(in, host string, interp bool) error {
	if r.seen[in] {
		return nil
	}
	r.seen[in] = true
	r.files = append(r.files, jailFile{in: in, host: host})
	f, err := elf.Open(host)
	if err != nil {
		return fmt.Errorf("%s: %w", host, err)
	}
	defer f.Close()
	if interp {
		for _, p := range f.Progs {
			if p.Type != elf.PT_INTERP {
				continue
			}
			b := make([]byte, min(p.Filesz, 4096))
			if _, err := p.ReadAt(b, 0); err != nil {
				return fmt.Errorf("%s: interpreter: %w", host, err)
			}
			ld := strings.TrimRight(string(b), "\x00")
			real, err := filepath.EvalSymlinks(ld)
			if err != nil {
				return fmt.Errorf("%s: interpreter: %w", host, err)
			}
			if !r.seen[ld] {
				r.seen[ld] = true
				r.files = append(r.files, jailFile{in: ld, host: real})
			}
		}
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("%s: %w", host, err)
	}
	var own []string // DT_RUNPATH and DT_RPATH, $ORIGIN expanded
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := f.DynString(tag)
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", "$ORIGIN"), "$ORIGIN", filepath.Dir(host))
				if filepath.IsAbs(d) {
					own = append(own, filepath.Clean(d))
				}
			}
		}
	}
	for _, lib := range needed {
		if strings.Contains(lib, "/") {
			return fmt.Errorf("%s needs %q, a path", host, lib)
		}
		found := false
		for _, d := range append(own, r.search...) {
			p := filepath.Join(d, lib)
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				continue
			}
			if st, err := os.Stat(real); err != nil || !st.Mode().IsRegular() {
				continue
			}
			if !slices.Contains(r.dirs, d) {
				r.dirs = append(r.dirs, d)
			}
			if err := r.add(p, real, false); err != nil {
				return err
			}
			found = true
			break
		}
		if !found {
			return fmt.Errorf("%s needs %s, found nowhere in %v", host, lib, append(own, r.search...))
		}
	}
	return nil
}

// jailStore keeps the driver's copies of the files jails hold, StateDir/jail/files/KEY, one per host
// file version (its path, device, inode, size and modification time), so that a jail's links are never
// of a host file and a new version of one (a QEMU upgrade) gets a new copy.
type jailStore struct {
	dir string
}

// key names the copy of host's current version.
func (s jailStore) key(host string) (string, os.FileInfo, error) {
	fi, err := os.Stat(host)
	if err != nil {
		return "", nil, err
	}
	if !fi.Mode().IsRegular() {
		return "", nil, fmt.Errorf("%s is not a regular file", host)
	}
	st := fi.Sys().(*syscall.Stat_t)
	h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%d\x00%d\x00%d", host, st.Dev, st.Ino, fi.Size(), fi.ModTime().UnixNano())))
	return hex.EncodeToString(h[:16]), fi, nil
}

// copyOf returns the path of the store's copy of host, copying it first if the store has none: root's,
// read-only, executable if host is.
func (s jailStore) copyOf(host string) (string, error) {
	k, fi, err := s.key(host)
	if err != nil {
		return "", err
	}
	p := filepath.Join(s.dir, k)
	if _, err := os.Lstat(p); err == nil {
		return p, nil
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return "", err
	}
	tmp := p + ".tmp"
	_ = os.Remove(tmp)
	if err := vm.CopySparse(host, tmp); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	mode := os.FileMode(0o444)
	if fi.Mode()&0o111 != 0 {
		mode = 0o555
	}
	if err := os.Chmod(tmp, mode); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	return p, nil
}

// prune removes the copies no jail holds (a link count of one) but those of keep.
func (s jailStore) prune(keep []string) {
	kept := map[string]bool{}
	for _, h := range keep {
		if k, _, err := s.key(h); err == nil {
			kept[k] = true
		}
	}
	ents, _ := os.ReadDir(s.dir)
	for _, e := range ents {
		p := filepath.Join(s.dir, e.Name())
		var st unix.Stat_t
		if kept[e.Name()] || unix.Lstat(p, &st) != nil || st.Nlink > 1 {
			continue
		}
		_ = os.Remove(p)
	}
}

// Paths in a jail of the files QEMU is given by name.
const (
	jailKernel    = "/kernel"
	jailInitramfs = "/initramfs"
)

// makeJail makes the VM's jail at root: QEMU's files, the kernel and the initramfs, and /dev/kvm
// if kvm. root must not exist.
func (d *Driver) makeJail(root, kernel, initramfs string, kvm bool) error {
	files := append(append([]jailFile{}, d.qemu.files...), jailFile{in: jailKernel, host: kernel}, jailFile{in: jailInitramfs, host: initramfs})
	if err := os.Mkdir(root, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		dst := filepath.Join(root, f.in)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		src, err := d.store.copyOf(f.host)
		if err != nil {
			return fmt.Errorf("jail %s: %w", f.in, err)
		}
		if err := os.Link(src, dst); err != nil {
			return fmt.Errorf("jail %s: %w", f.in, err)
		}
	}
	if kvm {
		var st unix.Stat_t
		if err := unix.Stat("/dev/kvm", &st); err != nil {
			return fmt.Errorf("jail /dev/kvm: %w", err)
		}
		if err := os.Mkdir(filepath.Join(root, "dev"), 0o755); err != nil {
			return err
		}
		node := filepath.Join(root, "dev", "kvm")
		if err := unix.Mknod(node, unix.S_IFCHR|0o660, int(st.Rdev)); err != nil {
			return fmt.Errorf("jail /dev/kvm (the state directory's file system must allow devices): %w", err)
		}
		if err := os.Chown(node, 0, int(st.Gid)); err != nil {
			return err
		}
		// Mknod's mode is under the umask.
		if err := os.Chmod(node, 0o660); err != nil {
			return err
		}
	}
	return nil
}
