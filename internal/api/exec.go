package api

import (
	"net/http"
	"time"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// Bounds of a run-to-completion exec.
const (
	defaultExecTimeout = 60 * time.Second
	// maxExecOutput caps each of stdout and stderr in a run-to-completion response.
	maxExecOutput = 8 << 20
)

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var req wire.ExecRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if err := apiutil.CheckCommand(&req); err != nil {
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
		Argv: req.Cmd, Env: apiutil.EnvList(req.Env), Cwd: req.Cwd, User: req.User,
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
