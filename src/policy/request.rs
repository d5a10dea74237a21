//! What arrives at the gate: the request (an operation with args, or a raw
//! envelope), who asks, and the operator context the decision depends on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::manifest::{Fqn, Manifest, Tier};

/// The two ways to ask for a spawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestKind {
    /// `spawn_op` / `run --op`: an operation name and placeholder values.
    Op {
        /// Operation name.
        name: String,
        /// Placeholder values.
        args: BTreeMap<String, String>,
    },
    /// `spawn` / `run --envelope`: a full program and argv.
    Raw {
        /// Program as the caller wrote it (a declared path or file name).
        program: String,
        /// argv, `argv[0]` included.
        argv: Vec<String>,
    },
}

/// A spawn request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Operation or raw envelope.
    pub kind: RequestKind,
    /// Env values the caller supplies.
    pub env: BTreeMap<String, String>,
    /// Requested working directory.
    pub cwd: Option<String>,
    /// The action's capability subset, when the request carries one.
    pub action: Option<Vec<String>>,
    /// The invocation's tier.
    pub mode: Tier,
    /// The connector's version and content hash the caller pins (an
    /// action's `[[requires.connectors]]` entry).
    pub pin: ConnectorPin,
}

/// What a request pins of its connector: the version, the content hash,
/// both, or neither.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectorPin {
    /// Strict SemVer.
    pub version: Option<semver::Version>,
    /// The content hash.
    pub hash: Option<crate::manifest::Sha256Digest>,
}

impl Request {
    /// A `spawn_op` request with no env, cwd or action subset, at `readonly`.
    pub fn op(name: &str, args: &[(&str, &str)]) -> Request {
        let args = args
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Request::new(RequestKind::Op {
            name: name.to_string(),
            args,
        })
    }

    /// A raw `spawn` request with no env, cwd or action subset, at `readonly`.
    pub fn raw(program: &str, argv: &[&str]) -> Request {
        let argv = argv.iter().map(|s| s.to_string()).collect();
        Request::new(RequestKind::Raw {
            program: program.to_string(),
            argv,
        })
    }

    fn new(kind: RequestKind) -> Request {
        Request {
            kind,
            env: BTreeMap::new(),
            cwd: None,
            action: None,
            mode: Tier::Readonly,
            pin: ConnectorPin::default(),
        }
    }
}

/// Who asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Process id, when known (`SO_PEERCRED`).
    pub pid: Option<u32>,
    /// Home directory from the password database (for `~`).
    pub home: PathBuf,
    /// The workspace `{workspace}/` scopes expand against, absolute: named
    /// by the invocation (`spawnd run --workspace`) or the operator
    /// (`[sandbox] workspace`), never by a daemon's caller.
    pub workspace: Option<PathBuf>,
    /// The daemon's peer runs in another user namespace than the daemon (a
    /// container, or a program inside a sandbox), or that could not be
    /// ruled out; always false for a local invocation.
    pub other_user_namespace: bool,
    /// A label the caller gives the spawn (a CI job id, say): recorded with
    /// it, never decided on ([`check_label`]).
    pub label: Option<String>,
    /// Where the request came from (front end, executable, cgroup, start
    /// time, login uid): recorded, never decided on.
    pub origin: std::sync::Arc<crate::origin::Origin>,
}

/// Most bytes of a spawn's label.
pub(crate) const MAX_LABEL_BYTES: usize = 128;

/// A label is 1 to [`MAX_LABEL_BYTES`] bytes of text without control
/// characters: it goes into every audit record of the spawn.
pub(crate) fn check_label(label: &str) -> Result<(), String> {
    if label.is_empty() || label.len() > MAX_LABEL_BYTES {
        return Err(format!(
            "a label is 1 to {MAX_LABEL_BYTES} bytes; this one is {}",
            label.len()
        ));
    }
    if label.chars().any(char::is_control) {
        return Err("a label holds no control characters".to_string());
    }
    Ok(())
}

impl Caller {
    /// What this caller's anchored paths expand against, in a manifest
    /// whose file lies in `connector` (its [`Manifest::dir`]).
    pub fn anchors<'a>(
        &'a self,
        connector: Option<&'a std::path::Path>,
    ) -> crate::manifest::Anchors<'a> {
        crate::manifest::Anchors {
            home: &self.home,
            workspace: self.workspace.as_deref(),
            connector,
        }
    }
}

/// An `[[access]]` rule of the operator config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessRule {
    /// The connector it grants.
    pub connector: Fqn,
    /// Users that may act for it.
    pub uids: Vec<u32>,
    /// Primary groups that may act for it.
    pub gids: Vec<u32>,
    /// These users and groups may act for it also from another user
    /// namespace than the daemon's (docs/daemon.md; without it such a peer is
    /// refused, root and the daemon's own uid included).
    pub other_user_namespaces: bool,
}

/// Who may act for which connector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// A local invocation (`spawnd run`/`check`): the user acts for themselves.
    Local,
    /// The daemon: the `[[access]]` rules, plus root and the daemon's own uid.
    Rules {
        /// The rules.
        rules: Vec<AccessRule>,
        /// The daemon's uid.
        daemon_uid: u32,
    },
}

impl Access {
    /// Whether `caller` may act for `connector`, and what the rules grant.
    pub fn allows(&self, caller: &Caller, connector: &Fqn) -> Result<(), Vec<String>> {
        let Access::Rules { rules, daemon_uid } = self else {
            return Ok(());
        };
        // A peer in another user namespace (a sandboxed program that reached
        // the socket) gets nothing from being root or the daemon's own uid.
        let foreign = caller.other_user_namespace;
        if !foreign && (caller.uid == 0 || caller.uid == *daemon_uid) {
            return Ok(());
        }
        let mut granted = Vec::new();
        for rule in rules.iter().filter(|r| &r.connector == connector) {
            if foreign && !rule.other_user_namespaces {
                continue;
            }
            if rule.uids.contains(&caller.uid) || rule.gids.contains(&caller.gid) {
                return Ok(());
            }
            granted.extend(rule.uids.iter().map(|u| format!("uid:{u}")));
            granted.extend(rule.gids.iter().map(|g| format!("gid:{g}")));
        }
        if foreign {
            granted.push("peers in the daemon's own user namespace".to_string());
        }
        Err(granted)
    }
}

impl Access {
    /// Whether `caller` may act for some connector (root, the daemon's own
    /// uid, or a rule naming its uid or gid): who may ask the daemon
    /// anything at all (`health`, `connectors_status`).
    pub fn allows_some(&self, caller: &Caller) -> bool {
        let Access::Rules { rules, daemon_uid } = self else {
            return true;
        };
        // As in `allows`: from another user namespace, only a rule that says so.
        let foreign = caller.other_user_namespace;
        (!foreign && (caller.uid == 0 || caller.uid == *daemon_uid))
            || rules.iter().any(|r| {
                (!foreign || r.other_user_namespaces)
                    && (r.uids.contains(&caller.uid) || r.gids.contains(&caller.gid))
            })
    }
}

/// The operator's side of a decision.
#[derive(Debug, Clone)]
pub struct GateContext<'a> {
    /// The FQN the caller named (`run --manifest` names it implicitly).
    pub connector: &'a str,
    /// The loaded manifest with that FQN, if any.
    pub manifest: Option<&'a Manifest>,
    /// `[[disable]]` lists it.
    pub disabled: bool,
    /// Caller authorization.
    pub access: &'a Access,
    /// Credential keys with an operator binding for this connector.
    pub bound_credentials: &'a BTreeSet<String>,
    /// `[sandbox] require_program_hash`.
    pub require_program_hash: bool,
    /// `[network] enabled`: whether operations with network grants may run.
    pub network_enabled: bool,
}

impl GateContext<'_> {
    /// What `caller`'s anchored paths in this context's manifest expand
    /// against: the caller's home and workspace, the manifest's directory.
    pub fn anchors<'c>(&'c self, caller: &'c Caller) -> crate::manifest::Anchors<'c> {
        caller.anchors(self.manifest.and_then(|m| m.dir.as_deref()))
    }
}
