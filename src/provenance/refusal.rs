//! Why `spawnd connector install` refuses a connector: one name per check,
//! with the exit code the CLI gives it. `REFUSALS` is the table
//! docs/cli.md lists (`tests/docs_in_sync.rs` checks it): a manifest that
//! cannot be a connector's is a manifest problem (4); bytes or a signature
//! that do not hold is a refusal of trust (3).

use std::fmt;

use serde::Serialize;

/// An install refusal's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// The directory, its manifest or a shipped file cannot be read or shipped.
    ConnectorUnreadable,
    /// The manifest does not load.
    ManifestInvalid,
    /// The name's scheme is not one spawnd knows.
    SchemeUnknown,
    /// The version is not strict SemVer.
    VersionNotStrict,
    /// `--name` differs from the manifest's name (or version).
    NameMismatch,
    /// The content hash differs from `--hash`.
    HashMismatch,
    /// Files are shipped and the manifest has no `provenance_hash`.
    ProvenanceMissing,
    /// `provenance_hash` differs from the shipped bytes, or names bytes
    /// that are not shipped.
    ProvenanceMismatch,
    /// The signature is malformed, for other bytes, or does not verify.
    SignatureInvalid,
    /// The signature's key is not trusted for the name's authority.
    SignatureUntrusted,
    /// The store holds this name and version with other bytes.
    VersionConflict,
}

/// A refusal with its exit code and when it happens.
pub struct RefusalInfo {
    /// The refusal.
    pub refusal: Refusal,
    /// The exit code.
    pub exit: i32,
    /// When.
    pub when: &'static str,
}

/// Every refusal, in the order install checks.
pub const REFUSALS: &[RefusalInfo] = &[
    RefusalInfo { refusal: Refusal::ConnectorUnreadable, exit: 4, when: "the directory has no manifest.toml, or it or a file in bin/ cannot be read, is a symbolic link or not a regular file, or has a name the recipe's glob would not list" },
    RefusalInfo { refusal: Refusal::SchemeUnknown, exit: 4, when: "the manifest's name has a scheme other than github://, gitlab:// or local://" },
    RefusalInfo { refusal: Refusal::VersionNotStrict, exit: 4, when: "the manifest's version is not strict SemVer: `latest`, a range (`^1.2`, `~1.2`, `>=1.0`), a partial or prefixed version (`1.2`, `v1.2.3`)" },
    RefusalInfo { refusal: Refusal::ManifestInvalid, exit: 4, when: "the manifest does not load (`spawnd manifest lint` lists every problem)" },
    RefusalInfo { refusal: Refusal::NameMismatch, exit: 4, when: "--name gives another FQN (or NAME@VERSION another version) than the manifest" },
    RefusalInfo { refusal: Refusal::HashMismatch, exit: 3, when: "the content hash differs from --hash" },
    RefusalInfo { refusal: Refusal::ProvenanceMissing, exit: 4, when: "bin/ ships files and the manifest has no provenance_hash" },
    RefusalInfo { refusal: Refusal::ProvenanceMismatch, exit: 3, when: "provenance_hash differs from the hash of the shipped files, or the manifest has one and nothing is shipped" },
    RefusalInfo { refusal: Refusal::SignatureInvalid, exit: 3, when: "signature.json is malformed, signs another name, version or content, or does not verify" },
    RefusalInfo { refusal: Refusal::SignatureUntrusted, exit: 3, when: "signature.json is by a key the keyring does not trust for the name's authority" },
    RefusalInfo { refusal: Refusal::VersionConflict, exit: 3, when: "the store already holds this name and version with another content hash" },
];

impl Refusal {
    /// The refusal's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::ConnectorUnreadable => "connector_unreadable",
            Refusal::ManifestInvalid => "manifest_invalid",
            Refusal::SchemeUnknown => "scheme_unknown",
            Refusal::VersionNotStrict => "version_not_strict",
            Refusal::NameMismatch => "name_mismatch",
            Refusal::HashMismatch => "hash_mismatch",
            Refusal::ProvenanceMissing => "provenance_missing",
            Refusal::ProvenanceMismatch => "provenance_mismatch",
            Refusal::SignatureInvalid => "signature_invalid",
            Refusal::SignatureUntrusted => "signature_untrusted",
            Refusal::VersionConflict => "version_conflict",
        }
    }

    /// The exit code.
    pub fn exit_code(self) -> i32 {
        REFUSALS
            .iter()
            .find(|r| r.refusal == self)
            .map_or(4, |r| r.exit)
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused install: the check and a message naming what was refused and
/// how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstallRefusal {
    /// Which check.
    pub reason: Refusal,
    /// What and how to fix it.
    pub message: String,
}

impl InstallRefusal {
    /// A refusal for `reason`.
    pub fn new(reason: Refusal, message: impl Into<String>) -> InstallRefusal {
        InstallRefusal {
            reason,
            message: message.into(),
        }
    }
}

impl fmt::Display for InstallRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused ({}): {}", self.reason, self.message)
    }
}

impl std::error::Error for InstallRefusal {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_is_in_the_table_once_with_a_documented_exit_code() {
        for r in REFUSALS {
            assert_eq!(
                REFUSALS.iter().filter(|o| o.refusal == r.refusal).count(),
                1
            );
            assert!([3, 4].contains(&r.exit));
            assert_eq!(
                serde_json::to_value(r.refusal).unwrap(),
                serde_json::json!(r.refusal.as_str())
            );
        }
        assert_eq!(REFUSALS.len(), 11);
    }
}
