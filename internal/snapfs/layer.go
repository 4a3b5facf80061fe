// Package snapfs is a read-only view of a sandbox's file system as a session snapshot saved it,
// without restoring the sandbox.
//
// A sandbox's root file system is an overlayfs: a read-only template directory (the lower layer) under
// a writable upper directory. A snapshot keeps the upper directory as a PAX tar archive (written by
// internal/runtime/gvisor: names relative to the upper root, directories ending in "/", whiteouts as
// character devices 0/0, opaque directories with the SCHILY.xattr.trusted.overlay.opaque=y record,
// hard links as tar.TypeLink). Load indexes such an archive into a Layer; NewView lays a Layer over
// the template directory the way overlayfs does; Diff compares two Views. LoadWith keeps only small
// files' contents in memory, and reads the archive again for the others when they are read.
//
// Everything that comes from outside is treated as hostile: archive contents come from the sandbox and
// paths from API users. Archive names must be clean and relative, paths given to a View must be
// absolute and clean of "..", the template is read through an os.Root so nothing resolves outside it,
// and no symbolic link is ever followed, in the layer or in the template: a path whose parent crosses
// a symbolic link is refused with errdefs.ErrInvalidArgument.
package snapfs

import (
	"archive/tar"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// opaqueRecord is the PAX record that marks an opaque directory: it hides the template directory
// under it entirely.
const opaqueRecord = "SCHILY.xattr.trusted.overlay.opaque"

// MaxPathLen bounds archive names, symbolic link targets and paths given to a View (Linux's PATH_MAX).
const MaxPathLen = 4096

// EntryOverhead is what each archive entry costs against Load's maxBytes on top of the length of its
// name and link target and the size of its contents: roughly what indexing it takes in memory.
const EntryOverhead = 256

// kind is the type of an entry of a Layer.
type kind uint8

const (
	kindDir kind = iota + 1
	kindFile
	kindSymlink
	kindOther    // device, FIFO
	kindWhiteout // a template entry deleted in the sandbox
)

// layerEntry is one entry of a Layer. Entries are never modified once Load returns.
type layerEntry struct {
	kind     kind
	mode     fs.FileMode
	modTime  time.Time
	target   string   // kindSymlink: the link's target, unresolved
	data     []byte   // kindFile: contents when held (shared between hard links), nil otherwise
	held     bool     // kindFile: data holds the contents
	size     int64    // kindFile: the contents' length
	sum      [32]byte // kindFile: the contents' SHA-256
	ord      int      // kindFile: the archive entry (counted from 0) holding the contents
	opaque   bool     // kindDir: hides the template directory under it
	children []string // kindDir: names of the entries directly inside, sorted
}

// typ reports the Entry.Type of e.
func (e *layerEntry) typ() string {
	switch e.kind {
	case kindDir:
		return TypeDir
	case kindFile:
		return TypeFile
	case kindSymlink:
		return TypeSymlink
	}
	return TypeOther
}

// Layer is the upper layer of one snapshot, indexed from its tar archive, with the contents of its
// regular files in memory (Load) or those of its small files only (LoadWith). A Layer is immutable
// and safe for concurrent use.
type Layer struct {
	entries map[string]*layerEntry // by clean relative name; "" is the root directory
	opts    LoadOptions
	bytes   int64 // what the index (and, for Load, the contents) costs against MaxIndexBytes
	held    int64 // contents held in memory, against MaxHeldBytes (LoadWith)
	ord     int   // archive entries read so far
}

// LoadOptions bound what LoadWith keeps in memory of a layer archive.
type LoadOptions struct {
	// MaxIndexBytes caps the index: for every entry, the length of its name and link target plus
	// EntryOverhead. Past it LoadWith fails with an error matching errdefs.ErrFailedPrecondition.
	MaxIndexBytes int64
	// MaxHeldBytes caps the contents of regular files held in memory, hard links counted once, and
	// MaxHeldFile the largest file held. Any other file is kept as its size and SHA-256 only: Diff
	// compares it by those, and View.ReadFile and View.Open read it from the archive again (Reopen).
	MaxHeldBytes, MaxHeldFile int64
	// Reopen reads the archive again from its start, for the contents of files not held. Nil: those
	// cannot be read (errdefs.ErrFailedPrecondition), only compared.
	Reopen func() (io.ReadCloser, error)

	// all holds every file's contents, charged to MaxIndexBytes, failing past it (Load).
	all bool
}

// Load reads a layer archive from r, once, to its end, and keeps everything needed to serve it,
// including the contents of regular files, in memory.
//
// maxBytes caps that memory: the contents of regular files (hard links counted once) plus, for every
// entry, the length of its name and link target and EntryOverhead. Past it Load fails with an error
// matching errdefs.ErrFailedPrecondition, as it does for an archive that is malformed or hostile: an
// absolute name, a ".." component, a name that is not clean, a name whose parent directory is not in
// the archive before it (the writer emits parents first), a duplicate, a hard link to anything but an
// earlier regular file, or an unsupported entry type. Errors reading r are returned wrapped as they are.
func Load(r io.Reader, maxBytes int64) (*Layer, error) {
	return LoadWith(r, LoadOptions{MaxIndexBytes: maxBytes, all: true})
}

// LoadWith reads a layer archive from r, once, to its end, as Load does, but holds in memory only the
// index and the contents of the files o allows (small ones, up to a total); of the others it keeps the
// size, the SHA-256 and where they are in the archive, so that the memory a Layer takes does not grow
// with what the sandbox wrote. It fails as Load does, and past o.MaxIndexBytes.
func LoadWith(r io.Reader, o LoadOptions) (*Layer, error) {
	l := &Layer{entries: map[string]*layerEntry{"": {kind: kindDir}}, opts: o}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, readError(err)
		}
		if err := l.add(tr, hdr); err != nil {
			return nil, err
		}
		l.ord++
	}
	for _, e := range l.entries {
		slices.Sort(e.children)
	}
	return l, nil
}

// add indexes the archive entry hdr, reading its contents from tr.
func (l *Layer) add(tr *tar.Reader, hdr *tar.Header) error {
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	dir, base := path.Split(name)
	parent := l.entries[strings.TrimSuffix(dir, "/")]
	if parent == nil || parent.kind != kindDir {
		return corrupt("archive entry %q comes before its parent directory or lies under a non-directory", hdr.Name)
	}
	if old := l.entries[name]; old != nil {
		if old.kind != kindDir || hdr.Typeflag != tar.TypeDir {
			return corrupt("archive entry %q appears twice", hdr.Name)
		}
		// A directory written twice keeps its entries and takes the later metadata.
		old.mode, old.modTime, old.opaque = hdr.FileInfo().Mode(), hdr.ModTime, hdr.PAXRecords[opaqueRecord] == "y"
		return nil
	}
	if err := l.charge(EntryOverhead + int64(len(name)+len(hdr.Linkname))); err != nil {
		return err
	}
	e := &layerEntry{mode: hdr.FileInfo().Mode(), modTime: hdr.ModTime}
	switch hdr.Typeflag {
	case tar.TypeDir:
		e.kind, e.opaque = kindDir, hdr.PAXRecords[opaqueRecord] == "y"
	case tar.TypeReg:
		e.kind, e.size, e.ord = kindFile, hdr.Size, l.ord
		if err := l.contents(tr, hdr, e); err != nil {
			return err
		}
	case tar.TypeLink:
		target, err := cleanName(hdr.Linkname)
		if err != nil {
			return err
		}
		first := l.entries[target]
		if first == nil || first.kind != kindFile {
			return corrupt("archive hard link %q → %q does not name an earlier regular file", hdr.Name, hdr.Linkname)
		}
		c := *first // a hard link shares its target's contents and metadata
		e = &c
	case tar.TypeSymlink:
		if hdr.Linkname == "" || len(hdr.Linkname) > MaxPathLen || strings.IndexByte(hdr.Linkname, 0) >= 0 {
			return corrupt("archive symbolic link %q has an invalid target", hdr.Name)
		}
		e.kind, e.target = kindSymlink, hdr.Linkname
	case tar.TypeChar:
		e.kind = kindOther
		if hdr.Devmajor == 0 && hdr.Devminor == 0 {
			e.kind = kindWhiteout
		}
	case tar.TypeBlock, tar.TypeFifo:
		e.kind = kindOther
	default:
		return corrupt("archive entry %q has unsupported type %q", hdr.Name, hdr.Typeflag)
	}
	l.entries[name] = e
	parent.children = append(parent.children, base)
	return nil
}

// contents reads the contents of the regular file entry hdr into e: the data if l holds it, and its
// SHA-256 either way.
func (l *Layer) contents(tr *tar.Reader, hdr *tar.Header, e *layerEntry) error {
	if hdr.Size < 0 {
		return corrupt("archive entry %q has a negative size", hdr.Name)
	}
	switch {
	case l.opts.all:
		if err := l.charge(hdr.Size); err != nil {
			return err
		}
		e.held = true
	case hdr.Size <= l.opts.MaxHeldFile && hdr.Size <= l.opts.MaxHeldBytes-l.held:
		l.held += hdr.Size
		e.held = true
	}
	h := sha256.New()
	var w io.Writer = h
	var buf bytesWriter
	if e.held {
		buf.b = make([]byte, 0, hdr.Size)
		w = io.MultiWriter(h, &buf)
	}
	// The tar reader ends the entry at hdr.Size: nothing past it is read, nothing of it held unless e is.
	if _, err := io.CopyN(w, tr, hdr.Size); err != nil {
		return readError(fmt.Errorf("archive entry %q: %w", hdr.Name, err))
	}
	e.data = buf.b
	h.Sum(e.sum[:0])
	return nil
}

// bytesWriter appends to a slice allocated to its final size.
type bytesWriter struct{ b []byte }

func (w *bytesWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// charge adds n bytes to what l's index costs and fails once that exceeds MaxIndexBytes.
func (l *Layer) charge(n int64) error {
	maxBytes := l.opts.MaxIndexBytes
	if n < 0 || n > maxBytes-l.bytes {
		return fmt.Errorf("snapshot layer is larger than %d bytes: %w", maxBytes, errdefs.ErrFailedPrecondition)
	}
	l.bytes += n
	return nil
}

// openEntry reads the archive again and returns a reader of the contents of e, a file l does not
// hold, checked against its size and SHA-256 as it is read. The caller closes it.
func (l *Layer) openEntry(e *layerEntry) (io.ReadCloser, error) {
	if l.opts.Reopen == nil {
		return nil, fmt.Errorf("the contents of a large file of this layer are not kept: %w", errdefs.ErrFailedPrecondition)
	}
	rc, err := l.opts.Reopen()
	if err != nil {
		return nil, fmt.Errorf("read snapshot layer again: %w", err)
	}
	tr := tar.NewReader(rc)
	for i := 0; ; i++ {
		hdr, err := tr.Next()
		if err != nil {
			rc.Close()
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, readError(fmt.Errorf("read snapshot layer again: %w", err))
		}
		if i < e.ord {
			continue
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Size != e.size {
			rc.Close()
			return nil, corrupt("archive entry %q is not what it was when the layer was indexed", hdr.Name)
		}
		return &checkedReader{r: tr, c: rc, left: e.size, want: e.sum, h: sha256.New()}, nil
	}
}

// checkedReader reads the contents of an archive entry read again and fails, at its end, if they are
// not what the index holds.
type checkedReader struct {
	r    io.Reader
	c    io.Closer
	left int64
	want [32]byte
	h    hash.Hash
}

func (c *checkedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		if [32]byte(c.h.Sum(nil)) != c.want {
			return 0, corrupt("a file's contents differ from when the layer was indexed")
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	c.left -= int64(n)
	if err == io.EOF && c.left > 0 {
		return n, readError(io.ErrUnexpectedEOF)
	}
	if err == io.EOF {
		err = nil
	}
	return n, err
}

func (c *checkedReader) Close() error { return c.c.Close() }

// cleanName checks that an archive name (or hard link target) is clean and relative, and returns it
// without a trailing slash.
func cleanName(name string) (string, error) {
	n := strings.TrimSuffix(name, "/")
	if n == "" || n == "." || len(n) > MaxPathLen || strings.HasPrefix(n, "/") || strings.IndexByte(n, 0) >= 0 ||
		path.Clean(n) != n || slices.Contains(strings.Split(n, "/"), "..") {
		return "", corrupt("archive name %q is not a clean relative path inside the layer", name)
	}
	return n, nil
}

// corrupt reports a malformed or hostile archive.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("corrupt snapshot layer: %s: %w", fmt.Sprintf(format, args...), errdefs.ErrFailedPrecondition)
}

// readError classifies an error from the tar reader: malformed or truncated archives are corrupt,
// anything else (the underlying reader failing) is passed on.
func readError(err error) error {
	if errors.Is(err, tar.ErrHeader) || errors.Is(err, tar.ErrFieldTooLong) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("corrupt snapshot layer: %w: %w", err, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("read snapshot layer: %w", err)
}
