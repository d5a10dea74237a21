//! The kernel keyring: reading a `user` key for `keyring:` credentials.

use std::ffi::CStr;
use std::io;

use super::last_error;

/// Reads the `user` key `description` from the calling process's keyrings
/// (`request_key` searches the thread, process, session and user keyrings)
/// into wiped memory.
pub(crate) fn read_user_key(description: &CStr) -> io::Result<zeroize::Zeroizing<Vec<u8>>> {
    const KEYCTL_READ: libc::c_long = 11;
    // SAFETY: two valid NUL-terminated strings, no callout, no destination keyring.
    let serial = unsafe {
        libc::syscall(
            libc::SYS_request_key,
            c"user".as_ptr(),
            description.as_ptr(),
            std::ptr::null::<libc::c_char>(),
            0 as libc::c_long,
        )
    };
    if serial < 0 {
        return Err(last_error("request_key"));
    }
    let mut buf = zeroize::Zeroizing::new(vec![0u8; 256]);
    loop {
        // SAFETY: `buf` is a valid, writable buffer of `buf.len()` bytes; the
        // kernel writes at most that many and returns the key's full length.
        let len = unsafe {
            libc::syscall(
                libc::SYS_keyctl,
                KEYCTL_READ,
                serial,
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        if len < 0 {
            return Err(last_error("keyctl(KEYCTL_READ)"));
        }
        let len = len as usize;
        if len <= buf.len() {
            buf.truncate(len);
            return Ok(buf);
        }
        zeroize::Zeroize::zeroize(&mut *buf);
        buf.resize(len, 0);
    }
}

/// Adds a `user` key to the user keyring (tests of `keyring:` sources).
#[cfg(test)]
pub(crate) fn add_user_key(description: &CStr, value: &[u8]) -> io::Result<()> {
    const KEY_SPEC_USER_KEYRING: libc::c_long = -4;
    // SAFETY: valid NUL-terminated strings and a payload of `value.len()` bytes.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_add_key,
            c"user".as_ptr(),
            description.as_ptr(),
            value.as_ptr(),
            value.len(),
            KEY_SPEC_USER_KEYRING,
        )
    };
    if ret < 0 {
        return Err(last_error("add_key"));
    }
    Ok(())
}
