package runc

import (
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Profile returns the seccomp profile of a runc sandbox: deny by default (EPERM), and allow the system
// calls that ordinary programs make (shells, coreutils, python3, node, compilers, git, curl), in the
// manner of Docker's default profile for a container without CAP_SYS_ADMIN. It filters x86_64 and the
// two other ABIs an x86_64 kernel accepts (i386 and x32), so a 32-bit program cannot step around it.
//
// Three calls are allowed only with some arguments, all checked with exact 64-bit comparisons:
//
//   - clone without any CLONE_NEW* flag: no new namespaces, so no user namespace in which the sandbox's
//     root would gain capabilities. clone3 keeps its flags in memory, which seccomp cannot read, so it
//     fails with ENOSYS and glibc falls back to clone. unshare and setns are refused.
//   - personality only to the personas setarch(1) and linux32 set (PER_LINUX, PER_LINUX32, either with
//     UNAME26) and to query the current one; never ADDR_NO_RANDOMIZE or READ_IMPLIES_EXEC.
//   - socket only for address families below AF_ALG (AF_UNIX, AF_INET, AF_INET6, AF_NETLINK…): not
//     AF_ALG (the kernel's crypto API), AF_VSOCK (the host's hypervisor sockets) nor any later family.
//     i386's socketcall, which would hide the family from the filter, is refused.
//
// deniedSyscalls lists what is refused on purpose and why; Profile names none of those, so the default
// action refuses them. Every x86_64 and i386 system call that x/sys/unix knows is allowed, allowed with
// the arguments above, or in deniedSyscalls, and the tests keep it so.
//
// runc 1.1 (Debian 12) applies it through libseccomp 2.5.4, which skips the names it does not know
// (Debian's build knows those of Linux 6.7: statmount, mseal and later calls are skipped). runc then
// makes every system call numbered above the highest one that the profile names and the library knows
// fail with ENOSYS rather than EPERM, so libc's fallbacks for calls newer than the library still work.
// The profile sets no flags: runc 1.1 rejects them.
//
// Each call returns a new value, which the caller may change.
func Profile() *specs.LinuxSeccomp {
	eperm, enosys := uint(unix.EPERM), uint(unix.ENOSYS)
	p := &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: &eperm,
		Architectures:   []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32},
		Syscalls: []specs.LinuxSyscall{
			{Names: slices.Clone(allowedSyscalls), Action: specs.ActAllow},
			{Names: slices.Clone(allowedSyscalls32), Action: specs.ActAllow},
			{
				Names:  []string{"clone"},
				Action: specs.ActAllow,
				// Allowed when flags&cloneNamespaceFlags == 0 (for MASKED_EQ, Value is the mask and
				// ValueTwo the value the masked argument must equal).
				Args: []specs.LinuxSeccompArg{{Index: 0, Value: cloneNamespaceFlags, ValueTwo: 0, Op: specs.OpMaskedEqual}},
			},
			{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys},
			{
				Names:  []string{"socket"},
				Action: specs.ActAllow,
				// Less-than is exact on the whole 64-bit register. Not-equal or greater-than would be
				// fooled: the kernel truncates the family to an int, so 1<<32|AF_VSOCK would pass a
				// "!= AF_VSOCK" rule and still open an AF_VSOCK socket.
				Args: []specs.LinuxSeccompArg{{Index: 0, Value: unix.AF_ALG, Op: specs.OpLessThan}},
			},
		},
	}
	// One rule per persona: runc turns several conditions on one argument into separate rules anyway,
	// and a list of rules says plainly that any one of them allows the call.
	for _, persona := range allowedPersonas {
		p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{
			Names:  []string{"personality"},
			Action: specs.ActAllow,
			Args:   []specs.LinuxSeccompArg{{Index: 0, Value: persona, Op: specs.OpEqualTo}},
		})
	}
	return p
}

// cloneNamespaceFlags are the flags with which clone(2) makes a new namespace. CLONE_NEWTIME is not
// among them: clone(2) cannot make a time namespace (its bit, 0x80, is part of the exit signal there);
// only unshare(2) and clone3(2) can, and neither gets through.
const cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// Personas (linux/personality.h) that personality(2) may be given.
const (
	perLinux     = 0x0000000  // PER_LINUX, the default persona
	perLinux32   = 0x0000008  // PER_LINUX32: uname(2) reports i686 (setarch i386, linux32)
	uname26      = 0x0020000  // UNAME26: uname(2) reports a 2.6 kernel (setarch --uname-2.6)
	queryPersona = 0xffffffff // changes nothing, reports the current persona
)

// allowedPersonas are the values personality(2) is allowed with.
var allowedPersonas = []uint64{perLinux, perLinux32, uname26, uname26 | perLinux32, queryPersona}

// allowedSyscalls are the system calls allowed whatever their arguments, by their x86_64 names; x32
// has the same names, and i386 most of them (libseccomp finds each name's number on each ABI and skips
// the ABIs that lack it).
var allowedSyscalls = []string{
	// Files, directories and pipes.
	"access", "cachestat", "chdir", "chmod", "chown", "close", "close_range", "copy_file_range", "creat",
	"dup", "dup2", "dup3", "faccessat", "faccessat2", "fadvise64", "fallocate", "fchdir", "fchmod",
	"fchmodat", "fchmodat2", "fchown", "fchownat", "fcntl", "fdatasync", "file_getattr", "file_setattr",
	"flock", "fstat", "fstatfs", "fsync", "ftruncate", "futimesat", "getcwd", "getdents", "getdents64",
	"ioctl", "lchown", "link", "linkat", "lseek", "lstat", "mkdir", "mkdirat", "mknod", "mknodat",
	"newfstatat", "open", "openat", "openat2", "pipe", "pipe2", "pread64", "preadv", "preadv2",
	"pwrite64", "pwritev", "pwritev2", "read", "readahead", "readlink", "readlinkat", "readv", "rename",
	"renameat", "renameat2", "rmdir", "sendfile", "splice", "stat", "statfs", "statx", "symlink",
	"symlinkat", "sync", "sync_file_range", "syncfs", "tee", "truncate", "umask", "unlink", "unlinkat",
	"utime", "utimensat", "utimes", "vmsplice", "write", "writev",
	// A file handle is harmless without open_by_handle_at, which is refused; systemd and libmount
	// use this one to identify mounts.
	"name_to_handle_at",
	// The sandbox's own mount table, as /proc/self/mountinfo shows it.
	"listmount", "statmount",

	// Extended attributes.
	"fgetxattr", "flistxattr", "fremovexattr", "fsetxattr", "getxattr", "getxattrat", "lgetxattr",
	"listxattr", "listxattrat", "llistxattr", "lremovexattr", "lsetxattr", "removexattr",
	"removexattrat", "setxattr", "setxattrat",

	// Memory.
	"brk", "madvise", "map_shadow_stack", "membarrier", "memfd_create", "memfd_secret", "mincore",
	"mlock", "mlock2", "mlockall", "mmap", "mprotect", "mremap", "mseal", "msync", "munlock",
	"munlockall", "munmap", "pkey_alloc", "pkey_free", "pkey_mprotect", "remap_file_pages",

	// Processes and threads. clone is allowed with arguments (Profile); fork and vfork make no
	// namespaces.
	"arch_prctl", "execve", "execveat", "exit", "exit_group", "fork", "get_robust_list",
	"get_thread_area", "getcpu", "getpgid", "getpgrp", "getpid", "getppid", "getpriority", "getrlimit",
	"getrusage", "getsid", "gettid", "ioprio_get", "ioprio_set", "kill", "pidfd_open",
	"pidfd_send_signal", "prctl", "prlimit64", "process_mrelease", "rseq", "rseq_slice_yield",
	"sched_get_priority_max", "sched_get_priority_min", "sched_getaffinity", "sched_getattr",
	"sched_getparam", "sched_getscheduler", "sched_rr_get_interval", "sched_setaffinity",
	"sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield", "set_robust_list",
	"set_thread_area", "set_tid_address", "setpgid", "setpriority", "setrlimit", "setsid", "sysinfo",
	"tgkill", "tkill", "uname", "vfork", "wait4", "waitid",
	// The kernel's random numbers (getrandom(2) is what libcs and language runtimes read).
	"getrandom",
	// Debuggers and profilers (gdb, strace, py-spy). Since Linux 4.8 a tracer cannot make its
	// tracee step around the filter, and the kernel's ptrace access check (same user, Yama) still
	// applies to each; pidfd_getfd takes a descriptor under that same check.
	"pidfd_getfd", "process_vm_readv", "process_vm_writev", "ptrace",
	// Only the kernel's uprobe trampolines can make these; from anywhere else they kill the caller.
	"uprobe", "uretprobe",
	// The sandbox holds CAP_SYS_CHROOT (build tools and package managers chroot).
	"chroot",
	// Programs may confine themselves further (Chromium, OpenSSH, systemd services).
	"landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self", "seccomp",
	"capget", "capset",

	// Credentials (the capability set bounds what the set* calls can do).
	"getegid", "geteuid", "getgid", "getgroups", "getresgid", "getresuid", "getuid", "setfsgid",
	"setfsuid", "setgid", "setgroups", "setregid", "setresgid", "setresuid", "setreuid", "setuid",

	// Signals.
	"pause", "restart_syscall", "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo",
	"rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait", "rt_tgsigqueueinfo", "sigaltstack",
	"signalfd", "signalfd4",

	// Futexes.
	"futex", "futex_requeue", "futex_wait", "futex_waitv", "futex_wake",

	// Waiting for events, and the kernel's AIO (not io_uring, which is refused).
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2", "epoll_wait",
	"eventfd", "eventfd2", "fanotify_mark", "inotify_add_watch", "inotify_init", "inotify_init1",
	"inotify_rm_watch", "io_cancel", "io_destroy", "io_getevents", "io_pgetevents", "io_setup",
	"io_submit", "poll", "ppoll", "pselect6", "select",

	// Time and timers (reading the clocks; setting them is refused).
	"alarm", "clock_getres", "clock_gettime", "clock_nanosleep", "getitimer", "gettimeofday",
	"nanosleep", "setitimer", "time", "timer_create", "timer_delete", "timer_getoverrun",
	"timer_gettime", "timer_settime", "timerfd_create", "timerfd_gettime", "timerfd_settime", "times",

	// Sockets; socket itself is allowed with arguments (Profile).
	"accept", "accept4", "bind", "connect", "getpeername", "getsockname", "getsockopt", "listen",
	"recvfrom", "recvmmsg", "recvmsg", "sendmmsg", "sendmsg", "sendto", "setsockopt", "shutdown",
	"socketpair",

	// System V IPC (the sandbox has its own IPC namespace) and POSIX message queues.
	"mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive", "mq_timedsend", "mq_unlink", "msgctl",
	"msgget", "msgrcv", "msgsnd", "semctl", "semget", "semop", "semtimedop", "shmat", "shmctl",
	"shmdt", "shmget",
}

// allowedSyscalls32 are the i386 system calls that x86_64 lacks, allowed whatever their arguments: the
// 64-bit file offsets, 32-bit user IDs and 64-bit times of 32-bit programs, as glibc and musl use them.
var allowedSyscalls32 = []string{
	"_llseek", "_newselect", "chown32", "clock_getres_time64", "clock_gettime64",
	"clock_nanosleep_time64", "fadvise64_64", "fchown32", "fcntl64", "fstat64", "fstatat64",
	"fstatfs64", "ftruncate64", "futex_time64", "getegid32", "geteuid32", "getgid32", "getgroups32",
	"getresgid32", "getresuid32", "getuid32", "io_pgetevents_time64", "ipc", "lchown32", "lstat64",
	"mmap2", "mq_timedreceive_time64", "mq_timedsend_time64", "ppoll_time64", "pselect6_time64",
	"recvmmsg_time64", "rt_sigtimedwait_time64", "sched_rr_get_interval_time64", "semtimedop_time64",
	"sendfile64", "setfsgid32", "setfsuid32", "setgid32", "setgroups32", "setregid32", "setresgid32",
	"setresuid32", "setreuid32", "setuid32", "sigprocmask", "sigreturn", "stat64", "statfs64",
	"timer_gettime64", "timer_settime64", "timerfd_gettime64", "timerfd_settime64", "truncate64",
	"ugetrlimit", "utimensat_time64", "waitpid",
}

// deniedSyscalls are the system calls refused on purpose, x86_64 and i386 names alike. Profile names
// none of them, so the default action (EPERM) applies; the list records the decisions and the tests
// hold Profile to it.
var deniedSyscalls = []string{
	// Mounts, file systems and swap: what a container's root must not change.
	"fsconfig", "fsmount", "fsopen", "fspick", "mount", "mount_setattr", "move_mount", "nfsservctl",
	"open_tree", "open_tree_attr", "pivot_root", "quotactl", "quotactl_fd", "swapoff", "swapon",
	"umount", "umount2",
	// Namespaces: with an unprivileged user namespace the sandbox's root would gain every capability
	// inside it, and much kernel code that is otherwise out of reach. (clone is allowed without
	// namespace flags, and clone3 fails with ENOSYS; see Profile.)
	"listns", "setns", "unshare",
	// Loading code into the kernel, or replacing it.
	"bpf", "create_module", "delete_module", "finit_module", "get_kernel_syms", "init_module",
	"kexec_file_load", "kexec_load", "query_module", "uselib",
	// Looking into the kernel: its log, its pointers, its performance counters, its LSMs.
	"kcmp", "lookup_dcookie", "lsm_get_self_attr", "lsm_list_modules", "lsm_set_self_attr",
	"perf_event_open", "syslog",
	// A large kernel attack surface, and the exploit writer's favourite tools: io_uring (Docker
	// refuses it since 2023), and userfaultfd (which stalls the kernel on a page fault at will).
	"io_uring_enter", "io_uring_register", "io_uring_setup", "userfaultfd",
	// NUMA placement of memory, one's own or another process's (Docker wants CAP_SYS_NICE).
	"get_mempolicy", "mbind", "migrate_pages", "move_pages", "process_madvise", "set_mempolicy",
	"set_mempolicy_home_node",
	// Kernel keyrings are not namespaced.
	"add_key", "keyctl", "request_key",
	// Opening a file by handle walks around the mount tree (the "shocker" escape).
	"open_by_handle_at",
	// The host's clock, name, power, accounting and terminals.
	"acct", "adjtimex", "clock_adjtime", "clock_adjtime64", "clock_settime", "clock_settime64",
	"fanotify_init", "reboot", "setdomainname", "sethostname", "settimeofday", "stime", "vhangup",
	// x86 hardware and legacy modes: I/O ports, the LDT, virtual 8086 mode.
	"ioperm", "iopl", "modify_ldt", "vm86", "vm86old",
	// i386's socket multiplexer: its arguments sit in memory, where seccomp cannot check the address
	// family, so it would step around the socket rule. The cost: 32-bit programs whose libc goes
	// through it (Debian's i386 glibc, Go's 386 port) have no sockets here; those that call socket,
	// connect and the rest directly (Linux 4.3 and later) keep theirs. 64-bit programs never use it.
	"socketcall",
	// Obsolete, or never implemented.
	"_sysctl", "afs_syscall", "bdflush", "break", "epoll_ctl_old", "epoll_wait_old", "ftime",
	"getpmsg", "gtty", "idle", "lock", "mpx", "prof", "profil", "putpmsg", "security", "stty",
	"sysfs", "tuxcall", "ulimit", "ustat", "vserver",
	// i386's older interfaces, which glibc and musl replaced long ago (rt_sig*, uname, getdents64...).
	"nice", "oldfstat", "oldlstat", "oldolduname", "oldstat", "olduname", "readdir", "sgetmask",
	"sigaction", "signal", "sigpending", "sigsuspend", "ssetmask",
}
