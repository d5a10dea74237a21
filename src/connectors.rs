//! What each loaded connector can do right now, as the `<connector_status>`
//! block of seed `003_…` that an agent runtime injects every turn:
//! `disabled_by_admin` (`[[disable]]`), `not_configured` (a credential with no
//! binding, or a declared program missing or not matching its pinned hash),
//! `invalid_credentials` (a binding that cannot be read or is empty), else
//! `connected` — with each connector's operations (name, description, mode)
//! and a `captured_at` timestamp. Credential values are read to be checked
//! and dropped (wiped) at once; they never appear in the block.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Map, Value};

use crate::config::Config;
use crate::manifest::Manifest;

/// The status of every manifest `shown` keeps (the daemon: the connectors
/// the peer may act for), by connector name, and when it was taken.
pub fn status(
    config: &Config,
    manifests: &BTreeMap<String, Manifest>,
    home: &Path,
    shown: &dyn Fn(&Manifest) -> bool,
) -> Value {
    let captured_at = crate::audit::log::now_rfc3339_millis();
    let connectors: Map<String, Value> = manifests
        .iter()
        .filter(|(_, m)| shown(m))
        .map(|(name, m)| (name.clone(), one(config, m, home)))
        .collect();
    let block = format!(
        "<connector_status captured_at=\"{captured_at}\">\n{}\n</connector_status>",
        serde_json::to_string_pretty(&connectors).unwrap_or_default()
    );
    json!({"captured_at": captured_at, "connectors": connectors, "block": block})
}

fn one(config: &Config, m: &Manifest, home: &Path) -> Value {
    let operations: Vec<Value> = m
        .spawn
        .as_ref()
        .map(|s| {
            s.operations
                .values()
                .map(|op| {
                    let mut o =
                        json!({"name": op.name, "description": op.description, "mode": op.mode});
                    if !op.network.is_empty() {
                        o["network"] = json!(op.network);
                    }
                    o
                })
                .collect()
        })
        .unwrap_or_default();
    let mut v = json!({"version": m.connector.version.to_string(), "operations": operations});
    let (status, detail) = judge(config, m, home);
    v["status"] = json!(status);
    if let Some((key, text)) = detail {
        v[key] = json!(text);
    }
    v
}

type Verdict = (&'static str, Option<(&'static str, String)>);

fn judge(config: &Config, m: &Manifest, home: &Path) -> Verdict {
    let name = &m.connector.name;
    if config.is_disabled(name) {
        return (
            "disabled_by_admin",
            Some((
                "reason",
                "disabled in the operator config ([[disable]])".into(),
            )),
        );
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
    for program in &spawn.programs {
        // A program's path always expands (never anchored at the workspace).
        let path = program
            .path
            .expand(&crate::manifest::Anchors {
                home,
                workspace: None,
            })
            .unwrap_or_default();
        let hash = match crate::program::hash_path(&path) {
            Ok(h) => h,
            Err(e) => {
                return (
                    "not_configured",
                    Some(("error", format!("program {}: {e}", path.display()))),
                )
            }
        };
        if let Some(pinned) = &program.hash {
            if pinned != &hash {
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
