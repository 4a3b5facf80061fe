package flowlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// keepSuffix names the file beside a sandbox's flows that holds how long they are kept (SetRetention),
// in seconds, so that a later run of the node still knows it for a sandbox gone since.
const keepSuffix = ".keep"

// SetDefaultRetention sets how long the flows of sandboxes without a retention of their own are kept;
// zero (the default): forever.
func (l *Log) SetDefaultRetention(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keep = max(d, 0)
}

// SetRetention keeps sandbox id's flows for d (zero: the default, SetDefaultRetention): Sweep deletes
// each of its files once the file's newest flow is older than that. It is remembered beside the files.
func (l *Log) SetRetention(id string, d time.Duration) error {
	path, err := l.Path(id)
	if err != nil {
		return err
	}
	keep := path + keepSuffix
	if d <= 0 {
		if err := os.Remove(keep); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("flow log retention of %s: %w", id, err)
		}
		return nil
	}
	tmp := keep + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(int64(d/time.Second), 10)), 0o600); err != nil {
		return fmt.Errorf("flow log retention of %s: %w", id, err)
	}
	if err := os.Rename(tmp, keep); err != nil {
		return fmt.Errorf("flow log retention of %s: %w", id, err)
	}
	return nil
}

// retentionOf returns how long sandbox id's flows are kept (zero: forever), from the file beside them.
func (l *Log) retentionOf(id string, def time.Duration) time.Duration {
	path, err := l.Path(id)
	if err != nil {
		return 0
	}
	b, err := os.ReadFile(path + keepSuffix)
	if err != nil {
		return def
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 {
		return def
	}
	return time.Duration(n) * time.Second
}

// Sweep deletes the flow files (a sandbox's current one and its rotated one, each on its own) whose
// newest flow is older than their sandbox's retention at now, and the retention's file once both are
// gone. It returns how many flow files it deleted. A current file open for appending is closed first:
// the sandbox's next flow starts a new one.
func (l *Log) Sweep(now time.Time) (int, error) {
	l.mu.Lock()
	def := l.keep
	l.mu.Unlock()
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return 0, fmt.Errorf("sweep flow logs: %w", err)
	}
	n := 0
	keeps := map[string]bool{} // sandboxes with a retention's file, by ID
	left := map[string]bool{}  // sandboxes with a flow file kept, by ID
	for _, ent := range ents {
		name := ent.Name()
		if id, ok := strings.CutSuffix(name, ".jsonl"+keepSuffix); ok {
			keeps[id] = true
			continue
		}
		id, ok := strings.CutSuffix(name, ".jsonl")
		if !ok {
			id, ok = strings.CutSuffix(name, ".jsonl.1")
		}
		if !ok || !ent.Type().IsRegular() {
			continue
		}
		keep := l.retentionOf(id, def)
		info, err := ent.Info()
		if err != nil || keep <= 0 || !info.ModTime().Before(now.Add(-keep)) {
			left[id] = true
			continue
		}
		if l.removeFlows(id, filepath.Join(l.dir, name), now.Add(-keep)) {
			n++
		} else {
			left[id] = true
		}
	}
	for id := range keeps {
		if !left[id] {
			if path, err := l.Path(id); err == nil {
				_ = os.Remove(path + keepSuffix)
			}
		}
	}
	return n, nil
}

// removeFlows deletes one of sandbox id's flow files if it still holds no flow newer than cutoff,
// closing it first if it is open for appending. It reports whether the file is gone.
func (l *Log) removeFlows(id, path string, cutoff time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if fi, err := os.Lstat(path); err != nil || !fi.ModTime().Before(cutoff) {
		return err != nil // gone already, or written to since the sweep looked
	}
	if f := l.open[id]; f != nil && !strings.HasSuffix(path, ".1") {
		f.f.Close()
		delete(l.open, id)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		l.log.Warn("sweep flow log", "sandbox", id, "err", err)
		return false
	}
	return true
}
