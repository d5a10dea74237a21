//! A JSON-RPC `spawn`/`spawn_op` call turned into the gate's `Request`, and
//! its peer into the gate's `Caller`.

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::{Map, Value};

use super::rpc::{self, string_param, RpcError};
use super::Peer;
use crate::manifest::Tier;
use crate::policy::{Caller, Request, RequestKind};

/// The caller a peer stands for (its home from the password database).
pub fn caller_of(peer: &Peer) -> Result<Caller, RpcError> {
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(peer.uid))
        .ok()
        .flatten()
        .ok_or_else(|| {
            RpcError::new(
                rpc::CAPABILITY_DENIED,
                format!("uid {} has no entry in the password database", peer.uid),
            )
        })?;
    Ok(Caller {
        uid: peer.uid,
        gid: peer.gid,
        pid: peer.pid.and_then(|p| u32::try_from(p).ok()),
        home: user.dir,
    })
}

fn string_map(
    params: &Map<String, Value>,
    name: &str,
) -> Result<BTreeMap<String, String>, RpcError> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(RpcError::params(format!("{name}.{k} must be a string"))),
            })
            .collect(),
        Some(_) => Err(RpcError::params(format!(
            "{name} must be an object of strings"
        ))),
    }
}

/// The request, the stdin bytes, and the connector named.
pub fn request_from(
    method: &str,
    params: &Map<String, Value>,
) -> Result<(String, Request, Option<Vec<u8>>), RpcError> {
    let connector = string_param(params, "connector")?.to_string();
    let (kind, env, cwd, stdin) = if method == "spawn_op" {
        let kind = RequestKind::Op {
            name: string_param(params, "op")?.to_string(),
            args: string_map(params, "args")?,
        };
        let stdin = params
            .get("stdin")
            .and_then(Value::as_str)
            .map(|s| s.as_bytes().to_vec());
        (kind, string_map(params, "env")?, None, stdin)
    } else {
        let Some(Value::Object(e)) = params.get("envelope") else {
            return Err(RpcError::params(
                "envelope must be an object {program, argv, env, cwd?, stdin? | stdin_b64?}",
            ));
        };
        let program = string_param(e, "program")?.to_string();
        let argv = match e.get("argv") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| RpcError::params("envelope.argv must hold strings"))
                })
                .collect::<Result<Vec<_>, _>>()?,
            _ => {
                return Err(RpcError::params(
                    "envelope.argv must be an array of strings",
                ))
            }
        };
        let stdin = match (e.get("stdin"), e.get("stdin_b64")) {
            (Some(_), Some(_)) => {
                return Err(RpcError::params(
                    "the envelope gives both stdin and stdin_b64; keep one",
                ))
            }
            (Some(Value::String(s)), None) => Some(s.as_bytes().to_vec()),
            (None, Some(Value::String(b))) => Some(
                base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(|e| RpcError::params(format!("envelope.stdin_b64: {e}")))?,
            ),
            (None, None) => None,
            _ => {
                return Err(RpcError::params(
                    "envelope.stdin must be a string, stdin_b64 base64",
                ))
            }
        };
        let cwd = e.get("cwd").and_then(Value::as_str).map(str::to_string);
        (
            RequestKind::Raw { program, argv },
            string_map(e, "env")?,
            cwd,
            stdin,
        )
    };
    let action = match params.get("action") {
        None | Some(Value::Null) => None,
        Some(Value::String(a)) => Some(a.split('.').map(str::to_string).collect()),
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| RpcError::params("action must hold strings"))
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => {
            return Err(RpcError::params(
                "action must be a string or an array of strings",
            ))
        }
    };
    let mode = match params.get("mode").and_then(Value::as_str) {
        None => Tier::Readonly,
        Some(m) => m
            .parse::<Tier>()
            .map_err(|_| RpcError::params(format!("unknown mode {m:?}")))?,
    };
    Ok((
        connector,
        Request {
            kind,
            env,
            cwd,
            action,
            mode,
        },
        stdin,
    ))
}
