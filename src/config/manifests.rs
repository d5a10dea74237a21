//! The manifests `spawnd serve` serves and `spawnd connectors` shows: those
//! `[server] manifests` names (files, or directories of `*.toml`), and every
//! connector installed in the store (`[connectors] store`, checked by
//! [`crate::provenance::serve`]).
//! Each is checked for who can change it: the file and the directory
//! holding it. A file is opened once, without following a
//! symbolic link, checked through that descriptor and read through it, so
//! the bytes parsed are the bytes of the file that was checked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::manifest::{parse_manifest, LoadOptions, Manifest};

/// The manifests the daemon serves, by connector name: each version served
/// (one per manifest file, one per installed version), in load order.
pub(crate) type Manifests = BTreeMap<String, Vec<std::sync::Arc<Manifest>>>;

/// Every manifest served, in name order.
pub(crate) fn all(manifests: &Manifests) -> impl Iterator<Item = &Manifest> {
    manifests.values().flatten().map(|m| &**m)
}

/// Loads `[server] manifests` (files, or directories of `*.toml`), then the
/// connectors installed in the store. A file writable by group or others,
/// or owned by neither root nor spawnd's user, is refused, and so is a
/// second manifest with an FQN already loaded from a file, or a version
/// already served (the error names both). A `[server] manifests` entry that
/// does not exist is an error, except the default directory on a host
/// whose store serves connectors.
pub(crate) fn load_manifests(config: &super::Config) -> Result<Manifests, String> {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut missing_default = None;
    for entry in &config.server.manifests {
        // Not followed: a link that leads nowhere is read_checked's to name.
        if let Err(e) = std::fs::symlink_metadata(entry) {
            if e.kind() == std::io::ErrorKind::NotFound {
                let error = missing_entry(entry, config.source.as_deref());
                if config.server.manifests == [PathBuf::from(super::DEFAULT_MANIFESTS)] {
                    missing_default = Some(error);
                    continue;
                }
                return Err(error);
            }
        }
        if entry.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(entry)
                .map_err(|e| format!("{}: {e}", entry.display()))?
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "toml"))
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(entry.clone());
        }
    }
    let me = nix::unistd::geteuid().as_raw();
    let mut out = Manifests::new();
    let options = LoadOptions {
        max_wall_time_ms: config.sandbox.max_wall_time_ms,
    };
    for file in files {
        let text = read_checked(&file, me)?;
        let mut manifest = parse_manifest(&file.display().to_string(), &text, options)
            .map_err(|e| e.to_string())?;
        // `{connector}` paths expand at the file's own directory, resolved,
        // whatever form [server] manifests gives it in.
        manifest.dir = file
            .parent()
            .map(|d| {
                if d.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    d
                }
            })
            .and_then(|d| d.canonicalize().ok());
        // A manifest stating provenance_hash ships what lies beside it:
        // checked now and before every spawn.
        if manifest.connector.provenance_hash.is_some() {
            let verified =
                crate::provenance::serve::verified_file(&file, text.as_bytes(), &manifest)?;
            manifest.dir = Some(verified.dir.clone());
            manifest.verified = Some(std::sync::Arc::new(verified));
        }
        let name = manifest.connector.name.to_string();
        if let Some(first) = out.get(&name).and_then(|v| v.first()) {
            return Err(format!(
                "connector {name} is named by two manifests, {} and {}; keep one of them in [server] manifests",
                first.source,
                file.display()
            ));
        }
        out.insert(name, vec![std::sync::Arc::new(manifest)]);
    }
    let installed = installed(config, options)?;
    if let Some(error) = missing_default.filter(|_| installed.is_empty()) {
        return Err(error);
    }
    for manifest in installed {
        let name = manifest.connector.name.to_string();
        let versions = out.entry(name.clone()).or_default();
        if let Some(first) = versions.iter().find(|m| {
            crate::manifest::same_release(&m.connector.version, &manifest.connector.version)
        }) {
            return Err(format!(
                "connector {name}@{} is served twice, from {} and {}; remove one of them",
                manifest.connector.version, first.source, manifest.source
            ));
        }
        versions.push(std::sync::Arc::new(manifest));
    }
    Ok(out)
}

/// The connectors installed in the store, checked (none when the config
/// names no store or it does not exist yet).
fn installed(config: &super::Config, options: LoadOptions) -> Result<Vec<Manifest>, String> {
    let (Some(store), Some(keyring)) = (&config.connectors.store, &config.connectors.keyring)
    else {
        return Ok(Vec::new());
    };
    crate::provenance::serve::installed_manifests(
        &crate::provenance::Store::at(store),
        &crate::provenance::Keyring::at(keyring),
        options,
    )
}

/// What a reload changes: connectors by name, each list sorted.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ManifestChanges {
    /// Served now, not before.
    pub added: Vec<String>,
    /// Served before, not now.
    pub removed: Vec<String>,
    /// Served before and now, from other bytes or another file.
    pub changed: Vec<String>,
}

impl ManifestChanges {
    /// The connectors that differ between `old` and `new`: a connector is
    /// changed when a version is served or no longer served, or a served
    /// manifest's SHA-256 or path differs.
    pub(crate) fn between(old: &Manifests, new: &Manifests) -> ManifestChanges {
        let mut changes = ManifestChanges::default();
        let served = |ms: &Vec<std::sync::Arc<Manifest>>| {
            let mut v: Vec<_> = ms
                .iter()
                .map(|m| {
                    (
                        m.connector.version.to_string(),
                        m.digest.to_string(),
                        m.source.clone(),
                    )
                })
                .collect();
            v.sort();
            v
        };
        for (name, ms) in new {
            match old.get(name) {
                None => changes.added.push(name.clone()),
                Some(was) if served(was) != served(ms) => changes.changed.push(name.clone()),
                Some(_) => {}
            }
        }
        changes.removed = old
            .keys()
            .filter(|name| !new.contains_key(*name))
            .cloned()
            .collect();
        changes
    }

    /// Whether the connectors served are the same as before.
    pub(crate) fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// What to do when a `[server] manifests` entry does not exist (the
/// default, `/etc/spawnd/manifests`, on a host nobody set up yet).
fn missing_entry(entry: &Path, config: Option<&Path>) -> String {
    let config = match config {
        Some(path) => format!("in {}", path.display()),
        None => "in a config file (--config or $SPAWND_CONFIG)".to_string(),
    };
    format!(
        "{} does not exist; create it (a directory of *.toml manifests, or a manifest file), or set [server] manifests {config} to the files or directories that hold your manifests",
        entry.display()
    )
}

/// The text of a manifest file whose file and directory only root or
/// spawnd's user can change.
fn read_checked(file: &Path, me: u32) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let shown = file.display();
    let mut opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(file)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => format!(
                "{shown} is a symbolic link; list the file it points to in [server] manifests"
            ),
            _ => format!("{shown}: {e}"),
        })?;
    let meta = opened.metadata().map_err(|e| format!("{shown}: {e}"))?;
    if !meta.file_type().is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    check_ownership(&meta, &shown.to_string(), me)?;
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty());
    let dir = dir.unwrap_or(Path::new("."));
    let dir_meta = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    check_ownership(
        &dir_meta,
        &format!("{} (holding {shown})", dir.display()),
        me,
    )?;
    let mut text = String::new();
    opened
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read manifest {shown}: {e}"))?;
    Ok(text)
}

/// Only root or spawnd's user may change it: owned by one of them, writable
/// by neither group nor others.
fn check_ownership(meta: &std::fs::Metadata, shown: &str, me: u32) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{shown} is writable by group or others (mode {:o}); chmod go-w it",
            meta.mode() & 0o7777
        ));
    }
    if meta.uid() != 0 && meta.uid() != me {
        return Err(format!(
            "{shown} is owned by uid {}, neither root nor spawnd's user ({me})",
            meta.uid()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_manifest_is_read_only_from_a_file_and_directory_no_one_else_can_change() {
        let me = nix::unistd::geteuid().as_raw();
        let d = tempfile::tempdir().unwrap();
        chmod(d.path(), 0o755);
        let file = d.path().join("m.toml");
        std::fs::write(&file, "text").unwrap();
        chmod(&file, 0o644);
        assert_eq!(read_checked(&file, me).unwrap(), "text");
        // Through a symbolic link: refused, not followed.
        let link = d.path().join("link.toml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let e = read_checked(&link, me).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        // A directory others may write to: they could swap the file.
        chmod(d.path(), 0o777);
        let e = read_checked(&file, me).unwrap_err();
        assert!(
            e.contains("holding") && e.contains("writable by group or others"),
            "{e}"
        );
        chmod(d.path(), 0o755);
        chmod(&file, 0o664);
        let e = read_checked(&file, me).unwrap_err();
        assert!(e.contains("writable by group or others"), "{e}");
    }

    fn manifest(source: &str, name: &str, op: &str) -> Manifest {
        let text = format!("[connector]\nname = \"{name}\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/true\" }}]\n[capabilities.spawn.operations.{op}]\nargv = \"true\"\n");
        let options = LoadOptions {
            max_wall_time_ms: crate::config::Config::defaults(None)
                .unwrap()
                .sandbox
                .max_wall_time_ms,
        };
        parse_manifest(source, &text, options).unwrap()
    }

    #[test]
    fn a_reloads_changes_name_the_connectors_added_removed_and_changed() {
        let set = |ms: Vec<Manifest>| -> Manifests {
            ms.into_iter()
                .map(|m| (m.connector.name.to_string(), vec![std::sync::Arc::new(m)]))
                .collect()
        };
        let old = set(vec![
            manifest("/m/a.toml", "local://t/a", "x"),
            manifest("/m/b.toml", "local://t/b", "x"),
            manifest("/m/c.toml", "local://t/c", "x"),
            manifest("/m/d.toml", "local://t/d", "x"),
        ]);
        let new = set(vec![
            manifest("/m/a.toml", "local://t/a", "x"),
            manifest("/m/b.toml", "local://t/b", "y"),
            manifest("/m/moved.toml", "local://t/d", "x"),
            manifest("/m/e.toml", "local://t/e", "x"),
        ]);
        assert_eq!(
            ManifestChanges::between(&old, &new),
            ManifestChanges {
                added: vec!["local://t/e".into()],
                removed: vec!["local://t/c".into()],
                changed: vec!["local://t/b".into(), "local://t/d".into()],
            }
        );
        assert!(ManifestChanges::between(&new, &new).is_empty());
    }

    #[test]
    fn a_connector_named_by_two_manifests_names_both_files() {
        let d = tempfile::tempdir().unwrap();
        chmod(d.path(), 0o755);
        let text = "[connector]\nname = \"local://t/twice\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/true\" }]\n[capabilities.spawn.operations.x]\nargv = \"true\"\n";
        for file in ["first.toml", "second.toml"] {
            std::fs::write(d.path().join(file), text).unwrap();
            chmod(&d.path().join(file), 0o644);
        }
        let mut config = crate::config::Config::defaults(None).unwrap();
        config.server.manifests = vec![d.path().to_path_buf()];
        let e = load_manifests(&config).unwrap_err();
        let first = d.path().join("first.toml").display().to_string();
        let second = d.path().join("second.toml").display().to_string();
        assert!(
            e.contains("local://t/twice") && e.contains(&first) && e.contains(&second),
            "{e}"
        );
    }

    #[test]
    fn a_missing_manifests_entry_says_to_create_it_or_set_server_manifests() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("manifests");
        let mut config = crate::config::Config::defaults(None).unwrap();
        config.server.manifests = vec![missing.clone()];
        let e = load_manifests(&config).unwrap_err();
        assert!(e.contains(&missing.display().to_string()), "{e}");
        assert!(e.contains("create it"), "{e}");
        assert!(
            e.contains("set [server] manifests in a config file (--config or $SPAWND_CONFIG)"),
            "{e}"
        );
        // With a config file, that file is the one named.
        config.source = Some(d.path().join("config.toml"));
        let e = load_manifests(&config).unwrap_err();
        let named = format!(
            "set [server] manifests in {}",
            d.path().join("config.toml").display()
        );
        assert!(e.contains(&named), "{e}");
    }
}
