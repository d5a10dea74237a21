//! A long-lived spawner keeps the cgroups of ended sandboxes in a
//! [`CgroupPool`] and gives one to a later sandbox once it is as good as
//! new: no task in it, its OOM count still zero, almost nothing still
//! charged to it, its peak reset and its limits written again. Making and
//! removing two cgroups per sandbox (and the kernel's offlining work after
//! each removal) was about a tenth of the daemon's CPU under load. A reader
//! outside the spawner (the daemon reading peak and OOM count through the
//! directory it was sent) holds a shared `flock` on it until it is done
//! ([`hold_for_reading`]); a cgroup so held is not given out again.
//!
//! Pairs are checked while the spawner is idle, for the limits the last
//! launch asked for ([`CgroupPool::work`]), so the check is not on the way
//! from request to program; one not checked yet is checked when taken.
//!
//! What "as good as new" leaves out: counters nothing reads (`memory.failcnt`,
//! `memory.kmem.max_usage_in_bytes`, `pids.events`) keep counting from the
//! first sandbox; and a charge made after the check by a kernel object that
//! outlived its sandbox's processes (an inotify queue handed to another
//! sandbox, say) counts against the next tenant, where it went to the parent
//! before. A `kill -9`'d spawner leaves its idle pairs to the stale sweep
//! (`sweep_stale`).

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::path::Path;

use nix::fcntl::{Flock, FlockArg, OFlag};

use super::{
    oom_kills, open_in, write_in, SpawnCgroup, V1Roots, KERNEL, OOM, PEAK, PIDS_NOW, STAT,
};

/// What an ended sandbox may have left charged to its memory cgroup, for
/// the cgroup to serve another: a few pages (page cache, anonymous, swap) and
/// kernel objects, most of which the kernel frees only after an RCU grace
/// period, so the charge shrinks within milliseconds of the end. More is what the
/// sandbox's files brought into the page cache or the inodes it created,
/// which would count against the next sandbox's limit and peak: such a
/// cgroup is removed instead, and the charges go to its parent. The pages
/// the kernel charges ahead for each CPU ("stock") are not counted: a new
/// cgroup has them as soon as anything runs in it.
const REUSE_MAX_PAGES: u64 = 256 << 10;
/// See [`REUSE_MAX_PAGES`].
const REUSE_MAX_KERNEL: u64 = 1 << 20;

/// Bytes of page cache, anonymous memory and swap in a v1 `memory.stat`
/// (this cgroup's own lines, not the `total_` ones); `None` if it lacks them.
fn left_in_memory_stat(text: &str) -> Option<u64> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse::<u64>()
                .ok()
        })
    };
    Some(field("cache")? + field("rss")? + field("swap").unwrap_or(0))
}

/// Whether an ended sandbox's cgroups can serve another.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Reuse {
    /// Reset and ready.
    Reused,
    /// A reader still holds the readings: not yet.
    Busy,
    /// A task is left, an OOM kill happened, too much is still charged, or
    /// the files that say so could not be read.
    Spent,
}

/// Reads a small file in an open cgroup directory.
fn read_in(dir: &OwnedFd, shown: &Path, name: &str) -> std::io::Result<String> {
    let fd = open_in(dir, shown, name, OFlag::O_RDONLY)?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::fs::File::from(fd), &mut text)?;
    Ok(text)
}

/// Takes a shared lock on a memory cgroup's directory (opened by
/// [`SpawnCgroup::open_memory_dir`]), held as long as the descriptor: while
/// it is held, the spawner does not give the cgroup to another sandbox.
/// `None` when it cannot be taken (the readings then come from the
/// spawner's exit report).
pub(crate) fn hold_for_reading(dir: OwnedFd) -> Option<Flock<OwnedFd>> {
    Flock::lock(dir, FlockArg::LockSharedNonblock).ok()
}

/// The cgroups of ended sandboxes, kept for later ones (see the module
/// documentation). Dropping the pool removes them.
///
/// A kept pair is checked and reset while the spawner is idle
/// ([`CgroupPool::work`]), with the limits the last launch asked for, so a
/// launch that asks for the same takes it as it is: the check (cgroup file
/// reads and writes) is then off the way from request to program. A pair not yet checked (a reader still held it, or no idle
/// time came) is checked when taken, as before.
#[derive(Debug, Default)]
pub struct CgroupPool {
    idle: VecDeque<Kept>,
    /// The limits the last launch asked for (memory bytes, processes).
    last_limits: Option<(u64, u64)>,
    /// When an unchecked pair is worth a look (set when one comes back; put
    /// off while the daemon still reads the one to check; cleared when none
    /// is left).
    look_at: Option<std::time::Instant>,
}

/// An idle pair, and the limits it was made ready for, once checked.
#[derive(Debug)]
struct Kept {
    cg: SpawnCgroup,
    ready_for: Option<(u64, u64)>,
}

impl CgroupPool {
    /// How many idle cgroup pairs are kept; more are removed.
    pub const KEEP: usize = 16;
    /// How many idle pairs a launch looks at before making a new one.
    const LOOK_AT: usize = 2;
    /// How long a pair the daemon still reads waits before another look
    /// (it lets go once it has the sandbox's end, within milliseconds).
    const BUSY_RETRY: std::time::Duration = std::time::Duration::from_millis(5);

    /// An empty pool.
    pub fn new() -> CgroupPool {
        CgroupPool::default()
    }

    /// An idle pair as good as new with these limits, or else a new pair
    /// named `name()`.
    pub fn take(
        &mut self,
        roots: &V1Roots,
        name: impl FnOnce() -> String,
        memory_bytes: u64,
        processes: u64,
    ) -> std::io::Result<SpawnCgroup> {
        self.last_limits = Some((memory_bytes, processes));
        for _ in 0..Self::LOOK_AT.min(self.idle.len()) {
            let Some(Kept { cg, ready_for }) = self.idle.pop_front() else {
                break;
            };
            if !cg.under(roots) {
                cg.remove();
                continue;
            }
            // A pair checked ahead has its peak reset once more, so that
            // nothing charged since the check (a kernel object outliving its
            // sandbox, say) shows in the next sandbox's peak.
            let reused = match ready_for {
                Some(limits) if limits == (memory_bytes, processes) => {
                    cg.reset_peak().map(|()| Reuse::Reused)
                }
                Some(_) => cg
                    .reset_peak()
                    .and_then(|()| cg.write_limits(memory_bytes, processes))
                    .map(|()| Reuse::Reused),
                None => cg.reuse(memory_bytes, processes),
            };
            match reused {
                Ok(Reuse::Reused) => return Ok(cg),
                Ok(Reuse::Busy) => self.idle.push_back(Kept { cg, ready_for }),
                Ok(Reuse::Spent) | Err(_) => cg.remove(),
            }
        }
        SpawnCgroup::create(roots, &name(), memory_bytes, processes)
    }

    /// Keeps an ended sandbox's v1 cgroups (its init reaped, its readings
    /// taken), or removes them when the pool is full or they are v2. A kept pair keeps its
    /// peak and OOM files open, for every later sandbox's readings and check.
    pub fn give_back(&mut self, mut cg: SpawnCgroup) {
        if self.idle.len() < Self::KEEP && !cg.is_v2() {
            if cg.readings.is_none() {
                cg.open_readings();
            }
            self.idle.push_back(Kept {
                cg,
                ready_for: None,
            });
            self.look_at = Some(std::time::Instant::now());
        } else {
            cg.remove();
        }
    }

    /// How long until an idle pair is due for its check
    /// ([`CgroupPool::work`]): `None` when none waits (or no launch has
    /// said which limits to check for yet), zero when one is due now.
    pub fn work_due_in(&self) -> Option<std::time::Duration> {
        self.last_limits?;
        self.look_at
            .map(|t| t.saturating_duration_since(std::time::Instant::now()))
    }

    /// Checks and resets one idle pair for the last launch's limits (a spent
    /// one is removed). One the daemon still reads is looked at again a
    /// little later.
    pub fn work(&mut self) {
        let Some((memory, processes)) = self.last_limits else {
            return;
        };
        let Some(at) = self.idle.iter().position(|k| k.ready_for.is_none()) else {
            self.look_at = None;
            return;
        };
        match self.idle[at].cg.reuse(memory, processes) {
            Ok(Reuse::Reused) => self.idle[at].ready_for = Some((memory, processes)),
            Ok(Reuse::Busy) => {
                self.look_at = Some(std::time::Instant::now() + Self::BUSY_RETRY);
            }
            Ok(Reuse::Spent) | Err(_) => {
                if let Some(spent) = self.idle.remove(at) {
                    spent.cg.remove();
                }
            }
        }
    }

    /// How many idle pairs are kept now.
    pub fn idle(&self) -> usize {
        self.idle.len()
    }
}

impl Drop for CgroupPool {
    fn drop(&mut self) {
        for kept in self.idle.drain(..) {
            kept.cg.remove();
        }
    }
}

impl SpawnCgroup {
    /// Makes an ended sandbox's cgroups ready for another one, if they are as
    /// good as new (see [`Reuse`]): the peak is reset to the current charge
    /// and the limits are written again.
    pub(super) fn reuse(&self, memory_bytes: u64, processes: u64) -> std::io::Result<Reuse> {
        // Exclusive while checking and resetting: a reader of the last
        // sandbox's readings still holds its shared lock.
        let held = match Flock::lock(
            self.memory_dir.try_clone()?,
            FlockArg::LockExclusiveNonblock,
        ) {
            Ok(held) => held,
            Err((_, nix::Error::EWOULDBLOCK)) => return Ok(Reuse::Busy),
            Err((_, e)) => return Err(e.into()),
        };
        let tasks = read_in(&self.pids_dir, &self.pids, PIDS_NOW)?;
        let pages = left_in_memory_stat(&read_in(&self.memory_dir, &self.memory, STAT)?);
        let kernel = read_in(&self.memory_dir, &self.memory, KERNEL)?;
        let oom_kills = match &self.readings {
            Some(opened) => opened.oom_kills(),
            None => oom_kills(&read_in(&self.memory_dir, &self.memory, OOM)?),
        };
        let as_new = tasks.trim() == "0"
            && pages.is_some_and(|b| b <= REUSE_MAX_PAGES)
            && kernel
                .trim()
                .parse::<u64>()
                .is_ok_and(|b| b <= REUSE_MAX_KERNEL)
            && oom_kills == Some(0);
        if !as_new {
            return Ok(Reuse::Spent);
        }
        self.reset_peak()?;
        self.write_limits(memory_bytes, processes)?;
        drop(held);
        Ok(Reuse::Reused)
    }

    /// Restarts the peak from the current charge.
    fn reset_peak(&self) -> std::io::Result<()> {
        write_in(&self.memory_dir, &self.memory, PEAK, "0")
    }

    /// Writes the memory and process limits.
    fn write_limits(&self, memory_bytes: u64, processes: u64) -> std::io::Result<()> {
        write_in(
            &self.memory_dir,
            &self.memory,
            "memory.limit_in_bytes",
            &memory_bytes.to_string(),
        )?;
        write_in(
            &self.pids_dir,
            &self.pids,
            "pids.max",
            &processes.to_string(),
        )
    }

    fn under(&self, roots: &V1Roots) -> bool {
        self.memory.starts_with(&roots.memory) && self.pids.starts_with(&roots.pids)
    }
}
