package daemon

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// IdentityHookTimeout bounds the run of all of a sandbox's identity hooks (proto.IdentityHooks) after a
// restore; past it the one running is killed and the rest do not run.
const IdentityHookTimeout = 10 * time.Second

// identityRoot is the directory the identity's files are under.
func (s *server) identityRoot() string {
	if s.cfg.IdentityRoot == "" {
		return "/"
	}
	return s.cfg.IdentityRoot
}

// setIdentity gives the sandbox the identity req (see proto.OpIdentity): it feeds the seed to the
// kernel's random pool and sets the host name (the whole kernel's: only with the production
// IdentityRoot, and where the kernel lets the daemon), replaces the machine ID, writes the identity
// file, and after a restore runs the template's hooks. What the kernel does not let the daemon do is
// logged, not an error: the files are written all the same.
func (s *server) setIdentity(ctx context.Context, req *proto.IdentityRequest) error {
	s.identityMu.Lock()
	defer s.identityMu.Unlock()
	if s.cfg.IdentityRoot == "" && os.Getpid() != 1 {
		// Not a sandbox's init: this / is not a sandbox's to rename (a daemon served in a test).
		return fmt.Errorf("identity: this daemon is not a sandbox's init and has no identity root of its own: %w", errdefs.ErrFailedPrecondition)
	}
	if s.cfg.IdentityRoot == "" {
		if err := feedEntropy(req.Seed); err != nil {
			s.log.Debug("the kernel's random pool takes no entropy from the daemon; it has its own", "err", err)
		}
		if cur, err := os.Hostname(); req.Hostname != "" && (err != nil || cur != req.Hostname) {
			if err := unix.Sethostname([]byte(req.Hostname)); err != nil {
				s.log.Warn("set the host name", "hostname", req.Hostname, "err", err)
			}
		}
	}
	root, err := openDirNoFollow(s.identityRoot(), "etc", true)
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	defer unix.Close(root)
	if err := writeFileAt(root, filepath.Base(proto.MachineIDFile), []byte(req.MachineID+"\n"), 0o444, 0, 0); err != nil {
		return fmt.Errorf("identity: machine id: %w", err)
	}
	dir, err := openDirNoFollow(s.identityRoot(), strings.TrimPrefix(filepath.Dir(proto.IdentityFile), "/"), true)
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	defer unix.Close(dir)
	b, err := json.Marshal(proto.IdentityFileContents{Epoch: hex.EncodeToString(req.Epoch), Seed: hex.EncodeToString(req.Seed),
		MachineID: req.MachineID, Hostname: req.Hostname, InterpreterKey: hex.EncodeToString(req.InterpreterKey)})
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	if err := writeFileAt(dir, filepath.Base(proto.IdentityFile), append(b, '\n'), 0o640, 0, s.cfg.DefaultUser.GID); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	if req.Restored {
		s.runIdentityHooks(ctx)
	}
	return nil
}

// feedEntropy mixes seed into the kernel's random pool: credited where the daemon may (RNDADDENTROPY
// needs CAP_SYS_ADMIN: a microVM's daemon has it), else as a plain write, which the kernel mixes in
// without crediting.
func feedEntropy(seed []byte) error {
	if err := reseed(seed); err == nil {
		return nil
	}
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(seed)
	return err
}

// openDirNoFollow opens the directory rel (slash-separated, relative) under base, each element without
// following a symbolic link, creating missing ones (owned by root, mode 0755) if create is set. It
// returns the directory's fd.
func openDirNoFollow(base, rel string, create bool) (int, error) {
	fd, err := unix.Open(base, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", base, mapErrno(err))
	}
	for _, el := range strings.Split(rel, "/") {
		if el == "" {
			continue
		}
		if create {
			if err := unix.Mkdirat(fd, el, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(fd)
				return -1, fmt.Errorf("create %s: %w", el, mapErrno(err))
			}
		}
		next, err := unix.Openat(fd, el, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("open %s (not a directory, or a link): %w", el, mapErrno(err))
		}
		fd = next
	}
	return fd, nil
}

// writeFileAt replaces the file name in directory dir with data, owned by uid:gid with mode perm: a new
// file written in full, then renamed over the old, never through a link.
func writeFileAt(dir int, name string, data []byte, perm uint32, uid, gid int) error {
	tmp := fmt.Sprintf(".%s.%d.tmp", name, time.Now().UnixNano())
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", name, mapErrno(err))
	}
	f := os.NewFile(uintptr(fd), tmp)
	err = func() error {
		if os.Geteuid() == 0 {
			if err := f.Chown(uid, gid); err != nil {
				return err
			}
		}
		if err := f.Chmod(os.FileMode(perm)); err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			return err
		}
		return f.Sync()
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dir, tmp, dir, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dir, tmp, 0)
		return fmt.Errorf("write %s: %w", name, mapErrno(err))
	}
	return nil
}

// runIdentityHooks runs the template's identity hooks (proto.IdentityHooks) one after the other, each
// as root with the identity file's path as its argument, within IdentityHookTimeout in all. A hook
// directory or file that root does not own, or that others may write, is skipped: it is not the
// template's. Failures are logged; the sandbox goes on.
func (s *server) runIdentityHooks(ctx context.Context) {
	dir := filepath.Join(s.identityRoot(), proto.IdentityHooks)
	hooks, err := identityHooks(dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("identity hooks not run", "dir", proto.IdentityHooks, "err", err)
		}
		return
	}
	ctx, cancel := context.WithTimeout(ctx, IdentityHookTimeout)
	defer cancel()
	for _, h := range hooks {
		st, err := s.runQuiet(ctx, []string{h, filepath.Join(s.identityRoot(), proto.IdentityFile)})
		if err != nil {
			s.log.Warn("identity hook", "hook", h, "err", err)
			if ctx.Err() != nil {
				return
			}
			continue
		}
		if st.ExitCode != 0 {
			s.log.Warn("identity hook failed", "hook", h, "exit_code", st.ExitCode, "signal", st.Signal)
		}
	}
}

// identityHooks lists the hooks in dir, in name order: the regular files, executable, owned by root
// and writable by no one else, of a directory owned by root and writable by no one else.
func identityHooks(dir string) ([]string, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() || !rootOnly(fi) {
		return nil, fmt.Errorf("%s is not a directory only root may write: %w", dir, errdefs.ErrFailedPrecondition)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 || !rootOnly(fi) || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		out = append(out, p)
	}
	slices.Sort(out)
	return out, nil
}

// rootOnly reports whether fi is owned by root and writable by no one else.
func rootOnly(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid == 0 && fi.Mode().Perm()&0o022 == 0
}

// runQuiet runs argv as root with stdin and output discarded, until it exits or ctx ends (then its
// process group is killed).
func (s *server) runQuiet(ctx context.Context, argv []string) (proto.ExitStatus, error) {
	sp, err := s.spawn(spawnSpec{argv: argv, user: "root"})
	if err != nil {
		return proto.ExitStatus{}, err
	}
	var wg sync.WaitGroup
	for _, f := range sp.outs {
		wg.Add(1)
		go func() { // owner: runQuiet; ends at EOF or when f is closed below
			defer wg.Done()
			_, _ = io.Copy(io.Discard, f)
		}()
	}
	select {
	case <-sp.child.done:
	case <-ctx.Done():
		_ = s.reaper.signal(sp.child, -sp.child.pid, killSignal)
		<-sp.child.done
	}
	// Descendants that keep the output open do not hold the daemon up.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }() // owner: runQuiet; ends once the copies end
	select {
	case <-done:
	case <-time.After(s.cfg.DrainTimeout):
	}
	sp.closeAll()
	<-done
	st := exitStatus(sp.child.status)
	if ctx.Err() != nil {
		return st, fmt.Errorf("%s: %w", argv[0], ctx.Err())
	}
	return st, nil
}
