//! What a program may execute: `exec` (`"scopes"`, the default, or
//! `"declared"`) and the pinned `also_runs` files of `[capabilities.spawn]`
//! (docs/manifest.md, "What may be executed"). Each entry of `also_runs` is
//! an absolute path, or one in the connector's directory (`{connector}/…`),
//! and a required `sha256:` pin, named once.

use toml::Spanned;

use super::model::{AlsoRuns, ExecPolicy, Sha256Digest};
use super::paths::ScopePath;
use super::raw::{RawAlsoRuns, RawSpawn};
use super::validate::Checker;

/// The exec policy and the `also_runs` list, or `None` for either when it
/// was refused (the problems are in `c`).
pub(super) fn check_exec(
    c: &mut Checker,
    s: &RawSpawn,
) -> (Option<ExecPolicy>, Option<Vec<AlsoRuns>>) {
    let policy = match &s.exec {
        None => Some(ExecPolicy::default()),
        Some(raw) => raw
            .get_ref()
            .parse::<ExecPolicy>()
            .map_err(|why| c.error(raw.span(), "capabilities.spawn.exec", why, ""))
            .ok(),
    };
    let also_runs = check_also_runs(c, &s.also_runs);
    if policy == Some(ExecPolicy::Scopes) && !s.also_runs.is_empty() {
        c.warn(
            "capabilities.spawn.also_runs",
            "also_runs is used only with exec = \"declared\"; under the default (\"scopes\") the system paths and fs_exec scopes decide what runs",
        );
    }
    if policy == Some(ExecPolicy::Declared) {
        let tmp_exec = s
            .limits
            .as_ref()
            .and_then(|l| l.get_ref().tmp_exec.as_ref())
            .is_some_and(|e| *e.get_ref());
        if tmp_exec {
            c.warn(
                "capabilities.spawn.limits.tmp_exec",
                "under exec = \"declared\" nothing in /tmp may be executed: tmp_exec = true only lets the ELF loader map its files",
            );
        }
    }
    (policy, also_runs)
}

fn check_also_runs(c: &mut Checker, entries: &[Spanned<RawAlsoRuns>]) -> Option<Vec<AlsoRuns>> {
    let mut out: Vec<AlsoRuns> = Vec::new();
    let mut ok = true;
    for (i, entry) in entries.iter().enumerate() {
        let raw = entry.get_ref();
        let key = format!("capabilities.spawn.also_runs[{i}]");
        let hint = "give the file's absolute path, e.g. \"/usr/bin/node\", or `{connector}/bin/NAME` for a file the connector ships";
        let path = match ScopePath::parse_program(raw.path.get_ref()) {
            Ok(path @ (ScopePath::Absolute(_) | ScopePath::Connector(_))) => Some(path),
            Ok(_) => {
                c.error(
                    raw.path.span(),
                    &format!("{key}.path"),
                    format!("`{}` is not absolute", raw.path.get_ref()),
                    hint,
                );
                None
            }
            Err(why) => {
                c.error(
                    raw.path.span(),
                    &format!("{key}.path"),
                    format!("`{}` {why}", raw.path.get_ref()),
                    hint,
                );
                None
            }
        };
        let hash = match &raw.hash {
            None => {
                c.error(
                    entry.span(),
                    &format!("{key}.hash"),
                    "hash is required: an also_runs file runs only with the bytes pinned",
                    "add hash = \"sha256:…\" (`spawnd hash FILE` prints it)",
                );
                None
            }
            Some(h) => h
                .get_ref()
                .parse::<Sha256Digest>()
                .map_err(|why| c.error(h.span(), &format!("{key}.hash"), why, ""))
                .ok(),
        };
        match (path, hash) {
            (Some(path), Some(hash)) => {
                if out.iter().any(|a| a.path == path) {
                    c.error(
                        raw.path.span(),
                        &format!("{key}.path"),
                        format!("`{path}` is listed twice"),
                        "remove the duplicate",
                    );
                    ok = false;
                } else {
                    out.push(AlsoRuns { path, hash });
                }
            }
            _ => ok = false,
        }
    }
    ok.then_some(out)
}
