//! Memory and process limits through cgroups: on the unified hierarchy
//! (v2) one cgroup per sandbox with `memory.max`, `memory.swap.max = 0`,
//! `memory.oom.group = 1` and `pids.max`, made where [`v2`] says; on a host
//! whose `memory` and `pids` controllers are v1 hierarchies, one cgroup in
//! each. A machine has each controller on one of the two, never both. The
//! init process moves itself in (through the `cgroup.procs` or `tasks`
//! files spawnd opened) before it does anything else, so every process of
//! the sandbox is counted; the peak memory and OOM kills are read back
//! afterwards. Without either the launcher falls back to rlimits and says
//! so.
//!
//! A long-lived spawner keeps ended sandboxes' v1 cgroups for later ones
//! ([`pool`]); v2 cgroups are made and removed per sandbox.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

mod pool;
pub(crate) mod v2;
pub(crate) use pool::{hold_for_reading, CgroupPool};
pub(crate) use v2::V2Base;

/// Which hierarchy a sandbox's cgroup is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hierarchy {
    /// Two cgroups, one in the `memory` and one in the `pids` hierarchy.
    V1,
    /// One cgroup on the unified hierarchy (`memory` and `pids` below name
    /// the same directory).
    V2,
}

/// A sandbox's cgroups (a v1 pair, or one v2 cgroup), with their
/// directories open: every file in them is reached from those (a fresh
/// cgroup's files miss the dentry cache, so each full path walk from `/`
/// cost a slow lookup more).
#[derive(Debug)]
pub struct SpawnCgroup {
    hierarchy: Hierarchy,
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
/// Its v2 counterpart (Linux 5.19; without it a v2 sandbox reports no peak).
const PEAK_V2: &str = "memory.peak";
/// The v2 memory controller's event counts, `oom_kill` among them.
const EVENTS_V2: &str = "memory.events";
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

/// The OOM killer's count in a v1 `memory.oom_control` or a v2
/// `memory.events` (both say `oom_kill N`; `None` without the line).
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
pub(crate) struct Readings {
    /// The peak file: always on v1, from Linux 5.19 on v2.
    peak: Option<std::fs::File>,
    oom: std::fs::File,
}

impl Readings {
    /// Opens both files in the memory cgroup directory `dir`, a v1 one's
    /// when it has `memory.oom_control`, else a v2 one's.
    pub(crate) fn open_at(dir: std::os::fd::BorrowedFd<'_>) -> Option<Readings> {
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
        if let Some(oom) = open(OOM) {
            return Some(Readings {
                peak: Some(open(PEAK)?),
                oom,
            });
        }
        Some(Readings {
            oom: open(EVENTS_V2)?,
            peak: open(PEAK_V2),
        })
    }

    /// Peak memory and whether the OOM killer acted; `None` when either
    /// file cannot be read — the cgroup's owner removed it meanwhile — so
    /// the caller takes the owner's own readings instead of guessing.
    pub(crate) fn read(&self) -> Option<(Option<u64>, bool)> {
        let peak = match &self.peak {
            Some(file) => parse_peak(&read_from_start(file)?),
            None => None,
        };
        let oom = read_from_start(&self.oom)?;
        Some((peak, parse_oom_killed(&oom)))
    }

    /// The OOM killer's count (`None` when unreadable or missing).
    fn oom_kills(&self) -> Option<u64> {
        oom_kills(&read_from_start(&self.oom)?)
    }
}

/// A cgroup file read from its start (the kernel renders it anew each time).
fn read_from_start(f: &std::fs::File) -> Option<String> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 512];
    let n = f.read_at(&mut buf, 0).ok()?;
    String::from_utf8(buf[..n].to_vec()).ok()
}

/// [`Readings`] opened and read at once, through an open memory cgroup
/// directory ([`SpawnCgroup::open_memory_dir`]); `None` as for
/// [`Readings::read`].
pub(crate) fn readings_at(dir: std::os::fd::BorrowedFd<'_>) -> Option<(Option<u64>, bool)> {
    Readings::open_at(dir)?.read()
}

/// How often a long-lived process (the daemon's spawner) sweeps: a sweep
/// lists both hierarchies and checks each entry's pid, and only a `kill -9`
/// of some spawnd leaves anything behind, so once per launch is too often.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// [`sweep_stale`] on a process's first call, then at most every
/// [`SWEEP_EVERY`]. Callers sweep once their sandbox is launched (`run`
/// while the sandbox builds its root, the spawner once its reply is sent),
/// so no launch waits for it. `parents` are the directories per-spawn
/// cgroups are made in.
pub(crate) fn sweep_stale_now_and_then(parents: &[PathBuf]) {
    static LAST: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if last.is_none_or(|t| t.elapsed() >= SWEEP_EVERY) {
        *last = Some(std::time::Instant::now());
        drop(last);
        sweep_stale(parents);
    }
}

/// Removes per-spawn cgroups whose spawnd (the pid in `<pid>-<n>`) is gone:
/// what a `kill -9` of spawnd left behind. Busy or foreign ones are left alone.
fn sweep_stale(parents: &[PathBuf]) {
    for parent in parents {
        for entry in std::fs::read_dir(parent).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((pid, n)) = name.split_once('-') else {
                continue;
            };
            let (Ok(pid), Ok(_)) = (pid.parse::<u32>(), n.parse::<u64>()) else {
                continue;
            };
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir(entry.path());
            }
        }
    }
}

impl V1Roots {
    /// The directories per-spawn cgroups are made in.
    pub fn parents(&self) -> Vec<PathBuf> {
        vec![self.memory.join("spawnd"), self.pids.join("spawnd")]
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
            hierarchy: Hierarchy::V1,
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
        cg.kept_if(limited)
    }

    /// Creates `<base>/<name>` on the unified hierarchy with the given
    /// limits: `memory.max`, no swap (`memory.swap.max = 0`; a kernel
    /// without swap accounting is accepted only on a host without swap),
    /// the whole sandbox killed when the OOM killer picks any of it
    /// (`memory.oom.group = 1`), and `pids.max`.
    pub fn create_v2(
        base: &V2Base,
        name: &str,
        memory_bytes: u64,
        processes: u64,
    ) -> std::io::Result<SpawnCgroup> {
        let dir = base.dir.join(name);
        fresh_dir(&dir)
            .map_err(|e| std::io::Error::new(e.kind(), format!("mkdir {}: {e}", dir.display())))?;
        let opened = open_dir(&dir).and_then(|a| Ok((a, open_dir(&dir)?)));
        let (memory_dir, pids_dir) = match opened {
            Ok(fds) => fds,
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                return Err(e);
            }
        };
        let cg = SpawnCgroup {
            hierarchy: Hierarchy::V2,
            memory: dir.clone(),
            pids: dir,
            memory_dir,
            pids_dir,
            readings: None,
        };
        let limited = write_in(
            &cg.memory_dir,
            &cg.memory,
            "memory.max",
            &memory_bytes.to_string(),
        )
        .and_then(
            |()| match write_in(&cg.memory_dir, &cg.memory, "memory.swap.max", "0") {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !v2::host_has_swap() => {
                    Ok(())
                }
                other => other,
            },
        )
        .and_then(|()| write_in(&cg.memory_dir, &cg.memory, "memory.oom.group", "1"))
        .and_then(|()| write_in(&cg.pids_dir, &cg.pids, "pids.max", &processes.to_string()));
        cg.kept_if(limited)
    }

    /// The cgroup, if its limits were written; else it is removed and the
    /// write's error returned.
    fn kept_if(self, limited: std::io::Result<()>) -> std::io::Result<SpawnCgroup> {
        match limited {
            Ok(()) => Ok(self),
            Err(e) => {
                self.remove();
                Err(e)
            }
        }
    }

    /// Whether this is a v2 cgroup (made and removed per sandbox, never
    /// kept in a [`CgroupPool`]).
    pub fn is_v2(&self) -> bool {
        self.hierarchy == Hierarchy::V2
    }

    /// Opens the files that move a process in for writing, here, with
    /// spawnd's credentials: both v1 cgroups' `tasks`, or the v2 cgroup's
    /// `cgroup.procs`. The sandbox's init writes `0` to each to move itself in
    /// (on v2 the kernel checks the opener's credentials, from Linux 5.16).
    /// A thread moving itself skips the kernel's global threadgroup lock,
    /// whose first use after a quiet spell waits for an RCU grace period
    /// (milliseconds) — moving the child by pid from outside does.
    pub fn open_tasks(&self) -> std::io::Result<Vec<OwnedFd>> {
        if self.hierarchy == Hierarchy::V2 {
            return open_in(
                &self.memory_dir,
                &self.memory,
                "cgroup.procs",
                OFlag::O_WRONLY,
            )
            .map(|fd| vec![fd]);
        }
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

    /// Removes its cgroups (retrying while the kernel finishes tearing the processes down).
    pub fn remove(self) {
        let dirs = match self.hierarchy {
            Hierarchy::V1 => vec![&self.memory, &self.pids],
            Hierarchy::V2 => vec![&self.memory],
        };
        for dir in dirs {
            for _ in 0..200 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
}

#[cfg(test)]
mod tests;
