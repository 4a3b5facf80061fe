package airlock

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
)

// Paths inside a sandbox are absolute; the server rejects relative paths and ".." elements.
//
// Wherever these methods (and Exec, the process and stream methods) take a sandbox id, a session ID
// ("se_…") works too: the work goes to the session's current sandbox, which is resumed first if the
// session is paused and resumes automatically.

func pathQuery(path string) url.Values { return url.Values{"path": {path}} }

// ReadFile returns the contents of the file at path in the sandbox id: ReadFileLimit with the client's
// bound (DefaultMaxReadBytes unless WithMaxReadBytes). ReadFileStream does not hold the file in memory.
func (c *Client) ReadFile(ctx context.Context, id, path string) ([]byte, error) {
	return c.ReadFileLimit(ctx, id, path, c.maxRead)
}

// ReadFileLimit returns the contents of the file at path in the sandbox id if it holds at most max
// bytes, and otherwise fails with an error matching ErrTooLarge having read at most max+1 bytes: the
// bound holds while reading, so a file the sandbox grows (or makes sparse and huge) after a Stat
// cannot make it read more. max must be positive.
func (c *Client) ReadFileLimit(ctx context.Context, id, path string, max int64) ([]byte, error) {
	if max <= 0 {
		return nil, fmt.Errorf("read file %s in sandbox %s: the bound must be positive, not %d: %w", path, id, max, ErrInvalidArgument)
	}
	rc, err := c.ReadFileStream(ctx, id, path)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := readAllLimit(rc, max)
	if err != nil {
		return nil, fmt.Errorf("read file %s in sandbox %s: %w", path, id, err)
	}
	return b, nil
}

// ReadFileStream returns the contents of the file at path in the sandbox id as a stream. The caller must
// close it; ctx bounds the reading.
func (c *Client) ReadFileStream(ctx context.Context, id, path string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, request{method: http.MethodGet, path: workPath(id, "files"), query: pathQuery(path)})
	if err != nil {
		return nil, fmt.Errorf("read file %s in sandbox %s: %w", path, id, err)
	}
	return resp.Body, nil
}

// WriteFile atomically creates or replaces the file at path in the sandbox id with the contents of r,
// creating missing parent directories. mode gives the permission bits; 0 keeps an existing file's mode,
// or makes a new one 0644.
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader, mode fs.FileMode) (*FileInfo, error) {
	q := pathQuery(path)
	if perm := mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky); perm != 0 {
		q.Set("mode", fmt.Sprintf("%04o", unixMode(perm)))
	}
	if r == nil {
		r = http.NoBody
	}
	resp, err := c.do(ctx, request{method: http.MethodPut, path: workPath(id, "files"), query: q, body: r,
		contentType: "application/octet-stream"})
	if err != nil {
		return nil, fmt.Errorf("write file %s in sandbox %s: %w", path, id, err)
	}
	defer resp.Body.Close()
	var fi FileInfo
	if err := c.decodeJSON(resp.Body, &fi); err != nil {
		return nil, fmt.Errorf("write file %s in sandbox %s: %w", path, id, err)
	}
	return &fi, nil
}

// unixMode converts Go's mode bits to the octal bits of chmod(2).
func unixMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		u |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		u |= 0o1000
	}
	return u
}

// Stat describes path in the sandbox id, without following a final symlink.
func (c *Client) Stat(ctx context.Context, id, path string) (*FileInfo, error) {
	return callJSON[FileInfo](ctx, c, http.MethodGet, workPath(id, "files", "stat"), pathQuery(path), nil, "stat %s in sandbox %s", path, id)
}

// ListFiles returns the entries of the directory at path in the sandbox id.
func (c *Client) ListFiles(ctx context.Context, id, path string) (*FileList, error) {
	return callJSON[FileList](ctx, c, http.MethodGet, workPath(id, "files", "list"), pathQuery(path), nil, "list %s in sandbox %s", path, id)
}

// Mkdir creates the directory path, and any missing parents, in the sandbox id. An existing directory is
// not an error.
func (c *Client) Mkdir(ctx context.Context, id, path string) (*FileInfo, error) {
	return callJSON[FileInfo](ctx, c, http.MethodPost, workPath(id, "files", "mkdir"), nil, MkdirRequest{Path: path}, "mkdir %s in sandbox %s", path, id)
}

// Move moves or renames from to to in the sandbox id and describes it at its new place.
func (c *Client) Move(ctx context.Context, id, from, to string) (*FileInfo, error) {
	return callJSON[FileInfo](ctx, c, http.MethodPost, workPath(id, "files", "move"), nil, MoveRequest{From: from, To: to}, "move %s to %s in sandbox %s", from, to, id)
}

// Remove removes the file or empty directory at path in the sandbox id; with recursive, a whole tree.
func (c *Client) Remove(ctx context.Context, id, path string, recursive bool) error {
	q := pathQuery(path)
	if recursive {
		q.Set("recursive", "true")
	}
	return c.callNoAnswer(ctx, http.MethodDelete, workPath(id, "files"), q, nil, "remove %s in sandbox %s", path, id)
}

// DownloadTar returns a tar archive of the file or directory tree at path in the sandbox id, its entry
// names starting at path's base name. The caller must close it; ctx bounds the reading.
func (c *Client) DownloadTar(ctx context.Context, id, path string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, request{method: http.MethodGet, path: workPath(id, "files", "tar"), query: pathQuery(path)})
	if err != nil {
		return nil, fmt.Errorf("download %s from sandbox %s: %w", path, id, err)
	}
	return resp.Body, nil
}

// UploadTar extracts the tar archive read from r into the existing directory dir of the sandbox id.
func (c *Client) UploadTar(ctx context.Context, id, dir string, r io.Reader) error {
	resp, err := c.do(ctx, request{method: http.MethodPut, path: workPath(id, "files", "tar"), query: pathQuery(dir), body: r,
		contentType: "application/x-tar"})
	if err != nil {
		return fmt.Errorf("upload to %s in sandbox %s: %w", dir, id, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return nil
}
