//! Table tests of the compiled default policy, run through the interpreter:
//! every listed syscall gets its action, common syscalls stay allowed, each
//! argument rule is probed on both sides (high argument bits included), and
//! foreign architectures and x32 numbers are killed.

use std::sync::OnceLock;

use super::abi::{self, SeccompData};
use super::syscalls::{self, ENOSYS, EPERM};
use super::{compile, default_policy, interp, Action, Filter};

const ALLOW: Action = Action::Allow;
const KILL: Action = Action::KillProcess;

fn filter() -> &'static Filter {
    static FILTER: OnceLock<Filter> = OnceLock::new();
    FILTER.get_or_init(|| compile(&default_policy()).unwrap())
}

fn verdict_for(data: SeccompData) -> Action {
    let value = interp::run(&filter().instructions, &data).unwrap();
    Action::from_seccomp_ret(value).unwrap()
}

fn call(nr: i64, args: [u64; 6]) -> Action {
    verdict_for(SeccompData::native(i32::try_from(nr).unwrap(), args))
}

fn arg0(nr: i64, value: u64) -> Action {
    call(nr, [value, 0, 0, 0, 0, 0])
}

fn arg1(nr: i64, value: u64) -> Action {
    call(nr, [3, value, 0, 0, 0, 0])
}

/// libc's ioctl request type differs between gnu and musl; the kernel takes
/// an `unsigned int`.
fn ioctl_cmd(request: libc::Ioctl) -> u64 {
    u64::from(request as u32)
}

fn flag(value: libc::c_int) -> u64 {
    u64::try_from(value).unwrap()
}

/// The syscalls the task refuses with EPERM whatever their arguments.
const TASK_REFUSED: &[&str] = &[
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "mount",
    "umount2",
    "pivot_root",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "unshare",
    "setns",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "open_by_handle_at",
    "name_to_handle_at",
    "iopl",
    "ioperm",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "syslog",
    "vhangup",
    "quotactl",
    "quotactl_fd",
    "lookup_dcookie",
    "uselib",
    "fanotify_init",
    "nfsservctl",
    // Added after the sandbox review: cross-process reach and attack surface.
    "kcmp",
    "modify_ldt",
    "process_madvise",
    "migrate_pages",
    "move_pages",
];

#[test]
fn the_table_lists_exactly_the_refused_syscalls_of_the_task() {
    let mut expected = TASK_REFUSED.to_vec();
    let policy = default_policy();
    let mut refused: Vec<&str> = policy
        .rules
        .iter()
        .filter(|rule| rule.conditions.is_empty() && rule.otherwise == EPERM)
        .map(|rule| rule.name)
        .collect();
    expected.sort_unstable();
    refused.sort_unstable();
    assert_eq!(refused, expected);
    assert_eq!(policy.default, ALLOW);
    let mut others: Vec<&str> = policy
        .rules
        .iter()
        .filter(|rule| !(rule.conditions.is_empty() && rule.otherwise == EPERM))
        .map(|rule| rule.name)
        .collect();
    others.sort_unstable();
    let conditional = [
        "clone",
        "clone3",
        "ioctl",
        "memfd_create",
        "personality",
        "prctl",
        "prlimit64",
        "socket",
        "socketpair",
    ];
    assert_eq!(others, conditional);
}

#[test]
fn libc_gives_the_x86_64_syscall_numbers() {
    let numbers = [
        (libc::SYS_read, 0),
        (libc::SYS_ioctl, 16),
        (libc::SYS_socket, 41),
        (libc::SYS_clone, 56),
        (libc::SYS_ptrace, 101),
        (libc::SYS_nfsservctl, 180),
        (libc::SYS_clone3, 435),
        (libc::SYS_quotactl_fd, 443),
    ];
    for (libc_nr, x86_64_nr) in numbers {
        assert_eq!(libc_nr, x86_64_nr);
    }
}

#[test]
fn every_refused_syscall_gets_eperm_whatever_its_arguments() {
    for &(name, nr) in syscalls::REFUSED {
        for args in [[0; 6], [u64::MAX; 6], [1, 2, 3, 4, 5, 6]] {
            assert_eq!(call(nr, args), EPERM, "{name}");
        }
    }
}

#[test]
fn clone3_gets_enosys_so_glibc_falls_back_to_clone() {
    let clone_newuser = flag(libc::CLONE_NEWUSER);
    assert_eq!(arg0(libc::SYS_clone3, 0), ENOSYS);
    assert_eq!(arg0(libc::SYS_clone3, clone_newuser), ENOSYS);
    assert_eq!(ENOSYS, Action::Errno(38));
}

#[test]
fn common_unlisted_syscalls_are_allowed() {
    let common = [
        libc::SYS_read,
        libc::SYS_write,
        libc::SYS_openat,
        libc::SYS_close,
        libc::SYS_execve,
        libc::SYS_execveat,
        libc::SYS_mmap,
        libc::SYS_mprotect,
        libc::SYS_brk,
        libc::SYS_exit,
        libc::SYS_exit_group,
        libc::SYS_wait4,
        libc::SYS_kill,
        libc::SYS_futex,
        libc::SYS_fork,
        libc::SYS_vfork,
        libc::SYS_rt_sigaction,
        libc::SYS_getpid,
        libc::SYS_fstat,
        libc::SYS_setsid,
        libc::SYS_connect,
        libc::SYS_seccomp,
        libc::SYS_landlock_restrict_self,
    ];
    for nr in common {
        assert_eq!(call(nr, [0; 6]), ALLOW, "nr {nr}");
        assert_eq!(call(nr, [u64::MAX; 6]), ALLOW, "nr {nr}");
    }
}

#[test]
fn clone_allows_fork_and_threads_but_no_new_namespace() {
    let fork = flag(libc::SIGCHLD);
    let thread = flag(
        libc::CLONE_VM
            | libc::CLONE_FS
            | libc::CLONE_FILES
            | libc::CLONE_SIGHAND
            | libc::CLONE_THREAD
            | libc::CLONE_SYSVSEM
            | libc::CLONE_SETTLS
            | libc::CLONE_PARENT_SETTID
            | libc::CLONE_CHILD_CLEARTID,
    );
    assert_eq!(arg0(libc::SYS_clone, fork), ALLOW);
    assert_eq!(arg0(libc::SYS_clone, thread), ALLOW);
    let namespaces = [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWCGROUP,
        libc::CLONE_NEWTIME,
    ];
    for namespace in namespaces.map(flag) {
        assert_eq!(
            arg0(libc::SYS_clone, namespace | fork),
            EPERM,
            "{namespace:#x}"
        );
        assert_eq!(
            arg0(libc::SYS_clone, namespace | thread),
            EPERM,
            "{namespace:#x}"
        );
        // The kernel reads clone's flags through lower_32_bits(): high bits create nothing.
        assert_eq!(
            arg0(libc::SYS_clone, namespace << 32 | fork),
            ALLOW,
            "{namespace:#x}"
        );
    }
}

#[test]
fn ioctl_refuses_terminal_injection_even_with_high_bits_set() {
    let tiocsti = ioctl_cmd(libc::TIOCSTI);
    assert_eq!(arg1(libc::SYS_ioctl, tiocsti), EPERM);
    assert_eq!(arg1(libc::SYS_ioctl, tiocsti | 1 << 32), EPERM);
    assert_eq!(arg1(libc::SYS_ioctl, tiocsti | 0xffff_ffff << 32), EPERM);
    assert_eq!(arg1(libc::SYS_ioctl, ioctl_cmd(libc::TIOCLINUX)), EPERM);
    assert_eq!(
        arg1(libc::SYS_ioctl, ioctl_cmd(libc::TIOCLINUX) | 1 << 40),
        EPERM
    );
    assert_eq!(arg1(libc::SYS_ioctl, ioctl_cmd(libc::TCGETS)), ALLOW);
    assert_eq!(arg1(libc::SYS_ioctl, ioctl_cmd(libc::FIONREAD)), ALLOW);
    // The command is argument 1: an fd equal to TIOCSTI is nothing special.
    assert_eq!(call(libc::SYS_ioctl, [tiocsti, 0, 0, 0, 0, 0]), ALLOW);
}

#[test]
fn socket_and_socketpair_allow_only_unix_and_ip_families() {
    for nr in [libc::SYS_socket, libc::SYS_socketpair] {
        for family in [libc::AF_UNIX, libc::AF_INET, libc::AF_INET6].map(flag) {
            assert_eq!(arg0(nr, family), ALLOW, "nr {nr} family {family}");
            assert_eq!(arg0(nr, family | 1 << 32), ALLOW, "nr {nr} family {family}");
        }
        for family in [
            libc::AF_NETLINK,
            libc::AF_PACKET,
            libc::AF_VSOCK,
            libc::AF_BLUETOOTH,
        ]
        .map(flag)
        {
            assert_eq!(arg0(nr, family), EPERM, "nr {nr} family {family}");
            assert_eq!(arg0(nr, family | 1 << 32), EPERM, "nr {nr} family {family}");
        }
        assert_eq!(
            arg0(nr, flag(libc::AF_INET) << 32),
            EPERM,
            "AF_UNSPEC in the low half"
        );
    }
}

#[test]
fn memfd_create_needs_noexec_seal_and_no_mfd_exec() {
    let (cloexec, seal, exec) = (
        u64::from(libc::MFD_CLOEXEC),
        u64::from(libc::MFD_NOEXEC_SEAL),
        u64::from(libc::MFD_EXEC),
    );
    assert_eq!(arg1(libc::SYS_memfd_create, 0), EPERM);
    assert_eq!(arg1(libc::SYS_memfd_create, cloexec), EPERM);
    assert_eq!(arg1(libc::SYS_memfd_create, exec), EPERM);
    assert_eq!(arg1(libc::SYS_memfd_create, exec | seal), EPERM);
    assert_eq!(arg1(libc::SYS_memfd_create, seal << 32), EPERM);
    assert_eq!(arg1(libc::SYS_memfd_create, seal), ALLOW);
    assert_eq!(arg1(libc::SYS_memfd_create, cloexec | seal), ALLOW);
}

#[test]
fn personality_allows_only_the_default_and_the_query() {
    let nr = libc::SYS_personality;
    assert_eq!(arg0(nr, 0), ALLOW);
    assert_eq!(arg0(nr, 0xffff_ffff), ALLOW);
    assert_eq!(arg0(nr, u64::MAX), ALLOW, "persona is an unsigned int");
    assert_eq!(arg0(nr, flag(libc::READ_IMPLIES_EXEC)), EPERM);
    assert_eq!(arg0(nr, flag(libc::ADDR_NO_RANDOMIZE)), EPERM);
    assert_eq!(arg0(nr, 0x0008), EPERM, "PER_LINUX32 and other personas");
}

#[test]
fn prlimit64_reaches_only_the_callers_own_limits() {
    let nr = libc::SYS_prlimit64;
    // getrlimit/setrlimit: pid 0, whatever the other arguments.
    assert_eq!(call(nr, [0, 7, 0, 0x1000, 0, 0]), ALLOW);
    assert_eq!(call(nr, [0, 7, 0x1000, 0, 0, 0]), ALLOW);
    // Another process (init is pid 1), also with high bits set or as a read.
    for pid in [1, 2, 1 << 32 | 1, u64::from(u32::MAX)] {
        assert_eq!(call(nr, [pid, 7, 0x1000, 0, 0, 0]), EPERM, "pid {pid:#x}");
        assert_eq!(call(nr, [pid, 7, 0, 0x1000, 0, 0]), EPERM, "pid {pid:#x}");
    }
    // The kernel reads the pid as an int: high bits over a 0 are pid 0.
    assert_eq!(call(nr, [1 << 32, 7, 0x1000, 0, 0, 0]), ALLOW);
}

#[test]
fn prctl_refuses_mm_ptracer_and_securebits_only() {
    let nr = libc::SYS_prctl;
    for option in [
        libc::PR_SET_MM,
        libc::PR_SET_PTRACER,
        libc::PR_SET_SECUREBITS,
    ]
    .map(flag)
    {
        assert_eq!(call(nr, [option, 0, 0, 0, 0, 0]), EPERM, "option {option}");
        assert_eq!(
            call(nr, [option | 1 << 32, 0, 0, 0, 0, 0]),
            EPERM,
            "option {option}"
        );
    }
    // PR_SET_PTRACER_ANY as the value changes nothing: the option decides.
    assert_eq!(
        call(nr, [flag(libc::PR_SET_PTRACER), u64::MAX, 0, 0, 0, 0]),
        EPERM
    );
    for option in [
        libc::PR_SET_NAME,
        libc::PR_SET_NO_NEW_PRIVS,
        libc::PR_SET_DUMPABLE,
    ] {
        assert_eq!(arg0(nr, flag(option)), ALLOW, "option {option}");
    }
}

#[test]
fn foreign_architectures_and_x32_numbers_are_killed() {
    let socket = u32::try_from(libc::SYS_socket).unwrap();
    for nr in [0, 102, 359, socket.try_into().unwrap()] {
        let i386 = SeccompData {
            arch: abi::AUDIT_ARCH_I386,
            ..SeccompData::native(nr, [2, 1, 0, 0, 0, 0])
        };
        assert_eq!(verdict_for(i386), KILL, "i386 nr {nr}");
        let other = SeccompData {
            arch: 0,
            ..SeccompData::native(nr, [0; 6])
        };
        assert_eq!(verdict_for(other), KILL, "arch 0 nr {nr}");
    }
    let x32_socket = i32::try_from(abi::X32_SYSCALL_BIT | socket).unwrap();
    assert_eq!(
        verdict_for(SeccompData::native(x32_socket, [2, 1, 0, 0, 0, 0])),
        KILL
    );
    assert_eq!(verdict_for(SeccompData::native(0x4000_0000, [0; 6])), KILL);
    assert_eq!(
        verdict_for(SeccompData::native(-1, [0; 6])),
        KILL,
        "negative numbers compare as unsigned"
    );
}
