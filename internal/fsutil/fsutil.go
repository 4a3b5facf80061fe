// Package fsutil holds small file-system helpers shared by the packages that keep state on disk.
package fsutil

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// WriteFileAtomic replaces path with data, durably: it writes a temporary file in the same directory
// (created 0700 if missing) with mode perm, syncs it, renames it over path and syncs the directory. A
// reader sees the old content or the new, never a mix; a crash leaves at most a stray temporary file.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	return writeDurably(path, data, perm, os.Rename)
}

// CreateFileAtomic is WriteFileAtomic for a path that must not exist yet: it hard-links the synced
// temporary file to path, which fails with an error matching fs.ErrExist if path is taken (also when
// a concurrent create wins).
func CreateFileAtomic(path string, data []byte, perm os.FileMode) error {
	return writeDurably(path, data, perm, os.Link)
}

// writeDurably writes data to a synced temporary file next to path, publishes it at path with
// publish (rename or link) and syncs the directory.
func writeDurably(path string, data []byte, perm os.FileMode, publish func(tmp, path string) error) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // fails harmlessly after a rename; removes the extra name after a link
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := publish(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// ReadFileLimit reads the file at path, refusing one over limit bytes (errdefs.ErrTooLarge) without
// reading more than one byte past it.
func ReadFileLimit(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is over %d bytes: %w", path, limit, errdefs.ErrTooLarge)
	}
	return b, nil
}
