//! Connector signatures (docs/provenance.md, "Signatures"): a publisher's
//! ed25519 signature over a statement that names the connector, its
//! version, its content hash and every file of the stream with its size
//! and hash, so that a signature vouches for exactly these bytes, split
//! exactly so, under exactly this name.
//!
//! The statement is text, one field a line, each ending in `\n`:
//!
//! ```text
//! spawnd connector signature v1
//! name github://acme/gitcrawl
//! version 1.2.3
//! content sha256:<64 hex>
//! file bin/gitcrawl 1048576 sha256:<64 hex>
//! file manifest.toml 812 sha256:<64 hex>
//! key <key id>
//! ```
//!
//! The first line separates these signatures from any other use of the
//! key. `signature.json` beside the manifest carries the same fields and
//! the signature; a verifier rebuilds the statement from the directory's
//! own bytes, never from the file's fields, which only help say what
//! differs.

use ed25519_dalek::{Signature, Signer, SigningKey};
use serde::{Deserialize, Serialize};

use super::content::ConnectorContent;
use super::identity::Authority;
use super::keyring::TrustedKey;
use super::keys::KeyId;
use crate::manifest::Fqn;

/// The signature's file name in a connector directory (outside the stream).
pub(crate) const SIGNATURE_FILE: &str = "signature.json";
/// The largest signature file spawnd reads.
pub(crate) const MAX_SIGNATURE_BYTES: u64 = 64 << 10;
/// The statement's first line.
pub(crate) const STATEMENT_DOMAIN: &str = "spawnd connector signature v1";

/// `signature.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SignatureFile {
    /// Format version: 1.
    pub v: u32,
    /// The connector's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Its content hash.
    pub content: String,
    /// The stream's files.
    pub files: Vec<SignedFile>,
    /// The signing key's id.
    pub key_id: String,
    /// `ed25519:` and the signature's 64 bytes in hex.
    pub signature: String,
}

/// One file as a signature lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SignedFile {
    /// `bin/NAME` or `manifest.toml`.
    pub path: String,
    /// Its size.
    pub bytes: u64,
    /// `sha256:<hex>`.
    pub sha256: String,
}

/// What a connector's signature says, checked against the keyring.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SignatureStatus {
    /// No signature file.
    Unsigned,
    /// Signed by a key the keyring trusts for the name's authority.
    Signed {
        /// The authority the key is trusted for.
        authority: String,
        /// The key.
        key_id: String,
    },
    /// A signature by a key the keyring does not trust for the authority
    /// (unknown, or trusted for another authority only).
    Untrusted {
        /// The name's authority.
        authority: String,
        /// The key the file names.
        key_id: String,
    },
    /// A signature that does not hold: malformed, for other content, or
    /// not verifying.
    Invalid {
        /// What is wrong.
        why: String,
    },
}

impl SignatureStatus {
    /// The status's name: `signed`, `unsigned`, `untrusted` or `invalid`.
    pub fn name(&self) -> &'static str {
        match self {
            SignatureStatus::Unsigned => "unsigned",
            SignatureStatus::Signed { .. } => "signed",
            SignatureStatus::Untrusted { .. } => "untrusted",
            SignatureStatus::Invalid { .. } => "invalid",
        }
    }
}

/// The statement a signature covers.
pub(crate) fn statement(
    name: &Fqn,
    version: &semver::Version,
    content: &ConnectorContent,
    key_id: &KeyId,
) -> Vec<u8> {
    let mut text = format!(
        "{STATEMENT_DOMAIN}\nname {name}\nversion {version}\ncontent {}\n",
        content.content
    );
    for f in &content.files {
        text.push_str(&format!("file {} {} {}\n", f.path, f.bytes, f.sha256));
    }
    text.push_str(&format!("key {key_id}\n"));
    text.into_bytes()
}

/// Signs the connector `content` named `name` at `version`.
pub(crate) fn sign(
    key: &SigningKey,
    name: &Fqn,
    version: &semver::Version,
    content: &ConnectorContent,
) -> SignatureFile {
    let key_id = KeyId::of(&key.verifying_key());
    let signature = key.sign(&statement(name, version, content, &key_id));
    SignatureFile {
        v: 1,
        name: name.to_string(),
        version: version.to_string(),
        content: content.content.to_string(),
        files: content
            .files
            .iter()
            .map(|f| SignedFile {
                path: f.path.clone(),
                bytes: f.bytes,
                sha256: f.sha256.to_string(),
            })
            .collect(),
        key_id: key_id.to_string(),
        signature: format!("ed25519:{}", hex::encode(signature.to_bytes())),
    }
}

/// Writes `file` as the directory's `signature.json`, whole or not at all.
pub(crate) fn write(
    dir: &std::path::Path,
    file: &SignatureFile,
) -> std::io::Result<std::path::PathBuf> {
    let path = dir.join(SIGNATURE_FILE);
    let mut text = serde_json::to_vec_pretty(file).map_err(std::io::Error::other)?;
    text.push(b'\n');
    super::files::write_atomically(&path, &text, 0o644)?;
    Ok(path)
}

/// Checks a signature file's bytes (`None`: unsigned) against a connector
/// and the keys trusted for its name's authority.
pub(crate) fn check(
    file: Option<&[u8]>,
    name: &Fqn,
    version: &semver::Version,
    content: &ConnectorContent,
    trusted: &[TrustedKey],
) -> SignatureStatus {
    let Some(bytes) = file else {
        return SignatureStatus::Unsigned;
    };
    let invalid = |why: String| SignatureStatus::Invalid { why };
    let parsed: SignatureFile = match serde_json::from_slice(bytes) {
        Ok(f) => f,
        Err(e) => return invalid(format!("{SIGNATURE_FILE} is not a signature file ({e})")),
    };
    if let Err(why) = same_connector(&parsed, name, version, content) {
        return invalid(why);
    }
    let authority = Authority::of(name);
    let Ok(key_id) = parsed.key_id.parse::<KeyId>() else {
        return invalid(format!("{SIGNATURE_FILE} names no key id (16 hex digits)"));
    };
    let Some(key) = trusted
        .iter()
        .find(|k| k.id == key_id && k.authority == authority)
    else {
        return SignatureStatus::Untrusted {
            authority: authority.to_string(),
            key_id: key_id.to_string(),
        };
    };
    let signature = parsed
        .signature
        .strip_prefix("ed25519:")
        .and_then(|h| hex::decode(h).ok())
        .and_then(|b| Signature::from_slice(&b).ok());
    let Some(signature) = signature else {
        return invalid(format!(
            "{SIGNATURE_FILE}'s signature is not `ed25519:` and 128 hex digits"
        ));
    };
    match key
        .key
        .verify_strict(&statement(name, version, content, &key_id), &signature)
    {
        Ok(()) => SignatureStatus::Signed {
            authority: authority.to_string(),
            key_id: key_id.to_string(),
        },
        Err(_) => invalid(format!(
            "the signature does not verify under key {key_id} of {authority}: it was altered, or made over other bytes"
        )),
    }
}

/// Whether the file speaks of this connector; else what differs, both
/// sides named.
fn same_connector(
    file: &SignatureFile,
    name: &Fqn,
    version: &semver::Version,
    content: &ConnectorContent,
) -> Result<(), String> {
    if file.v != 1 {
        return Err(format!(
            "{SIGNATURE_FILE} has format v{}, this spawnd reads v1",
            file.v
        ));
    }
    if file.name != name.as_str() {
        return Err(format!(
            "signed for `{}`, but the manifest names `{name}`",
            crate::printable::printable(&file.name)
        ));
    }
    if file.version != version.to_string() {
        return Err(format!(
            "signed for version {}, but the manifest says {version}",
            crate::printable::printable(&file.version)
        ));
    }
    if file.content != content.content.to_string() {
        let changed: Vec<String> = content
            .files
            .iter()
            .filter(|f| {
                !file
                    .files
                    .iter()
                    .any(|s| s.path == f.path && s.sha256 == f.sha256.to_string())
            })
            .map(|f| f.path.clone())
            .collect();
        return Err(format!(
            "signed content {}, but this connector's is {} (changed since signing: {})",
            crate::printable::printable(&file.content),
            content.content,
            if changed.is_empty() {
                "the files' order or boundaries".to_string()
            } else {
                changed.join(", ")
            }
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Sha256Digest;
    use crate::provenance::content::StreamFile;

    fn content(manifest: &str) -> ConnectorContent {
        use sha2::{Digest, Sha256};
        let d = |b: &[u8]| Sha256Digest(Sha256::digest(b).into());
        ConnectorContent {
            files: vec![
                StreamFile {
                    path: "bin/x".into(),
                    bytes: 4,
                    sha256: d(b"prog"),
                },
                StreamFile {
                    path: "manifest.toml".into(),
                    bytes: manifest.len() as u64,
                    sha256: d(manifest.as_bytes()),
                },
            ],
            shipped: Some(d(b"prog")),
            content: d(format!("prog{manifest}").as_bytes()),
            manifest_text: manifest.into(),
        }
    }

    fn trusted(key: &SigningKey, authority: &str) -> TrustedKey {
        TrustedKey {
            authority: Authority::parse(authority).unwrap(),
            id: KeyId::of(&key.verifying_key()),
            key: key.verifying_key(),
            file: "/k".into(),
        }
    }

    #[test]
    fn the_statement_is_the_documented_text() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let c = content("M");
        let id = KeyId::of(&key.verifying_key());
        let text = String::from_utf8(statement(
            &Fqn::parse("github://acme/x").unwrap(),
            &"1.2.3".parse().unwrap(),
            &c,
            &id,
        ))
        .unwrap();
        assert_eq!(
            text,
            format!(
                "spawnd connector signature v1\nname github://acme/x\nversion 1.2.3\ncontent {}\nfile bin/x 4 {}\nfile manifest.toml 1 {}\nkey {id}\n",
                c.content, c.files[0].sha256, c.files[1].sha256
            )
        );
    }

    #[test]
    fn a_signature_holds_only_for_its_bytes_name_version_and_a_key_trusted_for_the_authority() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let name = Fqn::parse("github://acme/x").unwrap();
        let version: semver::Version = "1.2.3".parse().unwrap();
        let c = content("M");
        let file = serde_json::to_vec(&sign(&key, &name, &version, &c)).unwrap();
        let keys = [trusted(&key, "github://acme")];
        assert_eq!(
            check(Some(&file), &name, &version, &c, &keys).name(),
            "signed"
        );
        assert_eq!(
            check(None, &name, &version, &c, &keys),
            SignatureStatus::Unsigned
        );
        // Another authority's trust does not count.
        let elsewhere = [trusted(&key, "github://other")];
        assert_eq!(
            check(Some(&file), &name, &version, &c, &elsewhere).name(),
            "untrusted"
        );
        assert_eq!(
            check(Some(&file), &name, &version, &c, &[]).name(),
            "untrusted"
        );
        // Other content, another name or version: invalid, both sides named.
        let edited = content("M2");
        let s = check(Some(&file), &name, &version, &edited, &keys);
        let SignatureStatus::Invalid { why } = s else {
            panic!("{s:?}")
        };
        assert!(
            why.contains(&c.content.to_string()) && why.contains(&edited.content.to_string()),
            "{why}"
        );
        assert!(why.contains("manifest.toml"), "{why}");
        let other = Fqn::parse("github://acme/y").unwrap();
        assert_eq!(
            check(Some(&file), &other, &version, &c, &keys).name(),
            "invalid"
        );
        let v2: semver::Version = "1.2.4".parse().unwrap();
        assert_eq!(check(Some(&file), &name, &v2, &c, &keys).name(), "invalid");
        // A flipped signature byte, or a file edited to match other content.
        let mut forged: SignatureFile = serde_json::from_slice(&file).unwrap();
        let last = forged.signature.pop().unwrap();
        forged.signature.push(if last == '0' { '1' } else { '0' });
        let forged = serde_json::to_vec(&forged).unwrap();
        let s = check(Some(&forged), &name, &version, &c, &keys);
        assert!(
            matches!(&s, SignatureStatus::Invalid { why } if why.contains("does not verify")),
            "{s:?}"
        );
        let mut relabelled: SignatureFile = serde_json::from_slice(&file).unwrap();
        relabelled.content = edited.content.to_string();
        let relabelled = serde_json::to_vec(&relabelled).unwrap();
        let s = check(Some(&relabelled), &name, &version, &edited, &keys);
        assert!(
            matches!(&s, SignatureStatus::Invalid { why } if why.contains("does not verify")),
            "{s:?}"
        );
        assert_eq!(
            check(Some(b"{}"), &name, &version, &c, &keys).name(),
            "invalid"
        );
    }
}
