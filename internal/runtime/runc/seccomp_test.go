//go:build linux && amd64

package runc

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// These tests check names against x86_64's system call table through x/sys/unix's SYS_* constants, which
// exist on amd64 only; the profile is for x86_64 hosts anyway.

// verdict reports what p does to system call name called with args (missing ones are 0): "allow", or
// "errno N", from a rule that names the call and whose conditions all hold, else from the default action.
// An allow rule wins over an errno rule, though TestSeccompRuleShapes makes sure no call has both.
func verdict(p *specs.LinuxSeccomp, name string, args ...uint64) string {
	var a [6]uint64
	copy(a[:], args)
	got := ""
	for _, r := range p.Syscalls {
		if !slices.Contains(r.Names, name) || !allHold(r.Args, a) {
			continue
		}
		if r.Action == specs.ActAllow {
			return "allow"
		}
		got = action(r.Action, r.ErrnoRet)
	}
	if got != "" {
		return got
	}
	return action(p.DefaultAction, p.DefaultErrnoRet)
}

func action(a specs.LinuxSeccompAction, errno *uint) string {
	if a == specs.ActErrno && errno != nil {
		return fmt.Sprintf("errno %d", *errno)
	}
	return string(a)
}

// allHold reports whether every condition holds for args, as libseccomp compares them: all 64 bits.
func allHold(conds []specs.LinuxSeccompArg, args [6]uint64) bool {
	for _, c := range conds {
		v := args[c.Index]
		var ok bool
		switch c.Op {
		case specs.OpEqualTo:
			ok = v == c.Value
		case specs.OpNotEqual:
			ok = v != c.Value
		case specs.OpLessThan:
			ok = v < c.Value
		case specs.OpLessEqual:
			ok = v <= c.Value
		case specs.OpGreaterThan:
			ok = v > c.Value
		case specs.OpGreaterEqual:
			ok = v >= c.Value
		case specs.OpMaskedEqual:
			ok = v&c.Value == c.ValueTwo
		}
		if !ok {
			return false
		}
	}
	return true
}

// rulesFor returns the rules of p that name the system call name.
func rulesFor(p *specs.LinuxSeccomp, name string) []specs.LinuxSyscall {
	var rs []specs.LinuxSyscall
	for _, r := range p.Syscalls {
		if slices.Contains(r.Names, name) {
			rs = append(rs, r)
		}
	}
	return rs
}

const (
	allow = "allow"
	eperm = "errno 1"
)

func TestSeccompDefaults(t *testing.T) {
	p := Profile()
	if p.DefaultAction != specs.ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != uint(unix.EPERM) {
		t.Errorf("default = %s; want errno %d", action(p.DefaultAction, p.DefaultErrnoRet), unix.EPERM)
	}
	want := []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}
	if diff := cmp.Diff(want, p.Architectures); diff != "" {
		t.Errorf("architectures (-want +got):\n%s", diff)
	}
	// runc 1.1 refuses a profile with flags, and this one needs no notify agent.
	if len(p.Flags) != 0 || p.ListenerPath != "" || p.ListenerMetadata != "" {
		t.Errorf("flags %v, listener %q %q; want none", p.Flags, p.ListenerPath, p.ListenerMetadata)
	}
}

func TestSeccompJSON(t *testing.T) {
	p := Profile()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	if !json.Valid(b) {
		t.Fatalf("marshal gave invalid JSON: %s", b)
	}
	var back specs.LinuxSeccomp
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	if diff := cmp.Diff(p, &back); diff != "" {
		t.Errorf("profile changed through JSON (-before +after):\n%s", diff)
	}
	// The fields runc reads, spelled as the OCI runtime spec spells them.
	var raw struct {
		DefaultAction   string   `json:"defaultAction"`
		DefaultErrnoRet *uint    `json:"defaultErrnoRet"`
		Architectures   []string `json:"architectures"`
		Syscalls        []struct {
			Names    []string `json:"names"`
			Action   string   `json:"action"`
			ErrnoRet *uint    `json:"errnoRet"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	if raw.DefaultAction != "SCMP_ACT_ERRNO" || raw.DefaultErrnoRet == nil || *raw.DefaultErrnoRet != 1 {
		t.Errorf("JSON default = %q %v; want SCMP_ACT_ERRNO 1", raw.DefaultAction, raw.DefaultErrnoRet)
	}
	if want := []string{"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"}; !slices.Equal(raw.Architectures, want) {
		t.Errorf("JSON architectures = %q; want %q", raw.Architectures, want)
	}
	if len(raw.Syscalls) != len(p.Syscalls) {
		t.Errorf("JSON has %d rules; want %d", len(raw.Syscalls), len(p.Syscalls))
	}
}

// TestSeccompRuleShapes holds every rule to what runc 1.1 and libseccomp 2.5 take as meant.
func TestSeccompRuleShapes(t *testing.T) {
	p := Profile()
	actions := map[string]string{} // system call name → the action of its rules
	for i, r := range p.Syscalls {
		if len(r.Names) == 0 {
			t.Errorf("rule %d names no system call", i)
		}
		switch {
		case r.Action == specs.ActAllow && r.ErrnoRet == nil:
		case r.Action == specs.ActErrno && r.ErrnoRet != nil:
		default:
			t.Errorf("rule %d (%q): action %s; want allow, or errno with its number", i, r.Names, action(r.Action, r.ErrnoRet))
		}
		seen := map[uint]bool{}
		for _, c := range r.Args {
			if c.Index >= 6 {
				t.Errorf("rule %d (%q): argument index %d; a system call has 6", i, r.Names, c.Index)
			}
			// runc splits conditions on one argument into separate rules: they would be ORed, not ANDed.
			if seen[c.Index] {
				t.Errorf("rule %d (%q): two conditions on argument %d", i, r.Names, c.Index)
			}
			seen[c.Index] = true
			switch c.Op {
			case specs.OpEqualTo, specs.OpLessThan, specs.OpMaskedEqual:
			default:
				// NE, GT and friends are fooled by garbage in the upper 32 bits of an int argument.
				t.Errorf("rule %d (%q): operator %s; want EQ, LT or MASKED_EQ", i, r.Names, c.Op)
			}
			if c.Op != specs.OpMaskedEqual && c.ValueTwo != 0 {
				t.Errorf("rule %d (%q): valueTwo %d with %s", i, r.Names, c.ValueTwo, c.Op)
			}
		}
		// libseccomp refuses one system call with two different actions.
		for _, name := range r.Names {
			a := action(r.Action, r.ErrnoRet)
			if prev, ok := actions[name]; ok && prev != a {
				t.Errorf("%s has rules with actions %s and %s", name, prev, a)
			}
			actions[name] = a
		}
	}
}

func TestSeccompNoDuplicates(t *testing.T) {
	seen := map[string]int{} // name, action and arguments → rule
	for i, r := range Profile().Syscalls {
		args, err := json.Marshal(r.Args)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range r.Names {
			key := fmt.Sprintf("%s %s %s", name, action(r.Action, r.ErrnoRet), args)
			if j, ok := seen[key]; ok {
				t.Errorf("%s: rules %d and %d are the same", key, j, i)
			}
			seen[key] = i
		}
	}
	for _, list := range []struct {
		name  string
		names []string
	}{{"allowedSyscalls", allowedSyscalls}, {"allowedSyscalls32", allowedSyscalls32}, {"deniedSyscalls", deniedSyscalls}} {
		dup := map[string]bool{}
		for _, n := range list.names {
			if dup[n] {
				t.Errorf("%s lists %s twice", list.name, n)
			}
			dup[n] = true
		}
	}
}

func TestSeccompDeniedNeverNamed(t *testing.T) {
	p := Profile()
	for _, name := range deniedSyscalls {
		if rs := rulesFor(p, name); len(rs) > 0 {
			t.Errorf("%s is denied on purpose, yet named by %d rules: %+v", name, len(rs), rs)
		}
		if got := verdict(p, name); got != eperm {
			t.Errorf("%s: got %q; want %q", name, got, eperm)
		}
	}
	// A few that matter most, in case someone moves them out of deniedSyscalls as well.
	for _, name := range []string{
		"mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
		"fspick", "mount_setattr", "kexec_load", "kexec_file_load", "init_module", "finit_module",
		"delete_module", "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
		"open_by_handle_at", "reboot", "swapon", "swapoff", "settimeofday", "clock_settime", "adjtimex",
		"clock_adjtime", "acct", "quotactl", "lookup_dcookie", "setns", "unshare", "vm86", "vm86old",
		"iopl", "ioperm", "syslog", "nfsservctl", "create_module", "get_kernel_syms", "query_module",
		"uselib", "io_uring_setup", "io_uring_enter", "io_uring_register", "socketcall",
	} {
		if !slices.Contains(deniedSyscalls, name) {
			t.Errorf("%s is missing from deniedSyscalls", name)
		}
	}
}

func TestSeccompClone(t *testing.T) {
	p := Profile()
	want := []specs.LinuxSyscall{{
		Names:  []string{"clone"},
		Action: specs.ActAllow,
		Args:   []specs.LinuxSeccompArg{{Index: 0, Value: 0x7e020000, ValueTwo: 0, Op: specs.OpMaskedEqual}},
	}}
	if diff := cmp.Diff(want, rulesFor(p, "clone")); diff != "" {
		t.Errorf("clone rules (-want +got):\n%s", diff)
	}
	const (
		fork   = unix.CLONE_CHILD_SETTID | unix.CLONE_CHILD_CLEARTID | uint64(unix.SIGCHLD)
		thread = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD |
			unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID
		spawn = unix.CLONE_VM | unix.CLONE_VFORK | uint64(unix.SIGCHLD)
	)
	for _, tt := range []struct {
		name  string
		flags uint64
		want  string
	}{
		{"fork", fork, allow},
		{"pthread_create", thread, allow},
		{"posix_spawn", spawn, allow},
		{"pidfd", uint64(unix.SIGCHLD) | unix.CLONE_PIDFD, allow},
		{"NEWNS", unix.CLONE_NEWNS | fork, eperm},
		{"NEWUTS", unix.CLONE_NEWUTS | fork, eperm},
		{"NEWIPC", unix.CLONE_NEWIPC | fork, eperm},
		{"NEWUSER", unix.CLONE_NEWUSER | fork, eperm},
		{"NEWPID", unix.CLONE_NEWPID | fork, eperm},
		{"NEWNET", unix.CLONE_NEWNET | fork, eperm},
		{"NEWCGROUP", unix.CLONE_NEWCGROUP | fork, eperm},
		{"NEWUSER|NEWNS", unix.CLONE_NEWUSER | unix.CLONE_NEWNS | uint64(unix.SIGCHLD), eperm},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := verdict(p, "clone", tt.flags); got != tt.want {
				t.Errorf("clone(%#x): got %q; want %q", tt.flags, got, tt.want)
			}
		})
	}
}

func TestSeccompClone3(t *testing.T) {
	p := Profile()
	enosys := uint(unix.ENOSYS)
	want := []specs.LinuxSyscall{{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys}}
	if diff := cmp.Diff(want, rulesFor(p, "clone3")); diff != "" {
		t.Errorf("clone3 rules (-want +got):\n%s", diff)
	}
	if got := verdict(p, "clone3"); got != "errno 38" {
		t.Errorf("clone3: got %q; want %q", got, "errno 38")
	}
}

func TestSeccompPersonality(t *testing.T) {
	p := Profile()
	var values []uint64
	for _, r := range rulesFor(p, "personality") {
		if r.Action != specs.ActAllow || len(r.Names) != 1 || len(r.Args) != 1 ||
			r.Args[0].Index != 0 || r.Args[0].Op != specs.OpEqualTo {
			t.Errorf("personality rule %+v; want allow with one EQ on argument 0", r)
			continue
		}
		values = append(values, r.Args[0].Value)
	}
	want := []uint64{0, 0x8, 0x20000, 0x20008, 0xffffffff}
	if diff := cmp.Diff(want, values); diff != "" {
		t.Errorf("personality values (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		persona uint64
		want    string
	}{
		{0, allow},
		{0x8, allow},
		{0xffffffff, allow},
		{0x0040000, eperm},           // ADDR_NO_RANDOMIZE
		{0x0400000, eperm},           // READ_IMPLIES_EXEC
		{0x0040008, eperm},           // PER_LINUX32|ADDR_NO_RANDOMIZE
		{1<<32 | 0x0040000, eperm},   // upper bits set
		{0xffffffffffffffff, eperm},  // -1 as a long, not as the int glibc passes
		{0x0000001, eperm},           // PER_SVR4
		{0x20000 | 0x0040000, eperm}, // UNAME26|ADDR_NO_RANDOMIZE
	} {
		if got := verdict(p, "personality", tt.persona); got != tt.want {
			t.Errorf("personality(%#x): got %q; want %q", tt.persona, got, tt.want)
		}
	}
}

func TestSeccompSocket(t *testing.T) {
	p := Profile()
	for family := uint64(0); family < 64; family++ {
		want := allow
		if family >= unix.AF_ALG {
			want = eperm
		}
		if got := verdict(p, "socket", family, unix.SOCK_STREAM); got != want {
			t.Errorf("socket(%d): got %q; want %q", family, got, want)
		}
	}
	for _, family := range []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK} {
		if got := verdict(p, "socket", family); got != allow {
			t.Errorf("socket(%d): got %q; want %q", family, got, allow)
		}
	}
	// The kernel reads the family as an int; garbage above bit 31 must not sneak AF_VSOCK or AF_ALG in.
	for _, family := range []uint64{1<<32 | unix.AF_VSOCK, 1<<32 | unix.AF_ALG, 0xffffffff00000028} {
		if got := verdict(p, "socket", family); got != eperm {
			t.Errorf("socket(%#x): got %q; want %q", family, got, eperm)
		}
	}
	// socketpair only makes AF_UNIX pairs (and refuses the rest), so it needs no condition.
	if got := verdict(p, "socketpair", unix.AF_UNIX); got != allow {
		t.Errorf("socketpair: got %q; want %q", got, allow)
	}
}

var syscallName = regexp.MustCompile(`^[a-z0-9_]+$`)

func TestSeccompSyscallNames(t *testing.T) {
	p := Profile()
	for _, r := range p.Syscalls {
		for _, name := range r.Names {
			if !syscallName.MatchString(name) {
				t.Errorf("%q is not a system call name", name)
			}
			_, is64 := amd64Syscalls[name]
			if !is64 && !slices.Contains(i386OnlySyscalls, name) {
				t.Errorf("%s is a system call of neither x86_64 nor i386", name)
			}
		}
	}
	for _, name := range allowedSyscalls {
		if _, ok := amd64Syscalls[name]; !ok {
			t.Errorf("allowedSyscalls: %s is not an x86_64 system call", name)
		}
	}
	for _, name := range allowedSyscalls32 {
		if _, ok := amd64Syscalls[name]; ok || !slices.Contains(i386OnlySyscalls, name) {
			t.Errorf("allowedSyscalls32: %s is not an i386-only system call", name)
		}
	}
	for _, name := range deniedSyscalls {
		if _, ok := amd64Syscalls[name]; !ok && !slices.Contains(i386OnlySyscalls, name) {
			t.Errorf("deniedSyscalls: %s is a system call of neither x86_64 nor i386", name)
		}
	}
	// The table itself: one number per name, the way x/sys/unix has it.
	byNumber := map[uintptr]string{}
	for name, nr := range amd64Syscalls {
		if prev, ok := byNumber[nr]; ok {
			t.Errorf("amd64Syscalls: %s and %s both have number %d", prev, name, nr)
		}
		byNumber[nr] = name
	}
}

// TestSeccompEverySyscallDecided makes sure each system call of x86_64 and i386 is allowed, allowed with
// arguments, or denied on purpose, and only one of these: a new system call has to be decided on.
func TestSeccompEverySyscallDecided(t *testing.T) {
	p := Profile()
	decided := map[string][]string{} // name → where it is decided
	note := func(where string, names []string) {
		for _, n := range names {
			decided[n] = append(decided[n], where)
		}
	}
	note("allowedSyscalls", allowedSyscalls)
	note("allowedSyscalls32", allowedSyscalls32)
	note("deniedSyscalls", deniedSyscalls)
	conditional := map[string]bool{}
	for _, r := range p.Syscalls {
		if len(r.Args) > 0 || r.Action != specs.ActAllow {
			for _, n := range r.Names {
				conditional[n] = true
			}
		}
	}
	for n := range conditional {
		note("a rule with arguments or an errno", []string{n})
	}
	names := slices.Concat(slices.Sorted(maps.Keys(amd64Syscalls)), i386OnlySyscalls)
	for _, n := range names {
		if where := decided[n]; len(where) != 1 {
			t.Errorf("%s is decided in %d places %q; want 1", n, len(where), where)
		}
	}
	t.Logf("%d x86_64 and %d i386-only system calls: %d allowed (%d + %d i386-only), %d with arguments or an errno (%v), %d denied on purpose",
		len(amd64Syscalls), len(i386OnlySyscalls), len(allowedSyscalls)+len(allowedSyscalls32),
		len(allowedSyscalls), len(allowedSyscalls32), len(conditional), slices.Sorted(maps.Keys(conditional)), len(deniedSyscalls))
}

// TestSeccompEssentials checks the calls that nothing runs without, with the arguments they are made with.
func TestSeccompEssentials(t *testing.T) {
	p := Profile()
	for _, tt := range []struct {
		name string
		args []uint64
	}{
		{"read", nil}, {"write", nil}, {"openat", nil}, {"close", nil}, {"execve", nil}, {"mmap", nil},
		{"mprotect", nil}, {"munmap", nil}, {"brk", nil}, {"futex", nil}, {"epoll_wait", nil},
		{"epoll_pwait", nil}, {"clone", []uint64{uint64(unix.SIGCHLD)}}, {"exit_group", nil},
		{"rt_sigreturn", nil}, {"rt_sigaction", nil}, {"socket", []uint64{unix.AF_INET6}},
		{"connect", nil}, {"getdents64", nil}, {"newfstatat", nil}, {"statx", nil}, {"pipe2", nil},
		{"dup3", nil}, {"wait4", nil}, {"arch_prctl", nil}, {"set_tid_address", nil}, {"rseq", nil},
		{"prlimit64", nil}, {"getrandom", nil}, {"set_robust_list", nil}, {"vfork", nil}, {"fork", nil},
		{"execveat", nil}, {"waitid", nil}, {"prctl", nil}, {"memfd_create", nil}, {"pidfd_open", nil},
		{"close_range", nil}, {"faccessat2", nil}, {"openat2", nil}, {"landlock_create_ruleset", nil},
		{"ptrace", nil}, {"process_vm_readv", nil}, {"chroot", nil}, {"name_to_handle_at", nil},
		{"accept4", nil}, {"sendmmsg", nil}, {"recvmmsg", nil}, {"setsockopt", nil}, {"bind", nil},
		{"clock_gettime", nil}, {"clock_nanosleep", nil}, {"sched_getaffinity", nil}, {"madvise", nil},
		{"mmap2", nil}, {"fstat64", nil}, {"_llseek", nil}, // i386
	} {
		if got := verdict(p, tt.name, tt.args...); got != allow {
			t.Errorf("%s%v: got %q; want %q", tt.name, tt.args, got, allow)
		}
	}
}

func TestSeccompProfileIsFresh(t *testing.T) {
	p := Profile()
	p.Syscalls[0].Names[0] = "mount"
	*p.DefaultErrnoRet = 0
	q := Profile()
	if q.Syscalls[0].Names[0] == "mount" || *q.DefaultErrnoRet != 1 {
		t.Errorf("changing one profile changed the next")
	}
	if slices.Contains(allowedSyscalls, "mount") {
		t.Errorf("changing a profile changed allowedSyscalls")
	}
}

// amd64Syscalls are the system calls of x86_64 (and x32), by name: every SYS_* constant of x/sys/unix on
// linux/amd64. A name mistyped here does not compile.
var amd64Syscalls = map[string]uintptr{
	"read": unix.SYS_READ, "write": unix.SYS_WRITE, "open": unix.SYS_OPEN, "close": unix.SYS_CLOSE,
	"stat": unix.SYS_STAT, "fstat": unix.SYS_FSTAT, "lstat": unix.SYS_LSTAT, "poll": unix.SYS_POLL,
	"lseek": unix.SYS_LSEEK, "mmap": unix.SYS_MMAP, "mprotect": unix.SYS_MPROTECT, "munmap": unix.SYS_MUNMAP,
	"brk": unix.SYS_BRK, "rt_sigaction": unix.SYS_RT_SIGACTION, "rt_sigprocmask": unix.SYS_RT_SIGPROCMASK,
	"rt_sigreturn": unix.SYS_RT_SIGRETURN, "ioctl": unix.SYS_IOCTL, "pread64": unix.SYS_PREAD64,
	"pwrite64": unix.SYS_PWRITE64, "readv": unix.SYS_READV, "writev": unix.SYS_WRITEV,
	"access": unix.SYS_ACCESS, "pipe": unix.SYS_PIPE, "select": unix.SYS_SELECT,
	"sched_yield": unix.SYS_SCHED_YIELD, "mremap": unix.SYS_MREMAP, "msync": unix.SYS_MSYNC,
	"mincore": unix.SYS_MINCORE, "madvise": unix.SYS_MADVISE, "shmget": unix.SYS_SHMGET,
	"shmat": unix.SYS_SHMAT, "shmctl": unix.SYS_SHMCTL, "dup": unix.SYS_DUP, "dup2": unix.SYS_DUP2,
	"pause": unix.SYS_PAUSE, "nanosleep": unix.SYS_NANOSLEEP, "getitimer": unix.SYS_GETITIMER,
	"alarm": unix.SYS_ALARM, "setitimer": unix.SYS_SETITIMER, "getpid": unix.SYS_GETPID,
	"sendfile": unix.SYS_SENDFILE, "socket": unix.SYS_SOCKET, "connect": unix.SYS_CONNECT,
	"accept": unix.SYS_ACCEPT, "sendto": unix.SYS_SENDTO, "recvfrom": unix.SYS_RECVFROM,
	"sendmsg": unix.SYS_SENDMSG, "recvmsg": unix.SYS_RECVMSG, "shutdown": unix.SYS_SHUTDOWN,
	"bind": unix.SYS_BIND, "listen": unix.SYS_LISTEN, "getsockname": unix.SYS_GETSOCKNAME,
	"getpeername": unix.SYS_GETPEERNAME, "socketpair": unix.SYS_SOCKETPAIR, "setsockopt": unix.SYS_SETSOCKOPT,
	"getsockopt": unix.SYS_GETSOCKOPT, "clone": unix.SYS_CLONE, "fork": unix.SYS_FORK,
	"vfork": unix.SYS_VFORK, "execve": unix.SYS_EXECVE, "exit": unix.SYS_EXIT, "wait4": unix.SYS_WAIT4,
	"kill": unix.SYS_KILL, "uname": unix.SYS_UNAME, "semget": unix.SYS_SEMGET, "semop": unix.SYS_SEMOP,
	"semctl": unix.SYS_SEMCTL, "shmdt": unix.SYS_SHMDT, "msgget": unix.SYS_MSGGET, "msgsnd": unix.SYS_MSGSND,
	"msgrcv": unix.SYS_MSGRCV, "msgctl": unix.SYS_MSGCTL, "fcntl": unix.SYS_FCNTL, "flock": unix.SYS_FLOCK,
	"fsync": unix.SYS_FSYNC, "fdatasync": unix.SYS_FDATASYNC, "truncate": unix.SYS_TRUNCATE,
	"ftruncate": unix.SYS_FTRUNCATE, "getdents": unix.SYS_GETDENTS, "getcwd": unix.SYS_GETCWD,
	"chdir": unix.SYS_CHDIR, "fchdir": unix.SYS_FCHDIR, "rename": unix.SYS_RENAME, "mkdir": unix.SYS_MKDIR,
	"rmdir": unix.SYS_RMDIR, "creat": unix.SYS_CREAT, "link": unix.SYS_LINK, "unlink": unix.SYS_UNLINK,
	"symlink": unix.SYS_SYMLINK, "readlink": unix.SYS_READLINK, "chmod": unix.SYS_CHMOD,
	"fchmod": unix.SYS_FCHMOD, "chown": unix.SYS_CHOWN, "fchown": unix.SYS_FCHOWN, "lchown": unix.SYS_LCHOWN,
	"umask": unix.SYS_UMASK, "gettimeofday": unix.SYS_GETTIMEOFDAY, "getrlimit": unix.SYS_GETRLIMIT,
	"getrusage": unix.SYS_GETRUSAGE, "sysinfo": unix.SYS_SYSINFO, "times": unix.SYS_TIMES,
	"ptrace": unix.SYS_PTRACE, "getuid": unix.SYS_GETUID, "syslog": unix.SYS_SYSLOG,
	"getgid": unix.SYS_GETGID, "setuid": unix.SYS_SETUID, "setgid": unix.SYS_SETGID,
	"geteuid": unix.SYS_GETEUID, "getegid": unix.SYS_GETEGID, "setpgid": unix.SYS_SETPGID,
	"getppid": unix.SYS_GETPPID, "getpgrp": unix.SYS_GETPGRP, "setsid": unix.SYS_SETSID,
	"setreuid": unix.SYS_SETREUID, "setregid": unix.SYS_SETREGID, "getgroups": unix.SYS_GETGROUPS,
	"setgroups": unix.SYS_SETGROUPS, "setresuid": unix.SYS_SETRESUID, "getresuid": unix.SYS_GETRESUID,
	"setresgid": unix.SYS_SETRESGID, "getresgid": unix.SYS_GETRESGID, "getpgid": unix.SYS_GETPGID,
	"setfsuid": unix.SYS_SETFSUID, "setfsgid": unix.SYS_SETFSGID, "getsid": unix.SYS_GETSID,
	"capget": unix.SYS_CAPGET, "capset": unix.SYS_CAPSET, "rt_sigpending": unix.SYS_RT_SIGPENDING,
	"rt_sigtimedwait": unix.SYS_RT_SIGTIMEDWAIT, "rt_sigqueueinfo": unix.SYS_RT_SIGQUEUEINFO,
	"rt_sigsuspend": unix.SYS_RT_SIGSUSPEND, "sigaltstack": unix.SYS_SIGALTSTACK, "utime": unix.SYS_UTIME,
	"mknod": unix.SYS_MKNOD, "uselib": unix.SYS_USELIB, "personality": unix.SYS_PERSONALITY,
	"ustat": unix.SYS_USTAT, "statfs": unix.SYS_STATFS, "fstatfs": unix.SYS_FSTATFS, "sysfs": unix.SYS_SYSFS,
	"getpriority": unix.SYS_GETPRIORITY, "setpriority": unix.SYS_SETPRIORITY,
	"sched_setparam": unix.SYS_SCHED_SETPARAM, "sched_getparam": unix.SYS_SCHED_GETPARAM,
	"sched_setscheduler": unix.SYS_SCHED_SETSCHEDULER, "sched_getscheduler": unix.SYS_SCHED_GETSCHEDULER,
	"sched_get_priority_max": unix.SYS_SCHED_GET_PRIORITY_MAX,
	"sched_get_priority_min": unix.SYS_SCHED_GET_PRIORITY_MIN,
	"sched_rr_get_interval":  unix.SYS_SCHED_RR_GET_INTERVAL, "mlock": unix.SYS_MLOCK,
	"munlock": unix.SYS_MUNLOCK, "mlockall": unix.SYS_MLOCKALL, "munlockall": unix.SYS_MUNLOCKALL,
	"vhangup": unix.SYS_VHANGUP, "modify_ldt": unix.SYS_MODIFY_LDT, "pivot_root": unix.SYS_PIVOT_ROOT,
	"_sysctl": unix.SYS__SYSCTL, "prctl": unix.SYS_PRCTL, "arch_prctl": unix.SYS_ARCH_PRCTL,
	"adjtimex": unix.SYS_ADJTIMEX, "setrlimit": unix.SYS_SETRLIMIT, "chroot": unix.SYS_CHROOT,
	"sync": unix.SYS_SYNC, "acct": unix.SYS_ACCT, "settimeofday": unix.SYS_SETTIMEOFDAY,
	"mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2, "swapon": unix.SYS_SWAPON,
	"swapoff": unix.SYS_SWAPOFF, "reboot": unix.SYS_REBOOT, "sethostname": unix.SYS_SETHOSTNAME,
	"setdomainname": unix.SYS_SETDOMAINNAME, "iopl": unix.SYS_IOPL, "ioperm": unix.SYS_IOPERM,
	"create_module": unix.SYS_CREATE_MODULE, "init_module": unix.SYS_INIT_MODULE,
	"delete_module": unix.SYS_DELETE_MODULE, "get_kernel_syms": unix.SYS_GET_KERNEL_SYMS,
	"query_module": unix.SYS_QUERY_MODULE, "quotactl": unix.SYS_QUOTACTL, "nfsservctl": unix.SYS_NFSSERVCTL,
	"getpmsg": unix.SYS_GETPMSG, "putpmsg": unix.SYS_PUTPMSG, "afs_syscall": unix.SYS_AFS_SYSCALL,
	"tuxcall": unix.SYS_TUXCALL, "security": unix.SYS_SECURITY, "gettid": unix.SYS_GETTID,
	"readahead": unix.SYS_READAHEAD, "setxattr": unix.SYS_SETXATTR, "lsetxattr": unix.SYS_LSETXATTR,
	"fsetxattr": unix.SYS_FSETXATTR, "getxattr": unix.SYS_GETXATTR, "lgetxattr": unix.SYS_LGETXATTR,
	"fgetxattr": unix.SYS_FGETXATTR, "listxattr": unix.SYS_LISTXATTR, "llistxattr": unix.SYS_LLISTXATTR,
	"flistxattr": unix.SYS_FLISTXATTR, "removexattr": unix.SYS_REMOVEXATTR,
	"lremovexattr": unix.SYS_LREMOVEXATTR, "fremovexattr": unix.SYS_FREMOVEXATTR, "tkill": unix.SYS_TKILL,
	"time": unix.SYS_TIME, "futex": unix.SYS_FUTEX, "sched_setaffinity": unix.SYS_SCHED_SETAFFINITY,
	"sched_getaffinity": unix.SYS_SCHED_GETAFFINITY, "set_thread_area": unix.SYS_SET_THREAD_AREA,
	"io_setup": unix.SYS_IO_SETUP, "io_destroy": unix.SYS_IO_DESTROY, "io_getevents": unix.SYS_IO_GETEVENTS,
	"io_submit": unix.SYS_IO_SUBMIT, "io_cancel": unix.SYS_IO_CANCEL,
	"get_thread_area": unix.SYS_GET_THREAD_AREA, "lookup_dcookie": unix.SYS_LOOKUP_DCOOKIE,
	"epoll_create": unix.SYS_EPOLL_CREATE, "epoll_ctl_old": unix.SYS_EPOLL_CTL_OLD,
	"epoll_wait_old": unix.SYS_EPOLL_WAIT_OLD, "remap_file_pages": unix.SYS_REMAP_FILE_PAGES,
	"getdents64": unix.SYS_GETDENTS64, "set_tid_address": unix.SYS_SET_TID_ADDRESS,
	"restart_syscall": unix.SYS_RESTART_SYSCALL, "semtimedop": unix.SYS_SEMTIMEDOP,
	"fadvise64": unix.SYS_FADVISE64, "timer_create": unix.SYS_TIMER_CREATE,
	"timer_settime": unix.SYS_TIMER_SETTIME, "timer_gettime": unix.SYS_TIMER_GETTIME,
	"timer_getoverrun": unix.SYS_TIMER_GETOVERRUN, "timer_delete": unix.SYS_TIMER_DELETE,
	"clock_settime": unix.SYS_CLOCK_SETTIME, "clock_gettime": unix.SYS_CLOCK_GETTIME,
	"clock_getres": unix.SYS_CLOCK_GETRES, "clock_nanosleep": unix.SYS_CLOCK_NANOSLEEP,
	"exit_group": unix.SYS_EXIT_GROUP, "epoll_wait": unix.SYS_EPOLL_WAIT, "epoll_ctl": unix.SYS_EPOLL_CTL,
	"tgkill": unix.SYS_TGKILL, "utimes": unix.SYS_UTIMES, "vserver": unix.SYS_VSERVER,
	"mbind": unix.SYS_MBIND, "set_mempolicy": unix.SYS_SET_MEMPOLICY, "get_mempolicy": unix.SYS_GET_MEMPOLICY,
	"mq_open": unix.SYS_MQ_OPEN, "mq_unlink": unix.SYS_MQ_UNLINK, "mq_timedsend": unix.SYS_MQ_TIMEDSEND,
	"mq_timedreceive": unix.SYS_MQ_TIMEDRECEIVE, "mq_notify": unix.SYS_MQ_NOTIFY,
	"mq_getsetattr": unix.SYS_MQ_GETSETATTR, "kexec_load": unix.SYS_KEXEC_LOAD, "waitid": unix.SYS_WAITID,
	"add_key": unix.SYS_ADD_KEY, "request_key": unix.SYS_REQUEST_KEY, "keyctl": unix.SYS_KEYCTL,
	"ioprio_set": unix.SYS_IOPRIO_SET, "ioprio_get": unix.SYS_IOPRIO_GET,
	"inotify_init": unix.SYS_INOTIFY_INIT, "inotify_add_watch": unix.SYS_INOTIFY_ADD_WATCH,
	"inotify_rm_watch": unix.SYS_INOTIFY_RM_WATCH, "migrate_pages": unix.SYS_MIGRATE_PAGES,
	"openat": unix.SYS_OPENAT, "mkdirat": unix.SYS_MKDIRAT, "mknodat": unix.SYS_MKNODAT,
	"fchownat": unix.SYS_FCHOWNAT, "futimesat": unix.SYS_FUTIMESAT, "newfstatat": unix.SYS_NEWFSTATAT,
	"unlinkat": unix.SYS_UNLINKAT, "renameat": unix.SYS_RENAMEAT, "linkat": unix.SYS_LINKAT,
	"symlinkat": unix.SYS_SYMLINKAT, "readlinkat": unix.SYS_READLINKAT, "fchmodat": unix.SYS_FCHMODAT,
	"faccessat": unix.SYS_FACCESSAT, "pselect6": unix.SYS_PSELECT6, "ppoll": unix.SYS_PPOLL,
	"unshare": unix.SYS_UNSHARE, "set_robust_list": unix.SYS_SET_ROBUST_LIST,
	"get_robust_list": unix.SYS_GET_ROBUST_LIST, "splice": unix.SYS_SPLICE, "tee": unix.SYS_TEE,
	"sync_file_range": unix.SYS_SYNC_FILE_RANGE, "vmsplice": unix.SYS_VMSPLICE,
	"move_pages": unix.SYS_MOVE_PAGES, "utimensat": unix.SYS_UTIMENSAT, "epoll_pwait": unix.SYS_EPOLL_PWAIT,
	"signalfd": unix.SYS_SIGNALFD, "timerfd_create": unix.SYS_TIMERFD_CREATE, "eventfd": unix.SYS_EVENTFD,
	"fallocate": unix.SYS_FALLOCATE, "timerfd_settime": unix.SYS_TIMERFD_SETTIME,
	"timerfd_gettime": unix.SYS_TIMERFD_GETTIME, "accept4": unix.SYS_ACCEPT4, "signalfd4": unix.SYS_SIGNALFD4,
	"eventfd2": unix.SYS_EVENTFD2, "epoll_create1": unix.SYS_EPOLL_CREATE1, "dup3": unix.SYS_DUP3,
	"pipe2": unix.SYS_PIPE2, "inotify_init1": unix.SYS_INOTIFY_INIT1, "preadv": unix.SYS_PREADV,
	"pwritev": unix.SYS_PWRITEV, "rt_tgsigqueueinfo": unix.SYS_RT_TGSIGQUEUEINFO,
	"perf_event_open": unix.SYS_PERF_EVENT_OPEN, "recvmmsg": unix.SYS_RECVMMSG,
	"fanotify_init": unix.SYS_FANOTIFY_INIT, "fanotify_mark": unix.SYS_FANOTIFY_MARK,
	"prlimit64": unix.SYS_PRLIMIT64, "name_to_handle_at": unix.SYS_NAME_TO_HANDLE_AT,
	"open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT, "clock_adjtime": unix.SYS_CLOCK_ADJTIME,
	"syncfs": unix.SYS_SYNCFS, "sendmmsg": unix.SYS_SENDMMSG, "setns": unix.SYS_SETNS,
	"getcpu": unix.SYS_GETCPU, "process_vm_readv": unix.SYS_PROCESS_VM_READV,
	"process_vm_writev": unix.SYS_PROCESS_VM_WRITEV, "kcmp": unix.SYS_KCMP,
	"finit_module": unix.SYS_FINIT_MODULE, "sched_setattr": unix.SYS_SCHED_SETATTR,
	"sched_getattr": unix.SYS_SCHED_GETATTR, "renameat2": unix.SYS_RENAMEAT2, "seccomp": unix.SYS_SECCOMP,
	"getrandom": unix.SYS_GETRANDOM, "memfd_create": unix.SYS_MEMFD_CREATE,
	"kexec_file_load": unix.SYS_KEXEC_FILE_LOAD, "bpf": unix.SYS_BPF, "execveat": unix.SYS_EXECVEAT,
	"userfaultfd": unix.SYS_USERFAULTFD, "membarrier": unix.SYS_MEMBARRIER, "mlock2": unix.SYS_MLOCK2,
	"copy_file_range": unix.SYS_COPY_FILE_RANGE, "preadv2": unix.SYS_PREADV2, "pwritev2": unix.SYS_PWRITEV2,
	"pkey_mprotect": unix.SYS_PKEY_MPROTECT, "pkey_alloc": unix.SYS_PKEY_ALLOC,
	"pkey_free": unix.SYS_PKEY_FREE, "statx": unix.SYS_STATX, "io_pgetevents": unix.SYS_IO_PGETEVENTS,
	"rseq": unix.SYS_RSEQ, "uretprobe": unix.SYS_URETPROBE, "uprobe": unix.SYS_UPROBE,
	"pidfd_send_signal": unix.SYS_PIDFD_SEND_SIGNAL, "io_uring_setup": unix.SYS_IO_URING_SETUP,
	"io_uring_enter": unix.SYS_IO_URING_ENTER, "io_uring_register": unix.SYS_IO_URING_REGISTER,
	"open_tree": unix.SYS_OPEN_TREE, "move_mount": unix.SYS_MOVE_MOUNT, "fsopen": unix.SYS_FSOPEN,
	"fsconfig": unix.SYS_FSCONFIG, "fsmount": unix.SYS_FSMOUNT, "fspick": unix.SYS_FSPICK,
	"pidfd_open": unix.SYS_PIDFD_OPEN, "clone3": unix.SYS_CLONE3, "close_range": unix.SYS_CLOSE_RANGE,
	"openat2": unix.SYS_OPENAT2, "pidfd_getfd": unix.SYS_PIDFD_GETFD, "faccessat2": unix.SYS_FACCESSAT2,
	"process_madvise": unix.SYS_PROCESS_MADVISE, "epoll_pwait2": unix.SYS_EPOLL_PWAIT2,
	"mount_setattr": unix.SYS_MOUNT_SETATTR, "quotactl_fd": unix.SYS_QUOTACTL_FD,
	"landlock_create_ruleset": unix.SYS_LANDLOCK_CREATE_RULESET,
	"landlock_add_rule":       unix.SYS_LANDLOCK_ADD_RULE,
	"landlock_restrict_self":  unix.SYS_LANDLOCK_RESTRICT_SELF, "memfd_secret": unix.SYS_MEMFD_SECRET,
	"process_mrelease": unix.SYS_PROCESS_MRELEASE, "futex_waitv": unix.SYS_FUTEX_WAITV,
	"set_mempolicy_home_node": unix.SYS_SET_MEMPOLICY_HOME_NODE, "cachestat": unix.SYS_CACHESTAT,
	"fchmodat2": unix.SYS_FCHMODAT2, "map_shadow_stack": unix.SYS_MAP_SHADOW_STACK,
	"futex_wake": unix.SYS_FUTEX_WAKE, "futex_wait": unix.SYS_FUTEX_WAIT,
	"futex_requeue": unix.SYS_FUTEX_REQUEUE, "statmount": unix.SYS_STATMOUNT, "listmount": unix.SYS_LISTMOUNT,
	"lsm_get_self_attr": unix.SYS_LSM_GET_SELF_ATTR, "lsm_set_self_attr": unix.SYS_LSM_SET_SELF_ATTR,
	"lsm_list_modules": unix.SYS_LSM_LIST_MODULES, "mseal": unix.SYS_MSEAL, "setxattrat": unix.SYS_SETXATTRAT,
	"getxattrat": unix.SYS_GETXATTRAT, "listxattrat": unix.SYS_LISTXATTRAT,
	"removexattrat": unix.SYS_REMOVEXATTRAT, "open_tree_attr": unix.SYS_OPEN_TREE_ATTR,
	"file_getattr": unix.SYS_FILE_GETATTR, "file_setattr": unix.SYS_FILE_SETATTR, "listns": unix.SYS_LISTNS,
	"rseq_slice_yield": unix.SYS_RSEQ_SLICE_YIELD,
}

// i386OnlySyscalls are the system calls of i386 that x86_64 lacks: x/sys/unix's SYS_* constants on
// linux/386 less those on linux/amd64.
var i386OnlySyscalls = []string{
	"_llseek", "_newselect", "bdflush", "break", "chown32", "clock_adjtime64", "clock_getres_time64",
	"clock_gettime64", "clock_nanosleep_time64", "clock_settime64", "fadvise64_64", "fchown32", "fcntl64",
	"fstat64", "fstatat64", "fstatfs64", "ftime", "ftruncate64", "futex_time64", "getegid32", "geteuid32",
	"getgid32", "getgroups32", "getresgid32", "getresuid32", "getuid32", "gtty", "idle",
	"io_pgetevents_time64", "ipc", "lchown32", "lock", "lstat64", "mmap2", "mpx", "mq_timedreceive_time64",
	"mq_timedsend_time64", "nice", "oldfstat", "oldlstat", "oldolduname", "oldstat", "olduname",
	"ppoll_time64", "prof", "profil", "pselect6_time64", "readdir", "recvmmsg_time64",
	"rt_sigtimedwait_time64", "sched_rr_get_interval_time64", "semtimedop_time64", "sendfile64", "setfsgid32",
	"setfsuid32", "setgid32", "setgroups32", "setregid32", "setresgid32", "setresuid32", "setreuid32",
	"setuid32", "sgetmask", "sigaction", "signal", "sigpending", "sigprocmask", "sigreturn", "sigsuspend",
	"socketcall", "ssetmask", "stat64", "statfs64", "stime", "stty", "timer_gettime64", "timer_settime64",
	"timerfd_gettime64", "timerfd_settime64", "truncate64", "ugetrlimit", "ulimit", "umount",
	"utimensat_time64", "vm86", "vm86old", "waitpid",
}
