//! The environment and filesystem parts of `[capabilities.spawn]`: env keys
//! (POSIX shape, reserved loader/interpreter keys, duplicates, overlaps),
//! scopes (absolute, `~/`, `{workspace}/` or `{connector}/`, no `..`, no
//! system path and no `{connector}/` path in `fs_write`) and the cwd policy.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use toml::Spanned;

use super::env_keys::{is_valid_key, reserved, REDIRECTING_ENV};
use super::paths::ScopePath;
use super::raw::RawSpawn;
use super::validate::Checker;

pub(super) fn check_env_list(
    c: &mut Checker,
    keys: &[Spanned<String>],
    field: &str,
) -> Option<Vec<String>> {
    let key_path = format!("capabilities.spawn.{field}");
    let mut seen = BTreeSet::new();
    let mut ok = true;
    for k in keys {
        let key = k.get_ref();
        if !is_valid_key(key) {
            c.error(
                k.span(),
                &key_path,
                format!("`{key}` is not a valid environment variable name"),
                "use letters, digits and `_`, not starting with a digit",
            );
            ok = false;
        } else if let Some(r) = reserved(key) {
            c.error(k.span(), &key_path, format!("`{key}` is reserved: {}", r.why), "no manifest may pass loader or interpreter keys; see the reserved keys in docs/manifest.md");
            ok = false;
        } else if field == "env_passthrough" && REDIRECTING_ENV.contains(&key.as_str()) {
            seen.insert(key.clone());
            c.warn(&key_path, format!("`{key}` from the caller moves where the program looks for its configuration or for other programs; configuration can name commands, so prefer a fixed value in env_set"));
        } else if !seen.insert(key.clone()) {
            c.error(
                k.span(),
                &key_path,
                format!("`{key}` is listed twice"),
                "remove the duplicate",
            );
        }
    }
    ok.then(|| keys.iter().map(|k| k.get_ref().clone()).collect())
}

pub(super) fn check_env_set(
    c: &mut Checker,
    s: &RawSpawn,
    passthrough: &[String],
    credentials: &[String],
) -> BTreeMap<String, String> {
    let key_path = "capabilities.spawn.env_set";
    let mut out = BTreeMap::new();
    for (k, v) in &s.env_set {
        let key = k.get_ref();
        if !is_valid_key(key) {
            c.error(
                k.span(),
                key_path,
                format!("`{key}` is not a valid environment variable name"),
                "",
            );
        } else if let Some(r) = reserved(key) {
            c.error(
                k.span(),
                key_path,
                format!("`{key}` is reserved: {}", r.why),
                "",
            );
        } else if credentials.contains(key) || passthrough.contains(key) {
            c.error(
                k.span(),
                key_path,
                format!("`{key}` is also in env_passthrough or credential_env_keys"),
                "a key is either fixed here or passed through, not both",
            );
        } else if v.get_ref().contains('\0') {
            c.error(
                v.span(),
                key_path,
                format!("the value of `{key}` contains a NUL byte"),
                "",
            );
        } else {
            out.insert(key.clone(), v.get_ref().clone());
        }
    }
    out
}

pub(super) fn check_path(c: &mut Checker, path: &Spanned<String>, key: &str) -> Option<ScopePath> {
    ScopePath::parse(path.get_ref())
        .map_err(|why| {
            c.error(
                path.span(),
                key,
                format!("`{}` {why}", path.get_ref()),
                "write an absolute path or one starting with `~/`",
            )
        })
        .ok()
}

/// A declared program: a path [`check_path`] takes, or one in the
/// connector's directory (`{connector}/bin/tool`, a file it ships).
pub(super) fn check_program_path(
    c: &mut Checker,
    path: &Spanned<String>,
    key: &str,
) -> Option<ScopePath> {
    ScopePath::parse_program(path.get_ref())
        .map_err(|why| {
            c.error(
                path.span(),
                key,
                format!("`{}` {why}", path.get_ref()),
                "give the program's absolute path, e.g. \"/usr/bin/git\", one starting with `~/`, or, for a program the connector ships, `{connector}/bin/NAME`",
            )
        })
        .ok()
}

/// A scope or the cwd: a path [`check_path`] takes, or one anchored at the
/// workspace (`{workspace}/…`) or the connector's directory
/// (`{connector}/…`).
pub(super) fn check_scope_path(
    c: &mut Checker,
    path: &Spanned<String>,
    key: &str,
) -> Option<ScopePath> {
    ScopePath::parse_scope(path.get_ref())
        .map_err(|why| {
            c.error(
                path.span(),
                key,
                format!("`{}` {why}", path.get_ref()),
                "write an absolute path, one starting with `~/`, one starting with `{workspace}/` (the checkout `spawnd run --workspace` or the operator names), or one starting with `{connector}/` (the directory holding this manifest)",
            )
        })
        .ok()
}

pub(super) fn check_scopes(
    c: &mut Checker,
    paths: &[Spanned<String>],
    field: &str,
) -> Vec<ScopePath> {
    let key = format!("capabilities.spawn.{field}");
    let mut scopes = Vec::new();
    for p in paths {
        let Some(scope) = check_scope_path(c, p, &key) else {
            continue;
        };
        // The connector's directory holds what it ships, covered by its
        // content hash and provenance_hash: a program that could write
        // there could change what runs next time.
        if field == "fs_write" && scope.needs_connector_dir() {
            c.error(
                p.span(),
                &key,
                format!("`{scope}` would make the connector's own files writable: the files it ships are fixed by its content hash and provenance_hash, and a program that could change them would change what runs next"),
                "grant a directory of its own for what it writes, e.g. \"~/.cache/NAME/\"; `{connector}/` paths belong in fs_read or fs_exec",
            );
            continue;
        }
        scopes.push(scope);
    }
    scopes
}

pub(super) fn check_cwd_in_scopes(
    c: &mut Checker,
    cwd: &ScopePath,
    span: Range<usize>,
    read: &[ScopePath],
    write: &[ScopePath],
) {
    let same_kind_inside = |scope: &ScopePath| match (cwd, scope) {
        (ScopePath::Absolute(p), ScopePath::Absolute(s))
        | (ScopePath::Home(p), ScopePath::Home(s))
        | (ScopePath::Workspace(p), ScopePath::Workspace(s))
        | (ScopePath::Connector(p), ScopePath::Connector(s)) => p.starts_with(s),
        _ => false,
    };
    // Compared in the form written: a `~/` cwd needs a `~/` scope and an
    // absolute cwd an absolute scope, so the answer holds for every caller.
    if !read.iter().chain(write).any(same_kind_inside) {
        c.error(
            span,
            "capabilities.spawn.cwd",
            format!("`{cwd}` lies outside fs_read and fs_write"),
            "add a scope that contains it, written the same way (both absolute, both `~/`, both `{workspace}/` or both `{connector}/`), or change cwd",
        );
    }
}

pub(super) fn check_broad_scopes(c: &mut Checker, read: &[ScopePath], write: &[ScopePath]) {
    for (field, scopes) in [("fs_read", read), ("fs_write", write)] {
        for s in scopes {
            let broad = matches!(s, ScopePath::Home(p) if p.as_os_str().is_empty())
                || matches!(s, ScopePath::Absolute(p) if p.as_os_str() == "/" || p.as_os_str() == "/home" || p.as_os_str() == "/root");
            if broad {
                c.warn(
                    &format!("capabilities.spawn.{field}"),
                    format!("`{s}` is broad: it grants a whole home or more"),
                );
            }
        }
    }
}

/// docs/sandbox.md: a read-only or executable scope strictly inside a writable one
/// is refused (the same path listed both ways is simply writable). Only the mount point itself is protected from rename: the
/// program could move a directory above it away (`rename(".git",
/// ".git-moved")`) and create its own files at the declared path on the
/// host. Compared in the form written (absolute with absolute, `~/` with
/// `~/`, `{workspace}/` with `{workspace}/`); the spawn-time check (`crate::sandbox::spec`) compares the
/// expanded paths, so a mix of the two forms is caught there.
pub(super) fn check_nested_scopes(c: &mut Checker, s: &RawSpawn, write: &[ScopePath]) {
    for (field, paths) in [("fs_read", &s.fs_read), ("fs_exec", &s.fs_exec)] {
        for spanned in paths {
            let Ok(inner) = ScopePath::parse_scope(spanned.get_ref()) else {
                continue;
            };
            if let Some(outer) = write.iter().find(|w| inner.lies_inside(w)) {
                c.error(
                    spanned.span(),
                    &format!("capabilities.spawn.{field}"),
                    format!("`{inner}` lies inside the writable scope `{outer}`: the program could rename a directory above it and put its own files at this path on the host"),
                    "narrow fs_write to directories beside it, or drop it from this list",
                );
            }
        }
    }
}
