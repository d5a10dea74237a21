//! Resource limits: defaults, hard ceilings, and the rule that an operation may
//! only tighten what its connector declared.

use serde::Serialize;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// The limits a spawn runs under. Every field is a bound in force: the
/// seven numbers of [`LIMIT_SPECS`], and the private /tmp's size (given, or
/// derived from the memory limit: [`Limits::tmp_bytes`]) and whether
/// files in it may be executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Limits {
    /// Bytes of stdout kept; the rest is drained and counted.
    pub max_stdout_bytes: u64,
    /// Bytes of stderr kept.
    pub max_stderr_bytes: u64,
    /// Wall time before SIGTERM, then SIGKILL of the whole sandbox.
    pub wall_time_ms: u64,
    /// Memory for the whole sandbox.
    pub max_memory_bytes: u64,
    /// Processes and threads.
    pub max_processes: u64,
    /// Largest file the child may write.
    pub max_file_size_bytes: u64,
    /// Open descriptors per process.
    pub max_open_files: u64,
    /// The private /tmp's size in bytes; `None`: what the memory limit
    /// leaves after /dev/shm ([`Limits::tmp_bytes`]).
    pub tmp_size_bytes: Option<u64>,
    /// Whether files in the private /tmp may be executed (off by default).
    pub tmp_exec: bool,
}

/// One limit's name, default and ceiling; the table drives validation and docs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LimitSpec {
    /// TOML key.
    pub key: &'static str,
    /// Value when the manifest says nothing.
    pub default: u64,
    /// Largest value a manifest may ask for.
    pub ceiling: u64,
}

/// Defaults and ceilings (docs/manifest.md). The wall-time ceiling here is the operator's
/// default; `[sandbox] max_wall_time_ms` can raise it.
pub(crate) const LIMIT_SPECS: [LimitSpec; 7] = [
    LimitSpec {
        key: "max_stdout_bytes",
        default: MIB,
        ceiling: 64 * MIB,
    },
    LimitSpec {
        key: "max_stderr_bytes",
        default: 256 * KIB,
        ceiling: 64 * MIB,
    },
    LimitSpec {
        key: "wall_time_ms",
        default: 30_000,
        // An hour: a CI step (a test suite, a build) fits without the
        // operator's config; an operator may lower it, or raise it.
        ceiling: 3_600_000,
    },
    LimitSpec {
        key: "max_memory_bytes",
        default: 512 * MIB,
        ceiling: 16 * GIB,
    },
    LimitSpec {
        key: "max_processes",
        default: 64,
        ceiling: 4096,
    },
    LimitSpec {
        key: "max_file_size_bytes",
        default: GIB,
        ceiling: 64 * GIB,
    },
    LimitSpec {
        key: "max_open_files",
        default: 256,
        ceiling: 65_536,
    },
];

/// The most an operator may raise the wall-time ceiling to (24 hours).
pub(crate) const WALL_TIME_HARD_CEILING_MS: u64 = 24 * 3600 * 1000;

/// The smallest size of the private /tmp and /dev/shm: a tmpfs of size 0
/// would have no cap at all.
pub(crate) const MIN_TMPFS_BYTES: u64 = MIB;

impl Default for Limits {
    fn default() -> Self {
        Limits::from_fields(LIMIT_SPECS.map(|spec| spec.default))
    }
}

impl Limits {
    /// The seven numbers, with /tmp's size derived and no execution there.
    fn from_fields(v: [u64; 7]) -> Limits {
        Limits {
            max_stdout_bytes: v[0],
            max_stderr_bytes: v[1],
            wall_time_ms: v[2],
            max_memory_bytes: v[3],
            max_processes: v[4],
            max_file_size_bytes: v[5],
            max_open_files: v[6],
            tmp_size_bytes: None,
            tmp_exec: false,
        }
    }

    /// The fields in `LIMIT_SPECS` order.
    pub fn fields(&self) -> [u64; 7] {
        [
            self.max_stdout_bytes,
            self.max_stderr_bytes,
            self.wall_time_ms,
            self.max_memory_bytes,
            self.max_processes,
            self.max_file_size_bytes,
            self.max_open_files,
        ]
    }

    /// Sets field `index` (in `LIMIT_SPECS` order).
    pub fn set(&mut self, index: usize, value: u64) {
        let slot = match index {
            0 => &mut self.max_stdout_bytes,
            1 => &mut self.max_stderr_bytes,
            2 => &mut self.wall_time_ms,
            3 => &mut self.max_memory_bytes,
            4 => &mut self.max_processes,
            5 => &mut self.max_file_size_bytes,
            6 => &mut self.max_open_files,
            _ => return,
        };
        *slot = value;
    }

    /// The tighter of two limit sets, field by field: the smaller /tmp
    /// (given when either gives it), executable only if both allow it.
    pub fn tightest(&self, other: &Limits) -> Limits {
        let (a, b) = (self.fields(), other.fields());
        let mut limits = Limits::from_fields(std::array::from_fn(|i| a[i].min(b[i])));
        if self.tmp_size_bytes.is_some() || other.tmp_size_bytes.is_some() {
            limits.tmp_size_bytes = Some(self.tmp_bytes().min(other.tmp_bytes()));
        }
        limits.tmp_exec = self.tmp_exec && other.tmp_exec;
        limits
    }

    /// The private /tmp's size: `tmp_size_bytes`, or else what the memory
    /// limit leaves after /dev/shm's share, at least [`MIN_TMPFS_BYTES`].
    pub fn tmp_bytes(&self) -> u64 {
        self.tmp_size_bytes.unwrap_or_else(|| {
            self.max_memory_bytes
                .saturating_sub(shm_share(self.max_memory_bytes))
                .max(MIN_TMPFS_BYTES)
        })
    }

    /// The private /dev/shm's size: a quarter of the memory limit, at most
    /// 64 MiB (docker's default), no more than a given /tmp leaves of the
    /// limit, and at least [`MIN_TMPFS_BYTES`]. Both are tmpfs, whose pages
    /// are memory: together they hold no more than the memory limit.
    pub fn shm_bytes(&self) -> u64 {
        let share = shm_share(self.max_memory_bytes);
        match self.tmp_size_bytes {
            None => share,
            Some(tmp) => share
                .min(self.max_memory_bytes.saturating_sub(tmp))
                .max(MIN_TMPFS_BYTES),
        }
    }

    /// The largest `tmp_size_bytes` this memory limit admits: all of it but
    /// the smallest /dev/shm.
    pub fn tmp_size_ceiling(&self) -> u64 {
        self.max_memory_bytes.saturating_sub(MIN_TMPFS_BYTES)
    }
}

/// /dev/shm's share of a memory limit when /tmp's size is derived.
fn shm_share(max_memory_bytes: u64) -> u64 {
    (max_memory_bytes / 4).clamp(MIN_TMPFS_BYTES, 64 * MIB)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference vector I21: no limits block gives 1 MiB / 256 KiB.
    #[test]
    fn defaults_follow_the_spec() {
        let d = Limits::default();
        assert_eq!(d.max_stdout_bytes, 1_048_576);
        assert_eq!(d.max_stderr_bytes, 262_144);
        assert_eq!(d.wall_time_ms, 30_000);
    }

    #[test]
    fn tightest_takes_the_minimum_of_each_field() {
        let a = Limits {
            wall_time_ms: 5_000,
            ..Limits::default()
        };
        let b = Limits {
            max_processes: 8,
            ..Limits::default()
        };
        let t = a.tightest(&b);
        assert_eq!((t.wall_time_ms, t.max_processes), (5_000, 8));
        let exec = Limits {
            tmp_exec: true,
            tmp_size_bytes: Some(100 * MIB),
            ..Limits::default()
        };
        let t = exec.tightest(&Limits::default());
        assert_eq!((t.tmp_size_bytes, t.tmp_exec), (Some(100 * MIB), false));
    }

    #[test]
    fn tmp_and_shm_together_hold_at_most_the_memory_limit() {
        let memory = |max_memory_bytes| Limits {
            max_memory_bytes,
            ..Limits::default()
        };
        // Derived: /dev/shm a quarter (at most 64 MiB), /tmp the rest.
        let d = memory(512 * MIB);
        assert_eq!((d.tmp_bytes(), d.shm_bytes()), (448 * MIB, 64 * MIB));
        let small = memory(64 * MIB);
        assert_eq!((small.tmp_bytes(), small.shm_bytes()), (48 * MIB, 16 * MIB));
        // Given: /dev/shm keeps what /tmp leaves, at least 1 MiB.
        let given = |tmp| Limits {
            tmp_size_bytes: Some(tmp),
            ..memory(64 * MIB)
        };
        assert_eq!(
            (given(60 * MIB).tmp_bytes(), given(60 * MIB).shm_bytes()),
            (60 * MIB, 4 * MIB)
        );
        assert_eq!(given(8 * MIB).shm_bytes(), 16 * MIB);
        assert_eq!(given(63 * MIB).shm_bytes(), MIB);
        assert_eq!(memory(64 * MIB).tmp_size_ceiling(), 63 * MIB);
        // A tiny memory limit still gives each a cap.
        let tiny = memory(4096);
        assert_eq!((tiny.tmp_bytes(), tiny.shm_bytes()), (MIB, MIB));
    }
}
