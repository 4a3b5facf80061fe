package runc

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/runtime/sandboxdir"
)

// A template's root file system is owned by host uids (root's, mostly). Inside a sandbox's user
// namespace those are nobody's, so the sandbox's root could not write /etc or /home through its overlay,
// nor own what it copies up. The driver therefore boots over a copy of the template whose every owner is
// shifted into the sandboxes' range (uid u becomes IDBase+u), made once per template and kept under
// StateDir/templates, named by the template's path, modification time and the range. Templates are
// small (the default one is under a megabyte: its /usr and the like are read-only host mounts, which
// stay the host's). Later copies of a template changed in place get a new name; old ones are left for
// an operator to remove.
type shifter struct {
	dir  string
	base int

	mu sync.Mutex // serializes the making of copies
}

func newShifter(dir string, base int) *shifter { return &shifter{dir: dir, base: base} }

// template returns the shifted copy of the template root file system at rootfs, making it if needed.
func (s *shifter) template(rootfs string) (string, error) {
	abs, err := filepath.Abs(rootfs)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(abs + "\x00" + strconv.FormatInt(fi.ModTime().UnixNano(), 10) + "\x00" + strconv.Itoa(s.base)))
	dst := filepath.Join(s.dir, hex.EncodeToString(sum[:12]))
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	tmp, err := os.MkdirTemp(s.dir, ".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	root := filepath.Join(tmp, "rootfs")
	if err := s.copyTree(abs, root); err != nil {
		return "", fmt.Errorf("shift template %s: %w", rootfs, err)
	}
	if err := os.Rename(root, dst); err != nil {
		return "", err
	}
	return dst, nil
}

// copyTree copies the tree at src to dst (which must not exist): directories, regular files and
// symbolic links, with their modes and times, every owner shifted by s.base.
func (s *shifter) copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if st.Uid >= IDRange || st.Gid >= IDRange {
			return fmt.Errorf("%s is owned by %d:%d, beyond the sandboxes' %d ids", rel, st.Uid, st.Gid, IDRange)
		}
		mode := st.Mode & 0o7777
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := os.Mkdir(to, 0o700); err != nil {
				return err
			}
		case unix.S_IFREG:
			if err := sandboxdir.CopyFile(p, to); err != nil {
				return err
			}
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
		default:
			return nil // devices, FIFOs and sockets have no place in a template
		}
		if err := os.Lchown(to, s.base+int(st.Uid), s.base+int(st.Gid)); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			// After the chown, which clears set-id bits.
			if err := os.Chmod(to, fs.FileMode(mode&0o777)|setBits(mode)); err != nil {
				return err
			}
		}
		ts := []unix.Timespec{st.Atim, st.Mtim}
		return unix.UtimesNanoAt(unix.AT_FDCWD, to, ts, unix.AT_SYMLINK_NOFOLLOW)
	})
}

// setBits converts the set-id and sticky bits of a stat mode to an fs.FileMode's.
func setBits(mode uint32) fs.FileMode {
	var m fs.FileMode
	if mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}
