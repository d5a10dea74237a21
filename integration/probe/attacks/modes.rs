//! X, S and N: set-id file modes, the newer syscalls a
//! default-deny filter answers, and a unix socket made without
//! `socket(AF_UNIX)`. docs/sandbox.md: a program can never set a
//! set-uid or set-gid bit, so every way to give a file in a writable scope
//! such a mode is tried: chmod, fchmod, fchmodat and fchmodat2 on a file the
//! probe made, and creating with such a mode through open, openat, creat,
//! O_TMPFILE (then linked), mknod and mkdir. Then openat2 (its mode sits in
//! a struct seccomp cannot read), memfd_secret, listmount/statmount, and a
//! datagram socketpair end disconnected to send to a host socket.
//!
//! Every call is made through `syscall(2)` with the number it names, so the
//! libc's choice of wrapper (musl's open is SYS_open, glibc's is SYS_openat)
//! cannot hide one of them. aarch64 has only the `*at` forms (no open, creat,
//! chmod, mknod or mkdir numbers): there the probe makes those calls alone.
//!
//! Host safety: the probe creates only the names it is given (set-id bits on
//! a file of its own uid grant nothing beyond that uid), and leaves them in
//! place: the suite checks their modes from outside, where the set-id bit
//! would matter, and removes them.

use std::ffi::CStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

use libc::{c_long, c_uint, EACCES, ENOSYS, EPERM};

use crate::report::{judge, Args, Findings, UsageError, Verdict};
use crate::sys::{cstring, cvt, owned, Errno};

/// `S_ISUID | S_ISGID`.
const SETID: u32 = libc::S_ISUID | libc::S_ISGID;
/// Refusals of a set-id mode: the filter's EPERM (or a kernel's EACCES).
const SETID_REFUSED: &[i32] = &[EPERM, EACCES];
/// Refusals of a call that seccomp or an older kernel does not offer.
const UNAVAILABLE: &[i32] = &[EPERM, ENOSYS];

/// `__NR_statmount` and `__NR_listmount` (Linux 6.8; libc does not name
/// them). Numbers from 424 on are the same on every architecture:
/// arch/x86/entry/syscalls/syscall_64.tbl and
/// include/uapi/asm-generic/unistd.h (arm64's table) agree.
const SYS_STATMOUNT: c_long = 457;
/// See [`SYS_STATMOUNT`].
const SYS_LISTMOUNT: c_long = 458;
/// `__NR_fchmodat2` (Linux 6.6), 452 in both tables named at
/// [`SYS_STATMOUNT`]; libc names it for x86_64 but not for aarch64 musl.
const SYS_FCHMODAT2: c_long = 452;
#[cfg(target_arch = "x86_64")]
const _: () = assert!(SYS_FCHMODAT2 == libc::SYS_fchmodat2);
/// `LSMT_ROOT`: list the mounts below the caller's root.
const LSMT_ROOT: u64 = u64::MAX;
/// `STATMOUNT_SB_BASIC`: the superblock's device, magic and flags.
const STATMOUNT_SB_BASIC: u64 = 1;
/// `MNT_ID_REQ_SIZE_VER0`: the first `struct mnt_id_req`.
const MNT_ID_REQ_SIZE_VER0: u32 = 24;
/// `STATX_MNT_ID_UNIQUE`: the 64-bit mount id statmount takes (Linux 6.8).
const STATX_MNT_ID_UNIQUE: c_uint = 0x4000;

/// The first version of the kernel's `struct mnt_id_req`.
#[repr(C)]
struct MntIdReq {
    size: u32,
    spare: u32,
    mnt_id: u64,
    param: u64,
}

/// The kernel's `struct open_how` (libc's cannot be built: it is non-exhaustive).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

fn path_of(dir: &str, tag: &str, what: &str) -> String {
    format!("{}/{tag}-{what}", dir.trim_end_matches('/'))
}

fn mode_of_path(path: &str) -> Result<u32, Errno> {
    std::fs::symlink_metadata(path)
        .map(|meta| meta.mode())
        .map_err(Errno::from)
}

/// Notes a call that went through: escaped if the file now has a set-id
/// bit; inconclusive if the kernel dropped the bits (the call was not refused).
fn note_mode(findings: &mut Findings, what: &str, mode: Result<u32, Errno>) {
    match mode {
        Ok(mode) if mode & SETID != 0 => findings.escaped(format!("{what}: mode now {mode:o}")),
        Ok(mode) => findings.unclear(format!(
            "{what}: allowed, the kernel dropped the set-id bits (mode {mode:o})"
        )),
        Err(e) => findings.unclear(format!("{what}: allowed, then stat failed: {e}")),
    }
}

/// Notes one attempt to set or create a set-id mode on `path`.
fn note_attempt(
    findings: &mut Findings,
    what: &str,
    result: Result<i64, Errno>,
    path: &str,
    refusals: &[i32],
) {
    match result {
        Err(e) => findings.check(what, Err(e), refusals),
        Ok(_) => note_mode(findings, what, mode_of_path(path)),
    }
}

/// A call that returned a descriptor: closed at once.
fn closing(ret: c_long) -> Result<i64, Errno> {
    cvt(ret).inspect(|fd| drop(owned(*fd as i32)))
}

/// Makes FILE (0644, replacing an old one) and tries to give it set-id bits.
pub fn setid_chmod(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let path = args.required(0, "FILE")?;
    let c = cstring(path);
    let _ = std::fs::remove_file(path);
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a NUL-terminated path, flags and a mode word.
    let created = cvt(unsafe { libc::syscall(libc::SYS_open, c.as_ptr(), flags, 0o644) });
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: a NUL-terminated path, flags and a mode word.
    let created =
        cvt(unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, c.as_ptr(), flags, 0o644) });
    let file = match created {
        Ok(fd) => File::from(owned(fd as i32)),
        Err(e) => return Ok(Verdict::unclear(format!("creating {path} 0644: {e}"))),
    };
    let fd = file.as_raw_fd();
    let mut findings = Findings::new();
    findings.note(format!("created {path} 0644"));
    // aarch64 has no chmod: its libc's chmod is fchmodat, tried below.
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: a NUL-terminated path and a mode word.
        let ret = unsafe { libc::syscall(libc::SYS_chmod, c.as_ptr(), 0o4755) };
        note_attempt(&mut findings, "chmod(04755)", cvt(ret), path, SETID_REFUSED);
    }
    // SAFETY: the probe's own open descriptor and a mode word.
    let ret = unsafe { libc::syscall(libc::SYS_fchmod, fd, 0o2755) };
    note_attempt(
        &mut findings,
        "fchmod(02755)",
        cvt(ret),
        path,
        SETID_REFUSED,
    );
    // SAFETY: a NUL-terminated path and plain integers.
    let ret = unsafe { libc::syscall(libc::SYS_fchmodat, libc::AT_FDCWD, c.as_ptr(), 0o6755) };
    note_attempt(
        &mut findings,
        "fchmodat(06755)",
        cvt(ret),
        path,
        SETID_REFUSED,
    );
    // SAFETY: a NUL-terminated path and plain integers.
    let ret = unsafe { libc::syscall(SYS_FCHMODAT2, libc::AT_FDCWD, c.as_ptr(), 0o4755, 0) };
    // ENOSYS: a kernel before 6.6 has no fchmodat2.
    let refusals = &[EPERM, EACCES, ENOSYS];
    note_attempt(&mut findings, "fchmodat2(04755)", cvt(ret), path, refusals);
    Ok(findings.verdict())
}

/// The calls that create a named file or directory with a set-id mode.
#[cfg(target_arch = "x86_64")]
const CREATING_CALLS: &[&str] = &[
    "open", "openat", "creat", "mknod", "mknodat", "mkdir", "mkdirat",
];
/// The calls that create a named file or directory with a set-id mode.
#[cfg(not(target_arch = "x86_64"))]
const CREATING_CALLS: &[&str] = &["openat", "mknodat", "mkdirat"];

/// `call` creating `path` with a set-id mode; a descriptor it returns is closed.
fn create_setid(call: &str, path: &CStr) -> Result<i64, Errno> {
    let create = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
    let regular = libc::S_IFREG;
    let p = path.as_ptr();
    let at = libc::AT_FDCWD;
    // Every arm passes a NUL-terminated path and plain integers.
    let ret = match call {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as said above the match.
        "open" => unsafe { libc::syscall(libc::SYS_open, p, create, 0o4755) },
        // SAFETY: as said above the match.
        "openat" => unsafe { libc::syscall(libc::SYS_openat, at, p, create, 0o2755) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as said above the match.
        "creat" => unsafe { libc::syscall(libc::SYS_creat, p, 0o4755) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as said above the match.
        "mknod" => unsafe { libc::syscall(libc::SYS_mknod, p, regular | 0o4755, 0) },
        // SAFETY: as said above the match.
        "mknodat" => unsafe { libc::syscall(libc::SYS_mknodat, at, p, regular | 0o2755, 0) },
        // The kernel itself drops set-id bits from mkdir's mode; the filter
        // refuses the request all the same.
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as said above the match.
        "mkdir" => unsafe { libc::syscall(libc::SYS_mkdir, p, 0o2755) },
        // SAFETY: as said above the match.
        "mkdirat" => unsafe { libc::syscall(libc::SYS_mkdirat, at, p, 0o6755) },
        _ => return Err(Errno(libc::EINVAL)),
    };
    if call.starts_with("mk") {
        cvt(ret)
    } else {
        closing(ret)
    }
}

/// Creates DIR/TAG-<call> with set-id modes in every way a program can.
pub fn setid_create(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(2)?;
    let dir = args.required(0, "DIR")?;
    let tag = args.required(1, "TAG")?;
    let mut findings = Findings::new();
    for call in CREATING_CALLS {
        let path = path_of(dir, tag, call);
        let result = create_setid(call, &cstring(&path));
        note_attempt(
            &mut findings,
            &format!("{call}({path})"),
            result,
            &path,
            SETID_REFUSED,
        );
    }
    tmpfile_then_link(&mut findings, dir, &path_of(dir, tag, "tmpfile"));
    Ok(findings.verdict())
}

/// An unnamed O_TMPFILE file with mode 04755 in DIR, then linked to `name`
/// through /proc/self/fd (the unprivileged way to name it).
fn tmpfile_then_link(findings: &mut Findings, dir: &str, name: &str) {
    let what = format!("openat({dir}, O_TMPFILE, 04755)");
    let c_dir = cstring(dir);
    // SAFETY: a NUL-terminated path and plain integers.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            c_dir.as_ptr(),
            libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC,
            0o4755,
        )
    };
    let file = match cvt(ret) {
        Ok(fd) => File::from(owned(fd as i32)),
        Err(e) => return findings.check(&what, Err(e), SETID_REFUSED),
    };
    let proc_path = cstring(&format!("/proc/self/fd/{}", file.as_raw_fd()));
    let c_name = cstring(name);
    // SAFETY: two NUL-terminated paths and plain integers.
    let linked = cvt(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc_path.as_ptr(),
            libc::AT_FDCWD,
            c_name.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    });
    if let Err(e) = linked {
        findings.note(format!("linking it to {name}: {e}"));
    }
    let mode = file.metadata().map(|meta| meta.mode()).map_err(Errno::from);
    note_mode(findings, &what, mode);
}

/// openat2 creating DIR/TAG-openat2 with mode 04755: blocked only on ENOSYS,
/// the filter's answer (libcs and tools then fall back to openat).
pub fn openat2_create(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(2)?;
    let path = path_of(
        args.required(0, "DIR")?,
        args.required(1, "TAG")?,
        "openat2",
    );
    let c = cstring(&path);
    let how = OpenHow {
        flags: (libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC) as u64,
        mode: 0o4755,
        resolve: 0,
    };
    // SAFETY: a NUL-terminated path and a `struct open_how` of the size passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    let result = closing(ret).map(|fd| match mode_of_path(&path) {
        Ok(mode) => format!("fd {fd} (closed), mode {mode:o}"),
        Err(e) => format!("fd {fd} (closed), stat: {e}"),
    });
    Ok(judge(
        &format!("openat2({path}, O_CREAT, 04755)"),
        result,
        &[ENOSYS],
    ))
}

/// memfd_secret(O_CLOEXEC): memory the kernel itself stops mapping.
pub fn memfd_secret(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    // SAFETY: a flag word.
    let ret = unsafe { libc::syscall(libc::SYS_memfd_secret, libc::O_CLOEXEC) };
    let result = closing(ret).map(|fd| format!("fd {fd} (closed)"));
    Ok(judge("memfd_secret(O_CLOEXEC)", result, UNAVAILABLE))
}

/// listmount of the mounts below its root, and statmount of its root mount.
pub fn listmount_statmount(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let mut findings = Findings::new();
    let list = MntIdReq {
        size: MNT_ID_REQ_SIZE_VER0,
        spare: 0,
        mnt_id: LSMT_ROOT,
        param: 0,
    };
    let mut ids = [0u64; 64];
    // SAFETY: a request of the size it declares and a buffer of `ids.len()` ids.
    let listed = cvt(unsafe {
        libc::syscall(
            SYS_LISTMOUNT,
            &list as *const MntIdReq,
            ids.as_mut_ptr(),
            ids.len(),
            0,
        )
    });
    findings.check(
        "listmount(LSMT_ROOT)",
        listed.map(|n| format!("{n} mount ids")),
        UNAVAILABLE,
    );
    let stat = MntIdReq {
        size: MNT_ID_REQ_SIZE_VER0,
        spare: 0,
        mnt_id: root_mount_id(),
        param: STATMOUNT_SB_BASIC,
    };
    // u64s so the buffer is aligned for `struct statmount`.
    let mut buf = [0u64; 512];
    // SAFETY: a request of the size it declares and a buffer of the size passed.
    let stated = cvt(unsafe {
        libc::syscall(
            SYS_STATMOUNT,
            &stat as *const MntIdReq,
            buf.as_mut_ptr(),
            std::mem::size_of_val(&buf),
            0,
        )
    });
    findings.check(
        &format!("statmount({})", stat.mnt_id),
        stated.map(|_| "answered".to_string()),
        UNAVAILABLE,
    );
    Ok(findings.verdict())
}

/// The unique id of the mount at "/" (0 when statx cannot say).
fn root_mount_id() -> u64 {
    // SAFETY: statx is plain data; all zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a writable `struct statx`.
    let ret = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c"/".as_ptr(),
            0,
            STATX_MNT_ID_UNIQUE,
            &mut stx,
        )
    };
    if ret == 0 {
        stx.stx_mnt_id
    } else {
        0
    }
}

/// A datagram socketpair end, disconnected with `connect(AF_UNSPEC)`, sends
/// one datagram to the unix socket PATH: the way to a host datagram service
/// (a syslog or journal socket) without `socket(AF_UNIX)`.
pub fn unix_dgram_pair_sendto(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let path = args.required(0, "PATH")?;
    let mut findings = Findings::new();
    let mut pair = [-1; 2];
    // SAFETY: plain integers and a writable array of two descriptors.
    let made = cvt(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
            pair.as_mut_ptr(),
        )
    });
    if let Err(e) = made {
        findings.check("socketpair(AF_UNIX, SOCK_DGRAM)", Err(e), &[EPERM, EACCES]);
        return Ok(findings.verdict());
    }
    let (end, _other) = (owned(pair[0]), owned(pair[1]));
    // SAFETY: sockaddr is plain data; all zero is AF_UNSPEC.
    let unspec: libc::sockaddr = unsafe { std::mem::zeroed() };
    let len = std::mem::size_of::<libc::sockaddr>() as libc::socklen_t;
    // SAFETY: the probe's own socket and a sockaddr of the length passed.
    let disconnected = cvt(unsafe { libc::connect(end.as_raw_fd(), &unspec, len) });
    if let Err(e) = disconnected {
        findings.note(format!("connect(AF_UNSPEC): {e}"));
    }
    let target = match std::os::unix::net::SocketAddr::from_pathname(path) {
        Ok(target) => target,
        Err(e) => return Ok(Verdict::unclear(format!("{path}: {e}"))),
    };
    let socket = std::os::unix::net::UnixDatagram::from(end);
    let sent = socket
        .send_to_addr(b"spawnd-probe", &target)
        .map(|n| format!("{n} bytes sent"))
        .map_err(Errno::from);
    findings.check(
        &format!("sendto(unix:{path})"),
        sent,
        &[
            libc::ENOENT,
            EACCES,
            EPERM,
            libc::ECONNREFUSED,
            libc::ENOTDIR,
        ],
    );
    Ok(findings.verdict())
}
