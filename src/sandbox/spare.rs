//! Spare sandboxes, for the daemon's
//! spawner. Creating the user, mount, pid, network, ipc and uts namespaces
//! is most of a sandbox's kernel work (the network namespace above all), and
//! none of it depends on the request; nor
//! does the shared part of the root (/tmp, /dev, /proc), once the ids are
//! mapped. So a caller that launches many sandboxes (the daemon's spawner)
//! makes spares while it is idle, and a request only hands over its order.
//!
//! A spare is a process in fresh namespaces that has closed every descriptor
//! but one end of a private socketpair and waits there for, at most, one
//! "prepare" (its ids were mapped for an identity: build the shared part of
//! the root, and mount the system paths and small files the last request
//! had ([`super::spec::steps_mountable_ahead`]), which a
//! daemon's requests share as they come from one config) and then its
//! order: the [`LaunchOrder`] and the descriptors of [`Handover`], as one
//! [`crate::ipc`] frame. From them it builds
//! exactly the [`super::child::ChildSetup`] a child cloned at launch would
//! have had, and goes on as that child would (root, identity, Landlock,
//! seccomp, the program on the second go-ahead). Each spare serves one
//! sandbox and no more; a prepared one serves only its identity.
//!
//! `spawnd run` does not use spares: the kernel does a clone's namespace work
//! in the calling process, so a one-shot process gains nothing by cloning
//! earlier, and a helper to clone in the background costs a fork of its own,
//! more CPU for no shorter wait.
//!
//! A spare dies with its parent (parent-death signal, and its socket reads
//! end-of-file), and dropping a [`Spare`] kills and reaps it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::sys::signal::Signal;

use super::child::{default_signal_actions, init_main, prepare_base};
use super::handover::{Handover, HandoverFacts};
use super::launch::{clone_failed, LaunchOrder, NAMESPACES};
use super::prepare::write_id_maps;
use super::seccomp::Filter;
use super::spec::MountStep;
use super::status_pipe;
use super::threads::ensure_single_threaded;
use super::{Cause, SetupError, Step};
use crate::ipc::{recv_up_to, send, MAX_FRAME_FDS};
use crate::sys::{clone_process, close_descriptor_range, close_descriptors_from, exit_immediately};

/// The namespaces a spare is cloned into: its user namespace, and its pid
/// namespace, which only a clone can make the child's own. The others
/// ([`UNSHARED`]) the spare makes itself, first thing, owned by that user
/// namespace as a clone would have made them: their kernel work (the
/// network namespace's above all) is then the spare's, on whichever core is
/// free, and does not hold up the spawner (and the requests that come to it)
/// for the length of a clone.
const CLONED: libc::c_int = libc::CLONE_NEWUSER | libc::CLONE_NEWPID;
/// The rest of [`NAMESPACES`]: unshared by the spare before it reads any frame.
const UNSHARED: libc::c_int = NAMESPACES & !CLONED;

/// How long a request waits for the spare it takes to have made its own
/// namespaces (normally well under a millisecond after its clone).
pub(crate) const MAKING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// A spare that could not make its own namespaces.
fn made_error(e: std::io::Error) -> SetupError {
    SetupError::new(
        Step::Clone,
        "a spare sandbox's own mount, network, ipc and uts namespaces (unshare)",
        e,
    )
}

/// A spare sandbox, waiting for its order.
pub struct Spare {
    /// Its init's pid, until it is handed on (or killed).
    pid: Option<i32>,
    /// The parent's end of the order channel.
    sock: UnixStream,
    /// Whose ids were mapped in it, once prepared.
    mapped: Option<MappedFor>,
    /// The steps it was told to mount after the shared ones (system paths
    /// and small files).
    system: Vec<MountStep>,
    /// It said it has made its own namespaces ([`UNSHARED`]).
    made: bool,
}

/// The spare's word once it has made its own namespaces; failing, it sends
/// [`UNSHARE_FAILED`] and the errno (4 bytes, native order) and exits.
const NAMESPACES_MADE: u8 = b'n';
const UNSHARE_FAILED: u8 = b'e';

/// A frame to a spare: empty to prepare (its ids are mapped: build the
/// shared part of the root), or the order with the facts of its handover.
#[derive(serde::Serialize)]
struct ToSpare<'a> {
    order: Option<&'a LaunchOrder>,
    handover: Option<HandoverFacts>,
    /// With a prepare: the steps to mount after the shared ones.
    system: &'a [MountStep],
}

/// [`ToSpare`] as received (every field is always sent: the frames are
/// postcard, which has no field names to leave out).
#[derive(serde::Deserialize)]
struct FromParent {
    order: Option<LaunchOrder>,
    handover: Option<HandoverFacts>,
    system: Vec<MountStep>,
}

/// Who a spare's ids were mapped for: uid, gid, and whether the parent
/// was privileged (which decides the map's shape).
pub(crate) type MappedFor = (u32, u32, bool);

impl Spare {
    /// Clones a spare into fresh namespaces. The caller must be single-threaded.
    pub fn make() -> Result<Spare, SetupError> {
        ensure_single_threaded()?;
        // Read here, once per process, so the spare inherits the answer and
        // its init does not read `/proc/self/stat` once its order has come
        // (see `init_main`, which hides spawnd's command line).
        let _ = crate::sys::command_line_area();
        let (ours, theirs) = UnixStream::pair()
            .map_err(|e| SetupError::new(Step::Clone, "socketpair(the order channel)", e))?;
        let pid = clone_process(CLONED).map_err(clone_failed)?;
        if pid == 0 {
            drop(ours);
            wait_for_order(OwnedFd::from(theirs));
        }
        Ok(Spare {
            pid: Some(pid),
            sock: ours,
            mapped: None,
            system: Vec::new(),
            made: false,
        })
    }

    /// Whether it has made its own namespaces, without waiting: `false`
    /// while it is still making them; an error once it has said it could not
    /// (or died before saying anything). A spare is used only once this is
    /// `true` ([`Spare::wait_until_made`]).
    pub fn poll_made(&mut self) -> Result<bool, SetupError> {
        self.read_made(nix::sys::socket::MsgFlags::MSG_DONTWAIT)
    }

    /// Waits (at most [`MAKING_TIMEOUT`]) until it has made its own
    /// namespaces; an error when it could not, or took longer.
    pub fn wait_until_made(&mut self) -> Result<(), SetupError> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        let deadline = std::time::Instant::now() + MAKING_TIMEOUT;
        loop {
            if self.poll_made()? {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(made_error(std::io::Error::from(
                    std::io::ErrorKind::TimedOut,
                )));
            }
            let ms = PollTimeout::from(left.as_millis().clamp(1, 1000) as u16);
            let mut fds = [PollFd::new(self.sock.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, ms) {
                Ok(_) | Err(nix::Error::EINTR) => {}
                Err(e) => return Err(made_error(e.into())),
            }
        }
    }

    fn read_made(&mut self, flags: nix::sys::socket::MsgFlags) -> Result<bool, SetupError> {
        use std::os::fd::AsRawFd;
        if self.made {
            return Ok(true);
        }
        let mut word = [0u8; 5];
        match nix::sys::socket::recv(self.sock.as_raw_fd(), &mut word, flags) {
            Ok(1) if word[0] == NAMESPACES_MADE => {
                self.made = true;
                Ok(true)
            }
            Ok(5) if word[0] == UNSHARE_FAILED => {
                let errno = i32::from_ne_bytes([word[1], word[2], word[3], word[4]]);
                Err(made_error(std::io::Error::from_raw_os_error(errno)))
            }
            Ok(0) => Err(made_error(std::io::Error::other(
                "it exited before making them",
            ))),
            Ok(_) => Err(made_error(std::io::Error::other("it spoke out of turn"))),
            Err(nix::Error::EAGAIN) => Ok(false),
            Err(nix::Error::EINTR) => Ok(false),
            Err(e) => Err(made_error(e.into())),
        }
    }

    /// Its pid, as seen from here (`None` once handed on).
    pub fn pid(&self) -> Option<i32> {
        self.pid
    }

    /// Maps the spare's ids for `who` and lets it build the shared part of
    /// its root (/tmp, /dev, /proc, host name, loopback) and bind `system`
    /// (system paths: binds by path and symbolic links; and the small files
    /// after them, see [`super::spec::steps_mountable_ahead`]) before any request
    /// comes. It then serves only orders for `who` whose mount steps go on
    /// with `system` ([`Spare::fits`]).
    pub fn make_ready_for(
        &mut self,
        who: MappedFor,
        system: &[MountStep],
    ) -> Result<(), SetupError> {
        let pid = self.pid().ok_or_else(|| {
            SetupError::new(
                Step::Clone,
                "prepare the spare sandbox",
                std::io::Error::other("it was handed on already"),
            )
        })?;
        write_id_maps(pid, who.0, who.1, who.2)?;
        self.mapped = Some(who);
        self.system = system.to_vec();
        let prepare = ToSpare {
            order: None,
            handover: None,
            system,
        };
        send(&self.sock, &prepare, &[])
            .map_err(|e| SetupError::new(Step::Clone, "prepare the spare sandbox", e))
    }

    /// Whose ids are mapped in it (`None`: not yet; they are mapped at launch).
    pub fn mapped_for(&self) -> Option<MappedFor> {
        self.mapped
    }

    /// The steps it mounted ahead after the shared ones (empty unless prepared).
    pub fn system_steps(&self) -> &[MountStep] {
        &self.system
    }

    /// Whether an order for `who` with these mount steps can go to this
    /// spare: unprepared (nothing mounted yet), or prepared for `who` with
    /// steps that begin the order's after the shared ones.
    pub fn fits(&self, who: MappedFor, mounts: &[MountStep]) -> bool {
        match self.mapped {
            None => true,
            Some(mapped) => {
                mapped == who
                    && super::spec::after_base(mounts)
                        .is_some_and(|rest| rest.starts_with(&self.system))
            }
        }
    }

    /// Sends the order and the child's descriptors. On success the spare is
    /// that sandbox's init; the caller's copies of `handover` may be closed.
    pub(super) fn deliver(&self, order: &LaunchOrder, handover: &Handover) -> std::io::Result<()> {
        if !self.made {
            return Err(std::io::Error::other(
                "the spare has not said it made its own namespaces",
            ));
        }
        let body = ToSpare {
            order: Some(order),
            handover: Some(handover.facts()),
            system: &[],
        };
        send(&self.sock, &body, &handover.fds())
    }

    /// The init's pid, now owned by whoever launched the order.
    pub(super) fn into_pid(mut self) -> i32 {
        self.pid.take().unwrap_or(0)
    }
}

impl Drop for Spare {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            self.pid = None;
            let pid = nix::unistd::Pid::from_raw(pid);
            let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(pid, None);
        }
    }
}

/// The spare's side: nothing of the parent stays open but the channel; wait
/// for one order, then become that sandbox's init. Never returns.
fn wait_for_order(sock: OwnedFd) -> ! {
    let raw = sock.as_raw_fd() as u32;
    let closed = match raw {
        0 => Ok(()),
        n => close_descriptor_range(0, n - 1),
    }
    .and_then(|()| close_descriptors_from(raw + 1));
    // Back to the daemon's priority from the start, not only once the order
    // comes (see `super::priority`): nothing of a sandbox runs at the
    // spawner's.
    if closed.is_err()
        || super::priority::back_to_base().is_err()
        || nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err()
        || default_signal_actions().is_err()
    {
        exit_immediately(126)
    }
    // Its own mount, network, ipc and uts namespaces, at the daemon's
    // priority, then its word to the parent: no order is sent to a spare
    // before it has said it made them ([`Spare::wait_until_made`]); one that
    // cannot make them says why and exits before reading any frame.
    let word = match nix::sched::unshare(nix::sched::CloneFlags::from_bits_retain(UNSHARED)) {
        Ok(()) => [NAMESPACES_MADE, 0, 0, 0, 0],
        Err(e) => {
            let [a, b, c, d] = (e as i32).to_ne_bytes();
            let _ = nix::unistd::write(&sock, &[UNSHARE_FAILED, a, b, c, d]);
            exit_immediately(126)
        }
    };
    if nix::unistd::write(&sock, &word[..1]) != Ok(1) {
        exit_immediately(126)
    }
    let sock = UnixStream::from(sock);
    let mut staged = None;
    let mut emptied = None;
    let (order, handover, fds) = loop {
        match recv_up_to::<FromParent>(&sock, MAX_FRAME_FDS) {
            // Ids mapped: build what every sandbox shares, then wait on.
            Ok(Some((
                FromParent {
                    order: None,
                    handover: None,
                    system,
                },
                fds,
            ))) if fds.is_empty() && staged.is_none() => match prepare_base(&system) {
                Ok((mut base, bounding)) => {
                    // If this fails, init clones one at the pivot, as a
                    // sandbox made at the request does.
                    let _ = base.clone_detach_helper_ahead();
                    staged = Some(Ok(base));
                    emptied = Some(bounding);
                }
                // Not usable: gone before its order, which then goes to a
                // fresh clone (its delivery fails).
                Err(_) => exit_immediately(125),
            },
            Ok(Some((
                FromParent {
                    order: Some(order),
                    handover: Some(handover),
                    system: _,
                },
                fds,
            ))) => break (order, handover, fds),
            // End of file: the parent went away (or dropped the spare)
            // before any order; or it spoke out of turn.
            _ => exit_immediately(125),
        }
    };
    drop(sock);
    let Some(handover) = Handover::from_fds(handover, fds) else {
        exit_immediately(126)
    };
    let Some(filter) = Filter::from_bytes(&order.seccomp) else {
        let garbled = status_pipe::encode_failed(&SetupError::because(
            Step::Seccomp,
            "seccomp filter",
            Cause::Other("garbled order".into()),
        ));
        status_pipe::send(&handover.status, &garbled);
        exit_immediately(126)
    };
    match handover.into_setup(&order, &filter.instructions, true) {
        Ok(mut setup) => {
            setup.staged = staged;
            setup.bounding_emptied = emptied;
            init_main(setup)
        }
        // The parent checked argv and env before sending: not reached.
        Err(_) => exit_immediately(126),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spare stand-in (no process) whose word comes from the other end.
    fn spare_and_its_end() -> (Spare, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let spare = Spare {
            pid: None,
            sock: ours,
            mapped: None,
            system: Vec::new(),
            made: false,
        };
        (spare, theirs)
    }

    #[test]
    fn a_spare_is_made_only_once_it_says_so() {
        let (mut spare, theirs) = spare_and_its_end();
        assert!(!spare.poll_made().unwrap());
        nix::unistd::write(&theirs, &[NAMESPACES_MADE]).unwrap();
        assert!(spare.poll_made().unwrap());
        spare.wait_until_made().unwrap();
    }

    #[test]
    fn a_spare_that_could_not_unshare_says_why_and_one_that_died_is_not_made() {
        let (mut spare, theirs) = spare_and_its_end();
        let [a, b, c, d] = libc::ENOSPC.to_ne_bytes();
        nix::unistd::write(&theirs, &[UNSHARE_FAILED, a, b, c, d]).unwrap();
        let e = spare.poll_made().unwrap_err().to_string();
        assert!(e.contains("unshare") && e.contains("os error 28"), "{e}");

        let (mut spare, theirs) = spare_and_its_end();
        drop(theirs);
        let e = spare.wait_until_made().unwrap_err().to_string();
        assert!(e.contains("exited before making them"), "{e}");
    }
}
