//! Filesystem scopes as typed values: a `ScopePath` is absolute, anchored at
//! the calling user's home (`~/`), for scopes and the cwd at the workspace
//! (`{workspace}/`) that the invocation or the operator names (`spawnd run
//! --workspace`, `[sandbox] workspace`), never the caller, or, for programs,
//! `also_runs`, read and exec scopes and the cwd, at the connector's own
//! directory (`{connector}/`), the one holding its manifest file; never
//! relative, never with `..`, never with a wildcard. Containment is decided by path components after `~` expansion and
//! lexical normalization, so `~/code/../.ssh` can never pass as inside `~/code/`
//! and `/var/spoolish` is not inside `/var/spool`.

use std::fmt;
use std::path::{Component, Path, PathBuf};

/// Characters that would make a scope a pattern rather than a path.
const WILDCARDS: &[char] = &['*', '?', '[', ']', '{', '}'];

/// Host paths whose subtree no manifest may make writable: the system runtime,
/// kernel interfaces and boot files. A `fs_write` scope equal to one of these,
/// inside one, or containing one (`/` contains them all) is refused at load.
pub(crate) const SYSTEM_PATHS: &[&str] = &[
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run",
    "/sbin", "/sys", "/usr", "/var/lib", "/var/log", "/var/run",
];

/// A declared path: absolute, or relative to the caller's home, the
/// workspace or the connector's directory.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ScopePath {
    /// `/var/spool/jobs`.
    Absolute(PathBuf),
    /// `~/code` is `Home("code")`; `~` alone is `Home("")`.
    Home(PathBuf),
    /// `{workspace}/src` is `Workspace("src")`; `{workspace}` alone is
    /// `Workspace("")`. Only scopes and the cwd may be anchored so
    /// ([`ScopePath::parse_scope`]).
    Workspace(PathBuf),
    /// `{connector}/bin/tool` is `Connector("bin/tool")`; `{connector}`
    /// alone is `Connector("")`: the directory holding the manifest file.
    /// Programs, `also_runs`, scopes and the cwd may be anchored so
    /// ([`ScopePath::parse_program`], [`ScopePath::parse_scope`]); the
    /// manifest refuses it in `fs_write`.
    Connector(PathBuf),
}

/// What anchored paths expand against for one request: the caller's home,
/// the workspace its invocation or the operator named, if any, and the
/// directory of the manifest's file, if it was loaded from one.
#[derive(Debug, Clone, Copy)]
pub struct Anchors<'a> {
    /// The caller's home directory.
    pub home: &'a Path,
    /// The workspace, absolute, when one was named.
    pub workspace: Option<&'a Path>,
    /// The connector's directory (the one holding its manifest file),
    /// absolute, when the manifest was loaded from a file.
    pub connector: Option<&'a Path>,
}

/// The anchor a scope may start with.
pub(crate) const WORKSPACE_ANCHOR: &str = "{workspace}";

/// The anchor a program, `also_runs` entry, read or exec scope or cwd may
/// start with: the directory holding the manifest file.
pub(crate) const CONNECTOR_ANCHOR: &str = "{connector}";

/// Why a path string is not a valid scope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathProblem {
    /// Empty or blank.
    #[error("path is required (got an empty string)")]
    Empty,
    /// Relative, `~user/`, or a Windows path.
    #[error("must be absolute (`/…`) or start with `~/`")]
    NotAbsolute,
    /// Contains a `..` component.
    #[error("must not contain `..`")]
    DotDot,
    /// Contains a glob character.
    #[error("must not contain wildcards (`*`, `?`, `[`, `]`, `{{`, `}}`)")]
    Wildcard,
    /// Contains a NUL byte.
    #[error("must not contain a NUL byte")]
    Nul,
}

impl ScopePath {
    /// Parses a manifest path string.
    pub fn parse(text: &str) -> Result<ScopePath, PathProblem> {
        if text.trim().is_empty() {
            return Err(PathProblem::Empty);
        }
        if text.contains('\0') {
            return Err(PathProblem::Nul);
        }
        if text.contains(WILDCARDS) {
            return Err(PathProblem::Wildcard);
        }
        let (home, rest) = if text == "~" {
            (true, "")
        } else if let Some(rest) = text.strip_prefix("~/") {
            (true, rest)
        } else if text.starts_with('/') {
            (false, text)
        } else {
            return Err(PathProblem::NotAbsolute);
        };
        let normalized = normalize(Path::new(rest)).ok_or(PathProblem::DotDot)?;
        if home {
            let relative = normalized
                .strip_prefix("/")
                .unwrap_or(&normalized)
                .to_path_buf();
            Ok(ScopePath::Home(relative))
        } else {
            Ok(ScopePath::Absolute(normalized))
        }
    }

    /// Parses a scope or cwd: what [`ScopePath::parse`] takes, or a path
    /// anchored at the workspace (`{workspace}` or `{workspace}/…`) or at
    /// the connector's directory (`{connector}` or `{connector}/…`).
    pub fn parse_scope(text: &str) -> Result<ScopePath, PathProblem> {
        if let Some(rest) = anchored_rest(text, WORKSPACE_ANCHOR) {
            return relative_part(rest).map(ScopePath::Workspace);
        }
        ScopePath::parse_program(text)
    }

    /// Parses a program or `also_runs` path: what [`ScopePath::parse`]
    /// takes, or a path anchored at the connector's directory
    /// (`{connector}/bin/tool`), where the files it ships are.
    pub fn parse_program(text: &str) -> Result<ScopePath, PathProblem> {
        match anchored_rest(text, CONNECTOR_ANCHOR) {
            Some(rest) => relative_part(rest).map(ScopePath::Connector),
            None => ScopePath::parse(text),
        }
    }

    /// The absolute path for a request with these anchors; `None` for a
    /// workspace path when no workspace was named, and for a connector path
    /// when the manifest's directory is not known.
    pub fn expand(&self, at: &Anchors<'_>) -> Option<PathBuf> {
        let joined = |base: &Path, rest: &Path| {
            if rest.as_os_str().is_empty() {
                base.to_path_buf()
            } else {
                base.join(rest)
            }
        };
        match self {
            ScopePath::Absolute(p) => Some(p.clone()),
            ScopePath::Home(rest) => Some(joined(at.home, rest)),
            ScopePath::Workspace(rest) => at.workspace.map(|w| joined(w, rest)),
            ScopePath::Connector(rest) => at.connector.map(|c| joined(c, rest)),
        }
    }

    /// Whether it is anchored at the workspace.
    pub fn needs_workspace(&self) -> bool {
        matches!(self, ScopePath::Workspace(_))
    }

    /// Whether it is anchored at the connector's directory.
    pub fn needs_connector_dir(&self) -> bool {
        matches!(self, ScopePath::Connector(_))
    }

    /// True for an absolute scope that covers or lies inside a system path.
    pub fn touches_system_path(&self) -> Option<&'static str> {
        let ScopePath::Absolute(path) = self else {
            return None;
        };
        system_path_overlap(path)
    }

    /// True when this scope lies strictly inside `outer`, both written the
    /// same way (absolute, `~/`, `{workspace}/` or `{connector}/`); by
    /// components, never as strings.
    pub fn lies_inside(&self, outer: &ScopePath) -> bool {
        match (self, outer) {
            (ScopePath::Absolute(p), ScopePath::Absolute(o))
            | (ScopePath::Home(p), ScopePath::Home(o))
            | (ScopePath::Workspace(p), ScopePath::Workspace(o))
            | (ScopePath::Connector(p), ScopePath::Connector(o)) => p != o && p.starts_with(o),
            _ => false,
        }
    }

    /// The last component as declared (`/usr/bin/git` → `git`).
    pub fn file_name(&self) -> Option<&str> {
        match self {
            ScopePath::Absolute(p)
            | ScopePath::Home(p)
            | ScopePath::Workspace(p)
            | ScopePath::Connector(p) => p.file_name()?.to_str(),
        }
    }
}

impl fmt::Display for ScopePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScopePath::Absolute(p) => write!(f, "{}", p.display()),
            ScopePath::Home(p) if p.as_os_str().is_empty() => f.write_str("~"),
            ScopePath::Home(p) => write!(f, "~/{}", p.display()),
            ScopePath::Workspace(p) if p.as_os_str().is_empty() => f.write_str(WORKSPACE_ANCHOR),
            ScopePath::Workspace(p) => write!(f, "{WORKSPACE_ANCHOR}/{}", p.display()),
            ScopePath::Connector(p) if p.as_os_str().is_empty() => f.write_str(CONNECTOR_ANCHOR),
            ScopePath::Connector(p) => write!(f, "{CONNECTOR_ANCHOR}/{}", p.display()),
        }
    }
}

/// What follows `anchor` in `text` when `text` is the anchor alone or the
/// anchor and `/…`; `None` otherwise (`{connector}x` is no anchor).
fn anchored_rest<'t>(text: &'t str, anchor: &str) -> Option<&'t str> {
    match text.strip_prefix(anchor) {
        Some("") => Some(""),
        Some(rest) if rest.starts_with('/') => Some(rest),
        _ => None,
    }
}

/// The part after an anchor, checked and normalized, relative.
fn relative_part(rest: &str) -> Result<PathBuf, PathProblem> {
    if rest.contains('\0') {
        return Err(PathProblem::Nul);
    }
    if rest.contains(WILDCARDS) {
        return Err(PathProblem::Wildcard);
    }
    let normalized = normalize(Path::new(rest)).ok_or(PathProblem::DotDot)?;
    Ok(normalized
        .strip_prefix("/")
        .unwrap_or(&normalized)
        .to_path_buf())
}

/// The system path that `path` equals, lies inside or contains, if any.
pub(crate) fn system_path_overlap(path: &Path) -> Option<&'static str> {
    SYSTEM_PATHS
        .iter()
        .find(|sys| path.starts_with(sys) || Path::new(sys).starts_with(path))
        .copied()
}

/// Lexical normalization: drops `.` and repeated separators. Returns `None`
/// when a `..` component is present (refused, never resolved).
pub(crate) fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::Normal(part) => out.push(part),
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Whether an absolute path has no `.` or `..` component: the form a
/// workspace must be named in, so that what scopes expand to is what they
/// say.
pub(crate) fn paths_plain(path: &Path) -> bool {
    path.components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

/// True when `path` equals `scope` or lies below it, compared by components.
pub(crate) fn is_within(path: &Path, scope: &Path) -> bool {
    path.starts_with(scope)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn within(path: &str, scope: &str) -> bool {
        let at = Anchors {
            home: Path::new("/home/alr"),
            workspace: None,
            connector: None,
        };
        let p = ScopePath::parse(path).expect("path").expand(&at).unwrap();
        let s = ScopePath::parse(scope).expect("scope").expand(&at).unwrap();
        is_within(&p, &s)
    }

    /// ADR reference vectors C1–C7: same answers, decided by components.
    #[test]
    fn containment_matches_reference_vectors_c1_to_c7() {
        let cases = [
            ("~/code/aileron", "~/code/", true),
            ("~/code/aileron", "~/code", true),
            ("~/code", "~/code/", true),
            ("~/other", "~/code/", false),
            ("/var/spool/jobs", "/var/spool", true),
            ("/var", "/var/spool", false),
            ("~/code/", "~/code/", true),
        ];
        for (path, scope, expected) in cases {
            assert_eq!(within(path, scope), expected, "{path} within {scope}");
        }
    }

    #[test]
    fn a_string_prefix_is_not_containment() {
        assert!(!within("/var/spoolish", "/var/spool"));
        assert!(!within("~/codex", "~/code"));
    }

    #[test]
    fn dot_dot_is_refused_not_resolved() {
        assert_eq!(ScopePath::parse("~/code/../.ssh"), Err(PathProblem::DotDot));
        assert_eq!(ScopePath::parse("/usr/../etc"), Err(PathProblem::DotDot));
    }

    /// Reference vectors I37/I38 (isAbsoluteOrTilde).
    #[test]
    fn absolute_or_tilde_matches_reference_vectors_i37_i38() {
        for ok in ["/usr/bin/git", "/", "~", "~/code", "~/code/"] {
            assert!(ScopePath::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "git",
            "./bin/git",
            "../bin/git",
            "C:\\Program Files\\git",
            "~user/code",
        ] {
            assert!(ScopePath::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wildcards_and_nul_are_refused() {
        assert_eq!(ScopePath::parse("/tmp/*"), Err(PathProblem::Wildcard));
        assert_eq!(ScopePath::parse("/tmp/a\0b"), Err(PathProblem::Nul));
    }

    #[test]
    fn tilde_expands_to_the_given_home_and_dots_are_dropped() {
        let home = Path::new("/home/alr");
        let at = Anchors {
            home,
            workspace: None,
            connector: None,
        };
        assert_eq!(ScopePath::parse("~").unwrap().expand(&at).unwrap(), home);
        assert_eq!(
            ScopePath::parse("~/./code//x/")
                .unwrap()
                .expand(&at)
                .unwrap(),
            Path::new("/home/alr/code/x")
        );
        assert_eq!(ScopePath::parse("~/code/").unwrap().to_string(), "~/code");
    }

    #[test]
    fn a_workspace_scope_expands_only_against_a_named_workspace() {
        let parsed = |t: &str| ScopePath::parse_scope(t);
        assert_eq!(
            parsed("{workspace}"),
            Ok(ScopePath::Workspace(PathBuf::new()))
        );
        assert_eq!(
            parsed("{workspace}/./build//out/"),
            Ok(ScopePath::Workspace(PathBuf::from("build/out")))
        );
        assert_eq!(parsed("{workspace}/../x"), Err(PathProblem::DotDot));
        assert_eq!(parsed("{workspace}/a*"), Err(PathProblem::Wildcard));
        // Only the exact anchor: anything else with braces is a pattern.
        assert_eq!(parsed("{workspace}x"), Err(PathProblem::Wildcard));
        assert_eq!(parsed("{home}/x"), Err(PathProblem::Wildcard));
        assert_eq!(
            ScopePath::parse("{workspace}/x"),
            Err(PathProblem::Wildcard)
        );
        let scope = parsed("{workspace}/build").unwrap();
        assert_eq!(scope.to_string(), "{workspace}/build");
        let home = Path::new("/home/alr");
        let unset = Anchors {
            home,
            workspace: None,
            connector: None,
        };
        assert_eq!(scope.expand(&unset), None);
        let set = Anchors {
            home,
            workspace: Some(Path::new("/ci/checkout")),
            connector: None,
        };
        assert_eq!(
            scope.expand(&set),
            Some(PathBuf::from("/ci/checkout/build"))
        );
        assert_eq!(
            parsed("{workspace}").unwrap().expand(&set),
            Some(PathBuf::from("/ci/checkout"))
        );
    }

    #[test]
    fn a_connector_path_expands_only_against_a_known_connector_directory() {
        assert_eq!(
            ScopePath::parse_program("{connector}"),
            Ok(ScopePath::Connector(PathBuf::new()))
        );
        let tool = ScopePath::parse_program("{connector}/./bin//tool").unwrap();
        assert_eq!(tool, ScopePath::Connector(PathBuf::from("bin/tool")));
        assert_eq!(tool.to_string(), "{connector}/bin/tool");
        assert_eq!(tool.file_name(), Some("tool"));
        assert!(tool.needs_connector_dir() && !tool.needs_workspace());
        assert_eq!(
            ScopePath::parse_scope("{connector}/bin"),
            Ok(ScopePath::Connector(PathBuf::from("bin")))
        );
        assert_eq!(
            ScopePath::parse_program("{connector}/../etc/passwd"),
            Err(PathProblem::DotDot)
        );
        assert_eq!(
            ScopePath::parse_program("{connector}/bin/*"),
            Err(PathProblem::Wildcard)
        );
        assert_eq!(
            ScopePath::parse_program("{connector}bin/tool"),
            Err(PathProblem::Wildcard)
        );
        assert_eq!(
            ScopePath::parse_program("{connector}/a\0b"),
            Err(PathProblem::Nul)
        );
        // Programs are never anchored at the workspace, and a plain path
        // takes no anchor at all.
        assert_eq!(
            ScopePath::parse_program("{workspace}/bin/tool"),
            Err(PathProblem::Wildcard)
        );
        assert_eq!(
            ScopePath::parse("{connector}/bin/tool"),
            Err(PathProblem::Wildcard)
        );
        assert_eq!(
            ScopePath::parse_program("/usr/bin/git"),
            Ok(ScopePath::Absolute(PathBuf::from("/usr/bin/git")))
        );
        let home = Path::new("/home/alr");
        let unknown = Anchors {
            home,
            workspace: Some(Path::new("/ci/checkout")),
            connector: None,
        };
        assert_eq!(tool.expand(&unknown), None);
        let known = Anchors {
            home,
            workspace: None,
            connector: Some(Path::new("/var/lib/spawnd/connectors/sha256-ab")),
        };
        assert_eq!(
            tool.expand(&known),
            Some(PathBuf::from(
                "/var/lib/spawnd/connectors/sha256-ab/bin/tool"
            ))
        );
        assert_eq!(
            ScopePath::parse_scope("{connector}")
                .unwrap()
                .expand(&known),
            Some(PathBuf::from("/var/lib/spawnd/connectors/sha256-ab"))
        );
        let bin = ScopePath::parse_scope("{connector}/bin").unwrap();
        assert!(tool.lies_inside(&bin));
        assert!(!tool.lies_inside(&ScopePath::parse_scope("{workspace}/bin").unwrap()));
    }

    #[test]
    fn system_paths_are_detected_both_ways() {
        let check = |p: &str| ScopePath::parse(p).unwrap().touches_system_path();
        assert_eq!(check("/"), Some("/bin"));
        assert_eq!(check("/usr/local/share"), Some("/usr"));
        assert_eq!(check("/var"), Some("/var/lib"));
        assert_eq!(check("/var/spool/x"), None);
        assert_eq!(check("/tmp/aileron"), None);
        assert_eq!(check("~/x"), None);
    }
}
