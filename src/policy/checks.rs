//! The gate's later steps, one function each: value errors to denials, path
//! values, the program file, env keys, cwd and credential bindings.

use std::collections::BTreeMap;
use std::path::Path;

use super::decision::{shown, Denial};
use super::inspector::{ProgramFault, ProgramInspector};
use super::reason::Reason;
use super::request::{Caller, GateContext};
use crate::manifest::env_keys::{is_valid_key, reserved};
use crate::manifest::paths::is_within;
use crate::manifest::{Operation, ScopePath, SpawnGrant, ValueKind};
use crate::plan::{CwdPlan, EnvEntry, EnvSource, FsPlan, ProgramPlan, DEFAULT_ENV};
use crate::template::{ArgError, ParamRule};

/// What a param accepts, for `granted`.
fn rule_summary(rule: Option<&ParamRule>) -> Vec<String> {
    let Some(rule) = rule else {
        return vec!["default rules".into()];
    };
    let mut out = Vec::new();
    if let Some(p) = &rule.pattern {
        out.push(format!("pattern:{}", p.as_str()));
    }
    if let Some(values) = &rule.values {
        out.extend(values.iter().map(|v| format!("value:{v}")));
    }
    out.push(format!("max_len:{}", rule.max_len));
    out
}

/// Maps a template value error to the denial reason docs/cli.md names.
pub(super) fn arg_denial(ctx: &GateContext, op: &Operation, e: &ArgError) -> Box<Denial> {
    let c = ctx.connector;
    let placeholders = || {
        op.template
            .placeholders()
            .iter()
            .map(|p| format!("arg:{p}"))
            .collect::<Vec<_>>()
    };
    match e {
        ArgError::Unknown { name } => {
            let name = shown(name);
            Denial::new(
                Reason::ArgUnknown,
                c,
                format!("arg:{name}"),
                placeholders(),
                format!(
                    "operation `{}` has no placeholder `{name}`: unknown argument `{name}`: the template has no placeholder {{{name}}}",
                    op.name
                ),
            )
        }
        ArgError::Missing { placeholder }
        | ArgError::PartialGroup {
            missing: placeholder,
        } => Denial::new(
            Reason::PlaceholderMissing,
            c,
            format!("spawn:{}", op.name),
            vec![op.template.shape()],
            format!("operation `{}`: {e}", op.name),
        )
        .with_placeholder(placeholder),
        ArgError::Invalid { placeholder, .. } => Denial::new(
            Reason::ValueInvalid,
            c,
            format!("arg:{placeholder}"),
            rule_summary(op.params.get(placeholder)),
            format!("operation `{}`: {e}", op.name),
        )
        .with_placeholder(placeholder),
        ArgError::OptionInjection { placeholder } => Denial::new(
            Reason::OptionInjection,
            c,
            format!("arg:{placeholder}"),
            vec!["values not starting with `-`".into()],
            format!("operation `{}`: {e}", op.name),
        )
        .with_placeholder(placeholder),
    }
}

/// Values of `kind = "path"` params: no `..`, and an absolute one inside the scopes.
pub(super) fn check_path_values(
    ctx: &GateContext,
    op: &Operation,
    args: &BTreeMap<String, String>,
    fs: &FsPlan,
    caller: &Caller,
) -> Result<(), Box<Denial>> {
    for (name, kind) in &op.kinds {
        let (ValueKind::Path, Some(value)) = (kind, args.get(name)) else {
            continue;
        };
        let deny = |why: &str| {
            let granted = fs
                .read
                .iter()
                .chain(&fs.write)
                .chain(&fs.exec)
                .map(|p| format!("path:{}", p.display()))
                .collect();
            Denial::new(
                Reason::ValueInvalid,
                ctx.connector,
                format!("arg:{name}"),
                granted,
                format!(
                    "operation `{}`: the path value of {{{name}}} {why}",
                    op.name
                ),
            )
            .with_placeholder(name)
        };
        if Path::new(value)
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(deny("contains `..`"));
        }
        // Only an absolute value names a place of its own; a relative one
        // (`~/x` included: no shell expands it) resolves under the cwd, which
        // already lies inside the scopes.
        if value.starts_with('/') {
            let path = ScopePath::parse(value)
                .ok()
                .and_then(|p| p.expand(&ctx.anchors(caller)))
                .ok_or_else(|| deny("is not a valid path"))?;
            let inside = fs
                .read
                .iter()
                .chain(&fs.write)
                .chain(&fs.exec)
                .any(|s| is_within(&path, s));
            if !inside {
                return Err(deny("lies outside fs_read, fs_write and fs_exec"));
            }
        }
    }
    Ok(())
}

/// Opens, checks and hashes the operation's program.
pub(super) fn check_program(
    ctx: &GateContext,
    spawn: &SpawnGrant,
    op: &Operation,
    caller: &Caller,
    programs: &mut dyn ProgramInspector,
    require_pin: bool,
) -> Result<ProgramPlan, Box<Denial>> {
    let declared = &spawn.programs[op.program];
    // A program's path is absolute, `~/` or `{connector}/`, never anchored
    // at the workspace, and the gate checked that the connector's directory
    // is known: it always expands (the empty path would open nothing).
    let path = declared
        .path
        .expand(&ctx.anchors(caller))
        .unwrap_or_default();
    let requested = format!("program:{}", declared.path);
    let facts = programs.inspect(&path).map_err(|fault| {
        let mut d = Denial::new(
            Reason::ProgramNotRegular,
            ctx.connector,
            requested.clone(),
            vec![],
            format!("program {}: {fault}", declared.path),
        );
        d.missing_program = matches!(fault, ProgramFault::Missing { .. });
        d
    })?;
    let resolved = facts.resolved.display().to_string();
    if !facts.regular {
        return Err(Denial::new(
            Reason::ProgramNotRegular,
            ctx.connector,
            format!("program:{resolved}"),
            vec![],
            format!(
                "program {} resolves to {resolved}, which is not a regular file",
                declared.path
            ),
        ));
    }
    if facts.setid || facts.file_caps {
        let what = if facts.setid {
            "setuid or setgid"
        } else {
            "carries file capabilities"
        };
        return Err(Denial::new(
            Reason::ProgramSetuid,
            ctx.connector,
            format!("program:{resolved}"),
            vec![],
            format!("program {resolved} is {what}; spawnd never runs privilege-raising programs"),
        ));
    }
    // The publisher's pin, else the operator's pin kept beside an installed
    // connector (docs/provenance.md, "Operator pins").
    let operator_pin = ctx
        .manifest
        .and_then(|m| m.verified.as_ref())
        .and_then(|i| i.pins.get(&path).copied());
    let pin = declared.hash.or(operator_pin);
    let pinned: Vec<String> = pin.iter().map(|h| h.to_string()).collect();
    match pin {
        Some(pin) if pin != facts.sha256 => {
            return Err(Denial::new(Reason::ProgramHashMismatch, ctx.connector, format!("program:{resolved} {}", facts.sha256), pinned, format!("program {resolved} has sha256 {} but {} pins {pin}; the file changed since it was pinned (re-pin with `{}` only if the change is expected)", facts.sha256, if declared.hash.is_some() { "the manifest" } else { "the operator" }, if declared.hash.is_some() { "spawnd manifest pin" } else { "spawnd connector pin" })));
        }
        None if require_pin => {
            return Err(Denial::new(Reason::ProgramHashMismatch, ctx.connector, format!("program:{resolved} {}", facts.sha256), vec![], format!("the operator requires pinned program hashes and {} has none; run `spawnd manifest pin`", declared.path)));
        }
        _ => {}
    }
    Ok(ProgramPlan {
        declared: declared.path.to_string(),
        resolved: facts.resolved,
        sha256: facts.sha256,
        pinned: pin.is_some(),
        interpreter: facts.interpreter,
    })
}

type EnvPlan = (Vec<EnvEntry>, BTreeMap<String, String>);

/// Env keys from the caller: only passthrough keys, never credential, fixed or loader keys.
pub(super) fn check_env(
    ctx: &GateContext,
    spawn: &SpawnGrant,
    env: &BTreeMap<String, String>,
) -> Result<EnvPlan, Box<Denial>> {
    let grantable = || {
        spawn
            .env_passthrough
            .iter()
            .filter(|k| !spawn.credential_env_keys.contains(k))
            .map(|k| format!("env:{k}"))
            .collect::<Vec<_>>()
    };
    for (key, value) in env {
        if !is_valid_key(key) {
            // Not echoed: a malformed key may carry a value (`TOKEN=…`).
            return Err(Denial::new(
                Reason::ValueInvalid,
                ctx.connector,
                "env:(malformed key)",
                grantable(),
                "an env key is not a valid name ([A-Za-z_][A-Za-z0-9_]*); it is not repeated here in case it carries a value",
            ));
        }
        // A key is a valid name, but of any length: it is echoed as `shown`.
        let key_shown = shown(key);
        let reserved_why = if spawn.credential_env_keys.contains(key) {
            Some("is a credential key: spawnd fills it from the operator's binding, never from the caller".to_string())
        } else if spawn.env_set.contains_key(key) {
            Some("is fixed by the manifest's env_set".to_string())
        } else {
            reserved(key).map(|r| format!("is reserved ({})", r.why))
        };
        if let Some(why) = reserved_why {
            return Err(Denial::new(
                Reason::EnvReserved,
                ctx.connector,
                format!("env:{key_shown}"),
                grantable(),
                format!("env key {key_shown} {why}"),
            ));
        }
        if !spawn.env_passthrough.contains(key) {
            return Err(Denial::new(
                Reason::EnvNotDeclared,
                ctx.connector,
                format!("env:{key_shown}"),
                grantable(),
                format!(
                    "env key {key_shown} is not in env_passthrough; the manifest must declare it"
                ),
            ));
        }
        if value.contains('\0') {
            return Err(Denial::new(
                Reason::ValueInvalid,
                ctx.connector,
                format!("env:{key}"),
                vec![],
                format!("the value of env key {key} contains a NUL byte"),
            ));
        }
    }
    let mut entries: Vec<EnvEntry> = env
        .keys()
        .map(|k| EnvEntry {
            key: k.clone(),
            source: EnvSource::Request,
        })
        .collect();
    entries.extend(spawn.env_set.keys().map(|k| EnvEntry {
        key: k.clone(),
        source: EnvSource::Fixed,
    }));
    entries.extend(spawn.credential_env_keys.iter().map(|k| EnvEntry {
        key: k.clone(),
        source: EnvSource::Credential,
    }));
    let mut values = env.clone();
    values.extend(spawn.env_set.iter().map(|(k, v)| (k.clone(), v.clone())));
    for (key, value) in DEFAULT_ENV {
        if !entries.iter().any(|e| e.key == *key) {
            entries.push(EnvEntry {
                key: (*key).to_string(),
                source: EnvSource::Default,
            });
            values.insert((*key).to_string(), (*value).to_string());
        }
    }
    Ok((entries, values))
}

/// The requested cwd must lie inside the scopes (and the manifest's cwd, when set).
pub(super) fn check_cwd(
    ctx: &GateContext,
    spawn: &SpawnGrant,
    requested: Option<&str>,
    caller: &Caller,
    fs: &FsPlan,
) -> Result<CwdPlan, Box<Denial>> {
    // Every anchor is named (the gate checked the workspace first).
    let manifest_cwd = spawn
        .cwd
        .as_ref()
        .and_then(|c| c.expand(&ctx.anchors(caller)));
    let in_scopes = |p: &Path| fs.read.iter().chain(&fs.write).any(|s| is_within(p, s));
    if let Some(policy_cwd) = manifest_cwd.as_ref().filter(|c| !in_scopes(c)) {
        // Validation refuses this at load; kept so the plan can never hold it.
        let granted = fs
            .read
            .iter()
            .chain(&fs.write)
            .map(|p| format!("scope:{}", p.display()))
            .collect();
        return Err(Denial::new(
            Reason::CwdOutsideScope,
            ctx.connector,
            format!("cwd:{}", policy_cwd.display()),
            granted,
            format!(
                "the manifest's cwd {} lies outside its fs_read and fs_write",
                policy_cwd.display()
            ),
        ));
    }
    let Some(text) = requested else {
        return Ok(manifest_cwd.map_or(CwdPlan::FreshTemp, CwdPlan::Dir));
    };
    let mut granted: Vec<String> = spawn
        .fs_read
        .iter()
        .map(|s| format!("fs_read:{s}"))
        .chain(spawn.fs_write.iter().map(|s| format!("fs_write:{s}")))
        .collect();
    if let Some(c) = &spawn.cwd {
        granted.push(format!("cwd:{c}"));
    }
    let deny = |why: String| {
        Denial::new(
            Reason::CwdOutsideScope,
            ctx.connector,
            format!("cwd:{}", shown(text)),
            granted.clone(),
            format!("cwd {} {why}", shown(text)),
        )
    };
    let path = ScopePath::parse(text)
        .map_err(|e| deny(format!("is refused: it {e}")))?
        .expand(&ctx.anchors(caller))
        .ok_or_else(|| deny("is not a valid path".into()))?;
    if !fs.read.iter().chain(&fs.write).any(|s| is_within(&path, s)) {
        return Err(deny(
            "lies outside fs_read and fs_write; request a directory inside them".into(),
        ));
    }
    if let Some(required) = &manifest_cwd {
        if !is_within(&path, required) {
            return Err(deny(format!(
                "lies outside the manifest's cwd {}",
                required.display()
            )));
        }
    }
    Ok(CwdPlan::Dir(path))
}

/// Every credential key needs an operator binding.
pub(super) fn check_bindings(ctx: &GateContext, spawn: &SpawnGrant) -> Result<(), Box<Denial>> {
    match spawn.credential_env_keys.iter().find(|k| !ctx.bound_credentials.contains(*k)) {
        None => Ok(()),
        Some(key) => Err(Denial::new(Reason::BindingRequired, ctx.connector, format!("credential:{key}"), ctx.bound_credentials.iter().map(|k| format!("credential:{k}")).collect(), format!("{} needs a credential for {key} and the operator has bound none; add a [[credentials]] entry with connector = \"{}\" and key = \"{key}\"", ctx.connector, ctx.connector))),
    }
}
