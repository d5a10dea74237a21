//! Spare sandboxes ([`crate::sandbox::spare`]): while it is
//! idle, the spawner clones a few spares, so a request usually finds its
//! namespaces (user, mount, pid, network, ipc, uts) already made and only
//! hands over its order. Spares are then prepared for the identity the last
//! request ran as (its ids mapped, the shared part of the root built, the
//! system paths and small files of the last request mounted, see
//! [`steps_mountable_ahead`]), since a daemon's callers are
//! mostly one connector runtime under one config; a request for another
//! identity or with other system paths takes an unprepared spare, or clones. Each spare serves
//! exactly one sandbox: two sandboxes never share a namespace. Spares older
//! than [`MAX_AGE`] are replaced. A spare is cloned into its user and pid
//! namespaces and makes the others itself, then says so; it is used only
//! once it has. When a spare cannot be made, or says it could not make its
//! namespaces (user or network namespaces gone, say), making pauses for
//! [`RETRY_AFTER`] and launches clone at request time, which reports the
//! same error.

use std::time::{Duration, Instant};

use crate::sandbox::spare::{MappedFor, Spare};
use crate::sandbox::spec::{steps_mountable_ahead, MountStep};

/// How many spares are kept ready.
pub(super) const POOL_SIZE: usize = 4;
/// Below this many ready spares, the pool is filled even while sandboxes
/// run; above it, only while none does (see [`SparePool::wants_work`]).
pub(super) const LOW_WATER: usize = 2;

/// How long a spare is kept: the host's mounts it sees stay current (they
/// are slaves of the host's until its order comes), but a fresh one is
/// cheap while idle.
pub(super) const MAX_AGE: Duration = Duration::from_secs(60);
/// How long making spares pauses after a failure.
pub(super) const RETRY_AFTER: Duration = Duration::from_secs(5);
/// Preparing pauses for [`RETRY_AFTER`] after this many failures in a row
/// (spares are then used unprepared).
const MAX_PREPARE_FAILURES: u32 = 3;

/// The ready spares, oldest first.
pub(super) struct SparePool {
    ready: Vec<(Spare, Instant)>,
    /// Whom the last request ran as: whom idle spares are prepared for.
    last: Option<MappedFor>,
    /// The steps of the last request mountable ahead: what idle spares mount.
    system: Vec<MountStep>,
    /// No spare is made before this (after a failure).
    paused_until: Option<Instant>,
    /// Preparations that failed in a row.
    prepare_failures: u32,
    /// No spare is prepared before this (after [`MAX_PREPARE_FAILURES`]).
    prepare_paused_until: Option<Instant>,
}

impl SparePool {
    /// An empty pool.
    pub(super) fn new() -> SparePool {
        SparePool {
            ready: Vec::with_capacity(POOL_SIZE),
            last: None,
            system: Vec::new(),
            paused_until: None,
            prepare_failures: 0,
            prepare_paused_until: None,
        }
    }

    /// Whether there is idle work: a spare to make, prepare or replace.
    /// With sandboxes `running`, only when fewer than [`LOW_WATER`] spares
    /// are ready: making one takes a core for half a millisecond, which on
    /// a small machine is taken from the programs running and from the
    /// daemon answering them.
    pub(super) fn wants_work(&self, running: bool) -> bool {
        if running && self.ready.len() >= LOW_WATER {
            return false;
        }
        let may_make = self.paused_until.is_none_or(|t| Instant::now() >= t);
        (may_make && self.ready.len() < POOL_SIZE)
            || self.unprepared().is_some()
            || self.stale().is_some()
    }

    fn unprepared(&self) -> Option<usize> {
        self.last?;
        if self
            .prepare_paused_until
            .is_some_and(|t| Instant::now() < t)
        {
            return None;
        }
        self.ready
            .iter()
            .position(|(b, _)| b.mapped_for().is_none())
    }

    /// A spare prepared for someone other than the last caller or with
    /// other system paths than the last request's, or too old.
    fn stale(&self) -> Option<usize> {
        self.ready.iter().position(|(b, made)| {
            made.elapsed() > MAX_AGE
                || b.mapped_for().is_some_and(|who| {
                    self.last.is_some_and(|last| who != last) || b.system_steps() != self.system
                })
        })
    }

    /// One step of idle work: drop a stale spare, else prepare one for the
    /// last identity, else make one. A failure to make pauses making for
    /// [`RETRY_AFTER`] (launches clone at request time meanwhile) and is
    /// returned to be logged.
    pub(super) fn work(&mut self) -> Result<(), String> {
        self.drop_unmade()?;
        if let Some(i) = self.stale() {
            drop(self.ready.remove(i));
            return Ok(());
        }
        if let (Some(i), Some(who)) = (self.unprepared(), self.last) {
            match self.ready[i].0.make_ready_for(who, &self.system) {
                Ok(()) => self.prepare_failures = 0,
                Err(_) => {
                    // It died, or its ids could not be mapped: not usable.
                    self.prepare_failures += 1;
                    drop(self.ready.remove(i));
                    if self.prepare_failures >= MAX_PREPARE_FAILURES {
                        self.prepare_failures = 0;
                        self.prepare_paused_until = Some(Instant::now() + RETRY_AFTER);
                    }
                }
            }
            return Ok(());
        }
        if self.ready.len() < POOL_SIZE {
            match Spare::make() {
                Ok(spare) => {
                    self.paused_until = None;
                    self.ready.push((spare, Instant::now()));
                }
                Err(e) => {
                    self.pause_making();
                    return Err(e.to_string());
                }
            }
        }
        Ok(())
    }

    /// The spare to launch `who`'s order (with these mount steps) in: one
    /// prepared for it ([`Spare::fits`]), else an unprepared one (its ids are
    /// mapped at launch). Remembers `who` and the order's system paths; when
    /// none fits, spares prepared for others are dropped at once (their
    /// namespaces count against the user's limits while a clone is made).
    pub(super) fn take(&mut self, who: MappedFor, mounts: &[MountStep]) -> Option<Spare> {
        self.last = Some(who);
        let system = steps_mountable_ahead(mounts);
        if self.system != system {
            self.system = system.to_vec();
        }
        let found = self
            .ready
            .iter()
            .position(|(b, _)| b.mapped_for().is_some() && b.fits(who, mounts))
            .or_else(|| {
                self.ready
                    .iter()
                    .position(|(b, _)| b.mapped_for().is_none())
            });
        let Some(i) = found else {
            self.ready.clear();
            return None;
        };
        let mut spare = self.ready.remove(i).0;
        // Usually made long since; a spare cloned just before waits the
        // moment it needs (less than cloning another would take).
        match spare.wait_until_made() {
            Ok(()) => Some(spare),
            Err(e) => {
                self.pause_making();
                tracing::warn!(
                    "spawner: {e}; made at request time, spares retried in {} s",
                    RETRY_AFTER.as_secs()
                );
                None
            }
        }
    }

    /// Drops the spares that said they could not make their own namespaces
    /// (or died first), and pauses making more; asks without waiting.
    fn drop_unmade(&mut self) -> Result<(), String> {
        let mut failed = None;
        self.ready.retain_mut(|(spare, _)| match spare.poll_made() {
            Ok(_) => true,
            Err(e) => {
                failed.get_or_insert(e.to_string());
                false
            }
        });
        match failed {
            Some(e) => {
                self.pause_making();
                Err(e)
            }
            None => Ok(()),
        }
    }

    fn pause_making(&mut self) {
        self.paused_until = Some(Instant::now() + RETRY_AFTER);
    }
}
