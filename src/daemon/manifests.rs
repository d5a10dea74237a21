//! The manifests `spawnd serve` serves: `[server] manifests` (files, or
//! directories of `*.toml`), each checked for who can change it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::manifest::Manifest;

/// The manifests the daemon serves, by connector name.
pub type Manifests = BTreeMap<String, Manifest>;

/// Loads `[server] manifests` (files, or directories of `*.toml`). A file
/// writable by group or others, or owned by neither root nor spawnd's user,
/// is refused, and so is a second manifest with an FQN already loaded.
pub fn load_manifests(config: &crate::config::Config) -> Result<Manifests, String> {
    let mut files: Vec<PathBuf> = Vec::new();
    for entry in &config.server.manifests {
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
    for file in files {
        check_ownership(&file, me)?;
        let manifest = crate::cli::context::load_manifest(&file, config).map_err(|f| f.message)?;
        let name = manifest.connector.name.to_string();
        if out.contains_key(&name) {
            return Err(format!(
                "{}: connector {name} is already loaded from another manifest",
                file.display()
            ));
        }
        out.insert(name, manifest);
    }
    Ok(out)
}

fn check_ownership(file: &Path, me: u32) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(file).map_err(|e| format!("{}: {e}", file.display()))?;
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is writable by group or others (mode {:o}); chmod go-w it",
            file.display(),
            meta.mode() & 0o7777
        ));
    }
    if meta.uid() != 0 && meta.uid() != me {
        return Err(format!(
            "{} is owned by uid {}, neither root nor spawnd's user ({me})",
            file.display(),
            meta.uid()
        ));
    }
    Ok(())
}
