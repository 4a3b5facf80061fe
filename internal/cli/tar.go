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
// dir/rename).
//
// The archive comes from a sandbox and is not trusted: every file operation goes through an os.Root, so
// no entry, and no symlink an earlier entry made, can reach outside dir; entries named with ".." or an
// absolute path are refused; setuid, setgid and sticky bits are dropped; devices and pipes are skipped.
func extractTar(r io.Reader, dir, rename string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("extract archive: %w", err)
	}
	defer root.Close()
	tr := tar.NewReader(r)
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
		mode := fs.FileMode(hdr.Mode).Perm()
		if parent := filepath.Dir(name); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return fmt.Errorf("extract %s: %w", hdr.Name, err)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, mode|0o700); err != nil {
				return fmt.Errorf("extract %s: %w", hdr.Name, err)
			}
		case tar.TypeReg:
			if err := removeLink(root, name); err != nil {
				return fmt.Errorf("extract %s: %w", hdr.Name, err)
			}
			if err := extractFile(root, name, mode, tr); err != nil {
				return fmt.Errorf("extract %s: %w", hdr.Name, err)
			}
			_ = root.Chtimes(name, hdr.ModTime, hdr.ModTime)
		case tar.TypeSymlink:
			if err := removeLink(root, name); err != nil {
				return fmt.Errorf("extract %s: %w", hdr.Name, err)
			}
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return fmt.Errorf("extract %s: %w", hdr.Name, err)
			}
		case tar.TypeLink:
			target, err := entryPath(hdr.Linkname, rename)
			if err != nil {
				return err
			}
			if err := removeLink(root, name); err != nil {
				return fmt.Errorf("extract %s: %w", hdr.Name, err)
			}
			if err := root.Link(target, name); err != nil {
				return fmt.Errorf("extract %s: %w", hdr.Name, err)
			}
		default:
			// Devices, pipes and other special files are not copied out of a sandbox.
		}
	}
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

// removeLink removes name when it is a symlink, so that a file extracted over it replaces the link
// instead of writing through it.
func removeLink(root *os.Root, name string) error {
	fi, err := root.Lstat(name)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return nil
	}
	return root.Remove(name)
}

func extractFile(root *os.Root, name string, mode fs.FileMode, r io.Reader) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return root.Chmod(name, mode)
}
