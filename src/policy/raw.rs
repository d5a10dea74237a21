//! Raw envelopes (`spawn`, `run --envelope`): the program must be declared
//! and the argv must match an operation bound to that program, with the same
//! value rules as `spawn_op`. When several operations match, the first one
//! (in name order) that the action subset and mode tier permit is used, so a
//! broad operation declared beside a narrow one cannot shadow it.

use std::collections::BTreeMap;

use super::checks::arg_denial;
use super::decision::{shown, Denial};
use super::reason::Reason;
use super::request::{Caller, GateContext};
use crate::manifest::{Operation, SpawnGrant};
use crate::template::MatchError;

/// The first candidate that `permitted` accepts, else the first candidate's refusal.
pub(super) fn choose_candidate<'a>(
    ctx: &GateContext,
    candidates: Vec<Matched<'a>>,
    permitted: impl Fn(&Operation) -> Result<(), Box<Denial>>,
) -> Result<Matched<'a>, Box<Denial>> {
    let mut first_refusal = None;
    for (op, args) in candidates {
        match permitted(op) {
            Ok(()) => return Ok((op, args)),
            Err(d) => {
                first_refusal.get_or_insert(d);
            }
        }
    }
    Err(first_refusal.unwrap_or_else(|| {
        Denial::new(
            Reason::ArgvNotDeclared,
            ctx.connector,
            "argv",
            vec![],
            "the argv matches no declared operation",
        )
    }))
}

/// An operation a raw argv matched, with the values extracted from it.
pub(super) type Matched<'a> = (&'a Operation, BTreeMap<String, String>);

/// A raw envelope: the program must be declared and the argv must match one
/// operation bound to that program, with the same value rules as `spawn_op`.
pub(super) fn match_raw<'a>(
    ctx: &GateContext,
    caller: &Caller,
    spawn: Option<&'a SpawnGrant>,
    program: &str,
    argv: &[String],
) -> Result<Vec<Matched<'a>>, Box<Denial>> {
    if program.is_empty() || argv.is_empty() {
        let what = if program.is_empty() {
            "program"
        } else {
            "argv"
        };
        return Err(Denial::new(
            Reason::ValueInvalid,
            ctx.connector,
            format!("spawn:{}", shown(program)),
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
            format!("spawn:{}", shown(program)),
            granted,
            format!(
                "program {} is not declared in {}'s manifest",
                shown(program),
                ctx.connector
            ),
        )
    };
    let spawn = spawn.ok_or_else(|| not_declared(vec![]))?;
    let index =
        find_program(ctx, spawn, caller, program).ok_or_else(|| not_declared(declared(spawn)))?;
    // A program's path always expands: never anchored at the workspace,
    // and the gate checked that the connector's directory is known.
    let program_path = spawn.programs[index]
        .path
        .expand(&ctx.anchors(caller))
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let mut first_value_error = None;
    let mut matched = Vec::new();
    for op in spawn.operations_of(index) {
        match op.template.match_argv(argv, &program_path, &op.params) {
            Ok(args) => matched.push((op, args)),
            Err(MatchError::Arg(e)) => {
                first_value_error.get_or_insert_with(|| arg_denial(ctx, op, &e));
            }
            Err(MatchError::Shape) => {}
        }
    }
    if !matched.is_empty() {
        return Ok(matched);
    }
    Err(first_value_error.unwrap_or_else(|| {
        let granted = spawn.operations_of(index).map(|op| op.template.shape()).collect();
        Denial::new(Reason::ArgvNotDeclared, ctx.connector, format!("argv:{}", shown(program)), granted, format!("the argv matches no operation declared for {}; `spawnd manifest explain` lists the allowed shapes", shown(program)))
    }))
}

/// A declared program named by its path (after `~`) or, uniquely, by its file name.
fn find_program(
    ctx: &GateContext,
    spawn: &SpawnGrant,
    caller: &Caller,
    program: &str,
) -> Option<usize> {
    let by_path = spawn.programs.iter().position(|p| {
        p.path.to_string() == program
            || p.path
                .expand(&ctx.anchors(caller))
                .is_some_and(|e| e.as_os_str() == program)
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
