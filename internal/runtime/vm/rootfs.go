package vm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
)

// RootImages makes and keeps the read-only disk images of template root file systems: an erofs image
// (erofs-utils' mkfs.erofs) per template, made once and shared by every VM of the template. A
// template is immutable once installed, so an image is named by the template directory's path and
// modification time; a template changed in place gets a new one.
type RootImages struct {
	// Dir holds the images.
	Dir string

	mu sync.Mutex // serializes the making of images
}

// Image returns the image of the root file system at rootfs, making it if needed.
func (r *RootImages) Image(ctx context.Context, rootfs string) (string, error) {
	abs, err := filepath.Abs(rootfs)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(abs + "\x00" + strconv.FormatInt(fi.ModTime().UnixNano(), 10)))
	dst := filepath.Join(r.Dir, "root-"+hex.EncodeToString(sum[:12])+".erofs")
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return "", err
	}
	tmp := dst + ".tmp"
	os.Remove(tmp)
	// Uncompressed: a guest under emulation reads it faster than it would decompress it.
	out, err := exec.CommandContext(ctx, "mkfs.erofs", "--quiet", tmp, abs).CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("mkfs.erofs %s: %v: %s", abs, err, out)
	}
	if err := os.Chmod(tmp, 0o444); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", err
	}
	return dst, nil
}
