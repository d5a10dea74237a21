//! Sandboxes made ahead of requests ([`crate::sandbox::blank`]): while it is
//! idle, the spawner clones a few blanks, so a request usually finds its
//! namespaces (user, mount, pid, network, ipc, uts) already made and only
//! hands over its order. Blanks are then prepared for the identity the last
//! request ran as (its ids mapped, the shared part of the root built), since
//! a daemon's callers are mostly one connector runtime; a request for
//! another identity takes an unprepared blank, or clones. Each blank serves
//! exactly one sandbox: two sandboxes never share a namespace. When a blank
//! cannot be made (user namespaces gone, say), the pool stops filling and
//! every launch clones at request time, which reports the same error.

use crate::sandbox::blank::{Blank, MappedFor};

/// How many blanks are kept ready.
pub const POOL_SIZE: usize = 4;

/// The ready blanks, oldest first.
pub struct BlankPool {
    ready: Vec<Blank>,
    /// Whom the last request ran as: whom idle blanks are prepared for.
    last: Option<MappedFor>,
}

impl BlankPool {
    /// An empty pool.
    pub fn new() -> BlankPool {
        BlankPool {
            ready: Vec::with_capacity(POOL_SIZE),
            last: None,
        }
    }

    /// Whether there is idle work: a blank to make, or one to prepare.
    pub fn wants_work(&self) -> bool {
        self.ready.len() < POOL_SIZE || self.unprepared().is_some() || self.stale().is_some()
    }

    fn unprepared(&self) -> Option<usize> {
        self.last?;
        self.ready.iter().position(|b| b.mapped_for().is_none())
    }

    fn stale(&self) -> Option<usize> {
        let last = self.last?;
        self.ready
            .iter()
            .position(|b| b.mapped_for().is_some_and(|who| who != last))
    }

    /// One step of idle work: prepare an unprepared blank for the last
    /// identity, else replace one prepared for another, else make one.
    pub fn work(&mut self) -> Result<(), String> {
        if let (Some(i), Some(who)) = (self.unprepared(), self.last) {
            if self.ready[i].prepare(who).is_err() {
                // It died, or its ids could not be mapped: not usable.
                drop(self.ready.remove(i));
            }
            return Ok(());
        }
        if let Some(i) = self.stale() {
            drop(self.ready.remove(i));
        }
        if self.ready.len() < POOL_SIZE {
            self.ready.push(Blank::make().map_err(|e| e.to_string())?);
        }
        Ok(())
    }

    /// The blank to launch `who`'s order in: one prepared for `who`, else an
    /// unprepared one (its ids are mapped at launch). Remembers `who`.
    pub fn take(&mut self, who: MappedFor) -> Option<Blank> {
        self.last = Some(who);
        let i = self
            .ready
            .iter()
            .position(|b| b.mapped_for() == Some(who))
            .or_else(|| self.ready.iter().position(|b| b.mapped_for().is_none()))?;
        Some(self.ready.remove(i))
    }
}
