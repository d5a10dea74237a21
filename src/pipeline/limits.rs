//! How this process's sandboxes have their memory and processes limited
//! with `[sandbox] limits = "auto"`, decided once per process and used by
//! every spawn and by `health`, so the two never disagree: a cgroup on the
//! unified hierarchy where the `memory` and `pids` controllers are there
//! and spawnd has a place for it (`sandbox::cgroup::v2`), else the v1
//! hierarchies for root where the host mounts them, else rlimits.
//!
//! The daemon settles first ([`settle_for_daemon`], before it starts its
//! spawner), which lets it use a cgroup systemd delegated to it; any other
//! process takes [`for_this_process`], where only root has a place.

use std::sync::OnceLock;

use crate::config::LimitsMode;
use crate::kernel_features::{privileged, v1_controller_mounts, LimitsFinding};
use crate::sandbox::cgroup::v2::{settle, Placement};
use crate::sandbox::cgroup::V1Roots;
use crate::sandbox::launch::LimitsVia;

/// The mechanism, and why no cgroup is used when none is.
#[derive(Debug, Clone)]
pub(crate) struct LimitsChoice {
    /// What `limits = "auto"` spawns use.
    pub via: LimitsVia,
    /// Why neither cgroup hierarchy can be used (`None` with cgroups).
    pub why_not_cgroups: Option<String>,
}

impl LimitsChoice {
    /// What a spawn under `mode` uses.
    pub(crate) fn under(&self, mode: LimitsMode) -> LimitsVia {
        match mode {
            LimitsMode::Auto => self.via.clone(),
            LimitsMode::Rlimits => LimitsVia::Rlimits,
        }
    }
}

static CHOICE: OnceLock<LimitsChoice> = OnceLock::new();

/// This process's choice (made now on first use, with no delegated cgroup).
pub(crate) fn for_this_process() -> &'static LimitsChoice {
    CHOICE.get_or_init(|| decide(Placement::RootOnly))
}

/// The daemon's choice, made before any other: it may move the daemon into
/// a leaf of the cgroup systemd delegated to it, so it must run before the
/// daemon starts other processes (its spawner).
pub(crate) fn settle_for_daemon() -> &'static LimitsChoice {
    CHOICE.get_or_init(|| decide(Placement::Delegated))
}

/// What `health` reports: the mechanism spawns under `mode` use here, and
/// why no cgroup is used when none is.
pub(crate) fn finding(mode: LimitsMode) -> LimitsFinding {
    let choice = for_this_process();
    let via = choice.under(mode);
    LimitsFinding {
        via: via.name(),
        why_not_cgroups: match mode {
            LimitsMode::Auto => choice.why_not_cgroups.clone(),
            LimitsMode::Rlimits => Some("the operator set [sandbox] limits = \"rlimits\"".into()),
        },
    }
}

fn decide(placement: Placement) -> LimitsChoice {
    let root = privileged();
    let v2_refused = match settle(placement, root) {
        Ok(base) => {
            return LimitsChoice {
                via: LimitsVia::CgroupV2(base),
                why_not_cgroups: None,
            }
        }
        Err(why) => why,
    };
    if !root {
        return LimitsChoice {
            via: LimitsVia::Rlimits,
            why_not_cgroups: Some(format!("cgroup v2: {v2_refused}; cgroup v1 needs root")),
        };
    }
    match v1_controller_mounts() {
        (Some(memory), Some(pids)) => LimitsChoice {
            via: LimitsVia::CgroupV1(V1Roots { memory, pids }),
            why_not_cgroups: None,
        },
        _ => LimitsChoice {
            via: LimitsVia::Rlimits,
            why_not_cgroups: Some(format!(
                "cgroup v2: {v2_refused}; cgroup v1: no memory and pids hierarchies are mounted"
            )),
        },
    }
}
