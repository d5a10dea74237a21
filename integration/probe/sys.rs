//! Thin helpers over libc shared by the attacks: errno values with names,
//! return-value conversion, opening paths, and reading `/proc` facts
//! (credentials, capabilities, namespaces). Raw system calls that only one
//! attack makes live beside that attack, each with its own `// SAFETY:` note.

use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use crate::consts::{errno_name, CAP_SYS_ADMIN, INITIAL_UID_MAP};

/// An errno value; displays as its name (`EACCES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    /// The calling thread's current errno.
    pub fn last() -> Self {
        Errno(
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }

    /// Whether this is one of `set`.
    pub fn is_one_of(self, set: &[i32]) -> bool {
        set.contains(&self.0)
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match errno_name(self.0) {
            Some(name) => f.write_str(name),
            None => write!(f, "errno {}", self.0),
        }
    }
}

impl From<io::Error> for Errno {
    fn from(error: io::Error) -> Self {
        match (error.raw_os_error(), error.kind()) {
            (Some(code), _) => Errno(code),
            (None, io::ErrorKind::TimedOut) => Errno(libc::ETIMEDOUT),
            (None, _) => Errno(libc::EIO),
        }
    }
}

/// Converts a C return value: -1 means failure with errno.
pub fn cvt<T: Into<i64>>(ret: T) -> Result<i64, Errno> {
    let ret = ret.into();
    if ret == -1 {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}

/// A path as a C string. Command-line arguments cannot hold NUL bytes, and
/// every other path is a constant, so the empty fallback is never used (an
/// empty path would only make the call fail with ENOENT).
pub fn cstring(text: &str) -> CString {
    CString::new(text).unwrap_or_default()
}

/// `open(2)`, always with `O_CLOEXEC` (mode 0600 when creating).
pub fn open(path: &str, flags: i32) -> Result<OwnedFd, Errno> {
    open_mode(path, flags, 0o600)
}

/// `open(2)` with an explicit creation mode, always with `O_CLOEXEC`.
pub fn open_mode(path: &str, flags: i32, mode: u32) -> Result<OwnedFd, Errno> {
    let cpath = cstring(path);
    // SAFETY: `cpath` is a valid NUL-terminated string; the mode argument is
    // read only with O_CREAT and is a plain integer.
    let fd = unsafe {
        libc::open(
            cpath.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    cvt(fd).map(|fd| owned(fd as RawFd))
}

/// Takes ownership of a descriptor a successful system call just returned.
pub fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: callers pass a descriptor the kernel has just created for this
    // process and that nothing else owns; OwnedFd closes it exactly once.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Reads a whole (small) file.
pub fn read_file(path: &str) -> Result<String, Errno> {
    std::fs::read(path)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .map_err(Errno::from)
}

/// `getpid(2)`.
pub fn getpid() -> i32 {
    // SAFETY: getpid has no preconditions and cannot fail.
    unsafe { libc::getpid() }
}

/// `geteuid(2)`.
pub fn geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Numeric entries of `/proc`: the pids this process can see.
pub fn visible_pids() -> Result<Vec<i32>, Errno> {
    let mut pids: Vec<i32> = std::fs::read_dir("/proc")?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    Ok(pids)
}

/// The fields of `/proc/<pid>/status` the attacks judge by.
#[derive(Debug, Default, Clone)]
pub struct ProcStatus {
    /// Real, effective, saved and filesystem uid.
    pub uids: Vec<u32>,
    /// Real, effective, saved and filesystem gid.
    pub gids: Vec<u32>,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// `CapInh`, `CapPrm`, `CapEff`, `CapBnd`, `CapAmb` with their values.
    pub caps: Vec<(String, u64)>,
    /// `NoNewPrivs`.
    pub no_new_privs: Option<u32>,
    /// `Seccomp` mode (2 = filter).
    pub seccomp: Option<u32>,
}

impl ProcStatus {
    /// Reads `/proc/<who>/status` (`who` is a pid or `self`).
    pub fn read(who: &str) -> Result<Self, Errno> {
        read_file(&format!("/proc/{who}/status")).map(|text| Self::parse(&text))
    }

    /// Parses the text of a status file.
    pub fn parse(text: &str) -> Self {
        let mut status = ProcStatus::default();
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            let numbers = || {
                value
                    .split_whitespace()
                    .filter_map(|n| n.parse().ok())
                    .collect()
            };
            match key {
                "Uid" => status.uids = numbers(),
                "Gid" => status.gids = numbers(),
                "Groups" => status.groups = numbers(),
                "NoNewPrivs" => status.no_new_privs = value.parse().ok(),
                "Seccomp" => status.seccomp = value.parse().ok(),
                k if k.starts_with("Cap") => {
                    if let Ok(bits) = u64::from_str_radix(value, 16) {
                        status.caps.push((k.to_string(), bits));
                    }
                }
                _ => {}
            }
        }
        status
    }

    /// The value of one capability set, e.g. `CapEff`.
    pub fn cap(&self, name: &str) -> Option<u64> {
        self.caps.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }

    /// Effective uid.
    pub fn euid(&self) -> Option<u32> {
        self.uids.get(1).copied()
    }
}

/// Whether this process runs in the initial user namespace and holds
/// `CAP_SYS_ADMIN` there: the one situation where a mount-namespace attack
/// would act on the host itself, so it must happen in a private copy.
pub fn holds_host_sys_admin() -> bool {
    let initial = read_file("/proc/self/uid_map")
        .map(|map| map.split_whitespace().collect::<Vec<_>>().join(" ") == INITIAL_UID_MAP)
        // Unknown: assume the worst, so nothing destructive runs.
        .unwrap_or(true);
    let sys_admin = ProcStatus::read("self")
        .ok()
        .and_then(|status| status.cap("CapEff"))
        .map(|eff| eff & (1 << CAP_SYS_ADMIN) != 0)
        .unwrap_or(true);
    initial && sys_admin
}

/// Formats a byte count for details.
pub fn mib(bytes: u64) -> String {
    format!(
        "{bytes} bytes ({:.1} MiB)",
        bytes as f64 / (1024.0 * 1024.0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_are_parsed() {
        let text = "Name:\tx\nUid:\t1000\t0\t0\t0\nGid:\t5\t5\t5\t5\nGroups:\t4 24\n\
                    NoNewPrivs:\t1\nSeccomp:\t2\nCapEff:\t0000000000000000\nCapBnd:\t000001ffffffffff\n";
        let status = ProcStatus::parse(text);
        assert_eq!(status.uids, vec![1000, 0, 0, 0]);
        assert_eq!(status.euid(), Some(0));
        assert_eq!(status.groups, vec![4, 24]);
        assert_eq!(status.no_new_privs, Some(1));
        assert_eq!(status.seccomp, Some(2));
        assert_eq!(status.cap("CapEff"), Some(0));
        assert_eq!(status.cap("CapBnd"), Some(0x1ff_ffff_ffff));
        assert_eq!(status.cap("CapAmb"), None);
    }

    #[test]
    fn errnos_display_by_name() {
        assert_eq!(Errno(libc::ENOSYS).to_string(), "ENOSYS");
        assert_eq!(Errno(4095).to_string(), "errno 4095");
    }
}
