//! Who is on the other end of a connection: the uid, gid and pid from
//! `SO_PEERCRED`, and whether the peer runs in another user namespace than
//! the daemon's — a container, or a program inside a spawnd sandbox that
//! can reach the socket through one of its scopes. docs/sandbox.md: such a peer is
//! refused unless an `[[access]]` rule says `other_user_namespaces = true`;
//! otherwise a sandboxed program could ask the daemon, as its own caller,
//! for a spawn of another connector and its credential.
//!
//! The namespace is read through a pidfd for the very process that
//! connected, `SO_PEERPIDFD` (Linux 6.5), which the socket holds whatever
//! becomes of the pid:
//! - the kernel hands over its user namespace (`PIDFD_GET_USER_NAMESPACE`,
//!   Linux 6.11), compared with the daemon's;
//! - where that is refused (it needs ptrace access to the peer: the shipped
//!   unit has no `CAP_SYS_PTRACE`, and an unprivileged daemon may not look
//!   at another user's process), its `/proc/PID/uid_map` and `gid_map`,
//!   readable by everyone and shown relative to the reader's namespace,
//!   must read exactly as the daemon's own — which a namespace below it
//!   cannot (only root could map every id) — and the pidfd must still name
//!   a live process once they were read, so the pid was not reused.
//!
//! Kernels before 6.5 (Debian 12's 6.1, Ubuntu 22.04's 5.15, RHEL 9's
//! 5.14) answer `SO_PEERPIDFD` with `ENOPROTOOPT`. On that error alone the
//! pidfd is opened by the pid `SO_PEERCRED` gives (`pidfd_open`, Linux
//! 5.3), first thing in the connection's task, and the peer counts as the
//! daemon's namespace only if
//! - the process the pidfd names started (`/proc/PID/stat`, field 22, clock
//!   ticks since boot) no later than the clock tick in which the connection
//!   was accepted ([`Accepted`], taken as `accept` returns): a process
//!   that took the pid after acceptance is refused;
//! - its namespace reads as the daemon's, as above;
//! - once all of that was read, the pidfd still names a live process (so
//!   every `/proc/PID` read was of that process), and the connection is not
//!   hung up (a peer that closed it has no process left to vouch for it).
//!
//! Any other error stays closed: 6.5 and the kernels after it answer
//! `EINVAL` for a peer that has already exited (until the kernel learned to
//! hand out pidfds of exited processes), which is exactly when its pid may
//! name another process.
//!
//! What remains on those older kernels: a pid names the process that
//! connected only while that process lives. A peer that connects, then
//! exits before the daemon accepts while the connection stays open in
//! another process (a child it forked, or one it passed the descriptor
//! to), is taken for whichever process holds its pid at acceptance. For
//! that to be one of the daemon's namespace, the kernel must give that pid
//! to such a process between the peer's `connect` and the daemon's
//! `accept`. Pids are handed out in increasing order up to
//! `kernel.pid_max` and then from the bottom again, so a freed pid comes
//! back only once the counter has wrapped round to it; the peer can
//! arrange the wrap with forks of its own, but the pid's next holder must
//! then be a process started in the daemon's namespace within that window,
//! which the daemon keeps to the time it takes to accept (it accepts
//! whenever a connection is waiting). Start times count in clock ticks
//! (`sysconf(_SC_CLK_TCK)`, 100 a second), so a process started in the
//! acceptance's own tick passes too: it must have taken the pid between
//! the acceptance and the `pidfd_open` just after it. Such a peer keeps the
//! uid and gid `SO_PEERCRED` recorded at its `connect`, so its
//! `[[access]]` rules still hold; it passes only the namespace check.
//!
//! Anything that cannot be read counts as another namespace: fail closed.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use tokio::net::UnixStream;

use crate::sys::{boot_time, peer_pidfd, pidfd_open, pidfd_user_namespace};

/// The peer of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Peer {
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
    /// Its pid (as the daemon sees it), when the kernel told.
    pub pid: Option<i32>,
    /// It runs in another user namespace than the daemon (or that could not
    /// be ruled out).
    pub other_user_namespace: bool,
    /// Where it connected from (its executable and hash, cgroup, start
    /// time, login uid), for the records; read once, at acceptance.
    pub origin: std::sync::Arc<crate::origin::Origin>,
}

impl Peer {
    /// The peer as a record's `caller`: credentials and origin.
    pub(crate) fn caller_json(&self) -> serde_json::Value {
        crate::audit::events::peer_json(
            self.uid,
            self.gid,
            self.pid.and_then(|p| u32::try_from(p).ok()),
            &self.origin,
        )
    }

    /// The peer as the audit trail names one that acted on a spawn.
    pub(crate) fn actor(&self) -> crate::audit::events::Actor {
        crate::audit::events::Actor {
            uid: self.uid,
            gid: self.gid,
            pid: self.pid.and_then(|p| u32::try_from(p).ok()),
        }
    }
}

/// When a connection was accepted, on the boot-time clock that
/// `/proc/PID/stat` dates process starts by (`None` if the clock could not
/// be read: then no peer is identified by pid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Accepted(Option<Duration>);

impl Accepted {
    /// Now: taken as soon as `accept` returns the connection.
    pub(super) fn now() -> Accepted {
        Accepted(boot_time().ok())
    }
}

/// How the peer's process was found, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FoundBy {
    /// The pidfd the socket holds (`SO_PEERPIDFD`).
    SocketPidfd,
    /// Its pid, on a kernel without `SO_PEERPIDFD`.
    Pid,
    /// Not at all: `SO_PEERPIDFD` failed for another reason.
    Nothing,
}

/// The peer of `stream`, accepted at `accepted`, or `None` when the kernel
/// gives no credentials.
pub(super) fn peer_of(stream: &UnixStream, accepted: Accepted) -> Option<Peer> {
    let cred = stream.peer_cred().ok()?;
    let (own, found_by, pidfd) = in_own_user_namespace(stream.as_fd(), cred.pid(), accepted);
    tracing::debug!(
        uid = cred.uid(),
        pid = ?cred.pid(),
        own_user_namespace = own,
        found_by = ?found_by,
        "peer"
    );
    let origin = match (cred.pid(), &pidfd) {
        (Some(pid), Some(pidfd)) => super::origin::of_peer(pid, pidfd.as_fd()),
        _ => crate::origin::Origin::via(crate::origin::Via::Daemon),
    };
    Some(Peer {
        uid: cred.uid(),
        gid: cred.gid(),
        pid: cred.pid(),
        other_user_namespace: !own,
        origin: std::sync::Arc::new(origin),
    })
}

/// Whether the process that connected `socket` shares the daemon's user
/// namespace, how it was found (see the module doc), and the pidfd that
/// names it, if one was had.
fn in_own_user_namespace(
    socket: BorrowedFd<'_>,
    pid: Option<i32>,
    accepted: Accepted,
) -> (bool, FoundBy, Option<OwnedFd>) {
    match peer_pidfd(socket) {
        Ok(pidfd) => (
            names_own_namespace(pidfd.as_fd(), pid),
            FoundBy::SocketPidfd,
            Some(pidfd),
        ),
        Err(e) if socket_pidfd_unsupported(&e) => {
            let (own, pidfd) = in_own_user_namespace_by_pid(socket, pid, accepted);
            (own, FoundBy::Pid, pidfd)
        }
        Err(_) => (false, FoundBy::Nothing, None),
    }
}

/// `ENOPROTOOPT`: the kernel does not know `SO_PEERPIDFD` (before 6.5).
/// Not `EINVAL`, which 6.5 and later give for a peer that has exited.
fn socket_pidfd_unsupported(e: &io::Error) -> bool {
    e.raw_os_error() == Some(nix::errno::Errno::ENOPROTOOPT as i32)
}

/// Whether the process `pidfd` names, at `pid`, is in the daemon's user
/// namespace: the kernel's answer, else its id maps read while the pidfd
/// shows it alive.
fn names_own_namespace(pidfd: BorrowedFd<'_>, pid: Option<i32>) -> bool {
    let Some(own) = own_user_namespace() else {
        return false;
    };
    if let Ok(ns) = pidfd_user_namespace(pidfd) {
        return nix::sys::stat::fstat(&ns).is_ok_and(|st| (st.st_dev, st.st_ino) == own.id);
    }
    let Some(pid) = pid else { return false };
    let maps_match = ["uid_map", "gid_map"]
        .iter()
        .zip([&own.uid_map, &own.gid_map])
        .all(|(map, ours)| std::fs::read(format!("/proc/{pid}/{map}")).is_ok_and(|t| &t == ours));
    maps_match && still_running(pidfd)
}

/// The peer identified by the pid `SO_PEERCRED` gave, for kernels without
/// `SO_PEERPIDFD` (see the module doc for what it rules out and what not).
fn in_own_user_namespace_by_pid(
    socket: BorrowedFd<'_>,
    pid: Option<i32>,
    accepted: Accepted,
) -> (bool, Option<OwnedFd>) {
    let Some(pid) = pid.filter(|p| *p > 0) else {
        return (false, None);
    };
    let Ok(pidfd) = pidfd_open(pid) else {
        return (false, None);
    };
    let own = started_by(pid, accepted)
        && names_own_namespace(pidfd.as_fd(), Some(pid))
        && still_running(pidfd.as_fd())
        && !hung_up(socket);
    (own, Some(pidfd))
}

/// Whether the process at `pid` started no later than the clock tick of
/// `accepted`. The kernel truncates start times to whole ticks, so a process
/// started before acceptance always passes, and one started later passes
/// only within the rest of that tick.
fn started_by(pid: i32, accepted: Accepted) -> bool {
    let Some(accepted) = accepted.0 else {
        return false;
    };
    let Ok(Some(hz)) = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) else {
        return false;
    };
    let Ok(hz) = u128::try_from(hz) else {
        return false;
    };
    let accepted_tick = accepted.as_nanos() * hz / 1_000_000_000;
    std::fs::read(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| crate::origin::start_ticks(&stat))
        .is_some_and(|start| u128::from(start) <= accepted_tick)
}

/// The daemon's own user namespace, read once: its identity and id maps.
struct OwnNamespace {
    id: (u64, u64),
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

fn own_user_namespace() -> Option<&'static OwnNamespace> {
    static OWN: std::sync::OnceLock<Option<OwnNamespace>> = std::sync::OnceLock::new();
    OWN.get_or_init(|| {
        let ns = std::fs::metadata("/proc/self/ns/user").ok()?;
        Some(OwnNamespace {
            id: (ns.dev(), ns.ino()),
            uid_map: std::fs::read("/proc/self/uid_map").ok()?,
            gid_map: std::fs::read("/proc/self/gid_map").ok()?,
        })
    })
    .as_ref()
}

/// A pidfd polls readable once its process has exited.
pub(super) fn still_running(pidfd: BorrowedFd<'_>) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(pidfd, PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(0))
}

/// Whether the connection is closed at the other end (`POLLHUP`: no
/// process holds the peer's socket any more, or it shut down both ways).
/// A half-close (`shutdown(SHUT_WR)`, still reading answers) is not.
fn hung_up(socket: BorrowedFd<'_>) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(socket, PollFlags::empty())];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(_) => fds[0].revents().is_none_or(|r| {
            r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL)
        }),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::net::{UnixListener, UnixStream as StdUnixStream};
    use std::time::Instant;

    use nix::sys::signal::{kill, Signal};
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    use nix::unistd::Pid;

    use crate::origin::start_ticks;
    use crate::sys::{clone_process, exit_immediately};

    #[test]
    fn a_peer_in_the_daemons_namespace_is_recognised_as_such() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (a, _b) = UnixStream::pair().unwrap();
            let peer = peer_of(&a, Accepted::now()).unwrap();
            assert!(!peer.other_user_namespace, "{peer:?}");
        });
    }

    /// What a connecting child does once connected.
    #[derive(Clone, Copy, PartialEq)]
    enum Then {
        /// Keeps the connection open and waits to be killed.
        Wait,
        /// Closes the connection, then waits to be killed.
        CloseAndWait,
    }

    /// A child process (cloned with `clone_flags`, e.g. into a new user
    /// namespace) connected to a listener, and the daemon's end of its
    /// connection. The child is killed on drop.
    struct Connected {
        child: Pid,
        stream: StdUnixStream,
        accepted: Accepted,
    }

    impl Connected {
        fn new(clone_flags: libc::c_int, then: Then) -> Connected {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s");
            let listener = UnixListener::bind(&path).unwrap();
            listener.set_nonblocking(true).unwrap();
            // Everything the child uses is made here: this process has other
            // threads (the test harness's), so the child must not allocate.
            let addr = UnixAddr::new(&path).unwrap();
            let pid = clone_process(clone_flags).unwrap();
            if pid == 0 {
                child_connects(&addr, then);
            }
            let child = Pid::from_raw(pid);
            let deadline = Instant::now() + Duration::from_secs(10);
            let stream = loop {
                match listener.accept() {
                    Ok((s, _)) => break s,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if let Ok(WaitStatus::Exited(_, code)) =
                            waitpid(child, Some(WaitPidFlag::WNOHANG))
                        {
                            panic!("the child could not connect (exit {code})");
                        }
                        assert!(Instant::now() < deadline, "the child did not connect");
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            };
            let accepted = Accepted::now();
            stream.set_nonblocking(false).unwrap();
            if then == Then::CloseAndWait {
                // Until the child's close shows.
                while !hung_up(stream.as_fd()) {
                    assert!(Instant::now() < deadline, "the child did not close");
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            Connected {
                child,
                stream,
                accepted,
            }
        }

        /// The peer's pid as `SO_PEERCRED` gives it.
        fn peer_pid(&self) -> i32 {
            let cred = nix::sys::socket::getsockopt(
                &self.stream,
                nix::sys::socket::sockopt::PeerCredentials,
            )
            .unwrap();
            assert_eq!(cred.pid(), self.child.as_raw());
            cred.pid()
        }

        /// The fallback for kernels without `SO_PEERPIDFD`, called directly.
        fn by_pid(&self, accepted: Accepted) -> bool {
            in_own_user_namespace_by_pid(self.stream.as_fd(), Some(self.peer_pid()), accepted).0
        }
    }

    impl Drop for Connected {
        fn drop(&mut self) {
            let _ = kill(self.child, Signal::SIGKILL);
            let _ = waitpid(self.child, None);
        }
    }

    /// The child's side: connect, then hold on (no allocation here).
    fn child_connects(addr: &UnixAddr, then: Then) -> ! {
        let connected: nix::Result<OwnedFd> = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::empty(),
            None,
        )
        .and_then(|s| connect(s.as_raw_fd(), addr).map(|()| s));
        match connected {
            Ok(s) => {
                let _held = (then == Then::Wait).then_some(s);
                loop {
                    nix::unistd::pause();
                }
            }
            Err(_) => exit_immediately(1),
        }
    }

    #[test]
    fn without_so_peerpidfd_a_peer_in_the_daemons_namespace_is_recognised_by_pid() {
        let c = Connected::new(0, Then::Wait);
        assert!(c.by_pid(c.accepted));
        // The whole path, as a kernel before 6.5 takes it.
        let unsupported = io::Error::from_raw_os_error(libc::ENOPROTOOPT);
        assert!(socket_pidfd_unsupported(&unsupported));
    }

    #[test]
    fn without_so_peerpidfd_a_peer_in_another_user_namespace_is_refused() {
        let c = Connected::new(libc::CLONE_NEWUSER, Then::Wait);
        let pid = c.peer_pid();
        let ns = |p: &str| {
            std::fs::metadata(format!("/proc/{p}/ns/user"))
                .unwrap()
                .ino()
        };
        assert_ne!(
            ns(&pid.to_string()),
            ns("self"),
            "the child's namespace is its own"
        );
        // Alive, started before acceptance, connected: only its namespace
        // tells it apart.
        assert!(started_by(pid, c.accepted));
        assert!(!hung_up(c.stream.as_fd()));
        assert!(!c.by_pid(c.accepted));
        // The way the running kernel offers agrees (by pid before 6.5).
        let (own, found_by, _) = in_own_user_namespace(c.stream.as_fd(), Some(pid), c.accepted);
        assert!(!own, "{found_by:?}");
        assert_ne!(found_by, FoundBy::Nothing);
    }

    #[test]
    fn without_so_peerpidfd_a_process_started_after_acceptance_is_refused() {
        // The connection "accepted" before the process at the peer's pid
        // started, as when its first holder died and the pid was reused.
        let earlier = Accepted::now();
        std::thread::sleep(Duration::from_millis(50));
        let c = Connected::new(0, Then::Wait);
        assert!(!started_by(c.peer_pid(), earlier));
        assert!(!c.by_pid(earlier));
        assert!(
            c.by_pid(c.accepted),
            "the same peer, accepted after its start"
        );
        assert!(!c.by_pid(Accepted(None)), "no clock, no identity");
    }

    #[test]
    fn without_so_peerpidfd_a_hung_up_connection_is_refused() {
        let c = Connected::new(0, Then::CloseAndWait);
        assert!(started_by(c.peer_pid(), c.accepted));
        assert!(!c.by_pid(c.accepted));
    }

    #[test]
    fn only_enoprotoopt_means_the_kernel_lacks_so_peerpidfd() {
        let err = |e: i32| io::Error::from_raw_os_error(e);
        assert!(socket_pidfd_unsupported(&err(libc::ENOPROTOOPT)));
        // 6.5 and later: the peer has exited (its pid may be another's now).
        assert!(!socket_pidfd_unsupported(&err(libc::EINVAL)));
        for e in [libc::EPERM, libc::EMFILE, libc::ENODATA, libc::EBADF] {
            assert!(!socket_pidfd_unsupported(&err(e)), "{e}");
        }
    }

    #[test]
    fn the_start_time_is_read_after_the_last_parenthesis() {
        // Fields 3 to 52 after the name; field 22 is the start time.
        let fields = |start: u64| {
            (3..=52)
                .map(|n| {
                    if n == 22 {
                        start.to_string()
                    } else {
                        n.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        for comm in ["sh", "a) (b c", ") (", "x y) 7 8 (z", "(", ")", ""] {
            let line = format!("4242 ({comm}) {}\n", fields(987_654));
            assert_eq!(start_ticks(line.as_bytes()), Some(987_654), "{line}");
        }
        let mut bytes = b"7 (\xff\xfe) (bad utf-8) ".to_vec();
        bytes.extend_from_slice(fields(5).as_bytes());
        assert_eq!(start_ticks(&bytes), Some(5));
        assert_eq!(start_ticks(b"7 (sh) S 1 2 3"), None, "too few fields");
        assert_eq!(start_ticks(b"7 sh S 1 2 3"), None, "no name");
        let ours = std::fs::read("/proc/self/stat").unwrap();
        assert!(start_ticks(&ours).is_some());
        assert!(started_by(std::process::id() as i32, Accepted::now()));
    }
}
