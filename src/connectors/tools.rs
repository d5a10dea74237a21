//! Tool definitions for agents, one per operation, from the connectors'
//! status (`connectors_status`, or [`super::status`] in this process):
//! each operation's params as a JSON Schema (draft 2020-12) object, or in
//! MCP's tool shape. Pure: the status in, the definitions out.
//!
//! Args are strings. A param's `kind` gives `type: "string"` (a `path` is
//! said so in its description), its `values` an `enum`, its `max_len`
//! `maxLength`, `allow_empty` false `minLength: 1`, and its `pattern` a
//! `pattern` anchored as `^(?:…)$`: a manifest's pattern must match the
//! whole value, while a JSON Schema pattern only has to match somewhere in
//! it. `allow_dash` is left to the gate: a leading `-` is refused only
//! where the value starts an argv token (`--author={author}` takes one),
//! which the status does not say.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::{ConnectorStatus, OperationStatus, ParamStatus};
use crate::manifest::ValueKind;

/// The shape of the definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ToolFormat {
    /// One JSON Schema object per operation.
    JsonSchema,
    /// MCP's tools: `{name, description, inputSchema}`.
    Mcp,
}

impl std::str::FromStr for ToolFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<ToolFormat, String> {
        match s {
            "json-schema" => Ok(ToolFormat::JsonSchema),
            "mcp" => Ok(ToolFormat::Mcp),
            other => Err(format!("unknown tool format {other:?}: json-schema or mcp")),
        }
    }
}

/// The tool name of `op` of `connector`: the connector's FQN without its
/// scheme's `://`, then `__` and the operation, every character outside
/// `[A-Za-z0-9_-]` as `_` (`local://spawnd/git`, `status`:
/// `local_spawnd_git__status`).
pub(crate) fn tool_name(connector: &str, op: &str) -> String {
    let fqn = connector.replacen("://", "_", 1);
    format!("{fqn}__{op}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A manifest pattern as a JSON Schema pattern: anchored, so that it
/// matches the whole value as the manifest's does.
pub(crate) fn anchored(pattern: &str) -> String {
    format!("^(?:{pattern})$")
}

/// The tools of every operation of `connectors` (a status's entries by
/// name), in the connectors' order and then the operations'.
pub(crate) fn tools(
    connectors: &BTreeMap<String, ConnectorStatus<ParamStatus>>,
    format: ToolFormat,
) -> Value {
    let mut out = Vec::new();
    for (key, entry) in connectors {
        // `NAME@VERSION` when several versions are served.
        let (name, version) = match key.rsplit_once('@') {
            Some((name, version)) if !name.contains('@') => (name, Some(version)),
            _ => (key.as_str(), None),
        };
        for op in entry.operations.iter().flatten() {
            let tool = match version {
                Some(v) => tool_name(&format!("{name}_{v}"), &op.name),
                None => tool_name(name, &op.name),
            };
            let description = description(name, version, op);
            let schema = input_schema(name, version, op, &description);
            out.push(match format {
                ToolFormat::JsonSchema => {
                    let mut s = schema;
                    s["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
                    s["title"] = json!(tool);
                    s
                }
                ToolFormat::Mcp => {
                    json!({"name": tool, "description": description, "inputSchema": schema})
                }
            });
        }
    }
    Value::Array(out)
}

/// What the tool does: the operation's description, then which
/// connector's operation it is and its mode.
fn description(
    connector: &str,
    version: Option<&str>,
    op: &OperationStatus<ParamStatus>,
) -> String {
    let at = match version {
        Some(v) => format!("{connector} {v}"),
        None => connector.to_string(),
    };
    let whose = format!(
        "operation `{}` of {at} (spawnd spawn_op, mode {})",
        op.name, op.mode
    );
    match op.description.as_deref().filter(|d| !d.is_empty()) {
        Some(what) => format!("{what}. The {whose}."),
        None => format!("The {whose}."),
    }
}

/// The operation's `args` as a JSON Schema object.
fn input_schema(
    connector: &str,
    version: Option<&str>,
    op: &OperationStatus<ParamStatus>,
    description: &str,
) -> Value {
    let properties: Map<String, Value> = op
        .params
        .iter()
        .map(|p| (p.name.clone(), param_schema(p)))
        .collect();
    let required: Vec<&str> = op
        .params
        .iter()
        .filter(|p| p.required)
        .map(|p| p.name.as_str())
        .collect();
    let mut spawnd = json!({"connector": connector, "op": op.name});
    if let Some(v) = version {
        spawnd["version"] = json!(v);
    }
    json!({
        "type": "object",
        "description": description,
        "properties": properties,
        "required": required,
        "additionalProperties": false,
        "x-spawnd": spawnd,
    })
}

/// One param's value as a JSON Schema.
fn param_schema(p: &ParamStatus) -> Value {
    let mut s = json!({"type": "string"});
    let mut description = p.description.clone().unwrap_or_default();
    if p.kind == ValueKind::Path {
        if !description.is_empty() {
            description.push(' ');
        }
        description.push_str("(a path)");
    }
    if !description.is_empty() {
        s["description"] = json!(description);
    }
    if let Some(values) = &p.values {
        s["enum"] = json!(values);
    }
    if let Some(pattern) = &p.pattern {
        s["pattern"] = json!(anchored(pattern));
    }
    s["maxLength"] = json!(p.max_len);
    if !p.allow_empty {
        s["minLength"] = json!(1);
    }
    if let Some(d) = &p.default {
        s["default"] = json!(d);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status() -> BTreeMap<String, ConnectorStatus<ParamStatus>> {
        serde_json::from_value(json!({
            "local://doc/git": {"version": "1.0.0", "status": "connected", "operations": [
                {"name": "log", "description": "List commits", "mode": "readonly", "params": [
                    {"name": "since", "kind": "string", "required": true, "pattern": "[0-9]{4}",
                     "allow_dash": false, "allow_empty": false, "max_len": 4096, "description": "A year"},
                    {"name": "format", "kind": "string", "required": false, "values": ["short", "long"],
                     "default": "short", "allow_dash": false, "allow_empty": false, "max_len": 4096},
                    {"name": "dir", "kind": "path", "required": false,
                     "allow_dash": true, "allow_empty": true, "max_len": 10}
                ]},
                {"name": "status", "description": "", "mode": "readonly", "params": []}
            ]},
            "local://doc/off": {"version": "1.0.0", "status": "disabled_by_admin", "reason": "x"}
        }))
        .unwrap()
    }

    #[test]
    fn each_operation_is_one_json_schema_with_its_params() {
        let t = tools(&status(), ToolFormat::JsonSchema);
        let t = t.as_array().unwrap();
        assert_eq!(t.len(), 2, "{t:?}");
        let log = &t[0];
        assert_eq!(log["title"], "local_doc_git__log");
        assert_eq!(
            log["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        assert_eq!(log["additionalProperties"], false);
        assert_eq!(log["required"], json!(["since"]));
        assert_eq!(
            log["x-spawnd"],
            json!({"connector": "local://doc/git", "op": "log"})
        );
        let since = &log["properties"]["since"];
        assert_eq!(since["pattern"], "^(?:[0-9]{4})$");
        assert_eq!(since["minLength"], 1);
        assert_eq!(since["description"], "A year");
        let format = &log["properties"]["format"];
        assert_eq!(format["enum"], json!(["short", "long"]));
        assert_eq!(format["default"], "short");
        let dir = &log["properties"]["dir"];
        assert_eq!(
            dir,
            &json!({"type": "string", "maxLength": 10, "description": "(a path)"})
        );
        assert!(log["description"]
            .as_str()
            .unwrap()
            .starts_with("List commits. The operation `log` of local://doc/git"));
        assert_eq!(t[1]["properties"], json!({}));
        assert_eq!(t[1]["required"], json!([]));
    }

    #[test]
    fn mcp_tools_carry_name_description_and_input_schema() {
        let t = tools(&status(), ToolFormat::Mcp);
        let first = &t[0];
        assert_eq!(
            first.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["description", "inputSchema", "name"]
        );
        assert_eq!(first["name"], "local_doc_git__log");
        assert_eq!(first["inputSchema"]["type"], "object");
        assert_eq!(first["inputSchema"]["required"], json!(["since"]));
    }

    #[test]
    fn names_keep_to_what_tool_names_allow_and_versions_stay_apart() {
        assert_eq!(
            tool_name("github://acme/git.crawl", "diff-stat"),
            "github_acme_git_crawl__diff-stat"
        );
        let mut two = BTreeMap::new();
        for v in ["1.0.0", "2.0.0"] {
            let entry = json!({"version": v, "status": "connected", "operations": [
                {"name": "status", "description": null, "mode": "readonly", "params": []}
            ]});
            two.insert(
                format!("local://doc/git@{v}"),
                serde_json::from_value(entry).unwrap(),
            );
        }
        let t = tools(&two, ToolFormat::Mcp);
        assert_eq!(t[0]["name"], "local_doc_git_1_0_0__status");
        assert_eq!(t[1]["inputSchema"]["x-spawnd"]["version"], "2.0.0");
        assert_eq!("mcp".parse::<ToolFormat>(), Ok(ToolFormat::Mcp));
        assert!("yaml".parse::<ToolFormat>().is_err());
    }
}
