package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// The code interpreter (…/code/…): stateful code contexts in a sandbox or session of a
// code-interpreter template, whose start command runs Airlock's interpreter server
// (templates/code-interpreter/server.py) on port 49999 in the sandbox. The API reaches it as the
// ingress reaches any port (through the sandbox's node), but checks what it answers: the server is the
// sandbox's, so each line of a run's output is bounded, decoded into known fields and encoded again,
// and a run ends with end_of_execution however the server's output ends.

const (
	// interpreterPort is the port of the interpreter server in the sandbox (E2B's code interpreter's).
	// It runs code for whoever reaches it with the sandbox's interpreter key, so the ingress adds the key
	// for callers that may run code (exec scope) alone, and lets others reach only the routes that run
	// nothing of theirs (ports.go: checkInterpreterPort).
	interpreterPort = 49999
	// interpreterKeyHeader carries the sandbox's interpreter key (proto.IdentityFile) to its
	// interpreter. Only the API sets it: a client's is removed (stripCredentials).
	interpreterKeyHeader = "X-Airlock-Interpreter-Key"
	// maxCodeLine bounds one line of a run's output from the interpreter (a chart is one line).
	maxCodeLine = 32 << 20
	// maxCodeOutput bounds the output of one run passed on from the interpreter.
	maxCodeOutput = 64 << 20
	// defaultCodeTimeout and maxCodeTimeout bound a run.
	defaultCodeTimeout = 300
	maxCodeTimeout     = 3600
	// codeTimeoutGrace is how long past a run's timeout the API waits for the interpreter's own end
	// (it interrupts the run at the timeout, and restarts a kernel that does not stop within 10 s)
	// before it closes the connection and ends the run itself.
	codeTimeoutGrace = 15 * time.Second
	// maxCodeExtra bounds the representations of other MIME types one result may have.
	maxCodeExtra = 32
)

var codeContextPattern = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)

// codeRequest sends a request to the interpreter of t's sandbox. A sandbox where nothing listens on
// the port runs no interpreter: a failed precondition that says how to get one.
func (s *Server) codeRequest(ctx context.Context, t controlplane.PortTarget, method, path string, body []byte) (*http.Response, error) {
	ctx = context.WithValue(ctx, portTargetKey{}, t)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+net.JoinHostPort(t.SandboxID, strconv.Itoa(interpreterPort))+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	key, err := s.cp.InterpreterKey(ctx, t)
	if err != nil {
		return nil, err
	}
	if key != "" {
		req.Header.Set(interpreterKeyHeader, key)
	}
	h1, _ := s.transports()
	resp, err := h1.RoundTrip(req)
	if err != nil {
		if errors.Is(err, errdefs.ErrPortClosed) {
			return nil, clientErr(errdefs.ErrFailedPrecondition, "%s runs no code interpreter (nothing listens on port %d): create it from a code-interpreter template (README: Code interpreter)",
				t.SandboxID, interpreterPort)
		}
		if ctx.Err() != nil {
			// The caller's request ended (the client left), or the interpreter did not answer in time.
			return nil, clientErr(errdefs.ErrDeadlineExceeded, "the code interpreter of %s did not answer in time", t.SandboxID)
		}
		return nil, clientErr(errdefs.ErrBadGateway, "the code interpreter of %s: %v", t.SandboxID, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		text := sandboxText(msg)
		switch resp.StatusCode {
		case http.StatusNotFound:
			return nil, clientErr(errdefs.ErrNotFound, "code interpreter: %s", text)
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			return nil, clientErr(errdefs.ErrInvalidArgument, "code interpreter: %s", text)
		}
		return nil, clientErr(errdefs.ErrBadGateway, "the code interpreter of %s answered %d: %s", t.SandboxID, resp.StatusCode, text)
	}
	return resp, nil
}

// sandboxText is text from a sandbox made fit to show: valid UTF-8, no control characters, bounded.
func sandboxText(b []byte) string {
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	return truncate(strings.TrimSpace(s), 512)
}

// codeTarget resolves the request's sandbox (resuming a paused session) and counts the request as
// activity of it until end is called.
func (s *Server) codeTarget(w http.ResponseWriter, r *http.Request) (t controlplane.PortTarget, end func(), ok bool) {
	_, t, ok = s.portTarget(w, r)
	if !ok {
		return t, nil, false
	}
	release, err := s.ing.acquire(t.SandboxID, false)
	if err != nil {
		writeError(w, r, s.log, err)
		return t, nil, false
	}
	done := s.cp.BeginPortWork(t.TenantID, t.SessionID, t.SandboxID)
	return t, func() { done(); release() }, true
}

// runCode serves POST …/code/run: the run's output as NDJSON events (wire.CodeEvent), as they come.
func (s *Server) runCode(w http.ResponseWriter, r *http.Request) {
	var req wire.RunCodeRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	switch {
	case req.ContextID != "" && req.Language != "":
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "name a context_id or a language, not both"))
		return
	case req.ContextID != "" && !codeContextPattern.MatchString(req.ContextID):
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "invalid context_id %q", truncate(req.ContextID, 64)))
		return
	case req.TimeoutSeconds < 0 || req.TimeoutSeconds > maxCodeTimeout:
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "timeout_seconds must be between 1 and %d (0 or none: %d), got %d",
			maxCodeTimeout, defaultCodeTimeout, req.TimeoutSeconds))
		return
	}
	for k, v := range req.Env {
		if !apiutil.ValidEnvName(k) || strings.ContainsRune(v, 0) {
			writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "invalid environment variable %q: a name of letters, digits and _, a value without NUL", truncate(k, 64)))
			return
		}
	}
	timeout := req.TimeoutSeconds
	if timeout == 0 {
		timeout = defaultCodeTimeout
	}
	t, end, ok := s.codeTarget(w, r)
	if !ok {
		return
	}
	defer end()
	body, _ := json.Marshal(map[string]any{"code": req.Code, "context_id": nonEmpty(req.ContextID), "language": nonEmpty(req.Language),
		"env_vars": req.Env, "timeout": timeout})
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(timeout)*time.Second+codeTimeoutGrace)
	defer cancel()
	resp, err := s.codeRequest(ctx, t, http.MethodPost, "/execute", body)
	if err != nil {
		if r.Context().Err() == nil {
			writeError(w, r, s.log, err)
		}
		return
	}
	defer resp.Body.Close()
	// A client that stops reading holds the run's buffers and the sandbox's activity no longer than the
	// run may last.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Duration(timeout)*time.Second + 2*codeTimeoutGrace))
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // a chart's HTML as it came, not six bytes for each < and >
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	send := func(ev wire.CodeEvent) bool {
		if err := enc.Encode(ev); err != nil {
			return false
		}
		flush()
		return true
	}
	finish := func(name, value string) {
		if name != "" {
			send(wire.CodeEvent{Type: wire.CodeEventError, CodeError: wire.CodeError{Name: name, Value: value}})
		}
		send(wire.CodeEvent{Type: wire.CodeEventEnd})
	}
	br := bufio.NewReaderSize(&boundedReader{r: resp.Body, left: maxCodeOutput}, 64<<10)
	for {
		line, err := readBoundedLine(br, maxCodeLine)
		if err != nil {
			var tl errTooLong
			switch {
			case r.Context().Err() != nil:
				// The client went away: closing the connection interrupts the run.
			case ctx.Err() != nil:
				finish(wire.CodeErrorTimeout, fmt.Sprintf("the run took over %d s; the code interpreter did not end it", timeout))
			case errors.As(err, &tl):
				finish(wire.CodeErrorInterpreter, fmt.Sprintf("the code interpreter sent %v; the run was ended", err))
			default:
				finish(wire.CodeErrorInterpreter, fmt.Sprintf("the code interpreter's output ended without its end: %v", err))
			}
			return
		}
		ev, ok := checkCodeEvent(line)
		if !ok {
			finish(wire.CodeErrorInterpreter, "the code interpreter sent an invalid line; the run was ended")
			return
		}
		if ev.Type == "" {
			continue // a type this API does not pass on
		}
		if ev.Type == wire.CodeEventEnd {
			finish("", "")
			return
		}
		if !send(ev) {
			return
		}
	}
}

func nonEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// errTooLong is an output past one of the bounds.
type errTooLong string

func (e errTooLong) Error() string { return string(e) }

// boundedReader reads at most left bytes, then fails with errTooLong.
type boundedReader struct {
	r    io.Reader
	left int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errTooLong(fmt.Sprintf("over %d bytes of output", maxCodeOutput))
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// readBoundedLine reads one line (without its newline) of at most max bytes.
func readBoundedLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > max+1 {
			return nil, errTooLong(fmt.Sprintf("a line of over %d bytes", max))
		}
		line = append(line, frag...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// interpreterEvent is a line of the interpreter's output: only these fields are read.
type interpreterEvent struct {
	Type           string                     `json:"type"`
	Text           *string                    `json:"text"`
	ExecutionCount *int                       `json:"execution_count"`
	IsMainResult   bool                       `json:"is_main_result"`
	HTML           *string                    `json:"html"`
	Markdown       *string                    `json:"markdown"`
	SVG            *string                    `json:"svg"`
	PNG            *string                    `json:"png"`
	JPEG           *string                    `json:"jpeg"`
	PDF            *string                    `json:"pdf"`
	LaTeX          *string                    `json:"latex"`
	JSON           json.RawMessage            `json:"json"`
	JavaScript     *string                    `json:"javascript"`
	Extra          map[string]json.RawMessage `json:"extra"`
	Name           *string                    `json:"name"`
	Value          *string                    `json:"value"`
	Traceback      *string                    `json:"traceback"`
}

// checkCodeEvent decodes a line of the interpreter's output into the event the API passes on (Type ""
// for a type it does not pass on); ok false if the line is not a JSON object of the known fields' types.
func checkCodeEvent(line []byte) (wire.CodeEvent, bool) {
	var in interpreterEvent
	if !utf8.Valid(line) || json.Unmarshal(line, &in) != nil {
		return wire.CodeEvent{}, false
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	ev := wire.CodeEvent{Type: in.Type}
	switch in.Type {
	case wire.CodeEventStdout, wire.CodeEventStderr:
		ev.Text = str(in.Text)
	case wire.CodeEventCount:
		if in.ExecutionCount == nil || *in.ExecutionCount < 0 {
			return ev, false
		}
		ev.ExecutionCount = *in.ExecutionCount
	case wire.CodeEventResult:
		if len(in.Extra) > maxCodeExtra {
			return ev, false
		}
		ev.Text = str(in.Text)
		ev.CodeResult = wire.CodeResult{IsMainResult: in.IsMainResult, HTML: str(in.HTML), Markdown: str(in.Markdown),
			SVG: str(in.SVG), PNG: str(in.PNG), JPEG: str(in.JPEG), PDF: str(in.PDF), LaTeX: str(in.LaTeX),
			JavaScript: str(in.JavaScript), Extra: in.Extra}
		if len(in.JSON) > 0 && string(in.JSON) != "null" {
			ev.JSON = in.JSON
		}
		for _, b64 := range []string{ev.PNG, ev.JPEG, ev.PDF} {
			if !base64ish(b64) {
				return ev, false
			}
		}
	case wire.CodeEventError:
		ev.CodeError = wire.CodeError{Name: truncate(str(in.Name), 256), Value: str(in.Value), Traceback: str(in.Traceback)}
	case wire.CodeEventEnd:
	default:
		ev.Type = ""
	}
	return ev, true
}

// base64ish reports whether s holds only base64's characters (and line breaks, as Jupyter's images may).
func base64ish(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=' || c == '\n' || c == '\r') {
			return false
		}
	}
	return true
}

// createCodeContext serves POST …/code/contexts.
func (s *Server) createCodeContext(w http.ResponseWriter, r *http.Request) {
	var req wire.CreateCodeContextRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if req.Cwd != "" && (!strings.HasPrefix(req.Cwd, "/") || len(req.Cwd) > 4096 || strings.ContainsRune(req.Cwd, 0)) {
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "cwd must be an absolute path"))
		return
	}
	t, end, ok := s.codeTarget(w, r)
	if !ok {
		return
	}
	defer end()
	body, _ := json.Marshal(map[string]any{"language": nonEmpty(req.Language), "cwd": nonEmpty(req.Cwd)})
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute) // a kernel starts in seconds
	defer cancel()
	resp, err := s.codeRequest(ctx, t, http.MethodPost, "/contexts", body)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	defer resp.Body.Close()
	var c wire.CodeContext
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&c); err != nil || !codeContextPattern.MatchString(c.ID) {
		writeError(w, r, s.log, clientErr(errdefs.ErrBadGateway, "the code interpreter of %s answered a create with no context", t.SandboxID))
		return
	}
	writeJSON(w, http.StatusCreated, checkedContext(c))
}

// checkedContext is c with its strings bounded and made fit to show.
func checkedContext(c wire.CodeContext) wire.CodeContext {
	return wire.CodeContext{ID: c.ID, Language: sandboxText([]byte(c.Language)), Cwd: sandboxText([]byte(c.Cwd))}
}

// listCodeContexts serves GET …/code/contexts.
func (s *Server) listCodeContexts(w http.ResponseWriter, r *http.Request) {
	t, end, ok := s.codeTarget(w, r)
	if !ok {
		return
	}
	defer end()
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	resp, err := s.codeRequest(ctx, t, http.MethodGet, "/contexts", nil)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	defer resp.Body.Close()
	var cs []wire.CodeContext
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&cs); err != nil {
		writeError(w, r, s.log, clientErr(errdefs.ErrBadGateway, "the code interpreter of %s answered an invalid list", t.SandboxID))
		return
	}
	out := wire.CodeContextList{Contexts: []wire.CodeContext{}}
	for _, c := range cs {
		if codeContextPattern.MatchString(c.ID) && len(out.Contexts) < 1000 {
			out.Contexts = append(out.Contexts, checkedContext(c))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// codeContextOp serves DELETE …/code/contexts/{ctx} and POST …/code/contexts/{ctx}/restart.
func (s *Server) codeContextOp(restart bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cid := r.PathValue("ctx")
		if !codeContextPattern.MatchString(cid) {
			writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "invalid context ID %q", truncate(cid, 64)))
			return
		}
		t, end, ok := s.codeTarget(w, r)
		if !ok {
			return
		}
		defer end()
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute)
		defer cancel()
		method, path := http.MethodDelete, "/contexts/"+cid
		if restart {
			method, path = http.MethodPost, path+"/restart"
		}
		resp, err := s.codeRequest(ctx, t, method, path, nil)
		if err != nil {
			writeError(w, r, s.log, err)
			return
		}
		resp.Body.Close()
		w.WriteHeader(http.StatusNoContent)
	}
}
