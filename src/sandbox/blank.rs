//! Sandboxes made ahead of their request ("blanks"). Creating the user,
//! mount, pid, network, ipc and uts namespaces is most of a sandbox's kernel
//! work (about 0.6–1 ms here, the network namespace alone about 0.6), and
//! none of it depends on the request. So the `clone` can happen before the
//! request is known: `spawnd run` clones its blank first thing, while it
//! parses the config and the manifest, hashes the program and asks the gate;
//! the daemon's spawner keeps a few ready while idle.
//!
//! A blank is a process in fresh namespaces that has closed every descriptor
//! but one end of a private socketpair and waits there, doing nothing else,
//! for its order: the [`LaunchOrder`] and the descriptors of
//! [`ChildParts`], as one [`crate::spawner::wire`] frame. From them it builds
//! exactly the [`super::child::ChildSetup`] a child cloned at launch would
//! have had, and goes on as that child would (ids mapped by the parent, root,
//! Landlock, seccomp, the program on the second go-ahead). Each blank serves
//! one sandbox and no more. The caller's ids are mapped after the order, so
//! one blank fits any caller.
//!
//! A blank dies with its parent (parent-death signal, and its socket reads
//! end-of-file), and dropping a [`Blank`] kills and reaps it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::sys::signal::Signal;

use super::child::{init_main, prepare_base, ChildParts, PartsFacts};
use super::launch::{clone_failed, ensure_single_threaded, LaunchOrder, NAMESPACES};
use super::prepare::write_id_maps;
use super::seccomp::Filter;
use super::sys::{
    clone_process, close_descriptor_range, close_descriptors_from, exit_immediately, fork_process,
};
use super::StepError;
use crate::spawner::wire::{recv_up_to, send, MAX_FRAME_FDS};

/// A sandbox made ahead, waiting for its order.
pub struct Blank {
    /// Its init's pid, until it is handed on (or killed).
    pid: Option<i32>,
    /// The parent's end of the order channel.
    sock: UnixStream,
    /// Made by a helper that has not yet been heard from.
    maker: Option<Maker>,
    /// Whose ids were mapped in it, once prepared.
    mapped: Option<MappedFor>,
}

/// The short-lived helper that clones a blank in the background: the pipe
/// on which it reports ([`report`]) and the one on which it is told whose
/// ids to map.
struct Maker {
    pid: i32,
    told: OwnedFd,
    who: Option<OwnedFd>,
}

/// A maker's report: the blank's pid (or the clone's errno, negated), and
/// whether it mapped the ids and told the blank to prepare.
fn report(pid: i64, prepared: bool) -> [u8; 9] {
    let mut r = [0u8; 9];
    r[..8].copy_from_slice(&pid.to_le_bytes());
    r[8] = u8::from(prepared);
    r
}

/// Reads exactly `buf.len()` bytes; false at end of file or error first.
fn read_full(fd: &OwnedFd, buf: &mut [u8]) -> bool {
    let mut got = 0;
    while got < buf.len() {
        match nix::unistd::read(fd, &mut buf[got..]) {
            Ok(0) => return false,
            Ok(n) => got += n,
            Err(nix::Error::EINTR) => {}
            Err(_) => return false,
        }
    }
    true
}

/// The frame that tells a blank its ids are mapped.
const PREPARE: ToBlank<'static> = ToBlank {
    order: None,
    parts: None,
};

/// A frame to a blank: empty to prepare (its ids are mapped: build the
/// shared part of the root), or the order with the facts of its parts.
#[derive(serde::Serialize)]
struct ToBlank<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    order: Option<&'a LaunchOrder>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parts: Option<PartsFacts>,
}

#[derive(serde::Deserialize)]
struct FromParent {
    #[serde(default)]
    order: Option<LaunchOrder>,
    #[serde(default)]
    parts: Option<PartsFacts>,
}

/// Who a blank's ids were mapped for: uid, gid, and whether the parent
/// was privileged (which decides the map's shape).
pub type MappedFor = (u32, u32, bool);

impl Blank {
    /// Clones a blank into fresh namespaces. The caller must be single-threaded.
    pub fn make() -> Result<Blank, StepError> {
        ensure_single_threaded()?;
        let (ours, theirs) = UnixStream::pair()
            .map_err(|e| StepError::new("socketpair(the order channel)", e))?;
        let pid = clone_process(NAMESPACES).map_err(clone_failed)?;
        if pid == 0 {
            drop(ours);
            wait_for_order(OwnedFd::from(theirs));
        }
        Ok(Blank {
            pid: Some(pid),
            sock: ours,
            maker: None,
            mapped: None,
        })
    }

    /// Like [`Blank::make`], but the `clone` — whose namespace creation the
    /// kernel does in the calling process, about 0.6 ms — runs in a helper
    /// forked for it, on the other core, while this process goes on. The
    /// helper clones with `CLONE_PARENT`, so the blank is this process's
    /// child (reaped here, killed by its parent-death signal when this
    /// process dies). It then waits to be told whose ids to map
    /// ([`Blank::prepare`]), maps them and tells the blank to prepare —
    /// so this process never waits for the clone — reports and exits.
    pub fn make_in_background() -> Result<Blank, StepError> {
        ensure_single_threaded()?;
        let (ours, theirs) = UnixStream::pair()
            .map_err(|e| StepError::new("socketpair(the order channel)", e))?;
        let pipe = || {
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|e| StepError::new("pipe2(the blank maker)", e.into()))
        };
        let (told, tell) = pipe()?;
        let (whose, who) = pipe()?;
        let maker = fork_process().map_err(|e| StepError::new("fork(blank maker)", e))?;
        if maker == 0 {
            drop((told, who));
            let pid = match clone_process(NAMESPACES | libc::CLONE_PARENT) {
                Ok(0) => {
                    drop((tell, whose, ours));
                    wait_for_order(OwnedFd::from(theirs))
                }
                Ok(pid) => pid,
                Err(e) => {
                    let errno = -i64::from(e.raw_os_error().unwrap_or(libc::EINVAL));
                    let _ = nix::unistd::write(&tell, &report(errno, false));
                    exit_immediately(0)
                }
            };
            drop(theirs);
            // Whose ids: 9 bytes (uid, gid, privileged), or end of file.
            let mut said = [0u8; 9];
            let prepared = read_full(&whose, &mut said) && {
                let who = (
                    u32::from_le_bytes([said[0], said[1], said[2], said[3]]),
                    u32::from_le_bytes([said[4], said[5], said[6], said[7]]),
                    said[8] == 1,
                );
                write_id_maps(pid, who.0, who.1, who.2).is_ok()
                    && send(&ours, &PREPARE, &[]).is_ok()
            };
            let _ = nix::unistd::write(&tell, &report(i64::from(pid), prepared));
            exit_immediately(0)
        }
        Ok(Blank {
            pid: None,
            sock: ours,
            maker: Some(Maker {
                pid: maker,
                told,
                who: Some(who),
            }),
            mapped: None,
        })
    }

    /// Its pid, as seen from here, once made (`None`: it could not be).
    /// Waits for a maker to report (telling it no one's ids, if not yet told).
    pub fn pid(&mut self) -> Option<i32> {
        if let Some(mut maker) = self.maker.take() {
            drop(maker.who.take());
            let mut said = [0u8; 9];
            let complete = read_full(&maker.told, &mut said);
            // It exits right after reporting; not waited for here (tearing
            // down its copy of this process takes a while): reaped if already
            // gone, else a zombie until this short-lived process exits.
            let _ = nix::sys::wait::waitpid(
                nix::unistd::Pid::from_raw(maker.pid),
                Some(nix::sys::wait::WaitPidFlag::WNOHANG),
            );
            let pid = i64::from_le_bytes([
                said[0], said[1], said[2], said[3], said[4], said[5], said[6], said[7],
            ]);
            if complete && pid > 0 {
                self.pid = i32::try_from(pid).ok();
            }
            // The maps were asked for; they are there only if the maker says so.
            if !(complete && said[8] == 1) {
                self.mapped = None;
            }
        }
        self.pid
    }

    /// Maps the blank's ids for `who` and lets it build the shared part of
    /// its root (/tmp, /dev, /proc, host name, loopback) while the request
    /// is still being decided. It then serves only orders for `who`. A
    /// blank still being made is told through its maker, without waiting.
    pub fn prepare(&mut self, who: MappedFor) -> Result<(), StepError> {
        if let Some(pipe) = self.maker.as_mut().and_then(|m| m.who.take()) {
            let mut said = [0u8; 9];
            said[..4].copy_from_slice(&who.0.to_le_bytes());
            said[4..8].copy_from_slice(&who.1.to_le_bytes());
            said[8] = u8::from(who.2);
            nix::unistd::write(&pipe, &said)
                .map_err(|e| StepError::new("tell the blank maker whose ids", e.into()))?;
            self.mapped = Some(who);
            return Ok(());
        }
        let pid = self.pid().ok_or_else(|| {
            StepError::new(
                "the sandbox made ahead",
                std::io::Error::other("it could not be made"),
            )
        })?;
        write_id_maps(pid, who.0, who.1, who.2)?;
        self.mapped = Some(who);
        send(&self.sock, &PREPARE, &[])
            .map_err(|e| StepError::new("prepare the sandbox made ahead", e))
    }

    /// Whose ids are mapped in it (`None`: not yet; they are mapped at launch).
    pub fn mapped_for(&self) -> Option<MappedFor> {
        self.mapped
    }

    /// Sends the order and the child's descriptors. On success the blank is
    /// that sandbox's init; the caller's copies of `parts` may be closed.
    pub(super) fn deliver(
        &mut self,
        order: &LaunchOrder,
        parts: &ChildParts,
    ) -> std::io::Result<()> {
        if self.pid().is_none() {
            return Err(std::io::Error::other("the blank could not be made"));
        }
        let body = ToBlank {
            order: Some(order),
            parts: Some(parts.facts()),
        };
        send(&self.sock, &body, &parts.fds())
    }

    /// The init's pid, now owned by whoever launched the order.
    pub(super) fn into_pid(mut self) -> i32 {
        self.pid.take().unwrap_or(0)
    }
}

impl Drop for Blank {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            self.pid = None;
            let pid = nix::unistd::Pid::from_raw(pid);
            let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(pid, None);
        }
    }
}

/// The blank's side: nothing of the parent stays open but the channel; wait
/// for one order, then become that sandbox's init. Never returns.
fn wait_for_order(sock: OwnedFd) -> ! {
    let raw = sock.as_raw_fd() as u32;
    let closed = match raw {
        0 => Ok(()),
        n => close_descriptor_range(0, n - 1),
    }
    .and_then(|()| close_descriptors_from(raw + 1));
    if closed.is_err() || nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err() {
        exit_immediately(126)
    }
    let sock = UnixStream::from(sock);
    let mut staged = None;
    let (order, parts, fds) = loop {
        match recv_up_to::<FromParent>(&sock, MAX_FRAME_FDS) {
            // Ids mapped: build what every sandbox shares, then wait on.
            Ok(Some((
                FromParent {
                    order: None,
                    parts: None,
                },
                fds,
            ))) if fds.is_empty() && staged.is_none() => staged = Some(prepare_base()),
            Ok(Some((
                FromParent {
                    order: Some(order),
                    parts: Some(parts),
                },
                fds,
            ))) => break (order, parts, fds),
            // End of file: the parent went away (or dropped the blank)
            // before any order; or it spoke out of turn.
            _ => exit_immediately(125),
        }
    };
    drop(sock);
    let Some(parts) = ChildParts::from_fds(parts, fds) else {
        exit_immediately(126)
    };
    let Some(filter) = Filter::from_bytes(&order.seccomp) else {
        let _ = nix::unistd::write(&parts.status, b"Eseccomp filter: garbled order\n");
        exit_immediately(126)
    };
    match parts.into_setup(&order, &filter.instructions, true) {
        Ok(mut setup) => {
            setup.staged = staged;
            init_main(setup)
        }
        // The parent checked argv and env before sending: not reached.
        Err(_) => exit_immediately(126),
    }
}
