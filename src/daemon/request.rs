//! A JSON-RPC `spawn`/`spawn_op` call turned into the gate's `Request`, and
//! its peer into the gate's `Caller`. The connector and op names are checked
//! first ([`check_names`]): one no manifest could declare is refused before
//! anything holds, answers or records it.

use base64::Engine;
use serde_json::{Map, Value};

use super::params::{self, ActionParam, SpawnOpParams, SpawnParams};
use super::refusals::InvalidField;
use super::Peer;
use crate::manifest::{check_op_name, Fqn, Tier};
use crate::policy::{Caller, Request, RequestKind};
use crate::rpc::{self, RpcError};

/// The peer as the access rules see it (uid and gid; its home is not
/// looked up, and not needed to decide who may ask).
pub(crate) fn access_caller(peer: &Peer) -> Caller {
    Caller {
        uid: peer.uid,
        gid: peer.gid,
        pid: peer.pid.and_then(|p| u32::try_from(p).ok()),
        home: std::path::PathBuf::new(),
        workspace: None,
        other_user_namespace: peer.other_user_namespace,
        label: None,
        origin: std::sync::Arc::clone(&peer.origin),
    }
}

/// A name in a call that no manifest could declare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InvalidName {
    /// Which field, and its length.
    pub field: InvalidField,
    /// Why, without the name itself.
    pub why: String,
    /// The connector, when it is valid (the op was not).
    pub connector: Option<String>,
}

impl InvalidName {
    /// The answer: -32602, its `data` naming the field and its length.
    pub(crate) fn error(&self) -> RpcError {
        RpcError::with_data(
            rpc::INVALID_PARAMS,
            format!(
                "{} is not a valid {} ({} bytes): {}",
                self.field.field,
                if self.field.field == "op" {
                    "operation name"
                } else {
                    "connector FQN"
                },
                self.field.bytes,
                self.why
            ),
            serde_json::json!({"field": self.field.field, "bytes": self.field.bytes}),
        )
    }
}

/// Checks the `connector` (an FQN, as a manifest's `[connector] name`) and,
/// for `spawn_op`, the `op` (as operations are named in manifests) of a
/// call. A field that is absent or not a string is left to [`request_from`].
pub(crate) fn check_names(method: &str, params: &Map<String, Value>) -> Result<(), InvalidName> {
    let connector = match params.get("connector") {
        Some(Value::String(c)) => match Fqn::parse(c) {
            Ok(_) => Some(c.clone()),
            Err(why) => {
                return Err(InvalidName {
                    field: InvalidField {
                        field: "connector",
                        bytes: c.len(),
                    },
                    why,
                    connector: None,
                })
            }
        },
        _ => None,
    };
    if method == "spawn_op" {
        if let Some(Value::String(op)) = params.get("op") {
            check_op_name(op).map_err(|why| InvalidName {
                field: InvalidField {
                    field: "op",
                    bytes: op.len(),
                },
                why,
                connector,
            })?;
        }
    }
    Ok(())
}

/// The caller a peer stands for (its home from the password database).
pub(crate) fn caller_of(peer: &Peer) -> Result<Caller, RpcError> {
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(peer.uid))
        .ok()
        .flatten()
        .ok_or_else(|| {
            RpcError::new(
                rpc::CAPABILITY_DENIED,
                format!("uid {} has no entry in the password database", peer.uid),
            )
        })?;
    Ok(Caller {
        uid: peer.uid,
        gid: peer.gid,
        pid: peer.pid.and_then(|p| u32::try_from(p).ok()),
        home: user.dir,
        workspace: None,
        other_user_namespace: peer.other_user_namespace,
        label: None,
        origin: std::sync::Arc::clone(&peer.origin),
    })
}

/// A `spawn`/`spawn_op` call, parsed.
pub(crate) struct SpawnCall {
    /// The connector's FQN.
    pub connector: String,
    /// What the gate decides on.
    pub request: Request,
    /// The child's stdin (none: `/dev/null`).
    pub stdin: Option<Vec<u8>>,
    /// `timeout_ms`: tightens the manifest's wall time, never loosens it.
    pub timeout_ms: Option<u64>,
    /// `label`: recorded with the spawn ([`crate::policy::check_label`]).
    pub label: Option<String>,
    /// `stdin_stream`: stdin comes from `spawn_stdin_write`.
    pub stdin_stream: bool,
    /// `notify`: output and exit come as notifications.
    pub notify: bool,
    /// `lease_ms`: the handle may outlive its connection this long.
    pub lease_ms: Option<u64>,
}

/// `stdin` (text) or `stdin_b64` (bytes), not both; `at` is where they
/// are (`envelope.` or nothing).
fn stdin_of(
    stdin: Option<String>,
    stdin_b64: Option<String>,
    at: &str,
) -> Result<Option<Vec<u8>>, RpcError> {
    match (stdin, stdin_b64) {
        (Some(_), Some(_)) => Err(RpcError::params(format!(
            "{at}stdin and {at}stdin_b64 are both given; keep one"
        ))),
        (Some(s), None) => Ok(Some(s.into_bytes())),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b)
            .map(Some)
            .map_err(|e| RpcError::params(format!("{at}stdin_b64: {e}"))),
        (None, None) => Ok(None),
    }
}

/// The `action` param: the action's capability subset, `None` when absent
/// or null. A string is split at every `.` into entries; an array's
/// strings are entries as they are (docs/cli.md, "The action subset"). A
/// network entry (`network:HOST:PORT`) must name a grant as a manifest
/// writes one: a malformed one is refused here, never read as no grant.
fn action_of(action: Option<ActionParam>) -> Result<Option<Vec<String>>, RpcError> {
    let (entries, split) = match action {
        None => return Ok(None),
        Some(ActionParam::Dotted(a)) => (a.split('.').map(str::to_string).collect(), true),
        Some(ActionParam::Entries(a)) => (a, false),
    };
    check_network_entries(&entries, split)?;
    Ok(Some(entries))
}

/// Refuses the first network entry of an action subset that names no
/// grant, saying which entry and why. `split`: the entries came from the
/// string form, which cuts a name's or an address's dots apart.
fn check_network_entries(entries: &[String], split: bool) -> Result<(), RpcError> {
    let Some((at, why)) =
        entries.iter().enumerate().find_map(
            |(at, entry)| match crate::policy::action_network_entry(entry) {
                Some(Err(why)) => Some((at, why)),
                _ => None,
            },
        )
    else {
        return Ok(());
    };
    let hint = if split {
        "; the string form splits at every `.`: give `action` as an array to list a network entry such as `network:api.example.com:443`"
    } else {
        "; a network entry is `network:HOST:PORT`, the host and port as the manifest grants them (`network:api.example.com:443`)"
    };
    Err(RpcError::params(format!(
        "action entry {at} is not a network grant: {why}{hint}"
    )))
}

/// The `version` and `hash` params: what the call pins of its connector
/// (an action's `[[requires.connectors]]` entry). A version is strict
/// SemVer, a hash `sha256:` and 64 lowercase hex.
fn pin_of(
    version: Option<String>,
    hash: Option<String>,
) -> Result<crate::policy::ConnectorPin, RpcError> {
    let version = version
        .map(|v| {
            crate::provenance::identity::parse_strict_version(&v)
                .map_err(|why| RpcError::params(format!("version: {why}")))
        })
        .transpose()?;
    let hash = hash
        .map(|h| {
            h.parse::<crate::manifest::Sha256Digest>()
                .map_err(|why| RpcError::params(format!("hash {why}")))
        })
        .transpose()?;
    Ok(crate::policy::ConnectorPin { version, hash })
}

/// What `spawn` and `spawn_op` share beyond what they run.
struct SpawnOptions {
    stdin_stream: Option<bool>,
    version: Option<String>,
    hash: Option<String>,
    action: Option<ActionParam>,
    mode: Option<String>,
    timeout_ms: Option<u64>,
    label: Option<String>,
    notify: Option<bool>,
    lease_ms: Option<u64>,
}

/// A positive number of milliseconds, when one is given.
fn positive_ms(ms: Option<u64>, name: &str) -> Result<Option<u64>, RpcError> {
    match ms {
        Some(0) => Err(RpcError::params(format!(
            "{name} must be a positive integer"
        ))),
        ms => Ok(ms),
    }
}

/// The options `spawn_op`'s and `spawn`'s params share, as one
/// [`SpawnOptions`] (the two params types keep their own fields: serde's
/// `flatten` cannot refuse unknown ones).
macro_rules! spawn_options {
    ($p:expr) => {
        SpawnOptions {
            stdin_stream: $p.stdin_stream,
            version: $p.version,
            hash: $p.hash,
            action: $p.action,
            mode: $p.mode,
            timeout_ms: $p.timeout_ms,
            label: $p.label,
            notify: $p.notify,
            lease_ms: $p.lease_ms,
        }
    };
}

/// The call's connector, request, stdin and timeout, from the params of
/// `method` (`spawn_op`, else `spawn`): read as the method's type, then
/// checked.
pub(crate) fn request_from(
    method: &str,
    params: &Map<String, Value>,
) -> Result<SpawnCall, RpcError> {
    let (connector, kind, env, cwd, stdin, options) = if method == "spawn_op" {
        let p: SpawnOpParams = params::parse(params)?;
        let kind = RequestKind::Op {
            name: p.op,
            args: p.args.unwrap_or_default(),
        };
        let stdin = stdin_of(p.stdin, p.stdin_b64, "")?;
        let options = spawn_options!(p);
        (
            p.connector,
            kind,
            p.env.unwrap_or_default(),
            p.cwd,
            stdin,
            options,
        )
    } else {
        let p: SpawnParams = params::parse(params)?;
        let e = p.envelope;
        let stdin = stdin_of(e.stdin, e.stdin_b64, "envelope.")?;
        let kind = RequestKind::Raw {
            program: e.program,
            argv: e.argv,
        };
        let options = spawn_options!(p);
        (
            p.connector,
            kind,
            e.env.unwrap_or_default(),
            e.cwd,
            stdin,
            options,
        )
    };
    let action = action_of(options.action)?;
    let pin = pin_of(options.version, options.hash)?;
    let mode = match options.mode {
        None => Tier::Readonly,
        Some(m) => m
            .parse::<Tier>()
            .map_err(|_| RpcError::params(format!("unknown mode {m:?}")))?,
    };
    let timeout_ms = positive_ms(options.timeout_ms, "timeout_ms")?;
    if let Some(l) = &options.label {
        crate::policy::check_label(l).map_err(|why| RpcError::params(format!("label: {why}")))?;
    }
    let stdin_stream = options.stdin_stream.unwrap_or(false);
    if stdin_stream && stdin.is_some() {
        return Err(RpcError::params(
            "stdin_stream and stdin (or stdin_b64) are both given; keep one",
        ));
    }
    let lease_ms = positive_ms(options.lease_ms, "lease_ms")?;
    Ok(SpawnCall {
        connector,
        request: Request {
            kind,
            env,
            cwd,
            action,
            mode,
            pin,
        },
        stdin,
        timeout_ms,
        label: options.label,
        stdin_stream,
        notify: options.notify.unwrap_or(false),
        lease_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{parse_manifest, LoadOptions};
    use crate::policy::{
        decide, Access, Decision, GateContext, ProgramFacts, ProgramFault, ProgramInspector, Reason,
    };
    use serde_json::json;

    /// The examples of docs/cli.md, "The action subset".
    const CLI_DOC: &str = include_str!("../../docs/cli.md");
    const TABLE_HEADER: &str = "| `action` | entries | `spawn_op` `log` | `spawn_op` `status` | `spawn` of `[\"git\", \"status\"]` |";

    /// No program exists: a request the action subset lets through is
    /// refused at the program, a later check.
    struct NoPrograms;

    impl ProgramInspector for NoPrograms {
        fn inspect(&mut self, path: &std::path::Path) -> Result<ProgramFacts, ProgramFault> {
            Err(ProgramFault::Missing { path: path.into() })
        }

        fn recheck_verified(
            &mut self,
            _installed: &crate::manifest::Verified,
            _hashed: &[(std::path::PathBuf, crate::manifest::Sha256Digest)],
        ) -> Result<(), crate::policy::ContentChanged> {
            Ok(())
        }
    }

    /// One cell of the table with its backticks removed.
    fn code(cell: &str) -> &str {
        cell.trim().trim_matches('`')
    }

    /// The reason the gate gives `method` with `params`, the `action` param
    /// added when `action` is some.
    fn refusal(method: &str, mut params: Value, action: Option<&Value>) -> Reason {
        if let Some(a) = action {
            params["action"] = a.clone();
        }
        let call = request_from(method, params.as_object().unwrap()).unwrap();
        let manifest = parse_manifest(
            "git.toml",
            "[connector]\nname = \"local://doc/git\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/git\" }]\n[capabilities.spawn.operations.log]\nargv = \"git log\"\n[capabilities.spawn.operations.status]\nargv = \"git status\"\n",
            LoadOptions::default(),
        )
        .unwrap();
        let bound = std::collections::BTreeSet::new();
        let ctx = GateContext {
            connector: "local://doc/git",
            manifest: Some(&manifest),
            disabled: false,
            access: &Access::Local,
            bound_credentials: &bound,
            require_program_hash: false,
            network_enabled: true,
        };
        let caller = Caller {
            uid: 1000,
            gid: 1000,
            pid: None,
            home: "/home/doc".into(),
            workspace: None,
            other_user_namespace: false,
            label: None,
            origin: std::sync::Arc::new(crate::origin::Origin::via(crate::origin::Via::Daemon)),
        };
        match decide(&ctx, &caller, &call.request, &mut NoPrograms) {
            Decision::Denied(d) => d.reason,
            Decision::Allowed(_) => panic!("allowed without a program"),
        }
    }

    /// The `action` param parsed from `action`, or its error's message.
    fn action_param(action: Value) -> Result<Option<Vec<String>>, String> {
        let action = serde_json::from_value(action).map_err(|e| e.to_string())?;
        action_of(action).map_err(|e| {
            assert_eq!(e.code, rpc::INVALID_PARAMS, "{}", e.message);
            e.message
        })
    }

    #[test]
    fn a_well_formed_network_entry_is_kept_as_given() {
        assert_eq!(
            action_param(json!([
                "spawn:send",
                "network:gmail.googleapis.com:443",
                "network:[2001:db8::1]:443"
            ])),
            Ok(Some(vec![
                "spawn:send".to_string(),
                "network:gmail.googleapis.com:443".to_string(),
                "network:[2001:db8::1]:443".to_string(),
            ]))
        );
        // Without the exact prefix it is another entry, kept and unchecked.
        assert_eq!(
            action_param(json!("spawn.Network:x")),
            Ok(Some(vec!["spawn".to_string(), "Network:x".to_string()]))
        );
    }

    #[test]
    fn a_malformed_network_entry_is_refused_with_which_and_why() {
        for (entry, why) in [
            ("network:gmail.googleapis.com", "has no port"),
            ("network:Gmail.googleapis.com:443", "uppercase"),
            ("network:*.googleapis.com:443", "wildcard"),
            ("network:https://gmail.googleapis.com", "URL scheme"),
            ("network:127.0.0.1:70000", "above 65535"),
            ("network:", "empty"),
        ] {
            let refused = action_param(json!(["spawn", entry])).unwrap_err();
            assert!(
                refused.starts_with("action entry 1 is not a network grant: ")
                    && refused.contains(why)
                    && refused.contains("network:HOST:PORT"),
                "{entry}: {refused}"
            );
        }
        let long = format!("network:{}.com:443", "a".repeat(5000));
        let refused = action_param(json!([long])).unwrap_err();
        assert!(refused.contains("5008 bytes long"), "{refused}");
        assert!(refused.len() < 400, "{refused}");
    }

    #[test]
    fn the_string_form_cannot_carry_a_dotted_network_entry_and_says_to_use_an_array() {
        let refused = action_param(json!("spawn.network:gmail.googleapis.com:443")).unwrap_err();
        assert!(
            refused.starts_with("action entry 1 is not a network grant: ")
                && refused.contains("give `action` as an array"),
            "{refused}"
        );
        // An IPv6 literal has no dots, so the string form keeps it whole.
        assert_eq!(
            action_param(json!("spawn.network:[2001:db8::1]:443")),
            Ok(Some(vec![
                "spawn".to_string(),
                "network:[2001:db8::1]:443".to_string()
            ]))
        );
    }

    #[test]
    fn every_action_subset_example_in_the_cli_doc_parses_and_decides_as_it_says() {
        let start = CLI_DOC
            .find(TABLE_HEADER)
            .expect("the action subset table in docs/cli.md");
        let rows: Vec<&str> = CLI_DOC[start..]
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .collect();
        assert!(rows.len() >= 10, "{rows:?}");
        let log = json!({"connector": "local://doc/git", "op": "log"});
        let status = json!({"connector": "local://doc/git", "op": "status"});
        let raw = json!({"connector": "local://doc/git",
                         "envelope": {"program": "/usr/bin/git", "argv": ["git", "status"], "env": {}}});
        for row in rows {
            let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
            assert_eq!(cells.len(), 5, "{row}");
            let action: Option<Value> = match cells[0].trim() {
                "*(absent)*" => None,
                text => Some(serde_json::from_str(code(text)).unwrap()),
            };
            let mut params = json!({});
            if let Some(a) = &action {
                params["action"] = a.clone();
            }
            let parsed = serde_json::from_value::<Option<ActionParam>>(params["action"].clone())
                .map_err(|e| RpcError::params(e.to_string()))
                .and_then(action_of);
            match cells[1].trim() {
                "no subset" => assert_eq!(parsed.unwrap(), None, "{row}"),
                "-32602" => {
                    assert_eq!(parsed.unwrap_err().code, rpc::INVALID_PARAMS, "{row}");
                    continue;
                }
                entries => {
                    let entries: Vec<String> = serde_json::from_str(code(entries)).unwrap();
                    assert_eq!(parsed.unwrap(), Some(entries), "{row}");
                }
            }
            let cases = [("spawn_op", &log), ("spawn_op", &status), ("spawn", &raw)];
            for ((method, request), said) in cases.into_iter().zip(&cells[2..]) {
                let reason = refusal(method, request.clone(), action.as_ref());
                match code(said) {
                    "permitted" => {
                        assert_eq!(reason, Reason::ProgramNotRegular, "{row}: {request}")
                    }
                    "action_denied" => assert_eq!(reason, Reason::ActionDenied, "{row}: {request}"),
                    other => panic!("{row}: not a decision: {other}"),
                }
            }
        }
    }
}
