package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// session serves one connection: it reads frames, runs one handler goroutine per stream and writes
// frames for them.
type session struct {
	srv    *server
	conn   net.Conn
	log    *slog.Logger
	ctx    context.Context // canceled when the connection ends
	cancel context.CancelFunc

	wmu sync.Mutex // serializes frame writes to conn

	mu      sync.Mutex
	streams map[uint32]*stream // guarded by mu; streams not yet answered
	last    uint32             // guarded by mu; the last stream the node opened

	handlers sync.WaitGroup // stream handler goroutines
}

func newSession(srv *server, conn net.Conn) *session {
	ctx, cancel := context.WithCancel(context.Background())
	return &session{
		srv:     srv,
		conn:    conn,
		log:     srv.log,
		ctx:     ctx,
		cancel:  cancel,
		streams: make(map[uint32]*stream),
	}
}

// hangUpper is a connection whose far end cannot see it closed (a virtio-serial port stays open for
// the VM's life): HangUp tells the node instead, with frame (a go-away), and ends it.
type hangUpper interface {
	HangUp(frame []byte)
}

// close ends the session: the connection is closed, which stops serve. Over a connection that cannot
// show the node it closed, the node is first sent a go-away naming the last call it opened: none
// after it reached the daemon.
func (s *session) close() {
	s.cancel()
	if h, ok := s.conn.(hangUpper); ok {
		// A write blocked on a node that does not read holds wmu: it gives up in a moment.
		_ = s.conn.SetWriteDeadline(time.Now().Add(time.Second))
		s.mu.Lock()
		last := s.last
		s.mu.Unlock()
		b, err := proto.AppendFrame(nil, proto.Frame{Type: proto.TypeGoAway, Payload: proto.EncodeGoAway(last)})
		if err == nil {
			s.wmu.Lock()
			h.HangUp(b)
			s.wmu.Unlock()
		}
	}
	s.conn.Close()
}

// serve reads frames until the connection fails or is closed, then cancels all calls and waits for
// their handlers.
func (s *session) serve() {
	err := s.readLoop()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		s.log.Warn("connection ended", "err", err)
	}
	s.cancel()
	s.conn.Close()
	s.handlers.Wait()
}

// bufs recycles data frame buffers of all sessions.
var bufs proto.BufPool

func (s *session) readLoop() error {
	br := bufio.NewReaderSize(s.conn, 64<<10)
	for {
		f, err := proto.ReadFrameBuf(br, bufs.Get)
		if err != nil {
			return err
		}
		if err := s.dispatch(f); err != nil {
			return fmt.Errorf("protocol error on stream %d: %w", f.Stream, err)
		}
	}
}

func (s *session) lookup(id uint32) *stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams[id]
}

func (s *session) dispatch(f proto.Frame) error {
	switch f.Type {
	case proto.TypeRequest:
		return s.open(f)
	case proto.TypeData:
		d, err := proto.DecodeData(f.Payload)
		if err != nil {
			return err
		}
		if st := s.lookup(f.Stream); st != nil {
			return st.pushData(f.Payload, len(d.Bytes))
		}
	case proto.TypeClose:
		if st := s.lookup(f.Stream); st != nil {
			st.pushEOF()
		}
	case proto.TypeCancel:
		if st := s.lookup(f.Stream); st != nil {
			st.cancel()
		}
	case proto.TypeWindow:
		n, err := proto.DecodeWindow(f.Payload)
		if err != nil {
			return err
		}
		if st := s.lookup(f.Stream); st != nil {
			return st.send.Add(n)
		}
	default:
		return fmt.Errorf("unexpected %s frame from client: %w", f.Type, errdefs.ErrInvalidArgument)
	}
	return nil
}

// open starts a stream for a request frame and its handler goroutine.
func (s *session) open(f proto.Frame) error {
	op, args, decErr := proto.DecodeRequest(f.Payload)
	s.mu.Lock()
	if _, dup := s.streams[f.Stream]; dup {
		s.mu.Unlock()
		return fmt.Errorf("stream id %d already in use: %w", f.Stream, errdefs.ErrAlreadyExists)
	}
	full := len(s.streams) >= MaxStreams
	s.last = f.Stream
	var st *stream
	if decErr == nil && !full {
		st = newStream(s, f.Stream, op)
		s.streams[f.Stream] = st
	}
	s.mu.Unlock()
	switch {
	case decErr != nil:
		s.writeFrame(proto.TypeResponse, f.Stream, proto.EncodeResponse(nil, decErr))
		return nil
	case full:
		s.writeFrame(proto.TypeResponse, f.Stream, proto.EncodeResponse(nil,
			fmt.Errorf("%d calls in progress on this connection: %w", MaxStreams, errdefs.ErrResourceExhausted)))
		return nil
	}
	s.handlers.Add(1)
	go func() { // owner: session; ends when the handler returns (its ctx ends with the session)
		defer s.handlers.Done()
		result, err := s.srv.handle(st, op, args)
		if err != nil && st.ctx.Err() == nil {
			s.log.Debug("call failed", "op", op, "err", err)
		}
		st.respond(result, err)
		if op == proto.OpQuiesce && err == nil {
			// The answer is out; now let go of the connection (see server.quiesce).
			s.close()
		}
	}()
	return nil
}

// writeFrame writes one frame; a write error closes the connection.
func (s *session) writeFrame(t proto.Type, id uint32, payload []byte) error {
	s.wmu.Lock()
	err := proto.WriteFrame(s.conn, proto.Frame{Type: t, Stream: id, Payload: payload})
	s.wmu.Unlock()
	if err != nil {
		s.close()
		return fmt.Errorf("write %s frame: %w", t, err)
	}
	return nil
}

// stream is the daemon side of one call.
type stream struct {
	id     uint32
	op     proto.Op
	sess   *session
	ctx    context.Context // canceled by a cancel frame, the response, or the end of the session
	cancel context.CancelFunc
	send   *proto.SendWindow

	mu   sync.Mutex
	in   [][]byte         // guarded by mu; received data payloads (with their header) not yet read
	eof  bool             // guarded by mu; the client sent close
	win  proto.RecvWindow // guarded by mu
	wake chan struct{}    // signalled (non-blocking) when in or eof change
}

func newStream(s *session, id uint32, op proto.Op) *stream {
	ctx, cancel := context.WithCancel(s.ctx)
	return &stream{id: id, op: op, sess: s, ctx: ctx, cancel: cancel, send: proto.NewSendWindow(), wake: make(chan struct{}, 1)}
}

// pushData queues a data payload (header included) carrying n bytes.
func (st *stream) pushData(payload []byte, n int) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.eof {
		return nil // data after close is ignored
	}
	if err := st.win.Received(n); err != nil {
		return err
	}
	if n > 0 {
		st.in = append(st.in, payload)
	}
	st.signalLocked()
	return nil
}

func (st *stream) pushEOF() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.eof = true
	st.signalLocked()
}

func (st *stream) signalLocked() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// read returns the next chunk of client data, io.EOF after the client's close, or ctx's error (ctx is
// the stream's context or one derived from it). The chunk is owned by the caller.
func (st *stream) read(ctx context.Context) ([]byte, error) {
	b, _, err := st.readBuf(ctx)
	return b, err
}

// readBuf is read that also returns the buffer holding the chunk, for recycling with bufs.Put once the
// chunk is no longer used.
func (st *stream) readBuf(ctx context.Context) (data, buf []byte, err error) {
	for {
		st.mu.Lock()
		if len(st.in) > 0 {
			buf := st.in[0]
			st.in[0] = nil
			st.in = st.in[1:]
			data := buf[proto.DataHeaderSize:]
			credit := st.win.Consumed(len(data))
			st.mu.Unlock()
			if credit > 0 {
				st.sess.writeFrame(proto.TypeWindow, st.id, proto.EncodeWindow(credit))
			}
			return data, buf, nil
		}
		eof := st.eof
		st.mu.Unlock()
		if eof {
			return nil, nil, io.EOF
		}
		select {
		case <-st.wake:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// reader returns an io.Reader over the client's data.
func (st *stream) reader() io.Reader { return &streamReader{st: st} }

type streamReader struct {
	st    *stream
	chunk []byte // the chunk being consumed, recycled once consumed
	buf   []byte // the unread rest of chunk
}

func (r *streamReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		bufs.Put(r.chunk)
		r.chunk = nil
		b, chunk, err := r.st.readBuf(r.st.ctx)
		if err != nil {
			return 0, err
		}
		r.chunk, r.buf = chunk, b
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// sendData sends b on channel ch as data frames starting at offset off, waiting for flow-control credit.
func (st *stream) sendData(ch proto.Channel, off int64, b []byte) error {
	for len(b) > 0 {
		n, err := st.send.Acquire(st.ctx, min(len(b), proto.ChunkSize))
		if err != nil {
			return err
		}
		if err := st.writeData(ch, off, b[:n]); err != nil {
			return err
		}
		off += int64(n)
		b = b[n:]
	}
	return nil
}

// writeData sends one data frame for which the caller acquired credit.
func (st *stream) writeData(ch proto.Channel, off int64, b []byte) error {
	payload := proto.AppendData(bufs.Get(proto.DataHeaderSize + len(b))[:0], ch, off, b)
	err := st.sess.writeFrame(proto.TypeData, st.id, payload)
	bufs.Put(payload)
	return err
}

// writeDataPayload sends a data payload built by the caller (with proto.AppendData).
func (st *stream) writeDataPayload(payload []byte) error {
	return st.sess.writeFrame(proto.TypeData, st.id, payload)
}

func (st *stream) sendEvent(ev proto.Event) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", ev.Kind, err)
	}
	if len(b) > proto.MaxPayload {
		return fmt.Errorf("%s event of %d bytes: %w", ev.Kind, len(b), proto.ErrFrameTooLarge)
	}
	return st.sess.writeFrame(proto.TypeEvent, st.id, b)
}

// respond ends the stream with its response and forgets it.
func (st *stream) respond(result any, err error) {
	st.sess.mu.Lock()
	delete(st.sess.streams, st.id)
	st.sess.mu.Unlock()
	st.cancel()
	st.send.Close(fmt.Errorf("stream ended: %w", errdefs.ErrFailedPrecondition))
	if st.sess.ctx.Err() != nil {
		return
	}
	st.sess.writeFrame(proto.TypeResponse, st.id, proto.EncodeResponse(result, err))
}

// jsonLines batches values as JSON lines into stdout data frames.
type jsonLines struct {
	st    *stream
	buf   []byte
	off   int64
	count int
}

func (j *jsonLines) add(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode entry: %w", err)
	}
	j.buf = append(append(j.buf, b...), '\n')
	j.count++
	if len(j.buf) >= proto.ChunkSize {
		return j.flush()
	}
	return nil
}

func (j *jsonLines) flush() error {
	if len(j.buf) == 0 {
		return nil
	}
	err := j.st.sendData(proto.ChannelStdout, j.off, j.buf)
	j.off += int64(len(j.buf))
	j.buf = j.buf[:0]
	return err
}
