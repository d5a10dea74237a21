//! Which served connector a request is decided under, and whether an
//! verified one (installed, or a manifest file stating `provenance_hash`)
//! is still the bytes it was verified as at load
//! (docs/provenance.md, "Served from the store").
//!
//! Several versions of one connector may be served at once (each installed
//! version is its own store entry). A request names the connector by FQN
//! and may pin `version` and `hash`, as an action's
//! `[[requires.connectors]]` entry does; with one version served an
//! unpinned request gets it, with several it must pin one: there is no
//! "newest" (the ADR's strict pinning).

use std::path::PathBuf;

use super::decision::{shown, Denial};
use super::inspector::ProgramInspector;
use super::reason::Reason;
use super::request::{ConnectorPin, GateContext};
use crate::manifest::{Manifest, Sha256Digest};
use crate::plan::ProgramPlan;

/// The served manifest among `served` (every version of one connector,
/// never empty) that satisfies `pin`; a denial naming what is served when
/// none does, or when several are served and `pin` chooses none.
pub(crate) fn select_served<'m, M: std::ops::Deref<Target = Manifest>>(
    connector: &str,
    served: &'m [M],
    pin: &ConnectorPin,
) -> Result<&'m M, Box<Denial>> {
    let mut matching = served.iter().filter(|m| satisfies(m, pin));
    let (Some(one), None) = (matching.next(), matching.next()) else {
        let served: Vec<&Manifest> = served.iter().map(|m| &**m).collect();
        return Err(refuse_selection(connector, &served, pin));
    };
    Ok(one)
}

/// Why no single served version answers `pin`: none does, or several do.
fn refuse_selection(connector: &str, served: &[&Manifest], pin: &ConnectorPin) -> Box<Denial> {
    let matching: Vec<&Manifest> = served
        .iter()
        .copied()
        .filter(|m| satisfies(m, pin))
        .collect();
    match matching.as_slice() {
        [] => pin_mismatch(connector, served, pin),
        _ => Denial::new(
            Reason::ConnectorVersionRequired,
            connector,
            format!("connector:{}", shown(connector)),
            served_list(served),
            format!(
                "{} versions of {connector} are served ({}); pin one with `version` (and `hash`) in the request, as the action's [[requires.connectors]] entry does",
                matching.len(),
                versions(&matching)
            ),
        ),
    }
}

/// The gate's check that the manifest it was handed satisfies the
/// request's pin (the front end chose it with [`select_served`]).
pub(super) fn check_pin(
    ctx: &GateContext,
    manifest: &Manifest,
    pin: &ConnectorPin,
) -> Result<(), Box<Denial>> {
    if satisfies(manifest, pin) {
        Ok(())
    } else {
        Err(pin_mismatch(ctx.connector, &[manifest], pin))
    }
}

/// Whether `manifest` has the pinned version and content hash. A manifest
/// served from a file rather than the store has no content hash, so a hash
/// pin never matches it.
fn satisfies(manifest: &Manifest, pin: &ConnectorPin) -> bool {
    let version_ok = pin
        .version
        .as_ref()
        .is_none_or(|v| crate::manifest::names_version(v, &manifest.connector.version));
    let hash_ok = pin.hash.is_none_or(|h| {
        manifest
            .verified
            .as_ref()
            .is_some_and(|v| v.installed && v.content == h)
    });
    version_ok && hash_ok
}

fn pin_mismatch(connector: &str, served: &[&Manifest], pin: &ConnectorPin) -> Box<Denial> {
    let mut requested = format!("connector:{}", shown(connector));
    if let Some(v) = &pin.version {
        requested.push_str(&format!("@{v}"));
    }
    if let Some(h) = &pin.hash {
        requested.push_str(&format!(" {h}"));
    }
    Denial::new(
        Reason::ConnectorPinMismatch,
        connector,
        requested.clone(),
        served_list(served),
        format!(
            "the request pins {requested}, and the daemon serves {}: install the pinned connector (`spawnd connector install DIR --hash …`) or update the action's pin",
            served_list(served).join(", ")
        ),
    )
}

/// Each served version as `connector:NAME@VERSION` and its content hash,
/// or `(manifest file)` for one served from `[server] manifests`.
fn served_list(served: &[&Manifest]) -> Vec<String> {
    served
        .iter()
        .map(|m| {
            let hash = m
                .verified
                .as_ref()
                .filter(|v| v.installed)
                .map_or("(manifest file)".to_string(), |v| v.content.to_string());
            format!(
                "connector:{}@{} {hash}",
                m.connector.name, m.connector.version
            )
        })
        .collect()
}

fn versions(served: &[&Manifest]) -> String {
    served
        .iter()
        .map(|m| m.connector.version.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Before each spawn of a connector verified at load (installed, or a
/// manifest file stating `provenance_hash`): its files are the ones it was
/// verified and loaded with (the content hash), the program's digest taken
/// as the gate opened it reused rather than read again. A difference
/// refuses the spawn, naming both content hashes.
pub(super) fn check_verified_content(
    ctx: &GateContext,
    manifest: &Manifest,
    program: &ProgramPlan,
    programs: &mut dyn ProgramInspector,
) -> Result<(), Box<Denial>> {
    let Some(verified) = &manifest.verified else {
        return Ok(());
    };
    let hashed: [(PathBuf, Sha256Digest); 1] = [(program.resolved.clone(), program.sha256)];
    programs
        .recheck_verified(verified, &hashed)
        .map_err(|changed| {
            let found = changed
                .found
                .map_or("unreadable".to_string(), |h| h.to_string());
            let name = format!("{}@{}", manifest.connector.name, manifest.connector.version);
            Denial::new(
                Reason::ConnectorHashMismatch,
                ctx.connector,
                format!("connector:{name} {found}"),
                vec![format!("connector:{name} {}", verified.content)],
                if verified.installed {
                    format!(
                        "installed connector {name} was verified as {} and its stored files are now {found} ({}): they changed after install; find out who changed {}, then reinstall it from its source with `spawnd connector install`",
                        verified.content,
                        changed.what,
                        verified.dir.display()
                    )
                } else {
                    format!(
                        "connector {name} (manifest {}) was verified at load as {} and its files are now {found} ({}): they changed since the daemon loaded them; find out who changed {}, then restore them and reload the daemon",
                        manifest.source,
                        verified.content,
                        changed.what,
                        verified.dir.display()
                    )
                },
            )
        })
}
