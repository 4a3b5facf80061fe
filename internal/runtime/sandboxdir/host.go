package sandboxdir

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Helpers of the container drivers' host side: their sandboxes' processes, cgroups (v1) and logs.

// WaitPID blocks until process pid (not necessarily the caller's child) exits, or ctx ends.
func WaitPID(ctx context.Context, pid int) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	for {
		// Poll with a timeout so that a cancelled ctx is noticed without another fd to wake us.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 200)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll pidfd: %w", err)
		}
		if n > 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// ReadPID reads the PID a runtime wrote into the file at path.
func ReadPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s holds %q, not a PID", path, b)
	}
	return pid, nil
}

// Tail returns the end of a log file, for error messages.
func Tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// StopReason says why the sandbox of cgroup (a path under each v1 hierarchy) stopped, from what its
// memory cgroup recorded.
func StopReason(cgroup string) string {
	mem := filepath.Join("/sys/fs/cgroup/memory", cgroup)
	if b, err := os.ReadFile(filepath.Join(mem, "memory.oom_control")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" && f[1] != "0" {
				limit := ""
				if lb, err := os.ReadFile(filepath.Join(mem, "memory.limit_in_bytes")); err == nil {
					if n, err := strconv.ParseInt(strings.TrimSpace(string(lb)), 10, 64); err == nil {
						limit = fmt.Sprintf(" (limit %d MiB)", n>>20)
					}
				}
				return "out of memory" + limit
			}
		}
	}
	return "sandbox exited"
}

// CPUTime reads the CPU time of cgroup (cpuacct.usage); a cgroup that is not there is ErrNotFound.
func CPUTime(cgroup string) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuacct", cgroup, "cpuacct.usage"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("cgroup %s: %w", cgroup, errdefs.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("cpu time of %s: %w", cgroup, err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cpu time of %s: %q: %w", cgroup, b, err)
	}
	return time.Duration(ns), nil
}

// InCgroup reports whether process pid is in cgroup (a path under each v1 hierarchy).
func InCgroup(cgroup string, pid int) bool {
	b, err := os.ReadFile(cgroupProcs(cgroup))
	if err != nil {
		return false
	}
	for _, f := range strings.Fields(string(b)) {
		if f == strconv.Itoa(pid) {
			return true
		}
	}
	return false
}

// KillCgroup kills every process of cgroup (a path under each v1 hierarchy), the sandbox id's, again
// until none is left, for up to ten seconds.
func KillCgroup(cgroup, id string) error {
	procs := cgroupProcs(cgroup)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(procs)
		if err != nil || len(strings.Fields(string(b))) == 0 {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes of %s do not die", id)
		}
	}
}

// cgroupProcs is the file that lists the processes of cgroup.
func cgroupProcs(cgroup string) string {
	return filepath.Join("/sys/fs/cgroup/pids", cgroup, "cgroup.procs")
}

// RemoveCgroups removes cgroup from every hierarchy under /sys/fs/cgroup that has it.
func RemoveCgroups(cgroup string) []error {
	var errs []error
	ctrls, _ := os.ReadDir("/sys/fs/cgroup")
	for _, c := range ctrls {
		p := filepath.Join("/sys/fs/cgroup", c.Name(), cgroup)
		if err := unix.Rmdir(p); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", p, err))
		}
	}
	return errs
}

// SyncTree makes the files and directories under dir (and dir) durable, so that an image a caller was
// told is saved survives a crash of the machine, not only of the server.
func SyncTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	})
}

// CopyFile copies the regular file from to the new file to (0600).
func CopyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
