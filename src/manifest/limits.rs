//! Resource limits: defaults, hard ceilings, and the rule that an operation may
//! only tighten what its connector declared.

use serde::Serialize;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// The limits a spawn runs under. Every field is a bound in force; none is optional.
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
}

/// One limit's name, default and ceiling; the table drives validation and docs.
#[derive(Debug, Clone, Copy)]
pub struct LimitSpec {
    /// TOML key.
    pub key: &'static str,
    /// Value when the manifest says nothing.
    pub default: u64,
    /// Largest value a manifest may ask for.
    pub ceiling: u64,
}

/// Defaults and ceilings (docs/manifest.md). The wall-time ceiling here is the operator's
/// default; `[sandbox] max_wall_time_ms` can raise it.
pub const LIMIT_SPECS: [LimitSpec; 7] = [
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
pub const WALL_TIME_HARD_CEILING_MS: u64 = 24 * 3600 * 1000;

impl Default for Limits {
    fn default() -> Self {
        let mut limits = Limits::from_fields([0; 7]);
        for (i, spec) in LIMIT_SPECS.iter().enumerate() {
            limits.set(i, spec.default);
        }
        limits
    }
}

impl Limits {
    fn from_fields(v: [u64; 7]) -> Limits {
        Limits {
            max_stdout_bytes: v[0],
            max_stderr_bytes: v[1],
            wall_time_ms: v[2],
            max_memory_bytes: v[3],
            max_processes: v[4],
            max_file_size_bytes: v[5],
            max_open_files: v[6],
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
        let mut v = self.fields();
        if let Some(slot) = v.get_mut(index) {
            *slot = value;
        }
        *self = Limits::from_fields(v);
    }

    /// The tighter of two limit sets, field by field.
    pub fn tightest(&self, other: &Limits) -> Limits {
        let (a, b) = (self.fields(), other.fields());
        Limits::from_fields(std::array::from_fn(|i| a[i].min(b[i])))
    }
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
    }
}
