//! Programs and operations: each operation's template parsed and proven
//! unambiguous, its params typed, its tier read, its limits tightened, and the
//! operation bound to exactly one declared program.

use std::collections::BTreeMap;
use std::ops::Range;

use toml::Spanned;

use super::limits::Limits;
use super::model::{Operation, Program, Sha256Digest, ValueKind};
use super::network::check_operation_grants;
use super::paths::ScopePath;
use super::raw::{RawArgv, RawArgvItem, RawOperation, RawParam, RawProgram, RawSpawn};
use super::scopes::{check_path, check_program_path};
use super::validate::{check_limits, Checker};
use crate::egress::grant::Grant;
use crate::template::{ParamRule, Params, Pattern, Template, TokenSource};

/// The longest value a param may allow: the kernel's limit for one argv string.
pub(crate) const MAX_VALUE_LEN: i64 = 128 * 1024;

/// Validates `programs` and `operations`.
pub(super) fn validate_operations(
    c: &mut Checker,
    s: &RawSpawn,
    spawn_span: Range<usize>,
    base: Limits,
    base_sockets: &[ScopePath],
    base_network: &[Grant],
) -> Option<(Vec<Program>, BTreeMap<String, Operation>)> {
    let programs = check_programs(c, s.programs.as_ref(), spawn_span.clone());
    let empty = BTreeMap::new();
    let ops = s.operations.as_ref().map_or(&empty, |o| o.get_ref());
    if ops.is_empty() {
        let span = s.operations.as_ref().map_or(spawn_span, Spanned::span);
        c.error(span, "capabilities.spawn.operations", "[capabilities.spawn.operations] is required: a spawn grant without operations allows nothing", "add e.g. [capabilities.spawn.operations.status] with argv = \"git status\"");
    }
    let mut operations = BTreeMap::new();
    for (name, op) in ops {
        let programs = programs.as_deref().unwrap_or(&[]);
        if let Some(op) = check_operation(c, name, op, programs, &base, base_sockets, base_network)
        {
            operations.insert(name.get_ref().clone(), op);
        }
    }
    Some((programs?, operations))
}

fn check_programs(
    c: &mut Checker,
    programs: Option<&Spanned<Vec<Spanned<RawProgram>>>>,
    spawn_span: Range<usize>,
) -> Option<Vec<Program>> {
    let Some(programs) = programs.filter(|p| !p.get_ref().is_empty()) else {
        let span = programs.map_or(spawn_span, Spanned::span);
        c.error(
            span,
            "capabilities.spawn.programs",
            "programs is required: declare at least one program",
            "programs = [{ path = \"/usr/bin/git\" }]",
        );
        return None;
    };
    let mut out: Vec<Program> = Vec::new();
    let mut ok = true;
    for (i, p) in programs.get_ref().iter().enumerate() {
        let p = p.get_ref();
        let key = format!("capabilities.spawn.programs[{i}].path");
        if p.path.get_ref().trim().is_empty() {
            c.error(
                p.path.span(),
                &key,
                "path is required",
                "give the program's absolute path, e.g. \"/usr/bin/git\"",
            );
            ok = false;
            continue;
        }
        let hash = p.hash.as_ref().and_then(|h| {
            h.get_ref()
                .parse::<Sha256Digest>()
                .map_err(|why| {
                    c.error(
                        h.span(),
                        &format!("capabilities.spawn.programs[{i}].hash"),
                        why,
                        "",
                    )
                })
                .ok()
        });
        let Some(path) = check_program_path(c, &p.path, &key) else {
            ok = false;
            continue;
        };
        if out.iter().any(|q| q.path == path) {
            c.error(
                p.path.span(),
                &key,
                format!("`{path}` is declared twice"),
                "remove the duplicate",
            );
            ok = false;
        }
        if p.hash.is_some() && hash.is_none() {
            ok = false;
        }
        if hash.is_none() {
            c.warn(&key, format!("`{path}` has no pinned hash; any bytes at that path will run (fix: `spawnd manifest pin`)"));
        }
        out.push(Program { path, hash });
    }
    ok.then_some(out)
}

/// Programs that run code given as an argument, by file name (a version
/// suffix aside: `python3.11` is `python`), and the options that take it.
const CODE_RUNNERS: &[(&str, &[&str])] = &[
    ("sh", &["-c"]),
    ("bash", &["-c"]),
    ("dash", &["-c"]),
    ("zsh", &["-c"]),
    ("ksh", &["-c"]),
    ("mksh", &["-c"]),
    ("fish", &["-c", "--command"]),
    ("busybox", &["-c"]),
    ("python", &["-c"]),
    ("pypy", &["-c"]),
    ("perl", &["-e", "-E"]),
    ("ruby", &["-e"]),
    ("node", &["-e", "--eval", "-p", "--print"]),
    ("nodejs", &["-e", "--eval", "-p", "--print"]),
    ("deno", &["eval"]),
    ("php", &["-r"]),
    ("lua", &["-e"]),
    ("luajit", &["-e"]),
    ("osascript", &["-e"]),
    ("awk", &[""]),
    ("gawk", &[""]),
    ("mawk", &[""]),
];

/// The options with which `program` (a declared path) runs code given as an
/// argument, if it is one of [`CODE_RUNNERS`].
fn code_options(program: &ScopePath) -> Option<&'static [&'static str]> {
    let name = program.file_name()?;
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    CODE_RUNNERS
        .iter()
        .find(|(runner, _)| *runner == name || *runner == base)
        .map(|(_, options)| *options)
}

/// The placeholders of `template` that `program` runs as code (`{script}`
/// in `bash -c {script}`, `{code}` in `python3 -c {code}`).
pub(crate) fn code_placeholders<'t>(template: &'t Template, program: &ScopePath) -> Vec<&'t str> {
    match code_options(program) {
        None => Vec::new(),
        // awk: its first operand that is not an option is the program.
        Some([""]) => template.placeholders_after(&[template.program_token()]),
        Some(options) => template.placeholders_after(options),
    }
}

/// Warns when a placeholder is code an interpreter runs: the caller then
/// chooses what runs, with every program the sandbox shows, and no pin
/// covers those.
fn warn_code_from_the_caller(c: &mut Checker, template: &Template, program: &ScopePath, key: &str) {
    for name in code_placeholders(template, program) {
        c.warn(
            &format!("{key}.argv"),
            format!(
                "{{{name}}} is code `{}` runs: the caller chooses what runs, with any program the sandbox shows, and no pinned hash covers those (fix: declare each command as its own operation, or keep this one knowingly for trusted callers)",
                program.file_name().unwrap_or("the program")
            ),
        );
    }
}

/// The longest operation name, in bytes.
pub(crate) const MAX_OP_NAME_BYTES: usize = 64;

/// Checks an operation name: `[a-z][a-z0-9_-]*`, at most
/// [`MAX_OP_NAME_BYTES`]. The manifest loader holds declared names to it, and
/// the CLI and the daemon hold requested ones to it before anything is
/// recorded (a name that fails can name no operation). The error never
/// repeats the name.
pub(crate) fn check_op_name(name: &str) -> Result<(), String> {
    if name.len() > MAX_OP_NAME_BYTES {
        return Err(format!(
            "an operation name has at most {MAX_OP_NAME_BYTES} bytes (this one has {})",
            name.len()
        ));
    }
    let mut chars = name.chars();
    let well_formed = matches!(chars.next(), Some(c) if c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !well_formed {
        return Err("an operation name must match [a-z][a-z0-9_-]*".into());
    }
    Ok(())
}

fn check_operation(
    c: &mut Checker,
    name: &Spanned<String>,
    op: &Spanned<RawOperation>,
    programs: &[Program],
    base: &Limits,
    base_sockets: &[ScopePath],
    base_network: &[Grant],
) -> Option<Operation> {
    let key = format!("capabilities.spawn.operations.{}", name.get_ref());
    if let Err(why) = check_op_name(name.get_ref()) {
        c.error(
            name.span(),
            &key,
            format!(
                "{why} (got `{}`)",
                crate::printable::printable(name.get_ref())
            ),
            "use lowercase letters, digits, `_` and `-`, starting with a letter",
        );
        return None;
    }
    let raw = op.get_ref();
    let template = parse_template(c, &raw.argv, &key)?;
    let (params, kinds) = check_params(c, raw, &template, &key)?;
    for (name, kind) in &kinds {
        let climbs = |before: &String| before.contains('/') || before.contains('~');
        if *kind == ValueKind::Path && template.literals_before(name).iter().any(climbs) {
            c.error(raw.argv.span(), &format!("{key}.params.{name}"), format!("the path placeholder {{{name}}} follows a directory in its argv element, so the value's own path is not the path the program opens"), "let the placeholder begin the element (or follow an option like `--file=`) and give the directory as a scope instead");
            return None;
        }
    }
    let param_descriptions = raw
        .params
        .iter()
        .filter_map(|(n, p)| Some((n.get_ref().clone(), p.get_ref().description.clone()?)))
        .collect();
    if let Err(e) = template.check_unambiguous(&params) {
        c.error(raw.argv.span(), &format!("{key}.argv"), e.to_string(), "");
        return None;
    }
    let mode = match &raw.mode {
        None => Default::default(),
        Some(m) => m
            .get_ref()
            .parse()
            .map_err(|why: String| c.error(m.span(), &format!("{key}.mode"), why, ""))
            .ok()?,
    };
    let program = bind_program(c, &template, programs, raw.argv.span(), &key)?;
    warn_code_from_the_caller(c, &template, &programs[program].path, &key);
    let limits = match &raw.limits {
        None => *base,
        Some(l) => check_limits(c, l, &format!("{key}.limits"), base, true)?,
    };
    let mut unix_sockets = base_sockets.to_vec();
    for path in &raw.unix_sockets {
        let socket = check_path(c, path, &format!("{key}.unix_sockets"))?;
        if !unix_sockets.contains(&socket) {
            unix_sockets.push(socket);
        }
    }
    let network = check_operation_grants(
        c,
        raw.network.as_ref(),
        base_network,
        &format!("{key}.network"),
    );
    Some(Operation {
        name: name.get_ref().clone(),
        template,
        params,
        kinds,
        param_descriptions,
        description: raw.description.clone(),
        mode,
        program,
        limits,
        unix_sockets,
        network,
    })
}

fn parse_template(c: &mut Checker, argv: &Spanned<RawArgv>, key: &str) -> Option<Template> {
    let key = format!("{key}.argv");
    let parsed = match argv.get_ref() {
        RawArgv::Text(text) if text.trim().is_empty() => {
            c.error(
                argv.span(),
                &key,
                "argv is required",
                "e.g. argv = \"git status --short\"",
            );
            return None;
        }
        RawArgv::Tokens(items) if items.is_empty() => {
            c.error(
                argv.span(),
                &key,
                "argv is required",
                "e.g. argv = [\"git\", \"status\"]",
            );
            return None;
        }
        RawArgv::Text(text) => Template::parse_str(text),
        RawArgv::Tokens(items) => {
            let tokens: Vec<TokenSource> = items
                .iter()
                .map(|i| match i {
                    RawArgvItem::Token(t) => TokenSource::Token(t.clone()),
                    RawArgvItem::Group(g) => TokenSource::Group(g.clone()),
                })
                .collect();
            Template::parse_tokens(&tokens)
        }
    };
    parsed
        .map_err(|e| c.error(argv.span(), &key, e.to_string(), ""))
        .ok()
}

type ParamsAndKinds = (Params, BTreeMap<String, ValueKind>);

fn check_params(
    c: &mut Checker,
    raw: &RawOperation,
    template: &Template,
    key: &str,
) -> Option<ParamsAndKinds> {
    let placeholders = template.placeholders();
    let mut params = Params::default();
    let mut kinds = BTreeMap::new();
    let mut ok = true;
    for (name, param) in &raw.params {
        let pkey = format!("{key}.params.{}", name.get_ref());
        if !placeholders.contains(&name.get_ref().as_str()) {
            c.error(
                name.span(),
                &pkey,
                format!(
                    "`{}` is not a placeholder of this operation's argv",
                    name.get_ref()
                ),
                "remove the table or add `{name}` to argv",
            );
            ok = false;
            continue;
        }
        match check_param(c, param.get_ref(), &pkey) {
            Some((rule, kind)) => {
                params.insert(name.get_ref().clone(), rule);
                kinds.insert(name.get_ref().clone(), kind);
            }
            None => ok = false,
        }
    }
    ok.then_some((params, kinds))
}

fn check_param(c: &mut Checker, p: &RawParam, key: &str) -> Option<(ParamRule, ValueKind)> {
    let mut rule = ParamRule::default();
    if let Some(pattern) = &p.pattern {
        rule.pattern = Some(
            Pattern::new(pattern.get_ref())
                .map_err(|e| c.error(pattern.span(), &format!("{key}.pattern"), e.to_string(), ""))
                .ok()?,
        );
    }
    if let Some(max) = &p.max_len {
        let v = *max.get_ref();
        if !(1..=MAX_VALUE_LEN).contains(&v) {
            c.error(
                max.span(),
                &format!("{key}.max_len"),
                format!("max_len = {v} must be between 1 and {MAX_VALUE_LEN}"),
                "",
            );
            return None;
        }
        rule.max_len = v as usize;
    }
    rule.values = p.values.clone();
    rule.allow_dash = p.allow_dash.unwrap_or(false);
    rule.allow_empty = p.allow_empty.unwrap_or(false);
    rule.default = p.default.clone();
    let kind = match p.kind.as_ref().map(|k| k.get_ref().as_str()) {
        None | Some("string") => ValueKind::String,
        Some("path") => ValueKind::Path,
        Some(other) => {
            let span = p.kind.as_ref().map_or(0..0, Spanned::span);
            c.error(
                span,
                &format!("{key}.kind"),
                format!("unknown kind `{other}`"),
                "use \"string\" or \"path\"",
            );
            return None;
        }
    };
    Some((rule, kind))
}

/// The program whose path equals the first token, or whose declared file name does.
fn bind_program(
    c: &mut Checker,
    template: &Template,
    programs: &[Program],
    span: Range<usize>,
    key: &str,
) -> Option<usize> {
    let first = template.program_token();
    let by_path: Vec<usize> = programs
        .iter()
        .enumerate()
        .filter(|(_, p)| p.path.to_string() == first)
        .map(|(i, _)| i)
        .collect();
    let matches = if by_path.is_empty() {
        programs
            .iter()
            .enumerate()
            .filter(|(_, p)| p.path.file_name() == Some(first))
            .map(|(i, _)| i)
            .collect()
    } else {
        by_path
    };
    match matches.as_slice() {
        [one] => Some(*one),
        [] => {
            c.error(
                span,
                &format!("{key}.argv"),
                format!("the first token `{first}` names no declared program"),
                "add the program to `programs` or start argv with its path or file name",
            );
            None
        }
        _ => {
            c.error(
                span,
                &format!("{key}.argv"),
                format!("the first token `{first}` matches several declared programs"),
                "start argv with the program's full path",
            );
            None
        }
    }
}
