//! Watching a sandboxed program's path calls, for `spawnd learn` (what a
//! draft manifest must grant) and `spawnd run --trace` (what the sandbox
//! refused, and which layer). The program runs under the traced form of
//! its seccomp filter ([`crate::sandbox::seccomp::traced_policy`]): init
//! installs it with a listener and hands the listener over a private
//! channel; the [`Tracer`] thread here receives each notification, reads
//! the path the call names from the caller's memory, and answers with the
//! decision of the untraced policy — continue an allowed call, fail a
//! refused one with its errno. So tracing changes nothing the program may
//! do; it only sees.
//!
//! What it sees is advisory: the kernel re-reads a path after "continue",
//! so another thread of the program can swap it (the draft a program
//! influences is reviewed by a human, and enforcement stays with the
//! mounts, Landlock and the filter). It sees a call's entry, never its
//! result; for an `execve` it looks, before letting the call go on,
//! whether the path names an executable regular file on an exec-allowed
//! mount in the program's own root, so the programs a run executed
//! ([`Trace::executed`]) leave out the attempts that found nothing (a
//! search along `PATH`). Paths are as the program's own mount namespace
//! names them.

use std::collections::HashMap;
use std::io::IoSliceMut;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;
use serde::Serialize;

pub(crate) use crate::spawn_result::{RefusedCall, Use};

use super::seccomp::{syscall_name, Action, Policy, SeccompData};
use crate::sys::{
    answer_notification, notification_pending, prefer_sync_wake_up, receive_notification, Answer,
    Notification,
};

/// A path and how it was used, with how many calls did so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathUse {
    /// Absolute, lexically normalized, as the program's mounts name it.
    pub path: PathBuf,
    /// How.
    #[serde(rename = "use")]
    pub how: Use,
    /// The first call that did so (`openat`, `execve`…).
    pub call: &'static str,
    /// How many calls did so.
    pub calls: u64,
}

/// Everything a traced run showed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Trace {
    /// Each distinct (path, use), sorted by path.
    pub paths: Vec<PathUse>,
    /// Every path executed, in the order first seen: only those that
    /// named an executable file where the program could run it (an
    /// attempt that found nothing is in `paths` only).
    pub executed: Vec<PathBuf>,
    /// The calls the filter refused, by call.
    pub refused: Vec<RefusedCall>,
    /// Notifications whose path could not be read or resolved (the caller
    /// died meanwhile, or its memory moved).
    pub unresolved: u64,
    /// Distinct paths past [`MAX_DISTINCT`], counted only.
    pub dropped: u64,
    /// Whether the kernel woke the traced calls synchronously (cheaper).
    pub sync_wake_up: bool,
    /// Why tracing stopped early, if it did (the program's calls then
    /// fail: a listener that goes away fails the calls it would have seen).
    pub error: Option<String>,
}

/// Most distinct (path, use) pairs kept; a program opening more is counted.
pub(crate) const MAX_DISTINCT: usize = 100_000;
/// Most bytes of distinct paths kept (paths are up to 4 KiB each): the
/// tracer's memory stays bounded whatever names a program makes up.
pub(crate) const MAX_PATH_BYTES: usize = 32 << 20;
/// Most executed paths kept in order.
pub(crate) const MAX_EXECUTED: usize = 4096;

/// The parent's side of a traced sandbox: a thread answering its notifications.
pub struct Tracer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Trace>>,
}

impl Tracer {
    /// Starts the thread that takes the listener init sends on `channel`
    /// and answers every notification by `policy` (the untraced policy).
    pub fn start(channel: UnixStream, policy: Policy) -> std::io::Result<Tracer> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("spawnd-trace".into())
            .spawn(move || serve(&channel, &policy, &stopping))?;
        Ok(Tracer {
            stop,
            thread: Some(thread),
        })
    }

    /// What was seen, once the sandbox is gone (the listener then reports
    /// no more callers and the thread ends).
    pub fn finish(mut self) -> Trace {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(trace)) => trace,
            _ => Trace {
                error: Some("the tracer panicked".into()),
                ..Trace::default()
            },
        }
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Init's side: hands the listener over `channel` (then both close).
pub(crate) fn hand_over_listener(listener: OwnedFd, channel: OwnedFd) -> std::io::Result<()> {
    let channel = UnixStream::from(channel);
    crate::ipc::send(&channel, &(), &[listener.as_fd()])
}

/// The tracer thread: receives the listener, then answers until no
/// process of the sandbox is left.
fn serve(channel: &UnixStream, policy: &Policy, stop: &AtomicBool) -> Trace {
    let mut seen = Seen::default();
    let listener = match crate::ipc::recv_up_to::<()>(channel, 1) {
        Ok(Some(((), mut fds))) if fds.len() == 1 => fds.remove(0),
        // The sandbox ended (or failed) before its program started.
        Ok(_) => return seen.into_trace(false, None),
        Err(e) => return seen.into_trace(false, Some(format!("receive the listener: {e}"))),
    };
    let sync = prefer_sync_wake_up(listener.as_fd());
    loop {
        let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(200u16)) {
            Ok(0) if stop.load(Ordering::Relaxed) => break,
            Ok(0) | Err(nix::Error::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return seen.into_trace(sync, Some(format!("poll the listener: {e}"))),
        }
        let revents = fds[0].revents().unwrap_or(PollFlags::empty());
        if revents.contains(PollFlags::POLLIN) {
            match receive_notification(listener.as_fd()) {
                Ok(n) => answer(&listener, policy, n, &mut seen),
                // Its caller died before it was received.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return seen.into_trace(sync, Some(e.to_string())),
            }
        } else if revents.intersects(PollFlags::POLLHUP | PollFlags::POLLERR) {
            break;
        }
    }
    seen.into_trace(sync, None)
}

/// Reads what the call names, then answers it with `policy`'s decision.
fn answer(listener: &OwnedFd, policy: &Policy, n: Notification, seen: &mut Seen) {
    let data = SeccompData {
        nr: n.nr,
        arch: n.arch,
        instruction_pointer: 0,
        args: n.args,
    };
    let name = syscall_name(i64::from(n.nr));
    let decision = policy.evaluate(&data);
    let reply = match decision {
        Action::Allow => Answer::Continue,
        Action::Errno(errno) => Answer::Fail(i32::from(errno)),
        Action::KillProcess | Action::Notify => Answer::Fail(libc::EPERM),
    };
    let used: Vec<Option<(PathBuf, Use, bool)>> = match reply {
        Answer::Continue => paths_named(n.pid, name.unwrap_or(""), &n.args)
            .into_iter()
            .map(|named| {
                named.map(|(path, how)| {
                    // Looked at while the caller waits, so its root is the one the call sees.
                    let lands = how == Use::Execute && exec_lands(n.pid, &path);
                    (path, how, lands)
                })
            })
            .collect(),
        Answer::Fail(_) => Vec::new(),
    };
    // What was read is the caller's only if the call is still pending
    // (its thread id was not reused meanwhile).
    let trusted = notification_pending(listener.as_fd(), n.id);
    // ENOENT: the caller is gone; nothing is left to answer.
    let _ = answer_notification(listener.as_fd(), n.id, reply);
    // The first execution is init starting the program spawnd opened
    // itself: a path that cannot be read there (init is not dumpable, and
    // an unprivileged spawnd may not read it) is no gap in the trace.
    let is_execution = matches!(name, Some("execve" | "execveat"));
    let starts_the_program = is_execution && seen.executions == 0;
    if is_execution {
        seen.executions += 1;
    }
    match reply {
        Answer::Fail(errno) => seen.refused(
            name.map_or_else(|| format!("syscall {}", n.nr), str::to_string),
            errno,
        ),
        Answer::Continue if !trusted => seen.unresolved += 1,
        Answer::Continue => {
            for named in used {
                match named {
                    Some((path, how, lands)) => seen.path(path, how, lands, name.unwrap_or("?")),
                    None if starts_the_program => {}
                    None => seen.unresolved += 1,
                }
            }
        }
    }
}

/// Whether an `execve` of `path` can succeed in process `pid`'s root: the
/// path (symlinks resolved inside that root) names a regular file with an
/// execute bit on a mount that allows execution. Permissions and Landlock
/// are the program's, not seen here: such a refusal is reported as one.
fn exec_lands(pid: u32, path: &Path) -> bool {
    use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
    use nix::sys::statvfs::{fstatvfs, FsFlags};
    use std::os::unix::fs::PermissionsExt;
    let Ok(root) = std::fs::File::open(format!("/proc/{pid}/root")) else {
        return false;
    };
    let inside = path.strip_prefix("/").unwrap_or(path);
    let inside = if inside.as_os_str().is_empty() {
        Path::new(".")
    } else {
        inside
    };
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT);
    let Ok(fd) = openat2(root.as_fd(), inside, how) else {
        return false;
    };
    let file = std::fs::File::from(fd);
    let regular_executable = file
        .metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    let mount_allows = fstatvfs(&file).is_ok_and(|v| !v.flags().contains(FsFlags::ST_NOEXEC));
    regular_executable && mount_allows
}

/// `AT_FDCWD` as the low 32 bits of a register.
const AT_FDCWD: i32 = libc::AT_FDCWD;

/// The paths a call names and how it uses them (`None`: one could not be
/// read or resolved).
fn paths_named(pid: u32, call: &str, args: &[u64; 6]) -> Vec<Option<(PathBuf, Use)>> {
    let pid = Pid::from_raw(pid as i32);
    let dirfd = |i: usize| args[i] as i32;
    let at = |dir: i32, ptr: u64, empty_means_dir: bool| resolve(pid, dir, ptr, empty_means_dir);
    let open_use = |flags: u64| {
        let flags = flags as i32;
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY
            || flags & (libc::O_CREAT | libc::O_TRUNC) != 0;
        if writes {
            Use::Write
        } else if flags & libc::O_DIRECTORY != 0 {
            Use::List
        } else {
            Use::Read
        }
    };
    let with = |path: Option<PathBuf>, how: Use| path.map(|p| (p, how));
    match call {
        "open" => vec![with(at(AT_FDCWD, args[0], false), open_use(args[1]))],
        "creat" => vec![with(at(AT_FDCWD, args[0], false), Use::Write)],
        "openat" => vec![with(at(dirfd(0), args[1], false), open_use(args[2]))],
        "openat2" => {
            let flags = read_u64(pid, args[2]);
            vec![flags.and_then(|f| with(at(dirfd(0), args[1], false), open_use(f)))]
        }
        "execve" => vec![with(at(AT_FDCWD, args[0], false), Use::Execute)],
        "execveat" => {
            let empty_path = args[4] as i32 & libc::AT_EMPTY_PATH != 0;
            vec![with(at(dirfd(0), args[1], empty_path), Use::Execute)]
        }
        "mkdir" | "mknod" => vec![with(at(AT_FDCWD, args[0], false), Use::Create)],
        "mkdirat" | "mknodat" => vec![with(at(dirfd(0), args[1], false), Use::Create)],
        "unlink" | "rmdir" => vec![with(at(AT_FDCWD, args[0], false), Use::Remove)],
        "unlinkat" => vec![with(at(dirfd(0), args[1], false), Use::Remove)],
        "truncate" => vec![with(at(AT_FDCWD, args[0], false), Use::Write)],
        "rename" => vec![
            with(at(AT_FDCWD, args[0], false), Use::Remove),
            with(at(AT_FDCWD, args[1], false), Use::Create),
        ],
        "renameat" | "renameat2" => vec![
            with(at(dirfd(0), args[1], false), Use::Remove),
            with(at(dirfd(2), args[3], false), Use::Create),
        ],
        "link" | "symlink" => vec![with(at(AT_FDCWD, args[1], false), Use::Create)],
        "linkat" => vec![with(at(dirfd(2), args[3], false), Use::Create)],
        "symlinkat" => vec![with(at(dirfd(1), args[2], false), Use::Create)],
        _ => Vec::new(),
    }
}

/// The absolute path a call names: `ptr` read from the caller's memory,
/// relative to its working directory (`AT_FDCWD`) or to descriptor `dir`;
/// an empty path with `empty_means_dir` names the descriptor itself.
fn resolve(pid: Pid, dir: i32, ptr: u64, empty_means_dir: bool) -> Option<PathBuf> {
    let named = read_c_string(pid, ptr)?;
    let named =
        PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(named));
    if named.is_absolute() {
        return Some(normalize(&named));
    }
    let base = match dir {
        AT_FDCWD => std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?,
        fd => std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?,
    };
    if !base.is_absolute() {
        // A descriptor that is no directory (a pipe, a socket).
        return None;
    }
    if named.as_os_str().is_empty() {
        return empty_means_dir.then(|| normalize(&base));
    }
    Some(normalize(&base.join(named)))
}

/// `..` and `.` taken lexically (the sandbox's paths are not this
/// process's to resolve).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Longest path read (`PATH_MAX`).
const PATH_MAX: usize = 4096;

/// A NUL-terminated string at `addr` in `pid`'s memory, read page by page
/// (a string near the end of a mapping must not make the read fail).
fn read_c_string(pid: Pid, addr: u64) -> Option<Vec<u8>> {
    const PAGE: u64 = 4096;
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < PATH_MAX {
        let until_page_end = (PAGE - at % PAGE) as usize;
        let mut buf = vec![0u8; until_page_end.min(PATH_MAX - out.len())];
        let len = buf.len();
        let got = process_vm_readv(
            pid,
            &mut [IoSliceMut::new(&mut buf)],
            &[RemoteIoVec {
                base: usize::try_from(at).ok()?,
                len,
            }],
        )
        .ok()?;
        if got == 0 {
            return None;
        }
        if let Some(end) = buf[..got].iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Some(out);
        }
        out.extend_from_slice(&buf[..got]);
        at += got as u64;
    }
    None
}

/// The first 8 bytes at `addr` in `pid`'s memory (`open_how.flags`).
fn read_u64(pid: Pid, addr: u64) -> Option<u64> {
    let mut buf = [0u8; 8];
    let got = process_vm_readv(
        pid,
        &mut [IoSliceMut::new(&mut buf)],
        &[RemoteIoVec {
            base: usize::try_from(addr).ok()?,
            len: 8,
        }],
    )
    .ok()?;
    (got == 8).then(|| u64::from_ne_bytes(buf))
}

/// What the thread has seen so far.
#[derive(Default)]
struct Seen {
    paths: HashMap<(PathBuf, Use), (&'static str, u64)>,
    path_bytes: usize,
    executed: Vec<PathBuf>,
    executed_set: std::collections::HashSet<PathBuf>,
    refused: HashMap<(String, i32), u64>,
    unresolved: u64,
    dropped: u64,
    /// Executions notified so far: the first is init starting the program.
    executions: u64,
}

impl Seen {
    /// A path a call used; `lands`: an execution that found its program.
    fn path(&mut self, path: PathBuf, how: Use, lands: bool, call: &'static str) {
        let full = self.paths.len() >= MAX_DISTINCT || self.path_bytes >= MAX_PATH_BYTES;
        if how == Use::Execute
            && lands
            && self.executed.len() < MAX_EXECUTED
            && !full
            && self.executed_set.insert(path.clone())
        {
            self.executed.push(path.clone());
        }
        match self.paths.get_mut(&(path.clone(), how)) {
            Some((_, calls)) => *calls += 1,
            None if full => self.dropped += 1,
            None => {
                self.path_bytes += path.as_os_str().len();
                self.paths.insert((path, how), (call, 1));
            }
        }
    }

    fn refused(&mut self, call: String, errno: i32) {
        *self.refused.entry((call, errno)).or_default() += 1;
    }

    fn into_trace(self, sync_wake_up: bool, error: Option<String>) -> Trace {
        let mut paths: Vec<PathUse> = self
            .paths
            .into_iter()
            .map(|((path, how), (call, calls))| PathUse {
                path,
                how,
                call,
                calls,
            })
            .collect();
        paths.sort_by(|a, b| (&a.path, a.how).cmp(&(&b.path, b.how)));
        let mut refused: Vec<RefusedCall> = self
            .refused
            .into_iter()
            .map(|((call, errno), calls)| RefusedCall { call, errno, calls })
            .collect();
        refused.sort_by(|a, b| a.call.cmp(&b.call));
        Trace {
            paths,
            executed: self.executed,
            refused,
            unresolved: self.unresolved,
            dropped: self.dropped,
            sync_wake_up,
            error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalized_lexically() {
        assert_eq!(
            normalize(Path::new("/a/./b/../c//d")),
            PathBuf::from("/a/c/d")
        );
        assert_eq!(normalize(Path::new("/../..")), PathBuf::from("/"));
    }

    #[test]
    fn a_string_is_read_from_own_memory_across_a_page_boundary() {
        let page = 4096usize;
        let mut buf = vec![b'x'; page * 2];
        let start = buf.as_ptr() as usize;
        // A string starting 3 bytes before a page boundary.
        let offset = page - (start % page) - 3;
        buf[offset..offset + 6].copy_from_slice(b"/a/bc\0");
        let me = Pid::this();
        let got = read_c_string(me, (start + offset) as u64).unwrap();
        assert_eq!(got, b"/a/bc");
        assert_eq!(read_c_string(me, 0), None);
    }

    #[test]
    fn an_execution_lands_only_on_an_executable_regular_file() {
        use std::os::unix::fs::PermissionsExt;
        let me = std::process::id();
        let dir = std::env::temp_dir().join(format!("spawnd-exec-lands-{me}"));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("tool");
        std::fs::write(&file, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let plain = exec_lands(me, &file);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
        let executable = exec_lands(me, &file);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!plain && !exec_lands(me, &dir));
        assert!(!exec_lands(me, Path::new("/nonexistent/program")));
        // A tmpfs mounted noexec would say false here; the default temp
        // directory is on one only on hosts that chose so.
        let noexec = nix::sys::statvfs::statvfs(&std::env::temp_dir())
            .is_ok_and(|v| v.flags().contains(nix::sys::statvfs::FsFlags::ST_NOEXEC));
        assert_eq!(executable, !noexec);
    }

    #[test]
    fn seen_paths_are_kept_once_with_counts_and_executions_in_order() {
        let mut seen = Seen::default();
        seen.path("/usr/local/bin/b".into(), Use::Execute, false, "execve");
        seen.path("/usr/bin/b".into(), Use::Execute, true, "execve");
        seen.path("/usr/bin/a".into(), Use::Execute, true, "execve");
        seen.path("/usr/bin/b".into(), Use::Execute, true, "execve");
        seen.path("/etc/x".into(), Use::Read, false, "openat");
        seen.refused("ptrace".into(), libc::EPERM);
        seen.refused("ptrace".into(), libc::EPERM);
        let t = seen.into_trace(true, None);
        assert_eq!(
            t.executed,
            vec![PathBuf::from("/usr/bin/b"), PathBuf::from("/usr/bin/a")]
        );
        assert_eq!(t.paths[0].path, PathBuf::from("/etc/x"));
        // The failed attempt is a path seen, not a program run.
        assert!(t
            .paths
            .iter()
            .any(|p| p.path == Path::new("/usr/local/bin/b")));
        assert_eq!(
            t.paths
                .iter()
                .find(|p| p.path.ends_with("b"))
                .unwrap()
                .calls,
            2
        );
        assert_eq!(
            t.refused,
            vec![RefusedCall {
                call: "ptrace".into(),
                errno: libc::EPERM,
                calls: 2
            }]
        );
    }
}
