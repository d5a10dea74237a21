//! The operator config as written: serde types that refuse unknown keys.
//! `Config::parse` turns them into typed values.

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) audit: RawAudit,
    #[serde(default)]
    pub(super) server: RawServer,
    #[serde(default)]
    pub(super) access: Vec<RawAccess>,
    #[serde(default)]
    pub(super) credentials: Vec<RawBinding>,
    #[serde(default)]
    pub(super) disable: Vec<RawDisable>,
    #[serde(default)]
    pub(super) sandbox: RawSandbox,
    #[serde(default)]
    pub(super) network: RawNetwork,
    #[serde(default)]
    pub(super) connectors: RawConnectors,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAudit {
    pub(super) path: Option<PathBuf>,
    pub(super) rotate_bytes: Option<u64>,
    pub(super) keep_rotated: Option<u32>,
    pub(super) hmac_key_file: Option<PathBuf>,
    pub(super) heartbeat_secs: Option<u64>,
    pub(super) forward: Option<String>,
    pub(super) forward_socket: Option<PathBuf>,
    pub(super) previous_hmac_key_files: Option<Vec<PathBuf>>,
    pub(super) checkpoint_key_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub(super) socket: Option<PathBuf>,
    pub(super) socket_mode: Option<String>,
    pub(super) socket_group: Option<String>,
    pub(super) manifests: Option<Vec<PathBuf>>,
    pub(super) max_connections: Option<u32>,
    pub(super) max_connections_per_uid: Option<u32>,
    pub(super) max_frame_bytes: Option<u32>,
    pub(super) max_buffered_output_bytes: Option<u64>,
    pub(super) shutdown_grace_ms: Option<u64>,
    pub(super) frame_timeout_ms: Option<u64>,
    pub(super) idle_timeout_ms: Option<u64>,
    pub(super) refusal_window_ms: Option<u64>,
    pub(super) max_lease_ms: Option<u64>,
    pub(super) max_running_spawns: Option<u32>,
    pub(super) running_spawns_share: Option<u32>,
    pub(super) buffered_output_share_bytes: Option<u64>,
    pub(super) metrics_file: Option<PathBuf>,
    pub(super) metrics_interval_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAccess {
    pub(super) connector: String,
    #[serde(default)]
    pub(super) uids: Vec<u32>,
    #[serde(default)]
    pub(super) gids: Vec<u32>,
    #[serde(default)]
    pub(super) other_user_namespaces: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBinding {
    pub(super) connector: String,
    pub(super) key: Option<String>,
    pub(super) source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDisable {
    pub(super) connector: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSandbox {
    pub(super) system_paths: Option<Vec<PathBuf>>,
    pub(super) run_as: Option<String>,
    pub(super) run_as_everyone: Option<bool>,
    pub(super) require_program_hash: Option<bool>,
    pub(super) max_wall_time_ms: Option<u64>,
    pub(super) landlock_min_abi: Option<u32>,
    pub(super) limits: Option<String>,
    pub(super) workspace: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNetwork {
    pub(super) enabled: Option<bool>,
    pub(super) allow_cidrs: Option<Vec<String>>,
    pub(super) deny_cidrs: Option<Vec<String>>,
    pub(super) connect_timeout_ms: Option<u64>,
    pub(super) idle_timeout_ms: Option<u64>,
    pub(super) max_connections_per_spawn: Option<u32>,
    pub(super) connections_share: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConnectors {
    pub(super) store: Option<PathBuf>,
    pub(super) keyring: Option<PathBuf>,
}
