//! Child processes: running one risky call in a forked child (so a SIGSYS kill
//! or a namespace change hits the child, not the probe), and executing a
//! program while capturing its output and its final credentials.
//!
//! The probe is single-threaded (it never starts a thread), so a forked child
//! may run ordinary Rust code; children always leave through `_exit`, never by
//! returning into `main`, so only the probe itself prints a report.

use std::ffi::CString;
use std::fmt;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::time::{Duration, Instant};

use crate::consts::CHILD_DEADLINE_SECS;
use crate::sys::{cstring, cvt, owned, Errno, ProcStatus};

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// `exit(code)`.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(code) => write!(f, "exit {code}"),
            Exit::Signal(libc::SIGSYS) => f.write_str("killed by SIGSYS"),
            Exit::Signal(libc::SIGKILL) => f.write_str("killed by SIGKILL"),
            Exit::Signal(libc::SIGSEGV) => f.write_str("killed by SIGSEGV"),
            Exit::Signal(sig) => write!(f, "killed by signal {sig}"),
        }
    }
}

/// What a forked child sends back: a call's result and a small note.
#[derive(Debug, Clone, Copy)]
pub struct Reply {
    /// The call's return value or errno.
    pub result: Result<i64, Errno>,
    /// Extra information agreed between the child and its caller.
    pub note: i64,
}

impl From<Result<i64, Errno>> for Reply {
    fn from(result: Result<i64, Errno>) -> Self {
        Reply { result, note: 0 }
    }
}

/// The end of a forked child.
pub struct ChildReport {
    /// Its pid (as this process sees it).
    pub pid: i32,
    /// What it sent back, if it got that far.
    pub reply: Option<Reply>,
    /// How it ended.
    pub exit: Exit,
}

/// `fork(2)`: Ok(0) in the child, Ok(pid) in the parent.
pub fn fork() -> Result<i32, Errno> {
    // SAFETY: the probe is single-threaded, so the child's copy of the address
    // space holds no lock owned by another thread.
    let pid = unsafe { libc::fork() };
    cvt(pid).map(|pid| pid as i32)
}

/// Leaves a child at once, without running destructors or flushing buffers
/// that belong to the parent's copy of stdout.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions and does not return.
    unsafe { libc::_exit(code) }
}

/// A close-on-exec pipe: (read end, write end).
pub fn pipe() -> Result<(OwnedFd, OwnedFd), Errno> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    Ok((owned(fds[0]), owned(fds[1])))
}

/// Reaps `pid`.
pub fn wait(pid: i32) -> Result<Exit, Errno> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer for waitpid.
        match cvt(unsafe { libc::waitpid(pid, &mut status, libc::__WALL) }) {
            Err(Errno(libc::EINTR)) => continue,
            Err(e) => return Err(e),
            Ok(_) => break,
        }
    }
    if libc::WIFSIGNALED(status) {
        Ok(Exit::Signal(libc::WTERMSIG(status)))
    } else {
        Ok(Exit::Code(libc::WEXITSTATUS(status)))
    }
}

/// `kill(2)`.
pub fn kill(pid: i32, signal: i32) -> Result<i64, Errno> {
    // SAFETY: kill takes plain integers.
    cvt(unsafe { libc::kill(pid, signal) })
}

/// Runs `call` in a forked child and brings back its reply and its end.
pub fn in_child(call: impl FnOnce() -> Reply) -> Result<ChildReport, Errno> {
    let (read_end, write_end) = pipe()?;
    let pid = fork()?;
    if pid == 0 {
        drop(read_end);
        // A child killed by SIGSYS would otherwise leave a core file behind.
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `limit` is a valid rlimit for getrlimit to fill and for
        // setrlimit to read; lowering the soft limit is always allowed.
        unsafe {
            libc::getrlimit(libc::RLIMIT_CORE, &mut limit);
            limit.rlim_cur = 0;
            libc::setrlimit(libc::RLIMIT_CORE, &limit);
        }
        let reply = call();
        let (tag, value) = match reply.result {
            Ok(value) => (0i64, value),
            Err(Errno(errno)) => (1, i64::from(errno)),
        };
        let mut bytes = Vec::with_capacity(24);
        for word in [tag, value, reply.note] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        let _ = File::from(write_end).write_all(&bytes);
        exit_now(0);
    }
    drop(write_end);
    let mut bytes = Vec::new();
    let _ = File::from(read_end).read_to_end(&mut bytes);
    let exit = wait(pid)?;
    Ok(ChildReport {
        pid,
        reply: decode_reply(&bytes),
        exit,
    })
}

fn decode_reply(bytes: &[u8]) -> Option<Reply> {
    let word = |i: usize| -> Option<i64> {
        let chunk: [u8; 8] = bytes.get(i * 8..i * 8 + 8)?.try_into().ok()?;
        Some(i64::from_le_bytes(chunk))
    };
    let (tag, value, note) = (word(0)?, word(1)?, word(2)?);
    let result = if tag == 0 {
        Ok(value)
    } else {
        Err(Errno(value as i32))
    };
    Some(Reply { result, note })
}

/// What to execute.
#[derive(Clone, Copy)]
pub enum Program<'a> {
    /// `execve(path)`.
    Path(&'a str),
    /// `execveat(fd, "", AT_EMPTY_PATH)` (fexecve).
    Fd(RawFd),
}

/// The end of an executed program.
pub struct ProgramRun {
    /// Whether the exec itself succeeded.
    pub exec: Result<(), Errno>,
    /// The first 64 KiB of its stdout.
    pub stdout: Vec<u8>,
    /// How it ended.
    pub exit: Exit,
    /// Its credentials as it exited (read from the zombie before reaping).
    pub creds: Option<ProcStatus>,
}

/// Executes `program` with `argv` (and this process's environment) in a
/// child, stdout captured, stderr inherited; kills it after a deadline.
pub fn run_program(program: Program<'_>, argv: &[&str]) -> Result<ProgramRun, Errno> {
    let argv_c: Vec<CString> = argv.iter().map(|arg| cstring(arg)).collect();
    let env_c: Vec<CString> = std::env::vars_os()
        .map(|(key, value)| {
            let mut entry = key.into_vec();
            entry.push(b'=');
            entry.extend(value.into_vec());
            CString::new(entry).unwrap_or_default()
        })
        .collect();
    let argv_p = null_terminated(&argv_c);
    let env_p = null_terminated(&env_c);
    let path_c = match program {
        Program::Path(path) => cstring(path),
        Program::Fd(_) => CString::default(),
    };
    let (err_read, err_write) = pipe()?;
    let (out_read, out_write) = pipe()?;
    let pid = fork()?;
    if pid == 0 {
        exec_in_child(
            program,
            &path_c,
            &argv_p,
            &env_p,
            out_write.as_raw_fd(),
            err_write,
        );
    }
    drop(err_write);
    drop(out_write);
    let mut err_bytes = Vec::new();
    let _ = File::from(err_read).read_to_end(&mut err_bytes);
    let exec = match <[u8; 4]>::try_from(err_bytes.as_slice()) {
        Ok(raw) => Err(Errno(i32::from_ne_bytes(raw))),
        Err(_) => Ok(()),
    };
    let deadline = Instant::now() + Duration::from_secs(CHILD_DEADLINE_SECS);
    let stdout = drain_until(out_read, deadline);
    let creds = wait_exited_keep_zombie(pid, deadline)
        .then(|| ProcStatus::read(&pid.to_string()).ok())
        .flatten();
    let exit = wait(pid)?;
    Ok(ProgramRun {
        exec,
        stdout,
        exit,
        creds,
    })
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

fn exec_in_child(
    program: Program<'_>,
    path: &CString,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    stdout: RawFd,
    err_pipe: OwnedFd,
) -> ! {
    // SAFETY: `stdout` is an open pipe end; dup2 onto 1 clears CLOEXEC there.
    unsafe { libc::dup2(stdout, 1) };
    match program {
        // SAFETY: path, argv and envp are NUL-terminated strings and
        // NULL-terminated pointer arrays that outlive the call.
        Program::Path(_) => unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) },
        // SAFETY: as above; the empty path with AT_EMPTY_PATH executes `fd`.
        // (The raw system call: musl has no execveat wrapper.)
        Program::Fd(fd) => unsafe {
            libc::syscall(
                libc::SYS_execveat,
                fd,
                c"".as_ptr(),
                argv.as_ptr(),
                envp.as_ptr(),
                libc::AT_EMPTY_PATH,
            ) as libc::c_int
        },
    };
    let errno = Errno::last().0;
    let _ = File::from(err_pipe).write_all(&errno.to_ne_bytes());
    exit_now(127)
}

/// Reads `fd` to EOF or until `deadline` (keeping at most 64 KiB).
fn drain_until(fd: OwnedFd, deadline: Instant) -> Vec<u8> {
    const KEEP: usize = 64 * 1024;
    let mut kept = Vec::new();
    let mut file = File::from(fd);
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut poll = libc::pollfd {
            fd: file.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `poll` is one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, left.as_millis().min(60_000) as i32) };
        if ready == 0 {
            return kept;
        }
        match file.read(&mut buf) {
            Ok(0) => return kept,
            Ok(n) => kept.extend_from_slice(&buf[..n.min(KEEP.saturating_sub(kept.len()))]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return kept,
        }
    }
}

/// Waits (polling) until `pid` has exited, without reaping it, so its final
/// credentials stay readable in /proc. Kills it at `deadline`. Returns
/// whether it is now a zombie.
fn wait_exited_keep_zombie(pid: i32, deadline: Instant) -> bool {
    loop {
        // SAFETY: an all-zero siginfo_t is a valid out-buffer for waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let flags = libc::WEXITED | libc::WNOWAIT | libc::WNOHANG;
        // SAFETY: `info` is a valid out-pointer; P_PID selects only `pid`.
        let ret = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) };
        // SAFETY: waitid filled `info` (or left it zeroed), either is readable.
        let exited_pid = unsafe { info.si_pid() };
        if ret == 0 && exited_pid == pid {
            return true;
        }
        if ret != 0 && Errno::last().0 != libc::EINTR {
            return false;
        }
        if Instant::now() >= deadline {
            let _ = kill(pid, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
