package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// handle runs one call and returns its result for the final response.
func (s *server) handle(st *stream, op proto.Op, args any) (any, error) {
	switch a := args.(type) {
	case *proto.PingRequest:
		return proto.PingResult{}, nil
	case *proto.InfoRequest:
		return s.info(), nil
	case *proto.QuiesceRequest:
		return proto.Empty{}, s.quiesce()
	case *proto.HelloRequest:
		return s.hello(a)
	case *proto.IdentityRequest:
		return proto.Empty{}, s.setIdentity(st.ctx, a)
	case *proto.ExecRequest:
		return s.exec(st, a)
	case *proto.StartRequest:
		p, err := s.startProcess(a)
		if err != nil {
			return nil, err
		}
		zero := int64(0)
		return s.attach(st, p, &zero, &zero)
	case *proto.AttachRequest:
		p, err := s.procs.get(a.ID)
		if err != nil {
			return nil, err
		}
		return s.attach(st, p, a.StdoutOffset, a.StderrOffset)
	case *proto.ListProcessesRequest:
		j := &jsonLines{st: st}
		for _, p := range s.procs.all() {
			if err := j.add(p.info()); err != nil {
				return nil, err
			}
		}
		if err := j.flush(); err != nil {
			return nil, err
		}
		return proto.ListResult{Count: j.count}, nil
	case *proto.SignalRequest:
		return proto.Empty{}, s.signalProcess(a)
	case *proto.ResizeRequest:
		return proto.Empty{}, s.resize(a)
	case *proto.WaitRequest:
		p, err := s.procs.get(a.ID)
		if err != nil {
			return nil, err
		}
		select {
		case <-p.exitedCh:
		case <-st.ctx.Done():
			return nil, st.ctx.Err()
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return *p.exit, nil
	case *proto.ReadFileRequest:
		return s.readFile(st, a)
	case *proto.WriteFileRequest:
		return s.writeFile(st, a)
	case *proto.StatRequest:
		return statPath(a.Path)
	case *proto.ListDirRequest:
		return s.listDir(st, a)
	case *proto.MkdirRequest:
		return proto.Empty{}, s.mkdir(a)
	case *proto.MoveRequest:
		return proto.Empty{}, s.move(a)
	case *proto.RemoveRequest:
		return proto.Empty{}, removePath(a)
	case *proto.TarDownloadRequest:
		return proto.Empty{}, s.tarDownload(st, a)
	case *proto.TarUploadRequest:
		return proto.Empty{}, s.tarUpload(st, a)
	}
	return nil, fmt.Errorf("unknown op %q: %w", op, errdefs.ErrInvalidArgument)
}

// exec runs a process to completion, streaming its capped output to the client.
func (s *server) exec(st *stream, req *proto.ExecRequest) (proto.ExecResult, error) {
	sp, err := s.spawn(spawnSpec{argv: req.Argv, env: req.Env, cwd: req.Cwd, user: req.User, stdin: req.HasStdin})
	if err != nil {
		return proto.ExecResult{}, err
	}
	limit := s.cfg.ExecOutput
	if req.MaxOutput > 0 && req.MaxOutput < limit {
		limit = req.MaxOutput
	}
	res := proto.ExecResult{StartTime: sp.start}
	var timedOut atomic.Bool
	if req.Timeout > 0 {
		t := time.AfterFunc(req.Timeout, func() {
			timedOut.Store(true)
			s.reaper.signal(sp.child, -sp.child.pid, killSignal)
		})
		defer t.Stop()
	}

	// Collectors: one per output stream; they end at EOF or when their file is closed below.
	type collected struct {
		total     int64
		truncated bool
	}
	var outs [2]collected
	var wg sync.WaitGroup
	pumpDone := make(chan struct{}, 2)
	for i, f := range sp.outs {
		wg.Add(1)
		go func() { // owner: exec; ends at EOF or when f is closed
			defer wg.Done()
			defer func() { pumpDone <- struct{}{} }()
			ch := proto.ChannelStdout
			if i == 1 {
				ch = proto.ChannelStderr
			}
			buf := bufs.Get(proto.ChunkSize)
			defer bufs.Put(buf)
			sendOK := true
			for {
				n, err := f.Read(buf)
				if n > 0 {
					c := &outs[i]
					keep := int64(n)
					if c.total+keep > limit {
						keep = max(0, limit-c.total)
						c.truncated = true
					}
					if keep > 0 && sendOK {
						if st.sendData(ch, c.total, buf[:keep]) != nil {
							sendOK = false // the call was canceled; keep draining until the kill lands
						}
					}
					c.total += int64(n)
				}
				if err != nil {
					return
				}
			}
		}()
	}
	if sp.stdin != nil {
		wg.Add(1)
		go func() { // owner: exec; ends at the client's close, on cancel, or when stdin is closed below
			defer wg.Done()
			for {
				b, err := st.read(st.ctx)
				if err == io.EOF {
					sp.stdin.Close()
					return
				}
				if err != nil {
					return
				}
				if _, err := sp.stdin.Write(b); err != nil {
					return // the process closed its stdin; ignore the rest
				}
			}
		}()
	}

	select {
	case <-sp.child.done:
	case <-st.ctx.Done():
		s.reaper.signal(sp.child, -sp.child.pid, killSignal)
		<-sp.child.done
	}
	drain := time.NewTimer(s.cfg.DrainTimeout)
	for pending := len(sp.outs); pending > 0; {
		select {
		case <-pumpDone:
			pending--
		case <-drain.C:
			for _, f := range sp.outs {
				f.Close()
			}
		}
	}
	drain.Stop()
	sp.closeAll()
	wg.Wait()

	res.ExitStatus = exitStatus(sp.child.status)
	res.TimedOut = timedOut.Load()
	res.StdoutBytes, res.StdoutTruncated = outs[0].total, outs[0].truncated
	res.StderrBytes, res.StderrTruncated = outs[1].total, outs[1].truncated
	if err := st.ctx.Err(); err != nil {
		return res, err
	}
	return res, nil
}

// attach streams a tracked process's output from the given offsets (nil: first undelivered byte) until
// the process finished or the client detached, and feeds the client's data to its stdin. While attached,
// the process's output is back-pressured rather than dropped (see process.pump).
func (s *server) attach(st *stream, p *process, stdoutOff, stderrOff *int64) (proto.AttachResult, error) {
	a := &attachment{}
	cursor := &a.cursor // written under p.mu; read freely by this goroutine, its only writer
	p.mu.Lock()
	for i, o := range []*int64{stdoutOff, stderrOff} {
		if o == nil {
			cursor[i] = p.out[i].delivered
		} else {
			cursor[i] = min(*o, p.out[i].ring.end)
		}
	}
	info := p.infoLocked()
	p.attached[a] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.attached, a)
		p.notifyLocked() // a pump waiting for this attachment may go on
		p.mu.Unlock()
	}()
	if err := st.sendEvent(proto.Event{Kind: proto.EventStarted, Process: &info}); err != nil {
		return proto.AttachResult{}, err
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	stdinCtx, stopStdin := context.WithCancel(st.ctx)
	defer stopStdin()
	if p.stdin != nil {
		wg.Add(1)
		go func() { // owner: attach; ends at the client's close, on detach, or when attach returns
			defer wg.Done()
			for {
				b, err := st.read(stdinCtx)
				if err == io.EOF {
					if err := p.writeStdin(stdinCtx, nil, true); err != nil {
						s.log.Debug("close stdin", "id", p.id, "err", err)
					}
					return
				}
				if err != nil {
					return
				}
				if err := p.writeStdin(stdinCtx, b, false); err != nil {
					s.log.Debug("write stdin", "id", p.id, "err", err)
					if errors.Is(err, errdefs.ErrFailedPrecondition) || stdinCtx.Err() != nil {
						return
					}
				}
			}
		}()
	}

	next := 0 // channel to try first, alternating for fairness
	for {
		pick := -1
		p.mu.Lock()
		for k := range 2 {
			i := (next + k) % 2
			if cursor[i] < p.out[i].ring.end {
				pick = i
				break
			}
		}
		finished, changed := p.finished, p.changed
		var exit proto.ExitStatus
		if p.exit != nil {
			exit = *p.exit
		}
		p.mu.Unlock()

		if pick >= 0 {
			next = (pick + 1) % 2
			if err := s.sendOutput(st, p, pick, cursor); err != nil {
				return proto.AttachResult{}, err
			}
			continue
		}
		if finished {
			if err := st.sendEvent(proto.Event{Kind: proto.EventExit, Exit: &exit}); err != nil {
				return proto.AttachResult{}, err
			}
			return proto.AttachResult{Exit: &exit}, nil
		}
		select {
		case <-changed:
		case <-st.ctx.Done():
			return proto.AttachResult{}, nil // detached; the process keeps running
		}
	}
}

var outputChannels = [2]proto.Channel{proto.ChannelStdout, proto.ChannelStderr}

// sendOutput sends one chunk of output channel i from cursor[i]. Dropped events (for any channel whose
// cursor fell behind the buffered range) are only sent together with a data frame, after its credit was
// reserved, so their number is bounded by the flow-control window.
func (s *server) sendOutput(st *stream, p *process, i int, cursor *[2]int64) error {
	p.mu.Lock()
	avail := p.out[i].ring.end - max(cursor[i], p.out[i].ring.first())
	p.mu.Unlock()
	n, err := st.send.Acquire(st.ctx, int(min(max(avail, 1), proto.ChunkSize)))
	if err != nil {
		return err
	}
	payload := bufs.Get(proto.DataHeaderSize + n)
	defer bufs.Put(payload)
	var drops []proto.Dropped
	p.mu.Lock()
	for k := range cursor {
		if first := p.out[k].ring.first(); cursor[k] < first {
			drops = append(drops, proto.Dropped{Channel: outputChannels[k], Offset: cursor[k], Bytes: first - cursor[k]})
			cursor[k] = first
		}
	}
	off := cursor[i]
	got := p.out[i].ring.readAt(payload[proto.DataHeaderSize:], off)
	p.mu.Unlock()

	for _, d := range drops {
		if err := st.sendEvent(proto.Event{Kind: proto.EventDropped, Dropped: &d}); err != nil {
			return err
		}
	}
	if got == 0 {
		st.send.Unreserve(n)
		return nil
	}
	st.send.Release(n - got)
	payload = proto.AppendData(payload[:0], outputChannels[i], off, nil)[:proto.DataHeaderSize+got]
	if err := st.writeDataPayload(payload); err != nil {
		return err
	}
	p.mu.Lock()
	cursor[i] = off + int64(got)
	if cursor[i] > p.out[i].delivered {
		p.out[i].delivered = cursor[i]
	}
	p.notifyLocked() // room for a pump waiting on this attachment
	p.mu.Unlock()
	return nil
}

// parseSignal accepts "SIGTERM", "TERM", "term" or "15".
func parseSignal(name string) (unix.Signal, error) {
	if n, err := strconv.Atoi(name); err == nil {
		if n <= 0 || n > 64 {
			return 0, invalidf("signal %d out of range", n)
		}
		return unix.Signal(n), nil
	}
	up := strings.ToUpper(name)
	if !strings.HasPrefix(up, "SIG") {
		up = "SIG" + up
	}
	sig := unix.SignalNum(up)
	if sig == 0 {
		return 0, invalidf("unknown signal %q", name)
	}
	return sig, nil
}

func (s *server) signalProcess(req *proto.SignalRequest) error {
	sig, err := parseSignal(req.Signal)
	if err != nil {
		return err
	}
	p, err := s.procs.get(req.ID)
	if err != nil {
		return err
	}
	target := p.child.pid
	if req.Group {
		target = -target
	}
	if err := s.reaper.signal(p.child, target, sig); err != nil {
		return fmt.Errorf("signal process %s: %w", p.id, err)
	}
	return nil
}

func (s *server) resize(req *proto.ResizeRequest) error {
	p, err := s.procs.get(req.ID)
	if err != nil {
		return err
	}
	if p.pty == nil {
		return fmt.Errorf("process %s has no terminal: %w", p.id, errdefs.ErrFailedPrecondition)
	}
	exited := fmt.Errorf("process %s exited: %w", p.id, errdefs.ErrFailedPrecondition)
	select {
	case <-p.exitedCh:
		return exited
	default:
	}
	sc, err := p.pty.SyscallConn()
	if err != nil {
		return fmt.Errorf("resize %s: %w", p.id, err)
	}
	var ioErr error
	err = sc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: req.Rows, Col: req.Cols})
	})
	if err == nil {
		err = ioErr
	}
	if err != nil {
		select {
		case <-p.finishedCh: // the terminal was closed meanwhile
			return exited
		default:
		}
		return fmt.Errorf("resize %s: %w", p.id, mapErrno(err))
	}
	return nil
}
