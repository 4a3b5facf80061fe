package controlplane

// Sandbox I/O: exec, processes and files in a tenant's running sandbox. Of what the API calls, this
// part alone speaks the sandbox daemon's protocol (internal/daemon/link and internal/daemon/proto; the
// sandboxes part reads listening ports over the link too, in ports.go); what it exports is neutral of the
// daemon's wire and of any runtime driver, so the API knows neither. Every method resolves the sandbox's
// daemon link (sandboxes.link: the sandbox must be the tenant's and running), and errors keep the
// errdefs kinds the daemon reported (not found, invalid argument, failed precondition, …). A call that
// never reached the daemon because its node was replacing the channel (a checkpoint; link.ErrNotStarted)
// is sent again on the new one (withLink).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// Command is a process to run in a sandbox.
type Command struct {
	// Argv is the program and its arguments; Argv[0] is looked up in PATH.
	Argv []string
	// Env entries KEY=VALUE are added to the sandbox's environment, replacing entries with the same key.
	Env []string
	// Cwd must be absolute; empty means the user's home directory.
	Cwd string
	// User is a user name or numeric uid; empty means the sandbox's default non-root user.
	User string

	// The rest applies to Exec only; StartProcess ignores it (a started process always has a stdin,
	// fed by Process.Write, and runs until it exits or is signaled).

	// Stdin, if non-nil, is the process's stdin; nil means it reads nothing (/dev/null).
	Stdin []byte
	// Timeout kills the process when it expires (CommandResult.TimedOut); 0 means none beyond ctx.
	Timeout time.Duration
	// MaxOutput caps the bytes kept of each of stdout and stderr; 0 means the sandbox's limit. Output
	// beyond it is discarded and the result says so.
	MaxOutput int64
}

// ExitStatus is how a process ended.
type ExitStatus struct {
	// ExitCode is the exit code, or -1 when a signal killed the process.
	ExitCode int
	// Signal names the signal that killed the process ("SIGKILL"), if any.
	Signal string
}

// CommandResult is how a command run by Exec ended, and its output.
type CommandResult struct {
	ExitStatus
	Stdout, Stderr                   []byte
	StdoutTruncated, StderrTruncated bool
	// TimedOut says Command.Timeout expired and the process was killed.
	TimedOut bool
}

// notStartedTries bounds how often a call is sent, while it fails with link.ErrNotStarted.
const notStartedTries = 3

// retryNotStarted runs call on a channel from dial, again on a new one while it fails with
// link.ErrNotStarted (it never reached the daemon: the node was replacing the channel, and its Link waits
// for the new one), notStartedTries times at most. call must leave nothing behind when it fails so.
func retryNotStarted(ctx context.Context, dial func(context.Context) (*link.Client, error), call func(*link.Client) error) error {
	for try := 1; ; try++ {
		cl, err := dial(ctx)
		if err != nil {
			return err
		}
		err = call(cl)
		if try == notStartedTries || !errors.Is(err, link.ErrNotStarted) || ctx.Err() != nil {
			return err
		}
	}
}

// withLink runs call on the sandbox's daemon link (see retryNotStarted).
func (s *sandboxIO) withLink(ctx context.Context, tenantID, sandboxID string, call func(*link.Client) error) error {
	return retryNotStarted(ctx, func(ctx context.Context) (*link.Client, error) {
		return s.sandboxes.link(ctx, tenantID, sandboxID)
	}, call)
}

// Exec runs c in the sandbox to completion and returns its exit status and output. A non-zero exit is
// not an error. Canceling ctx kills the process.
func (s *sandboxIO) Exec(ctx context.Context, tenantID, sandboxID string, c Command) (CommandResult, error) {
	var res proto.ExecResult
	err := s.withLink(ctx, tenantID, sandboxID, func(cl *link.Client) (err error) {
		res, err = cl.Exec(ctx, proto.ExecRequest{
			Argv: c.Argv, Env: c.Env, Cwd: c.Cwd, User: c.User,
			Timeout: c.Timeout, MaxOutput: c.MaxOutput, Stdin: c.Stdin,
		})
		return err
	})
	if err != nil {
		return CommandResult{}, err
	}
	return CommandResult{
		ExitStatus: ExitStatus{ExitCode: res.ExitCode, Signal: res.Signal},
		Stdout:     res.Stdout, Stderr: res.Stderr,
		StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated,
		TimedOut: res.TimedOut,
	}, nil
}

// CheckIO reports whether the sandbox takes exec, process and file calls now (it is the tenant's, it
// runs, and its node has a channel to it): nil, or the error such a call would fail with. The API asks
// before it upgrades a request to a stream, so that a bad sandbox is still a plain HTTP error.
func (s *sandboxIO) CheckIO(ctx context.Context, tenantID, sandboxID string) error {
	_, err := s.sandboxes.link(ctx, tenantID, sandboxID)
	return err
}

// PTYSize is a terminal size.
type PTYSize struct {
	Rows, Cols uint16
}

// Output stream names, as StreamOptions.OnDropped reports them.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// StreamOptions say where the output of a started or attached process goes.
type StreamOptions struct {
	// Stdout and Stderr receive the output as it arrives, from one goroutine, in order per stream (a
	// PTY process writes everything to Stdout). Nil discards. A slow writer holds back this process's
	// output only (and, once the sandbox's buffer for it is full, the process itself); a write error
	// detaches. Writers must not call Process.Detach or Process.Wait, nor keep the slice.
	Stdout, Stderr io.Writer
	// StdoutOffset and StderrOffset (AttachProcess only) say where delivery starts: nil means the first
	// byte not yet delivered to anyone.
	StdoutOffset, StderrOffset *int64
	// OnDropped, if set, is called (from the delivery goroutine) when output was lost before it could be
	// delivered: bytes of stream (StreamStdout, StreamStderr).
	OnDropped func(stream string, bytes int64)
}

// Process is an attachment to a process running (or exited, and still listed) in a sandbox. Its output
// goes to the writers of StreamOptions until the process exits, Detach is called or the sandbox's
// channel drops; in the last two cases the process lives on and can be attached to again.
type Process interface {
	// ID is the process's id in the sandbox, for AttachProcess and SignalProcess.
	ID() string
	// PID is its process ID in the sandbox's PID namespace.
	PID() int
	// Write sends p to the process's stdin (or terminal); it blocks while the sandbox's buffer is full.
	Write(p []byte) (int, error)
	// Resize changes the terminal size of a PTY process.
	Resize(ctx context.Context, rows, cols uint16) error
	// Signal sends sig (a name like "SIGTERM" or "TERM", or a number) to the process.
	Signal(ctx context.Context, sig string) error
	// CloseStdin closes stdin after what was written; for a PTY process it sends end-of-file.
	CloseStdin() error
	// Wait waits until the process exited and all its output was delivered, and reports how it ended.
	// If delivery ends first (Detach, a lost channel) it reports why; the process may still run.
	Wait(ctx context.Context) (ExitStatus, error)
	// Detach stops delivery and leaves the process running; it does not wait.
	Detach()
}

// StartProcess starts c in the sandbox, attached: output goes where o says from the first byte (o's
// offsets are ignored). pty, if set, runs the process on a terminal of that size. ctx bounds the start
// only; the Process outlives it.
func (s *sandboxIO) StartProcess(ctx context.Context, tenantID, sandboxID string, c Command, pty *PTYSize, o StreamOptions) (Process, error) {
	req := proto.StartRequest{Argv: c.Argv, Env: c.Env, Cwd: c.Cwd, User: c.User, Stdin: true}
	if pty != nil {
		req.PTY = &proto.PTYSize{Rows: pty.Rows, Cols: pty.Cols}
	}
	var p *link.Process
	err := s.withLink(ctx, tenantID, sandboxID, func(cl *link.Client) (err error) {
		p, err = cl.Start(ctx, req, processOptions(o))
		return err
	})
	if err != nil {
		return nil, err
	}
	return linkProcess{p}, nil
}

// AttachProcess attaches to the sandbox's process processID, running or exited (and still listed).
// Output produced while nobody was attached is delivered as far as the sandbox kept it; o.OnDropped
// reports what was lost. ctx bounds the attach only.
func (s *sandboxIO) AttachProcess(ctx context.Context, tenantID, sandboxID, processID string, o StreamOptions) (Process, error) {
	var p *link.Process
	err := s.withLink(ctx, tenantID, sandboxID, func(cl *link.Client) (err error) {
		p, err = cl.Attach(ctx, processID, processOptions(o))
		return err
	})
	if err != nil {
		return nil, err
	}
	return linkProcess{p}, nil
}

// processOptions translates o into the link's options.
func processOptions(o StreamOptions) link.ProcessOptions {
	opts := link.ProcessOptions{Stdout: o.Stdout, Stderr: o.Stderr, StdoutOffset: o.StdoutOffset, StderrOffset: o.StderrOffset}
	if f := o.OnDropped; f != nil {
		opts.OnDropped = func(d proto.Dropped) { f(d.Channel.String(), d.Bytes) }
	}
	return opts
}

// linkProcess is a Process over the daemon link's.
type linkProcess struct{ p *link.Process }

var _ Process = linkProcess{}

func (l linkProcess) ID() string                  { return l.p.ID() }
func (l linkProcess) PID() int                    { return l.p.Info().PID }
func (l linkProcess) Write(b []byte) (int, error) { return l.p.Write(b) }
func (l linkProcess) CloseStdin() error           { return l.p.CloseStdin() }
func (l linkProcess) Detach()                     { l.p.Detach() }

func (l linkProcess) Resize(ctx context.Context, rows, cols uint16) error {
	return l.p.Resize(ctx, rows, cols)
}

func (l linkProcess) Signal(ctx context.Context, sig string) error { return l.p.Signal(ctx, sig) }

func (l linkProcess) Wait(ctx context.Context) (ExitStatus, error) {
	st, err := l.p.Wait(ctx)
	if err != nil {
		return ExitStatus{}, err
	}
	return ExitStatus{ExitCode: st.ExitCode, Signal: st.Signal}, nil
}

// ProcessInfo describes a process the sandbox tracks.
type ProcessInfo struct {
	ID        string
	PID       int
	Argv      []string
	User      string
	PTY       bool
	Running   bool
	StartTime time.Time
	// Exit is set once the process exited.
	Exit *ExitStatus
}

// Processes lists the sandbox's tracked processes, running and recently exited, in start order.
func (s *sandboxIO) Processes(ctx context.Context, tenantID, sandboxID string) ([]ProcessInfo, error) {
	var procs []proto.ProcessInfo
	err := s.withLink(ctx, tenantID, sandboxID, func(cl *link.Client) (err error) {
		procs, err = cl.ListProcesses(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]ProcessInfo, 0, len(procs))
	for _, p := range procs {
		pi := ProcessInfo{ID: p.ID, PID: p.PID, Argv: p.Argv, User: p.User, PTY: p.PTY,
			Running: p.State == proto.StateRunning, StartTime: p.StartTime}
		if p.Exit != nil {
			pi.Exit = &ExitStatus{ExitCode: p.Exit.ExitCode, Signal: p.Exit.Signal}
		}
		out = append(out, pi)
	}
	return out, nil
}

// SignalProcess sends sig (a name like "SIGTERM" or "TERM", or a number) to the sandbox's process
// processID.
func (s *sandboxIO) SignalProcess(ctx context.Context, tenantID, sandboxID, processID, sig string) error {
	return s.withLink(ctx, tenantID, sandboxID, func(cl *link.Client) error {
		return cl.SignalProcess(ctx, processID, sig)
	})
}

// File types, as FileInfo.Type holds them.
const (
	FileTypeFile    = "file"
	FileTypeDir     = "dir"
	FileTypeSymlink = "symlink"
	FileTypeOther   = "other" // devices, sockets, pipes
)

// FileInfo describes a file system entry in a sandbox (without following a final symlink).
type FileInfo struct {
	Name, Path string
	// Type is FileTypeFile, FileTypeDir, FileTypeSymlink or FileTypeOther.
	Type string
	Size int64
	// Mode is the permission bits plus setuid, setgid and sticky, as in chmod.
	Mode    uint32
	ModTime time.Time
	// Target is a symlink's target.
	Target string
}

func fileInfo(fi proto.FileInfo) FileInfo {
	return FileInfo{Name: fi.Name, Path: fi.Path, Type: string(fi.Type), Size: fi.Size, Mode: fi.Mode,
		ModTime: fi.ModTime, Target: fi.LinkTarget}
}

// CheckPath reports an error wrapping errdefs.ErrInvalidArgument unless p is a path the sandbox's file
// calls accept: absolute, without NUL bytes or ".." elements, and not too long.
func CheckPath(p string) error { return proto.CheckPath(p) }

// StatFile describes the entry at p.
func (s *sandboxIO) StatFile(ctx context.Context, tenantID, sandboxID, p string) (FileInfo, error) {
	var fi proto.FileInfo
	err := s.withLink(ctx, tenantID, sandboxID, func(cl *link.Client) (err error) {
		fi, err = cl.Stat(ctx, p)
		return err
	})
	if err != nil {
		return FileInfo{}, err
	}
	return fileInfo(fi), nil
}

// ListFiles describes the entries of the directory at p (one level, sorted by name).
func (s *sandboxIO) ListFiles(ctx context.Context, tenantID, sandboxID, p string) ([]FileInfo, error) {
	var entries []proto.FileInfo
	err := s.withLink(ctx, tenantID, sandboxID, func(cl *link.Client) (err error) {
		entries, err = cl.List(ctx, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]FileInfo, 0, len(entries))
	for _, e := range entries {
		out = append(out, fileInfo(e))
	}
	return out, nil
}

// ReadFile streams the regular file at p into w. Anything else is refused (errdefs.ErrInvalidArgument)
// before the first byte is written to w, as is a missing file (errdefs.ErrNotFound); an error after it
// means w got part of the file.
func (s *sandboxIO) ReadFile(ctx context.Context, tenantID, sandboxID, p string, w io.Writer) error {
	return s.withLink(ctx, tenantID, sandboxID, func(cl *link.Client) error {
		fi, err := cl.Stat(ctx, p)
		if err != nil {
			return err
		}
		if fi.Type != proto.TypeFile {
			return fmt.Errorf("%s is a %s, not a regular file: %w", p, fi.Type, errdefs.ErrInvalidArgument)
		}
		// A read that did not start wrote nothing to w.
		return cl.ReadFile(ctx, p, w)
	})
}

// WriteFile atomically replaces (or creates) the file at p with what r holds, making its parent
// directory first if it is missing, and describes the result. mode is the permission bits; 0 keeps an
// existing file's, or 0644. An error reading r is returned wrapped (errors.As finds it).
func (s *sandboxIO) WriteFile(ctx context.Context, tenantID, sandboxID, p string, r io.Reader, mode uint32) (FileInfo, error) {
	in := &countingReader{r: r}
	var fi proto.FileInfo
	err := s.withLink(ctx, tenantID, sandboxID, func(cl *link.Client) error {
		if dir := path.Dir(p); dir != "/" {
			if err := cl.Mkdir(ctx, dir, link.MkdirOptions{}); err != nil {
				return err
			}
		}
		if err := cl.WriteFile(ctx, p, in, link.WriteFileOptions{Mode: mode}); err != nil {
			return in.unsent(err)
		}
		var err error
		fi, err = cl.Stat(ctx, p)
		return err
	})
	if err != nil {
		return FileInfo{}, err
	}
	return fileInfo(fi), nil
}

// RemoveFile removes the file or empty directory at p; with recursive, a whole tree.
func (s *sandboxIO) RemoveFile(ctx context.Context, tenantID, sandboxID, p string, recursive bool) error {
	return s.withLink(ctx, tenantID, sandboxID, func(cl *link.Client) error {
		return cl.Remove(ctx, p, recursive)
	})
}

// MakeDir makes the directory at p and any missing parents, and describes it.
func (s *sandboxIO) MakeDir(ctx context.Context, tenantID, sandboxID, p string) (FileInfo, error) {
	var fi proto.FileInfo
	err := s.withLink(ctx, tenantID, sandboxID, func(cl *link.Client) (err error) {
		if err := cl.Mkdir(ctx, p, link.MkdirOptions{}); err != nil {
			return err
		}
		fi, err = cl.Stat(ctx, p)
		return err
	})
	if err != nil {
		return FileInfo{}, err
	}
	return fileInfo(fi), nil
}

// MoveFile renames from to to, replacing a file at to, and describes the result.
func (s *sandboxIO) MoveFile(ctx context.Context, tenantID, sandboxID, from, to string) (FileInfo, error) {
	moved := false
	var fi proto.FileInfo
	err := s.withLink(ctx, tenantID, sandboxID, func(cl *link.Client) (err error) {
		if !moved { // a Stat that did not start must not send the move again
			if err := cl.Move(ctx, from, to); err != nil {
				return err
			}
			moved = true
		}
		fi, err = cl.Stat(ctx, to)
		return err
	})
	if err != nil {
		return FileInfo{}, err
	}
	return fileInfo(fi), nil
}

// TarDownload streams a tar archive of p (a file or a directory tree) into w; entry names start with p's
// base name. A missing p is refused (errdefs.ErrNotFound) before the first byte is written to w.
func (s *sandboxIO) TarDownload(ctx context.Context, tenantID, sandboxID, p string, w io.Writer) error {
	return s.withLink(ctx, tenantID, sandboxID, func(cl *link.Client) error {
		if _, err := cl.Stat(ctx, p); err != nil {
			return err
		}
		// A download that did not start wrote nothing to w.
		return cl.TarDownload(ctx, p, w)
	})
}

// TarUpload extracts the tar archive read from r into the directory dir, making it first if it is
// missing. Entries must stay inside dir; the call fails at the first that does not (entries before it
// stay). An error reading r is returned wrapped (errors.As finds it).
func (s *sandboxIO) TarUpload(ctx context.Context, tenantID, sandboxID, dir string, r io.Reader) error {
	in := &countingReader{r: r}
	return s.withLink(ctx, tenantID, sandboxID, func(cl *link.Client) error {
		if err := cl.Mkdir(ctx, dir, link.MkdirOptions{}); err != nil {
			return err
		}
		return in.unsent(cl.TarUpload(ctx, dir, in, link.TarUploadOptions{}))
	})
}

// countingReader counts what was read of r, so that an upload that did not start is sent again only if
// none of r was consumed.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// unsent returns err, made final (no longer link.ErrNotStarted) if part of r was consumed already.
func (c *countingReader) unsent(err error) error {
	if c.n > 0 && errors.Is(err, link.ErrNotStarted) {
		return fmt.Errorf("%v (after %d bytes of the upload were read, so it is not sent again): %w", err, c.n, errdefs.ErrUnavailable)
	}
	return err
}
