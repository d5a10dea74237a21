//! The kernel's confinement calls the sandbox's init makes on itself: the
//! Landlock ABI query, installing a seccomp filter, emptying the capability
//! sets, and bringing the new network namespace's loopback up.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use super::last_error;

/// `LANDLOCK_CREATE_RULESET_VERSION` from `<linux/landlock.h>`.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1 << 0;

/// The Landlock ABI version the running kernel offers (0 when Landlock is
/// compiled out or disabled at boot: `EOPNOTSUPP`/`ENOSYS`).
pub(crate) fn landlock_abi_version() -> io::Result<u32> {
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

/// One classic BPF instruction (built by the sandbox's seccomp compiler), laid out as the kernel's `struct sock_filter`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SockFilter {
    /// Opcode: class, size/operation and source bits.
    pub code: u16,
    /// Instructions to skip when a conditional jump's test holds.
    pub jt: u8,
    /// Instructions to skip when it does not.
    pub jf: u8,
    /// The constant operand (offset, value, or `ja`'s 32-bit skip).
    pub k: u32,
}

/// Installs a seccomp filter on the calling thread (`seccomp(SECCOMP_SET_MODE_FILTER)`).
/// No-new-privileges must already be set.
pub fn install_seccomp_filter_on_current_thread(program: &[SockFilter]) -> io::Result<()> {
    set_mode_filter(program, 0).map(drop)
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, flags, program)`: the call's
/// non-negative return (a listener's descriptor with
/// `SECCOMP_FILTER_FLAG_NEW_LISTENER`, else 0).
pub(super) fn set_mode_filter(program: &[SockFilter], flags: libc::c_uint) -> io::Result<i64> {
    #[repr(C)]
    struct SockFprog {
        len: libc::c_ushort,
        filter: *const SockFilter,
    }
    let len = libc::c_ushort::try_from(program.len())
        .map_err(|_| io::Error::other("seccomp: filter too long"))?;
    let prog = SockFprog {
        len,
        filter: program.as_ptr(),
    };
    // SAFETY: `prog` points at `len` valid `sock_filter` instructions that stay
    // alive for the whole call; the kernel copies the program before returning.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &prog as *const SockFprog,
        )
    };
    if ret < 0 {
        return Err(last_error(&format!(
            "seccomp(SET_MODE_FILTER, {} instructions)",
            program.len()
        )));
    }
    Ok(ret)
}

/// Empties the effective, permitted and inheritable capability sets (`capset`).
pub(crate) fn clear_capabilities() -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: version 3 capset takes a header and an array of two data
    // structs, both valid and correctly laid out for the duration of the call.
    let ret = unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) };
    if ret < 0 {
        return Err(last_error("capset(all empty)"));
    }
    Ok(())
}

/// Drops capability `cap` from the bounding set.
pub(crate) fn drop_bounding_capability(cap: u32) -> io::Result<()> {
    // SAFETY: prctl(PR_CAPBSET_DROP, cap) takes plain integers.
    let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) };
    if ret < 0 {
        return Err(last_error(&format!("prctl(PR_CAPBSET_DROP, {cap})")));
    }
    Ok(())
}

/// Clears the ambient capability set.
pub(crate) fn clear_ambient_capabilities() -> io::Result<()> {
    // SAFETY: prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL) takes plain integers.
    let ret = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if ret < 0 {
        return Err(last_error("prctl(PR_CAP_AMBIENT_CLEAR_ALL)"));
    }
    Ok(())
}

/// Brings the loopback interface of the current network namespace up.
pub(crate) fn set_loopback_up() -> io::Result<()> {
    let sock =
        std::net::UdpSocket::bind("0.0.0.0:0").or_else(|_| std::net::UdpSocket::bind("[::]:0"));
    let sock = match sock {
        Ok(s) => s,
        // A socket needs an address family that works without lo: fall back to AF_UNIX.
        Err(_) => return set_loopback_up_via_unix(),
    };
    ifflags_up(sock.as_raw_fd())
}

fn set_loopback_up_via_unix() -> io::Result<()> {
    let (a, _b) = std::os::unix::net::UnixDatagram::pair()
        .map_err(|e| io::Error::new(e.kind(), format!("socketpair(AF_UNIX): {e}")))?;
    ifflags_up(a.as_raw_fd())
}

fn ifflags_up(fd: RawFd) -> io::Result<()> {
    // SAFETY: `ifreq` is plain old data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the name from and writes the flags into `req`,
    // a valid, exclusively borrowed ifreq.
    if unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut req) } < 0 {
        return Err(last_error("ioctl(SIOCGIFFLAGS, lo)"));
    }
    // SAFETY: the union member ifru_flags is the one SIOCGIFFLAGS filled in.
    unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads the name and flags from `req`.
    if unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &req) } < 0 {
        return Err(last_error("ioctl(SIOCSIFFLAGS, lo up)"));
    }
    Ok(())
}
