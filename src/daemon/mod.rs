//! `spawnd serve`: the supervisor daemon. Connector runtimes do not fork;
//! they ask spawnd over a Unix socket, JSON-RPC 2.0 one object per line
//! (docs/daemon.md), and read results by handle.
//!
//! Process layout: before anything else, `serve` forks the single-threaded
//! [`crate::spawner`] (sandboxes are cloned only there); then it starts a
//! tokio runtime. The socket comes from systemd (`LISTEN_FDS`) or is created
//! at `[server] socket` (mode `socket_mode`, group `socket_group`, in a 0750
//! directory); readiness is reported with `sd_notify`. Each connection is a
//! task: peer credentials from `SO_PEERCRED`, frames capped at
//! `max_frame_bytes`, at most `max_connections` at once (the next one is told
//! `overloaded` and closed). SIGTERM or SIGINT stops accepting, lets running
//! spawns finish for `[server] shutdown_grace_ms` (10 s), kills what is left, and exits once
//! every exit record is written. SIGHUP re-reads the config and manifests;
//! if any of them is bad, the old ones stay in force, the log says why and
//! `health` says the manifests are stale until a reload succeeds (the
//! socket and limits chosen at start stay as they are).
//!
//! Every method follows `[[access]]`: a spawn is refused unless the peer may
//! act for its connector (`spawn_check` too, unrecorded: [`check`]), `health`
//! and `connectors_status` unless it may act
//! for some connector (root and spawnd's own uid always may), and
//! `connectors_status` lists only the connectors it may act for. Refusals a
//! stranger can repeat at will are recorded once per window with a count
//! ([`refusals`]); a window's count is written when it closes (checked every
//! second), when a connection of that peer ends, and when the daemon stops.

mod check;
mod connection;
mod detached;
mod frames;
mod handles;
mod metrics_file;
mod notifications;
mod stdin;

mod origin;
pub(crate) mod params;
mod peer;
pub(crate) mod refusals;
pub(crate) mod request;
mod results;
pub(crate) mod spawns;

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;

use crate::config::manifests::{load_manifests, ManifestChanges, Manifests};
use crate::config::Config;
use crate::rpc::{self, RpcError};
use crate::shares::{Limits, Pool, Refusal, Tenants};
use crate::spawner::Spawner;
pub(crate) use peer::Peer;

/// The protocol version `health` reports.
pub(crate) const PROTOCOL_VERSION: u32 = 1;

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ServeError(pub String);

/// The config and manifests in force; SIGHUP swaps in new ones.
pub(crate) struct Loaded {
    /// The operator config, shared with every spawn under it.
    pub config: Arc<Config>,
    /// The manifests served, by connector name.
    pub manifests: Manifests,
}

/// Re-reads the config (from where it first came) for SIGHUP.
pub(crate) type Reload = Box<dyn Fn() -> Result<Config, String> + Send + Sync>;

/// What every connection shares.
pub(crate) struct Daemon {
    /// The config and manifests in force.
    loaded: std::sync::RwLock<Arc<Loaded>>,
    /// How to re-read the config.
    reload: Reload,
    /// spawnd's own binary (for `health`'s user-namespace probe).
    pub exe: PathBuf,
    /// The spawner every sandbox is launched through (replaced if it dies).
    spawner: std::sync::Mutex<Arc<Spawner>>,
    /// Who is present to claim a share of the pools below: uids with a
    /// connection open, or refused lately.
    pub tenants: Arc<Tenants>,
    /// Spawns running at once, shared among uids (back-pressure: the next
    /// one is `overloaded`).
    pub running: Arc<Pool>,
    /// Every started spawn, for the kill at the end of the shutdown grace.
    pub started: std::sync::Mutex<Vec<std::sync::Weak<spawns::Handle>>>,
    /// Bytes of output (and stdin on its way) reserved by every handle
    /// together, shared among uids.
    pub buffered: Arc<Pool>,
    /// The relay's connections of every spawn together, shared among uids.
    pub relay_connections: Arc<Pool>,
    /// Permits for `health` and `connectors_status`.
    side_work: Semaphore,
    /// Refusals counted per peer and window.
    refusals: std::sync::Mutex<refusals::Tallies>,
    /// The last reload refused since one succeeded: the manifests in force
    /// are stale until the next good reload.
    refused_reload: std::sync::Mutex<Option<RefusedReload>>,
    /// Detached handles no connection holds, for their leases.
    detached: detached::Registry,
    /// Set when the shutdown begins: no spawn starts after it.
    stopping: std::sync::atomic::AtomicBool,
    /// The watch over the live audit log, checked at each heartbeat.
    watch: std::sync::Mutex<Option<crate::audit::watch::Watch>>,
}

/// A SIGHUP whose config or manifests were refused.
#[derive(Clone)]
struct RefusedReload {
    /// Why, as logged.
    error: String,
    /// When, RFC 3339 UTC.
    at: String,
}

impl Daemon {
    /// The spawner to launch through. If the last one died (its sandboxes
    /// died with it, and their spawns ended with an error), a new one is
    /// started by executing spawnd, so the daemon keeps serving.
    pub(crate) fn spawner(&self) -> Result<Arc<Spawner>, String> {
        let mut current = match self.spawner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if !current.is_alive() {
            tracing::error!(
                pid = current.pid(),
                "the spawner died; its sandboxes died with it; starting a new one"
            );
            // `/proc/self/exe`: the binary this daemon runs, even if the
            // file at its path has been replaced since (an upgrade).
            let fresh = Spawner::start_exec(std::path::Path::new("/proc/self/exe"))
                .map_err(|e| format!("the spawner died and a new one could not be started: {e}"))?;
            *current = Arc::new(fresh);
        }
        Ok(Arc::clone(&current))
    }

    /// The config and manifests in force now.
    pub(crate) fn loaded(&self) -> Arc<Loaded> {
        match self.loaded.read() {
            Ok(l) => Arc::clone(&l),
            Err(p) => Arc::clone(&p.into_inner()),
        }
    }

    /// SIGHUP: re-reads the config and every manifest; on any error the old
    /// ones stay in force and the error is logged.
    fn reload(&self) {
        let fresh = (self.reload)().and_then(|config| {
            let manifests = load_manifests(&config)?;
            Ok(Loaded {
                config: Arc::new(config),
                manifests,
            })
        });
        match fresh {
            Ok(l) => {
                let old = self.loaded();
                let recorded = self.record(
                    crate::audit::Kind::Lifecycle,
                    crate::audit::lifecycle::reload(&served(&old), &served(&l)),
                );
                if let Err(e) = recorded {
                    let e = format!("the reload could not be recorded in the audit log: {e}");
                    tracing::error!(error = %e, "reload refused; the previous config and manifests stay in force");
                    self.set_refused_reload(Some(RefusedReload {
                        error: e,
                        at: crate::audit::log::now_rfc3339_millis(),
                    }));
                    return;
                }
                let changes = ManifestChanges::between(&old.manifests, &l.manifests);
                if changes.is_empty() {
                    tracing::info!(
                        manifests = l.manifests.len(),
                        "reloaded the config and manifests; no connector changed"
                    );
                } else {
                    tracing::info!(
                        manifests = l.manifests.len(),
                        added = ?changes.added,
                        removed = ?changes.removed,
                        changed = ?changes.changed,
                        "reloaded the config and manifests"
                    );
                }
                if let Ok(mut slot) = self.loaded.write() {
                    *slot = Arc::new(l);
                }
                self.set_refused_reload(None);
            }
            Err(e) => {
                tracing::error!(error = %e, "reload refused; the previous config and manifests stay in force");
                if let Err(lost) = self.record(
                    crate::audit::Kind::Lifecycle,
                    crate::audit::lifecycle::reload_refused(&e),
                ) {
                    tracing::error!(error = %lost, "the refused reload could not be recorded in the audit log");
                }
                self.set_refused_reload(Some(RefusedReload {
                    error: e,
                    at: crate::audit::log::now_rfc3339_millis(),
                }));
            }
        }
    }

    /// Appends one of the daemon's own records (a lifecycle event, a
    /// heartbeat) durably, to the log of the config in force.
    fn record(
        &self,
        kind: crate::audit::Kind,
        body: serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), String> {
        let log = crate::pipeline::open_audit(&self.loaded().config).map_err(|f| f.message)?;
        log.append(kind, None, body)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// The `start` record: what is served, and the spawns an earlier
    /// daemon left without an exit record. Nothing is served unless it is
    /// on disk.
    fn record_start(&self) -> Result<(), ServeError> {
        let loaded = self.loaded();
        let log = crate::pipeline::open_audit(&loaded.config).map_err(|f| ServeError(f.message))?;
        let unfinished = crate::audit::lifecycle::unfinished(log.path()).map_err(|e| {
            ServeError(format!(
                "cannot read the audit log {} back for spawns left without an exit: {e}",
                log.path().display()
            ))
        })?;
        if !unfinished.spawns.is_empty() {
            tracing::warn!(
                spawns = unfinished.spawns.len() + unfinished.more,
                "an earlier daemon left spawns without an exit record; the start record lists them"
            );
        }
        let body = crate::audit::lifecycle::start(
            loaded.config.source.as_deref(),
            &served(&loaded),
            loaded.config.audit.heartbeat_secs,
            &unfinished,
        );
        log.append(crate::audit::Kind::Lifecycle, None, body)
            .map_err(|e| ServeError(format!("the start record: {e}")))?;
        self.check_log(&log);
        Ok(())
    }

    /// Checks that the live log only grew since the last check (the first
    /// check only looks), and records a `note` in it when it did not.
    fn check_log(&self, log: &crate::audit::AuditLog) {
        let path = log.path();
        let mut slot = match self.watch.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let watch = match slot.as_mut() {
            Some(w) if w.log() == path => w,
            _ => slot.insert(crate::audit::watch::Watch::new(path)),
        };
        match watch.check(&|record| log.seals(record)) {
            Ok(None) => {}
            Ok(Some(changed)) => {
                tracing::error!(change = %changed.describe(), "the audit log changed under the daemon");
                if let Err(e) = log.append(crate::audit::Kind::Note, None, changed.note()) {
                    tracing::error!(error = %e, "the note of the change could not be written");
                }
            }
            Err(e) => {
                tracing::error!(log = %path.display(), error = %e, "cannot read the audit log back to check it")
            }
        }
    }

    fn set_refused_reload(&self, refused: Option<RefusedReload>) {
        match self.refused_reload.lock() {
            Ok(mut slot) => *slot = refused,
            Err(p) => *p.into_inner() = refused,
        }
    }

    /// The last refused reload, while no reload has succeeded since.
    fn refused_reload(&self) -> Option<RefusedReload> {
        match self.refused_reload.lock() {
            Ok(slot) => slot.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Why nothing may run any more: an audit record's flush failed (an
    /// exit record's may fail after its caller had the result). Fail
    /// closed until spawnd is restarted; `health` says why.
    pub(crate) fn audit_failure(&self) -> Option<String> {
        crate::audit::group_sync::stopped_by_a_failed_sync()
    }

    /// Checks that the live log only grew since the last heartbeat, then
    /// writes a heartbeat record (proof that the daemon was alive and
    /// writing at this time).
    fn heartbeat(&self) {
        let loaded = self.loaded();
        let log = match crate::pipeline::open_audit(&loaded.config) {
            Ok(log) => log,
            Err(f) => {
                tracing::error!(error = %f.message, "the heartbeat record could not be written");
                return;
            }
        };
        self.check_log(&log);
        let body = crate::audit::lifecycle::heartbeat(
            loaded.config.audit.heartbeat_secs,
            self.running.in_use(),
        );
        if let Err(e) = log.append(crate::audit::Kind::Heartbeat, None, body) {
            tracing::error!(error = %e, "the heartbeat record could not be written");
        }
    }

    /// Kills every sandbox still running (their exit records follow).
    fn kill_all(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::Release);
        let list = match self.started.lock() {
            Ok(l) => l.clone(),
            Err(p) => p.into_inner().clone(),
        };
        for h in list.iter().filter_map(std::sync::Weak::upgrade) {
            h.kill_for("shutdown", None);
        }
    }
}

/// The manifests in force as the lifecycle records name them.
fn served(loaded: &Loaded) -> Vec<crate::audit::lifecycle::Served> {
    crate::config::manifests::all(&loaded.manifests)
        .map(|m| crate::audit::lifecycle::Served {
            connector: m.connector.name.to_string(),
            path: m.source.clone(),
            sha256: m.digest.to_string(),
            version: m.connector.version.to_string(),
            provenance: crate::plan::Provenance::of(m),
        })
        .collect()
}

/// `health` and `connectors_status` (each probes or hashes programs) running
/// at once; more callers wait their turn.
pub(crate) const SIDE_WORK: usize = 2;

/// The daemon's shared pools, each with its whole and a uid's share from
/// the config (read at start): running spawns, buffered output, relayed
/// connections.
struct Pools {
    running: Arc<Pool>,
    buffered: Arc<Pool>,
    relay_connections: Arc<Pool>,
}

impl Pools {
    fn new(config: &Config, tenants: &Arc<Tenants>) -> Pools {
        let server = &config.server;
        let pool =
            |what, whole, share| Pool::new(Limits { what, whole, share }, Arc::clone(tenants));
        Pools {
            running: pool(
                "running spawns",
                (
                    "server.max_running_spawns",
                    u64::from(server.max_running_spawns),
                ),
                (
                    "server.running_spawns_share",
                    u64::from(server.running_spawns_share),
                ),
            ),
            buffered: pool(
                "bytes of buffered output",
                (
                    "server.max_buffered_output_bytes",
                    server.max_buffered_output_bytes,
                ),
                (
                    "server.buffered_output_share_bytes",
                    server.buffered_output_share_bytes,
                ),
            ),
            relay_connections: pool(
                "relayed connections",
                (
                    "relayed_connections_per_process",
                    u64::from(crate::config::MAX_CONNECTIONS_PER_PROCESS),
                ),
                (
                    "network.connections_share",
                    u64::from(config.network.connections_share),
                ),
            ),
        }
    }
}

/// A pool's refusal as -32003 (`overloaded`), its `data` naming the limit,
/// its value and what the caller and everyone use; `then` says what to do.
pub(crate) fn overloaded(refusal: &Refusal, then: &str) -> RpcError {
    RpcError::with_data(
        rpc::OVERLOADED,
        format!("{refusal}; {then}"),
        serde_json::to_value(refusal).unwrap_or_default(),
    )
}

/// Raises this process's soft limit of open files to its hard limit: the
/// daemon holds descriptors for every connection, handle, sandbox and
/// relayed network connection at once, and 1024 (a common soft default) is
/// few for that. Sandboxes get their own limit (`max_open_files`).
fn raise_open_files_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => {
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                tracing::warn!("cannot raise the open files limit from {soft} to {hard}: {e}");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot read the open files limit: {e}"),
    }
}

/// Runs the daemon until SIGTERM/SIGINT, serving `manifests` (loaded from
/// the config's `[server] manifests` by the caller, which tells a bad entry
/// apart as a config problem). Must be called single-threaded (it forks the
/// spawner first). `socket` overrides `[server] socket`.
pub(crate) fn serve(
    config: Config,
    manifests: Manifests,
    reload: Reload,
    socket: Option<PathBuf>,
) -> Result<(), ServeError> {
    crate::sys::bound_allocator_retention();
    raise_open_files_limit();
    // Before any other process starts: on a cgroup v2 host the daemon may
    // move itself into a leaf of the cgroup systemd delegated to it.
    if config.sandbox.limits == crate::config::LimitsMode::Auto {
        let limits = crate::pipeline::limits::settle_for_daemon();
        match &limits.why_not_cgroups {
            None => tracing::info!("sandboxes' limits via {}", limits.via.name()),
            Some(why) => tracing::warn!("sandboxes' limits via rlimits, per process: {why}"),
        }
    }
    let spawner = Spawner::start().map_err(|e| ServeError(format!("spawner: {e}")))?;
    let exe = std::env::current_exe()
        .map_err(|e| ServeError(format!("cannot find spawnd's own binary: {e}")))?;
    let socket = socket.unwrap_or_else(|| config.server.socket.clone());
    let window = Duration::from_millis(config.server.refusal_window_ms);
    let tenants = Arc::new(Tenants::default());
    let pools = Pools::new(&config, &tenants);
    let max_running = config.server.max_running_spawns as usize;
    let daemon = Arc::new(Daemon {
        loaded: std::sync::RwLock::new(Arc::new(Loaded {
            config: Arc::new(config),
            manifests,
        })),
        reload,
        exe,
        spawner: std::sync::Mutex::new(Arc::new(spawner)),
        tenants,
        running: pools.running,
        started: std::sync::Mutex::new(Vec::new()),
        buffered: pools.buffered,
        relay_connections: pools.relay_connections,
        side_work: Semaphore::new(SIDE_WORK),
        refusals: std::sync::Mutex::new(refusals::Tallies::new(window)),
        refused_reload: std::sync::Mutex::new(None),
        detached: detached::Registry::default(),
        stopping: std::sync::atomic::AtomicBool::new(false),
        watch: std::sync::Mutex::new(None),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Every running spawn holds one; refusals and `health` or
        // `connectors_status` take a few more. Beyond that, work waits.
        .max_blocking_threads(max_running + 2 * SIDE_WORK)
        .thread_name("spawnd-worker")
        .enable_all()
        .build()
        .map_err(|e| ServeError(format!("async runtime: {e}")))?;
    // Before the start record: a daemon whose start is on record records
    // its stop, however soon a SIGTERM comes.
    let signals = {
        let _in_runtime = runtime.enter();
        Signals::install()?
    };
    daemon.record_start()?;
    let result = runtime.block_on(accept_loop(Arc::clone(&daemon), &socket, signals));
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// The listening socket: systemd's, or one created at `path`.
fn listener(daemon: &Daemon, path: &Path) -> Result<(UnixListener, Option<PathBuf>), ServeError> {
    let mut fds = listenfd::ListenFd::from_env();
    if let Ok(Some(std_listener)) = fds.take_unix_listener(0) {
        std_listener
            .set_nonblocking(true)
            .map_err(|e| ServeError(format!("socket from systemd: {e}")))?;
        let l = UnixListener::from_std(std_listener)
            .map_err(|e| ServeError(format!("socket from systemd: {e}")))?;
        return Ok((l, None));
    }
    if let Some(dir) = path.parent() {
        if !dir.exists() {
            create_socket_dir(daemon, dir)?;
        }
    }
    // A socket left by a daemon that died is replaced; anything else is not ours.
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            return Err(ServeError(format!(
                "{} exists and is not a socket; remove it or choose another [server] socket",
                path.display()
            )));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(ServeError(format!(
                "{} is in use by a running daemon",
                path.display()
            )));
        }
        let _ = std::fs::remove_file(path);
    }
    let l = bind_with_final_mode(daemon, path)?;
    Ok((l, Some(path.to_path_buf())))
}

/// Creates the socket's directory: mode 0750 whatever the umask, its group
/// `[server] socket_group` when one is set, so that the group's members,
/// whom the socket's own mode lets connect, can reach it.
fn create_socket_dir(daemon: &Daemon, dir: &Path) -> Result<(), ServeError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)
        .map_err(|e| ServeError(format!("create {}: {e}", dir.display())))?;
    if let Some(group) = &daemon.loaded().config.server.socket_group {
        let gid = socket_gid(group)?;
        nix::unistd::chown(dir, None, Some(gid))
            .map_err(|e| ServeError(format!("chgrp {group} {}: {e}", dir.display())))?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750))
        .map_err(|e| ServeError(format!("chmod 0750 {}: {e}", dir.display())))
}

/// The gid of `[server] socket_group`.
fn socket_gid(group: &str) -> Result<nix::unistd::Gid, ServeError> {
    nix::unistd::Group::from_name(group)
        .ok()
        .flatten()
        .map(|g| g.gid)
        .ok_or_else(|| ServeError(format!("[server] socket_group {group:?}: no such group")))
}

/// Binds the socket where no one else can reach it — in a fresh 0700
/// directory beside `path` — gives it its mode and group there, and only
/// then renames it into place: it is never reachable with the mode the
/// umask gave it.
fn bind_with_final_mode(daemon: &Daemon, path: &Path) -> Result<UnixListener, ServeError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let staging = dir.join(format!(".spawnd-bind-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .map_err(|e| ServeError(format!("create {}: {e}", staging.display())))?;
    let bound = staging.join("spawnd.sock");
    let made = (|| {
        let l = UnixListener::bind(&bound)
            .map_err(|e| ServeError(format!("bind {}: {e}", path.display())))?;
        std::fs::set_permissions(
            &bound,
            std::fs::Permissions::from_mode(daemon.loaded().config.server.socket_mode),
        )
        .map_err(|e| ServeError(format!("chmod {}: {e}", path.display())))?;
        if let Some(group) = &daemon.loaded().config.server.socket_group {
            let gid = socket_gid(group)?;
            nix::unistd::chown(&bound, None, Some(gid))
                .map_err(|e| ServeError(format!("chgrp {group} {}: {e}", path.display())))?;
        }
        std::fs::rename(&bound, path)
            .map_err(|e| ServeError(format!("move the socket to {}: {e}", path.display())))?;
        Ok(l)
    })();
    let _ = std::fs::remove_dir_all(&staging);
    made
}

/// The signals the daemon handles: SIGTERM and SIGINT stop it, SIGHUP
/// reloads its manifests.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers; called inside the runtime.
    fn install() -> Result<Signals, ServeError> {
        use tokio::signal::unix::{signal, SignalKind};
        let handler = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| ServeError(format!("{name} handler: {e}")))
        };
        Ok(Signals {
            term: handler(SignalKind::terminate(), "SIGTERM")?,
            int: handler(SignalKind::interrupt(), "SIGINT")?,
            hup: handler(SignalKind::hangup(), "SIGHUP")?,
        })
    }
}

async fn accept_loop(daemon: Arc<Daemon>, path: &Path, signals: Signals) -> Result<(), ServeError> {
    let Signals {
        mut term,
        mut int,
        mut hup,
    } = signals;
    let (listener, created) = listener(&daemon, path)?;
    let max = daemon.loaded().config.server.max_connections.max(1) as usize;
    let slots = Arc::new(Semaphore::new(max));
    let per_uid = daemon.loaded().config.server.max_connections_per_uid.max(1) as usize;
    // Told to connections at the end: answer what is in hand, read no more.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // Windows of counted refusals are closed (and their counts written)
    // within a second of their end.
    let mut sweep = tokio::time::interval(Duration::from_secs(1));
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let beat = Duration::from_secs(daemon.loaded().config.audit.heartbeat_secs);
    let mut heartbeat = tokio::time::interval_at(tokio::time::Instant::now() + beat, beat);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let metrics_file = daemon.loaded().config.server.metrics_file.clone();
    let metrics_writer = metrics_file.clone().map(|file| {
        let every = Duration::from_millis(daemon.loaded().config.server.metrics_interval_ms);
        tokio::spawn(metrics_file::write_every(file, every))
    });
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    {
        let loaded = daemon.loaded();
        tracing::info!(
            socket = %path.display(),
            max_connections = max,
            manifests = ?loaded.config.server.manifests,
            connectors = ?loaded.manifests.keys().collect::<Vec<_>>(),
            "serving"
        );
    }
    let signal = loop {
        tokio::select! {
            _ = sweep.tick() => {
                daemon.detached.expire();
                refusals::close_due(&daemon).await;
            }
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    admit(&daemon, stream, &slots, (max, per_uid), stop_rx.clone());
                }
            }
            _ = heartbeat.tick() => {
                let d = Arc::clone(&daemon);
                let _ = tokio::task::spawn_blocking(move || d.heartbeat()).await;
            }
            _ = hup.recv() => {
                let d = Arc::clone(&daemon);
                let _ = tokio::task::spawn_blocking(move || d.reload()).await;
            }
            _ = term.recv() => break "SIGTERM",
            _ = int.recv() => break "SIGINT",
        }
    };
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    daemon
        .stopping
        .store(true, std::sync::atomic::Ordering::Release);
    drop(listener);
    if let Some(p) = created {
        let _ = std::fs::remove_file(p);
    }
    shut_down(&daemon, signal, sweep, stop_tx, &slots, max).await;
    if let (Some(writer), Some(file)) = (metrics_writer, metrics_file) {
        writer.abort();
        let _ = tokio::task::spawn_blocking(move || metrics_file::write_logged(&file)).await;
    }
    tracing::info!("stopped");
    Ok(())
}

/// Serves an accepted connection, or tells it why not: its uid has
/// `per_uid` connections open, or the daemon `max`, all its slots.
fn admit(
    daemon: &Arc<Daemon>,
    stream: UnixStream,
    slots: &Arc<Semaphore>,
    (max, per_uid): (usize, usize),
    stop: tokio::sync::watch::Receiver<bool>,
) {
    // Dates the acceptance for the peer's identity by pid (daemon/peer.rs).
    let accepted_at = peer::Accepted::now();
    let uid = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .map(|c| c.uid());
    let Ok(uid) = uid else { return };
    let Some(arrival) = daemon.tenants.arrive(uid, per_uid) else {
        tokio::spawn(refuse_overloaded(stream, RpcError::with_data(rpc::OVERLOADED, format!(
            "uid {uid} has {per_uid} connections open to this daemon ([server] max_connections_per_uid); close some or try later"
        ), serde_json::json!({"limit": "server.max_connections_per_uid", "max": per_uid, "caller_uses": per_uid}))));
        return;
    };
    match Arc::clone(slots).try_acquire_owned() {
        Ok(permit) => {
            let daemon = Arc::clone(daemon);
            tokio::spawn(async move {
                connection::serve_connection(daemon, stream, accepted_at, arrival, stop).await;
                drop(permit);
            });
        }
        Err(_) => {
            // The refused connection is not one of the uid's open ones.
            drop(arrival);
            let mine = daemon.tenants.connections_of(uid);
            tokio::spawn(refuse_overloaded(
                stream,
                RpcError::with_data(
                    rpc::OVERLOADED,
                    format!(
                "the daemon has {max} connections open ([server] max_connections); try later"
            ),
                    serde_json::json!({"limit": "server.max_connections", "max": max, "caller_uses": mine, "all_use": max}),
                ),
            ));
        }
    }
}

/// The end of `serve` once a signal asked for it: running spawns finish
/// within the shutdown grace or are killed, every exit record written;
/// then connections answer what they hold and close, the refusals counted
/// are written, and the stop record.
async fn shut_down(
    daemon: &Arc<Daemon>,
    signal: &'static str,
    mut sweep: tokio::time::Interval,
    stop_tx: tokio::sync::watch::Sender<bool>,
    slots: &Semaphore,
    max: usize,
) {
    // Running spawns may finish within the grace period; then they are
    // killed. Either way each one's exit record is written before we leave.
    let grace = Duration::from_millis(daemon.loaded().config.server.shutdown_grace_ms);
    tracing::info!(
        signal,
        running = daemon.running.in_use(),
        grace_ms = grace.as_millis() as u64,
        "stopping: no new connections; letting running spawns finish"
    );
    // Leases still run out during the grace.
    let ended = async {
        let mut all_ended = std::pin::pin!(daemon.running.until_empty());
        loop {
            tokio::select! {
                _ = &mut all_ended => return,
                _ = sweep.tick() => daemon.detached.expire(),
            }
        }
    };
    if tokio::time::timeout(grace, ended).await.is_err() {
        tracing::warn!("grace period over: killing the sandboxes still running");
        daemon.kill_all();
        let _ = tokio::time::timeout(Duration::from_secs(10), daemon.running.until_empty()).await;
    }
    // Every spawn has ended: connections answer what they are answering and close.
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), slots.acquire_many(max as u32)).await;
    refusals::close_all(daemon).await;
    let d = Arc::clone(daemon);
    let recorded = tokio::task::spawn_blocking(move || {
        d.record(
            crate::audit::Kind::Lifecycle,
            crate::audit::lifecycle::stop(signal),
        )
    })
    .await;
    if let Ok(Err(e)) = recorded {
        tracing::error!(error = %e, "the stop record could not be written");
    }
}

async fn refuse_overloaded(mut stream: UnixStream, e: RpcError) {
    let _ = stream
        .write_all(format!("{}\n", rpc::failure(&Value::Null, &e)).as_bytes())
        .await;
}
