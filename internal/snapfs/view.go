package snapfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Entry types, the values of Entry.Type and Change.Type.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
	TypeOther   = "other" // device, FIFO or socket
)

// Entry describes one file of a View, as lstat would: symbolic links are described, not followed.
type Entry struct {
	Path    string      // absolute and clean, e.g. "/home/user/a.txt"
	Type    string      // TypeFile, TypeDir, TypeSymlink or TypeOther
	Size    int64       // contents for a file, target length for a symbolic link, 0 otherwise
	Mode    fs.FileMode // type and permission bits
	ModTime time.Time
	Target  string // a symbolic link's target, unresolved
	// FromLayer is set when the entry is in the snapshot's layer: created or modified in the sandbox,
	// or, for a directory, copied up because something under it changed.
	FromLayer bool
}

// View is a sandbox's file system as a snapshot saved it: a Layer over the template directory,
// combined like overlayfs does. A View is safe for concurrent use; Close releases the template.
type View struct {
	layer *Layer
	lower *os.Root // the template; nothing is resolved outside it
}

// NewView lays layer over the template directory lowerRoot. A nil layer is an empty one: the View is
// the template as it is. The View holds lowerRoot open until Close.
func NewView(layer *Layer, lowerRoot string) (*View, error) {
	if layer == nil {
		layer = &Layer{entries: map[string]*layerEntry{"": {kind: kindDir}}}
	}
	root, err := os.OpenRoot(lowerRoot)
	if err != nil {
		return nil, fmt.Errorf("open template %s: %w", lowerRoot, err)
	}
	return &View{layer: layer, lower: root}, nil
}

// Close releases the template directory. The View must not be used afterwards.
func (v *View) Close() error {
	return v.lower.Close()
}

// Stat describes the entry at path, an absolute path inside the sandbox. It reports an error matching
// errdefs.ErrNotFound if there is none and errdefs.ErrInvalidArgument if path is malformed or one of
// its parents is a symbolic link.
func (v *View) Stat(p string) (Entry, error) {
	n, err := v.lookup(p)
	if err != nil {
		return Entry{}, err
	}
	return v.entry(&n)
}

// ReadFile returns the contents of the regular file at path. It fails with errdefs.ErrInvalidArgument
// if the entry is not a regular file (or path is malformed) and with errdefs.ErrFailedPrecondition if
// the file is larger than max bytes. The caller owns the returned slice.
func (v *View) ReadFile(p string, max int64) ([]byte, error) {
	rc, size, err := v.Open(p, max)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data := make([]byte, size)
	if _, err := io.ReadFull(rc, data); err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	// Reading on to the end checks what was read again from the archive against its digest.
	if _, err := rc.Read(make([]byte, 1)); err != io.EOF {
		if err == nil {
			err = errors.New("longer than its size")
		}
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return data, nil
}

// Open opens the regular file at path for reading and reports its size; the reader holds nothing of
// a file the Layer does not hold in memory (it reads the archive again) and yields at most size bytes.
// It fails as ReadFile does, before anything is read. The caller closes the reader.
func (v *View) Open(p string, max int64) (io.ReadCloser, int64, error) {
	if max < 0 {
		return nil, 0, fmt.Errorf("read %s: negative size limit: %w", p, errdefs.ErrInvalidArgument)
	}
	n, err := v.lookup(p)
	if err != nil {
		return nil, 0, err
	}
	if n.typ() != TypeFile {
		return nil, 0, fmt.Errorf("read %s: not a regular file: %w", p, errdefs.ErrInvalidArgument)
	}
	tooLarge := func(size int64) error {
		return fmt.Errorf("read %s: %d bytes, larger than %d: %w", p, size, max, errdefs.ErrFailedPrecondition)
	}
	if u := n.up; u != nil {
		switch {
		case u.size > max:
			return nil, 0, tooLarge(u.size)
		case u.held:
			return io.NopCloser(bytes.NewReader(u.data)), u.size, nil
		}
		rc, err := v.layer.openEntry(u)
		if err != nil {
			return nil, 0, fmt.Errorf("read %s: %w", p, err)
		}
		return rc, u.size, nil
	}
	f, size, err := v.openLower(n.rel)
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", p, err)
	}
	if size > max {
		f.Close()
		return nil, 0, tooLarge(size)
	}
	return &limitedFile{Reader: io.LimitReader(f, size), f: f}, size, nil
}

// limitedFile is a template file read up to a bound.
type limitedFile struct {
	io.Reader
	f *os.File
}

func (l *limitedFile) Close() error { return l.f.Close() }

// ReadDir lists the directory at path, sorted by name: the layer's entries and the template's, minus
// those the layer deleted (whiteouts) and, under an opaque directory, all the template's. It fails with
// errdefs.ErrInvalidArgument if the entry is not a directory.
func (v *View) ReadDir(p string) ([]Entry, error) {
	n, err := v.lookup(p)
	if err != nil {
		return nil, err
	}
	if n.typ() != TypeDir {
		return nil, fmt.Errorf("read directory %s: not a directory: %w", p, errdefs.ErrInvalidArgument)
	}
	var out []Entry
	if n.up != nil {
		for _, name := range n.up.children {
			c := v.layer.entries[join(n.rel, name)]
			if c.kind == kindWhiteout {
				continue
			}
			e, err := v.entry(&node{rel: join(n.rel, name), up: c})
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
	}
	if n.merge {
		f, err := v.lower.Open(lowerName(n.rel))
		if err != nil {
			return nil, fmt.Errorf("read directory %s: %w", p, err)
		}
		des, err := f.ReadDir(-1) // entries of a directory opened in a Root are lstat'ed within it
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read directory %s: %w", p, err)
		}
		for _, de := range des {
			rel := join(n.rel, de.Name())
			if n.up != nil && v.layer.entries[rel] != nil {
				continue // listed above, or deleted
			}
			fi, err := de.Info()
			if err != nil {
				return nil, fmt.Errorf("read directory %s: %w", p, err)
			}
			e, err := v.entry(&node{rel: rel, lo: fi})
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// node is an entry of a View, resolved.
type node struct {
	rel   string      // path relative to the root, "" for the root itself
	up    *layerEntry // the layer's entry, nil if the entry is the template's
	lo    fs.FileInfo // the template's entry when it is visible: the entry itself, or a directory merged under up
	merge bool        // a directory whose template counterpart contributes entries
}

// typ reports the Entry.Type of n.
func (n *node) typ() string {
	if n.up != nil {
		return n.up.typ()
	}
	return typeOf(n.lo.Mode())
}

// root resolves the root directory.
func (v *View) root() (node, error) {
	fi, err := v.lower.Lstat(".")
	if err != nil {
		return node{}, fmt.Errorf("template root: %w", err)
	}
	if !fi.IsDir() {
		return node{}, fmt.Errorf("template root is not a directory: %w", errdefs.ErrFailedPrecondition)
	}
	return node{up: v.layer.entries[""], lo: fi, merge: true}, nil
}

// lookup resolves an absolute sandbox path, one component at a time, refusing to cross symbolic links.
func (v *View) lookup(p string) (node, error) {
	rel, err := cleanPath(p)
	if err != nil {
		return node{}, err
	}
	n, err := v.root()
	if err != nil || rel == "" {
		return n, err
	}
	comps := strings.Split(rel, "/")
	for i, c := range comps {
		if i > 0 {
			switch n.typ() {
			case TypeDir:
			case TypeSymlink:
				return node{}, fmt.Errorf("%s: path crosses a symbolic link at /%s: %w", p, n.rel, errdefs.ErrInvalidArgument)
			default:
				return node{}, fmt.Errorf("%s: /%s is not a directory: %w", p, n.rel, errdefs.ErrNotFound)
			}
		}
		child, ok, err := v.step(&n, c)
		if err != nil {
			return node{}, err
		}
		if !ok {
			return node{}, fmt.Errorf("%s: %w", p, errdefs.ErrNotFound)
		}
		n = child
	}
	return n, nil
}

// step resolves the entry called name in the directory parent; ok is false if there is none.
func (v *View) step(parent *node, name string) (n node, ok bool, err error) {
	n.rel = join(parent.rel, name)
	if parent.up != nil {
		n.up = v.layer.entries[n.rel] // a layer entry's parent is always in the layer
	}
	if n.up != nil && n.up.kind == kindWhiteout {
		return node{}, false, nil
	}
	if parent.merge && (n.up == nil || n.up.kind == kindDir && !n.up.opaque) {
		// parent's template counterpart is a real directory (merge is never set through a symbolic
		// link), so this Lstat resolves no link.
		fi, err := v.lower.Lstat(n.rel)
		switch {
		case err == nil:
			if n.up == nil || fi.IsDir() { // a layer directory hides a template non-directory
				n.lo = fi
			}
		case errors.Is(err, fs.ErrNotExist):
		default:
			return node{}, false, fmt.Errorf("template /%s: %w", n.rel, err)
		}
	}
	if n.up == nil && n.lo == nil {
		return node{}, false, nil
	}
	n.merge = n.lo != nil && n.lo.IsDir() && (n.up == nil || n.up.kind == kindDir)
	return n, true, nil
}

// entry describes n.
func (v *View) entry(n *node) (Entry, error) {
	e := Entry{Path: "/" + n.rel}
	if n.up != nil && n.rel != "" {
		u := n.up
		e.Type, e.Mode, e.ModTime, e.Target, e.FromLayer = u.typ(), u.mode, u.modTime, u.target, true
		switch u.kind {
		case kindFile:
			e.Size = u.size
		case kindSymlink:
			e.Size = int64(len(u.target))
		}
		return e, nil
	}
	fi := n.lo
	e.Type, e.Mode, e.ModTime = typeOf(fi.Mode()), fi.Mode(), fi.ModTime()
	switch e.Type {
	case TypeFile:
		e.Size = fi.Size()
	case TypeSymlink:
		target, err := v.lower.Readlink(n.rel)
		if err != nil {
			return Entry{}, fmt.Errorf("template /%s: %w", n.rel, err)
		}
		e.Target, e.Size = target, int64(len(target))
	}
	return e, nil
}

// openLower opens the template's regular file at rel and reports its size.
func (v *View) openLower(rel string) (*os.File, int64, error) {
	// O_NONBLOCK: should the file have been swapped for a FIFO, the open must not hang.
	f, err := v.lower.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("template /%s is no longer a regular file: %w", rel, errdefs.ErrFailedPrecondition)
	}
	return f, fi.Size(), nil
}

// cleanPath checks a path given to a View (absolute, no NUL, no ".." component, at most MaxPathLen
// bytes) and returns it relative to the root, clean, "" for the root.
func cleanPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") || len(p) > MaxPathLen || strings.IndexByte(p, 0) >= 0 ||
		slices.Contains(strings.Split(p, "/"), "..") {
		return "", fmt.Errorf("path %q must be absolute, without NUL or \"..\": %w", p, errdefs.ErrInvalidArgument)
	}
	return strings.TrimPrefix(path.Clean(p), "/"), nil
}

// typeOf maps a file mode to an Entry type.
func typeOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return TypeFile
	case m.IsDir():
		return TypeDir
	case m&fs.ModeSymlink != 0:
		return TypeSymlink
	}
	return TypeOther
}

// join appends name to the relative path dir.
func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// lowerName is rel as os.Root wants it.
func lowerName(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}
