package sandboxdir

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime"
)

// Stats reads the resource use of a container driver's sandbox (see runtime.StatsReader): CPU and
// memory from its cgroup (a path under each v1 hierarchy), disk from the host's mount of its disk image
// at disk (MakeDisk). It reads host-owned files only (the cgroup's, written by the kernel) and stats
// the mount point without following a link; nothing inside the sandbox's file system is opened. A
// cgroup that is not there is ErrNotFound.
func Stats(cgroup, disk string) (runtime.Stats, error) {
	st, err := CgroupStats(cgroup)
	if err != nil {
		return st, err
	}
	if st.DiskUsed, st.DiskTotal, err = DiskUsage(disk); err != nil {
		return st, err
	}
	return st, nil
}

// CgroupStats reads the CPU and memory readings of Stats from cgroup (a path under each v1 hierarchy),
// and the memory limit; the disk's are left zero.
func CgroupStats(cgroup string) (runtime.Stats, error) {
	var st runtime.Stats
	var err error
	if st.CPUTime, err = CPUTime(cgroup); err != nil {
		return st, err
	}
	mem := filepath.Join("/sys/fs/cgroup/memory", cgroup)
	usage, err := readCgroupInt(mem, "memory.usage_in_bytes")
	if err != nil {
		return st, err
	}
	if st.MemoryLimit, err = readCgroupInt(mem, "memory.limit_in_bytes"); err != nil {
		return st, err
	}
	b, err := readCgroupFile(mem, "memory.stat")
	if err != nil {
		return st, err
	}
	ms, err := ParseMemoryStat(b)
	if err != nil {
		return st, fmt.Errorf("%s/memory.stat: %w", mem, err)
	}
	st.MemoryUsed = max(usage-ms["total_inactive_file"], 0)
	st.MemoryCache = max(ms["total_cache"]-ms["total_shmem"], 0)
	return st, nil
}

// maxCgroupFile bounds what is read of one cgroup file (memory.stat is about 1.5 KiB).
const maxCgroupFile = 64 << 10

// readCgroupFile reads the file name of the cgroup directory dir; a cgroup that is gone is ErrNotFound.
func readCgroupFile(dir, name string) ([]byte, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("cgroup %s: %w", dir, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCgroupFile))
	if err != nil {
		return nil, fmt.Errorf("read %s/%s: %w", dir, name, err)
	}
	return b, nil
}

// readCgroupInt reads a cgroup file that holds one non-negative integer.
func readCgroupInt(dir, name string) (int64, error) {
	b, err := readCgroupFile(dir, name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s/%s holds %q, not a count", dir, name, truncate(b, 32))
	}
	return n, nil
}

// ParseMemoryStat reads a v1 memory cgroup's memory.stat: lines of a name and a non-negative count.
// Malformed lines are an error; a name given twice keeps its last count.
func ParseMemoryStat(b []byte) (map[string]int64, error) {
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("malformed line %q", truncate([]byte(line), 64))
		}
		n, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("malformed count in %q", truncate([]byte(line), 64))
		}
		out[f[0]] = int64(min(n, 1<<63-1))
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// DiskUsage reports the bytes used and the size of the file system mounted at dir, a sandbox's disk
// (MakeDisk). dir is opened without following a link, and must be a mount point (of another device
// than its parent's): a disk already unmounted, or a link put in its place, is ErrNotFound rather than
// ImageUsage reports the disk use of a disk image at path (a VM's, whose file system the host never
// reads): its allocated blocks and its size. An image that is not there is ErrNotFound.
func ImageUsage(path string) (used, total int64, err error) {
	var s unix.Stat_t
	if err := unix.Lstat(path, &s); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, errdefs.ErrNotFound)
	}
	return s.Blocks * 512, s.Size, nil
}

// the node's own file system counted as the sandbox's.
func DiskUsage(dir string) (used, total int64, err error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return 0, 0, fmt.Errorf("disk %s: %w", dir, errdefs.ErrNotFound)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("open disk %s: %w", dir, err)
	}
	defer unix.Close(fd)
	var st, parent unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, 0, fmt.Errorf("stat disk %s: %w", dir, err)
	}
	if err := unix.Fstatat(fd, "..", &parent, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, 0, fmt.Errorf("stat the parent of disk %s: %w", dir, err)
	}
	if st.Dev == parent.Dev {
		return 0, 0, fmt.Errorf("disk %s is not mounted: %w", dir, errdefs.ErrNotFound)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return 0, 0, fmt.Errorf("statfs disk %s: %w", dir, err)
	}
	bsize := int64(fs.Bsize)
	return int64(fs.Blocks-fs.Bfree) * bsize, int64(fs.Blocks) * bsize, nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
