//! The draft manifest `spawnd learn` writes from what it observed: the
//! program pinned, the observed argv as an operation whose inputs are
//! placeholders defaulting to the observed values, the paths read, written
//! and executed collapsed into scopes, the env keys passed and the network
//! destinations dialed. What needs a person's judgement is marked: paths
//! that hold secrets stay commented out, broad scopes and shells are
//! flagged. Pure: the host is asked only through [`Host`]. It reads as its
//! steps: [`Observed::scopes`] decides what is granted, the `sections`
//! write it as TOML, each with what it marks for review.

mod argv;
mod scopes;
mod sections;
mod toml_text;

use std::path::{Path, PathBuf};

use crate::sandbox::trace::Use;

/// What the host answers about its paths (the real filesystem in `learn`,
/// a table in tests).
pub(crate) trait Host {
    /// Whether something is at `path`.
    fn exists(&self, path: &Path) -> bool;
    /// Whether `path` is a directory.
    fn is_dir(&self, path: &Path) -> bool;
    /// `path` with every link on the way resolved, if it resolves.
    fn real_path(&self, path: &Path) -> Option<PathBuf>;
}

/// What one observed run showed.
pub(crate) struct Observed {
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
pub(crate) struct Draft {
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
    pub(crate) fn draft(&self, host: &dyn Host) -> Draft {
        let scopes = self.scopes(host);
        let mut out = sections::Out::default();
        self.write_header(&mut out, &scopes);
        self.write_programs(&mut out, host);
        self.write_notes(&mut out, &scopes);
        self.write_scopes_lists(&mut out, &scopes, host);
        self.write_env(&mut out);
        self.write_network(&mut out);
        self.write_limits(&mut out);
        self.write_operation(&mut out, &scopes, host);
        out.finish()
    }
}

#[cfg(test)]
mod tests;
