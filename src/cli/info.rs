//! `spawnd hash`, `capabilities`, `health` and `config show`.

use crate::failure::FailureKind;
use std::path::Path;

use serde_json::json;

use super::args::Cli;
use super::context::load_config;
use super::output::{Failure, Success};
use crate::kernel_features::{probe, Status};
use crate::manifest::env_keys::RESERVED_ENV;
use crate::policy::REASONS;
use crate::program::hash_path;

/// `spawnd hash FILE`.
pub(super) fn hash(file: &Path) -> Result<Success, Failure> {
    let meta = std::fs::metadata(file).map_err(|e| {
        Failure::from_io(
            &e,
            FailureKind::Config,
            format!("cannot stat {}: {e}", file.display()),
        )
    })?;
    if !meta.is_file() {
        return Err(Failure::usage(format!(
            "{} is not a regular file",
            file.display()
        )));
    }
    let digest = hash_path(file)
        .map_err(|e| Failure::config(format!("cannot read {}: {e}", file.display())))?;
    Ok(Success::new(
        json!({"file": file, "sha256": digest}),
        digest.to_string(),
    ))
}

/// The commands, with the tier each needs (connector CLI contract).
const COMMANDS: &[(&str, &str, &str)] = &[
    (
        "check",
        "the gate's decision and exact argv for a request",
        "readonly",
    ),
    (
        "manifest.init",
        "a starting manifest for programs, pinned",
        "readonly",
    ),
    ("manifest.lint", "validate a manifest", "readonly"),
    ("manifest.explain", "a manifest in plain words", "readonly"),
    (
        "manifest.pin",
        "fill in program hashes in place",
        "readonly",
    ),
    ("hash", "sha256 of a file", "readonly"),
    ("capabilities", "this description", "readonly"),
    ("health", "kernel layers available", "readonly"),
    ("config.show", "the effective operator config", "readonly"),
    (
        "run",
        "an operation in the sandbox (--mode must reach the operation's tier: --mode write for a write operation)",
        "readonly",
    ),
    (
        "learn",
        "run a command once, observed, and draft a manifest that runs it",
        "readonly",
    ),
    ("audit.verify", "check the audit hash chain", "readonly"),
    ("audit.tail", "the last audit records", "readonly"),
    ("audit.query", "audit records matching filters", "readonly"),
    ("audit.export", "audit records as OCSF events", "readonly"),
    ("connectors", "the <connector_status> block", "readonly"),
    ("connector.hash", "a connector directory's content hash", "readonly"),
    ("connector.keygen", "a new ed25519 publisher key pair", "readonly"),
    ("connector.sign", "sign a connector directory", "readonly"),
    (
        "connector.install",
        "check and copy a connector into the store",
        "readonly",
    ),
    ("connector.list", "the installed connectors", "readonly"),
    ("connector.remove", "remove an installed connector", "readonly"),
    (
        "connector.pin",
        "pin an installed connector's system programs",
        "readonly",
    ),
    ("keyring.trust", "trust a publisher key", "readonly"),
    ("keyring.list", "the trusted publisher keys", "readonly"),
    ("keyring.remove", "stop trusting a publisher key", "readonly"),
    (
        "serve",
        "the daemon (JSON-RPC over a Unix socket)",
        "readonly",
    ),
];

/// `spawnd capabilities`.
pub(super) fn capabilities() -> Success {
    let commands: Vec<_> = COMMANDS.iter().map(|(id, summary, mode)| json!({"id": id, "summary": summary, "required_mode": mode, "supports_json": true})).collect();
    let reasons: Vec<_> = REASONS.iter().map(|r| json!({"reason": r.reason, "class": r.reason.class(), "boundary_detail": r.detail, "when": r.when})).collect();
    let reserved: Vec<_> = RESERVED_ENV
        .iter()
        .map(|r| json!({"key": r.key, "prefix": r.prefix, "why": r.why}))
        .collect();
    let data = json!({
        "tool": "spawnd",
        "version": env!("CARGO_PKG_VERSION"),
        "modes": ["readonly", "write", "full", "admin"],
        "protocol_version": 1,
        "commands": commands,
        "denial_reasons": reasons,
        "reserved_env_keys": reserved,
    });
    let text = COMMANDS
        .iter()
        .map(|(id, summary, _)| format!("{id:18} {summary}"))
        .collect::<Vec<_>>()
        .join("\n");
    Success::new(
        data,
        format!("spawnd {}\n{text}", env!("CARGO_PKG_VERSION")),
    )
}

/// `spawnd health`: exit 0 when spawns run (`healthy`, or `degraded` with
/// each degradation named), 4 for `needs_setup`, 5 for `error` (SPEC §10).
pub(super) fn health(cli: &Cli) -> Result<Success, Failure> {
    let config = load_config(cli)?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::internal(format!("cannot find spawnd's own binary: {e}")))?;
    let limits = crate::pipeline::limits::finding(config.sandbox.limits);
    let report = probe(&exe, config.audit.path.as_deref(), limits);
    let status = serde_json::to_value(report.status).unwrap_or_default();
    let mut text = status.as_str().unwrap_or("error").to_string();
    for r in &report.reasons {
        text.push_str(&format!("\n  - {r}"));
    }
    text.push_str(&format!(
        "\nkernel {}; userns {}; Landlock ABI {} (required {}); seccomp {}; limits via {}; audit {}",
        report.kernel,
        if report.userns.available { "yes" } else { "no" },
        report.landlock_abi,
        report.landlock_abi_required,
        if report.seccomp.available { "yes" } else { "no" },
        report.cgroups.limits_via,
        report.audit.detail
    ));
    let exit = match report.status {
        Status::Healthy | Status::Degraded => 0,
        Status::NeedsSetup => 4,
        Status::Error => 5,
    };
    let mut success = Success::new(&report, text);
    success.exit = exit;
    Ok(success)
}

/// `spawnd config show`.
pub(super) fn config_show(cli: &Cli) -> Result<Success, Failure> {
    let config = load_config(cli)?;
    let text = match &config.source {
        Some(p) => format!("config: {}", p.display()),
        None => "config: built-in defaults (no --config and no $SPAWND_CONFIG)".into(),
    };
    let body = serde_json::to_string_pretty(&config).unwrap_or_default();
    Ok(Success::new(&config, format!("{text}\n{body}")))
}
