//! The operator's pins of system programs for an installed connector
//! (docs/provenance.md, "Operator pins"). A published manifest cannot know
//! the hash of `/usr/bin/git` on every host, and pinning it in the manifest
//! would change the connector's content hash and break its signature; so
//! the operator's pins live beside the stored connector, in
//! `STORE/sha256-<hex>.pins.toml`, outside the signed bytes:
//!
//! ```toml
//! connector = "sha256:<content hash>"
//!
//! [[programs]]
//! path = "/usr/bin/git"
//! hash = "sha256:<64 hex>"
//! ```
//!
//! `connector` ties the file to one entry: a pins file moved beside
//! another connector is refused. A pin only adds a check; a program the
//! publisher pinned keeps the publisher's pin.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::files;
use crate::manifest::{Fqn, Sha256Digest};

/// The largest pins file spawnd reads.
const MAX_PINS_BYTES: u64 = 1 << 20;

/// Why a pins file was refused.
#[derive(Debug, thiserror::Error)]
#[error("operator pins {path}: {why}")]
pub struct PinsError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong and how to fix it.
    pub why: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPins {
    connector: String,
    #[serde(default)]
    programs: Vec<RawPin>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPin {
    path: String,
    hash: String,
}

/// An installed connector's operator pins.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OperatorPins {
    /// The content hash of the connector they are for.
    pub connector: Option<Sha256Digest>,
    /// Program path → its pinned hash.
    pub programs: BTreeMap<PathBuf, Sha256Digest>,
}

impl OperatorPins {
    /// Empty pins for the connector `content`.
    pub fn for_connector(content: Sha256Digest) -> OperatorPins {
        OperatorPins {
            connector: Some(content),
            programs: BTreeMap::new(),
        }
    }

    /// Parses a pins file's text.
    pub fn parse(text: &str) -> Result<OperatorPins, String> {
        let raw: RawPins = toml::from_str(text).map_err(|e| e.message().to_string())?;
        let connector = raw
            .connector
            .parse::<Sha256Digest>()
            .map_err(|why| format!("connector {why}"))?;
        let mut programs = BTreeMap::new();
        for pin in raw.programs {
            let path = PathBuf::from(&pin.path);
            if !path.is_absolute() || !crate::manifest::paths_plain(&path) {
                return Err(format!(
                    "program `{}` must be an absolute path without `.` or `..`",
                    crate::printable::printable(&pin.path)
                ));
            }
            let hash = pin
                .hash
                .parse::<Sha256Digest>()
                .map_err(|why| format!("the hash of {} {why}", path.display()))?;
            if programs.insert(path.clone(), hash).is_some() {
                return Err(format!("{} is pinned twice", path.display()));
            }
        }
        Ok(OperatorPins {
            connector: Some(connector),
            programs,
        })
    }

    /// The file's text, with a header naming the connector.
    pub fn render(&self, name: &Fqn, version: &semver::Version) -> String {
        let connector = self.connector.map(|c| c.to_string()).unwrap_or_default();
        let mut text = format!(
            "# The operator's pins of system programs for {name}@{version},\n# written by `spawnd connector pin`; the publisher's manifest is unchanged.\nconnector = \"{connector}\"\n"
        );
        for (path, hash) in &self.programs {
            let path = toml::Value::String(path.display().to_string());
            text.push_str(&format!(
                "\n[[programs]]\npath = {path}\nhash = \"{hash}\"\n"
            ));
        }
        text
    }

    /// The operator's pin of `program`, if any.
    pub fn hash_for(&self, program: &Path) -> Option<&Sha256Digest> {
        self.programs.get(program)
    }
}

/// Loads the pins at `path` for the connector `content` (none when the
/// file does not exist): the gate's view of the operator's pins. A file
/// for another connector, or that others could change, is refused.
pub(crate) fn load(path: &Path, content: &Sha256Digest) -> Result<OperatorPins, PinsError> {
    let fail = |why: String| PinsError {
        path: path.to_path_buf(),
        why,
    };
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(OperatorPins::for_connector(*content))
        }
        Err(e) => return Err(fail(e.to_string())),
        Ok(_) => {}
    }
    files::check_owner_and_mode(path).map_err(fail)?;
    let bytes = files::read_small(path, MAX_PINS_BYTES).map_err(|e| fail(e.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|_| fail("is not UTF-8 text".into()))?;
    let pins = OperatorPins::parse(&text)
        .map_err(|why| fail(format!("{why}; rewrite it with `spawnd connector pin`")))?;
    if pins.connector != Some(*content) {
        return Err(fail(format!(
            "is for connector {}, not {content}: remove it and run `spawnd connector pin` again",
            pins.connector.map(|c| c.to_string()).unwrap_or_default()
        )));
    }
    Ok(pins)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_round_trip_through_their_file() {
        let content = Sha256Digest([1; 32]);
        let mut pins = OperatorPins::for_connector(content);
        pins.programs
            .insert("/usr/bin/git".into(), Sha256Digest([2; 32]));
        pins.programs
            .insert("/opt/a \"b\"/tool".into(), Sha256Digest([3; 32]));
        let text = pins.render(
            &Fqn::parse("github://acme/x").unwrap(),
            &"1.0.0".parse().unwrap(),
        );
        assert!(text.contains("github://acme/x@1.0.0"), "{text}");
        assert_eq!(OperatorPins::parse(&text).unwrap(), pins);
        assert_eq!(
            pins.hash_for(Path::new("/usr/bin/git")),
            Some(&Sha256Digest([2; 32]))
        );
    }

    #[test]
    fn a_pins_file_for_another_connector_or_with_bad_entries_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.pins.toml");
        let content = Sha256Digest([1; 32]);
        assert_eq!(load(&path, &content).unwrap().programs.len(), 0);
        let other = OperatorPins::for_connector(Sha256Digest([9; 32])).render(
            &Fqn::parse("github://acme/x").unwrap(),
            &"1.0.0".parse().unwrap(),
        );
        std::fs::write(&path, other).unwrap();
        let e = load(&path, &content).unwrap_err().to_string();
        assert!(e.contains("is for connector sha256:0909"), "{e}");
        let hash = Sha256Digest([2; 32]);
        for bad in [
            format!("connector = \"{content}\"\n[[programs]]\npath = \"usr/bin/git\"\nhash = \"{hash}\"\n"),
            format!("connector = \"{content}\"\n[[programs]]\npath = \"/usr/../bin/git\"\nhash = \"{hash}\"\n"),
            format!("connector = \"{content}\"\n[[programs]]\npath = \"/usr/bin/git\"\nhash = \"sha256:00\"\n"),
            format!("connector = \"{content}\"\n[[programs]]\npath = \"/a\"\nhash = \"{hash}\"\n[[programs]]\npath = \"/a\"\nhash = \"{hash}\"\n"),
            format!("connector = \"{content}\"\nextra = 1\n"),
        ] {
            assert!(OperatorPins::parse(&bad).is_err(), "{bad}");
        }
    }
}
