//! The results of `ping`, `spawn_list`, `spawn_kill`, `spawn_attach` and `metrics` as types: what the
//! daemon answers is serialized from them, and docs/protocol.schema.json's
//! `results` is generated from them.

use schemars::JsonSchema;
use serde::Serialize;

/// `ping`: answered at once, whatever else the connection waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PingResult {
    /// spawnd's version, as `spawnd --version` prints the number.
    pub version: String,
}

/// `spawn_list`: the caller's spawns, ordered by start time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SpawnListResult {
    pub spawns: Vec<SpawnListEntry>,
}

/// One spawn `spawn_list` lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SpawnListEntry {
    /// The handle's name.
    pub handle: String,
    /// `spawn_status`'s state: `running`, `exited`, `signaled`,
    /// `timed_out` or `failed`.
    pub state: String,
    /// The spawn's `label`, when it was given one.
    pub label: Option<String>,
    /// The connector's FQN.
    pub connector: String,
    /// The operation, for a `spawn_op` (null for a `spawn`).
    pub op: Option<String>,
    /// Made with `lease_ms`: it outlives its connection.
    pub detached: bool,
    /// This connection holds the handle.
    pub attached: bool,
    /// The time left on the lease of a detached spawn no connection holds.
    pub lease_ms_left: Option<u64>,
    /// The detach token of a detached spawn started by the caller's uid,
    /// for `spawn_attach`.
    pub token: Option<String>,
}

/// `spawn_kill`: `{}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct EmptyResult {}

/// `spawn_attach`: the handle taken up and its `spawn_status` state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct AttachResult {
    /// The handle.
    pub handle: String,
    /// Its state, as `spawn_status` names it.
    pub state: String,
}

/// `metrics`: the daemon's counters and histograms ([`crate::metrics`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct MetricsResult {
    /// Prometheus's text format (0.0.4), as `[server] metrics_file` holds it.
    pub text: String,
}
