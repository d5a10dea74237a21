//! Group commit inside one process. The daemon appends from many threads at
//! once (decisions, denials, exits), and each record must be on disk before
//! what it allows happens. One `fdatasync` makes durable everything written
//! to the file before it started, so when several threads wait for records
//! of the same file, one of them (the leader) syncs for all: the others wait
//! for its result instead of each flushing the disk (on this machine's ext4
//! a flush is a data write, an inode write and a cache flush, one after the
//! other, and each a trap to the hypervisor).
//!
//! Why a covered record is durable:
//! - A record's [`Ticket`] is taken after its `write` returned and while the
//!   writer still holds the log's `flock`, so tickets come in the order the
//!   records were written; the leader reads the count of tickets before its
//!   `fdatasync` starts, so every ticket it covers names data already in the
//!   page cache of the same inode (tickets are per inode: a rotated log
//!   starts a new epoch).
//! - Write-back errors are reported once per open file description. Every
//!   sync of an epoch goes through one description, a duplicate of the
//!   epoch's first writer's, which was opened before any record the epoch
//!   covers was written: it sees every error on them, even one another
//!   process's sync has already reported (a description opened later would
//!   not).
//! - A failed sync ends the epoch and covers nobody: every waiting record
//!   then syncs through its own description, opened before its write, and
//!   sees the error itself.

use std::fs::File;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A record written to the file this ticket names, waiting to be durable.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket {
    epoch: u64,
    /// This record's place among the epoch's writes (0: sync alone).
    n: u64,
}

struct State {
    /// Which file (device, inode) the counts are about.
    file: Option<(u64, u64)>,
    /// The description every sync of this epoch goes through.
    syncer: Option<Arc<File>>,
    /// Bumped whenever `file` changes, and when a sync fails.
    epoch: u64,
    /// Tickets handed out in this epoch.
    written: u64,
    /// Tickets known to be durable.
    synced: u64,
    /// A sync is under way.
    leading: bool,
}

static STATE: Mutex<State> = Mutex::new(State {
    file: None,
    syncer: None,
    epoch: 0,
    written: 0,
    synced: 0,
    leading: false,
});
static DONE: Condvar = Condvar::new();

fn state() -> Option<MutexGuard<'static, State>> {
    // Poisoned only by a panic under the lock; then every record syncs alone.
    STATE.lock().ok()
}

const ALONE: Ticket = Ticket { epoch: 0, n: 0 };

/// Takes a ticket for a record whose write to `file` (device and inode
/// `key`, as the writer stat'ed it) has returned; call it while still
/// holding the log's lock (see the module documentation).
pub(crate) fn written(file: &File, key: (u64, u64)) -> Ticket {
    let Some(mut s) = state() else {
        return ALONE;
    };
    if s.file != Some(key) {
        if s.leading {
            // Another file is being synced (the log was just rotated): alone.
            return ALONE;
        }
        let Ok(syncer) = file.try_clone() else {
            return ALONE;
        };
        s.file = Some(key);
        s.syncer = Some(Arc::new(syncer));
        s.epoch += 1;
        s.written = 0;
        s.synced = 0;
        // Records of the old epoch waiting with patience sync alone now.
        DONE.notify_all();
    }
    s.written += 1;
    Ticket {
        epoch: s.epoch,
        n: s.written,
    }
}

/// The first sync of this process that failed. A write-back error is
/// reported once per open file, so a later sync may succeed over the record
/// the failed one lost: from then on this process starts nothing more
/// ([`stopped_by_a_failed_sync`]).
static FAILED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Why nothing may start any more in this process, once one of its audit
/// syncs failed (see [`FAILED`]); `None` while every sync has succeeded.
pub(crate) fn stopped_by_a_failed_sync() -> Option<String> {
    FAILED.get().map(|e| {
        format!(
            "audit unavailable: a record could not be made durable (fdatasync of the audit log: {e}); spawnd refuses every spawn until it is restarted with a working audit location; nothing was run"
        )
    })
}

/// Returns once the ticket's record is durable: synced by this thread (as
/// leader, through the epoch's description) or by another thread's sync of
/// the same file; `file` is the record's own, for syncing alone. A failure
/// is also kept for [`stopped_by_a_failed_sync`].
pub(crate) fn commit(file: &File, ticket: Ticket) -> std::io::Result<()> {
    commit_within(file, ticket, Duration::ZERO)
}

/// [`commit`], for a record nothing waits on: for up to `patience`, a sync
/// another thread begins (the next spawn's decision, say) may cover it, so
/// that one `fdatasync` serves both; past that, this thread syncs.
pub(crate) fn commit_within(
    file: &File,
    ticket: Ticket,
    patience: Duration,
) -> std::io::Result<()> {
    let synced = commit_ticket(file, ticket, Instant::now() + patience);
    if let Err(e) = &synced {
        if FAILED.set(e.to_string()).is_ok() {
            tracing::error!(error = %e, "an audit record could not be made durable; this process starts nothing more");
        }
    }
    synced
}

fn commit_ticket(file: &File, ticket: Ticket, lead_after: Instant) -> std::io::Result<()> {
    if ticket.n == 0 {
        return file.sync_data();
    }
    let Some(mut s) = state() else {
        return file.sync_data();
    };
    loop {
        if s.epoch != ticket.epoch {
            drop(s);
            return file.sync_data();
        }
        if s.synced >= ticket.n {
            return Ok(());
        }
        if s.leading {
            s = match DONE.wait(s) {
                Ok(s) => s,
                Err(_) => return file.sync_data(),
            };
            continue;
        }
        let now = Instant::now();
        if now < lead_after {
            // Waiting for a sync to begin and end that covers this record.
            s = match DONE.wait_timeout(s, lead_after - now) {
                Ok((s, _)) => s,
                Err(_) => return file.sync_data(),
            };
            continue;
        }
        let Some(syncer) = s.syncer.clone() else {
            drop(s);
            return file.sync_data();
        };
        s.leading = true;
        let covers = s.written;
        drop(s);
        let synced = syncer.sync_data();
        let Some(mut again) = state() else {
            DONE.notify_all();
            return synced.and_then(|()| file.sync_data());
        };
        again.leading = false;
        match &synced {
            Ok(()) => again.synced = again.synced.max(covers),
            Err(_) => {
                // Nobody is covered: the epoch ends, and each waiter syncs
                // through its own description (and meets the error there).
                again.file = None;
                again.syncer = None;
                again.epoch += 1;
            }
        }
        DONE.notify_all();
        synced?;
        s = again;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;

    /// A ticket for `file`, keyed as the log's writer keys it.
    fn written_to(file: &File) -> Ticket {
        let meta = file.metadata().unwrap();
        written(file, (meta.dev(), meta.ino()))
    }

    #[test]
    fn a_ticket_is_durable_after_commit_and_later_tickets_are_not_covered_early() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut f = File::create(&path).unwrap();
        f.write_all(b"one\n").unwrap();
        let first = written_to(&f);
        commit(&f, first).unwrap();
        {
            // (Other tests share the state: only this epoch's counts are ours.)
            let s = state().unwrap();
            assert!(s.epoch != first.epoch || s.synced >= first.n);
        }
        f.write_all(b"two\n").unwrap();
        let second = written_to(&f);
        assert!(second.n == 0 || second.n > first.n || second.epoch != first.epoch);
        {
            let s = state().unwrap();
            assert!(s.epoch != second.epoch || second.n == 0 || s.synced < second.n || s.leading);
        }
        commit(&f, second).unwrap();
    }

    #[test]
    fn many_threads_share_syncs_and_all_return() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        File::create(&path).unwrap();
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for j in 0..50 {
                        let mut f = std::fs::OpenOptions::new()
                            .append(true)
                            .open(&path)
                            .unwrap();
                        writeln!(f, "{i} {j}").unwrap();
                        let t = written_to(&f);
                        commit(&f, t).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 400);
    }

    /// A patient record is covered by the next record's sync, long before
    /// its patience runs out; with no other record, it syncs itself.
    #[test]
    fn a_patient_record_shares_the_next_records_sync() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut exit = File::create(&path).unwrap();
        exit.write_all(b"exit\n").unwrap();
        let exit_ticket = written_to(&exit);
        let patient = std::thread::spawn(move || {
            let t = std::time::Instant::now();
            commit_within(&exit, exit_ticket, Duration::from_secs(30)).unwrap();
            t.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        let mut decision = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        decision.write_all(b"decision\n").unwrap();
        let decision_ticket = written_to(&decision);
        commit(&decision, decision_ticket).unwrap();
        let waited = patient.join().unwrap();
        assert!(waited < Duration::from_secs(10), "waited {waited:?}");

        let mut alone = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        alone.write_all(b"alone\n").unwrap();
        let ticket = written_to(&alone);
        commit_within(&alone, ticket, Duration::from_millis(20)).unwrap();
        let s = state().unwrap();
        assert!(ticket.n == 0 || s.epoch != ticket.epoch || s.synced >= ticket.n);
    }

    /// A sync that fails covers nobody: the epoch ends, and a record of it
    /// still waiting syncs alone and gets its own error. (A pipe stands in
    /// for a failing disk: `fdatasync` on it is EINVAL.)
    #[test]
    fn a_failed_sync_ends_the_epoch_and_covers_nobody() {
        let (r, w) = nix::unistd::pipe().unwrap();
        let (r, w) = (File::from(r), File::from(w));
        let first = written_to(&w);
        let second = written_to(&r);
        assert!(commit(&w, first).is_err());
        if first.n > 0 {
            let s = state().unwrap();
            assert_ne!(s.epoch, first.epoch, "the failed sync ended its epoch");
        }
        assert!(commit(&r, second).is_err());
    }

    #[test]
    fn another_file_starts_a_new_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let a = File::create(dir.path().join("a")).unwrap();
        let b = File::create(dir.path().join("b")).unwrap();
        let ta = written_to(&a);
        let tb = written_to(&b);
        // Counted tickets of two files never share an epoch (a ticket is
        // uncounted, n = 0, when another test's sync of a third file runs).
        assert!(ta.n == 0 || tb.n == 0 || ta.epoch != tb.epoch);
        // The older ticket is no longer counted: it syncs alone, and succeeds.
        commit(&a, ta).unwrap();
        commit(&b, tb).unwrap();
    }
}
