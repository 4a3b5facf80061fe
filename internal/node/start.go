package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodecontract"
)

// A template may have a start command: a process every sandbox of it has running when the sandbox is
// handed over (E2B's start-command templates). The node makes it so the fast way where it can: it keeps
// a start snapshot of the template (a checkpoint of a sandbox of the image with the command started and
// ready, DATA/starts/KEY) and restores each new sandbox from it, taking the new sandbox's environment
// (proto.ControlEnv) and interception CA. Where it has none, or the runtime cannot restore, it boots the
// sandbox, starts the command and waits until the ready check passes: the same outcome, slower.

// startKeyRE is what a start snapshot's key is.
var startKeyRE = regexp.MustCompile(`^[0-9a-f]{64}-[0-9a-f]{16}$`)

// CheckStartKey checks a start snapshot's key.
func CheckStartKey(key string) error {
	if !startKeyRE.MatchString(key) {
		return fmt.Errorf("start snapshot key %q: want <64 hex>-<16 hex>: %w", key, errdefs.ErrInvalidArgument)
	}
	return nil
}

// starts are the node's start snapshots: restores read them (shared), saves and removals write (alone).
type starts struct {
	dir string
	mu  sync.RWMutex
}

// open returns the directory of start snapshot key and the function that ends its use, if the node
// holds it.
func (s *starts) open(key string) (string, func(), bool) {
	if CheckStartKey(key) != nil {
		return "", nil, false
	}
	s.mu.RLock()
	dir := filepath.Join(s.dir, key)
	if _, err := os.Stat(dir); err != nil {
		s.mu.RUnlock()
		return "", nil, false
	}
	return dir, s.mu.RUnlock, true
}

// HasStart reports whether the node holds start snapshot key.
func (n *Local) HasStart(key string) bool {
	_, release, ok := n.starts.open(key)
	if ok {
		release()
	}
	return ok
}

// SaveStart saves sandbox id, a sandbox of a template with its start command ready, as the template's
// start snapshot key. The sandbox is left stopped for the caller to destroy.
func (n *Local) SaveStart(ctx context.Context, id, key string) error {
	if err := CheckStartKey(key); err != nil {
		return err
	}
	if err := os.MkdirAll(n.starts.dir, 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(n.starts.dir, ".tmp-"+id)
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	if err := n.checkpoint(ctx, id, tmp, false, false, nil); err != nil {
		return fmt.Errorf("start snapshot of sandbox %s: %w", id, err)
	}
	n.starts.mu.Lock()
	defer n.starts.mu.Unlock()
	final := filepath.Join(n.starts.dir, key)
	if err := os.RemoveAll(final); err != nil { // an earlier one of the same key: this one is as good
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	n.dropWarm(func(k warmKind) bool { return k.start == key }) // restored from the one replaced
	return syncDir(n.starts.dir)
}

// removeStarts removes the start snapshots of image digest ("sha256:…"), or, with digest "", the
// half-written ones a crash left.
func (s *starts) remove(digest string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	pattern := ".tmp-*"
	if digest != "" {
		pattern = strings.TrimPrefix(digest, "sha256:") + "-*"
	}
	dirs, _ := filepath.Glob(filepath.Join(s.dir, pattern))
	var errs []error
	for _, d := range dirs {
		errs = append(errs, os.RemoveAll(d))
	}
	return errors.Join(errs...)
}

// runStart starts st.Cmd in sandbox id and waits until it is ready (see nodecontract.Start).
func (n *Local) runStart(ctx context.Context, id string, st *nodecontract.Start) error {
	cl, err := n.Link(ctx, id)
	if err != nil {
		return err
	}
	timeout := st.Timeout
	if timeout <= 0 {
		timeout = nodecontract.DefaultStartTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p, err := cl.Start(ctx, proto.StartRequest{Argv: st.Cmd, User: st.User, Cwd: st.Cwd}, link.ProcessOptions{})
	if err != nil {
		return fmt.Errorf("start command: %w", err)
	}
	pid := p.ID()
	p.Detach()
	exited := func() (proto.ProcessInfo, bool) {
		ps, err := cl.ListProcesses(ctx)
		if err != nil {
			return proto.ProcessInfo{}, false
		}
		for _, pi := range ps {
			if pi.ID == pid && pi.State == proto.StateExited {
				return pi, true
			}
		}
		return proto.ProcessInfo{}, false
	}
	begun := time.Now()
	for tick := 10 * time.Millisecond; ; tick = min(tick*2, 200*time.Millisecond) {
		if pi, gone := exited(); gone {
			return fmt.Errorf("the start command %q exited (%s) before the sandbox was ready: %w", strings.Join(st.Cmd, " "), exitText(pi), errdefs.ErrFailedPrecondition)
		}
		if len(st.ReadyCmd) == 0 {
			if time.Since(begun) >= time.Second {
				return nil
			}
		} else if res, err := cl.Exec(ctx, proto.ExecRequest{Argv: st.ReadyCmd, User: st.User, Cwd: st.Cwd, MaxOutput: 4096}); err == nil && res.ExitCode == 0 && res.Signal == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the start command %q: not ready after %s: %w", strings.Join(st.Cmd, " "), timeout, errdefs.ErrDeadlineExceeded)
		case <-time.After(tick):
		}
	}
}

// exitText says how a process ended.
func exitText(pi proto.ProcessInfo) string {
	if pi.Exit == nil {
		return "exited"
	}
	if pi.Exit.Signal != "" {
		return "signal " + pi.Exit.Signal
	}
	return fmt.Sprintf("exit code %d", pi.Exit.ExitCode)
}
