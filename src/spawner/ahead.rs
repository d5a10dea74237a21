//! Sandboxes made ahead of requests ([`crate::sandbox::blank`]): while it is
//! idle, the spawner clones a few blanks, so a request usually finds its
//! namespaces (user, mount, pid, network, ipc, uts) already made and only
//! hands over its order. Each blank serves exactly one sandbox: two
//! sandboxes never share a namespace. When a blank cannot be made (user
//! namespaces gone, say), the pool stops filling and every launch clones at
//! request time, which reports the same error to the caller.

use crate::sandbox::blank::Blank;

/// How many blanks are kept ready.
pub const POOL_SIZE: usize = 4;

/// The ready blanks.
pub struct BlankPool {
    ready: Vec<Blank>,
}

impl BlankPool {
    /// An empty pool.
    pub fn new() -> BlankPool {
        BlankPool {
            ready: Vec::with_capacity(POOL_SIZE),
        }
    }

    /// Whether another one should be made now.
    pub fn wants_more(&self) -> bool {
        self.ready.len() < POOL_SIZE
    }

    /// Makes one blank.
    pub fn make_one(&mut self) -> Result<(), String> {
        self.ready.push(Blank::make().map_err(|e| e.to_string())?);
        Ok(())
    }

    /// The oldest ready blank, if any (a dead one is found out at delivery,
    /// reaped, and replaced by a clone).
    pub fn take(&mut self) -> Option<Blank> {
        (!self.ready.is_empty()).then(|| self.ready.remove(0))
    }
}
