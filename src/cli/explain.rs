//! `manifest explain`: a manifest in plain words for a security reviewer —
//! what may run, with which arguments, what it may read, write and execute,
//! what it gets in its environment, and what it can never do. Everything
//! the manifest wrote (names, descriptions, patterns, values, paths) goes
//! through [`p`]: a manifest under review is not trusted to be harmless to
//! the reviewer's terminal, nor to add lines to the explanation.

use std::fmt::{Display, Write};

use crate::manifest::{Manifest, ScopePath, SpawnGrant, ValueKind};

/// Text from the manifest, escaped to stay within its line.
fn p(text: impl Display) -> String {
    crate::printable::printable(&text.to_string()).into_owned()
}

/// The explanation text.
pub(super) fn explain_text(m: &Manifest) -> String {
    let mut out = String::new();
    let c = &m.connector;
    let _ = writeln!(
        out,
        "Connector {} version {} (manifest sha256 {}).",
        p(&c.name),
        p(&c.version),
        m.digest
    );
    if let Some(hash) = &c.provenance_hash {
        let _ = writeln!(
            out,
            "Publisher's provenance hash: {} (the hash of the shipped bin/ files; `spawnd connector install` and `spawnd run --manifest` check it).",
            p(hash)
        );
    }
    explain_informational(m, &mut out);
    match &m.spawn {
        None => out.push_str(
            "\nIt declares no [capabilities.spawn]: spawnd will not run any program for it.\n",
        ),
        Some(s) => {
            explain_spawn(s, &mut out);
            explain_connector_dir(s, m.dir.as_deref(), &mut out);
        }
    }
    for w in &m.warnings {
        let _ = writeln!(out, "Warning: {}: {}", p(&w.key), p(&w.message));
    }
    out
}

/// Where `{connector}/` paths point, when the manifest has any.
fn explain_connector_dir(s: &SpawnGrant, dir: Option<&std::path::Path>, out: &mut String) {
    if s.first_connector_path().is_none() {
        return;
    }
    let here = match dir {
        Some(d) => format!("here {}", p(d.display().to_string())),
        None => "not known for this manifest, so it cannot run".to_string(),
    };
    let _ = writeln!(out, "\n{{connector}} is the directory holding this manifest ({here}); for an installed connector, its entry in the store. The program may never write there.");
}

fn explain_informational(m: &Manifest, out: &mut String) {
    let i = &m.info;
    if !i.network_hosts.is_empty() {
        let _ = writeln!(
            out,
            "The connector itself may reach {} (its own grant; spawned programs get no network).",
            p(i.network_hosts.join(", "))
        );
    }
    if let Some(kind) = &i.credential_kind {
        let scope = i
            .credential_scope
            .as_deref()
            .map(|s| format!(" with scope \"{}\"", p(s)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "It needs a credential of kind {}{scope}; the operator binds it.",
            p(kind)
        );
    }
    if let Some(h) = &i.credential_header {
        let _ = writeln!(
            out,
            "The connector runtime injects it as the HTTP header `{}`.",
            p(h)
        );
    }
    if let Some(o) = &i.oauth2 {
        let _ = writeln!(
            out,
            "OAuth app: token endpoint {}, client id {}, scopes [{}]{}.",
            p(o.token_url.as_deref().unwrap_or("(none)")),
            p(o.client_id.as_deref().unwrap_or("(none)")),
            p(o.scopes.join(", ")),
            if o.has_client_secret {
                "; a client secret is bound into the manifest"
            } else {
                ""
            }
        );
    }
    if !i.intents.is_empty() {
        let _ = writeln!(out, "It provides: {}.", p(i.intents.join(", ")));
    }
}

fn list(scopes: &[ScopePath]) -> String {
    scopes.iter().map(p).collect::<Vec<_>>().join(", ")
}

fn explain_spawn(s: &SpawnGrant, out: &mut String) {
    out.push_str(
        "\nPrograms it may run (each opened once, hashed, and executed from that same file):\n",
    );
    for program in &s.programs {
        let pin = program.hash.map_or(
            "NOT pinned: whatever is at that path runs".to_string(),
            |h| format!("only if its bytes hash to {h}"),
        );
        let _ = writeln!(out, "  {} — {pin}", p(&program.path));
    }
    out.push_str("\nOperations (argv is fixed except for the {placeholders}; each value stays one argument, never split or shell-evaluated):\n");
    for op in s.operations.values() {
        let _ = writeln!(
            out,
            "  {} [mode {}]: {}",
            p(&op.name),
            op.mode,
            p(op.template.shape())
        );
        if let Some(d) = &op.description {
            let _ = writeln!(out, "      {}", p(d));
        }
        let program = &s.programs[op.program].path;
        let code = crate::manifest::code_placeholders(&op.template, program);
        for name in op.template.placeholders() {
            let mut what = op
                .param_descriptions
                .get(name)
                .map(|d| format!("{} — ", p(d)))
                .unwrap_or_default();
            if code.contains(&name) {
                what.push_str(&format!(
                    "CODE that {} runs: the caller chooses what runs — ",
                    p(program.file_name().unwrap_or("the program"))
                ));
            }
            let _ = writeln!(
                out,
                "      {{{}}}: {what}{}",
                p(name),
                describe_param(op, name)
            );
        }
        if !op.unix_sockets.is_empty() {
            let _ = writeln!(
                out,
                "      MAY connect to the unix sockets {} — and so reach the services behind them, which act with their own authority; Landlock does not govern connect(), so any other socket inside its scopes is reachable too",
                list(&op.unix_sockets)
            );
        }
        if op.network != s.network {
            if op.network.is_empty() {
                let _ = writeln!(out, "      network: none (only its own loopback)");
            } else {
                let _ = writeln!(out, "      network: only {}", grants(&op.network));
            }
        }
        if op.limits != s.limits {
            let _ = writeln!(
                out,
                "      tighter limits: wall time {} ms, stdout {} bytes, {}",
                op.limits.wall_time_ms,
                op.limits.max_stdout_bytes,
                tmp(&op.limits)
            );
        }
    }
    explain_network(s, out);
    explain_fs(s, out);
    explain_env(s, out);
    let l = &s.limits;
    let _ = writeln!(out, "\nLimits: {} ms wall time; stdout kept up to {} bytes, stderr {} bytes; memory {} bytes; {} processes; files up to {} bytes; {} open files; {}.", l.wall_time_ms, l.max_stdout_bytes, l.max_stderr_bytes, l.max_memory_bytes, l.max_processes, l.max_file_size_bytes, l.max_open_files, tmp(l));
    let sockets = if s.operations.values().any(|op| !op.unix_sockets.is_empty()) {
        "no host services but the unix sockets listed above"
    } else {
        "no host services (no unix socket can be made)"
    };
    let network = if s.network.is_empty() {
        "no network (only its own loopback)"
    } else {
        "no network but the host:port pairs listed above (and its own loopback)"
    };
    let _ = writeln!(out, "\nThe sandbox adds, whatever the manifest says: {network}, {sockets}, no other files, no privilege gain (no setuid or setgid bits, no capabilities, never host uid 0), no other programs' processes visible, only fds 0-2, and every decision written to the audit trail.");
}

/// The private /tmp: its size, where the size comes from, and whether its
/// files may be executed.
fn tmp(l: &crate::manifest::Limits) -> String {
    let size = match l.tmp_size_bytes {
        Some(bytes) => format!("a private /tmp of {bytes} bytes (tmp_size_bytes)"),
        None => format!(
            "a private /tmp of {} bytes (the memory limit less /dev/shm's {} bytes)",
            l.tmp_bytes(),
            l.shm_bytes()
        ),
    };
    if l.tmp_exec {
        format!("{size} whose files MAY be executed (tmp_exec)")
    } else {
        format!("{size} whose files cannot be executed")
    }
}

/// Grants as `a:443, b:22`, or `nothing` for none.
fn grants(list: &[crate::egress::grant::Grant]) -> String {
    if list.is_empty() {
        return "nothing".into();
    }
    list.iter().map(p).collect::<Vec<_>>().join(", ")
}

/// `network`: exactly the pairs, and what a pair means.
fn explain_network(s: &SpawnGrant, out: &mut String) {
    if s.network.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nNetwork: exactly these host:port pairs (names resolved by spawnd, never by the program; no other host, port or address): {}",
        grants(&s.network)
    );
}

fn describe_param(op: &crate::manifest::Operation, name: &str) -> String {
    let rule = op.params.get(name).cloned().unwrap_or_default();
    let mut parts = Vec::new();
    if let Some(pattern) = &rule.pattern {
        parts.push(format!("must match /{}/", p(pattern.as_str())));
    }
    if let Some(v) = &rule.values {
        parts.push(format!("one of {}", p(v.join(", "))));
    }
    parts.push(format!("at most {} bytes", rule.max_len));
    if !rule.allow_empty {
        parts.push("not empty".into());
    }
    if rule.allow_dash {
        parts.push("MAY start with `-` (options allowed)".into());
    }
    if op.kinds.get(name) == Some(&ValueKind::Path) {
        parts.push("a path without `..`, absolute ones only inside the scopes".into());
    }
    if let Some(d) = &rule.default {
        parts.push(format!("defaults to \"{}\"", p(d)));
    }
    parts.join("; ")
}

fn explain_fs(s: &SpawnGrant, out: &mut String) {
    out.push_str("\nFiles:\n");
    let none = "nothing";
    let _ = writeln!(
        out,
        "  may read:    {}",
        if s.fs_read.is_empty() {
            none.into()
        } else {
            list(&s.fs_read)
        }
    );
    let _ = writeln!(
        out,
        "  may write:   {}",
        if s.fs_write.is_empty() {
            none.into()
        } else {
            list(&s.fs_write)
        }
    );
    let _ = writeln!(
        out,
        "  may execute: the declared programs and the system runtime{}",
        if s.fs_exec.is_empty() {
            String::new()
        } else {
            format!(", plus files in {}", list(&s.fs_exec))
        }
    );
    let cwd = s.cwd.as_ref().map_or(
        "a fresh temporary directory, removed afterwards".to_string(),
        p,
    );
    let _ = writeln!(out, "  starts in:   {cwd}");
    let anchored = s
        .fs_read
        .iter()
        .chain(&s.fs_write)
        .chain(&s.fs_exec)
        .chain(&s.cwd)
        .any(ScopePath::needs_workspace);
    if anchored {
        let _ = writeln!(out, "  {{workspace}}: the directory `spawnd run --workspace DIR` names, else the operator's [sandbox] workspace; never the caller's (`spawnd check --workspace DIR` shows the scopes resolved)");
    }
}

fn explain_env(s: &SpawnGrant, out: &mut String) {
    let passed: Vec<&String> = s
        .env_passthrough
        .iter()
        .filter(|k| !s.credential_env_keys.contains(k))
        .collect();
    out.push_str("\nEnvironment (nothing else from the caller's or spawnd's own):\n");
    let _ = writeln!(
        out,
        "  from the caller: {}",
        if passed.is_empty() {
            "nothing".to_string()
        } else {
            p(passed
                .iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(", "))
        }
    );
    if !s.env_set.is_empty() {
        let fixed: Vec<String> = s
            .env_set
            .iter()
            .map(|(k, v)| format!("{}={}", p(k), p(v)))
            .collect();
        let _ = writeln!(out, "  fixed:           {}", fixed.join(", "));
    }
    if !s.credential_env_keys.is_empty() {
        let _ = writeln!(out, "  secrets:         {} (filled by spawnd from the operator's binding, never by the caller; redacted from output)", p(s.credential_env_keys.join(", ")));
    }
    let defaults: Vec<String> = crate::plan::DEFAULT_ENV
        .iter()
        .filter(|(k, _)| {
            !s.env_set.contains_key(*k) && !s.credential_env_keys.iter().any(|x| x == k)
        })
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !defaults.is_empty() {
        let _ = writeln!(
            out,
            "  defaults:        {} (spawnd's, where the caller passes no value)",
            defaults.join(", ")
        );
    }
}
