package link

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// ProcessOptions say where a started or attached process's output goes.
type ProcessOptions struct {
	// Stdout and Stderr receive output as it arrives, from one goroutine, in order per stream (a PTY
	// process writes everything to Stdout). Nil discards. A write that blocks holds back delivery of
	// this process only: the daemon buffers up to its bound, then the process blocks writing output
	// (back-pressure; nothing is dropped while attached, unless the process exits while the writer stays
	// blocked). A write error detaches. Writers must not call Detach or Wait.
	Stdout io.Writer
	Stderr io.Writer
	// OnDropped, if set, is called (from the delivery goroutine) when the daemon reports output lost
	// before delivery.
	OnDropped func(proto.Dropped)
	// StdoutOffset and StderrOffset (Attach only) say where delivery starts: nil means the first byte
	// not yet delivered to any client. Process.Offsets reports where a previous attachment stopped.
	StdoutOffset *int64
	StderrOffset *int64
}

// Process is an attachment to a tracked process in the sandbox: a goroutine delivers its output to the
// writers of ProcessOptions until the process exits (after all output), Detach is called, or the
// connection drops. The process itself lives on in the sandbox in the last two cases.
type Process struct {
	c    *Client
	st   *stream
	info proto.ProcessInfo
	opts ProcessOptions
	done chan struct{} // closed when delivery ended

	wmu         sync.Mutex // serializes Write and CloseStdin
	stdinOff    int64      // guarded by wmu
	stdinClosed bool       // guarded by wmu

	mu      sync.Mutex
	exit    *proto.ExitStatus // guarded by mu
	err     error             // guarded by mu; why delivery ended without an exit
	offsets [2]int64          // guarded by mu; next expected stdout, stderr offsets
	dropped int64             // guarded by mu
}

// Start starts a tracked process and attaches to it. Output is delivered from the first byte.
// ctx bounds the start only; the Process outlives it.
func (c *Client) Start(ctx context.Context, req proto.StartRequest, opts ProcessOptions) (*Process, error) {
	opts.StdoutOffset, opts.StderrOffset = nil, nil
	return c.attach(ctx, proto.OpStart, &req, opts)
}

// Attach attaches to a tracked process, running or exited (and still listed), by its id, for example
// after a new Dial. Output produced while nobody was attached is delivered up to the daemon's
// per-stream bound; OnDropped reports what was lost beyond it. ctx bounds the attach only.
func (c *Client) Attach(ctx context.Context, id string, opts ProcessOptions) (*Process, error) {
	return c.attach(ctx, proto.OpAttach, &proto.AttachRequest{ID: id, StdoutOffset: opts.StdoutOffset, StderrOffset: opts.StderrOffset}, opts)
}

func (c *Client) attach(ctx context.Context, op proto.Op, args any, opts ProcessOptions) (*Process, error) {
	st, err := c.open(op, args)
	if err != nil {
		return nil, err
	}
	it, err := st.next(ctx)
	if err != nil {
		st.abandon()
		return nil, err
	}
	switch {
	case it.kind == itemResponse:
		if err := st.decodeResponse(it.resp, nil); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%s: daemon ended the call without starting: %w", op, errdefs.ErrInternal)
	case it.kind != itemEvent || it.event.Kind != proto.EventStarted || it.event.Process == nil:
		st.abandon()
		return nil, fmt.Errorf("%s: daemon did not report the process first: %w", op, errdefs.ErrInternal)
	}
	p := &Process{c: c, st: st, info: *it.event.Process, opts: opts, done: make(chan struct{})}
	p.offsets = [2]int64{0, 0}
	if opts.StdoutOffset != nil {
		p.offsets[0] = *opts.StdoutOffset
	}
	if opts.StderrOffset != nil {
		p.offsets[1] = *opts.StderrOffset
	}
	go p.deliver() // owner: Process; ends at exit, Detach, or connection loss
	return p, nil
}

// ID reports the daemon-assigned process id.
func (p *Process) ID() string { return p.info.ID }

// Info describes the process as of the start or attach.
func (p *Process) Info() proto.ProcessInfo { return p.info }

// Done is closed when output delivery ended: the process exited and all output was delivered, or the
// attachment was detached or lost.
func (p *Process) Done() <-chan struct{} { return p.done }

// Offsets reports the next stdout and stderr offsets this attachment would deliver; pass them to a
// later Attach to resume exactly.
func (p *Process) Offsets() (stdout, stderr int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.offsets[0], p.offsets[1]
}

// Dropped reports how many output bytes the daemon reported lost to this attachment.
func (p *Process) Dropped() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

func (p *Process) deliver() {
	defer close(p.done)
	end := func(err error) {
		p.mu.Lock()
		if p.exit == nil && p.err == nil {
			p.err = err
		}
		p.mu.Unlock()
	}
	for {
		it, err := p.st.next(context.Background())
		if err != nil {
			if errors.Is(err, errAbandoned) {
				err = fmt.Errorf("process %s: detached: %w", p.info.ID, errdefs.ErrFailedPrecondition)
			}
			end(err)
			return
		}
		switch it.kind {
		case itemData:
			w, i := p.opts.Stdout, 0
			if it.data.Channel == proto.ChannelStderr {
				w, i = p.opts.Stderr, 1
			}
			next := it.data.Offset + int64(len(it.data.Bytes))
			var werr error
			if w != nil {
				_, werr = w.Write(it.data.Bytes) // io.Writer implementations must not retain the slice
			}
			ch := it.data.Channel
			it.release()
			if werr != nil {
				end(fmt.Errorf("process %s: deliver %s: %w", p.info.ID, ch, werr))
				p.st.abandon()
				return
			}
			p.mu.Lock()
			p.offsets[i] = next
			p.mu.Unlock()
		case itemEvent:
			switch it.event.Kind {
			case proto.EventDropped:
				if d := it.event.Dropped; d != nil {
					p.mu.Lock()
					p.dropped += d.Bytes
					p.mu.Unlock()
					if p.opts.OnDropped != nil {
						p.opts.OnDropped(*d)
					}
				}
			case proto.EventExit:
				if it.event.Exit != nil {
					st := *it.event.Exit
					p.mu.Lock()
					p.exit = &st
					p.mu.Unlock()
				}
			}
		case itemResponse:
			var res proto.AttachResult
			if err := p.st.decodeResponse(it.resp, &res); err != nil {
				end(err)
				return
			}
			p.mu.Lock()
			if p.exit == nil && res.Exit != nil {
				st := *res.Exit
				p.exit = &st
			}
			p.mu.Unlock()
			end(fmt.Errorf("process %s: attachment ended: %w", p.info.ID, errdefs.ErrFailedPrecondition))
			return
		}
	}
}

// Wait waits until the process exited and all its output was delivered to the writers, and reports
// how it ended. If delivery ends first (Detach, connection loss) it reports why; the process may still
// be running.
func (p *Process) Wait(ctx context.Context) (proto.ExitStatus, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		return proto.ExitStatus{}, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exit != nil {
		return *p.exit, nil
	}
	return proto.ExitStatus{}, p.err
}

// Write sends b to the process's stdin (or terminal). It blocks while the daemon's buffer for this
// attachment is full, and fails once the attachment ended.
func (p *Process) Write(b []byte) (int, error) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := p.stdinUsableLocked(); err != nil {
		return 0, err
	}
	start := p.stdinOff
	err := p.st.sendData(context.Background(), &p.stdinOff, b)
	n := int(p.stdinOff - start)
	if err != nil {
		return n, fmt.Errorf("process %s: write stdin: %w", p.info.ID, err)
	}
	return n, nil
}

// CloseStdin closes the process's stdin after the data already written; for a PTY process it sends
// end-of-file (^D) to the terminal.
func (p *Process) CloseStdin() error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := p.stdinUsableLocked(); err != nil {
		return err
	}
	p.stdinClosed = true
	if err := p.st.closeSend(); err != nil {
		return fmt.Errorf("process %s: close stdin: %w", p.info.ID, err)
	}
	return nil
}

func (p *Process) stdinUsableLocked() error {
	switch {
	case !p.info.Stdin:
		return fmt.Errorf("process %s has no stdin: %w", p.info.ID, errdefs.ErrFailedPrecondition)
	case p.stdinClosed:
		return fmt.Errorf("process %s: stdin already closed: %w", p.info.ID, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// Resize changes the terminal size of a PTY process.
func (p *Process) Resize(ctx context.Context, rows, cols uint16) error {
	return p.c.ResizeProcess(ctx, p.info.ID, rows, cols)
}

// Signal sends sig (a name like "SIGINT" or "INT", or a number) to the process.
func (p *Process) Signal(ctx context.Context, sig string) error {
	return p.c.SignalProcess(ctx, p.info.ID, sig)
}

// Detach stops output delivery without affecting the process, which keeps running (and buffering its
// output) in the sandbox; Attach resumes. Stdin data the daemon has not yet written to the process is
// discarded. Detach does not wait; Done is closed when delivery stopped.
func (p *Process) Detach() {
	p.st.abandon()
}
