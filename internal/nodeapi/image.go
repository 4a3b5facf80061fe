package nodeapi

import (
	"archive/tar"
	"encoding/json"
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

// imageEnd names the last entry of an image's tar stream: what came before it, so that a stream cut
// between two entries is not taken for a whole image.
const imageEnd = ".airlock-image-end"

// imageSummary is imageEnd's content.
type imageSummary struct {
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"`
}

// writeImage writes the directory dir (regular files and directories only) to w as a tar stream,
// ending with imageEnd.
func writeImage(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	var sum imageSummary
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
		if rel == imageEnd {
			return fmt.Errorf("image %s: a file is named %s", dir, imageEnd)
		}
		sum.Entries++
		switch {
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: filepath.ToSlash(rel) + "/", Mode: 0o700})
		case d.Type().IsRegular():
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: filepath.ToSlash(rel), Mode: 0o600, Size: info.Size()}); err != nil {
				return err
			}
			sum.Bytes += info.Size()
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
	end, err := json.Marshal(sum)
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: imageEnd, Mode: 0o600, Size: int64(len(end))}); err != nil {
		return err
	}
	if _, err := tw.Write(end); err != nil {
		return err
	}
	return tw.Close()
}

// readImage unpacks the tar stream r, which writeImage made, into dir (made if missing; it should be
// empty). It refuses anything but regular files and directories, names outside dir, more than
// MaxImageBytes or maxImageEntries, and a stream whose imageEnd does not tally, with errors wrapping
// errdefs.ErrInvalidArgument; a stream that ends early, or fails to read, is errdefs.ErrUnavailable.
// Files are synced.
func readImage(r io.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	var total int64
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("image: the stream ended before its last entry: %w", errdefs.ErrUnavailable)
		}
		if err != nil {
			return readErr(err)
		}
		if h.Name == imageEnd {
			return checkImageEnd(tr, h, imageSummary{Entries: n, Bytes: total})
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

// readErr classifies an error reading an image: a malformed tar is the sender's fault, anything
// else (the connection) is unavailable.
func readErr(err error) error {
	if errors.Is(err, tar.ErrHeader) || errors.Is(err, tar.ErrFieldTooLong) || errors.Is(err, tar.ErrInsecurePath) {
		return fmt.Errorf("image: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return fmt.Errorf("image: %v: %w", err, errdefs.ErrUnavailable)
}

// checkImageEnd checks that the imageEnd entry h tallies with what was read, and that nothing follows.
func checkImageEnd(tr *tar.Reader, h *tar.Header, got imageSummary) error {
	if h.Typeflag != tar.TypeReg || h.Size > 1<<10 {
		return fmt.Errorf("image: a malformed %s: %w", imageEnd, errdefs.ErrInvalidArgument)
	}
	b, err := io.ReadAll(tr)
	if err != nil {
		return readErr(err)
	}
	var want imageSummary
	if err := json.Unmarshal(b, &want); err != nil || want != got {
		return fmt.Errorf("image: %d entries of %d bytes arrived, of %s: %w", got.Entries, got.Bytes, b, errdefs.ErrInvalidArgument)
	}
	if _, err := tr.Next(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("image: entries after %s: %w", imageEnd, errdefs.ErrInvalidArgument)
	}
	return nil
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
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return err // this end's disk
		}
		return readErr(err)
	}
	return errors.Join(f.Sync(), f.Close())
}
