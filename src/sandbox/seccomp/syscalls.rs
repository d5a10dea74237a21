//! spawnd's default syscall policy as data: a decision for every syscall,
//! named as the kernel names it, whatever its number on an architecture (the
//! numbers are in `x86_64.rs` and `aarch64.rs`; a row may name calls one
//! architecture lacks, such as x86_64's `open` or `fork`). Every argument
//! index a row tests holds on both architectures. It is default-deny: a number that no row
//! decides, and any number above the newest the architecture's table knows,
//! gets ENOSYS, so a call added by a later kernel is never allowed unseen and
//! libcs fall back to the older calls they know. Each row says why; the
//! escape suite (docs/security.md) attacks each group of rows from inside.
//!
//! An allowed call is still bounded by the other layers: namespaces, the
//! mounts and Landlock, no capabilities, no new privileges.

use super::policy::{Action, ArgTest, Condition, SyscallRule};
use super::FilterOptions;

/// The errno for refused syscalls: the call exists, it is just not allowed.
pub(crate) const EPERM: Action = Action::Errno(libc::EPERM as u16);
/// The errno for calls answered as if the kernel lacked them, so libcs fall
/// back to an older call whose arguments the filter can see (clone3 hides
/// its flags in a struct).
pub(crate) const ENOSYS: Action = Action::Errno(libc::ENOSYS as u16);

/// What the policy does with one syscall.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Decision {
    /// The call runs.
    Allow,
    /// EPERM whatever the arguments.
    Refuse,
    /// ENOSYS whatever the arguments.
    Absent,
    /// Argument tests on the low 32 bits, tried in order; the first that
    /// holds decides, and `otherwise` when none does.
    Checked {
        /// The tests, first match wins.
        conditions: &'static [Condition],
        /// The action when no test holds.
        otherwise: Action,
    },
}

impl Decision {
    /// The rule for the syscall `name`, numbered `nr` on the architecture.
    pub(crate) fn rule(self, name: &'static str, nr: u32) -> SyscallRule {
        let nr = i64::from(nr);
        match self {
            Decision::Allow => SyscallRule::always(name, nr, Action::Allow),
            Decision::Refuse => SyscallRule::always(name, nr, EPERM),
            Decision::Absent => SyscallRule::always(name, nr, ENOSYS),
            Decision::Checked {
                conditions,
                otherwise,
            } => SyscallRule {
                name,
                nr,
                conditions: conditions.to_vec(),
                otherwise,
            },
        }
    }
}

/// One row of the table: the syscalls it names get its decision, for the
/// reason it gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Row {
    /// Why, in one line.
    pub why: &'static str,
    /// The decision.
    pub decision: Decision,
    /// Kernel names of the syscalls.
    pub names: &'static [&'static str],
}

const fn allow(why: &'static str, names: &'static [&'static str]) -> Row {
    Row {
        why,
        decision: Decision::Allow,
        names,
    }
}

const fn refuse(why: &'static str, names: &'static [&'static str]) -> Row {
    Row {
        why,
        decision: Decision::Refuse,
        names,
    }
}

const fn absent(why: &'static str, names: &'static [&'static str]) -> Row {
    Row {
        why,
        decision: Decision::Absent,
        names,
    }
}

const fn checked(
    why: &'static str,
    names: &'static [&'static str],
    conditions: &'static [Condition],
    otherwise: Action,
) -> Row {
    Row {
        why,
        decision: Decision::Checked {
            conditions,
            otherwise,
        },
        names,
    }
}

const fn refuse_if(arg: u8, test: ArgTest) -> Condition {
    Condition::new(arg, test, EPERM)
}

const fn allow_if(arg: u8, test: ArgTest) -> Condition {
    Condition::new(arg, test, Action::Allow)
}

/// Every `CLONE_NEW*` flag: creating any namespace is refused (S6, S7).
/// On legacy clone the low byte is the exit signal, so CLONE_NEWTIME (0x80)
/// there only refuses exit signals of 128 and above, which name no signal.
pub(crate) const CLONE_NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWTIME) as u32;

/// `PER_LINUX`, the default persona (libc does not define it).
pub(crate) const PER_LINUX: u32 = 0;
/// `personality(0xffffffff)` only queries the current persona.
pub(crate) const PERSONALITY_QUERY: u32 = 0xffff_ffff;

/// `S_ISUID | S_ISGID`: the mode bits no program may set (docs/security.md).
pub(crate) const SETID_BITS: u32 = libc::S_ISUID | libc::S_ISGID;
/// The open flags under which the kernel reads the mode: `O_CREAT`, and
/// `__O_TMPFILE`, the bit of `O_TMPFILE` that is not `O_DIRECTORY` (testing
/// all of `O_TMPFILE` would also match a plain `O_DIRECTORY` open).
pub(crate) const OPEN_CREATE_FLAGS: u32 =
    (libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u32;

/// A mode argument without set-id bits.
const fn no_setid_mode(arg: u8) -> Condition {
    refuse_if(arg, ArgTest::AnyBitsSet(SETID_BITS))
}

/// open/openat: flags that create nothing leave the mode unread; otherwise
/// the mode may not carry set-id bits.
const fn no_setid_creation(flags: u8, mode: u8) -> [Condition; 2] {
    [
        allow_if(flags, ArgTest::NoBitsSet(OPEN_CREATE_FLAGS)),
        no_setid_mode(mode),
    ]
}

/// socket's families by default: no AF_UNIX either, so no host service is
/// reachable through a socket a scope exposes (docs/security.md).
const IP_ONLY: &[Condition] = &[
    allow_if(0, ArgTest::Equals(libc::AF_INET as u32)),
    allow_if(0, ArgTest::Equals(libc::AF_INET6 as u32)),
];

/// socket's families when unix sockets are granted (N49, N53, N54):
/// AF_NETLINK, AF_PACKET, AF_VSOCK and the rest are refused.
const UNIX_AND_IP: &[Condition] = &[
    allow_if(0, ArgTest::Equals(libc::AF_UNIX as u32)),
    allow_if(0, ArgTest::Equals(libc::AF_INET as u32)),
    allow_if(0, ArgTest::Equals(libc::AF_INET6 as u32)),
];

/// A socketpair type with its creation flags, as the kernel takes it.
const fn pair_type(kind: libc::c_int, flags: libc::c_int) -> Condition {
    allow_if(1, ArgTest::Equals((kind | flags) as u32))
}

/// socketpair by default: AF_UNIX pairs that stay connected to each other
/// for life, SOCK_STREAM and SOCK_SEQPACKET (with or without SOCK_NONBLOCK
/// and SOCK_CLOEXEC). A SOCK_DGRAM end can be disconnected with
/// `connect(AF_UNSPEC)` and then send to any pathname socket, a way to a
/// host datagram service without `socket(AF_UNIX)`. The family
/// comes first: anything but AF_UNIX is refused (inet families make no
/// pairs, AF_TIPC is refused to `socket` as well, AF_UNSPEC is no family).
const CONNECTED_UNIX_PAIRS: &[Condition] = &[
    refuse_if(0, ArgTest::AnyBitsSet(!(libc::AF_UNIX as u32))),
    refuse_if(0, ArgTest::Equals(libc::AF_UNSPEC as u32)),
    pair_type(libc::SOCK_STREAM, 0),
    pair_type(libc::SOCK_STREAM, libc::SOCK_CLOEXEC),
    pair_type(libc::SOCK_STREAM, libc::SOCK_NONBLOCK),
    pair_type(libc::SOCK_STREAM, libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK),
    pair_type(libc::SOCK_SEQPACKET, 0),
    pair_type(libc::SOCK_SEQPACKET, libc::SOCK_CLOEXEC),
    pair_type(libc::SOCK_SEQPACKET, libc::SOCK_NONBLOCK),
    pair_type(
        libc::SOCK_SEQPACKET,
        libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
    ),
];

/// socket(2) in the default filter.
pub(crate) static SOCKET_WITHOUT_UNIX: Row = checked(
    "72, N49, N53, N54: only inet and inet6 sockets; AF_UNIX only where a manifest grants socket paths",
    &["socket"],
    IP_ONLY,
    EPERM,
);

/// socket(2) when the spawn's manifest grants unix sockets.
pub(crate) static SOCKET_WITH_UNIX: Row = checked(
    "N49, N53, N54: unix, inet and inet6 sockets (the manifest grants socket paths)",
    &["socket"],
    UNIX_AND_IP,
    EPERM,
);

/// socketpair(2) in the default filter.
pub(crate) static SOCKETPAIR_CONNECTED: Row = checked(
    "72: unix stream and seqpacket pairs only; a datagram end can be disconnected and reach host sockets",
    &["socketpair"],
    CONNECTED_UNIX_PAIRS,
    EPERM,
);

/// socketpair(2) when the spawn's manifest grants unix sockets.
pub(crate) static SOCKETPAIR_UNIX: Row = checked(
    "unix pairs of any type (the manifest grants socket paths)",
    &["socketpair"],
    &[allow_if(0, ArgTest::Equals(libc::AF_UNIX as u32))],
    EPERM,
);

/// SysV IPC objects where the sandbox's IPC namespace has its limits.
pub(crate) static SYSV_IPC_OBJECTS: Row = allow(
    "N48: SysV IPC objects, within the limits written into the sandbox's ipc namespace",
    &["shmget", "semget", "msgget"],
);

/// SysV IPC objects where the limits could not be written (spawnd is not
/// root, so the sandbox maps no uid 0 that could write them).
pub(crate) static NO_SYSV_IPC_OBJECTS: Row = refuse(
    "R56: SysV IPC objects, whose kernel default limits no memory limit bounds (spawnd without root cannot lower them)",
    &["shmget", "semget", "msgget"],
);

/// memfd_create(2) where a memory cgroup counts a memfd's pages.
pub(crate) static MEMFD_SEALED: Row = checked(
    "F30: memfds must be sealed non-executable, so no fileless exec",
    &["memfd_create"],
    &[
        refuse_if(1, ArgTest::AnyBitsSet(libc::MFD_EXEC)),
        allow_if(1, ArgTest::AnyBitsSet(libc::MFD_NOEXEC_SEAL)),
    ],
    EPERM,
);

/// memfd_create(2) where memory is limited by rlimits, which do not count a
/// memfd's pages (they are only in an address space while mapped).
pub(crate) static NO_MEMFD: Row = refuse(
    "R56, 74: memfd pages are memory the rlimits do not count; without a memory cgroup, no memfds",
    &["memfd_create"],
);

/// Every syscall but `socket`, `socketpair`, `shmget`, `semget`, `msgget`
/// and `memfd_create`, whose rows depend on [`FilterOptions`].
pub(crate) const ROWS: &[Row] = &[
    // Allowed: what any command-line program needs.
    allow(
        "files: read, write, walk, link and rename what the mounts and Landlock expose",
        &[
            "read", "write", "close", "stat", "fstat", "lstat", "newfstatat", "statx", "lseek",
            "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2",
            "pwritev2", "access", "faccessat", "faccessat2", "dup", "dup2", "dup3", "fcntl",
            "flock", "fsync", "fdatasync", "sync", "syncfs", "sync_file_range", "truncate",
            "ftruncate", "fallocate", "fadvise64", "readahead", "getdents", "getdents64",
            "getcwd", "chdir", "fchdir", "rename", "renameat", "renameat2", "rmdir", "link",
            "linkat", "unlink", "unlinkat", "symlink", "symlinkat", "readlink", "readlinkat",
            "statfs", "fstatfs", "umask", "utime", "utimes", "futimesat", "utimensat",
            "sendfile", "splice", "tee", "vmsplice", "copy_file_range", "close_range", "pipe",
            "pipe2", "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
        ],
    ),
    allow(
        "ownership: without capabilities only to the caller's own ids, and the kernel clears set-id bits",
        &["chown", "fchown", "lchown", "fchownat"],
    ),
    allow(
        "extended attributes: user.* where writable; security.* and trusted.* need capabilities",
        &[
            "setxattr", "lsetxattr", "fsetxattr", "getxattr", "lgetxattr", "fgetxattr",
            "listxattr", "llistxattr", "flistxattr", "removexattr", "lremovexattr",
            "fremovexattr", "setxattrat", "getxattrat", "listxattrat", "removexattrat",
        ],
    ),
    allow(
        "the process's own memory (locking bounded by RLIMIT_MEMLOCK)",
        &[
            "mmap", "mprotect", "munmap", "brk", "mremap", "msync", "mincore", "madvise",
            "mlock", "munlock", "mlockall", "munlockall", "mlock2", "mbind", "set_mempolicy",
            "get_mempolicy", "set_mempolicy_home_node", "remap_file_pages", "pkey_mprotect",
            "pkey_alloc", "pkey_free", "membarrier", "mseal", "map_shadow_stack",
        ],
    ),
    allow(
        "signals, clocks and timers: signals reach only the sandbox's pid namespace",
        &[
            "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending",
            "rt_sigtimedwait", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "rt_sigsuspend",
            "sigaltstack", "kill", "tkill", "tgkill", "pause", "nanosleep", "clock_nanosleep",
            "getitimer", "setitimer", "alarm", "timer_create", "timer_settime",
            "timer_gettime", "timer_getoverrun", "timer_delete", "timerfd_create",
            "timerfd_settime", "timerfd_gettime", "signalfd", "signalfd4", "restart_syscall",
            "clock_gettime", "clock_getres", "gettimeofday", "time",
        ],
    ),
    allow(
        "processes and threads of the sandbox's own pid namespace (clone is checked below)",
        &[
            "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid",
            "set_tid_address", "set_robust_list", "get_robust_list", "futex", "futex_waitv",
            "futex_wake", "futex_wait", "futex_requeue", "arch_prctl", "rseq", "gettid",
            "getpid", "getppid", "pidfd_open", "pidfd_send_signal", "sched_yield",
            "sched_setaffinity", "sched_getaffinity", "sched_setparam", "sched_getparam",
            "sched_setscheduler", "sched_getscheduler", "sched_get_priority_max",
            "sched_get_priority_min", "sched_rr_get_interval", "sched_setattr",
            "sched_getattr", "getcpu", "getpriority", "setpriority", "ioprio_set",
            "ioprio_get", "getrlimit", "setrlimit", "getrusage", "times", "sysinfo", "uname",
        ],
    ),
    allow(
        "identity: without capabilities a process only moves between ids it already has",
        &[
            "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups",
            "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid",
            "setfsgid", "setgroups", "capget", "capset", "setpgid", "getpgid", "getpgrp",
            "setsid", "getsid",
        ],
    ),
    allow(
        "waiting for events",
        &[
            "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1",
            "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2",
        ],
    ),
    allow(
        "sockets once made: the network namespace has only loopback, Landlock denies TCP bind and connect",
        &[
            "connect", "accept", "accept4", "bind", "listen", "shutdown", "getsockname",
            "getpeername", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
            "setsockopt", "getsockopt",
        ],
    ),
    allow(
        "System V and POSIX IPC, private to the sandbox's ipc namespace (N48); SysV objects are made by the rows below",
        &[
            "shmat", "shmctl", "shmdt", "semop", "semctl", "semtimedop", "msgsnd", "msgrcv",
            "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
            "mq_getsetattr",
        ],
    ),
    allow(
        "the old asynchronous I/O interface (io_uring is refused)",
        &[
            "io_setup", "io_destroy", "io_getevents", "io_submit", "io_cancel", "io_pgetevents",
        ],
    ),
    allow(
        "randomness, and narrowing itself further with its own seccomp or Landlock layer",
        &[
            "getrandom", "seccomp", "landlock_create_ruleset", "landlock_add_rule",
            "landlock_restrict_self",
        ],
    ),
    allow(
        "issued only from the trampoline the kernel maps when a host tracer sets a uprobe; refusing them would crash a traced program",
        &["uretprobe", "uprobe"],
    ),
    // Refused with EPERM.
    refuse(
        "S9: reading or stealing from other processes",
        &["ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd"],
    ),
    refuse(
        "S9: reaps the memory of another process while it is being killed",
        &["process_mrelease"],
    ),
    refuse(
        "S16, F35: the mount family, old and new API (open_tree_attr clones a tree with new attributes)",
        &[
            "mount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen", "fsconfig",
            "fsmount", "fspick", "mount_setattr", "open_tree_attr",
        ],
    ),
    refuse("S7, S8: new or other namespaces", &["unshare", "setns"]),
    refuse(
        "S7: lists the namespaces of the system by id; no program needs that",
        &["listns"],
    ),
    refuse(
        "S14: kernel keyrings are not namespaced",
        &["keyctl", "add_key", "request_key"],
    ),
    refuse(
        "S10–S13: kernel attack surface",
        &[
            "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
            "io_uring_register",
        ],
    ),
    refuse(
        "S19: privileged leftovers",
        &[
            "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
            "open_by_handle_at", "name_to_handle_at", "iopl", "ioperm", "acct", "swapon",
            "swapoff", "reboot", "syslog", "vhangup", "quotactl", "quotactl_fd",
            "lookup_dcookie", "uselib", "fanotify_init", "nfsservctl",
        ],
    ),
    refuse(
        "S19: fanotify marks are useless without fanotify_init, which is refused",
        &["fanotify_mark"],
    ),
    refuse(
        "S16, S19: root, host and domain names need capabilities the program never has",
        &["chroot", "sethostname", "setdomainname"],
    ),
    refuse(
        "clocks are global; adjtimex is refused whole rather than by mode",
        &["settimeofday", "clock_settime", "clock_adjtime", "adjtimex"],
    ),
    refuse(
        "reach into other processes of the same uid (init) or widen kernel attack surface",
        &[
            "kcmp", "modify_ldt", "process_madvise", "migrate_pages", "move_pages",
        ],
    ),
    refuse(
        "memory taken out of the kernel's own mappings and pinned outside memory accounting; no program needs it",
        &["memfd_secret"],
    ),
    refuse(
        "changes the process's LSM label, which the read-only /proc stops through /proc/self/attr",
        &["lsm_set_self_attr"],
    ),
    // Answered with ENOSYS, as if the kernel lacked them.
    absent(
        "S6: clone3 hides its flags in a struct; glibc falls back to clone, whose flags are checked",
        &["clone3"],
    ),
    absent(
        "71: openat2's mode is in a struct the filter cannot read; callers fall back to openat",
        &["openat2"],
    ),
    absent(
        "mount listing, and listmount reaches other namespaces by id; libmount falls back to /proc/self/mountinfo",
        &["listmount", "statmount"],
    ),
    absent(
        "LSM attributes of the process; libraries fall back to /proc/self/attr",
        &["lsm_get_self_attr", "lsm_list_modules"],
    ),
    absent(
        "page-cache residency of any readable file tells what the host reads; tools fall back to mincore",
        &["cachestat"],
    ),
    absent(
        "inode flags and project ids by path; tools fall back to the FS_IOC_FS[GS]ETXATTR ioctls",
        &["file_getattr", "file_setattr"],
    ),
    absent(
        "obsolete: statfs and /proc/filesystems replace them",
        &["ustat", "sysfs"],
    ),
    absent(
        "removed from the kernel or never implemented on x86_64, which answers ENOSYS itself",
        &[
            "_sysctl", "create_module", "get_kernel_syms", "query_module", "getpmsg",
            "putpmsg", "afs_syscall", "tuxcall", "security", "set_thread_area",
            "get_thread_area", "epoll_ctl_old", "epoll_wait_old", "vserver",
        ],
    ),
    // Decided by their arguments.
    // The flags are clone's argument 0 on x86_64 and on aarch64 (whose
    // CLONE_BACKWARDS order only swaps the tls and child_tid pointers).
    checked(
        "S6, S7: fork and pthread_create keep working; new namespaces do not",
        &["clone"],
        &[refuse_if(0, ArgTest::AnyBitsSet(CLONE_NAMESPACE_FLAGS))],
        Action::Allow,
    ),
    checked(
        "T1, T3: terminal input injection and console selection",
        &["ioctl"],
        &[
            refuse_if(1, ArgTest::Equals(libc::TIOCSTI as u32)),
            refuse_if(1, ArgTest::Equals(libc::TIOCLINUX as u32)),
        ],
        Action::Allow,
    ),
    checked(
        "71: no set-id mode from creat, chmod, fchmod, mkdir or mknod (mode is argument 1)",
        &["creat", "chmod", "fchmod", "mkdir", "mknod"],
        &[no_setid_mode(1)],
        Action::Allow,
    ),
    checked(
        "71: no set-id mode from the *at forms (mode is argument 2)",
        &["fchmodat", "fchmodat2", "mkdirat", "mknodat"],
        &[no_setid_mode(2)],
        Action::Allow,
    ),
    checked(
        "71: open creating (O_CREAT or O_TMPFILE) with a set-id mode",
        &["open"],
        &no_setid_creation(1, 2),
        Action::Allow,
    ),
    checked(
        "71: openat creating (O_CREAT or O_TMPFILE) with a set-id mode",
        &["openat"],
        &no_setid_creation(2, 3),
        Action::Allow,
    ),
    checked(
        "S15: no READ_IMPLIES_EXEC or ADDR_NO_RANDOMIZE; query and default only",
        &["personality"],
        &[
            allow_if(0, ArgTest::Equals(PER_LINUX)),
            allow_if(0, ArgTest::Equals(PERSONALITY_QUERY)),
        ],
        EPERM,
    ),
    // A process changes or reads only its own limits (pid 0), never another
    // one's: not the sandbox's init (pid 1, same uid, so the kernel would
    // allow it), whose end the program could otherwise provoke and pass off
    // as a lost sandbox. setrlimit and getrlimit go through pid 0.
    checked(
        "a process's own limits only, never its init's",
        &["prlimit64"],
        &[allow_if(0, ArgTest::Equals(0))],
        EPERM,
    ),
    checked(
        "S18: rewriting the memory map, choosing a ptracer, securebits",
        &["prctl"],
        &[
            refuse_if(0, ArgTest::Equals(libc::PR_SET_MM as u32)),
            refuse_if(0, ArgTest::Equals(libc::PR_SET_PTRACER as u32)),
            refuse_if(0, ArgTest::Equals(libc::PR_SET_SECUREBITS as u32)),
        ],
        Action::Allow,
    ),
];

/// Every row for a spawn with `options`.
pub(crate) fn rows(options: FilterOptions) -> impl Iterator<Item = &'static Row> {
    let sockets: [&'static Row; 2] = if options.allow_unix_sockets {
        [&SOCKET_WITH_UNIX, &SOCKETPAIR_UNIX]
    } else {
        [&SOCKET_WITHOUT_UNIX, &SOCKETPAIR_CONNECTED]
    };
    let sysv: &'static Row = if options.allow_sysv_ipc {
        &SYSV_IPC_OBJECTS
    } else {
        &NO_SYSV_IPC_OBJECTS
    };
    let memfd: &'static Row = if options.allow_memfd {
        &MEMFD_SEALED
    } else {
        &NO_MEMFD
    };
    ROWS.iter().chain(sockets).chain([sysv, memfd])
}

/// The decision for the syscall `name`, if a row names it.
#[cfg(test)]
pub(crate) fn decision(options: FilterOptions, name: &str) -> Option<Decision> {
    rows(options)
        .find(|row| row.names.contains(&name))
        .map(|row| row.decision)
}

/// One rule for each syscall of `table` (an architecture's `(number, name)`
/// pairs) that a row decides. A name no row decides gets no rule, and so the
/// policy's default, ENOSYS: the table's tests make sure there is none.
pub(crate) fn rules(options: FilterOptions, table: &[(u32, &'static str)]) -> Vec<SyscallRule> {
    // Every name to its row's decision, the first row naming it winning as
    // in [`decision`]: one pass over the rows instead of one per syscall
    // (`spawnd run` compiles its filter in every process).
    let mut by_name: std::collections::HashMap<&str, Decision> = std::collections::HashMap::new();
    for row in rows(options) {
        for name in row.names {
            by_name.entry(name).or_insert(row.decision);
        }
    }
    table
        .iter()
        .filter_map(|&(nr, name)| by_name.get(name).map(|d| d.rule(name, nr)))
        .collect()
}
