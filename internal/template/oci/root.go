package oci

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// BaseFunc writes into dst (a new, empty directory) what the platform adds on top of an image: the
// mount points its sandboxes need, and files such as /etc/resolv.conf. It reads the image's own files
// from image, a read-only root of the image that no path can leave.
type BaseFunc func(dst string, image *os.Root) error

// Root mounts the root a sandbox of image digest boots from, unless it is, and returns its directory:
// read-only, the image's layers under the base layer Store.Base writes (made once per image and base
// version, Dir/base-<BaseVersion>/sha256-<hex>). Without a Base it is the image's root (Mount).
func (s *Store) Root(digest string) (string, error) {
	imageRoot, err := s.Mount(digest)
	if err != nil || s.Base == nil {
		return imageRoot, err
	}
	img, err := s.Get(digest)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	dir := filepath.Join(s.Dir, "roots", fileName(digest))
	if mounted(dir) {
		return dir, nil
	}
	base, err := s.base(digest, imageRoot)
	if err != nil {
		return "", fmt.Errorf("image %s: base layer: %w", digest, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lowers := []string{base}
	for i := len(img.Layers) - 1; i >= 0; i-- {
		lowers = append(lowers, filepath.Join(s.Dir, "layers", fileName(img.Layers[i])))
	}
	opts := "lowerdir=" + strings.Join(lowers, ":")
	if err := unix.Mount("overlay", dir, "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", fmt.Errorf("mount the root of image %s (%d layers): %w", digest, len(lowers), err)
	}
	return dir, nil
}

// base returns the base layer of image digest, whose root is mounted at imageRoot, writing it first if
// it is not there. Called with s.mu held.
func (s *Store) base(digest, imageRoot string) (string, error) {
	parent := filepath.Join(s.Dir, "base-"+s.BaseVersion)
	final := filepath.Join(parent, fileName(digest))
	if _, err := os.Lstat(final); err == nil {
		return final, nil
	}
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // gone after the rename; a failure's leftovers otherwise
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	r, err := os.OpenRoot(imageRoot)
	if err != nil {
		return "", err
	}
	defer r.Close()
	if err := s.Base(tmp, r); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", err
	}
	return final, nil
}

// mounted reports whether dir is a mount point: its mount differs from its parent's. (A bind mount of a
// directory of the same file system keeps the device number, so that cannot tell.)
func mounted(dir string) bool {
	var st, pst unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &st) != nil ||
		unix.Statx(unix.AT_FDCWD, filepath.Dir(dir), unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &pst) != nil {
		return false
	}
	return st.Mask&unix.STATX_MNT_ID != 0 && st.Mnt_id != pst.Mnt_id
}
