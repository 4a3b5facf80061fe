package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/httperr"
)

// maxStreamMessage caps a client's WebSocket message (stdin chunks, control messages).
const maxStreamMessage = 1 << 20

var processIDPattern = func(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func processID(r *http.Request) (string, error) {
	id := r.PathValue("pid")
	if !processIDPattern(id) {
		return "", clientErr(errdefs.ErrInvalidArgument, "invalid process id %q", truncate(id, 64))
	}
	return id, nil
}

// execStream runs a process and bridges it to a WebSocket: see wire.StreamMessage for the protocol.
func (s *Server) execStream(w http.ResponseWriter, r *http.Request) {
	tenant, id, err := target(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	// Check the sandbox takes calls before upgrading, so a bad one is a plain HTTP error.
	if err := s.cp.CheckIO(r.Context(), tenant, id); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	conn, err := acceptStream(w, r)
	if err != nil {
		return // Accept answered the client
	}
	defer conn.CloseNow()
	conn.SetReadLimit(maxStreamMessage)
	ctx := r.Context()

	readCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	typ, msg, err := conn.Read(readCtx)
	cancel()
	if err != nil {
		return
	}
	var req wire.ExecRequest
	if typ != websocket.MessageText {
		s.streamFail(ctx, conn, clientErr(errdefs.ErrInvalidArgument, "the first message must be a JSON exec request"))
		return
	}
	dec := json.NewDecoder(bytes.NewReader(msg))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.streamFail(ctx, conn, clientErr(errdefs.ErrInvalidArgument, "malformed exec request: %v", err))
		return
	}
	if err := apiutil.CheckCommand(&req); err != nil {
		s.streamFail(ctx, conn, err)
		return
	}
	cmd := controlplane.Command{Argv: req.Cmd, Env: apiutil.EnvList(req.Env), Cwd: req.Cwd, User: req.User}
	var pty *controlplane.PTYSize
	if req.PTY != nil {
		if req.PTY.Rows < 1 || req.PTY.Cols < 1 || req.PTY.Rows > 1000 || req.PTY.Cols > 1000 {
			s.streamFail(ctx, conn, clientErr(errdefs.ErrInvalidArgument, "pty size %dx%d: rows and cols must be between 1 and 1000", req.PTY.Rows, req.PTY.Cols))
			return
		}
		pty = &controlplane.PTYSize{Rows: uint16(req.PTY.Rows), Cols: uint16(req.PTY.Cols)}
	}
	s.bridge(ctx, conn, func(o controlplane.StreamOptions) (controlplane.Process, error) {
		return s.cp.StartProcess(ctx, tenant, id, cmd, pty, o)
	}, true)
}

// attach re-attaches a WebSocket to a running or exited process.
func (s *Server) attach(w http.ResponseWriter, r *http.Request) {
	if err := onlyQuery(r, "stdout_offset", "stderr_offset"); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	pid, err := processID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var offs [2]*int64
	for i, name := range []string{"stdout_offset", "stderr_offset"} {
		if v := r.URL.Query().Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "%s must be a non-negative integer", name))
				return
			}
			offs[i] = &n
		}
	}
	tenant, id, err := target(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	// Check the process exists before upgrading, so a bad ID is a plain 404.
	procs, err := s.cp.Processes(r.Context(), tenant, id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	found := false
	for _, p := range procs {
		found = found || p.ID == pid
	}
	if !found {
		writeError(w, r, s.log, clientErr(errdefs.ErrNotFound, "process %s not found", pid))
		return
	}
	conn, err := acceptStream(w, r)
	if err != nil {
		return // Accept answered the client
	}
	defer conn.CloseNow()
	conn.SetReadLimit(maxStreamMessage)
	ctx := r.Context()
	s.bridge(ctx, conn, func(o controlplane.StreamOptions) (controlplane.Process, error) {
		o.StdoutOffset, o.StderrOffset = offs[0], offs[1]
		return s.cp.AttachProcess(ctx, tenant, id, pid, o)
	}, false)
}

// acceptStream upgrades an exec or attach request to a WebSocket, selecting StreamProtocol if the
// client offered it (a browser that offered subprotocols fails a connection that selects none) and
// never the bearer subprotocol. It keeps the WebSocket library's check that a browser's page is of
// this origin.
func acceptStream(w http.ResponseWriter, r *http.Request) (*websocket.Conn, error) {
	return websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{StreamProtocol}})
}

// wsWriter sends each write as a binary message prefixed with the stream byte.
type wsWriter struct {
	ctx    context.Context
	conn   *websocket.Conn
	stream byte
}

func (w wsWriter) Write(p []byte) (int, error) {
	msg := make([]byte, 1+len(p))
	msg[0] = w.stream
	copy(msg[1:], p)
	if err := w.conn.Write(w.ctx, websocket.MessageBinary, msg); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (s *Server) sendMsg(ctx context.Context, conn *websocket.Conn, m wire.StreamMessage) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return conn.Write(wctx, websocket.MessageText, b)
}

// streamFail reports err on the stream and closes it.
func (s *Server) streamFail(ctx context.Context, conn *websocket.Conn, err error) {
	code := errdefs.Code(err)
	msg := err.Error()
	var ae *apiutil.Error
	if errors.As(err, &ae) {
		msg = ae.Error()
	} else if httperr.Status(err) >= 500 {
		s.log.Error("stream failed", "err", err)
		msg = "internal error"
	} else {
		msg = apiutil.TrimSentinel(msg, err)
	}
	_ = s.sendMsg(ctx, conn, wire.StreamMessage{Type: "error", Error: &wire.ErrorDetail{Code: code, Message: msg}})
	conn.Close(websocket.StatusPolicyViolation, truncate(msg, 100))
}

// bridge connects a process to the WebSocket until the process exits (then it reports the exit and
// closes normally) or the client goes away (then the process is detached and keeps running).
func (s *Server) bridge(ctx context.Context, conn *websocket.Conn, open func(controlplane.StreamOptions) (controlplane.Process, error), announce bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Once the credential no longer holds (revoked, expired), the stream says so and closes; the process
	// is detached and lives on.
	onAccessEnd(ctx, func(reason error) {
		_ = s.sendMsg(ctx, conn, wire.StreamMessage{Type: "error", Error: &wire.ErrorDetail{Code: errdefs.Code(reason), Message: apiutil.AccessMessage(reason)}})
		conn.Close(websocket.StatusPolicyViolation, closeReason(reason))
	})
	p, err := open(controlplane.StreamOptions{
		Stdout: wsWriter{ctx, conn, wire.StreamStdout},
		Stderr: wsWriter{ctx, conn, wire.StreamStderr},
		OnDropped: func(stream string, bytes int64) {
			_ = s.sendMsg(ctx, conn, wire.StreamMessage{Type: "dropped", Stream: stream, Bytes: bytes})
		},
	})
	if err != nil {
		s.streamFail(ctx, conn, err)
		return
	}
	if announce {
		if err := s.sendMsg(ctx, conn, wire.StreamMessage{Type: "started", ProcessID: p.ID()}); err != nil {
			p.Detach()
			return
		}
	}
	// The reader: stdin and control messages from the client. It owns nothing but its loop; it ends
	// when the connection does, and then detaches the process.
	go func() {
		defer p.Detach()
		defer cancel()
		for {
			typ, msg, err := conn.Read(ctx)
			if err != nil {
				return
			}
			if typ == websocket.MessageBinary {
				if len(msg) < 1 || msg[0] != wire.StreamStdin {
					s.streamFail(ctx, conn, clientErr(errdefs.ErrInvalidArgument, "binary messages must start with the stdin stream byte 0"))
					return
				}
				if len(msg) > 1 {
					if _, err := p.Write(msg[1:]); err != nil {
						s.log.Debug("stdin write", "process", p.ID(), "err", err)
					}
				}
				continue
			}
			var m wire.StreamMessage
			if err := json.Unmarshal(msg, &m); err != nil {
				s.streamFail(ctx, conn, clientErr(errdefs.ErrInvalidArgument, "malformed control message: %v", err))
				return
			}
			var cerr error
			switch m.Type {
			case "resize":
				if m.Rows < 1 || m.Cols < 1 || m.Rows > 1000 || m.Cols > 1000 {
					cerr = clientErr(errdefs.ErrInvalidArgument, "resize %dx%d: rows and cols must be between 1 and 1000", m.Rows, m.Cols)
				} else {
					cerr = p.Resize(ctx, uint16(m.Rows), uint16(m.Cols))
				}
			case "signal":
				cerr = p.Signal(ctx, m.Signal)
			case "close_stdin":
				cerr = p.CloseStdin()
			default:
				cerr = clientErr(errdefs.ErrInvalidArgument, "unknown control message type %q: want resize, signal or close_stdin", truncate(m.Type, 32))
			}
			if cerr != nil {
				_ = s.sendMsg(ctx, conn, wire.StreamMessage{Type: "error", Error: &wire.ErrorDetail{Code: errdefs.Code(cerr), Message: apiutil.TrimSentinel(cerr.Error(), cerr)}})
			}
		}
	}()
	st, err := p.Wait(context.Background())
	if err != nil {
		// Delivery ended without an exit: the client went away (the process lives on) or the sandbox did.
		if ctx.Err() == nil {
			s.streamFail(ctx, conn, err)
		}
		return
	}
	code := st.ExitCode
	_ = s.sendMsg(ctx, conn, wire.StreamMessage{Type: "exit", ExitCode: &code, Signal: st.Signal})
	conn.Close(websocket.StatusNormalClosure, "")
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request) {
	tenant, id, err := target(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	procs, err := s.cp.Processes(r.Context(), tenant, id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := wire.ProcessList{Processes: make([]wire.Process, 0, len(procs))}
	for _, p := range procs {
		ap := wire.Process{ID: p.ID, PID: p.PID, Cmd: p.Argv, User: p.User, PTY: p.PTY,
			Running: p.Running, StartedAt: p.StartTime}
		if p.Exit != nil {
			code := p.Exit.ExitCode
			ap.ExitCode, ap.Signal = &code, p.Exit.Signal
		}
		out.Processes = append(out.Processes, ap)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) signal(w http.ResponseWriter, r *http.Request) {
	pid, err := processID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var req wire.SignalRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	tenant, id, err := target(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if err := s.cp.SignalProcess(r.Context(), tenant, id, pid, req.Signal); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
