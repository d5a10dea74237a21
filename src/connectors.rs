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

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::manifest::{Manifest, Operation, Tier, ValueKind};
use crate::template::DEFAULT_MAX_LEN;

/// `connectors_status`'s answer, and `spawnd connectors --json`'s data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConnectorsStatus {
    /// When the status was taken (RFC 3339, in milliseconds).
    pub(crate) captured_at: String,
    /// Each connector's entry by name (`NAME@VERSION` when several of its
    /// versions are served), each param in full.
    pub(crate) connectors: BTreeMap<String, ConnectorStatus<ParamStatus>>,
    /// The `<connector_status>` block for a prompt: the same entries, each
    /// param as one line of text.
    pub(crate) block: String,
}

/// Whether a connector can run now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Availability {
    /// Everything it needs is there.
    Connected,
    /// A credential has no binding, or a program is missing or does not
    /// match its pin (`error` says which).
    NotConfigured,
    /// A binding cannot be read or is empty (`error` says which).
    InvalidCredentials,
    /// The operator disabled it (`[[disable]]`); `reason` says so.
    DisabledByAdmin,
}

/// One connector's entry; `P` is how a param is shown: [`ParamStatus`] in
/// `connectors`, one line of text in the block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(bound(deserialize = "P: Deserialize<'de>"))]
pub(crate) struct ConnectorStatus<P> {
    /// The manifest's version.
    pub(crate) version: String,
    /// Whether it can run now.
    pub(crate) status: Availability,
    /// An installed connector's content hash, signature status and signer.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub(crate) installed: Option<InstalledStatus>,
    /// Why the operator disabled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    /// What keeps it from running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    /// Its operations; none for a disabled connector (seed 003: an agent
    /// must neither offer nor mention what it would do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) operations: Option<Vec<OperationStatus<P>>>,
    /// The `host:port` pairs it may reach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) network: Option<Vec<String>>,
}

/// What the store says of an installed connector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct InstalledStatus {
    /// Its content hash.
    pub(crate) hash: String,
    /// Its signature's status (`signed`, `unsigned`, …).
    pub(crate) signature: String,
    /// The key that signed it.
    pub(crate) signer: Option<String>,
}

/// One operation of a connector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, bound(deserialize = "P: Deserialize<'de>"))]
pub(crate) struct OperationStatus<P> {
    /// Its name, for `spawn_op`'s `op`.
    pub(crate) name: String,
    /// What it does.
    pub(crate) description: Option<String>,
    /// Its permission tier.
    pub(crate) mode: Tier,
    /// Its params, in the template's order.
    pub(crate) params: Vec<P>,
    /// The `host:port` pairs it may reach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) network: Option<Vec<String>>,
}

/// A placeholder's rule as a caller needs it to build `args`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ParamStatus {
    /// The placeholder's name, a key of `args`.
    pub(crate) name: String,
    /// How its value is used.
    pub(crate) kind: ValueKind,
    /// It stands outside optional groups and has no default.
    pub(crate) required: bool,
    /// A value may start with `-`.
    pub(crate) allow_dash: bool,
    /// A value may be empty.
    pub(crate) allow_empty: bool,
    /// The longest value, in bytes.
    pub(crate) max_len: usize,
    /// The value when `args` lacks it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) default: Option<String>,
    /// The only values allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) values: Option<Vec<String>>,
    /// A pattern the whole value must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pattern: Option<String>,
    /// What it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
}

/// The status of every manifest `shown` keeps (the daemon: the connectors
/// the peer may act for), by connector name, and when it was taken.
pub(crate) fn status(
    config: &Config,
    manifests: &crate::config::manifests::Manifests,
    home: &Path,
    shown: &dyn Fn(&Manifest) -> bool,
) -> ConnectorsStatus {
    let captured_at = crate::audit::log::now_rfc3339_millis();
    let mut connectors = BTreeMap::new();
    for (name, versions) in manifests {
        let versions: Vec<&Manifest> = versions.iter().map(|m| &**m).filter(|m| shown(m)).collect();
        for m in &versions {
            // One version served: its name; several: each as NAME@VERSION,
            // which a request picks by pinning `version`.
            let key = match versions.len() {
                1 => name.clone(),
                _ => format!("{name}@{}", m.connector.version),
            };
            connectors.insert(key, one(config, m, home));
        }
    }
    let compact: BTreeMap<&String, ConnectorStatus<String>> = connectors
        .iter()
        .map(|(key, full)| (key, full.with_params_as_lines()))
        .collect();
    let block = format!(
        "<connector_status captured_at=\"{captured_at}\">\n{}\n</connector_status>",
        serde_json::to_string_pretty(&compact).unwrap_or_default()
    );
    ConnectorsStatus {
        captured_at,
        connectors,
        block,
    }
}

impl ConnectorStatus<ParamStatus> {
    /// The entry as the block shows it: each param as one line.
    fn with_params_as_lines(&self) -> ConnectorStatus<String> {
        let operations = self.operations.as_ref().map(|ops| {
            ops.iter()
                .map(|op| OperationStatus {
                    name: op.name.clone(),
                    description: op.description.clone(),
                    mode: op.mode,
                    params: op.params.iter().map(param_line).collect(),
                    network: op.network.clone(),
                })
                .collect()
        });
        ConnectorStatus {
            version: self.version.clone(),
            status: self.status,
            installed: self.installed.clone(),
            reason: self.reason.clone(),
            error: self.error.clone(),
            operations,
            network: self.network.clone(),
        }
    }
}

/// One connector's entry. A connector disabled by the operator shows its
/// status and reason only.
fn one(config: &Config, m: &Manifest, home: &Path) -> ConnectorStatus<ParamStatus> {
    let (status, detail) = judge(config, m, home);
    let installed = m
        .verified
        .as_ref()
        .filter(|v| v.installed)
        .map(|v| InstalledStatus {
            hash: v.content.to_string(),
            signature: v.signature.to_string(),
            signer: v.signer.clone(),
        });
    let (reason, error) = match detail {
        Some(Detail::Reason(text)) => (Some(text), None),
        Some(Detail::Error(text)) => (None, Some(text)),
        None => (None, None),
    };
    let spawn = m
        .spawn
        .as_ref()
        .filter(|_| status != Availability::DisabledByAdmin);
    let operations = (status != Availability::DisabledByAdmin).then(|| {
        spawn
            .map(|s| s.operations.values().map(operation).collect())
            .unwrap_or_default()
    });
    ConnectorStatus {
        version: m.connector.version.to_string(),
        status,
        installed,
        reason,
        error,
        operations,
        network: spawn
            .filter(|s| !s.network.is_empty())
            .map(|s| s.network.iter().map(ToString::to_string).collect()),
    }
}

/// An operation: name, description, mode, its params and the `host:port`
/// pairs it may reach.
fn operation(op: &Operation) -> OperationStatus<ParamStatus> {
    OperationStatus {
        name: op.name.clone(),
        description: op.description.clone(),
        mode: op.mode,
        params: op
            .template
            .placeholders()
            .into_iter()
            .map(|name| param(op, name))
            .collect(),
        network: (!op.network.is_empty())
            .then(|| op.network.iter().map(ToString::to_string).collect()),
    }
}

/// A placeholder's rule as the caller needs it to build `args`: required
/// when it stands outside optional groups and has no default.
fn param(op: &Operation, name: &str) -> ParamStatus {
    let rule = op.params.rule(name);
    ParamStatus {
        name: name.to_string(),
        kind: op.kinds.get(name).copied().unwrap_or_default(),
        required: rule.default.is_none() && !op.template.is_in_group(name),
        allow_dash: rule.allow_dash,
        allow_empty: rule.allow_empty,
        max_len: rule.max_len,
        default: rule.default.clone(),
        values: rule.values.clone(),
        pattern: rule.pattern.as_ref().map(|p| p.as_str().to_string()),
        description: op.param_descriptions.get(name).cloned(),
    }
}

/// One line for a param: `name (kind, required|optional|default "x", one
/// of a|b, pattern /…/, allow_dash, max_len N): description`; `max_len` only
/// when it is not the default.
fn param_line(p: &ParamStatus) -> String {
    let kind = match p.kind {
        ValueKind::String => "string",
        ValueKind::Path => "path",
    };
    let mut facts = vec![kind.to_string()];
    facts.push(match (&p.default, p.required) {
        (Some(d), _) => format!("default {d:?}"),
        (None, true) => "required".into(),
        (None, false) => "optional".into(),
    });
    if let Some(values) = &p.values {
        facts.push(format!("one of {}", values.join("|")));
    }
    if let Some(pattern) = &p.pattern {
        facts.push(format!("pattern /{pattern}/"));
    }
    for (flag, on) in [("allow_dash", p.allow_dash), ("allow_empty", p.allow_empty)] {
        if on {
            facts.push(flag.into());
        }
    }
    if p.max_len != DEFAULT_MAX_LEN {
        facts.push(format!("max_len {}", p.max_len));
    }
    match &p.description {
        Some(d) => format!("{} ({}): {d}", p.name, facts.join(", ")),
        None => format!("{} ({})", p.name, facts.join(", ")),
    }
}

/// What `status` adds to a connector's availability.
enum Detail {
    /// Why the operator disabled it.
    Reason(String),
    /// What keeps it from running.
    Error(String),
}

type Verdict = (Availability, Option<Detail>);

fn judge(config: &Config, m: &Manifest, home: &Path) -> Verdict {
    let name = &m.connector.name;
    if config.is_disabled(name) {
        return (
            Availability::DisabledByAdmin,
            Some(Detail::Reason(
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
                Availability::NotConfigured,
                Some(Detail::Error(format!(
                    "verified as {} and its files are now {found} ({}); {}",
                    verified.content,
                    changed.what,
                    if verified.installed {
                        "reinstall it"
                    } else {
                        "restore them and reload the daemon"
                    }
                ))),
            );
        }
    }
    let Some(spawn) = m.spawn.as_ref() else {
        return (Availability::Connected, None);
    };
    for key in &spawn.credential_env_keys {
        let Some(binding) = config.binding_for(name, key) else {
            return (
                Availability::NotConfigured,
                Some(Detail::Error(format!(
                    "no credential bound for {key} ([[credentials]] in the operator config)"
                ))),
            );
        };
        if let Err(e) = crate::vault::read_secret(&binding.source) {
            return (
                Availability::InvalidCredentials,
                Some(Detail::Error(format!("{key}: {e}"))),
            );
        }
    }
    for (program, path, hash) in &programs {
        let hash = match hash {
            Ok(h) => h,
            Err(e) => {
                return (
                    Availability::NotConfigured,
                    Some(Detail::Error(format!("program {}: {e}", path.display()))),
                )
            }
        };
        let operator_pin = m.verified.as_ref().and_then(|i| i.pins.get(path));
        if let Some(pinned) = program.hash.as_ref().or(operator_pin) {
            if pinned != hash {
                return (
                    Availability::NotConfigured,
                    Some(Detail::Error(format!(
                        "program {} does not match its pinned sha256 (it is {hash})",
                        path.display()
                    ))),
                );
            }
        }
    }
    (Availability::Connected, None)
}
