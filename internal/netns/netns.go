// Package netns creates and removes named network namespaces: a new namespace kept alive by a bind mount
// of its nsfs file at a path, as `ip netns add` does, so a runtime can join it by path.
package netns

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Create makes a new, empty network namespace (only a loopback device, down) and pins it at path.
// path's directory must exist; path itself must not.
func Create(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create netns %s: %w", path, err)
	}
	f.Close()
	errc := make(chan error, 1)
	// Unshare changes only the calling thread's namespace. Do it on a locked thread, then put the thread
	// back into its own namespace. If that fails the thread stays locked and so dies with the goroutine:
	// no other goroutine ever runs in the new namespace by accident.
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		src := "/proc/thread-self/ns/net"
		mountErr := unix.Mount(src, path, "none", unix.MS_BIND, "")
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(mountErr, fmt.Errorf("return to own namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		if mountErr != nil {
			mountErr = fmt.Errorf("bind %s: %w", src, mountErr)
		}
		errc <- mountErr
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return fmt.Errorf("create netns %s: %w", path, err)
	}
	return nil
}

// Remove unpins the namespace at path and deletes the file. The namespace goes away when nothing else
// holds it. A missing path is not an error.
func Remove(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove netns %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns %s: %w", path, err)
	}
	return nil
}
