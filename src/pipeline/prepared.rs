//! A request ready for the gate: the operator config, the manifest, the
//! caller and the request, and the gate's decision for it under an access
//! policy (local, or the daemon's `[[access]]` rules).

use crate::config::Config;
use crate::manifest::Manifest;
use crate::policy::{decide, Access, Caller, Decision, GateContext, Request};
use crate::program::ProgramOpener;

/// Everything the gate needs for one request.
pub struct Prepared {
    /// The operator config (shared with the daemon's loaded one: a spawn
    /// never copies it).
    pub config: std::sync::Arc<Config>,
    /// The manifest (shared with the daemon's loaded ones: a spawn never
    /// copies it).
    pub manifest: std::sync::Arc<Manifest>,
    /// The invoking user.
    pub caller: Caller,
    /// The request.
    pub request: Request,
}

/// Decides a prepared request for a local invocation.
pub(crate) fn decide_local(p: &Prepared, opener: &mut ProgramOpener) -> Decision {
    decide_with(p, opener, &Access::Local)
}

/// The gate for `p` under `access` (the daemon's `[[access]]` rules).
pub(crate) fn decide_with(p: &Prepared, opener: &mut ProgramOpener, access: &Access) -> Decision {
    let connector = p.manifest.connector.name.to_string();
    let bound = p.config.bound_credentials(&p.manifest);
    let ctx = GateContext {
        connector: &connector,
        manifest: Some(&p.manifest),
        disabled: p.config.is_disabled(&p.manifest.connector.name),
        access,
        bound_credentials: &bound,
        require_program_hash: p.config.sandbox.require_program_hash,
        network_enabled: p.config.network.enabled,
    };
    let started = std::time::Instant::now();
    let decision = decide(&ctx, &p.caller, &p.request, opener);
    let elapsed_us = started.elapsed().as_micros() as u64;
    match &decision {
        Decision::Allowed(plan) => {
            tracing::debug!(connector = %plan.connector, op = %plan.op, program = %plan.program.resolved.display(), sha256 = %plan.program.sha256, elapsed_us, "gate allowed")
        }
        Decision::Denied(d) => {
            tracing::debug!(connector = %d.connector, reason = d.reason.as_str(), requested = %d.requested, elapsed_us, "gate denied")
        }
    }
    decision
}
