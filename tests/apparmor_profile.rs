//! The shipped AppArmor profile (`packaging/apparmor/spawnd`) parses and
//! compiles with `apparmor_parser`, without loading it into the kernel, and
//! says what `spawnd health` tells operators to install.
//!
//! The profile's `userns` rule and its `abi <abi/4.0>` need AppArmor 4.0 or
//! later (Ubuntu 24.04, Debian 13), the only AppArmor that restricts user
//! namespaces. With an older parser (Debian 12's 3.0) the profile is checked
//! with those two lines lowered to what that parser knows (`abi/3.0`, no
//! `userns` rule): the rest of it (attachment, flags, includes) is then
//! checked, the `userns` rule is not.

use std::path::{Path, PathBuf};
use std::process::Command;

use spawnd::internals::host_policy::{APPARMOR_PROFILE_ATTACHES_TO, APPARMOR_PROFILE_NAME};

fn profile_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/apparmor/spawnd")
}

/// `apparmor_parser`, on `$PATH` or in the sbin directories root has there.
fn parser() -> PathBuf {
    let candidates = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from));
    for dir in candidates {
        let p = dir.join("apparmor_parser");
        if p.is_file() {
            return p;
        }
    }
    panic!("apparmor_parser is missing: ./scripts/setup installs it (Debian's package apparmor)");
}

/// The parser's `abi/` directory holds `4.0`.
fn parser_knows_abi_4(parser: &Path) -> bool {
    let out = Command::new(parser)
        .arg("--version")
        .output()
        .expect("apparmor_parser --version");
    let text = String::from_utf8_lossy(&out.stdout);
    let major: Option<u32> = text
        .split_whitespace()
        .find_map(|w| w.split('.').next()?.parse().ok());
    major.is_some_and(|m| m >= 4) && Path::new("/etc/apparmor.d/abi/4.0").exists()
}

/// Parses and compiles `file` (`-Q`: no kernel load, `-K`: no cache).
fn parse(parser: &Path, file: &Path) -> (bool, String) {
    let out = Command::new(parser)
        .args(["-Q", "-K", "--skip-cache"])
        .arg(file)
        .output()
        .expect("run apparmor_parser");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), stderr)
}

#[test]
fn the_profile_says_what_health_tells_operators() {
    let text = std::fs::read_to_string(profile_path()).unwrap();
    let rules: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert!(rules.contains(&"abi <abi/4.0>,"), "{rules:?}");
    assert!(rules.contains(&"userns,"), "{rules:?}");
    let header = format!(
        "profile {APPARMOR_PROFILE_NAME} {APPARMOR_PROFILE_ATTACHES_TO} flags=(unconfined) {{"
    );
    assert!(rules.contains(&header.as_str()), "{header} in {rules:?}");
}

#[test]
fn apparmor_parser_accepts_the_profile() {
    let parser = parser();
    let profile = profile_path();
    if parser_knows_abi_4(&parser) {
        let (ok, stderr) = parse(&parser, &profile);
        assert!(
            ok,
            "apparmor_parser refused {}:\n{stderr}",
            profile.display()
        );
        return;
    }
    let text = std::fs::read_to_string(&profile).unwrap();
    assert!(text.contains("abi <abi/4.0>,\n") && text.contains("  userns,\n"));
    let lowered = text
        .replace("abi <abi/4.0>,\n", "abi <abi/3.0>,\n")
        .replace("  userns,\n", "");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("spawnd");
    std::fs::write(&file, lowered).unwrap();
    let (ok, stderr) = parse(&parser, &file);
    assert!(
        ok,
        "apparmor_parser refused {} (abi 3.0, without userns):\n{stderr}",
        profile.display()
    );
    eprintln!(
        "apparmor_parser below 4.0: checked the profile without its userns rule and with abi/3.0"
    );
}
