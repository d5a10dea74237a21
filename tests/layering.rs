//! The import directions that keep the house walkable: front ends (`cli`,
//! `daemon`) call the one spawn pipeline (`exec`), which launches through
//! the daemon's `spawner` or directly, and everything below (gate, sandbox,
//! supervision, audit, the frames of `ipc`…) knows none of them: the child
//! side knows nobody above it. Checked from the source, as `docs_in_sync`
//! checks the docs: a `crate::` path in a file names the module it uses.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Layers, top first. A module may name only modules of a layer below its
/// own, so `src/` has no import cycle. `fuzzing` is the fuzz targets' entry
/// into the parsers, the daemon's request parsing included: a harness, like
/// `main`. `sys` holds the `unsafe` wrappers of system calls; below it,
/// `netlink` (netlink messages built without `unsafe`) gives sys's NFLOG
/// reader its acknowledgement parser; `lib` only declares modules.
const LAYERS: &[&[&str]] = &[
    &["main", "cli", "fuzzing"],
    &["daemon", "client"],
    &["rpc"],
    &["exec"],
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
    ],
    &["sys"],
    &["netlink"],
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

/// The top-level modules `text` names through `crate::`.
fn named_modules(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("crate::") {
        // `spawnd::crate::` cannot occur; skip `$crate::` in macros.
        if text[..i].ends_with('$') {
            continue;
        }
        let rest = &text[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.insert(name);
        }
    }
    out
}

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
        // Doc comments may mention a module above; code may not name it.
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for named in named_modules(&code) {
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
fn the_check_sees_an_upward_import() {
    assert_eq!(
        named_modules("use crate::cli::output::Failure;\nlet x = crate::exec::execute;"),
        BTreeSet::from(["cli".to_string(), "exec".to_string()])
    );
    assert!(layer("cli") < layer("daemon") && layer("daemon") < layer("exec"));
    assert!(layer("exec") < layer("spawner") && layer("spawner") < layer("sandbox"));
    assert!(layer("sandbox") < layer("ipc") && layer("ipc") < layer("sys"));
}
