package daemon

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// identity is a resolved user.
type identity struct {
	name   string
	uid    int
	gid    int
	home   string
	groups []uint32
}

// lookupUser resolves a request's user: empty or the default user's name means the configured default
// user, "root" is uid 0, a number is a uid, anything else a name in the user database.
func (s *server) lookupUser(name string) (identity, error) {
	du := s.cfg.DefaultUser
	switch {
	case name == "" || name == du.Name:
		return identity{name: du.Name, uid: du.UID, gid: du.GID, home: du.Home}, nil
	case name == "root" || name == "0":
		return identity{name: "root", uid: 0, gid: 0, home: "/root"}, nil
	}
	if uid, err := strconv.Atoi(name); err == nil {
		if uid < 0 || uid > 1<<31-2 {
			return identity{}, invalidf("user %q: uid out of range", name)
		}
		if uid == du.UID {
			return identity{name: du.Name, uid: du.UID, gid: du.GID, home: du.Home}, nil
		}
		u, err := user.LookupId(name)
		if err != nil {
			return identity{name: name, uid: uid, gid: uid, home: "/"}, nil
		}
		return identityOf(u)
	}
	u, err := user.Lookup(name)
	if err != nil {
		return identity{}, invalidf("unknown user %q", name)
	}
	return identityOf(u)
}

// ImageUser resolves an image's user (its OCI config's User: NAME, UID, NAME:GROUP or UID:GID, a
// group by name or number) in this root's user database, for the default user.
func ImageUser(spec string) (User, error) {
	name, group, hasGroup := strings.Cut(spec, ":")
	var u *user.User
	var err error
	if _, nerr := strconv.Atoi(name); nerr == nil {
		u, err = user.LookupId(name)
		if err != nil { // a uid the root does not name: that uid, its own gid, no home
			uid, _ := strconv.Atoi(name)
			u = &user.User{Uid: name, Gid: name, Username: name, HomeDir: "/"}
			if uid < 0 || uid > 1<<31-2 {
				return User{}, fmt.Errorf("user %q: uid out of range", spec)
			}
		}
	} else if u, err = user.Lookup(name); err != nil {
		return User{}, fmt.Errorf("user %q: %w", spec, err)
	}
	if hasGroup {
		if _, nerr := strconv.Atoi(group); nerr == nil {
			u.Gid = group
		} else {
			g, err := user.LookupGroup(group)
			if err != nil {
				return User{}, fmt.Errorf("user %q: %w", spec, err)
			}
			u.Gid = g.Gid
		}
	}
	id, err := identityOf(u)
	if err != nil {
		return User{}, err
	}
	if id.uid < 0 || id.gid < 0 || id.gid > 1<<31-2 {
		return User{}, fmt.Errorf("user %q: id out of range", spec)
	}
	return User{Name: id.name, UID: id.uid, GID: id.gid, Home: id.home}, nil
}

func identityOf(u *user.User) (identity, error) {
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return identity{}, invalidf("user %q has a non-numeric uid or gid", u.Username)
	}
	id := identity{name: u.Username, uid: uid, gid: gid, home: u.HomeDir}
	if id.home == "" {
		id.home = "/"
	}
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil && int(n) != gid {
				id.groups = append(id.groups, uint32(n))
			}
		}
	}
	return id, nil
}

// credential reports the credential a child needs to run as id, or nil when the daemon already runs as
// id and is not root.
func credential(id identity) *syscall.Credential {
	if os.Geteuid() != 0 && id.uid == os.Geteuid() && id.gid == os.Getegid() {
		return nil
	}
	groups := id.groups
	if groups == nil {
		groups = []uint32{}
	}
	return &syscall.Credential{Uid: uint32(id.uid), Gid: uint32(id.gid), Groups: groups}
}

// spawnSpec describes a process to start.
type spawnSpec struct {
	argv  []string
	env   []string
	cwd   string
	user  string
	pty   *proto.PTYSize
	stdin bool // give the child a stdin pipe (always true with a PTY)
}

// spawned is a started child and the parent's ends of its stdio.
type spawned struct {
	child *child
	id    identity
	start time.Time
	// stdin is the write end of the stdin pipe or the PTY master; nil when stdin is /dev/null.
	stdin *os.File
	// outs are the read ends: stdout and stderr, or just the PTY master.
	outs []*os.File
	pty  *os.File // the PTY master (also in stdin and outs), or nil
}

// closeAll closes the parent's ends.
func (sp *spawned) closeAll() {
	if sp.stdin != nil {
		sp.stdin.Close()
	}
	for _, f := range sp.outs {
		f.Close()
	}
}

// buildEnv returns the default environment for id overlaid with the request's entries.
func (s *server) buildEnv(id identity, reqEnv []string, tty bool) []string {
	env := []string{
		"PATH=" + s.cfg.Path,
		"HOME=" + id.home,
		"USER=" + id.name,
		"LOGNAME=" + id.name,
	}
	if tty {
		env = append(env, "TERM=xterm-256color")
	}
	index := make(map[string]int, len(env)+len(reqEnv))
	for i, e := range env {
		k, _, _ := strings.Cut(e, "=")
		index[k] = i
	}
	overlay := func(entries []string, skipIdentity bool) {
		for _, e := range entries {
			k, _, _ := strings.Cut(e, "=")
			if skipIdentity && (k == "HOME" || k == "USER" || k == "LOGNAME") {
				continue
			}
			if i, ok := index[k]; ok {
				env[i] = e
				continue
			}
			index[k] = len(env)
			env = append(env, e)
		}
	}
	overlay(s.baseEnv(), true)
	overlay(reqEnv, false)
	return env
}

// lookPath finds the executable for argv0 in the PATH of env, relative to cwd.
func lookPath(argv0 string, env []string, cwd string) (string, error) {
	if strings.Contains(argv0, "/") {
		p := argv0
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		if err := checkExecutable(p); err != nil {
			return "", err
		}
		return p, nil
	}
	path := ""
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(cwd, dir)
		}
		p := filepath.Join(dir, argv0)
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable %q not found in PATH: %w", argv0, errdefs.ErrNotFound)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("executable %s: %w", p, mapErrno(err))
	}
	if !fi.Mode().IsRegular() {
		return invalidf("executable %s is not a regular file", p)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("executable %s is not executable: %w", p, errdefs.ErrPermissionDenied)
	}
	return nil
}

// spawn starts a process. The caller owns the result and must eventually close its files.
func (s *server) spawn(spec spawnSpec) (_ *spawned, err error) {
	if len(spec.argv) == 0 {
		if len(s.cfg.DefaultArgv) == 0 {
			return nil, invalidf("no command given, and the sandbox's template has none of its own (an image's Entrypoint and Cmd)")
		}
		spec.argv = s.cfg.DefaultArgv
	}
	id, err := s.lookupUser(spec.user)
	if err != nil {
		return nil, err
	}
	cwd := spec.cwd
	if cwd == "" {
		cwd = "/"
		for _, d := range []string{s.cfg.WorkDir, id.home} {
			if fi, err := os.Stat(d); d != "" && err == nil && fi.IsDir() {
				cwd = d
				break
			}
		}
	} else {
		fi, err := os.Stat(cwd)
		if err != nil {
			return nil, fmt.Errorf("working directory %s: %w", cwd, mapErrno(err))
		}
		if !fi.IsDir() {
			return nil, invalidf("working directory %s is not a directory", cwd)
		}
	}
	env := s.buildEnv(id, spec.env, spec.pty != nil)
	path, err := lookPath(spec.argv[0], env, cwd)
	if err != nil {
		return nil, err
	}

	// childFDs are closed after the fork; on failure the parent's ends are closed too.
	var childFDs []int
	sp := &spawned{id: id}
	defer func() {
		for _, fd := range childFDs {
			unix.Close(fd)
		}
		if err != nil {
			sp.closeAll()
		}
	}()

	attr := &syscall.ProcAttr{Dir: cwd, Env: env, Sys: &syscall.SysProcAttr{Credential: credential(id)}}
	if spec.pty != nil {
		master, slave, err := openPTY(spec.pty, id)
		if err != nil {
			return nil, err
		}
		childFDs = append(childFDs, slave)
		sp.pty, sp.stdin, sp.outs = master, master, []*os.File{master}
		attr.Files = []uintptr{uintptr(slave), uintptr(slave), uintptr(slave)}
		attr.Sys.Setsid = true
		attr.Sys.Setctty = true
		attr.Sys.Ctty = 0
	} else {
		var stdinFD int
		if spec.stdin {
			r, w, err := pipeFDs()
			if err != nil {
				return nil, err
			}
			childFDs = append(childFDs, r)
			sp.stdin = nonblockFile(w, "stdin")
			stdinFD = r
		} else {
			fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, fmt.Errorf("open %s: %w", os.DevNull, mapErrno(err))
			}
			childFDs = append(childFDs, fd)
			stdinFD = fd
		}
		files := []uintptr{uintptr(stdinFD)}
		for range 2 {
			r, w, err := pipeFDs()
			if err != nil {
				return nil, err
			}
			childFDs = append(childFDs, w)
			sp.outs = append(sp.outs, nonblockFile(r, "output"))
			files = append(files, uintptr(w))
		}
		attr.Files = files
		attr.Sys.Setpgid = true
	}

	argv := spec.argv
	sp.child, err = s.reaper.start(func() (int, error) {
		return syscall.ForkExec(path, argv, attr)
	})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", path, mapErrno(err))
	}
	sp.start = time.Now()
	return sp, nil
}

// pipeFDs creates a close-on-exec pipe.
func pipeFDs() (r, w int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return 0, 0, fmt.Errorf("pipe: %w", mapErrno(err))
	}
	return p[0], p[1], nil
}

// nonblockFile wraps fd as a file registered with the runtime poller, so reads and writes can be
// interrupted by Close.
func nonblockFile(fd int, name string) *os.File {
	unix.SetNonblock(fd, true)
	return os.NewFile(uintptr(fd), name)
}

// openPTY opens a pseudo-terminal of the given size, owned by id. It returns the master as a
// non-blocking file and the slave as a raw close-on-exec descriptor.
func openPTY(size *proto.PTYSize, id identity) (*os.File, int, error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("open /dev/ptmx: %w", mapErrno(err))
	}
	fail := func(what string, err error) (*os.File, int, error) {
		unix.Close(mfd)
		return nil, 0, fmt.Errorf("pty %s: %w", what, mapErrno(err))
	}
	n, err := unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
	if err != nil {
		return fail("get number", err)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		return fail("unlock", err)
	}
	rows, cols := size.Rows, size.Cols
	if rows == 0 || cols == 0 {
		rows, cols = 24, 80
	}
	if err := unix.IoctlSetWinsize(mfd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		return fail("set size", err)
	}
	sfd, err := unix.Open("/dev/pts/"+strconv.FormatUint(uint64(n), 10), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail("open slave", err)
	}
	if os.Geteuid() == 0 {
		unix.Fchown(sfd, id.uid, id.gid) // best effort: lets the user's programs manage their terminal
	}
	return os.NewFile(uintptr(mfd), "/dev/ptmx"), sfd, nil
}
