package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// A microVM's daemon under Firecracker reaches its node over virtio-vsock (see proto.VMLinkVsockPort):
// it listens on a vsock port per channel and the node connects through its VMM. This file is the
// daemon's side of them.

// vmAddr is where a microVM channel is: a virtio-serial port's device, or a vsock port the daemon
// listens on (with, for the control channel, the node's connection the guest's init already accepted
// and handed over as an inherited descriptor).
type vmAddr struct {
	dev    string // the virtio-serial port's device, or ""
	port   uint32 // the vsock port, if dev is ""
	connFD int    // an inherited connection on port, or -1
}

// parseVMAddr reads a -vm-link or -vm-control value: a device path, "vsock:PORT", or
// "vsock:PORT,conn=FD".
func parseVMAddr(s string) (vmAddr, error) {
	bad := func(why string) (vmAddr, error) {
		return vmAddr{}, fmt.Errorf("vm channel %q: %s: %w", s, why, errdefs.ErrInvalidArgument)
	}
	rest, ok := strings.CutPrefix(s, "vsock:")
	if !ok {
		if !strings.HasPrefix(s, "/") {
			return bad("neither a device path nor vsock:PORT")
		}
		return vmAddr{dev: s, connFD: -1}, nil
	}
	portStr, opt, hasOpt := strings.Cut(rest, ",")
	port, err := strconv.ParseUint(portStr, 10, 32)
	// Only ports below 1024, which the guest's users cannot bind (only root, with
	// CAP_NET_BIND_SERVICE), so that none takes the port while the daemon listens anew after a quiesce.
	if err != nil || port == 0 || port >= 1024 {
		return bad("bad vsock port")
	}
	a := vmAddr{port: uint32(port), connFD: -1}
	if hasOpt {
		fdStr, ok := strings.CutPrefix(opt, "conn=")
		fd, err := strconv.Atoi(fdStr)
		if !ok || err != nil || fd < 3 || fd > 1<<20 {
			return bad("bad conn=FD")
		}
		a.connFD = fd
	}
	return a, nil
}

// String formats a as parseVMAddr reads it.
func (a vmAddr) String() string {
	if a.dev != "" {
		return a.dev
	}
	s := "vsock:" + strconv.FormatUint(uint64(a.port), 10)
	if a.connFD >= 0 {
		s += ",conn=" + strconv.Itoa(a.connFD)
	}
	return s
}

// vsockParam reads proto.VMVsockParam from the kernel command line: the link's and the control
// channel's vsock ports, and whether it is there at all.
func vsockParam(cmdline []string) (link, control vmAddr, ok bool, err error) {
	for _, a := range cmdline {
		v, found := strings.CutPrefix(a, proto.VMVsockParam+"=")
		if !found {
			continue
		}
		l, c, _ := strings.Cut(v, ",")
		if link, err = parseVMAddr("vsock:" + l); err != nil {
			return vmAddr{}, vmAddr{}, false, err
		}
		if control, err = parseVMAddr("vsock:" + c); err != nil {
			return vmAddr{}, vmAddr{}, false, err
		}
		ok = true
	}
	return link, control, ok, nil
}

// vsockListener listens on a vsock port of the guest's, for connections from the host (the VMM
// forwards the node's). net.FileListener does not take AF_VSOCK, so it accepts on the descriptor
// itself, waiting in the runtime's poller.
type vsockListener struct {
	f    *os.File
	port uint32
}

// listenVsock listens on vsock port of the guest, for any CID.
func listenVsock(port uint32) (*vsockListener, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("vsock socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: port}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind vsock port %d: %w", port, err)
	}
	if err := unix.Listen(fd, 16); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listen on vsock port %d: %w", port, err)
	}
	return &vsockListener{f: os.NewFile(uintptr(fd), "vsock:"+strconv.FormatUint(uint64(port), 10)), port: port}, nil
}

// Accept waits for the next connection. Closing the listener ends a waiting Accept with net.ErrClosed.
func (l *vsockListener) Accept() (net.Conn, error) {
	rc, err := l.f.SyscallConn()
	if err != nil {
		return nil, net.ErrClosed
	}
	var nfd int
	var aerr error
	err = rc.Read(func(fd uintptr) bool {
		nfd, _, aerr = unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		return !errors.Is(aerr, unix.EAGAIN)
	})
	if err != nil {
		return nil, net.ErrClosed
	}
	if aerr != nil {
		return nil, fmt.Errorf("accept on vsock port %d: %w", l.port, aerr)
	}
	return newVsockConn(nfd, l.port), nil
}

// Close stops listening.
func (l *vsockListener) Close() error { return l.f.Close() }

// Addr reports the port.
func (l *vsockListener) Addr() net.Addr { return vsockAddr(l.port) }

// vsockAddr is a guest's vsock port.
type vsockAddr uint32

func (vsockAddr) Network() string  { return "vsock" }
func (a vsockAddr) String() string { return "vsock:" + strconv.FormatUint(uint64(a), 10) }

// vsockConn is one connection over vsock: a stream socket in an os.File, which gives it the runtime's
// poller and deadlines.
type vsockConn struct {
	*os.File
	port uint32
}

// newVsockConn wraps the nonblocking connected socket fd.
func newVsockConn(fd int, port uint32) *vsockConn {
	return &vsockConn{File: os.NewFile(uintptr(fd), "vsock-conn"), port: port}
}

func (c *vsockConn) LocalAddr() net.Addr  { return vsockAddr(c.port) }
func (c *vsockConn) RemoteAddr() net.Addr { return vsockAddr(0) }

// serveVsock serves the control channel over vsock: every connection ln accepts (and first, the one
// the guest's init handed over, if not nil) is the node's newest, whose messages are applied and to
// which reports go; an older one is closed when a newer one comes (the node redials after a snapshot,
// which resets the VM's vsock connections). It runs until ln is closed.
func (v *vmControl) serveVsock(ln net.Listener, first net.Conn) {
	conns := make(chan net.Conn)
	done := make(chan struct{})
	go func() { // owner: serveVsock; ends when ln is closed
		defer close(done)
		for {
			c, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				v.log.Debug("control channel", "err", err)
				time.Sleep(50 * time.Millisecond)
				continue
			}
			conns <- c
		}
	}()
	var wg sync.WaitGroup
	cur := first
	for {
		if cur != nil {
			v.mu.Lock()
			v.out = cur
			v.mu.Unlock()
			wg.Add(1)
			go func(c net.Conn) { // owner: serveVsock; ends when c is closed
				defer wg.Done()
				v.readConn(c)
			}(cur)
			// The daemon's state, for a node that connected anew: a report it may take or drop.
			v.reportState()
		}
		var next net.Conn
		select {
		case next = <-conns:
		case <-done:
		}
		if cur != nil {
			cur.Close()
		}
		if next == nil {
			wg.Wait()
			return
		}
		cur = next
	}
}

// readConn reads and applies the control messages of one connection until it ends.
func (v *vmControl) readConn(c net.Conn) {
	r := bufio.NewReaderSize(c, 64<<10)
	for {
		var m proto.VMControl
		err := proto.ReadVMLine(r, &m)
		if errors.Is(err, errdefs.ErrInvalidArgument) {
			v.log.Warn("control message", "err", err)
			continue
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrClosed) {
				v.log.Debug("control connection", "err", err)
			}
			return
		}
		v.handle(&m)
	}
}

// acceptFirstControl listens on the vsock port of a, accepts the node's connections until one sends a
// well-formed first control message, and returns it with that connection (its descriptor inheritable,
// for the daemon the init execs) and the listener, which the caller closes.
func acceptFirstControl(a vmAddr) (proto.VMControl, *os.File, error) {
	ln, err := listenVsock(a.port)
	if err != nil {
		return proto.VMControl{}, nil, err
	}
	defer ln.Close()
	for {
		c, err := ln.Accept()
		if err != nil {
			return proto.VMControl{}, nil, err
		}
		vc := c.(*vsockConn)
		m, err := readFirstControl(bufio.NewReaderSize(vc, 64<<10))
		if err != nil {
			fmt.Fprintf(os.Stderr, "airlock vminit: first control message: %v\n", err)
			vc.Close()
			continue
		}
		return m, vc.File, nil
	}
}

// readFirstControl reads lines from r until one is a well-formed control message. Only a message that
// is whole is taken, so nothing of a later one is lost: the node sends nothing more before the daemon
// reports that it listens.
func readFirstControl(r *bufio.Reader) (proto.VMControl, error) {
	for {
		var m proto.VMControl
		err := proto.ReadVMLine(r, &m)
		if err == nil {
			err = m.Check()
		}
		if err == nil {
			return m, nil
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			return proto.VMControl{}, err
		}
		fmt.Fprintf(os.Stderr, "airlock vminit: first control message: %v\n", err)
	}
}

// inheritable clears the close-on-exec flag of f's descriptor and returns its number.
func inheritable(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	n := -1
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		n = int(fd)
		_, ferr = unix.FcntlInt(fd, unix.F_SETFD, 0)
	}); err != nil {
		return 0, err
	}
	return n, ferr
}
