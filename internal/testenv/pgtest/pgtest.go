// Package pgtest runs throwaway PostgreSQL servers for tests: Start gives each caller a new, empty database
// on a server private to the test process, reachable only over a unix socket in a temporary directory
// (trust authentication, superuser "airlock", fsync off but commits synchronous, UTF-8 in the C locale: text sorts by bytes, as in
// SQLite). It drives the PostgreSQL binaries (initdb, postgres, pg_ctl, pg_isready, psql; version 13 or
// newer) and needs no Go driver. Tests skip when the binaries are missing; as root, the server runs as the
// postgres system user, since initdb refuses root.
//
// Lifetime: the server is reference-counted. The first Start starts it, each Start's t.Cleanup drops its
// database and releases it, and the Cleanup of the last test still using it stops the server (pg_ctl stop
// -m immediate) and removes its directory. Parallel tests thus share one server; tests that run one after
// another each get a fresh one (initdb takes a second or two). A package with many such tests can keep
// one server for its whole run by calling Main from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// Should the test process die without running its cleanups (a panic, a -timeout, a kill), the kernel
// sends the server SIGQUIT (PostgreSQL's immediate shutdown) as the process goes: no server outlives it.
// Only its temporary directory (pgtest-* under os.TempDir) is left behind then.
package pgtest

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// superuser is the role initdb creates; Start's DSNs log in as it.
	superuser = "airlock"
	// port names the server's socket file (.s.PGSQL.<port>). The server listens on no TCP port and its
	// socket directory is private to it, so any fixed number is free.
	port = 5432
	// readyTimeout bounds how long Start waits for a new server to accept connections.
	readyTimeout = 30 * time.Second
	// stopTimeout bounds how long a stop waits for the server to exit before killing it.
	stopTimeout = 30 * time.Second
)

// tools are the PostgreSQL programs this package runs; a binary directory must hold all of them.
var tools = []string{"initdb", "postgres", "pg_ctl", "pg_isready", "psql"}

// Available reports whether the PostgreSQL binaries Start needs are installed, that is whether Start
// would run rather than skip for that reason.
func Available() bool {
	_, ok := bindir()
	return ok
}

// bindir finds the directory of the PostgreSQL binaries once per process: pg_config --bindir, else the
// directory of initdb on PATH (symlinks resolved), else the newest /usr/lib/postgresql/<version>/bin
// (Debian's layout, which puts none of them on PATH).
var bindir = sync.OnceValues(func() (string, bool) {
	complete := func(dir string) bool {
		for _, tool := range tools {
			if fi, err := os.Stat(filepath.Join(dir, tool)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); dir != "" && complete(dir) {
			return dir, true
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if p, err := filepath.EvalSymlinks(p); err == nil && complete(filepath.Dir(p)) {
			return filepath.Dir(p), true
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Newest first: by the version number, so that 10 sorts after 9.6.
	version := func(dir string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int { return cmp.Compare(version(b), version(a)) })
	for _, dir := range dirs {
		if complete(dir) {
			return dir, true
		}
	}
	return "", false
})

// serverUser returns the credential the server runs with: nil (the current user) unless the process is
// root, then the postgres system user's. It reports an error when root has no postgres user.
var serverUser = sync.OnceValues(func() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs the postgres system user to run the server as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("postgres user: uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("postgres user: gid %q: %w", u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
})

// The process's server and its users.
var (
	mu sync.Mutex
	// srv is the running server; nil before the first Start and after the last user released it.
	srv *server
	// refs counts the Starts whose Cleanup has not run yet.
	refs int
	// kept is set while Main runs: the server then outlives refs dropping to zero, until Main stops it.
	kept bool
	// startErr is the first failure to start a server; later Starts fail with it rather than wait again.
	startErr error
	// nextDB numbers the databases Start creates, across all servers of the process.
	nextDB int
)

// Start returns the DSN of a new, empty database (airlock_test_<n>) on the process's PostgreSQL server,
// starting the server first if none runs. The DSN is in the keyword/value form github.com/jackc/pgx/v5
// and libpq accept: host=<socket directory> port=<port> user=airlock dbname=<database> sslmode=disable;
// its user is a superuser. When the test ends, the database is dropped (forcibly: open connections are
// closed) and, if no other test uses the server and Main does not keep it, the server is stopped and its
// directory removed.
//
// Start skips the test when the PostgreSQL binaries are missing, and fails it when the server does not
// start; the failure includes the server's log, and every later Start of the process fails with it too.
func Start(t testing.TB) string {
	t.Helper()
	bin, ok := bindir()
	if !ok {
		t.Skip("needs PostgreSQL (apt-get install postgresql; scripts/test.sh installs it)")
	}
	cred, err := serverUser()
	if err != nil {
		t.Skipf("needs PostgreSQL: %v", err)
	}

	mu.Lock()
	if srv == nil {
		if startErr == nil {
			srv, startErr = startServer(bin, cred)
		}
		if startErr != nil {
			mu.Unlock()
			t.Fatalf("pgtest: %v", startErr)
		}
	}
	s := srv
	refs++
	nextDB++
	db := fmt.Sprintf("airlock_test_%d", nextDB)
	mu.Unlock()

	t.Cleanup(func() { release(t, s, db) })
	if out, err := s.psql("CREATE DATABASE " + db); err != nil {
		t.Fatalf("pgtest: create database %s: %v: %s", db, err, out)
	}
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", dsnQuote(s.dir), port, superuser, db)
}

// release ends one Start's use of s: it drops the database db unless the server is about to stop anyway,
// then stops the server if this was its last user.
func release(t testing.TB, s *server, db string) {
	mu.Lock()
	last := refs == 1 && !kept
	mu.Unlock()
	if !last {
		// This Start's reference keeps the server up while it drops the database.
		if out, err := s.psql("DROP DATABASE IF EXISTS " + db + " WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v: %s", db, err, out)
		}
	}

	mu.Lock()
	refs--
	stop := refs == 0 && !kept
	if stop {
		srv = nil
	}
	mu.Unlock()
	if stop {
		if err := s.stop(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	}
}

// Main runs m's tests keeping the process's server (once a test starts it) until they have all run, then
// stops it and exits with m's result; it never returns. Call it from TestMain in packages with many tests
// that use Start, so that they share one server rather than each start their own:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// A failure to stop the server is printed to stderr and turns a passing run into exit status 1.
func Main(m *testing.M) {
	mu.Lock()
	kept = true
	mu.Unlock()

	code := m.Run()

	mu.Lock()
	kept = false
	s := srv
	if refs == 0 {
		srv = nil
	} else {
		s = nil // still in use (a leaked Start): its last Cleanup stops it, if it ever runs
	}
	mu.Unlock()
	if s != nil {
		if err := s.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// server is one running PostgreSQL server and the directory that holds it.
type server struct {
	bin  string              // directory of the PostgreSQL binaries
	dir  string              // temporary directory: the socket, data/ and server.log
	cred *syscall.Credential // who initdb, postgres and pg_ctl run as; nil: the current user
	cmd  *exec.Cmd           // the postmaster

	exited  chan struct{} // closed once the postmaster has exited and been reaped
	waitErr error         // the postmaster's exit status; set before exited is closed
}

func (s *server) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *server) logPath() string { return filepath.Join(s.dir, "server.log") }

// startServer creates a database cluster in a new temporary directory and starts a postmaster on it,
// returning once it accepts connections. On failure it leaves no process and no directory behind.
func startServer(bin string, cred *syscall.Credential) (_ *server, err error) {
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, fmt.Errorf("start PostgreSQL: %w", err)
	}
	s := &server{bin: bin, dir: dir, cred: cred, exited: make(chan struct{})}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	// The socket's path, <dir>/.s.PGSQL.<port>, must fit in sun_path (108 bytes).
	if n := len(filepath.Join(dir, fmt.Sprintf(".s.PGSQL.%d", port))); n > 103 {
		return nil, fmt.Errorf("start PostgreSQL: socket path in %s is %d bytes, longer than a unix socket allows; set a shorter TMPDIR", dir, n)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("start PostgreSQL: %w", err)
		}
	}

	initdb := s.command("initdb", "--pgdata="+s.dataDir(), "--auth=trust", "--username="+superuser,
		"--encoding=UTF8", "--no-locale", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("start PostgreSQL: initdb: %v: %s", err, out)
	}

	if err := s.startPostmaster(); err != nil {
		return nil, fmt.Errorf("start PostgreSQL: %w", err)
	}
	if err := s.waitReady(); err != nil {
		return nil, fmt.Errorf("start PostgreSQL: %w", err)
	}
	return s, nil
}

// startPostmaster starts the postmaster on the server's data (appending to its log).
func (s *server) startPostmaster() error {
	logf, err := os.OpenFile(s.logPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the postmaster holds its own copy of the descriptor
	s.cmd = s.command("postgres", "-D", s.dataDir(),
		"-c", "listen_addresses=",
		"-c", "unix_socket_directories="+s.dir,
		"-c", "port="+strconv.Itoa(port),
		// Off: what only an operating system's crash could lose (Restart crashes the server, not the
		// machine: the page cache keeps every page written). synchronous_commit stays on, as in
		// production: off, a crash loses commits the server already acknowledged.
		"-c", "fsync=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=200",
	)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	// SIGQUIT is PostgreSQL's immediate shutdown: the postmaster takes its backends down with it.
	s.cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	s.exited, s.waitErr = make(chan struct{}), nil
	return s.run()
}

// waitReady waits until the postmaster accepts connections; should it not within readyTimeout, it is
// killed.
func (s *server) waitReady() error {
	deadline := time.Now().Add(readyTimeout)
	for {
		if s.command("pg_isready", "-q", "-h", s.dir, "-p", strconv.Itoa(port), "-U", superuser, "-d", "postgres").Run() == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("server exited (%v); log:\n%s", s.waitErr, s.log())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = s.cmd.Process.Kill()
			<-s.exited
			return fmt.Errorf("not accepting connections after %v; log:\n%s", readyTimeout, s.log())
		}
	}
}

// Restart stops the process's PostgreSQL server at once, as a crash would (an immediate shutdown: no
// checkpoint, so it recovers from its write-ahead log when it starts), and starts it again on the same
// data, returning once it accepts connections. Every open connection is cut. It fails the test with no
// server running.
func Restart(t testing.TB) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	s := srv
	if s == nil {
		t.Fatal("pgtest: Restart with no server running")
	}
	if out, err := s.command("pg_ctl", "stop", "-D", s.dataDir(), "-m", "immediate", "-w",
		"-t", strconv.Itoa(int(stopTimeout/time.Second))).CombinedOutput(); err != nil {
		t.Fatalf("pgtest: crash the server: pg_ctl: %v: %s", err, bytes.TrimSpace(out))
	}
	<-s.exited
	if err := s.startPostmaster(); err != nil {
		t.Fatalf("pgtest: start the server again: %v", err)
	}
	if err := s.waitReady(); err != nil {
		t.Fatalf("pgtest: start the server again: %v", err)
	}
}

// run starts the postmaster from a goroutine locked to its OS thread until the postmaster has exited.
// Pdeathsig fires when the thread that started the child exits, not the process; Go ends threads whose
// goroutine exits locked (runtime.LockOSThread, which network-namespace code uses), so an unlocked thread
// could take the server down mid-test. The goroutine owns s.cmd: it reaps it, sets s.waitErr and closes
// s.exited.
func (s *server) run() error {
	started := make(chan error)
	go func() {
		runtime.LockOSThread()
		if err := s.cmd.Start(); err != nil {
			runtime.UnlockOSThread()
			started <- err
			return
		}
		started <- nil
		s.waitErr = s.cmd.Wait()
		runtime.UnlockOSThread()
		close(s.exited)
	}()
	return <-started
}

// stop shuts the server down (immediately: tests need no clean shutdown) and removes its directory. It
// returns once the postmaster has exited; should pg_ctl fail, it kills the postmaster.
func (s *server) stop() error {
	var errs []error
	out, err := s.command("pg_ctl", "stop", "-D", s.dataDir(), "-m", "immediate", "-w",
		"-t", strconv.Itoa(int(stopTimeout/time.Second))).CombinedOutput()
	if err != nil {
		errs = append(errs, fmt.Errorf("stop PostgreSQL: pg_ctl: %v: %s", err, bytes.TrimSpace(out)))
	}
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		errs = append(errs, fmt.Errorf("stop PostgreSQL: server still running after %v; killed it", stopTimeout))
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	if err := os.RemoveAll(s.dir); err != nil {
		errs = append(errs, fmt.Errorf("stop PostgreSQL: %w", err))
	}
	return errors.Join(errs...)
}

// psql runs one SQL command in the postgres database as the superuser, and returns psql's output.
func (s *server) psql(sql string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(s.bin, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
		"-h", s.dir, "-p", strconv.Itoa(port), "-U", superuser, "-d", "postgres", "-c", sql)
	cmd.Env = env()
	return cmd.CombinedOutput()
}

// command returns a command running the PostgreSQL program name as the server's user.
func (s *server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Env = env()
	cmd.Dir = s.dir // a directory the server's user may enter; the caller's may not be one
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	return cmd
}

// log returns the server's log, for failure messages.
func (s *server) log() string {
	b, err := os.ReadFile(s.logPath())
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

// env is the process's environment for PostgreSQL programs: without PG* variables, which would point
// them elsewhere (PGHOST, PGDATA, PGOPTIONS, …), and in the C locale.
func env() []string {
	var e []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "LC_ALL=") {
			e = append(e, kv)
		}
	}
	return append(e, "LC_ALL=C")
}

// dsnQuote quotes a value of a keyword/value connection string when it needs it (libpq's rules: single
// quotes, with backslash before ' and \).
func dsnQuote(v string) string {
	if v != "" && !strings.ContainsAny(v, " '\\\t\n") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}
