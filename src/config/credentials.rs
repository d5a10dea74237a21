//! Credential bindings: which source fills a connector's credential key.
//! Sources are locators (`file:…`, `exec:…`), never secret values.

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use crate::manifest::Fqn;

/// Where a connector's credential comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    /// A file readable only by spawnd's user.
    File(PathBuf),
    /// `$CREDENTIALS_DIRECTORY/NAME`.
    Systemd(String),
    /// A key in the Linux kernel keyring, by description.
    Keyring(String),
    /// A helper program run without a shell.
    Exec {
        /// The helper.
        program: PathBuf,
        /// Its arguments.
        args: Vec<String>,
    },
}

impl CredentialSource {
    pub(super) fn parse(text: &str) -> Result<CredentialSource, String> {
        let (scheme, rest) = text
            .split_once(':')
            .ok_or("must be file:PATH, systemd:NAME, keyring:DESC or exec:/path/to/helper ARG…")?;
        match scheme {
            "file" if rest.starts_with('/') => Ok(CredentialSource::File(rest.into())),
            "file" => Err("file: needs an absolute path".into()),
            "systemd" if !rest.is_empty() && !rest.contains('/') => {
                Ok(CredentialSource::Systemd(rest.into()))
            }
            "systemd" => Err("systemd: needs a credential name without `/`".into()),
            "keyring" if !rest.is_empty() => Ok(CredentialSource::Keyring(rest.into())),
            "keyring" => Err("keyring: needs a key description".into()),
            "exec" => {
                let mut words = rest.split(' ').filter(|w| !w.is_empty());
                let program = words
                    .next()
                    .filter(|p| p.starts_with('/'))
                    .ok_or("exec: needs an absolute helper path")?;
                Ok(CredentialSource::Exec {
                    program: program.into(),
                    args: words.map(str::to_string).collect(),
                })
            }
            other => Err(format!(
                "unknown source kind `{other}`; use file:, systemd:, keyring: or exec:"
            )),
        }
    }
}

impl fmt::Display for CredentialSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CredentialSource::File(p) => write!(f, "file:{}", p.display()),
            CredentialSource::Systemd(n) => write!(f, "systemd:{n}"),
            CredentialSource::Keyring(d) => write!(f, "keyring:{d}"),
            CredentialSource::Exec { program, args } => {
                write!(f, "exec:{}", program.display())?;
                args.iter().try_for_each(|a| write!(f, " {a}"))
            }
        }
    }
}

impl Serialize for CredentialSource {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// `[[credentials]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CredentialBinding {
    /// The connector.
    pub connector: Fqn,
    /// The credential_env_key it fills (`None`: the connector's only one).
    pub key: Option<String>,
    /// Where the value comes from.
    pub source: CredentialSource,
}
