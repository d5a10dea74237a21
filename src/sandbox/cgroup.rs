//! Memory and process limits through cgroup v1 controllers (the `memory` and
//! `pids` hierarchies), used when spawnd is root and the host mounts them. The
//! init process moves itself into both (through `tasks` files spawnd opened)
//! before it does anything else, so every process of the sandbox is counted; the peak memory and OOM kills are read back afterwards.
//! Without them the launcher falls back to rlimits and says so.
//!
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
//! What "as good as new" leaves out: counters nothing reads (`memory.failcnt`,
//! `memory.kmem.max_usage_in_bytes`, `pids.events`) keep counting from the
//! first sandbox; and a charge made after the check by a kernel object that
//! outlived its sandbox's processes (an inotify queue handed to another
//! sandbox, say) counts against the next tenant, where it went to the parent
//! before. A `kill -9`'d spawner leaves its idle pairs to [`sweep_stale`].

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg, OFlag};

/// A pair of per-spawn cgroups, with their directories open: every file in
/// them is reached from those (a fresh cgroup's files miss the dentry cache,
/// so each full path walk from `/` cost a slow lookup more).
#[derive(Debug)]
pub struct SpawnCgroup {
    memory: PathBuf,
    pids: PathBuf,
    memory_dir: OwnedFd,
    pids_dir: OwnedFd,
    /// The peak and OOM files, opened ahead ([`SpawnCgroup::open_readings`]).
    readings: Option<Readings>,
}

/// Where the v1 hierarchies are mounted.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct V1Roots {
    /// The `memory` hierarchy.
    pub memory: PathBuf,
    /// The `pids` hierarchy.
    pub pids: PathBuf,
}

/// Opens `name` in the cgroup directory `dir` (shown as `shown` in errors).
fn open_in(dir: &OwnedFd, shown: &Path, name: &str, flags: OFlag) -> std::io::Result<OwnedFd> {
    nix::fcntl::openat(
        dir,
        name,
        flags | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| {
        let e = std::io::Error::from(e);
        std::io::Error::new(
            e.kind(),
            format!("open {}: {e}", shown.join(name).display()),
        )
    })
}

fn write_in(dir: &OwnedFd, shown: &Path, name: &str, value: &str) -> std::io::Result<()> {
    let fd = open_in(dir, shown, name, OFlag::O_WRONLY)?;
    std::io::Write::write_all(&mut std::fs::File::from(fd), value.as_bytes()).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("write {value:?} to {}: {e}", shown.join(name).display()),
        )
    })
}

/// Makes `dir` anew (and `spawnd/` above it on first use). One that exists
/// already was left by a `kill -9`'d spawnd that had this pid: it is
/// removed and made again, so no peak usage or OOM count of that run is
/// read as this one's (rmdir fails, and so does the launch, if anything
/// still runs in it).
fn fresh_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::create_dir(dir)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_dir(dir)?;
            std::fs::create_dir(dir)
        }
        other => other,
    }
}

fn open_dir(dir: &Path) -> std::io::Result<OwnedFd> {
    nix::fcntl::open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| {
        let e = std::io::Error::from(e);
        std::io::Error::new(e.kind(), format!("open {}: {e}", dir.display()))
    })
}

/// The memory controller's peak usage file (cgroup v1).
const PEAK: &str = "memory.max_usage_in_bytes";
/// Its page counts (cgroup v1).
const STAT: &str = "memory.stat";
/// What kernel objects are charged to it (cgroup v1).
const KERNEL: &str = "memory.kmem.usage_in_bytes";
/// The pids controller's count of tasks.
const PIDS_NOW: &str = "pids.current";
/// Its OOM report (cgroup v1).
const OOM: &str = "memory.oom_control";

fn parse_peak(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// The OOM killer's count in a v1 `memory.oom_control` (`None` without one).
fn oom_kills(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse::<u64>().ok())
}

fn parse_oom_killed(text: &str) -> bool {
    oom_kills(text).is_some_and(|n| n > 0)
}

/// A memory cgroup's peak and OOM files, opened ahead of their reading:
/// a fresh cgroup's files miss the dentry cache, so opening them costs a
/// slow lookup each, better paid while the program runs than after it.
#[derive(Debug)]
pub struct Readings {
    peak: std::fs::File,
    oom: std::fs::File,
}

impl Readings {
    /// Opens both files in the memory cgroup directory `dir`.
    pub fn open_at(dir: std::os::fd::BorrowedFd<'_>) -> Option<Readings> {
        let open = |name: &str| {
            nix::fcntl::openat(
                dir,
                name,
                OFlag::O_RDONLY | OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            .ok()
            .map(std::fs::File::from)
        };
        Some(Readings {
            peak: open(PEAK)?,
            oom: open(OOM)?,
        })
    }

    /// Peak memory and whether the OOM killer acted; `None` when either
    /// file cannot be read — the cgroup's owner removed it meanwhile — so
    /// the caller takes the owner's own readings instead of guessing.
    pub fn read(&self) -> Option<(Option<u64>, bool)> {
        // From the start each time: the kernel renders them anew.
        let read = |f: &std::fs::File| -> Option<String> {
            use std::os::unix::fs::FileExt;
            let mut buf = [0u8; 256];
            let n = f.read_at(&mut buf, 0).ok()?;
            String::from_utf8(buf[..n].to_vec()).ok()
        };
        let peak = read(&self.peak)?;
        let oom = read(&self.oom)?;
        Some((parse_peak(&peak), parse_oom_killed(&oom)))
    }
}

/// [`Readings`] opened and read at once, through an open memory cgroup
/// directory ([`SpawnCgroup::open_memory_dir`]); `None` as for
/// [`Readings::read`].
pub fn readings_at(dir: std::os::fd::BorrowedFd<'_>) -> Option<(Option<u64>, bool)> {
    Readings::open_at(dir)?.read()
}

/// How often a long-lived process (the daemon's spawner) sweeps: a sweep
/// lists both hierarchies and checks each entry's pid, and only a `kill -9`
/// of some spawnd leaves anything behind, so once per launch is too often.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// [`sweep_stale`] on a process's first call, then at most every
/// [`SWEEP_EVERY`]. Callers sweep once their sandbox is launched (`run`
/// while the sandbox builds its root, the spawner once its reply is sent),
/// so no launch waits for it.
pub fn sweep_stale_now_and_then(roots: &V1Roots) {
    static LAST: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if last.is_none_or(|t| t.elapsed() >= SWEEP_EVERY) {
        *last = Some(std::time::Instant::now());
        drop(last);
        sweep_stale(roots);
    }
}

/// Removes per-spawn cgroups whose spawnd (the pid in `<pid>-<n>`) is gone:
/// what a `kill -9` of spawnd left behind. Busy or foreign ones are left alone.
fn sweep_stale(roots: &V1Roots) {
    for root in [&roots.memory, &roots.pids] {
        for entry in std::fs::read_dir(root.join("spawnd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = name.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir(entry.path());
            }
        }
    }
}

impl SpawnCgroup {
    /// Creates `spawnd/<name>` in both hierarchies with the given limits.
    pub fn create(
        roots: &V1Roots,
        name: &str,
        memory_bytes: u64,
        processes: u64,
    ) -> std::io::Result<SpawnCgroup> {
        let memory = roots.memory.join("spawnd").join(name);
        let pids = roots.pids.join("spawnd").join(name);
        let made = |dir: &Path| -> std::io::Result<OwnedFd> {
            fresh_dir(dir).map_err(|e| {
                std::io::Error::new(e.kind(), format!("mkdir {}: {e}", dir.display()))
            })?;
            open_dir(dir).inspect_err(|_| {
                let _ = std::fs::remove_dir(dir);
            })
        };
        let memory_dir = made(&memory)?;
        let pids_dir = made(&pids).inspect_err(|_| {
            let _ = std::fs::remove_dir(&memory);
        })?;
        let cg = SpawnCgroup {
            memory,
            pids,
            memory_dir,
            pids_dir,
            readings: None,
        };
        let limited = write_in(
            &cg.memory_dir,
            &cg.memory,
            "memory.limit_in_bytes",
            &memory_bytes.to_string(),
        )
        .and_then(|()| write_in(&cg.pids_dir, &cg.pids, "pids.max", &processes.to_string()));
        match limited {
            Ok(()) => Ok(cg),
            Err(e) => {
                cg.remove();
                Err(e)
            }
        }
    }

    /// Opens both cgroups' `tasks` files for writing, here, with spawnd's
    /// credentials: the sandbox's init writes `0` to each to move itself in.
    /// A thread moving itself skips the kernel's global threadgroup lock,
    /// whose first use after a quiet spell waits for an RCU grace period
    /// (8–20 ms measured here) — moving the child by pid from outside does.
    pub fn open_tasks(&self) -> std::io::Result<Vec<OwnedFd>> {
        [
            (&self.memory_dir, &self.memory),
            (&self.pids_dir, &self.pids),
        ]
        .into_iter()
        .map(|(dir, shown)| open_in(dir, shown, "tasks", OFlag::O_WRONLY))
        .collect()
    }

    /// Opens the files [`SpawnCgroup::readings`] reads, so that their
    /// lookups (a fresh cgroup's files are not in the dentry cache yet)
    /// happen while the caller waits anyway, not after the program ended.
    /// Best effort: without them, `readings` opens them itself.
    pub fn open_readings(&mut self) {
        self.readings = Readings::open_at(self.memory_dir.as_fd());
    }

    /// Peak memory and whether the OOM killer acted, together (no peak and
    /// no OOM kill when the files cannot be read).
    pub fn readings(&self) -> (Option<u64>, bool) {
        match &self.readings {
            Some(r) => r.read(),
            None => readings_at(self.memory_dir.as_fd()),
        }
        .unwrap_or((None, false))
    }

    /// The memory cgroup's directory, for [`readings_at`] in a process that
    /// does not own the cgroup (the daemon, for its spawner's). Opened
    /// anew, not duplicated: the reader's [`hold_for_reading`] lock must be
    /// its own, as `flock` locks belong to an open file description.
    pub fn open_memory_dir(&self) -> std::io::Result<OwnedFd> {
        open_in(
            &self.memory_dir,
            &self.memory,
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        )
    }

    /// Makes an ended sandbox's cgroups ready for another one, if they are as
    /// good as new (see [`Reuse`]): the peak is reset to the current charge
    /// and the limits are written again.
    fn reuse(&self, memory_bytes: u64, processes: u64) -> std::io::Result<Reuse> {
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
        let oom_kills = oom_kills(&read_in(&self.memory_dir, &self.memory, OOM)?);
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
        write_in(&self.memory_dir, &self.memory, PEAK, "0")?;
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
        )?;
        drop(held);
        Ok(Reuse::Reused)
    }

    fn under(&self, roots: &V1Roots) -> bool {
        self.memory.starts_with(&roots.memory) && self.pids.starts_with(&roots.pids)
    }

    /// Removes both cgroups (retrying while the kernel finishes tearing the processes down).
    pub fn remove(self) {
        for dir in [&self.memory, &self.pids] {
            for _ in 0..200 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
}

/// What an ended sandbox may have left charged to its memory cgroup, for
/// the cgroup to serve another: pages (page cache, anonymous, swap; 4 KiB
/// measured after a Python start) and kernel objects, most of which the
/// kernel frees only after an RCU grace period (0.15–0.3 MiB measured just
/// after a Python sandbox ended, 8 KiB 10 ms later). More is what the
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
enum Reuse {
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
pub fn hold_for_reading(dir: OwnedFd) -> Option<Flock<OwnedFd>> {
    Flock::lock(dir, FlockArg::LockSharedNonblock).ok()
}

/// The cgroups of ended sandboxes, kept for later ones (see the module
/// documentation). Dropping the pool removes them.
#[derive(Debug, Default)]
pub struct CgroupPool {
    idle: VecDeque<SpawnCgroup>,
}

impl CgroupPool {
    /// How many idle cgroup pairs are kept; more are removed.
    pub const KEEP: usize = 16;
    /// How many idle pairs a launch looks at before making a new one.
    const LOOK_AT: usize = 2;

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
        for _ in 0..Self::LOOK_AT.min(self.idle.len()) {
            let Some(cg) = self.idle.pop_front() else {
                break;
            };
            if !cg.under(roots) {
                cg.remove();
                continue;
            }
            match cg.reuse(memory_bytes, processes) {
                Ok(Reuse::Reused) => return Ok(cg),
                Ok(Reuse::Busy) => self.idle.push_back(cg),
                Ok(Reuse::Spent) | Err(_) => cg.remove(),
            }
        }
        SpawnCgroup::create(roots, &name(), memory_bytes, processes)
    }

    /// Keeps an ended sandbox's cgroups (its init reaped, its readings
    /// taken), or removes them when the pool is full.
    pub fn give_back(&mut self, cg: SpawnCgroup) {
        if self.idle.len() < Self::KEEP {
            self.idle.push_back(cg);
        } else {
            cg.remove();
        }
    }

    /// How many idle pairs are kept now.
    pub fn idle(&self) -> usize {
        self.idle.len()
    }
}

impl Drop for CgroupPool {
    fn drop(&mut self) {
        for cg in self.idle.drain(..) {
            cg.remove();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{readings_at, OOM, PEAK};
    use std::os::fd::AsFd;

    fn dir_with(files: &[(&str, &str)]) -> (tempfile::TempDir, std::fs::File) {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).expect("write");
        }
        let fd = std::fs::File::open(dir.path()).expect("open");
        (dir, fd)
    }

    #[test]
    fn readings_come_from_both_files() {
        let (_d, fd) = dir_with(&[
            (PEAK, "524288\n"),
            (OOM, "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"),
        ]);
        assert_eq!(readings_at(fd.as_fd()), Some((Some(524288), true)));
        let (_d, fd) = dir_with(&[(PEAK, "4096\n"), (OOM, "oom_kill 0\n")]);
        assert_eq!(readings_at(fd.as_fd()), Some((Some(4096), false)));
    }

    /// Files opened ahead are read from their start each time, so a
    /// reading reflects the file as it is then, not as it was at open.
    #[test]
    fn readings_opened_ahead_read_the_files_as_they_are_then() {
        let (dir, fd) = dir_with(&[(PEAK, "4096\n"), (OOM, "oom_kill 0\n")]);
        let opened = super::Readings::open_at(fd.as_fd()).expect("both files");
        assert_eq!(opened.read(), Some((Some(4096), false)));
        std::fs::write(dir.path().join(PEAK), "8192\n").unwrap();
        std::fs::write(dir.path().join(OOM), "oom_kill 1\n").unwrap();
        assert_eq!(opened.read(), Some((Some(8192), true)));
        let (_d, fd) = dir_with(&[(PEAK, "4096\n")]);
        assert!(super::Readings::open_at(fd.as_fd()).is_none());
    }

    /// A per-spawn directory is always made anew: a missing `spawnd/` is
    /// made, an empty leftover is replaced, and one that cannot be removed
    /// (a cgroup with processes in it; here, a file) fails the launch.
    #[test]
    fn per_spawn_directories_are_made_anew() {
        let d = tempfile::tempdir().expect("tempdir");
        let dir = d.path().join("spawnd").join("123-0");
        super::fresh_dir(&dir).expect("parent made on first use");
        super::fresh_dir(&dir).expect("an empty leftover is replaced");
        std::fs::write(dir.join("busy"), "").expect("write");
        assert!(super::fresh_dir(&dir).is_err());
    }

    /// A pair of fake cgroup directories with the files `reuse` reads and
    /// writes; `memory_files` overrides the memory side's. Writes into
    /// cgroup files replace their value without truncating, so in these
    /// regular files each value written has the width of the one it replaces.
    fn fake_pair(memory_files: &[(&str, &str)]) -> (tempfile::TempDir, super::SpawnCgroup) {
        let d = tempfile::tempdir().expect("tempdir");
        let (memory, pids) = (d.path().join("memory"), d.path().join("pids"));
        std::fs::create_dir(&memory).unwrap();
        std::fs::create_dir(&pids).unwrap();
        let defaults = [
            (PEAK, "9"),
            (OOM, "oom_kill 0\n"),
            (super::STAT, "cache 4096\nrss 0\ntotal_cache 99999999\n"),
            (super::KERNEL, "8192\n"),
            ("memory.limit_in_bytes", "0000000"),
        ];
        for (name, text) in defaults.iter().chain(memory_files) {
            std::fs::write(memory.join(name), text).unwrap();
        }
        std::fs::write(pids.join(super::PIDS_NOW), "0\n").unwrap();
        std::fs::write(pids.join("pids.max"), "0").unwrap();
        let cg = super::SpawnCgroup {
            memory_dir: super::open_dir(&memory).unwrap(),
            pids_dir: super::open_dir(&pids).unwrap(),
            memory,
            pids,
            readings: None,
        };
        (d, cg)
    }

    /// A pair as good as new is reset for its next sandbox: peak restarted,
    /// limits written again.
    #[test]
    fn an_idle_pair_as_good_as_new_is_reset_for_the_next_sandbox() {
        let (_d, cg) = fake_pair(&[]);
        assert_eq!(cg.reuse(1 << 20, 7).unwrap(), super::Reuse::Reused);
        let read = |p: std::path::PathBuf| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(cg.memory.join(PEAK)), "0");
        assert_eq!(read(cg.memory.join("memory.limit_in_bytes")), "1048576");
        assert_eq!(read(cg.pids.join("pids.max")), "7");
    }

    /// While a reader holds the last sandbox's readings, the pair is not
    /// given out; once it lets go, it is.
    #[test]
    fn a_pair_whose_readings_are_held_is_not_given_out() {
        let (_d, cg) = fake_pair(&[]);
        let held = super::hold_for_reading(cg.open_memory_dir().unwrap()).expect("shared lock");
        assert_eq!(cg.reuse(1 << 20, 7).unwrap(), super::Reuse::Busy);
        assert_eq!(std::fs::read_to_string(cg.memory.join(PEAK)).unwrap(), "9");
        drop(held);
        assert_eq!(cg.reuse(1 << 20, 7).unwrap(), super::Reuse::Reused);
    }

    /// The pool gives out no pair a reader holds: it stays for later, and
    /// a new pair is made instead (here that fails: the fake root is no
    /// cgroup hierarchy, so the limit files are missing).
    #[test]
    fn the_pool_skips_a_held_pair_and_keeps_it() {
        let (d, cg) = fake_pair(&[]);
        let held = super::hold_for_reading(cg.open_memory_dir().unwrap()).expect("shared lock");
        let roots = super::V1Roots {
            memory: d.path().to_path_buf(),
            pids: d.path().to_path_buf(),
        };
        let mut pool = super::CgroupPool::new();
        pool.give_back(cg);
        let made = pool.take(&roots, || "new-0".into(), 1 << 20, 7);
        assert!(made.is_err(), "a new pair was attempted");
        assert_eq!(pool.idle(), 1, "the held pair is kept");
        drop(held);
        let again = pool
            .take(&roots, || "new-1".into(), 1 << 20, 7)
            .expect("reused");
        assert_eq!(pool.idle(), 0);
        assert_eq!(again.memory, d.path().join("memory"));
    }

    /// A task left, an OOM kill, cached pages or kernel objects above the
    /// bounds, or a file that does not say: not given out again.
    #[test]
    fn a_pair_with_anything_left_is_spent() {
        for files in [
            &[(OOM, "oom_kill 1\n")][..],
            &[(super::STAT, "cache 8003584\nrss 0\n")],
            &[(super::STAT, "cache 0\nrss 300000\n")],
            &[(super::STAT, "cache 0\nrss 0\nswap 300000\n")],
            &[(super::STAT, "total_cache 0\n")],
            &[(super::KERNEL, "2000000\n")],
            &[(OOM, "")],
        ] {
            let (_d, cg) = fake_pair(files);
            assert_eq!(
                cg.reuse(1 << 20, 7).unwrap(),
                super::Reuse::Spent,
                "{files:?}"
            );
        }
        let (_d, cg) = fake_pair(&[]);
        std::fs::write(cg.pids.join(super::PIDS_NOW), "1\n").unwrap();
        assert_eq!(cg.reuse(1 << 20, 7).unwrap(), super::Reuse::Spent);
    }

    /// A cgroup removed before it was read gives no readings (not "no OOM
    /// kill"), so the daemon waits for the spawner's own.
    #[test]
    fn a_cgroup_gone_gives_no_readings() {
        let (_d, fd) = dir_with(&[(PEAK, "4096\n")]);
        assert_eq!(readings_at(fd.as_fd()), None);
        let (_d, fd) = dir_with(&[]);
        assert_eq!(readings_at(fd.as_fd()), None);
    }
}
