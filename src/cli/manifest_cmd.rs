//! `spawnd manifest lint | explain | pin`.

use crate::failure::FailureKind;
use std::path::Path;

use serde_json::json;
use toml_edit::{DocumentMut, Item, Value};

use super::args::{Cli, ManifestCommand};
use super::context::{current_caller, load_config, load_manifest, manifest_dir};
use super::explain::explain_text;
use super::output::{Failure, Success};
use crate::manifest::ScopePath;
use crate::program::hash_path;

/// Runs one `manifest` subcommand.
pub(super) fn dispatch(cli: &Cli, command: &ManifestCommand) -> Result<Success, Failure> {
    match command {
        ManifestCommand::Init {
            name,
            programs,
            output,
        } => init(name, programs, output.as_deref()),
        ManifestCommand::Lint { file } => lint(cli, file),
        ManifestCommand::Explain { file } => explain(cli, file),
        ManifestCommand::Pin { files, check } => pin(cli, files, *check),
    }
}

/// `manifest lint`: exit 0 when valid (warnings allowed), 4 with every problem otherwise.
pub(super) fn lint(cli: &Cli, file: &Path) -> Result<Success, Failure> {
    let config = load_config(cli)?;
    let mut manifest = load_manifest(file, &config)?;
    if let (Some(spawn), Ok(caller)) = (&manifest.spawn, current_caller()) {
        let found = sockets_in_scopes(spawn, &caller.home, manifest.dir.as_deref());
        manifest.warnings.extend(found);
    }
    let mut text = format!(
        "{}: valid ({} {})",
        file.display(),
        manifest.connector.name,
        manifest.connector.version
    );
    for w in &manifest.warnings {
        text.push_str(&format!("\n  warning: {}: {}", w.key, w.message));
    }
    let ops = manifest
        .spawn
        .as_ref()
        .map(|s| s.operations.len())
        .unwrap_or(0);
    Ok(Success::new(
        json!({"file": file, "valid": true, "connector": manifest.connector.name, "operations": ops, "warnings": manifest.warnings}),
        text,
    ))
}

/// Entries looked at per scope when looking for unix sockets in it.
const SOCKET_SCAN_ENTRIES: usize = 20_000;

/// A warning for each scope that holds unix sockets (for the user who
/// lints, `~` being their home): a scope never makes a socket reachable by
/// itself, but once an operation lists any in `unix_sockets`, Landlock does
/// not stop it connecting to these too. Symbolic links are not followed,
/// and each scope is searched for at most [`SOCKET_SCAN_ENTRIES`] entries.
fn sockets_in_scopes(
    spawn: &crate::manifest::SpawnGrant,
    home: &Path,
    connector: Option<&Path>,
) -> Vec<crate::manifest::Warning> {
    use std::os::unix::fs::FileTypeExt;
    let mut warnings = Vec::new();
    for (field, scopes) in [
        ("fs_read", &spawn.fs_read),
        ("fs_write", &spawn.fs_write),
        ("fs_exec", &spawn.fs_exec),
    ] {
        for scope in scopes {
            // A `{workspace}/` scope names no place until a run names the
            // workspace: nothing to look in here.
            let Some(root) = scope.expand(&crate::manifest::Anchors {
                home,
                workspace: None,
                connector,
            }) else {
                continue;
            };
            let mut pending = vec![root];
            let (mut seen, mut sockets) = (0usize, Vec::new());
            while let Some(path) = pending.pop() {
                if seen >= SOCKET_SCAN_ENTRIES {
                    break;
                }
                seen += 1;
                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                if meta.file_type().is_socket() {
                    sockets.push(path);
                } else if meta.is_dir() {
                    if let Ok(entries) = std::fs::read_dir(&path) {
                        pending.extend(entries.flatten().map(|e| e.path()));
                    }
                }
            }
            if let Some(first) = sockets.first() {
                let more = match sockets.len() {
                    1 => String::new(),
                    n => format!(" and {} more", n - 1),
                };
                warnings.push(crate::manifest::Warning {
                    key: format!("capabilities.spawn.{field}"),
                    message: format!("`{scope}` holds unix sockets ({}{more}); a program cannot connect to them unless its operation lists unix_sockets, and once it lists any, it can connect to these as well", first.display()),
                });
            }
        }
    }
    warnings
}

/// `manifest explain`: what the manifest lets a program do, in plain words.
pub(super) fn explain(cli: &Cli, file: &Path) -> Result<Success, Failure> {
    let config = load_config(cli)?;
    // Not a file: an installed connector, as `connector list` names it.
    let named = file.to_str().filter(|_| !file.exists());
    if let Some(r) = named.and_then(|t| crate::provenance::ConnectorRef::parse(t).ok()) {
        let (entry, store) = super::connector_cmd::open_entry(&config, &r)?;
        let pins = store
            .pins(&entry.hash())
            .map_err(|e| Failure::config(e.to_string()))?;
        let mut manifest = entry.manifest.clone();
        manifest.dir = entry.dir.canonicalize().ok();
        let text = format!(
            "{}{}",
            explain_installed(&entry, &pins),
            explain_text(&manifest)
        );
        return Ok(Success::new(
            json!({"connector": r.to_string(), "dir": entry.dir, "hash": entry.hash(), "signature": entry.signature, "explanation": text}),
            text,
        ));
    }
    let manifest = load_manifest(file, &config)?;
    let text = explain_text(&manifest);
    Ok(Success::new(
        json!({"file": file, "explanation": text}),
        text,
    ))
}

/// What the store says of an installed connector: its content hash (its
/// files hashed again just now), who signed it, and the operator's pins.
fn explain_installed(
    entry: &crate::provenance::Entry,
    pins: &crate::provenance::pins::OperatorPins,
) -> String {
    use crate::provenance::SignatureStatus;
    let signature = match &entry.signature {
        SignatureStatus::Signed { authority, key_id } => {
            format!("signed by key {key_id}, which the keyring trusts for {authority}")
        }
        SignatureStatus::Unsigned => "unsigned".to_string(),
        SignatureStatus::Untrusted { authority, key_id } => format!(
            "signed by key {key_id}, which the keyring does not trust for {authority}: the daemon will not serve it"
        ),
        SignatureStatus::Invalid { why } => {
            format!("a signature that does not hold ({why}): the daemon will not serve it")
        }
    };
    let pinned = match pins.programs.len() {
        0 => "no operator pins".to_string(),
        n => format!("{n} program(s) pinned by the operator beside it"),
    };
    format!(
        "Installed in the store at {} as content {} (its files hashed again just now and matching); {signature}; {pinned}. The daemon serves it, checks these files again before every spawn, and records this hash and signer with every decision.\n",
        crate::printable::printable(&entry.dir.display().to_string()),
        entry.hash()
    )
}

/// `manifest init`: a starting manifest for `programs`, each pinned, with
/// one operation per program (its bare name as argv), the workspace as the
/// read scope and its `build/` as the write scope, and the other keys
/// commented. It is checked with the loader before it is shown or written.
pub(super) fn init(
    name: &str,
    programs: &[std::path::PathBuf],
    output: Option<&Path>,
) -> Result<Success, Failure> {
    crate::manifest::Fqn::parse(name)
        .map_err(|why| Failure::usage(format!("--name is not a valid connector name: {why}")))?;
    let mut entries = Vec::new();
    let mut operations = String::new();
    for program in programs {
        let shown = program.display().to_string();
        if !program.is_absolute() || shown.contains('"') || shown.contains('\\') {
            return Err(Failure::usage(format!(
                "--program {shown}: give an absolute path"
            )));
        }
        let digest = hash_path(program).map_err(|e| {
            Failure::from_io(&e, FailureKind::Config, format!("cannot hash {shown}: {e}"))
        })?;
        entries.push(format!("  {{ path = \"{shown}\", hash = \"{digest}\" }},"));
        let file_name = program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let op: String = file_name
            .to_ascii_lowercase()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let op = if op.starts_with(|c: char| c.is_ascii_lowercase()) {
            op
        } else {
            format!("run-{op}")
        };
        operations.push_str(&format!(
            "\n[capabilities.spawn.operations.{op}]\n# The argv, fixed but for {{placeholders}}; each value stays one argument.\n# e.g. argv = \"{file_name} --output={{out}} {{input}}\", with [capabilities.spawn.operations.{op}.params.input] kind = \"path\"\nargv = \"{file_name}\"\ndescription = \"runs {file_name}\"\n"
        ));
    }
    let text = format!(
        "# A starting manifest (spawnd manifest init): edit, then `spawnd manifest lint` and `spawnd manifest explain`.\n[connector]\nname = \"{name}\"\nversion = \"0.1.0\"\n\n[capabilities.spawn]\n# The programs it may run, each pinned to its bytes (re-pin with `spawnd manifest pin`).\nprograms = [\n{}\n]\n# What the program may read, write and execute besides the system runtime.\n# {{workspace}} is the directory `spawnd run --workspace DIR` (or the operator) names.\nfs_read = [\"{{workspace}}\"]\nfs_write = [\"{{workspace}}/build\"]\n# fs_exec = [\"{{workspace}}/tools\"]\n# Where it starts: a fresh temporary directory unless set.\n# cwd = \"{{workspace}}\"\n# Env keys a caller may pass, values spawnd sets, credentials the operator binds.\n# env_passthrough = [\"CI\"]\n# env_set = {{ TZ = \"UTC\" }}\n# credential_env_keys = [\"API_TOKEN\"]\n# Exact host:port pairs it may reach (none: no network).\n# network = [\"api.example.com:443\"]\n\n[capabilities.spawn.limits]\nwall_time_ms = 300000\n{operations}",
        entries.join("\n")
    );
    crate::manifest::parse_manifest("(draft)", &text, crate::manifest::LoadOptions::default())
        .map_err(|e| Failure::internal(format!("the drafted manifest does not load: {e}")))?;
    match output {
        Some(path) => {
            write_output(path, &text, false)?;
            Ok(Success::new(
                json!({"file": path, "manifest": text}),
                format!(
                    "wrote {}; next: spawnd manifest lint {}",
                    path.display(),
                    path.display()
                ),
            ))
        }
        None => Ok(Success::new(
            json!({"manifest": text}),
            text.trim_end().to_string(),
        )),
    }
}

/// Writes `text` to the `--output` file: a new file, or with `overwrite`
/// an existing one, never through a symbolic link.
pub(super) fn write_output(path: &Path, text: &str, overwrite: bool) -> Result<(), Failure> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).custom_flags(libc::O_NOFOLLOW);
    match overwrite {
        true => options.create(true).truncate(true),
        false => options.create_new(true),
    };
    let mut file = options.open(path).map_err(|e| {
        Failure::from_io(
            &e,
            FailureKind::Usage,
            format!("--output {}: {e}", path.display()),
        )
    })?;
    file.write_all(text.as_bytes()).map_err(|e| {
        Failure::from_io(
            &e,
            FailureKind::Config,
            format!("write {}: {e}", path.display()),
        )
    })
}

/// `manifest pin`: fill in or update each program's hash in every file,
/// keeping comments and layout; with `check`, write nothing and exit 1 when
/// a pin is missing or stale.
pub(super) fn pin(
    cli: &Cli,
    files: &[std::path::PathBuf],
    check: bool,
) -> Result<Success, Failure> {
    let mut data = Vec::new();
    let mut lines = Vec::new();
    let mut stale = false;
    for file in files {
        let report = pin_one(cli, file, check)?;
        if files.len() > 1 {
            lines.push(format!("{}:", file.display()));
        }
        for r in &report {
            let s = |k: &str| r[k].as_str().unwrap_or("").to_string();
            stale |= s("status") != "unchanged";
            lines.push(pin_line(
                &s("status"),
                &s("path"),
                &s("was"),
                &s("sha256"),
                check,
            ));
        }
        data.push(json!({"file": file, "programs": report}));
    }
    if check && stale {
        lines.push("pins are missing or stale: run `spawnd manifest pin` on these files".into());
    }
    let mut done = Success::new(json!({"files": data, "check": check}), lines.join("\n"));
    if check && stale {
        done.exit = 1;
    }
    Ok(done)
}

/// One program's line of `manifest pin`: what was done to its pin, or,
/// with `check` (which writes nothing), what pinning would do.
pub(super) fn pin_line(status: &str, path: &str, was: &str, sha256: &str, check: bool) -> String {
    match (status, check) {
        ("updated", false) => format!("updated {path} {was} -> {sha256}"),
        ("updated", true) => format!("would update {path} {was} -> {sha256}"),
        ("pinned", true) => format!("would pin {path} {sha256}"),
        (status, _) => format!("{status} {path} {sha256}"),
    }
}

/// Pins one manifest's programs (or, with `check`, only says what pinning
/// would do): each program's path, its hash, its status, and the hash it
/// had when that changes.
fn pin_one(cli: &Cli, file: &Path, check: bool) -> Result<Vec<serde_json::Value>, Failure> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        Failure::from_io(
            &e,
            FailureKind::Config,
            format!("cannot read manifest {}: {e}", file.display()),
        )
    })?;
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|e| Failure::config(format!("{}: {e}", file.display())))?;
    let home = current_caller()?.home;
    // A `{connector}/` program is pinned by the file beside this manifest.
    let connector = manifest_dir(file)?;
    let mut report = Vec::new();
    for_each_program(&mut doc, |path, hash_slot| {
        let scope = ScopePath::parse_program(path)
            .map_err(|e| Failure::config(format!("program path `{path}` {e}")))?;
        // Programs are never anchored at the workspace: this always expands.
        let resolved = scope
            .expand(&crate::manifest::Anchors {
                home: &home,
                workspace: None,
                connector: Some(&connector),
            })
            .unwrap_or_default();
        let digest = hash_path(&resolved)
            .map_err(|e| {
                Failure::from_io(
                    &e,
                    FailureKind::Config,
                    format!("cannot hash {}: {e}", resolved.display()),
                )
            })?
            .to_string();
        let mut entry = json!({"path": path, "sha256": digest});
        entry["status"] = json!(match hash_slot.as_deref() {
            Some(old) if old == digest => "unchanged",
            Some(old) => {
                entry["was"] = json!(old);
                "updated"
            }
            None => "pinned",
        });
        report.push(entry);
        *hash_slot = Some(digest);
        Ok(())
    })?;
    if report.is_empty() {
        return Err(Failure::config(format!(
            "{} declares no [capabilities.spawn] programs to pin",
            file.display()
        )));
    }
    let new_text = doc.to_string();
    if new_text != text && !check {
        write_in_place(file, &new_text)?;
        let config = load_config(cli)?;
        load_manifest(file, &config)?;
    }
    Ok(report)
}

type PinFn<'a> = dyn FnMut(&str, &mut Option<String>) -> Result<(), Failure> + 'a;

/// Calls `f(path, hash)` for every program entry, inline tables and `[[…programs]]` alike,
/// and writes back the hash it leaves in the slot.
fn for_each_program(
    doc: &mut DocumentMut,
    mut f: impl FnMut(&str, &mut Option<String>) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let Some(programs) = doc
        .get_mut("capabilities")
        .and_then(|c| c.get_mut("spawn"))
        .and_then(|s| s.get_mut("programs"))
    else {
        return Ok(());
    };
    let f: &mut PinFn = &mut f;
    match programs {
        Item::Value(Value::Array(array)) => {
            for value in array.iter_mut() {
                let table = value.as_inline_table_mut().ok_or_else(|| {
                    Failure::config("each programs entry must be a table { path = …, hash = … }")
                })?;
                let path = table
                    .get("path")
                    .and_then(|p| p.as_str())
                    .ok_or_else(|| Failure::config("a programs entry has no path"))?
                    .to_string();
                let mut slot = table
                    .get("hash")
                    .and_then(|h| h.as_str())
                    .map(str::to_string);
                f(&path, &mut slot)?;
                if let Some(h) = slot {
                    set_inline_hash(table, h);
                }
            }
        }
        Item::ArrayOfTables(tables) => {
            for table in tables.iter_mut() {
                let path = table
                    .get("path")
                    .and_then(|p| p.as_str())
                    .ok_or_else(|| Failure::config("a [[programs]] entry has no path"))?
                    .to_string();
                let mut slot = table
                    .get("hash")
                    .and_then(|h| h.as_str())
                    .map(str::to_string);
                f(&path, &mut slot)?;
                if let Some(h) = slot {
                    table.insert("hash", toml_edit::value(h));
                }
            }
        }
        _ => {
            return Err(Failure::config(
                "capabilities.spawn.programs must be an array of tables",
            ))
        }
    }
    Ok(())
}

/// Sets `hash` in an inline table: an existing value keeps its spacing; a new
/// key goes last and takes over the spacing that closed the table.
fn set_inline_hash(table: &mut toml_edit::InlineTable, hash: String) {
    if let Some(old) = table.get_mut("hash") {
        let (prefix, suffix) = (old.decor().prefix().cloned(), old.decor().suffix().cloned());
        let mut new = Value::from(hash);
        if let Some(p) = prefix {
            new.decor_mut().set_prefix(p);
        }
        if let Some(s) = suffix {
            new.decor_mut().set_suffix(s);
        }
        *old = new;
        return;
    }
    let closing = table.iter_mut().last().and_then(|(_, v)| {
        let suffix = v.decor().suffix().cloned();
        v.decor_mut().set_suffix("");
        suffix
    });
    let mut new = Value::from(hash);
    new.decor_mut().set_prefix(" ");
    new.decor_mut()
        .set_suffix(closing.unwrap_or_else(|| " ".into()));
    table.insert("hash", new);
}

/// Replaces `file` atomically (temporary file in the same directory, then rename), keeping its mode.
fn write_in_place(file: &Path, text: &str) -> Result<(), Failure> {
    let dir = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let fail =
        |what: &str, e: std::io::Error| Failure::config(format!("{what} {}: {e}", file.display()));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .map_err(|e| fail("cannot create a temporary file beside", e))?;
    std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(|e| fail("cannot write", e))?;
    let perms = std::fs::metadata(file)
        .map_err(|e| fail("cannot stat", e))?
        .permissions();
    std::fs::set_permissions(tmp.path(), perms)
        .map_err(|e| fail("cannot set permissions for", e))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| fail("cannot fsync", e))?;
    tmp.persist(file)
        .map_err(|e| fail("cannot replace", e.error))?;
    Ok(())
}
