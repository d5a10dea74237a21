//! The aarch64 system call numbers, as data: every native call of the
//! kernel's generic table (`scripts/syscall.tbl`, which arm64 builds with the
//! ABIs `common`, `64`, `renameat`, `rlimit` and `memfd_secret`) up to
//! [`NEWEST`] (Linux 6.19, as for x86_64), taken from the `syscalls` crate's
//! table (`syscalls::aarch64::Sysno`) with [`NEWER_THAN_THE_CRATE`] added.
//! The generic table has no calls that a newer one supersedes: no `open`,
//! `creat`, `chmod`, `mkdir`, `mknod`, `fork`, `pipe`, `poll`, `select`,
//! `dup2`, `stat`, … (libcs use `openat`, `fchmodat`, `mkdirat`, `mknodat`,
//! `clone`, `pipe2`, `ppoll`, `pselect6`, `dup3`, `newfstatat`). Numbers
//! 244–259 (kept for architecture-specific calls, none on arm64) and
//! 295–423 (the 32-bit architectures' time64 calls) are unassigned, and so
//! is 42, whose `nfsservctl` the kernel no longer lists.
//!
//! The crate's aarch64 table is the generic one without the 64-bit
//! selection, so two corrections apply: the numbers in
//! [`NOT_ASSIGNED_ON_ARM64`] are dropped, and 79 is named `newfstatat` (the
//! kernel's name on 64-bit architectures) where the crate says `fstatat`.
//!
//! Names, not numbers, carry the policy (`syscalls.rs`); a name here that no
//! row decides fails the tests. On an aarch64 build the numbers are checked
//! against `libc::SYS_*` wherever libc names the call (`aarch64_tests.rs`).

use std::ops::RangeInclusive;
use std::sync::LazyLock;

use syscalls::aarch64::Sysno;

/// The highest number in [`SYSCALLS`]. Numbers above it get ENOSYS.
pub(crate) const NEWEST: u32 = 470;

/// Calls of the kernel's table up to [`NEWEST`] that the crate's table does
/// not have yet.
pub(crate) const NEWER_THAN_THE_CRATE: &[(u32, &str)] = &[(470, "listns")];

/// Numbers the crate's table assigns that a 64-bit arm64 kernel does not:
/// `nfsservctl` (42) and the 32-bit architectures' time64 calls.
pub(crate) const NOT_ASSIGNED_ON_ARM64: [RangeInclusive<u32>; 2] = [42..=42, 295..=423];

/// `(number, kernel name)` for every assigned native aarch64 syscall, in order.
pub(crate) static SYSCALLS: LazyLock<Vec<(u32, &'static str)>> =
    LazyLock::new(|| super::table_up_to(NEWEST, crate_name, NEWER_THAN_THE_CRATE));

/// The crate's name for aarch64 syscall `nr`, corrected for arm64 (see the
/// module documentation).
fn crate_name(nr: u32) -> Option<&'static str> {
    if NOT_ASSIGNED_ON_ARM64.iter().any(|gap| gap.contains(&nr)) {
        return None;
    }
    match Sysno::new(usize::try_from(nr).ok()?)?.name() {
        "fstatat" => Some("newfstatat"),
        name => Some(name),
    }
}
