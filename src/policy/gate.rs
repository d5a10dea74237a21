//! The gate (SPEC §3): one function from (context, caller, request) to a
//! `Decision`. Checks run in the order the SPEC fixes and the first failure
//! gives the reason. Pure apart from the `ProgramInspector` it is handed.

use std::collections::BTreeMap;

use super::checks::{
    arg_denial, check_bindings, check_cwd, check_env, check_path_values, check_program,
};
use super::decision::{Decision, Denial};
use super::program::ProgramInspector;
use super::reason::Reason;
use super::request::{Caller, GateContext, Request, RequestKind};
use crate::manifest::{Manifest, Operation, SpawnGrant, Tier};
use crate::plan::{FsPlan, SpawnPlan};
use crate::template::MatchError;

/// Decides a request. The only I/O is `programs.inspect` on the bound program.
pub fn decide(
    ctx: &GateContext,
    caller: &Caller,
    req: &Request,
    programs: &mut dyn ProgramInspector,
) -> Decision {
    match gate(ctx, caller, req, programs) {
        Ok(plan) => Decision::Allowed(Box::new(plan)),
        Err(denial) => Decision::Denied(denial),
    }
}

fn gate(
    ctx: &GateContext,
    caller: &Caller,
    req: &Request,
    programs: &mut dyn ProgramInspector,
) -> Result<SpawnPlan, Box<Denial>> {
    let manifest = check_connector(ctx)?;
    check_caller(ctx, manifest, caller)?;
    let action = ActionSubset::check(ctx, req)?;
    let spawn = manifest.spawn.as_ref();
    let (op, args) = match &req.kind {
        RequestKind::Op { name, args } => (resolve_op(ctx, spawn, name)?, args.clone()),
        RequestKind::Raw { program, argv } => match_raw(ctx, caller, spawn, program, argv)?,
    };
    let spawn = spawn.ok_or_else(|| no_spawn_grant(ctx))?;
    action.permits(ctx, &op.name)?;
    check_mode(ctx, op, req.mode)?;
    let argv = op
        .template
        .substitute(&args, &op.params)
        .map_err(|e| arg_denial(ctx, op, &e))?;
    let fs = expand_scopes(spawn, caller);
    check_path_values(ctx, op, &args, &fs, caller)?;
    let program = check_program(ctx, spawn, op, caller, programs, require_pin(ctx))?;
    let (env, env_values) = check_env(ctx, spawn, &req.env)?;
    let cwd = check_cwd(ctx, spawn, req.cwd.as_deref(), caller, &fs)?;
    check_bindings(ctx, spawn)?;
    Ok(SpawnPlan {
        connector: manifest.connector.name.to_string(),
        version: manifest.connector.version.to_string(),
        manifest_sha256: manifest.digest,
        op: op.name.clone(),
        op_mode: op.mode,
        program,
        argv,
        argv_shape: op.template.shape(),
        env,
        env_values,
        cwd,
        fs,
        limits: op.limits,
    })
}

fn require_pin(ctx: &GateContext) -> bool {
    ctx.require_program_hash
}

fn check_connector<'a>(ctx: &GateContext<'a>) -> Result<&'a Manifest, Box<Denial>> {
    let requested = format!("connector:{}", ctx.connector);
    let manifest = ctx.manifest.ok_or_else(|| {
        Denial::new(Reason::ConnectorUnknown, ctx.connector, requested.clone(), vec![], format!("no connector named {} is loaded; check the name or add its manifest to [server] manifests", ctx.connector))
    })?;
    if ctx.disabled {
        return Err(Denial::new(
            Reason::ConnectorDisabled,
            ctx.connector,
            requested,
            vec![],
            format!(
                "{} is disabled by the operator ([[disable]] in the config)",
                ctx.connector
            ),
        ));
    }
    Ok(manifest)
}

fn check_caller(
    ctx: &GateContext,
    manifest: &Manifest,
    caller: &Caller,
) -> Result<(), Box<Denial>> {
    ctx.access.allows(caller, &manifest.connector.name).map_err(|granted| {
        Denial::new(
            Reason::CallerNotAllowed,
            ctx.connector,
            format!("caller:uid={},gid={}", caller.uid, caller.gid),
            granted,
            format!("uid {} (gid {}) may not act for {}; the operator grants it with an [[access]] entry", caller.uid, caller.gid, ctx.connector),
        )
    })
}

/// The action's capability subset, checked before and after the op is known.
struct ActionSubset<'r>(Option<&'r [String]>);

impl<'r> ActionSubset<'r> {
    fn check(ctx: &GateContext, req: &'r Request) -> Result<ActionSubset<'r>, Box<Denial>> {
        let subset = ActionSubset(req.action.as_deref());
        if let Some(entries) = subset.0 {
            let op_name = match &req.kind {
                RequestKind::Op { name, .. } => Some(name.as_str()),
                RequestKind::Raw { .. } => None,
            };
            let any_spawn = entries
                .iter()
                .any(|e| e == "spawn" || e.starts_with("spawn:"));
            let early_ok = match op_name {
                Some(name) => subset.allows(name),
                None => any_spawn,
            };
            if !early_ok {
                return Err(subset.denial(ctx, op_name.unwrap_or("")));
            }
        }
        Ok(subset)
    }

    fn allows(&self, op: &str) -> bool {
        self.0.is_none_or(|entries| {
            entries
                .iter()
                .any(|e| e == "spawn" || e.strip_prefix("spawn:") == Some(op))
        })
    }

    fn permits(&self, ctx: &GateContext, op: &str) -> Result<(), Box<Denial>> {
        if self.allows(op) {
            Ok(())
        } else {
            Err(self.denial(ctx, op))
        }
    }

    fn denial(&self, ctx: &GateContext, op: &str) -> Box<Denial> {
        let requested = if op.is_empty() {
            "spawn".to_string()
        } else {
            format!("spawn:{op}")
        };
        Denial::new(Reason::ActionDenied, ctx.connector, requested, self.0.unwrap_or(&[]).to_vec(), "the action's capability subset does not permit this spawn; the action file must list `spawn` or `spawn:<op>`")
    }
}

fn no_spawn_grant(ctx: &GateContext) -> Box<Denial> {
    Denial::new(
        Reason::OpUnknown,
        ctx.connector,
        "spawn",
        vec![],
        format!(
            "{} declares no [capabilities.spawn]; it may not spawn anything",
            ctx.connector
        ),
    )
}

fn resolve_op<'a>(
    ctx: &GateContext,
    spawn: Option<&'a SpawnGrant>,
    name: &str,
) -> Result<&'a Operation, Box<Denial>> {
    let spawn = spawn.ok_or_else(|| no_spawn_grant(ctx))?;
    spawn.operations.get(name).ok_or_else(|| {
        let granted = spawn
            .operations
            .keys()
            .map(|k| format!("spawn:{k}"))
            .collect();
        Denial::new(
            Reason::OpUnknown,
            ctx.connector,
            format!("spawn:{name}"),
            granted,
            format!(
                "{} has no operation `{name}`; `spawnd manifest explain` lists its operations",
                ctx.connector
            ),
        )
    })
}

fn check_mode(ctx: &GateContext, op: &Operation, mode: Tier) -> Result<(), Box<Denial>> {
    if op.mode <= mode {
        return Ok(());
    }
    Err(Denial::new(
        Reason::ModeInsufficient,
        ctx.connector,
        format!("mode:{mode}"),
        vec![format!("mode:{}", op.mode)],
        format!(
            "operation `{}` requires mode {} but the invocation runs at {mode}; pass --mode {}",
            op.name, op.mode, op.mode
        ),
    ))
}

type Matched<'a> = (&'a Operation, BTreeMap<String, String>);

/// A raw envelope: the program must be declared and the argv must match one
/// operation bound to that program, with the same value rules as `spawn_op`.
fn match_raw<'a>(
    ctx: &GateContext,
    caller: &Caller,
    spawn: Option<&'a SpawnGrant>,
    program: &str,
    argv: &[String],
) -> Result<Matched<'a>, Box<Denial>> {
    if program.is_empty() || argv.is_empty() {
        let what = if program.is_empty() {
            "program"
        } else {
            "argv"
        };
        return Err(Denial::new(
            Reason::ValueInvalid,
            ctx.connector,
            format!("spawn:{program}"),
            vec![],
            format!("the envelope's {what} is empty; give a declared program and its full argv"),
        ));
    }
    let declared = |s: &SpawnGrant| {
        s.programs
            .iter()
            .map(|p| format!("spawn:{}", p.path))
            .collect::<Vec<_>>()
    };
    let not_declared = |granted| {
        Denial::new(
            Reason::ProgramNotDeclared,
            ctx.connector,
            format!("spawn:{program}"),
            granted,
            format!(
                "program {program} is not declared in {}'s manifest",
                ctx.connector
            ),
        )
    };
    let spawn = spawn.ok_or_else(|| not_declared(vec![]))?;
    let index =
        find_program(spawn, caller, program).ok_or_else(|| not_declared(declared(spawn)))?;
    let program_path = spawn.programs[index]
        .path
        .expand(&caller.home)
        .to_string_lossy()
        .into_owned();
    let mut first_value_error = None;
    for op in spawn.operations_of(index) {
        match op.template.match_argv(argv, &program_path, &op.params) {
            Ok(args) => return Ok((op, args)),
            Err(MatchError::Arg(e)) => {
                first_value_error.get_or_insert_with(|| arg_denial(ctx, op, &e));
            }
            Err(MatchError::Shape) => {}
        }
    }
    Err(first_value_error.unwrap_or_else(|| {
        let granted = spawn.operations_of(index).map(|op| op.template.shape()).collect();
        Denial::new(Reason::ArgvNotDeclared, ctx.connector, format!("argv:{program}"), granted, format!("the argv matches no operation declared for {program}; `spawnd manifest explain` lists the allowed shapes"))
    }))
}

/// A declared program named by its path (after `~`) or, uniquely, by its file name.
fn find_program(spawn: &SpawnGrant, caller: &Caller, program: &str) -> Option<usize> {
    let by_path = spawn.programs.iter().position(|p| {
        p.path.to_string() == program || p.path.expand(&caller.home).as_os_str() == program
    });
    by_path.or_else(|| {
        let mut by_name = spawn
            .programs
            .iter()
            .enumerate()
            .filter(|(_, p)| p.path.file_name() == Some(program));
        match (by_name.next(), by_name.next()) {
            (Some((i, _)), None) => Some(i),
            _ => None,
        }
    })
}

fn expand_scopes(spawn: &SpawnGrant, caller: &Caller) -> FsPlan {
    let expand =
        |v: &[crate::manifest::ScopePath]| v.iter().map(|s| s.expand(&caller.home)).collect();
    FsPlan {
        read: expand(&spawn.fs_read),
        write: expand(&spawn.fs_write),
        exec: expand(&spawn.fs_exec),
    }
}
