package daemon

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// File operations run as the daemon (root in a sandbox) and chown what they create to the request's
// user. Paths were checked by proto (absolute, no "..", no NUL) before they get here.

func fileInfo(path string, fi fs.FileInfo) proto.FileInfo {
	info := proto.FileInfo{
		Name:    fi.Name(),
		Path:    path,
		Size:    fi.Size(),
		Mode:    uint32(fi.Mode().Perm()),
		ModTime: fi.ModTime(),
	}
	m := fi.Mode()
	if m&fs.ModeSetuid != 0 {
		info.Mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		info.Mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		info.Mode |= 0o1000
	}
	switch {
	case m.IsRegular():
		info.Type = proto.TypeFile
	case m.IsDir():
		info.Type = proto.TypeDir
	case m&fs.ModeSymlink != 0:
		info.Type = proto.TypeSymlink
		info.LinkTarget, _ = os.Readlink(path)
	default:
		info.Type = proto.TypeOther
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		info.UID, info.GID = int(st.Uid), int(st.Gid)
	}
	return info
}

func statPath(path string) (proto.FileInfo, error) {
	path = filepath.Clean(path)
	fi, err := os.Lstat(path)
	if err != nil {
		return proto.FileInfo{}, fmt.Errorf("stat: %w", mapErrno(err))
	}
	return fileInfo(path, fi), nil
}

// chown gives path to id unless the daemon already is id and cannot change owners anyway.
func chown(path string, id identity) error {
	if os.Geteuid() != 0 && id.uid == os.Geteuid() && id.gid == os.Getegid() {
		return nil
	}
	if err := os.Lchown(path, id.uid, id.gid); err != nil {
		return fmt.Errorf("chown: %w", mapErrno(err))
	}
	return nil
}

func (s *server) readFile(st *stream, req *proto.ReadFileRequest) (proto.ReadFileResult, error) {
	path := filepath.Clean(req.Path)
	f, err := os.Open(path)
	if err != nil {
		return proto.ReadFileResult{}, fmt.Errorf("read file: %w", mapErrno(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return proto.ReadFileResult{}, fmt.Errorf("read file: %w", mapErrno(err))
	}
	if fi.IsDir() {
		return proto.ReadFileResult{}, invalidf("read file %s: is a directory", path)
	}
	if !fi.Mode().IsRegular() {
		return proto.ReadFileResult{}, invalidf("read file %s: not a regular file", path)
	}
	var r io.Reader = f
	if req.Offset > 0 {
		if _, err := f.Seek(req.Offset, io.SeekStart); err != nil {
			return proto.ReadFileResult{}, fmt.Errorf("read file %s: seek: %w", path, mapErrno(err))
		}
	}
	if req.Length > 0 {
		r = io.LimitReader(f, req.Length)
	}
	var sent int64
	for {
		n, err := st.send.Acquire(st.ctx, proto.ChunkSize)
		if err != nil {
			return proto.ReadFileResult{}, err
		}
		payload := proto.AppendData(bufs.Get(proto.DataHeaderSize + n)[:0], proto.ChannelStdout, sent, nil)
		got, rerr := io.ReadFull(r, payload[proto.DataHeaderSize:proto.DataHeaderSize+n])
		if got == 0 {
			st.send.Unreserve(n)
		} else {
			st.send.Release(n - got)
		}
		if got > 0 {
			err := st.writeDataPayload(payload[:proto.DataHeaderSize+got])
			bufs.Put(payload)
			if err != nil {
				return proto.ReadFileResult{}, err
			}
			sent += int64(got)
		} else {
			bufs.Put(payload)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			return proto.ReadFileResult{Size: sent}, nil
		}
		if rerr != nil {
			return proto.ReadFileResult{}, fmt.Errorf("read file %s: %w", path, mapErrno(rerr))
		}
	}
}

// writeFile writes the client's data to a temporary file next to the target, syncs it and renames it
// over the target, so readers see the old or the new contents, never a mix.
func (s *server) writeFile(st *stream, req *proto.WriteFileRequest) (_ proto.FileInfo, err error) {
	path := filepath.Clean(req.Path)
	if path == "/" {
		return proto.FileInfo{}, invalidf("write file /: is a directory")
	}
	id, err := s.lookupUser(req.User)
	if err != nil {
		return proto.FileInfo{}, err
	}
	dir := filepath.Dir(path)
	if err := checkDir(dir, "parent directory"); err != nil {
		return proto.FileInfo{}, fmt.Errorf("write file %s: %w", path, err)
	}
	mode := fs.FileMode(req.Mode)
	if fi, err := os.Lstat(path); err == nil {
		if fi.IsDir() {
			return proto.FileInfo{}, invalidf("write file %s: is a directory", path)
		}
		if mode == 0 && fi.Mode().IsRegular() {
			mode = fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		}
	}
	if mode == 0 {
		mode = 0o644
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".airlock-tmp-*")
	if err != nil {
		return proto.FileInfo{}, fmt.Errorf("write file %s: create temporary file: %w", path, mapErrno(err))
	}
	tmpName := tmp.Name()
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmpName)
		}
	}()
	if err := chown(tmpName, id); err != nil {
		return proto.FileInfo{}, fmt.Errorf("write file %s: %w", path, err)
	}
	if err := tmp.Chmod(unixMode(mode)); err != nil {
		return proto.FileInfo{}, fmt.Errorf("write file %s: chmod: %w", path, mapErrno(err))
	}
	var size int64
	for {
		b, buf, rerr := st.readBuf(st.ctx)
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return proto.FileInfo{}, rerr
		}
		size += int64(len(b))
		if size > s.cfg.MaxFileSize {
			return proto.FileInfo{}, fmt.Errorf("write file %s: larger than %d bytes: %w", path, s.cfg.MaxFileSize, errdefs.ErrTooLarge)
		}
		_, err := tmp.Write(b)
		bufs.Put(buf)
		if err != nil {
			return proto.FileInfo{}, fmt.Errorf("write file %s: %w", path, mapErrno(err))
		}
	}
	if err := tmp.Sync(); err != nil {
		return proto.FileInfo{}, fmt.Errorf("write file %s: sync: %w", path, mapErrno(err))
	}
	if err := tmp.Close(); err != nil {
		return proto.FileInfo{}, fmt.Errorf("write file %s: close: %w", path, mapErrno(err))
	}
	if err := os.Rename(tmpName, path); err != nil {
		return proto.FileInfo{}, fmt.Errorf("write file %s: rename: %w", path, mapErrno(err))
	}
	syncDir(dir)
	return statPath(path)
}

// unixMode converts chmod-style bits held in a FileMode to the FileMode os.Chmod expects.
func unixMode(m fs.FileMode) fs.FileMode {
	out := m & fs.ModePerm
	if m&0o4000 != 0 || m&fs.ModeSetuid != 0 {
		out |= fs.ModeSetuid
	}
	if m&0o2000 != 0 || m&fs.ModeSetgid != 0 {
		out |= fs.ModeSetgid
	}
	if m&0o1000 != 0 || m&fs.ModeSticky != 0 {
		out |= fs.ModeSticky
	}
	return out
}

// syncDir makes a rename in dir durable; errors are ignored (some file systems cannot sync directories).
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// checkDir reports ErrNotFound if dir does not exist and ErrInvalidArgument if it is not a directory.
func checkDir(dir, what string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, dir, mapErrno(err))
	}
	if !fi.IsDir() {
		return invalidf("%s %s is not a directory", what, dir)
	}
	return nil
}

func (s *server) listDir(st *stream, req *proto.ListDirRequest) (proto.ListResult, error) {
	path := filepath.Clean(req.Path)
	if err := checkDir(path, "list"); err != nil {
		return proto.ListResult{}, err
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return proto.ListResult{}, fmt.Errorf("list %s: %w", path, mapErrno(err))
	}
	j := &jsonLines{st: st}
	for _, e := range entries {
		p := filepath.Join(path, e.Name())
		fi, err := os.Lstat(p)
		if err != nil {
			continue // removed meanwhile
		}
		if err := j.add(fileInfo(p, fi)); err != nil {
			return proto.ListResult{}, err
		}
	}
	if err := j.flush(); err != nil {
		return proto.ListResult{}, err
	}
	return proto.ListResult{Count: j.count}, nil
}

func (s *server) mkdir(req *proto.MkdirRequest) error {
	id, err := s.lookupUser(req.User)
	if err != nil {
		return err
	}
	mode := fs.FileMode(req.Mode)
	if mode == 0 {
		mode = 0o755
	}
	return mkdirAll(filepath.Clean(req.Path), unixMode(mode), id)
}

// mkdirAll creates path and its missing parents with mode, owned by id.
func mkdirAll(path string, mode fs.FileMode, id identity) error {
	cur := "/"
	for _, el := range strings.Split(path, "/") {
		if el == "" {
			continue
		}
		cur = filepath.Join(cur, el)
		fi, err := os.Stat(cur)
		if err == nil {
			if !fi.IsDir() {
				return invalidf("mkdir %s: %s exists and is not a directory", path, cur)
			}
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("mkdir %s: %w", path, mapErrno(err))
		}
		if err := os.Mkdir(cur, mode); err != nil {
			if errors.Is(err, fs.ErrExist) {
				continue // created concurrently
			}
			return fmt.Errorf("mkdir %s: %w", path, mapErrno(err))
		}
		if err := os.Chmod(cur, mode); err != nil { // undo the umask
			return fmt.Errorf("mkdir %s: %w", path, mapErrno(err))
		}
		if err := chown(cur, id); err != nil {
			return fmt.Errorf("mkdir %s: %w", path, err)
		}
	}
	return nil
}

func (s *server) move(req *proto.MoveRequest) error {
	from, to := filepath.Clean(req.From), filepath.Clean(req.To)
	if from == "/" || to == "/" {
		return invalidf("move %s to %s: cannot move /", from, to)
	}
	if to == from || strings.HasPrefix(to, from+"/") {
		return invalidf("move %s to %s: destination is inside the source", from, to)
	}
	if _, err := os.Lstat(from); err != nil {
		return fmt.Errorf("move: source: %w", mapErrno(err))
	}
	if err := checkDir(filepath.Dir(to), "destination directory"); err != nil {
		return fmt.Errorf("move %s: %w", from, err)
	}
	err := os.Rename(from, to)
	if errors.Is(err, unix.EXDEV) {
		err = moveAcrossDevices(from, to)
	}
	if err != nil {
		return fmt.Errorf("move %s to %s: %w", from, to, mapErrno(err))
	}
	return nil
}

// moveAcrossDevices copies from to a temporary name next to to, renames it into place and removes from.
func moveAcrossDevices(from, to string) error {
	if fi, err := os.Lstat(to); err == nil && fi.IsDir() {
		return fmt.Errorf("destination %s exists: %w", to, errdefs.ErrAlreadyExists)
	}
	tmp := filepath.Join(filepath.Dir(to), "."+filepath.Base(to)+".airlock-move-"+newProcessID())
	if err := copyTree(from, tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, to); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	return os.RemoveAll(from)
}

// copyTree copies from to to (which must not exist), keeping modes, owners and symlinks.
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			if err := os.Mkdir(dst, fi.Mode().Perm()); err != nil {
				return err
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, dst); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			if err := copyFile(p, dst, fi.Mode()); err != nil {
				return err
			}
		default:
			return invalidf("cannot copy %s across devices: not a file, directory or symlink", p)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			os.Lchown(dst, int(st.Uid), int(st.Gid))
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			os.Chmod(dst, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
			os.Chtimes(dst, fi.ModTime(), fi.ModTime())
		}
		return nil
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode.Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func removePath(req *proto.RemoveRequest) error {
	path := filepath.Clean(req.Path)
	if path == "/" {
		return invalidf("refusing to remove /")
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("remove: %w", mapErrno(err))
	}
	if fi.IsDir() && req.Recursive {
		if err := os.RemoveAll(path); err != nil {
			return fmt.Errorf("remove %s: %w", path, mapErrno(err))
		}
		return nil
	}
	if err := os.Remove(path); err != nil {
		if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("remove %s: directory not empty (set recursive to remove it and its contents): %w",
				path, errdefs.ErrFailedPrecondition)
		}
		return fmt.Errorf("remove %s: %w", path, mapErrno(err))
	}
	return nil
}

// dataWriter is an io.Writer that sends stdout data frames.
type dataWriter struct {
	st  *stream
	off int64
}

func (w *dataWriter) Write(b []byte) (int, error) {
	if err := w.st.sendData(proto.ChannelStdout, w.off, b); err != nil {
		return 0, err
	}
	w.off += int64(len(b))
	return len(b), nil
}

// tarDownload streams a tar archive of the request's path; entry names start at the path's base name.
func (s *server) tarDownload(st *stream, req *proto.TarDownloadRequest) error {
	root := filepath.Clean(req.Path)
	if _, err := os.Lstat(root); err != nil {
		return fmt.Errorf("tar %s: %w", root, mapErrno(err))
	}
	base := filepath.Base(root)
	if root == "/" {
		base = "."
	}
	bw := &chunkWriter{w: &dataWriter{st: st}, buf: make([]byte, 0, proto.ChunkSize)}
	tw := tar.NewWriter(bw)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != root && errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile
			}
			return err
		}
		if err := st.ctx.Err(); err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !fi.Mode().IsRegular() && !fi.IsDir() {
			return nil // sockets, devices and pipes are not archived
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(filepath.Join(base, rel))
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.CopyN(tw, f, hdr.Size); err != nil {
			return fmt.Errorf("%s changed while archiving: %w", p, err)
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = bw.flush()
	}
	if err != nil {
		if st.ctx.Err() != nil {
			return st.ctx.Err()
		}
		return fmt.Errorf("tar %s: %w", root, mapErrno(err))
	}
	return nil
}

// chunkWriter batches small writes into chunks.
type chunkWriter struct {
	w   io.Writer
	buf []byte
}

func (c *chunkWriter) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		k := copy(c.buf[len(c.buf):cap(c.buf)], b)
		c.buf = c.buf[:len(c.buf)+k]
		b = b[k:]
		if len(c.buf) == cap(c.buf) {
			if err := c.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (c *chunkWriter) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.w.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}

// tarUpload extracts the client's tar archive into an existing directory. Entry names must be relative
// without "..", symlinks must resolve inside the directory, and extraction never follows a symlink:
// an existing symlink in the way is replaced, one among the parents of an entry rejects the entry.
// Extraction stops at the first bad entry; entries before it stay.
func (s *server) tarUpload(st *stream, req *proto.TarUploadRequest) error {
	id, err := s.lookupUser(req.User)
	if err != nil {
		return err
	}
	dir := filepath.Clean(req.Dir)
	if err := checkDir(dir, "tar upload into"); err != nil {
		return err
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("tar upload into %s: %w", dir, mapErrno(err))
	}
	x := &extractor{root: root, id: id, maxSize: s.cfg.MaxFileSize}
	tr := tar.NewReader(st.reader())
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if st.ctx.Err() != nil {
				return st.ctx.Err()
			}
			return invalidf("tar upload into %s: read archive: %v", dir, err)
		}
		if err := x.extract(hdr, tr); err != nil {
			if st.ctx.Err() != nil {
				return st.ctx.Err()
			}
			return fmt.Errorf("tar upload into %s: %w", dir, err)
		}
	}
}

type extractor struct {
	root    string // real path of the target directory
	id      identity
	maxSize int64
}

// entryPath validates a name from the archive and returns its cleaned relative form.
func entryPath(name string) (string, error) {
	if name == "" || strings.IndexByte(name, 0) >= 0 {
		return "", invalidf("entry %q: empty or contains NUL", name)
	}
	if strings.HasPrefix(name, "/") {
		return "", invalidf("entry %q: absolute names are not allowed", name)
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." {
			return "", invalidf("entry %q: \"..\" elements are not allowed", name)
		}
	}
	return filepath.Clean(name), nil
}

// inside reports whether p (clean, absolute) is root or below it.
func (x *extractor) inside(p string) bool {
	return p == x.root || strings.HasPrefix(p, x.root+"/") || x.root == "/"
}

// prepareParents creates the missing parents of rel and checks that none of them is a symlink.
func (x *extractor) prepareParents(rel string) error {
	cur := x.root
	parent := filepath.Dir(rel)
	if parent == "." {
		return nil
	}
	for _, el := range strings.Split(parent, "/") {
		cur = filepath.Join(cur, el)
		fi, err := os.Lstat(cur)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(cur, 0o755); err != nil {
				return mapErrno(err)
			}
			if err := chown(cur, x.id); err != nil {
				return err
			}
		case err != nil:
			return mapErrno(err)
		case fi.Mode()&fs.ModeSymlink != 0:
			return invalidf("entry %q: parent %s is a symlink", rel, cur)
		case !fi.IsDir():
			return invalidf("entry %q: parent %s is not a directory", rel, cur)
		}
	}
	return nil
}

// clearPath removes a non-directory at p so that a new entry never writes through a symlink.
func clearPath(p string) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return mapErrno(err)
	}
	if fi.IsDir() {
		return fmt.Errorf("%s exists and is a directory: %w", p, errdefs.ErrAlreadyExists)
	}
	return mapErrno(os.Remove(p))
}

func (x *extractor) extract(hdr *tar.Header, r io.Reader) error {
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader, tar.TypeXHeader, tar.TypeGNULongName, tar.TypeGNULongLink:
		return nil // metadata, applied by the reader
	}
	rel, err := entryPath(hdr.Name)
	if err != nil {
		return err
	}
	if rel == "." {
		return nil // the target directory itself
	}
	target := filepath.Join(x.root, rel)
	if err := x.prepareParents(rel); err != nil {
		return err
	}
	mode := unixMode(fs.FileMode(hdr.Mode) & 0o7777)
	switch hdr.Typeflag {
	case tar.TypeDir:
		fi, err := os.Lstat(target)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(target, 0o700); err != nil {
				return mapErrno(err)
			}
		case err != nil:
			return mapErrno(err)
		case !fi.IsDir():
			if err := clearPath(target); err != nil {
				return err
			}
			if err := os.Mkdir(target, 0o700); err != nil {
				return mapErrno(err)
			}
		}
		if err := chown(target, x.id); err != nil {
			return err
		}
		return mapErrno(os.Chmod(target, mode))
	case tar.TypeReg:
		if hdr.Size > x.maxSize {
			return fmt.Errorf("entry %q: %d bytes, more than %d: %w", hdr.Name, hdr.Size, x.maxSize, errdefs.ErrTooLarge)
		}
		if err := clearPath(target); err != nil {
			return err
		}
		f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return mapErrno(err)
		}
		if _, err := io.CopyN(f, r, hdr.Size); err != nil {
			f.Close()
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		if err := f.Close(); err != nil {
			return mapErrno(err)
		}
		if err := chown(target, x.id); err != nil {
			return err
		}
		if err := os.Chmod(target, mode); err != nil {
			return mapErrno(err)
		}
		if !hdr.ModTime.IsZero() {
			os.Chtimes(target, hdr.ModTime, hdr.ModTime)
		}
		return nil
	case tar.TypeSymlink:
		ln := hdr.Linkname
		if ln == "" || strings.IndexByte(ln, 0) >= 0 {
			return invalidf("symlink %q: empty or NUL target", hdr.Name)
		}
		resolved := ln
		if !filepath.IsAbs(ln) {
			resolved = filepath.Join(filepath.Dir(target), ln)
		}
		resolved = filepath.Clean(resolved)
		if !x.inside(resolved) {
			return invalidf("symlink %q -> %q points outside the target directory", hdr.Name, ln)
		}
		if err := clearPath(target); err != nil {
			return err
		}
		if err := os.Symlink(ln, target); err != nil {
			return mapErrno(err)
		}
		return chown(target, x.id)
	case tar.TypeLink:
		lrel, err := entryPath(hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hard link %q: %w", hdr.Name, err)
		}
		if err := x.prepareParents(lrel); err != nil {
			return fmt.Errorf("hard link %q: %w", hdr.Name, err)
		}
		src := filepath.Join(x.root, lrel)
		fi, err := os.Lstat(src)
		if err != nil {
			return fmt.Errorf("hard link %q: %w", hdr.Name, mapErrno(err))
		}
		if !fi.Mode().IsRegular() {
			return invalidf("hard link %q -> %q: target is not a regular file", hdr.Name, hdr.Linkname)
		}
		if err := clearPath(target); err != nil {
			return err
		}
		return mapErrno(os.Link(src, target))
	}
	return invalidf("entry %q: unsupported type %q", hdr.Name, string(hdr.Typeflag))
}
