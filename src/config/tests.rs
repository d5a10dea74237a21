//! Operator config parsing.

use std::path::Path;

use super::*;
use crate::manifest::Fqn;

const SPEC_EXAMPLE: &str = r#"
[audit]
path = "/var/log/spawnd/audit.jsonl"
rotate_bytes = 104857600
hmac_key_file = "/etc/spawnd/audit.key"

[server]
socket = "/run/spawnd/spawnd.sock"
socket_mode = "0660"
socket_group = "spawnd"
manifests = ["/etc/spawnd/manifests"]
max_connections = 256
max_frame_bytes = 1048576

[[access]]
connector = "github://acme/gitcrawl"
uids = [1000]
gids = []

[[credentials]]
connector = "github://acme/gitcrawl"
key = "GH_TOKEN"
source = "file:/etc/spawnd/secrets/gh_token"

[[disable]]
connector = "github://acme/legacy"

[sandbox]
system_paths = ["/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc/ld.so.cache"]
run_as = "65534:65534"
require_program_hash = false
max_wall_time_ms = 300000
"#;

#[test]
fn the_spec_example_config_loads() {
    let c = Config::parse(Path::new("c.toml"), SPEC_EXAMPLE, None).unwrap();
    assert_eq!(c.sandbox.run_as, Some((65534, 65534)));
    assert_eq!(c.server.socket_mode, 0o660);
    assert_eq!(
        c.credentials[0].source.to_string(),
        "file:/etc/spawnd/secrets/gh_token"
    );
    assert!(c.is_disabled(&Fqn::parse("github://acme/legacy").unwrap()));
}

#[test]
fn the_socket_mode_is_shown_as_the_octal_string_the_config_takes() {
    for (given, shown) in [("0660", "0660"), ("0600", "0600"), ("755", "0755")] {
        let text = format!("[server]\nsocket_mode = \"{given}\"\n");
        let c = Config::parse(Path::new("c.toml"), &text, None).unwrap();
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["server"]["socket_mode"], shown, "{given}");
        // What is shown reads back as the same mode.
        let again = format!("[server]\nsocket_mode = \"{shown}\"\n");
        let back = Config::parse(Path::new("c.toml"), &again, None).unwrap();
        assert_eq!(back.server.socket_mode, c.server.socket_mode);
    }
    let defaults = serde_json::to_value(Config::defaults(None).unwrap()).unwrap();
    assert_eq!(defaults["server"]["socket_mode"], "0660");
}

#[test]
fn unknown_keys_are_errors_with_a_position() {
    let e = Config::parse(Path::new("c.toml"), "[sandbox]\nrun_ass = \"1:1\"\n", None).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("run_ass") && text.contains("line 2"),
        "{text}"
    );
}

#[test]
fn credential_sources_parse_and_print_back() {
    for s in [
        "file:/x/y",
        "systemd:gh",
        "keyring:gh-token",
        "exec:/usr/bin/pass show gh",
    ] {
        assert_eq!(CredentialSource::parse(s).unwrap().to_string(), s);
    }
    for bad in ["file:rel", "exec:pass", "vault:x", "nocolon"] {
        assert!(CredentialSource::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn connector_locations_default_by_user_and_must_be_absolute() {
    use super::default_connector_paths;
    let root = default_connector_paths(0, Some("/x"), Some("/y"), None);
    assert_eq!(root.store, Some("/var/lib/spawnd/connectors".into()));
    assert_eq!(root.keyring, Some("/etc/spawnd/keyring".into()));
    let xdg = default_connector_paths(1000, Some("/x/data"), Some("/x/config"), None);
    assert_eq!(xdg.store, Some("/x/data/spawnd/connectors".into()));
    assert_eq!(xdg.keyring, Some("/x/config/spawnd/keyring".into()));
    let home = default_connector_paths(1000, None, Some("relative"), Some(Path::new("/home/u")));
    assert_eq!(
        home.store,
        Some("/home/u/.local/share/spawnd/connectors".into())
    );
    assert_eq!(home.keyring, Some("/home/u/.config/spawnd/keyring".into()));
    assert_eq!(
        default_connector_paths(1000, None, None, None),
        Default::default()
    );

    let c = Config::parse(
        Path::new("c.toml"),
        "[connectors]\nstore = \"/srv/connectors\"\n",
        None,
    )
    .unwrap()
    .with_default_connector_paths(root);
    assert_eq!(c.connectors.store, Some("/srv/connectors".into()));
    assert_eq!(c.connectors.keyring, Some("/etc/spawnd/keyring".into()));
    for bad in ["store = \"rel\"", "keyring = \"/a/../b\"", "other = \"/x\""] {
        let text = format!("[connectors]\n{bad}\n");
        assert!(
            Config::parse(Path::new("c.toml"), &text, None).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn default_audit_location_follows_the_spec() {
    assert_eq!(
        default_audit_path(true, None, None),
        Some("/var/log/spawnd/audit.jsonl".into())
    );
    assert_eq!(
        default_audit_path(false, Some("/x/state"), None),
        Some("/x/state/spawnd/audit.jsonl".into())
    );
    assert_eq!(
        default_audit_path(false, None, Some(Path::new("/home/u"))),
        Some("/home/u/.local/state/spawnd/audit.jsonl".into())
    );
    assert_eq!(default_audit_path(false, None, None), None);
}

#[test]
fn run_as_root_is_refused() {
    assert!(Config::parse(Path::new("c"), "[sandbox]\nrun_as = \"0:0\"\n", None).is_err());
}

#[test]
fn system_paths_may_not_bring_in_proc_dev_or_sys() {
    for bad in ["/proc", "/dev/shm", "/sys/fs", "/"] {
        let text = format!("[sandbox]\nsystem_paths = [\"/usr\", \"{bad}\"]\n");
        let e = Config::parse(Path::new("c"), &text, None).unwrap_err();
        assert!(e.to_string().contains("makes itself"), "{bad}: {e}");
    }
    let e = Config::parse(
        Path::new("c"),
        "[sandbox]\nsystem_paths = [\"/usr/../proc\"]\n",
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("without `..`"), "{e}");
    let ok = "[sandbox]\nsystem_paths = [\"/usr\", \"/etc/ssl\", \"/devices-not\"]\n";
    assert!(Config::parse(Path::new("c"), ok, None).is_ok());
}

#[test]
fn keep_rotated_and_the_refusal_window_have_defaults_and_bounds() {
    let c = Config::parse(Path::new("c.toml"), "", None).unwrap();
    assert_eq!(
        (c.audit.keep_rotated, c.server.refusal_window_ms),
        (DEFAULT_KEEP_ROTATED, DEFAULT_REFUSAL_WINDOW_MS)
    );
    let c = Config::parse(
        Path::new("c.toml"),
        "[audit]\nkeep_rotated = 2\n[server]\nrefusal_window_ms = 1000\n",
        None,
    )
    .unwrap();
    assert_eq!(
        (c.audit.keep_rotated, c.server.refusal_window_ms),
        (2, 1000)
    );
    for bad in [
        "[audit]\nkeep_rotated = 0\n",
        "[audit]\nkeep_rotated = -1\n",
        "[server]\nrefusal_window_ms = 10\n",
        "[server]\nrefusal_window_ms = 3600001\n",
    ] {
        assert!(
            Config::parse(Path::new("c.toml"), bad, None).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn of_several_bad_keys_the_first_checked_is_the_one_reported() {
    let text = "[audit]\nkeep_rotated = 0\n[server]\nsocket_mode = \"0999\"\n[sandbox]\nlimits = \"cgroups\"\n";
    let e = Config::parse(Path::new("c.toml"), text, None).unwrap_err();
    assert!(e.to_string().contains("server.socket_mode"), "{e}");
    let text =
        "[sandbox]\nrun_as_everyone = true\nsystem_paths = [\"/proc\"]\nmax_wall_time_ms = 0\n";
    let e = Config::parse(Path::new("c.toml"), text, None).unwrap_err();
    assert!(e.to_string().contains("sandbox.max_wall_time_ms"), "{e}");
}

#[test]
fn the_network_table_enables_grants_by_default_and_checks_its_cidrs() {
    let c = Config::parse(Path::new("c.toml"), "", None).unwrap();
    assert!(c.network.enabled && c.network.allow_cidrs.is_empty());
    let c = Config::parse(
        Path::new("c.toml"),
        "[network]\nenabled = false\nallow_cidrs = [\"10.0.0.0/8\"]\ndeny_cidrs = [\"203.0.113.0/24\"]\n",
        None,
    )
    .unwrap();
    assert!(!c.network.enabled);
    assert_eq!(c.network.allow_cidrs[0].to_string(), "10.0.0.0/8");
    assert_eq!(c.network.deny_cidrs[0].to_string(), "203.0.113.0/24");
    let e = Config::parse(
        Path::new("c.toml"),
        "[network]\nallow_cidrs = [\"10.0.0.1/8\"]\n",
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("network.allow_cidrs") && e.contains("10.0.0.1/8"),
        "{e}"
    );
}

#[test]
fn the_network_table_sets_the_relays_timeouts_and_connection_limit_within_bounds() {
    let c = Config::parse(Path::new("c.toml"), "", None).unwrap();
    assert_eq!(
        (
            c.network.connect_timeout_ms,
            c.network.idle_timeout_ms,
            c.network.max_connections_per_spawn
        ),
        (10_000, 300_000, 64)
    );
    let c = Config::parse(
        Path::new("c.toml"),
        "[network]\nconnect_timeout_ms = 500\nidle_timeout_ms = 2000\nmax_connections_per_spawn = 256\n",
        None,
    )
    .unwrap();
    assert_eq!(
        (
            c.network.connect_timeout_ms,
            c.network.idle_timeout_ms,
            c.network.max_connections_per_spawn
        ),
        (500, 2000, 256)
    );
    for (text, key) in [
        ("connect_timeout_ms = 0", "network.connect_timeout_ms"),
        ("idle_timeout_ms = 0", "network.idle_timeout_ms"),
        (
            "max_connections_per_spawn = 0",
            "network.max_connections_per_spawn",
        ),
        (
            "max_connections_per_spawn = 257",
            "network.max_connections_per_spawn",
        ),
    ] {
        let e = Config::parse(Path::new("c.toml"), &format!("[network]\n{text}\n"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains(key), "{text}: {e}");
    }
}

#[test]
fn the_shares_have_defaults_below_their_wholes_and_stay_within_them() {
    let c = Config::parse(Path::new("c.toml"), "", None).unwrap();
    assert_eq!(
        (
            c.server.max_running_spawns,
            c.server.running_spawns_share,
            c.server.buffered_output_share_bytes,
            c.network.connections_share
        ),
        (64, 16, 64 << 20, 256)
    );
    // A smaller whole than the default share brings the share down with it.
    let c = Config::parse(
        Path::new("c.toml"),
        "[server]\nmax_running_spawns = 8\nmax_buffered_output_bytes = 1000\n",
        None,
    )
    .unwrap();
    assert_eq!(
        (
            c.server.running_spawns_share,
            c.server.buffered_output_share_bytes
        ),
        (8, 1000)
    );
    for (text, key) in [
        (
            "[server]\nmax_running_spawns = 0",
            "server.max_running_spawns",
        ),
        (
            "[server]\nmax_running_spawns = 1025",
            "server.max_running_spawns",
        ),
        (
            "[server]\nrunning_spawns_share = 0",
            "server.running_spawns_share",
        ),
        (
            "[server]\nrunning_spawns_share = 65",
            "server.running_spawns_share",
        ),
        (
            "[server]\nbuffered_output_share_bytes = 0",
            "server.buffered_output_share_bytes",
        ),
        (
            "[server]\nmax_buffered_output_bytes = 10\nbuffered_output_share_bytes = 11",
            "server.buffered_output_share_bytes",
        ),
        (
            "[network]\nconnections_share = 0",
            "network.connections_share",
        ),
        (
            "[network]\nconnections_share = 1025",
            "network.connections_share",
        ),
    ] {
        let e = Config::parse(Path::new("c.toml"), text, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains(key), "{text}: {e}");
    }
}
