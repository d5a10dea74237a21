//! Connection slots per uid (`[server] max_connections_per_uid`): one
//! user cannot hold every one of the daemon's `max_connections` by opening
//! connections and saying nothing, so others can still reach it. The uid
//! is read from `SO_PEERCRED` as the connection is accepted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Connections open, by uid.
#[derive(Clone, Default)]
pub struct UidSlots {
    open: Arc<Mutex<HashMap<u32, usize>>>,
}

/// One connection's slot; given back when dropped.
pub struct UidSlot {
    slots: UidSlots,
    uid: u32,
}

impl UidSlots {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, usize>> {
        match self.open.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// A slot for `uid`, unless it already holds `max`.
    pub fn take(&self, uid: u32, max: usize) -> Option<UidSlot> {
        let mut open = self.lock();
        let held = open.entry(uid).or_insert(0);
        if *held >= max {
            return None;
        }
        *held += 1;
        Some(UidSlot {
            slots: self.clone(),
            uid,
        })
    }
}

impl Drop for UidSlot {
    fn drop(&mut self) {
        let mut open = self.slots.lock();
        if let Some(held) = open.get_mut(&self.uid) {
            *held -= 1;
            if *held == 0 {
                open.remove(&self.uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::UidSlots;

    #[test]
    fn a_uid_holds_at_most_its_share_and_gets_slots_back() {
        let slots = UidSlots::default();
        let a = slots.take(1000, 2).expect("first");
        let _b = slots.take(1000, 2).expect("second");
        assert!(slots.take(1000, 2).is_none());
        assert!(slots.take(1001, 2).is_some(), "another uid is not held up");
        drop(a);
        assert!(slots.take(1000, 2).is_some());
    }
}
