//! What the draft grants: the paths the run used, collapsed into read,
//! write and exec scopes; what may hold secrets or was refused, left out
//! for review.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::{Host, Observed, COLLAPSE_AT, ETC, NOISE, PROVIDED, RUNTIME_FILES};
use crate::sandbox::trace::Use;

/// Every scope the draft writes, and what it leaves out.
pub(super) struct Scopes {
    /// `fs_read`.
    pub(super) read: BTreeSet<PathBuf>,
    /// `fs_write`.
    pub(super) write: BTreeSet<PathBuf>,
    /// `fs_exec`.
    pub(super) exec: BTreeSet<PathBuf>,
    /// Among the read scopes, repositories granted whole.
    pub(super) repositories: BTreeSet<PathBuf>,
    /// Paths read through a link, and what each resolves to.
    pub(super) links: BTreeMap<PathBuf, PathBuf>,
    /// Left out: sensitive paths read, and how.
    pub(super) read_sensitive: Vec<(PathBuf, String)>,
    /// Left out: sensitive paths written, and how.
    pub(super) write_sensitive: Vec<(PathBuf, String)>,
    /// Left out: directories it tried to write outside the writable ones.
    pub(super) attempted: BTreeSet<PathBuf>,
}

impl Observed {
    /// The scopes of the run: what it wrote where learning let it, what it
    /// read (the working directory among it), what it executed outside the
    /// system paths, and the paths shown to it that it used.
    pub(super) fn scopes(&self, host: &dyn Host) -> Scopes {
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
        Scopes {
            read,
            write,
            exec,
            repositories,
            links,
            read_sensitive,
            write_sensitive,
            attempted,
        }
    }

    /// A top-level directory, a home, or the workspace's parent or above.
    pub(super) fn is_broad(&self, p: &Path) -> bool {
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
    pub(super) fn holds_sensitive(&self, scope: &Path, host: &dyn Host) -> Option<PathBuf> {
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
