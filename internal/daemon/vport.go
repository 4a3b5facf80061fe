package daemon

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// A microVM's daemon reaches its node over virtio-serial ports (see proto.VMLinkPort): one character
// device each in the guest, opened once for the daemon's life. This file is the daemon's side of them.

// FindVPort returns the device of the virtio-serial port called name, e.g. /dev/vport0p1.
func FindVPort(name string) (string, error) {
	dirs, _ := filepath.Glob("/sys/class/virtio-ports/*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "name"))
		if err == nil && strings.TrimSpace(string(b)) == name {
			return filepath.Join("/dev", filepath.Base(d)), nil
		}
	}
	return "", fmt.Errorf("no virtio-serial port named %s", name)
}

// vport is one open port.
type vport struct {
	f *os.File

	mu  sync.Mutex
	cur *vportConn // guarded by mu: the connection being served, until it ends
}

func openVPort(path string) (*vport, error) {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	return &vport{f: f}, nil
}

// hostConnected reports whether the node holds the port's host side open.
func (p *vport) hostConnected() bool {
	connected := false
	rc, err := p.f.SyscallConn()
	if err != nil {
		return false
	}
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLOUT}}
		if n, err := unix.Poll(fds, 0); err == nil && n >= 0 {
			connected = fds[0].Revents&unix.POLLHUP == 0
		}
	})
	return connected
}

// listener makes a net.Listener whose connections are the node's connections to the port, one at a
// time: Accept waits until the current one ended.
func (p *vport) listener(log *slog.Logger) *vportListener {
	return &vportListener{p: p, log: log, closed: make(chan struct{})}
}

type vportListener struct {
	p      *vport
	log    *slog.Logger
	once   sync.Once
	closed chan struct{}
}

// Accept waits for the current connection to end and the node to connect, then makes the handshake.
func (l *vportListener) Accept() (net.Conn, error) {
	for {
		select {
		case <-l.closed:
			return nil, net.ErrClosed
		default:
		}
		l.p.mu.Lock()
		cur := l.p.cur
		l.p.mu.Unlock()
		if cur != nil {
			select {
			case <-cur.done:
			case <-l.closed:
			}
			continue
		}
		if !l.p.hostConnected() {
			select {
			case <-time.After(20 * time.Millisecond):
			case <-l.closed:
			}
			continue
		}
		if err := l.handshake(); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, io.EOF) {
				l.log.Warn("link handshake", "err", err)
			}
			continue
		}
		c := &vportConn{p: l.p, done: make(chan struct{})}
		l.p.mu.Lock()
		l.p.cur = c
		l.p.mu.Unlock()
		return c, nil
	}
}

// handshake finds the node's sync marker and nonce and answers with the ack.
func (l *vportListener) handshake() error {
	f := l.p.f
	_ = f.SetDeadline(time.Now().Add(2 * time.Second))
	defer f.SetDeadline(time.Time{})
	if err := proto.SkipTo(f, proto.VMSync, nil); err != nil {
		return err
	}
	nonce := make([]byte, proto.VMNonceSize)
	if _, err := io.ReadFull(f, nonce); err != nil {
		return err
	}
	_, err := f.Write(append(append([]byte(nil), proto.VMAck...), nonce...))
	return err
}

func (l *vportListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *vportListener) Addr() net.Addr { return vportAddr{} }

type vportAddr struct{}

func (vportAddr) Network() string { return "virtio-serial" }
func (vportAddr) String() string  { return proto.VMLinkPort }

// vportConn is one connection of the node over the port. It ends when the node hangs up (a read finds
// the host side closed) or when it is closed; then its reads and writes fail.
type vportConn struct {
	p    *vport
	wmu  sync.Mutex // serializes writes
	once sync.Once
	done chan struct{}
}

func (c *vportConn) ended() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *vportConn) end() {
	c.once.Do(func() {
		c.p.mu.Lock()
		if c.p.cur == c {
			c.p.cur = nil
		}
		c.p.mu.Unlock()
		// Unblock a read or write in progress, before Accept (waiting for done) starts the next
		// connection's handshake, which sets deadlines of its own.
		_ = c.p.f.SetDeadline(time.Now())
		close(c.done)
	})
}

func (c *vportConn) Read(b []byte) (int, error) {
	if c.ended() {
		return 0, net.ErrClosed
	}
	n, err := c.p.f.Read(b)
	if c.ended() {
		return 0, net.ErrClosed
	}
	if err != nil || n == 0 {
		// A read of nothing: the node hung up.
		c.end()
		if err == nil {
			err = io.EOF
		}
	}
	return n, err
}

func (c *vportConn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.ended() {
		return 0, net.ErrClosed
	}
	n, err := c.p.f.Write(b)
	if err != nil && c.ended() {
		err = net.ErrClosed
	}
	return n, err
}

func (c *vportConn) Close() error { c.end(); return nil }

// HangUp writes frame (the session's go-away) unless the connection already ended, giving up after a
// moment if the node does not read, and ends the connection: the node closes its end when it reads
// it, so that its next connection finds the port free.
func (c *vportConn) HangUp(frame []byte) {
	c.wmu.Lock()
	if !c.ended() {
		_ = c.p.f.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.p.f.Write(frame)
	}
	c.wmu.Unlock()
	c.end()
}
func (c *vportConn) LocalAddr() net.Addr             { return vportAddr{} }
func (c *vportConn) RemoteAddr() net.Addr            { return vportAddr{} }
func (c *vportConn) SetDeadline(time.Time) error     { return nil }
func (c *vportConn) SetReadDeadline(time.Time) error { return nil }

// SetWriteDeadline bounds the writes in progress and to come (the port's; the next connection's
// handshake sets its own).
func (c *vportConn) SetWriteDeadline(t time.Time) error {
	if c.ended() {
		return nil
	}
	return c.p.f.SetWriteDeadline(t)
}

// vmControl reads the node's control messages (proto.VMControl) from the control channel and applies
// them: the link key, environment and wake file go into the control directory dir (a tmpfs of the
// guest's, which the daemon reads as the container runtimes' host-written one), the rest to the guest.
// A wake also sends on wake. It reports each applied message back, on the channel it came from. It runs
// for the daemon's life. The channel is a virtio-serial port (run) or the node's vsock connections
// (serveVsock, vsock.go).
type vmControl struct {
	dir  string
	wake chan<- struct{}
	log  *slog.Logger

	amu sync.Mutex // serializes applying messages

	mu        sync.Mutex
	seq       int64      // guarded by mu: the last message applied
	listening bool       // guarded by mu
	out       vmWriter   // guarded by mu: where reports go
	wmu       sync.Mutex // serializes reports
}

// vmWriter is where a vmControl's reports go: the port, or the node's latest connection.
type vmWriter interface {
	io.Writer
	SetWriteDeadline(time.Time) error
}

// run serves the control port f: one stream for the VM's life, which reads nothing while the node is
// not connected.
func (v *vmControl) run(f *os.File) {
	v.mu.Lock()
	v.out = f
	v.mu.Unlock()
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		var m proto.VMControl
		err := proto.ReadVMLine(r, &m)
		if errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded) {
			// The node is not connected: wait for it.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if errors.Is(err, errdefs.ErrInvalidArgument) {
			v.log.Warn("control message", "err", err)
			continue
		}
		if err != nil {
			v.log.Debug("control port", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		v.handle(&m)
	}
}

// handle applies m and reports the outcome.
func (v *vmControl) handle(m *proto.VMControl) {
	v.amu.Lock()
	defer v.amu.Unlock()
	if err := v.apply(m); err != nil {
		v.log.Warn("control message not applied", "seq", m.Seq, "err", err)
		v.report(proto.VMReport{Seq: m.Seq, Error: err.Error()})
		return
	}
	v.mu.Lock()
	v.seq = m.Seq
	v.mu.Unlock()
	v.reportState()
}

// setListening records whether the daemon accepts link connections, and reports it.
func (v *vmControl) setListening(on bool) {
	v.mu.Lock()
	v.listening = on
	v.mu.Unlock()
	v.reportState()
}

func (v *vmControl) reportState() {
	v.mu.Lock()
	r := proto.VMReport{Seq: v.seq, Listening: v.listening}
	v.mu.Unlock()
	v.report(r)
}

// report writes r to the node, giving up after a while if the node does not read.
func (v *vmControl) report(r proto.VMReport) {
	v.mu.Lock()
	w := v.out
	v.mu.Unlock()
	if w == nil {
		return // no node connected yet
	}
	v.wmu.Lock()
	defer v.wmu.Unlock()
	_ = w.SetWriteDeadline(time.Now().Add(2 * time.Second))
	if err := proto.WriteVMLine(w, r); err != nil {
		v.log.Debug("report to the node", "err", err)
	}
}

func (v *vmControl) apply(m *proto.VMControl) error {
	if err := m.Check(); err != nil {
		return err
	}
	if err := applyIdentity(m, "/"); err != nil {
		return err
	}
	if m.Key != nil {
		if err := writeControlFile(filepath.Join(v.dir, proto.ControlKey), m.Key); err != nil {
			return err
		}
	}
	if m.ControlEnv != nil {
		if err := writeControlFile(filepath.Join(v.dir, proto.ControlEnv), proto.FormatControlEnv(m.ControlEnv)); err != nil {
			return err
		}
	}
	if m.Wake {
		gen := make([]byte, 16)
		rand.Read(gen)
		if err := writeControlFile(filepath.Join(v.dir, proto.ControlWake), []byte(fmt.Sprintf("%x", gen))); err != nil {
			return err
		}
		select {
		case v.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// writeControlFile replaces the file at path with b, readable by root only.
func writeControlFile(path string, b []byte) error {
	tmp := path + ".new"
	os.Remove(tmp)
	if err := os.WriteFile(tmp, b, 0o400); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
