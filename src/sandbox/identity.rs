//! The child's identity: every capability set and the bounding set emptied,
//! supplementary groups dropped (when the user namespace allows it), the
//! target uid/gid taken, and no-new-privileges set — so nothing the program
//! executes can gain a privilege, setuid bits and file capabilities included.

use nix::unistd::{setgroups, setresgid, setresuid, Gid, Uid};

use super::{SetupError, Step};
use crate::sys::{clear_ambient_capabilities, clear_capabilities, drop_bounding_capability};

/// Upper bound when probing the bounding set (the kernel answers EINVAL past the last capability).
const CAP_PROBE_LIMIT: u32 = 64;

/// Proof that this process's bounding set was emptied: only
/// [`drop_bounding_set`] makes one, and [`drop_privileges_in_child`] takes it.
#[derive(Debug)]
pub(super) struct BoundingSetEmpty(());

/// Empties the bounding set (one `prctl` per capability, about 40). The
/// capabilities in effect stay, so mounting goes on; a spare sandbox
/// does this before its order comes, any other while its old root detaches.
pub(super) fn drop_bounding_set() -> Result<BoundingSetEmpty, SetupError> {
    for cap in 0..CAP_PROBE_LIMIT {
        match drop_bounding_capability(cap) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(BoundingSetEmpty(())),
            Err(e) => return Err(SetupError::new(Step::Identity, "drop bounding set", e)),
        }
    }
    Err(SetupError::new(
        Step::Identity,
        "drop bounding set",
        std::io::Error::other(format!("more than {CAP_PROBE_LIMIT} capabilities")),
    ))
}

/// Drops every remaining privilege and becomes `uid`/`gid`, the bounding set
/// being empty already (`_emptied`). `may_setgroups` is false in a user
/// namespace created by an unprivileged parent (`setgroups` is denied there).
pub(super) fn drop_privileges_in_child(
    uid: u32,
    gid: u32,
    may_setgroups: bool,
    _emptied: BoundingSetEmpty,
) -> Result<(), SetupError> {
    if may_setgroups {
        setgroups(&[]).map_err(|e| SetupError::new(Step::Identity, "setgroups([])", e.into()))?;
    }
    let (g, u) = (Gid::from_raw(gid), Uid::from_raw(uid));
    setresgid(g, g, g)
        .map_err(|e| SetupError::new(Step::Identity, format!("setresgid({gid})"), e.into()))?;
    setresuid(u, u, u)
        .map_err(|e| SetupError::new(Step::Identity, format!("setresuid({uid})"), e.into()))?;
    clear_ambient_capabilities()
        .map_err(|e| SetupError::new(Step::Identity, "clear ambient capabilities", e))?;
    clear_capabilities().map_err(|e| SetupError::new(Step::Identity, "capset(empty)", e))?;
    nix::sys::prctl::set_no_new_privs()
        .map_err(|e| SetupError::new(Step::Identity, "prctl(PR_SET_NO_NEW_PRIVS)", e.into()))
}
