//! The only file with `unsafe`: thin wrappers over system calls that neither
//! `nix` nor `landlock` expose, each returning `io::Result` and naming the call.
#![allow(unsafe_code)]

use std::io;

/// `LANDLOCK_CREATE_RULESET_VERSION` from `<linux/landlock.h>`.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1 << 0;

/// The Landlock ABI version the running kernel offers (0 when Landlock is
/// compiled out or disabled at boot: `EOPNOTSUPP`/`ENOSYS`).
pub fn landlock_abi_version() -> io::Result<u32> {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    // is the documented version query: with a null attribute pointer and size 0
    // the kernel reads no memory and returns the ABI number or -1 with errno.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if ret >= 0 {
        return u32::try_from(ret)
            .map_err(|_| io::Error::other("landlock_create_ruleset: ABI out of range"));
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(0),
        _ => Err(io::Error::new(
            err.kind(),
            format!("landlock_create_ruleset(NULL, 0, VERSION): {err}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_landlock_version_query_answers_without_error() {
        let v = landlock_abi_version().expect("landlock_create_ruleset version query");
        assert!(v <= 64, "implausible ABI {v}");
    }
}
