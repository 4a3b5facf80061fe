// Package oci turns OCI images (an image layout directory, an OCI archive, or a `docker save` tarball)
// into templates' root filesystems: each layer unpacked once into a directory of its own, named by its
// digest (so images that share a layer share it), in overlayfs's form (whiteouts as 0/0 character
// devices, opaque directories marked), and an image's root mounted read-only as the overlay of its layers.
//
// Everything in an image is hostile: a layer's tar may name absolute or ".." paths, write through a
// symlink it planted, hard-link out of the root, carry device nodes or overlayfs's own xattrs, or expand
// without end. Unpacking goes through an os.Root of the layer's directory (nothing is ever followed out of
// it), refuses what the OCI image spec does not allow with an error naming the entry, and stops at the
// Limits.
package oci

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Limits bound what one import may unpack.
type Limits struct {
	// Bytes bounds the file contents written, over all of an image's layers; Entries the entries.
	Bytes   int64
	Entries int
	// MinFree is the room an import leaves on the store's file system: it stops, refused as resource
	// exhausted, before less would be free (checked as it writes), so an image cannot fill the node's
	// disk under its sandboxes. Zero: DefaultLimits' (2 GiB).
	MinFree int64
}

// DefaultMinFree is the room an import leaves free unless its Limits say otherwise.
const DefaultMinFree = 2 << 30

// DefaultLimits are an import's limits unless the caller gives others: 32 GiB, a million entries, and
// 2 GiB left free.
var DefaultLimits = Limits{Bytes: 32 << 30, Entries: 1 << 20, MinFree: DefaultMinFree}

// The OCI image spec's whiteout names.
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// overlayOpaque is overlayfs's xattr marking a directory that hides what lower layers have under it.
const overlayOpaque = "trusted.overlay.opaque"

// ErrBadLayer is wrapped by the error of a layer that is refused: it names the entry and why.
var ErrBadLayer = fmt.Errorf("layer refused: %w", errdefs.ErrInvalidArgument)

// budget is what is left of an import's Limits.
type budget struct {
	bytes   int64
	entries int
	minFree int64
}

// freeCheckEvery is how many bytes an import writes between checks of the room left.
const freeCheckEvery = 16 << 20

// copyFile writes the n bytes of r into f, checking every freeCheckEvery bytes (and first) that the
// file system keeps b.minFree free.
func (b *budget) copyFile(f *os.File, r io.Reader, n int64) error {
	for n > 0 {
		chunk := min(n, freeCheckEvery)
		if err := b.room(f, chunk); err != nil {
			return err
		}
		if _, err := io.CopyN(f, r, chunk); err != nil {
			switch {
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
				return fmt.Errorf("%w: its contents end early: %v", ErrBadLayer, err)
			case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
				return fmt.Errorf("the node's disk is full: %v: %w", err, errdefs.ErrResourceExhausted)
			}
			return err
		}
		n -= chunk
	}
	return nil
}

// room reports whether f's file system has room for chunk more bytes and b.minFree besides.
func (b *budget) room(f *os.File, chunk int64) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return err
	}
	if free := int64(st.Bavail) * st.Bsize; free-chunk < b.minFree {
		return fmt.Errorf("the node's disk would have less than %d MiB free (%d MiB now): %w", b.minFree>>20, free>>20, errdefs.ErrResourceExhausted)
	}
	return nil
}

func (b *budget) take(n int64) error {
	if b.bytes -= n; b.bytes < 0 {
		return fmt.Errorf("the image unpacks to more than its limit of bytes: %w", errdefs.ErrTooLarge)
	}
	return nil
}

// unpackLayer unpacks the (uncompressed) layer tar r into dir, which must be empty, in overlayfs's form.
func unpackLayer(ctx context.Context, r io.Reader, dir string, b *budget) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	type dirTimes struct {
		name string
		mod  time.Time
	}
	var dirs []dirTimes // directories' times, set last (their entries change them)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: read: %v", ErrBadLayer, err)
		}
		if b.entries--; b.entries < 0 {
			return fmt.Errorf("the image has more than its limit of entries: %w", errdefs.ErrTooLarge)
		}
		name, err := entryName(h.Name)
		if err != nil {
			return err
		}
		if name == "." {
			if h.Typeflag == tar.TypeDir {
				continue
			}
			return fmt.Errorf("%w: %q: the root must be a directory", ErrBadLayer, h.Name)
		}
		parent, base := path.Split(name)
		parent = strings.TrimSuffix(parent, "/")
		if parent == "" {
			parent = "."
		}
		if parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return fmt.Errorf("%w: %q: %v", ErrBadLayer, h.Name, err)
			}
		}
		switch {
		case base == whiteoutOpaque:
			if err := setXattr(root, parent, overlayOpaque, []byte("y")); err != nil {
				return fmt.Errorf("%w: %q: %v", ErrBadLayer, h.Name, err)
			}
			continue
		case strings.HasPrefix(base, whiteoutPrefix):
			hidden := base[len(whiteoutPrefix):]
			if hidden == "" || hidden == "." || hidden == ".." {
				return fmt.Errorf("%w: %q: a whiteout of nothing", ErrBadLayer, h.Name)
			}
			if err := mknodAt(root, parent, hidden, unix.S_IFCHR, 0); err != nil {
				return fmt.Errorf("%w: %q: %v", ErrBadLayer, h.Name, err)
			}
			continue
		}
		// A later entry replaces an earlier one of the same name (but a directory stays one).
		if fi, err := root.Lstat(name); err == nil && !(fi.IsDir() && h.Typeflag == tar.TypeDir) {
			if err := root.RemoveAll(name); err != nil {
				return fmt.Errorf("%w: %q: %v", ErrBadLayer, h.Name, err)
			}
		}
		mode := os.FileMode(h.Mode).Perm() | setBits(h.Mode)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("%w: %q: %v", ErrBadLayer, h.Name, err)
			}
			dirs = append(dirs, dirTimes{name, h.ModTime})
		case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // TypeRegA: old tars still use it
			if err := b.take(h.Size); err != nil {
				return err
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return fmt.Errorf("%w: %q: %v", ErrBadLayer, h.Name, err)
			}
			err = b.copyFile(f, tr, h.Size)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%q: %w", h.Name, err)
			}
		case tar.TypeSymlink:
			// The target is the image's business: it is resolved inside the sandbox, never on the host.
			if err := root.Symlink(h.Linkname, name); err != nil {
				return fmt.Errorf("%w: %q: %v", ErrBadLayer, h.Name, err)
			}
		case tar.TypeLink:
			target, err := entryName(h.Linkname)
			if err != nil || target == "." {
				return fmt.Errorf("%w: %q: a hard link to %q, outside the layer", ErrBadLayer, h.Name, h.Linkname)
			}
			if fi, err := root.Lstat(target); err != nil || !fi.Mode().IsRegular() {
				return fmt.Errorf("%w: %q: a hard link to %q, which is no regular file of this layer", ErrBadLayer, h.Name, h.Linkname)
			}
			if err := root.Link(target, name); err != nil {
				return fmt.Errorf("%w: %q: %v", ErrBadLayer, h.Name, err)
			}
			continue // it shares the target's inode: mode, owner and times are the target's
		case tar.TypeFifo:
			if err := mknodAt(root, parent, base, unix.S_IFIFO, 0); err != nil {
				return fmt.Errorf("%w: %q: %v", ErrBadLayer, h.Name, err)
			}
		case tar.TypeChar, tar.TypeBlock:
			return fmt.Errorf("%w: %q is a device node (%d, %d); a template holds none", ErrBadLayer, h.Name, h.Devmajor, h.Devminor)
		default:
			return fmt.Errorf("%w: %q has an entry type (%q) a layer may not", ErrBadLayer, h.Name, h.Typeflag)
		}
		if err := root.Lchown(name, h.Uid, h.Gid); err != nil {
			return fmt.Errorf("%q: %w", h.Name, err)
		}
		if h.Typeflag == tar.TypeSymlink {
			continue
		}
		if err := root.Chmod(name, mode); err != nil {
			return fmt.Errorf("%q: %w", h.Name, err)
		}
		if err := setXattrs(root, name, h); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeDir {
			if err := root.Chtimes(name, h.ModTime, h.ModTime); err != nil {
				return fmt.Errorf("%q: %w", h.Name, err)
			}
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = root.Chtimes(dirs[i].name, dirs[i].mod, dirs[i].mod)
	}
	return nil
}

// entryName cleans a tar entry's name to a relative path inside the layer ("." for its root), refusing
// absolute names and any ".." element.
func entryName(n string) (string, error) {
	if strings.HasPrefix(n, "/") {
		return "", fmt.Errorf("%w: %q is an absolute path", ErrBadLayer, n)
	}
	if strings.ContainsRune(n, 0) {
		return "", fmt.Errorf("%w: %q holds a NUL byte", ErrBadLayer, n)
	}
	for _, el := range strings.Split(n, "/") {
		if el == ".." {
			return "", fmt.Errorf("%w: %q climbs out of the root", ErrBadLayer, n)
		}
	}
	return path.Clean(n), nil
}

// setBits returns the setuid, setgid and sticky bits of a tar mode as a FileMode's.
func setBits(m int64) os.FileMode {
	var out os.FileMode
	if m&0o4000 != 0 {
		out |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		out |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		out |= os.ModeSticky
	}
	return out
}

// allowedXattr reports whether an image may set xattr key: user.* and file capabilities; never
// trusted.* (overlayfs's own: an image must not redirect its overlay) or other security.* ones.
func allowedXattr(key string) bool {
	return strings.HasPrefix(key, "user.") || key == "security.capability"
}

// setXattrs sets the xattrs the entry carries (PAX SCHILY.xattr.*) that an image may set; others are
// dropped.
func setXattrs(root *os.Root, name string, h *tar.Header) error {
	for k, v := range h.PAXRecords {
		key, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok || !allowedXattr(key) {
			continue
		}
		if err := setXattr(root, name, key, []byte(v)); err != nil {
			return fmt.Errorf("%q: xattr %s: %w", h.Name, key, err)
		}
	}
	return nil
}

// setXattr sets an xattr on the file or directory name, opened beneath root (never through a symlink).
func setXattr(root *os.Root, name, key string, val []byte) error {
	f, err := root.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fsetxattr(int(f.Fd()), key, val, 0)
}

// mknodAt makes a node (a whiteout or a FIFO) called base in the directory dir beneath root.
func mknodAt(root *os.Root, dir, base string, kind uint32, dev int) error {
	d, err := root.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Mknodat(int(d.Fd()), base, kind|0o600, dev); err != nil {
		if !errors.Is(err, unix.EEXIST) {
			return err
		}
		// A name whited out after it was made in this same layer: the whiteout wins.
		if err := unix.Unlinkat(int(d.Fd()), base, 0); err != nil {
			return err
		}
		return unix.Mknodat(int(d.Fd()), base, kind|0o600, dev)
	}
	return nil
}
