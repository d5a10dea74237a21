//! What commands share: the operator config (from `--config`, `$SPAWND_CONFIG`
//! or built-in defaults), the invoking user as a `Caller`, and manifests read
//! from disk and validated against the config's ceilings.

use std::path::{Path, PathBuf};

use super::args::Cli;
use super::output::Failure;
use crate::config::{default_audit_path, default_connector_paths, Config};
use crate::failure::FailureKind;
use crate::manifest::{parse_manifest, LoadOptions, Manifest};
use crate::policy::Caller;

pub(crate) use crate::pipeline::load_audit_key;

/// The invoking user's home directory from the password database, looked up
/// once per process (the config's default audit path and the caller both
/// need it): `Ok(None)` when the user has no entry.
fn invoking_home() -> Result<Option<PathBuf>, nix::Error> {
    static HOME: std::sync::OnceLock<Result<Option<PathBuf>, nix::Error>> =
        std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        nix::unistd::User::from_uid(nix::unistd::getuid()).map(|u| u.map(|u| u.dir))
    })
    .clone()
}

/// The invoking user, with the home directory from the password database.
pub(crate) fn current_caller() -> Result<Caller, Failure> {
    let uid = nix::unistd::getuid();
    let home = invoking_home()
        .map_err(|e| Failure::config(format!("getpwuid({uid}): {e}")))?
        .ok_or_else(|| Failure::config(format!("uid {uid} has no entry in the password database, so `~` cannot be expanded; run as a user with a home directory")))?;
    Ok(Caller {
        uid: uid.as_raw(),
        gid: nix::unistd::getgid().as_raw(),
        pid: Some(std::process::id()),
        home,
        workspace: None,
        other_user_namespace: false,
        label: None,
        origin: std::sync::Arc::new(crate::origin::Origin::of_command()),
    })
}

/// The config file in force, if any.
pub(crate) fn config_path(cli: &Cli) -> Option<PathBuf> {
    cli.config.clone().or_else(|| {
        std::env::var_os("SPAWND_CONFIG")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    })
}

/// Loads the operator config, or the defaults when none is given.
pub(crate) fn load_config(cli: &Cli) -> Result<Config, Failure> {
    load_config_from(config_path(cli).as_deref())
}

/// Loads the config at `path`, or the defaults without one.
pub(crate) fn load_config_from(path: Option<&Path>) -> Result<Config, Failure> {
    let uid = nix::unistd::getuid().as_raw();
    let home = invoking_home().ok().flatten();
    let xdg = std::env::var("XDG_STATE_HOME").ok();
    let acts_as_root = uid == 0 && crate::kernel_features::privileged();
    let default_audit = default_audit_path(acts_as_root, xdg.as_deref(), home.as_deref());
    let data = std::env::var("XDG_DATA_HOME").ok();
    let config_home = std::env::var("XDG_CONFIG_HOME").ok();
    let connectors = default_connector_paths(
        uid,
        data.as_deref(),
        config_home.as_deref(),
        home.as_deref(),
    );
    let config = match path {
        // A config that cannot be read is a config problem (exit 4), missing
        // or not: the file named is the operator's, not a thing looked up.
        Some(path) => Config::load(path, default_audit).map_err(|e| match e {
            crate::config::ConfigError::Read { .. } => Failure::config(format!(
                "{e}; the config file is the one --config or $SPAWND_CONFIG names: create it, or point them at a readable file (with neither, the built-in defaults apply)"
            )),
            _ => Failure::config(e.to_string()),
        }),
        None => Config::defaults(default_audit).map_err(|e| Failure::internal(e.to_string())),
    }?;
    Ok(config.with_default_connector_paths(connectors))
}

/// The directory holding the manifest file `path`, resolved to its real
/// path: what its `{connector}/` paths expand against, so that they are
/// real paths too.
pub(crate) fn manifest_dir(path: &Path) -> Result<PathBuf, Failure> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::canonicalize(parent).map_err(|e| {
        Failure::from_io(
            &e,
            FailureKind::Config,
            format!("cannot resolve the directory of {}: {e}", path.display()),
        )
    })
}

/// Reads and validates a manifest file; its [`Manifest::dir`] is the
/// file's directory ([`manifest_dir`]).
pub(crate) fn load_manifest(path: &Path, config: &Config) -> Result<Manifest, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        let f = format!("cannot read manifest {}: {e}", path.display());
        if e.kind() == std::io::ErrorKind::NotFound {
            Failure::not_found(f)
        } else {
            Failure::config(f)
        }
    })?;
    let options = LoadOptions {
        max_wall_time_ms: config.sandbox.max_wall_time_ms,
    };
    let mut manifest = parse_manifest(&path.display().to_string(), &text, options)
        .map_err(|e| Failure::config(e.to_string()).with_details(&e))?;
    manifest.dir = Some(manifest_dir(path)?);
    tracing::debug!(
        file = %path.display(),
        connector = %manifest.connector.name,
        sha256 = %manifest.digest,
        operations = manifest.spawn.as_ref().map_or(0, |s| s.operations.len()),
        warnings = manifest.warnings.len(),
        "manifest loaded"
    );
    Ok(manifest)
}
