//! `network` under `[capabilities.spawn]` and per operation: exact pairs,
//! every refusal at its line and column, an operation's list a subset of the
//! connector's, and warnings for literal grants of special addresses.

use super::tests::{good_spawn, load, ENV, LOG_OP, PROGRAMS};

fn with_network(connector: &str, op_extra: &str) -> String {
    good_spawn(
        PROGRAMS,
        &format!("{LOG_OP}{op_extra}"),
        ENV,
        &format!("network = {connector}"),
    )
}

#[test]
fn grants_load_exactly_and_an_operation_without_a_list_gets_the_connectors() {
    let m = load(&with_network(
        r#"["api.github.com:443", "10.0.0.5:5432", "[2001:db8::1]:443"]"#,
        "",
    ))
    .unwrap();
    let spawn = m.spawn.unwrap();
    let shown: Vec<String> = spawn.network.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        ["api.github.com:443", "10.0.0.5:5432", "[2001:db8::1]:443"]
    );
    assert_eq!(spawn.operations["log"].network, spawn.network);
}

#[test]
fn no_network_key_means_no_grants() {
    let m = load(&good_spawn(PROGRAMS, LOG_OP, ENV, "")).unwrap();
    let spawn = m.spawn.unwrap();
    assert!(spawn.network.is_empty() && spawn.operations["log"].network.is_empty());
}

#[test]
fn a_wrong_entry_is_refused_at_its_column_never_widened() {
    for (entry, needle) in [
        ("*.github.com:443", "*"),
        ("https://api.github.com:443", "https"),
        ("api.github.com", "port"),
        ("api.github.com:0", "port"),
        ("api.github.com:65536", "port"),
        ("api.github.com:443/path", "path"),
        ("127.1:80", "127.1"),
        ("API.github.com:443", "api.github.com:443"),
    ] {
        let text = with_network(&format!("[\"{entry}\"]"), "");
        let e = load(&text).expect_err(entry);
        let p = &e.problems[0];
        assert_eq!(p.key, "capabilities.spawn.network[0]", "{entry}: {e}");
        let line = text
            .lines()
            .position(|l| l.starts_with("network ="))
            .unwrap()
            + 1;
        assert_eq!(p.line, line, "{entry}: {e}");
        // The column falls inside the quoted entry, or just after it where
        // something is missing.
        let opening = "network = [\"".len();
        assert!(
            p.column > opening && p.column <= opening + entry.chars().count() + 1,
            "{entry}: column {} ({e})",
            p.column
        );
        assert!(e.mentions(needle), "{entry}: {needle:?} not in {e}");
    }
}

#[test]
fn an_entry_listed_twice_is_refused() {
    let e = load(&with_network(r#"["a.example:443", "a.example:443"]"#, "")).unwrap_err();
    assert!(e.mentions("listed twice"), "{e}");
}

#[test]
fn an_operations_list_narrows_the_connectors_and_may_not_widen_it() {
    let m = load(&with_network(
        r#"["a.example:443", "b.example:22"]"#,
        "network = [\"b.example:22\"]\n",
    ))
    .unwrap();
    let op = &m.spawn.as_ref().unwrap().operations["log"];
    assert_eq!(op.network.len(), 1);
    assert_eq!(op.network[0].to_string(), "b.example:22");
    let none = load(&with_network(r#"["a.example:443"]"#, "network = []\n")).unwrap();
    assert!(none.spawn.unwrap().operations["log"].network.is_empty());
    let e = load(&with_network(
        r#"["a.example:443"]"#,
        "network = [\"a.example:8443\"]\n",
    ))
    .unwrap_err();
    assert!(e.mentions("not in capabilities.spawn.network"), "{e}");
    assert_eq!(
        e.problems[0].key,
        "capabilities.spawn.operations.log.network"
    );
}

#[test]
fn literal_grants_of_special_addresses_load_with_a_warning() {
    let m = load(&with_network(
        r#"["127.0.0.1:8080", "10.0.0.5:5432", "93.184.216.34:443"]"#,
        "",
    ))
    .unwrap();
    let warned: Vec<&str> = m
        .warnings
        .iter()
        .filter(|w| w.key == "capabilities.spawn.network")
        .map(|w| w.message.as_str())
        .collect();
    assert_eq!(warned.len(), 2, "{warned:?}");
    assert!(warned[0].contains("127.0.0.1:8080") && warned[0].contains("loopback"));
    assert!(warned[1].contains("10.0.0.5:5432") && warned[1].contains("private"));
}

#[test]
fn a_literal_grant_of_a_metadata_or_link_local_address_is_refused() {
    for entry in [
        "169.254.169.254:80",
        "169.254.170.2:80",
        "[fe80::1]:80",
        "168.63.129.16:80",
    ] {
        let e = load(&with_network(&format!("[\"{entry}\"]"), "")).expect_err(entry);
        assert!(e.mentions("never dials"), "{entry}: {e}");
    }
}

#[test]
fn a_grant_of_port_53_is_refused_the_sandboxs_dns_is_spawnds() {
    let e = load(&with_network(r#"["dns.example.com:53"]"#, "")).unwrap_err();
    assert!(e.mentions("port 53"), "{e}");
}
