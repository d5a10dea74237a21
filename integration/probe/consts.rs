//! Kernel ABI numbers the probe needs that the `libc` crate does not name, plus
//! the few policy numbers the attacks judge by. Data only: no calls.

use libc::{c_int, c_long, c_uint, c_ulong};

/// Bit that marks an x32-ABI system call number on x86_64.
#[cfg(target_arch = "x86_64")]
pub const X32_SYSCALL_BIT: c_long = 0x4000_0000;
/// `getpid` in the i386 system call table (reached through `int 0x80`).
#[cfg(target_arch = "x86_64")]
pub const I386_GETPID: i32 = 20;

/// `TIOCLINUX` subcode that only reads the keyboard shift state.
pub const TIOCL_GETSHIFTSTATE: u8 = 6;

/// `userfaultfd(2)` flag: only handle faults from user space.
pub const UFFD_USER_MODE_ONLY: c_int = 1;
/// `fsopen(2)` flag.
pub const FSOPEN_CLOEXEC: c_uint = 1;
/// `open_tree(2)` flag (same value as `O_CLOEXEC`).
pub const OPEN_TREE_CLOEXEC: c_uint = libc::O_CLOEXEC as c_uint;

/// `keyctl(2)` operations and special keyring ids.
pub const KEYCTL_GET_KEYRING_ID: c_long = 0;
/// Invalidates a key at once.
pub const KEYCTL_INVALIDATE: c_long = 21;
/// The calling process's own keyring (freed when the process exits).
pub const KEY_SPEC_PROCESS_KEYRING: c_long = -2;
/// The session keyring.
pub const KEY_SPEC_SESSION_KEYRING: c_long = -3;
/// The per-uid user keyring (shared by every process of that uid host-wide).
pub const KEY_SPEC_USER_KEYRING: c_long = -4;

/// `kexec_load(2)` refuses more segments than this with EINVAL, after its
/// privilege checks: asking for one more never loads anything.
pub const KEXEC_SEGMENT_MAX: c_ulong = 16;

/// `bpf(2)` command and program type.
pub const BPF_PROG_LOAD: c_long = 5;
/// The simplest program type (socket filter).
pub const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;

/// `perf_event_open(2)`: software event type, task clock, first attr size.
pub const PERF_TYPE_SOFTWARE: u32 = 1;
/// Counts time the task runs: needs no hardware PMU.
pub const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
/// `sizeof(struct perf_event_attr)` in its first version.
pub const PERF_ATTR_SIZE_VER0: u32 = 64;
/// `perf_event_open(2)` flag.
pub const PERF_FLAG_FD_CLOEXEC: c_ulong = 8;
/// `perf_event_attr` bits: disabled, exclude_kernel, exclude_hv.
pub const PERF_ATTR_FLAGS_USER_ONLY_DISABLED: u64 = 1 | (1 << 5) | (1 << 6);

/// `reboot(2)` magic numbers and the two harmless commands.
pub const LINUX_REBOOT_MAGIC1: c_long = 0xfee1_dead;
/// Second magic number.
pub const LINUX_REBOOT_MAGIC2: c_long = 672_274_793;
/// Ctrl-Alt-Del sends SIGINT to init instead of rebooting.
pub const LINUX_REBOOT_CMD_CAD_OFF: c_long = 0;
/// Ctrl-Alt-Del reboots at once.
pub const LINUX_REBOOT_CMD_CAD_ON: c_long = 0x89ab_cdef;

/// `CAP_SYS_ADMIN` bit number.
pub const CAP_SYS_ADMIN: u32 = 21;
/// `/proc/self/uid_map` of the initial user namespace.
pub const INITIAL_UID_MAP: &str = "0 0 4294967295";

/// A sandbox's own /proc should show only its few processes (an init helper,
/// the probe, a child or two); more than this means the host's pids show.
pub const MAX_SANDBOX_PIDS: usize = 4;

/// What a minimal sandbox /dev may hold.
pub const SANDBOX_DEV_ENTRIES: &[&str] = &[
    "null", "zero", "full", "random", "urandom", "shm", "fd", "stdin", "stdout", "stderr", "pts",
    "ptmx", "tty",
];

/// External addresses the egress attack dials (Cloudflare DNS over TCP 443).
pub const EXTERNAL_TARGETS: &[&str] = &["1.1.1.1:443", "[2606:4700::1111]:443"];

/// Where the privilege attacks point path arguments that must never exist,
/// so that passing the privilege check ends in ENOENT and changes nothing.
pub const NONEXISTENT_PATH: &str = "/nonexistent-spawnd-probe/target";

/// Upper bounds for the resource attacks.
pub const FORK_BOMB_DEFAULT_MAX: u64 = 10_000;
/// Default cap for disk-fill: 2 GiB.
pub const DISK_FILL_DEFAULT_MAX: u64 = 2 << 30;
/// Default duration of cpu-spin and ignore-sigterm, in seconds.
pub const LONG_RUN_DEFAULT_SECS: u64 = 600;
/// How long the daemonized grandchild lives, in seconds.
pub const DAEMON_SLEEP_SECS: u64 = 300;
/// How long a program the probe executes may run before it is killed.
pub const CHILD_DEADLINE_SECS: u64 = 10;

/// The symbolic name of an errno value, for details like `open(/x): EACCES`.
pub fn errno_name(errno: i32) -> Option<&'static str> {
    use libc::*;
    Some(match errno {
        EPERM => "EPERM",
        ENOENT => "ENOENT",
        ESRCH => "ESRCH",
        EINTR => "EINTR",
        EIO => "EIO",
        ENXIO => "ENXIO",
        E2BIG => "E2BIG",
        ENOEXEC => "ENOEXEC",
        EBADF => "EBADF",
        ECHILD => "ECHILD",
        EAGAIN => "EAGAIN",
        ENOMEM => "ENOMEM",
        EACCES => "EACCES",
        EFAULT => "EFAULT",
        EBUSY => "EBUSY",
        EEXIST => "EEXIST",
        EXDEV => "EXDEV",
        ENODEV => "ENODEV",
        ENOTDIR => "ENOTDIR",
        EISDIR => "EISDIR",
        EINVAL => "EINVAL",
        ENFILE => "ENFILE",
        EMFILE => "EMFILE",
        ENOTTY => "ENOTTY",
        ETXTBSY => "ETXTBSY",
        EFBIG => "EFBIG",
        ENOSPC => "ENOSPC",
        EROFS => "EROFS",
        EMLINK => "EMLINK",
        EPIPE => "EPIPE",
        ENOSYS => "ENOSYS",
        ELOOP => "ELOOP",
        EIDRM => "EIDRM",
        ENOKEY => "ENOKEY",
        EUSERS => "EUSERS",
        ENOTSOCK => "ENOTSOCK",
        EPROTONOSUPPORT => "EPROTONOSUPPORT",
        EOPNOTSUPP => "EOPNOTSUPP",
        EAFNOSUPPORT => "EAFNOSUPPORT",
        EADDRINUSE => "EADDRINUSE",
        EADDRNOTAVAIL => "EADDRNOTAVAIL",
        ENETUNREACH => "ENETUNREACH",
        ECONNRESET => "ECONNRESET",
        ENOTCONN => "ENOTCONN",
        ETIMEDOUT => "ETIMEDOUT",
        ECONNREFUSED => "ECONNREFUSED",
        EHOSTUNREACH => "EHOSTUNREACH",
        ESTALE => "ESTALE",
        EDQUOT => "EDQUOT",
        _ => return None,
    })
}
