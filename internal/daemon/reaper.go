package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
)

const killSignal = unix.SIGKILL

// errExited is reported when signalling a process that already exited.
var errExited = fmt.Errorf("process already exited: %w", errdefs.ErrFailedPrecondition)

// reaper collects the exit status of the daemon's children and routes it to their waiters.
//
// In "all" mode (PID 1 or subreaper) one goroutine reaps every child on SIGCHLD: tracked children get
// their status, orphans are discarded. Otherwise one goroutine per child waits for that pid only.
//
// Signals are never sent to a pid after it was reaped (its number could be reused): reaping holds mu for
// writing and updates child.exited before releasing it; signal holds mu for reading and checks exited.
// Forks hold mu for reading until the child is registered, so a child is never reaped before its waiter
// exists.
type reaper struct {
	all bool
	log *slog.Logger

	mu sync.RWMutex // held for writing while reaping; for reading while forking or signalling

	cmu      sync.Mutex
	children map[int]*child // guarded by cmu; children not yet reaped

	wg   sync.WaitGroup // the reaping goroutine(s)
	stop chan struct{}  // closed by shutdown
}

// child is one process the daemon started.
type child struct {
	pid  int
	done chan struct{} // closed once the child was reaped and status is set
	// status is the wait status; valid after done is closed.
	status unix.WaitStatus
	// exited is set when the child was reaped; guarded by reaper.mu.
	exited bool
}

func newReaper(all bool, log *slog.Logger) *reaper {
	return &reaper{all: all, log: log, children: make(map[int]*child), stop: make(chan struct{})}
}

// run starts the reaping goroutine in all mode. shutdown stops it.
func (r *reaper) run() {
	if !r.all {
		return
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	r.wg.Add(1)
	go func() { // owner: reaper; ends at shutdown
		defer r.wg.Done()
		defer signal.Stop(sigs)
		r.reapAll()
		for {
			select {
			case <-sigs:
				r.reapAll()
			case <-r.stop:
				return
			}
		}
	}()
}

// shutdown stops the reaping goroutine(s). In own mode it waits for the per-child waiters, which end
// when their children exit; callers kill the children first.
func (r *reaper) shutdown() {
	close(r.stop)
	r.wg.Wait()
}

// start runs fork (which starts a process and returns its pid) and registers the child.
func (r *reaper) start(fork func() (int, error)) (*child, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	pid, err := fork()
	if err != nil {
		return nil, err
	}
	c := &child{pid: pid, done: make(chan struct{})}
	r.cmu.Lock()
	r.children[pid] = c
	r.cmu.Unlock()
	if !r.all {
		r.wg.Add(1)
		go r.waitOne(c) // owner: reaper; ends when the child exits
	}
	return c, nil
}

// waitOne waits for one child without reaping it, then reaps it under the write lock.
func (r *reaper) waitOne(c *child) {
	defer r.wg.Done()
	for {
		var si unix.Siginfo
		err := unix.Waitid(unix.P_PID, c.pid, &si, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(c.pid, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			r.log.Warn("wait for child", "pid", c.pid, "err", err)
			ws = unix.WaitStatus(255 << 8) // exit code 255: status unknown
		}
		break
	}
	r.finishLocked(c, ws)
}

// reapAll reaps every child that exited.
func (r *reaper) reapAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		r.cmu.Lock()
		c := r.children[pid]
		r.cmu.Unlock()
		if c == nil {
			r.log.Debug("reaped orphan", "pid", pid, "status", int(ws))
			continue
		}
		r.finishLocked(c, ws)
	}
}

func (r *reaper) finishLocked(c *child, ws unix.WaitStatus) {
	r.cmu.Lock()
	delete(r.children, c.pid)
	r.cmu.Unlock()
	c.status = ws
	c.exited = true
	close(c.done)
}

// signal sends sig to target (c's pid, or minus its process group id) unless c already exited, in which
// case it reports errExited.
func (r *reaper) signal(c *child, target int, sig unix.Signal) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if c.exited {
		return errExited
	}
	if err := unix.Kill(target, sig); err != nil {
		return fmt.Errorf("kill %d: %w", target, mapErrno(err))
	}
	return nil
}
