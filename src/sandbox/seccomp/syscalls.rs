//! spawnd's default syscall policy for x86_64, as data. It is a deny-list on
//! top of the other layers (namespaces, Landlock, no capabilities, no new
//! privileges), so unlisted syscalls are allowed. Each group of entries
//! names the threats it answers (threats.md group S, T1–T3, N49/N53/N54,
//! F30). Numbers come from `libc::SYS_*`; syscalls libc does not define for
//! x86_64 (create_module, get_kernel_syms, query_module) are absent from the
//! kernel too, which answers ENOSYS for them.

use super::policy::{Action, ArgTest, Condition, SyscallRule};

/// The errno for refused syscalls: the call exists, it is just not allowed.
pub const EPERM: Action = Action::Errno(libc::EPERM as u16);
/// The errno for clone3, so glibc falls back to clone, whose flags a filter
/// can see (clone3 hides them in a struct: threats S6).
pub const ENOSYS: Action = Action::Errno(libc::ENOSYS as u16);

/// `(libc name, number)` pairs for `libc::SYS_*` constants, so a name and its
/// number cannot drift apart; rules drop the `SYS_` prefix.
macro_rules! syscalls {
    ($($name:ident),* $(,)?) => {
        [$((stringify!($name), libc::$name)),*]
    };
}

/// Syscalls refused with EPERM whatever their arguments.
pub const REFUSED: &[(&str, i64)] = &syscalls![
    // S9: reading or stealing from other processes.
    SYS_ptrace,
    SYS_process_vm_readv,
    SYS_process_vm_writev,
    SYS_pidfd_getfd,
    // S16, F35: the mount family, old and new API.
    SYS_mount,
    SYS_umount2,
    SYS_pivot_root,
    SYS_open_tree,
    SYS_move_mount,
    SYS_fsopen,
    SYS_fsconfig,
    SYS_fsmount,
    SYS_fspick,
    SYS_mount_setattr,
    // S7, S8: new or other namespaces.
    SYS_unshare,
    SYS_setns,
    // S14: kernel keyrings are not namespaced.
    SYS_keyctl,
    SYS_add_key,
    SYS_request_key,
    // S10–S13: kernel attack surface.
    SYS_bpf,
    SYS_perf_event_open,
    SYS_userfaultfd,
    SYS_io_uring_setup,
    SYS_io_uring_enter,
    SYS_io_uring_register,
    // S19: privileged leftovers.
    SYS_init_module,
    SYS_finit_module,
    SYS_delete_module,
    SYS_kexec_load,
    SYS_kexec_file_load,
    SYS_open_by_handle_at,
    SYS_name_to_handle_at,
    SYS_iopl,
    SYS_ioperm,
    SYS_acct,
    SYS_swapon,
    SYS_swapoff,
    SYS_reboot,
    // Clocks are global; adjtimex is refused whole rather than by mode.
    SYS_settimeofday,
    SYS_clock_settime,
    SYS_clock_adjtime,
    SYS_adjtimex,
    SYS_syslog,
    SYS_vhangup,
    SYS_quotactl,
    SYS_quotactl_fd,
    SYS_lookup_dcookie,
    SYS_uselib,
    SYS_fanotify_init,
    SYS_nfsservctl,
    // Found in review: reach into other processes of the same uid (init) or
    // widen kernel attack surface, and no ordinary CLI needs them.
    SYS_kcmp,
    SYS_modify_ldt,
    SYS_process_madvise,
    SYS_migrate_pages,
    SYS_move_pages,
];

/// One `CONDITIONAL` entry, named after its `libc::SYS_*` constant.
macro_rules! rule {
    ($name:ident, $conditions:expr, $otherwise:expr $(,)?) => {
        (stringify!($name), libc::$name, $conditions, $otherwise)
    };
}

/// Syscalls answered with ENOSYS, as if the kernel lacked them.
pub const NOT_IMPLEMENTED: &[(&str, i64)] = &syscalls![
    // S6: clone3 hides its flags in a struct the filter cannot read; glibc
    // falls back to clone on ENOSYS, whose flags are checked below.
    SYS_clone3,
];

/// Every `CLONE_NEW*` flag: creating any namespace is refused (S6, S7).
/// On legacy clone the low byte is the exit signal, so CLONE_NEWTIME (0x80)
/// there only refuses exit signals of 128 and above, which name no signal.
pub const CLONE_NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWTIME) as u32;

/// `PER_LINUX`, the default persona (libc does not define it).
pub const PER_LINUX: u32 = 0;
/// `personality(0xffffffff)` only queries the current persona.
pub const PERSONALITY_QUERY: u32 = 0xffff_ffff;

const fn refuse(arg: u8, test: ArgTest) -> Condition {
    Condition::new(arg, test, EPERM)
}

const fn allow(arg: u8, test: ArgTest) -> Condition {
    Condition::new(arg, test, Action::Allow)
}

/// Only these socket families (N49, N53, N54): AF_NETLINK, AF_PACKET,
/// AF_VSOCK and the rest are refused.
const SOCKET_FAMILIES: &[Condition] = &[
    allow(0, ArgTest::Equals(libc::AF_UNIX as u32)),
    allow(0, ArgTest::Equals(libc::AF_INET as u32)),
    allow(0, ArgTest::Equals(libc::AF_INET6 as u32)),
];

/// Syscalls decided by their arguments: `(libc name, number, conditions
/// tried in order, action when none holds)`. Arguments are compared on their
/// low 32 bits only (T2).
pub const CONDITIONAL: &[(&str, i64, &[Condition], Action)] = &[
    // S6, S7: fork and pthread_create keep working; new namespaces do not.
    rule!(
        SYS_clone,
        &[refuse(0, ArgTest::AnyBitsSet(CLONE_NAMESPACE_FLAGS))],
        Action::Allow,
    ),
    // T1, T3: terminal input injection and console selection.
    rule!(
        SYS_ioctl,
        &[
            refuse(1, ArgTest::Equals(libc::TIOCSTI as u32)),
            refuse(1, ArgTest::Equals(libc::TIOCLINUX as u32)),
        ],
        Action::Allow,
    ),
    rule!(SYS_socket, SOCKET_FAMILIES, EPERM),
    rule!(SYS_socketpair, SOCKET_FAMILIES, EPERM),
    // F30: memfds must be sealed non-executable, so no fileless exec.
    rule!(
        SYS_memfd_create,
        &[
            refuse(1, ArgTest::AnyBitsSet(libc::MFD_EXEC)),
            allow(1, ArgTest::AnyBitsSet(libc::MFD_NOEXEC_SEAL)),
        ],
        EPERM,
    ),
    // S15: no READ_IMPLIES_EXEC or ADDR_NO_RANDOMIZE; query and default only.
    rule!(
        SYS_personality,
        &[
            allow(0, ArgTest::Equals(PER_LINUX)),
            allow(0, ArgTest::Equals(PERSONALITY_QUERY)),
        ],
        EPERM,
    ),
    // A process changes or reads only its own limits (pid 0), never another
    // one's: not the sandbox's init (pid 1, same uid, so the kernel would
    // allow it), whose end the program could otherwise provoke and pass
    // off as a lost sandbox. setrlimit and getrlimit go through pid 0.
    rule!(SYS_prlimit64, &[allow(0, ArgTest::Equals(0))], EPERM),
    // S18: rewriting the memory map, choosing a ptracer, securebits.
    rule!(
        SYS_prctl,
        &[
            refuse(0, ArgTest::Equals(libc::PR_SET_MM as u32)),
            refuse(0, ArgTest::Equals(libc::PR_SET_PTRACER as u32)),
            refuse(0, ArgTest::Equals(libc::PR_SET_SECUREBITS as u32)),
        ],
        Action::Allow,
    ),
];

/// The rules of spawnd's default policy, built from the tables above.
pub fn default_rules() -> Vec<SyscallRule> {
    let fixed = |action: Action| {
        move |&(name, nr): &(&'static str, i64)| SyscallRule::always(short(name), nr, action)
    };
    let conditional = CONDITIONAL
        .iter()
        .map(|&(name, nr, conditions, otherwise)| SyscallRule {
            name: short(name),
            nr,
            conditions: conditions.to_vec(),
            otherwise,
        });
    REFUSED
        .iter()
        .map(fixed(EPERM))
        .chain(NOT_IMPLEMENTED.iter().map(fixed(ENOSYS)))
        .chain(conditional)
        .collect()
}

/// `"SYS_ptrace"` → `"ptrace"`.
fn short(libc_name: &'static str) -> &'static str {
    libc_name.strip_prefix("SYS_").unwrap_or(libc_name)
}
