//! Detached spawns (`lease_ms` on a spawn): a handle that outlives its
//! connection. When the connection that holds it closes, the handle is
//! parked here for its lease, with no connection holding it;
//! `spawn_attach` with the handle's token, from a peer with the same uid
//! and gid, takes it up on another connection. A lease that runs out kills
//! the program (`interrupted_by: "lease"`) and frees the handle; the lease
//! starts again, whole, each time the handle is parked.
//!
//! Each taking up is on record: an `attach` record (under the spawn's
//! `audit_id`) names the peer that took it up, so a kill or a closed
//! connection that follows, whose exit record names its peer
//! (`interrupted_by_peer`), is never taken for the first caller's.
//!
//! The token is 128 random bits, compared in constant time. A wrong token,
//! another peer, a peer the access rules no longer allow for the spawn's
//! connector (another user namespace included), an unknown handle and one
//! held by a connection all get the same answer, so nothing about other
//! peers' handles can be learnt.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::handles::Handle;
use super::Peer;
use crate::audit::{Kind, Unsynced};
use crate::rpc::{self, RpcError};

/// Parked handles one peer (uid and gid) may have at once; past that, a
/// handle parked is ended as if its lease had run out.
pub(super) const MAX_PARKED_PER_PEER: usize = 64;

/// What a detached handle carries: who may take it up, with what token,
/// and how long it may wait for them.
pub(super) struct Lease {
    /// The peer's uid and gid.
    owner: (u32, u32),
    /// The spawn's connector: who takes the handle up must still be
    /// allowed to act for it.
    connector: String,
    /// The secret `spawn_attach` must show.
    token: String,
    /// How long the handle is kept with no connection holding it.
    duration: Duration,
}

impl Lease {
    /// A lease of `duration` for `peer`, with a fresh token.
    pub(super) fn new(peer: &Peer, connector: &str, duration: Duration) -> Result<Lease, RpcError> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| {
            RpcError::new(
                rpc::INTERNAL_ERROR,
                format!("no randomness for a lease token (getrandom: {e}); nothing was run"),
            )
        })?;
        Ok(Lease {
            owner: (peer.uid, peer.gid),
            connector: connector.to_string(),
            token: format!("t-{}", hex::encode(bytes)),
            duration,
        })
    }

    /// The token, for the spawn's answer.
    pub(super) fn token(&self) -> &str {
        &self.token
    }

    /// The uid of the peer that started the spawn.
    pub(super) fn owner_uid(&self) -> u32 {
        self.owner.0
    }
}

/// A handle no connection holds.
struct Parked {
    handle: Arc<Handle>,
    /// When its lease runs out.
    until: Instant,
}

/// The daemon's parked handles, by name, and every detached spawn, held by
/// a connection or not, for `spawn_list`.
#[derive(Default)]
pub(super) struct Registry {
    parked: Mutex<HashMap<String, Parked>>,
    /// Every detached spawn's handle while anything holds it (a connection,
    /// the parked map): once none does, its entry is dropped.
    leased: Mutex<HashMap<String, Weak<Handle>>>,
}

/// A detached spawn as `spawn_list` sees it.
pub(super) struct Listed {
    pub name: String,
    pub handle: Arc<Handle>,
    /// The time left on its lease, when no connection holds it.
    pub lease_left: Option<Duration>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Parked>> {
        match self.parked.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// A detached spawn's handle, `name`, for [`Registry::listed_for`];
    /// entries of handles nothing holds any more go.
    pub(super) fn register(&self, name: &str, handle: &Arc<Handle>) {
        let mut leased = lock(&self.leased);
        leased.retain(|_, h| h.strong_count() > 0);
        leased.insert(name.to_string(), Arc::downgrade(handle));
    }

    /// The detached spawns started by `uid` that are still held (by a
    /// connection or parked), released ones left out, each with the time
    /// left on its lease when it is parked.
    pub(super) fn listed_for(&self, uid: u32) -> Vec<Listed> {
        let held: Vec<(String, Arc<Handle>)> = lock(&self.leased)
            .iter()
            .filter_map(|(name, h)| Some((name.clone(), h.upgrade()?)))
            .filter(|(_, h)| h.lease.as_ref().is_some_and(|l| l.owner_uid() == uid))
            .filter(|(_, h)| !h.with(|s| s.released))
            .collect();
        let now = Instant::now();
        let parked = self.lock();
        held.into_iter()
            .map(|(name, handle)| {
                let lease_left = parked
                    .get(&name)
                    .filter(|p| Arc::ptr_eq(&p.handle, &handle))
                    .map(|p| p.until.saturating_duration_since(now));
                Listed {
                    name,
                    handle,
                    lease_left,
                }
            })
            .collect()
    }

    /// The connection of `closed_by` holding `handle` closed: a leased one
    /// is parked for its lease, within `[server] max_lease_ms` as it is
    /// now; any other one is killed (`disconnect`, by that peer), as is
    /// every one while `max_lease_ms` is 0 and one whose answer (its token)
    /// never reached the peer, and a leased one past its peer's
    /// [`MAX_PARKED_PER_PEER`] is ended as if its lease ran out (`lease`).
    pub(super) fn park_or_end(
        &self,
        name: String,
        handle: Arc<Handle>,
        max_lease: Duration,
        closed_by: &Peer,
    ) {
        let announced = handle.with(|s| s.announced);
        let lease = match handle.lease.as_ref() {
            Some(lease) if !max_lease.is_zero() && announced => lease,
            _ => {
                if !handle.finished() {
                    handle.kill_for("disconnect", Some(closed_by));
                }
                return;
            }
        };
        let mut parked = self.lock();
        let held = parked
            .values()
            .filter(|p| p.handle.lease.as_ref().map(|l| l.owner) == Some(lease.owner))
            .count();
        if held >= MAX_PARKED_PER_PEER {
            drop(parked);
            if !handle.finished() {
                handle.kill_for("lease", None);
            }
            return;
        }
        let until = Instant::now() + lease.duration.min(max_lease);
        parked.insert(name, Parked { handle, until });
    }

    /// `spawn_attach`: the parked handle `name`, if `peer` owns it,
    /// `token` is its token and the peer may act for its connector now
    /// (`may_act_for`: the access rules in force, which also refuse a peer
    /// in another user namespace unless a rule allows it); it is no longer
    /// parked.
    pub(super) fn take(
        &self,
        peer: &Peer,
        name: &str,
        token: &str,
        may_act_for: impl Fn(&str) -> bool,
    ) -> Result<Arc<Handle>, RpcError> {
        let mut parked = self.lock();
        let owned = parked.get(name).is_some_and(|p| {
            p.handle.lease.as_ref().is_some_and(|l| {
                l.owner == (peer.uid, peer.gid)
                    && same_secret(l.token.as_bytes(), token.as_bytes())
                    && may_act_for(&l.connector)
            })
        });
        match owned.then(|| parked.remove(name)).flatten() {
            Some(p) => Ok(p.handle),
            None => Err(RpcError::with_data(
                rpc::NOT_FOUND,
                "no detached handle with this name and token for this peer (a connection may hold it, or its lease ran out)",
                json!({"handle": rpc::at_most(name, 64)}),
            )),
        }
    }

    /// Ends the leases that have run out: their programs are killed
    /// (`lease`) and the handles freed. Called every second.
    pub(super) fn expire(&self) {
        let now = Instant::now();
        let mut parked = self.lock();
        let due: Vec<String> = parked
            .iter()
            .filter(|(_, p)| p.until <= now)
            .map(|(name, _)| name.clone())
            .collect();
        for name in due {
            if let Some(p) = parked.remove(&name) {
                if !p.handle.finished() {
                    p.handle.kill_for("lease", None);
                }
            }
        }
    }

    /// `spawn_attach`'s answer for a handle taken up: its `spawn_status`
    /// state.
    pub(super) fn attached(name: &str, handle: &Handle) -> super::results::AttachResult {
        super::results::AttachResult {
            handle: name.to_string(),
            state: super::spawns::state(handle).to_string(),
        }
    }
}

/// A mutex's guard, even if a holder panicked.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Writes the `attach` record of `handle`, just taken up by `peer` (its
/// `state` as the answer gives it): chained in the log, not yet durable.
/// The caller writes it before it reads the connection's next request, so
/// whatever that request does to the spawn is recorded after it, and
/// commits it before answering.
pub(super) fn write_attach_record(
    daemon: &super::Daemon,
    peer: &Peer,
    handle: &Handle,
    state: &str,
) -> Result<Unsynced, String> {
    let Some(filed) = handle.with(|s| s.filed.clone()) else {
        return Err("a detached handle whose spawn never started was taken up".into());
    };
    let body = crate::audit::events::attach(&filed, peer.caller_json(), &Value::from(state));
    let config = daemon.loaded().config.clone();
    let log = crate::pipeline::open_audit(&config).map_err(|f| f.message)?;
    log.write(Kind::Attach, Some(&filed.audit_id), body)
        .map_err(|e| format!("audit unavailable: {e}"))
}

/// Makes an `attach` record durable, on a blocking thread.
pub(super) async fn commit_attach_record(written: Unsynced) -> Result<(), String> {
    tokio::task::spawn_blocking(move || written.commit())
        .await
        .map_err(|e| format!("the attach record's flush: {e}"))?
        .map(|_| ())
        .map_err(|e| format!("audit unavailable: {e}"))
}

/// Whether two secrets are equal, in time that depends only on their
/// lengths.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn secrets_compare_by_every_byte() {
        assert!(super::same_secret(b"t-abc", b"t-abc"));
        assert!(!super::same_secret(b"t-abc", b"t-abd"));
        assert!(!super::same_secret(b"t-abc", b"t-ab"));
    }
}
