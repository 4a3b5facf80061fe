package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/sandboxdir"
)

// The daemon's channel crosses the sandbox's link and control directories (internal/runtime/sandboxdir).
// A sandbox restored from an image made before the control directory existed has none ("legacy"): its
// daemon is woken with runtime.WakeSignal and proves nothing, but its socket is still opened beneath
// the link directory.

// ImageLinkFile in a checkpoint image records the link directory: that the sandbox had a control
// directory, and what a process in it left in the link directory, which its restored copy must find
// again (gVisor walks every name it had looked up there when it restores).
const ImageLinkFile = "link.json"

// imageLink is the contents of ImageLinkFile.
type imageLink struct {
	// Control reports that the sandbox had a control directory (and so a daemon that proves itself).
	Control bool `json:"control"`
	// Init is the argv the sandbox's daemon was started with, which its restore must repeat.
	Init []string `json:"init,omitempty"`
	// Entries are what the link directory held, parents before children.
	Entries []linkEntry `json:"entries,omitempty"`
	// Masks are the paths the sandbox was booted with hidden (runtime.Spec.Masks), which its restore
	// must repeat: runsc restores only with the mounts the image was made with.
	Masks []imageMask `json:"masks,omitempty"`
}

// imageMask is one of imageLink.Masks.
type imageMask struct {
	Path string `json:"path"`
	Dir  bool   `json:"dir,omitempty"`
}

// linkEntry is one file of the link directory.
type linkEntry struct {
	Path   string `json:"path"` // relative, "/"-separated
	Type   string `json:"type"` // dir, file, symlink, fifo or socket
	Mode   uint32 `json:"mode"` // permission bits
	UID    int    `json:"uid"`
	GID    int    `json:"gid"`
	Target string `json:"target,omitempty"` // of a symlink
	Data   []byte `json:"data,omitempty"`   // of a file
}

// Bounds on what saveLinkDir takes, whatever the file system (the tmpfs bounds it already).
const (
	maxLinkEntries = 256
	maxLinkData    = 1 << 20
)

// sdir is sandbox id's directory (sandboxdir: its link and control directories).
func (d *Driver) sdir(id string) sandboxdir.Dir { return sandboxdir.Dir(d.dir(id)) }

func (d *Driver) linkDir(id string) string { return d.sdir(id).Link() }

// hasControl reports whether sandbox id has a control directory (it is not legacy).
func (d *Driver) hasControl(id string) bool { return d.sdir(id).HasControl() }

// waitForSocket polls for the daemon's socket of sandbox id.
func (d *Driver) waitForSocket(ctx context.Context, id string, limit time.Duration) error {
	return d.sdir(id).WaitForSocket(ctx, limit)
}

// DialLink connects to the daemon of sandbox id beneath its link directory (sandboxdir.Dir.Dial), and
// reports the link key the daemon must prove itself with: nil for a legacy sandbox. See runtime.Driver.
func (d *Driver) DialLink(ctx context.Context, id string) (net.Conn, []byte, error) {
	if !idPattern.MatchString(id) {
		return nil, nil, fmt.Errorf("gvisor: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	key, err := d.sdir(id).LinkKey()
	if err != nil {
		return nil, nil, fmt.Errorf("gvisor: %w", err)
	}
	conn, err := d.sdir(id).Dial(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("gvisor: %w", err)
	}
	return conn, key, nil
}

// wakeWait is how long wake waits for a daemon to answer the wake file before it signals.
const wakeWait = 300 * time.Millisecond

// wake wakes the sandbox's quiesced daemon: by changing the wake file of its control directory, which
// spares starting a runsc process; a daemon that does not listen again within wakeWait, or a legacy
// sandbox's, gets runtime.WakeSignal.
func (d *Driver) wake(ctx context.Context, id string) error {
	if d.hasControl(id) {
		if err := d.sdir(id).TouchWake(); err != nil {
			return err
		}
		if d.waitForSocket(ctx, id, wakeWait) == nil {
			return nil
		}
		d.log.Debug("daemon did not answer the wake file; signalling", "sandbox", id)
	}
	if err := d.runscQuiet(ctx, "kill", id, strconv.Itoa(int(runtime.WakeSignal))); err != nil {
		return fmt.Errorf("wake: %w", err)
	}
	return nil
}

// saveLinkDir records into imageDir whether sandbox id has a control directory and what its link
// directory holds (the sandbox is paused, and its daemon has let go of its socket). It reads beneath
// the directory's descriptor, follows no link, and opens only regular files, without blocking.
func (d *Driver) saveLinkDir(id, imageDir string) error {
	rec := imageLink{Control: d.hasControl(id)}
	spec, err := d.readSpec(id)
	if err != nil {
		return fmt.Errorf("spec of %s: %w", id, err)
	}
	if spec.Process != nil {
		rec.Init = spec.Process.Args
	}
	for _, m := range d.specMasks(spec) {
		rec.Masks = append(rec.Masks, imageMask{Path: m.Path, Dir: m.Dir})
	}
	dir, err := d.sdir(id).ReadLinkDir()
	if err != nil {
		return err
	}
	data := 0
	if err := walkLinkDir(dir, "", &rec.Entries, &data); err != nil {
		return fmt.Errorf("link directory of %s: %w", id, err)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(imageDir, ImageLinkFile), b, 0o600)
}

// walkLinkDir appends the entries of the directory dir (which it closes) under prefix.
func walkLinkDir(dir *os.File, prefix string, out *[]linkEntry, data *int) error {
	defer dir.Close()
	fd := int(dir.Fd())
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, name := range names {
		if len(*out) >= maxLinkEntries {
			return fmt.Errorf("more than %d entries: %w", maxLinkEntries, errdefs.ErrResourceExhausted)
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		e := linkEntry{Path: prefix + name, Mode: st.Mode & 0o7777, UID: int(st.Uid), GID: int(st.Gid)}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			e.Type = "dir"
			*out = append(*out, e)
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			if err := walkLinkDir(os.NewFile(uintptr(sub), e.Path), e.Path+"/", out, data); err != nil {
				return err
			}
			continue
		case unix.S_IFREG:
			e.Type = "file"
			b, err := readRegularAt(fd, name, maxLinkData-*data)
			if err != nil {
				return fmt.Errorf("%s: %w", e.Path, err)
			}
			*data += len(b)
			e.Data = b
		case unix.S_IFLNK:
			e.Type = "symlink"
			buf := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(fd, name, buf)
			if err != nil {
				return err
			}
			e.Target = string(buf[:n])
		case unix.S_IFIFO:
			e.Type = "fifo"
		case unix.S_IFSOCK:
			e.Type = "socket"
		default:
			continue // devices cannot be made there (nodev); nothing else exists
		}
		*out = append(*out, e)
	}
	return nil
}

// readRegularAt reads the regular file name beneath dirfd, at most limit bytes, without following a
// link or blocking on anything that is not a regular file.
func readRegularAt(dirfd int, name string, limit int) ([]byte, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("not a regular file: %w", errdefs.ErrFailedPrecondition)
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, fmt.Errorf("more than %d bytes of files: %w", maxLinkData, errdefs.ErrResourceExhausted)
	}
	return b, nil
}

// readImageLink reads an image's ImageLinkFile; an image without one is legacy (no control
// directory, and an empty link directory: checkpoints refused anything else then).
func readImageLink(imageDir string) (imageLink, error) {
	var rec imageLink
	f, err := os.Open(filepath.Join(imageDir, ImageLinkFile))
	if errors.Is(err, os.ErrNotExist) {
		return rec, nil
	}
	if err != nil {
		return rec, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4*maxLinkData))
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("%s: %v: %w", ImageLinkFile, err, errdefs.ErrInvalidArgument)
	}
	return rec, nil
}

// restoreLinkDir re-creates entries in the (new, empty) link directory at dir, beneath its descriptor:
// nothing runs in the sandbox yet, and every name is checked to stay beneath it.
func restoreLinkDir(dir string, entries []linkEntry) error {
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	if len(entries) > maxLinkEntries {
		return fmt.Errorf("%d entries: %w", len(entries), errdefs.ErrInvalidArgument)
	}
	for _, e := range entries {
		if err := restoreLinkEntry(root, e); err != nil {
			return fmt.Errorf("link directory entry %q: %w", e.Path, err)
		}
	}
	return nil
}

func restoreLinkEntry(root int, e linkEntry) error {
	clean := filepath.Clean(e.Path)
	if e.Path == "" || clean != e.Path || filepath.IsAbs(clean) || clean == "." || clean == ".." || len(clean) > 1024 ||
		(len(clean) > 2 && clean[:3] == "../") {
		return fmt.Errorf("bad path: %w", errdefs.ErrInvalidArgument)
	}
	parent, name := filepath.Split(clean)
	pfd := root
	if parent != "" {
		fd, err := unix.Openat2(root, parent, &unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
		})
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		pfd = fd
	}
	mode := e.Mode & 0o7777
	switch e.Type {
	case "dir":
		if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
			return err
		}
	case "file":
		fd, err := unix.Openat(pfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), name)
		_, err = f.Write(e.Data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case "symlink":
		return errors.Join(unix.Symlinkat(e.Target, pfd, name), unix.Fchownat(pfd, name, e.UID, e.GID, unix.AT_SYMLINK_NOFOLLOW))
	case "fifo":
		if err := unix.Mknodat(pfd, name, unix.S_IFIFO|0o600, 0); err != nil {
			return err
		}
	case "socket":
		// A socket file is what bind leaves behind; nothing listens on it afterwards.
		s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		err = unix.Bind(s, &unix.SockaddrUnix{Name: "/proc/self/fd/" + strconv.Itoa(pfd) + "/" + name})
		unix.Close(s)
		if err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown type %q: %w", e.Type, errdefs.ErrInvalidArgument)
	}
	// What was just made here is no link (nothing runs in the sandbox to swap it).
	if err := unix.Fchownat(pfd, name, e.UID, e.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	return unix.Fchmodat(pfd, name, mode, 0)
}

// linkSockets lists (up to five of) the sockets a process in sandbox id made at the top of its link
// directory, looked at beneath the directory's descriptor.
func (d *Driver) linkSockets(id string) []string {
	dir, err := d.sdir(id).ReadLinkDir()
	if err != nil {
		return nil
	}
	defer dir.Close()
	root := int(dir.Fd())
	names, _ := dir.Readdirnames(maxLinkEntries)
	var out []string
	for _, n := range names {
		var st unix.Stat_t
		if n != sandboxdir.SocketName && unix.Fstatat(root, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
			out = append(out, n)
			if len(out) == 5 {
				break
			}
		}
	}
	return out
}
