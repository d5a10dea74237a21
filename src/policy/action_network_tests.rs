//! The action subset's network entries (`network:HOST:PORT`, docs/cli.md,
//! "The action subset"): they narrow the operation's grants to those they
//! name, a subset without them leaves the grants as they are, and a subset
//! naming none of the op's grants leaves the spawn no network.

use std::collections::BTreeSet;

use super::gate::ActionEntryError;
use super::test_support::*;
use super::*;
use crate::egress::grant::Grant;

/// Two operations: `fetch` granted two local services, `status` none.
const NET: &str = r#"
[connector]
name = "github://aileron-test/net"
version = "0.1.0"

[capabilities.spawn]
programs = [{ path = "/usr/bin/curl" }, { path = "/usr/bin/git" }]
network = ["127.0.0.1:8080", "api.example.com:443"]

[capabilities.spawn.operations.fetch]
argv = "curl {url}"

[capabilities.spawn.operations.status]
argv = "git status"
network = []
"#;

fn grants(list: &[&str]) -> Vec<Grant> {
    list.iter().map(|g| Grant::parse(g).unwrap()).collect()
}

fn fetch(action: Option<&[&str]>) -> Request {
    let mut req = Request::op("fetch", &[("url", "http://127.0.0.1:8080/")]);
    req.action = action.map(|a| a.iter().map(|e| e.to_string()).collect());
    req
}

/// The op's grants the gate leaves `fetch` under `action`.
fn network_of(action: Option<&[&str]>) -> Vec<Grant> {
    allowed(&decide_m(NET, &fetch(action))).network.clone()
}

#[test]
fn without_network_entries_the_ops_grants_are_unchanged() {
    let all = grants(&["127.0.0.1:8080", "api.example.com:443"]);
    assert_eq!(network_of(None), all);
    assert_eq!(network_of(Some(&["spawn"])), all);
    assert_eq!(
        network_of(Some(&["spawn:fetch", "oauth2", "chat:write"])),
        all
    );
    // `Network:` is not `network:`: entries are compared exactly.
    assert_eq!(network_of(Some(&["spawn", "Network:127.0.0.1:8080"])), all);
}

#[test]
fn network_entries_narrow_the_ops_grants_to_those_named() {
    assert_eq!(
        network_of(Some(&["spawn:fetch", "network:127.0.0.1:8080"])),
        grants(&["127.0.0.1:8080"])
    );
    assert_eq!(
        network_of(Some(&["spawn", "network:api.example.com:443"])),
        grants(&["api.example.com:443"])
    );
    // Both named, and one the op lacks (another op's, say): the op keeps
    // its own, nothing is added.
    assert_eq!(
        network_of(Some(&[
            "spawn",
            "network:api.example.com:443",
            "network:127.0.0.1:8080",
            "network:other.example.com:443",
        ])),
        grants(&["127.0.0.1:8080", "api.example.com:443"])
    );
    // The same host on another port is another grant.
    assert_eq!(
        network_of(Some(&[
            "spawn",
            "network:127.0.0.1:8081",
            "network:api.example.com:443"
        ])),
        grants(&["api.example.com:443"])
    );
}

#[test]
fn network_entries_naming_none_of_the_ops_grants_leave_it_no_network() {
    let d = decide_m(
        NET,
        &fetch(Some(&["spawn", "network:other.example.com:443"])),
    );
    let plan = allowed(&d);
    assert!(plan.network.is_empty(), "{:?}", plan.network);
    assert!(!plan.uses_relay());
    // A malformed entry (the daemon refuses it first) names no grant: it
    // narrows, never widens.
    for malformed in [
        "network:API.example.com:443",
        "network:127.0.0.1",
        "network:",
    ] {
        assert_eq!(
            network_of(Some(&["spawn", malformed])),
            vec![],
            "{malformed}"
        );
    }
    // An op without grants stays without.
    let mut status = Request::op("status", &[]);
    status.action = Some(vec!["spawn".into(), "network:127.0.0.1:8080".into()]);
    assert!(allowed(&decide_m(NET, &status)).network.is_empty());
}

#[test]
fn network_entries_permit_no_spawn_by_themselves() {
    let d = decide_m(NET, &fetch(Some(&["network:127.0.0.1:8080"])));
    assert_reason(&d, Reason::ActionDenied, "action");
    assert_eq!(denied(&d).granted, ["network:127.0.0.1:8080"]);
}

#[test]
fn the_plan_carries_the_action_subset_as_records_repeat_it() {
    assert_eq!(allowed(&decide_m(NET, &fetch(None))).action, None);
    let plan = allowed(&decide_m(
        NET,
        &fetch(Some(&["spawn:fetch", "network:127.0.0.1:8080"])),
    ))
    .clone();
    assert_eq!(
        plan.action,
        Some(vec![
            "spawn:fetch".to_string(),
            "network:127.0.0.1:8080".to_string()
        ])
    );
    let many: Vec<String> = (0..40).map(|i| format!("scope{i}")).collect();
    let mut req = fetch(None);
    req.action = Some(std::iter::once("spawn".to_string()).chain(many).collect());
    let shown = allowed(&decide_m(NET, &req)).action.clone().unwrap();
    assert_eq!(shown.len(), 17, "{shown:?}");
    assert_eq!(shown[16], "… (41 entries in all)");
}

#[test]
fn a_spawn_narrowed_to_no_network_runs_where_the_operator_disabled_network() {
    let m = manifest(NET);
    let name = m.connector.name.to_string();
    let bound = BTreeSet::new();
    let ctx = GateContext {
        connector: &name,
        manifest: Some(&m),
        disabled: false,
        access: &Access::Local,
        bound_credentials: &bound,
        require_program_hash: false,
        network_enabled: false,
    };
    let decide_off = |action: &[&str]| {
        decide(
            &ctx,
            &caller(),
            &fetch(Some(action)),
            &mut FakePrograms::standard(),
        )
    };
    let d = decide_off(&["spawn", "network:api.example.com:443"]);
    assert_reason(&d, Reason::NetworkDisabled, "operator_config");
    assert_eq!(denied(&d).requested, "network:api.example.com:443");
    assert!(
        !denied(&d).message.contains("127.0.0.1:8080"),
        "{}",
        denied(&d).message
    );
    let d = decide_off(&["spawn", "network:other.example.com:443"]);
    assert!(allowed(&d).network.is_empty());
}

#[test]
fn action_network_entry_parses_grants_exactly() {
    assert_eq!(action_network_entry("spawn"), None);
    assert_eq!(action_network_entry("Network:x.example.com:1"), None);
    assert_eq!(
        action_network_entry("network:gmail.googleapis.com:443"),
        Some(Ok(Grant::parse("gmail.googleapis.com:443").unwrap()))
    );
    assert_eq!(
        action_network_entry("network:[2001:db8::1]:443"),
        Some(Ok(Grant::parse("[2001:db8::1]:443").unwrap()))
    );
    for malformed in [
        "network:",
        "network:gmail.googleapis.com",
        "network:Gmail.googleapis.com:443",
        "network:https://gmail.googleapis.com:443",
        "network:*.googleapis.com:443",
        "network:127.0.0.1:0",
        "network: 127.0.0.1:80",
    ] {
        assert!(
            matches!(
                action_network_entry(malformed),
                Some(Err(ActionEntryError::Grant(_)))
            ),
            "{malformed}"
        );
    }
    let long = format!("network:{}.com:443", "a".repeat(300));
    assert_eq!(
        action_network_entry(&long),
        Some(Err(ActionEntryError::TooLong(308)))
    );
}
