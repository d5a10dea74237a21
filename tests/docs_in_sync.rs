//! The docs' reference tables must list every entry of the code's tables, so
//! documentation cannot drift from behaviour: reserved env keys and the
//! keys of `[capabilities.spawn]` in `docs/manifest.md`, denial reasons and
//! connector install refusals in `docs/cli.md`, operator config keys
//! in `docs/operations.md`, the relay's connection reasons in
//! `docs/network.md`; and `docs/protocol.schema.json` must be the schema
//! the daemon's param types generate.

use spawnd::internals::manifest::env_keys::RESERVED_ENV;
use spawnd::internals::policy::REASONS;

/// The text of `docs/NAME`.
fn doc(name: &str) -> String {
    let path = format!("{}/docs/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn every_reserved_env_key_is_in_the_manifest_doc() {
    let text = doc("manifest.md");
    for entry in RESERVED_ENV {
        let shown = if entry.prefix {
            format!("`{}*`", entry.key)
        } else {
            format!("`{}`", entry.key)
        };
        assert!(
            text.contains(&format!("| {shown} | {} |", entry.why)),
            "docs/manifest.md lacks the row for {shown}"
        );
    }
}

#[test]
fn every_denial_reason_is_in_the_cli_doc() {
    let text = doc("cli.md");
    for r in REASONS {
        let row = format!(
            "| `{}` | `{}` | `{}` | {} |",
            r.reason.as_str(),
            r.reason.class(),
            r.detail,
            r.when
        );
        assert!(text.contains(&row), "docs/cli.md lacks the row {row}");
    }
}

#[test]
fn every_install_refusal_is_in_the_cli_doc() {
    let text = doc("cli.md");
    for r in spawnd::internals::provenance::REFUSALS {
        let row = format!("| `{}` | {} | {} |", r.refusal.as_str(), r.exit, r.when);
        assert!(text.contains(&row), "docs/cli.md lacks the row {row}");
    }
}

/// Each field of each raw config table, from the source that parses them.
fn config_fields() -> Vec<(&'static str, String)> {
    let src = include_str!("../src/config/raw.rs");
    let tables = [
        ("RawAudit", "[audit]"),
        ("RawServer", "[server]"),
        ("RawAccess", "[[access]]"),
        ("RawBinding", "[[credentials]]"),
        ("RawDisable", "[[disable]]"),
        ("RawSandbox", "[sandbox]"),
        ("RawNetwork", "[network]"),
        ("RawConnectors", "[connectors]"),
    ];
    let mut out = Vec::new();
    for (name, table) in tables {
        let start = src
            .find(&format!("struct {name} {{"))
            .unwrap_or_else(|| panic!("{name} in raw.rs"));
        let body = &src[start..start + src[start..].find('}').unwrap()];
        for line in body.lines() {
            if let Some(rest) = line.trim().strip_prefix("pub(super) ") {
                out.push((table, rest.split(':').next().unwrap().trim().to_string()));
            }
        }
    }
    out
}

#[test]
fn every_operator_config_key_is_in_the_operations_doc() {
    let text = doc("operations.md");
    let section = &text[text.find("## Operator config").expect("the section")..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let fields = config_fields();
    assert!(fields.len() > 15, "{fields:?}");
    for (table, key) in fields {
        let documented = section.lines().any(|row| {
            row.starts_with(&format!("| `{table}"))
                && (row.contains(&format!("`{table} {key}`"))
                    || row.contains(&format!("`{table} {key}`,"))
                    || row.contains(&format!(" `{key}`")))
        });
        assert!(
            documented,
            "docs/operations.md's operator config lacks {table} {key}"
        );
    }
}

#[test]
fn every_connection_reason_is_in_the_network_doc() {
    let text = doc("network.md");
    for reason in spawnd::internals::relay::reason::ALL {
        assert!(
            text.contains(&format!("| `{reason}` | ")),
            "docs/network.md lacks the row for {reason}"
        );
    }
}

/// Each field of the raw manifest tables of `[capabilities.spawn]`, from
/// the source that parses them.
fn spawn_fields() -> Vec<(&'static str, String)> {
    let src = include_str!("../src/manifest/raw.rs");
    let tables = [
        ("RawSpawn", "[capabilities.spawn]"),
        ("RawProgram", "programs"),
        ("RawAlsoRuns", "also_runs"),
        ("RawOperation", "[capabilities.spawn.operations.NAME]"),
        ("RawParam", "[…params.NAME]"),
        ("RawLimits", "[…limits]"),
    ];
    let mut out = Vec::new();
    for (name, table) in tables {
        let start = src
            .find(&format!("struct {name} {{"))
            .unwrap_or_else(|| panic!("{name} in raw.rs"));
        let body = &src[start..start + src[start..].find("\n}").unwrap()];
        for line in body.lines() {
            if let Some(rest) = line.trim().strip_prefix("pub ") {
                out.push((table, rest.split(':').next().unwrap().trim().to_string()));
            }
        }
    }
    out
}

#[test]
fn every_spawn_manifest_key_is_in_the_manifest_doc() {
    let text = doc("manifest.md");
    let fields = spawn_fields();
    assert!(fields.len() > 30, "{fields:?}");
    for (table, key) in fields {
        let documented = text.contains(&format!("\n{key} = "))
            || text.contains(&format!("{{ {key} = "))
            || text.contains(&format!(", {key} = "))
            || text.contains(&format!("  {key} = "))
            || text.contains(&format!("# {key} = "))
            || text.contains(&format!("`{key}`"))
            || text.contains(&format!(".{key}]"))
            || text.contains(&format!(".{key}."));
        assert!(
            documented,
            "docs/manifest.md does not describe {table} {key}"
        );
    }
}

/// docs/protocol.schema.json is what the daemon's param types generate
/// (`spawnd::internals::daemon::protocol_schema`). With `SPAWND_WRITE_PROTOCOL_SCHEMA`
/// set, the test writes the file instead of failing.
#[test]
fn the_protocol_schema_is_what_the_param_types_generate() {
    let generated =
        serde_json::to_string_pretty(&spawnd::internals::daemon::protocol_schema()).unwrap() + "\n";
    let path = format!("{}/docs/protocol.schema.json", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("SPAWND_WRITE_PROTOCOL_SCHEMA").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    assert!(
        std::fs::read_to_string(&path).unwrap_or_default() == generated,
        "{path} is not what the daemon's param types generate; write it with \
         SPAWND_WRITE_PROTOCOL_SCHEMA=1 cargo test --test integration -- docs_in_sync::the_protocol_schema"
    );
}
