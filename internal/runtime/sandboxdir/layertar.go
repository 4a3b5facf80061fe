package sandboxdir

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The writable layer of a sandbox (its overlayfs upper directory) is archived as a PAX tar that keeps
// what overlayfs needs: file types including whiteouts (character devices 0/0), owners, modes, times
// to the nanosecond, hard links, and extended attributes (trusted.overlay.opaque and the like) as
// SCHILY.xattr records. A socket file (what a bind left behind) is an empty regular entry marked with the
// PAX record socketRecord, made again by binding a socket there: gVisor looks up again every name it had
// seen when it restores, so a missing one fails the restore.

const xattrPrefix = "SCHILY.xattr."

// socketRecord marks a socket file's entry (value "socket").
const socketRecord = "AIRLOCK.type"

// WriteLayerTar archives the directory tree at root into the file at path.
func WriteLayerTar(root, path string) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	tw := tar.NewWriter(bw)
	links := map[[2]uint64]string{} // (dev, inode) → first name, for hard links
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		name, _ := filepath.Rel(root, p)
		name = filepath.ToSlash(name)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		hdr := &tar.Header{Name: name, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid),
			ModTime: time.Unix(st.Mtim.Unix()), AccessTime: time.Unix(st.Atim.Unix()), Format: tar.FormatPAX}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		case unix.S_IFREG:
			key := [2]uint64{uint64(st.Dev), st.Ino}
			if first, ok := links[key]; ok && st.Nlink > 1 {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			} else {
				links[key] = name
				hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
			}
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		case unix.S_IFCHR, unix.S_IFBLK:
			hdr.Typeflag = tar.TypeChar
			if st.Mode&unix.S_IFMT == unix.S_IFBLK {
				hdr.Typeflag = tar.TypeBlock
			}
			hdr.Devmajor, hdr.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
		case unix.S_IFIFO:
			hdr.Typeflag = tar.TypeFifo
		case unix.S_IFSOCK:
			hdr.Typeflag = tar.TypeReg
			hdr.PAXRecords = map[string]string{socketRecord: "socket"}
		default:
			return nil
		}
		if err := addXattrs(p, hdr); err != nil {
			return err
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg && hdr.Size > 0 {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			n, err := io.Copy(tw, src)
			src.Close()
			if err != nil {
				return err
			}
			if n != hdr.Size {
				return fmt.Errorf("%s changed size while being archived", name)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Sync()
}

// addXattrs records the extended attributes of the file at p in hdr.
func addXattrs(p string, hdr *tar.Header) error {
	size, err := unix.Llistxattr(p, nil)
	if err != nil || size == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return err
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(p, buf)
	if err != nil {
		return err
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		vs, err := unix.Lgetxattr(p, name, nil)
		if err != nil {
			return fmt.Errorf("xattr %s of %s: %w", name, hdr.Name, err)
		}
		v := make([]byte, vs)
		vs, err = unix.Lgetxattr(p, name, v)
		if err != nil {
			return fmt.Errorf("xattr %s of %s: %w", name, hdr.Name, err)
		}
		if hdr.PAXRecords == nil {
			hdr.PAXRecords = map[string]string{}
		}
		hdr.PAXRecords[xattrPrefix+name] = string(v[:vs])
	}
	return nil
}

// ReadLayerTar unpacks the archive at path into root, an empty directory, as WriteLayerTar made it.
// Names are confined to root: absolute names, ".." and paths through symbolic links are refused.
func ReadLayerTar(path, root string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(bufio.NewReaderSize(f, 1<<20))
	type dirTimes struct {
		path         string
		atime, mtime time.Time
	}
	var dirs []dirTimes
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if name == "" || strings.HasPrefix(name, "/") || slices.Contains(strings.Split(name, "/"), "..") || filepath.Clean(name) != name {
			return fmt.Errorf("archive entry %q escapes the layer", hdr.Name)
		}
		p := filepath.Join(root, name)
		if err := checkNoSymlinks(root, filepath.Dir(name)); err != nil {
			return err
		}
		mode := uint32(hdr.Mode & 0o7777)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
		case tar.TypeReg:
			if hdr.PAXRecords[socketRecord] == "socket" {
				if err := makeSocketFile(p); err != nil {
					return fmt.Errorf("socket %s: %w", name, err)
				}
				break
			}
			out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeLink:
			target := filepath.Clean(hdr.Linkname)
			if strings.HasPrefix(target, "/") || slices.Contains(strings.Split(target, "/"), "..") {
				return fmt.Errorf("archive hard link %q → %q escapes the layer", hdr.Name, hdr.Linkname)
			}
			if err := checkNoSymlinks(root, target); err != nil {
				return err
			}
			if err := os.Link(filepath.Join(root, target), p); err != nil {
				return err
			}
			continue // a link shares its target's metadata
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, p); err != nil {
				return err
			}
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			kind := uint32(unix.S_IFCHR)
			if hdr.Typeflag == tar.TypeBlock {
				kind = unix.S_IFBLK
			} else if hdr.Typeflag == tar.TypeFifo {
				kind = unix.S_IFIFO
			}
			if err := unix.Mknod(p, kind|0o600, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
				return fmt.Errorf("mknod %s: %w", name, err)
			}
		default:
			return fmt.Errorf("archive entry %q has unsupported type %q", hdr.Name, hdr.Typeflag)
		}
		for k, v := range hdr.PAXRecords {
			if x, ok := strings.CutPrefix(k, xattrPrefix); ok {
				if err := unix.Lsetxattr(p, x, []byte(v), 0); err != nil {
					return fmt.Errorf("xattr %s of %s: %w", x, name, err)
				}
			}
		}
		if err := unix.Lchown(p, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeSymlink {
			if err := unix.Chmod(p, mode); err != nil {
				return err
			}
		}
		if hdr.Typeflag == tar.TypeDir {
			dirs = append(dirs, dirTimes{p, hdr.AccessTime, hdr.ModTime})
			continue
		}
		if err := setTimes(p, hdr.AccessTime, hdr.ModTime); err != nil {
			return err
		}
	}
	// Directories last, deepest first: creating their entries moved their times.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := setTimes(dirs[i].path, dirs[i].atime, dirs[i].mtime); err != nil {
			return err
		}
	}
	return nil
}

// makeSocketFile leaves a socket file at p (whose parent the caller checked): it binds a socket there,
// through the parent's descriptor (a socket address holds at most 107 bytes), and closes it.
func makeSocketFile(p string) error {
	dir, base := filepath.Split(p)
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	return unix.Bind(s, &unix.SockaddrUnix{Name: "/proc/self/fd/" + strconv.Itoa(dfd) + "/" + base})
}

// checkNoSymlinks fails if any component of rel (a clean relative path) under root is a symbolic link.
func checkNoSymlinks(root, rel string) error {
	if rel == "." || rel == "" {
		return nil
	}
	p := root
	for _, c := range strings.Split(rel, "/") {
		p = filepath.Join(p, c)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("archive path %q goes through a symbolic link", rel)
		}
	}
	return nil
}

func setTimes(p string, atime, mtime time.Time) error {
	if atime.IsZero() {
		atime = mtime
	}
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
}
