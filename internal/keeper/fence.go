package keeper

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Fence stops every process in the cgroups under parents (relative to each hierarchy mounted under
// root), and reports how many it killed and how many were left when it gave up. Where a freezer
// hierarchy holds the parent, the subtree is frozen first, so that nothing forks or runs between the
// listing and the kill; a cgroup v2 parent with cgroup.kill is killed by the kernel at once. It tries a
// few rounds, for processes that joined while it worked.
func Fence(root string, parents []string) (killed, left int, err error) {
	var errs []error
	for round := 0; round < 5; round++ {
		var dirs []string
		for _, p := range parents {
			dirs = append(dirs, parentDirs(root, p)...)
		}
		frozen := freeze(dirs)
		pids := map[int]bool{}
		for _, d := range dirs {
			if round == 0 {
				// cgroup v2: the kernel kills the whole subtree, racing nothing.
				if werr := write(filepath.Join(d, "cgroup.kill"), "1"); werr == nil {
					continue
				}
			}
			for _, pid := range procs(d) {
				pids[pid] = true
			}
		}
		for pid := range pids {
			if kerr := syscall.Kill(pid, syscall.SIGKILL); kerr == nil {
				killed++
			} else if !errors.Is(kerr, syscall.ESRCH) {
				errs = append(errs, kerr)
			}
		}
		thaw(frozen) // a frozen process dies of SIGKILL only once thawed
		if len(pids) == 0 {
			return killed, 0, errors.Join(errs...)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range parents {
		for _, d := range parentDirs(root, p) {
			left += len(procs(d))
		}
	}
	return killed, left, errors.Join(errs...)
}

// parentDirs returns parent's directory in every hierarchy under root that has it (cgroup v1: one per
// controller; v2: root itself is the hierarchy).
func parentDirs(root, parent string) []string {
	var out []string
	if fi, err := os.Stat(filepath.Join(root, parent)); err == nil && fi.IsDir() {
		out = append(out, filepath.Join(root, parent))
	}
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		d := filepath.Join(root, e.Name(), parent)
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

// procs lists the processes in dir's cgroup and every cgroup below it.
func procs(dir string) []int {
	var out []int
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, rerr := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if rerr != nil {
			return nil
		}
		for _, f := range bytes.Fields(b) {
			if pid, perr := strconv.Atoi(string(f)); perr == nil && pid > 0 {
				out = append(out, pid)
			}
		}
		return nil
	})
	return out
}

// freeze freezes the cgroup v1 freezer directories among dirs (a v1 freezer freezes its descendants
// too) and waits briefly until they are frozen; it returns those it froze.
func freeze(dirs []string) []string {
	var frozen []string
	for _, d := range dirs {
		st := filepath.Join(d, "freezer.state")
		if err := write(st, "FROZEN"); err == nil {
			frozen = append(frozen, d)
		}
	}
	deadline := time.Now().Add(time.Second)
	for _, d := range frozen {
		for time.Now().Before(deadline) {
			b, err := os.ReadFile(filepath.Join(d, "freezer.state"))
			if err != nil || string(bytes.TrimSpace(b)) == "FROZEN" {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return frozen
}

func thaw(dirs []string) {
	for _, d := range dirs {
		_ = write(filepath.Join(d, "freezer.state"), "THAWED")
	}
}

// write writes val to the cgroup file path, which must exist (a cgroup's files are the kernel's: this
// never creates one).
func write(path, val string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(val)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
