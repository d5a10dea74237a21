//! The x86_64 system call numbers, as data: every native (`common` or `64`)
//! call of the kernel's `arch/x86/entry/syscalls/syscall_64.tbl` up to
//! [`NEWEST`] (Linux 6.19), taken from the `syscalls` crate's table
//! (`syscalls::x86_64::Sysno`, generated from the kernel's) with
//! [`NEWER_THAN_THE_CRATE`] added. The crate leaves out the x32-only entries
//! 512–547: a native call to them gets ENOSYS from the kernel, and with the
//! x32 bit the filter kills it. Numbers 337–423 are unassigned on x86_64
//! (kept free for the 32-bit architectures' time64 calls).
//!
//! Names, not numbers, carry the policy (`syscalls.rs`); `aarch64.rs` is the
//! same kind of table for aarch64. A call the crate adds past [`NEWEST`] is
//! left out (it gets ENOSYS) until `syscalls.rs` decides it and [`NEWEST`]
//! moves. On an x86_64 build the numbers are checked against `libc::SYS_*`
//! wherever libc names the call (`x86_64_tests.rs`).

use std::sync::LazyLock;

use syscalls::x86_64::Sysno;

/// The highest number in [`SYSCALLS`]. Numbers above it get ENOSYS.
pub(crate) const NEWEST: u32 = 470;

/// Calls of the kernel's table up to [`NEWEST`] that the crate's table does
/// not have yet.
pub(crate) const NEWER_THAN_THE_CRATE: &[(u32, &str)] = &[(470, "listns")];

/// `(number, kernel name)` for every assigned native x86_64 syscall, in order.
pub(crate) static SYSCALLS: LazyLock<Vec<(u32, &'static str)>> =
    LazyLock::new(|| super::table_up_to(NEWEST, crate_name, NEWER_THAN_THE_CRATE));

/// The crate's name for x86_64 syscall `nr`, if it numbers one.
fn crate_name(nr: u32) -> Option<&'static str> {
    Some(Sysno::new(usize::try_from(nr).ok()?)?.name())
}
