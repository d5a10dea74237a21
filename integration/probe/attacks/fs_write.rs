//! F: writing where the sandbox must not: read-only
//! scopes, write-then-exec, fileless exec, device nodes, procfs writes,
//! hardlinks out of read-only areas, and filling a disk.
//!
//! Every file the probe creates carries its pid in the name and is removed
//! before it reports; procfs writes put back the value just read; the sysrq
//! trigger is only opened, never written.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;

use libc::{EACCES, EDQUOT, EFBIG, EINVAL, ENOENT, ENOSPC, ENOSYS, EPERM, EROFS, ETXTBSY, EXDEV};

use crate::child::{run_program, Program, ProgramRun};
use crate::consts::DISK_FILL_DEFAULT_MAX;
use crate::report::{Args, Findings, UsageError, Verdict};
use crate::sys::{self, cstring, cvt, mib, owned, Errno};

/// Refusals of creating or writing a file: read-only, denied, or absent.
const WRITE_DENIED: &[i32] = &[EROFS, EACCES, EPERM, ENOENT];
/// Refusals of an exec: noexec mount, Landlock, seccomp.
const EXEC_DENIED: &[i32] = &[EACCES, EPERM];

/// A file name unique to this run inside `dir`.
fn scratch(dir: &str, what: &str) -> String {
    format!(
        "{}/spawnd-probe-{what}-{}",
        dir.trim_end_matches('/'),
        sys::getpid()
    )
}

/// The bytes of a tiny program that exits 0.
fn true_binary() -> Result<(&'static str, Vec<u8>), Errno> {
    let mut last = Errno(ENOENT);
    for path in ["/bin/true", "/usr/bin/true", "/proc/self/exe"] {
        match std::fs::read(path) {
            Ok(bytes) => return Ok((path, bytes)),
            Err(e) => last = e.into(),
        }
    }
    Err(last)
}

/// Notes how an exec went: escaped if the program ran.
fn note_exec(findings: &mut Findings, what: &str, run: Result<ProgramRun, Errno>) {
    match run {
        Ok(ProgramRun {
            exec: Ok(()), exit, ..
        }) => findings.escaped(format!("{what}: ran ({exit})")),
        Ok(ProgramRun { exec: Err(e), .. }) => findings.check(what, Err(e), EXEC_DENIED),
        Err(e) => findings.unclear(format!("fork for {what}: {e}")),
    }
}

/// Creates a file in a directory that should be read-only.
pub fn write_read_scope(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let path = scratch(args.required(0, "DIR")?, "write");
    let result = sys::open(&path, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL).map(|_| {
        let removed = std::fs::remove_file(&path).is_ok();
        format!("ok (created, removed: {removed})")
    });
    let mut findings = Findings::new();
    findings.check(&format!("open({path}, O_CREAT)"), result, WRITE_DENIED);
    Ok(findings.verdict())
}

/// Copies /bin/true into DIR and executes it.
pub fn write_then_exec(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let path = scratch(args.required(0, "DIR")?, "exec");
    let (source, bytes) = match true_binary() {
        Ok(found) => found,
        Err(e) => return Ok(Verdict::unclear(format!("reading /bin/true: {e}"))),
    };
    let mut findings = Findings::new();
    let written = sys::open_mode(&path, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o755)
        .and_then(|fd| File::from(fd).write_all(&bytes).map_err(Errno::from));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&path);
        findings.check(&format!("copy {source} to {path}"), Err(e), WRITE_DENIED);
        return Ok(findings.verdict());
    }
    findings.note(format!("copied {source} to {path}"));
    let c = cstring(&path);
    // SAFETY: a NUL-terminated path and a mode word.
    if let Err(e) = cvt(unsafe { libc::chmod(c.as_ptr(), 0o755) }) {
        findings.note(format!("chmod 755: {e}"));
    }
    note_exec(
        &mut findings,
        &format!("execve({path})"),
        run_program(Program::Path(&path), &["true"]),
    );
    let _ = std::fs::remove_file(&path);
    Ok(findings.verdict())
}

/// Writes /bin/true into memfds and executes them through the fd.
pub fn memfd_exec(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let (source, bytes) = match true_binary() {
        Ok(found) => found,
        Err(e) => return Ok(Verdict::unclear(format!("reading /bin/true: {e}"))),
    };
    let mut findings = Findings::new();
    findings.note(format!("payload {source}"));
    for (label, flags) in [
        ("0", 0),
        ("MFD_EXEC", libc::MFD_EXEC),
        ("MFD_NOEXEC_SEAL", libc::MFD_NOEXEC_SEAL),
    ] {
        let what = format!("memfd_create({label})");
        // SAFETY: a constant NUL-terminated name and a flag word.
        let fd = match cvt(unsafe { libc::memfd_create(c"spawnd-probe".as_ptr(), flags) }) {
            Ok(fd) => File::from(owned(fd as i32)),
            Err(e) => {
                findings.check(&what, Err(e), &[EPERM, EACCES, EINVAL, ENOSYS]);
                continue;
            }
        };
        if let Err(e) = (&fd).write_all(&bytes) {
            findings.unclear(format!("{what} then write: {}", Errno::from(e)));
            continue;
        }
        let run = run_program(Program::Fd(fd.as_raw_fd()), &["true"]);
        note_exec(
            &mut findings,
            &format!("{what} then execveat(AT_EMPTY_PATH)"),
            run,
        );
    }
    Ok(findings.verdict())
}

/// mknod of /dev/mem's numbers (c 1 1).
pub fn mknod_char(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let path = scratch(args.optional(0).unwrap_or("/tmp"), "mknod");
    let c = cstring(&path);
    // SAFETY: a NUL-terminated path, a mode word and a device number.
    let ret = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 1)) };
    let result = cvt(ret).map(|_| {
        let removed = std::fs::remove_file(&path).is_ok();
        format!("0 (char device 1:1 created, removed: {removed})")
    });
    let mut findings = Findings::new();
    findings.check(
        &format!("mknod({path}, c 1 1)"),
        result,
        &[EPERM, EACCES, EROFS],
    );
    Ok(findings.verdict())
}

/// Opens /proc/sysrq-trigger for writing (never writes).
pub fn sysrq(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let path = "/proc/sysrq-trigger";
    let result =
        sys::open(path, libc::O_WRONLY).map(|_| "ok (closed, nothing written)".to_string());
    let mut findings = Findings::new();
    findings.check(
        &format!("open({path}, O_WRONLY)"),
        result,
        &[EACCES, EPERM, EROFS, ENOENT],
    );
    Ok(findings.verdict())
}

/// Writes /proc/sys/kernel/hostname with its current value.
pub fn proc_sys_write(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let path = "/proc/sys/kernel/hostname";
    let mut findings = Findings::new();
    let current = match sys::read_file(path) {
        Ok(text) if !text.trim().is_empty() => text.trim().to_string(),
        Ok(_) => return Ok(Verdict::unclear(format!("{path} reads empty: not writing"))),
        Err(e) => {
            findings.check(&format!("read({path})"), Err(e), &[EACCES, EPERM, ENOENT]);
            return Ok(findings.verdict());
        }
    };
    let result = sys::open(path, libc::O_WRONLY).and_then(|fd| {
        File::from(fd)
            .write_all(format!("{current}\n").as_bytes())
            .map_err(Errno::from)
    });
    let after = sys::read_file(path)
        .map(|t| t.trim().to_string())
        .unwrap_or_default();
    let result = result.map(|()| format!("ok (wrote {current:?} back; now {after:?})"));
    findings.check(
        &format!("write({path})"),
        result,
        &[EACCES, EPERM, EROFS, ENOENT],
    );
    Ok(findings.verdict())
}

/// Hardlinks a read-only file into a writable directory.
pub fn link_escape(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(2)?;
    let source = args.required(0, "RO_FILE")?;
    let link = scratch(args.required(1, "RW_DIR")?, "link");
    let mut findings = Findings::new();
    let what = format!("link({source}, {link})");
    if let Err(e) = std::fs::hard_link(source, &link) {
        findings.check(&what, Err(e.into()), &[EXDEV, EACCES, EPERM, EROFS, ENOENT]);
        return Ok(findings.verdict());
    }
    findings.note(format!("{what} = 0"));
    let writable = sys::open(&link, libc::O_WRONLY | libc::O_APPEND)
        .map(|_| "ok (nothing written)".to_string());
    findings.check(
        &format!("open({link}, O_WRONLY|O_APPEND)"),
        writable,
        &[EACCES, EPERM, EROFS, ETXTBSY],
    );
    let _ = std::fs::remove_file(&link);
    Ok(findings.verdict())
}

/// Writes into DIR until the kernel stops it or MAX_BYTES is reached.
pub fn disk_fill(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(2)?;
    let path = scratch(args.required(0, "DIR")?, "fill");
    let max: u64 = args.parsed_or(1, "MAX_BYTES", DISK_FILL_DEFAULT_MAX)?;
    // SAFETY: ignoring SIGXFSZ makes an RLIMIT_FSIZE overrun fail with EFBIG
    // instead of killing the probe; no handler code is involved.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let mut file = match sys::open(&path, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL) {
        Ok(fd) => File::from(fd),
        Err(e) => {
            let mut findings = Findings::new();
            findings.check(&format!("open({path}, O_CREAT)"), Err(e), WRITE_DENIED);
            return Ok(findings.verdict());
        }
    };
    let chunk = vec![b'x'; 1 << 20];
    let mut written: u64 = 0;
    let stop = loop {
        if written >= max {
            break None;
        }
        let len = (max - written).min(chunk.len() as u64) as usize;
        match file.write(&chunk[..len]) {
            Ok(0) => break Some(Errno(ENOSPC)),
            Ok(n) => written += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Some(Errno::from(e)),
        }
    };
    drop(file);
    let removed = std::fs::remove_file(&path).is_ok();
    let detail = format!("wrote {} to {path} (removed: {removed})", mib(written));
    Ok(match stop {
        None => Verdict::escaped(format!(
            "{detail}; reached the {} cap without an error",
            mib(max)
        )),
        Some(e) if e.is_one_of(&[EFBIG, ENOSPC, EDQUOT]) => {
            Verdict::blocked(format!("{detail}; then write: {e}"))
        }
        Some(e) => Verdict::unclear(format!("{detail}; then write: {e}")),
    })
}

/// Renames SRC to DST across a scope boundary, and back when it worked.
pub fn rename_escape(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(2)?;
    let source = args.required(0, "SRC")?;
    let target = args.required(1, "DST")?;
    let what = format!("rename({source}, {target})");
    let result = std::fs::rename(source, target)
        .map_err(Errno::from)
        .map(|()| {
            let back = std::fs::rename(target, source).map_err(Errno::from);
            format!(
                "0 (renamed back: {})",
                back.map_or_else(|e| e.to_string(), |()| "ok".into())
            )
        });
    let mut findings = Findings::new();
    findings.check(&what, result, &[EXDEV, EACCES, EPERM, EROFS, ENOENT]);
    Ok(findings.verdict())
}
