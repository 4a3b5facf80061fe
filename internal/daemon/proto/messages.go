package proto

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Op names an operation; it is the "op" field of a Request.
type Op string

// Operations. The comment names the args type, the result type carried by the final Response, and what
// else flows on the stream.
const (
	OpPing          Op = "ping"           // PingRequest → PingResult
	OpInfo          Op = "info"           // InfoRequest → Info
	OpExec          Op = "exec"           // ExecRequest → ExecResult; stdout/stderr data before it; stdin data+close from the client if ExecRequest.HasStdin
	OpStart         Op = "start"          // StartRequest → AttachResult; events started, dropped, exit and output data before it; stdin data+close from the client
	OpAttach        Op = "attach"         // AttachRequest → AttachResult; like start
	OpListProcesses Op = "list_processes" // ListProcessesRequest → ListResult; ProcessInfo JSON lines on stdout data
	OpSignal        Op = "signal"         // SignalRequest → Empty
	OpResize        Op = "resize"         // ResizeRequest → Empty
	OpWait          Op = "wait"           // WaitRequest → ExitStatus
	OpReadFile      Op = "read_file"      // ReadFileRequest → ReadFileResult; contents on stdout data
	OpWriteFile     Op = "write_file"     // WriteFileRequest → FileInfo; contents as stdin data + close from the client
	OpStat          Op = "stat"           // StatRequest → FileInfo
	OpListDir       Op = "list_dir"       // ListDirRequest → ListResult; FileInfo JSON lines on stdout data
	OpMkdir         Op = "mkdir"          // MkdirRequest → Empty
	OpMove          Op = "move"           // MoveRequest → Empty
	OpRemove        Op = "remove"         // RemoveRequest → Empty
	OpTarDownload   Op = "tar_download"   // TarDownloadRequest → Empty; tar stream on stdout data
	OpTarUpload     Op = "tar_upload"     // TarUploadRequest → Empty; tar stream as stdin data + close from the client
	// OpQuiesce prepares a checkpoint: QuiesceRequest → Empty, after which the daemon closes this
	// connection and its listening socket (host sockets cannot be saved) until it receives the wake
	// signal (SIGUSR2), then listens again.
	OpQuiesce Op = "quiesce"
	// OpHello asks the daemon to prove that it is the sandbox's own: HelloRequest → HelloResult, whose
	// proof is Proof of the sandbox's link key (read from the control directory) and the request's
	// nonce. The node sends it on every (re)connect, before anything else, and talks on only if the
	// proof holds.
	OpHello Op = "hello"
	// OpIdentity gives the sandbox an identity of its own (see IdentityRequest): IdentityRequest →
	// Empty. The node sends it at boot and after every restore of a snapshot that is not the session's
	// own (a template's start snapshot, a warm pool's sandbox, a fork), never on a session's own resume.
	OpIdentity Op = "identity"
)

// Limits on request arguments.
const (
	// MaxPathLen is the longest path a request may name.
	MaxPathLen = 4096
	// MaxCommandBytes bounds the total size of argv and env of a process, so that its ProcessInfo always
	// fits in a frame.
	MaxCommandBytes = 256 << 10
)

// Request is the payload of a TypeRequest frame.
type Request struct {
	Op   Op              `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// EncodeRequest encodes a request payload for op with args (one of the *Request types of this package).
// It reports ErrFrameTooLarge if the result does not fit in a frame.
func EncodeRequest(op Op, args any) ([]byte, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("encode %s args: %w", op, err)
	}
	b, err := json.Marshal(Request{Op: op, Args: raw})
	if err != nil {
		return nil, fmt.Errorf("encode %s request: %w", op, err)
	}
	if len(b) > MaxPayload {
		return nil, fmt.Errorf("encode %s request (%d bytes): %w", op, len(b), ErrFrameTooLarge)
	}
	return b, nil
}

// NewArgs returns a pointer to a zero args value for op (for example *ExecRequest for OpExec), or false
// for an unknown op.
func NewArgs(op Op) (any, bool) {
	switch op {
	case OpPing:
		return &PingRequest{}, true
	case OpInfo:
		return &InfoRequest{}, true
	case OpExec:
		return &ExecRequest{}, true
	case OpStart:
		return &StartRequest{}, true
	case OpAttach:
		return &AttachRequest{}, true
	case OpListProcesses:
		return &ListProcessesRequest{}, true
	case OpSignal:
		return &SignalRequest{}, true
	case OpResize:
		return &ResizeRequest{}, true
	case OpWait:
		return &WaitRequest{}, true
	case OpReadFile:
		return &ReadFileRequest{}, true
	case OpWriteFile:
		return &WriteFileRequest{}, true
	case OpStat:
		return &StatRequest{}, true
	case OpListDir:
		return &ListDirRequest{}, true
	case OpMkdir:
		return &MkdirRequest{}, true
	case OpMove:
		return &MoveRequest{}, true
	case OpRemove:
		return &RemoveRequest{}, true
	case OpTarDownload:
		return &TarDownloadRequest{}, true
	case OpTarUpload:
		return &TarUploadRequest{}, true
	case OpQuiesce:
		return &QuiesceRequest{}, true
	case OpHello:
		return &HelloRequest{}, true
	case OpIdentity:
		return &IdentityRequest{}, true
	}
	return nil, false
}

// validator is implemented by args types that check their fields.
type validator interface{ Validate() error }

// DecodeRequest decodes and validates a request payload. It returns the op and a pointer to its typed,
// validated args (see NewArgs). Every error wraps errdefs.ErrInvalidArgument and says what is wrong.
func DecodeRequest(payload []byte) (Op, any, error) {
	var req Request
	if err := json.Unmarshal(payload, &req); err != nil {
		return "", nil, fmt.Errorf("decode request: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	args, ok := NewArgs(req.Op)
	if !ok {
		return req.Op, nil, fmt.Errorf("unknown op %q: %w", req.Op, errdefs.ErrInvalidArgument)
	}
	if len(req.Args) > 0 && !bytes.Equal(req.Args, []byte("null")) {
		if err := json.Unmarshal(req.Args, args); err != nil {
			return req.Op, nil, fmt.Errorf("decode %s args: %v: %w", req.Op, err, errdefs.ErrInvalidArgument)
		}
	}
	if v, ok := args.(validator); ok {
		if err := v.Validate(); err != nil {
			return req.Op, nil, fmt.Errorf("%s: %w", req.Op, err)
		}
	}
	return req.Op, args, nil
}

// Response is the payload of the TypeResponse frame that ends every stream: Result on success, Error
// otherwise.
type Response struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// EncodeResponse encodes a response carrying result, or err when err is non-nil. An oversized result is
// replaced by an error response.
func EncodeResponse(result any, err error) []byte {
	var resp Response
	if err != nil {
		resp.Error = ToError(err)
	} else if result != nil {
		raw, merr := json.Marshal(result)
		if merr != nil {
			resp.Error = &Error{Code: errdefs.Code(errdefs.ErrInternal), Message: "encode result: " + merr.Error()}
		} else {
			resp.Result = raw
		}
	}
	b, merr := json.Marshal(resp)
	if merr != nil || len(b) > MaxPayload {
		b, _ = json.Marshal(Response{Error: &Error{Code: errdefs.Code(errdefs.ErrTooLarge), Message: "response too large"}})
	}
	return b
}

// DecodeResponse decodes a response payload. If the response carries an error it returns that as an
// *Error (which errors.Is matches against the errdefs sentinels); otherwise it decodes the result into
// result (which may be nil to ignore it).
func DecodeResponse(payload []byte, result any) error {
	var resp Response
	if err := json.Unmarshal(payload, &resp); err != nil {
		return fmt.Errorf("decode response: %v: %w", err, errdefs.ErrInternal)
	}
	if resp.Error != nil {
		return resp.Error
	}
	if result != nil && len(resp.Result) > 0 {
		if err := json.Unmarshal(resp.Result, result); err != nil {
			return fmt.Errorf("decode result: %v: %w", err, errdefs.ErrInternal)
		}
	}
	return nil
}

// Error is an error carried over the wire: an errdefs code and a human-readable message.
// errors.Is(e, errdefs.ErrNotFound) works on a decoded *Error.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ToError converts err to its wire form, using errdefs.Code for the code.
func ToError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return &Error{Code: e.Code, Message: err.Error()}
	}
	return &Error{Code: errdefs.Code(err), Message: err.Error()}
}

// Error reports the message.
func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Message
}

// Unwrap returns the errdefs sentinel for the code (errdefs.ErrInternal for an unknown code).
func (e *Error) Unwrap() error { return errdefs.FromCode(e.Code) }

// Event kinds.
const (
	EventStarted = "started" // Process: the process was started or attached to (first frame of the stream)
	EventDropped = "dropped" // Dropped: output was discarded before it could be delivered
	EventExit    = "exit"    // Exit: the process exited and all its output was delivered
)

// Event is the payload of a TypeEvent frame. Kind says which field is set.
type Event struct {
	Kind    string       `json:"kind"`
	Process *ProcessInfo `json:"process,omitempty"`
	Dropped *Dropped     `json:"dropped,omitempty"`
	Exit    *ExitStatus  `json:"exit,omitempty"`
}

// DecodeEvent decodes an event payload.
func DecodeEvent(p []byte) (Event, error) {
	var ev Event
	if err := json.Unmarshal(p, &ev); err != nil {
		return Event{}, fmt.Errorf("decode event: %v: %w", err, ErrBadFrame)
	}
	return ev, nil
}

// Dropped reports output bytes that were discarded because the per-stream output buffer overflowed while
// nobody was attached (or after the process exited while the attached client was stalled).
type Dropped struct {
	Channel Channel `json:"channel"`
	// Offset is where the lost range starts; Bytes how many bytes were lost. Delivery continues at
	// Offset+Bytes.
	Offset int64 `json:"offset"`
	Bytes  int64 `json:"bytes"`
}

// --- connection ---

// PingRequest has no arguments.
type PingRequest struct{}

// QuiesceRequest has no arguments (see OpQuiesce).
type QuiesceRequest struct{}

// PingResult is empty.
type PingResult struct{}

// InfoRequest has no arguments.
type InfoRequest struct{}

// Info describes the daemon.
type Info struct {
	Version         string        `json:"version"`          // daemon build version
	ProtocolVersion int           `json:"protocol_version"` // Version of this package
	StartTime       time.Time     `json:"start_time"`
	Uptime          time.Duration `json:"uptime"` // nanoseconds on the wire
	PID             int           `json:"pid"`
	Processes       int           `json:"processes"` // tracked processes still running
}

// Empty is the result of operations that return nothing.
type Empty struct{}

// --- processes ---

// ExecRequest runs a process to completion and collects its output.
type ExecRequest struct {
	Argv []string `json:"argv"`
	// Env entries KEY=VALUE are added to the default environment (PATH, HOME, USER, LOGNAME), replacing
	// entries with the same key.
	Env []string `json:"env,omitempty"`
	// Cwd must be absolute; empty means the user's home directory (or / if it does not exist).
	Cwd string `json:"cwd,omitempty"`
	// User is a user name or numeric uid; empty means the daemon's default non-root user. "root" is allowed.
	User string `json:"user,omitempty"`
	// Timeout kills the process group and sets ExecResult.TimedOut when it expires; 0 means none (the
	// caller's context still bounds the call). Nanoseconds on the wire.
	Timeout time.Duration `json:"timeout,omitempty"`
	// MaxOutput caps the bytes kept per stream (stdout and stderr each); 0 means the daemon's limit, and a
	// larger value is lowered to it. Output beyond the cap is read and discarded and the result says so.
	MaxOutput int64 `json:"max_output,omitempty"`
	// HasStdin says stdin data frames and a close frame follow the request. The link sets it from Stdin.
	// Without it the process reads /dev/null.
	HasStdin bool `json:"stdin,omitempty"`
	// Stdin is sent as data frames by the link client; it is not part of the JSON payload.
	Stdin []byte `json:"-"`
}

// Validate checks the fields.
func (r *ExecRequest) Validate() error {
	return validateCommand(r.Argv, r.Env, r.Cwd, r.User)
}

// LogValue prints the request with env values redacted and without stdin.
func (r ExecRequest) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Any("argv", r.Argv), slog.Any("env", RedactEnv(r.Env)), slog.String("cwd", r.Cwd),
		slog.String("user", r.User), slog.Duration("timeout", r.Timeout), slog.Int("stdin_bytes", len(r.Stdin)))
}

// ExecResult is the result of an exec.
type ExecResult struct {
	ExitStatus
	StartTime time.Time `json:"start_time"`
	// TimedOut says the timeout expired and the process group was killed.
	TimedOut bool `json:"timed_out,omitempty"`
	// StdoutBytes and StderrBytes count all output produced, including what was discarded.
	StdoutBytes     int64 `json:"stdout_bytes"`
	StderrBytes     int64 `json:"stderr_bytes"`
	StdoutTruncated bool  `json:"stdout_truncated,omitempty"`
	StderrTruncated bool  `json:"stderr_truncated,omitempty"`
	// Stdout and Stderr are filled in by the link client from data frames.
	Stdout []byte `json:"-"`
	Stderr []byte `json:"-"`
}

// ExitStatus is how a process ended.
type ExitStatus struct {
	// ExitCode is the exit code, or -1 when the process was killed by a signal.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that killed the process ("SIGKILL"), if any.
	Signal  string    `json:"signal,omitempty"`
	EndTime time.Time `json:"end_time"`
}

// PTYSize is a terminal size.
type PTYSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// StartRequest starts a tracked process whose output is buffered and can be re-attached to.
type StartRequest struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env,omitempty"` // as ExecRequest.Env
	Cwd  string   `json:"cwd,omitempty"` // as ExecRequest.Cwd
	User string   `json:"user,omitempty"`
	// PTY, when set, runs the process on a new pseudo-terminal of that size (0 means 24x80) as a session
	// leader. Output then arrives on stdout only, and TERM defaults to xterm-256color.
	PTY *PTYSize `json:"pty,omitempty"`
	// Stdin gives the process a stdin pipe fed by data frames; without it stdin is /dev/null.
	// A PTY process always has stdin.
	Stdin bool `json:"stdin,omitempty"`
}

// Validate checks the fields.
func (r *StartRequest) Validate() error {
	return validateCommand(r.Argv, r.Env, r.Cwd, r.User)
}

// LogValue prints the request with env values redacted.
func (r StartRequest) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Any("argv", r.Argv), slog.Any("env", RedactEnv(r.Env)), slog.String("cwd", r.Cwd),
		slog.String("user", r.User), slog.Bool("pty", r.PTY != nil), slog.Bool("stdin", r.Stdin))
}

// AttachRequest attaches to a tracked process, running or exited.
type AttachRequest struct {
	ID string `json:"id"`
	// StdoutOffset and StderrOffset say where delivery starts; nil means the first byte not yet delivered
	// to any client. If bytes before the buffered range were requested, a dropped event says how many
	// were lost.
	StdoutOffset *int64 `json:"stdout_offset,omitempty"`
	StderrOffset *int64 `json:"stderr_offset,omitempty"`
}

// Validate checks the fields.
func (r *AttachRequest) Validate() error {
	if err := validateID(r.ID); err != nil {
		return err
	}
	for _, o := range []*int64{r.StdoutOffset, r.StderrOffset} {
		if o != nil && *o < 0 {
			return fmt.Errorf("negative offset %d: %w", *o, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// AttachResult ends a start or attach stream. Exit is set when the process exited (and all output was
// delivered); it is nil when the client detached.
type AttachResult struct {
	Exit *ExitStatus `json:"exit,omitempty"`
}

// ProcessState is "running" or "exited".
type ProcessState string

// Process states.
const (
	StateRunning ProcessState = "running"
	StateExited  ProcessState = "exited"
)

// ProcessInfo describes a tracked process.
type ProcessInfo struct {
	ID        string       `json:"id"`
	PID       int          `json:"pid"`
	Argv      []string     `json:"argv"`
	User      string       `json:"user"`
	UID       int          `json:"uid"`
	PTY       bool         `json:"pty,omitempty"`
	Stdin     bool         `json:"stdin,omitempty"` // the process has a stdin pipe or terminal
	State     ProcessState `json:"state"`
	StartTime time.Time    `json:"start_time"`
	// Exit is set once the process exited.
	Exit *ExitStatus `json:"exit,omitempty"`
	// StdoutEnd and StderrEnd are the number of bytes the process has written so far on each stream.
	StdoutEnd int64 `json:"stdout_end"`
	StderrEnd int64 `json:"stderr_end"`
}

// ListProcessesRequest has no arguments.
type ListProcessesRequest struct{}

// ListResult ends a streamed listing; Count is the number of JSON lines sent.
type ListResult struct {
	Count int `json:"count"`
}

// SignalRequest sends a signal to a running process.
type SignalRequest struct {
	ID string `json:"id"`
	// Signal is a name ("SIGTERM", "TERM", "term") or a number ("15").
	Signal string `json:"signal"`
	// Group sends the signal to the process's whole process group instead of the process alone.
	Group bool `json:"group,omitempty"`
}

// Validate checks the fields.
func (r *SignalRequest) Validate() error {
	if err := validateID(r.ID); err != nil {
		return err
	}
	if r.Signal == "" {
		return fmt.Errorf("signal is empty: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// ResizeRequest changes the terminal size of a PTY process.
type ResizeRequest struct {
	ID   string `json:"id"`
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Validate checks the fields.
func (r *ResizeRequest) Validate() error {
	if err := validateID(r.ID); err != nil {
		return err
	}
	if r.Rows == 0 || r.Cols == 0 {
		return fmt.Errorf("terminal size %dx%d: rows and cols must be positive: %w", r.Rows, r.Cols, errdefs.ErrInvalidArgument)
	}
	return nil
}

// WaitRequest waits for a tracked process to exit.
type WaitRequest struct {
	ID string `json:"id"`
}

// Validate checks the fields.
func (r *WaitRequest) Validate() error { return validateID(r.ID) }

// --- files ---

// FileType is the type of a file system entry.
type FileType string

// File types.
const (
	TypeFile    FileType = "file"
	TypeDir     FileType = "dir"
	TypeSymlink FileType = "symlink"
	TypeOther   FileType = "other" // devices, sockets, pipes
)

// FileInfo describes a file system entry (without following a final symlink).
type FileInfo struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"`
	Type    FileType  `json:"type"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // permission bits plus setuid/setgid/sticky, as in chmod
	ModTime time.Time `json:"mtime"`
	UID     int       `json:"uid"`
	GID     int       `json:"gid"`
	// LinkTarget is the target of a symlink.
	LinkTarget string `json:"link_target,omitempty"`
}

// ReadFileRequest reads a regular file.
type ReadFileRequest struct {
	Path string `json:"path"`
	// Offset and Length select a range; Length 0 means to the end.
	Offset int64 `json:"offset,omitempty"`
	Length int64 `json:"length,omitempty"`
}

// Validate checks the fields.
func (r *ReadFileRequest) Validate() error {
	if r.Offset < 0 || r.Length < 0 {
		return fmt.Errorf("negative offset or length: %w", errdefs.ErrInvalidArgument)
	}
	return CheckPath(r.Path)
}

// ReadFileResult ends a read; Size is the number of bytes sent.
type ReadFileResult struct {
	Size int64 `json:"size"`
}

// WriteFileRequest atomically replaces or creates a regular file with the data that follows.
type WriteFileRequest struct {
	Path string `json:"path"`
	// Mode is the permission bits; 0 keeps the mode of an existing file, or 0644 for a new one.
	Mode uint32 `json:"mode,omitempty"`
	// User owns the file; empty means the daemon's default non-root user.
	User string `json:"user,omitempty"`
}

// Validate checks the fields.
func (r *WriteFileRequest) Validate() error {
	if r.Mode > 0o7777 {
		return fmt.Errorf("mode %o: %w", r.Mode, errdefs.ErrInvalidArgument)
	}
	if err := validateUser(r.User); err != nil {
		return err
	}
	return CheckPath(r.Path)
}

// StatRequest describes one path.
type StatRequest struct {
	Path string `json:"path"`
}

// Validate checks the fields.
func (r *StatRequest) Validate() error { return CheckPath(r.Path) }

// ListDirRequest lists the entries of a directory (one level).
type ListDirRequest struct {
	Path string `json:"path"`
}

// Validate checks the fields.
func (r *ListDirRequest) Validate() error { return CheckPath(r.Path) }

// MkdirRequest creates a directory and any missing parents.
type MkdirRequest struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode,omitempty"` // 0 means 0755
	User string `json:"user,omitempty"` // owner of created directories
}

// Validate checks the fields.
func (r *MkdirRequest) Validate() error {
	if r.Mode > 0o7777 {
		return fmt.Errorf("mode %o: %w", r.Mode, errdefs.ErrInvalidArgument)
	}
	if err := validateUser(r.User); err != nil {
		return err
	}
	return CheckPath(r.Path)
}

// MoveRequest renames From to To (replacing a file at To), copying across devices when needed.
type MoveRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Validate checks the fields.
func (r *MoveRequest) Validate() error {
	if err := CheckPath(r.From); err != nil {
		return err
	}
	return CheckPath(r.To)
}

// RemoveRequest removes a file or an empty directory, or a whole tree when Recursive is set.
type RemoveRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// Validate checks the fields.
func (r *RemoveRequest) Validate() error { return CheckPath(r.Path) }

// TarDownloadRequest streams a tar archive of Path: a file, or a directory and everything below it,
// with entry names starting at Path's base name.
type TarDownloadRequest struct {
	Path string `json:"path"`
}

// Validate checks the fields.
func (r *TarDownloadRequest) Validate() error { return CheckPath(r.Path) }

// TarUploadRequest extracts the tar archive that follows into the existing directory Dir. Entries must
// stay inside Dir; links must not point outside it.
type TarUploadRequest struct {
	Dir  string `json:"dir"`
	User string `json:"user,omitempty"` // owner of extracted entries
}

// Validate checks the fields.
func (r *TarUploadRequest) Validate() error {
	if err := validateUser(r.User); err != nil {
		return err
	}
	return CheckPath(r.Dir)
}

// --- validation helpers ---

// CheckPath reports an error wrapping errdefs.ErrInvalidArgument unless p is an absolute path without NUL
// bytes, without ".." elements and at most MaxPathLen bytes long.
func CheckPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("path is empty: %w", errdefs.ErrInvalidArgument)
	case len(p) > MaxPathLen:
		return fmt.Errorf("path of %d bytes is longer than %d: %w", len(p), MaxPathLen, errdefs.ErrInvalidArgument)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("path %q contains a NUL byte: %w", p, errdefs.ErrInvalidArgument)
	case p[0] != '/':
		return fmt.Errorf("path %q is not absolute: %w", p, errdefs.ErrInvalidArgument)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return fmt.Errorf("path %q contains a \"..\" element: %w", p, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

func validateID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("process id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

func validateUser(u string) error {
	if len(u) > 256 || strings.ContainsAny(u, "\x00:/") {
		return fmt.Errorf("user %q: %w", u, errdefs.ErrInvalidArgument)
	}
	return nil
}

func validateCommand(argv, env []string, cwd, user string) error {
	// No argv at all is the template's own command (the daemon's DefaultArgv).
	if len(argv) > 0 && argv[0] == "" {
		return fmt.Errorf("argv[0] is empty: %w", errdefs.ErrInvalidArgument)
	}
	total := 0
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("argument %q contains a NUL byte: %w", a, errdefs.ErrInvalidArgument)
		}
		total += len(a)
	}
	for _, e := range env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" || strings.IndexByte(e, 0) >= 0 {
			return fmt.Errorf("env entry %q is not KEY=VALUE: %w", RedactEnv([]string{e})[0], errdefs.ErrInvalidArgument)
		}
		total += len(e)
	}
	if total > MaxCommandBytes {
		return fmt.Errorf("argv and env total %d bytes, more than %d: %w", total, MaxCommandBytes, errdefs.ErrInvalidArgument)
	}
	if cwd != "" {
		if err := CheckPath(cwd); err != nil {
			return fmt.Errorf("cwd: %w", err)
		}
	}
	return validateUser(user)
}

// RedactEnv returns a copy of env with every value replaced by "<redacted>", keeping the keys, for logs
// and audit records.
func RedactEnv(env []string) []string {
	if env == nil {
		return nil
	}
	out := make([]string, len(env))
	for i, e := range env {
		k, _, _ := strings.Cut(e, "=")
		out[i] = k + "=<redacted>"
	}
	return out
}

// HelloRequest carries the node's challenge (see OpHello).
type HelloRequest struct {
	// Nonce is fresh random bytes, NonceSize of them.
	Nonce []byte `json:"nonce"`
}

// NonceSize is the size of HelloRequest.Nonce.
const NonceSize = 32

// Validate checks the nonce's size.
func (r *HelloRequest) Validate() error {
	if len(r.Nonce) != NonceSize {
		return fmt.Errorf("nonce of %d bytes, want %d: %w", len(r.Nonce), NonceSize, errdefs.ErrInvalidArgument)
	}
	return nil
}

// HelloResult is the daemon's answer to OpHello.
type HelloResult struct {
	// Proof is Proof(key, nonce).
	Proof []byte `json:"proof"`
}

// Proof is what a daemon holding key answers to nonce: HMAC-SHA256 over a label and the nonce, so the
// key proves nothing but this. The node compares it with hmac.Equal.
func Proof(key, nonce []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("airlock daemon link proof v1\x00"))
	m.Write(nonce)
	return m.Sum(nil)
}
