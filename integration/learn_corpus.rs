//! A corpus of real CI steps, each run three ways as root and as nobody:
//! directly, under `spawnd learn`, and under `spawnd run` with the draft
//! learn wrote, nothing added. Each way starts from the same fresh
//! workspace and is judged on the host by what the step left there.
//!
//! The steps: `tar` of a source under the host's `/tmp`, `git clone` from a
//! `/tmp` path and a commit in the clone, `make` building C, `python3 -m
//! unittest`, `pip install --target` from a local package index (a PEP 503
//! index in a directory, read through `file://`), `cargo build --offline`
//! with a toolchain under a home, `go build` with vendored modules, and
//! `npm install` from a registry the test serves in a network namespace
//! of its own (`world.rs`), learned with `--net forward`.
//!
//! The test prints a report (learned first try, rerun first try, REVIEW
//! marks, and the time each way took) and fails naming every step that
//! did not learn or rerun first try.

use crate::{harness, world};

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use harness::{world, As};
use world::{World, WORLD_CIDR, WORLD_IP};

/// One step of the corpus, set up for one runner.
struct Step {
    name: &'static str,
    /// The workspace the step runs in (the current directory).
    workspace: PathBuf,
    command: Vec<String>,
    /// Flags given to `learn` before `--` (scopes the step needs named).
    learn_flags: Vec<String>,
    /// Environment the step needs, given to each way (`learn --env K`).
    env: Vec<(String, String)>,
    /// What each way runs inside (`ip netns exec WORLD` for a step that
    /// reaches a test's servers), and the operator config then.
    within: Vec<String>,
    config: Option<PathBuf>,
    /// What the draft must say, and must not, line by line: a line
    /// starting with the first of a pair must contain the second.
    draft_says: Vec<(String, String)>,
    draft_lacks: Vec<String>,
    /// Removes what the step made, so each way starts alike.
    reset: Box<dyn Fn()>,
    /// Whether the workspace shows the step's work; `Err` says what is missing.
    done: Box<dyn Fn() -> Result<(), String>>,
}

/// How one step fared.
struct Report {
    name: &'static str,
    who: As,
    direct: Result<u128, String>,
    learned: Result<u128, String>,
    rerun: Result<u128, String>,
    review_marks: usize,
}

fn uid_of(who: As) -> u32 {
    if who.is_root() {
        0
    } else {
        65534
    }
}

/// A fresh directory owned by the runner, for one step.
fn fresh(who: As, name: &str) -> PathBuf {
    let dir = world().path(&format!("corpus-{who:?}/{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The corpus directory alone, never recursively: another test's `fresh`
    // would change the ctime of a tree a step is reading (tar stops on that).
    let uid = nix::unistd::Uid::from_raw(uid_of(who));
    let gid = nix::unistd::Gid::from_raw(uid_of(who));
    for owned in [world().path(&format!("corpus-{who:?}")), dir.clone()] {
        nix::unistd::chown(&owned, Some(uid), Some(gid)).unwrap();
    }
    dir
}

/// Gives `path` (recursively) to the runner.
fn own(who: As, path: &Path) {
    let uid = uid_of(who);
    let ok = Command::new("chown")
        .arg("-R")
        .arg(format!("{uid}:{uid}"))
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "chown {}", path.display());
}

/// `program args` as the runner, in `cwd`, with a plain environment.
fn as_runner(who: As, step: &Step, program: &str, args: &[String], home: &Path) -> Output {
    let mut argv = step.within.clone();
    if who == As::Nobody {
        argv.extend(strings(&[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ]));
    }
    argv.push(program.to_string());
    argv.extend(args.iter().cloned());
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home)
        .env("LANG", "C.UTF-8")
        .envs(step.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&step.workspace)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn show(out: &Output) -> String {
    let tail = |b: &[u8]| {
        let s = String::from_utf8_lossy(b);
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    };
    format!(
        "exit {:?}\n{}\n{}",
        out.status.code(),
        tail(&out.stdout),
        tail(&out.stderr)
    )
}

/// Runs `step` directly, under learn, and under the draft, in that order.
fn try_step(who: As, step: Step) -> Report {
    let w = world();
    let spawnd = w.spawnd.display().to_string();
    let config = step
        .config
        .clone()
        .unwrap_or_else(|| w.config(who))
        .display()
        .to_string();
    let slug: String = step
        .name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let home = fresh(who, &format!("{slug}-home"));
    let drafts = fresh(who, &format!("{slug}-drafts"));
    let draft = drafts.join("draft.toml");
    let timed = |out: Output, started: Instant| -> Result<u128, String> {
        let ms = started.elapsed().as_millis();
        if !out.status.success() {
            return Err(show(&out));
        }
        (step.done)().map(|()| ms)
    };

    (step.reset)();
    let started = Instant::now();
    let out = as_runner(who, &step, &step.command[0], &step.command[1..], &home);
    let direct = timed(out, started);

    (step.reset)();
    let mut args: Vec<String> = vec![
        "--config".into(),
        config.clone(),
        "learn".into(),
        "--output".into(),
        draft.display().to_string(),
    ];
    args.extend(step.learn_flags.iter().cloned());
    for (k, _) in &step.env {
        args.extend(["--env".to_string(), k.clone()]);
    }
    args.push("--".into());
    args.extend(step.command.iter().cloned());
    let started = Instant::now();
    let out = as_runner(who, &step, &spawnd, &args, &home);
    let learned = timed(out, started);
    let text = std::fs::read_to_string(&draft).unwrap_or_default();
    let review_marks = text.lines().filter(|l| l.contains("REVIEW:")).count();
    let learned = learned.and_then(|ms| draft_as_expected(&step, &text).map(|()| ms));

    (step.reset)();
    let args: Vec<String> = [
        "--config",
        &config,
        "run",
        "--manifest",
        &draft.display().to_string(),
        "--op",
        "run",
        "--workspace",
        &step.workspace.display().to_string(),
        "--mode",
        "write",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let started = Instant::now();
    let rerun = match learned {
        Ok(_) => {
            let out = as_runner(who, &step, &spawnd, &args, &home);
            timed(out, started).map_err(|e| format!("{e}\n--- the draft:\n{text}"))
        }
        Err(_) => Err("not learned".into()),
    };
    Report {
        name: step.name,
        who,
        direct,
        learned,
        rerun,
        review_marks,
    }
}

/// Whether the draft says what `step` expects of it.
fn draft_as_expected(step: &Step, text: &str) -> Result<(), String> {
    for (start, part) in &step.draft_says {
        let found = text
            .lines()
            .any(|l| l.starts_with(start.as_str()) && l.contains(part.as_str()));
        if !found {
            return Err(format!("no line {start}… holding {part}:\n{text}"));
        }
    }
    match step
        .draft_lacks
        .iter()
        .find(|no| text.contains(no.as_str()))
    {
        Some(no) => Err(format!("the draft says {no}:\n{text}")),
        None => Ok(()),
    }
}

fn says(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn file_exists(path: PathBuf) -> Box<dyn Fn() -> Result<(), String>> {
    Box::new(move || match path.exists() {
        true => Ok(()),
        false => Err(format!("{} is missing", path.display())),
    })
}

fn remove(path: PathBuf) -> Box<dyn Fn()> {
    Box::new(move || {
        let _ = std::fs::remove_dir_all(&path);
        let _ = std::fs::remove_file(&path);
    })
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// `tar czf out.tgz -C SRC .`, SRC under the host's /tmp, outside the workspace.
fn tar_of_a_tmp_source(who: As) -> Step {
    let ws = fresh(who, "tar");
    let src = fresh(who, "tar-source");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("a.txt"), "a\n").unwrap();
    std::fs::write(src.join("sub/b.txt"), "b\n").unwrap();
    own(who, &src);
    let out = ws.join("out.tgz");
    let listed = out.clone();
    Step {
        name: "tar of a /tmp source",
        workspace: ws.clone(),
        command: vec![
            "tar".into(),
            "czf".into(),
            "out.tgz".into(),
            "-C".into(),
            src.display().to_string(),
            ".".into(),
        ],
        learn_flags: vec![],
        env: vec![],
        within: vec![],
        config: None,
        draft_says: says(&[
            ("fs_read = ", &format!("\"{}\"", src.display())),
            ("default = ", "\"out.tgz\""),
        ]),
        draft_lacks: strings(&["tmp_exec"]),
        reset: remove(out),
        done: Box::new(move || {
            let list = Command::new("tar")
                .arg("-tzf")
                .arg(&listed)
                .output()
                .unwrap();
            match String::from_utf8_lossy(&list.stdout).contains("sub/b.txt") {
                true => Ok(()),
                false => Err(format!("{} lacks sub/b.txt", listed.display())),
            }
        }),
    }
}

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "safe.directory=*",
        ])
        .args(args)
        .current_dir(dir)
        .env("HOME", "/nonexistent")
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

/// `git clone ORIGIN clone`, ORIGIN a repository under the host's /tmp.
fn git_clone_from_a_tmp_path(who: As) -> Step {
    let ws = fresh(who, "git-clone");
    let origin = fresh(who, "git-origin");
    git(&origin, &["init", "-q", "-b", "main"]);
    std::fs::write(origin.join("f"), "1\n").unwrap();
    git(&origin, &["add", "f"]);
    git(&origin, &["commit", "-q", "-m", "one"]);
    own(who, &origin);
    Step {
        name: "git clone from /tmp",
        workspace: ws.clone(),
        command: vec![
            "git".into(),
            "clone".into(),
            "-q".into(),
            origin.display().to_string(),
            "clone".into(),
        ],
        learn_flags: vec![],
        env: vec![],
        within: vec![],
        config: None,
        draft_says: says(&[("fs_read = ", &format!("\"{}\"", origin.display()))]),
        draft_lacks: strings(&[".git/"]),
        reset: remove(ws.join("clone")),
        done: file_exists(ws.join("clone/f")),
    }
}

/// `git commit` in a clone the runner owns.
fn git_commit(who: As) -> Step {
    let ws = fresh(who, "git-commit");
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("f"), "1\n").unwrap();
    git(&ws, &["add", "f"]);
    git(&ws, &["commit", "-q", "-m", "one"]);
    own(who, &ws);
    let count = {
        let ws = ws.clone();
        move || {
            let out = Command::new("git")
                .args(["-c", "safe.directory=*", "rev-list", "--count", "HEAD"])
                .current_dir(&ws)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse::<u32>()
                .unwrap_or(0)
        }
    };
    let before = std::rc::Rc::new(std::cell::Cell::new(0));
    let taken = before.clone();
    let counted = count.clone();
    Step {
        name: "git commit",
        workspace: ws.clone(),
        command: strings(&[
            "git",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "step",
        ]),
        learn_flags: vec![],
        env: vec![],
        within: vec![],
        config: None,
        draft_says: vec![],
        draft_lacks: vec![],
        reset: Box::new(move || taken.set(count())),
        done: Box::new(move || match counted() == before.get() + 1 {
            true => Ok(()),
            false => Err("no new commit".into()),
        }),
    }
}

/// `make` building and running a C program.
fn make_builds_c(who: As) -> Step {
    let ws = fresh(who, "make");
    std::fs::write(
        ws.join("hello.c"),
        "#include <stdio.h>\nint main(void){puts(\"built and ran\");return 0;}\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("Makefile"),
        "run: hello\n\t./hello\nhello: hello.c\n\tcc -O2 -o hello hello.c\n",
    )
    .unwrap();
    own(who, &ws);
    Step {
        name: "make (C)",
        workspace: ws.clone(),
        command: strings(&["make", "run"]),
        learn_flags: vec![],
        env: vec![],
        within: vec![],
        config: None,
        draft_says: says(&[("fs_exec = ", "\"{workspace}\"")]),
        draft_lacks: vec![],
        reset: remove(ws.join("hello")),
        done: file_exists(ws.join("hello")),
    }
}

/// `python3 -B -m unittest` over a package.
fn python_unittest(who: As) -> Step {
    let ws = fresh(who, "unittest");
    std::fs::create_dir_all(ws.join("pkg")).unwrap();
    std::fs::write(
        ws.join("pkg/__init__.py"),
        "def double(x):\n    return 2 * x\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("test_pkg.py"),
        "import unittest, pkg\nclass T(unittest.TestCase):\n    def test_double(self):\n        self.assertEqual(pkg.double(21), 42)\n        open('passed', 'w').close()\n",
    )
    .unwrap();
    own(who, &ws);
    Step {
        name: "python3 -m unittest",
        workspace: ws.clone(),
        command: strings(&["python3", "-B", "-m", "unittest", "-v"]),
        learn_flags: vec![],
        env: vec![],
        within: vec![],
        config: None,
        draft_says: vec![],
        draft_lacks: vec![],
        reset: remove(ws.join("passed")),
        done: file_exists(ws.join("passed")),
    }
}

/// A PEP 503 index in a directory under /tmp holding one wheel, `shout`.
fn local_index() -> &'static Path {
    static INDEX: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    INDEX.get_or_init(|| {
        let root = world().path("corpus-index");
        let src = root.join("src");
        std::fs::create_dir_all(src.join("shout")).unwrap();
        std::fs::write(
            src.join("pyproject.toml"),
            "[build-system]\nrequires = [\"setuptools\"]\nbuild-backend = \"setuptools.build_meta\"\n\n[project]\nname = \"shout\"\nversion = \"1.0.0\"\n",
        )
        .unwrap();
        std::fs::write(src.join("shout/__init__.py"), "def shout(t):\n    return t.upper()\n").unwrap();
        let wheels = root.join("simple/shout");
        std::fs::create_dir_all(&wheels).unwrap();
        let built = Command::new("/usr/bin/python3")
            .args(["-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w"])
            .arg(&wheels)
            .arg(&src)
            .env("HOME", root.as_os_str())
            .output()
            .unwrap();
        assert!(built.status.success(), "pip wheel: {built:?}");
        let wheel = std::fs::read_dir(&wheels)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.ends_with(".whl"))
            .unwrap();
        std::fs::write(
            wheels.join("index.html"),
            format!("<!DOCTYPE html><html><body><a href=\"{wheel}\">{wheel}</a></body></html>\n"),
        )
        .unwrap();
        std::fs::write(
            root.join("simple/index.html"),
            "<!DOCTYPE html><html><body><a href=\"shout/\">shout</a></body></html>\n",
        )
        .unwrap();
        let _ = std::fs::remove_dir_all(src.join("build"));
        Command::new("chmod").args(["-R", "a+rX"]).arg(&root).status().unwrap();
        root
    })
}

/// `pip install --target .deps shout` from the local index.
fn pip_install_from_a_local_index(who: As) -> Step {
    let ws = fresh(who, "pip");
    let index = format!("file://{}/simple", local_index().display());
    Step {
        name: "pip install --target (local index)",
        workspace: ws.clone(),
        command: vec![
            "python3".into(),
            "-m".into(),
            "pip".into(),
            "install".into(),
            "-q".into(),
            "--no-cache-dir".into(),
            "--index-url".into(),
            index,
            "--target".into(),
            ".deps".into(),
            "shout".into(),
        ],
        learn_flags: vec![],
        env: vec![],
        within: vec![],
        config: None,
        draft_says: vec![],
        draft_lacks: vec![],
        reset: remove(ws.join(".deps")),
        done: file_exists(ws.join(".deps/shout/__init__.py")),
    }
}

/// This machine's Rust toolchain, hard-linked under a home anyone may
/// read: `HOME/.rustup/toolchains/stable`.
fn toolchain_home() -> &'static Path {
    static HOME: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        let home = world().path("corpus-toolchain-home");
        let toolchains = home.join(".rustup/toolchains");
        std::fs::create_dir_all(&toolchains).unwrap();
        let sysroot = Command::new("rustc")
            .args(["--print", "sysroot"])
            .output()
            .unwrap();
        let sysroot = String::from_utf8_lossy(&sysroot.stdout).trim().to_string();
        let target = toolchains.join("stable");
        let linked = Command::new("cp")
            .arg("-al")
            .arg(&sysroot)
            .arg(&target)
            .status()
            .unwrap()
            .success();
        if !linked {
            let copied = Command::new("cp")
                .arg("-a")
                .arg(&sysroot)
                .arg(&target)
                .status()
                .unwrap();
            assert!(copied.success(), "copying the toolchain {sysroot}");
        }
        for dir in [&home, &home.join(".rustup"), &toolchains] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        home
    })
}

/// `cargo build --offline` of a crate with no dependencies, cargo and
/// rustc from a toolchain under a home.
fn cargo_build_offline(who: As) -> Step {
    let ws = fresh(who, "cargo");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(
        ws.join("Cargo.toml"),
        "[package]\nname = \"hello\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(ws.join("src/main.rs"), "fn main() { println!(\"hi\"); }\n").unwrap();
    own(who, &ws);
    let toolchain = toolchain_home().join(".rustup/toolchains/stable");
    let bin = toolchain.join("bin");
    Step {
        name: "cargo build --offline (toolchain in a home)",
        workspace: ws.clone(),
        command: vec![
            bin.join("cargo").display().to_string(),
            "build".into(),
            "--offline".into(),
            "-q".into(),
        ],
        learn_flags: vec!["--exec".into(), toolchain.display().to_string()],
        env: vec![("RUSTC".into(), bin.join("rustc").display().to_string())],
        within: vec![],
        config: None,
        draft_says: vec![],
        draft_lacks: vec![],
        reset: remove(ws.join("target")),
        done: file_exists(ws.join("target/debug/hello")),
    }
}

/// `go build -mod=vendor` of a module whose one dependency is vendored.
fn go_build_vendored(who: As) -> Step {
    let ws = fresh(who, "go");
    let dep = ws.join("vendor/example.com/greet");
    std::fs::create_dir_all(&dep).unwrap();
    std::fs::write(
        ws.join("go.mod"),
        "module example.com/hello\n\ngo 1.19\n\nrequire example.com/greet v1.0.0\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("main.go"),
        "package main\n\nimport \"example.com/greet\"\n\nfunc main() { println(greet.Hello()) }\n",
    )
    .unwrap();
    std::fs::write(
        dep.join("greet.go"),
        "package greet\n\nfunc Hello() string { return \"hello\" }\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("vendor/modules.txt"),
        "# example.com/greet v1.0.0\n## explicit\nexample.com/greet\n",
    )
    .unwrap();
    own(who, &ws);
    Step {
        name: "go build -mod=vendor",
        workspace: ws.clone(),
        command: strings(&["go", "build", "-mod=vendor", "-o", "hello", "."]),
        learn_flags: vec![],
        env: vec![],
        within: vec![],
        config: None,
        draft_says: vec![],
        draft_lacks: vec![],
        reset: remove(ws.join("hello")),
        done: file_exists(ws.join("hello")),
    }
}

fn cell(r: &Result<u128, String>) -> String {
    match r {
        Ok(ms) => format!("yes, {ms} ms"),
        Err(_) => "no".into(),
    }
}

/// Prints the reports as a table, writes it to `CARGO_TARGET_TMPDIR/file`,
/// and fails naming every way that did not succeed.
fn judge(reports: &[Report], file: &str) {
    let mut table = String::from(
        "| step | as | direct | learned first try | rerun first try | REVIEW marks |\n|---|---|---|---|---|---|\n",
    );
    let mut failures = Vec::new();
    for r in reports {
        table.push_str(&format!(
            "| {} | {:?} | {} | {} | {} | {} |\n",
            r.name,
            r.who,
            cell(&r.direct),
            cell(&r.learned),
            cell(&r.rerun),
            r.review_marks
        ));
        for (way, result) in [
            ("direct", &r.direct),
            ("learn", &r.learned),
            ("rerun", &r.rerun),
        ] {
            if let Err(why) = result {
                failures.push(format!("{} as {:?}, {way}: {why}", r.name, r.who));
            }
        }
    }
    eprintln!("{table}");
    std::fs::write(Path::new(env!("CARGO_TARGET_TMPDIR")).join(file), &table).unwrap();
    assert!(failures.is_empty(), "{}\n\n{table}", failures.join("\n\n"));
}

#[test]
fn the_corpus_learns_and_reruns_first_try() {
    let steps: &[fn(As) -> Step] = &[
        tar_of_a_tmp_source,
        git_clone_from_a_tmp_path,
        git_commit,
        make_builds_c,
        python_unittest,
        pip_install_from_a_local_index,
        cargo_build_offline,
        go_build_vendored,
    ];
    let mut reports = Vec::new();
    for who in [As::Root, As::Nobody] {
        for make in steps {
            reports.push(try_step(who, make(who)));
        }
    }
    judge(&reports, "learn-corpus.md");
}

/// The registry's name in the world, and its port.
const REGISTRY: &str = "registry.test";
const REGISTRY_PORT: u16 = 8080;

/// A static npm registry holding `shout@1.0.0`, served by the world's
/// internet at `http://registry.test:8080/`.
fn npm_registry(world: &World) {
    let root = world.path("registry");
    let package = world.path("registry-src/package");
    std::fs::create_dir_all(root.join("tarballs")).unwrap();
    std::fs::create_dir_all(&package).unwrap();
    std::fs::write(
        package.join("package.json"),
        r#"{"name":"shout","version":"1.0.0","main":"index.js"}"#,
    )
    .unwrap();
    std::fs::write(
        package.join("index.js"),
        "module.exports = (t) => t.toUpperCase();\n",
    )
    .unwrap();
    let tarball = root.join("tarballs/shout-1.0.0.tgz");
    let packed = Command::new("tar")
        .arg("czf")
        .arg(&tarball)
        .arg("-C")
        .arg(package.parent().unwrap())
        .arg("package")
        .status()
        .unwrap();
    assert!(packed.success());
    let bytes = std::fs::read(&tarball).unwrap();
    let sha1 = {
        let out = Command::new("sha1sum").arg(&tarball).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    let integrity = {
        use base64::Engine;
        use sha2::Digest;
        format!(
            "sha512-{}",
            base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(&bytes))
        )
    };
    let packument = serde_json::json!({
        "name": "shout",
        "dist-tags": {"latest": "1.0.0"},
        "versions": {"1.0.0": {
            "name": "shout",
            "version": "1.0.0",
            "main": "index.js",
            "dist": {
                "tarball": format!("http://{REGISTRY}:{REGISTRY_PORT}/tarballs/shout-1.0.0.tgz"),
                "shasum": sha1,
                "integrity": integrity,
            }
        }}
    });
    std::fs::write(root.join("shout"), packument.to_string()).unwrap();
    Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(&root)
        .status()
        .unwrap();
    world.map(REGISTRY, &[WORLD_IP.parse().unwrap()]);
    world.start_http("registry", REGISTRY_PORT, &root, &[]);
}

/// `npm install` of a project depending on `shout`, from the registry,
/// learned with `--net forward`.
fn npm_install_from_a_local_registry(world: &World, who: As) -> Step {
    let ws = fresh(who, "npm");
    std::fs::write(
        ws.join("package.json"),
        r#"{"name":"app","version":"1.0.0","dependencies":{"shout":"1.0.0"}}"#,
    )
    .unwrap();
    own(who, &ws);
    let audit = world.writable_dir(&format!("audit-{who:?}"));
    if who.is_root() {
        std::os::unix::fs::chown(&audit, Some(0), Some(0)).unwrap();
    }
    let config = world.path(&format!("spawnd-{who:?}.toml"));
    std::fs::write(
        &config,
        format!(
            "[audit]\npath = \"{}/audit.jsonl\"\n\n[network]\nallow_cidrs = [\"{WORLD_CIDR}\"]\n",
            audit.display()
        ),
    )
    .unwrap();
    let node_modules = ws.join("node_modules");
    let lock = ws.join("package-lock.json");
    Step {
        name: "npm install (local registry)",
        workspace: ws.clone(),
        command: vec![
            "npm".into(),
            "install".into(),
            "--no-audit".into(),
            "--no-fund".into(),
            "--no-update-notifier".into(),
            "--registry".into(),
            format!("http://{REGISTRY}:{REGISTRY_PORT}/"),
        ],
        learn_flags: strings(&["--net", "forward"]),
        env: vec![],
        within: vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            world.name().into(),
        ],
        config: Some(config),
        draft_says: says(&[("network = ", &format!("\"{REGISTRY}:{REGISTRY_PORT}\""))]),
        draft_lacks: vec![],
        reset: Box::new(move || {
            let _ = std::fs::remove_dir_all(&node_modules);
            let _ = std::fs::remove_file(&lock);
        }),
        done: file_exists(ws.join("node_modules/shout/index.js")),
    }
}

#[test]
fn npm_learns_from_a_local_registry_and_reruns_first_try() {
    let Some(world) = World::new() else { return };
    npm_registry(&world);
    let reports: Vec<Report> = [As::Root, As::Nobody]
        .into_iter()
        .map(|who| try_step(who, npm_install_from_a_local_registry(&world, who)))
        .collect();
    judge(&reports, "learn-corpus-npm.md");
}
