package sandboxdir

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// MakeDisk creates an ext4 image of size bytes at img and mounts it at dir. The loop device is configured
// with autoclear, so unmounting dir releases it.
//
// The image's blocks are allocated on the node's file system up front (on ext4 or XFS as unwritten
// extents: no data is written, so this costs milliseconds). A sparse image would be cheaper in space, but
// once the node's file system filled up, writeback of the sandbox's blocks into its holes would fail
// behind the sandbox's file system, which had already said yes: files and directories lost or corrupt
// (ext4 reads back bad checksums). Allocated up front, a full node leaves a sandbox's disk whole, and a
// node without room for another disk refuses the sandbox with ErrResourceExhausted.
func MakeDisk(img, dir string, size int64) (err error) {
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create disk image: %w", err)
	}
	defer f.Close()
	defer func() {
		if err != nil {
			_ = os.Remove(img)
		}
	}()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("no room on the node for a %d MiB disk: %w", size>>20, errdefs.ErrResourceExhausted)
		}
		return fmt.Errorf("allocate disk image: %w", err)
	}
	// No journal and lazy init: the image is scratch space that lives exactly as long as the sandbox.
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m", "0",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", img).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mkfs.ext4: %v: %s", err, out)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	loop, err := attachLoop(f)
	if err != nil {
		return err
	}
	// With autoclear, the device is released when its last user goes: our descriptor until the mount
	// holds it, then the mount. So mount before closing the descriptor.
	defer loop.Close()
	if err := unix.Mount(loop.Name(), dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("mount %s on %s: %w", loop.Name(), dir, err)
	}
	return nil
}

// attachLoop binds backing to a free loop device with autoclear and returns the open device. The device
// is released when the returned file is closed, unless something (a mount) holds it by then.
func attachLoop(backing *os.File) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open loop-control: %w", err)
	}
	defer ctl.Close()
	for attempt := 0; attempt < 20; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("get free loop device: %w", err)
		}
		path := fmt.Sprintf("/dev/loop%d", n)
		dev, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(backing.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], filepath.Base(backing.Name()))
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("configure %s: %w", path, err)
		}
		// Another create took the same free device between GET_FREE and CONFIGURE; try the next.
		time.Sleep(time.Millisecond)
	}
	return nil, errors.New("no free loop device after 20 attempts")
}

// Unmount detaches the mount at dir, if any. A path that is not a mount point, or does not exist, is fine.
func Unmount(dir string) error {
	err := unix.Unmount(dir, unix.UMOUNT_NOFOLLOW)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if errors.Is(err, unix.EBUSY) {
		// Something still holds it (a gofer that is going away); detach lazily so it goes when freed.
		if err := unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err == nil {
			return nil
		}
	}
	return fmt.Errorf("Unmount %s: %w", dir, err)
}
