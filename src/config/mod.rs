//! The operator config (docs/operations.md): one TOML file, every key optional, unknown
//! keys refused. Parsed into typed values here; reading the file and choosing
//! the default audit location are the only I/O, at the edges of this module.
//! Credential sources are locators (`file:…`, `exec:…`), never secret values.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::egress::address_policy::Cidr;
use crate::manifest::limits::{LIMIT_SPECS, WALL_TIME_HARD_CEILING_MS};
use crate::manifest::{Fqn, Manifest};
use crate::policy::AccessRule;

mod credentials;
pub(crate) mod manifests;

/// Where `[server] manifests` looks when the config does not say.
pub(crate) const DEFAULT_MANIFESTS: &str = "/etc/spawnd/manifests";
mod raw;
#[cfg(test)]
mod tests;

pub(crate) use credentials::{CredentialBinding, CredentialSource};
use raw::{
    RawAccess, RawBinding, RawConfig, RawConnectors, RawDisable, RawNetwork, RawSandbox, RawServer,
};

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// TOML syntax or an unknown key.
    #[error("config {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (with line and column).
        message: String,
    },
    /// A value is out of range or malformed.
    #[error("config {path}: {key}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Dotted key.
        key: String,
        /// What is wrong and how to fix it.
        message: String,
    },
}

/// `[audit]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditConfig {
    /// The append-only log (`None`: no usable default location).
    pub path: Option<PathBuf>,
    /// Rotate when the file exceeds this size.
    pub rotate_bytes: u64,
    /// Rotated files kept; at each rotation the oldest beyond this are
    /// removed (and a `note` record says so, so that `verify` still holds).
    pub keep_rotated: u32,
    /// Key for a keyed (HMAC) chain.
    pub hmac_key_file: Option<PathBuf>,
    /// Seconds between the daemon's `heartbeat` records.
    pub heartbeat_secs: u64,
    /// A live copy of every record to the host's log service.
    pub forward: Option<LogService>,
    /// The service's socket, when not its usual one.
    pub forward_socket: Option<PathBuf>,
    /// Retired HMAC keys: a chain last sealed with one of them goes on
    /// under `hmac_key_file` after a key rotation note sealed by both, and
    /// `audit verify` takes them into its keyring.
    pub previous_hmac_key_files: Vec<PathBuf>,
    /// The ed25519 signing key `audit checkpoint` signs with.
    pub checkpoint_key_file: Option<PathBuf>,
}

/// A host log service audit records are copied to (`[audit] forward`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogService {
    /// RFC 3164 datagrams to a syslog socket (`/dev/log`).
    Syslog,
    /// journald's native protocol.
    Journald,
}

/// `[server]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerConfig {
    /// Socket path.
    pub socket: PathBuf,
    /// Socket mode, shown as the octal string the config takes (`"0660"`).
    #[serde(serialize_with = "octal_mode")]
    pub socket_mode: u32,
    /// Socket group.
    pub socket_group: Option<String>,
    /// Manifest files or directories.
    pub manifests: Vec<PathBuf>,
    /// Concurrent connections.
    pub max_connections: u32,
    /// Connections one uid may have open at once.
    pub max_connections_per_uid: u32,
    /// Largest request line.
    pub max_frame_bytes: u32,
    /// Output the daemon may hold for all handles together (reserved at
    /// spawn time from each operation's caps).
    pub max_buffered_output_bytes: u64,
    /// After SIGTERM: how long running spawns may go on before they are killed.
    pub shutdown_grace_ms: u64,
    /// How long a request line may take to arrive once its first byte has.
    pub frame_timeout_ms: u64,
    /// How long a connection with no handle may stay silent.
    pub idle_timeout_ms: u64,
    /// The window in which a peer's repeated refusals of one reason (a
    /// stranger's, an unknown connector, invalid names) are counted in one
    /// record rather than written one by one.
    pub refusal_window_ms: u64,
    /// The longest `lease_ms` a spawn may ask for (0: no detached spawns).
    pub max_lease_ms: u64,
    /// Spawns running at once, detached ones included (read at start).
    pub max_running_spawns: u32,
    /// Each uid's share of `max_running_spawns`, kept for it while another
    /// uid would take more than its own (read at start; `crate::shares`).
    pub running_spawns_share: u32,
    /// Each uid's share of `max_buffered_output_bytes` (read at start).
    pub buffered_output_share_bytes: u64,
    /// Where the daemon writes its metrics for the node exporter's
    /// textfile collector (none: only the `metrics` method answers them).
    pub metrics_file: Option<PathBuf>,
    /// How often `metrics_file` is written.
    pub metrics_interval_ms: u64,
}

/// `[network]`: what manifests' network grants may reach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetworkConfig {
    /// Whether spawns with network grants may run at all (the gate refuses
    /// them with `network_disabled` otherwise).
    pub enabled: bool,
    /// Private and special ranges a granted name may resolve to and be
    /// dialed at (loopback, link-local and metadata addresses never are).
    pub allow_cidrs: Vec<Cidr>,
    /// Ranges never dialed, whatever the grants say.
    pub deny_cidrs: Vec<Cidr>,
    /// How long resolving a granted name may take, and connecting to each
    /// of its addresses.
    pub connect_timeout_ms: u64,
    /// A relayed connection that moves nothing either way for this long
    /// is closed.
    pub idle_timeout_ms: u64,
    /// Relayed connections one spawn may have open at once; more are
    /// reset (`too_many_connections`).
    pub max_connections_per_spawn: u32,
    /// Each uid's share of the relayed connections of every spawn the
    /// daemon serves together (read at start; `crate::shares`).
    pub connections_share: u32,
}

/// `[network] connect_timeout_ms` when the config does not say.
pub(crate) const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;
/// `[network] idle_timeout_ms` when the config does not say.
pub(crate) const DEFAULT_NETWORK_IDLE_TIMEOUT_MS: u64 = 300_000;
/// `[network] max_connections_per_spawn` when the config does not say.
pub(crate) const DEFAULT_MAX_CONNECTIONS_PER_SPAWN: u32 = 64;
/// The relay's limit for all spawns of one process together.
pub(crate) const MAX_CONNECTIONS_PER_PROCESS: u32 = 1024;
/// `[network] connections_share` when the config does not say: a quarter
/// of the process's.
pub(crate) const DEFAULT_CONNECTIONS_SHARE: u32 = MAX_CONNECTIONS_PER_PROCESS / 4;
/// `[server] max_running_spawns` when the config does not say.
pub(crate) const DEFAULT_MAX_RUNNING_SPAWNS: u32 = 64;
/// The most `[server] max_running_spawns` may be: each running spawn
/// holds a thread of the daemon.
pub(crate) const MAX_RUNNING_SPAWNS_LIMIT: u32 = 1024;
/// `[server] running_spawns_share` when the config does not say.
pub(crate) const DEFAULT_RUNNING_SPAWNS_SHARE: u32 = 16;
/// `[server] max_buffered_output_bytes` when the config does not say.
pub(crate) const DEFAULT_MAX_BUFFERED_OUTPUT_BYTES: u64 = 256 << 20;
/// `[server] buffered_output_share_bytes` when the config does not say: a
/// quarter of the default whole.
pub(crate) const DEFAULT_BUFFERED_OUTPUT_SHARE_BYTES: u64 = DEFAULT_MAX_BUFFERED_OUTPUT_BYTES / 4;
/// The most `[network] max_connections_per_spawn` may be: a quarter of
/// the process's, so no one spawn takes every slot.
pub(crate) const MAX_CONNECTIONS_PER_SPAWN_LIMIT: u32 = MAX_CONNECTIONS_PER_PROCESS / 4;

/// `[sandbox]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxConfig {
    /// Read-only system runtime bound into every sandbox.
    pub system_paths: Vec<PathBuf>,
    /// The identity a root caller's program runs as (65534:65534 if unset).
    pub run_as: Option<(u32, u32)>,
    /// `run_as` for every caller's program, not only root's. The program
    /// may then use whatever that identity may inside the scopes, which can
    /// be more than its caller may (files that identity owns).
    pub run_as_everyone: bool,
    /// Refuse programs without a pinned hash.
    pub require_program_hash: bool,
    /// The wall-time ceiling a manifest may ask for.
    pub max_wall_time_ms: u64,
    /// The lowest Landlock ABI a spawn may run under (default 1); below it nothing runs.
    pub landlock_min_abi: u32,
    /// How memory and process counts are limited.
    pub limits: LimitsMode,
    /// The workspace `{workspace}/` scopes expand against when the
    /// invocation names none (`spawnd run --workspace` does): absolute,
    /// without `..`.
    pub workspace: Option<PathBuf>,
}

/// `[sandbox] limits`: which mechanism bounds memory and process counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitsMode {
    /// The documented order (docs/operations.md): cgroup controllers when spawnd can use them, else rlimits.
    Auto,
    /// Always rlimits (`RLIMIT_AS`, `RLIMIT_NPROC`; a root caller then runs as 65534).
    /// Saves the cgroup v1 attach, which costs a kernel RCU grace period (up to
    /// ~15 ms here) when no other attach happened recently.
    Rlimits,
}

/// `[connectors]`: where installed connectors and the publisher keys
/// trusted for their signatures live (docs/provenance.md). `None` when
/// the config names none and no default applies (no home directory).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct ConnectorsConfig {
    /// The content-addressed store.
    pub store: Option<PathBuf>,
    /// The keyring.
    pub keyring: Option<PathBuf>,
}

/// Where the store and the keyring live when the config does not say
/// (docs/operations.md): under /var/lib and /etc for root, else in the
/// user's XDG data and config directories.
pub(crate) fn default_connector_paths(
    uid: u32,
    xdg_data_home: Option<&str>,
    xdg_config_home: Option<&str>,
    home: Option<&Path>,
) -> ConnectorsConfig {
    if uid == 0 {
        return ConnectorsConfig {
            store: Some("/var/lib/spawnd/connectors".into()),
            keyring: Some("/etc/spawnd/keyring".into()),
        };
    }
    let under = |xdg: Option<&str>, fallback: &str, rel: &str| match (
        xdg.filter(|x| x.starts_with('/')),
        home,
    ) {
        (Some(xdg), _) => Some(Path::new(xdg).join(rel)),
        (None, Some(home)) => Some(home.join(fallback).join(rel)),
        (None, None) => None,
    };
    ConnectorsConfig {
        store: under(xdg_data_home, ".local/share", "spawnd/connectors"),
        keyring: under(xdg_config_home, ".config", "spawnd/keyring"),
    }
}

/// The operator config, typed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Config {
    /// The file it came from (`None`: built-in defaults).
    pub source: Option<PathBuf>,
    /// Audit trail.
    pub audit: AuditConfig,
    /// Daemon.
    pub server: ServerConfig,
    /// Who may act for which connector (daemon only).
    #[serde(serialize_with = "serialize_access")]
    pub access: Vec<AccessRule>,
    /// Credential bindings.
    pub credentials: Vec<CredentialBinding>,
    /// Disabled connectors.
    pub disabled: Vec<Fqn>,
    /// Sandbox settings.
    pub sandbox: SandboxConfig,
    /// `[network]`.
    pub network: NetworkConfig,
    /// `[connectors]`.
    pub connectors: ConnectorsConfig,
}

fn serialize_access<S: serde::Serializer>(rules: &[AccessRule], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(rules.len()))?;
    for r in rules {
        seq.serialize_element(
            &serde_json::json!({"connector": r.connector, "uids": r.uids, "gids": r.gids, "other_user_namespaces": r.other_user_namespaces}),
        )?;
    }
    seq.end()
}

/// `[audit] keep_rotated` when the config does not say: with the default
/// `rotate_bytes`, about 1 GiB of audit history besides the live file.
pub(crate) const DEFAULT_KEEP_ROTATED: u32 = 10;

/// `[server] max_lease_ms` when the config does not say: 10 minutes.
pub(crate) const DEFAULT_MAX_LEASE_MS: u64 = 600_000;
/// `[server] refusal_window_ms` when the config does not say.
pub(crate) const DEFAULT_REFUSAL_WINDOW_MS: u64 = 60_000;

/// The default read-only system runtime (docs/operations.md).
pub const DEFAULT_SYSTEM_PATHS: &[&str] = &[
    "/usr",
    "/lib",
    "/lib64",
    "/bin",
    "/sbin",
    "/etc/ld.so.cache",
    // Certificates and TLS configuration, never the directories beside
    // them that hold private keys (`/etc/ssl/private`,
    // `/etc/pki/entitlement`, `/etc/pki/tls/private`).
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
    "/etc/pki/tls/certs",
    "/etc/pki/tls/openssl.cnf",
    "/etc/pki/ca-trust",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/services",
    "/etc/protocols",
    "/etc/mime.types",
];

/// Where the audit log lives when the config does not say (docs/operations.md).
/// `acts_as_root`: spawnd is root over other users here (the host's root,
/// or a container's that maps them); root of a user namespace that maps
/// only itself (`unshare -r`) is one user like any other, whose log is
/// under its `XDG_STATE_HOME` or home.
pub(crate) fn default_audit_path(
    acts_as_root: bool,
    xdg_state_home: Option<&str>,
    home: Option<&Path>,
) -> Option<PathBuf> {
    if acts_as_root {
        return Some(PathBuf::from("/var/log/spawnd/audit.jsonl"));
    }
    match (xdg_state_home.filter(|x| x.starts_with('/')), home) {
        (Some(xdg), _) => Some(Path::new(xdg).join("spawnd/audit.jsonl")),
        (None, Some(home)) => Some(home.join(".local/state/spawnd/audit.jsonl")),
        (None, None) => None,
    }
}

impl Config {
    /// Parses config text. `default_audit` is used when `[audit] path` is absent.
    pub fn parse(
        path: &Path,
        text: &str,
        default_audit: Option<PathBuf>,
    ) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.into(),
            message: e.to_string().trim().to_string(),
        })?;
        Config::from_raw(Some(path), raw, default_audit)
    }

    /// The built-in defaults.
    pub fn defaults(default_audit: Option<PathBuf>) -> Result<Config, ConfigError> {
        Config::from_raw(None, RawConfig::default(), default_audit)
    }

    /// Reads and parses `path`.
    pub fn load(path: &Path, default_audit: Option<PathBuf>) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        Config::parse(path, &text, default_audit)
    }

    /// The typed config from the raw one: the keys checked one step each,
    /// in this order (the first bad key is the one reported), and the
    /// defaults filled in.
    fn from_raw(
        path: Option<&Path>,
        raw: RawConfig,
        default_audit: Option<PathBuf>,
    ) -> Result<Config, ConfigError> {
        let at = Origin(path);
        let access = access_rules(&raw.access, &at)?;
        let credentials = credential_bindings(&raw.credentials, &at)?;
        let disabled = disabled_connectors(&raw.disable, &at)?;
        let socket_mode = socket_mode(raw.server.socket_mode.as_deref(), &at)?;
        let max_wall_time_ms = max_wall_time_ms(raw.sandbox.max_wall_time_ms, &at)?;
        let keep_rotated = keep_rotated(raw.audit.keep_rotated, &at)?;
        let heartbeat_secs = heartbeat_secs(raw.audit.heartbeat_secs, &at)?;
        let forward = forward(raw.audit.forward.as_deref(), &at)?;
        let refusal_window_ms = refusal_window_ms(raw.server.refusal_window_ms, &at)?;
        let max_lease_ms = max_lease_ms(raw.server.max_lease_ms, &at)?;
        let shares = server_shares(&raw.server, &at)?;
        let (run_as, run_as_everyone) = run_as(&raw.sandbox, &at)?;
        let limits = limits_mode(raw.sandbox.limits.as_deref(), &at)?;
        let system_paths = system_paths(raw.sandbox.system_paths, &at)?;
        let network = network_config(raw.network, &at)?;
        let connectors = connectors_config(raw.connectors, &at)?;
        Ok(Config {
            source: path.map(Path::to_path_buf),
            audit: AuditConfig {
                path: raw.audit.path.or(default_audit),
                rotate_bytes: raw.audit.rotate_bytes.unwrap_or(100 << 20),
                keep_rotated,
                hmac_key_file: raw.audit.hmac_key_file,
                heartbeat_secs,
                forward,
                forward_socket: raw.audit.forward_socket,
                previous_hmac_key_files: raw.audit.previous_hmac_key_files.unwrap_or_default(),
                checkpoint_key_file: raw.audit.checkpoint_key_file,
            },
            server: server_config(
                raw.server,
                socket_mode,
                refusal_window_ms,
                max_lease_ms,
                shares,
            ),
            access,
            credentials,
            disabled,
            sandbox: SandboxConfig {
                system_paths,
                run_as,
                run_as_everyone,
                require_program_hash: raw.sandbox.require_program_hash.unwrap_or(false),
                max_wall_time_ms,
                landlock_min_abi: raw.sandbox.landlock_min_abi.unwrap_or(1).max(1),
                limits,
                workspace: workspace_dir(raw.sandbox.workspace, &at)?,
            },
            network,
            connectors,
        })
    }

    /// Fills the `[connectors]` locations the config leaves out with `defaults`.
    pub fn with_default_connector_paths(mut self, defaults: ConnectorsConfig) -> Config {
        if self.connectors.store.is_none() {
            self.connectors.store = defaults.store;
        }
        if self.connectors.keyring.is_none() {
            self.connectors.keyring = defaults.keyring;
        }
        self
    }

    /// Whether the operator disabled `connector`.
    pub fn is_disabled(&self, connector: &Fqn) -> bool {
        self.disabled.contains(connector)
    }

    /// The operator's binding for `connector`'s credential `key`: one naming
    /// the key, else one without a key (the connector's only credential).
    pub fn binding_for(&self, connector: &Fqn, key: &str) -> Option<&CredentialBinding> {
        let mut of_connector = self
            .credentials
            .iter()
            .filter(|b| &b.connector == connector);
        of_connector
            .clone()
            .find(|b| b.key.as_deref() == Some(key))
            .or_else(|| of_connector.find(|b| b.key.is_none()))
    }

    /// The credential keys of `manifest` that have a binding.
    pub fn bound_credentials(&self, manifest: &Manifest) -> BTreeSet<String> {
        let keys = manifest
            .spawn
            .as_ref()
            .map(|s| s.credential_env_keys.clone())
            .unwrap_or_default();
        let mut bound = BTreeSet::new();
        for b in self
            .credentials
            .iter()
            .filter(|b| b.connector == manifest.connector.name)
        {
            match &b.key {
                Some(k) if keys.contains(k) => {
                    bound.insert(k.clone());
                }
                None if keys.len() == 1 => {
                    bound.extend(keys.iter().cloned());
                }
                _ => {}
            }
        }
        bound
    }
}

/// Where a config came from, for errors that name the file (or
/// `<defaults>`) and the dotted key.
struct Origin<'a>(Option<&'a Path>);

impl Origin<'_> {
    /// `key` is invalid: `message` says what is wrong and how to fix it.
    fn invalid(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.0.unwrap_or(Path::new("<defaults>")).into(),
            key: key.into(),
            message: message.into(),
        }
    }

    /// The connector name `s`, given at `key`.
    fn fqn(&self, key: &str, s: &str) -> Result<Fqn, ConfigError> {
        Fqn::parse(s).map_err(|m| self.invalid(key, format!("`{s}`: {m}")))
    }
}

/// `[[access]]`: who may act for which connector through the daemon.
fn access_rules(raw: &[RawAccess], at: &Origin<'_>) -> Result<Vec<AccessRule>, ConfigError> {
    raw.iter()
        .map(|a| {
            Ok(AccessRule {
                connector: at.fqn("access.connector", &a.connector)?,
                uids: a.uids.clone(),
                gids: a.gids.clone(),
                other_user_namespaces: a.other_user_namespaces,
            })
        })
        .collect()
}

/// `[[credentials]]`: each binding's source parsed (a locator, never a
/// value), then its connector.
fn credential_bindings(
    raw: &[RawBinding],
    at: &Origin<'_>,
) -> Result<Vec<CredentialBinding>, ConfigError> {
    raw.iter()
        .map(|b| {
            let source = CredentialSource::parse(&b.source)
                .map_err(|m| at.invalid("credentials.source", m))?;
            Ok(CredentialBinding {
                connector: at.fqn("credentials.connector", &b.connector)?,
                key: b.key.clone(),
                source,
            })
        })
        .collect()
}

/// `[[disable]]`: the connectors the operator turned off.
fn disabled_connectors(raw: &[RawDisable], at: &Origin<'_>) -> Result<Vec<Fqn>, ConfigError> {
    raw.iter()
        .map(|d| at.fqn("disable.connector", &d.connector))
        .collect()
}

/// Writes a mode as the config spells it, an octal string (`"0660"`), so
/// `config show` prints what an operator would type rather than its decimal.
fn octal_mode<S: serde::Serializer>(mode: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{mode:04o}"))
}

/// `[server] socket_mode`: an octal mode string, 0660 when unset.
fn socket_mode(raw: Option<&str>, at: &Origin<'_>) -> Result<u32, ConfigError> {
    let Some(m) = raw else { return Ok(0o660) };
    u32::from_str_radix(m, 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| {
            at.invalid(
                "server.socket_mode",
                format!("`{m}` is not an octal mode like \"0660\""),
            )
        })
}

/// `[sandbox] max_wall_time_ms`: the manifests' wall-time ceiling, at most
/// the hard ceiling no config can raise.
fn max_wall_time_ms(raw: Option<u64>, at: &Origin<'_>) -> Result<u64, ConfigError> {
    let max_wall_time_ms = raw.unwrap_or(LIMIT_SPECS[2].ceiling);
    if max_wall_time_ms == 0 || max_wall_time_ms > WALL_TIME_HARD_CEILING_MS {
        return Err(at.invalid(
            "sandbox.max_wall_time_ms",
            format!("must be between 1 and {WALL_TIME_HARD_CEILING_MS}"),
        ));
    }
    Ok(max_wall_time_ms)
}

/// `[audit] heartbeat_secs` when the config does not say: 5 minutes.
pub(crate) const DEFAULT_HEARTBEAT_SECS: u64 = 300;

/// `[audit] heartbeat_secs`: 1 second to a day.
fn heartbeat_secs(raw: Option<u64>, at: &Origin<'_>) -> Result<u64, ConfigError> {
    let secs = raw.unwrap_or(DEFAULT_HEARTBEAT_SECS);
    if !(1..=86_400).contains(&secs) {
        return Err(at.invalid(
            "audit.heartbeat_secs",
            format!("{secs} is outside 1 to 86400 (seconds between the daemon's heartbeat records; the default is {DEFAULT_HEARTBEAT_SECS})"),
        ));
    }
    Ok(secs)
}

/// `[audit] forward`: `syslog` or `journald`.
fn forward(raw: Option<&str>, at: &Origin<'_>) -> Result<Option<LogService>, ConfigError> {
    match raw {
        None => Ok(None),
        Some("syslog") => Ok(Some(LogService::Syslog)),
        Some("journald") => Ok(Some(LogService::Journald)),
        Some(other) => Err(at.invalid(
            "audit.forward",
            format!("{other:?} is not a log service: use \"syslog\" (/dev/log) or \"journald\" (journald's native socket), or leave it out"),
        )),
    }
}

/// `[audit] keep_rotated`: at least the file just rotated.
fn keep_rotated(raw: Option<u32>, at: &Origin<'_>) -> Result<u32, ConfigError> {
    let keep_rotated = raw.unwrap_or(DEFAULT_KEEP_ROTATED);
    if keep_rotated == 0 {
        return Err(at.invalid(
            "audit.keep_rotated",
            "must be at least 1: the file just rotated is kept until the next rotation (raise it to keep more history)",
        ));
    }
    Ok(keep_rotated)
}

/// `[server] max_lease_ms`: at most a day; 0 refuses detached spawns.
fn max_lease_ms(raw: Option<u64>, at: &Origin<'_>) -> Result<u64, ConfigError> {
    let max_lease_ms = raw.unwrap_or(DEFAULT_MAX_LEASE_MS);
    if max_lease_ms > 86_400_000 {
        return Err(at.invalid(
            "server.max_lease_ms",
            "must be at most 86400000 (a day); 0 refuses detached spawns",
        ));
    }
    Ok(max_lease_ms)
}

/// `[server] refusal_window_ms`: between 100 ms and an hour.
fn refusal_window_ms(raw: Option<u64>, at: &Origin<'_>) -> Result<u64, ConfigError> {
    let refusal_window_ms = raw.unwrap_or(DEFAULT_REFUSAL_WINDOW_MS);
    if !(100..=3_600_000).contains(&refusal_window_ms) {
        return Err(at.invalid(
            "server.refusal_window_ms",
            "must be between 100 and 3600000 (one hour)",
        ));
    }
    Ok(refusal_window_ms)
}

/// `[sandbox] run_as` and `run_as_everyone`: an unprivileged `UID:GID`, and
/// whether it is every caller's (which needs `run_as`).
fn run_as(raw: &RawSandbox, at: &Origin<'_>) -> Result<(Option<(u32, u32)>, bool), ConfigError> {
    let run_as = raw
        .run_as
        .as_deref()
        .map(|r| {
            parse_uid_gid(r).ok_or_else(|| {
                at.invalid(
                    "sandbox.run_as",
                    format!("`{r}` must be \"UID:GID\" with numbers, e.g. \"65534:65534\""),
                )
            })
        })
        .transpose()?;
    let run_as_everyone = raw.run_as_everyone.unwrap_or(false);
    if run_as_everyone && run_as.is_none() {
        return Err(at.invalid(
            "sandbox.run_as_everyone",
            "needs [sandbox] run_as: the identity every program would run as",
        ));
    }
    if run_as.is_some_and(|(u, g)| u == 0 || g == 0) {
        return Err(at.invalid("sandbox.run_as", "must be an unprivileged identity, not 0"));
    }
    Ok((run_as, run_as_everyone))
}

/// `[network]`: enabled unless `enabled = false`; each CIDR strict (no
/// host bits), named with its key when wrong; timeouts above zero; at most
/// [`MAX_CONNECTIONS_PER_SPAWN_LIMIT`] connections per spawn, at least one.
fn network_config(raw: RawNetwork, at: &Origin<'_>) -> Result<NetworkConfig, ConfigError> {
    let cidrs = |list: Option<Vec<String>>, key: &str| -> Result<Vec<Cidr>, ConfigError> {
        list.unwrap_or_default()
            .iter()
            .map(|text| {
                text.parse::<Cidr>()
                    .map_err(|e| at.invalid(key, format!("`{text}`: {e}")))
            })
            .collect()
    };
    let positive = |value: Option<u64>, default: u64, key: &str| match value {
        Some(0) => Err(at.invalid(key, "must be above 0")),
        value => Ok(value.unwrap_or(default)),
    };
    let max_connections_per_spawn = match raw.max_connections_per_spawn {
        Some(n) if n == 0 || n > MAX_CONNECTIONS_PER_SPAWN_LIMIT => {
            return Err(at.invalid(
                "network.max_connections_per_spawn",
                format!(
                    "must be from 1 to {MAX_CONNECTIONS_PER_SPAWN_LIMIT} (a quarter of the {MAX_CONNECTIONS_PER_PROCESS} connections one spawnd relays at once)"
                ),
            ))
        }
        n => n.unwrap_or(DEFAULT_MAX_CONNECTIONS_PER_SPAWN),
    };
    let connections_share = match raw.connections_share {
        Some(n) if n == 0 || n > MAX_CONNECTIONS_PER_PROCESS => {
            return Err(at.invalid(
                "network.connections_share",
                format!("must be from 1 to {MAX_CONNECTIONS_PER_PROCESS} (the connections one spawnd relays at once)"),
            ))
        }
        n => n.unwrap_or(DEFAULT_CONNECTIONS_SHARE),
    };
    Ok(NetworkConfig {
        enabled: raw.enabled.unwrap_or(true),
        allow_cidrs: cidrs(raw.allow_cidrs, "network.allow_cidrs")?,
        deny_cidrs: cidrs(raw.deny_cidrs, "network.deny_cidrs")?,
        connect_timeout_ms: positive(
            raw.connect_timeout_ms,
            DEFAULT_CONNECT_TIMEOUT_MS,
            "network.connect_timeout_ms",
        )?,
        idle_timeout_ms: positive(
            raw.idle_timeout_ms,
            DEFAULT_NETWORK_IDLE_TIMEOUT_MS,
            "network.idle_timeout_ms",
        )?,
        max_connections_per_spawn,
        connections_share,
    })
}

/// `[connectors]`: each location absolute, without `.` or `..`.
fn connectors_config(raw: RawConnectors, at: &Origin<'_>) -> Result<ConnectorsConfig, ConfigError> {
    let check = |dir: Option<PathBuf>, key: &str| match dir {
        Some(d) if !(d.is_absolute() && crate::manifest::paths_plain(&d)) => Err(at.invalid(
            key,
            format!(
                "`{}` must be an absolute path without `.` or `..`",
                d.display()
            ),
        )),
        d => Ok(d),
    };
    Ok(ConnectorsConfig {
        store: check(raw.store, "connectors.store")?,
        keyring: check(raw.keyring, "connectors.keyring")?,
    })
}

/// `[sandbox] workspace`: absolute, and without `.` or `..`.
fn workspace_dir(raw: Option<PathBuf>, at: &Origin<'_>) -> Result<Option<PathBuf>, ConfigError> {
    match raw {
        None => Ok(None),
        Some(dir) if dir.is_absolute() && crate::manifest::paths_plain(&dir) => Ok(Some(dir)),
        Some(dir) => Err(at.invalid(
            "sandbox.workspace",
            format!(
                "`{}` must be an absolute path without `.` or `..`",
                dir.display()
            ),
        )),
    }
}

/// `[sandbox] limits`: `auto` (the default) or `rlimits`.
fn limits_mode(raw: Option<&str>, at: &Origin<'_>) -> Result<LimitsMode, ConfigError> {
    match raw {
        None | Some("auto") => Ok(LimitsMode::Auto),
        Some("rlimits") => Ok(LimitsMode::Rlimits),
        Some(other) => Err(at.invalid(
            "sandbox.limits",
            format!("`{other}` is not \"auto\" or \"rlimits\""),
        )),
    }
}

/// `[sandbox] system_paths`: absolute paths without `..`, none of them
/// /proc, /dev or /sys or a parent of one; [`DEFAULT_SYSTEM_PATHS`] when
/// unset.
fn system_paths(raw: Option<Vec<PathBuf>>, at: &Origin<'_>) -> Result<Vec<PathBuf>, ConfigError> {
    let system_paths =
        raw.unwrap_or_else(|| DEFAULT_SYSTEM_PATHS.iter().map(PathBuf::from).collect());
    if let Some(bad) = system_paths.iter().find(|p| {
        !p.is_absolute()
            || p.components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
    }) {
        return Err(at.invalid(
            "sandbox.system_paths",
            format!("`{}` must be absolute, without `..`", bad.display()),
        ));
    }
    // The sandbox makes its own /proc and /dev, and has no /sys (where
    // its root is staged): binding the host's would undo that.
    if let Some(bad) = system_paths.iter().find(|p| {
        ["/proc", "/dev", "/sys"]
            .iter()
            .any(|m| p.starts_with(m) || Path::new(m).starts_with(p))
    }) {
        return Err(at.invalid(
            "sandbox.system_paths",
            format!(
                "`{}` is or contains /proc, /dev or /sys, which the sandbox makes itself (or leaves out); name paths such as /usr or /etc/ssl instead",
                bad.display()
            ),
        ));
    }
    Ok(system_paths)
}

/// `[server]`'s running spawns and their share, and the share of the
/// buffered output: each share at least 1 and at most its whole.
struct ServerShares {
    max_running_spawns: u32,
    running_spawns_share: u32,
    buffered_output_share_bytes: u64,
}

fn server_shares(raw: &RawServer, at: &Origin<'_>) -> Result<ServerShares, ConfigError> {
    let max_running_spawns = raw.max_running_spawns.unwrap_or(DEFAULT_MAX_RUNNING_SPAWNS);
    if !(1..=MAX_RUNNING_SPAWNS_LIMIT).contains(&max_running_spawns) {
        return Err(at.invalid(
            "server.max_running_spawns",
            format!("must be from 1 to {MAX_RUNNING_SPAWNS_LIMIT} (each running spawn holds a thread of the daemon)"),
        ));
    }
    let running_spawns_share = raw
        .running_spawns_share
        .unwrap_or(DEFAULT_RUNNING_SPAWNS_SHARE.min(max_running_spawns));
    if !(1..=max_running_spawns).contains(&running_spawns_share) {
        return Err(at.invalid(
            "server.running_spawns_share",
            format!("must be from 1 to server.max_running_spawns ({max_running_spawns})"),
        ));
    }
    let whole = raw
        .max_buffered_output_bytes
        .unwrap_or(DEFAULT_MAX_BUFFERED_OUTPUT_BYTES);
    let buffered_output_share_bytes = raw
        .buffered_output_share_bytes
        .unwrap_or(DEFAULT_BUFFERED_OUTPUT_SHARE_BYTES.min(whole));
    if buffered_output_share_bytes == 0 || buffered_output_share_bytes > whole {
        return Err(at.invalid(
            "server.buffered_output_share_bytes",
            format!("must be from 1 to server.max_buffered_output_bytes ({whole})"),
        ));
    }
    Ok(ServerShares {
        max_running_spawns,
        running_spawns_share,
        buffered_output_share_bytes,
    })
}

/// `[server]` with its defaults filled in, `socket_mode`,
/// `refusal_window_ms`, `max_lease_ms` and the shares already checked.
fn server_config(
    raw: RawServer,
    socket_mode: u32,
    refusal_window_ms: u64,
    max_lease_ms: u64,
    shares: ServerShares,
) -> ServerConfig {
    ServerConfig {
        socket: raw
            .socket
            .unwrap_or_else(|| "/run/spawnd/spawnd.sock".into()),
        socket_mode,
        socket_group: raw.socket_group,
        manifests: raw
            .manifests
            .unwrap_or_else(|| vec![DEFAULT_MANIFESTS.into()]),
        max_connections: raw.max_connections.unwrap_or(256),
        max_connections_per_uid: raw.max_connections_per_uid.unwrap_or(64).max(1),
        max_frame_bytes: raw.max_frame_bytes.unwrap_or(1 << 20),
        max_buffered_output_bytes: raw
            .max_buffered_output_bytes
            .unwrap_or(DEFAULT_MAX_BUFFERED_OUTPUT_BYTES),
        shutdown_grace_ms: raw.shutdown_grace_ms.unwrap_or(10_000),
        frame_timeout_ms: raw.frame_timeout_ms.unwrap_or(10_000).max(1),
        idle_timeout_ms: raw.idle_timeout_ms.unwrap_or(120_000).max(1),
        refusal_window_ms,
        max_lease_ms,
        max_running_spawns: shares.max_running_spawns,
        running_spawns_share: shares.running_spawns_share,
        buffered_output_share_bytes: shares.buffered_output_share_bytes,
        metrics_file: raw.metrics_file,
        metrics_interval_ms: raw
            .metrics_interval_ms
            .unwrap_or(15_000)
            .clamp(1_000, 3_600_000),
    }
}

fn parse_uid_gid(text: &str) -> Option<(u32, u32)> {
    let (u, g) = text.split_once(':')?;
    Some((u.parse().ok()?, g.parse().ok()?))
}
