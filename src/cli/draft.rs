//! The draft manifest `spawnd learn` writes from what it observed: the
//! program pinned, the observed argv as an operation whose inputs are
//! placeholders defaulting to the observed values, the paths read, written
//! and executed collapsed into scopes, the env keys passed and the network
//! destinations dialed. What needs a person's judgement is marked: paths
//! that hold secrets stay commented out, broad scopes and shells are
//! flagged. Pure: the host is asked only through [`Host`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::sandbox::trace::Use;

/// What the host answers about its paths (the real filesystem in `learn`,
/// a table in tests).
pub trait Host {
    /// Whether something is at `path`.
    fn exists(&self, path: &Path) -> bool;
    /// Whether `path` is a directory.
    fn is_dir(&self, path: &Path) -> bool;
    /// `path` with every link on the way resolved, if it resolves.
    fn real_path(&self, path: &Path) -> Option<PathBuf>;
}

/// What one observed run showed.
pub struct Observed {
    /// The connector's name.
    pub name: String,
    /// The operation's name.
    pub op: String,
    /// The program as declared (the path found), and its pin.
    pub program: PathBuf,
    /// `sha256:<hex>` of the program.
    pub program_hash: String,
    /// The argv, `argv[0]` as given.
    pub argv: Vec<String>,
    /// Where it ran.
    pub cwd: PathBuf,
    /// The directory `{workspace}` names.
    pub workspace: PathBuf,
    /// The directories the run could write (the workspace among them):
    /// host paths even where the sandbox has its own (`/tmp`).
    pub writable: Vec<PathBuf>,
    /// The host paths the run was shown besides (named by the command,
    /// `--read`, `--exec`): host paths even under `/tmp`, so what it used
    /// there is granted, never taken for the sandbox's own.
    pub visible: Vec<PathBuf>,
    /// The `--exec` directories (toolchain prefixes): each the run used is
    /// granted whole in `fs_exec`.
    pub exec_dirs: Vec<PathBuf>,
    /// The caller's home, for `~/` scopes.
    pub home: Option<PathBuf>,
    /// Every (path, use) the tracer saw.
    pub paths: Vec<(PathBuf, Use)>,
    /// Every path executed, in order, with its digest when it could be read.
    pub executed: Vec<(PathBuf, Option<String>)>,
    /// The env keys passed.
    pub env_keys: Vec<String>,
    /// `host:port` pairs dialed.
    pub network: Vec<String>,
    /// What the sandbox provides without a scope (the operator's system paths).
    pub system_paths: Vec<PathBuf>,
    /// How long the run took.
    pub duration_ms: u64,
    /// The program's exit code (`None`: killed by a signal).
    pub exit_code: Option<i32>,
    /// What the sandbox refused during the run, one line each.
    pub refused: Vec<String>,
}

/// The draft's text, and the points a person must review.
pub struct Draft {
    /// The manifest.
    pub text: String,
    /// One line per point to review (also in the text, as comments).
    pub review: Vec<String>,
}

/// Paths the sandbox makes itself: never a scope.
const PROVIDED: &[&str] = &["/proc", "/dev", "/sys", "/tmp", "/run"];

/// Files every sandbox gets written for it (`/etc/resolv.conf` with
/// network grants and while learning; without grants there is no resolver
/// to name), and `ld.so.cache`, a system path: never a scope, since a
/// scope of the host's file would only hide the sandbox's own.
const RUNTIME_FILES: &[&str] = &[
    "/etc/passwd",
    "/etc/group",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/resolv.conf",
    "/etc/ld.so.cache",
];

/// Files read by habit that never matter inside a sandbox: the resolver's
/// options and address sorting (`host.conf`, `gai.conf`: the defaults
/// serve), and `ld.so.preload`, libraries to load into every program,
/// which a sandbox must never take from the host.
const NOISE: &[&str] = &["/etc/host.conf", "/etc/gai.conf", "/etc/ld.so.preload"];

/// Never a scope as a whole: it holds the host's accounts and secrets
/// (`/etc/shadow`, `/etc/ssh`); the files read in it are granted one by one.
const ETC: &str = "/etc";

/// Programs that run whatever code they are given.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "fish", "busybox"];

/// A directory with at least this many files read becomes one scope.
const COLLAPSE_AT: usize = 8;

/// Paths read through links listed in the draft's comment.
const MAX_LINKS_SHOWN: usize = 5;

impl Observed {
    /// The draft for this run.
    pub fn draft(&self, host: &dyn Host) -> Draft {
        let mut review = Vec::new();
        let WriteScopes {
            granted: write,
            sensitive: write_sensitive,
            attempted,
        } = self.write_scopes(host);
        let ReadScopes {
            granted: mut read,
            repositories,
            sensitive: read_sensitive,
            links,
        } = self.read_scopes(host, &write);
        // The working directory must lie in a scope.
        if !read.iter().chain(&write).any(|s| self.cwd.starts_with(s)) {
            read.insert(self.cwd.clone());
            read = outermost(read);
        }
        let exec = self.exec_scopes(&write, host);
        self.grant_shown(&mut read, &write, host);
        // A toolchain prefix granted executable is readable too.
        read.retain(|r| !exec.iter().any(|e| r.starts_with(e)));
        let mut text = String::new();
        let _ = writeln!(
            text,
            "# Drafted by `spawnd learn` from one observed run ({} ms, {}).",
            self.duration_ms,
            match self.exit_code {
                Some(0) => "exit 0".to_string(),
                Some(c) => format!("exit {c}: the run failed, so this draft may lack what the rest of the work needs"),
                None => "killed by a signal: this draft may lack what the rest of the work needs".to_string(),
            }
        );
        let _ = writeln!(
            text,
            "# Review it before use: lines marked REVIEW need a decision."
        );
        let _ = writeln!(
            text,
            "# Run it: spawnd run --manifest THIS --op {} --workspace {} --mode {}",
            self.op,
            shown(&self.workspace),
            if write.is_empty() {
                "readonly"
            } else {
                "write"
            }
        );
        let _ = writeln!(
            text,
            "\n[connector]\nname = {}\nversion = \"0.1.0\"\n",
            quote(&self.name)
        );
        let _ = writeln!(text, "[capabilities.spawn]");
        let _ = writeln!(
            text,
            "programs = [{{ path = {}, hash = {} }}]",
            quote(&self.program.display().to_string()),
            quote(&self.program_hash)
        );
        let others: Vec<&(PathBuf, Option<String>)> = self
            .executed
            .iter()
            .filter(|(p, _)| p != &self.program)
            .collect();
        self.write_exec(&mut text, &mut review, &others, host);
        let shell = std::iter::once(&self.program)
            .chain(others.iter().map(|(p, _)| p))
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| SHELLS.contains(&n))
            });
        if let Some(shell) = shell {
            review.push(format!(
                "it runs the shell {}: a shell runs any program the system paths hold, unpinned",
                shown(shell)
            ));
        }
        // What is left out but may be wanted: each as a whole alternative
        // line of its key, valid TOML once uncommented in place of the key's.
        let mut read_withheld = Vec::new();
        let mut write_withheld = Vec::new();
        for (path, uses) in &read_sensitive {
            read_withheld.push(Withheld {
                path: path.clone(),
                why: format!("it used {} ({uses}), which may hold secrets", shown(path)),
            });
            review.push(format!(
                "{} may hold secrets: left out (commented in the draft)",
                shown(path)
            ));
        }
        for (path, uses) in &write_sensitive {
            write_withheld.push(Withheld {
                path: path.clone(),
                why: format!("it used {} ({uses}), which may hold secrets", shown(path)),
            });
            review.push(format!(
                "{} may hold secrets: left out (commented in the draft)",
                shown(path)
            ));
        }
        for dir in &attempted {
            write_withheld.push(Withheld {
                path: dir.clone(),
                why: format!(
                    "it tried to write in {}, where learning let it not (refused then)",
                    shown(dir)
                ),
            });
            review.push(format!(
                "it tried to write in {} (refused while learning): not granted",
                shown(dir)
            ));
        }
        for repository in &repositories {
            let _ = writeln!(
                text,
                "# {} is a repository, granted whole: git (or hg) finds all of it, and the\n# directory whose owner git checks (safe.directory) is the real one",
                shown(repository)
            );
        }
        if !links.is_empty() {
            let _ = writeln!(
                text,
                "# Read through a link, which a scope cannot be (nor the sandbox show): what it\n# resolves to is granted unless the sandbox has it; the program finds it by that path:"
            );
            for (named, real) in links.iter().take(MAX_LINKS_SHOWN) {
                let _ = writeln!(text, "#   {} -> {}", shown(named), shown(real));
            }
            if links.len() > MAX_LINKS_SHOWN {
                let _ = writeln!(text, "#   and {} more", links.len() - MAX_LINKS_SHOWN);
            }
        }
        if read.iter().any(|p| p.starts_with(ETC)) {
            let _ = writeln!(
                text,
                "# Under /etc only the files it read are granted (the sandbox writes its own passwd,\n# group, hosts and nsswitch.conf); to widen, list more files or a directory under\n# /etc, never /etc itself: it holds the host's accounts and secrets (/etc/shadow)"
            );
        }
        self.write_list(
            &mut text,
            &mut review,
            "fs_read",
            &read,
            &read_withheld,
            host,
        );
        self.write_list(
            &mut text,
            &mut review,
            "fs_write",
            &write,
            &write_withheld,
            host,
        );
        for dir in exec.intersection(&write) {
            let _ = writeln!(
                text,
                "# REVIEW: {} is both written and executed: a program may run what it wrote there",
                shown(dir)
            );
            review.push(format!(
                "{} is writable and executable: a program may run what it wrote there",
                shown(dir)
            ));
        }
        self.write_list(&mut text, &mut review, "fs_exec", &exec, &[], host);
        if !self.refused.is_empty() {
            let _ = writeln!(text, "# While learning, the sandbox refused:");
            for r in &self.refused {
                let _ = writeln!(text, "#   {}", escape(r));
            }
        }
        let cwd = self.scope_text(&self.cwd);
        let _ = writeln!(text, "cwd = {}", quote(&cwd));
        if !self.env_keys.is_empty() {
            let _ = writeln!(
                text,
                "env_passthrough = [{}]",
                join_quoted(self.env_keys.iter().map(String::as_str))
            );
            let credentials: Vec<&str> = self
                .env_keys
                .iter()
                .map(String::as_str)
                .filter(|k| looks_like_credential(k))
                .collect();
            if !credentials.is_empty() {
                let _ = writeln!(
                    text,
                    "# REVIEW: these look like credentials: have the operator bind them ([[credentials]]) rather than the caller pass them:\n# credential_env_keys = [{}]",
                    join_quoted(credentials.iter().copied())
                );
                review.push(format!(
                    "{} look like credentials: bind them in the operator config (credential_env_keys)",
                    credentials.join(", ")
                ));
            }
        }
        if !self.network.is_empty() {
            let _ = writeln!(
                text,
                "# REVIEW: every destination it connected to while learning\nnetwork = [{}]",
                join_quoted(self.network.iter().map(String::as_str))
            );
            review.push(format!(
                "network: {} (every destination it connected to)",
                escape(&self.network.join(", "))
            ));
        }
        let wall = (self.duration_ms.saturating_mul(4)).clamp(30_000, 3_600_000);
        let _ = writeln!(text, "\n[capabilities.spawn.limits]\nwall_time_ms = {wall}");
        // It ran something it made in the sandbox's own /tmp.
        let ran_from_tmp = self.executed.iter().any(|(p, _)| {
            p.starts_with("/tmp")
                && !self
                    .writable
                    .iter()
                    .chain(&self.visible)
                    .any(|w| p.starts_with(w))
        });
        if ran_from_tmp {
            let _ = writeln!(
                text,
                "# REVIEW: it ran a program it made in /tmp\ntmp_exec = true"
            );
            review.push("tmp_exec = true: it ran a program it made in /tmp".to_string());
        }
        let (argv, params) = template(&self.argv, &self.cwd, host);
        let _ = writeln!(
            text,
            "\n[capabilities.spawn.operations.{}]\nargv = [{}]\nmode = \"{}\"\ndescription = {}",
            self.op,
            join_quoted(argv.iter().map(String::as_str)),
            if write.is_empty() {
                "readonly"
            } else {
                "write"
            },
            quote(&format!(
                "runs {} as observed",
                self.argv.first().map(String::as_str).unwrap_or("")
            ))
        );
        for p in &params {
            let _ = writeln!(
                text,
                "\n[capabilities.spawn.operations.{}.params.{}]",
                self.op, p.name
            );
            let _ = writeln!(text, "default = {}", quote(&p.default));
            if p.path {
                let _ = writeln!(text, "kind = \"path\"");
            }
            if p.default.starts_with('-') {
                let _ = writeln!(
                    text,
                    "# REVIEW: a caller may start this value with `-` (an option of its own)\nallow_dash = true"
                );
                review.push(format!(
                    "placeholder {} may start with `-`: a caller can pass options through it",
                    p.name
                ));
            }
            if let Some(option) = &p.option {
                let _ = writeln!(
                    text,
                    "# REVIEW: the value of {}, chosen by the caller: pin it (values = [...]) or bound it (pattern) if that option can name a command or a file to run",
                    escape(option)
                );
                review.push(format!(
                    "placeholder {} is the value of {}: a caller chooses it; pin or bound it",
                    p.name,
                    escape(option)
                ));
            }
            let _ = writeln!(text, "description = \"observed: {}\"", escape(&p.default));
        }
        if !review.is_empty() {
            let mut head = String::from("# REVIEW before use:\n");
            for r in &review {
                let _ = writeln!(head, "#   - {r}");
            }
            text = head + &text;
        }
        Draft { text, review }
    }

    /// `also_runs`, every other program it ran pinned as it was then, and
    /// `exec = "declared"` when that list is whole: when something ran
    /// from where the run could write (the workspace, `--write`, its own
    /// `/tmp`), or could not be read, no pin would hold for the next run
    /// (a build makes its programs anew), so the draft keeps the default
    /// and says why. A draft that reruns as learned comes first.
    fn write_exec(
        &self,
        text: &mut String,
        review: &mut Vec<String>,
        others: &[&(PathBuf, Option<String>)],
        host: &dyn Host,
    ) {
        let mut pinned = Vec::new();
        let mut unpinned = Vec::new();
        for (path, digest) in others {
            let writable = self.writable.iter().any(|w| path.starts_with(w));
            // The sandbox's own /tmp, /run and /dev are not the host's
            // (a host path shown to the run is).
            let private = ["/tmp", "/run", "/dev"].iter().any(|d| path.starts_with(d))
                && !self.visible.iter().any(|v| path.starts_with(v));
            if path == Path::new("/proc/self/exe") {
                // The program itself, whose rule is its own.
                continue;
            }
            if writable || private || !path.is_absolute() {
                unpinned.push(path);
            } else if !host.exists(path) {
                // An attempt that found nothing (a search along PATH).
                continue;
            } else if let Some(digest) = digest {
                pinned.push((path, digest));
            } else {
                unpinned.push(path);
            }
        }
        if unpinned.is_empty() {
            let _ = writeln!(
                text,
                "# Only the programs declared here may be executed (exec = \"declared\"): the\n# program above, each it ran (also_runs, pinned), and their interpreters and loaders."
            );
            let _ = writeln!(text, "exec = \"declared\"");
        } else {
            let _ = writeln!(
                text,
                "# REVIEW: it ran programs no pin can hold (made or changed where it writes, or unreadable):"
            );
            for p in &unpinned {
                let _ = writeln!(text, "#   {}", shown(p));
            }
            let _ = writeln!(
                text,
                "# so what runs is left to the system paths and fs_exec scopes. To allow only the\n# programs declared here, once none of those is needed:\n# exec = \"declared\""
            );
            review.push(format!(
                "it ran {} from where it writes (or unreadable): exec = \"declared\" left off",
                unpinned
                    .iter()
                    .map(|p| shown(p))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if !pinned.is_empty() {
            let entries: Vec<String> = pinned
                .iter()
                .map(|(p, digest)| {
                    format!(
                        "  {{ path = {}, hash = {} }},",
                        quote(&p.display().to_string()),
                        quote(digest)
                    )
                })
                .collect();
            let _ = writeln!(
                text,
                "# It ran these too, pinned as they were:\nalso_runs = [\n{}\n]",
                entries.join("\n")
            );
        }
    }

    /// Whether `path` can be written as a scope (scope syntax reserves
    /// `{`, `}`, `[`, `]`, `*` and `?`).
    fn writable_as_scope(path: &Path) -> bool {
        !path
            .to_string_lossy()
            .contains(['{', '}', '[', ']', '*', '?'])
    }

    /// `path` as a scope: `{workspace}/…` under the workspace, `~/…` under
    /// the home, else absolute.
    fn scope_text(&self, path: &Path) -> String {
        if let Ok(rest) = path.strip_prefix(&self.workspace) {
            return match rest.as_os_str().is_empty() {
                true => "{workspace}".to_string(),
                false => format!("{{workspace}}/{}", rest.display()),
            };
        }
        if let Some(rest) = self.home.as_ref().and_then(|h| path.strip_prefix(h).ok()) {
            if !rest.as_os_str().is_empty() {
                return format!("~/{}", rest.display());
            }
        }
        path.display().to_string()
    }

    /// `key = [...]` with `scopes`, as the draft writes it.
    fn list_line(&self, key: &str, scopes: &BTreeSet<PathBuf>) -> String {
        let written: Vec<String> = scopes.iter().map(|p| self.scope_text(p)).collect();
        format!(
            "{key} = [{}]",
            join_quoted(written.iter().map(String::as_str))
        )
    }

    /// Writes `key = [...]`, a broad scope marked for review. Each of
    /// `withheld` comes first as a commented alternative: the whole line
    /// with it added, to use in place of the key's line (valid TOML once
    /// uncommented; `+=` is not TOML).
    fn write_list(
        &self,
        text: &mut String,
        review: &mut Vec<String>,
        key: &str,
        scopes: &BTreeSet<PathBuf>,
        withheld: &[Withheld],
        host: &dyn Host,
    ) {
        let (scopes, unwritable): (BTreeSet<PathBuf>, BTreeSet<PathBuf>) = scopes
            .iter()
            .cloned()
            .partition(|p| Self::writable_as_scope(p));
        for p in &unwritable {
            let _ = writeln!(
                text,
                "# REVIEW: {} holds a character scopes reserve ({{ }} [ ] * ?); grant a directory above it",
                shown(p)
            );
            review.push(format!(
                "{key} {} cannot be written as a scope: left out",
                shown(p)
            ));
        }
        for p in &scopes {
            if self.is_broad(p) {
                let _ = writeln!(text, "# REVIEW: {} is broad", shown(p));
                review.push(format!("{key} {} is broad: narrow it if you can", shown(p)));
            }
            if let Some(secret) = self.holds_sensitive(p, host) {
                let _ = writeln!(
                    text,
                    "# REVIEW: {} holds {}, which may hold secrets",
                    shown(p),
                    shown(&secret)
                );
                review.push(format!(
                    "{key} {} holds {}, which may hold secrets: narrow it",
                    shown(p),
                    shown(&secret)
                ));
            }
            if key != "fs_read" && !host.exists(p) {
                let _ = writeln!(text, "# {} does not exist now; spawnd creates it", shown(p));
            }
        }
        for w in withheld.iter().filter(|w| Self::writable_as_scope(&w.path)) {
            let mut with = scopes.clone();
            with.insert(w.path.clone());
            let _ = writeln!(
                text,
                "# REVIEW: {}; to grant it, {}:\n# {}",
                w.why,
                if scopes.is_empty() {
                    "uncomment"
                } else {
                    "use this line in place of the one below"
                },
                self.list_line(key, &with)
            );
        }
        if !scopes.is_empty() {
            let _ = writeln!(text, "{}", self.list_line(key, &scopes));
        }
    }

    /// A top-level directory, a home, or the workspace's parent or above.
    fn is_broad(&self, p: &Path) -> bool {
        p.components().count() <= 2
            || self.home.as_deref() == Some(p)
            || self.workspace.starts_with(p) && p != self.workspace
    }

    fn is_provided(&self, p: &Path) -> bool {
        if self
            .writable
            .iter()
            .chain(&self.visible)
            .any(|w| p.starts_with(w))
        {
            return false;
        }
        PROVIDED.iter().any(|d| p.starts_with(d))
            || RUNTIME_FILES.iter().chain(NOISE).any(|f| p == Path::new(f))
            || self.system_paths.iter().any(|s| p.starts_with(s))
    }

    /// The secret path `p` lies in, if any ([`crate::secret_paths::containing`]),
    /// but for one that holds the workspace, chosen by the caller (root's
    /// `/root/proj`): what lies in the workspace is the work.
    fn sensitive(&self, p: &Path) -> Option<PathBuf> {
        crate::secret_paths::containing(p)
            .filter(|s| !(p.starts_with(&self.workspace) && self.workspace.starts_with(s)))
    }

    /// A secret path that exists strictly inside `scope`, if any
    /// ([`crate::secret_paths::inside`]).
    fn holds_sensitive(&self, scope: &Path, host: &dyn Host) -> Option<PathBuf> {
        crate::secret_paths::inside(scope, self.home.as_deref(), &|c: &Path| host.exists(c))
    }

    /// Directories written (a file's parent) where learning let it write,
    /// collapsed; the sensitive ones and the attempts elsewhere, left out.
    fn write_scopes(&self, host: &dyn Host) -> WriteScopes {
        let mut attempted = BTreeSet::new();
        let mut dirs = BTreeSet::new();
        let mut sensitive = BTreeMap::<PathBuf, BTreeSet<&str>>::new();
        for (path, how) in &self.paths {
            if !matches!(how, Use::Write | Use::Create | Use::Remove) || self.is_provided(path) {
                continue;
            }
            if let Some(s) = self.sensitive(path) {
                sensitive.entry(s).or_default().insert("written");
                continue;
            }
            // Only what learning let it write is granted; an attempt
            // elsewhere (refused then) is shown for review.
            if !self.writable.iter().any(|w| path.starts_with(w)) {
                let dir = path
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| path.clone());
                attempted.insert(dir);
                continue;
            }
            let dir = match how {
                Use::Create if host.is_dir(path) => path.clone(),
                _ => path
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| path.clone()),
            };
            dirs.insert(dir);
        }
        let mut dirs = outermost(dirs);
        // Many directories under the workspace: their deepest common one.
        let inside: Vec<PathBuf> = dirs
            .iter()
            .filter(|d| d.starts_with(&self.workspace))
            .cloned()
            .collect();
        if inside.len() > 3 {
            let common = inside
                .iter()
                .skip(1)
                .fold(inside[0].clone(), |acc, d| common_ancestor(&acc, d));
            for d in &inside {
                dirs.remove(d);
            }
            dirs.insert(common);
        }
        WriteScopes {
            granted: outermost(dirs),
            sensitive: flatten(sensitive),
            attempted: outermost(attempted),
        }
    }

    /// Paths read, collapsed into scopes, none inside a write scope; and
    /// the sensitive ones, left out.
    fn read_scopes(&self, host: &dyn Host, write: &BTreeSet<PathBuf>) -> ReadScopes {
        let mut by_dir = BTreeMap::<PathBuf, BTreeSet<PathBuf>>::new();
        let mut listed = BTreeSet::new();
        let mut repositories = BTreeSet::new();
        let mut sensitive = BTreeMap::<PathBuf, BTreeSet<&str>>::new();
        let mut links = BTreeMap::new();
        for (named, how) in &self.paths {
            if !matches!(how, Use::Read | Use::List)
                || self.is_provided(named)
                || named == &self.program
            {
                continue;
            }
            if write.iter().any(|w| named.starts_with(w)) || !host.exists(named) {
                continue;
            }
            // A scope is a real path (the sandbox refuses one that goes
            // through a link): a path read through a link is granted as
            // what it resolves to, unless the sandbox provides that.
            let Some(real) = host.real_path(named) else {
                continue;
            };
            if &real != named {
                links.insert(named.clone(), real.clone());
                if self.is_provided(&real) || write.iter().any(|w| real.starts_with(w)) {
                    continue;
                }
            }
            let path = &real;
            if let Some(s) = self.sensitive(path) {
                sensitive.entry(s).or_default().insert("read");
                continue;
            }
            if let Some(root) = self.repository_scope(path, host, write) {
                repositories.insert(root.clone());
                listed.insert(root);
                continue;
            }
            if path == Path::new(ETC) {
                continue;
            }
            if *how == Use::List || host.is_dir(path) {
                listed.insert(path.clone());
            } else if let Some(dir) = path.parent() {
                by_dir
                    .entry(dir.to_path_buf())
                    .or_default()
                    .insert(path.clone());
            }
        }
        // A directory holding a secret the run read is not granted: the
        // secret is left out, and granting the directory would grant it
        // anyway; what was read beside the secret is granted by itself.
        let holds_a_secret_read = |dir: &Path| sensitive.keys().any(|s| s.starts_with(dir));
        let mut scopes = BTreeSet::new();
        for (dir, files) in by_dir {
            let collapse = files.len() >= COLLAPSE_AT
                && dir != Path::new(ETC)
                && self.holds_sensitive(&dir, host).is_none();
            if (collapse || listed.contains(&dir)) && !holds_a_secret_read(&dir) {
                scopes.insert(dir);
            } else {
                scopes.extend(files);
            }
        }
        scopes.extend(listed.into_iter().filter(|dir| !holds_a_secret_read(dir)));
        // Reads under the workspace: the workspace, unless it is written.
        let under_workspace: Vec<PathBuf> = scopes
            .iter()
            .filter(|p| p.starts_with(&self.workspace))
            .cloned()
            .collect();
        if !under_workspace.is_empty()
            && !write.iter().any(|w| self.workspace.starts_with(w))
            && !write.iter().any(|w| w.starts_with(&self.workspace))
        {
            for p in under_workspace {
                scopes.remove(&p);
            }
            scopes.insert(self.workspace.clone());
        }
        let granted: BTreeSet<PathBuf> = outermost(scopes)
            .into_iter()
            .filter(|p| !write.iter().any(|w| p.starts_with(w)))
            .collect();
        ReadScopes {
            repositories: repositories
                .into_iter()
                .filter(|r| granted.contains(r))
                .collect(),
            granted,
            sensitive: flatten(sensitive),
            links,
        }
    }

    /// The scope that lets a program reading `path` use the whole
    /// repository it lies in: the repository's root (the directory holding
    /// `.git` or `.hg`, or a bare repository's own directory), so git finds
    /// every file it may need next time, and the directory whose owner git
    /// checks (`safe.directory`) is the real one, not a directory the
    /// sandbox made to hold a narrower scope. When the root lies above the
    /// workspace, only its `.git` (granting the root would grant the
    /// workspace's parents). None for a repository in the workspace (the
    /// workspace covers it), one that holds or is a secret, a home, or one
    /// that overlaps a write scope.
    fn repository_scope(
        &self,
        path: &Path,
        host: &dyn Host,
        write: &BTreeSet<PathBuf>,
    ) -> Option<PathBuf> {
        let root = repository_root(path, host)?;
        if root.starts_with(&self.workspace) {
            return None;
        }
        let scope = if self.workspace.starts_with(&root) {
            let git_dir = root.join(".git");
            if !path.starts_with(&git_dir) || !host.is_dir(&git_dir) {
                return None;
            }
            git_dir
        } else {
            root
        };
        let overlaps_write = write
            .iter()
            .any(|w| w.starts_with(&scope) || scope.starts_with(w));
        let fit = !overlaps_write
            && self.home.as_deref() != Some(scope.as_path())
            && self.sensitive(&scope).is_none()
            && self.holds_sensitive(&scope, host).is_none();
        fit.then_some(scope)
    }

    /// Each path shown to the run to read (named by the command, `--read`)
    /// that it read in, granted whole in place of what it read there: git
    /// checks who owns the repository it was named, tar reads the tree
    /// it was named. Not one that is or holds a sensitive path.
    fn grant_shown(
        &self,
        read: &mut BTreeSet<PathBuf>,
        write: &BTreeSet<PathBuf>,
        host: &dyn Host,
    ) {
        for dir in self.visible.iter().filter(|d| !self.exec_dirs.contains(d)) {
            let used = self
                .paths
                .iter()
                .any(|(p, how)| matches!(how, Use::Read | Use::List) && p.starts_with(dir));
            if !used
                || write.iter().any(|w| dir.starts_with(w))
                || self.sensitive(dir).is_some()
                || self.holds_sensitive(dir, host).is_some()
            {
                continue;
            }
            read.retain(|r| !r.starts_with(dir));
            read.insert(dir.clone());
        }
    }

    /// Executed files outside the system paths: the write scope they lie
    /// in (executable too), or the file.
    fn exec_scopes(&self, write: &BTreeSet<PathBuf>, host: &dyn Host) -> BTreeSet<PathBuf> {
        let mut out = BTreeSet::new();
        // A toolchain prefix (`--exec`) the run used: granted whole.
        for dir in &self.exec_dirs {
            let used = std::iter::once(&self.program)
                .chain(self.executed.iter().map(|(p, _)| p))
                .chain(self.paths.iter().map(|(p, _)| p))
                .any(|p| p.starts_with(dir));
            if used && !write.iter().any(|w| dir.starts_with(w)) {
                out.insert(dir.clone());
            }
        }
        for (path, _) in &self.executed {
            // An execution that found nothing grants nothing; secrets are never executable.
            if path == &self.program
                || self.is_provided(path)
                || !host.exists(path)
                || self.sensitive(path).is_some()
            {
                continue;
            }
            match write.iter().find(|w| path.starts_with(w)) {
                Some(w) => out.insert(w.clone()),
                None => out.insert(path.clone()),
            };
        }
        outermost(out)
    }
}

/// The innermost repository `path` lies in (or is), if any: a directory
/// holding `.git` (a directory, or a file naming one elsewhere) or `.hg`,
/// or a bare git repository (`HEAD`, `objects/` and `refs/`); a `.git`
/// directory stands for the working tree above it.
fn repository_root(path: &Path, host: &dyn Host) -> Option<PathBuf> {
    path.ancestors()
        .filter(|a| a.parent().is_some())
        .find_map(|a| {
            if host.exists(&a.join(".git")) || host.is_dir(&a.join(".hg")) {
                return Some(a.to_path_buf());
            }
            let bare = host.exists(&a.join("HEAD"))
                && host.is_dir(&a.join("objects"))
                && host.is_dir(&a.join("refs"));
            if !bare {
                return None;
            }
            match (a.file_name(), a.parent()) {
                (Some(name), Some(tree)) if name == ".git" => Some(tree.to_path_buf()),
                _ => Some(a.to_path_buf()),
            }
        })
}

/// `set` without the paths that lie inside another of its paths.
/// In component order a directory comes right before what lies inside
/// it, so one pass keeps the outermost paths.
fn outermost(set: BTreeSet<PathBuf>) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut last: Option<PathBuf> = None;
    for p in set {
        if last.as_ref().is_some_and(|l| p.starts_with(l)) {
            continue;
        }
        last = Some(p.clone());
        out.insert(p);
    }
    out
}

fn common_ancestor(a: &Path, b: &Path) -> PathBuf {
    a.components()
        .zip(b.components())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x)
        .collect()
}

fn flatten(m: BTreeMap<PathBuf, BTreeSet<&str>>) -> Vec<(PathBuf, String)> {
    m.into_iter()
        .map(|(p, uses)| (p, uses.into_iter().collect::<Vec<_>>().join(" and ")))
        .collect()
}

/// What [`Observed::write_scopes`] finds.
struct WriteScopes {
    /// Granted: directories written inside the writable ones.
    granted: BTreeSet<PathBuf>,
    /// Left out: sensitive paths written, and how.
    sensitive: Vec<(PathBuf, String)>,
    /// Left out: directories it tried to write outside the writable ones.
    attempted: BTreeSet<PathBuf>,
}

/// What [`Observed::read_scopes`] finds.
struct ReadScopes {
    /// Granted: what was read, collapsed.
    granted: BTreeSet<PathBuf>,
    /// Among them, repositories granted whole.
    repositories: BTreeSet<PathBuf>,
    /// Left out: sensitive paths read, and how.
    sensitive: Vec<(PathBuf, String)>,
    /// Paths read through a link, and what each resolves to.
    links: BTreeMap<PathBuf, PathBuf>,
}

/// A path the draft leaves out of a key but offers, commented.
struct Withheld {
    path: PathBuf,
    /// Why it is left out, for the comment.
    why: String,
}

/// An argv placeholder the draft offers.
struct Param {
    name: String,
    default: String,
    path: bool,
    /// The option whose value it is (`-c`, `--output=`), if any.
    option: Option<String>,
}

/// The observed argv as template tokens (the array form: a token may hold
/// spaces) and the placeholders it uses. Flags and bare words stay
/// literal; every other value becomes a placeholder defaulting to it, a
/// `path` when it names one.
fn template(argv: &[String], cwd: &Path, host: &dyn Host) -> (Vec<String>, Vec<Param>) {
    let mut tokens = Vec::new();
    let mut params: Vec<Param> = Vec::new();
    let mut previous_flag: Option<String> = None;
    let mut after_flag: Option<String> = None;
    for (i, arg) in argv.iter().enumerate() {
        let names_path = |v: &str| {
            !v.is_empty()
                && (v.starts_with('/') || v.starts_with("./") || host.exists(&cwd.join(v)))
        };
        if i == 0 {
            tokens.push(escape_braces(arg));
            continue;
        }
        let literal = is_flag(arg) || (is_word(arg) && !host.exists(&cwd.join(arg)));
        if literal {
            tokens.push(escape_braces(arg));
            previous_flag = arg
                .starts_with("--")
                .then(|| arg.trim_start_matches('-').to_string());
            after_flag = is_flag(arg).then(|| arg.clone());
            continue;
        }
        let option = match after_flag.take() {
            Some(flag) => Some(flag),
            None => arg
                .split_once('=')
                .filter(|(k, _)| k.starts_with("--") && is_flag(k))
                .map(|(k, _)| format!("{k}=")),
        };
        let (prefix, value) = match arg.split_once('=') {
            Some((k, v)) if k.starts_with("--") && is_flag(k) && !v.is_empty() => {
                (format!("{k}="), v.to_string())
            }
            _ => (String::new(), arg.clone()),
        };
        let base = if !prefix.is_empty() {
            prefix
                .trim_start_matches('-')
                .trim_end_matches('=')
                .to_string()
        } else {
            previous_flag.take().unwrap_or_else(|| format!("arg{i}"))
        };
        let mut name: String = base
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
            name = format!("arg_{name}");
        }
        while params.iter().any(|p| p.name == name) {
            name = format!("{name}_{i}");
        }
        tokens.push(format!("{}{{{name}}}", escape_braces(&prefix)));
        params.push(Param {
            path: names_path(&value) && !value.contains("://"),
            name,
            default: value,
            option,
        });
    }
    (tokens, params)
}

/// `-x`, `--name`: a dash or two, then a letter or digit, then letters,
/// digits, `_`, `.` or `-`.
fn is_flag(s: &str) -> bool {
    let rest = s.strip_prefix("--").or_else(|| s.strip_prefix('-'));
    rest.is_some_and(|r| r.starts_with(|c: char| c.is_ascii_alphanumeric()) && is_word_tail(r))
}

/// `clone`, `unittest`: a letter, then letters, digits, `_`, `.` or `-`.
fn is_word(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic()) && is_word_tail(s)
}

fn is_word_tail(s: &str) -> bool {
    s.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// A path as a comment or message may show it: control characters and
/// quotes escaped, so a file name cannot end a comment line.
fn shown(p: &Path) -> String {
    escape(&p.display().to_string())
}

fn escape_braces(s: &str) -> String {
    s.replace('{', "{{").replace('}', "}}")
}

fn looks_like_credential(key: &str) -> bool {
    let k = key.to_ascii_uppercase();
    [
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "API_KEY",
        "APIKEY",
        "PRIVATE_KEY",
        "CREDENTIAL",
    ]
    .iter()
    .any(|w| k.contains(w))
}

fn escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

fn quote(s: &str) -> String {
    format!("\"{}\"", escape(s))
}

fn join_quoted<'a>(items: impl Iterator<Item = &'a str>) -> String {
    items.map(quote).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Table(Vec<(&'static str, bool)>);

    impl Host for Table {
        fn exists(&self, path: &Path) -> bool {
            self.0.iter().any(|(p, _)| Path::new(p) == path)
        }
        /// `/etc/os-release` is a link to `/usr/lib/os-release`, as on Debian.
        fn real_path(&self, path: &Path) -> Option<PathBuf> {
            match path == Path::new("/etc/os-release") {
                true => Some("/usr/lib/os-release".into()),
                false => Some(path.to_path_buf()),
            }
        }
        fn is_dir(&self, path: &Path) -> bool {
            self.0.iter().any(|(p, dir)| Path::new(p) == path && *dir)
        }
    }

    fn observed() -> Observed {
        Observed {
            name: "local://learned/tar".into(),
            op: "run".into(),
            program: "/usr/bin/tar".into(),
            program_hash: format!("sha256:{}", "0".repeat(64)),
            argv: vec![
                "tar".into(),
                "czf".into(),
                "out dir/a.tgz".into(),
                "src".into(),
                "--owner=0".into(),
            ],
            cwd: "/w/proj".into(),
            workspace: "/w/proj".into(),
            writable: vec!["/w/proj".into()],
            visible: vec![],
            exec_dirs: vec![],
            home: Some("/home/u".into()),
            paths: vec![
                ("/w/proj/src".into(), Use::List),
                ("/w/proj/src/a.c".into(), Use::Read),
                ("/w/proj/out dir/a.tgz".into(), Use::Write),
                ("/usr/lib/x.so".into(), Use::Read),
                ("/etc/passwd".into(), Use::Read),
                ("/home/u/.ssh/id_rsa".into(), Use::Read),
                ("/home/u/.config/tool.conf".into(), Use::Read),
                ("/opt/data/missing".into(), Use::Read),
                ("/tmp/x".into(), Use::Write),
                ("/var/spool/cron/crontabs/x".into(), Use::Write),
            ],
            executed: vec![
                ("/usr/bin/tar".into(), Some("sha256:00".into())),
                (
                    "/usr/bin/gzip".into(),
                    Some(format!("sha256:{}", "1".repeat(64))),
                ),
                ("/w/proj/out dir/tool".into(), None),
                ("/etc/shadow".into(), None),
                ("/w/proj/gone".into(), None),
                ("/w/proj/x\nnetwork = [\"evil.example:443\"]".into(), None),
            ],
            env_keys: vec!["CI".into(), "API_TOKEN".into()],
            network: vec!["example.com:443".into()],
            system_paths: vec!["/usr".into(), "/lib".into()],
            duration_ms: 100,
            exit_code: Some(0),
            refused: vec!["refused by seccomp (EPERM): ptrace (1 call); no key".into()],
        }
    }

    fn host() -> Table {
        Table(vec![
            ("/w/proj/src", true),
            ("/w/proj/src/a.c", false),
            ("/w/proj/out dir", true),
            ("/w/proj/out dir/a.tgz", false),
            ("/home/u/.ssh/id_rsa", false),
            ("/home/u/.config/tool.conf", false),
            ("/w/proj/src", true),
            ("/w/proj/out dir/tool", false),
            ("/etc/shadow", false),
            ("/usr/bin/gzip", false),
        ])
    }

    /// Each commented line that is a TOML key line (a suggestion), taken
    /// alone: uncommented in place of its table's line of that key, the
    /// draft still parses as a manifest. Returns the suggestions.
    fn every_suggestion_parses(text: &str) -> Vec<String> {
        assert!(!text.contains("+="), "not TOML: {text}");
        let lines: Vec<&str> = text.lines().collect();
        let mut suggestions = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let Some(rest) = line.strip_prefix("# ") else {
                continue;
            };
            let Some((key, _)) = rest.split_once(" = ") else {
                continue;
            };
            if !key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                || toml::from_str::<toml::Table>(rest).is_err()
            {
                continue;
            }
            let table_start = lines[..i]
                .iter()
                .rposition(|l| l.starts_with('['))
                .unwrap_or(0);
            let table_end = lines[i..]
                .iter()
                .position(|l| l.starts_with('['))
                .map_or(lines.len(), |n| i + n);
            let uncommented: Vec<&str> = lines
                .iter()
                .enumerate()
                .filter(|(j, l)| {
                    !(*j > table_start
                        && *j < table_end
                        && *j != i
                        && l.starts_with(&format!("{key} = ")))
                })
                .map(|(j, l)| if j == i { rest } else { *l })
                .collect();
            let variant = uncommented.join("\n");
            crate::manifest::parse_manifest(
                "(draft)",
                &variant,
                crate::manifest::LoadOptions::default(),
            )
            .unwrap_or_else(|e| panic!("{rest}: {e}\n{variant}"));
            suggestions.push(rest.to_string());
        }
        suggestions
    }

    #[test]
    fn a_draft_grants_what_was_used_and_marks_what_needs_review() {
        let draft = observed().draft(&host());
        let t = &draft.text;
        crate::manifest::parse_manifest("(draft)", t, crate::manifest::LoadOptions::default())
            .unwrap_or_else(|e| panic!("{e}\n{t}"));
        assert!(t.contains("fs_write = [\"{workspace}/out dir\"]"), "{t}");
        assert!(t.contains("fs_exec = [\"{workspace}/out dir\"]"), "{t}");
        assert!(
            t.contains("fs_read = [\"~/.config/tool.conf\", \"{workspace}\"]"),
            "{t}"
        );
        let suggestions = every_suggestion_parses(t);
        assert!(
            suggestions.contains(
                &"fs_read = [\"~/.config/tool.conf\", \"~/.ssh\", \"{workspace}\"]".to_string()
            ),
            "{suggestions:?}\n{t}"
        );
        assert!(
            !t.contains("/usr/lib/x.so") && !t.contains("\"/etc/passwd\"") && !t.contains("/tmp/x"),
            "{t}"
        );
        assert!(!t.contains("missing"), "{t}");
        assert!(
            t.contains("argv = [\"tar\", \"czf\", \"{arg2}\", \"{arg3}\", \"--owner={owner}\"]"),
            "{t}"
        );
        assert!(
            t.contains("default = \"out dir/a.tgz\"\nkind = \"path\""),
            "{t}"
        );
        assert!(
            t.contains("env_passthrough = [\"CI\", \"API_TOKEN\"]")
                && t.contains("# credential_env_keys = [\"API_TOKEN\"]"),
            "{t}"
        );
        assert!(t.contains("network = [\"example.com:443\"]"), "{t}");
        // What it ran besides is pinned; what it ran from where it writes
        // cannot be, so exec = "declared" is offered, not set.
        assert!(
            t.contains(&format!(
                "also_runs = [\n  {{ path = \"/usr/bin/gzip\", hash = \"sha256:{}\" }},\n]",
                "1".repeat(64)
            )),
            "{t}"
        );
        assert!(t.contains("\n# exec = \"declared\"\n"), "{t}");
        assert!(!t.lines().any(|l| l.starts_with("exec")), "{t}");
        assert!(draft
            .review
            .iter()
            .any(|r| r.contains("exec = \"declared\" left off")));
        assert!(draft.review.iter().any(|r| r.contains(".ssh")));
        // An attempt outside what learning let it write is shown, not granted.
        assert!(
            suggestions.contains(
                &"fs_write = [\"/var/spool/cron/crontabs\", \"{workspace}/out dir\"]".to_string()
            ),
            "{suggestions:?}\n{t}"
        );
        assert!(
            !t.lines().any(|l| l.starts_with("fs_write = [\"/var")),
            "{t}"
        );
        // Secrets are never made executable; nothing is granted for an
        // execution that found no file; a file name cannot end a comment.
        assert!(!t.contains("fs_exec = [\"/etc/shadow"), "{t}");
        assert!(!t.contains("{workspace}/gone"), "{t}");
        assert!(
            !t.lines().any(|l| l.starts_with("network = [\"evil")),
            "{t}"
        );
        assert!(draft.review.iter().any(|r| r.contains("--owner=")));
    }

    #[test]
    fn a_run_whose_programs_all_pin_drafts_exec_declared_with_also_runs() {
        let mut o = observed();
        let pin = |d: &str| Some(format!("sha256:{}", d.repeat(64)));
        o.executed = vec![
            ("/usr/bin/tar".into(), pin("0")),
            // A search along PATH: nothing there, nothing granted.
            ("/usr/local/bin/gzip".into(), None),
            ("/usr/bin/gzip".into(), pin("1")),
            ("/proc/self/exe".into(), None),
        ];
        let draft = o.draft(&host());
        let t = &draft.text;
        let m =
            crate::manifest::parse_manifest("(draft)", t, crate::manifest::LoadOptions::default())
                .unwrap_or_else(|e| panic!("{e}\n{t}"));
        let spawn = m.spawn.unwrap();
        assert_eq!(spawn.exec, crate::manifest::ExecPolicy::Declared, "{t}");
        assert_eq!(
            spawn.also_runs,
            vec![crate::manifest::AlsoRuns {
                path: crate::manifest::ScopePath::Absolute("/usr/bin/gzip".into()),
                hash: format!("sha256:{}", "1".repeat(64)).parse().unwrap()
            }],
            "{t}"
        );
        // Something it made in its own /tmp and ran: no pin, no declared.
        o.executed.push(("/tmp/built".into(), None));
        let t = o.draft(&host()).text;
        assert!(!t.lines().any(|l| l.starts_with("exec")), "{t}");
        assert!(t.contains("#   /tmp/built"), "{t}");
    }

    #[test]
    fn a_directory_holding_secrets_is_not_collapsed_into_and_a_listed_one_is_flagged() {
        let mut o = observed();
        o.paths = (0..9)
            .map(|i| (PathBuf::from(format!("/home/u/.config/f{i}")), Use::Read))
            .chain([(PathBuf::from("/var/lib"), Use::List)])
            .collect();
        o.executed.clear();
        let mut files: Vec<(&'static str, bool)> = (0..9)
            .map(|i| &*Box::leak(format!("/home/u/.config/f{i}").into_boxed_str()))
            .map(|p| (p, false))
            .collect();
        files.extend([
            ("/home/u/.config/gcloud", true),
            ("/var/lib", true),
            ("/var/lib/spawnd", true),
        ]);
        let draft = o.draft(&Table(files));
        let t = &draft.text;
        assert!(!t.contains("\"~/.config\""), "{t}");
        assert!(t.contains("\"~/.config/f0\""), "{t}");
        assert!(
            t.contains("# REVIEW: /var/lib holds /var/lib/spawnd"),
            "{t}"
        );
    }

    /// A run that lists a directory and reads the secret inside it (`find
    /// DIR`, `cp -r DIR`): the secret is left out, so the draft must not
    /// grant it through the directory either. A review note alone leaves
    /// the secret granted in the manifest as written.
    #[test]
    fn a_secret_the_run_read_is_not_granted_through_the_directory_it_listed() {
        let mut o = observed();
        o.paths = vec![
            (PathBuf::from("/srv/h"), Use::List),
            (PathBuf::from("/srv/h/src/a"), Use::Read),
            (PathBuf::from("/srv/h/.ssh/id_ed25519"), Use::Read),
        ];
        o.executed.clear();
        let draft = o.draft(&Table(vec![
            ("/srv/h", true),
            ("/srv/h/src", true),
            ("/srv/h/src/a", false),
            ("/srv/h/.ssh", true),
            ("/srv/h/.ssh/id_ed25519", false),
        ]));
        let granted: Vec<&str> = draft
            .text
            .lines()
            .filter(|l| l.starts_with("fs_"))
            .collect();
        for line in &granted {
            assert!(
                !line.contains("\"/srv/h\"") && !line.contains("/srv/h/.ssh"),
                "{line} grants /srv/h/.ssh:\n{}",
                draft.text
            );
        }
    }

    #[test]
    fn placeholder_names_never_collide_and_reserved_characters_are_not_scopes() {
        let mut o = observed();
        o.argv = ["tar", "--y", "./a", "--y_6", "./b", "--y", "./c"]
            .map(String::from)
            .to_vec();
        o.paths = vec![(PathBuf::from("/w/proj/out[1]/f"), Use::Create)];
        o.executed.clear();
        let draft = o.draft(&Table(vec![]));
        crate::manifest::parse_manifest(
            "(draft)",
            &draft.text,
            crate::manifest::LoadOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", draft.text));
        assert!(draft
            .review
            .iter()
            .any(|r| r.contains("cannot be written as a scope")));
    }

    /// A table host from paths: those ending in `/` are directories.
    fn table(paths: &[&str]) -> Table {
        Table(
            paths
                .iter()
                .map(|p| {
                    let p: &'static str =
                        Box::leak(p.trim_end_matches('/').to_string().into_boxed_str());
                    (p, false)
                })
                .zip(paths.iter().map(|p| p.ends_with('/')))
                .map(|((p, _), dir)| (p, dir))
                .collect(),
        )
    }

    #[test]
    fn reads_inside_a_repository_collapse_to_its_root() {
        let mut o = observed();
        o.executed.clear();
        o.paths = [
            // git clone /srv/origin: a working tree outside the workspace.
            "/srv/origin/.git/HEAD",
            "/srv/origin/.git/config",
            "/srv/origin/.git/objects/ab/cdef",
            "/srv/origin/.git/refs/heads/main",
            // A bare repository.
            "/srv/bare.git/HEAD",
            "/srv/bare.git/packed-refs",
            // The workspace's own repository lies above it.
            "/w/.git/HEAD",
        ]
        .iter()
        .map(|p| (PathBuf::from(p), Use::Read))
        .chain([(PathBuf::from("/srv/origin/.git/objects"), Use::List)])
        .collect();
        o.workspace = "/w/proj".into();
        o.cwd = "/w/proj".into();
        let host = table(&[
            "/srv/origin/",
            "/srv/origin/.git/",
            "/srv/origin/.git/HEAD",
            "/srv/origin/.git/config",
            "/srv/origin/.git/objects/",
            "/srv/origin/.git/objects/ab/",
            "/srv/origin/.git/objects/ab/cdef",
            "/srv/origin/.git/refs/",
            "/srv/origin/.git/refs/heads/",
            "/srv/origin/.git/refs/heads/main",
            "/srv/bare.git/",
            "/srv/bare.git/HEAD",
            "/srv/bare.git/packed-refs",
            "/srv/bare.git/objects/",
            "/srv/bare.git/refs/",
            "/w/",
            "/w/.git/",
            "/w/.git/HEAD",
        ]);
        let t = o.draft(&host).text;
        assert!(
            t.contains(
                "fs_read = [\"/srv/bare.git\", \"/srv/origin\", \"/w/.git\", \"{workspace}\"]"
            ),
            "{t}"
        );
        assert!(
            t.contains("# /srv/origin is a repository, granted whole"),
            "{t}"
        );
        every_suggestion_parses(&t);
    }

    #[test]
    fn etc_is_granted_file_by_file_without_the_sandboxs_own_files_and_noise() {
        let mut o = observed();
        o.executed.clear();
        let mut read: Vec<&str> = vec![
            "/etc/passwd",
            "/etc/group",
            "/etc/hosts",
            "/etc/nsswitch.conf",
            "/etc/resolv.conf",
            "/etc/host.conf",
            "/etc/gai.conf",
            "/etc/ld.so.preload",
        ];
        let many: Vec<String> = (0..9).map(|i| format!("/etc/tool{i}.conf")).collect();
        read.extend(many.iter().map(String::as_str));
        o.paths = read
            .iter()
            .map(|p| (PathBuf::from(p), Use::Read))
            .chain([(PathBuf::from("/etc"), Use::List)])
            .collect();
        let mut on_host = read.clone();
        on_host.extend(["/etc/", "/etc/shadow"]);
        let t = o.draft(&table(&on_host)).text;
        let fs_read = t
            .lines()
            .find(|l| l.starts_with("fs_read = "))
            .unwrap_or_else(|| panic!("{t}"));
        assert!(!fs_read.contains("\"/etc\""), "{t}");
        assert!(fs_read.contains("\"/etc/tool0.conf\""), "{t}");
        for noise in &read[..8] {
            assert!(!fs_read.contains(&format!("\"{noise}\"")), "{noise}: {t}");
        }
        assert!(
            t.contains("# Under /etc only the files it read are granted"),
            "{t}"
        );
        every_suggestion_parses(&t);
    }

    #[test]
    fn a_path_read_through_a_link_is_granted_as_what_it_resolves_to() {
        let mut o = observed();
        o.executed.clear();
        o.system_paths = vec!["/usr".into()];
        o.paths = vec![
            ("/etc/os-release".into(), Use::Read),
            ("/etc/tool.conf".into(), Use::Read),
        ];
        let t = o
            .draft(&table(&[
                "/etc/os-release",
                "/etc/tool.conf",
                "/usr/lib/os-release",
            ]))
            .text;
        let fs_read = t
            .lines()
            .find(|l| l.starts_with("fs_read = "))
            .unwrap_or_else(|| panic!("{t}"));
        assert!(!fs_read.contains("os-release"), "{t}");
        assert!(fs_read.contains("\"/etc/tool.conf\""), "{t}");
        assert!(
            t.contains("#   /etc/os-release -> /usr/lib/os-release"),
            "{t}"
        );
        every_suggestion_parses(&t);
    }

    #[test]
    fn a_secret_read_by_root_is_offered_as_a_whole_valid_line() {
        let mut o = observed();
        o.executed.clear();
        o.home = Some("/root".into());
        o.workspace = "/root/proj".into();
        o.cwd = "/root/proj".into();
        o.writable = vec!["/root/proj".into()];
        o.paths = vec![
            ("/root/.bashrc".into(), Use::Read),
            ("/root/proj/out".into(), Use::Write),
        ];
        let t = o
            .draft(&table(&["/root/", "/root/.bashrc", "/root/proj/"]))
            .text;
        let suggestions = every_suggestion_parses(&t);
        assert_eq!(suggestions[0], "fs_read = [\"/root\"]", "{t}");
        assert!(!t.lines().any(|l| l.starts_with("fs_read")), "{t}");
        assert!(t.contains("\nfs_write = [\"{workspace}\"]\n"), "{t}");
    }

    #[test]
    fn host_paths_shown_under_tmp_are_granted_not_taken_for_the_sandboxs_own() {
        let mut o = observed();
        o.argv = vec!["tool".into(), "/tmp/src".into()];
        o.program = "/tmp/tc/bin/tool".into();
        o.visible = vec!["/tmp/src".into(), "/tmp/tc".into()];
        o.exec_dirs = vec!["/tmp/tc".into()];
        o.paths = vec![
            ("/tmp/src".into(), Use::List),
            ("/tmp/src/a/b.txt".into(), Use::Read),
            ("/tmp/tc/lib/x.so".into(), Use::Read),
            ("/tmp/own".into(), Use::Write),
        ];
        let pin = format!("sha256:{}", "2".repeat(64));
        o.executed = vec![
            ("/tmp/tc/bin/tool".into(), None),
            ("/tmp/tc/libexec/helper".into(), Some(pin.clone())),
        ];
        let draft = o.draft(&Table(vec![
            ("/tmp/src", true),
            ("/tmp/src/a/b.txt", false),
            ("/tmp/tc/lib/x.so", false),
            ("/tmp/tc/libexec/helper", false),
        ]));
        let t = &draft.text;
        crate::manifest::parse_manifest("(draft)", t, crate::manifest::LoadOptions::default())
            .unwrap_or_else(|e| panic!("{e}\n{t}"));
        assert!(
            t.contains("fs_read = [\"/tmp/src\", \"{workspace}\"]"),
            "{t}"
        );
        assert!(t.contains("fs_exec = [\"/tmp/tc\"]"), "{t}");
        assert!(
            t.contains(&format!(
                "path = \"/tmp/tc/libexec/helper\", hash = \"{pin}\""
            )),
            "{t}"
        );
        assert!(t.lines().any(|l| l == "exec = \"declared\""), "{t}");
        assert!(!t.contains("tmp_exec") && !t.contains("/tmp/own"), "{t}");
    }

    #[test]
    fn many_written_directories_collapse_and_shells_are_flagged() {
        let mut o = observed();
        o.program = "/bin/sh".into();
        o.paths = (0..5)
            .map(|i| (PathBuf::from(format!("/w/proj/b/d{i}/f")), Use::Create))
            .collect();
        let draft = o.draft(&Table(vec![]));
        assert!(
            draft.text.contains("fs_write = [\"{workspace}/b\"]"),
            "{}",
            draft.text
        );
        assert!(draft.review.iter().any(|r| r.contains("shell")));
    }
}
