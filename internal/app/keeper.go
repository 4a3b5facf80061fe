package app

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/airlockrun/airlock/internal/keeper"
	"github.com/airlockrun/airlock/internal/node"
	"github.com/airlockrun/airlock/internal/nodeapi"
)

// KeeperSlack is how much longer than the node's own fence (nodeapi.FenceAfter after the last heartbeat
// a control plane took) the keeper lets the sandboxes run: a node still alive stops them itself first,
// and reports them. The keeper's fence is done well before a control plane gives the node up
// (controlplane.NodeDownAfter = FenceAfter + 1 heartbeat); docs/ARCHITECTURE.md has the argument.
const KeeperSlack = time.Second

// KeeperSocket is the keeper's socket in a node's data directory.
const KeeperSocket = "keeper.sock"

// nodeKeeper is a node's hold on its fence keeper; its methods do nothing without one.
type nodeKeeper struct {
	start func() error
	sock  string
	log   *slog.Logger

	mu sync.Mutex
	// c is the keeper attached (nil: none now); attaching is set while a goroutine attaches one.
	c         *keeper.Client
	attaching bool
	// left is the lease last asked for, and at when, for an attach to renew at once.
	left time.Duration
	at   time.Time
}

// startKeeper attaches to the node's keeper, starting one if none runs (a node started again takes
// over the keeper of its previous run, and with it that run's sandboxes' lease).
func startKeeper(ctx context.Context, cfg NodeConfig, dataDir string, nd *node.Local, log *slog.Logger) *nodeKeeper {
	parents, unconfined := nd.CgroupParents()
	if len(unconfined) > 0 {
		log.Warn("runtimes whose sandboxes the keeper cannot stop if this process dies", "runtimes", unconfined)
	}
	k := &nodeKeeper{sock: filepath.Join(dataDir, KeeperSocket), log: log}
	if cfg.KeeperBinary == "" || len(parents) == 0 {
		log.Warn("no fence keeper: if this process dies, its sandboxes run on until it starts again")
		return k
	}
	k.start = func() error {
		args := []string{"node", "keeper", "--socket", k.sock}
		for _, p := range parents {
			args = append(args, "--cgroup", p)
		}
		cmd := exec.Command(cfg.KeeperBinary, args...)
		lf, err := os.OpenFile(filepath.Join(dataDir, "keeper.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		defer lf.Close()
		cmd.Stdout, cmd.Stderr = lf, lf
		// A session of its own: a signal to the node's process group (Ctrl-C) does not reach it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			return err
		}
		go func() { _ = cmd.Wait() }() // owner: the keeper's life; reaps it if it ends before this process
		log.Info("started the fence keeper", "pid", cmd.Process.Pid, "cgroups", parents)
		return nil
	}
	k.left, k.at = nodeapi.FenceAfter+KeeperSlack, time.Now()
	k.attach(ctx)
	return k
}

// attach attaches to the keeper (starting one if none answers) and renews the lease last asked for.
func (k *nodeKeeper) attach(ctx context.Context) {
	actx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c, err := keeper.Attach(actx, k.sock, k.start)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.attaching = false
	if err != nil {
		k.log.Error("attach the fence keeper", "err", err)
		return
	}
	k.c = c
	if !k.at.IsZero() {
		_ = c.Renew(k.left - time.Since(k.at))
	}
}

// renew renews the lease for left. It does not block on a keeper gone: one is attached (or started)
// again in the background, and gets the lease then.
func (k *nodeKeeper) renew(ctx context.Context, left time.Duration) {
	if k.start == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.left, k.at = left, time.Now()
	if k.c != nil {
		err := k.c.Renew(left)
		if err == nil {
			return
		}
		k.log.Warn("the fence keeper went away: starting it again", "err", err)
		k.c.Close()
		k.c = nil
	}
	if !k.attaching {
		k.attaching = true
		go k.attach(ctx) // owner: the node; ends within 15 s
	}
}

// release lets the keeper go once the node destroyed its sandboxes.
func (k *nodeKeeper) release(ctx context.Context) {
	k.mu.Lock()
	c := k.c
	k.mu.Unlock()
	if c == nil {
		return
	}
	if err := c.Release(ctx); err != nil {
		k.log.Warn("release the fence keeper", "err", err)
	}
}

func (k *nodeKeeper) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.c != nil {
		k.c.Close()
	}
}
