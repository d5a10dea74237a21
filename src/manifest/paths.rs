//! Filesystem scopes as typed values: a `ScopePath` is absolute or anchored at
//! the calling user's home (`~/`), never relative, never with `..`, never with a
//! wildcard. Containment is decided by path components after `~` expansion and
//! lexical normalization, so `~/code/../.ssh` can never pass as inside `~/code/`
//! and `/var/spoolish` is not inside `/var/spool`.

use std::fmt;
use std::path::{Component, Path, PathBuf};

/// Characters that would make a scope a pattern rather than a path.
const WILDCARDS: &[char] = &['*', '?', '[', ']', '{', '}'];

/// Host paths whose subtree no manifest may make writable: the system runtime,
/// kernel interfaces and boot files. A `fs_write` scope equal to one of these,
/// inside one, or containing one (`/` contains them all) is refused at load.
pub const SYSTEM_PATHS: &[&str] = &[
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run",
    "/sbin", "/sys", "/usr", "/var/lib", "/var/log", "/var/run",
];

/// A declared path: absolute, or relative to the caller's home.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ScopePath {
    /// `/var/spool/jobs`.
    Absolute(PathBuf),
    /// `~/code` is `Home("code")`; `~` alone is `Home("")`.
    Home(PathBuf),
}

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

    /// The absolute path for a caller whose home directory is `home`.
    pub fn expand(&self, home: &Path) -> PathBuf {
        match self {
            ScopePath::Absolute(p) => p.clone(),
            ScopePath::Home(rest) if rest.as_os_str().is_empty() => home.to_path_buf(),
            ScopePath::Home(rest) => home.join(rest),
        }
    }

    /// True for an absolute scope that covers or lies inside a system path.
    pub fn touches_system_path(&self) -> Option<&'static str> {
        let ScopePath::Absolute(path) = self else {
            return None;
        };
        system_path_overlap(path)
    }

    /// True when this scope lies strictly inside `outer`, both written the
    /// same way (absolute, or `~/`); by components, never as strings.
    pub fn lies_inside(&self, outer: &ScopePath) -> bool {
        match (self, outer) {
            (ScopePath::Absolute(p), ScopePath::Absolute(o))
            | (ScopePath::Home(p), ScopePath::Home(o)) => p != o && p.starts_with(o),
            _ => false,
        }
    }

    /// The last component as declared (`/usr/bin/git` → `git`).
    pub fn file_name(&self) -> Option<&str> {
        match self {
            ScopePath::Absolute(p) | ScopePath::Home(p) => p.file_name()?.to_str(),
        }
    }
}

impl fmt::Display for ScopePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScopePath::Absolute(p) => write!(f, "{}", p.display()),
            ScopePath::Home(p) if p.as_os_str().is_empty() => f.write_str("~"),
            ScopePath::Home(p) => write!(f, "~/{}", p.display()),
        }
    }
}

/// The system path that `path` equals, lies inside or contains, if any.
pub fn system_path_overlap(path: &Path) -> Option<&'static str> {
    SYSTEM_PATHS
        .iter()
        .find(|sys| path.starts_with(sys) || Path::new(sys).starts_with(path))
        .copied()
}

/// Lexical normalization: drops `.` and repeated separators. Returns `None`
/// when a `..` component is present (refused, never resolved).
pub fn normalize(path: &Path) -> Option<PathBuf> {
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

/// True when `path` equals `scope` or lies below it, compared by components.
pub fn is_within(path: &Path, scope: &Path) -> bool {
    path.starts_with(scope)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn within(path: &str, scope: &str) -> bool {
        let home = Path::new("/home/alr");
        let p = ScopePath::parse(path).expect("path").expand(home);
        let s = ScopePath::parse(scope).expect("scope").expand(home);
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
        assert_eq!(ScopePath::parse("~").unwrap().expand(home), home);
        assert_eq!(
            ScopePath::parse("~/./code//x/").unwrap().expand(home),
            Path::new("/home/alr/code/x")
        );
        assert_eq!(ScopePath::parse("~/code/").unwrap().to_string(), "~/code");
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
