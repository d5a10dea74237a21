//! `spawn_check`: the gate alone, over the socket. The params are those of
//! `spawn_op` (when they hold `op`) or `spawn` (when they hold `envelope`);
//! the answer is the decision with the exact argv and the whole plan, as
//! `spawnd check --json` gives it, or the denial as the JSON-RPC error
//! `spawn_op` would answer. Nothing runs and, as with in-process
//! `spawnd check`, nothing is recorded: no decision record, and no refusal
//! record for a call refused before the gate (so no error carries an
//! `audit_id`).

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::request::{caller_of, SpawnCall};
use super::spawns::{peer_manifest, read_call, rpc_error};
use super::{Daemon, Peer};
use crate::pipeline::{decide_with, denial_failure, Prepared};
use crate::policy::{Access, Decision};
use crate::program::ProgramOpener;
use crate::rpc::RpcError;

/// `spawn_check`'s params as the call they check: read when the request
/// is, so nothing of the request line is held while the check waits its
/// turn.
pub(super) fn read(params: &Map<String, Value>) -> Result<(&'static str, SpawnCall), RpcError> {
    let method = form_of(params)?;
    let call = read_call(method, params).map_err(|r| r.unrecorded())?;
    Ok((method, call))
}

/// `spawn_check`: `{decision: "allowed", argv, …plan}` or the denial.
pub(super) async fn check(
    daemon: &Arc<Daemon>,
    peer: &Peer,
    method: &'static str,
    call: SpawnCall,
) -> Result<Value, RpcError> {
    let loaded = daemon.loaded();
    let access = Access::Rules {
        rules: loaded.config.access.clone(),
        daemon_uid: nix::unistd::geteuid().as_raw(),
    };
    let manifest =
        peer_manifest(peer, method, &loaded, &access, &call).map_err(|r| r.unrecorded())?;
    let mut caller = caller_of(peer)?;
    // The operator names the workspace; a caller never does.
    caller.workspace = loaded.config.sandbox.workspace.clone();
    caller.label = call.label.clone();
    let SpawnCall {
        request,
        timeout_ms,
        ..
    } = call;
    let prepared = Prepared {
        config: loaded.config.clone(),
        manifest,
        caller,
        request,
    };
    // The gate opens and hashes the program: blocking work, two at a time
    // like `health` and `connectors_status`.
    let _turn = daemon.side_work.acquire().await;
    let decision = tokio::task::spawn_blocking(move || {
        decide_with(&prepared, &mut ProgramOpener::default(), &access)
    })
    .await
    .map_err(|e| RpcError::new(-32603, format!("spawn_check: {e}")))?;
    match decision {
        Decision::Allowed(mut plan) => {
            if let Some(t) = timeout_ms {
                plan.limits.wall_time_ms = plan.limits.wall_time_ms.min(t);
            }
            let mut v = serde_json::to_value(&plan)
                .map_err(|e| RpcError::new(-32603, format!("spawn_check: {e}")))?;
            v["decision"] = json!("allowed");
            Ok(v)
        }
        Decision::Denied(denial) => Err(rpc_error(denial_failure(&denial))),
    }
}

/// Which call is checked: `spawn_op` for params with `op`, `spawn` for
/// params with `envelope`.
fn form_of(params: &Map<String, Value>) -> Result<&'static str, RpcError> {
    match (params.contains_key("op"), params.contains_key("envelope")) {
        (true, false) => Ok("spawn_op"),
        (false, true) => Ok("spawn"),
        _ => Err(RpcError::params(
            "spawn_check takes spawn_op's params (with `op`) or spawn's (with `envelope`), not both",
        )),
    }
}
