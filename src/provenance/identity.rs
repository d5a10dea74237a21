//! Names the provenance commands take: an [`Authority`] (`github://acme`, the
//! publisher a key is trusted for) and a [`ConnectorRef`] (`NAME@VERSION` or
//! `sha256:<hex>`, an installed connector).

use std::fmt;

use crate::manifest::{Fqn, Sha256Digest, FQN_SCHEMES};

/// A publisher: an FQN's scheme and owner. `github://acme/gitcrawl` and
/// `github://acme/tools/x` are both `github://acme`'s.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Authority {
    scheme: String,
    owner: String,
}

impl Authority {
    /// Parses `scheme://owner`, with the scheme and owner rules of an FQN.
    pub fn parse(text: &str) -> Result<Authority, String> {
        let shown = crate::printable::printable(text);
        let usage = "give the scheme and owner, e.g. `github://acme`";
        let Some((scheme, owner)) = text.split_once("://") else {
            return Err(format!("`{shown}` is not an authority: {usage}"));
        };
        if owner.contains('/') {
            let owner_only = owner.split('/').next().unwrap_or_default();
            return Err(format!(
                "`{shown}` names a connector; its authority is `{}://{}`",
                crate::printable::printable(scheme),
                crate::printable::printable(owner_only)
            ));
        }
        // An FQN with this scheme and owner checks both.
        Fqn::parse(&format!("{text}/x"))
            .map_err(|why| format!("`{shown}` is not an authority: {why}"))?;
        Ok(Authority {
            scheme: scheme.to_string(),
            owner: owner.to_string(),
        })
    }

    /// The authority of a connector's name.
    pub fn of(name: &Fqn) -> Authority {
        let (scheme, rest) = name.as_str().split_once("://").unwrap_or(("", ""));
        Authority {
            scheme: scheme.to_string(),
            owner: rest.split('/').next().unwrap_or_default().to_string(),
        }
    }

    /// The scheme (`github`).
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The owner (`acme`).
    pub fn owner(&self) -> &str {
        &self.owner
    }
}

impl fmt::Display for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme, self.owner)
    }
}

/// An installed connector, as a command names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectorRef {
    /// `github://acme/gitcrawl@1.2.3`.
    NameVersion(Fqn, semver::Version),
    /// `sha256:<64 hex>`: the content hash.
    Hash(Sha256Digest),
}

impl ConnectorRef {
    /// Parses `NAME@VERSION` or `sha256:<64 hex>`.
    pub fn parse(text: &str) -> Result<ConnectorRef, String> {
        if text.starts_with("sha256:") {
            return text
                .parse()
                .map(ConnectorRef::Hash)
                .map_err(|why| format!("content hash {why}"));
        }
        let Some((name, version)) = text.rsplit_once('@') else {
            return Err(format!(
                "`{}` is neither NAME@VERSION (e.g. github://acme/gitcrawl@1.2.3) nor a content hash (sha256:…, as `spawnd connector list` shows)",
                crate::printable::printable(text)
            ));
        };
        let name = Fqn::parse(name)?;
        let version = parse_strict_version(version)?;
        Ok(ConnectorRef::NameVersion(name, version))
    }
}

impl fmt::Display for ConnectorRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectorRef::NameVersion(name, version) => write!(f, "{name}@{version}"),
            ConnectorRef::Hash(hash) => write!(f, "{hash}"),
        }
    }
}

/// A version as the ADR allows it: strict SemVer (`MAJOR.MINOR.PATCH`, an
/// optional pre-release and build), never `latest`, a range or a partial
/// version. The message says which of those `text` is.
pub(crate) fn parse_strict_version(text: &str) -> Result<semver::Version, String> {
    semver::Version::parse(text).map_err(|e| {
        let shown = crate::printable::printable(text);
        let what = if text.trim().eq_ignore_ascii_case("latest") {
            "`latest` is not a version: a connector is always pinned to one release".to_string()
        } else if text.starts_with(['^', '~', '>', '<', '=', '*']) || text.contains(['*', ' ', ',']) {
            format!("`{shown}` is a version range: name one release")
        } else {
            format!("`{shown}` is not strict SemVer ({e})")
        };
        format!("{what}; write MAJOR.MINOR.PATCH, e.g. 1.2.3 (pre-release and build allowed: 2.0.0-rc.1, 1.2.0+sha.abc)")
    })
}

/// Whether `scheme` is one spawnd knows.
pub(crate) fn known_scheme(scheme: &str) -> bool {
    FQN_SCHEMES.contains(&scheme)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_authority_is_a_scheme_and_an_owner() {
        let a = Authority::parse("github://acme").unwrap();
        assert_eq!((a.scheme(), a.owner()), ("github", "acme"));
        assert_eq!(a.to_string(), "github://acme");
        let fqn = Fqn::parse("github://acme/integrations/connectors/slack").unwrap();
        assert_eq!(Authority::of(&fqn), a);
        let e = Authority::parse("github://acme/gitcrawl").unwrap_err();
        assert!(e.contains("its authority is `github://acme`"), "{e}");
        for bad in [
            "acme",
            "hub://acme",
            "github://",
            "github://..",
            "github://a b",
        ] {
            assert!(Authority::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_reference_is_name_at_version_or_a_content_hash() {
        let hex = "ab".repeat(32);
        assert_eq!(
            ConnectorRef::parse(&format!("sha256:{hex}"))
                .unwrap()
                .to_string(),
            format!("sha256:{hex}")
        );
        let r = ConnectorRef::parse("github://acme/gitcrawl@1.2.3").unwrap();
        assert_eq!(r.to_string(), "github://acme/gitcrawl@1.2.3");
        for bad in [
            "github://acme/gitcrawl",
            "github://acme/gitcrawl@latest",
            "github://acme/gitcrawl@^1.2",
            "github://acme/gitcrawl@1.2",
            "sha256:abc",
        ] {
            assert!(ConnectorRef::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn versions_are_strict_semver_and_the_message_names_what_was_given() {
        assert!(parse_strict_version("2.0.0-rc.1").is_ok());
        assert!(parse_strict_version("1.2.0+sha.abc").is_ok());
        assert!(parse_strict_version("latest")
            .unwrap_err()
            .contains("`latest` is not a version"));
        for range in ["^1.2", "~1.2", ">=1.0", "1.*"] {
            let e = parse_strict_version(range).unwrap_err();
            assert!(e.contains("is a version range"), "{range}: {e}");
        }
        for partial in ["1.2", "v1.2.3", "2026.04.29.1", "01.2.3"] {
            let e = parse_strict_version(partial).unwrap_err();
            assert!(e.contains("not strict SemVer"), "{partial}: {e}");
        }
    }
}
