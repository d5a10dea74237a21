//! Why a sandbox could not be set up, as a value: the [`Step`] that failed,
//! the call and what it was applied to, and the error. It is what the
//! parent's side returns, what init reports on its status pipe
//! ([`super::status_pipe`]) and what the daemon's spawner replies with, typed
//! all the way: the pipeline above names the failure's kind from the step,
//! never from the text.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The part of a sandbox's setup that failed. On the status pipe a step is
/// its byte ([`Step::byte`]), right after the failure's tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum Step {
    /// The parent's work before the clone: the order's checks, the scopes
    /// created, opened and checked, the program's sealed copy, the pipes
    /// and the cgroups.
    Prepare = b'p',
    /// Cloning init into new namespaces (a spare sandbox's too).
    Clone = b'c',
    /// Writing init's uid and gid maps.
    MapIds = b'm',
    /// Init's own start inside: signal actions, process group, descriptors,
    /// cgroups, its go-ahead.
    Init = b'i',
    /// Building the sandbox's root: mounts, idmapped scopes, the pivot, the
    /// working directory.
    Root = b'r',
    /// The sandbox's network: loopback, routes, listeners.
    Network = b'n',
    /// Taking the program's identity: ids, groups, capabilities.
    Identity = b'u',
    /// Applying Landlock.
    Landlock = b'l',
    /// Installing the seccomp filter (and handing a traced filter's listener over).
    Seccomp = b's',
    /// Starting the program: its process's descriptors and limits, and the exec.
    Exec = b'x',
    /// The go-ahead that lets init build its root, or start the program.
    GoAhead = b'g',
    /// The daemon's spawner: unreachable, or a reply without what it owes.
    Spawner = b'd',
}

impl Step {
    const ALL: [Step; 12] = [
        Step::Prepare,
        Step::Clone,
        Step::MapIds,
        Step::Init,
        Step::Root,
        Step::Network,
        Step::Identity,
        Step::Landlock,
        Step::Seccomp,
        Step::Exec,
        Step::GoAhead,
        Step::Spawner,
    ];

    /// The byte that stands for this step on the status pipe.
    pub const fn byte(self) -> u8 {
        self as u8
    }

    /// The step a status pipe's byte stands for, if any.
    pub fn from_byte(byte: u8) -> Option<Step> {
        Step::ALL.into_iter().find(|s| s.byte() == byte)
    }
}

/// What went wrong in a step: an OS error number, or a description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// An `errno`, shown as [`std::io::Error`] shows it.
    Os(i32),
    /// Anything else, as text.
    Other(String),
    /// The error as a sandbox's init reported it on its status pipe, read
    /// once init had died before its program started: shown with `: reported
    /// by the sandbox` after it.
    Reported(String),
}

impl Cause {
    /// The OS error number, if the cause is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Cause::Os(n) => Some(*n),
            Cause::Other(_) | Cause::Reported(_) => None,
        }
    }
}

impl From<std::io::Error> for Cause {
    fn from(e: std::io::Error) -> Cause {
        match e.raw_os_error() {
            Some(n) => Cause::Os(n),
            None => Cause::Other(e.to_string()),
        }
    }
}

impl From<nix::Error> for Cause {
    fn from(e: nix::Error) -> Cause {
        Cause::Os(e as i32)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Os(n) => std::io::Error::from_raw_os_error(*n).fmt(f),
            Cause::Other(text) => f.write_str(text),
            Cause::Reported(text) => write!(f, "{text}: reported by the sandbox"),
        }
    }
}

/// A setup step that failed: which, the call and what it was applied to
/// (`mount(/usr, MS_BIND|MS_REC)`), and the error. Shown as
/// `<call>: <cause>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetupError {
    /// The part of the setup.
    pub step: Step,
    /// What was being done.
    pub call: Cow<'static, str>,
    /// The error.
    pub source: Cause,
}

impl SetupError {
    /// A step that failed with an I/O or OS error.
    pub fn new(
        step: Step,
        call: impl Into<Cow<'static, str>>,
        source: std::io::Error,
    ) -> SetupError {
        SetupError::because(step, call, source.into())
    }

    /// A step that failed for `cause`.
    pub fn because(step: Step, call: impl Into<Cow<'static, str>>, cause: Cause) -> SetupError {
        SetupError {
            step,
            call: call.into(),
            source: cause,
        }
    }
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.call, self.source)
    }
}

impl std::error::Error for SetupError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_as_the_call_and_the_error_as_io_shows_it() {
        let e = SetupError::new(Step::Root, "mount(/usr)", nix::Error::EPERM.into());
        let io = std::io::Error::from_raw_os_error(libc::EPERM);
        assert_eq!(e.to_string(), format!("mount(/usr): {io}"));
        let other = SetupError::new(Step::Prepare, "argv/env", std::io::Error::other("no"));
        assert_eq!(other.to_string(), "argv/env: no");
    }

    #[test]
    fn every_step_has_its_own_byte() {
        for step in Step::ALL {
            assert_eq!(Step::from_byte(step.byte()), Some(step));
        }
        let mut bytes: Vec<u8> = Step::ALL.iter().map(|s| s.byte()).collect();
        bytes.sort_unstable();
        bytes.dedup();
        assert_eq!(bytes.len(), Step::ALL.len());
        assert_eq!(Step::from_byte(b'?'), None);
    }

    #[test]
    fn crosses_a_frame_typed() {
        let e = SetupError::new(
            Step::Landlock,
            "landlock_restrict_self",
            nix::Error::E2BIG.into(),
        );
        let bytes = postcard::to_allocvec(&e).unwrap();
        let back: SetupError = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, e);
    }
}
