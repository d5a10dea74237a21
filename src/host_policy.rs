//! Distribution policies, beyond the kernel's features, that decide whether
//! spawnd may set up a sandbox: Ubuntu's AppArmor restriction of
//! unprivileged user namespaces. Read from a `/proc` given by the caller, so
//! a test can fake it with a directory.

use std::path::Path;

use serde::Serialize;

/// The sysctl Ubuntu's kernels add (no other kernel has it).
pub(crate) const APPARMOR_USERNS_SYSCTL: &str = "kernel.apparmor_restrict_unprivileged_userns";
/// Where the shipped AppArmor profile is installed (from
/// `packaging/apparmor/spawnd`).
pub(crate) const APPARMOR_PROFILE_PATH: &str = "/etc/apparmor.d/spawnd";
/// The profile's name: the label a process it confines shows.
pub const APPARMOR_PROFILE_NAME: &str = "spawnd";
/// The one binary path the profile attaches to. Only root can write it: a
/// profile that allowed user namespaces at a path its user can write would
/// allow them to whatever program the user puts there.
pub const APPARMOR_PROFILE_ATTACHES_TO: &str = "/usr/local/bin/spawnd";

/// What Ubuntu's restriction of unprivileged user namespaces means for this
/// spawnd process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct AppArmorUserns {
    /// `kernel.apparmor_restrict_unprivileged_userns`: `None` where the
    /// kernel has no such sysctl.
    pub restrict_unprivileged_userns: Option<bool>,
    /// spawnd's AppArmor label (`unconfined`, `spawnd (unconfined)`…), read
    /// only where the restriction is on; `None` there when unreadable.
    pub label: Option<String>,
    /// The restriction keeps every sandbox from being set up.
    pub blocks: bool,
    /// Why, with the sysctl and both fixes, when it does.
    pub detail: Option<String>,
}

/// Reads the restriction under `proc_root` (`/proc`) for the spawnd binary
/// `exe`; `root` says whether spawnd runs as root, whom the restriction
/// leaves alone (it applies to processes without `CAP_SYS_ADMIN`).
///
/// Where the restriction applies to a process AppArmor does not confine,
/// Ubuntu either refuses its user namespace (EPERM) or, where the
/// `unprivileged_userns` profile is loaded (24.04 loads it), creates the
/// namespace and moves the process into that profile, which denies every
/// capability inside: the id maps, mounts, `pivot_root` and network setup
/// of a sandbox then fail. A process already moved into that profile (in a
/// user namespace an unconfined process made) is in the same state. Both
/// make nothing run, so `blocks` is set; a plain `unshare(CLONE_NEWUSER)`,
/// the userns probe, succeeds in the second case and cannot tell.
/// A process under any other profile gets what that profile says, which
/// the probe of user namespaces shows; with the sysctl
/// `kernel.apparmor_restrict_unprivileged_userns_complain` at 1 a denial is
/// only logged.
pub(crate) fn apparmor_userns(proc_root: &Path, exe: &Path, root: bool) -> AppArmorUserns {
    let sysctl = |name: &str| {
        std::fs::read_to_string(proc_root.join("sys/kernel").join(name))
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
            .map(|v| v != 0)
    };
    let restrict = sysctl("apparmor_restrict_unprivileged_userns");
    let mut report = AppArmorUserns {
        restrict_unprivileged_userns: restrict,
        label: None,
        blocks: false,
        detail: None,
    };
    if restrict != Some(true) {
        return report;
    }
    // The AppArmor-specific file first: with several LSMs, `attr/current`
    // may be another one's.
    report.label = ["self/attr/apparmor/current", "self/attr/current"]
        .iter()
        .find_map(|file| std::fs::read_to_string(proc_root.join(file)).ok())
        .map(|label| label.trim_end_matches(['\n', '\0']).to_string());
    if root || sysctl("apparmor_restrict_unprivileged_userns_complain") == Some(true) {
        return report;
    }
    // `NAME (MODE)`, or a bare `unconfined`.
    let profile = report
        .label
        .as_deref()
        .map(|label| label.split(" (").next().unwrap_or(label));
    let restricted_here = match profile {
        None | Some("unconfined") | Some("unprivileged_userns") => true,
        Some(_) => false,
    };
    if restricted_here {
        report.blocks = true;
        report.detail = Some(blocked_detail(report.label.as_deref(), exe));
    }
    report
}

fn blocked_detail(label: Option<&str>, exe: &Path) -> String {
    let label = match label {
        Some(label) => format!("AppArmor label `{label}`"),
        None => "no readable AppArmor label".into(),
    };
    let elsewhere = if exe == Path::new(APPARMOR_PROFILE_ATTACHES_TO) {
        String::new()
    } else {
        format!(
            " (it attaches to {APPARMOR_PROFILE_ATTACHES_TO} only: this spawnd runs from {}, so install it there)",
            exe.display()
        )
    };
    format!(
        "AppArmor restricts unprivileged user namespaces here ({APPARMOR_USERNS_SYSCTL} = 1) and spawnd runs without a profile that allows them ({label}): the kernel refuses its user namespaces or takes every capability inside them, so no sandbox can be set up. Fix: install spawnd's AppArmor profile, packaging/apparmor/spawnd, as {APPARMOR_PROFILE_PATH} and load it with `sudo apparmor_parser -r {APPARMOR_PROFILE_PATH}`{elsewhere}; or lift the restriction for the whole host with `sudo sysctl {APPARMOR_USERNS_SYSCTL}=0`"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake `/proc` with the given sysctl values and AppArmor label.
    fn fake_proc(
        restrict: Option<&str>,
        complain: Option<&str>,
        label: Option<&str>,
    ) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let kernel = dir.path().join("sys/kernel");
        std::fs::create_dir_all(&kernel).unwrap();
        std::fs::create_dir_all(dir.path().join("self/attr/apparmor")).unwrap();
        if let Some(v) = restrict {
            std::fs::write(kernel.join("apparmor_restrict_unprivileged_userns"), v).unwrap();
        }
        if let Some(v) = complain {
            std::fs::write(
                kernel.join("apparmor_restrict_unprivileged_userns_complain"),
                v,
            )
            .unwrap();
        }
        if let Some(label) = label {
            std::fs::write(dir.path().join("self/attr/apparmor/current"), label).unwrap();
        }
        dir
    }

    const EXE: &str = "/usr/local/bin/spawnd";

    #[test]
    fn a_kernel_without_the_sysctl_restricts_nothing() {
        let proc = fake_proc(None, None, Some("unconfined\n"));
        let r = apparmor_userns(proc.path(), Path::new(EXE), false);
        assert_eq!(r.restrict_unprivileged_userns, None);
        assert!(
            !r.blocks && r.detail.is_none() && r.label.is_none(),
            "{r:?}"
        );
    }

    #[test]
    fn the_sysctl_at_zero_restricts_nothing() {
        let proc = fake_proc(Some("0\n"), None, Some("unconfined\n"));
        let r = apparmor_userns(proc.path(), Path::new(EXE), false);
        assert_eq!(r.restrict_unprivileged_userns, Some(false));
        assert!(!r.blocks && r.detail.is_none(), "{r:?}");
    }

    #[test]
    fn the_sysctl_at_one_blocks_an_unconfined_spawnd_and_names_both_fixes() {
        let proc = fake_proc(Some("1\n"), None, Some("unconfined\n"));
        let r = apparmor_userns(proc.path(), Path::new(EXE), false);
        assert_eq!(r.restrict_unprivileged_userns, Some(true));
        assert_eq!(r.label.as_deref(), Some("unconfined"));
        assert!(r.blocks, "{r:?}");
        let detail = r.detail.unwrap();
        assert!(detail.contains("kernel.apparmor_restrict_unprivileged_userns = 1"));
        assert!(detail.contains("sudo apparmor_parser -r /etc/apparmor.d/spawnd"));
        assert!(detail.contains("packaging/apparmor/spawnd"));
        assert!(detail.contains("sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0"));
        assert!(!detail.contains("attaches to"), "{detail}");
    }

    #[test]
    fn a_binary_elsewhere_is_told_where_the_profile_attaches() {
        let proc = fake_proc(Some("1"), None, Some("unconfined"));
        let r = apparmor_userns(proc.path(), Path::new("/home/u/.local/bin/spawnd"), false);
        let detail = r.detail.unwrap();
        assert!(
            detail.contains("attaches to /usr/local/bin/spawnd only: this spawnd runs from /home/u/.local/bin/spawnd"),
            "{detail}"
        );
    }

    #[test]
    fn the_shipped_profile_lifts_it() {
        for label in ["spawnd (unconfined)\n", "spawnd (enforce)\n", "spawnd\n"] {
            let proc = fake_proc(Some("1"), None, Some(label));
            let r = apparmor_userns(proc.path(), Path::new(EXE), false);
            assert!(!r.blocks, "{label}: {r:?}");
            assert_eq!(r.label.as_deref(), Some(label.trim_end()));
        }
    }

    #[test]
    fn a_process_already_in_the_unprivileged_userns_profile_is_blocked() {
        let proc = fake_proc(Some("1"), None, Some("unprivileged_userns (enforce)"));
        assert!(apparmor_userns(proc.path(), Path::new(EXE), false).blocks);
    }

    #[test]
    fn root_and_complain_mode_are_not_blocked() {
        let proc = fake_proc(Some("1"), None, Some("unconfined"));
        assert!(!apparmor_userns(proc.path(), Path::new(EXE), true).blocks);
        let proc = fake_proc(Some("1"), Some("1"), Some("unconfined"));
        assert!(!apparmor_userns(proc.path(), Path::new(EXE), false).blocks);
    }

    #[test]
    fn the_older_attr_file_is_read_when_the_apparmor_one_is_missing() {
        let proc = fake_proc(Some("1"), None, None);
        std::fs::write(
            proc.path().join("self/attr/current"),
            "spawnd (unconfined)\n",
        )
        .unwrap();
        let r = apparmor_userns(proc.path(), Path::new(EXE), false);
        assert!(!r.blocks, "{r:?}");
        let proc = fake_proc(Some("1"), None, None);
        let r = apparmor_userns(proc.path(), Path::new(EXE), false);
        assert!(r.blocks && r.label.is_none(), "{r:?}");
        assert!(r.detail.unwrap().contains("no readable AppArmor label"));
    }

    #[test]
    fn this_host_reads_without_error() {
        let r = apparmor_userns(Path::new("/proc"), Path::new(EXE), false);
        if r.restrict_unprivileged_userns != Some(true) {
            assert!(!r.blocks);
        }
    }
}
