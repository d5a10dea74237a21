//! docs/sandbox.md: "spawnd binds nothing the caller could not open itself". When
//! spawnd is root and acts for another user (the daemon's peers), the scopes
//! are created, opened and checked with that user's file-system identity:
//! fsuid, fsgid and supplementary groups switched for the duration (which also
//! drops root's file capabilities), so every directory on the way must be
//! searchable by the caller and each scope readable, writable or executable as
//! declared. The descriptor opened this way is the one later bound, so nothing
//! can be swapped between the check and the mount.
//!
//! Runs only in a single-threaded process (the spawner, or `spawnd run`):
//! credentials are per thread, and `setgroups` changes the whole process.

use nix::unistd::{AccessFlags, Gid, Uid};

use super::spec::{BindSource, MountKind, SandboxSpec};
use super::{SetupError, Step};

/// The identity the scopes are checked as.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CallerCreds {
    /// The caller's uid.
    pub uid: u32,
    /// The caller's primary gid.
    pub gid: u32,
    /// The caller's supplementary groups (from the group database).
    pub groups: Vec<u32>,
}

impl CallerCreds {
    /// The caller `uid`/`gid` with its groups from the group database.
    pub fn of(uid: u32, gid: u32) -> CallerCreds {
        let groups = nix::unistd::User::from_uid(Uid::from_raw(uid))
            .ok()
            .flatten()
            .and_then(|u| {
                let name = std::ffi::CString::new(u.name).ok()?;
                nix::unistd::getgrouplist(&name, Gid::from_raw(gid)).ok()
            })
            .map(|g| g.into_iter().map(Gid::as_raw).collect())
            .unwrap_or_else(|| vec![gid]);
        CallerCreds { uid, gid, groups }
    }
}

/// Runs `f` with the caller's file-system identity, then restores root's.
/// If root's identity cannot be restored the process exits: it must not go
/// on with someone else's.
pub(super) fn with_identity<T>(
    who: &CallerCreds,
    f: impl FnOnce() -> Result<T, SetupError>,
) -> Result<T, SetupError> {
    let saved = nix::unistd::getgroups()
        .map_err(|e| SetupError::new(Step::Prepare, "getgroups", e.into()))?;
    let groups: Vec<Gid> = who.groups.iter().copied().map(Gid::from_raw).collect();
    nix::unistd::setgroups(&groups).map_err(|e| {
        SetupError::new(
            Step::Prepare,
            format!("setgroups for uid {}", who.uid),
            e.into(),
        )
    })?;
    nix::unistd::setfsgid(Gid::from_raw(who.gid));
    nix::unistd::setfsuid(Uid::from_raw(who.uid));
    // setfs*id cannot report failure; asking again returns the id in force.
    let took = nix::unistd::setfsuid(Uid::from_raw(who.uid)).as_raw() == who.uid
        && nix::unistd::setfsgid(Gid::from_raw(who.gid)).as_raw() == who.gid;
    let result = if took {
        f()
    } else {
        Err(SetupError::new(
            Step::Prepare,
            format!(
                "switch to the caller's file-system identity (uid {}, gid {})",
                who.uid, who.gid
            ),
            std::io::Error::from_raw_os_error(libc::EPERM),
        ))
    };
    nix::unistd::setfsuid(Uid::from_raw(0));
    nix::unistd::setfsgid(Gid::from_raw(0));
    // setfs*id return the previous value: a second call says whether it took.
    let restored = nix::unistd::setfsuid(Uid::from_raw(0)).is_root()
        && nix::unistd::setfsgid(Gid::from_raw(0)).as_raw() == 0
        && nix::unistd::setgroups(&saved).is_ok();
    if !restored {
        tracing::error!(
            "could not restore root's identity after checking scopes as uid {}; exiting",
            who.uid
        );
        std::process::exit(10);
    }
    result
}

/// What the caller must be allowed on each scope of `spec`, in order:
/// read, plus write for `fs_write`, plus search or execute for directories
/// and `fs_exec`.
pub(super) fn required_access(spec: &SandboxSpec) -> Vec<AccessFlags> {
    let mut need = vec![AccessFlags::R_OK; spec.scopes.len()];
    for step in &spec.mounts {
        if let MountKind::Bind {
            source: BindSource::Scope(i),
            dir,
            writable,
            exec,
        } = &step.kind
        {
            if let Some(n) = need.get_mut(*i) {
                if *writable {
                    *n |= AccessFlags::W_OK;
                }
                if *dir || *exec {
                    *n |= AccessFlags::X_OK;
                }
            }
        }
    }
    need
}

/// Whose access a failed check speaks of.
#[derive(Debug, Clone, Copy)]
pub(super) enum Checked {
    /// The caller the scope was opened as.
    Caller(u32),
    /// The identity the program runs as (a root caller's, or `run_as`).
    Child(u32),
}

impl Checked {
    fn refusal(self, what: &str, subject: &str) -> String {
        match self {
            Checked::Caller(uid) => format!(
                "{subject}: the caller (uid {uid}) may not {what} it, and spawnd binds nothing the caller could not open itself"
            ),
            Checked::Child(uid) => format!(
                "{subject}: the program runs as uid {uid} ([sandbox] run_as, or 65534 when a root caller's program has none), which may not {what} it; give uid {uid} that access or choose another run_as"
            ),
        }
    }
}

/// When spawnd is root and the program runs as another identity than the
/// one the scopes were opened as (a root caller's program, or `run_as`),
/// that identity must have the declared access to each scope's own inode
/// and may execute the program (read it, for a `#!` script). The path to a
/// scope is not walked: the sandbox builds its own. Without this check the
/// program would meet EACCES with no word of why. An idmapped scope is
/// checked through its idmapped tree, as the program will see it; the
/// refusal of a scope in `not_idmapped` says why it was not idmapped.
pub(super) fn check_as_child(
    scopes: &[super::child::ScopeId],
    not_idmapped: &[super::idmap::NotIdmapped],
    need: &[AccessFlags],
    program: std::os::fd::BorrowedFd<'_>,
    script: bool,
    uid: u32,
    gid: u32,
) -> Result<(), SetupError> {
    let child = CallerCreds {
        uid,
        gid,
        groups: vec![gid],
    };
    with_identity(&child, || {
        for (index, (scope, need)) in scopes.iter().zip(need).enumerate() {
            let fd = std::os::fd::AsFd::as_fd(scope.idmapped.as_ref().unwrap_or(&scope.pinned));
            check_scope(fd, &scope.canonical, *need, Checked::Child(uid)).map_err(|mut e| {
                if let Some(not) = not_idmapped.iter().find(|n| n.index == index) {
                    e.call.to_mut().push_str("; ");
                    e.call.to_mut().push_str(&not.why);
                }
                e
            })?;
        }
        let mut need = AccessFlags::X_OK;
        if script {
            need |= AccessFlags::R_OK;
        }
        nix::unistd::faccessat(
            program,
            "",
            need,
            nix::fcntl::AtFlags::AT_EMPTY_PATH | nix::fcntl::AtFlags::AT_EACCESS,
        )
        .map_err(|e| {
            let what = if script { "read+execute" } else { "execute" };
            SetupError::new(
                Step::Prepare,
                Checked::Child(uid).refusal(what, "the program"),
                e.into(),
            )
        })
    })
}

/// Checks that the identity now in force may `need` on the scope opened as `fd`.
pub(super) fn check_scope(
    fd: std::os::fd::BorrowedFd<'_>,
    path: &std::path::Path,
    need: AccessFlags,
    who: Checked,
) -> Result<(), SetupError> {
    nix::unistd::faccessat(
        fd,
        "",
        need,
        nix::fcntl::AtFlags::AT_EMPTY_PATH | nix::fcntl::AtFlags::AT_EACCESS,
    )
    .map_err(|e| {
        let what = [
            (AccessFlags::R_OK, "read"),
            (AccessFlags::W_OK, "write"),
            (AccessFlags::X_OK, "search/execute"),
        ]
        .iter()
        .filter(|(f, _)| need.contains(*f))
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join("+");
        SetupError::new(
            Step::Prepare,
            who.refusal(&what, &format!("scope {}", path.display())),
            e.into(),
        )
    })
}
