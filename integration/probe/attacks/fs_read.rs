//! F: what the sandbox can see: host files and
//! directories, host pids and roots through /proc, inherited descriptors,
//! /dev and /sys. Nothing here writes.

use std::ffi::CStr;
use std::io::Read;
use std::os::fd::AsRawFd;

use libc::{EACCES, ENOENT, ENOTDIR, EPERM, EROFS, ETXTBSY};

use crate::consts::{MAX_SANDBOX_PIDS, SANDBOX_DEV_ENTRIES};
use crate::report::{Args, Findings, UsageError, Verdict};
use crate::sys::{self, Errno};

/// Refusals of opening a path: denied, or not there (must not be visible).
const HIDDEN: &[i32] = &[EACCES, EPERM, ENOENT, ENOTDIR, libc::ELOOP, libc::ENXIO];

/// Opens `path` read-only and reads one byte.
fn open_and_read(what: &str, path: &str) -> Verdict {
    let mut findings = Findings::new();
    match sys::open(path, libc::O_RDONLY) {
        Ok(fd) => {
            let mut byte = [0u8; 1];
            let read = std::fs::File::from(fd).read(&mut byte).map_err(Errno::from);
            findings.escaped(format!(
                "{what}: open = ok, read 1 byte = {:?}",
                read.map_err(|e| e.to_string())
            ));
        }
        Err(e) => findings.check(what, Err(e), HIDDEN),
    }
    findings.verdict()
}

/// Reads a host file.
pub fn read_host_file(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let path = args.required(0, "PATH")?;
    Ok(open_and_read(&format!("open({path})"), path))
}

/// Reads a file through pid 1's root (or PID's, for a control run on a host
/// whose pid 1 is protected).
pub fn proc_1_root(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(2)?;
    let file = args.required(0, "PATH")?.trim_start_matches('/');
    let pid: u32 = args.parsed_or(1, "PID", 1)?;
    let path = format!("/proc/{pid}/root/{file}");
    Ok(open_and_read(&format!("open({path})"), &path))
}

/// Up to `limit` entry names of a directory, and the total count.
fn list(path: &str, limit: usize) -> Result<(usize, Vec<String>), Errno> {
    let mut names = Vec::new();
    let mut count = 0;
    for entry in std::fs::read_dir(path)? {
        count += 1;
        if names.len() < limit {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
    }
    Ok((count, names))
}

/// Notes whether directory `path` lists anything.
fn check_listing(findings: &mut Findings, path: &str) {
    match list(path, 10) {
        Ok((0, _)) => findings.refused(format!("{path}: empty")),
        Ok((count, names)) => findings.escaped(format!("{path}: {count} entries, e.g. {names:?}")),
        Err(e) => findings.check(&format!("read_dir({path})"), Err(e), HIDDEN),
    }
}

/// Lists a host directory.
pub fn list_host_dir(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let mut findings = Findings::new();
    check_listing(&mut findings, args.required(0, "PATH")?);
    Ok(findings.verdict())
}

/// /sys/fs/cgroup and /sys/kernel.
pub fn sys_visible(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let mut findings = Findings::new();
    for path in ["/sys/fs/cgroup", "/sys/kernel"] {
        check_listing(&mut findings, path);
    }
    Ok(findings.verdict())
}

/// Counts pids in /proc and looks for the given host pids.
pub fn proc_host_pids(args: &Args<'_>) -> Result<Verdict, UsageError> {
    let wanted: Vec<i32> = (0..args.rest(0).len())
        .map(|i| args.parsed(i, "PID"))
        .collect::<Result<_, _>>()?;
    let pids = match sys::visible_pids() {
        Ok(pids) => pids,
        Err(e) => {
            let mut findings = Findings::new();
            findings.check("read_dir(/proc)", Err(e), HIDDEN);
            return Ok(findings.verdict());
        }
    };
    let mut findings = Findings::new();
    let shown = &pids[..pids.len().min(10)];
    if pids.len() > MAX_SANDBOX_PIDS {
        findings.escaped(format!(
            "/proc shows {} pids (more than {MAX_SANDBOX_PIDS}): {shown:?}",
            pids.len()
        ));
    } else {
        findings.refused(format!("/proc shows {} pids: {shown:?}", pids.len()));
    }
    let me = sys::getpid();
    for pid in wanted.into_iter().filter(|&pid| pid != me) {
        if pids.contains(&pid) {
            findings.escaped(format!("host pid {pid} is visible"));
        } else {
            findings.refused(format!("pid {pid} not visible"));
        }
    }
    Ok(findings.verdict())
}

/// The fds in /proc/self/fd, excluding the one used to list them.
fn open_fds() -> Result<Vec<i32>, Errno> {
    let dir_fd = sys::open("/proc/self/fd", libc::O_RDONLY | libc::O_DIRECTORY)?;
    let listing_fd = dir_fd.as_raw_fd();
    // SAFETY: fdopendir takes ownership of an open directory fd on success.
    let dir = unsafe { libc::fdopendir(listing_fd) };
    if dir.is_null() {
        return Err(Errno::last());
    }
    std::mem::forget(dir_fd); // now owned by `dir`, closed by closedir below
    let mut fds = Vec::new();
    loop {
        // SAFETY: `dir` is an open DIR stream.
        let entry = unsafe { libc::readdir(dir) };
        if entry.is_null() {
            break;
        }
        // SAFETY: readdir returned a valid dirent whose d_name is NUL-terminated.
        let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) };
        if let Some(fd) = name.to_str().ok().and_then(|n| n.parse::<i32>().ok()) {
            if fd != listing_fd {
                fds.push(fd);
            }
        }
    }
    // SAFETY: `dir` is open and not used after this.
    unsafe { libc::closedir(dir) };
    fds.sort_unstable();
    Ok(fds)
}

fn fd_target(fd: i32) -> String {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|e| format!("? ({})", Errno::from(e)))
}

/// Descriptors beyond 0-2.
pub fn leaked_fds(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let mut findings = Findings::new();
    match open_fds() {
        Ok(fds) => {
            let extra: Vec<String> = fds
                .iter()
                .filter(|&&fd| fd > 2)
                .map(|&fd| format!("{fd} -> {}", fd_target(fd)))
                .collect();
            if extra.is_empty() {
                findings.refused(format!("open fds: {fds:?}"));
            } else {
                findings.escaped(format!("leaked fds: {extra:?}"));
            }
        }
        Err(e) => findings.check("list /proc/self/fd", Err(e), HIDDEN),
    }
    Ok(findings.verdict())
}

/// Reopens every regular-file fd read-write.
pub fn reopen_fd_rw(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let mut findings = Findings::new();
    let fds = match open_fds() {
        Ok(fds) => fds,
        Err(e) => {
            findings.check("list /proc/self/fd", Err(e), HIDDEN);
            return Ok(findings.verdict());
        }
    };
    for fd in fds {
        let path = format!("/proc/self/fd/{fd}");
        let is_file = std::fs::metadata(&path)
            .map(|m| m.is_file())
            .unwrap_or(false);
        if !is_file {
            continue;
        }
        let what = format!("open({path} -> {}, O_RDWR)", fd_target(fd));
        let result =
            sys::open(&path, libc::O_RDWR).map(|_| "ok (closed, nothing written)".to_string());
        findings.check(&what, result, &[EACCES, EPERM, EROFS, ETXTBSY, ENOENT]);
    }
    if findings.is_empty() {
        findings.refused("no fd refers to a regular file");
    }
    Ok(findings.verdict())
}

/// Entries of /dev beyond the minimal set.
pub fn dev_listing(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let mut findings = Findings::new();
    match list("/dev", usize::MAX) {
        Ok((_, names)) => {
            let mut extra: Vec<String> = names
                .into_iter()
                .filter(|n| !SANDBOX_DEV_ENTRIES.contains(&n.as_str()))
                .collect();
            extra.sort();
            if extra.is_empty() {
                findings.refused("/dev holds only the minimal set");
            } else {
                findings.escaped(format!(
                    "/dev holds {} extra entries: {:?}",
                    extra.len(),
                    &extra[..extra.len().min(20)]
                ));
            }
        }
        Err(e) => findings.check("read_dir(/dev)", Err(e), HIDDEN),
    }
    Ok(findings.verdict())
}
