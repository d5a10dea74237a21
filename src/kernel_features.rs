//! What this kernel offers, found by asking it rather than by version numbers:
//! user namespaces by creating one (in a re-executed helper, so spawnd itself
//! never changes namespace), Landlock by its ABI query, seccomp by the actions
//! the kernel lists, cgroups from the mount table. `spawnd health` reports it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Serialize;

use crate::sys::landlock_abi_version;

/// The lowest Landlock ABI spawnd runs with (1: files and execute).
pub(crate) const LANDLOCK_ABI_REQUIRED: u32 = 1;
/// The ABI with everything spawnd uses (6: + refer, truncate, ioctl_dev, scoping).
pub(crate) const LANDLOCK_ABI_FULL: u32 = 6;

/// Overall health, as in the connector CLI contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    /// Every layer at full strength.
    Healthy,
    /// Runs, but something must be set up first (e.g. the audit location).
    NeedsSetup,
    /// Runs with a documented downgrade (older Landlock, rlimits for cgroups).
    Degraded,
    /// A required layer is missing: nothing will run.
    Error,
}

/// One isolation layer.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Layer {
    /// Whether it can be used.
    pub available: bool,
    /// What was found, or why not.
    pub detail: String,
}

/// cgroup support.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Cgroups {
    /// Where cgroup2 is mounted, if anywhere.
    pub v2_mount: Option<PathBuf>,
    /// Controllers enabled at that root.
    pub v2_controllers: Vec<String>,
    /// cgroup v1 hierarchies with the `memory` and `pids` controllers.
    pub v1_memory: Option<PathBuf>,
    /// The v1 `pids` hierarchy.
    pub v1_pids: Option<PathBuf>,
    /// How spawns' memory and process limits are enforced: `cgroup_v2`,
    /// `cgroup_v1` or `rlimits` (what every run's `limits_via` says).
    pub limits_via: &'static str,
    /// Why neither cgroup hierarchy is used, when none is.
    pub why_not_cgroups: Option<String>,
}

/// How spawns are limited, as the spawn pipeline decided it.
#[derive(Debug, Clone)]
pub(crate) struct LimitsFinding {
    /// `cgroup_v2`, `cgroup_v1` or `rlimits`.
    pub via: &'static str,
    /// Why neither cgroup hierarchy is used, when none is.
    pub why_not_cgroups: Option<String>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct HealthReport {
    /// Overall status.
    pub status: Status,
    /// Why it is not `healthy`.
    pub reasons: Vec<String>,
    /// `uname -r`.
    pub kernel: String,
    /// User namespaces.
    pub userns: Layer,
    /// A granted sandbox's network: its routes, listeners and the logged
    /// refusal of other egress (nf_tables, NFLOG), set up in a helper.
    pub network_grants: Layer,
    /// Landlock ABI (0: none).
    pub landlock_abi: u32,
    /// The required minimum.
    pub landlock_abi_required: u32,
    /// Seccomp filters.
    pub seccomp: Layer,
    /// cgroups.
    pub cgroups: Cgroups,
    /// Whether the audit location is usable.
    pub audit: Layer,
    /// Whether spawnd runs as root here: only root can use cgroups for a
    /// sandbox's limits, so for anyone else rlimits are the expected way.
    pub root: bool,
    /// spawnd runs as its parent namespace's root without root's powers
    /// over other users here: nothing runs ([`runs_as_parents_root`]).
    pub parents_root_alone: bool,
    /// Ubuntu's AppArmor restriction of unprivileged user namespaces.
    pub apparmor_userns: crate::host_policy::AppArmorUserns,
}

/// Whether spawnd acts as root over other users here: euid 0 in a user
/// namespace that maps other users (the sandbox's 65534 among them) and
/// lets groups be set. Root of a namespace that maps only itself (`unshare
/// -r`, a rootless container) is one user, as any other: its programs run as
/// it, limited by rlimits. Read once per process: spawnd's euid and user
/// namespace never change (only its children's do), and the daemon would
/// otherwise read three `/proc` files for every spawn.
pub(crate) fn privileged() -> bool {
    static PRIVILEGED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PRIVILEGED.get_or_init(privileged_now)
}

fn privileged_now() -> bool {
    if !nix::unistd::geteuid().is_root() {
        return false;
    }
    let maps = |file: &str| {
        std::fs::read_to_string(format!("/proc/self/{file}"))
            .map(|text| maps_id(&text, 65534))
            .unwrap_or(false)
    };
    let setgroups_allowed = std::fs::read_to_string("/proc/self/setgroups")
        .map(|s| s.trim() == "allow")
        .unwrap_or(true);
    maps("uid_map") && maps("gid_map") && setgroups_allowed
}

/// Whether this process's effective uid is its parent namespace's uid 0
/// (the host's, when the parent is the first namespace), whatever it is
/// called here: a namespace can map any of its uids to its parent's root.
/// An unreadable map counts as yes.
pub(crate) fn runs_as_parents_root() -> bool {
    let euid = u64::from(nix::unistd::geteuid().as_raw());
    std::fs::read_to_string("/proc/self/uid_map")
        .map(|map| outside_id(&map, euid) == Some(0))
        .unwrap_or(true)
}

/// The parent namespace's id for `id`, by an `id_map` text (`inside
/// outside count` per line).
fn outside_id(map: &str, id: u64) -> Option<u64> {
    map.lines().find_map(|line| {
        let n: Vec<u64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        match n.as_slice() {
            [inside, outside, count] if id >= *inside && id - inside < *count => {
                Some(outside + (id - inside))
            }
            _ => None,
        }
    })
}

/// Whether an `id_map` text (`inside outside count` per line) maps `id`.
fn maps_id(map: &str, id: u64) -> bool {
    map.lines().any(|line| {
        let n: Vec<u64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        matches!(n.as_slice(), [inside, _, count] if id >= *inside && id - inside < *count)
    })
}

/// Probes the kernel. `exe` is spawnd's own binary (for the userns helper);
/// `limits` is how this process's spawns are limited (`pipeline::limits`) and,
/// without a cgroup, why, so `health` names exactly what runs use.
pub(crate) fn probe(exe: &Path, audit_path: Option<&Path>, limits: LimitsFinding) -> HealthReport {
    let userns = probe_helper(
        exe,
        "__probe-userns",
        "unshare(CLONE_NEWUSER) succeeded in a helper",
    );
    let network_grants = probe_helper(
        exe,
        "__probe-network",
        "a granted sandbox's routes, listeners and logged refusals set up in a helper",
    );
    let landlock_abi = landlock_abi_version().unwrap_or(0);
    let seccomp = probe_seccomp();
    let root = privileged();
    let parents_root_alone = !root && runs_as_parents_root();
    let cgroups = probe_cgroups(limits);
    let audit = probe_audit(audit_path);
    let mut report = HealthReport {
        status: Status::Healthy,
        reasons: Vec::new(),
        kernel: nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default(),
        userns,
        network_grants,
        landlock_abi,
        landlock_abi_required: LANDLOCK_ABI_REQUIRED,
        seccomp,
        cgroups,
        audit,
        root,
        parents_root_alone,
        apparmor_userns: crate::host_policy::apparmor_userns(Path::new("/proc"), exe, root),
    };
    grade(&mut report);
    report
}

impl HealthReport {
    /// The audit location failed after the probe's check (a record could
    /// not be made durable): nothing runs any more.
    pub(crate) fn audit_lost(&mut self, why: String) {
        self.audit = Layer {
            available: false,
            detail: why.clone(),
        };
        self.reasons.push(why);
        self.status = Status::Error;
    }

    /// Something outside the kernel's layers is off (the daemon serves
    /// stale manifests): `degraded` at least, with `why` among the reasons.
    pub(crate) fn degrade(&mut self, why: String) {
        self.reasons.push(why);
        if self.status == Status::Healthy {
            self.status = Status::Degraded;
        }
    }
}

/// Sets status and reasons from the layers: the worst finding wins.
fn grade(r: &mut HealthReport) {
    let mut worst = Status::Healthy;
    let mut note = |status: Status, reason: String, reasons: &mut Vec<String>| {
        reasons.push(reason);
        let rank = |s: Status| match s {
            Status::Healthy => 0,
            Status::Degraded => 1,
            Status::NeedsSetup => 2,
            Status::Error => 3,
        };
        if rank(status) > rank(worst) {
            worst = status;
        }
    };
    let reasons = &mut r.reasons;
    if r.parents_root_alone {
        note(
            Status::Error,
            "spawnd runs as its parent namespace's root (the host's, seen from the first namespace) in a user namespace that maps no other user: programs would run as it, so nothing runs; run spawnd as another user, or where uid and gid 65534 are mapped and groups may be set".into(),
            reasons,
        );
    }
    if !r.userns.available {
        note(
            Status::Error,
            format!("user namespaces unavailable: {}", r.userns.detail),
            reasons,
        );
    }
    // Error: a restriction that bites leaves no sandbox able to set up (see
    // host_policy::apparmor_userns), whatever the userns probe said.
    if let Some(detail) = &r.apparmor_userns.detail {
        note(Status::Error, detail.clone(), reasons);
    }
    // Spawns without grants still run; those with grants fail closed.
    if r.userns.available && !r.network_grants.available {
        note(
            Status::Degraded,
            format!(
                "network grants cannot be set up here, so spawns with grants do not run (those without do): {} (docs/network.md says what the kernel needs: nf_tables with its log and reject expressions, nfnetlink_log)",
                r.network_grants.detail
            ),
            reasons,
        );
    }
    if r.landlock_abi < LANDLOCK_ABI_REQUIRED {
        note(
            Status::Error,
            "Landlock unavailable (enable it with lsm=…,landlock on the kernel command line)"
                .into(),
            reasons,
        );
    } else if r.landlock_abi < LANDLOCK_ABI_FULL {
        note(
            Status::Degraded,
            format!(
                "Landlock ABI {} lacks {} (docs/sandbox.md says what covers each); every spawn still runs",
                r.landlock_abi,
                landlock_features_missing(r.landlock_abi).join(", ")
            ),
            reasons,
        );
    }
    if !r.seccomp.available {
        note(
            Status::Error,
            format!("seccomp unavailable: {}", r.seccomp.detail),
            reasons,
        );
    }
    // Without root, rlimits are how every run is limited: nothing is
    // missing for this user.
    if r.cgroups.limits_via == "rlimits" && r.root {
        let why = r
            .cgroups
            .why_not_cgroups
            .as_deref()
            .unwrap_or("the operator set [sandbox] limits = \"rlimits\"");
        note(Status::Degraded, format!("memory and process limits fall back to rlimits, per process rather than per sandbox ({why})"), reasons);
    }
    if !r.audit.available {
        note(
            Status::NeedsSetup,
            format!("audit location unusable: {}", r.audit.detail),
            reasons,
        );
    }
    r.status = worst;
}

/// What a kernel with Landlock ABI `abi` lacks of the features spawnd
/// asks for at [`LANDLOCK_ABI_FULL`] (TCP, ABI 4, is the network
/// namespace's to fence at every ABI).
fn landlock_features_missing(abi: u32) -> Vec<&'static str> {
    [
        (2, "REFER (rename and link across directories, ABI 2)"),
        (3, "TRUNCATE (ABI 3)"),
        (5, "IOCTL_DEV (device ioctls, ABI 5)"),
        (6, "scoped abstract unix sockets and signals (ABI 6)"),
    ]
    .into_iter()
    .filter(|(since, _)| abi < *since)
    .map(|(_, what)| what)
    .collect()
}

/// Runs spawnd's hidden probe `command` in a helper process: available
/// when it succeeds (`detail` then), else its error.
fn probe_helper(exe: &Path, command: &str, detail: &str) -> Layer {
    let out = Command::new(exe)
        .arg(command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match out {
        Ok(o) if o.status.success() => Layer {
            available: true,
            detail: detail.into(),
        },
        Ok(o) => Layer {
            available: false,
            detail: String::from_utf8_lossy(&o.stderr).trim().to_string(),
        },
        Err(e) => Layer {
            available: false,
            detail: format!("cannot run the probe helper {}: {e}", exe.display()),
        },
    }
}

/// The helper's side: create a user namespace in this (fresh, single-threaded) process.
pub(crate) fn userns_probe_helper() -> Result<(), String> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER)
        .map_err(|e| format!("unshare(CLONE_NEWUSER): {e}"))
}

fn probe_seccomp() -> Layer {
    match std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail") {
        Ok(actions)
            if ["errno", "kill_process"]
                .iter()
                .all(|a| actions.split_whitespace().any(|x| x == *a)) =>
        {
            Layer {
                available: true,
                detail: format!("actions: {}", actions.trim()),
            }
        }
        Ok(actions) => Layer {
            available: false,
            detail: format!(
                "missing errno/kill_process actions (kernel lists: {})",
                actions.trim()
            ),
        },
        Err(e) => Layer {
            available: false,
            detail: format!("cannot read /proc/sys/kernel/seccomp/actions_avail: {e}"),
        },
    }
}

/// cgroup support as the mount table shows it, with `limits` (how spawns
/// are limited, which the mount table alone cannot tell: a v2 hierarchy
/// needs a place spawnd may use, `sandbox::cgroup::v2`).
pub(crate) fn probe_cgroups(limits: LimitsFinding) -> Cgroups {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut v2_mount = None;
    let (mut v1_memory, mut v1_pids) = (None, None);
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount_point = left.split_whitespace().nth(4).map(PathBuf::from);
        let mut r = right.split_whitespace();
        let (fstype, options) = (r.next().unwrap_or(""), r.nth(1).unwrap_or(""));
        match fstype {
            "cgroup2" if v2_mount.is_none() => v2_mount = mount_point,
            "cgroup" => {
                let opts: Vec<&str> = options.split(',').collect();
                if opts.contains(&"memory") {
                    v1_memory = mount_point.clone();
                }
                if opts.contains(&"pids") {
                    v1_pids = mount_point;
                }
            }
            _ => {}
        }
    }
    let v2_controllers: Vec<String> = v2_mount
        .as_ref()
        .and_then(|m| std::fs::read_to_string(m.join("cgroup.controllers")).ok())
        .map(|c| c.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default();
    Cgroups {
        v2_mount,
        v2_controllers,
        v1_memory,
        v1_pids,
        limits_via: limits.via,
        why_not_cgroups: limits.why_not_cgroups,
    }
}

/// Where the v1 `memory` and `pids` controllers are mounted. The usual
/// places (`/sys/fs/cgroup/memory`, `/sys/fs/cgroup/pids`) are checked first,
/// with a `statfs` and a file only that controller has (the pids controller
/// has none in its root, so `spawnd/pids.max`, which spawnd's first run
/// there made); that spares a one-shot `spawnd run` reading and parsing the
/// whole mount table (0.15–0.3 ms of a run here). Otherwise the mount table
/// says.
pub(crate) fn v1_controller_mounts() -> (Option<PathBuf>, Option<PathBuf>) {
    let usual = |dir: &str, own_file: &str| {
        let dir = Path::new(dir);
        let is_cgroup_v1 = nix::sys::statfs::statfs(dir)
            .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::CGROUP_SUPER_MAGIC);
        (is_cgroup_v1 && dir.join(own_file).exists()).then(|| dir.to_path_buf())
    };
    match (
        usual("/sys/fs/cgroup/memory", "memory.limit_in_bytes"),
        usual("/sys/fs/cgroup/pids", "spawnd/pids.max"),
    ) {
        (Some(memory), Some(pids)) => (Some(memory), Some(pids)),
        _ => {
            let cg = probe_cgroups(LimitsFinding {
                via: "rlimits",
                why_not_cgroups: None,
            });
            (cg.v1_memory, cg.v1_pids)
        }
    }
}

fn probe_audit(path: Option<&Path>) -> Layer {
    let Some(path) = path else {
        return Layer {
            available: false,
            detail: "no audit path configured and no default location (set [audit] path)".into(),
        };
    };
    let mut dir = path.parent().unwrap_or(Path::new("/"));
    while !dir.exists() {
        dir = dir.parent().unwrap_or(Path::new("/"));
    }
    match nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK) {
        Ok(()) => Layer {
            available: true,
            detail: format!("{} (directory {} writable)", path.display(), dir.display()),
        },
        Err(e) => Layer {
            available: false,
            detail: format!("{}: access({}, W_OK): {e}", path.display(), dir.display()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_landlock_abi_names_exactly_what_it_lacks() {
        assert_eq!(landlock_features_missing(2).len(), 3);
        assert!(landlock_features_missing(2)[0].starts_with("TRUNCATE"));
        assert_eq!(
            landlock_features_missing(5),
            ["scoped abstract unix sockets and signals (ABI 6)"]
        );
        assert!(landlock_features_missing(6).is_empty());
        assert_eq!(landlock_features_missing(1).len(), 4);
    }

    #[test]
    fn an_id_map_maps_an_id_when_a_range_covers_it() {
        assert!(maps_id("         0          0 4294967295\n", 65534));
        assert!(!maps_id("         0       1000          1\n", 65534));
        assert!(maps_id("0 1000 1\n1 100000 65536\n", 65534));
        assert!(!maps_id("0 1000 1\n1 100000 65533\n", 65534));
    }

    #[test]
    fn any_uid_can_stand_for_the_parents_root() {
        assert_eq!(outside_id("0 0 1\n", 0), Some(0));
        assert_eq!(outside_id("1000 0 1\n", 1000), Some(0));
        assert_eq!(outside_id("0 100000 1\n1 0 1\n", 1), Some(0));
        assert_eq!(outside_id("0 1000 1\n", 0), Some(1000));
        assert_eq!(outside_id("0 0 4294967295\n", 65534), Some(65534));
        assert_eq!(outside_id("0 1000 1\n", 5), None);
    }

    #[test]
    fn the_usual_places_agree_with_the_mount_table() {
        let table = probe_cgroups(LimitsFinding {
            via: "rlimits",
            why_not_cgroups: None,
        });
        let canon = |p: Option<PathBuf>| p.map(|p| p.canonicalize().unwrap_or(p));
        let (memory, pids) = v1_controller_mounts();
        assert_eq!(canon(memory), canon(table.v1_memory));
        assert_eq!(canon(pids), canon(table.v1_pids));
    }

    #[test]
    fn an_unwritable_audit_location_needs_setup() {
        let layer = probe_audit(None);
        assert!(!layer.available, "{}", layer.detail);
        assert!(probe_audit(Some(Path::new("/tmp/spawnd-probe/x/audit.jsonl"))).available);
    }

    #[test]
    fn a_kernel_that_cannot_set_up_grants_is_degraded_and_says_what_runs() {
        let layer = |available: bool, detail: &str| Layer {
            available,
            detail: detail.into(),
        };
        let mut report = HealthReport {
            status: Status::Healthy,
            reasons: Vec::new(),
            kernel: "6.1.0".into(),
            userns: layer(true, "ok"),
            network_grants: layer(
                false,
                "log and refuse egress nothing granted: nf_tables: Operation not supported",
            ),
            landlock_abi: LANDLOCK_ABI_FULL,
            landlock_abi_required: LANDLOCK_ABI_REQUIRED,
            seccomp: layer(true, "ok"),
            cgroups: Cgroups {
                v2_mount: None,
                v2_controllers: Vec::new(),
                v1_memory: None,
                v1_pids: None,
                limits_via: "cgroup_v2",
                why_not_cgroups: None,
            },
            audit: layer(true, "ok"),
            root: true,
            parents_root_alone: false,
            apparmor_userns: crate::host_policy::AppArmorUserns {
                restrict_unprivileged_userns: None,
                label: None,
                blocks: false,
                detail: None,
            },
        };
        grade(&mut report);
        assert_eq!(report.status, Status::Degraded);
        assert_eq!(report.reasons.len(), 1, "{:?}", report.reasons);
        assert!(
            report.reasons[0].starts_with("network grants cannot be set up here, so spawns with grants do not run (those without do): log and refuse egress nothing granted: nf_tables: Operation not supported"),
            "{}",
            report.reasons[0]
        );
    }
}
