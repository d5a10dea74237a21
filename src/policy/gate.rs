//! The gate (docs/security.md, "The gate"): one function from (context, caller, request) to a
//! `Decision`. Checks run in the order docs/cli.md gives (denial reasons) and the first failure
//! gives the reason. Pure apart from the `ProgramInspector` it is handed.

use super::checks::{
    arg_denial, check_bindings, check_cwd, check_env, check_path_values, check_program,
};
use super::connector::{check_pin, check_verified_content};
use super::decision::{shown, Decision, Denial};
use super::executables::check_executables;
use super::inspector::ProgramInspector;
use super::raw::{choose_candidate, match_raw};
use super::reason::Reason;
use super::request::{Access, Caller, GateContext, Request, RequestKind};
use crate::egress::grant::{Grant, GrantError};
use crate::manifest::{system_path_overlap, Manifest, Operation, SpawnGrant, Tier};
use crate::plan::{FsPlan, SpawnPlan};

/// Decides a request. The only I/O is `programs.inspect` on the bound program.
pub fn decide(
    ctx: &GateContext,
    caller: &Caller,
    req: &Request,
    programs: &mut dyn ProgramInspector,
) -> Decision {
    match gate(ctx, caller, req, programs) {
        Ok(plan) => Decision::Allowed(Box::new(plan)),
        Err(mut denial) => {
            if let Some(m) = ctx.manifest {
                denial.connector_version = Some(m.connector.version.to_string());
                denial.provenance = crate::plan::Provenance::of(m);
            }
            Decision::Denied(denial)
        }
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
    check_pin(ctx, manifest, &req.pin)?;
    check_connector_dir_known(ctx, manifest)?;
    let action = ActionSubset::check(ctx, req)?;
    let spawn = manifest.spawn.as_ref();
    let (op, args) = match &req.kind {
        RequestKind::Op { name, args } => {
            let op = resolve_op(ctx, spawn, name)?;
            action.permits(ctx, &op.name)?;
            check_mode(ctx, op, req.mode)?;
            (op, args.clone())
        }
        RequestKind::Raw { program, argv } => {
            let candidates = match_raw(ctx, caller, spawn, program, argv)?;
            choose_candidate(ctx, candidates, |op| {
                action.permits(ctx, &op.name)?;
                check_mode(ctx, op, req.mode)
            })?
        }
    };
    let spawn = spawn.ok_or_else(|| no_spawn_grant(ctx))?;
    let argv = op
        .template
        .substitute(&args, &op.params)
        .map_err(|e| arg_denial(ctx, op, &e))?;
    check_workspace_named(ctx, spawn, caller)?;
    let mut fs = expand_scopes(ctx, spawn, caller)?;
    fs.unix_sockets = op
        .unix_sockets
        .iter()
        .filter_map(|s| s.expand(&ctx.anchors(caller)))
        .collect();
    check_path_values(ctx, op, &args, &fs, caller)?;
    let program = check_program(ctx, spawn, op, caller, programs, require_pin(ctx))?;
    let exec = check_executables(ctx, spawn, op, caller, programs, &program, require_pin(ctx))?;
    check_verified_content(ctx, manifest, &program, programs)?;
    let (env, env_values) = check_env(ctx, spawn, &req.env)?;
    let cwd = check_cwd(ctx, spawn, req.cwd.as_deref(), caller, &fs)?;
    check_bindings(ctx, spawn)?;
    let network = action.network(&op.network);
    check_network_enabled(ctx, op, &network)?;
    Ok(SpawnPlan {
        connector: manifest.connector.name.to_string(),
        version: manifest.connector.version.to_string(),
        manifest_sha256: manifest.digest,
        manifest_path: manifest.source.clone(),
        provenance: crate::plan::Provenance::of(manifest),
        op: op.name.clone(),
        op_mode: op.mode,
        program,
        argv,
        argv_shape: op.template.shape(),
        env,
        env_values,
        cwd,
        fs,
        network,
        action: action.0.map(shown_entries),
        // Learning is never a manifest's or a request's to ask for.
        network_learning: None,
        on_violation: spawn.on_violation,
        limits: op.limits,
        exec,
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

/// How many entries of an action subset a denial or a decision record
/// repeats.
const MAX_ACTION_ENTRIES_SHOWN: usize = 16;

/// What starts an action subset's network entry, `network:HOST:PORT`: a
/// grant spelled as denials name one (`network:api.example.com:443`).
pub(crate) const ACTION_NETWORK_PREFIX: &str = "network:";

/// The longest grant text a network entry may hold after its prefix: a
/// name of [`crate::egress::grant::MAX_NAME_LEN`] bytes, `:` and a port of
/// five digits. Longer text is no grant, and is refused without being
/// parsed or repeated.
pub(crate) const MAX_ACTION_GRANT_BYTES: usize = crate::egress::grant::MAX_NAME_LEN + 6;

/// An action subset's entry as a network grant: `None` when the entry is
/// not a network entry (it does not start with [`ACTION_NETWORK_PREFIX`]),
/// else the grant it names, parsed as a manifest's grant is (exactly, in
/// canonical form), or why it names none.
pub(crate) fn action_network_entry(entry: &str) -> Option<Result<Grant, ActionEntryError>> {
    let text = entry.strip_prefix(ACTION_NETWORK_PREFIX)?;
    if text.len() > MAX_ACTION_GRANT_BYTES {
        return Some(Err(ActionEntryError::TooLong(text.len())));
    }
    Some(Grant::parse(text).map_err(ActionEntryError::Grant))
}

/// Why a network entry of an action subset names no grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ActionEntryError {
    /// The text after `network:` is longer than any grant.
    #[error("its grant is {0} bytes long, above the {MAX_ACTION_GRANT_BYTES} a `host:port` grant may have")]
    TooLong(usize),
    /// The text after `network:` is not a grant.
    #[error("{0}")]
    Grant(GrantError),
}

/// The entries of an action subset as records and denials repeat them:
/// each `shown`, at most [`MAX_ACTION_ENTRIES_SHOWN`] of them, then how
/// many there were in all.
fn shown_entries(entries: &[String]) -> Vec<String> {
    let mut shown_list: Vec<String> = entries
        .iter()
        .take(MAX_ACTION_ENTRIES_SHOWN)
        .map(|e| shown(e))
        .collect();
    if entries.len() > MAX_ACTION_ENTRIES_SHOWN {
        shown_list.push(format!("… ({} entries in all)", entries.len()));
    }
    shown_list
}

/// The action's capability subset, checked before and after the op is
/// known, and narrowing the op's network grants once it is.
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

    /// The op's grants the spawn may reach. A subset that lists no network
    /// entry (or no subset) leaves them as they are; one that lists some
    /// keeps only the grants it names, which may be none. An entry naming a
    /// grant the op lacks adds nothing (the action may name another op's
    /// grants), and a malformed one names no grant: the daemon refuses
    /// those before the gate, and here they can only narrow.
    fn network(&self, granted: &[Grant]) -> Vec<Grant> {
        let Some(entries) = self.0 else {
            return granted.to_vec();
        };
        let named: Vec<Option<Grant>> = entries
            .iter()
            .filter_map(|e| action_network_entry(e))
            .map(Result::ok)
            .collect();
        if named.is_empty() {
            return granted.to_vec();
        }
        granted
            .iter()
            .filter(|g| named.iter().flatten().any(|n| n == *g))
            .cloned()
            .collect()
    }

    fn denial(&self, ctx: &GateContext, op: &str) -> Box<Denial> {
        let requested = if op.is_empty() {
            "spawn".to_string()
        } else {
            format!("spawn:{}", shown(op))
        };
        // The entries are the caller's: echoed as `shown`, and at most
        // MAX_ACTION_ENTRIES_SHOWN of them.
        let granted = shown_entries(self.0.unwrap_or(&[]));
        Denial::new(Reason::ActionDenied, ctx.connector, requested, granted, "the action's capability subset does not permit this spawn; the action file must list `spawn` or `spawn:<op>`")
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
            format!("spawn:{}", shown(name)),
            granted,
            format!(
                "{} has no operation `{}`; `spawnd manifest explain` lists its operations",
                ctx.connector,
                shown(name)
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
            "operation `{}` requires mode {} but the invocation runs at {mode}; {}",
            op.name,
            op.mode,
            how_to_ask_for_mode(ctx.access, op.mode)
        ),
    ))
}

/// The fix a mode denial suggests, in the words of the front end that
/// asked: a local invocation passes `--mode`, a daemon caller the request's
/// `mode` param (which `spawnd run --socket` fills from its `--mode`).
fn how_to_ask_for_mode(access: &Access, tier: Tier) -> String {
    match access {
        Access::Local => format!("pass --mode {tier}"),
        Access::Rules { .. } => format!(
            "set the request's `mode` param to \"{tier}\" (spawnd run --socket: --mode {tier})"
        ),
    }
}

/// A manifest whose scopes or cwd are anchored at `{workspace}` runs only
/// where the invocation or the operator named a workspace.
fn check_workspace_named(
    ctx: &GateContext,
    spawn: &SpawnGrant,
    caller: &Caller,
) -> Result<(), Box<Denial>> {
    let anchored = spawn
        .fs_read
        .iter()
        .chain(&spawn.fs_write)
        .chain(&spawn.fs_exec)
        .chain(&spawn.cwd)
        .find(|s| s.needs_workspace());
    match anchored {
        Some(scope) if caller.workspace.is_none() => Err(Denial::new(
            Reason::WorkspaceUnset,
            ctx.connector,
            format!("fs:{scope}"),
            vec![],
            format!(
                "`{scope}` is anchored at the workspace, and {}",
                how_to_name_a_workspace(ctx.access)
            ),
        )),
        _ => Ok(()),
    }
}

/// A manifest that names a path at `{connector}` runs only where the
/// directory holding its file is known: without it such a path would name
/// no place (and never the empty path).
fn check_connector_dir_known(ctx: &GateContext, manifest: &Manifest) -> Result<(), Box<Denial>> {
    let anchored = manifest
        .spawn
        .as_ref()
        .and_then(SpawnGrant::first_connector_path);
    match anchored {
        Some(path) if manifest.dir.is_none() => Err(Denial::new(
            Reason::ConnectorDirUnknown,
            ctx.connector,
            format!("path:{path}"),
            vec![],
            format!(
                "`{path}` lies in the connector's own directory, and spawnd does not know where the manifest {} is: name its file by an absolute path (in [server] manifests), or install the connector with `spawnd connector install`",
                shown(&manifest.source)
            ),
        )),
        _ => Ok(()),
    }
}

/// The fix a `workspace_unset` denial suggests, to the front end that
/// asked: a local invocation names one itself, while a daemon's caller
/// cannot (its requests carry no workspace), so only the daemon's operator
/// can.
fn how_to_name_a_workspace(access: &Access) -> &'static str {
    match access {
        Access::Local => "none was named: pass `spawnd run --workspace DIR`, or set [sandbox] workspace in the config",
        Access::Rules { .. } => "this daemon has none: its operator must set [sandbox] workspace in the daemon's config and reload the daemon (SIGHUP); a daemon's caller cannot name a workspace",
    }
}

/// Scopes with `~` and `{workspace}` expanded. A `~/` write scope that
/// lands on a system path for this caller (a service account whose home is
/// `/usr/sbin` or `/`), or a `{workspace}/` one for this workspace, is
/// refused: validation could not see it, the anchors decide it.
fn expand_scopes(
    ctx: &GateContext,
    spawn: &SpawnGrant,
    caller: &Caller,
) -> Result<FsPlan, Box<Denial>> {
    // Every anchor is named ([`check_workspace_named`] came first).
    let expand = |v: &[crate::manifest::ScopePath]| {
        v.iter()
            .filter_map(|s| s.expand(&ctx.anchors(caller)))
            .collect::<Vec<_>>()
    };
    let fs = FsPlan {
        read: expand(&spawn.fs_read),
        write: expand(&spawn.fs_write),
        exec: expand(&spawn.fs_exec),
        unix_sockets: Vec::new(),
    };
    if let Some((path, sys)) = fs
        .write
        .iter()
        .find_map(|p| system_path_overlap(p).map(|sys| (p, sys)))
    {
        return Err(Denial::new(
            Reason::CallerNotAllowed,
            ctx.connector,
            format!("caller:uid={},home={}", caller.uid, shown(&caller.home.display().to_string())),
            vec![],
            format!("for uid {} the fs_write scope expands to {}, which overlaps the system path {sys}; spawnd never makes system paths writable, so this caller cannot use this connector", caller.uid, path.display()),
        ));
    }
    Ok(fs)
}

/// An operation with network grants runs only where the operator has not
/// disabled them (`[network] enabled = false`). `network` is what the
/// spawn would reach, after the action subset narrowed the op's grants: a
/// spawn left with none needs no network.
fn check_network_enabled(
    ctx: &GateContext,
    op: &Operation,
    network: &[Grant],
) -> Result<(), Box<Denial>> {
    match network.first() {
        Some(first) if !ctx.network_enabled => Err(Denial::new(
            Reason::NetworkDisabled,
            ctx.connector,
            format!("network:{first}"),
            vec![],
            format!(
                "operation `{}` is granted network access ({}), and the operator disabled network grants ([network] enabled = false)",
                op.name,
                network.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            ),
        )),
        _ => Ok(()),
    }
}
