//! Paths that hold secrets (keys, tokens, password stores, histories): a
//! drafted manifest never grants them silently, and `--trace` never
//! suggests granting them. Pure: the host is asked only through the
//! `exists` a caller passes.

use std::path::{Path, PathBuf};

/// Names under a home (or any directory: another user's home, a home under
/// `/var/home`) that hold secrets.
pub(crate) const IN_HOME: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".pgpass",
    ".password-store",
    ".local/share/keyrings",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    ".config/gh",
    ".config/hub",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".vault-token",
    ".bash_history",
    ".zsh_history",
    ".python_history",
];

/// Paths outside homes that hold secrets.
pub(crate) const ABSOLUTE: &[&str] = &[
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/sudoers",
    "/etc/ssh",
    "/etc/ssl/private",
    "/etc/krb5.keytab",
    "/root",
    "/var/lib/spawnd",
];

/// The secret path `path` lies in (or is), if any: one of [`ABSOLUTE`], or
/// an [`IN_HOME`] name under any directory.
pub(crate) fn containing(path: &Path) -> Option<PathBuf> {
    if let Some(s) = ABSOLUTE
        .iter()
        .map(PathBuf::from)
        .find(|s| path.starts_with(s))
    {
        return Some(s);
    }
    let parts: Vec<_> = path.components().collect();
    IN_HOME.iter().find_map(|name| {
        let want: Vec<_> = Path::new(name).components().collect();
        (1..parts.len())
            .find(|&i| parts[i..].starts_with(&want))
            .map(|i| parts[..i + want.len()].iter().collect::<PathBuf>())
    })
}

/// A secret path that exists strictly inside `scope`, if any: one of
/// [`ABSOLUTE`], an [`IN_HOME`] name right under `scope` or under `home`,
/// or the rest of such a name under its first part (`~/.config` holds
/// `gcloud` of `.config/gcloud`).
pub(crate) fn inside(
    scope: &Path,
    home: Option<&Path>,
    exists: &dyn Fn(&Path) -> bool,
) -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = ABSOLUTE.iter().map(PathBuf::from).collect();
    for name in IN_HOME {
        candidates.push(scope.join(name));
        if let Some(home) = home {
            candidates.push(home.join(name));
        }
        if let Some((first, rest)) = name.split_once('/') {
            if scope.file_name().is_some_and(|n| n == first) {
                candidates.push(scope.join(rest));
            }
        }
    }
    candidates
        .into_iter()
        .find(|c| c != scope && c.starts_with(scope) && exists(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_found_in_any_home_and_inside_a_scope_that_holds_it() {
        assert_eq!(
            containing(Path::new("/var/home/u/.ssh/id_ed25519")),
            Some("/var/home/u/.ssh".into())
        );
        assert_eq!(
            containing(Path::new("/etc/shadow")),
            Some("/etc/shadow".into())
        );
        assert_eq!(containing(Path::new("/etc/passwd")), None);
        assert_eq!(containing(Path::new("/home/u/.config/tool")), None);
        let exists = |p: &Path| p == Path::new("/home/u/.config/gcloud");
        assert_eq!(
            inside(Path::new("/home/u/.config"), None, &exists),
            Some("/home/u/.config/gcloud".into())
        );
        assert_eq!(inside(Path::new("/home/u/.cache"), None, &exists), None);
    }
}
