package airlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"

	"github.com/coder/websocket"
)

const (
	// maxStreamMessage bounds one WebSocket message from the server.
	maxStreamMessage = 16 << 20
	// maxStdinChunk bounds the stdin bytes sent in one WebSocket message, well under the 32 KiB a
	// WebSocket server accepts by default.
	maxStdinChunk = 16 << 10
)

// StreamOptions says where a stream delivers what the process writes. The zero value discards all output.
type StreamOptions struct {
	// Stdout receives the process's standard output (all of its output, when it runs on a terminal).
	// Nil discards it.
	Stdout io.Writer
	// Stderr receives the process's standard error. Nil discards it.
	Stderr io.Writer
	// OnDropped, when set, is told when the server reports output that was lost because it was produced
	// faster than it was read (stream is "stdout" or "stderr").
	OnDropped func(stream string, bytes int64)
}

// AttachOptions configures Attach.
type AttachOptions struct {
	// StreamOptions says where output goes.
	StreamOptions
	// StdoutOffset and StderrOffset, when set, resume output at these byte offsets of each stream; nil
	// resumes at the first byte not yet delivered to any client.
	StdoutOffset *int64
	StderrOffset *int64
}

// exitStatus is how a streamed process ended.
type exitStatus struct {
	code   int
	signal string
}

// Stream is a live connection to a process in a sandbox, from ExecStream or Attach. Output is written to
// the writers of its options, in order, from one goroutine, so a writer shared by stdout and stderr is
// never written concurrently; a slow writer slows the stream down (the server buffers, then drops, output).
//
// The context given to ExecStream or Attach bounds the whole stream, and so every method of it: cancelling
// it closes the stream and ends any call blocked on it. Closing the stream does not stop the process; it
// keeps running and can be re-attached. All methods may be called from any goroutine, Wait more than once.
type Stream struct {
	conn *websocket.Conn
	out  StreamOptions

	// processID is set before started is closed.
	processID string
	// started is closed when the server reported the process started (at once for Attach).
	started chan struct{}
	// startedClosed records that started is closed; only the read loop uses it.
	startedClosed bool

	// done is closed when the stream has ended; status and err are set before.
	done   chan struct{}
	status exitStatus
	err    error
	// finished is closed when the read loop has returned and the connection is closed.
	finished chan struct{}

	// closing is set by Close.
	closing atomic.Bool
}

// ExecStream starts req.Cmd in the sandbox id and returns a stream connected to its stdin, stdout and
// stderr once the process started. Set req.PTY to run it on a terminal of that size. req.Stdin and
// req.TimeoutSeconds apply to Exec only.
//
// ctx bounds the whole stream, not only its start. The caller must call Close.
func (c *Client) ExecStream(ctx context.Context, id string, req ExecRequest, opts StreamOptions) (*Stream, error) {
	s, err := c.dialStream(ctx, workPath(id, "exec", "stream"), nil, opts)
	if err != nil {
		return nil, fmt.Errorf("exec stream in sandbox %s: %w", id, err)
	}
	b, err := json.Marshal(req)
	if err != nil {
		_ = s.conn.CloseNow()
		return nil, fmt.Errorf("exec stream in sandbox %s: encode request: %w", id, err)
	}
	if err := s.conn.Write(ctx, websocket.MessageText, b); err != nil {
		_ = s.conn.CloseNow()
		return nil, fmt.Errorf("exec stream in sandbox %s: send request: %w", id, err)
	}
	go s.run(ctx)
	select {
	case <-s.started:
		return s, nil
	case <-s.done:
		select {
		case <-s.started:
			return s, nil // started, then the stream ended at once: Wait reports how
		default:
		}
		if s.err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("exec stream in sandbox %s: %w", id, s.err)
		}
		return s, nil // it exited before it was reported started: Wait has its status
	}
}

// Attach connects to the process processID of the sandbox id, running or exited, and returns a stream
// that delivers its remaining output and its exit status. ctx bounds the whole stream. The caller must
// call Close.
func (c *Client) Attach(ctx context.Context, id, processID string, opts AttachOptions) (*Stream, error) {
	q := url.Values{}
	if opts.StdoutOffset != nil {
		q.Set("stdout_offset", strconv.FormatInt(*opts.StdoutOffset, 10))
	}
	if opts.StderrOffset != nil {
		q.Set("stderr_offset", strconv.FormatInt(*opts.StderrOffset, 10))
	}
	path := workPath(id, "processes", url.PathEscape(processID), "attach")
	s, err := c.dialStream(ctx, path, q, opts.StreamOptions)
	if err != nil {
		return nil, fmt.Errorf("attach to process %s of sandbox %s: %w", processID, id, err)
	}
	s.processID = processID
	s.startedClosed = true
	close(s.started)
	go s.run(ctx)
	return s, nil
}

// dialStream opens the WebSocket at path. A refused upgrade is reported as the *APIError of its response.
func (c *Client) dialStream(ctx context.Context, path string, q url.Values, opts StreamOptions) (*Stream, error) {
	conn, resp, err := websocket.Dial(ctx, c.url(path, q), &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: c.header()})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, errorFromResponse(resp)
		}
		return nil, err
	}
	conn.SetReadLimit(maxStreamMessage)
	return &Stream{
		conn:     conn,
		out:      opts,
		started:  make(chan struct{}),
		done:     make(chan struct{}),
		finished: make(chan struct{}),
	}, nil
}

// ProcessID reports the ID of the process, to attach to or signal it later. It is "" only for a process
// that exited before the server reported it started.
func (s *Stream) ProcessID() string { return s.processID }

// Write sends p to the process's stdin. It blocks while the server does not take more.
func (s *Stream) Write(p []byte) (int, error) {
	if err := s.ended("write stdin"); err != nil {
		return 0, err
	}
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), maxStdinChunk)]
		msg := make([]byte, 1+len(chunk))
		msg[0] = StreamStdin
		copy(msg[1:], chunk)
		// No context: the stream's own context, or Close, closes the connection and so ends the write.
		if err := s.conn.Write(context.Background(), websocket.MessageBinary, msg); err != nil {
			return n, s.sendErr("write stdin", err)
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// CloseStdin closes the process's stdin: it reads end of file once it consumed what was written.
func (s *Stream) CloseStdin() error {
	return s.send(StreamMessage{Type: "close_stdin"})
}

// Resize changes the size of the process's terminal.
func (s *Stream) Resize(rows, cols int) error {
	return s.send(StreamMessage{Type: "resize", Rows: rows, Cols: cols})
}

// Signal sends a signal (a name such as "INT" or "SIGTERM", or a number) to the process.
func (s *Stream) Signal(signal string) error {
	return s.send(StreamMessage{Type: "signal", Signal: signal})
}

// send writes a control message. No context: the stream's own context, or Close, ends a blocked write.
func (s *Stream) send(m StreamMessage) error {
	if err := s.ended("send " + m.Type); err != nil {
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s message: %w", m.Type, err)
	}
	if err := s.conn.Write(context.Background(), websocket.MessageText, b); err != nil {
		return s.sendErr("send "+m.Type, err)
	}
	return nil
}

// ended returns the error for sending on a stream that has ended, or nil while it runs.
func (s *Stream) ended(op string) error {
	select {
	case <-s.done:
		return s.sendErr(op, ErrStreamClosed)
	default:
		return nil
	}
}

// sendErr describes a failed send: ErrStreamClosed after Close, the stream's own error once it ended.
func (s *Stream) sendErr(op string, err error) error {
	if s.closing.Load() {
		return fmt.Errorf("%s: %w", op, ErrStreamClosed)
	}
	select {
	case <-s.done:
		if s.err != nil {
			return fmt.Errorf("%s: %w", op, s.err)
		}
		return fmt.Errorf("%s: the process exited: %w", op, ErrStreamClosed)
	default:
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Done is closed when the stream has ended: the process exited, or the stream failed or was closed.
func (s *Stream) Done() <-chan struct{} { return s.done }

// Wait waits for the stream to end and reports the process's exit code: -1 when a signal killed it (see
// ExitSignal). The error is not nil when the stream ended before the process did: ErrStreamClosed after
// Close, the context's error, an *APIError from the server, or a connection error.
func (s *Stream) Wait() (int, error) {
	<-s.done
	if s.err != nil {
		return -1, s.err
	}
	return s.status.code, nil
}

// ExitSignal names the signal that killed the process ("KILL"), once Wait returned; it is "" when the
// process exited by itself or has not exited.
func (s *Stream) ExitSignal() string {
	select {
	case <-s.done:
		return s.status.signal
	default:
		return ""
	}
}

// Close disconnects the stream, leaving the process running, and waits until its delivery of output has
// stopped. It is safe to call more than once and after the process exited.
func (s *Stream) Close() error {
	s.closing.Store(true)
	select {
	case <-s.done:
	default:
		if err := s.conn.Close(websocket.StatusNormalClosure, ""); err != nil {
			_ = s.conn.CloseNow()
		}
	}
	<-s.finished
	return nil
}

// run reads the stream until it ends, then closes the connection.
func (s *Stream) run(ctx context.Context) {
	defer close(s.finished)
	stop := context.AfterFunc(ctx, func() { _ = s.conn.CloseNow() })
	defer stop()
	s.status, s.err = s.read(ctx)
	close(s.done)
	if s.err == nil {
		_ = s.conn.Close(websocket.StatusNormalClosure, "")
	} else {
		_ = s.conn.CloseNow()
	}
}

// read delivers messages until the exit message, an error message, or a broken connection.
func (s *Stream) read(ctx context.Context) (exitStatus, error) {
	for {
		typ, data, err := s.conn.Read(ctx)
		if err != nil {
			switch {
			case s.closing.Load():
				return exitStatus{}, ErrStreamClosed
			case ctx.Err() != nil:
				return exitStatus{}, ctx.Err()
			case websocket.CloseStatus(err) == websocket.StatusNormalClosure:
				return exitStatus{}, errors.New("the server closed the stream before the process exited")
			default:
				return exitStatus{}, fmt.Errorf("read stream: %w", err)
			}
		}
		switch typ {
		case websocket.MessageBinary:
			if err := s.deliver(data); err != nil {
				return exitStatus{}, err
			}
		case websocket.MessageText:
			var m StreamMessage
			if err := json.Unmarshal(data, &m); err != nil {
				return exitStatus{}, fmt.Errorf("malformed stream message: %w", err)
			}
			switch m.Type {
			case "started":
				if !s.startedClosed {
					s.processID = m.ProcessID
					s.startedClosed = true
					close(s.started)
				}
			case "dropped":
				if s.out.OnDropped != nil {
					s.out.OnDropped(m.Stream, m.Bytes)
				}
			case "exit":
				st := exitStatus{code: -1, signal: m.Signal}
				if m.ExitCode != nil {
					st.code = *m.ExitCode
				}
				return st, nil
			case "error":
				if m.Error == nil {
					return exitStatus{}, &APIError{Status: http.StatusInternalServerError, Code: "internal", Message: "stream failed"}
				}
				return exitStatus{}, errorFromDetail(*m.Error)
			default:
				// Unknown messages are ignored, so that servers can add new ones.
			}
		}
	}
}

// deliver writes the data of a binary message to the writer of its stream.
func (s *Stream) deliver(data []byte) error {
	if len(data) < 2 {
		return nil
	}
	var w io.Writer
	var name string
	switch data[0] {
	case StreamStdout:
		w, name = s.out.Stdout, "stdout"
	case StreamStderr:
		w, name = s.out.Stderr, "stderr"
	default:
		return nil
	}
	if w == nil {
		return nil
	}
	if _, err := w.Write(data[1:]); err != nil {
		return fmt.Errorf("deliver %s: %w", name, err)
	}
	return nil
}
