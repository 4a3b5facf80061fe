// Package keeper is a node's fence keeper: a small process apart from the node (airlock node keeper)
// that stops every process of the node's sandboxes once the node's right to run them lapses, whether
// the node process still lives or was killed.
//
// The node renews a lease with the keeper every second over a unix socket: "run until D from now", D
// being what is left of the node's own fence (nodeapi.FenceAfter after the last heartbeat a control plane
// took) plus a little slack, so that a node still alive stops its sandboxes itself first. Once the lease
// lapses, the keeper freezes the cgroups that hold the sandboxes' processes and kills every process in
// them, and keeps doing so on every tick until the lease is renewed. A node that dies leaves the keeper
// running out the last lease; a node started again in time takes the keeper over and renews it, so a
// quick restart keeps the sandboxes. The keeper exits when told the node released it (a clean shutdown,
// after the node destroyed its sandboxes), or when the lease lapsed, no node holds it and nothing is
// left to stop.
package keeper

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config configures Run.
type Config struct {
	// Socket is the unix socket the keeper listens at (the node's DATA/node/keeper.sock). Required.
	Socket string
	// Cgroups are the cgroup parents, relative to each hierarchy's root (as an OCI spec's cgroupsPath),
	// under which every process of the node's sandboxes runs. Required.
	Cgroups []string
	// CgroupRoot is where the cgroup hierarchies are mounted. Empty: /sys/fs/cgroup.
	CgroupRoot string
	// Lease is how long the keeper lets the sandboxes run before the node first renews. Zero: 10 s.
	Lease time.Duration
	// Tick is how often the lease is checked. Zero: 200 ms.
	Tick time.Duration
	// Logger receives what the keeper does. Nil: slog.Default().
	Logger *slog.Logger
}

// The messages a node sends, one per line.
const (
	msgRenew   = "renew"   // "renew <milliseconds>": run until that long from now
	msgRelease = "release" // the node destroyed its sandboxes and stops: exit
	ackRelease = "released"
)

// MaxLease bounds a renewal: a node cannot ask for more than this at a time.
const MaxLease = time.Minute

// Run runs the keeper until it is released, has nothing left to guard, or ctx ends (then it returns
// ctx's error without fencing: a keeper stopped by its operator stops guarding).
func Run(ctx context.Context, cfg Config) error {
	if cfg.Socket == "" || len(cfg.Cgroups) == 0 {
		return errors.New("keeper: Socket and Cgroups are required")
	}
	for _, c := range cfg.Cgroups {
		if err := checkCgroup(c); err != nil {
			return err
		}
	}
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = "/sys/fs/cgroup"
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 10 * time.Second
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 200 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger
	ln, err := listen(cfg.Socket)
	if err != nil {
		return err
	}
	defer ln.Close()
	// The OOM killer takes the sandboxes before their keeper (best effort: needs root).
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0)

	k := &state{deadline: time.Now().Add(cfg.Lease), released: make(chan struct{})}
	go k.serve(ln, log) // owner: Run; ends when ln closes
	log.Info("keeper is up", "socket", cfg.Socket, "cgroups", cfg.Cgroups, "lease", cfg.Lease)
	t := time.NewTicker(cfg.Tick)
	defer t.Stop()
	fenced := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-k.released:
			log.Info("released by the node")
			return nil
		case <-t.C:
		}
		deadline, held := k.lease()
		if time.Now().Before(deadline) {
			if fenced {
				log.Info("lease renewed: sandboxes may run again")
				fenced = false
			}
			continue
		}
		n, left, err := Fence(cfg.CgroupRoot, cfg.Cgroups)
		if n > 0 || err != nil || !fenced {
			log.Warn("lease lapsed: stopped the node's sandboxes", "killed", n, "left", left, "node_attached", held, "err", err)
		}
		fenced = true
		if !held && left == 0 && err == nil {
			log.Info("lease lapsed, no node attached, nothing left to stop: exiting")
			return nil
		}
	}
}

// checkCgroup refuses a cgroup parent that is not a clean absolute path below the root.
func checkCgroup(c string) error {
	if !strings.HasPrefix(c, "/") || c == "/" || strings.Contains(c, "..") || strings.ContainsRune(c, 0) {
		return fmt.Errorf("keeper: cgroup parent %q: want an absolute path below the root", c)
	}
	return nil
}

// listen listens at path, taking it over from a keeper that is gone (its socket file stays behind) but
// not from one that answers.
func listen(path string) (net.Listener, error) {
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("keeper: another keeper answers at %s", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("keeper: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("keeper: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("keeper: %w", err)
	}
	return ln, nil
}

// state is the lease; its fields are guarded by mu.
type state struct {
	mu       sync.Mutex
	deadline time.Time
	// conn is the node attached now (a newer one replaces it); nil: none.
	conn     net.Conn
	released chan struct{}
	once     sync.Once
}

func (k *state) lease() (time.Time, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.deadline, k.conn != nil
}

// serve takes the nodes' connections, one at a time: a new one replaces the one before (a node started
// again takes its keeper over).
func (k *state) serve(ln net.Listener, log *slog.Logger) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		k.mu.Lock()
		if k.conn != nil {
			k.conn.Close()
		}
		k.conn = c
		k.mu.Unlock()
		log.Info("node attached")
		go k.read(c, log) // owner: serve; ends when c closes
	}
}

// read applies c's messages until it closes or says something else than the protocol.
func (k *state) read(c net.Conn, log *slog.Logger) {
	defer func() {
		k.mu.Lock()
		if k.conn == c {
			k.conn = nil
			log.Warn("node detached: its lease runs out", "at", k.deadline.Format(time.RFC3339Nano))
		}
		k.mu.Unlock()
		c.Close()
	}()
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 256), 256)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == msgRenew:
			ms, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || ms < 0 || time.Duration(ms)*time.Millisecond > MaxLease {
				log.Error("bad renewal: detaching the node", "msg", sc.Text())
				return
			}
			k.mu.Lock()
			if k.conn == c {
				k.deadline = time.Now().Add(time.Duration(ms) * time.Millisecond)
			}
			k.mu.Unlock()
		case len(f) == 1 && f[0] == msgRelease:
			_, _ = c.Write([]byte(ackRelease + "\n"))
			k.once.Do(func() { close(k.released) })
			return
		default:
			log.Error("bad message: detaching the node", "msg", sc.Text())
			return
		}
	}
}
