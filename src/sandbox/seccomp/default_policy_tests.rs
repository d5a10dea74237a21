//! Table tests of the compiled default policy for x86_64 (the build target
//! here, so `libc::SYS_*` are its numbers), run through the interpreter:
//! every number up to past the newest gets the decision the table made for
//! it (and ENOSYS where it made none), common syscalls stay allowed, each
//! argument rule is probed on both sides (high argument bits included), and
//! foreign architectures and x32 numbers are killed.

use std::sync::OnceLock;

use super::abi::{self, SeccompData};
use super::syscalls::{self, Decision, ENOSYS, EPERM, OPEN_CREATE_FLAGS};
use super::table_probes::{expected_from_the_table, probing_args};
use super::x86_64::{NEWEST, SYSCALLS};
use super::{
    compile, default_policy, filter_for, interp, policy_for, Action, Filter, FilterOptions,
};

const ALLOW: Action = Action::Allow;
const KILL: Action = Action::KillProcess;

fn filter() -> &'static Filter {
    static FILTER: OnceLock<Filter> = OnceLock::new();
    FILTER.get_or_init(|| compile(&default_policy()).unwrap())
}

fn verdict_for(data: SeccompData) -> Action {
    verdict_of(filter(), data)
}

fn verdict_of(filter: &Filter, data: SeccompData) -> Action {
    let value = interp::run(&filter.instructions, &data).unwrap();
    Action::from_seccomp_ret(value).unwrap()
}

/// The x86_64 number of the syscall the kernel calls `name`.
fn nr_of(name: &str) -> i64 {
    let &(nr, _) = SYSCALLS
        .iter()
        .find(|&&(_, known)| known == name)
        .unwrap_or_else(|| panic!("{name} is not in the x86_64 table"));
    i64::from(nr)
}

fn call(nr: i64, args: [u64; 6]) -> Action {
    verdict_for(SeccompData::x86_64(i32::try_from(nr).unwrap(), args))
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

/// The syscalls the policy refuses with EPERM whatever their arguments.
const EXPECTED_REFUSED: &[&str] = &[
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
    // Default deny: each decided, with its reason in the table.
    "process_mrelease",
    "open_tree_attr",
    "listns",
    "fanotify_mark",
    "chroot",
    "sethostname",
    "setdomainname",
    "memfd_secret",
    "lsm_set_self_attr",
];

/// The syscalls the policy answers with ENOSYS, as if the kernel lacked them.
const EXPECTED_ABSENT: &[&str] = &[
    "clone3",
    "openat2",
    "listmount",
    "statmount",
    "lsm_get_self_attr",
    "lsm_list_modules",
    "cachestat",
    "file_getattr",
    "file_setattr",
    "ustat",
    "sysfs",
    "_sysctl",
    "create_module",
    "get_kernel_syms",
    "query_module",
    "getpmsg",
    "putpmsg",
    "afs_syscall",
    "tuxcall",
    "security",
    "set_thread_area",
    "get_thread_area",
    "epoll_ctl_old",
    "epoll_wait_old",
    "vserver",
];

/// The syscalls decided by their arguments.
const EXPECTED_CHECKED: &[&str] = &[
    "chmod",
    "clone",
    "creat",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "ioctl",
    "memfd_create",
    "mkdir",
    "mkdirat",
    "mknod",
    "mknodat",
    "open",
    "openat",
    "personality",
    "prctl",
    "prlimit64",
    "socket",
    "socketpair",
];

/// The names of the default policy's rules whose fixed action is `action`.
fn fixed(action: Action) -> Vec<&'static str> {
    let mut names: Vec<&str> = default_policy()
        .rules
        .iter()
        .filter(|rule| rule.conditions.is_empty() && rule.otherwise == action)
        .map(|rule| rule.name)
        .collect();
    names.sort_unstable();
    names
}

fn sorted(names: &[&'static str]) -> Vec<&'static str> {
    let mut names = names.to_vec();
    names.sort_unstable();
    names
}

#[test]
fn the_table_lists_exactly_the_refused_absent_and_checked_syscalls_of_the_task() {
    let policy = default_policy();
    assert_eq!(policy.default, ENOSYS);
    assert_eq!(fixed(EPERM), sorted(EXPECTED_REFUSED));
    assert_eq!(fixed(ENOSYS), sorted(EXPECTED_ABSENT));
    let mut checked: Vec<&str> = policy
        .rules
        .iter()
        .filter(|rule| !rule.conditions.is_empty())
        .map(|rule| rule.name)
        .collect();
    checked.sort_unstable();
    assert_eq!(checked, sorted(EXPECTED_CHECKED));
    // Everything else in the table is allowed, each by a row that says why.
    let allowed = fixed(Action::Allow);
    assert_eq!(
        allowed.len() + EXPECTED_REFUSED.len() + EXPECTED_ABSENT.len() + EXPECTED_CHECKED.len(),
        SYSCALLS.len()
    );
}

#[test]
fn every_x86_64_syscall_has_exactly_one_row_and_every_row_names_a_real_syscall() {
    for options in FilterOptions::VARIANTS {
        let rows: Vec<_> = syscalls::rows(options).collect();
        for &(nr, name) in SYSCALLS.iter() {
            let deciding = rows.iter().filter(|row| row.names.contains(&name)).count();
            assert_eq!(deciding, 1, "{name} ({nr}) is decided by {deciding} rows");
        }
        for row in &rows {
            assert!(!row.why.is_empty(), "{:?}", row.names);
            for name in row.names {
                assert!(
                    SYSCALLS.iter().any(|&(_, known)| known == *name),
                    "row {:?} names {name}, which x86_64 does not have",
                    row.why
                );
            }
        }
        assert_eq!(policy_for(options).rules.len(), SYSCALLS.len());
    }
}

#[test]
fn every_number_to_1023_gets_its_deliberate_decision_and_x32_numbers_are_killed() {
    for options in FilterOptions::VARIANTS {
        let filter = filter_for(options).unwrap();
        for nr in 0..=1023u32 {
            let name = SYSCALLS
                .iter()
                .find(|&&(known, _)| known == nr)
                .map(|&(_, name)| name);
            for args in probing_args() {
                let call = SeccompData::x86_64(i32::try_from(nr).unwrap(), args);
                let expected = match name {
                    Some(name) => expected_from_the_table(options, name, args),
                    // Unassigned, x32-only (512–547) or newer than the table.
                    None => ENOSYS,
                };
                assert_eq!(
                    verdict_of(filter, call),
                    expected,
                    "nr {nr} {name:?} {args:x?}"
                );
                let x32 =
                    SeccompData::x86_64(i32::try_from(nr | abi::X32_SYSCALL_BIT).unwrap(), args);
                assert_eq!(verdict_of(filter, x32), KILL, "x32 nr {nr}");
            }
        }
    }
}

#[test]
fn numbers_past_the_newest_known_get_enosys_so_libcs_fall_back() {
    assert_eq!(NEWEST, 470);
    for nr in [
        NEWEST + 1,
        NEWEST + 2,
        511,
        512,
        547,
        548,
        1000,
        0x3fff_ffff,
    ] {
        for args in [[0; 6], [u64::MAX; 6]] {
            let data = SeccompData::x86_64(i32::try_from(nr).unwrap(), args);
            assert_eq!(verdict_for(data), ENOSYS, "nr {nr}");
        }
    }
    // The unassigned gap below 424 too.
    for nr in 337..424 {
        assert_eq!(call(nr, [0; 6]), ENOSYS, "nr {nr}");
    }
}

#[test]
fn the_newest_risky_calls_are_refused_each_as_decided() {
    for (name, action) in [
        ("memfd_secret", EPERM),
        ("process_mrelease", EPERM),
        ("open_tree_attr", EPERM),
        ("lsm_set_self_attr", EPERM),
        ("listns", EPERM),
        ("listmount", ENOSYS),
        ("statmount", ENOSYS),
        ("lsm_get_self_attr", ENOSYS),
        ("lsm_list_modules", ENOSYS),
        ("cachestat", ENOSYS),
        ("file_getattr", ENOSYS),
        ("file_setattr", ENOSYS),
        ("openat2", ENOSYS),
    ] {
        for args in [[0; 6], [u64::MAX; 6]] {
            assert_eq!(call(nr_of(name), args), action, "{name}");
        }
    }
    for name in [
        "mseal",
        "map_shadow_stack",
        "futex_wait",
        "setxattrat",
        "uretprobe",
    ] {
        assert_eq!(call(nr_of(name), [0; 6]), ALLOW, "{name}");
    }
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
    let refused = syscalls::ROWS
        .iter()
        .filter(|row| row.decision == Decision::Refuse)
        .flat_map(|row| row.names);
    for name in refused {
        for args in [[0; 6], [u64::MAX; 6], [1, 2, 3, 4, 5, 6]] {
            assert_eq!(call(nr_of(name), args), EPERM, "{name}");
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
fn common_syscalls_are_allowed() {
    // open and openat are allowed unless they create with a set-id mode
    // (below), so all-ones arguments do not apply to them.
    for nr in [libc::SYS_open, libc::SYS_openat] {
        assert_eq!(call(nr, [0; 6]), ALLOW, "nr {nr}");
    }
    let common = [
        libc::SYS_read,
        libc::SYS_write,
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
fn socket_allows_only_ip_families_by_default_and_unix_too_when_granted() {
    let with_unix = filter_for(FilterOptions::WITH_UNIX_SOCKETS).unwrap();
    let socket = |filter: &Filter, family: u64| {
        let data = SeccompData::x86_64(
            i32::try_from(libc::SYS_socket).unwrap(),
            [family, 1, 0, 0, 0, 0],
        );
        verdict_of(filter, data)
    };
    let unix = flag(libc::AF_UNIX);
    assert_eq!(socket(filter(), unix), EPERM);
    assert_eq!(socket(filter(), unix | 1 << 32), EPERM);
    assert_eq!(socket(with_unix, unix), ALLOW);
    assert_eq!(socket(with_unix, unix | 1 << 32), ALLOW);
    for filter in [filter(), with_unix] {
        for family in [libc::AF_INET, libc::AF_INET6].map(flag) {
            assert_eq!(socket(filter, family), ALLOW, "family {family}");
            assert_eq!(socket(filter, family | 1 << 32), ALLOW, "family {family}");
        }
        for family in [
            libc::AF_NETLINK,
            libc::AF_PACKET,
            libc::AF_VSOCK,
            libc::AF_BLUETOOTH,
        ]
        .map(flag)
        {
            assert_eq!(socket(filter, family), EPERM, "family {family}");
            assert_eq!(socket(filter, family | 1 << 32), EPERM, "family {family}");
        }
        assert_eq!(
            socket(filter, flag(libc::AF_INET) << 32),
            EPERM,
            "AF_UNSPEC in the low half"
        );
    }
}

#[test]
fn socketpair_makes_connected_unix_pairs_and_datagram_pairs_only_when_granted() {
    let with_unix = filter_for(FilterOptions::WITH_UNIX_SOCKETS).unwrap();
    let pair = |filter: &Filter, family: u64, kind: u64| {
        let data = SeccompData::x86_64(
            i32::try_from(libc::SYS_socketpair).unwrap(),
            [family, kind, 0, 0, 0, 0],
        );
        verdict_of(filter, data)
    };
    let unix = flag(libc::AF_UNIX);
    let creation_flags = [
        0,
        flag(libc::SOCK_CLOEXEC),
        flag(libc::SOCK_NONBLOCK),
        flag(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK),
    ];
    for extra in creation_flags {
        for kind in [libc::SOCK_STREAM, libc::SOCK_SEQPACKET].map(flag) {
            for filter in [filter(), with_unix] {
                assert_eq!(pair(filter, unix, kind | extra), ALLOW, "{kind:#x}");
                assert_eq!(pair(filter, unix | 1 << 32, kind | extra | 1 << 40), ALLOW);
            }
        }
        let dgram = flag(libc::SOCK_DGRAM) | extra;
        assert_eq!(pair(filter(), unix, dgram), EPERM, "{dgram:#x}");
        assert_eq!(pair(filter(), unix, dgram | 1 << 32), EPERM, "{dgram:#x}");
        assert_eq!(pair(with_unix, unix, dgram), ALLOW, "{dgram:#x}");
    }
    // A stream type with a bit the kernel does not know is no stream pair.
    assert_eq!(pair(filter(), unix, flag(libc::SOCK_STREAM) | 0x100), EPERM);
    for filter in [filter(), with_unix] {
        // No family but AF_UNIX makes pairs here; the rest are refused.
        for family in [
            libc::AF_UNSPEC,
            libc::AF_INET,
            libc::AF_INET6,
            libc::AF_NETLINK,
            libc::AF_TIPC,
            libc::AF_VSOCK,
        ]
        .map(flag)
        {
            let stream = flag(libc::SOCK_STREAM);
            assert_eq!(pair(filter, family, stream), EPERM, "family {family}");
            assert_eq!(pair(filter, family | 1 << 32, stream), EPERM);
        }
        assert_eq!(pair(filter, unix << 32, flag(libc::SOCK_STREAM)), EPERM);
    }
}

#[test]
fn the_two_filters_differ_only_in_socket_and_socketpair_and_are_each_compiled_once() {
    let (default, with_unix) = (
        filter_for(FilterOptions::DEFAULT).unwrap(),
        filter_for(FilterOptions::WITH_UNIX_SOCKETS).unwrap(),
    );
    assert_ne!(default.id(), with_unix.id());
    assert!(std::ptr::eq(default, super::default_filter().unwrap()));
    assert!(std::ptr::eq(
        with_unix,
        filter_for(FilterOptions::WITH_UNIX_SOCKETS).unwrap()
    ));
    assert_eq!(FilterOptions::default(), FilterOptions::DEFAULT);
    let (a, b) = (
        policy_for(FilterOptions::DEFAULT),
        policy_for(FilterOptions::WITH_UNIX_SOCKETS),
    );
    let differing = differing_rules(&a, &b);
    assert_eq!(differing, ["socket", "socketpair"]);
}

/// The syscalls whose rules differ between two policies of one table.
fn differing_rules(a: &super::Policy, b: &super::Policy) -> Vec<&'static str> {
    a.rules
        .iter()
        .zip(&b.rules)
        .filter(|(x, y)| x != y)
        .map(|(x, _)| x.name)
        .collect()
}

#[test]
fn without_root_sysv_ipc_objects_are_refused_and_nothing_else_changes() {
    let strict = FilterOptions::for_spawn(false, false, true);
    let (a, b) = (policy_for(FilterOptions::DEFAULT), policy_for(strict));
    let differing = differing_rules(&a, &b);
    assert_eq!(differing, ["shmget", "semget", "msgget"]);
    let filter = filter_for(strict).unwrap();
    for name in ["shmget", "semget", "msgget"] {
        let data = || SeccompData::x86_64(nr_of(name) as i32, [0, 4096, 0o1600, 0, 0, 0]);
        assert_eq!(verdict_of(filter, data()), EPERM, "{name}");
        assert_eq!(
            verdict_of(super::default_filter().unwrap(), data()),
            ALLOW,
            "{name}"
        );
    }
    // Each of the eight combinations is its own program, compiled once.
    let ids: std::collections::BTreeSet<String> = FilterOptions::VARIANTS
        .iter()
        .map(|o| filter_for(*o).unwrap().id())
        .collect();
    assert_eq!(ids.len(), 8);
    assert!(std::ptr::eq(filter, filter_for(strict).unwrap()));
}

#[test]
fn without_a_memory_cgroup_memfds_are_refused_and_nothing_else_changes() {
    let rlimits = FilterOptions::for_spawn(false, true, false);
    let (a, b) = (policy_for(FilterOptions::DEFAULT), policy_for(rlimits));
    let differing = differing_rules(&a, &b);
    assert_eq!(differing, ["memfd_create"]);
    let sealed = u64::from(libc::MFD_NOEXEC_SEAL | libc::MFD_CLOEXEC);
    let data = || SeccompData::x86_64(nr_of("memfd_create") as i32, [0, sealed, 0, 0, 0, 0]);
    assert_eq!(verdict_of(filter_for(rlimits).unwrap(), data()), EPERM);
    assert_eq!(verdict_of(super::default_filter().unwrap(), data()), ALLOW);
}

/// The mode-setting calls: (name, index of the mode argument).
const MODE_SETTERS: &[(&str, usize)] = &[
    ("chmod", 1),
    ("fchmod", 1),
    ("creat", 1),
    ("mkdir", 1),
    ("mknod", 1),
    ("fchmodat", 2),
    ("fchmodat2", 2),
    ("mkdirat", 2),
    ("mknodat", 2),
];

#[test]
fn no_call_sets_or_creates_a_setid_mode_even_with_high_bits() {
    let reg = u64::from(libc::S_IFREG);
    for &(name, mode_arg) in MODE_SETTERS {
        let with_mode = |mode: u64| {
            let mut args = [3, 0, 0, 0, 0, 0];
            args[mode_arg] = mode;
            call(nr_of(name), args)
        };
        for mode in [0o4755, 0o2755, 0o6000, 0o4000, 0o2000, reg | 0o4755] {
            assert_eq!(with_mode(mode), EPERM, "{name} {mode:o}");
            assert_eq!(
                with_mode(mode | 0xffff_ffff << 32),
                EPERM,
                "{name} {mode:o}"
            );
        }
        for mode in [0, 0o755, 0o1777, 0o777, reg | 0o644, 0o4000 << 32] {
            assert_eq!(with_mode(mode), ALLOW, "{name} {mode:o}");
        }
    }
}

#[test]
fn open_and_openat_refuse_a_setid_mode_only_when_they_create() {
    let flag32 = |value: libc::c_int| u64::from(value as u32);
    let (creat, excl, tmpfile, dir, wronly) = (
        flag32(libc::O_CREAT),
        flag32(libc::O_EXCL),
        flag32(libc::O_TMPFILE),
        flag32(libc::O_DIRECTORY),
        flag32(libc::O_WRONLY),
    );
    // __O_TMPFILE is O_TMPFILE without O_DIRECTORY; the filter tests that bit.
    assert_eq!(u64::from(OPEN_CREATE_FLAGS), creat | (tmpfile & !dir));
    assert_eq!(tmpfile & dir, dir, "O_TMPFILE includes O_DIRECTORY");
    for (name, flags_arg) in [("open", 1), ("openat", 2)] {
        let open = |flags: u64, mode: u64| {
            let mut args = [3, 0, 0, 0, 0, 0];
            args[flags_arg] = flags;
            args[flags_arg + 1] = mode;
            call(nr_of(name), args)
        };
        for flags in [
            creat,
            creat | excl | wronly,
            tmpfile | wronly,
            tmpfile & !dir,
        ] {
            for mode in [0o4755, 0o2755, 0o6644, 0o4000 | 0xffff_ffff << 32] {
                assert_eq!(open(flags, mode), EPERM, "{name} {flags:o} {mode:o}");
                assert_eq!(
                    open(flags | 1 << 40, mode),
                    EPERM,
                    "{name} {flags:o} {mode:o}"
                );
            }
            assert_eq!(open(flags, 0o644), ALLOW, "{name} {flags:o}");
            assert_eq!(
                open(flags, 0o4000 << 32),
                ALLOW,
                "{name}: mode is a umode_t"
            );
        }
        // Opening without creating: the kernel never reads the mode.
        for flags in [
            0,
            wronly,
            dir,
            dir | wronly,
            excl,
            creat << 32,
            tmpfile << 32,
        ] {
            assert_eq!(open(flags, 0o4755), ALLOW, "{name} {flags:o}");
        }
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
            ..SeccompData::x86_64(nr, [2, 1, 0, 0, 0, 0])
        };
        assert_eq!(verdict_for(i386), KILL, "i386 nr {nr}");
        let other = SeccompData {
            arch: 0,
            ..SeccompData::x86_64(nr, [0; 6])
        };
        assert_eq!(verdict_for(other), KILL, "arch 0 nr {nr}");
    }
    let x32_socket = i32::try_from(abi::X32_SYSCALL_BIT | socket).unwrap();
    assert_eq!(
        verdict_for(SeccompData::x86_64(x32_socket, [2, 1, 0, 0, 0, 0])),
        KILL
    );
    assert_eq!(verdict_for(SeccompData::x86_64(0x4000_0000, [0; 6])), KILL);
    assert_eq!(
        verdict_for(SeccompData::x86_64(-1, [0; 6])),
        KILL,
        "negative numbers compare as unsigned"
    );
}
