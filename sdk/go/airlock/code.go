package airlock

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// The code interpreter: stateful code contexts (Jupyter kernels) in a sandbox or session of a
// code-interpreter template. A context keeps its variables, imports and files between runs, and a
// session's through a pause and resume.

// Execution is a run's output, gathered.
type Execution struct {
	// Results are the values: the last expression's (IsMainResult) and what was displayed.
	Results []Result `json:"results"`
	Stdout  []string `json:"stdout"`
	Stderr  []string `json:"stderr"`
	// Error is the exception the code raised, nil if none.
	Error          *CodeError `json:"error,omitempty"`
	ExecutionCount int        `json:"execution_count"`
}

// Result is one value of an Execution: its text and other representations.
type Result struct {
	Text string `json:"text,omitempty"`
	CodeResult
}

// Text is the main result's text (the last expression's value), "" if none.
func (e *Execution) Text() string {
	for _, r := range e.Results {
		if r.IsMainResult {
			return r.Text
		}
	}
	return ""
}

// RunCodeOptions are callbacks for a run's output as it comes.
type RunCodeOptions struct {
	OnStdout func(text string)
	OnStderr func(text string)
	OnResult func(Result)
	OnError  func(CodeError)
}

// RunCode runs code in a code context of the sandbox or session id and returns its output. An
// exception in the code is not an error: see Execution.Error. A sandbox that runs no code interpreter
// is a failed-precondition error.
func (c *Client) RunCode(ctx context.Context, id string, req RunCodeRequest, opts *RunCodeOptions) (*Execution, error) {
	if opts == nil {
		opts = &RunCodeOptions{}
	}
	exec := &Execution{Results: []Result{}, Stdout: []string{}, Stderr: []string{}}
	err := c.RunCodeStream(ctx, id, req, func(ev CodeEvent) error {
		switch ev.Type {
		case CodeEventStdout:
			exec.Stdout = append(exec.Stdout, ev.Text)
			if opts.OnStdout != nil {
				opts.OnStdout(ev.Text)
			}
		case CodeEventStderr:
			exec.Stderr = append(exec.Stderr, ev.Text)
			if opts.OnStderr != nil {
				opts.OnStderr(ev.Text)
			}
		case CodeEventResult:
			r := Result{Text: ev.Text, CodeResult: ev.CodeResult}
			exec.Results = append(exec.Results, r)
			if opts.OnResult != nil {
				opts.OnResult(r)
			}
		case CodeEventError:
			e := ev.CodeError
			exec.Error = &e
			if opts.OnError != nil {
				opts.OnError(e)
			}
		case CodeEventCount:
			exec.ExecutionCount = ev.ExecutionCount
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return exec, nil
}

// maxCodeLine bounds one line of a run's output the client reads (a chart is a line): twice the
// server's bound on a line, which its encoding can at most double (U+2028 and U+2029 escaped).
const maxCodeLine = 64 << 20

// RunCodeStream runs code as RunCode does and passes each event of its output to fn as it comes; an
// error from fn ends the run (and interrupts it). The last event is end_of_execution; a stream that
// ends without it is an error.
func (c *Client) RunCodeStream(ctx context.Context, id string, req RunCodeRequest, fn func(CodeEvent) error) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, request{method: http.MethodPost, path: workPath(id, "code", "run"), body: strings.NewReader(string(body)),
		contentType: "application/json"})
	if err != nil {
		return fmt.Errorf("run code in %s: %w", id, err)
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := readLine(br, maxCodeLine)
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("run code in %s: the output ended early: %w", id, io.ErrUnexpectedEOF)
		}
		if err != nil {
			return fmt.Errorf("run code in %s: %w", id, err)
		}
		var ev CodeEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("run code in %s: an invalid output line: %w", id, err)
		}
		if ev.Type == CodeEventEnd {
			return nil
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
}

// readLine reads one line (without its newline) of at most max bytes.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > max+1 {
			return nil, fmt.Errorf("a line of over %d bytes", max)
		}
		line = append(line, frag...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// CreateCodeContext starts a new code context (a kernel of its own) in the sandbox or session id.
func (c *Client) CreateCodeContext(ctx context.Context, id string, req CreateCodeContextRequest) (*CodeContext, error) {
	return callJSON[CodeContext](ctx, c, http.MethodPost, workPath(id, "code", "contexts"), nil, req, "create a code context in %s", id)
}

// ListCodeContexts returns the code contexts of the sandbox or session id.
func (c *Client) ListCodeContexts(ctx context.Context, id string) ([]CodeContext, error) {
	var out CodeContextList
	if err := c.doJSON(ctx, http.MethodGet, workPath(id, "code", "contexts"), nil, nil, &out, nil); err != nil {
		return nil, fmt.Errorf("list the code contexts of %s: %w", id, err)
	}
	return out.Contexts, nil
}

// RestartCodeContext restarts the kernel of a code context: its state is lost.
func (c *Client) RestartCodeContext(ctx context.Context, id, contextID string) error {
	return c.callNoAnswer(ctx, http.MethodPost, workPath(id, "code", "contexts", url.PathEscape(contextID), "restart"), nil, nil, "restart code context %s of %s", contextID, id)
}

// DeleteCodeContext stops a code context and its kernel.
func (c *Client) DeleteCodeContext(ctx context.Context, id, contextID string) error {
	return c.callNoAnswer(ctx, http.MethodDelete, workPath(id, "code", "contexts", url.PathEscape(contextID)), nil, nil, "delete code context %s of %s", contextID, id)
}
