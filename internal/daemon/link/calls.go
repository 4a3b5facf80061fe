package link

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// Ping checks that the daemon answers.
func (c *Client) Ping(ctx context.Context) error {
	return c.call(ctx, proto.OpPing, &proto.PingRequest{}, nil)
}

// Quiesce asks the daemon to let go of its host sockets for a checkpoint: it answers, then closes this
// connection (Done fires) and its listening socket until the sandbox gets the wake signal
// (runtime.WakeSignal). The client is unusable afterwards; dial again once the daemon listens.
func (c *Client) Quiesce(ctx context.Context) error {
	if err := c.call(ctx, proto.OpQuiesce, &proto.QuiesceRequest{}, nil); err != nil {
		return err
	}
	select {
	case <-c.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SetIdentity gives the sandbox the identity req (see proto.OpIdentity). A daemon older than the
// operation answers errdefs.ErrInvalidArgument (an unknown op).
func (c *Client) SetIdentity(ctx context.Context, req proto.IdentityRequest) error {
	return c.call(ctx, proto.OpIdentity, &req, nil)
}

// Info reports the daemon's version, uptime and process count.
func (c *Client) Info(ctx context.Context) (proto.Info, error) {
	var info proto.Info
	err := c.call(ctx, proto.OpInfo, &proto.InfoRequest{}, &info)
	return info, err
}

// maxExecOutput bounds what Exec accumulates per stream when the request sets no MaxOutput, whatever
// the daemon sends.
const maxExecOutput = 64 << 20

// Exec runs a process to completion and returns its exit status and output (each stream capped at
// req.MaxOutput, or the daemon's limit; see ExecResult's truncated flags). req.Stdin, if non-nil, is
// the process's stdin. A non-zero exit code is not an error. Canceling ctx kills the process.
func (c *Client) Exec(ctx context.Context, req proto.ExecRequest) (proto.ExecResult, error) {
	req.HasStdin = req.Stdin != nil
	st, err := c.open(proto.OpExec, &req)
	if err != nil {
		return proto.ExecResult{}, err
	}

	sendDone := make(chan struct{})
	if req.HasStdin {
		go func() { // owner: Exec; ends when stdin is sent or the call ends (its window closes)
			defer close(sendDone)
			var off int64
			if st.sendData(ctx, &off, req.Stdin) == nil {
				st.closeSend()
			}
		}()
	} else {
		close(sendDone)
	}
	defer func() { st.abandon(); <-sendDone }()

	limit := int64(maxExecOutput)
	if req.MaxOutput > 0 {
		limit = req.MaxOutput
	}
	var outs [2]bytes.Buffer
	for {
		it, err := st.next(ctx)
		if err != nil {
			return proto.ExecResult{}, err
		}
		switch it.kind {
		case itemData:
			i := 0
			if it.data.Channel == proto.ChannelStderr {
				i = 1
			}
			if room := limit - int64(outs[i].Len()); room > 0 {
				outs[i].Write(it.data.Bytes[:min(int64(len(it.data.Bytes)), room)])
			}
			it.release()
		case itemResponse:
			var res proto.ExecResult
			if err := st.decodeResponse(it.resp, &res); err != nil {
				return proto.ExecResult{}, err
			}
			res.Stdout, res.Stderr = outs[0].Bytes(), outs[1].Bytes()
			return res, nil
		}
	}
}

// ListProcesses lists the tracked processes, running and recently exited, in start order.
func (c *Client) ListProcesses(ctx context.Context) ([]proto.ProcessInfo, error) {
	var out []proto.ProcessInfo
	err := c.listCall(ctx, proto.OpListProcesses, &proto.ListProcessesRequest{}, func(line []byte) error {
		var p proto.ProcessInfo
		if err := json.Unmarshal(line, &p); err != nil {
			return err
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

// SignalProcess sends sig (a name like "SIGTERM" or "TERM", or a number) to a tracked process.
func (c *Client) SignalProcess(ctx context.Context, id, sig string) error {
	return c.call(ctx, proto.OpSignal, &proto.SignalRequest{ID: id, Signal: sig}, nil)
}

// SignalProcessGroup sends sig to the process group of a tracked process.
func (c *Client) SignalProcessGroup(ctx context.Context, id, sig string) error {
	return c.call(ctx, proto.OpSignal, &proto.SignalRequest{ID: id, Signal: sig, Group: true}, nil)
}

// ResizeProcess changes the terminal size of a tracked PTY process.
func (c *Client) ResizeProcess(ctx context.Context, id string, rows, cols uint16) error {
	return c.call(ctx, proto.OpResize, &proto.ResizeRequest{ID: id, Rows: rows, Cols: cols}, nil)
}

// WaitProcess waits until a tracked process exits and reports how it ended. Unlike Process.Wait it
// does not wait for output delivery.
func (c *Client) WaitProcess(ctx context.Context, id string) (proto.ExitStatus, error) {
	var st proto.ExitStatus
	err := c.call(ctx, proto.OpWait, &proto.WaitRequest{ID: id}, &st)
	return st, err
}

// ReadFile streams the regular file at path into w.
func (c *Client) ReadFile(ctx context.Context, path string, w io.Writer) error {
	return c.download(ctx, proto.OpReadFile, &proto.ReadFileRequest{Path: path}, w)
}

// TarDownload streams a tar archive of path (a file, or a directory tree) into w. Entry names start
// with path's base name.
func (c *Client) TarDownload(ctx context.Context, path string, w io.Writer) error {
	return c.download(ctx, proto.OpTarDownload, &proto.TarDownloadRequest{Path: path}, w)
}

// WriteFileOptions are the optional settings of WriteFile.
type WriteFileOptions struct {
	// Mode is the permission bits; 0 keeps an existing file's mode, or 0644.
	Mode uint32
	// User owns the file; empty means the daemon's default non-root user.
	User string
}

// WriteFile atomically replaces (or creates) the file at path with the contents of r: the daemon writes
// a temporary file in the same directory, syncs it and renames it into place. The parent directory must
// exist.
func (c *Client) WriteFile(ctx context.Context, path string, r io.Reader, opts WriteFileOptions) error {
	return c.upload(ctx, proto.OpWriteFile, &proto.WriteFileRequest{Path: path, Mode: opts.Mode, User: opts.User}, r)
}

// TarUploadOptions are the optional settings of TarUpload.
type TarUploadOptions struct {
	// User owns the extracted entries; empty means the daemon's default non-root user.
	User string
}

// TarUpload extracts the tar archive read from r into the existing directory dir. Entries must stay
// inside dir: absolute names, ".." elements and links pointing outside are rejected, and the call fails
// at the first such entry (entries before it stay).
func (c *Client) TarUpload(ctx context.Context, dir string, r io.Reader, opts TarUploadOptions) error {
	return c.upload(ctx, proto.OpTarUpload, &proto.TarUploadRequest{Dir: dir, User: opts.User}, r)
}

// Stat describes path without following a final symlink.
func (c *Client) Stat(ctx context.Context, path string) (proto.FileInfo, error) {
	var fi proto.FileInfo
	err := c.call(ctx, proto.OpStat, &proto.StatRequest{Path: path}, &fi)
	return fi, err
}

// List describes the entries of the directory at path (one level, sorted by name).
func (c *Client) List(ctx context.Context, path string) ([]proto.FileInfo, error) {
	var out []proto.FileInfo
	err := c.listCall(ctx, proto.OpListDir, &proto.ListDirRequest{Path: path}, func(line []byte) error {
		var fi proto.FileInfo
		if err := json.Unmarshal(line, &fi); err != nil {
			return err
		}
		out = append(out, fi)
		return nil
	})
	return out, err
}

// MkdirOptions are the optional settings of Mkdir.
type MkdirOptions struct {
	Mode uint32 // 0 means 0755
	User string // owner of created directories; empty means the default non-root user
}

// Mkdir creates the directory at path and any missing parents.
func (c *Client) Mkdir(ctx context.Context, path string, opts MkdirOptions) error {
	return c.call(ctx, proto.OpMkdir, &proto.MkdirRequest{Path: path, Mode: opts.Mode, User: opts.User}, nil)
}

// Move renames from to to, replacing a file at to; across file systems it copies and removes.
func (c *Client) Move(ctx context.Context, from, to string) error {
	return c.call(ctx, proto.OpMove, &proto.MoveRequest{From: from, To: to}, nil)
}

// Remove removes the file or empty directory at path; with recursive, a whole tree.
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	return c.call(ctx, proto.OpRemove, &proto.RemoveRequest{Path: path, Recursive: recursive}, nil)
}

// download runs a call whose stdout data is copied to w.
func (c *Client) download(ctx context.Context, op proto.Op, args any, w io.Writer) error {
	st, err := c.open(op, args)
	if err != nil {
		return err
	}
	defer st.abandon()
	var off int64
	for {
		it, err := st.next(ctx)
		if err != nil {
			return err
		}
		switch it.kind {
		case itemData:
			if it.data.Channel != proto.ChannelStdout || it.data.Offset != off {
				return fmt.Errorf("%s: daemon sent data out of order: %w", op, errdefs.ErrInternal)
			}
			_, err := w.Write(it.data.Bytes)
			off += int64(len(it.data.Bytes))
			it.release()
			if err != nil {
				return fmt.Errorf("%s: write: %w", op, err)
			}
		case itemResponse:
			return st.decodeResponse(it.resp, nil)
		}
	}
}

// upload runs a call that sends r as data and waits for the response.
func (c *Client) upload(ctx context.Context, op proto.Op, args any, r io.Reader) error {
	st, err := c.open(op, args)
	if err != nil {
		return err
	}
	defer st.abandon()
	var off int64
	buf := make([]byte, proto.ChunkSize)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if err := st.sendData(ctx, &off, buf[:n]); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				break // the call ended early; its response says why
			}
		}
		if rerr == io.EOF {
			if err := st.closeSend(); err != nil {
				return fmt.Errorf("%s: %w", op, err)
			}
			break
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%s: read source: %w", op, rerr)
		}
	}
	return st.waitResponse(ctx, nil)
}

// Limits on streamed listings, whatever the daemon sends.
const (
	maxListLine    = 4 << 20
	maxListEntries = 1 << 20
)

// listCall runs a call whose stdout data is JSON lines, calling fn for each line.
func (c *Client) listCall(ctx context.Context, op proto.Op, args any, fn func([]byte) error) error {
	st, err := c.open(op, args)
	if err != nil {
		return err
	}
	defer st.abandon()
	var pending []byte
	count := 0
	for {
		it, err := st.next(ctx)
		if err != nil {
			return err
		}
		switch it.kind {
		case itemData:
			pending = append(pending, it.data.Bytes...)
			it.release()
			for {
				i := bytes.IndexByte(pending, '\n')
				if i < 0 {
					break
				}
				if count++; count > maxListEntries {
					return fmt.Errorf("%s: more than %d entries: %w", op, maxListEntries, errdefs.ErrResourceExhausted)
				}
				if err := fn(pending[:i]); err != nil {
					return fmt.Errorf("%s: decode entry: %v: %w", op, err, errdefs.ErrInternal)
				}
				pending = pending[i+1:]
			}
			if len(pending) > maxListLine {
				return fmt.Errorf("%s: entry longer than %d bytes: %w", op, maxListLine, errdefs.ErrInternal)
			}
		case itemResponse:
			return st.decodeResponse(it.resp, nil)
		}
	}
}
