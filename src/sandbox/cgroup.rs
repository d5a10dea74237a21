//! Memory and process limits through cgroup v1 controllers (the `memory` and
//! `pids` hierarchies), used when spawnd is root and the host mounts them. The
//! init process moves itself into both (through `tasks` files spawnd opened)
//! before it does anything else, so every process of the sandbox is counted; the peak memory and OOM kills are read back afterwards.
//! Without them the launcher falls back to rlimits and says so.

use std::path::{Path, PathBuf};

/// A pair of per-spawn cgroups.
#[derive(Debug)]
pub struct SpawnCgroup {
    memory: PathBuf,
    pids: PathBuf,
}

/// Where the v1 hierarchies are mounted.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct V1Roots {
    /// The `memory` hierarchy.
    pub memory: PathBuf,
    /// The `pids` hierarchy.
    pub pids: PathBuf,
}

fn write(path: &Path, value: &str) -> std::io::Result<()> {
    std::fs::write(path, value).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("write {value:?} to {}: {e}", path.display()),
        )
    })
}

/// The memory controller's peak usage file (cgroup v1).
const PEAK: &str = "memory.max_usage_in_bytes";
/// Its OOM report (cgroup v1).
const OOM: &str = "memory.oom_control";

fn parse_peak(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

fn parse_oom_killed(text: &str) -> bool {
    text.lines().any(|l| {
        l.strip_prefix("oom_kill ")
            .and_then(|n| n.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0)
    })
}

/// Peak memory and whether the OOM killer acted, read through an open
/// memory cgroup directory ([`SpawnCgroup::open_memory_dir`]); `None` when
/// either file cannot be read — the cgroup's owner removed it meanwhile —
/// so the caller takes the owner's own readings instead of guessing.
pub fn readings_at(dir: std::os::fd::BorrowedFd<'_>) -> Option<(Option<u64>, bool)> {
    let read = |name: &str| -> Option<String> {
        let fd = nix::fcntl::openat(
            dir,
            name,
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .ok()?;
        std::io::read_to_string(std::fs::File::from(fd)).ok()
    };
    let peak = read(PEAK)?;
    let oom = read(OOM)?;
    Some((parse_peak(&peak), parse_oom_killed(&oom)))
}

/// How often a long-lived process (the daemon's spawner) sweeps: every
/// create did, listing both hierarchies and checking each entry's pid,
/// though only a `kill -9` of some spawnd leaves anything behind.
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
        for dir in [&memory, &pids] {
            std::fs::create_dir_all(dir).map_err(|e| {
                std::io::Error::new(e.kind(), format!("mkdir {}: {e}", dir.display()))
            })?;
        }
        let cg = SpawnCgroup { memory, pids };
        write(
            &cg.memory.join("memory.limit_in_bytes"),
            &memory_bytes.to_string(),
        )?;
        write(&cg.pids.join("pids.max"), &processes.to_string())?;
        Ok(cg)
    }

    /// Opens both cgroups' `tasks` files for writing, here, with spawnd's
    /// credentials: the sandbox's init writes `0` to each to move itself in.
    /// A thread moving itself skips the kernel's global threadgroup lock,
    /// whose first use after a quiet spell waits for an RCU grace period
    /// (8–20 ms measured here) — moving the child by pid from outside does.
    pub fn open_tasks(&self) -> std::io::Result<Vec<std::os::fd::OwnedFd>> {
        [&self.memory, &self.pids]
            .into_iter()
            .map(|dir| {
                let path = dir.join("tasks");
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map(std::os::fd::OwnedFd::from)
                    .map_err(|e| {
                        std::io::Error::new(e.kind(), format!("open {}: {e}", path.display()))
                    })
            })
            .collect()
    }

    /// Peak memory use in bytes.
    pub fn peak_memory(&self) -> Option<u64> {
        parse_peak(&std::fs::read_to_string(self.memory.join(PEAK)).ok()?)
    }

    /// Whether the kernel's OOM killer acted in this cgroup.
    pub fn oom_killed(&self) -> bool {
        parse_oom_killed(&std::fs::read_to_string(self.memory.join(OOM)).unwrap_or_default())
    }

    /// Peak memory and whether the OOM killer acted, together.
    pub fn readings(&self) -> (Option<u64>, bool) {
        (self.peak_memory(), self.oom_killed())
    }

    /// The memory cgroup's directory, opened for [`readings_at`] by a
    /// process that does not own the cgroup (the daemon, for its spawner's).
    pub fn open_memory_dir(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        Ok(std::fs::File::open(&self.memory)?.into())
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
