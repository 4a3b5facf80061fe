package cli

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// writeTar writes a tar archive of src, a file or a directory tree, to w. Entry names are src's paths
// relative to src, below prefix; with prefix "" src itself has no entry and its contents are at the top.
// Symlinks are archived as links; sockets, devices and pipes are skipped. Owners are not recorded: the
// receiving side decides them.
func writeTar(w io.Writer, src, prefix string) error {
	return writeTarAnd(w, src, prefix, nil, nil)
}

// writeTarAnd is writeTar leaving out what skip (if not nil) ignores, with extra (if not nil) called to
// add entries before the archive ends.
func writeTarAnd(w io.Writer, src, prefix string, skip *contextFilter, extra func(*tar.Writer) error) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		name := path.Join(prefix, filepath.ToSlash(rel))
		if rel == "." {
			name = prefix
		}
		if name == "" || name == "." {
			return nil
		}
		if skip != nil && skip.ignored(filepath.ToSlash(rel)) {
			if d.IsDir() && !skip.includes && !strings.HasPrefix(skip.keep, filepath.ToSlash(rel)+"/") {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case info.Mode().IsRegular(), info.IsDir():
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return fmt.Errorf("archive %s: %w", p, err)
		}
		hdr.Name = name
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("archive %s: %w", p, err)
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.CopyN(tw, f, hdr.Size); err != nil {
			return fmt.Errorf("archive %s: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if extra != nil {
		if err := extra(tw); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("finish archive: %w", err)
	}
	return nil
}

// extractTar extracts the tar archive r into the directory dir. With rename set, the first element of
// every entry name is replaced by it (the archive of /a/b, whose entries start with "b", lands in
// dir/rename), so that nothing of the archive lands beside it.
//
// The archive comes from a sandbox and is not trusted. Every file operation is made beneath dir's
// descriptor without following any symbolic link (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, and the
// *at calls on a parent reached that way): an entry whose path crosses a link, even one an earlier
// entry made pointing inside dir, is refused, and modes and times are set on the file itself, never
// through a name. Entries named with ".." or an absolute path are refused; setuid, setgid and sticky
// bits are dropped; devices and pipes are skipped. Contents are streamed to disk.
func extractTar(r io.Reader, dir, rename string) error {
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("extract archive: open %s: %w", dir, err)
	}
	defer unix.Close(root)
	tr := tar.NewReader(r)
	top := "" // the first element of the entries' names: one tree is copied
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		name, err := entryPath(hdr.Name, rename)
		if err != nil {
			return err
		}
		if rename != "" {
			first, _, _ := strings.Cut(path.Clean(strings.TrimPrefix(hdr.Name, "./")), "/")
			if top == "" {
				top = first
			} else if first != top {
				return fmt.Errorf("archive entry %q: refusing a name outside %q, the tree copied", hdr.Name, top)
			}
		}
		if err := extractEntry(root, tr, hdr, filepath.ToSlash(name), rename); err != nil {
			return fmt.Errorf("extract %s: %w", hdr.Name, err)
		}
	}
}

// extractEntry makes the entry hdr at name (slash-separated, relative to root), reading its contents
// from r.
func extractEntry(root int, r io.Reader, hdr *tar.Header, name, rename string) error {
	mode := uint32(fs.FileMode(hdr.Mode).Perm())
	parentName, base := path.Split(name)
	if base == "." || base == "" {
		// The destination itself: nothing to make.
		return nil
	}
	switch hdr.Typeflag {
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink:
	default:
		return nil // devices, pipes and other special files are not copied out of a sandbox
	}
	parent, err := openDirBeneath(root, parentName, true)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := unix.Mkdirat(parent, base, mode|0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		d, err := openDirBeneath(parent, base, false) // refuses a link where the directory should be
		if err != nil {
			return err
		}
		return unix.Close(d)
	case tar.TypeReg:
		if err := removeLinkAt(parent, base); err != nil {
			return err
		}
		return extractFile(parent, base, mode, hdr.ModTime, r)
	case tar.TypeSymlink:
		if err := removeLinkAt(parent, base); err != nil {
			return err
		}
		return unix.Symlinkat(hdr.Linkname, parent, base)
	default: // tar.TypeLink
		target, err := entryPath(hdr.Linkname, rename)
		if err != nil {
			return err
		}
		tdir, tbase := path.Split(filepath.ToSlash(target))
		tparent, err := openDirBeneath(root, tdir, false)
		if err != nil {
			return err
		}
		defer unix.Close(tparent)
		if err := removeLinkAt(parent, base); err != nil {
			return err
		}
		return unix.Linkat(tparent, tbase, parent, base, 0) // 0: a link named as target is linked, not followed
	}
}

// openDirBeneath opens the directory rel (slash-separated, "" for dir itself) beneath the directory
// descriptor dir, one component at a time, following no symbolic link; with create it makes the missing
// components (0755). The caller closes the descriptor.
func openDirBeneath(dir int, rel string, create bool) (int, error) {
	fd, err := unix.Dup(dir)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(strings.Trim(rel, "/"), "/") {
		if c == "" || c == "." {
			continue
		}
		if create {
			if err := unix.Mkdirat(fd, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(fd)
				return -1, err
			}
		}
		next, err := unix.Openat2(fd, c, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
		unix.Close(fd)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, fmt.Errorf("%s is not a directory (a symbolic link is not followed)", path.Clean(rel))
		}
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// removeLinkAt removes name in the directory dir when it is a symlink, so that what is extracted there
// replaces the link instead of going through it.
func removeLinkAt(dir int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
		return nil
	}
	return unix.Unlinkat(dir, name, 0)
}

// extractFile streams r into the regular file name of the directory dir, made or truncated, and sets
// its mode and time on its descriptor.
func extractFile(dir int, name string, mode uint32, mtime time.Time, r io.Reader) error {
	// O_NOFOLLOW: a link there is refused; O_NONBLOCK: a FIFO there does not block the open.
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, mode)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = errors.New("not a regular file")
		}
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(fs.FileMode(mode)); err != nil { // fchmod: the umask left out, no name followed
		f.Close()
		return err
	}
	ts := []unix.Timespec{unix.NsecToTimespec(mtime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	_ = unix.UtimesNanoAt(dir, name, ts, unix.AT_SYMLINK_NOFOLLOW)
	return f.Close()
}

// entryPath returns the local relative path of a tar entry name, or an error for names that would leave
// the extraction directory.
func entryPath(name, rename string) (string, error) {
	p := path.Clean(strings.TrimPrefix(name, "./"))
	if name == "" || path.IsAbs(name) || p == ".." || strings.HasPrefix(p, "../") {
		return "", fmt.Errorf("archive entry %q: refusing a name outside the destination", name)
	}
	if rename != "" {
		_, rest, _ := strings.Cut(p, "/")
		p = path.Join(rename, rest)
	}
	return filepath.FromSlash(p), nil
}
