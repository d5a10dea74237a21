//! Table tests of the aarch64 policy, compiled and run through the
//! interpreter on any host: every aarch64 name has exactly one row, every
//! number up to 1023 gets the row's decision (ENOSYS where the table assigns
//! none), each argument rule tests the argument aarch64 passes it in, and
//! each architecture's filter kills the other's calls. The constants the
//! rules compare are pinned to the values of the kernel's generic uapi
//! headers, which arm64 uses, so a filter built on an x86_64 host compares
//! what an aarch64 kernel reads.

use std::sync::OnceLock;

use super::aarch64::{NEWEST, SYSCALLS};
use super::abi::{self, Arch, SeccompData};
use super::syscalls::{self, ENOSYS, EPERM, OPEN_CREATE_FLAGS, SETID_BITS};
use super::table_probes::{expected_from_the_table, probing_args};
use super::{compile, filter_for_arch, interp, policy_for_arch, Action, Filter, FilterOptions};

const ALLOW: Action = Action::Allow;
const KILL: Action = Action::KillProcess;

fn filter() -> &'static Filter {
    static FILTER: OnceLock<Filter> = OnceLock::new();
    FILTER.get_or_init(|| compile(&policy_for_arch(Arch::Aarch64, FilterOptions::DEFAULT)).unwrap())
}

fn verdict_of(filter: &Filter, data: SeccompData) -> Action {
    let value = interp::run(&filter.instructions, &data).unwrap();
    Action::from_seccomp_ret(value).unwrap()
}

/// The aarch64 number of the syscall the kernel calls `name`.
fn nr_of(name: &str) -> i32 {
    let &(nr, _) = SYSCALLS
        .iter()
        .find(|&&(_, known)| known == name)
        .unwrap_or_else(|| panic!("{name} is not in the aarch64 table"));
    i32::try_from(nr).unwrap()
}

/// `name` called on aarch64 with `args`, through the default aarch64 filter.
fn call(name: &str, args: [u64; 6]) -> Action {
    verdict_of(filter(), SeccompData::aarch64(nr_of(name), args))
}

fn flag(value: libc::c_int) -> u64 {
    u64::try_from(value).unwrap()
}

#[test]
fn every_aarch64_syscall_has_exactly_one_row() {
    for options in FilterOptions::VARIANTS {
        let rows: Vec<_> = syscalls::rows(options).collect();
        for &(nr, name) in SYSCALLS.iter() {
            let deciding = rows.iter().filter(|row| row.names.contains(&name)).count();
            assert_eq!(deciding, 1, "{name} ({nr}) is decided by {deciding} rows");
        }
        let policy = policy_for_arch(Arch::Aarch64, options);
        assert_eq!(policy.arch, Arch::Aarch64);
        assert_eq!(policy.default, ENOSYS);
        assert_eq!(policy.rules.len(), SYSCALLS.len());
        for rule in &policy.rules {
            assert_eq!(i64::from(nr_of(rule.name)), rule.nr, "{}", rule.name);
        }
    }
}

#[test]
fn every_aarch64_number_to_1023_gets_its_deliberate_decision() {
    for options in FilterOptions::VARIANTS {
        let filter = filter_for_arch(Arch::Aarch64, options).unwrap();
        for nr in 0..=1023u32 {
            let name = SYSCALLS
                .iter()
                .find(|&&(known, _)| known == nr)
                .map(|&(_, name)| name);
            for args in probing_args() {
                let call = SeccompData::aarch64(i32::try_from(nr).unwrap(), args);
                let expected = match name {
                    Some(name) => expected_from_the_table(options, name, args),
                    // 42, 244–259, 295–423 and anything newer than the table.
                    None => ENOSYS,
                };
                assert_eq!(
                    verdict_of(filter, call),
                    expected,
                    "nr {nr} {name:?} {args:x?}"
                );
            }
        }
    }
}

#[test]
fn aarch64_numbers_past_the_newest_and_with_the_x32_bit_get_enosys() {
    let socket = u32::try_from(nr_of("socket")).unwrap();
    for nr in [
        NEWEST + 1,
        1000,
        0x3fff_ffff,
        abi::X32_SYSCALL_BIT,
        abi::X32_SYSCALL_BIT | socket,
        u32::MAX,
    ] {
        for args in [[0; 6], [u64::MAX; 6], [2, 1, 0, 0, 0, 0]] {
            let data = SeccompData::aarch64(nr as i32, args);
            assert_eq!(verdict_of(filter(), data), ENOSYS, "nr {nr:#x}");
        }
    }
}

#[test]
fn each_filter_kills_the_other_architectures_calls() {
    for options in FilterOptions::VARIANTS {
        let x86_64 = filter_for_arch(Arch::X86_64, options).unwrap();
        let aarch64 = filter_for_arch(Arch::Aarch64, options).unwrap();
        for nr in 0..=1023 {
            for args in [[0; 6], [2, 1, 0, 0, 0, 0], [u64::MAX; 6]] {
                assert_eq!(
                    verdict_of(x86_64, SeccompData::aarch64(nr, args)),
                    KILL,
                    "aarch64 nr {nr} through the x86_64 filter"
                );
                assert_eq!(
                    verdict_of(aarch64, SeccompData::x86_64(nr, args)),
                    KILL,
                    "x86_64 nr {nr} through the aarch64 filter"
                );
                for arch in [abi::AUDIT_ARCH_ARM, abi::AUDIT_ARCH_I386, 0] {
                    let foreign = SeccompData {
                        arch,
                        ..SeccompData::aarch64(nr, args)
                    };
                    assert_eq!(verdict_of(aarch64, foreign), KILL, "arch {arch:#x}");
                }
            }
        }
    }
}

#[test]
fn the_constants_the_rules_compare_are_the_generic_uapi_values() {
    // include/uapi/asm-generic/fcntl.h: O_CREAT 0100, __O_TMPFILE 020000000
    // (arm64's own fcntl.h moves O_DIRECTORY, which the test leaves out).
    assert_eq!(SETID_BITS, 0o6000);
    assert_eq!(OPEN_CREATE_FLAGS, 0o100 | 0o20000000);
    // include/uapi/asm-generic/ioctls.h.
    assert_eq!(libc::TIOCSTI as u32, 0x5412);
    assert_eq!(libc::TIOCLINUX as u32, 0x541c);
    // include/uapi/linux/sched.h.
    assert_eq!(syscalls::CLONE_NAMESPACE_FLAGS, 0x7e02_0080);
    // include/linux/socket.h and asm-generic/socket.h (SOCK_NONBLOCK is
    // O_NONBLOCK, 04000, and SOCK_CLOEXEC is O_CLOEXEC, 02000000).
    let sockets = [
        libc::AF_UNSPEC,
        libc::AF_UNIX,
        libc::AF_INET,
        libc::AF_INET6,
        libc::SOCK_STREAM,
        libc::SOCK_DGRAM,
        libc::SOCK_SEQPACKET,
        libc::SOCK_NONBLOCK,
        libc::SOCK_CLOEXEC,
    ];
    assert_eq!(sockets, [0, 1, 2, 10, 1, 2, 5, 0o4000, 0o2000000]);
    // include/uapi/linux/prctl.h and memfd.h.
    assert_eq!(
        [
            libc::PR_SET_MM,
            libc::PR_SET_PTRACER,
            libc::PR_SET_SECUREBITS
        ],
        [35, 0x5961_6d61, 28]
    );
    assert_eq!([libc::MFD_NOEXEC_SEAL, libc::MFD_EXEC], [0x0008, 0x0010]);
}

#[test]
fn aarch64_refuses_a_setid_mode_from_fchmod_and_the_at_calls() {
    let reg = u64::from(libc::S_IFREG);
    for (name, mode_arg) in [
        ("fchmod", 1),
        ("fchmodat", 2),
        ("fchmodat2", 2),
        ("mkdirat", 2),
        ("mknodat", 2),
    ] {
        let with_mode = |mode: u64| {
            let mut args = [3, 0, 0, 0, 0, 0];
            args[mode_arg] = mode;
            call(name, args)
        };
        for mode in [0o4755, 0o2755, 0o6000, reg | 0o4755] {
            assert_eq!(with_mode(mode), EPERM, "{name} {mode:o}");
            assert_eq!(
                with_mode(mode | 0xffff_ffff << 32),
                EPERM,
                "{name} {mode:o}"
            );
        }
        for mode in [0, 0o755, 0o1777, reg | 0o644, 0o4000 << 32] {
            assert_eq!(with_mode(mode), ALLOW, "{name} {mode:o}");
        }
    }
}

#[test]
fn aarch64_openat_refuses_a_setid_mode_only_when_it_creates() {
    // openat(dfd, path, flags, mode): flags are argument 2, mode argument 3.
    let open = |flags: u64, mode: u64| call("openat", [3, 0, flags, mode, 0, 0]);
    let creat = 0o100;
    let tmpfile = 0o20000000 | 0o40000;
    for flags in [creat, creat | 0o200 | 0o1, tmpfile | 0o1] {
        for mode in [0o4755, 0o2755, 0o4000 | 0xffff_ffff << 32] {
            assert_eq!(open(flags, mode), EPERM, "{flags:o} {mode:o}");
            assert_eq!(open(flags | 1 << 40, mode), EPERM, "{flags:o} {mode:o}");
        }
        assert_eq!(open(flags, 0o644), ALLOW, "{flags:o}");
    }
    // aarch64's O_DIRECTORY (040000) alone creates nothing.
    for flags in [0, 0o1, 0o40000, creat << 32] {
        assert_eq!(open(flags, 0o4755), ALLOW, "{flags:o}");
    }
}

#[test]
fn aarch64_socket_allows_ip_families_and_unix_only_when_granted() {
    let with_unix = filter_for_arch(Arch::Aarch64, FilterOptions::WITH_UNIX_SOCKETS).unwrap();
    let socket = |filter: &Filter, family: u64| {
        verdict_of(
            filter,
            SeccompData::aarch64(nr_of("socket"), [family, 1, 0, 0, 0, 0]),
        )
    };
    let unix = flag(libc::AF_UNIX);
    assert_eq!(socket(filter(), unix), EPERM);
    assert_eq!(socket(filter(), unix | 1 << 32), EPERM);
    assert_eq!(socket(with_unix, unix), ALLOW);
    for filter in [filter(), with_unix] {
        for family in [libc::AF_INET, libc::AF_INET6].map(flag) {
            assert_eq!(socket(filter, family), ALLOW, "family {family}");
        }
        for family in [libc::AF_NETLINK, libc::AF_PACKET, libc::AF_VSOCK].map(flag) {
            assert_eq!(socket(filter, family), EPERM, "family {family}");
            assert_eq!(socket(filter, family | 1 << 32), EPERM, "family {family}");
        }
    }
}

#[test]
fn aarch64_socketpair_makes_connected_unix_pairs_and_datagram_pairs_only_when_granted() {
    let with_unix = filter_for_arch(Arch::Aarch64, FilterOptions::WITH_UNIX_SOCKETS).unwrap();
    let pair = |filter: &Filter, family: u64, kind: u64| {
        verdict_of(
            filter,
            SeccompData::aarch64(nr_of("socketpair"), [family, kind, 0, 0, 0, 0]),
        )
    };
    let unix = flag(libc::AF_UNIX);
    let cloexec = flag(libc::SOCK_CLOEXEC);
    for filter in [filter(), with_unix] {
        for kind in [libc::SOCK_STREAM, libc::SOCK_SEQPACKET].map(flag) {
            assert_eq!(pair(filter, unix, kind), ALLOW);
            assert_eq!(pair(filter, unix, kind | cloexec), ALLOW);
        }
        assert_eq!(pair(filter, flag(libc::AF_INET), 1), EPERM);
        assert_eq!(pair(filter, flag(libc::AF_NETLINK), 1), EPERM);
    }
    let dgram = flag(libc::SOCK_DGRAM);
    assert_eq!(pair(filter(), unix, dgram), EPERM);
    assert_eq!(pair(filter(), unix, dgram | cloexec), EPERM);
    assert_eq!(pair(with_unix, unix, dgram), ALLOW);
}

#[test]
fn aarch64_clone_refuses_namespaces_in_its_flags_argument() {
    // clone(flags, stack, parent_tid, tls, child_tid) on arm64.
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
    assert_eq!(call("clone", [fork, 0, 0, 0, 0, 0]), ALLOW);
    assert_eq!(
        call("clone", [thread, 0x7000, 0x100, 0x200, 0x300, 0]),
        ALLOW
    );
    for namespace in [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWCGROUP,
    ]
    .map(flag)
    {
        assert_eq!(call("clone", [namespace | fork, 0, 0, 0, 0, 0]), EPERM);
        assert_eq!(call("clone", [namespace | thread, 0, 0, 0, 0, 0]), EPERM);
        assert_eq!(
            call("clone", [namespace << 32 | fork, 0, 0, 0, 0, 0]),
            ALLOW
        );
        // A namespace flag in a pointer argument is just an address.
        assert_eq!(call("clone", [fork, namespace, 0, namespace, 0, 0]), ALLOW);
    }
    assert_eq!(call("clone3", [0, 88, 0, 0, 0, 0]), ENOSYS);
}

#[test]
fn aarch64_ioctl_refuses_terminal_injection_in_its_command_argument() {
    let tiocsti = u64::from(libc::TIOCSTI as u32);
    let tioclinux = u64::from(libc::TIOCLINUX as u32);
    assert_eq!(call("ioctl", [0, tiocsti, 0, 0, 0, 0]), EPERM);
    assert_eq!(call("ioctl", [0, tiocsti | 1 << 32, 0, 0, 0, 0]), EPERM);
    assert_eq!(call("ioctl", [0, tioclinux, 0, 0, 0, 0]), EPERM);
    assert_eq!(
        call("ioctl", [0, u64::from(libc::TCGETS as u32), 0, 0, 0, 0]),
        ALLOW
    );
    assert_eq!(call("ioctl", [tiocsti, 0, 0, 0, 0, 0]), ALLOW);
}

#[test]
fn aarch64_personality_prctl_prlimit64_and_memfd_test_their_own_arguments() {
    assert_eq!(call("personality", [0, 0, 0, 0, 0, 0]), ALLOW);
    assert_eq!(call("personality", [0xffff_ffff, 0, 0, 0, 0, 0]), ALLOW);
    let read_implies_exec = flag(libc::READ_IMPLIES_EXEC);
    assert_eq!(
        call("personality", [read_implies_exec, 0, 0, 0, 0, 0]),
        EPERM
    );
    for option in [
        libc::PR_SET_MM,
        libc::PR_SET_PTRACER,
        libc::PR_SET_SECUREBITS,
    ]
    .map(flag)
    {
        assert_eq!(call("prctl", [option, 0, 0, 0, 0, 0]), EPERM, "{option}");
        assert_eq!(call("prctl", [option | 1 << 32, 0, 0, 0, 0, 0]), EPERM);
        // The option is argument 0; the same value as an argument is data.
        assert_eq!(
            call("prctl", [flag(libc::PR_SET_NAME), option, 0, 0, 0, 0]),
            ALLOW
        );
    }
    assert_eq!(
        call("prctl", [flag(libc::PR_SET_NO_NEW_PRIVS), 1, 0, 0, 0, 0]),
        ALLOW
    );
    assert_eq!(call("prlimit64", [0, 7, 0x1000, 0, 0, 0]), ALLOW);
    assert_eq!(call("prlimit64", [1, 7, 0x1000, 0, 0, 0]), EPERM);
    assert_eq!(call("prlimit64", [1 << 32 | 1, 7, 0, 0x1000, 0, 0]), EPERM);
    // getrlimit and setrlimit exist on arm64 and only touch the caller.
    assert_eq!(call("getrlimit", [7, 0x1000, 0, 0, 0, 0]), ALLOW);
    assert_eq!(call("setrlimit", [7, 0x1000, 0, 0, 0, 0]), ALLOW);
    let (seal, exec) = (u64::from(libc::MFD_NOEXEC_SEAL), u64::from(libc::MFD_EXEC));
    assert_eq!(call("memfd_create", [0, seal, 0, 0, 0, 0]), ALLOW);
    assert_eq!(call("memfd_create", [seal, 0, 0, 0, 0, 0]), EPERM);
    assert_eq!(call("memfd_create", [0, exec | seal, 0, 0, 0, 0]), EPERM);
    let rlimits =
        filter_for_arch(Arch::Aarch64, FilterOptions::for_spawn(false, true, false)).unwrap();
    let sealed = SeccompData::aarch64(nr_of("memfd_create"), [0, seal, 0, 0, 0, 0]);
    assert_eq!(verdict_of(rlimits, sealed), EPERM);
}

#[test]
fn aarch64_refuses_and_hides_what_x86_64_does() {
    let x86_64 = policy_for_arch(Arch::X86_64, FilterOptions::DEFAULT);
    let aarch64 = policy_for_arch(Arch::Aarch64, FilterOptions::DEFAULT);
    for rule in &aarch64.rules {
        let same = x86_64
            .rules
            .iter()
            .find(|other| other.name == rule.name)
            .unwrap_or_else(|| panic!("{} is not on x86_64", rule.name));
        assert_eq!(
            (&same.conditions, same.otherwise),
            (&rule.conditions, rule.otherwise),
            "{}",
            rule.name
        );
    }
    for name in [
        "ptrace",
        "mount",
        "unshare",
        "bpf",
        "io_uring_setup",
        "memfd_secret",
    ] {
        assert_eq!(call(name, [0; 6]), EPERM, "{name}");
        assert_eq!(call(name, [u64::MAX; 6]), EPERM, "{name}");
    }
    for name in ["clone3", "openat2", "listmount", "cachestat"] {
        assert_eq!(call(name, [u64::MAX; 6]), ENOSYS, "{name}");
    }
    for name in [
        "read",
        "write",
        "execve",
        "newfstatat",
        "ppoll",
        "exit_group",
    ] {
        assert_eq!(call(name, [u64::MAX; 6]), ALLOW, "{name}");
    }
}
