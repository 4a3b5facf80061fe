// Package link is the node-side client of the in-sandbox daemon: it multiplexes many concurrent calls
// over the one connection to a sandbox's daemon (see package proto for the wire protocol).
//
// Every call takes a context; canceling it cancels the call on the daemon side. Errors from the daemon
// match the errdefs sentinels with errors.Is. A lost connection fails every call in progress with an
// error wrapping errdefs.ErrUnavailable; Done and Err report it, and the caller dials again (processes
// survive and can be re-attached with Attach).
//
// The client treats the daemon as untrusted: frames are size-checked, buffering per call is bounded by
// the flow-control window, and a daemon that breaks the protocol gets its connection dropped.
package link

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// Options configures a Client. The zero value works: no audit, no logging.
type Options struct {
	// Audit, if set, receives an Entry for every frame sent or received, in order per direction.
	// Record is called synchronously on the connection's hot path and must not block.
	Audit Audit
	// Logger receives connection-level diagnostics; nil discards them.
	Logger *slog.Logger
	// Shared puts the daemon's connection behind a Mux (Client.Mux) that other clients can join; the
	// Client is its first client, and closing the Client closes the Mux. MuxAudit, if set, is the Mux's
	// audit: it records the frames of every client.
	Shared   bool
	MuxAudit Audit
	// Key, if set, is the sandbox's link key: before anything else the daemon must prove that it holds
	// it (proto.OpHello), or the connection is closed with an error wrapping ErrNotProven.
	Key []byte
}

// ErrNotProven is wrapped by the error of a Dial or Connect whose daemon did not prove that it holds
// the sandbox's link key: what answers is not the sandbox's own daemon (or not one that can say so).
var ErrNotProven = fmt.Errorf("the daemon did not prove it is the sandbox's: %w", errdefs.ErrPermissionDenied)

// ErrNotStarted is wrapped by the error of a call that never reached the daemon because the node moved
// the sandbox's channel first (a checkpoint replaces it; see Mux.DropOthers): the call had no effect and
// may be sent again on a new Client. It wraps errdefs.ErrUnavailable.
var ErrNotStarted = fmt.Errorf("the call did not reach the sandbox: its channel moved: %w", errdefs.ErrUnavailable)

// errAbandoned is reported by a call's next after the call was abandoned (canceled or detached).
var errAbandoned = fmt.Errorf("call canceled: %w", errdefs.ErrFailedPrecondition)

// Client is a connection to one daemon. It is safe for concurrent use.
type Client struct {
	conn  net.Conn
	log   *slog.Logger
	audit Audit

	wmu sync.Mutex // serializes frame writes to conn

	mu      sync.Mutex
	streams map[uint32]*stream // guarded by mu; calls in progress
	nextID  uint32             // guarded by mu; last stream id used
	err     error              // guarded by mu; why the connection ended, once done is closed
	// away is set (wrapping ErrNotStarted) once the Mux in between said the connection closes: no call
	// starts from then on. Guarded by mu.
	away error

	// mux is the Mux the client shares the daemon's connection through (Options.Shared), or nil.
	mux *Mux

	done      chan struct{} // closed when the connection is gone
	closeOnce sync.Once
	// writeFailed arms, once, the drop of a connection a write failed on (see writeFrame).
	writeFailed sync.Once
	readerEnd   chan struct{} // closed when the reader goroutine returned
}

// Dial connects to the daemon listening on the unix socket at socketPath (see Connect). ctx bounds the
// dial and the proof only.
func Dial(ctx context.Context, socketPath string, opts Options) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("dial daemon at %s: %w (%w)", socketPath, err, errdefs.ErrUnavailable)
	}
	return Connect(ctx, conn, opts)
}

// Connect runs the protocol over conn, an established connection to a daemon, which it owns (and
// closes on error). With opts.Key, the daemon must first prove that it holds the key; ctx bounds that
// exchange.
func Connect(ctx context.Context, conn net.Conn, opts Options) (*Client, error) {
	if opts.Key != nil {
		if err := prove(ctx, conn, opts.Key); err != nil {
			conn.Close()
			return nil, err
		}
	}
	if opts.Shared {
		m := NewMux(conn, opts.MuxAudit)
		c := NewClient(m.Pipe(), opts)
		c.mux = m
		return c, nil
	}
	return NewClient(conn, opts), nil
}

// helloStream is the stream of the hello exchange: one that clients reach only after 2^32-2 calls.
const helloStream = math.MaxUint32

// prove asks the daemon on conn to prove that it holds key (proto.OpHello) with a fresh nonce, before
// any other frame, and checks its answer in constant time.
func prove(ctx context.Context, conn net.Conn, key []byte) error {
	nonce := make([]byte, proto.NonceSize)
	rand.Read(nonce)
	payload, err := proto.EncodeRequest(proto.OpHello, proto.HelloRequest{Nonce: nonce})
	if err != nil {
		return err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Second)
	}
	conn.SetDeadline(deadline)
	defer conn.SetDeadline(time.Time{})
	if err := proto.WriteFrame(conn, proto.Frame{Type: proto.TypeRequest, Stream: helloStream, Payload: payload}); err != nil {
		return fmt.Errorf("hello: %v: %w", err, errdefs.ErrUnavailable)
	}
	// Frames are read straight from conn, header then payload, so that nothing past the answer is
	// taken from the connection. A daemon sends nothing unasked: a few stray frames are skipped.
	for range 16 {
		f, err := proto.ReadFrame(conn)
		if err != nil {
			return fmt.Errorf("hello: %v: %w", err, errdefs.ErrUnavailable)
		}
		if f.Stream != helloStream || f.Type != proto.TypeResponse {
			continue
		}
		var res proto.HelloResult
		if err := proto.DecodeResponse(f.Payload, &res); err != nil {
			return fmt.Errorf("%w: %v", ErrNotProven, err)
		}
		if !hmac.Equal(res.Proof, proto.Proof(key, nonce)) {
			return fmt.Errorf("%w: wrong proof", ErrNotProven)
		}
		return nil
	}
	return fmt.Errorf("%w: no answer to hello among the first frames", ErrNotProven)
}

// Mux returns the Mux through which the client shares the daemon's connection (Options.Shared), or
// nil.
func (c *Client) Mux() *Mux { return c.mux }

// NewClient runs the protocol over an established connection (for transports other than a unix
// socket). The Client owns conn and closes it.
func NewClient(conn net.Conn, opts Options) *Client {
	c := &Client{
		conn:      conn,
		log:       opts.Logger,
		audit:     opts.Audit,
		streams:   make(map[uint32]*stream),
		done:      make(chan struct{}),
		readerEnd: make(chan struct{}),
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	go c.readLoop() // owner: Client; ends when the connection closes (Close or failure)
	return c
}

// Close closes the connection and fails the calls in progress. Processes keep running in the sandbox.
// It waits for the client's goroutine to end.
func (c *Client) Close() error {
	c.shutdown(fmt.Errorf("client closed: %w", errdefs.ErrUnavailable))
	<-c.readerEnd
	if c.mux != nil {
		c.mux.Close()
	}
	return nil
}

// Done is closed when the connection is gone (closed, or dropped by either side).
func (c *Client) Done() <-chan struct{} { return c.done }

// Err reports why the connection ended (wrapping errdefs.ErrUnavailable), or nil while it is up.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return c.away
	}
	return c.err
}

// goneAway handles the go-away of the Mux in between: the calls with stream ids after last (in the order
// they were given) never reached the daemon and fail with ErrNotStarted, as does every call from now on;
// the Mux canceled those up to last, which fail as the connection closes, now.
func (c *Client) goneAway(last uint32) {
	c.mu.Lock()
	if c.away == nil {
		c.away = fmt.Errorf("connection to daemon closing: %w", ErrNotStarted)
	}
	err := c.away
	// Ids are given in increasing order (mod 2^32) up to nextID: those after last lie in (last, nextID].
	var failed []*stream
	for id, st := range c.streams {
		if id-last <= c.nextID-last && id != last {
			failed = append(failed, st)
			delete(c.streams, id)
		}
	}
	c.mu.Unlock()
	for _, st := range failed {
		st.fail(err)
	}
	c.shutdown(fmt.Errorf("connection to daemon closed by the node: %w", errdefs.ErrUnavailable))
}

func (c *Client) shutdown(err error) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.err = err
		streams := c.streams
		c.streams = make(map[uint32]*stream)
		c.mu.Unlock()
		c.conn.Close()
		for _, st := range streams {
			st.fail(err)
		}
		close(c.done)
	})
}

func (c *Client) readLoop() {
	defer close(c.readerEnd)
	br := bufio.NewReaderSize(c.conn, 64<<10)
	for {
		f, err := proto.ReadFrameBuf(br, bufs.Get)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				c.shutdown(fmt.Errorf("connection to daemon closed: %w", errdefs.ErrUnavailable))
			} else {
				c.shutdown(fmt.Errorf("connection to daemon: %v: %w", err, errdefs.ErrUnavailable))
			}
			return
		}
		if c.audit != nil {
			var op proto.Op
			if st := c.lookup(f.Stream); st != nil {
				op = st.op
			}
			c.record(FromSandbox, f, op, nil)
		}
		if err := c.dispatch(f); err != nil {
			c.log.Warn("daemon protocol error; dropping the connection", "stream", f.Stream, "type", f.Type, "err", err)
			c.shutdown(fmt.Errorf("daemon protocol error on stream %d: %v: %w", f.Stream, err, errdefs.ErrUnavailable))
			return
		}
	}
}

func (c *Client) lookup(id uint32) *stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

func (c *Client) dispatch(f proto.Frame) error {
	st := c.lookup(f.Stream)
	switch f.Type {
	case proto.TypeData:
		d, err := proto.DecodeData(f.Payload)
		if err != nil {
			return err
		}
		if st != nil {
			return st.push(item{kind: itemData, data: d, buf: f.Payload}, len(d.Bytes))
		}
	case proto.TypeEvent:
		ev, err := proto.DecodeEvent(f.Payload)
		if err != nil {
			return err
		}
		if st != nil {
			return st.push(item{kind: itemEvent, event: ev}, 0)
		}
	case proto.TypeResponse:
		if st != nil {
			c.forget(st.id)
			return st.push(item{kind: itemResponse, resp: f.Payload}, 0)
		}
	case proto.TypeWindow:
		n, err := proto.DecodeWindow(f.Payload)
		if err != nil {
			return err
		}
		if st != nil {
			return st.send.Add(n)
		}
	case proto.TypeGoAway:
		last, err := proto.DecodeGoAway(f.Payload)
		if err != nil {
			return err
		}
		c.goneAway(last)
	default:
		return fmt.Errorf("unexpected %s frame from daemon", f.Type)
	}
	return nil
}

func (c *Client) forget(id uint32) {
	c.mu.Lock()
	delete(c.streams, id)
	c.mu.Unlock()
}

// writeFrame writes one frame of a call to op (args only for requests); a write error drops the
// connection, a moment later.
func (c *Client) writeFrame(t proto.Type, id uint32, payload []byte, op proto.Op, args any) error {
	if c.audit != nil {
		c.record(ToSandbox, proto.Frame{Type: t, Stream: id, Payload: payload}, op, args)
	}
	c.wmu.Lock()
	err := proto.WriteFrame(c.conn, proto.Frame{Type: t, Stream: id, Payload: payload})
	c.wmu.Unlock()
	if err != nil {
		err = fmt.Errorf("write to daemon: %v: %w", err, errdefs.ErrUnavailable)
		// A node that moves a sandbox's channel says so (a go-away) before it closes it, and a write can
		// fail on the close before the reader has read the go-away: the reader, which ends at the close,
		// is left to tell the calls that never reached the daemon (ErrNotStarted) from those that may
		// have. Should it not end, the connection is dropped here.
		c.writeFailed.Do(func() { time.AfterFunc(writeFailGrace, func() { c.shutdown(err) }) })
		return err
	}
	return nil
}

// writeFailGrace is how long a connection a write failed on is left to its reader.
const writeFailGrace = time.Second

// open starts a call: it registers a stream and sends the request.
func (c *Client) open(op proto.Op, args any) (*stream, error) {
	payload, err := proto.EncodeRequest(op, args)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	st := &stream{c: c, op: op, send: proto.NewSendWindow(), wake: make(chan struct{}, 1)}
	c.mu.Lock()
	if c.err != nil || c.away != nil {
		err := c.err
		if err == nil {
			err = c.away
		}
		c.mu.Unlock()
		if !errors.Is(err, ErrNotStarted) {
			err = fmt.Errorf("%v: %w", err, ErrNotStarted)
		}
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	for {
		c.nextID++
		if c.nextID == 0 {
			c.nextID = 1
		}
		if _, used := c.streams[c.nextID]; !used {
			break
		}
	}
	st.id = c.nextID
	c.streams[st.id] = st
	c.mu.Unlock()
	if err := c.writeFrame(proto.TypeRequest, st.id, payload, op, args); err != nil {
		// The other side acts on whole frames only, and a write that failed did not hand all of this
		// one over.
		c.forget(st.id)
		return nil, fmt.Errorf("%s: %v: %w", op, err, ErrNotStarted)
	}
	return st, nil
}

// call runs a unary call and decodes its result into result (which may be nil).
func (c *Client) call(ctx context.Context, op proto.Op, args, result any) error {
	st, err := c.open(op, args)
	if err != nil {
		return err
	}
	defer st.abandon()
	for {
		it, err := st.next(ctx)
		if err != nil {
			return err
		}
		if it.kind == itemResponse {
			return st.decodeResponse(it.resp, result)
		}
		it.release()
	}
}

type itemKind int

const (
	itemData itemKind = iota
	itemEvent
	itemResponse
)

// item is one frame delivered to a call, in arrival order.
type item struct {
	kind  itemKind
	data  proto.Data
	event proto.Event
	resp  []byte
	buf   []byte // the buffer holding data, recycled by release
}

// release recycles the item's buffer; the item's data must not be used afterwards.
func (it *item) release() {
	if it.buf != nil {
		bufs.Put(it.buf)
		it.buf, it.data.Bytes = nil, nil
	}
}

// bufs recycles data frame buffers of all clients.
var bufs proto.BufPool

// stream is the client side of one call.
type stream struct {
	c    *Client
	id   uint32
	op   proto.Op
	send *proto.SendWindow

	mu     sync.Mutex
	queue  []item           // guarded by mu
	events int              // guarded by mu; events in queue
	win    proto.RecvWindow // guarded by mu
	ended  bool             // guarded by mu; the response arrived or the stream failed
	err    error            // guarded by mu; set when the connection failed
	closed bool             // guarded by mu; abandon was called
	wake   chan struct{}    // signalled (non-blocking) when queue or err change
}

func (st *stream) push(it item, n int) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ended {
		return fmt.Errorf("frame after the response")
	}
	if it.kind == itemData {
		if err := st.win.Received(n); err != nil {
			return err
		}
	}
	if it.kind == itemEvent {
		if st.events >= proto.MaxQueuedEvents {
			return fmt.Errorf("more than %d unread events", proto.MaxQueuedEvents)
		}
		st.events++
	}
	if it.kind == itemResponse {
		st.ended = true
		st.send.Close(fmt.Errorf("%s: call ended: %w", st.op, errdefs.ErrFailedPrecondition))
	}
	if !st.closed {
		st.queue = append(st.queue, it)
	}
	st.signalLocked()
	return nil
}

func (st *stream) signalLocked() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

func (st *stream) fail(err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err == nil {
		st.err = err
	}
	st.send.Close(err)
	st.signalLocked()
}

// next returns the next item, waiting for it. It reports the connection's error after the queue is
// drained, and ctx's error (after canceling the call) when ctx ends first.
func (st *stream) next(ctx context.Context) (item, error) {
	for {
		st.mu.Lock()
		if len(st.queue) > 0 {
			it := st.queue[0]
			st.queue[0] = item{}
			st.queue = st.queue[1:]
			var credit uint32
			switch it.kind {
			case itemData:
				credit = st.win.Consumed(len(it.data.Bytes))
			case itemEvent:
				st.events--
			}
			ended := st.ended
			st.mu.Unlock()
			if credit > 0 && !ended {
				st.c.writeFrame(proto.TypeWindow, st.id, proto.EncodeWindow(credit), st.op, nil)
			}
			return it, nil
		}
		err, closed := st.err, st.closed
		st.mu.Unlock()
		if err != nil {
			return item{}, fmt.Errorf("%s: %w", st.op, err)
		}
		if closed {
			return item{}, errAbandoned
		}
		select {
		case <-st.wake:
		case <-ctx.Done():
			st.abandon()
			return item{}, ctx.Err()
		}
	}
}

// abandon forgets the call; if its response has not arrived, the daemon is told to cancel it.
func (st *stream) abandon() {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return
	}
	st.closed = true
	st.queue = nil
	ended := st.ended || st.err != nil
	st.signalLocked()
	st.mu.Unlock()
	st.send.Close(fmt.Errorf("%s: call abandoned: %w", st.op, errdefs.ErrFailedPrecondition))
	if !ended {
		st.c.forget(st.id)
		st.c.writeFrame(proto.TypeCancel, st.id, nil, st.op, nil)
	}
}

// sendData sends b as stdin-channel data frames from offset *off, waiting for credit. It stops with an
// error when the call ended (for example because the daemon answered early with an error).
func (st *stream) sendData(ctx context.Context, off *int64, b []byte) error {
	for len(b) > 0 {
		n, err := st.send.Acquire(ctx, min(len(b), proto.ChunkSize))
		if err != nil {
			return err
		}
		payload := proto.AppendData(bufs.Get(proto.DataHeaderSize + n)[:0], proto.ChannelStdin, *off, b[:n])
		err = st.c.writeFrame(proto.TypeData, st.id, payload, st.op, nil)
		bufs.Put(payload)
		if err != nil {
			return err
		}
		*off += int64(n)
		b = b[n:]
	}
	return nil
}

// closeSend marks the end of the client's data.
func (st *stream) closeSend() error {
	return st.c.writeFrame(proto.TypeClose, st.id, nil, st.op, nil)
}

func (st *stream) decodeResponse(payload []byte, result any) error {
	if err := proto.DecodeResponse(payload, result); err != nil {
		return fmt.Errorf("%s: %w", st.op, err)
	}
	return nil
}

// waitResponse discards items until the response and decodes it.
func (st *stream) waitResponse(ctx context.Context, result any) error {
	for {
		it, err := st.next(ctx)
		if err != nil {
			return err
		}
		if it.kind == itemResponse {
			return st.decodeResponse(it.resp, result)
		}
		it.release()
	}
}
