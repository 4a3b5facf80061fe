package link

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// MaxMuxQueue bounds the bytes of frames a Mux holds for one client that reads too slowly; past it the
// client is dropped, so that it cannot hold up the daemon's frames to the others.
const MaxMuxQueue = 64 << 20

// frameCost is what a queued frame costs beside its buffer.
const frameCost = 64

// Mux shares the one connection to a daemon among several clients: the node's own Client, and those of
// control-plane replicas that reach the sandbox through the node. Each client speaks the protocol on a
// connection of its own as if it had the daemon to itself; the Mux gives each of its streams a stream ID
// on the daemon's connection and translates the IDs of every frame both ways. Flow control stays end to
// end (window frames pass through), so the Mux buffers no more than the windows allow, bounded by
// MaxMuxQueue per client.
//
// A client that goes away has its streams canceled on the daemon (processes keep running and can be
// attached again). When the daemon's connection ends, every client's connection is closed.
type Mux struct {
	daemon   net.Conn
	audit    Audit
	maxQueue int

	wmu sync.Mutex // serializes writes to daemon

	mu      sync.Mutex
	routes  map[uint32]muxRoute // daemon stream ID → the client's stream; guarded by mu
	next    uint32              // last daemon stream ID given; guarded by mu
	clients map[*muxClient]struct{}
	err     error // why the daemon connection ended, once done is closed; guarded by mu
	// own is the Mux's own client (Pipe's first); once others is set (DropOthers), no other client may
	// open a stream. Both guarded by mu.
	own    *muxClient
	others bool

	done chan struct{}
	wg   sync.WaitGroup
	// writeFailed bounds, once, the reading of what is left when a write to the daemon failed.
	writeFailed sync.Once
}

type muxRoute struct {
	c  *muxClient
	id uint32
	op proto.Op
}

// NewMux starts sharing conn, the connection to a daemon; the Mux owns it. Audit, if set, records every
// frame between the daemon and any client, under the daemon connection's stream IDs.
func NewMux(conn net.Conn, audit Audit) *Mux {
	m := &Mux{daemon: conn, audit: audit, maxQueue: MaxMuxQueue, routes: map[uint32]muxRoute{}, clients: map[*muxClient]struct{}{}, done: make(chan struct{})}
	m.wg.Add(1)
	go m.readDaemon() // owner: Mux; ends when the daemon connection ends
	return m
}

// Done is closed when the daemon's connection is gone.
func (m *Mux) Done() <-chan struct{} { return m.done }

// Err reports why the daemon's connection ended, or nil while it is up.
func (m *Mux) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Close closes the daemon's connection and every client's, and waits for the Mux's goroutines.
func (m *Mux) Close() error {
	m.fail(fmt.Errorf("connection closed: %w", errdefs.ErrUnavailable))
	m.wg.Wait()
	return nil
}

// Pipe returns a new client's end of an in-process connection through the Mux (for the node's own
// Client: NewClient(m.Pipe(), opts)). The first is the Mux's own client, which DropOthers keeps.
func (m *Mux) Pipe() net.Conn {
	a, b := net.Pipe()
	c := m.serve(b)
	m.mu.Lock()
	if m.own == nil {
		m.own = c
	}
	m.mu.Unlock()
	return a
}

// Active reports how many streams are in progress on the daemon's connection, from every client
// (those of clients gone included, until the daemon ended them).
func (m *Mux) Active() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.routes)
}

// DropOthers closes the connection of every client but the Mux's own (Pipe's first) and takes no new
// stream from any but it from then on: their streams in progress are canceled on the daemon (the
// processes live on), and they must join the daemon's next connection. Each is told first, in a
// proto.TypeGoAway frame, which of its requests reached the daemon, so that it can send the others again
// there (link.ErrNotStarted). With ifIdle it does so only while no stream at all is in progress, and
// reports whether it did; the check and the closing are one step, so no stream of theirs starts in
// between.
func (m *Mux) DropOthers(ifIdle bool) bool {
	m.mu.Lock()
	if ifIdle && len(m.routes) > 0 {
		m.mu.Unlock()
		return false
	}
	m.others = true
	type drop struct {
		c    *muxClient
		last uint32
	}
	var drops []drop
	for c := range m.clients {
		if c != m.own {
			drops = append(drops, drop{c, c.last})
		}
	}
	m.mu.Unlock()
	for _, d := range drops {
		d.c.goAway(d.last)
	}
	return true
}

// Serve makes conn a client of the Mux, in goroutines of the Mux's own; the Mux owns conn and closes it
// when either side ends. A Mux whose daemon connection ended, or that takes no other client
// (DropOthers), tells conn so in a go-away frame (none of its requests reached the daemon) and closes it.
func (m *Mux) Serve(conn net.Conn) { m.serve(conn) }

// serve is Serve, returning the client (nil if the Mux did not take it).
func (m *Mux) serve(conn net.Conn) *muxClient {
	c := &muxClient{m: m, conn: conn, ids: map[uint32]uint32{}, wake: make(chan struct{}, 1), gone: make(chan struct{})}
	m.mu.Lock()
	if m.err != nil || m.others {
		m.mu.Unlock()
		// Not on this goroutine: the caller may be the one to read conn (Pipe).
		go func() { // owner: conn; ends within twice finishDeadline
			_ = conn.SetDeadline(time.Now().Add(finishDeadline))
			_ = proto.WriteFrame(conn, proto.Frame{Type: proto.TypeGoAway, Payload: proto.EncodeGoAway(0)})
			// Until the client closes (see goAway).
			_ = conn.SetReadDeadline(time.Now().Add(finishDeadline))
			_, _ = io.Copy(io.Discard, conn)
			conn.Close()
		}()
		return nil
	}
	m.clients[c] = struct{}{}
	m.wg.Add(2)
	m.mu.Unlock()
	go c.readLoop()  // owner: Mux; ends when the client's connection ends
	go c.writeLoop() // owner: Mux; ends when the client is gone
	return c
}

func (m *Mux) fail(err error) {
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		return
	}
	m.err = err
	clients := m.clients
	m.clients = map[*muxClient]struct{}{}
	m.routes = map[uint32]muxRoute{}
	close(m.done)
	m.mu.Unlock()
	m.daemon.Close()
	// Each client gets what the daemon sent before it went (the answer to a quiesce comes just before
	// the daemon closes its end), then its connection closes.
	for c := range clients {
		c.finish()
	}
}

// record hands an audit entry for a frame on the daemon's connection to the audit sink.
func (m *Mux) record(dir Direction, f proto.Frame, op proto.Op, args any) {
	if m.audit != nil {
		recordFrame(m.audit, dir, f, op, args)
	}
}

// writeDaemon writes one frame to the daemon; a failure ends the Mux.
func (m *Mux) writeDaemon(f proto.Frame, op proto.Op) error {
	if m.audit != nil {
		var args any
		if f.Type == proto.TypeRequest {
			if _, a, err := proto.DecodeRequest(f.Payload); err == nil {
				args = a
			}
		}
		m.record(ToSandbox, f, op, args)
	}
	m.wmu.Lock()
	err := proto.WriteFrame(m.daemon, f)
	m.wmu.Unlock()
	if err != nil {
		// The daemon's end is gone, but what it sent before it went is still to be read: the answer to
		// a quiesce comes just before the daemon closes its end, and a frame another client wrote
		// meanwhile must not lose it. The reader ends the Mux once it has read all (or in readDrain).
		m.writeFailed.Do(func() { _ = m.daemon.SetReadDeadline(time.Now().Add(readDrain)) })
		return fmt.Errorf("write to daemon: %v: %w", err, errdefs.ErrUnavailable)
	}
	return nil
}

// readDrain is how long the reader may still take to read what the daemon sent once a write to it
// failed.
const readDrain = 2 * time.Second

// readDaemon routes the daemon's frames to the clients whose streams they belong to.
func (m *Mux) readDaemon() {
	defer m.wg.Done()
	br := bufio.NewReaderSize(m.daemon, 64<<10)
	for {
		f, err := proto.ReadFrameBuf(br, bufs.Get)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				m.fail(fmt.Errorf("connection to daemon closed: %w", errdefs.ErrUnavailable))
			} else {
				m.fail(fmt.Errorf("connection to daemon: %v: %w", err, errdefs.ErrUnavailable))
			}
			return
		}
		if f.Type == proto.TypeGoAway {
			// The daemon ended its connection over a channel that cannot show a close (a VM's
			// virtio-serial port, daemon.HangUp): what it sent before is delivered, as for a close.
			bufs.Put(f.Payload)
			m.fail(fmt.Errorf("connection to daemon closed by the daemon: %w", errdefs.ErrUnavailable))
			return
		}
		m.mu.Lock()
		r, ok := m.routes[f.Stream]
		if ok && f.Type == proto.TypeResponse {
			delete(m.routes, f.Stream)
			if r.c != nil {
				delete(r.c.ids, r.id)
			}
		}
		m.mu.Unlock()
		m.record(FromSandbox, f, r.op, nil)
		if !ok || r.c == nil {
			bufs.Put(f.Payload)
			continue // a stream nobody waits for any more (its client went away)
		}
		f.Stream = r.id
		r.c.enqueue(f)
	}
}

// muxClient is one client of a Mux.
type muxClient struct {
	m    *Mux
	conn net.Conn
	// ids maps the client's stream IDs to the daemon's; guarded by m.mu.
	ids map[uint32]uint32
	// last is the client's stream ID of the last request passed to the daemon (0: none); guarded by m.mu.
	last uint32

	qmu    sync.Mutex
	queue  []proto.Frame // frames for the client, in order; guarded by qmu
	queued int           // their payload bytes; guarded by qmu
	// finishing is set once the daemon's connection ended: the client is closed when its queue is
	// written (one told to go away closes itself, or goAway's timer closes it). Guarded by qmu.
	finishing bool
	wake      chan struct{}

	// wmu orders the client's frames to the daemon: its reader's, then the cancels of close.
	wmu sync.Mutex

	once sync.Once
	gone chan struct{}
}

func (c *muxClient) isGone() bool {
	select {
	case <-c.gone:
		return true
	default:
		return false
	}
}

// enqueue queues a frame for the client; one that lets more than the Mux's bound pile up is dropped.
func (c *muxClient) enqueue(f proto.Frame) {
	// A frame holds its buffer's whole capacity (a pooled one is larger than its payload) and its
	// place in the queue.
	cost := cap(f.Payload) + frameCost
	c.qmu.Lock()
	over := c.queued+cost > c.m.maxQueue
	if !over {
		c.queue = append(c.queue, f)
		c.queued += cost
	}
	c.qmu.Unlock()
	if over {
		bufs.Put(f.Payload)
		// Not on this goroutine, which reads the daemon for every client: closing a TLS connection
		// may block.
		c.m.wg.Add(1)
		go func() { // owner: Mux; ends when the client is closed
			defer c.m.wg.Done()
			c.close()
		}()
		return
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// goAway tells the client that its requests after last never reached the daemon and that its
// connection closes, and cancels its streams still open on the daemon. The client closes the connection
// once it read that (link.Client does); until then, for finishDeadline at most, the Mux reads and drops
// what it sends, so that no reset of the connection can discard the go-away before the client reads it.
func (c *muxClient) goAway(last uint32) {
	c.qmu.Lock()
	c.queue = append(c.queue, proto.Frame{Type: proto.TypeGoAway, Payload: proto.EncodeGoAway(last)})
	c.queued += frameCost
	c.qmu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(finishDeadline))
	select {
	case c.wake <- struct{}{}:
	default:
	}
	c.cancelStreams()
	time.AfterFunc(finishDeadline, c.close)
}

// finishDeadline bounds the writing of a finishing client's last frames.
const finishDeadline = 5 * time.Second

// finish closes the client once the frames queued for it are written (within finishDeadline).
func (c *muxClient) finish() {
	c.qmu.Lock()
	c.finishing = true
	c.qmu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(finishDeadline))
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *muxClient) writeLoop() {
	defer c.m.wg.Done()
	bw := bufio.NewWriterSize(c.conn, 64<<10)
	for {
		select {
		case <-c.gone:
			return
		case <-c.wake:
		}
		c.qmu.Lock()
		frames := c.queue
		c.queue, c.queued = nil, 0
		finishing := c.finishing
		c.qmu.Unlock()
		if finishing && len(frames) == 0 {
			c.close()
			return
		}
		if finishing {
			select { // come back for the close once these are written
			case c.wake <- struct{}{}:
			default:
			}
		}
		for i, f := range frames {
			err := proto.WriteFrame(bw, f)
			bufs.Put(f.Payload)
			if err != nil {
				for _, f := range frames[i+1:] {
					bufs.Put(f.Payload)
				}
				c.close()
				return
			}
		}
		if err := bw.Flush(); err != nil {
			c.close()
			return
		}
	}
}

// readLoop forwards the client's frames to the daemon under the daemon's stream IDs.
func (c *muxClient) readLoop() {
	defer c.m.wg.Done()
	defer func() {
		if c.m.Err() != nil {
			c.finish() // the writer closes the client once the daemon's last frames are out
		} else {
			c.close()
		}
	}()
	br := bufio.NewReaderSize(c.conn, 64<<10)
	for {
		f, err := proto.ReadFrameBuf(br, bufs.Get)
		if err != nil {
			return
		}
		switch f.Type {
		case proto.TypeRequest, proto.TypeData, proto.TypeCancel, proto.TypeClose, proto.TypeWindow:
		default:
			return // a frame only the daemon sends: a broken client
		}
		var op proto.Op
		// wmu keeps this frame ahead of the cancels close writes for the client's streams; the check of
		// gone under m.mu keeps a stream from being registered after close collected them.
		c.wmu.Lock()
		c.m.mu.Lock()
		if c.m.err != nil || c.isGone() {
			c.m.mu.Unlock()
			c.wmu.Unlock()
			return
		}
		id, ok := c.ids[f.Stream]
		switch {
		case f.Type == proto.TypeRequest && c.m.others && c != c.m.own:
			c.m.mu.Unlock()
			c.wmu.Unlock()
			bufs.Put(f.Payload)
			continue // dropped (DropOthers): its go-away says this request did not reach the daemon
		case f.Type == proto.TypeRequest && ok:
			c.m.mu.Unlock()
			c.wmu.Unlock()
			return // a stream ID the client is still using: a broken client
		case f.Type == proto.TypeRequest:
			if o, _, err := proto.DecodeRequest(f.Payload); err == nil {
				op = o
			}
			for {
				c.m.next++
				if c.m.next == 0 {
					c.m.next = 1
				}
				if _, used := c.m.routes[c.m.next]; !used {
					break
				}
			}
			id = c.m.next
			c.ids[f.Stream] = id
			c.last = f.Stream
			c.m.routes[id] = muxRoute{c: c, id: f.Stream, op: op}
		case !ok:
			c.m.mu.Unlock()
			c.wmu.Unlock()
			bufs.Put(f.Payload)
			continue // a stream that ended already: the daemon would ignore it too
		default:
			op = c.m.routes[id].op
		}
		c.m.mu.Unlock()
		f.Stream = id
		err = c.m.writeDaemon(f, op)
		c.wmu.Unlock()
		bufs.Put(f.Payload)
		if err != nil {
			return
		}
	}
}

// close ends the client: its connection closes, and its streams still open are canceled on the daemon
// (their answers are dropped as they come).
func (c *muxClient) close() {
	c.once.Do(func() {
		close(c.gone)
		c.conn.Close()
		c.m.mu.Lock()
		delete(c.m.clients, c)
		c.m.mu.Unlock()
		c.cancelStreams()
	})
}

// cancelStreams cancels the client's streams still open on the daemon; their answers are dropped as they
// come.
func (c *muxClient) cancelStreams() {
	c.m.mu.Lock()
	var open []uint32
	for _, id := range c.ids {
		open = append(open, id)
		r := c.m.routes[id]
		r.c = nil
		c.m.routes[id] = r
	}
	c.ids = map[uint32]uint32{}
	alive := c.m.err == nil && len(open) > 0
	if alive {
		c.m.wg.Add(1)
	}
	c.m.mu.Unlock()
	if alive {
		// Not on this goroutine: it may be the one reading the daemon, which must not wait on a
		// write to it.
		go func() { // owner: Mux; ends when the cancels are written
			defer c.m.wg.Done()
			c.wmu.Lock() // after a request the reader is writing
			defer c.wmu.Unlock()
			for _, id := range open {
				if c.m.writeDaemon(proto.Frame{Type: proto.TypeCancel, Stream: id}, "") != nil {
					return
				}
			}
		}()
	}
}
