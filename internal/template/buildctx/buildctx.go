// Package buildctx holds a template build's context: the tar a client sends, spooled, bounded and indexed,
// and the layers of the COPY steps made from it.
package buildctx

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// A build's context is a tar the client sends (the directory it builds from, its Dockerfile inside). It
// is spooled to a temporary file, bounded, and indexed once: every entry's name, type, mode and, for a
// file, the digest of its contents (for the cache keys of COPY steps). COPY then reads it again for the
// entries it takes. Only directories, regular files and symbolic links are taken; names must be clean
// relative paths.

// Max bounds a build's context.
const Max = 8 << 30

// maxContextEntries bounds the entries of a build's context.
const maxContextEntries = 1 << 20

// Context is a spooled, indexed build context.
type Context struct {
	f       *os.File
	entries map[string]ctxEntry // by clean name, "" for the root
	names   []string            // sorted
}

// ctxEntry is one entry of a build context.
type ctxEntry struct {
	typ    byte
	mode   int64
	size   int64
	link   string
	digest string // of a regular file's contents
}

// Spool reads the context tar r into a temporary file and indexes it.
func Spool(r io.Reader) (*Context, error) {
	f, err := os.CreateTemp("", "airlock-build-context-")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name()) // the open file is enough
	c := &Context{f: f, entries: map[string]ctxEntry{"": {typ: tar.TypeDir, mode: 0o755}}}
	n, err := io.Copy(f, io.LimitReader(r, Max+1))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("receive the build context: %w", err)
	}
	if n > Max {
		f.Close()
		return nil, fmt.Errorf("the build context is over %d GiB: %w", Max>>30, errdefs.ErrTooLarge)
	}
	if err := c.index(); err != nil {
		f.Close()
		return nil, err
	}
	return c, nil
}

func (c *Context) Close() error { return c.f.Close() }

// index reads the whole context once.
func (c *Context) index() error {
	err := c.walk(func(name string, h *tar.Header, r io.Reader) error {
		if len(c.entries) >= maxContextEntries {
			return fmt.Errorf("the build context has more than %d entries: %w", maxContextEntries, errdefs.ErrTooLarge)
		}
		e := ctxEntry{typ: h.Typeflag, mode: h.Mode & 0o7777, size: h.Size, link: h.Linkname}
		switch h.Typeflag {
		case tar.TypeReg:
			sum := sha256.New()
			if _, err := io.CopyN(sum, r, h.Size); err != nil {
				return fmt.Errorf("build context %s: %v: %w", name, err, errdefs.ErrInvalidArgument)
			}
			e.digest = hex.EncodeToString(sum.Sum(nil))
		case tar.TypeDir, tar.TypeSymlink:
		default:
			return fmt.Errorf("build context %s: only directories, regular files and symbolic links can be copied (type %q): %w", name, h.Typeflag, errdefs.ErrInvalidArgument)
		}
		c.entries[name] = e
		return nil
	})
	if err != nil {
		return err
	}
	// Directories a tar implies without entries of their own.
	for name := range c.entries {
		for d := path.Dir(name); d != "." && d != "/"; d = path.Dir(d) {
			if _, ok := c.entries[d]; !ok {
				c.entries[d] = ctxEntry{typ: tar.TypeDir, mode: 0o755}
			}
		}
	}
	for name := range c.entries {
		if name != "" {
			c.names = append(c.names, name)
		}
	}
	sort.Strings(c.names)
	return nil
}

// Name cleans a context tar's entry name; "" is the root.
func Name(n string) (string, error) {
	n = strings.TrimPrefix(strings.TrimSuffix(n, "/"), "./")
	if n == "." || n == "" {
		return "", nil
	}
	if path.IsAbs(n) || path.Clean(n) != n || n == ".." || strings.HasPrefix(n, "../") || strings.ContainsRune(n, 0) {
		return "", fmt.Errorf("build context entry %q: want a clean relative path: %w", n, errdefs.ErrInvalidArgument)
	}
	return n, nil
}

// readFile returns the context's regular file name, at most limit bytes.
func (c *Context) ReadFile(name string, limit int64) ([]byte, error) {
	e, ok := c.entries[name]
	if !ok || e.typ != tar.TypeReg {
		return nil, fmt.Errorf("%s: no such file in the build context: %w", name, errdefs.ErrInvalidArgument)
	}
	if e.size > limit {
		return nil, fmt.Errorf("%s is over %d bytes: %w", name, limit, errdefs.ErrTooLarge)
	}
	var out []byte
	err := c.walk(func(n string, h *tar.Header, r io.Reader) error {
		if n != name {
			return nil
		}
		b, err := io.ReadAll(io.LimitReader(r, limit))
		out = b
		return err
	})
	return out, err
}

// walk calls fn for each entry of the context but its root, in its tar's order, with its clean name.
func (c *Context) walk(fn func(name string, h *tar.Header, r io.Reader) error) error {
	if _, err := c.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	tr := tar.NewReader(c.f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("the build context is not a tar: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		name, err := Name(h.Name)
		if err != nil {
			return err
		}
		if name == "" {
			continue
		}
		if err := fn(name, h, tr); err != nil {
			return err
		}
	}
}

// Plan is what COPY sources matched: context entries and where each goes under the
// destination.
type Plan struct {
	// to maps a context entry to its path in the image (absolute, clean).
	to map[string]string
	// dirs are the directories the copy makes that are not context entries (the destination itself).
	dirs []string
}

// plan resolves COPY sources (relative to the context's root; globs as path.Match) into dest (absolute,
// clean; a directory when it ends in "/" or there are several sources or a source is a directory),
// Docker's way: a directory source copies what is under it, not itself.
func (c *Context) Plan(srcs []string, dest string, destIsDir bool) (Plan, error) {
	p := Plan{to: map[string]string{}}
	var matched []string
	for _, src := range srcs {
		pat := strings.TrimPrefix(path.Clean("/"+src), "/")
		var ms []string
		if strings.ContainsAny(pat, "*?[") {
			for _, n := range c.names {
				if ok, err := path.Match(pat, n); err != nil {
					return p, fmt.Errorf("COPY source %q: %v: %w", src, err, errdefs.ErrInvalidArgument)
				} else if ok {
					ms = append(ms, n)
				}
			}
		} else if _, ok := c.entries[pat]; ok {
			ms = []string{pat}
		}
		if len(ms) == 0 {
			return p, fmt.Errorf("COPY source %q: no such file or directory in the build context: %w", src, errdefs.ErrInvalidArgument)
		}
		matched = append(matched, ms...)
	}
	if len(matched) > 1 {
		destIsDir = true
	}
	for _, m := range matched {
		e := c.entries[m]
		if e.typ == tar.TypeDir {
			// What is under it goes under dest.
			p.dirs = append(p.dirs, dest)
			prefix := m + "/"
			if m == "" {
				prefix = ""
			}
			for _, n := range c.names {
				if strings.HasPrefix(n, prefix) {
					p.to[n] = path.Join(dest, strings.TrimPrefix(n, prefix))
				}
			}
			continue
		}
		if destIsDir {
			p.dirs = append(p.dirs, dest)
			p.to[m] = path.Join(dest, path.Base(m))
		} else {
			p.to[m] = dest
		}
	}
	return p, nil
}

// digest is the cache input of a copy plan: every entry's source, destination, type, mode, link and
// contents.
func (c *Context) Digest(p Plan) string {
	h := sha256.New()
	srcs := make([]string, 0, len(p.to))
	for s := range p.to {
		srcs = append(srcs, s)
	}
	sort.Strings(srcs)
	for _, s := range srcs {
		e := c.entries[s]
		fmt.Fprintf(h, "%q %q %c %o %q %s\n", s, p.to[s], e.typ, e.mode, e.link, e.digest)
	}
	dirs := append([]string(nil), p.dirs...)
	sort.Strings(dirs)
	fmt.Fprintf(h, "dirs %q\n", dirs)
	return hex.EncodeToString(h.Sum(nil))
}

// writeLayer writes the image layer of plan p to w: the destination directories and every planned entry
// under its destination, owned by uid:gid, with mode chmod where set (else the context's).
func (c *Context) WriteLayer(w io.Writer, p Plan, uid, gid int, chmod int64) error {
	tw := tar.NewWriter(w)
	written := map[string]bool{}
	dir := func(name string, mode int64) error {
		if written[name] || name == "" {
			return nil
		}
		written[name] = true
		if chmod >= 0 {
			mode = chmod
		}
		return tw.WriteHeader(&tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: mode, Uid: uid, Gid: gid, Format: tar.FormatPAX})
	}
	// Parents first: the destinations, then each entry's directories as the walk meets them.
	dirs := append([]string(nil), p.dirs...)
	sort.Strings(dirs)
	for _, d := range dirs {
		rel := strings.TrimPrefix(d, "/")
		for _, a := range ancestors(rel) {
			if err := dir(a, 0o755); err != nil {
				return err
			}
		}
	}
	err := c.walk(func(name string, h *tar.Header, r io.Reader) error {
		to, ok := p.to[name]
		if !ok {
			return nil
		}
		rel := strings.TrimPrefix(to, "/")
		as := ancestors(rel)
		for _, a := range as[:len(as)-1] {
			if err := dir(a, 0o755); err != nil {
				return err
			}
		}
		mode := h.Mode & 0o7777
		switch h.Typeflag {
		case tar.TypeDir:
			return dir(rel, mode)
		case tar.TypeSymlink:
			return tw.WriteHeader(&tar.Header{Name: rel, Typeflag: tar.TypeSymlink, Linkname: h.Linkname, Mode: 0o777, Uid: uid, Gid: gid, Format: tar.FormatPAX})
		}
		if chmod >= 0 {
			mode = chmod
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Typeflag: tar.TypeReg, Mode: mode, Size: h.Size, Uid: uid, Gid: gid, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := io.CopyN(tw, r, h.Size)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// ancestors returns rel's directories and rel itself, top first: "a/b/c" → a, a/b, a/b/c.
func ancestors(rel string) []string {
	if rel == "" {
		return nil
	}
	parts := strings.Split(rel, "/")
	out := make([]string, len(parts))
	for i := range parts {
		out[i] = strings.Join(parts[:i+1], "/")
	}
	return out
}

// ParseChown reads COPY --chown: UID[:GID], or root / user (the sandbox user, 1000) by name.
func ParseChown(s string) (uid, gid int, err error) {
	if s == "" {
		return 0, 0, nil
	}
	u, g, hasGroup := strings.Cut(s, ":")
	id := func(v string) (int, error) {
		switch v {
		case "root":
			return 0, nil
		case "user":
			return 1000, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1<<31-2 {
			return 0, fmt.Errorf("--chown=%s: want UID[:GID] (or root, user): %w", s, errdefs.ErrInvalidArgument)
		}
		return n, nil
	}
	if uid, err = id(u); err != nil {
		return 0, 0, err
	}
	gid = uid
	if hasGroup {
		if gid, err = id(g); err != nil {
			return 0, 0, err
		}
	}
	return uid, gid, nil
}

// WriteDirs writes a layer holding dir (absolute) and its parents, 0755 and root's (copied into an
// image, those it has keep their own).
func WriteDirs(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	for _, a := range ancestors(strings.TrimPrefix(path.Clean(dir), "/")) {
		if err := tw.WriteHeader(&tar.Header{Name: a + "/", Typeflag: tar.TypeDir, Mode: 0o755, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	return tw.Close()
}
