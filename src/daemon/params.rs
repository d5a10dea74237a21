//! Each method's params as a type (docs/daemon.md, the methods table).
//! Every one refuses a key it does not know, and a key of the wrong type,
//! at any depth: -32602 whose message names the key by its path
//! (`envelope.cwd`) and says what was expected. What the types cannot say
//! (a positive `timeout_ms`, a `which` of 0 or 1, one of `stdin` and
//! `stdin_b64`) is checked where each is read. A null counts as absent.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::results::{AttachResult, EmptyResult, MetricsResult, PingResult, SpawnListResult};
use crate::rpc::RpcError;

/// `params`, read as the method's type `T`; an error names the key.
pub(crate) fn parse<T: DeserializeOwned>(params: &Map<String, Value>) -> Result<T, RpcError> {
    let entries = params.iter().map(|(k, v)| (k.as_str(), v));
    let map = serde::de::value::MapDeserializer::<_, serde_json::Error>::new(entries);
    serde_path_to_error::deserialize(map).map_err(|e| {
        let path = e.path().to_string();
        let why = e.inner().to_string();
        if path == "." {
            RpcError::params(why)
        } else {
            RpcError::params(format!("{path}: {why}"))
        }
    })
}

/// Strings by name (`args`, `env`); absent or null is none.
pub(crate) type Strings = Option<BTreeMap<String, String>>;

/// The `action` param: an action subset, one string split at every `.`,
/// or an array of entries as they are.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(untagged, expecting = "a string or an array of strings")]
pub(crate) enum ActionParam {
    /// The string form.
    Dotted(String),
    /// The array form.
    Entries(Vec<String>),
}

/// `spawn_op`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpawnOpParams {
    pub connector: String,
    pub op: String,
    pub args: Strings,
    pub env: Strings,
    pub cwd: Option<String>,
    pub stdin: Option<String>,
    pub stdin_b64: Option<String>,
    pub stdin_stream: Option<bool>,
    pub version: Option<String>,
    pub hash: Option<String>,
    pub action: Option<ActionParam>,
    pub mode: Option<String>,
    pub timeout_ms: Option<u64>,
    pub label: Option<String>,
    pub notify: Option<bool>,
    pub lease_ms: Option<u64>,
}

/// `spawn`'s `envelope`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Envelope {
    pub program: String,
    pub argv: Vec<String>,
    pub env: Strings,
    pub cwd: Option<String>,
    pub stdin: Option<String>,
    pub stdin_b64: Option<String>,
}

/// `spawn`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpawnParams {
    pub connector: String,
    pub envelope: Envelope,
    pub stdin_stream: Option<bool>,
    pub version: Option<String>,
    pub hash: Option<String>,
    pub action: Option<ActionParam>,
    pub mode: Option<String>,
    pub timeout_ms: Option<u64>,
    pub label: Option<String>,
    pub notify: Option<bool>,
    pub lease_ms: Option<u64>,
}

/// `spawn_release`, `spawn_stdin_close`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct HandleParams {
    pub handle: String,
}

/// `spawn_kill`: the handle, and the signal for the program (SIGKILL,
/// which kills the whole sandbox, when absent).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct KillParams {
    pub handle: String,
    pub signal: Option<KillSignal>,
}

/// The signals `spawn_kill` sends. SIGKILL kills the sandbox; the others go
/// to the sandbox's init, which forwards them to the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
pub(crate) enum KillSignal {
    #[serde(rename = "SIGTERM")]
    Term,
    #[serde(rename = "SIGKILL")]
    Kill,
    #[serde(rename = "SIGINT")]
    Int,
    #[serde(rename = "SIGHUP")]
    Hup,
    #[serde(rename = "SIGQUIT")]
    Quit,
    #[serde(rename = "SIGUSR1")]
    Usr1,
    #[serde(rename = "SIGUSR2")]
    Usr2,
}

impl KillSignal {
    /// The signal's number.
    pub(crate) fn number(self) -> i32 {
        match self {
            KillSignal::Term => libc::SIGTERM,
            KillSignal::Kill => libc::SIGKILL,
            KillSignal::Int => libc::SIGINT,
            KillSignal::Hup => libc::SIGHUP,
            KillSignal::Quit => libc::SIGQUIT,
            KillSignal::Usr1 => libc::SIGUSR1,
            KillSignal::Usr2 => libc::SIGUSR2,
        }
    }
}

/// `spawn_status`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatusParams {
    pub handle: String,
    pub wait_ms: Option<u64>,
}

/// `spawn_wait`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WaitParams {
    pub handles: Vec<String>,
    pub wait_ms: Option<u64>,
}

/// `spawn_output_size`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutputSizeParams {
    pub handle: String,
    pub which: Option<u64>,
}

/// `spawn_output_read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutputReadParams {
    pub handle: String,
    pub which: Option<u64>,
    pub offset: Option<u64>,
    pub len: Option<u64>,
    pub wait_ms: Option<u64>,
}

/// `spawn_stdin_write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StdinWriteParams {
    pub handle: String,
    pub data: Option<String>,
    pub data_b64: Option<String>,
}

/// `spawn_attach`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AttachParams {
    pub handle: String,
    pub token: String,
}

/// A request id, as `$/cancelRequest` names one.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(untagged, expecting = "a string or a number")]
pub(crate) enum RequestId {
    Text(String),
    Number(serde_json::Number),
}

impl RequestId {
    /// The id as the request carried it.
    pub(crate) fn to_value(&self) -> Value {
        match self {
            RequestId::Text(s) => Value::String(s.clone()),
            RequestId::Number(n) => Value::Number(n.clone()),
        }
    }
}

/// `$/cancelRequest`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CancelParams {
    pub id: RequestId,
}

/// `health`, `connectors_status`, `ping`, `spawn_list`: no params.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoParams {}

/// Every method the daemon answers, as metrics label them (a name outside
/// this list is counted as `unknown`, so a peer cannot add series).
pub(crate) const METHODS: &[&str] = &[
    "spawn_op",
    "spawn",
    "spawn_check",
    "spawn_status",
    "spawn_wait",
    "spawn_stdin_write",
    "spawn_stdin_close",
    "spawn_attach",
    "spawn_output_size",
    "spawn_output_read",
    "spawn_kill",
    "spawn_release",
    "connectors_status",
    "health",
    "ping",
    "spawn_list",
    "metrics",
    "$/cancelRequest",
];

/// `method` as the metrics label it: itself when the daemon knows it.
pub(crate) fn method_label(method: &str) -> &'static str {
    METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("unknown")
}

/// A schema of `T` (its definitions gathered by `generator`).
type SchemaOf = fn(&mut schemars::SchemaGenerator) -> Value;

fn schema_of<T: JsonSchema>(generator: &mut schemars::SchemaGenerator) -> Value {
    generator.subschema_for::<T>().to_value()
}

/// Each method's params. `spawn_check` takes `spawn_op`'s or `spawn`'s.
const PARAMS: &[(&str, SchemaOf)] = &[
    ("spawn_op", schema_of::<SpawnOpParams>),
    ("spawn", schema_of::<SpawnParams>),
    ("spawn_status", schema_of::<StatusParams>),
    ("spawn_wait", schema_of::<WaitParams>),
    ("spawn_stdin_write", schema_of::<StdinWriteParams>),
    ("spawn_stdin_close", schema_of::<HandleParams>),
    ("spawn_attach", schema_of::<AttachParams>),
    ("spawn_output_size", schema_of::<OutputSizeParams>),
    ("spawn_output_read", schema_of::<OutputReadParams>),
    ("spawn_kill", schema_of::<KillParams>),
    ("spawn_release", schema_of::<HandleParams>),
    ("connectors_status", schema_of::<NoParams>),
    ("health", schema_of::<NoParams>),
    ("ping", schema_of::<NoParams>),
    ("spawn_list", schema_of::<NoParams>),
    ("metrics", schema_of::<NoParams>),
    ("$/cancelRequest", schema_of::<CancelParams>),
];

/// The methods whose results are typed ([`super::results`]).
const RESULTS: &[(&str, SchemaOf)] = &[
    ("ping", schema_of::<PingResult>),
    ("spawn_list", schema_of::<SpawnListResult>),
    ("spawn_attach", schema_of::<AttachResult>),
    ("metrics", schema_of::<MetricsResult>),
    ("spawn_kill", schema_of::<EmptyResult>),
    (
        "connectors_status",
        schema_of::<crate::connectors::ConnectorsStatus>,
    ),
];

/// The JSON Schema (draft 2020-12) of every method's params: `methods`
/// maps each method to its params' type in `$defs`. docs/protocol.schema.json
/// holds it, for the clients' tests; `tests/docs_in_sync.rs` checks the file
/// matches these types.
pub fn protocol_schema() -> Value {
    let mut generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let mut methods = Map::new();
    for (method, schema) in PARAMS {
        methods.insert((*method).into(), schema(&mut generator));
    }
    // `spawn_op`'s params (with `op`) or `spawn`'s (with `envelope`).
    let checked = [methods["spawn_op"].clone(), methods["spawn"].clone()];
    methods.insert(
        "spawn_check".into(),
        serde_json::json!({ "oneOf": checked }),
    );
    let mut results = Map::new();
    for (method, schema) in RESULTS {
        results.insert((*method).into(), schema(&mut generator));
    }
    serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "spawnd daemon protocol: each method's params",
        "description": "Generated from src/daemon/params.rs and src/daemon/results.rs (docs/daemon.md); `methods` maps a method to the schema of its params, and `results` maps the methods whose results are typed there (`ping`, `spawn_list`, `spawn_kill`, `spawn_attach`, `metrics`, `connectors_status`) to the schema of their result.",
        "methods": methods,
        "results": results,
        "$defs": generator.take_definitions(true),
    })
}

/// `wait_ms` from a request's raw params when it is a number, for
/// classing the request before its params are read (a wrong one is
/// refused when they are).
pub(crate) fn peek_wait_ms(params: &Map<String, Value>) -> Option<u64> {
    params.get("wait_ms").and_then(Value::as_u64)
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_methods_labelled_are_the_methods_the_schema_describes() {
        let schema = super::protocol_schema();
        let mut described: Vec<&str> = schema["methods"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut labelled = super::METHODS.to_vec();
        described.sort_unstable();
        labelled.sort_unstable();
        assert_eq!(described, labelled);
        assert_eq!(super::method_label("spawn_x"), "unknown");
    }
    use super::*;
    use serde_json::json;

    fn message<T: DeserializeOwned + std::fmt::Debug>(params: Value) -> String {
        let e = parse::<T>(params.as_object().unwrap()).unwrap_err();
        assert_eq!(e.code, crate::rpc::INVALID_PARAMS, "{}", e.message);
        e.message
    }

    #[test]
    fn an_unknown_key_is_refused_by_name_at_any_depth() {
        let m = message::<HandleParams>(json!({"handle": "h", "hadnle": "h"}));
        assert!(m.starts_with("hadnle: unknown field `hadnle`"), "{m}");
        let m = message::<SpawnParams>(json!({"connector": "c",
            "envelope": {"program": "/p", "argv": [], "cwdir": "/"}}));
        assert!(
            m.starts_with("envelope.cwdir: unknown field `cwdir`"),
            "{m}"
        );
        let m = message::<NoParams>(json!({"verbose": true}));
        assert!(m.contains("unknown field `verbose`"), "{m}");
    }

    #[test]
    fn a_wrong_typed_key_is_refused_by_its_path_with_what_was_expected() {
        let m = message::<SpawnParams>(json!({"connector": "c",
            "envelope": {"program": "/p", "argv": [], "cwd": 5}}));
        assert_eq!(
            m,
            "envelope.cwd: invalid type: integer `5`, expected a string"
        );
        let m = message::<SpawnOpParams>(json!({"connector": "c", "op": "o",
            "args": {"a": 1}}));
        assert_eq!(m, "args.a: invalid type: integer `1`, expected a string");
        let m = message::<SpawnOpParams>(json!({"connector": "c", "op": "o", "action": 3}));
        assert!(
            m.starts_with("action: ") && m.contains("a string or an array of strings"),
            "{m}"
        );
        let m = message::<WaitParams>(json!({"handles": ["a", 2]}));
        assert!(m.starts_with("handles[1]: invalid type"), "{m}");
        let m = message::<CancelParams>(json!({"id": true}));
        assert!(
            m.starts_with("id: ") && m.contains("a string or a number"),
            "{m}"
        );
    }

    #[test]
    fn spawn_kill_takes_the_listed_signals_and_refuses_others_naming_signal() {
        let p: KillParams = parse(
            json!({"handle": "h", "signal": "SIGTERM"})
                .as_object()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(p.signal, Some(KillSignal::Term));
        assert_eq!(KillSignal::Usr2.number(), libc::SIGUSR2);
        let p: KillParams = parse(json!({"handle": "h"}).as_object().unwrap()).unwrap();
        assert_eq!(p.signal, None);
        for other in [json!("SIGSTOP"), json!("TERM"), json!(15)] {
            let m = message::<KillParams>(json!({"handle": "h", "signal": other}));
            assert!(m.starts_with("signal: "), "{m}");
        }
    }

    #[test]
    fn a_missing_key_is_named_and_null_is_absent() {
        let m = message::<AttachParams>(json!({"handle": "h"}));
        assert_eq!(m, "missing field `token`");
        let p: StatusParams =
            parse(json!({"handle": "h", "wait_ms": null}).as_object().unwrap()).unwrap();
        assert_eq!(p.wait_ms, None);
        let p: SpawnOpParams = parse(
            json!({"connector": "c", "op": "o", "args": null, "action": ["spawn"]})
                .as_object()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(p.args, None);
        assert_eq!(p.action, Some(ActionParam::Entries(vec!["spawn".into()])));
    }
}
