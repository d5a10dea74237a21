//! The daemon protocol's JSON-RPC 2.0 rules (docs/daemon.md), as pure functions
//! both ends use: one object per line, no batches, `id` a string, number or
//! null (absent: a notification, which gets no answer), and the error codes,
//! each the image of one [`FailureKind`] ([`code_of`], and back, [`kind_of`]).

use crate::failure::FailureKind;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

/// -32700: the line is not JSON.
pub(crate) const PARSE_ERROR: i64 = -32700;
/// -32600: JSON, but not a valid request.
pub(crate) const INVALID_REQUEST: i64 = -32600;
/// -32601: no such method.
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
/// -32602: the method's params are wrong.
pub(crate) const INVALID_PARAMS: i64 = -32602;
/// -32001: the gate refused (`data` is the denial object).
pub(crate) const CAPABILITY_DENIED: i64 = -32001;
/// -32002: no such handle, connector, operation or program.
pub(crate) const NOT_FOUND: i64 = -32002;
/// -32003: at a limit; try later.
pub(crate) const OVERLOADED: i64 = -32003;
/// -32004: a kernel layer or the sandbox setup failed.
pub(crate) const SANDBOX_UNAVAILABLE: i64 = -32004;
/// -32005: `binding_required`, `invalid_credentials`, `workspace_unset`,
/// `connector_dir_unknown` (a setup the operator or the invocation must fix).
pub(crate) const CREDENTIAL: i64 = -32005;
/// -32006: the audit trail could not be written.
pub(crate) const AUDIT_UNAVAILABLE: i64 = -32006;
/// -32800: the request was cancelled by `$/cancelRequest` (as in LSP).
pub(crate) const REQUEST_CANCELLED: i64 = -32800;
/// Internal error (standard).
pub(crate) const INTERNAL_ERROR: i64 = -32603;

/// The JSON-RPC code of a failure of `kind` (docs/daemon.md, "Errors").
/// Config and credential problems share exit 4's code.
pub(crate) fn code_of(kind: FailureKind) -> i64 {
    match kind {
        FailureKind::Usage => INVALID_PARAMS,
        FailureKind::Denied => CAPABILITY_DENIED,
        FailureKind::Config | FailureKind::Credential => CREDENTIAL,
        FailureKind::SandboxUnavailable | FailureKind::Lost => SANDBOX_UNAVAILABLE,
        FailureKind::AuditUnavailable => AUDIT_UNAVAILABLE,
        FailureKind::DaemonUnavailable => OVERLOADED,
        FailureKind::NotFound => NOT_FOUND,
        FailureKind::Internal => INTERNAL_ERROR,
    }
}

/// The kind of failure a client reports for an error `code` of the daemon.
pub(crate) fn kind_of(code: i64) -> FailureKind {
    match code {
        CAPABILITY_DENIED => FailureKind::Denied,
        NOT_FOUND => FailureKind::NotFound,
        CREDENTIAL => FailureKind::Credential,
        OVERLOADED => FailureKind::DaemonUnavailable,
        SANDBOX_UNAVAILABLE => FailureKind::SandboxUnavailable,
        AUDIT_UNAVAILABLE => FailureKind::AuditUnavailable,
        PARSE_ERROR | INVALID_REQUEST | METHOD_NOT_FOUND | INVALID_PARAMS => FailureKind::Usage,
        _ => FailureKind::Internal,
    }
}

/// A JSON-RPC error.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    /// The code (see the constants).
    pub code: i64,
    /// A message for people.
    pub message: String,
    /// Structured detail (the denial object for `capability_denied`).
    pub data: Option<Value>,
}

impl RpcError {
    /// An error without data.
    pub(crate) fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// An error with data.
    pub(crate) fn with_data(code: i64, message: impl Into<String>, data: Value) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: Some(data),
        }
    }

    /// `-32602` naming the parameter.
    pub(crate) fn params(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_PARAMS, message)
    }
}

/// The longest string id a request may carry.
pub(crate) const MAX_ID_BYTES: usize = 128;
/// The longest method name (longer than every method there is).
pub(crate) const MAX_METHOD_BYTES: usize = 64;

/// A well-formed call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Call {
    /// `None` for a notification (no answer is sent).
    pub id: Option<Value>,
    /// The method name.
    pub method: String,
    /// The params object (empty when absent).
    pub params: Map<String, Value>,
}

/// Parses one line. An `Err` carries the id to answer with (null when unknown).
pub(crate) fn parse(line: &str) -> Result<Call, (Value, RpcError)> {
    let value: Value = serde_json::from_str(line).map_err(|e| {
        (
            Value::Null,
            RpcError::new(PARSE_ERROR, format!("not JSON: {e}")),
        )
    })?;
    let Value::Object(mut obj) = value else {
        let what = if value.is_array() {
            "batches are not supported: send one request object per line"
        } else {
            "a request must be a JSON object"
        };
        return Err((Value::Null, RpcError::new(INVALID_REQUEST, what)));
    };
    let id = obj.remove("id");
    let answer_id = id.clone().unwrap_or(Value::Null);
    let invalid = |msg: &str| (answer_id.clone(), RpcError::new(INVALID_REQUEST, msg));
    if let Some(id) = &id {
        if !(id.is_string() || id.is_number() || id.is_null()) {
            return Err((
                Value::Null,
                RpcError::new(INVALID_REQUEST, "id must be a string, a number or null"),
            ));
        }
        // An id is kept with its request until the answer: a long one is
        // refused rather than held (and echoed).
        if id.as_str().is_some_and(|s| s.len() > MAX_ID_BYTES) {
            return Err((
                Value::Null,
                RpcError::new(
                    INVALID_REQUEST,
                    format!("a string id may have at most {MAX_ID_BYTES} bytes"),
                ),
            ));
        }
    }
    if obj.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(invalid("\"jsonrpc\": \"2.0\" is required"));
    }
    let Some(Value::String(method)) = obj.remove("method") else {
        return Err(invalid("\"method\" must be a string"));
    };
    if method.len() > MAX_METHOD_BYTES {
        return Err((
            answer_id,
            RpcError::new(
                METHOD_NOT_FOUND,
                format!(
                    "unknown method ({} bytes; no method name is longer than {MAX_METHOD_BYTES})",
                    method.len()
                ),
            ),
        ));
    }
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err((
                answer_id,
                RpcError::params("params must be an object (named parameters)"),
            ))
        }
    };
    if let Some(extra) = obj.keys().find(|k| *k != "jsonrpc") {
        return Err(invalid(&format!("unknown member {:?}", at_most(extra, 64))));
    }
    Ok(Call { id, method, params })
}

/// The start of `text`, at most `bytes` long (cut at a character
/// boundary): how much of a caller's string an error may repeat.
pub(crate) fn at_most(text: &str, bytes: usize) -> &str {
    let mut end = text.len().min(bytes);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The success line for `id`.
pub(crate) fn success(id: &Value, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

/// The success line for `id` with its result already serialized: the line
/// [`success`] makes of the same result, without a tree of it.
pub(crate) fn success_serialized(id: &Value, result: &RawValue) -> String {
    format!(
        "{{\"id\":{id},\"jsonrpc\":\"2.0\",\"result\":{}}}",
        result.get()
    )
}

/// The error line for `id`.
pub(crate) fn failure(id: &Value, e: &RpcError) -> String {
    let mut error = json!({"code": e.code, "message": e.message});
    if let Some(data) = &e.data {
        error["data"] = data.clone();
    }
    json!({"jsonrpc": "2.0", "id": id, "error": error}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_bad_ones_get_their_code() {
        let c = parse(r#"{"jsonrpc":"2.0","id":1,"method":"health"}"#).unwrap();
        assert_eq!(
            (c.id, c.method.as_str(), c.params.len()),
            (Some(json!(1)), "health", 0)
        );
        let n = parse(r#"{"jsonrpc":"2.0","method":"health","params":{"a":"b"}}"#).unwrap();
        assert_eq!((n.id, n.params["a"].clone()), (None, json!("b")));
        let code = |line: &str| parse(line).unwrap_err().1.code;
        assert_eq!(code("{nope"), PARSE_ERROR);
        assert_eq!(code("[]"), INVALID_REQUEST);
        assert_eq!(
            code(r#"[{"jsonrpc":"2.0","id":1,"method":"health"}]"#),
            INVALID_REQUEST
        );
        assert_eq!(code(r#"{"id":1,"method":"health"}"#), INVALID_REQUEST);
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":7}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#),
            INVALID_PARAMS
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"x","extra":1}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","id":"a","method":7}"#)
                .unwrap_err()
                .0,
            json!("a")
        );
    }

    #[test]
    fn answers_are_one_line_of_json_rpc() {
        let ok = success(&json!(3), json!({"x": 1}));
        assert_eq!(ok, r#"{"id":3,"jsonrpc":"2.0","result":{"x":1}}"#);
        for id in [json!(3), json!("a\"b"), Value::Null] {
            let result = json!({"state": "exited", "stdout": {"text": "é\n"}});
            let raw = serde_json::value::to_raw_value(&result).unwrap();
            assert_eq!(success_serialized(&id, &raw), success(&id, result));
        }
        let e = failure(
            &Value::Null,
            &RpcError::with_data(NOT_FOUND, "no such handle", json!({"handle": "h"})),
        );
        let v: Value = serde_json::from_str(&e).unwrap();
        assert_eq!(v["error"]["code"], NOT_FOUND);
        assert_eq!(v["error"]["data"]["handle"], "h");
        assert!(!e.contains('\n'));
    }
}

#[cfg(test)]
mod failure_code_tests {
    use super::*;

    #[test]
    fn each_failure_kind_has_one_code_that_a_client_reads_back() {
        let kinds = [
            FailureKind::Usage,
            FailureKind::Denied,
            FailureKind::Config,
            FailureKind::Credential,
            FailureKind::SandboxUnavailable,
            FailureKind::AuditUnavailable,
            FailureKind::Lost,
            FailureKind::DaemonUnavailable,
            FailureKind::NotFound,
            FailureKind::Internal,
        ];
        for kind in kinds {
            let back = kind_of(code_of(kind));
            // The exit code survives the trip; config shares credential's
            // code, and a lost sandbox the unavailable one.
            assert_eq!(back.exit_code(), kind.exit_code(), "{kind:?} -> {back:?}");
        }
        assert_eq!(code_of(FailureKind::AuditUnavailable), AUDIT_UNAVAILABLE);
        assert_eq!(
            code_of(FailureKind::SandboxUnavailable),
            SANDBOX_UNAVAILABLE
        );
    }
}
