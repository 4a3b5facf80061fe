// Package daemon is the Airlock in-sandbox daemon: the init process (PID 1) of every gVisor sandbox and
// the only process that talks outside it.
//
// It serves the wire protocol of package proto on a listener (a unix stream socket): one connection at a
// time, where a new connection replaces (closes) the old one. Processes it started, and their buffered
// output, survive across connections, so the node can reconnect after a restart and re-attach.
//
// The package imports nothing from the rest of Airlock except internal/errdefs; a test enforces it.
package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// Version is the daemon build version reported by the info operation. The build sets it with
// -ldflags "-X github.com/airlockrun/airlock/internal/daemon.Version=…".
var Version = "dev"

// Defaults used for zero Config fields.
const (
	DefaultUserName     = "user"
	DefaultUID          = 1000
	DefaultGID          = 1000
	DefaultHome         = "/home/user"
	DefaultPath         = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	DefaultOutputBuffer = 1 << 20
	DefaultExecOutput   = 8 << 20
	DefaultMaxFileSize  = 1 << 30
	DefaultMaxExited    = 256
	DefaultMaxProcesses = 1024
	DefaultDrainTimeout = 250 * time.Millisecond
	DefaultStallTimeout = 5 * time.Second
	// MaxStreams is the number of concurrent calls one connection may have open; further requests fail
	// with errdefs.ErrResourceExhausted.
	MaxStreams = 4096
)

// User is an account processes run as and files are owned by.
type User struct {
	Name string
	UID  int
	GID  int
	Home string
}

// Config configures Serve. The zero value is the production configuration.
type Config struct {
	// DefaultUser is who runs processes and owns created files when a request names no user.
	// The zero value (empty Name) means {Name: "user", UID: 1000, GID: 1000, Home: "/home/user"}; when
	// Name is set, all fields are used as given (UID 0 is root).
	DefaultUser User
	// WorkDir is the working directory of processes whose request names none, when it is a directory
	// (an image template's WorkingDir). Empty: the user's home.
	WorkDir string
	// DefaultArgv is the command of processes whose request names none (an image template's Entrypoint
	// followed by its Cmd). Empty: such a request is refused.
	DefaultArgv []string
	// Path is the PATH of processes whose request does not set one. Empty means DefaultPath.
	Path string
	// Env is the sandbox's base environment ("K=V"): every process gets it, over the defaults (PATH,
	// HOME, USER, LOGNAME) and under its request's own entries. HOME, USER and LOGNAME in Env are
	// ignored: they follow the user a process runs as. Main sets it from its own environment, which is
	// the template's plus the one the sandbox was created with.
	Env []string
	// OutputBuffer bounds the bytes kept per output stream of a tracked (started) process. While a client
	// is attached, a full buffer blocks the process (back-pressure); while nobody is attached the oldest
	// bytes are dropped and the next attachment is told how many. Zero means 1 MiB.
	OutputBuffer int
	// ExecOutput is the largest number of bytes an exec keeps per output stream. Zero means 8 MiB.
	ExecOutput int64
	// MaxFileSize bounds a file written by write_file and each file of a tar upload. Zero means 1 GiB.
	MaxFileSize int64
	// MaxExited is how many exited processes stay listable and attachable. Zero means 256.
	MaxExited int
	// MaxProcesses bounds the tracked processes still running. Zero means 1024.
	MaxProcesses int
	// DrainTimeout is how long output is still read after a process exited, for descendants that keep
	// its stdout or stderr open; then the daemon stops reading. Zero means 250ms.
	DrainTimeout time.Duration
	// StallTimeout is how long, after a process exited, output waiting for an attached client that
	// makes no progress is kept back before the rest is dropped. Zero means 5s.
	StallTimeout time.Duration
	// ReapAll makes the daemon reap every child, including orphans re-parented to it. Set it when the
	// daemon is PID 1 or a child subreaper (Main does). When false, the daemon waits only for the
	// processes it started, so it can share a process with other code (tests).
	ReapAll bool
	// Listen opens the listening socket again after a quiesce; Wake says when (Main sends on it for
	// SIGUSR2). Without Listen, quiesce is refused.
	Listen func() (net.Listener, error)
	Wake   <-chan struct{}
	// Control is the control directory (see proto.ControlKey): the daemon proves itself with the key
	// in it (OpHello; without Control, hello is refused) and a change of its wake file wakes the
	// quiesced daemon as Wake does. Empty: neither.
	Control string
	// IdentityRoot is the directory under which the daemon writes a sandbox's identity
	// (proto.IdentityFile, proto.MachineIDFile) and finds its hooks (proto.IdentityHooks). Empty: "/",
	// and only then does it also set the host name and feed the kernel's random pool, which are the
	// whole kernel's; a daemon that is not PID 1 (not a sandbox's init) then refuses identities
	// (daemons served in tests set a directory of their own).
	IdentityRoot string
}

func (c Config) withDefaults() Config {
	if c.DefaultUser.Name == "" {
		c.DefaultUser = User{Name: DefaultUserName, UID: DefaultUID, GID: DefaultGID, Home: DefaultHome}
	}
	if c.DefaultUser.Home == "" {
		c.DefaultUser.Home = "/"
	}
	if c.Path == "" {
		c.Path = DefaultPath
	}
	if c.OutputBuffer <= 0 {
		c.OutputBuffer = DefaultOutputBuffer
	}
	if c.ExecOutput <= 0 {
		c.ExecOutput = DefaultExecOutput
	}
	if c.MaxFileSize <= 0 {
		c.MaxFileSize = DefaultMaxFileSize
	}
	if c.MaxExited <= 0 {
		c.MaxExited = DefaultMaxExited
	}
	if c.MaxProcesses <= 0 {
		c.MaxProcesses = DefaultMaxProcesses
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	return c
}

// server is the state shared by all connections of one Serve call.
type server struct {
	cfg    Config
	log    *slog.Logger
	start  time.Time
	reaper *reaper
	procs  *registry

	// procWG counts the goroutines of tracked processes; each ends once its process finished.
	procWG sync.WaitGroup
	// sessWG counts session goroutines.
	sessWG sync.WaitGroup

	mu  sync.Mutex
	cur *session // guarded by mu; the connection being served
	// ln is the listening socket; quiesced is set while it is closed for a checkpoint. Guarded by mu.
	ln       net.Listener
	quiesced bool
	// wakeSeen is what the control directory's wake file held when the daemon quiesced. Guarded by mu.
	wakeSeen []byte

	// identityMu serializes identities given (setIdentity).
	identityMu sync.Mutex
}

// Serve serves connections from ln until ctx is done or ln fails. A new connection replaces the current
// one, which is closed (its calls are canceled; attachments detach; execs are killed). Tracked processes
// outlive connections.
//
// When ctx is done Serve closes ln and the connection, kills every process it started (SIGKILL to its
// process group), waits for them and for all its goroutines, and returns nil. Otherwise it returns the
// error from Accept. log may be nil.
func Serve(ctx context.Context, ln net.Listener, cfg Config, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &server{cfg: cfg.withDefaults(), log: log, start: time.Now(), ln: ln}
	s.reaper = newReaper(s.cfg.ReapAll, log)
	s.procs = newRegistry(s.cfg.MaxExited)
	s.reaper.run()

	stopped := make(chan struct{})
	closerDone := make(chan struct{})
	go func() { // owner: Serve; ends when ctx is done or Serve returns
		defer close(closerDone)
		select {
		case <-ctx.Done():
			s.mu.Lock()
			s.ln.Close()
			s.mu.Unlock()
		case <-stopped:
		}
	}()

	var serveErr error
	backoff := 5 * time.Millisecond
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if next, ok := s.awaitWake(ctx); ok {
				if next == nil {
					break // stopping
				}
				ln = next
				continue
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) {
				s.log.Warn("accept failed; retrying", "err", err, "in", backoff)
				select {
				case <-time.After(backoff):
				case <-ctx.Done():
				}
				backoff = min(2*backoff, time.Second)
				continue
			}
			serveErr = fmt.Errorf("accept: %w", err)
			break
		}
		backoff = 5 * time.Millisecond
		s.replaceSession(conn)
	}
	close(stopped)
	<-closerDone
	s.mu.Lock()
	s.ln.Close()
	s.mu.Unlock()

	s.mu.Lock()
	if s.cur != nil {
		s.cur.close()
	}
	s.mu.Unlock()
	s.sessWG.Wait()
	s.killAll()
	s.procWG.Wait()
	s.reaper.shutdown()
	return serveErr
}

func (s *server) replaceSession(conn net.Conn) {
	sess := newSession(s, conn)
	s.mu.Lock()
	old := s.cur
	s.cur = sess
	s.mu.Unlock()
	if old != nil {
		s.log.Info("new connection replaces the current one")
		old.close()
	}
	s.sessWG.Add(1)
	go func() { // owner: server; ends when the connection closes
		defer s.sessWG.Done()
		sess.serve()
		s.mu.Lock()
		if s.cur == sess {
			s.cur = nil
		}
		s.mu.Unlock()
	}()
}

// killAll kills the process group of every running tracked process.
func (s *server) killAll() {
	for _, p := range s.procs.all() {
		if err := s.reaper.signal(p.child, -p.child.pid, killSignal); err != nil && !errors.Is(err, errdefs.ErrFailedPrecondition) {
			s.log.Warn("kill process", "id", p.id, "err", err)
		}
	}
}

func (s *server) info() proto.Info {
	return proto.Info{
		Version:         Version,
		ProtocolVersion: proto.Version,
		StartTime:       s.start,
		Uptime:          time.Since(s.start),
		PID:             os.Getpid(),
		Processes:       s.procs.running(),
	}
}

// quiesce closes the listening socket for a checkpoint: a gVisor sandbox cannot be saved while it holds
// a host socket. The session that asked closes once it has the answer. The daemon listens again on the
// wake signal (see awaitWake).
func (s *server) quiesce() error {
	if s.cfg.Listen == nil || s.cfg.Wake == nil {
		return fmt.Errorf("this daemon cannot quiesce: %w", errdefs.ErrFailedPrecondition)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.quiesced {
		return nil
	}
	// Drop a wake that came before (a stray SIGUSR2 from a process in the sandbox).
	select {
	case <-s.cfg.Wake:
	default:
	}
	s.wakeSeen = s.readWake()
	s.quiesced = true
	if ul, ok := s.ln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(true)
	}
	s.ln.Close()
	s.log.Info("quiesced for a checkpoint")
	return nil
}

// readWake reads the control directory's wake file (nil if there is none, or no control directory).
func (s *server) readWake() []byte {
	if s.cfg.Control == "" {
		return nil
	}
	b, _ := readSmall(filepath.Join(s.cfg.Control, proto.ControlWake), 64)
	return b
}

// hello proves to the node that this daemon is the sandbox's own (see proto.OpHello).
func (s *server) hello(r *proto.HelloRequest) (proto.HelloResult, error) {
	if s.cfg.Control == "" {
		return proto.HelloResult{}, fmt.Errorf("this daemon has no control directory, so no key: %w", errdefs.ErrFailedPrecondition)
	}
	key, err := readSmall(filepath.Join(s.cfg.Control, proto.ControlKey), proto.LinkKeySize)
	if err != nil {
		return proto.HelloResult{}, fmt.Errorf("read the link key: %w", err)
	}
	if len(key) != proto.LinkKeySize {
		return proto.HelloResult{}, fmt.Errorf("the link key has %d bytes, want %d: %w", len(key), proto.LinkKeySize, errdefs.ErrFailedPrecondition)
	}
	return proto.HelloResult{Proof: proto.Proof(key, r.Nonce)}, nil
}

// readSmall reads at most n bytes of the file at path, and fails if it has more.
func readSmall(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(n)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > n {
		return nil, fmt.Errorf("%s: more than %d bytes: %w", path, n, errdefs.ErrFailedPrecondition)
	}
	return b, nil
}

// baseEnv is the environment every process starts from (before its request's entries).
func (s *server) baseEnv() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.Env
}

// takeControlEnv replaces the base environment with the control directory's environment file, if
// there is one (a sandbox restored from a template's start snapshot: see proto.ControlEnv). The file is
// the host's; a bad one is logged and ignored.
func (s *server) takeControlEnv() {
	if s.cfg.Control == "" {
		return
	}
	b, err := readSmall(filepath.Join(s.cfg.Control, proto.ControlEnv), proto.MaxCommandBytes)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var env []string
	if err == nil {
		env, err = proto.ParseControlEnv(b)
	}
	if err != nil {
		s.log.Warn("the control directory's environment file", "err", err)
		return
	}
	s.mu.Lock()
	s.cfg.Env = env
	s.mu.Unlock()
	s.log.Info("took the control directory's environment", "entries", len(env))
}

// awaitWake is called when Accept failed. If the daemon is quiesced, it waits for the wake signal and
// returns the new listener (nil if ctx ended first) and true; otherwise false.
func (s *server) awaitWake(ctx context.Context) (net.Listener, bool) {
	s.mu.Lock()
	q := s.quiesced
	s.mu.Unlock()
	if !q {
		return nil, false
	}
	var poll <-chan time.Time
	if s.cfg.Control != "" {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		poll = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil, true
		case <-s.cfg.Wake:
		case <-poll:
			s.mu.Lock()
			seen := s.wakeSeen
			s.mu.Unlock()
			if bytes.Equal(s.readWake(), seen) {
				continue
			}
		}
		ln, err := s.cfg.Listen()
		if err != nil {
			s.log.Error("listen again after quiesce", "err", err)
			continue // the next wake retries
		}
		s.takeControlEnv()
		s.mu.Lock()
		s.ln, s.quiesced = ln, false
		s.mu.Unlock()
		s.log.Info("listening again after a checkpoint")
		return ln, true
	}
}
