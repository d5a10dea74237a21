//! The draft's text, section by section: each writes its TOML and the
//! points it marks for review.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::argv::template;
use super::scopes::Scopes;
use super::toml_text::{escape, join_quoted, quote, shown};
use super::{Draft, Host, Observed, ETC, MAX_LINKS_SHOWN, SHELLS};

/// The draft as it is written: its text and the points to review.
#[derive(Default)]
pub(super) struct Out {
    text: String,
    review: Vec<String>,
}

impl Out {
    /// The draft, the points to review listed at its head.
    pub(super) fn finish(mut self) -> Draft {
        if !self.review.is_empty() {
            let mut head = String::from("# REVIEW before use:\n");
            for r in &self.review {
                let _ = writeln!(head, "#   - {r}");
            }
            self.text = head + &self.text;
        }
        Draft {
            text: self.text,
            review: self.review,
        }
    }
}

/// A path the draft leaves out of a key but offers, commented.
struct Withheld {
    path: PathBuf,
    /// Why it is left out, for the comment.
    why: String,
}

impl Observed {
    /// How the draft was made, how to run it, the connector's name.
    pub(super) fn write_header(&self, out: &mut Out, scopes: &Scopes) {
        let _ = writeln!(
            out.text,
            "# Drafted by `spawnd learn` from one observed run ({} ms, {}).",
            self.duration_ms,
            match self.exit_code {
                Some(0) => "exit 0".to_string(),
                Some(c) => format!("exit {c}: the run failed, so this draft may lack what the rest of the work needs"),
                None => "killed by a signal: this draft may lack what the rest of the work needs".to_string(),
            }
        );
        let _ = writeln!(
            out.text,
            "# Review it before use: lines marked REVIEW need a decision."
        );
        let _ = writeln!(
            out.text,
            "# Run it: spawnd run --manifest THIS --op {} --workspace {} --mode {}",
            self.op,
            shown(&self.workspace),
            if scopes.write.is_empty() {
                "readonly"
            } else {
                "write"
            }
        );
        let _ = writeln!(
            out.text,
            "\n[connector]\nname = {}\nversion = \"0.1.0\"\n",
            quote(&self.name)
        );
        let _ = writeln!(out.text, "[capabilities.spawn]");
        let _ = writeln!(
            out.text,
            "programs = [{{ path = {}, hash = {} }}]",
            quote(&self.program.display().to_string()),
            quote(&self.program_hash)
        );
    }

    /// The program pinned, what else it ran, and a shell marked.
    pub(super) fn write_programs(&self, out: &mut Out, host: &dyn Host) {
        let others: Vec<&(PathBuf, Option<String>)> = self
            .executed
            .iter()
            .filter(|(p, _)| p != &self.program)
            .collect();
        self.write_exec(out, &others, host);
        let shell = std::iter::once(&self.program)
            .chain(others.iter().map(|(p, _)| p))
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| SHELLS.contains(&n))
            });
        if let Some(shell) = shell {
            out.review.push(format!(
                "it runs the shell {}: a shell runs any program the system paths hold, unpinned",
                shown(shell)
            ));
        }
    }

    /// Why some scopes are as they are: repositories whole, links
    /// resolved, `/etc` file by file.
    pub(super) fn write_notes(&self, out: &mut Out, scopes: &Scopes) {
        for repository in &scopes.repositories {
            let _ = writeln!(
            out.text,
                "# {} is a repository, granted whole: git (or hg) finds all of it, and the\n# directory whose owner git checks (safe.directory) is the real one",
                shown(repository)
            );
        }
        if !scopes.links.is_empty() {
            let _ = writeln!(
            out.text,
                "# Read through a link, which a scope cannot be (nor the sandbox show): what it\n# resolves to is granted unless the sandbox has it; the program finds it by that path:"
            );
            for (named, real) in scopes.links.iter().take(MAX_LINKS_SHOWN) {
                let _ = writeln!(out.text, "#   {} -> {}", shown(named), shown(real));
            }
            if scopes.links.len() > MAX_LINKS_SHOWN {
                let _ = writeln!(
                    out.text,
                    "#   and {} more",
                    scopes.links.len() - MAX_LINKS_SHOWN
                );
            }
        }
        if scopes.read.iter().any(|p| p.starts_with(ETC)) {
            let _ = writeln!(
            out.text,
                "# Under /etc only the files it read are granted (the sandbox writes its own passwd,\n# group, hosts and nsswitch.conf); to widen, list more files or a directory under\n# /etc, never /etc itself: it holds the host's accounts and secrets (/etc/shadow)"
            );
        }
    }

    /// `fs_read`, `fs_write`, `fs_exec`, each with what it leaves out, and
    /// what the sandbox refused while learning.
    pub(super) fn write_scopes_lists(&self, out: &mut Out, scopes: &Scopes, host: &dyn Host) {
        let (read_withheld, write_withheld) = Self::withheld(out, scopes);
        self.write_list(out, "fs_read", &scopes.read, &read_withheld, host);
        self.write_list(out, "fs_write", &scopes.write, &write_withheld, host);
        for dir in scopes.exec.intersection(&scopes.write) {
            let _ = writeln!(
                out.text,
                "# REVIEW: {} is both written and executed: a program may run what it wrote there",
                shown(dir)
            );
            out.review.push(format!(
                "{} is writable and executable: a program may run what it wrote there",
                shown(dir)
            ));
        }
        self.write_list(out, "fs_exec", &scopes.exec, &[], host);
        if !self.refused.is_empty() {
            let _ = writeln!(out.text, "# While learning, the sandbox refused:");
            for r in &self.refused {
                let _ = writeln!(out.text, "#   {}", escape(r));
            }
        }
    }

    /// What is left out but may be wanted (`fs_read`'s, `fs_write`'s):
    /// each offered as a whole alternative line of its key, valid TOML once
    /// uncommented in place of the key's.
    fn withheld(out: &mut Out, scopes: &Scopes) -> (Vec<Withheld>, Vec<Withheld>) {
        let mut sensitive = |used: &[(PathBuf, String)]| -> Vec<Withheld> {
            used.iter()
                .map(|(path, uses)| {
                    out.review.push(format!(
                        "{} may hold secrets: left out (commented in the draft)",
                        shown(path)
                    ));
                    Withheld {
                        path: path.clone(),
                        why: format!("it used {} ({uses}), which may hold secrets", shown(path)),
                    }
                })
                .collect()
        };
        let read_withheld = sensitive(&scopes.read_sensitive);
        let mut write_withheld = sensitive(&scopes.write_sensitive);
        for dir in &scopes.attempted {
            write_withheld.push(Withheld {
                path: dir.clone(),
                why: format!(
                    "it tried to write in {}, where learning let it not (refused then)",
                    shown(dir)
                ),
            });
            out.review.push(format!(
                "it tried to write in {} (refused while learning): not granted",
                shown(dir)
            ));
        }
        (read_withheld, write_withheld)
    }

    /// `cwd`, `env_passthrough`, and keys that look like credentials.
    pub(super) fn write_env(&self, out: &mut Out) {
        let cwd = self.scope_text(&self.cwd);
        let _ = writeln!(out.text, "cwd = {}", quote(&cwd));
        if !self.env_keys.is_empty() {
            let _ = writeln!(
                out.text,
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
            out.text,
                    "# REVIEW: these look like credentials: have the operator bind them ([[credentials]]) rather than the caller pass them:\n# credential_env_keys = [{}]",
                    join_quoted(credentials.iter().copied())
                );
                out.review.push(format!(
                    "{} look like credentials: bind them in the operator config (credential_env_keys)",
                    credentials.join(", ")
                ));
            }
        }
    }

    /// `network`: every destination it connected to.
    pub(super) fn write_network(&self, out: &mut Out) {
        if !self.network.is_empty() {
            let _ = writeln!(
                out.text,
                "# REVIEW: every destination it connected to while learning\nnetwork = [{}]",
                join_quoted(self.network.iter().map(String::as_str))
            );
            out.review.push(format!(
                "network: {} (every destination it connected to)",
                escape(&self.network.join(", "))
            ));
        }
    }

    /// The wall-time limit, and `tmp_exec` when it ran what it made in `/tmp`.
    pub(super) fn write_limits(&self, out: &mut Out) {
        let wall = (self.duration_ms.saturating_mul(4)).clamp(30_000, 3_600_000);
        let _ = writeln!(
            out.text,
            "\n[capabilities.spawn.limits]\nwall_time_ms = {wall}"
        );
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
                out.text,
                "# REVIEW: it ran a program it made in /tmp\ntmp_exec = true"
            );
            out.review
                .push("tmp_exec = true: it ran a program it made in /tmp".to_string());
        }
    }

    /// The operation: the argv template and its placeholders.
    pub(super) fn write_operation(&self, out: &mut Out, scopes: &Scopes, host: &dyn Host) {
        let (argv, params) = template(&self.argv, &self.cwd, host);
        let _ = writeln!(
            out.text,
            "\n[capabilities.spawn.operations.{}]\nargv = [{}]\nmode = \"{}\"\ndescription = {}",
            self.op,
            join_quoted(argv.iter().map(String::as_str)),
            if scopes.write.is_empty() {
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
                out.text,
                "\n[capabilities.spawn.operations.{}.params.{}]",
                self.op, p.name
            );
            let _ = writeln!(out.text, "default = {}", quote(&p.default));
            if p.path {
                let _ = writeln!(out.text, "kind = \"path\"");
            }
            if p.default.starts_with('-') {
                let _ = writeln!(
            out.text,
                    "# REVIEW: a caller may start this value with `-` (an option of its own)\nallow_dash = true"
                );
                out.review.push(format!(
                    "placeholder {} may start with `-`: a caller can pass options through it",
                    p.name
                ));
            }
            if let Some(option) = &p.option {
                let _ = writeln!(
            out.text,
                    "# REVIEW: the value of {}, chosen by the caller: pin it (values = [...]) or bound it (pattern) if that option can name a command or a file to run",
                    escape(option)
                );
                out.review.push(format!(
                    "placeholder {} is the value of {}: a caller chooses it; pin or bound it",
                    p.name,
                    escape(option)
                ));
            }
            let _ = writeln!(
                out.text,
                "description = \"observed: {}\"",
                escape(&p.default)
            );
        }
    }

    /// `also_runs`, every other program it ran pinned as it was then, and
    /// `exec = "declared"` when that list is whole: when something ran
    /// from where the run could write (the workspace, `--write`, its own
    /// `/tmp`), or could not be read, no pin would hold for the next run
    /// (a build makes its programs anew), so the draft keeps the default
    /// and says why. A draft that reruns as learned comes first.
    fn write_exec(&self, out: &mut Out, others: &[&(PathBuf, Option<String>)], host: &dyn Host) {
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
            out.text,
                "# Only the programs declared here may be executed (exec = \"declared\"): the\n# program above, each it ran (also_runs, pinned), and their interpreters and loaders."
            );
            let _ = writeln!(out.text, "exec = \"declared\"");
        } else {
            let _ = writeln!(
            out.text,
                "# REVIEW: it ran programs no pin can hold (made or changed where it writes, or unreadable):"
            );
            for p in &unpinned {
                let _ = writeln!(out.text, "#   {}", shown(p));
            }
            let _ = writeln!(
            out.text,
                "# so what runs is left to the system paths and fs_exec scopes. To allow only the\n# programs declared here, once none of those is needed:\n# exec = \"declared\""
            );
            out.review.push(format!(
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
                out.text,
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
        out: &mut Out,
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
            out.text,
                "# REVIEW: {} holds a character scopes reserve ({{ }} [ ] * ?); grant a directory above it",
                shown(p)
            );
            out.review.push(format!(
                "{key} {} cannot be written as a scope: left out",
                shown(p)
            ));
        }
        for p in &scopes {
            if self.is_broad(p) {
                let _ = writeln!(out.text, "# REVIEW: {} is broad", shown(p));
                out.review
                    .push(format!("{key} {} is broad: narrow it if you can", shown(p)));
            }
            if let Some(secret) = self.holds_sensitive(p, host) {
                let _ = writeln!(
                    out.text,
                    "# REVIEW: {} holds {}, which may hold secrets",
                    shown(p),
                    shown(&secret)
                );
                out.review.push(format!(
                    "{key} {} holds {}, which may hold secrets: narrow it",
                    shown(p),
                    shown(&secret)
                ));
            }
            if key != "fs_read" && !host.exists(p) {
                let _ = writeln!(
                    out.text,
                    "# {} does not exist now; spawnd creates it",
                    shown(p)
                );
            }
        }
        for w in withheld.iter().filter(|w| Self::writable_as_scope(&w.path)) {
            let mut with = scopes.clone();
            with.insert(w.path.clone());
            let _ = writeln!(
                out.text,
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
            let _ = writeln!(out.text, "{}", self.list_line(key, &scopes));
        }
    }
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
