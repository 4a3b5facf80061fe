package node

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// A restored sandbox's daemon pages its code in from the binary it was started from, so an image can
// only be restored with that very binary: another build (after an upgrade of Airlock) crashes at once,
// and every paused session would be lost. So the node runs sandboxes from copies of the daemon binary
// kept under DataDir/daemons, each named by its content, and keeps them: an image names its binary
// (gvisor.ImageDaemonFile) and is restored with it.
//
// The copies are not removed yet (a few MB each, one per version run; those of versions before
// airlock-daemon are the size of the airlock binary); a
// collection of those no snapshot names belongs with the retention of snapshots.

// pinDaemon returns the path of the copy of the daemon binary bin under dir, named by its content,
// making it if it is not there.
func pinDaemon(bin, dir string) (string, error) {
	f, err := os.Open(bin)
	if err != nil {
		return "", fmt.Errorf("daemon binary: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("daemon binary: %w", err)
	}
	dst := filepath.Join(dir, hex.EncodeToString(h.Sum(nil))[:32])
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("daemon binary: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return "", fmt.Errorf("daemon binary: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		tmp.Close()
		return "", fmt.Errorf("daemon binary: %w", err)
	}
	if _, err := io.Copy(tmp, f); err != nil {
		tmp.Close()
		return "", fmt.Errorf("daemon binary: %w", err)
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return "", fmt.Errorf("daemon binary: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", fmt.Errorf("daemon binary: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("daemon binary: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("daemon binary: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return dst, nil
}
