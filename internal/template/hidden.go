package template

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"sort"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/runtime"
)

// What of the host's trees a sandbox may read.
//
// The default template shows host directories (/usr, and /lib* where they are directories) read-only.
// A sandbox's root reads through them whatever host root could: under gVisor the file access is the
// sentry's and its gofer's, which run as host root with CAP_DAC_OVERRIDE. So only what every host user
// may read is shown: each entry others may not read (a directory without o+rx, anything else without
// o+r) is hidden under an empty, read-only one of its kind (runtime.Mask), set in the spec of each
// sandbox the template boots.
//
// The list is made by a walk of the trees when the template is first used (the first boot after the
// node starts; the walk of a Debian /usr, 150,000 entries, takes about half a second of CPU), and made
// again before the next boot whenever they changed since: the walk puts an inotify watch on every
// directory it enters (before reading it), for entries created, moved, removed or whose mode, owner or
// links changed, and each Get first drains those events without waiting (one read, microseconds). The
// kernel queues an event within the system call that made the change, so a Get after a change completed
// (a package upgrade's new root-only file, a chmod o-r) reports its mask; a create walks only when the
// trees changed. A host that cannot give the watches (inotify's per-user limits) walks the trees again
// when the list is older than HostRegistry.RescanEvery instead.
//
// Masks are mounts, fixed at boot. A sandbox that runs sees the trees live, so an entry made unreadable
// after it booted is not hidden from it; and runsc restores a checkpoint only with the mounts it was
// made with, so a restored sandbox keeps the masks its image's sandbox was booted with (none for an
// image made before masks), whatever was hidden since.

// DefaultRescanEvery is how old the list of hidden entries may grow on a host without inotify watches.
const DefaultRescanEvery = time.Minute

// maxScanDepth bounds how deep a walk goes (a loop of bind mounts would otherwise never end).
const maxScanDepth = 256

// watchEvents are the changes of a watched directory (or of an entry in it) that may change what is
// hidden.
const watchEvents = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE | unix.IN_ATTRIB |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// hiddenMode reports whether an entry of mode (a stat's st_mode) is one a sandbox must not read: a
// directory others may not both list and enter, or anything else but a link that others may not read.
func hiddenMode(mode uint32) bool {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return false // a link names a path, resolved inside the sandbox
	case unix.S_IFDIR:
		return mode&0o005 != 0o005
	default:
		return mode&0o004 == 0
	}
}

// ScanHidden reports the entries of the host directory tree at root that a sandbox showing it at dest
// must not read, as masks named by their path under dest: each directory others may not both list and
// enter, and each other entry but a link that others may not read (nothing below a hidden directory).
// It never follows a link.
func ScanHidden(root, dest string) ([]runtime.Mask, error) { return scanHidden(root, dest, nil) }

// scanHidden walks the host directory tree at root, beneath a descriptor of each directory and never
// following a link, and reports the entries a sandbox must not read (hiddenMode), named by their path
// under dest, sorted: all of root when root itself is hidden. It does not enter a hidden directory (its
// mask hides all of it). enter, if not nil, is called with the descriptor of every directory it walks,
// before it reads it. An entry that goes away during the walk is skipped.
func scanHidden(root, dest string, enter func(fd int) error) ([]runtime.Mask, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", root, &os.PathError{Op: "open", Path: root, Err: err})
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("scan %s: %w", root, &os.PathError{Op: "fstat", Path: root, Err: err})
	}
	if hiddenMode(st.Mode) {
		unix.Close(fd)
		return []runtime.Mask{{Path: dest, Dir: true}}, nil
	}
	var out []runtime.Mask
	if err := walkHidden(fd, root, dest, 0, enter, &out); err != nil {
		return nil, fmt.Errorf("scan %s: %w", root, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// walkHidden adds to out the hidden entries of the directory open at fd (host path host, sandbox path
// dest), and walks its visible subdirectories. It closes fd.
func walkHidden(fd int, host, dest string, depth int, enter func(fd int) error, out *[]runtime.Mask) error {
	f := os.NewFile(uintptr(fd), host)
	defer f.Close()
	if depth > maxScanDepth {
		return fmt.Errorf("%s: more than %d directories deep", host, maxScanDepth)
	}
	if enter != nil {
		if err := enter(fd); err != nil {
			return err
		}
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return &os.PathError{Op: "fstatat", Path: path.Join(host, n), Err: err}
		}
		p := path.Join(dest, n)
		if hiddenMode(st.Mode) {
			if !utf8.ValidString(p) {
				// The OCI spec is JSON: such a path could not be named to the runtime.
				return fmt.Errorf("%s: others may not read it, and its name is not UTF-8, so no sandbox can be told to hide it: rename it or make it readable", strconv.Quote(path.Join(host, n)))
			}
			*out = append(*out, runtime.Mask{Path: p, Dir: st.Mode&unix.S_IFMT == unix.S_IFDIR})
			continue
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		sub, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			continue // gone, or replaced since the stat (the parent's watch saw it)
		}
		if err != nil {
			return &os.PathError{Op: "open", Path: path.Join(host, n), Err: err}
		}
		if err := walkHidden(sub, path.Join(host, n), p, depth+1, enter, out); err != nil {
			return err
		}
	}
	return nil
}

// scanRoot is a host directory a template shows, and where.
type scanRoot struct {
	host, dest string
}

// hiddenList keeps the list of hidden entries of a template's host directories current (see the
// comment at the top of this file).
type hiddenList struct {
	roots []scanRoot
	every time.Duration
	log   *slog.Logger

	mu sync.Mutex
	// The fields below are guarded by mu.
	//
	// masks is the list of the last walk, made at scanned; valid reports that there was one that
	// succeeded.
	masks   []runtime.Mask
	scanned time.Time
	valid   bool
	// fd is the inotify instance whose watches cover the trees, or -1: none (not yet, given up,
	// closed).
	fd int
	// unwatched reports that the trees are walked by age (the watches could not be had).
	unwatched bool
	closed    bool
}

// newHiddenList returns the list for roots; it walks them on first use.
func newHiddenList(roots []scanRoot, every time.Duration, log *slog.Logger) *hiddenList {
	if every <= 0 {
		every = DefaultRescanEvery
	}
	return &hiddenList{roots: roots, every: every, log: log, fd: -1}
}

// shared holds the lists of the process, one per set of trees, for all the registries that show them
// (a server's control plane and node each have one; a test process starts many servers): the trees
// are walked once, and watched by one inotify instance, a resource of which a user has few (128
// instances by default).
var shared struct {
	mu sync.Mutex
	// lists and refs are guarded by mu.
	lists map[string]*hiddenList
	refs  map[*hiddenList]int
}

// acquireHiddenList returns the process's list for roots (a new one if it has none), to be released
// with releaseHiddenList.
func acquireHiddenList(roots []scanRoot, every time.Duration, log *slog.Logger) *hiddenList {
	key := fmt.Sprint(every, roots)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if h := shared.lists[key]; h != nil {
		shared.refs[h]++
		return h
	}
	if shared.lists == nil {
		shared.lists, shared.refs = map[string]*hiddenList{}, map[*hiddenList]int{}
	}
	h := newHiddenList(roots, every, log)
	shared.lists[key], shared.refs[h] = h, 1
	return h
}

// releaseHiddenList gives back a list acquireHiddenList returned; the last one out closes it.
func releaseHiddenList(h *hiddenList) error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	n, ok := shared.refs[h]
	if !ok {
		return nil
	}
	if n > 1 {
		shared.refs[h] = n - 1
		return nil
	}
	delete(shared.refs, h)
	for k, v := range shared.lists {
		if v == h {
			delete(shared.lists, k)
		}
	}
	return h.close()
}

// current reports the hidden entries of the trees as they are now: the last walk's, or a new walk's if
// the trees changed since (or, unwatched, if it is older than every). A walk that fails is an error:
// no sandbox boots without knowing what to hide.
func (h *hiddenList) current() ([]runtime.Mask, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errors.New("hidden host entries: closed")
	}
	if h.valid && !h.changedLocked() {
		return h.masks, nil
	}
	if err := h.scanLocked(); err != nil {
		return nil, err
	}
	return h.masks, nil
}

// changedLocked reports whether the trees may have changed since the last walk: an event is queued on
// the watches (all are drained), or, unwatched, the walk is older than every.
func (h *hiddenList) changedLocked() bool {
	if h.fd < 0 {
		return !h.unwatched || time.Since(h.scanned) >= h.every
	}
	changed := false
	var buf [4096]byte
	for {
		n, err := unix.Read(h.fd, buf[:])
		if n > 0 {
			changed = true
			continue
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil && !errors.Is(err, unix.EAGAIN) {
			// Nothing can be known of the watches any more: walk by age from now on.
			h.unwatchLocked(fmt.Errorf("read inotify events: %w", err))
			return true
		}
		return changed
	}
}

// scanLocked walks the trees, putting a watch on every directory it enters unless unwatched.
func (h *hiddenList) scanLocked() error {
	if h.fd < 0 && !h.unwatched {
		fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
		if err != nil {
			h.unwatchLocked(fmt.Errorf("inotify: %w", err))
		} else {
			h.fd = fd
		}
	}
	var enter func(fd int) error
	if h.fd >= 0 {
		enter = func(dirfd int) error {
			// The magic link names exactly the directory open at dirfd, whatever its path became.
			_, err := unix.InotifyAddWatch(h.fd, "/proc/self/fd/"+strconv.Itoa(dirfd), watchEvents)
			if err != nil {
				return &watchError{err}
			}
			return nil
		}
	}
	start := time.Now()
	var all []runtime.Mask
	for _, r := range h.roots {
		m, err := scanHidden(r.host, r.dest, enter)
		var we *watchError
		if errors.As(err, &we) {
			// Out of watches (ENOSPC: the per-user limit): walk by age instead, from the start.
			h.unwatchLocked(we.err)
			return h.scanLocked()
		}
		if err != nil {
			h.valid = false
			return fmt.Errorf("hidden host entries: %w", err)
		}
		all = append(all, m...)
	}
	h.masks, h.scanned, h.valid = all, time.Now(), true
	h.log.Debug("scanned the default template's host directories", "hidden", len(all), "watched", h.fd >= 0, "took", time.Since(start))
	return nil
}

// unwatchLocked gives up the watches for walks by age, and says why.
func (h *hiddenList) unwatchLocked(why error) {
	if h.fd >= 0 {
		unix.Close(h.fd)
		h.fd = -1
	}
	if !h.unwatched {
		h.log.Warn("cannot watch the default template's host directories for changes; they are walked again when the list of hidden entries is older than the rescan period",
			"err", why, "every", h.every)
	}
	h.unwatched = true
}

// close releases the watches; current fails after.
func (h *hiddenList) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.fd >= 0 {
		err := unix.Close(h.fd)
		h.fd = -1
		if err != nil {
			return fmt.Errorf("close inotify: %w", err)
		}
	}
	return nil
}

// watchError is a failure to put a watch (not of the walk itself).
type watchError struct{ err error }

func (e *watchError) Error() string { return "inotify watch: " + e.err.Error() }
func (e *watchError) Unwrap() error { return e.err }
