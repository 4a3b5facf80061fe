package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/app"
)

// Footprint is what sandboxes leave on a host, counted so that a test can compare before and after.
type Footprint struct {
	// Processes are host processes of gVisor (runsc, its sentry and gofer) of the instance, by PID and
	// command line.
	Processes []string
	// Mounts are the host's mount points under the data directory (overlays, disks, netns pins).
	Mounts []string
	// Cgroups are the cgroup directories under the sandboxes' parent, in every controller.
	Cgroups []string
	// NetNS are network namespace files under the data directory.
	NetNS []string
	// Links are the instance's host-side veths.
	Links []string
	// LoopDevices are loop devices bound to a file.
	LoopDevices []string
	// Files are the entries of the runtime's per-sandbox directories.
	Files []string
}

// TakeFootprint counts what sandboxes of the instance using dataDir may leave on the host. It looks only
// at what is that instance's: processes running from its data directory, mounts and loop devices under
// it, its cgroups, its veths (other Airlock instances on the host do not disturb it).
func TakeFootprint(dataDir string) (Footprint, error) {
	var f Footprint
	tag := app.InstanceTag(dataDir)
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		cmd := strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
		if strings.Contains(cmd, "runsc") && strings.Contains(cmd, dataDir) {
			f.Processes = append(f.Processes, filepath.Base(filepath.Dir(p))+" "+cmd)
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return f, err
	}
	for _, line := range strings.Split(string(mi), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 10 {
			continue
		}
		mp := fields[4]
		var fstype string
		for i, x := range fields {
			if x == "-" && i+1 < len(fields) {
				fstype = fields[i+1]
				break
			}
		}
		if strings.HasPrefix(mp, dataDir) {
			f.Mounts = append(f.Mounts, mp+" "+fstype)
		}
	}
	cg, _ := filepath.Glob("/sys/fs/cgroup/*/airlock/" + tag + "/*")
	for _, c := range cg {
		if fi, err := os.Stat(c); err == nil && fi.IsDir() {
			f.Cgroups = append(f.Cgroups, c)
		}
	}
	ns, _ := filepath.Glob(filepath.Join(dataDir, "node", "netns", "*"))
	f.NetNS = ns
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		if strings.HasPrefix(l.Name(), "al"+tag) {
			f.Links = append(f.Links, l.Name())
		}
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, l := range loops {
		b, _ := os.ReadFile(l)
		if backing := strings.TrimSpace(string(b)); strings.HasPrefix(backing, dataDir) {
			f.LoopDevices = append(f.LoopDevices, backing)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dataDir, "runtime", "sandboxes", "*"))
	f.Files = files
	for _, s := range [][]string{f.Processes, f.Mounts, f.Cgroups, f.NetNS, f.Links, f.LoopDevices, f.Files} {
		sort.Strings(s)
	}
	return f, nil
}

// Diff describes how after differs from before ("" when it does not).
func (before Footprint) Diff(after Footprint) string {
	d := cmp.Diff(before, after)
	if d == "" {
		return ""
	}
	return fmt.Sprintf("host footprint changed (-before +after):\n%s", d)
}

// RunscSandboxes returns the runsc sandbox processes (runsc-sandbox: a sandbox's kernel) of the
// instance using dataDir, by sandbox ID.
func RunscSandboxes(dataDir string) map[string]int {
	out := map[string]int{}
	root := "--root=" + filepath.Join(dataDir, "runtime", "runsc")
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) < 2 || args[0] != "runsc-sandbox" || !slices.Contains(args, root) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			out[args[len(args)-1]] = pid
		}
	}
	return out
}
