// Package sandboxdir is the host side of a sandbox's directory for the drivers that run a Linux root
// file system in a container (gvisor, runc): its size-capped disk image (disk.go), the archive of its
// writable layer (layertar.go), and the two directories the daemon's channel crosses:
//
//   - link/ holds the daemon's socket. The daemon creates it, so the sandbox can write there, root
//     included: whatever it plants (symlinks, FIFOs, sockets, files) the host never follows. The node
//     looks at and connects to the socket only beneath a descriptor of the directory with
//     RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, checks it is a socket, and never creates, writes or removes
//     anything there. It is a small tmpfs of its own (LinkDirSize, LinkDirInodes), so filling it fills
//     nothing of the host's.
//   - ctl/ is the host's, mounted read-only in the sandbox at runtime.Spec.ControlDir: the link key the
//     daemon proves itself with (proto.ControlKey, readable by the sandbox's root only), and the wake
//     file.
package sandboxdir

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/fsutil"
)

// LinkMount is where the link directory is mounted inside the sandbox, and SocketName the daemon's
// socket in it.
const (
	LinkMount  = "/run/airlock"
	SocketName = "daemon.sock"
)

// Limits of the link directory's tmpfs: room for the daemon's socket and a few files the sandbox may
// leave there, nothing more.
const (
	LinkDirSize   = 64 << 10
	LinkDirInodes = 64
)

// Dir is the host directory of one sandbox; its base name is the sandbox's ID.
type Dir string

func (d Dir) id() string { return filepath.Base(string(d)) }

// Link is the link directory's path, Control the control directory's.
func (d Dir) Link() string    { return filepath.Join(string(d), "link") }
func (d Dir) Control() string { return filepath.Join(string(d), "ctl") }

// HasControl reports whether the sandbox has a control directory (it is not legacy).
func (d Dir) HasControl() bool {
	_, err := os.Lstat(d.Control())
	return err == nil
}

// MakeLinkDir makes the link directory: a tmpfs of its own, owned by owner (the sandbox's root as the
// host sees it).
func (d Dir) MakeLinkDir(owner int) error {
	p := d.Link()
	if err := os.Mkdir(p, 0o700); err != nil {
		return err
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700,uid=%d,gid=%d", LinkDirSize, LinkDirInodes, owner, owner)
	if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mount the link directory: %w", err)
	}
	return nil
}

// MakeControlDir makes the control directory with a fresh link key, which only owner (the sandbox's
// root as the host sees it) may read.
func (d Dir) MakeControlDir(owner int) error {
	p := d.Control()
	if err := os.Mkdir(p, 0o755); err != nil {
		return err
	}
	key := make([]byte, proto.LinkKeySize)
	rand.Read(key)
	kp := filepath.Join(p, proto.ControlKey)
	if err := os.WriteFile(kp, key, 0o400); err != nil {
		return err
	}
	if err := os.Lchown(kp, owner, owner); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(p, proto.ControlWake), []byte("0"), 0o644); err != nil {
		return err
	}
	return d.makeWakeSpare()
}

// WriteControlEnv writes env as the control directory's environment file (proto.ControlEnv), which
// only owner may read.
func (d Dir) WriteControlEnv(env []string, owner int) error {
	p := filepath.Join(d.Control(), proto.ControlEnv)
	if err := os.WriteFile(p, proto.FormatControlEnv(env), 0o400); err != nil {
		return err
	}
	return os.Lchown(p, owner, owner)
}

// wakeSpare is the file in the control directory that the next TouchWake renames over the wake file:
// made beforehand, so that waking a daemon needs no free space (a full disk must not leave a sandbox
// quiesced for good after a checkpoint that failed on it).
const wakeSpare = ".wake-spare"

// makeWakeSpare writes the next wake file's contents aside (wakeSpare): a generation later than the wake
// file's.
func (d Dir) makeWakeSpare() error {
	gen := []byte(strconv.FormatInt(time.Now().UnixNano(), 10))
	return fsutil.WriteFileAtomic(filepath.Join(d.Control(), wakeSpare), gen, 0o644)
}

// OpenLinkDir opens the link directory for lookups beneath it. The path up to it is the
// host's own; the directory itself is a mount point the sandbox cannot replace.
func (d Dir) OpenLinkDir() (int, error) {
	id := d.id()
	fd, err := unix.Open(d.Link(), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the link directory of %s: %w", id, err)
	}
	return fd, nil
}

// ReadLinkDir opens the link directory for reading its entries (an O_PATH descriptor cannot be
// read), beneath the descriptor OpenLinkDir gives.
func (d Dir) ReadLinkDir() (*os.File, error) {
	id := d.id()
	dfd, err := d.OpenLinkDir()
	if err != nil {
		return nil, err
	}
	fd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	unix.Close(dfd)
	if err != nil {
		return nil, fmt.Errorf("open the link directory of %s: %w", id, err)
	}
	return os.NewFile(uintptr(fd), "link"), nil
}

// OpenSocket opens the daemon's socket (O_PATH), refusing any link on the way and
// anything but a socket.
func (d Dir) OpenSocket() (*os.File, error) {
	id := d.id()
	dfd, err := d.OpenLinkDir()
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat2(dfd, SocketName, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return nil, fmt.Errorf("open the daemon socket of %s: %w", id, err)
	}
	f := os.NewFile(uintptr(fd), SocketName)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("stat the daemon socket of %s: %w", id, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		f.Close()
		return nil, fmt.Errorf("the daemon socket of %s is not a socket (mode %#o): %w", id, st.Mode, errdefs.ErrFailedPrecondition)
	}
	return f, nil
}

// SocketPresent reports whether the daemon's socket is there (and a socket).
func (d Dir) SocketPresent() bool {
	f, err := d.OpenSocket()
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// WaitForSocket polls for the daemon's socket for up to limit.
func (d Dir) WaitForSocket(ctx context.Context, limit time.Duration) error {
	id := d.id()
	deadline := time.Now().Add(limit)
	delay := 500 * time.Microsecond
	for !d.SocketPresent() {
		if time.Now().After(deadline) {
			return fmt.Errorf("the daemon socket of %s did not appear within %s", id, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		if delay < 10*time.Millisecond {
			delay *= 2
		}
	}
	return nil
}

// Dial connects to the daemon through the socket OpenSocket opens: the connect goes through the opened
// file, never through a path the sandbox could change.
func (d Dir) Dial(ctx context.Context) (net.Conn, error) {
	f, err := d.OpenSocket()
	if err != nil {
		return nil, fmt.Errorf("%w (%w)", err, errdefs.ErrUnavailable)
	}
	defer f.Close()
	var dl net.Dialer
	conn, err := dl.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(int(f.Fd())))
	if err != nil {
		return nil, fmt.Errorf("dial the daemon of %s: %w (%w)", d.id(), err, errdefs.ErrUnavailable)
	}
	return conn, nil
}

// LinkKey reads the link key from the control directory (nil for a legacy sandbox, which has none).
func (d Dir) LinkKey() ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(d.Control(), proto.ControlKey))
	if errors.Is(err, os.ErrNotExist) && !d.HasControl() {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("link key of %s: %w", d.id(), err)
	}
	if len(b) != proto.LinkKeySize {
		return nil, fmt.Errorf("link key of %s has %d bytes: %w", d.id(), len(b), errdefs.ErrFailedPrecondition)
	}
	return b, nil
}

// TouchWake changes the wake file of the control directory, which a quiesced daemon watches: it renames
// the spare made beforehand over it (which takes no free space), then makes the next spare; without a
// spare (the last could not be made, or a sandbox from before spares) it writes the file anew.
func (d Dir) TouchWake() error {
	wake := filepath.Join(d.Control(), proto.ControlWake)
	if err := os.Rename(filepath.Join(d.Control(), wakeSpare), wake); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("wake: %w", err)
		}
		gen := []byte(strconv.FormatInt(time.Now().UnixNano(), 10))
		if err := fsutil.WriteFileAtomic(wake, gen, 0o644); err != nil {
			return fmt.Errorf("wake: %w", err)
		}
	}
	_ = d.makeWakeSpare() // on a full disk, none: the next wake writes the file
	return nil
}
