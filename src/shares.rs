//! Fair shares of a process's limited resources among its callers, by uid.
//!
//! A [`Pool`] is one resource (the daemon's running spawns, its buffered
//! output bytes, the relay's connections) with a whole and a share. A uid
//! takes from the whole freely up to its share. Past its share it borrows,
//! and it may borrow only what leaves the unused share of every other
//! *present* uid free. So a single tenant keeps the whole, and a tenant
//! that is present while another saturates everything it may take still
//! gets its share at once.
//!
//! Present ([`Tenants`]): a uid with a connection open to the daemon that
//! the access rules let act for some connector ([`Arrival::vouch`]), or
//! one a pool refused within [`REFUSED_IS_PRESENT`] (a caller that connects
//! per request and was told to try later is waiting too). A stranger's
//! connection reserves nothing. Nothing taken is
//! taken back: a uid that borrowed before another arrived keeps what it
//! holds until it gives it back, and from then on borrows only what is
//! left over.
//!
//! A refusal ([`Refusal`]) names the limit that refused (its config key),
//! its value and what the caller and everyone use, for the caller's error.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

/// How long a uid a pool refused counts as present, though it has no
/// connection open.
pub(crate) const REFUSED_IS_PRESENT: Duration = Duration::from_secs(30);

/// Who is present to claim a share.
#[derive(Default)]
pub struct Tenants {
    state: Mutex<Presence>,
}

#[derive(Default)]
struct Presence {
    /// Connections open, by uid.
    connected: HashMap<u32, usize>,
    /// Of those, the ones vouched for (the peer may act for a connector).
    vouched: HashMap<u32, usize>,
    /// When each uid was last refused by a pool.
    refused: HashMap<u32, Instant>,
}

/// A connection's presence; its uid stays present until every one of its
/// connections is dropped.
pub struct Arrival {
    tenants: Arc<Tenants>,
    uid: u32,
    vouched: bool,
}

impl Tenants {
    fn lock(&self) -> MutexGuard<'_, Presence> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// A connection of `uid` arrives, unless the uid already has `max`
    /// open (`None`: it is refused, and counts as present all the same).
    pub fn arrive(self: &Arc<Self>, uid: u32, max: usize) -> Option<Arrival> {
        let mut state = self.lock();
        let open = state.connected.entry(uid).or_insert(0);
        if *open >= max {
            state.refused.insert(uid, Instant::now());
            return None;
        }
        *open += 1;
        Some(Arrival {
            tenants: Arc::clone(self),
            uid,
            vouched: false,
        })
    }

    /// Connections `uid` has open.
    pub fn connections_of(&self, uid: u32) -> usize {
        self.lock().connected.get(&uid).copied().unwrap_or(0)
    }

    /// Every present uid but `uid`.
    fn others(&self, uid: u32) -> Vec<u32> {
        let mut state = self.lock();
        state
            .refused
            .retain(|_, at| at.elapsed() < REFUSED_IS_PRESENT);
        let Presence {
            vouched, refused, ..
        } = &*state;
        let mut others: Vec<u32> = vouched.keys().chain(refused.keys()).copied().collect();
        others.sort_unstable();
        others.dedup();
        others.retain(|u| *u != uid);
        others
    }

    fn mark_refused(&self, uid: u32) {
        self.lock().refused.insert(uid, Instant::now());
    }
}

impl Arrival {
    /// The connection's peer may act for some connector: its uid is
    /// present, and has its shares kept for it, while the connection is
    /// open.
    pub fn vouch(&mut self) {
        if self.vouched {
            return;
        }
        self.vouched = true;
        *self.tenants.lock().vouched.entry(self.uid).or_insert(0) += 1;
    }
}

impl Drop for Arrival {
    fn drop(&mut self) {
        let mut state = self.tenants.lock();
        let Presence {
            connected, vouched, ..
        } = &mut *state;
        let counts = match self.vouched {
            true => vec![connected, vouched],
            false => vec![connected],
        };
        for count in counts {
            if let Some(open) = count.get_mut(&self.uid) {
                *open -= 1;
                if *open == 0 {
                    count.remove(&self.uid);
                }
            }
        }
    }
}

/// One limited resource, shared among uids.
pub struct Pool {
    /// What is counted, plural, for messages ("running spawns").
    what: &'static str,
    /// The config key of the whole, and its value.
    whole_key: &'static str,
    whole: u64,
    /// The config key of the share, and its value (at most the whole).
    share_key: &'static str,
    share: u64,
    tenants: Arc<Tenants>,
    used: Mutex<Used>,
    /// Woken when something is given back.
    given_back: tokio::sync::Notify,
}

#[derive(Default)]
struct Used {
    by_uid: HashMap<u32, u64>,
    all: u64,
}

/// What a pool's limits are, for building one.
pub struct Limits {
    /// What is counted, plural ("running spawns").
    pub what: &'static str,
    /// The whole's config key and value.
    pub whole: (&'static str, u64),
    /// The share's config key and value.
    pub share: (&'static str, u64),
}

/// An amount taken from a pool by one uid; given back when dropped.
pub struct Taken {
    pool: Arc<Pool>,
    uid: u32,
    amount: u64,
}

/// Why a pool refused: the limit, with what the caller and everyone use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// The config key of the limit that refused.
    pub limit: &'static str,
    /// Its value.
    pub max: u64,
    /// What the refused request asked for.
    pub asked: u64,
    /// What the caller's uid holds.
    pub caller_uses: u64,
    /// What every uid together holds.
    pub all_use: u64,
    /// What the limit counts.
    #[serde(skip)]
    pub what: &'static str,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = match self.limit.split_once('.') {
            Some((section, key)) => format!("[{section}] {key}"),
            None => self.limit.to_string(),
        };
        write!(
            f,
            "at the limit of {} {} ({key}); this caller holds {}, everyone {}, this asked for {}",
            self.max, self.what, self.caller_uses, self.all_use, self.asked
        )
    }
}

impl Pool {
    /// A pool whose present uids are `tenants`' (the share is at most the
    /// whole).
    pub fn new(limits: Limits, tenants: Arc<Tenants>) -> Arc<Pool> {
        Arc::new(Pool {
            what: limits.what,
            whole_key: limits.whole.0,
            whole: limits.whole.1,
            share_key: limits.share.0,
            share: limits.share.1.min(limits.whole.1),
            tenants,
            used: Mutex::new(Used::default()),
            given_back: tokio::sync::Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Used> {
        match self.used.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The whole.
    pub fn whole(&self) -> u64 {
        self.whole
    }

    /// What every uid holds together.
    pub fn in_use(&self) -> u64 {
        self.lock().all
    }

    /// `amount` for `uid`: within the whole, and past the uid's share only
    /// what leaves every other present uid's unused share free.
    pub fn take(self: &Arc<Self>, uid: u32, amount: u64) -> Result<Taken, Refusal> {
        // Nothing is always there to take (a stdin close holds no bytes).
        if amount == 0 {
            return Ok(Taken {
                pool: Arc::clone(self),
                uid,
                amount,
            });
        }
        let mut used = self.lock();
        let mine = used.by_uid.get(&uid).copied().unwrap_or(0);
        let refusal = |limit, max| Refusal {
            limit,
            max,
            asked: amount,
            caller_uses: mine,
            all_use: used.all,
            what: self.what,
        };
        let after = used.all.saturating_add(amount);
        let refused = if after > self.whole {
            Some(refusal(self.whole_key, self.whole))
        } else if mine.saturating_add(amount) > self.share {
            let reserved: u64 = self
                .tenants
                .others(uid)
                .iter()
                .map(|u| {
                    self.share
                        .saturating_sub(used.by_uid.get(u).copied().unwrap_or(0))
                })
                .sum();
            (after.saturating_add(reserved) > self.whole)
                .then(|| refusal(self.share_key, self.share))
        } else {
            None
        };
        if let Some(refusal) = refused {
            drop(used);
            self.tenants.mark_refused(uid);
            return Err(refusal);
        }
        *used.by_uid.entry(uid).or_insert(0) += amount;
        used.all = after;
        Ok(Taken {
            pool: Arc::clone(self),
            uid,
            amount,
        })
    }

    fn give_back(&self, uid: u32, amount: u64) {
        let mut used = self.lock();
        if let Some(mine) = used.by_uid.get_mut(&uid) {
            *mine = mine.saturating_sub(amount);
            if *mine == 0 {
                used.by_uid.remove(&uid);
            }
        }
        used.all = used.all.saturating_sub(amount);
        drop(used);
        self.given_back.notify_waiters();
    }

    /// Returns once nothing is taken.
    pub async fn until_empty(&self) {
        loop {
            let given_back = self.given_back.notified();
            tokio::pin!(given_back);
            given_back.as_mut().enable();
            if self.in_use() == 0 {
                return;
            }
            given_back.await;
        }
    }
}

/// One uid's way into a pool: what a spawn's relay takes its connections
/// through, so they count against its caller's share of the process's.
#[derive(Clone)]
pub struct Claim {
    pool: Arc<Pool>,
    uid: u32,
}

impl Claim {
    /// `uid`'s claim on `pool`.
    pub fn new(pool: &Arc<Pool>, uid: u32) -> Claim {
        Claim {
            pool: Arc::clone(pool),
            uid,
        }
    }

    /// `amount` from the pool, for this uid.
    pub fn take(&self, amount: u64) -> Result<Taken, Refusal> {
        self.pool.take(self.uid, amount)
    }
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "uid {}'s claim on the {}", self.uid, self.pool.what)
    }
}

impl Taken {
    /// Gives back what is held beyond `amount`.
    pub fn shrink_to(&mut self, amount: u64) {
        if amount < self.amount {
            self.pool.give_back(self.uid, self.amount - amount);
            self.amount = amount;
        }
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.pool.give_back(self.uid, self.amount);
    }
}

impl std::fmt::Debug for Taken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} of uid {}", self.amount, self.pool.what, self.uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vouched(tenants: &Arc<Tenants>, uid: u32) -> Arrival {
        let mut arrival = tenants.arrive(uid, 4).expect("arrives");
        arrival.vouch();
        arrival
    }

    #[test]
    fn a_strangers_connection_reserves_nothing_and_nothing_is_always_there() {
        let (tenants, pool) = pool(4, 1);
        let _a = vouched(&tenants, 1000);
        // 1001 is connected, but no access rule vouches for it.
        let _stranger = tenants.arrive(1001, 4).expect("arrives");
        let held: Vec<_> = (0..4).map(|_| pool.take(1000, 1).expect("taken")).collect();
        assert!(pool.take(1000, 1).is_err(), "the whole is taken");
        assert!(pool.take(1000, 0).is_ok(), "nothing is always there");
        drop(held);
    }

    fn pool(whole: u64, share: u64) -> (Arc<Tenants>, Arc<Pool>) {
        let tenants = Arc::new(Tenants::default());
        let pool = Pool::new(
            Limits {
                what: "things",
                whole: ("server.max_things", whole),
                share: ("server.things_share", share),
            },
            Arc::clone(&tenants),
        );
        (tenants, pool)
    }

    #[test]
    fn a_single_tenant_keeps_the_whole() {
        let (tenants, pool) = pool(8, 2);
        let _a = vouched(&tenants, 1000);
        let held: Vec<_> = (0..8).map(|_| pool.take(1000, 1).expect("taken")).collect();
        let refused = pool.take(1000, 1).expect_err("the whole is taken");
        assert_eq!(refused.limit, "server.max_things");
        assert_eq!(
            (refused.max, refused.caller_uses, refused.all_use),
            (8, 8, 8)
        );
        drop(held);
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn a_present_tenant_keeps_its_share_while_another_saturates() {
        let (tenants, pool) = pool(8, 2);
        let _a = vouched(&tenants, 1000);
        let _b = vouched(&tenants, 1001);
        let held: Vec<_> = (0..6).map(|_| pool.take(1000, 1).expect("taken")).collect();
        let refused = pool.take(1000, 1).expect_err("the rest is 1001's share");
        assert_eq!(refused.limit, "server.things_share");
        assert_eq!(
            (refused.max, refused.caller_uses, refused.all_use),
            (2, 6, 6)
        );
        let b1 = pool.take(1001, 1).expect("its share");
        let _b2 = pool.take(1001, 1).expect("its share");
        // 1001 borrows no further: the whole is taken.
        assert_eq!(
            pool.take(1001, 1).expect_err("full").limit,
            "server.max_things"
        );
        drop(b1);
        // What 1001 gave back is its own unused share again, not 1000's.
        assert!(pool.take(1000, 1).is_err());
        drop(held);
    }

    #[test]
    fn a_refused_uid_counts_as_present_without_a_connection() {
        let (tenants, pool) = pool(4, 1);
        let _a = vouched(&tenants, 1000);
        let held: Vec<_> = (0..4).map(|_| pool.take(1000, 1).expect("taken")).collect();
        // 1001 arrives late and is refused: the whole is 1000's.
        assert!(pool.take(1001, 1).is_err());
        drop(held);
        // 1000 now leaves 1001's share free, though 1001 has no connection.
        let _held: Vec<_> = (0..3).map(|_| pool.take(1000, 1).expect("taken")).collect();
        assert_eq!(
            pool.take(1000, 1).expect_err("1001 waits").limit,
            "server.things_share"
        );
        assert!(pool.take(1001, 1).is_ok());
    }

    #[test]
    fn amounts_shrink_and_come_back() {
        let (_tenants, pool) = pool(100, 100);
        let mut a = pool.take(1, 60).expect("taken");
        assert!(pool.take(2, 50).is_err());
        a.shrink_to(10);
        assert_eq!(pool.in_use(), 10);
        let _b = pool.take(2, 50).expect("room after shrinking");
        drop(a);
        assert_eq!(pool.in_use(), 50);
    }

    #[test]
    fn connections_per_uid_are_capped_and_given_back() {
        let tenants = Arc::new(Tenants::default());
        let a = tenants.arrive(1000, 2).expect("first");
        let _b = tenants.arrive(1000, 2).expect("second");
        assert!(tenants.arrive(1000, 2).is_none());
        assert!(
            tenants.arrive(1001, 2).is_some(),
            "another uid is not held up"
        );
        drop(a);
        assert_eq!(tenants.connections_of(1000), 1);
        assert!(tenants.arrive(1000, 2).is_some());
    }

    #[tokio::test]
    async fn until_empty_waits_for_the_last_give_back() {
        let (_tenants, pool) = pool(4, 4);
        let a = pool.take(1, 2).expect("taken");
        let waiting = {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move { pool.until_empty().await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(a);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken")
            .expect("joined");
    }
}
