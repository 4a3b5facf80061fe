package nodeapi

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Bounds of an image an end unpacks: the other end is a host of the cluster, but one that was taken
// over must not be able to fill this one's disk without end or write outside the image directory.
const (
	// MaxImageBytes bounds the bytes of one checkpoint image in transit.
	MaxImageBytes = 64 << 30
	// maxImageEntries bounds its files and directories.
	maxImageEntries = 100_000
)

// writeImage writes the directory dir (regular files and directories only) to w as a tar stream.
func writeImage(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: filepath.ToSlash(rel) + "/", Mode: 0o700})
		case d.Type().IsRegular():
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: filepath.ToSlash(rel), Mode: 0o600, Size: info.Size()}); err != nil {
				return err
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		default:
			return fmt.Errorf("image %s: %s is neither a file nor a directory", dir, rel)
		}
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// readImage unpacks the tar stream r, which writeImage made, into dir (made if missing; it should be
// empty). It refuses anything but regular files and directories, names outside dir, and more than
// MaxImageBytes or maxImageEntries, with errors wrapping errdefs.ErrInvalidArgument. Files are synced.
func readImage(r io.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	var total int64
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("image: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		if n >= maxImageEntries {
			return fmt.Errorf("image: more than %d entries: %w", maxImageEntries, errdefs.ErrInvalidArgument)
		}
		name := filepath.FromSlash(h.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("image: entry %q is outside the image: %w", h.Name, errdefs.ErrInvalidArgument)
		}
		path := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if h.Size < 0 || total+h.Size > MaxImageBytes {
				return fmt.Errorf("image: more than %d bytes: %w", int64(MaxImageBytes), errdefs.ErrInvalidArgument)
			}
			total += h.Size
			if err := writeImageFile(path, tr); err != nil {
				return err
			}
		default:
			return fmt.Errorf("image: entry %q is neither a file nor a directory: %w", h.Name, errdefs.ErrInvalidArgument)
		}
	}
}

// writeImageFile creates path (a new file: an entry named twice is refused) with r's bytes.
func writeImageFile(path string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("image: %s twice: %w", filepath.Base(path), errdefs.ErrInvalidArgument)
		}
		return err
	}
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}
