package daemon

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// process is a tracked process: started with the start operation, listable, attachable, and kept after
// it exits until MaxExited newer processes exited.
type process struct {
	id    string
	srv   *server
	child *child
	argv  []string
	ident identity
	pty   *os.File // PTY master, or nil
	start time.Time

	// stdin is the stdin pipe or PTY master, or nil. The stdin goroutine owns writes to it.
	stdin    *os.File
	stdinReq chan stdinReq

	exitedCh   chan struct{} // closed (under mu) when the exit status is known
	finishedCh chan struct{} // closed (under mu) when exited and all output was read

	mu       sync.Mutex
	out      [2]outBuf                // guarded by mu; stdout, stderr (a PTY uses only stdout)
	exit     *proto.ExitStatus        // guarded by mu
	finished bool                     // guarded by mu
	changed  chan struct{}            // guarded by mu; closed and replaced on every change of out, state or cursors
	attached map[*attachment]struct{} // guarded by mu; clients streaming the output
	waiting  int                      // guarded by mu; pumps waiting for an attachment to catch up
	stopped  bool                     // guarded by mu; pumps stop back-pressure and stop reading
}

// attachment is one client streaming a process's output.
type attachment struct {
	cursor [2]int64 // guarded by process.mu; next offset to send per stream
}

type outBuf struct {
	ring      ring
	delivered int64 // first byte not yet sent to any client
	eof       bool
}

// stdinReq asks the stdin goroutine to write data, or to close stdin.
type stdinReq struct {
	data  []byte
	close bool
	res   chan error // buffered; receives the result
}

func newProcessID() string {
	var b [5]byte
	rand.Read(b[:])
	return strings.ToLower(base32.StdEncoding.EncodeToString(b[:]))
}

// startProcess starts a tracked process and its goroutines.
func (s *server) startProcess(req *proto.StartRequest) (*process, error) {
	if s.procs.running() >= s.cfg.MaxProcesses {
		return nil, fmt.Errorf("%d processes running: %w", s.cfg.MaxProcesses, errdefs.ErrResourceExhausted)
	}
	sp, err := s.spawn(spawnSpec{argv: req.Argv, env: req.Env, cwd: req.Cwd, user: req.User, pty: req.PTY, stdin: req.Stdin})
	if err != nil {
		return nil, err
	}
	p := &process{
		srv:        s,
		child:      sp.child,
		argv:       slices.Clone(req.Argv),
		ident:      sp.id,
		pty:        sp.pty,
		start:      sp.start,
		stdin:      sp.stdin,
		stdinReq:   make(chan stdinReq),
		exitedCh:   make(chan struct{}),
		finishedCh: make(chan struct{}),
		changed:    make(chan struct{}),
		attached:   make(map[*attachment]struct{}),
	}
	for i := range p.out {
		p.out[i].ring.max = s.cfg.OutputBuffer
	}
	if len(sp.outs) == 1 {
		p.out[1].eof = true
	}
	s.procs.add(p)

	pumpDone := make(chan struct{}, len(sp.outs))
	s.procWG.Add(len(sp.outs) + 1)
	for i, f := range sp.outs {
		go func() { // owner: process; ends at EOF or when monitor closes f
			defer s.procWG.Done()
			p.pump(i, f)
			pumpDone <- struct{}{}
		}()
	}
	go func() { // owner: process; ends once the process finished
		defer s.procWG.Done()
		p.monitor(sp, pumpDone)
	}()
	if p.stdin != nil {
		s.procWG.Add(1)
		go func() { // owner: process; ends once the process finished
			defer s.procWG.Done()
			p.stdinLoop()
		}()
	}
	return p, nil
}

func (p *process) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// pump copies one output stream into its ring. While clients are attached it never overwrites bytes
// they have not been sent yet: it waits, so the process blocks on a full pipe (back-pressure). With
// nobody attached (or once stopped) the ring keeps the newest bytes and drops the oldest.
func (p *process) pump(i int, f *os.File) {
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		data := buf[:n]
		for len(data) > 0 {
			p.mu.Lock()
			room := len(data)
			if !p.stopped {
				room = min(room, p.roomLocked(i))
			}
			if room <= 0 {
				changed := p.changed
				p.waiting++
				p.mu.Unlock()
				<-changed
				p.mu.Lock()
				p.waiting--
				p.mu.Unlock()
				continue
			}
			p.out[i].ring.write(data[:room])
			p.notifyLocked()
			p.mu.Unlock()
			data = data[room:]
		}
		if err != nil {
			break
		}
	}
	p.mu.Lock()
	p.out[i].eof = true
	p.notifyLocked()
	p.mu.Unlock()
}

// roomLocked reports how many bytes stream i can take without evicting a byte an attached client has
// not been sent.
func (p *process) roomLocked(i int) int {
	r := &p.out[i].ring
	if len(p.attached) == 0 {
		return r.max
	}
	keep := r.end
	for a := range p.attached {
		keep = min(keep, max(a.cursor[i], r.first()))
	}
	return r.max - int(r.end-keep)
}

// monitor waits for the exit, then for the output, then closes the files and marks the process
// finished. After the exit it stops reading once a while passes without progress: descendants may
// hold the output pipes open forever. Progress means an attached client catching up while a pump waits
// for it. While a pump waits so, the while is StallTimeout (a client across a slow network, or on a
// loaded host, is slow, not gone); otherwise it is DrainTimeout. A client stalled for longer makes the
// remaining output be dropped instead of kept back.
func (p *process) monitor(sp *spawned, pumpDone chan struct{}) {
	<-p.child.done
	st := exitStatus(p.child.status)
	p.mu.Lock()
	p.exit = &st
	close(p.exitedCh)
	p.notifyLocked()
	p.mu.Unlock()
	p.srv.log.Debug("process exited", "id", p.id, "pid", p.child.pid, "code", st.ExitCode, "signal", st.Signal)

	progress := time.Now()
	stop := time.NewTimer(time.Hour)
	defer stop.Stop()
	for pending, stopped := len(sp.outs), false; pending > 0; {
		p.mu.Lock()
		changed, backlog := p.changed, p.waiting > 0
		p.mu.Unlock()
		limit := p.srv.cfg.DrainTimeout
		if backlog {
			limit = p.srv.cfg.StallTimeout
		}
		if !stopped {
			stop.Reset(time.Until(progress.Add(limit)))
		}
		select {
		case <-pumpDone:
			pending--
		case <-changed:
			p.mu.Lock()
			backlog = backlog || p.waiting > 0
			p.mu.Unlock()
			if backlog {
				progress = time.Now()
			}
		case <-stop.C:
			if stopped {
				continue
			}
			stopped = true
			p.mu.Lock()
			p.stopped = true
			p.notifyLocked()
			p.mu.Unlock()
			for _, f := range sp.outs {
				f.Close() // interrupts the pumps, which end now
			}
		}
		if !stopped && !stop.Stop() {
			select { // a timer that fired as another case was chosen
			case <-stop.C:
			default:
			}
		}
	}
	sp.closeAll()
	p.mu.Lock()
	p.finished = true
	close(p.finishedCh)
	p.notifyLocked()
	p.mu.Unlock()
	p.srv.procs.finished(p)
}

// stdinLoop performs stdin writes and the close, one at a time, until the process finished.
func (p *process) stdinLoop() {
	for {
		select {
		case req := <-p.stdinReq:
			var err error
			switch {
			case req.close && p.pty != nil:
				_, err = p.stdin.Write([]byte{4}) // ^D: end of input for the terminal's line discipline
			case req.close:
				err = p.stdin.Close()
			default:
				_, err = p.stdin.Write(req.data)
			}
			req.res <- err
		case <-p.finishedCh:
			return
		}
	}
}

// writeStdin writes data to the process's stdin, or closes stdin when closeIt is set.
func (p *process) writeStdin(ctx context.Context, data []byte, closeIt bool) error {
	if p.stdin == nil {
		return fmt.Errorf("process %s has no stdin: %w", p.id, errdefs.ErrFailedPrecondition)
	}
	req := stdinReq{data: data, close: closeIt, res: make(chan error, 1)}
	select {
	case p.stdinReq <- req:
	case <-ctx.Done():
		return ctx.Err()
	case <-p.finishedCh:
		return fmt.Errorf("process %s exited: %w", p.id, errdefs.ErrFailedPrecondition)
	}
	select {
	case err := <-req.res:
		if err != nil {
			return fmt.Errorf("write stdin of %s: %w", p.id, mapErrno(err))
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func exitStatus(ws unix.WaitStatus) proto.ExitStatus {
	st := proto.ExitStatus{ExitCode: ws.ExitStatus(), EndTime: time.Now()}
	if ws.Signaled() {
		st.ExitCode = -1
		st.Signal = unix.SignalName(ws.Signal())
		if st.Signal == "" {
			st.Signal = fmt.Sprintf("signal %d", int(ws.Signal()))
		}
	}
	return st
}

func (p *process) info() proto.ProcessInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.infoLocked()
}

func (p *process) infoLocked() proto.ProcessInfo {
	in := proto.ProcessInfo{
		ID:        p.id,
		PID:       p.child.pid,
		Argv:      p.argv,
		User:      p.ident.name,
		UID:       p.ident.uid,
		PTY:       p.pty != nil,
		Stdin:     p.stdin != nil,
		State:     proto.StateRunning,
		StartTime: p.start,
		StdoutEnd: p.out[0].ring.end,
		StderrEnd: p.out[1].ring.end,
	}
	if p.exit != nil {
		st := *p.exit
		in.State = proto.StateExited
		in.Exit = &st
	}
	return in
}

// registry holds the tracked processes.
type registry struct {
	maxExited int

	mu     sync.Mutex
	byID   map[string]*process // guarded by mu
	order  []*process          // guarded by mu; in start order
	exited []*process          // guarded by mu; finished processes, oldest first
}

func newRegistry(maxExited int) *registry {
	return &registry{maxExited: maxExited, byID: make(map[string]*process)}
}

// add assigns p a unique id and registers it.
func (r *registry) add(p *process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		p.id = newProcessID()
		if _, dup := r.byID[p.id]; !dup {
			break
		}
	}
	r.byID[p.id] = p
	r.order = append(r.order, p)
}

// finished records that p finished and forgets the oldest exited processes beyond the limit.
func (r *registry) finished(p *process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.exited = append(r.exited, p)
	for len(r.exited) > r.maxExited {
		old := r.exited[0]
		r.exited = r.exited[1:]
		delete(r.byID, old.id)
		r.order = slices.DeleteFunc(r.order, func(q *process) bool { return q == old })
	}
}

func (r *registry) get(id string) (*process, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.byID[id]
	if p == nil {
		return nil, fmt.Errorf("process %q: %w", id, errdefs.ErrNotFound)
	}
	return p, nil
}

// all returns the tracked processes in start order.
func (r *registry) all() []*process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.order)
}

// running counts tracked processes that have not finished.
func (r *registry) running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.order) - len(r.exited)
}
