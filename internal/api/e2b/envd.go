package e2b

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/httperr"
	"github.com/airlockrun/airlock/internal/store"
)

// E2B compatibility, the data plane: what E2B's in-sandbox daemon, envd, serves to the SDKs — GET
// /health, GET and POST /files, and the Connect-RPC services process.Process and filesystem.Filesystem
// in the Connect protocol's JSON codec — served from outside the sandbox over Airlock's own daemon link.
// Requests name their sandbox (an E2B sandbox: a session) in the E2b-Sandbox-Id header, with the base
// URL E2B_SANDBOX_URL=<airlock>/e2b, or in a host name 49983-<id>.<ingress domain>; X-Access-Token is
// the session's access token from the create or connect (or an API key with write scope). The work
// resolves to the session's sandbox (resumed first if the session resumes automatically) and counts
// as the session's activity.

const (
	// EnvdPort is envd's port: the E2b-Sandbox-Port the SDKs send and the port of the host form.
	EnvdPort = 49983
	// e2bChunk bounds the output bytes of one data event, as envd's.
	e2bChunk = 32 << 10
	// e2bMaxWatch bounds the entries a directory watch compares each round.
	e2bMaxWatch = 10000
)

// e2bWatchEvery is how often a directory watch looks for changes.
var e2bWatchEvery = 250 * time.Millisecond

// envdTarget is the sandbox an envd request works on, and as whom.
type envdTarget struct {
	tenant, session, sandbox string
	// user is the user named by the request ("" for the sandbox's default user); home is theirs.
	user, home string
}

type envdTargetKey struct{}

func envdTargetOf(ctx context.Context) envdTarget {
	t, _ := ctx.Value(envdTargetKey{}).(envdTarget)
	return t
}

// e2bEnvdRoutes are the data plane's routes: envd's paths under /e2b.
func (s *dataPlane) e2bEnvdRoutes() []Route {
	rpc := func(proc string, scope store.TokenScope, h http.Handler) Route {
		return Route{"POST", Prefix + proc, s.envd(scope, true, h.ServeHTTP)}
	}
	// A request message is small (a command, a path, a chunk of input): 8 MiB bounds what one may take.
	opts := connect.WithHandlerOptions(connect.WithCodec(envdJSON{}), connect.WithReadMaxBytes(8<<20))
	exec, files := store.TokenExec, store.TokenFiles
	return []Route{
		{"GET", Prefix + "/health", s.envd(exec, false, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })},
		{"GET", Prefix + "/files", s.envd(files, false, s.envdReadFile)},
		{"POST", Prefix + "/files", s.envd(files, false, s.envdWriteFile)},
		rpc("/process.Process/Start", exec, connect.NewServerStreamHandler("/process.Process/Start", s.envdStart, opts)),
		rpc("/process.Process/Connect", exec, connect.NewServerStreamHandler("/process.Process/Connect", s.envdConnect, opts)),
		rpc("/process.Process/List", exec, connect.NewUnaryHandler("/process.Process/List", s.envdList, opts)),
		rpc("/process.Process/SendInput", exec, connect.NewUnaryHandler("/process.Process/SendInput", s.envdSendInput, opts)),
		rpc("/process.Process/SendSignal", exec, connect.NewUnaryHandler("/process.Process/SendSignal", s.envdSendSignal, opts)),
		rpc("/process.Process/CloseStdin", exec, connect.NewUnaryHandler("/process.Process/CloseStdin", s.envdCloseStdin, opts)),
		rpc("/process.Process/Update", exec, connect.NewUnaryHandler("/process.Process/Update", s.envdUpdate, opts)),
		rpc("/filesystem.Filesystem/Stat", files, connect.NewUnaryHandler("/filesystem.Filesystem/Stat", s.envdStat, opts)),
		rpc("/filesystem.Filesystem/MakeDir", files, connect.NewUnaryHandler("/filesystem.Filesystem/MakeDir", s.envdMakeDir, opts)),
		rpc("/filesystem.Filesystem/Move", files, connect.NewUnaryHandler("/filesystem.Filesystem/Move", s.envdMove, opts)),
		rpc("/filesystem.Filesystem/ListDir", files, connect.NewUnaryHandler("/filesystem.Filesystem/ListDir", s.envdListDir, opts)),
		rpc("/filesystem.Filesystem/Remove", files, connect.NewUnaryHandler("/filesystem.Filesystem/Remove", s.envdRemove, opts)),
		rpc("/filesystem.Filesystem/WatchDir", files, connect.NewServerStreamHandler("/filesystem.Filesystem/WatchDir", s.envdWatchDir, opts)),
	}
}

// envd authenticates an envd request, finds its sandbox and user, and serves h with them in the
// context (envdTargetOf). Its errors are envd's: {"code": "<connect code>", "message"} for RPCs,
// {"code": <status>, "message"} otherwise.
func (s *dataPlane) envd(scope store.TokenScope, rpc bool, h http.HandlerFunc) http.HandlerFunc {
	fail := func(w http.ResponseWriter, r *http.Request, err error) {
		if rpc {
			status := httperr.Status(err)
			apiutil.WriteJSON(w, status, map[string]string{"code": connectCode(err).String(), "message": apiutil.ErrorDetail(s.log, r, err).Message})
			return
		}
		e2bError(w, r, s.log, err)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("E2b-Sandbox-Id")
		if !apiutil.SessionIDPattern.MatchString(id) {
			fail(w, r, apiutil.ClientErr(errdefs.ErrNotFound, "sandbox %q not found: name it in the E2b-Sandbox-Id header", apiutil.Truncate(id, 64)))
			return
		}
		cred := strings.TrimSpace(r.Header.Get("X-Access-Token"))
		if cred == "" {
			fail(w, r, apiutil.ClientErr(errdefs.ErrUnauthenticated, "missing X-Access-Token: the sandbox's envdAccessToken"))
			return
		}
		p, err := s.cp.Authenticate(r.Context(), cred)
		if err != nil {
			fail(w, r, err)
			return
		}
		r.SetPathValue("id", id) // for the audit log
		s.edge.Serve(w, r, p, cred, func(w http.ResponseWriter, r *http.Request) {
			switch {
			case p.Token == nil && !p.Scope.Allows(store.ScopeWrite):
				fail(w, r, apiutil.ClientErr(errdefs.ErrPermissionDenied, "this API key has scope %s; envd needs write", p.Scope))
				return
			case p.Token != nil && p.Token.SessionID != id:
				fail(w, r, apiutil.ClientErr(errdefs.ErrNotFound, "sandbox %s not found", id))
				return
			case p.Token != nil && !p.Token.Allows(scope):
				fail(w, r, apiutil.ClientErr(errdefs.ErrPermissionDenied, "this access token has scopes %s; %s needs %s", apiutil.JoinTokenScopes(p.Token.Scopes), r.URL.Path, scope))
				return
			}
			user, err := envdUser(r)
			if err != nil {
				fail(w, r, err)
				return
			}
			sb, err := s.cp.SessionSandbox(r.Context(), p.TenantID, id)
			if errors.Is(err, errdefs.ErrConflict) {
				// Paused, and not resumed by work: E2B's "sandbox not running".
				err = fmt.Errorf("sandbox %s is not running (paused): connect to it first: %w", id, errdefs.ErrBadGateway)
			}
			if err != nil {
				fail(w, r, err)
				return
			}
			defer s.cp.BeginWork(r.Context(), p.TenantID, id, sb)()
			t := envdTarget{tenant: p.TenantID, session: id, sandbox: sb, user: user, home: homeOf(user)}
			h(w, r.WithContext(context.WithValue(r.Context(), envdTargetKey{}, t)))
		})
	}
}

// envdUser is the user a request names: Authorization: Basic base64("<user>:") for RPCs, the username
// parameter for /files; "" for the sandbox's default user.
func envdUser(r *http.Request) (string, error) {
	u := r.URL.Query().Get("username")
	if auth := r.Header.Get("Authorization"); auth != "" {
		b64, ok := strings.CutPrefix(auth, "Basic ")
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
		if !ok || err != nil {
			return "", apiutil.ClientErr(errdefs.ErrUnauthenticated, "Authorization must be Basic base64(\"<user>:\")")
		}
		u, _, _ = strings.Cut(string(raw), ":")
	}
	if u == "user" { // E2B templates' user is the sandbox's default user here
		u = ""
	}
	if u != "" && !envdUserPattern.MatchString(u) {
		return "", apiutil.ClientErr(errdefs.ErrUnauthenticated, "invalid username %q", apiutil.Truncate(u, 32))
	}
	return u, nil
}

// envdUserPattern is a user name or a numeric uid.
var envdUserPattern = regexp.MustCompile(`^([a-z_][a-z0-9_-]{0,31}|[0-9]{1,10})$`)

// homeOf is user's home directory (the default user's is /home/user).
func homeOf(user string) string {
	switch user {
	case "":
		return "/home/user"
	case "root":
		return "/root"
	}
	return "/home/" + user
}

// resolve makes p absolute as envd does: "" and "~" are the user's home, "~/x" and relative paths are
// under it.
func (t envdTarget) resolve(p string) (string, error) {
	switch {
	case p == "" || p == "~":
		p = t.home
	case strings.HasPrefix(p, "~/"):
		p = t.home + p[1:]
	case strings.HasPrefix(p, "~"):
		return "", apiutil.ClientErr(errdefs.ErrInvalidArgument, "path %q: only ~ and ~/ are expanded", apiutil.Truncate(p, 64))
	case !strings.HasPrefix(p, "/"):
		p = t.home + "/" + p
	}
	if strings.Contains(p, "\x00") {
		return "", apiutil.ClientErr(errdefs.ErrInvalidArgument, "path holds a NUL byte")
	}
	p = path.Clean(p)
	if err := controlplane.CheckPath(p); err != nil {
		return "", err
	}
	return p, nil
}

// envdPath is the request's target and p resolved for it (a Connect error if p is bad).
func (s *dataPlane) envdPath(ctx context.Context, p string) (envdTarget, string, error) {
	t := envdTargetOf(ctx)
	abs, err := t.resolve(p)
	return t, abs, s.rpcErr(ctx, err)
}

// connectCode is err's Connect code, which the SDKs map to their errors.
func connectCode(err error) connect.Code {
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return ce.Code()
	case errors.Is(err, errdefs.ErrNotFound):
		return connect.CodeNotFound
	case errors.Is(err, errdefs.ErrInvalidArgument), errors.Is(err, errdefs.ErrTooLarge):
		return connect.CodeInvalidArgument
	case errors.Is(err, errdefs.ErrAlreadyExists):
		return connect.CodeAlreadyExists
	case errors.Is(err, errdefs.ErrConflict), errors.Is(err, errdefs.ErrFailedPrecondition):
		return connect.CodeFailedPrecondition
	case errors.Is(err, errdefs.ErrUnauthenticated):
		return connect.CodeUnauthenticated
	case errors.Is(err, errdefs.ErrPermissionDenied):
		return connect.CodePermissionDenied
	case errors.Is(err, errdefs.ErrResourceExhausted):
		return connect.CodeResourceExhausted
	case errors.Is(err, errdefs.ErrUnavailable), errors.Is(err, errdefs.ErrBadGateway):
		return connect.CodeUnavailable
	case errors.Is(err, errdefs.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	}
	return connect.CodeInternal
}

// rpcErr is err as a Connect error with the message /v1 would give ("internal error" for a fault).
func (s *dataPlane) rpcErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	msg := apiutil.ClientMessage(err)
	code := connectCode(err)
	if code == connect.CodeInternal {
		s.log.Error("envd call failed", "sandbox", envdTargetOf(ctx).session, "err", err)
		msg = "internal error"
	}
	return connect.NewError(code, errors.New(msg))
}

// --- processes ---

// envdProcessConfig is process.ProcessConfig.
type envdProcessConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

type envdPTY struct {
	Size *struct {
		Cols uint32 `json:"cols"`
		Rows uint32 `json:"rows"`
	} `json:"size"`
}

type envdStartRequest struct {
	Process *envdProcessConfig `json:"process"`
	PTY     *envdPTY           `json:"pty"`
	Tag     *string            `json:"tag"`
	Stdin   *bool              `json:"stdin"`
}

// envdSelector is process.ProcessSelector: a pid (tags are not kept here).
type envdSelector struct {
	PID *uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

type envdConnectRequest struct {
	Process *envdSelector `json:"process"`
}

// envdProcessResponse is process.StartResponse and process.ConnectResponse: one ProcessEvent.
type envdProcessResponse struct {
	Event envdProcessEvent `json:"event"`
}

type envdProcessEvent struct {
	Start     *envdStartEvent `json:"start,omitempty"`
	Data      *envdDataEvent  `json:"data,omitempty"`
	End       *envdEndEvent   `json:"end,omitempty"`
	Keepalive *struct{}       `json:"keepalive,omitempty"`
}

type envdStartEvent struct {
	PID uint32 `json:"pid"`
}

type envdDataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	PTY    []byte `json:"pty,omitempty"`
}

type envdEndEvent struct {
	ExitCode int32   `json:"exitCode,omitempty"`
	Exited   bool    `json:"exited,omitempty"`
	Status   string  `json:"status,omitempty"`
	Error    *string `json:"error,omitempty"`
}

// endEvent is how envd reports an exit, in Go's words ("exit status 3", "signal: killed").
func endEvent(st controlplane.ExitStatus) *envdEndEvent {
	if st.Signal != "" {
		status := "signal: " + signalWord(st.Signal)
		return &envdEndEvent{ExitCode: -1, Status: status, Error: &status}
	}
	status := fmt.Sprintf("exit status %d", st.ExitCode)
	e := &envdEndEvent{ExitCode: int32(st.ExitCode), Exited: true, Status: status}
	if st.ExitCode != 0 {
		e.Error = &status
	}
	return e
}

// signalWord is how Go's os.ProcessState names a signal.
func signalWord(sig string) string {
	switch strings.TrimPrefix(strings.ToUpper(sig), "SIG") {
	case "KILL":
		return "killed"
	case "TERM":
		return "terminated"
	case "INT":
		return "interrupt"
	case "HUP":
		return "hangup"
	case "PIPE":
		return "broken pipe"
	case "ABRT":
		return "aborted"
	case "SEGV":
		return "segmentation fault"
	}
	return strings.ToLower(sig)
}

// envdSender sends a stream's events one at a time (the output goroutine, the keepalives and the
// handler all send), the first being the start event: output waits for it.
type envdSender[T any] struct {
	mu      sync.Mutex
	st      *connect.ServerStream[T]
	started chan struct{}
	// gone is set once a send failed (the client left): output is then discarded, as envd does
	// while nobody is attached.
	gone bool
}

func newSender[T any](st *connect.ServerStream[T]) *envdSender[T] {
	return &envdSender[T]{st: st, started: make(chan struct{})}
}

func (e *envdSender[T]) send(m *T) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return nil
	}
	if err := e.st.Send(m); err != nil {
		e.gone = true
	}
	return nil
}

// keepalive sends ka every interval the request's Keepalive-Ping-Interval asks (90 s if none) until
// done is closed.
func (e *envdSender[T]) keepalive(h http.Header, ka *T, done <-chan struct{}) {
	every := 90 * time.Second
	if n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval")); err == nil && n > 0 {
		every = time.Duration(n) * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			_ = e.send(ka)
		}
	}
}

// outputWriter turns a process's output into data events.
type outputWriter struct {
	s    *envdSender[envdProcessResponse]
	kind int // 0 stdout, 1 stderr, 2 pty
}

func (w outputWriter) Write(b []byte) (int, error) {
	<-w.s.started
	for off := 0; off < len(b); off += e2bChunk {
		chunk := slices.Clone(b[off:min(off+e2bChunk, len(b))])
		d := &envdDataEvent{}
		switch w.kind {
		case 0:
			d.Stdout = chunk
		case 1:
			d.Stderr = chunk
		default:
			d.PTY = chunk
		}
		_ = w.s.send(&envdProcessResponse{Event: envdProcessEvent{Data: d}})
	}
	return len(b), nil
}

// procKey names a process started through the data plane: its sandbox and pid.
type procKey struct {
	sandbox string
	pid     int
}

// envdProcs are the processes started through this server's data plane, by sandbox and pid, while
// they run: input, resizes and stdin's end go to them directly.
type envdProcs struct {
	mu sync.Mutex
	m  map[procKey]controlplane.Process
}

func (p *envdProcs) put(k procKey, proc controlplane.Process) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[procKey]controlplane.Process{}
	}
	p.m[k] = proc
}

func (p *envdProcs) get(k procKey) controlplane.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[k]
}

func (p *envdProcs) drop(k procKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, k)
}

func (s *dataPlane) envdStart(ctx context.Context, req *connect.Request[envdStartRequest], st *connect.ServerStream[envdProcessResponse]) error {
	t := envdTargetOf(ctx)
	m := req.Msg
	if m.Process == nil || m.Process.Cmd == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	cmd := controlplane.Command{Argv: append([]string{m.Process.Cmd}, m.Process.Args...), User: t.user, Cwd: t.home}
	if m.Process.Cwd != nil && *m.Process.Cwd != "" {
		cwd, err := t.resolve(*m.Process.Cwd)
		if err != nil {
			return s.rpcErr(ctx, err)
		}
		cmd.Cwd = cwd
	}
	if err := apiutil.CheckCommand(&wire.ExecRequest{Cmd: cmd.Argv, Env: m.Process.Envs, Cwd: cmd.Cwd}); err != nil {
		return s.rpcErr(ctx, err)
	}
	cmd.Env = apiutil.EnvList(m.Process.Envs)
	var pty *controlplane.PTYSize
	if m.PTY != nil && m.PTY.Size != nil {
		rows, cols := m.PTY.Size.Rows, m.PTY.Size.Cols
		if rows < 1 || cols < 1 || rows > 1000 || cols > 1000 {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("pty size %dx%d: rows and cols must be between 1 and 1000", cols, rows))
		}
		pty = &controlplane.PTYSize{Rows: uint16(rows), Cols: uint16(cols)}
	}
	snd := newSender(st)
	o := controlplane.StreamOptions{Stdout: outputWriter{snd, 0}, Stderr: outputWriter{snd, 1}}
	if pty != nil {
		o.Stdout = outputWriter{snd, 2}
	}
	proc, err := s.cp.StartProcess(ctx, t.tenant, t.sandbox, cmd, pty, o)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) && !strings.Contains(err.Error(), "sandbox") {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cannot start %s: %v", m.Process.Cmd, apiutil.TrimSentinel(err.Error(), err)))
		}
		return s.rpcErr(ctx, err)
	}
	if m.Stdin != nil && !*m.Stdin && pty == nil {
		_ = proc.CloseStdin()
	}
	return s.followProcess(ctx, req.Header(), t, proc, snd, true)
}

// followProcess streams proc to snd (the start event first) until it exits; owned, it is the one
// Start made: its lifetime is the request's deadline (envd kills a process at Connect-Timeout-Ms, even
// once the client left), and it runs on if the client goes (its output then discarded).
func (s *dataPlane) followProcess(ctx context.Context, h http.Header, t envdTarget, proc controlplane.Process, snd *envdSender[envdProcessResponse], owned bool) error {
	pid := proc.PID()
	key := procKey{t.sandbox, pid}
	_ = snd.send(&envdProcessResponse{Event: envdProcessEvent{Start: &envdStartEvent{PID: uint32(pid)}}})
	close(snd.started)
	done := make(chan struct{})
	go snd.keepalive(h, &envdProcessResponse{Event: envdProcessEvent{Keepalive: &struct{}{}}}, done)
	if !owned {
		defer close(done)
		st, err := proc.Wait(ctx)
		if err != nil {
			proc.Detach()
			return s.rpcErr(ctx, err)
		}
		_ = snd.send(&envdProcessResponse{Event: envdProcessEvent{End: endEvent(st)}})
		return nil
	}
	s.envdProcs.put(key, proc)
	var kill *time.Timer
	if dl, ok := ctx.Deadline(); ok {
		kill = time.AfterFunc(time.Until(dl), func() {
			kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = proc.Signal(kctx, "SIGKILL")
		})
	}
	type exit struct {
		st  controlplane.ExitStatus
		err error
	}
	exited := make(chan exit, 1)
	go func() {
		// Waits past the request: the process is followed (its output discarded once the client
		// left) until it ends, so that its input, size and stdin stay reachable.
		st, err := proc.Wait(context.WithoutCancel(ctx))
		if kill != nil {
			kill.Stop()
		}
		s.envdProcs.drop(key)
		close(done)
		exited <- exit{st, err}
	}()
	select {
	case e := <-exited:
		if e.err != nil {
			return s.rpcErr(ctx, e.err)
		}
		_ = snd.send(&envdProcessResponse{Event: envdProcessEvent{End: endEvent(e.st)}})
		return nil
	case <-ctx.Done():
		snd.mu.Lock()
		snd.gone = true
		snd.mu.Unlock()
		if ae := apiutil.AccessEnded(ctx); ae != nil {
			return s.rpcErr(ctx, apiutil.ClientErr(ae.Err, "%s", apiutil.AccessMessage(ae.Err)))
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return connect.NewError(connect.CodeDeadlineExceeded, errors.New("the command's timeout passed: it was killed"))
		}
		return connect.NewError(connect.CodeCanceled, ctx.Err())
	}
}

// findProcess is the sandbox's process with the pid sel names; one that exited is found only for
// !running (envd keeps no exited process but for its output and end).
func (s *dataPlane) findProcess(ctx context.Context, t envdTarget, sel *envdSelector, running bool) (controlplane.ProcessInfo, error) {
	if sel == nil || sel.PID == nil {
		if sel != nil && sel.Tag != nil {
			return controlplane.ProcessInfo{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %s not found", *sel.Tag))
		}
		return controlplane.ProcessInfo{}, connect.NewError(connect.CodeInvalidArgument, errors.New("process.pid is required"))
	}
	procs, err := s.cp.Processes(ctx, t.tenant, t.sandbox)
	if err != nil {
		return controlplane.ProcessInfo{}, s.rpcErr(ctx, err)
	}
	for _, p := range procs {
		if p.PID == int(*sel.PID) && (p.Running || !running) {
			return p, nil
		}
	}
	return controlplane.ProcessInfo{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", *sel.PID))
}

func (s *dataPlane) envdConnect(ctx context.Context, req *connect.Request[envdConnectRequest], st *connect.ServerStream[envdProcessResponse]) error {
	t := envdTargetOf(ctx)
	info, err := s.findProcess(ctx, t, req.Msg.Process, false)
	if err != nil {
		return err
	}
	snd := newSender(st)
	o := controlplane.StreamOptions{Stdout: outputWriter{snd, 0}, Stderr: outputWriter{snd, 1}}
	if info.PTY { // a terminal's output is one stream, sent as pty data
		o = controlplane.StreamOptions{Stdout: outputWriter{snd, 2}}
	}
	proc, err := s.cp.AttachProcess(ctx, t.tenant, t.sandbox, info.ID, o)
	if err != nil {
		return s.rpcErr(ctx, err)
	}
	return s.followProcess(ctx, req.Header(), t, proc, snd, false)
}

type envdProcessInfo struct {
	Config envdProcessConfig `json:"config"`
	PID    uint32            `json:"pid"`
}

type envdListResponse struct {
	Processes []envdProcessInfo `json:"processes"`
}

func (s *dataPlane) envdList(ctx context.Context, _ *connect.Request[struct{}]) (*connect.Response[envdListResponse], error) {
	t := envdTargetOf(ctx)
	procs, err := s.cp.Processes(ctx, t.tenant, t.sandbox)
	if err != nil {
		return nil, s.rpcErr(ctx, err)
	}
	out := envdListResponse{Processes: []envdProcessInfo{}}
	for _, p := range procs {
		if !p.Running || len(p.Argv) == 0 {
			continue
		}
		out.Processes = append(out.Processes, envdProcessInfo{Config: envdProcessConfig{Cmd: p.Argv[0], Args: p.Argv[1:]}, PID: uint32(p.PID)})
	}
	return connect.NewResponse(&out), nil
}

// withProcess runs f on the process sel names: the one Start made here if it runs, else an attachment
// made for f.
func (s *dataPlane) withProcess(ctx context.Context, sel *envdSelector, f func(controlplane.Process) error) error {
	t := envdTargetOf(ctx)
	info, err := s.findProcess(ctx, t, sel, true)
	if err != nil {
		return err
	}
	if proc := s.envdProcs.get(procKey{t.sandbox, info.PID}); proc != nil {
		return s.rpcErr(ctx, f(proc))
	}
	proc, err := s.cp.AttachProcess(ctx, t.tenant, t.sandbox, info.ID, controlplane.StreamOptions{})
	if err != nil {
		return s.rpcErr(ctx, err)
	}
	defer proc.Detach()
	return s.rpcErr(ctx, f(proc))
}

type envdSendInputRequest struct {
	Process *envdSelector `json:"process"`
	Input   *struct {
		Stdin []byte `json:"stdin,omitempty"`
		PTY   []byte `json:"pty,omitempty"`
	} `json:"input"`
}

func (s *dataPlane) envdSendInput(ctx context.Context, req *connect.Request[envdSendInputRequest]) (*connect.Response[struct{}], error) {
	in := req.Msg.Input
	if in == nil {
		return connect.NewResponse(&struct{}{}), nil
	}
	data := in.Stdin
	if len(in.PTY) > 0 {
		data = in.PTY
	}
	err := s.withProcess(ctx, req.Msg.Process, func(p controlplane.Process) error {
		_, err := p.Write(data)
		return err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&struct{}{}), nil
}

type envdSignalRequest struct {
	Process *envdSelector `json:"process"`
	Signal  envdSignal    `json:"signal"`
}

// envdSignal is process.Signal: a name (SIGNAL_SIGKILL) or its number in JSON.
type envdSignal string

func (e *envdSignal) UnmarshalJSON(b []byte) error {
	if n, err := strconv.Atoi(string(b)); err == nil {
		*e = envdSignal(map[int]string{9: "SIGNAL_SIGKILL", 15: "SIGNAL_SIGTERM"}[n])
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*e = envdSignal(s)
	return nil
}

func (s *dataPlane) envdSendSignal(ctx context.Context, req *connect.Request[envdSignalRequest]) (*connect.Response[struct{}], error) {
	sig := map[envdSignal]string{"SIGNAL_SIGKILL": "SIGKILL", "SIGNAL_SIGTERM": "SIGTERM"}[req.Msg.Signal]
	if sig == "" {
		return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("signal %q: only SIGNAL_SIGKILL and SIGNAL_SIGTERM", apiutil.Truncate(string(req.Msg.Signal), 32)))
	}
	t := envdTargetOf(ctx)
	info, err := s.findProcess(ctx, t, req.Msg.Process, true)
	if err != nil {
		return nil, err
	}
	if err := s.cp.SignalProcess(ctx, t.tenant, t.sandbox, info.ID, sig); err != nil {
		return nil, s.rpcErr(ctx, err)
	}
	return connect.NewResponse(&struct{}{}), nil
}

func (s *dataPlane) envdCloseStdin(ctx context.Context, req *connect.Request[envdConnectRequest]) (*connect.Response[struct{}], error) {
	if err := s.withProcess(ctx, req.Msg.Process, func(p controlplane.Process) error { return p.CloseStdin() }); err != nil {
		return nil, err
	}
	return connect.NewResponse(&struct{}{}), nil
}

type envdUpdateRequest struct {
	Process *envdSelector `json:"process"`
	PTY     *envdPTY      `json:"pty"`
}

func (s *dataPlane) envdUpdate(ctx context.Context, req *connect.Request[envdUpdateRequest]) (*connect.Response[struct{}], error) {
	if p := req.Msg.PTY; p != nil && p.Size != nil {
		rows, cols := p.Size.Rows, p.Size.Cols
		if rows < 1 || cols < 1 || rows > 1000 || cols > 1000 {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("pty size %dx%d: rows and cols must be between 1 and 1000", cols, rows))
		}
		err := s.withProcess(ctx, req.Msg.Process, func(proc controlplane.Process) error {
			return proc.Resize(ctx, uint16(rows), uint16(cols))
		})
		if err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(&struct{}{}), nil
}

// --- the filesystem ---

// envdEntry is filesystem.EntryInfo.
type envdEntry struct {
	Name          string     `json:"name"`
	Type          string     `json:"type,omitempty"`
	Path          string     `json:"path"`
	Size          int64      `json:"size,omitempty,string"`
	Mode          uint32     `json:"mode,omitempty"`
	Permissions   string     `json:"permissions,omitempty"`
	ModifiedTime  *time.Time `json:"modifiedTime,omitempty"`
	SymlinkTarget *string    `json:"symlinkTarget,omitempty"`
}

func entryOf(fi controlplane.FileInfo) envdEntry {
	mode := os.FileMode(fi.Mode & 0o777)
	e := envdEntry{Name: fi.Name, Path: fi.Path, Size: fi.Size, Mode: fi.Mode & 0o777}
	switch fi.Type {
	case controlplane.FileTypeFile:
		e.Type = "FILE_TYPE_FILE"
	case controlplane.FileTypeDir:
		e.Type, mode = "FILE_TYPE_DIRECTORY", mode|os.ModeDir
	case controlplane.FileTypeSymlink:
		e.Type, mode = "FILE_TYPE_SYMLINK", mode|os.ModeSymlink
		target := fi.Target
		e.SymlinkTarget = &target
	}
	e.Permissions = mode.String()
	if !fi.ModTime.IsZero() {
		mt := fi.ModTime.UTC()
		e.ModifiedTime = &mt
	}
	if e.Name == "" {
		e.Name = path.Base(fi.Path)
	}
	return e
}

type envdPathRequest struct {
	Path  string `json:"path"`
	Depth uint32 `json:"depth"`
}

type envdEntryResponse struct {
	Entry envdEntry `json:"entry"`
}

func (s *dataPlane) envdStat(ctx context.Context, req *connect.Request[envdPathRequest]) (*connect.Response[envdEntryResponse], error) {
	t, p, err := s.envdPath(ctx, req.Msg.Path)
	if err != nil {
		return nil, err
	}
	fi, err := s.cp.StatFile(ctx, t.tenant, t.sandbox, p)
	if err != nil {
		return nil, s.rpcErr(ctx, err)
	}
	return connect.NewResponse(&envdEntryResponse{Entry: entryOf(fi)}), nil
}

func (s *dataPlane) envdMakeDir(ctx context.Context, req *connect.Request[envdPathRequest]) (*connect.Response[envdEntryResponse], error) {
	t, p, err := s.envdPath(ctx, req.Msg.Path)
	if err != nil {
		return nil, err
	}
	if fi, err := s.cp.StatFile(ctx, t.tenant, t.sandbox, p); err == nil {
		if fi.Type == controlplane.FileTypeDir {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory already exists: %s", p))
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path already exists and is not a directory: %s", p))
	}
	fi, err := s.cp.MakeDir(ctx, t.tenant, t.sandbox, p)
	if err != nil {
		return nil, s.rpcErr(ctx, err)
	}
	return connect.NewResponse(&envdEntryResponse{Entry: entryOf(fi)}), nil
}

type envdMoveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

func (s *dataPlane) envdMove(ctx context.Context, req *connect.Request[envdMoveRequest]) (*connect.Response[envdEntryResponse], error) {
	t, from, err := s.envdPath(ctx, req.Msg.Source)
	if err != nil {
		return nil, err
	}
	to, err := t.resolve(req.Msg.Destination)
	if err != nil {
		return nil, s.rpcErr(ctx, err)
	}
	if dir := path.Dir(to); dir != "/" {
		if _, err := s.cp.MakeDir(ctx, t.tenant, t.sandbox, dir); err != nil {
			return nil, s.rpcErr(ctx, err)
		}
	}
	fi, err := s.cp.MoveFile(ctx, t.tenant, t.sandbox, from, to)
	if err != nil {
		return nil, s.rpcErr(ctx, err)
	}
	return connect.NewResponse(&envdEntryResponse{Entry: entryOf(fi)}), nil
}

type envdListDirResponse struct {
	Entries []envdEntry `json:"entries"`
}

func (s *dataPlane) envdListDir(ctx context.Context, req *connect.Request[envdPathRequest]) (*connect.Response[envdListDirResponse], error) {
	t, p, err := s.envdPath(ctx, req.Msg.Path)
	if err != nil {
		return nil, err
	}
	depth := int(max(req.Msg.Depth, 1))
	fi, err := s.cp.StatFile(ctx, t.tenant, t.sandbox, p)
	if err != nil {
		return nil, s.rpcErr(ctx, err)
	}
	if fi.Type != controlplane.FileTypeDir {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path is not a directory: %s", p))
	}
	out := envdListDirResponse{Entries: []envdEntry{}}
	err = s.walk(ctx, t, p, depth, e2bMaxWatch, func(fi controlplane.FileInfo) { out.Entries = append(out.Entries, entryOf(fi)) })
	if err != nil {
		return nil, s.rpcErr(ctx, err)
	}
	return connect.NewResponse(&out), nil
}

// walk hands f what lies under dir, depth levels down (1: its entries), in lexical order, depth first,
// at most limit entries (more is an error). Entries that vanish meanwhile are skipped.
func (s *dataPlane) walk(ctx context.Context, t envdTarget, dir string, depth, limit int, f func(controlplane.FileInfo)) error {
	n := 0
	var visit func(dir string, depth int) error
	visit = func(dir string, depth int) error {
		entries, err := s.cp.ListFiles(ctx, t.tenant, t.sandbox, dir)
		if err != nil {
			return err
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
		for _, e := range entries {
			if e.Path == "" {
				e.Path = path.Join(dir, e.Name)
			}
			if n++; n > limit {
				return apiutil.ClientErr(errdefs.ErrResourceExhausted, "more than %d entries under %s", limit, dir)
			}
			f(e)
			if depth > 1 && e.Type == controlplane.FileTypeDir {
				if err := visit(e.Path, depth-1); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
					return err
				}
			}
		}
		return nil
	}
	return visit(dir, depth)
}

func (s *dataPlane) envdRemove(ctx context.Context, req *connect.Request[envdPathRequest]) (*connect.Response[struct{}], error) {
	t, p, err := s.envdPath(ctx, req.Msg.Path)
	if err != nil {
		return nil, err
	}
	if p == "/" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("refusing to remove /"))
	}
	if err := s.cp.RemoveFile(ctx, t.tenant, t.sandbox, p, true); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return nil, s.rpcErr(ctx, err)
	}
	return connect.NewResponse(&struct{}{}), nil
}

type envdWatchRequest struct {
	Path               string `json:"path"`
	Recursive          bool   `json:"recursive"`
	IncludeEntry       bool   `json:"includeEntry"`
	AllowNetworkMounts bool   `json:"allowNetworkMounts"`
}

type envdWatchResponse struct {
	Start      *struct{}    `json:"start,omitempty"`
	Filesystem *envdFsEvent `json:"filesystem,omitempty"`
	Keepalive  *struct{}    `json:"keepalive,omitempty"`
}

type envdFsEvent struct {
	Name  string     `json:"name"`
	Type  string     `json:"type"`
	Entry *envdEntry `json:"entry,omitempty"`
}

// envdWatchDir reports changes under a directory by looking every e2bWatchEvery: a file created,
// written (its size or time changed) or removed. A change undone within one look is not seen, and a
// rename shows as a removal and a creation.
func (s *dataPlane) envdWatchDir(ctx context.Context, req *connect.Request[envdWatchRequest], st *connect.ServerStream[envdWatchResponse]) error {
	t, dir, err := s.envdPath(ctx, req.Msg.Path)
	if err != nil {
		return err
	}
	fi, err := s.cp.StatFile(ctx, t.tenant, t.sandbox, dir)
	if err != nil {
		return s.rpcErr(ctx, err)
	}
	if fi.Type != controlplane.FileTypeDir {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %s is not a directory", dir))
	}
	depth := 1
	if req.Msg.Recursive {
		depth = 64
	}
	type seen struct {
		fi controlplane.FileInfo
	}
	look := func() (map[string]seen, error) {
		m := map[string]seen{}
		err := s.walk(ctx, t, dir, depth, e2bMaxWatch, func(fi controlplane.FileInfo) { m[fi.Path] = seen{fi} })
		return m, err
	}
	before, err := look()
	if err != nil {
		return s.rpcErr(ctx, err)
	}
	snd := newSender(st)
	_ = snd.send(&envdWatchResponse{Start: &struct{}{}})
	close(snd.started)
	done := make(chan struct{})
	defer close(done)
	go snd.keepalive(req.Header(), &envdWatchResponse{Keepalive: &struct{}{}}, done)
	event := func(p, typ string, fi *controlplane.FileInfo) {
		ev := &envdFsEvent{Name: strings.TrimPrefix(strings.TrimPrefix(p, dir), "/"), Type: typ}
		if fi != nil && req.Msg.IncludeEntry {
			e := entryOf(*fi)
			ev.Entry = &e
		}
		_ = snd.send(&envdWatchResponse{Filesystem: ev})
	}
	tick := time.NewTicker(e2bWatchEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if ae := apiutil.AccessEnded(ctx); ae != nil {
				return s.rpcErr(ctx, apiutil.ClientErr(ae.Err, "%s", apiutil.AccessMessage(ae.Err)))
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return connect.NewError(connect.CodeDeadlineExceeded, errors.New("the watch's timeout passed"))
			}
			return nil
		case <-tick.C:
		}
		now, err := look()
		if err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				event(dir, "EVENT_TYPE_REMOVE", nil)
				return connect.NewError(connect.CodeNotFound, fmt.Errorf("the watched directory %s is gone", dir))
			}
			return s.rpcErr(ctx, err)
		}
		paths := make([]string, 0, len(now))
		for p := range now {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, p := range paths {
			n := now[p]
			o, ok := before[p]
			switch {
			case !ok:
				event(p, "EVENT_TYPE_CREATE", &n.fi)
				if n.fi.Size > 0 && n.fi.Type == controlplane.FileTypeFile {
					event(p, "EVENT_TYPE_WRITE", &n.fi)
				}
			case o.fi.Type == n.fi.Type && (o.fi.Size != n.fi.Size || !o.fi.ModTime.Equal(n.fi.ModTime)) && n.fi.Type != controlplane.FileTypeDir:
				event(p, "EVENT_TYPE_WRITE", &n.fi)
			case o.fi.Mode != n.fi.Mode:
				event(p, "EVENT_TYPE_CHMOD", &n.fi)
			}
		}
		gone := make([]string, 0)
		for p := range before {
			if _, ok := now[p]; !ok {
				gone = append(gone, p)
			}
		}
		sort.Strings(gone)
		for _, p := range gone {
			event(p, "EVENT_TYPE_REMOVE", nil)
		}
		before = now
		snd.mu.Lock()
		left := snd.gone
		snd.mu.Unlock()
		if left {
			return nil
		}
	}
}

// --- /files ---

// envdReadFile is GET /files?path=&username=: the file's bytes.
func (s *dataPlane) envdReadFile(w http.ResponseWriter, r *http.Request) {
	t := envdTargetOf(r.Context())
	p, err := t.resolve(r.URL.Query().Get("path"))
	if err == nil {
		p, err = s.followLinks(r.Context(), t, p)
	}
	if err == nil {
		err = apiutil.Download(w, s.log, "application/octet-stream", p, func(lw io.Writer) error {
			return s.cp.ReadFile(r.Context(), t.tenant, t.sandbox, p, lw)
		})
	}
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			err = apiutil.ClientErr(errdefs.ErrNotFound, "path '%s' does not exist", p)
		}
		e2bError(w, r, s.log, err)
	}
}

// followLinks is where p leads inside the sandbox: envd reads through symbolic links, which the
// sandbox's daemon resolves (Airlock's own file calls refuse them). At most 16 links are followed.
func (s *dataPlane) followLinks(ctx context.Context, t envdTarget, p string) (string, error) {
	for range 16 {
		fi, err := s.cp.StatFile(ctx, t.tenant, t.sandbox, p)
		if err != nil || fi.Type != controlplane.FileTypeSymlink {
			return p, nil // ReadFile reports what is wrong
		}
		next := fi.Target
		if !strings.HasPrefix(next, "/") {
			next = path.Join(path.Dir(p), next)
		}
		if p, err = t.resolve(next); err != nil {
			return "", err
		}
	}
	return "", apiutil.ClientErr(errdefs.ErrInvalidArgument, "too many levels of symbolic links at %s", p)
}

// envdWrite is what POST /files answers for each file written.
type envdWrite struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// envdWriteFile is POST /files: multipart/form-data parts named "file" (each part's file name is its
// path unless the path parameter is given), or one application/octet-stream body to the path
// parameter; either may be gzip-encoded (Content-Encoding: gzip). Parent directories are made.
func (s *dataPlane) envdWriteFile(w http.ResponseWriter, r *http.Request) {
	t := envdTargetOf(r.Context())
	out, err := s.envdWrites(w, r, t)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = apiutil.ClientErr(errdefs.ErrTooLarge, "the upload is larger than %d bytes", apiutil.MaxUpload)
		}
		e2bError(w, r, s.log, err)
		return
	}
	apiutil.WriteJSON(w, http.StatusOK, out)
}

func (s *dataPlane) envdWrites(w http.ResponseWriter, r *http.Request, t envdTarget) ([]envdWrite, error) {
	body := io.Reader(http.MaxBytesReader(w, r.Body, apiutil.MaxUpload))
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, apiutil.ClientErr(errdefs.ErrInvalidArgument, "the body is not gzip: %v", err)
		}
		defer zr.Close()
		// What it unpacks to is bounded as an upload is: a small body must not unpack without end.
		body = &capReader{r: zr, left: apiutil.MaxUpload}
	default:
		return nil, apiutil.ClientErr(errdefs.ErrInvalidArgument, "unsupported Content-Encoding %q: identity or gzip", apiutil.Truncate(enc, 32))
	}
	qpath := r.URL.Query().Get("path")
	write := func(p string, rd io.Reader) (envdWrite, error) {
		abs, err := t.resolve(p)
		if err != nil {
			return envdWrite{}, err
		}
		if dir := path.Dir(abs); dir != "/" {
			if _, err := s.cp.MakeDir(r.Context(), t.tenant, t.sandbox, dir); err != nil {
				return envdWrite{}, err
			}
		}
		fi, err := s.cp.WriteFile(r.Context(), t.tenant, t.sandbox, abs, rd, 0o644)
		if err != nil {
			return envdWrite{}, err
		}
		return envdWrite{Path: fi.Path, Name: path.Base(fi.Path), Type: "file"}, nil
	}
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/octet-stream":
		if qpath == "" {
			return nil, apiutil.ClientErr(errdefs.ErrInvalidArgument, "an application/octet-stream upload needs the path parameter")
		}
		wr, err := write(qpath, body)
		if err != nil {
			return nil, err
		}
		return []envdWrite{wr}, nil
	case "multipart/form-data":
		if params["boundary"] == "" {
			return nil, apiutil.ClientErr(errdefs.ErrInvalidArgument, "multipart/form-data without a boundary")
		}
		mr := multipart.NewReader(body, params["boundary"])
		var out []envdWrite
		written := map[string]bool{}
		for {
			part, err := mr.NextRawPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, apiutil.ClientErr(errdefs.ErrInvalidArgument, "multipart body: %v", err)
			}
			// The raw file name: it is the whole path (FileName would keep its last element only).
			_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			if dp["name"] != "file" {
				continue
			}
			p := qpath
			if p == "" {
				p = dp["filename"]
			}
			if p == "" {
				return nil, apiutil.ClientErr(errdefs.ErrInvalidArgument, "a file part needs a file name (its path) or the path parameter")
			}
			if written[p] && qpath == "" {
				return nil, apiutil.ClientErr(errdefs.ErrInvalidArgument, "path %s is given twice", apiutil.Truncate(p, 128))
			}
			written[p] = true
			wr, err := write(p, part)
			if err != nil {
				return nil, err
			}
			out = append(out, wr)
		}
		if len(out) == 0 {
			return nil, apiutil.ClientErr(errdefs.ErrInvalidArgument, "no part named file in the multipart body")
		}
		return out, nil
	}
	return nil, apiutil.ClientErr(errdefs.ErrInvalidArgument, "unsupported content type %q: multipart/form-data or application/octet-stream", apiutil.Truncate(ct, 64))
}

// capReader reads r until left bytes were read; one more is an error (ErrTooLarge).
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		if n, _ := c.r.Read(one[:]); n > 0 {
			return 0, apiutil.ClientErr(errdefs.ErrTooLarge, "the upload unpacks to more than %d bytes", apiutil.MaxUpload)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// --- the codec ---

// envdJSON is the Connect protocol's JSON codec over this file's plain structs, which are shaped as
// protojson writes envd's messages (lowerCamelCase names, defaults left out, int64 as strings, bytes
// as base64, enums by name, a oneof as its member's field).
type envdJSON struct{}

func (envdJSON) Name() string { return "json" }

func (envdJSON) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

func (envdJSON) Unmarshal(b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	return json.Unmarshal(b, v)
}

// e2bPort serves a request to another port of an E2B sandbox than envd's, named by the E2b-Sandbox-Id
// and E2b-Sandbox-Port headers under E2B_SANDBOX_URL (the code interpreter's /execute is one): the
// ingress forwards it as it does a port's path form, authorized by the sandbox's token in E2B's
// headers (or an API key), which never reach the sandbox.
func (s *dataPlane) e2bPort(w http.ResponseWriter, r *http.Request) {
	id, v := r.Header.Get("E2b-Sandbox-Id"), r.Header.Get("E2b-Sandbox-Port")
	port, err := strconv.Atoi(v)
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != v {
		e2bError(w, r, s.log, apiutil.ClientErr(errdefs.ErrInvalidArgument, "invalid E2b-Sandbox-Port %q: want a number in 1..65535", apiutil.Truncate(v, 16)))
		return
	}
	if !apiutil.SessionIDPattern.MatchString(id) {
		e2bError(w, r, s.log, apiutil.ClientErr(errdefs.ErrNotFound, "sandbox %q not found: name it in the E2b-Sandbox-Id header", apiutil.Truncate(id, 64)))
		return
	}
	r.Header.Del("E2b-Sandbox-Id")
	r.Header.Del("E2b-Sandbox-Port")
	r.SetPathValue("id", id)
	r.SetPathValue("port", v)
	r.Pattern = r.Method + " " + Prefix + "/{path...} (E2b-Sandbox-Port: /v1/sessions/{id}/ports/{port}/)"
	rest := strings.TrimPrefix(r.URL.EscapedPath(), Prefix)
	s.edge.ServePort(w, r, id, port, rest, Prefix)
}
