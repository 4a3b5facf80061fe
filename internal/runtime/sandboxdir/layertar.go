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

	"github.com/airlockrun/airlock/internal/errdefs"
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

// ErrBadLayerArchive is wrapped by the error of a layer archive that ReadLayerTar refuses; the error
// names the entry and why.
var ErrBadLayerArchive = fmt.Errorf("layer archive refused: %w", errdefs.ErrFailedPrecondition)

// beneath is how every path of a restore is resolved: inside the root's descriptor, through no symbolic
// link (the last component included, which O_PATH|O_NOFOLLOW then opens as itself), no magic link and no
// mount point.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// ReadLayerTar unpacks the archive at path into root, an empty directory, as WriteLayerTar made it.
//
// The archive is hostile: a compromised node can put one in the shared snapshot store for another node
// to restore, as root. So the restore happens beneath a descriptor of root and never follows a link,
// whoever planted it (the archive's own symlink entries included): each entry's parent directory is
// opened beneath root with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, the entry is made in it with the *at
// calls, and its owner, mode, xattrs and times are set through an O_PATH|O_NOFOLLOW descriptor of what
// was made, checked to be of the entry's type (a symlink's own owner, xattrs and times, never its
// target's; a symlink gets no mode). Refused, with an error wrapping ErrBadLayerArchive that names the
// entry: absolute or unclean names and "..", a path through a symlink or through anything but a
// directory, a name that exists already (but a directory entry over a directory merges into it), a hard
// link to anything but a regular file of the archive, and the types WriteLayerTar does not write.
func ReadLayerTar(path, root string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the layer's root %s: %w", root, err)
	}
	defer unix.Close(rfd)
	tr := tar.NewReader(bufio.NewReaderSize(f, 1<<20))
	type dirTimes struct {
		name         string
		atime, mtime time.Time
	}
	var dirs []dirTimes
	dirAt := map[string]int{} // name → index in dirs: a directory's entry again gives it new times
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: read: %v", ErrBadLayerArchive, err)
		}
		if err := restoreEntry(rfd, hdr, tr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeDir {
			d := dirTimes{strings.TrimSuffix(hdr.Name, "/"), hdr.AccessTime, hdr.ModTime}
			if i, ok := dirAt[d.name]; ok {
				dirs[i] = d
			} else {
				dirAt[d.name] = len(dirs)
				dirs = append(dirs, d)
			}
		}
	}
	// Directories last, deepest first (a directory's entry comes before its entries'): creating their
	// entries moved their times.
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		fd, err := openBeneath(rfd, d.name, unix.O_DIRECTORY)
		if err != nil {
			return fmt.Errorf("archive entry %q: open to set its times: %w", d.name, err)
		}
		err = setTimes(fd, d.atime, d.mtime)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("archive entry %q: times: %w", d.name, err)
		}
	}
	return nil
}

// restoreEntry makes the entry hdr (with the contents of a regular file read from r) beneath the root
// rfd, and sets its metadata; see ReadLayerTar.
func restoreEntry(rfd int, hdr *tar.Header, r io.Reader) error {
	name := strings.TrimSuffix(hdr.Name, "/")
	if name == "." {
		return fmt.Errorf("%w: entry %q names the layer's root itself", ErrBadLayerArchive, hdr.Name)
	}
	if name == "" || strings.HasPrefix(name, "/") || slices.Contains(strings.Split(name, "/"), "..") || filepath.Clean(name) != name {
		return fmt.Errorf("%w: entry %q escapes the layer", ErrBadLayerArchive, hdr.Name)
	}
	dir, base := filepath.Split(name)
	pfd, err := openDirBeneath(rfd, strings.TrimSuffix(dir, "/"))
	if err != nil {
		return fmt.Errorf("%w: entry %q: its directory: %v", ErrBadLayerArchive, hdr.Name, err)
	}
	defer unix.Close(pfd)

	// The type the entry makes, and whether its name may exist already (as a directory, for a directory).
	var kind uint32
	socket := hdr.Typeflag == tar.TypeReg && hdr.PAXRecords[socketRecord] == "socket"
	switch hdr.Typeflag {
	case tar.TypeDir:
		kind = unix.S_IFDIR
	case tar.TypeReg:
		kind = unix.S_IFREG
		if socket {
			kind = unix.S_IFSOCK
		}
	case tar.TypeLink:
		kind = unix.S_IFREG
	case tar.TypeSymlink:
		kind = unix.S_IFLNK
	case tar.TypeChar:
		kind = unix.S_IFCHR
	case tar.TypeBlock:
		kind = unix.S_IFBLK
	case tar.TypeFifo:
		kind = unix.S_IFIFO
	default:
		return fmt.Errorf("%w: entry %q has unsupported type %q", ErrBadLayerArchive, hdr.Name, hdr.Typeflag)
	}
	var st unix.Stat_t
	switch err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && kind == unix.S_IFDIR && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		// A directory again: its metadata is set anew.
	case err == nil:
		return fmt.Errorf("%w: entry %q: the name exists already, as a %s", ErrBadLayerArchive, hdr.Name, typeName(st.Mode))
	case !errors.Is(err, unix.ENOENT):
		return fmt.Errorf("archive entry %q: %w", hdr.Name, err)
	}

	switch {
	case hdr.Typeflag == tar.TypeDir:
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("archive entry %q: mkdir: %w", hdr.Name, err)
		}
	case socket:
		if err := makeSocketFile(pfd, base); err != nil {
			return fmt.Errorf("archive entry %q: socket: %w", hdr.Name, err)
		}
	case hdr.Typeflag == tar.TypeReg:
		fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fmt.Errorf("archive entry %q: create: %w", hdr.Name, err)
		}
		out := os.NewFile(uintptr(fd), base)
		_, err = io.Copy(out, r)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("archive entry %q: %w", hdr.Name, err)
		}
	case hdr.Typeflag == tar.TypeLink:
		// A link shares its target's inode, and so its metadata: nothing more to set.
		return linkEntry(rfd, pfd, base, hdr)
	case hdr.Typeflag == tar.TypeSymlink:
		// The target is the sandbox's business: it is resolved inside the sandbox, never here.
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return fmt.Errorf("archive entry %q: symlink: %w", hdr.Name, err)
		}
	default: // devices (whiteouts are 0/0 character devices) and FIFOs
		dev := int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))
		if err := unix.Mknodat(pfd, base, kind|0o600, dev); err != nil {
			return fmt.Errorf("archive entry %q: mknod: %w", hdr.Name, err)
		}
	}

	// Everything else goes through a descriptor of what was just made, whatever its name leads to now.
	fd, err := openBeneath(pfd, base, 0)
	if err != nil {
		return fmt.Errorf("archive entry %q: open what was made: %w", hdr.Name, err)
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("archive entry %q: %w", hdr.Name, err)
	}
	if st.Mode&unix.S_IFMT != kind {
		return fmt.Errorf("%w: entry %q: made a %s, found a %s", ErrBadLayerArchive, hdr.Name, typeName(kind), typeName(st.Mode))
	}
	return setMetadata(fd, kind, hdr)
}

// linkEntry makes base in the directory pfd a hard link to the entry hdr names, which must be a regular
// file beneath the root rfd (reached through no link).
func linkEntry(rfd, pfd int, base string, hdr *tar.Header) error {
	target := hdr.Linkname
	if target == "" || strings.HasPrefix(target, "/") || slices.Contains(strings.Split(target, "/"), "..") || filepath.Clean(target) != target {
		return fmt.Errorf("%w: hard link %q → %q escapes the layer", ErrBadLayerArchive, hdr.Name, hdr.Linkname)
	}
	tfd, err := openBeneath(rfd, target, 0)
	if err != nil {
		return fmt.Errorf("%w: hard link %q → %q: %v", ErrBadLayerArchive, hdr.Name, hdr.Linkname, refusal(err))
	}
	defer unix.Close(tfd)
	var st unix.Stat_t
	if err := unix.Fstat(tfd, &st); err != nil {
		return fmt.Errorf("archive entry %q: %w", hdr.Name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w: hard link %q → %q: the target is a %s, not a regular file", ErrBadLayerArchive, hdr.Name, hdr.Linkname, typeName(st.Mode))
	}
	// Through the descriptor: /proc/self/fd/N is the inode itself, whatever has its name now.
	if err := unix.Linkat(unix.AT_FDCWD, fdPath(tfd), pfd, base, unix.AT_SYMLINK_FOLLOW); err != nil {
		return fmt.Errorf("archive entry %q: link: %w", hdr.Name, err)
	}
	return nil
}

// setMetadata sets the owner, mode, xattrs and times hdr gives on fd, an O_PATH descriptor of a file of
// type kind (S_IF*), never following it if it is a symlink: an O_PATH descriptor's /proc/self/fd/N leads
// to the inode it holds and no further, a symlink's too. The owner goes first (a chown drops the setuid
// and setgid bits, and file capabilities), then the mode and xattrs, then the times (a directory's are
// set again once its entries are made).
func setMetadata(fd int, kind uint32, hdr *tar.Header) error {
	if err := unix.Fchownat(fd, "", hdr.Uid, hdr.Gid, unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("archive entry %q: chown: %w", hdr.Name, err)
	}
	p := fdPath(fd)
	if kind != unix.S_IFLNK { // a symlink has no mode of its own
		if err := unix.Chmod(p, uint32(hdr.Mode&0o7777)); err != nil {
			return fmt.Errorf("archive entry %q: chmod: %w", hdr.Name, err)
		}
	}
	for k, v := range hdr.PAXRecords {
		if x, ok := strings.CutPrefix(k, xattrPrefix); ok {
			if err := unix.Setxattr(p, x, []byte(v), 0); err != nil {
				return fmt.Errorf("archive entry %q: xattr %s: %w", hdr.Name, x, err)
			}
		}
	}
	return setTimes(fd, hdr.AccessTime, hdr.ModTime)
}

// openBeneath opens name, a clean relative path ("" or "." for dir itself), beneath the directory dir
// as an O_PATH descriptor (with extra flags, such as O_DIRECTORY), following no link on the way and not
// the last component if it is one.
func openBeneath(dir int, name string, flags int) (int, error) {
	if name == "" {
		name = "."
	}
	how := &unix.OpenHow{Flags: uint64(unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC | flags), Resolve: beneath}
	for {
		fd, err := unix.Openat2(dir, name, how)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) { // EAGAIN: a rename raced the lookup
			continue
		}
		return fd, err
	}
}

// openDirBeneath opens the directory name beneath dir as openBeneath does, and says what it is if it is
// no directory (a symbolic link, say).
func openDirBeneath(dir int, name string) (int, error) {
	fd, err := openBeneath(dir, name, 0)
	if err != nil {
		return -1, refusal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(fd)
		return -1, fmt.Errorf("%q is a %s, not a directory", name, typeName(st.Mode))
	}
	return fd, nil
}

// refusal says why a path of the archive could not be opened beneath the root.
func refusal(err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("it goes through a symbolic link (%w)", err)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("it goes through something that is not a directory (%w)", err)
	case errors.Is(err, unix.EXDEV):
		return fmt.Errorf("it leaves the layer (%w)", err)
	}
	return err
}

// typeName names the file type in mode (S_IF*) for an error.
func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFLNK:
		return "symbolic link"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFSOCK:
		return "socket"
	}
	return fmt.Sprintf("file of mode %#o", mode)
}

// fdPath is the /proc path of descriptor fd: the inode it holds, reached by no name.
func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// makeSocketFile leaves a socket file called base in the directory pfd: it binds a socket there, through
// the directory's descriptor (a socket address holds at most 107 bytes), and closes it. A bind makes a
// new name and follows no link at it.
func makeSocketFile(pfd int, base string) error {
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	return unix.Bind(s, &unix.SockaddrUnix{Name: fdPath(pfd) + "/" + base})
}

// setTimes sets the times of fd's inode (an O_PATH descriptor; a symlink's own times).
func setTimes(fd int, atime, mtime time.Time) error {
	if atime.IsZero() {
		atime = mtime
	}
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	return unix.UtimesNanoAt(unix.AT_FDCWD, fdPath(fd), ts, 0)
}
