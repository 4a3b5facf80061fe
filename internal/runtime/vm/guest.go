// Package vm holds what the microVM runtime drivers (vm/qemu, vm/firecracker) share: the guest
// kernel and the initramfs made from its modules and the daemon binary (this file), the template's
// root file system as a read-only disk image (rootfs.go), the node's side of the daemon's two
// virtio-serial ports and the control connections (ports.go), the VM's writable disk (disk.go), its
// network (network.go), the VMMs' uids (uids.go), a guest's identity (identity.go), the KVM probe
// (probe.go), and the steps every driver takes around its VMM's own (spec.go): the configuration,
// the boot (Boot: checks, private directory, disk, link key, record, the wait for the guest, the undo
// of a failed boot), the VMM's start, the checkpoint (Checkpoint, with the VMM's Snapshotter), the
// status, link key and stats of a VM.
//
// The guest kernel is Debian's (linux-image-amd64), unpacked by scripts/install.sh into
// DefaultGuestDir without installing it as the host's: its bzImage and its modules. Debian builds the
// virtio drivers as modules, so the initramfs carries the few a guest needs and the daemon, as its
// /init (daemon.VMInit), loads them before it mounts the root.
package vm

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/fsutil"
)

// DefaultGuestDir is where scripts/install.sh unpacks the guest kernel: boot/vmlinuz-RELEASE and
// lib/modules/RELEASE/.
const DefaultGuestDir = "/usr/local/lib/airlock/guest"

// Kernel is a guest kernel: its image and the directory of its modules.
type Kernel struct {
	// Image is the bzImage (vmlinuz).
	Image string
	// Modules is lib/modules/RELEASE.
	Modules string
	// Release is the kernel's release ("6.1.0-57-amd64").
	Release string
}

// FindKernel finds the guest kernel unpacked in dir (DefaultGuestDir if empty): the newest release
// whose image and modules are both there.
func FindKernel(dir string) (Kernel, error) {
	if dir == "" {
		dir = DefaultGuestDir
	}
	images, _ := filepath.Glob(filepath.Join(dir, "boot", "vmlinuz-*"))
	sort.Sort(sort.Reverse(sort.StringSlice(images)))
	for _, img := range images {
		rel := strings.TrimPrefix(filepath.Base(img), "vmlinuz-")
		mods := filepath.Join(dir, "lib", "modules", rel)
		if fi, err := os.Stat(mods); err == nil && fi.IsDir() {
			return Kernel{Image: img, Modules: mods, Release: rel}, nil
		}
	}
	return Kernel{}, fmt.Errorf("no guest kernel in %s (scripts/install.sh unpacks Debian's there): %w", dir, errdefs.ErrNotFound)
}

// GuestModules are the modules a guest loads, with what they depend on: virtio over MMIO (microvm
// and Firecracker have no PCI), its disks, network, serial ports (QEMU) or vsock (Firecracker: the
// transport loads harmlessly where there is no vsock device) and entropy, and the file systems of its
// root.
var GuestModules = []string{"virtio_mmio", "virtio_blk", "virtio_net", "virtio_console", "virtio_rng",
	"vsock", "vmw_vsock_virtio_transport_common", "vmw_vsock_virtio_transport",
	"crc32c_generic", "ext4", "erofs", "overlay"}

// ModuleOrder lists the module files (paths under k.Modules) to load for names, dependencies first:
// each module's "depends" and "softdep pre:" entries from its .modinfo section.
func ModuleOrder(k Kernel, names []string) ([]string, error) {
	files := map[string]string{} // module name -> path
	err := filepath.WalkDir(k.Modules, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".ko") {
			files[modName(p)] = p
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var order []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name string, optional bool) error
	visit = func(name string, optional bool) error {
		switch state[name] {
		case 1:
			return fmt.Errorf("module %s depends on itself", name)
		case 2:
			return nil
		}
		p, ok := files[name]
		if !ok {
			if optional {
				return nil
			}
			return fmt.Errorf("module %s is not in %s: %w", name, k.Modules, errdefs.ErrNotFound)
		}
		state[name] = 1
		deps, soft, err := modDeps(p)
		if err != nil {
			return fmt.Errorf("module %s: %w", name, err)
		}
		for _, d := range deps {
			if err := visit(d, false); err != nil {
				return err
			}
		}
		for _, d := range soft {
			if err := visit(d, true); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, p)
		return nil
	}
	for _, n := range names {
		if err := visit(n, false); err != nil {
			return nil, err
		}
	}
	return order, nil
}

func modName(path string) string {
	return strings.ReplaceAll(strings.TrimSuffix(filepath.Base(path), ".ko"), "-", "_")
}

// modDeps reads a module's hard dependencies and its soft "pre" ones from its .modinfo section.
func modDeps(path string) (deps, soft []string, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, nil, errors.New("no .modinfo section")
	}
	b, err := sec.Data()
	if err != nil {
		return nil, nil, err
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		k, v, _ := strings.Cut(string(kv), "=")
		switch k {
		case "depends":
			for _, d := range strings.Split(v, ",") {
				if d != "" {
					deps = append(deps, strings.ReplaceAll(d, "-", "_"))
				}
			}
		case "softdep":
			// "pre: a b post: c"
			pre := false
			for _, w := range strings.Fields(v) {
				switch w {
				case "pre:":
					pre = true
				case "post:":
					pre = false
				default:
					if pre {
						soft = append(soft, strings.ReplaceAll(w, "-", "_"))
					}
				}
			}
		}
	}
	return deps, soft, nil
}

// initramfsMu serializes the making of initramfs images.
var initramfsMu sync.Mutex

// Initramfs returns the initramfs of kernel k with daemon as its /init, making it in dir if it is not
// there yet: a newc cpio archive of /init, /modules/*.ko and /modules/order (the load order). It is
// named by the hash of what went in, so a new daemon or kernel makes a new one.
func Initramfs(dir string, k Kernel, daemon string) (string, error) {
	mods, err := ModuleOrder(k, GuestModules)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, p := range append([]string{daemon}, mods...) {
		if err := hashFile(h, p); err != nil {
			return "", err
		}
	}
	name := filepath.Join(dir, "initramfs-"+hex.EncodeToString(h.Sum(nil)[:12])+".cpio")
	if _, err := os.Stat(name); err == nil {
		return name, nil
	}
	initramfsMu.Lock()
	defer initramfsMu.Unlock()
	if _, err := os.Stat(name); err == nil {
		return name, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	w := newCpio(&buf)
	w.dir("modules")
	var order []string
	for _, m := range mods {
		b, err := os.ReadFile(m)
		if err != nil {
			return "", err
		}
		w.file("modules/"+filepath.Base(m), 0o644, b)
		order = append(order, filepath.Base(m))
	}
	w.file("modules/order", 0o644, []byte(strings.Join(order, "\n")+"\n"))
	b, err := os.ReadFile(daemon)
	if err != nil {
		return "", err
	}
	w.file("init", 0o755, b)
	if err := w.close(); err != nil {
		return "", err
	}
	if err := fsutil.WriteFileAtomic(name, buf.Bytes(), 0o644); err != nil {
		return "", err
	}
	return name, nil
}

func hashFile(h io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(h, "%s\x00", filepath.Base(p))
	_, err = io.Copy(h, f)
	return err
}

// cpio writes a newc ("070701") archive, the format the kernel unpacks an initramfs from.
type cpio struct {
	w   io.Writer
	ino int
	err error
}

func newCpio(w io.Writer) *cpio { return &cpio{w: w, ino: 1} }

func (c *cpio) entry(name string, mode uint32, data []byte) {
	if c.err != nil {
		return
	}
	c.ino++
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	var b bytes.Buffer
	b.WriteString(hdr)
	b.WriteString(name)
	b.WriteByte(0)
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
	b.Write(data)
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
	_, c.err = c.w.Write(b.Bytes())
}

func (c *cpio) dir(name string)                         { c.entry(name, 0o040000|0o755, nil) }
func (c *cpio) file(name string, perm uint32, b []byte) { c.entry(name, 0o100000|perm, b) }
func (c *cpio) close() error {
	c.entry("TRAILER!!!", 0, nil)
	return c.err
}
