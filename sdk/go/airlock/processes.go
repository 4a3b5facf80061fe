package airlock

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// Exec runs req.Cmd in the sandbox id to completion and returns its exit status and output. A process
// that exits non-zero is not an error: check ExitCode. req.PTY is not allowed here; use ExecStream.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest) (*ExecResult, error) {
	return callJSON[ExecResult](ctx, c, http.MethodPost, workPath(id, "exec"), nil, req, "exec in sandbox %s", id)
}

// ListProcesses returns the processes started in the sandbox id, running or exited.
func (c *Client) ListProcesses(ctx context.Context, id string) (*ProcessList, error) {
	return callJSON[ProcessList](ctx, c, http.MethodGet, workPath(id, "processes"), nil, nil, "list processes of sandbox %s", id)
}

// SignalProcess sends signal (a name such as "TERM" or "SIGKILL", or a number) to the process processID
// of the sandbox id.
func (c *Client) SignalProcess(ctx context.Context, id, processID, signal string) error {
	err := c.doJSON(ctx, http.MethodPost, workPath(id, "processes", url.PathEscape(processID), "signal"), nil,
		SignalRequest{Signal: signal}, nil, nil)
	if err != nil {
		return fmt.Errorf("signal process %s of sandbox %s: %w", processID, id, err)
	}
	return nil
}
