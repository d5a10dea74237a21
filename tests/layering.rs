//! The import directions that keep the house walkable: front ends (`cli`,
//! `daemon`) call the one spawn pipeline (`pipeline`), which launches through
//! the daemon's `spawner` or directly, and everything below (gate, sandbox,
//! supervision, audit, the frames of `ipc`…) knows none of them: the child
//! side knows nobody above it. Checked from the source, as `docs_in_sync`
//! checks the docs: a `crate::` path in a file names the module it uses.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Layers, top first. A module may name only modules of a layer below its
/// own, so `src/` has no import cycle. `internals` opens the items the
/// integration tests, benches and `main` reach: a harness's door, like
/// `main`. `fuzzing` is the fuzz targets' entry
/// into the parsers, the daemon's request parsing included: a harness, like
/// `main`. `rpc` is the JSON-RPC frame and its error codes, which need only
/// a failure's kind. `sys` holds the `unsafe` wrappers of system calls;
/// below it, `netlink` (netlink messages built without `unsafe`) gives
/// sys's NFLOG reader its acknowledgement parser, and `failure` (what every
/// command ends in) names no other module, so every layer may use it; `lib`
/// only declares modules.
const LAYERS: &[&[&str]] = &[
    &["main", "internals"],
    &["cli", "fuzzing"],
    &["daemon", "client", "draft"],
    &["pipeline"],
    &["connectors"],
    &["relay"],
    &["spawner"],
    &["supervise"],
    &["sandbox", "kernel_features"],
    &["ipc"],
    &["audit", "vault"],
    &["config", "program", "host_policy", "spawn_result"],
    &["provenance"],
    &["policy"],
    &["plan"],
    &["manifest"],
    &["egress"],
    &[
        "template",
        "printable",
        "duration",
        "shares",
        "interpreter",
        "origin",
        "secret_paths",
        "metrics",
        "rpc",
    ],
    &["sys"],
    &["netlink", "failure"],
    &["lib"],
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// The module path of a file of `src/`: `src/pipeline/report.rs` is
/// `["pipeline", "report"]`, `src/pipeline/mod.rs` is `["pipeline"]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut path: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if path.last().is_some_and(|l| l == "mod") {
        path.pop();
    }
    path
}

/// `text` without comments and string literals, so a message or a doc
/// that mentions a module does not count as naming it.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    match c {
                        '\\' if !escaped => escaped = true,
                        '"' if !escaped => break,
                        _ => escaped = false,
                    }
                }
                out.push_str("\"\"");
            }
            // A char literal such as '"' or '{' (never a lifetime: those
            // are not followed by a quote two characters on).
            '\'' => {
                let ahead: String = chars.clone().take(3).collect();
                if ahead.chars().nth(1) == Some('\'') {
                    chars.nth(1);
                } else if ahead.starts_with('\\') {
                    for c in chars.by_ref() {
                        if c == '\'' {
                            break;
                        }
                    }
                } else {
                    out.push(c);
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Every path a `use` declaration in `code` brings in, groups expanded:
/// `use crate::{a::X, b::{c, d}};` is `crate::a::X`, `crate::b::c` and
/// `crate::b::d`.
fn use_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for (i, _) in code.match_indices("use ") {
        let at_start = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if !at_start {
            continue;
        }
        let Some(end) = code[i..].find(';') else {
            continue;
        };
        let tree: String = code[i + 4..i + end]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        expand(&tree, &mut out);
    }
    out
}

/// The paths of one use tree (`a::{b, c::d}` is `a::b` and `a::c::d`).
fn expand(tree: &str, out: &mut Vec<String>) {
    let Some(open) = tree.find('{') else {
        out.push(tree.split(" as ").next().unwrap_or(tree).to_string());
        return;
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand(&format!("{prefix}{}", &inner[start..i]), out);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < inner.len() {
        expand(&format!("{prefix}{}", &inner[start..]), out);
    }
}

/// The top-level modules `code` (of the module at `path`) names: through
/// `crate::` anywhere, and through `super::` in a `use`.
fn named_modules(code: &str, path: &[String]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |rest: &str| -> String {
        rest.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in code.match_indices("crate::") {
        // `$crate::` in macros is not this crate's path.
        if code[..i].ends_with('$') {
            continue;
        }
        let name = ident(&code[i + "crate::".len()..]);
        if !name.is_empty() {
            out.insert(name);
        }
    }
    for used in use_paths(code) {
        let mut segments: Vec<&str> = used.split("::").collect();
        let mut here = path.to_vec();
        let mut climbed = false;
        while segments.first() == Some(&"super") {
            segments.remove(0);
            here.pop();
            climbed = true;
        }
        let top = match segments.first() {
            Some(&"crate") => segments.get(1),
            _ if climbed && here.is_empty() => segments.first(),
            _ => None,
        };
        // Only a module of `src/`: a file's inline module (`mod tests`)
        // climbs one step less than its file's path says.
        if let Some(name) = top.map(|t| ident(t)) {
            if LAYERS.iter().any(|l| l.contains(&name.as_str())) {
                out.insert(name);
            }
        }
    }
    out
}

/// Modules that are pure: no kernel and no file I/O beyond the values they
/// are handed ([`lib.rs`]'s list).
const PURE: &[&str] = &[
    "manifest",
    "template",
    "policy",
    "plan",
    "interpreter",
    "printable",
    "secret_paths",
    "egress",
    "draft",
];

/// What a pure module may not name: the filesystem, processes, the
/// kernel's calls and the async runtime.
const IMPURE: &[&str] = &["std::fs", "std::process", "nix::", "libc::", "tokio::"];

/// The layer index of a module: 0 is the top.
fn layer(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&module))
        .unwrap_or_else(|| panic!("module `{module}` has no layer in LAYERS: place it there"))
}

#[test]
fn no_module_imports_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        // Test modules (`*tests.rs`) may reach for any harness.
        let name = file.file_name().unwrap().to_string_lossy();
        if name.ends_with("tests.rs") {
            continue;
        }
        let module = module_of(&src, file);
        let text = std::fs::read_to_string(file).unwrap();
        // Docs and messages may mention a module above; code may not name it.
        let code = code_of(&text);
        for named in named_modules(&code, &module_path(&src, file)) {
            if named != module && layer(&named) <= layer(&module) {
                wrong.push(format!(
                    "{} ({module}) names crate::{named}",
                    file.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run upwards or sideways:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn pure_modules_name_no_filesystem_process_kernel_or_runtime() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy();
        let module = module_of(&src, file);
        if name.ends_with("tests.rs") || !PURE.contains(&module.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        // A file's own test module may use any harness.
        let text = text.split("#[cfg(test)]").next().unwrap_or("");
        let code = code_of(text);
        for banned in IMPURE {
            let named = code.match_indices(banned).any(|(i, _)| {
                let before = code[..i].chars().next_back();
                !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            });
            if named {
                wrong.push(format!(
                    "{} (pure: {module}) names {banned}",
                    file.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "I/O in a pure module:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_check_sees_an_upward_import() {
    let here = ["pipeline".to_string(), "report".to_string()];
    assert_eq!(
        named_modules(
            &code_of("use crate::cli::output::Failure;\nlet x = crate::pipeline::run;"),
            &here
        ),
        BTreeSet::from(["cli".to_string(), "pipeline".to_string()])
    );
    // Groups, `super::` past the top, and not what a string or comment says.
    assert_eq!(
        named_modules(
            &code_of(
                "use crate::{\n    daemon::X,\n    sys::{a, b},\n};\nuse super::super::cli::Y;\n// crate::rpc\nlet m = \"crate::client\";"
            ),
            &here
        ),
        BTreeSet::from(["daemon".to_string(), "sys".to_string(), "cli".to_string()])
    );
    assert_eq!(
        named_modules(&code_of("use super::result::SpawnResult;"), &here),
        BTreeSet::new()
    );
    assert!(layer("cli") < layer("daemon") && layer("daemon") < layer("pipeline"));
    assert!(layer("pipeline") < layer("spawner") && layer("spawner") < layer("sandbox"));
    assert!(layer("sandbox") < layer("ipc") && layer("ipc") < layer("sys"));
    assert!(layer("pipeline") < layer("rpc") && layer("sys") < layer("failure"));
}
