//! `spawnd keyring …` (docs/provenance.md, "The keyring"): which publisher
//! keys the operator trusts, per authority.

use std::path::Path;

use base64::Engine;
use serde_json::json;

use super::args::{Cli, KeyringCommand};
use super::connector_cmd::keyring_of;
use super::context::load_config;
use super::output::{Failure, Success};
use crate::provenance::keyring::TrustOutcome;
use crate::provenance::{Authority, KeyId, KeyringError};

/// Runs one `keyring` subcommand.
pub(super) fn dispatch(cli: &Cli, command: &KeyringCommand) -> Result<Success, Failure> {
    match command {
        KeyringCommand::Trust { authority, key } => trust(cli, authority, key),
        KeyringCommand::List => list(cli),
        KeyringCommand::Remove { authority, key } => remove(cli, authority, key.as_deref()),
    }
}

fn keyring_failure(e: KeyringError) -> Failure {
    match e {
        KeyringError::NotFound(m) => Failure::not_found(m),
        e @ KeyringError::Missing { .. } => Failure::not_found(e.to_string()),
        e => Failure::config(e.to_string()),
    }
}

/// `keyring trust AUTHORITY --key FILE`.
fn trust(cli: &Cli, authority: &str, key: &Path) -> Result<Success, Failure> {
    let authority = Authority::parse(authority).map_err(Failure::usage)?;
    let keyring = keyring_of(&load_config(cli)?)?;
    let (trusted, outcome) = keyring.trust(&authority, key).map_err(keyring_failure)?;
    let added = outcome == TrustOutcome::Added;
    Ok(Success::new(
        json!({"authority": authority.to_string(), "key_id": trusted.id.as_str(), "file": trusted.file, "added": added}),
        if added {
            format!(
                "trusted key {} for {authority} ({})",
                trusted.id,
                trusted.file.display()
            )
        } else {
            format!("key {} is trusted for {authority} already", trusted.id)
        },
    ))
}

/// `keyring list`.
fn list(cli: &Cli) -> Result<Success, Failure> {
    let keyring = keyring_of(&load_config(cli)?)?;
    let keys = keyring.keys().map_err(keyring_failure)?;
    let rows: Vec<_> = keys
        .iter()
        .map(|k| {
            json!({
                "authority": k.authority.to_string(),
                "key_id": k.id.as_str(),
                "public_key": base64::engine::general_purpose::STANDARD.encode(k.key.as_bytes()),
                "file": k.file,
            })
        })
        .collect();
    let mut lines: Vec<String> = keys
        .iter()
        .map(|k| format!("{}  {}  {}", k.authority, k.id, k.file.display()))
        .collect();
    if lines.is_empty() {
        lines.push(format!(
            "no key is trusted ({}): `spawnd keyring trust github://OWNER --key publisher.pub`",
            keyring.root().display()
        ));
    }
    Ok(Success::new(
        json!({"keyring": keyring.root(), "keys": rows}),
        lines.join("\n"),
    ))
}

/// `keyring remove AUTHORITY [--key ID]`.
fn remove(cli: &Cli, authority: &str, key: Option<&str>) -> Result<Success, Failure> {
    let authority = Authority::parse(authority).map_err(Failure::usage)?;
    let id = key
        .map(|k| k.parse::<KeyId>())
        .transpose()
        .map_err(|e| Failure::usage(format!("--key: {e}")))?;
    let keyring = keyring_of(&load_config(cli)?)?;
    let removed = keyring
        .remove(&authority, id.as_ref())
        .map_err(keyring_failure)?;
    let ids: Vec<&str> = removed.iter().map(|k| k.id.as_str()).collect();
    Ok(Success::new(
        json!({"authority": authority.to_string(), "removed": ids}),
        format!("removed key {} of {authority}", ids.join(", ")),
    ))
}
