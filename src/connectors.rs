//! What each loaded connector can do right now, as the `<connector_status>`
//! block of seed `003_…` that an agent runtime injects every turn:
//! `disabled_by_admin` (`[[disable]]`), `not_configured` (a credential with no
//! binding, or a declared program missing or not matching its pinned hash),
//! `invalid_credentials` (a binding that cannot be read or is empty), else
//! `connected` — with each connector's operations (name, description, mode,
//! each parameter's kind and rules, the `host:port` pairs it may reach; none
//! for a disabled connector) and a `captured_at` timestamp. Credential values are read to be checked
//! and dropped (wiped) at once; they never appear in the block.

pub(crate) mod tools;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Map, Value};

use crate::config::Config;
use crate::manifest::{Manifest, Operation, ValueKind};
use crate::template::DEFAULT_MAX_LEN;

/// The status of every manifest `shown` keeps (the daemon: the connectors
/// the peer may act for), by connector name, and when it was taken.
/// `connectors` gives each parameter in full; the `block` keeps the same
/// shape with each parameter as one line of text, for a prompt.
pub(crate) fn status(
    config: &Config,
    manifests: &BTreeMap<String, Vec<Manifest>>,
    home: &Path,
    shown: &dyn Fn(&Manifest) -> bool,
) -> Value {
    let captured_at = crate::audit::log::now_rfc3339_millis();
    let mut connectors = Map::new();
    let mut compact = Map::new();
    for (name, versions) in manifests {
        let versions: Vec<&Manifest> = versions.iter().filter(|m| shown(m)).collect();
        for m in &versions {
            // One version served: its name; several: each as NAME@VERSION,
            // which a request picks by pinning `version`.
            let key = match versions.len() {
                1 => name.clone(),
                _ => format!("{name}@{}", m.connector.version),
            };
            let (full, short) = one(config, m, home);
            connectors.insert(key.clone(), full);
            compact.insert(key, short);
        }
    }
    let block = format!(
        "<connector_status captured_at=\"{captured_at}\">\n{}\n</connector_status>",
        serde_json::to_string_pretty(&compact).unwrap_or_default()
    );
    json!({"captured_at": captured_at, "connectors": connectors, "block": block})
}

/// One connector's entry, in full and in the block's compact form. A
/// connector disabled by the operator shows its status and reason only:
/// seed 003 says an agent must neither offer nor mention what it would do.
fn one(config: &Config, m: &Manifest, home: &Path) -> (Value, Value) {
    let (status, detail) = judge(config, m, home);
    let mut full = json!({"version": m.connector.version.to_string(), "status": status});
    if let Some(installed) = m.verified.as_ref().filter(|v| v.installed) {
        full["hash"] = json!(installed.content.to_string());
        full["signature"] = json!(installed.signature);
        full["signer"] = json!(installed.signer);
    }
    if let Some((key, text)) = detail {
        full[key] = json!(text);
    }
    let mut short = full.clone();
    let spawn = m.spawn.as_ref().filter(|_| status != DISABLED);
    if status != DISABLED {
        let ops = spawn.map(|s| s.operations.values().collect::<Vec<_>>());
        let ops = ops.unwrap_or_default();
        full["operations"] = ops.iter().map(|op| operation(op, false)).collect();
        short["operations"] = ops.iter().map(|op| operation(op, true)).collect();
    }
    if let Some(s) = spawn.filter(|s| !s.network.is_empty()) {
        full["network"] = json!(s.network);
        short["network"] = json!(s.network);
    }
    (full, short)
}

/// An operation: name, description, mode, its params (each a JSON object,
/// or one line when `compact`) and the `host:port` pairs it may reach.
fn operation(op: &Operation, compact: bool) -> Value {
    let params: Vec<Value> = op
        .template
        .placeholders()
        .into_iter()
        .map(|name| {
            let p = param(op, name);
            if compact {
                json!(param_line(&p))
            } else {
                p
            }
        })
        .collect();
    let mut o =
        json!({"name": op.name, "description": op.description, "mode": op.mode, "params": params});
    if !op.network.is_empty() {
        o["network"] = json!(op.network);
    }
    o
}

/// A placeholder's rule as the caller needs it to build `args`: required
/// when it stands outside optional groups and has no default.
fn param(op: &Operation, name: &str) -> Value {
    let rule = op.params.rule(name);
    let kind: ValueKind = op.kinds.get(name).copied().unwrap_or_default();
    let required = rule.default.is_none() && !op.template.is_in_group(name);
    let mut p = json!({
        "name": name,
        "kind": kind,
        "required": required,
        "allow_dash": rule.allow_dash,
        "allow_empty": rule.allow_empty,
        "max_len": rule.max_len,
    });
    if let Some(d) = &rule.default {
        p["default"] = json!(d);
    }
    if let Some(values) = &rule.values {
        p["values"] = json!(values);
    }
    if let Some(pattern) = &rule.pattern {
        p["pattern"] = json!(pattern.as_str());
    }
    if let Some(d) = op.param_descriptions.get(name) {
        p["description"] = json!(d);
    }
    p
}

/// One line for a param: `name (kind, required|optional|default "x", one
/// of a|b, pattern /…/, allow_dash, max_len N): description`; `max_len` only
/// when it is not the default.
fn param_line(p: &Value) -> String {
    let mut facts = vec![p["kind"].as_str().unwrap_or("string").to_string()];
    facts.push(match (&p["default"], p["required"].as_bool()) {
        (Value::String(d), _) => format!("default {d:?}"),
        (_, Some(true)) => "required".into(),
        _ => "optional".into(),
    });
    if let Some(values) = p["values"].as_array() {
        let values: Vec<&str> = values.iter().filter_map(Value::as_str).collect();
        facts.push(format!("one of {}", values.join("|")));
    }
    if let Some(pattern) = p["pattern"].as_str() {
        facts.push(format!("pattern /{pattern}/"));
    }
    for flag in ["allow_dash", "allow_empty"] {
        if p[flag].as_bool() == Some(true) {
            facts.push(flag.into());
        }
    }
    if let Some(max) = p["max_len"]
        .as_u64()
        .filter(|&m| m != DEFAULT_MAX_LEN as u64)
    {
        facts.push(format!("max_len {max}"));
    }
    let name = p["name"].as_str().unwrap_or_default();
    match p["description"].as_str() {
        Some(d) => format!("{name} ({}): {d}", facts.join(", ")),
        None => format!("{name} ({})", facts.join(", ")),
    }
}

/// The status of a connector the operator disabled.
const DISABLED: &str = "disabled_by_admin";

type Verdict = (&'static str, Option<(&'static str, String)>);

fn judge(config: &Config, m: &Manifest, home: &Path) -> Verdict {
    let name = &m.connector.name;
    if config.is_disabled(name) {
        return (
            DISABLED,
            Some((
                "reason",
                "disabled in the operator config ([[disable]])".into(),
            )),
        );
    }
    // Each program hashed once: its own pin check and the verified
    // connector's recheck (which would otherwise read it again) share it.
    let programs: Vec<_> = m
        .spawn
        .iter()
        .flat_map(|s| &s.programs)
        .map(|program| {
            // A program's path always expands (never anchored at the workspace).
            let path = program
                .path
                .expand(&crate::manifest::Anchors {
                    home,
                    workspace: None,
                    connector: m.dir.as_deref(),
                })
                .unwrap_or_default();
            let hash = crate::program::hash_path(&path);
            (program, path, hash)
        })
        .collect();
    if let Some(verified) = &m.verified {
        let hashed: Vec<_> = programs
            .iter()
            .filter_map(|(_, path, hash)| hash.as_ref().ok().map(|h| (path.clone(), *h)))
            .collect();
        if let Err(changed) = crate::provenance::recheck::recheck_verified(verified, &hashed) {
            let found = changed.found.map_or("unreadable".into(), |h| h.to_string());
            return (
                "not_configured",
                Some((
                    "error",
                    format!(
                        "verified as {} and its files are now {found} ({}); {}",
                        verified.content,
                        changed.what,
                        if verified.installed {
                            "reinstall it"
                        } else {
                            "restore them and reload the daemon"
                        }
                    ),
                )),
            );
        }
    }
    let Some(spawn) = m.spawn.as_ref() else {
        return ("connected", None);
    };
    for key in &spawn.credential_env_keys {
        let Some(binding) = config.binding_for(name, key) else {
            return (
                "not_configured",
                Some((
                    "error",
                    format!(
                        "no credential bound for {key} ([[credentials]] in the operator config)"
                    ),
                )),
            );
        };
        if let Err(e) = crate::vault::read_secret(&binding.source) {
            return (
                "invalid_credentials",
                Some(("error", format!("{key}: {e}"))),
            );
        }
    }
    for (program, path, hash) in &programs {
        let hash = match hash {
            Ok(h) => h,
            Err(e) => {
                return (
                    "not_configured",
                    Some(("error", format!("program {}: {e}", path.display()))),
                )
            }
        };
        let operator_pin = m.verified.as_ref().and_then(|i| i.pins.get(path));
        if let Some(pinned) = program.hash.as_ref().or(operator_pin) {
            if pinned != hash {
                return (
                    "not_configured",
                    Some((
                        "error",
                        format!(
                            "program {} does not match its pinned sha256 (it is {hash})",
                            path.display()
                        ),
                    )),
                );
            }
        }
    }
    ("connected", None)
}
