//! `exec = "declared"`: the files a spawn may execute, each opened and
//! checked by the gate as the program is (a regular file, neither setuid
//! nor setgid, no file capabilities, its pin matched): every other entry
//! of `programs`, every `also_runs` file, and the interpreter or ELF loader
//! each of these (and the program) names, followed to their own loaders.
//! Under the default (`"scopes"`) nothing is opened here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::decision::Denial;
use super::inspector::{ProgramFacts, ProgramFault, ProgramInspector};
use super::reason::Reason;
use super::request::{Caller, GateContext};
use crate::interpreter::{Interpreter, InterpreterKind};
use crate::manifest::{ExecPolicy, Operation, Sha256Digest, SpawnGrant};
use crate::plan::{ExecPlan, ExecutableFile, GrantedAs, ProgramPlan};

/// How many interpreters deep a chain is followed: the kernel itself
/// follows a `#!` script's interpreter at most four more times
/// (`BINPRM_MAX_RECURSION`), and an ELF loader names none.
const MAX_INTERPRETER_DEPTH: usize = 5;

/// The files the program may execute: [`ExecPlan::Scopes`] under the
/// default policy, else each declared one, checked. `program` is the
/// spawn's own, already checked ([`super::checks::check_program`]).
pub(super) fn check_executables(
    ctx: &GateContext,
    spawn: &SpawnGrant,
    op: &Operation,
    caller: &Caller,
    programs: &mut dyn ProgramInspector,
    program: &ProgramPlan,
    require_pin: bool,
) -> Result<ExecPlan, Box<Denial>> {
    if spawn.exec == ExecPolicy::Scopes {
        return Ok(ExecPlan::Scopes);
    }
    let mut found = Found::default();
    found.seen.insert(program.resolved.clone());
    let mut interpreters: Vec<(Interpreter, usize)> =
        program.interpreter.iter().map(|i| (i.clone(), 1)).collect();
    for (i, declared) in spawn.programs.iter().enumerate() {
        if i == op.program {
            continue;
        }
        let path = declared
            .path
            .expand(&ctx.anchors(caller))
            .unwrap_or_default();
        let what = format!("program {}", declared.path);
        // The publisher's pin, else the operator's kept beside an installed
        // connector (docs/provenance.md, "Operator pins"), as for the program.
        let operator_pin = ctx
            .manifest
            .and_then(|m| m.verified.as_ref())
            .and_then(|i| i.pins.get(&path).copied());
        let pin = match (declared.hash, operator_pin, require_pin) {
            (Some(pin), _, _) => Pin::Must(pin),
            (None, Some(pin), _) => Pin::Operator(pin),
            (None, None, true) => Pin::Required,
            (None, None, false) => Pin::None,
        };
        let facts = inspect(ctx, programs, &path, &what)?;
        check_file(ctx, &what, &facts, pin)?;
        interpreters.extend(facts.interpreter.clone().map(|i| (i, 1)));
        found.add(facts, GrantedAs::DeclaredProgram);
    }
    for also in &spawn.also_runs {
        let what = format!("also_runs {}", also.path);
        // Every anchor is known (the gate checked the connector's directory first).
        let path = also.path.expand(&ctx.anchors(caller)).unwrap_or_default();
        let facts = inspect(ctx, programs, &path, &what)?;
        check_file(ctx, &what, &facts, Pin::Must(also.hash))?;
        interpreters.extend(facts.interpreter.clone().map(|i| (i, 1)));
        found.add(facts, GrantedAs::AlsoRuns);
    }
    let mut asked = BTreeSet::new();
    while let Some((named, depth)) = interpreters.pop() {
        if depth > MAX_INTERPRETER_DEPTH || !asked.insert(named.path.clone()) {
            continue;
        }
        let what = format!("interpreter {}", named.path.display());
        // One that is not there is not granted: executing through it fails
        // in the sandbox as it would anywhere.
        let facts = match programs.inspect(&named.path) {
            Err(ProgramFault::Missing { .. }) => continue,
            Err(fault) => return Err(unreadable(ctx, &what, &fault)),
            Ok(facts) => facts,
        };
        check_file(ctx, &what, &facts, Pin::None)?;
        interpreters.extend(facts.interpreter.clone().map(|i| (i, depth + 1)));
        let granted_as = match named.kind {
            InterpreterKind::Shebang => GrantedAs::Interpreter,
            InterpreterKind::ElfLoader => GrantedAs::Loader,
        };
        found.add(facts, granted_as);
    }
    Ok(ExecPlan::Declared { files: found.files })
}

/// The files granted so far, each once.
#[derive(Default)]
struct Found {
    files: Vec<ExecutableFile>,
    seen: BTreeSet<PathBuf>,
}

impl Found {
    fn add(&mut self, facts: ProgramFacts, granted_as: GrantedAs) {
        if self.seen.insert(facts.resolved.clone()) {
            self.files.push(ExecutableFile {
                path: facts.resolved,
                granted_as,
                sha256: facts.sha256,
                file: facts.file,
            });
        }
    }
}

/// What a file's hash must be.
#[derive(Clone, Copy)]
enum Pin {
    /// This pin, the manifest's.
    Must(Sha256Digest),
    /// This pin, the operator's (`spawnd connector pin`).
    Operator(Sha256Digest),
    /// A pin, which the manifest lacks (`[sandbox] require_program_hash`).
    Required,
    /// None (an unpinned program, or an interpreter).
    None,
}

fn inspect(
    ctx: &GateContext,
    programs: &mut dyn ProgramInspector,
    path: &Path,
    what: &str,
) -> Result<ProgramFacts, Box<Denial>> {
    programs
        .inspect(path)
        .map_err(|fault| unreadable(ctx, what, &fault))
}

fn unreadable(ctx: &GateContext, what: &str, fault: &ProgramFault) -> Box<Denial> {
    let mut d = Denial::new(
        Reason::ProgramNotRegular,
        ctx.connector,
        format!("exec:{what}"),
        vec![],
        format!("{what}: {fault}; under exec = \"declared\" every declared program and also_runs file must be there to be granted"),
    );
    d.missing_program = matches!(fault, ProgramFault::Missing { .. });
    d
}

/// The checks the program itself gets: a regular file, no privilege
/// raised on exec, its pin matched.
fn check_file(
    ctx: &GateContext,
    what: &str,
    facts: &ProgramFacts,
    pin: Pin,
) -> Result<(), Box<Denial>> {
    let resolved = facts.resolved.display();
    if !facts.regular {
        return Err(Denial::new(
            Reason::ProgramNotRegular,
            ctx.connector,
            format!("exec:{resolved}"),
            vec![],
            format!("{what} resolves to {resolved}, which is not a regular file"),
        ));
    }
    if facts.setid || facts.file_caps {
        return Err(Denial::new(
            Reason::ProgramSetuid,
            ctx.connector,
            format!("exec:{resolved}"),
            vec![],
            format!("{what} ({resolved}) is setuid, setgid or carries file capabilities; spawnd never runs privilege-raising programs"),
        ));
    }
    match pin {
        Pin::Must(pin) if pin != facts.sha256 => Err(Denial::new(
            Reason::ProgramHashMismatch,
            ctx.connector,
            format!("exec:{resolved} {}", facts.sha256),
            vec![pin.to_string()],
            format!("{what} ({resolved}) has sha256 {} but the manifest pins {pin}; the file changed since it was pinned (re-pin it only if the change is expected)", facts.sha256),
        )),
        Pin::Operator(pin) if pin != facts.sha256 => Err(Denial::new(
            Reason::ProgramHashMismatch,
            ctx.connector,
            format!("exec:{resolved} {}", facts.sha256),
            vec![pin.to_string()],
            format!("{what} ({resolved}) has sha256 {} but the operator pins {pin}; the file changed since it was pinned (re-pin with `spawnd connector pin` only if the change is expected)", facts.sha256),
        )),
        Pin::Required => Err(Denial::new(
            Reason::ProgramHashMismatch,
            ctx.connector,
            format!("exec:{resolved} {}", facts.sha256),
            vec![],
            format!("the operator requires pinned program hashes and {what} has none; run `spawnd manifest pin`"),
        )),
        _ => Ok(()),
    }
}
