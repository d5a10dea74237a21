//! `spawnd check`: build the request exactly as `run` would, pass it through
//! the gate (here, or with `--socket` the daemon's `spawn_check`), and print
//! the decision with the exact argv. Nothing runs and nothing is audited.

use crate::failure::FailureKind;
use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{json, Value};

use super::args::{Cli, RunArgs};
use super::context::{current_caller, load_config, load_manifest};
use super::output::{Failure, Success};
use crate::manifest::Manifest;
use crate::manifest::{Limits, Tier};
use crate::pipeline::{decide_local, denial_failure, Prepared};
use crate::plan::{CwdPlan, EnvSource, SpawnPlan};
use crate::policy::{Decision, Request, RequestKind};
use crate::program::ProgramOpener;

/// A raw envelope file (the ADR's schema; unknown keys refused, names exact).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnvelopeFile {
    /// Program path or declared file name.
    pub program: String,
    /// argv including `argv[0]`.
    pub argv: Vec<String>,
    /// Env values.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory.
    pub cwd: Option<String>,
    /// Stdin as text.
    pub stdin: Option<String>,
    /// Stdin as base64.
    pub stdin_b64: Option<String>,
}

/// Loads config and manifest and builds the request from `run`/`check` arguments.
pub(crate) fn load_request(cli: &Cli, args: &RunArgs) -> Result<Prepared, Failure> {
    let config = load_config(cli)?;
    let path = args
        .manifest
        .as_deref()
        .ok_or_else(|| Failure::usage("give --manifest FILE (or --socket S --connector FQN)"))?;
    let manifest = load_manifest(path, &config)?;
    check_shipped_files(&manifest)?;
    let mut caller = current_caller()?;
    caller.workspace = workspace_of(args.workspace.as_deref(), &config)?;
    caller.label = label_of(args.label.as_deref())?;
    let request = request_of(cli, args, Some(&manifest))?;
    Ok(Prepared {
        config: std::sync::Arc::new(config),
        manifest: manifest.into(),
        caller,
        request,
    })
}

/// A manifest that states a `provenance_hash` runs only with the files its
/// directory ships matching it, refused as `connector install` refuses
/// them (docs/provenance.md), before anything runs or is recorded.
fn check_shipped_files(manifest: &Manifest) -> Result<(), Failure> {
    let dir = manifest.dir.as_deref().ok_or_else(|| {
        Failure::internal("the manifest was loaded without its directory; nothing was run")
    })?;
    crate::provenance::store::check_provenance_beside(manifest, dir)
        .map_err(|r| super::connector_cmd::refusal_failure(&r))
}

/// `--label`, checked ([`crate::policy::check_label`]).
pub(crate) fn label_of(label: Option<&str>) -> Result<Option<String>, Failure> {
    label
        .map(|l| {
            crate::policy::check_label(l)
                .map(|()| l.to_string())
                .map_err(|why| Failure::usage(format!("--label: {why}")))
        })
        .transpose()
}

/// The workspace `{workspace}/` scopes expand against: `--workspace DIR`
/// (resolved to its real path, so scopes under it are real paths too), else
/// the operator's `[sandbox] workspace`.
fn workspace_of(
    given: Option<&std::path::Path>,
    config: &crate::config::Config,
) -> Result<Option<std::path::PathBuf>, Failure> {
    let Some(dir) = given else {
        return Ok(config.sandbox.workspace.clone());
    };
    let real = std::fs::canonicalize(dir)
        .map_err(|e| Failure::usage(format!("--workspace {}: {e}", dir.display())))?;
    if !real.is_dir() {
        return Err(Failure::usage(format!(
            "--workspace {}: not a directory",
            dir.display()
        )));
    }
    Ok(Some(real))
}

/// The request `run`/`check` arguments describe. Passthrough keys not named
/// with `--env` are taken from this environment when a manifest says which.
pub(crate) fn request_of(
    cli: &Cli,
    args: &RunArgs,
    manifest: Option<&Manifest>,
) -> Result<Request, Failure> {
    // An operation name no manifest could declare is a usage error, refused
    // before anything records it.
    if let Some(op) = &args.op {
        crate::manifest::check_op_name(op).map_err(|why| Failure::usage(format!("--op: {why}")))?;
    }
    let (kind, mut env, envelope_cwd) = match (&args.op, &args.envelope) {
        (Some(op), None) => (
            RequestKind::Op {
                name: op.clone(),
                args: parse_args(&args.args)?,
            },
            BTreeMap::new(),
            None,
        ),
        (None, Some(path)) => {
            let e = read_envelope(path)?;
            if e.stdin.is_some() && e.stdin_b64.is_some() {
                return Err(Failure::usage(
                    "the envelope gives both stdin and stdin_b64; keep one",
                ));
            }
            (
                RequestKind::Raw {
                    program: e.program,
                    argv: e.argv,
                },
                e.env,
                e.cwd,
            )
        }
        _ => return Err(Failure::usage("give --op NAME or --envelope FILE")),
    };
    merge_cli_env(&mut env, &args.env, manifest)?;
    let cwd = match &args.cwd {
        Some(dir) if dir.is_absolute() => Some(dir.display().to_string()),
        Some(dir) => Some(
            std::env::current_dir()
                .map_err(|e| Failure::usage(format!("getcwd: {e}")))?
                .join(dir)
                .display()
                .to_string(),
        ),
        None => envelope_cwd,
    };
    Ok(Request {
        kind,
        env,
        cwd,
        action: None,
        pin: Default::default(),
        mode: cli.mode.unwrap_or_default(),
    })
}

/// `--arg k=v`: split on the first `=`; a key given twice is a usage error.
pub(crate) fn parse_args(raw: &[String]) -> Result<BTreeMap<String, String>, Failure> {
    let mut out = BTreeMap::new();
    for item in raw {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| Failure::usage(format!("--arg `{item}` needs the form key=value")))?;
        if out.insert(k.to_string(), v.to_string()).is_some() {
            return Err(Failure::usage(format!(
                "--arg {k} is given twice; give each key once"
            )));
        }
    }
    Ok(out)
}

fn read_envelope(path: &Path) -> Result<EnvelopeFile, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Failure::from_io(
            &e,
            FailureKind::Usage,
            format!("cannot read envelope {}: {e}", path.display()),
        )
    })?;
    serde_json::from_str(&text).map_err(|e| {
        Failure::usage(format!(
            "envelope {}: {e} (expected {{program, argv, env?, cwd?, stdin? | stdin_b64?}})",
            path.display()
        ))
    })
}

/// `--env K=V` and `--env K` explicitly; other passthrough keys (not credential
/// keys) come from the invoking environment when set and non-empty there.
fn merge_cli_env(
    env: &mut BTreeMap<String, String>,
    flags: &[String],
    manifest: Option<&Manifest>,
) -> Result<(), Failure> {
    let mut named = Vec::new();
    for flag in flags {
        let (key, value) = match flag.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => {
                let v = std::env::var(flag).map_err(|_| Failure::usage(format!("--env {flag}: {flag} is not set in this environment; use --env {flag}=VALUE")))?;
                (flag.clone(), v)
            }
        };
        named.push(key.clone());
        env.insert(key, value);
    }
    if let Some(spawn) = manifest.and_then(|m| m.spawn.as_ref()) {
        for key in spawn
            .env_passthrough
            .iter()
            .filter(|k| !spawn.credential_env_keys.contains(k) && !named.contains(k))
        {
            if env.contains_key(key) {
                continue;
            }
            if let Some(value) = std::env::var(key).ok().filter(|v| !v.is_empty()) {
                env.insert(key.clone(), value);
            }
        }
    }
    Ok(())
}

/// `spawnd check`: the gate in this process, or with `--socket` the
/// daemon's (`spawn_check`). Nothing runs and nothing is audited either way.
pub(crate) fn run_check(cli: &Cli, args: &RunArgs) -> Result<Success, Failure> {
    let data = match &args.socket {
        Some(socket) => super::remote::check_remote(cli, args, socket)?,
        None => {
            let prepared = load_request(cli, args)?;
            let mut opener = ProgramOpener::default();
            match decide_local(&prepared, &mut opener) {
                Decision::Allowed(mut plan) => {
                    if let Some(t) = args.timeout {
                        plan.limits.wall_time_ms = plan.limits.wall_time_ms.min(t);
                    }
                    allowed_json(&plan)
                }
                Decision::Denied(denial) => return Err(denial_failure(&denial)),
            }
        }
    };
    let checked: Checked = serde_json::from_value(data.clone())
        .map_err(|e| Failure::internal(format!("the allowed plan: {e}")))?;
    Ok(Success::new(data, checked.text()))
}

fn allowed_json(plan: &SpawnPlan) -> Value {
    let mut data = serde_json::to_value(plan).unwrap_or_default();
    data["decision"] = json!("allowed");
    data
}

/// What the text of an allowed check tells, read from the plan's JSON
/// (the same whether the gate ran here or in the daemon).
#[derive(Deserialize)]
struct Checked {
    connector: String,
    version: String,
    op: String,
    op_mode: Tier,
    program: CheckedProgram,
    argv: Vec<String>,
    argv_shape: String,
    env: Vec<CheckedEnv>,
    cwd: CwdPlan,
    network: Vec<String>,
    fs: CheckedScopes,
    limits: Limits,
}

/// The plan's program.
#[derive(Deserialize)]
struct CheckedProgram {
    declared: String,
    resolved: String,
    sha256: String,
    pinned: bool,
}

/// One env key of the plan and where its value comes from.
#[derive(Deserialize)]
struct CheckedEnv {
    key: String,
    source: EnvSource,
}

/// The plan's scopes.
#[derive(Deserialize)]
struct CheckedScopes {
    read: Vec<String>,
    write: Vec<String>,
    exec: Vec<String>,
}

impl Checked {
    fn text(&self) -> String {
        let argv = serde_json::to_string(&self.argv).unwrap_or_default();
        let env: Vec<String> = self
            .env
            .iter()
            .map(|e| {
                let source = match e.source {
                    EnvSource::Request => "from the caller",
                    EnvSource::Fixed => "fixed by the manifest",
                    EnvSource::Credential => "credential, filled at spawn time",
                    EnvSource::Default => "spawnd's default",
                };
                format!("{} ({source})", e.key)
            })
            .collect();
        let cwd = match &self.cwd {
            CwdPlan::Dir(d) => d.display().to_string(),
            CwdPlan::FreshTemp => "a fresh temporary directory, removed afterwards".into(),
        };
        let program = &self.program;
        let pin = if program.pinned {
            "matches the pinned hash"
        } else {
            "not pinned"
        };
        let network = if self.network.is_empty() {
            "none (its own loopback only)".to_string()
        } else {
            self.network.join(", ")
        };
        let paths = |v: &[String]| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.join(", ")
            }
        };
        let fs = &self.fs;
        let scopes = format!(
            "read {}; write {}; exec {}",
            paths(&fs.read),
            paths(&fs.write),
            paths(&fs.exec)
        );
        let l = &self.limits;
        format!(
            "allowed: {} {} op `{}` (mode {})\nprogram: {} -> {} ({}, {pin})\nargv:    {argv}\nshape:   {}\nenv:     {}\nscopes:  {scopes}\ncwd:     {cwd}\nnetwork: {network}\nlimits:  wall {} ms, stdout {} B, stderr {} B, memory {} B, processes {}, file size {} B, open files {}",
            self.connector, self.version, self.op, self.op_mode, program.declared, program.resolved, program.sha256, self.argv_shape,
            if env.is_empty() { "(none)".to_string() } else { env.join(", ") },
            l.wall_time_ms, l.max_stdout_bytes, l.max_stderr_bytes, l.max_memory_bytes, l.max_processes, l.max_file_size_bytes, l.max_open_files,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_split_on_the_first_equals_and_duplicates_are_usage_errors() {
        let parsed = parse_args(&["a=b=c".into(), "x=".into()]).unwrap();
        assert_eq!(parsed["a"], "b=c");
        assert_eq!(parsed["x"], "");
        assert_eq!(
            parse_args(&["a=1".into(), "a=2".into()])
                .unwrap_err()
                .exit(),
            2
        );
        assert_eq!(parse_args(&["novalue".into()]).unwrap_err().exit(), 2);
    }
}
