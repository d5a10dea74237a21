//! Raw TOML → `Manifest`. Parses strictly (unknown keys refused), then checks
//! every field and collects every problem with its position. Pure: the input is
//! the text, the output a value or the list of problems.

use std::ops::Range;

use sha2::{Digest, Sha256};
use toml::Spanned;

use super::error::{Collector, ManifestError};
use super::exec::check_exec;
use super::limits::{Limits, LIMIT_SPECS, MIN_TMPFS_BYTES, WALL_TIME_HARD_CEILING_MS};
use super::model::{
    ConnectorId, Fqn, Informational, Manifest, Oauth2Info, OnViolation, Sha256Digest, SpawnGrant,
    Warning,
};
use super::network::{check_grants, warn_of_special_literals};
use super::ops::validate_operations;
use super::raw::{RawLimits, RawManifest, RawSpawn};
use super::scopes::{
    check_broad_scopes, check_cwd_in_scopes, check_env_list, check_env_set, check_nested_scopes,
    check_path, check_scope_path, check_scopes,
};

/// Operator choices that shape validation.
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions {
    /// The wall-time ceiling a manifest may ask for (`[sandbox] max_wall_time_ms`).
    pub max_wall_time_ms: u64,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            max_wall_time_ms: LIMIT_SPECS[2].ceiling,
        }
    }
}

/// The validation pass: problems and warnings gathered as fields are checked.
pub(super) struct Checker<'a> {
    pub(super) problems: Collector<'a>,
    pub(super) warnings: Vec<Warning>,
    pub(super) options: LoadOptions,
}

impl Checker<'_> {
    pub(super) fn error(
        &mut self,
        span: Range<usize>,
        key: &str,
        message: impl Into<String>,
        hint: &str,
    ) {
        let hint = (!hint.is_empty()).then_some(hint);
        self.problems.push(span, key, message, hint);
    }

    pub(super) fn warn(&mut self, key: &str, message: impl Into<String>) {
        self.warnings.push(Warning {
            key: key.to_string(),
            message: message.into(),
        });
    }
}

/// Parses and validates manifest `text`; `source` names it in messages.
pub fn parse_manifest(
    source: &str,
    text: &str,
    options: LoadOptions,
) -> Result<Manifest, ManifestError> {
    let fail = |problems| ManifestError {
        file: source.to_string(),
        problems,
    };
    let raw: RawManifest = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            let mut c = Collector::new(text);
            let span = e.span().unwrap_or(0..0);
            let message = e.message().trim().to_string();
            let hint = if message.contains("unknown field") {
                Some("remove the key or fix its spelling; docs/manifest.md describes every key")
            } else {
                None
            };
            c.push(span, &toml_key_at(text, e.span()), message, hint);
            return Err(fail(c.finish()));
        }
    };
    let mut checker = Checker {
        problems: Collector::new(text),
        warnings: Vec::new(),
        options,
    };
    let connector = check_connector(&mut checker, &raw);
    let info = informational(&mut checker, &raw);
    let spawn = raw
        .capabilities
        .spawn
        .as_ref()
        .map(|s| check_spawn(&mut checker, s));
    if !checker.problems.is_empty() {
        return Err(fail(checker.problems.finish()));
    }
    match (connector, spawn) {
        (Some(connector), Some(Some(spawn))) => Ok(build(
            source,
            text,
            connector,
            info,
            Some(spawn),
            checker.warnings,
        )),
        (Some(connector), None) => Ok(build(source, text, connector, info, None, checker.warnings)),
        _ => Err(fail(checker.problems.finish())),
    }
}

fn build(
    source: &str,
    text: &str,
    connector: ConnectorId,
    info: Informational,
    spawn: Option<SpawnGrant>,
    warnings: Vec<Warning>,
) -> Manifest {
    Manifest {
        source: source.to_string(),
        dir: dir_of_source(source),
        digest: Sha256Digest(Sha256::digest(text.as_bytes()).into()),
        connector,
        info,
        spawn,
        warnings,
        verified: None,
    }
}

/// The directory of `source` when it is a file's absolute path without
/// `.` or `..` (`/etc/spawnd/manifests/x.toml` gives
/// `/etc/spawnd/manifests`): where that manifest's `{connector}` paths
/// point. A loader that names the file otherwise sets [`Manifest::dir`]
/// itself.
fn dir_of_source(source: &str) -> Option<std::path::PathBuf> {
    let path = std::path::Path::new(source);
    if !path.is_absolute() || !super::paths::paths_plain(path) {
        return None;
    }
    path.parent().map(std::path::Path::to_path_buf)
}

/// The line's key for a parse error (best effort: the text before `=`).
fn toml_key_at(text: &str, span: Option<Range<usize>>) -> String {
    let Some(span) = span else {
        return "(document)".into();
    };
    let start = text
        .get(..span.start)
        .and_then(|t| t.rfind('\n'))
        .map_or(0, |i| i + 1);
    let line = text
        .get(start..)
        .and_then(|t| t.lines().next())
        .unwrap_or("");
    let key = line.split('=').next().unwrap_or("").trim();
    if key.is_empty() {
        "(document)".into()
    } else {
        key.to_string()
    }
}

fn check_connector(c: &mut Checker, raw: &RawManifest) -> Option<ConnectorId> {
    let Some(conn) = &raw.connector else {
        c.error(
            0..0,
            "connector",
            "the [connector] table is required",
            "add [connector] with name = \"github://owner/repo\" and version = \"0.1.0\"",
        );
        return None;
    };
    let conn = conn.get_ref();
    let name = Fqn::parse(conn.name.get_ref())
        .map_err(|why| {
            c.error(
                conn.name.span(),
                "connector.name",
                why,
                "e.g. name = \"github://acme/gitcrawl\"",
            )
        })
        .ok();
    let version = semver::Version::parse(conn.version.get_ref())
        .map_err(|e| {
            c.error(
                conn.version.span(),
                "connector.version",
                format!("not strict SemVer: {e}"),
                "write MAJOR.MINOR.PATCH, e.g. \"1.2.3\"; ranges and `latest` are not allowed",
            )
        })
        .ok();
    let provenance_hash = conn.provenance_hash.as_ref().and_then(|h| {
        h.get_ref()
            .parse::<Sha256Digest>()
            .map_err(|why| c.error(h.span(), "connector.provenance_hash", why, ""))
            .ok()
    });
    Some(ConnectorId {
        name: name?,
        version: version?,
        provenance_hash,
    })
}

fn informational(c: &mut Checker, raw: &RawManifest) -> Informational {
    let caps = &raw.capabilities;
    let credential = caps.credential.as_ref();
    if let Some(kind) = credential.map(|cr| &cr.kind) {
        let ok = !kind.get_ref().is_empty()
            && kind
                .get_ref()
                .chars()
                .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_');
        if !ok {
            c.error(
                kind.span(),
                "capabilities.credential.kind",
                "must be a lowercase kind such as `api_key`, `oauth2` or `basic`",
                "",
            );
        }
    }
    if let Some(fwd) = &raw.forwarder {
        if fwd.get_ref() != "builtin://spawn-forwarder" {
            c.error(
                fwd.span(),
                "forwarder",
                format!("unknown forwarder `{}`", fwd.get_ref()),
                "the only forwarder is \"builtin://spawn-forwarder\"",
            );
        } else if caps.spawn.is_none() {
            c.error(
                fwd.span(),
                "forwarder",
                "a forwarder manifest needs a [capabilities.spawn] table",
                "declare the programs and operations it forwards to",
            );
        }
    }
    Informational {
        network_hosts: caps
            .network
            .as_ref()
            .map(|n| n.hosts.clone())
            .unwrap_or_default(),
        credential_kind: credential.map(|cr| cr.kind.get_ref().clone()),
        credential_scope: credential.and_then(|cr| cr.scope.clone()),
        credential_header: credential.and_then(|cr| match (&cr.header, &cr.format) {
            (None, None) => None,
            (h, f) => Some(format!(
                "{}: {}",
                h.as_deref().unwrap_or("Authorization"),
                f.as_deref().unwrap_or("Bearer {key}")
            )),
        }),
        oauth2: credential
            .and_then(|cr| cr.oauth2.as_ref())
            .map(|o| Oauth2Info {
                authorize_url: o.authorize_url.clone(),
                token_url: o.token_url.clone(),
                client_id: o.client_id.clone(),
                scopes: o.scopes.clone(),
                has_client_secret: o.client_secret.is_some(),
            }),
        runtime_imports: caps
            .runtime
            .as_ref()
            .map(|r| r.imports.clone())
            .unwrap_or_default(),
        intents: raw
            .provides
            .as_ref()
            .map(|p| p.intents.clone())
            .unwrap_or_default(),
        forwarder: raw.forwarder.as_ref().map(|f| f.get_ref().clone()),
    }
}

fn check_spawn(c: &mut Checker, spawn: &Spanned<RawSpawn>) -> Option<SpawnGrant> {
    let s = spawn.get_ref();
    let env_passthrough = check_env_list(c, &s.env_passthrough, "env_passthrough");
    let credential_env_keys = check_env_list(c, &s.credential_env_keys, "credential_env_keys");
    if let Some(keys) = &credential_env_keys {
        for (key, spanned) in keys.iter().zip(&s.credential_env_keys) {
            if !env_passthrough.as_ref().is_some_and(|p| p.contains(key)) {
                c.error(
                    spanned.span(),
                    "capabilities.spawn.credential_env_keys",
                    format!("`{key}` is not listed in env_passthrough"),
                    "every credential key must also be in env_passthrough",
                );
            }
        }
    }
    let env_set = check_env_set(
        c,
        s,
        env_passthrough.as_deref().unwrap_or(&[]),
        credential_env_keys.as_deref().unwrap_or(&[]),
    );
    let fs_read = check_scopes(c, &s.fs_read, "fs_read");
    let fs_write = check_scopes(c, &s.fs_write, "fs_write");
    let fs_exec = check_scopes(c, &s.fs_exec, "fs_exec");
    // A socket names a host service, never a place in the workspace.
    let unix_sockets: Vec<super::paths::ScopePath> = s
        .unix_sockets
        .iter()
        .filter_map(|p| check_path(c, p, "capabilities.spawn.unix_sockets"))
        .collect();
    let network = check_grants(c, &s.network, "capabilities.spawn.network");
    warn_of_special_literals(c, &network);
    for (scope, spanned) in fs_write.iter().zip(&s.fs_write) {
        if let Some(sys) = scope.touches_system_path() {
            c.error(
                spanned.span(),
                "capabilities.spawn.fs_write",
                format!("`{scope}` would make the system path {sys} writable"),
                "grant a directory of its own, e.g. \"~/.cache/NAME/\"",
            );
        }
    }
    let cwd = s
        .cwd
        .as_ref()
        .and_then(|cwd| check_scope_path(c, cwd, "capabilities.spawn.cwd"));
    if let (Some(cwd), Some(span)) = (&cwd, s.cwd.as_ref().map(Spanned::span)) {
        check_cwd_in_scopes(c, cwd, span, &fs_read, &fs_write);
    }
    let base_limits = s.limits.as_ref().map_or_else(
        || Some(Limits::default()),
        |l| check_limits(c, l, "capabilities.spawn.limits", &Limits::default(), false),
    );
    let (exec, also_runs) = check_exec(c, s);
    let (programs, operations) = validate_operations(
        c,
        s,
        spawn.span(),
        base_limits.unwrap_or_default(),
        &unix_sockets,
        &network,
    )?;
    warn_of_unix_sockets(c, &operations);
    check_broad_scopes(c, &fs_read, &fs_write);
    check_nested_scopes(c, s, &fs_write);
    let on_violation = check_on_violation(c, s.on_violation.as_ref());
    Some(SpawnGrant {
        programs,
        operations,
        env_passthrough: env_passthrough?,
        credential_env_keys: credential_env_keys?,
        env_set,
        fs_read,
        fs_write,
        fs_exec,
        unix_sockets,
        network,
        cwd,
        limits: base_limits?,
        on_violation: on_violation?,
        exec: exec?,
        also_runs: also_runs?,
    })
}

/// `on_violation`: `refuse` (the default) or `terminate`.
fn check_on_violation(c: &mut Checker, raw: Option<&Spanned<String>>) -> Option<OnViolation> {
    let Some(raw) = raw else {
        return Some(OnViolation::Refuse);
    };
    match raw.get_ref().as_str() {
        "refuse" => Some(OnViolation::Refuse),
        "terminate" => Some(OnViolation::Terminate),
        other => {
            c.error(
                raw.span(),
                "capabilities.spawn.on_violation",
                format!("`{other}` is not a way to meet a refused network egress"),
                "say \"refuse\" (the attempt fails, the program goes on) or \"terminate\" (the sandbox is killed at the first one)",
            );
            None
        }
    }
}

/// `unix_sockets` is the one way a program reaches a host service: say what
/// it grants, once per manifest.
fn warn_of_unix_sockets(
    c: &mut Checker,
    operations: &std::collections::BTreeMap<String, super::model::Operation>,
) {
    let granted: Vec<&str> = operations
        .values()
        .filter(|op| !op.unix_sockets.is_empty())
        .map(|op| op.name.as_str())
        .collect();
    if !granted.is_empty() {
        c.warn(
            "capabilities.spawn.unix_sockets",
            format!("operations {} may create unix sockets and connect to the sockets listed; Landlock (to ABI 7) does not govern connect(), so they can also reach any other socket inside their scopes, and the service behind a socket acts with its own authority", granted.join(", ")),
        );
    }
}

/// Checks a limits table; with `tighten_only`, each value must not exceed `base`.
pub(super) fn check_limits(
    c: &mut Checker,
    raw: &Spanned<RawLimits>,
    key: &str,
    base: &Limits,
    tighten_only: bool,
) -> Option<Limits> {
    let r = raw.get_ref();
    let values = [
        &r.max_stdout_bytes,
        &r.max_stderr_bytes,
        &r.wall_time_ms,
        &r.max_memory_bytes,
        &r.max_processes,
        &r.max_file_size_bytes,
        &r.max_open_files,
    ];
    let mut out = *base;
    let mut ok = true;
    for (i, (spec, value)) in LIMIT_SPECS.iter().zip(values).enumerate() {
        let Some(value) = value else { continue };
        let ceiling = if spec.key == "wall_time_ms" {
            c.options.max_wall_time_ms.min(WALL_TIME_HARD_CEILING_MS)
        } else {
            spec.ceiling
        };
        let k = format!("{key}.{}", spec.key);
        let v = *value.get_ref();
        if v <= 0 {
            c.error(
                value.span(),
                &k,
                format!("{} must be a positive number (got {v})", spec.key),
                "leave the key out to use the default",
            );
            ok = false;
        } else if v as u64 > ceiling {
            c.error(
                value.span(),
                &k,
                format!("{} = {v} exceeds the maximum of {ceiling}", spec.key),
                "",
            );
            ok = false;
        } else if tighten_only && v as u64 > base.fields()[i] {
            c.error(
                value.span(),
                &k,
                format!(
                    "{} = {v} loosens the connector's limit of {}",
                    spec.key,
                    base.fields()[i]
                ),
                "an operation may only tighten the connector's limits",
            );
            ok = false;
        } else {
            out.set(i, v as u64);
        }
    }
    let tmp_ok = check_tmp(c, raw, key, base, tighten_only, &mut out, ok);
    (ok && tmp_ok).then_some(out)
}

/// The private /tmp's settings of a limits table, into `out`: a size of at
/// least 1 MiB that the memory limit in force can hold (tmpfs pages are
/// memory, and /tmp and /dev/shm together hold at most the memory limit;
/// an operation's lower memory limit applies to the connector's size
/// too), and execution. With `tighten_only`, neither may loosen `base`.
/// `numbers_ok`: the table's other limits were accepted (else the memory
/// limit in `out` is not the one written, and the size is not compared
/// with it). False when something was refused.
fn check_tmp(
    c: &mut Checker,
    raw: &Spanned<RawLimits>,
    key: &str,
    base: &Limits,
    tighten_only: bool,
    out: &mut Limits,
    numbers_ok: bool,
) -> bool {
    let r = raw.get_ref();
    let mut ok = true;
    if let Some(size) = &r.tmp_size_bytes {
        let v = *size.get_ref();
        let k = format!("{key}.tmp_size_bytes");
        if v < MIN_TMPFS_BYTES as i64 {
            c.error(
                size.span(),
                &k,
                format!("tmp_size_bytes = {v} is below the minimum of {MIN_TMPFS_BYTES} (1 MiB)"),
                "leave the key out to give /tmp what the memory limit leaves after /dev/shm",
            );
            ok = false;
        } else if tighten_only && v as u64 > base.tmp_bytes() {
            c.error(
                size.span(),
                &k,
                format!(
                    "tmp_size_bytes = {v} loosens the connector's /tmp of {} bytes",
                    base.tmp_bytes()
                ),
                "an operation may only tighten the connector's limits",
            );
            ok = false;
        } else {
            out.tmp_size_bytes = Some(v as u64);
        }
    }
    if let Some(exec) = &r.tmp_exec {
        if tighten_only && *exec.get_ref() && !base.tmp_exec {
            c.error(
                exec.span(),
                &format!("{key}.tmp_exec"),
                "tmp_exec = true loosens the connector's limits, under which /tmp is not executable",
                "an operation may only tighten the connector's limits; set tmp_exec = true in [capabilities.spawn.limits]",
            );
            ok = false;
        } else {
            out.tmp_exec = *exec.get_ref();
        }
    }
    match out.tmp_size_bytes {
        Some(size) if ok && numbers_ok && size > out.tmp_size_ceiling() => {
            // Where the size or the memory limit is written in this table,
            // else the table itself.
            let span = r
                .tmp_size_bytes
                .as_ref()
                .map(Spanned::span)
                .or_else(|| r.max_memory_bytes.as_ref().map(Spanned::span))
                .unwrap_or_else(|| raw.span());
            c.error(
                span,
                &format!("{key}.tmp_size_bytes"),
                format!(
                    "tmp_size_bytes = {size} exceeds what max_memory_bytes = {} leaves for /tmp ({}): /tmp is a tmpfs, whose pages are memory, and /tmp and /dev/shm (at least 1 MiB) together hold at most the memory limit",
                    out.max_memory_bytes,
                    out.tmp_size_ceiling()
                ),
                &format!(
                    "lower tmp_size_bytes, or raise max_memory_bytes to at least {}",
                    size.saturating_add(MIN_TMPFS_BYTES)
                ),
            );
            false
        }
        _ => ok,
    }
}
