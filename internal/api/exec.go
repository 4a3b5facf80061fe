package api

import (
	"net/http"
	"sort"
	"time"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// Bounds of a run-to-completion exec.
const (
	defaultExecTimeout = 60 * time.Second
	maxExecTimeout     = time.Hour
	// maxExecOutput caps each of stdout and stderr in a run-to-completion response.
	maxExecOutput = 8 << 20
)

// checkCommand validates the parts of an exec request shared by every kind of exec.
func checkCommand(req *wire.ExecRequest) error {
	// No cmd is the template's own command (an image's Entrypoint and Cmd); the sandbox refuses it if
	// its template has none.
	if len(req.Cmd) > 0 && req.Cmd[0] == "" {
		return clientErr(errdefs.ErrInvalidArgument, "cmd[0] is empty: cmd is the argv of the process, e.g. [\"python3\", \"-c\", \"print(1)\"], or absent for the template's own command")
	}
	if len(req.Cmd) > 4096 {
		return clientErr(errdefs.ErrInvalidArgument, "cmd has %d arguments; at most 4096 are allowed", len(req.Cmd))
	}
	for k := range req.Env {
		if !validEnvName(k) {
			return clientErr(errdefs.ErrInvalidArgument, "env name %q is not a valid variable name", truncate(k, 64))
		}
	}
	if req.Cwd != "" {
		if err := checkPath(req.Cwd); err != nil {
			return err
		}
	}
	if req.TimeoutSeconds < 0 || time.Duration(req.TimeoutSeconds)*time.Second > maxExecTimeout {
		return clientErr(errdefs.ErrInvalidArgument, "timeout_seconds must be between 0 and %d", int(maxExecTimeout/time.Second))
	}
	return nil
}

func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var req wire.ExecRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if err := checkCommand(&req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if req.PTY != nil {
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "pty needs the stream: GET /v1/sandboxes/{id}/exec/stream"))
		return
	}
	tenant, id, err := target(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	timeout := defaultExecTimeout
	if req.TimeoutSeconds > 0 {
		timeout = time.Duration(req.TimeoutSeconds) * time.Second
	}
	cmd := controlplane.Command{
		Argv: req.Cmd, Env: envList(req.Env), Cwd: req.Cwd, User: req.User,
		Timeout: timeout, MaxOutput: maxExecOutput,
	}
	if req.Stdin != "" {
		cmd.Stdin = []byte(req.Stdin)
	}
	start := time.Now()
	res, err := s.cp.Exec(r.Context(), tenant, id, cmd)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.ExecResult{
		ExitCode: res.ExitCode, Signal: res.Signal,
		Stdout: string(res.Stdout), Stderr: string(res.Stderr),
		StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated,
		TimedOut: res.TimedOut, DurationMS: time.Since(start).Milliseconds(),
	})
}
