package vm

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// The node's side of a VM's two virtio-serial ports (see proto.VMLinkPort). The VMM listens on a unix
// socket per port, made by the node in a directory of its own and handed to the VMM as a descriptor;
// the node connects to it. (Over vsock, see VsockConnect, each connection is a stream of its own: the
// link needs no handshake, and NewControl takes the control connection.)

// DialLink connects to the VM's link port at socket and makes the handshake, so that the connection
// carries the link protocol from its first byte on.
func DialLink(ctx context.Context, socket string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(5 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	nonce := make([]byte, proto.VMNonceSize)
	rand.Read(nonce)
	sync := append(append([]byte(nil), proto.VMSync...), nonce...)
	// The sync goes out again every moment until the ack comes: the daemon may still have been
	// reading the port for an earlier connection when the first one arrived.
	stop := make(chan struct{})
	defer close(stop)
	var werr error
	if _, werr = conn.Write(sync); werr == nil {
		go func() { // owner: DialLink; ends with the handshake
			t := time.NewTicker(300 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					if _, err := conn.Write(sync); err != nil {
						return
					}
				}
			}
		}()
	}
	if werr != nil {
		conn.Close()
		return nil, fmt.Errorf("link handshake: %w", werr)
	}
	if err := proto.SkipTo(conn, proto.VMAck, nonce); err != nil {
		conn.Close()
		return nil, fmt.Errorf("link handshake: %w", err)
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// Control is the node's connection to a VM's control port: it sends proto.VMControl messages and
// follows the daemon's reports. It is safe for concurrent use.
type Control struct {
	conn net.Conn

	mu     sync.Mutex
	cond   *sync.Cond
	seq    int64            // guarded by mu: the last message sent
	acked  int64            // guarded by mu: the connection's first seq, less one: reports below it are stale
	report proto.VMReport   // guarded by mu: the daemon's last report
	errs   map[int64]string // guarded by mu: why messages were refused
	err    error            // guarded by mu: why the connection ended
	wmu    sync.Mutex       // serializes writes
}

// DialControl connects to the VM's control port at socket. Close ends it.
func DialControl(ctx context.Context, socket string) (*Control, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	return NewControl(conn), nil
}

// NewControl makes a Control of conn, a connection to the VM's control channel, which it owns from now
// on. Close ends it.
func NewControl(conn net.Conn) *Control {
	// Sequence numbers start at a random point, so that no report of an earlier connection (or of
	// the image a VM was restored from) answers a message of this one.
	var b [4]byte
	rand.Read(b[:])
	base := int64(binary.BigEndian.Uint32(b[:])) << 16
	c := &Control{conn: conn, errs: map[int64]string{}, seq: base, acked: base}
	c.cond = sync.NewCond(&c.mu)
	go c.read() // owner: c; ends when the connection closes
	return c
}

func (c *Control) read() {
	r := bufio.NewReaderSize(c.conn, 4096)
	for {
		var rep proto.VMReport
		err := proto.ReadVMLine(r, &rep)
		if errors.Is(err, errdefs.ErrInvalidArgument) {
			continue // a bad line from the guest: skipped
		}
		c.mu.Lock()
		if err != nil {
			c.err = err
			c.cond.Broadcast()
			c.mu.Unlock()
			return
		}
		switch {
		case rep.Seq > c.seq || (rep.Seq != 0 && rep.Seq < c.acked):
			// A report of a message never sent on this connection: a lie, or stale.
		case rep.Error != "":
			if len(c.errs) < 16 {
				if len(rep.Error) > 256 {
					rep.Error = rep.Error[:256]
				}
				c.errs[rep.Seq] = rep.Error
			}
		default:
			c.report = rep
		}
		c.cond.Broadcast()
		c.mu.Unlock()
	}
}

// Send sends m with the next sequence number and returns that number.
func (c *Control) Send(m proto.VMControl) (int64, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	c.seq++
	m.Seq = c.seq
	c.mu.Unlock()
	// A guest still booting reads its first message late.
	_ = c.conn.SetWriteDeadline(time.Now().Add(BootWriteTimeout))
	if err := proto.WriteVMLine(c.conn, m); err != nil {
		return 0, fmt.Errorf("vm control: %w", err)
	}
	return m.Seq, nil
}

// Wait waits until the daemon reports that it applied message seq (or a later one; 0: any report)
// and, if listening, that it accepts link connections. A message the daemon refused is an error.
// Reports are the guest's word: they say when, never what.
func (c *Control) Wait(ctx context.Context, seq int64, listening bool) error {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if e, ok := c.errs[seq]; ok {
			delete(c.errs, seq)
			return fmt.Errorf("the guest refused control message %d: %q: %w", seq, e, errdefs.ErrFailedPrecondition)
		}
		if (seq == 0 || c.report.Seq >= seq) && (!listening || c.report.Listening) {
			return nil
		}
		if c.err != nil {
			return fmt.Errorf("vm control: %w", c.err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		c.cond.Wait()
	}
}

// BootWriteTimeout bounds the writing of one control message, which a guest under emulation may start
// to read only once it has booted.
const BootWriteTimeout = time.Minute

// Close closes the connection.
func (c *Control) Close() error { return c.conn.Close() }

// Controls are a driver's control connections to its VMs' guests, by sandbox ID. The zero value is
// ready for use; it is safe for concurrent use.
type Controls struct {
	mu sync.Mutex
	m  map[string]*Control // guarded by mu
}

// Get returns the control connection of sandbox id, or nil.
func (c *Controls) Get(id string) *Control {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id]
}

// Put keeps ctl as the control connection of sandbox id.
func (c *Controls) Put(id string, ctl *Control) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*Control{}
	}
	c.m[id] = ctl
}

// Drop closes and forgets the control connection of sandbox id, if there is one.
func (c *Controls) Drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ctl := c.m[id]; ctl != nil {
		ctl.Close()
		delete(c.m, id)
	}
}
