//! `spawnd learn`: runs a command once through the one spawn pipeline,
//! traced ([`crate::sandbox::trace`]), under an observation manifest made
//! for it here — the host's directories readable and executable, the
//! workspace writable, the host paths the command names readable even
//! where the sandbox has its own (`/tmp`) — and writes the draft manifest
//! ([`crate::draft`]) that grants what the run used.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::args::{Cli, LearnArgs};
use super::context::{current_caller, load_config};
use super::output::{print_notice, Failure, Success};
use super::run::live_output;
use crate::draft::{Host, Observed};
use crate::egress::learning::Learning;
use crate::failure::FailureKind;
use crate::manifest::{parse_manifest, LoadOptions, Tier};
use crate::pipeline::{self, Concluded, Spawn};
use crate::policy::{Access, Request, RequestKind};
use crate::printable::printable;
use crate::program::hash_path;
use crate::sandbox::launch::StdinSource;
use crate::spawn_result::{NetworkReport, SpawnResult, TraceReport};

/// How long a learned command may run unless `--timeout` says.
const DEFAULT_TIMEOUT_MS: u64 = 600_000;

/// Top-level directories never offered as scopes while learning: the
/// sandbox makes its own, or they hold only runtime state.
const NOT_OFFERED: &[&str] = &["proc", "sys", "dev", "tmp", "run", "lost+found"];

/// `spawnd learn`: what the run may see, the run, the draft of what it
/// used, and a summary for a person.
pub(super) fn learn(cli: &Cli, args: &LearnArgs) -> Result<Success, Failure> {
    if args.output.exists() && !args.force {
        return Err(Failure::usage(format!(
            "--output {} exists; choose another file or pass --force",
            args.output.display()
        )));
    }
    let setting = Setting::of(cli, args)?;
    let prepared = setting.prepared(args)?;
    let ran = observe(cli, args, &prepared)?;
    let result = &ran.result;
    let trace = result.trace.clone().unwrap_or_default();
    if let Some(e) = &trace.error {
        return Err(Failure::sandbox_unavailable(format!(
            "the trace stopped early ({e}); no draft was written"
        )));
    }
    let observed = setting.observed(args, &prepared, result, &trace);
    let draft = observed.draft(&RealHost);
    parse_manifest("(draft)", &draft.text, LoadOptions::default())
        .map_err(|e| Failure::internal(format!("the draft does not load: {e}\n{}", draft.text)))?;
    super::manifest_cmd::write_output(&args.output, &draft.text, args.force)?;
    let said = Said {
        observed: &observed,
        draft: &draft,
        trace: &trace,
        exit: ran.exit,
        network: result.network.as_ref(),
    };
    let human = summary(args, &setting.workspace, &said);
    let mut success = Success::new(
        json!({"file": args.output, "manifest": draft.text, "review": draft.review, "run": ran.result}),
        String::new(),
    );
    // The summary goes to stderr, beside the command's own output.
    if !cli.json {
        eprintln!("{human}");
    }
    success.exit = ran.exit;
    success.keep_ok = true;
    Ok(success)
}

/// What a learning run is: the program pinned, where it runs and writes,
/// what it is shown besides, and under which name its draft goes.
struct Setting {
    config: crate::config::Config,
    program: PathBuf,
    program_hash: String,
    /// The argv, `argv[0]` as typed: a program may find its home from it
    /// (Python's prefix).
    argv: Vec<String>,
    workspace: PathBuf,
    cwd: PathBuf,
    writable: Vec<PathBuf>,
    /// The host's directories offered read-only and executable.
    offered: Vec<PathBuf>,
    /// Host paths shown to read (named by the command, `--read`).
    read: Vec<PathBuf>,
    /// Toolchain prefixes shown (`--exec`).
    exec: Vec<PathBuf>,
    /// The connector's name.
    name: String,
}

impl Setting {
    /// The setting the arguments ask for, checked: the workspace and the
    /// output are not where the run must never write, the names are
    /// valid, and the run identity can see the program's own tree.
    fn of(cli: &Cli, args: &LearnArgs) -> Result<Setting, Failure> {
        let config = load_config(cli)?;
        let program = find_program(&args.command[0])?;
        let program_hash = hash_path(&program)
            .map_err(|e| {
                Failure::from_io(
                    &e,
                    FailureKind::Usage,
                    format!("cannot hash {}: {e}", program.display()),
                )
            })?
            .to_string();
        let here = std::env::current_dir().map_err(|e| Failure::usage(format!("getcwd: {e}")))?;
        let workspace = std::fs::canonicalize(args.workspace.as_deref().unwrap_or(&here))
            .map_err(|e| Failure::usage(format!("--workspace: {e}")))?;
        let cwd = std::fs::canonicalize(&here).unwrap_or(here);
        let mut writable = vec![workspace.clone()];
        writable.extend(canonical("write", &args.write)?);
        guard_workspace(&writable, &caller_home())?;
        guard_output(&args.output, &writable)?;
        let exec_dirs = canonical("exec", &args.exec)?;
        let mut named = canonical("read", &args.read)?;
        named.extend(named_paths(&args.command[1..], &cwd));
        named.push(cwd.clone());
        let name = match &args.name {
            Some(n) => n.clone(),
            None => format!("local://learned/{}", slug(&program)),
        };
        crate::manifest::Fqn::parse(&name).map_err(|why| {
            Failure::usage(format!("--name is not a valid connector name: {why}"))
        })?;
        crate::manifest::check_op_name(&args.op)
            .map_err(|why| Failure::usage(format!("--op: {why}")))?;
        let run_as = run_identity(&config);
        let offered = offered_directories(&writable, run_as);
        let Shown { read, exec } = shown_besides(&offered, &writable, &named, &exec_dirs);
        let roots: Vec<PathBuf> = offered
            .iter()
            .chain(&config.sandbox.system_paths)
            .chain(&writable)
            .chain(&read)
            .chain(&exec)
            .cloned()
            .collect();
        if let Some(why) = hidden_program(&program, &roots, run_as, run_as_set_by_root(&config)) {
            return Err(Failure::usage(why));
        }
        Ok(Setting {
            config,
            program,
            program_hash,
            argv: args.command.clone(),
            workspace,
            cwd,
            writable,
            offered,
            read,
            exec,
            name,
        })
    }

    /// The run's request under its observation manifest.
    fn prepared(&self, args: &LearnArgs) -> Result<crate::pipeline::Prepared, Failure> {
        let env = env_values(&args.env)?;
        let observation = observation_manifest(&ObservationParts {
            program: &self.program,
            program_hash: &self.program_hash,
            argv: &self.argv,
            cwd: &self.cwd,
            writable: &self.writable,
            env_keys: &env.keys().cloned().collect::<Vec<_>>(),
            offered: &self.offered,
            read: &self.read,
            exec: &self.exec,
            timeout_ms: args.timeout.unwrap_or(DEFAULT_TIMEOUT_MS),
        });
        let manifest = parse_manifest(
            "(spawnd learn)",
            &observation,
            LoadOptions {
                max_wall_time_ms: self.config.sandbox.max_wall_time_ms.max(DEFAULT_TIMEOUT_MS),
            },
        )
        .map_err(|e| Failure::internal(format!("the observation manifest does not load: {e}")))?;
        let mut caller = current_caller()?;
        caller.workspace = Some(self.workspace.clone());
        Ok(crate::pipeline::Prepared {
            config: std::sync::Arc::new(self.config.clone()),
            manifest: manifest.into(),
            caller,
            request: Request {
                kind: RequestKind::Op {
                    name: "observed".into(),
                    args: BTreeMap::new(),
                },
                env,
                cwd: Some(self.cwd.display().to_string()),
                action: None,
                pin: Default::default(),
                mode: Tier::Write,
            },
        })
    }

    /// What the run showed, for the draft.
    fn observed(
        &self,
        args: &LearnArgs,
        prepared: &crate::pipeline::Prepared,
        result: &SpawnResult,
        trace: &TraceReport,
    ) -> Observed {
        let caller = &prepared.caller;
        let home = Some(caller.home.clone()).filter(|h| h.is_absolute() && h != Path::new("/"));
        let visible: Vec<PathBuf> = self.read.iter().chain(&self.exec).cloned().collect();
        Observed {
            name: self.name.clone(),
            op: args.op.clone(),
            program: self.program.clone(),
            program_hash: self.program_hash.clone(),
            argv: self.argv.clone(),
            cwd: self.cwd.clone(),
            workspace: self.workspace.clone(),
            writable: self.writable.clone(),
            executed: executed(&trace.executed, &self.writable, &visible),
            visible,
            exec_dirs: self.exec.clone(),
            home,
            paths: trace
                .paths
                .iter()
                .map(|p| (p.path.clone(), p.how))
                .collect(),
            env_keys: prepared.request.env.keys().cloned().collect(),
            network: result
                .network
                .as_ref()
                .and_then(|n| n.contacted.clone())
                .unwrap_or_default(),
            system_paths: self.config.sandbox.system_paths.clone(),
            duration_ms: result.duration_ms,
            exit_code: result.exit_code,
            refused: trace
                .refusals
                .iter()
                .map(crate::pipeline::describe_refusal)
                .collect(),
        }
    }
}

/// Each of `dirs` (given with `--FLAG`) as a real path.
fn canonical(flag: &str, dirs: &[PathBuf]) -> Result<Vec<PathBuf>, Failure> {
    dirs.iter()
        .map(|d| {
            std::fs::canonicalize(d)
                .map_err(|e| Failure::usage(format!("--{flag} {}: {e}", d.display())))
        })
        .collect()
}

/// The learning run: traced, its network learned as `--net` says, its
/// output live, the sandbox's refusals kept for the draft.
fn observe(
    cli: &Cli,
    args: &LearnArgs,
    prepared: &crate::pipeline::Prepared,
) -> Result<Concluded, Failure> {
    pipeline::run(Spawn {
        prepared,
        access: &Access::Local,
        stdin: StdinSource::Null,
        pump: None,
        timeout_ms: args.timeout,
        live: live_output(cli.json, true),
        json: cli.json,
        spawner: None,
        on_started: None,
        signals_end_the_run: true,
        // The refusals go into the draft, as comments; the rest is shown.
        on_notice: &|n| {
            if !matches!(n, crate::pipeline::Notice::Refused { .. }) {
                print_notice(n)
            }
        },
        trace: true,
        ended_by: None,
        shared_connections: None,
        network_learning: match args.net.as_str() {
            "forward" => Some(Learning::Forward),
            "record" => Some(Learning::Record),
            _ => None,
        },
    })
}

/// What the summary tells of a learning run.
struct Said<'a> {
    observed: &'a Observed,
    draft: &'a crate::draft::Draft,
    trace: &'a TraceReport,
    exit: i32,
    network: Option<&'a NetworkReport>,
}

/// The summary for a person: what was written, what to review, what the
/// draft may lack, and the next command.
fn summary(args: &LearnArgs, workspace: &Path, said: &Said<'_>) -> String {
    let mut human = format!(
        "spawnd: wrote {} ({} paths seen, {} programs run{})",
        args.output.display(),
        said.trace.paths.len(),
        said.observed.executed.len(),
        match said.observed.network.len() {
            0 => String::new(),
            n => format!(", {n} destinations dialed"),
        }
    );
    for r in &said.draft.review {
        human.push_str(&format!("\nspawnd: review: {}", printable(r)));
    }
    let unresolved = said.trace.unresolved;
    if unresolved > 0 {
        human.push_str(&format!(
            "\nspawnd: review: the trace could not read the path of {unresolved} calls (a process gone, or memory it may not read): the draft may lack them"
        ));
    }
    if said.exit != 0 {
        human.push_str(&format!(
            "\nspawnd: the command exited {}: the draft covers only what it did before",
            said.exit
        ));
    }
    if let Some(hint) = said.network.and_then(record_refusals_hint) {
        human.push_str(&format!("\nspawnd: {hint}"));
    }
    human.push_str(&format!(
        "\nspawnd: next: spawnd manifest lint {0} && spawnd run --manifest {0} --op {1} --workspace {2} --mode write",
        args.output.display(),
        args.op,
        workspace.display()
    ));
    human
}

/// The caller's home, as the password database or `HOME` names it.
fn caller_home() -> Option<PathBuf> {
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map(|u| u.dir)
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from))
        .and_then(|h| std::fs::canonicalize(h).ok())
}

/// Learning writes for real: a writable directory may not be `/`, a home
/// or above one (the command could rewrite a shell's start-up files or
/// `authorized_keys`).
fn guard_workspace(writable: &[PathBuf], home: &Option<PathBuf>) -> Result<(), Failure> {
    for dir in writable {
        let holds_home = home.as_ref().is_some_and(|h| h.starts_with(dir));
        if dir == Path::new("/") || holds_home {
            return Err(Failure::usage(format!(
                "{}: the command would write there for real while learning; run learn from a project directory (or give --workspace DIR), not a home or /",
                printable(&dir.display().to_string())
            )));
        }
    }
    Ok(())
}

/// The draft may not be written where the learned command could write: it
/// could plant a link there for the draft to be written through, and
/// `run` refuses a manifest inside a write scope anyway.
fn guard_output(output: &Path, writable: &[PathBuf]) -> Result<(), Failure> {
    let dir = output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let dir = std::fs::canonicalize(dir)
        .map_err(|e| Failure::usage(format!("--output {}: {e}", output.display())))?;
    if let Some(w) = writable.iter().find(|w| dir.starts_with(w)) {
        return Err(Failure::usage(format!(
            "--output {} lies in {}, which the command may write: keep the draft outside it (e.g. --output ../{})",
            printable(&output.display().to_string()),
            printable(&w.display().to_string()),
            printable(&output.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
        )));
    }
    Ok(())
}

/// The program: a path (made absolute), or a name looked up in `PATH`.
fn find_program(given: &str) -> Result<PathBuf, Failure> {
    if given.contains('/') {
        let path = std::env::current_dir()
            .map(|d| d.join(given))
            .unwrap_or_else(|_| PathBuf::from(given));
        return match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => Ok(normalize(&path)),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                Err(Failure::usage(format!(
                    "{given}: this user cannot enter a directory on the way to it ({e}); learn runs programs this user can read"
                )))
            }
            _ => Err(Failure::usage(format!("{given}: no such program"))),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(given))
        .find(|p| p.is_file() && p.is_absolute())
        .ok_or_else(|| Failure::usage(format!("{given}: not found in PATH; give its path")))
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(p) => out.push(p),
            _ => {}
        }
    }
    out
}

/// A connector-name-safe form of the program's file name.
fn slug(program: &Path) -> String {
    let name: String = program
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    match name.trim_matches('-') {
        "" => "program".to_string(),
        n => n.to_string(),
    }
}

/// The uid and gid the program will run as (docs/sandbox.md): a root
/// caller's runs as `run_as` or nobody, anyone else's as themselves.
fn run_identity(config: &crate::config::Config) -> (u32, u32) {
    if crate::kernel_features::privileged() && nix::unistd::geteuid().is_root() {
        config.sandbox.run_as.unwrap_or((65534, 65534))
    } else {
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    }
}

/// The host's top-level directories the program's identity may enter,
/// other than the ones the sandbox makes itself and those holding a
/// writable directory (a read scope may not contain a write scope's
/// parent… it may: only the reverse is refused, so they stay).
fn offered_directories(writable: &[PathBuf], (uid, gid): (u32, u32)) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir("/") else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            !NOT_OFFERED.contains(&name)
        })
        .filter(|p| {
            std::fs::metadata(p).is_ok_and(|m| {
                let mode = m.mode();
                let bits = if m.uid() == uid {
                    mode >> 6
                } else if m.gid() == gid {
                    mode >> 3
                } else {
                    mode
                };
                bits & 0o5 == 0o5
            })
        })
        // A writable directory listed as itself is granted writable.
        .filter(|p| !writable.contains(p))
        .collect();
    out.sort();
    out
}

/// Top-level directories whose host paths are never shown as scopes, even
/// named: the sandbox's own kernel views and devices.
const NEVER_SHOWN: &[&str] = &["/proc", "/sys", "/dev"];

/// The host paths an argument names: the argument itself, or the value of
/// a `--opt=VALUE`, absolute or relative to `cwd` (a `file://` URL by its
/// path), when something is there; resolved (a scope must be a real path).
fn named_paths(args: &[String], cwd: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for arg in args {
        let mut candidates = vec![arg.as_str()];
        if let Some((key, value)) = arg.split_once('=') {
            if key.starts_with('-') {
                candidates.push(value);
            }
        }
        for c in candidates.into_iter().filter(|c| !c.is_empty()) {
            // A `file://` URL names a local path (pip's `--index-url`,
            // git's origin, curl).
            let c = c.strip_prefix("file://").unwrap_or(c);
            if let Ok(real) = std::fs::canonicalize(cwd.join(c)) {
                out.push(real);
            }
        }
    }
    out
}

/// The scopes shown to the observed run besides the offered directories
/// and the writable ones.
struct Shown {
    /// Read only: the paths the command names, the cwd and `--read`.
    read: Vec<PathBuf>,
    /// Readable and executable: `--exec`.
    exec: Vec<PathBuf>,
}

/// The named paths and `--exec` directories that the offered and writable
/// directories do not already show: under the host's `/tmp` or `/run`, or
/// under a top-level directory the run identity may not enter. Never a
/// top-level directory itself (the sandbox's own `/tmp` stays its own),
/// nor anything under `/proc`, `/sys` or `/dev`, nor anything inside a
/// writable directory (a read-only scope there is refused); each kept
/// once, the outermost.
fn shown_besides(
    offered: &[PathBuf],
    writable: &[PathBuf],
    named: &[PathBuf],
    exec_dirs: &[PathBuf],
) -> Shown {
    let keep = |p: &&PathBuf| {
        p.components().count() > 2
            && !NEVER_SHOWN.iter().any(|d| p.starts_with(d))
            && !writable.iter().any(|w| p.starts_with(w))
    };
    let exec: Vec<PathBuf> = outermost(exec_dirs.iter().filter(keep).cloned().collect());
    let read = outermost(
        named
            .iter()
            .filter(keep)
            .filter(|p| !offered.iter().chain(&exec).any(|o| p.starts_with(o)))
            .cloned()
            .collect(),
    );
    Shown { read, exec }
}

/// `paths` without those inside another, sorted.
fn outermost(mut paths: Vec<PathBuf>) -> Vec<PathBuf> {
    paths.sort();
    paths.dedup();
    let mut out: Vec<PathBuf> = Vec::new();
    for p in paths {
        if !out.iter().any(|o| p.starts_with(o)) {
            out.push(p);
        }
    }
    out
}

/// Whether the run identity is `[sandbox] run_as` or nobody, chosen for a
/// root caller (so the fix for a hidden program names them).
fn run_as_set_by_root(config: &crate::config::Config) -> Option<bool> {
    (crate::kernel_features::privileged() && nix::unistd::geteuid().is_root())
        .then_some(config.sandbox.run_as.is_some())
}

/// The toolchain prefix a program lies in: above its `bin`, `sbin` or
/// `shims` directory (`~/.pyenv/versions/3.12.1/bin/python3` →
/// `~/.pyenv/versions/3.12.1`, `~/.pyenv/shims/python3` → `~/.pyenv`),
/// else its own directory.
fn toolchain_prefix(program: &Path) -> PathBuf {
    let dir = program.parent().unwrap_or(Path::new("/"));
    let bin = dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| ["bin", "sbin", "shims"].contains(&n));
    match dir.parent() {
        Some(above) if bin && above.components().count() > 2 => above.to_path_buf(),
        _ => dir.to_path_buf(),
    }
}

/// Whether `(uid, gid)` may do `want` (`0o1` search, `0o5` read and
/// search/execute) to what `meta` describes, by its mode bits.
fn permits(meta: &std::fs::Metadata, (uid, gid): (u32, u32), want: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    if uid == 0 {
        return true;
    }
    let mode = meta.mode();
    let bits = if meta.uid() == uid {
        mode >> 6
    } else if meta.gid() == gid {
        mode >> 3
    } else {
        mode
    };
    bits & want == want
}

/// Why the program's own tree would be hidden from the observed run, if it
/// would: spawnd binds the program file itself, so it would start, but
/// what lies beside it (its libraries, modules, the interpreter a shim
/// runs) would not be there, and it would quietly use the system's
/// instead. Either no scope shows it (`roots`: what the run is shown),
/// or the run identity cannot enter a directory on the way from the
/// outermost scope holding it (above that the sandbox makes the
/// directories). `root_caller`: `Some(run_as set)` when the run identity
/// is chosen for a root caller.
fn hidden_program(
    program: &Path,
    roots: &[PathBuf],
    run_as: (u32, u32),
    root_caller: Option<bool>,
) -> Option<String> {
    // The file itself, where the sandbox finds it (system paths keep
    // their links: `/bin/sh` is `/usr/bin/dash` there too).
    let real = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
    let path = &real;
    let prefix = toolchain_prefix(path);
    let shown_prog = printable(&program.display().to_string()).to_string();
    let shown_prefix = printable(&prefix.display().to_string()).to_string();
    let Some(root) = roots
        .iter()
        .filter(|r| path.starts_with(r))
        .min_by_key(|r| r.components().count())
    else {
        let top: PathBuf = path.components().take(2).collect();
        let why = match NOT_OFFERED.iter().any(|d| top == Path::new("/").join(d)) {
            true => format!("the sandbox has its own {}", top.display()),
            false => format!("uid {} may not enter it", run_as.0),
        };
        let identity = match root_caller {
            Some(set) => format!(
                "; a root caller's command runs as uid {}{}, which must be able to read it",
                run_as.0,
                if set {
                    " ([sandbox] run_as)"
                } else {
                    " (or [sandbox] run_as)"
                }
            ),
            None => String::new(),
        };
        return Some(format!(
            "{shown_prog} lies under {} ({why}), so the learned run would not see the toolchain it belongs to: pass --exec {shown_prefix} (its prefix) to show it to the run; the draft then grants it{identity}",
            printable(&top.display().to_string()),
        ));
    };
    let mut dir = root.clone();
    let below = path.strip_prefix(root).unwrap_or(Path::new(""));
    let mut steps: Vec<PathBuf> = vec![dir.clone()];
    for part in below.parent().unwrap_or(Path::new("")).components() {
        dir.push(part);
        steps.push(dir.clone());
    }
    let blocked = steps
        .iter()
        .find(|d| std::fs::metadata(d).is_ok_and(|m| !permits(&m, run_as, 0o1)));
    let runnable = std::fs::metadata(path).is_ok_and(|m| permits(&m, run_as, 0o5));
    if blocked.is_none() && runnable {
        return None;
    }
    let what = match blocked {
        Some(d) => format!(
            "uid {} (the run's identity) cannot enter {}",
            run_as.0,
            printable(&d.display().to_string())
        ),
        None => format!(
            "uid {} (the run's identity) cannot read and execute it",
            run_as.0
        ),
    };
    let fix = match root_caller {
        Some(false) => format!(
            "a root caller's command runs as uid {0}: let uid {0} read {shown_prefix} (chmod or chown it), or set [sandbox] run_as to an identity that may, and pass --exec {shown_prefix} (the toolchain's prefix) when it is not shown already",
            run_as.0
        ),
        Some(true) => format!(
            "let uid {} ([sandbox] run_as) read {shown_prefix}, and pass --exec {shown_prefix} (the toolchain's prefix) when it is not shown already",
            run_as.0
        ),
        None => format!(
            "make {shown_prefix} readable to uid {} and pass --exec {shown_prefix} (the toolchain's prefix)",
            run_as.0
        ),
    };
    Some(format!(
        "{shown_prog}: {what}, so the learned run could not use the toolchain it belongs to (it would start, and quietly use the system's files instead): {fix}"
    ))
}

/// After a `--net record` run whose connections were refused: what
/// `--net forward` would show. Record dials nothing, so a command that
/// stops at its first refused connection never reaches the others.
fn record_refusals_hint(network: &NetworkReport) -> Option<String> {
    let refused = network.refused;
    if network.learning.as_deref() != Some("record") || refused == 0 {
        return None;
    }
    Some(format!(
        "network: {refused} connection(s) recorded and refused (--net record dials nothing, so the command may have stopped at the first destination and never tried the rest): rerun with --net forward to let them through and learn every destination"
    ))
}

/// What the observation manifest is made of.
struct ObservationParts<'a> {
    program: &'a Path,
    program_hash: &'a str,
    argv: &'a [String],
    cwd: &'a Path,
    writable: &'a [PathBuf],
    env_keys: &'a [String],
    offered: &'a [PathBuf],
    read: &'a [PathBuf],
    exec: &'a [PathBuf],
    timeout_ms: u64,
}

/// The manifest the observed run goes through: the program pinned, the
/// host's directories readable and executable, the workspace (and each
/// `--write`) writable and executable, the named paths readable, the
/// `--exec` directories executable, the argv literal.
fn observation_manifest(p: &ObservationParts<'_>) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let list = |paths: &[PathBuf]| {
        paths
            .iter()
            .map(|p| q(&p.display().to_string()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut exec = p.offered.to_vec();
    exec.extend(p.exec.iter().cloned());
    exec.extend(p.writable.iter().cloned());
    let argv = p
        .argv
        .iter()
        .map(|a| q(&a.replace('{', "{{").replace('}', "}}")))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "[connector]\nname = \"local://spawnd/learn\"\nversion = \"0.0.0\"\n\n[capabilities.spawn]\nprograms = [{{ path = {}, hash = {} }}]\nfs_exec = [{}]\nfs_read = [{}]\nfs_write = [{}]\ncwd = {}\nenv_passthrough = [{}]\n\n[capabilities.spawn.limits]\nwall_time_ms = {}\nmax_stdout_bytes = 16777216\nmax_stderr_bytes = 16777216\ntmp_exec = true\n\n[capabilities.spawn.operations.observed]\nargv = [{argv}]\nmode = \"write\"\n",
        q(&p.program.display().to_string()),
        q(p.program_hash),
        list(&exec),
        list(p.read),
        list(p.writable),
        q(&p.cwd.display().to_string()),
        p.env_keys.iter().map(|k| q(k)).collect::<Vec<_>>().join(", "),
        p.timeout_ms,
    )
}

/// The run's refusals, one line each, for the draft's comments.
/// `--env K=V` and `--env K` (from this environment).
fn env_values(given: &[String]) -> Result<BTreeMap<String, String>, Failure> {
    let mut out = BTreeMap::new();
    for item in given {
        let (k, v) = match item.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (
                item.clone(),
                std::env::var(item).map_err(|_| {
                    Failure::usage(format!("--env {item}: not set in this environment"))
                })?,
            ),
        };
        out.insert(k, v);
    }
    Ok(out)
}

fn executed(
    list: &[PathBuf],
    writable: &[PathBuf],
    visible: &[PathBuf],
) -> Vec<(PathBuf, Option<String>)> {
    list.iter()
        .map(|p| {
            // The sandbox's own /tmp, /run, /proc and /dev are not the
            // host's: a host file there is not what it ran.
            let private = ["/tmp", "/run", "/proc", "/dev"].iter().any(|d| {
                p.starts_with(d) && !writable.iter().chain(visible).any(|w| p.starts_with(w))
            });
            let digest = (!private).then(|| hash_regular_file(p)).flatten();
            (p.clone(), digest)
        })
        .collect()
}

/// Largest executed file hashed for the draft's comments.
const MAX_HASHED: u64 = 512 << 20;

/// The digest of an executed path, if it is a regular file of bounded
/// size: the path is the program's choice, and spawnd opens it as the
/// caller, so a device, a FIFO or a huge file is never read (opened
/// non-blocking, and checked again on the descriptor).
fn hash_regular_file(path: &Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_HASHED {
        return None;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    let opened = file.metadata().ok()?;
    if !opened.is_file() || opened.len() > MAX_HASHED {
        return None;
    }
    let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut reader = file.take(MAX_HASHED);
    loop {
        let n = reader.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        sha2::Digest::update(&mut hasher, &buf[..n]);
    }
    Some(format!(
        "sha256:{}",
        hex::encode(sha2::Digest::finalize(hasher))
    ))
}

/// The `host:port` pairs the run's relay reports dialing.
/// The real filesystem.
struct RealHost;

impl Host for RealHost {
    fn exists(&self, path: &Path) -> bool {
        path.symlink_metadata().is_ok()
    }
    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }
    fn real_path(&self, path: &Path) -> Option<PathBuf> {
        std::fs::canonicalize(path).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_run_with_refused_connections_suggests_forward() {
        let network = |learning: &str, refused: u64| NetworkReport {
            learning: Some(learning.to_string()),
            refused,
            ..NetworkReport::default()
        };
        let hint = record_refusals_hint(&network("record", 2)).expect("a hint");
        assert!(
            hint.contains("--net forward") && hint.contains("first destination"),
            "{hint}"
        );
        assert_eq!(record_refusals_hint(&network("record", 0)), None);
        assert_eq!(record_refusals_hint(&network("forward", 3)), None);
        assert_eq!(record_refusals_hint(&NetworkReport::default()), None);
    }

    #[test]
    fn a_toolchain_prefix_lies_above_its_bin_or_shims() {
        let p = |s: &str| toolchain_prefix(Path::new(s));
        assert_eq!(
            p("/root/.pyenv/versions/3.12.1/bin/python3"),
            PathBuf::from("/root/.pyenv/versions/3.12.1")
        );
        assert_eq!(
            p("/root/.pyenv/shims/python3"),
            PathBuf::from("/root/.pyenv")
        );
        assert_eq!(p("/opt/tool/run"), PathBuf::from("/opt/tool"));
        // Never a top-level directory.
        assert_eq!(p("/usr/bin/tar"), PathBuf::from("/usr/bin"));
    }

    #[test]
    fn named_paths_are_shown_unless_offered_writable_top_level_or_kernel_views() {
        let dir = std::env::temp_dir().join(format!("spawnd-named-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("src")).unwrap();
        let dir = std::fs::canonicalize(&dir).unwrap();
        let args: Vec<String> = [
            "czf",
            "missing.tgz",
            "src",
            &format!("--directory={}", dir.display()),
            &format!("file://{}/src", dir.display()),
            "/dev/null",
            "/",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let named = named_paths(&args, &dir);
        assert!(
            named.contains(&dir.join("src")) && named.contains(&dir),
            "{named:?}"
        );
        assert!(!named.iter().any(|p| p.ends_with("missing.tgz")));
        assert_eq!(
            named.iter().filter(|p| **p == dir.join("src")).count(),
            2,
            "a file:// URL names its path: {named:?}"
        );
        let shown = shown_besides(
            &[PathBuf::from("/usr")],
            &[PathBuf::from("/work/ws")],
            &[
                dir.join("src"),
                dir.clone(),
                PathBuf::from("/dev/null"),
                PathBuf::from("/"),
                PathBuf::from("/tmp"),
                PathBuf::from("/usr/share/doc"),
                PathBuf::from("/work/ws/src"),
            ],
            &[PathBuf::from("/tmp/tc/tool")],
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(shown.exec, vec![PathBuf::from("/tmp/tc/tool")]);
        assert_eq!(shown.read, vec![dir]);
    }

    #[test]
    fn a_program_no_scope_shows_or_its_identity_cannot_reach_is_refused_with_the_fix() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("spawnd-hidden-{}", std::process::id()));
        let bin = base.join("tool/bin");
        std::fs::create_dir_all(&bin).unwrap();
        let base = std::fs::canonicalize(&base).unwrap();
        let program = base.join("tool/bin/x");
        std::fs::write(&program, "").unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        let prefix = base.join("tool");
        let nobody = (65534, 65534);
        let unseen =
            hidden_program(&program, &[PathBuf::from("/usr")], nobody, None).expect("not shown");
        assert!(
            unseen.contains(&format!("--exec {}", prefix.display())),
            "{unseen}"
        );
        let roots = [prefix.clone()];
        assert_eq!(hidden_program(&program, &roots, nobody, Some(false)), None);
        std::fs::set_permissions(&prefix, std::fs::Permissions::from_mode(0o700)).unwrap();
        let owner = std::fs::metadata(&prefix).map(|m| std::os::unix::fs::MetadataExt::uid(&m));
        let closed = hidden_program(&program, &roots, nobody, Some(false));
        std::fs::remove_dir_all(&base).unwrap();
        if owner.unwrap() != 65534 {
            let closed = closed.expect("cannot enter");
            assert!(
                closed.contains(&format!("cannot enter {}", prefix.display()))
                    && closed.contains("run_as"),
                "{closed}"
            );
        }
    }
}
