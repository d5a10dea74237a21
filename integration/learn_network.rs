//! `spawnd learn`'s network, end to end through the library: curl in a
//! full sandbox, run by [`spawnd::internals::pipeline::run`] with
//! `Spawn::network_learning` set (what the `learn` command does), from
//! a manifest that grants no network at all. The DNS server and this
//! binary's spawning side are in a world network namespace, the servers
//! on its internet (`world.rs`): the test re-executes itself in the world
//! through `ip netns exec`, as a single-threaded process that may clone
//! sandboxes, and reads the result it prints.
//!
//! Forward: curl reaches a name nobody granted on two ports, and the
//! result lists both pairs. Record: curl's connections are refused, the
//! servers accept nothing, and the world's DNS server is asked nothing
//! (spawnd resolved no name), yet the result lists the same pairs. Both
//! runs' audit records say the network was learned. As root; run by
//! `spawnd-launch-checks learn_network` (integration/launch_checks/), which
//! the integration binary's test `learn_network::…` starts.

use crate::world;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use spawnd::internals::config::Config;
use spawnd::internals::egress::learning::Learning;
use spawnd::internals::manifest::{parse_manifest, LoadOptions};
use spawnd::internals::pipeline::{self, Prepared, Spawn};
use spawnd::internals::policy::{Access, Caller, Request};
use spawnd::internals::sandbox::launch::StdinSource;
use world::{Run, TcpServer, World, WORLD_CIDR, WORLD_IP};

/// Set in the re-executed child: `record` or `forward`.
const CHILD: &str = "SPAWND_LEARN_NETWORK_CHILD";

const MANIFEST: &str = r#"[connector]
name = "local://test/learn"
version = "1.0.0"

[capabilities.spawn]
programs = [{ path = "/usr/bin/curl" }]

[capabilities.spawn.operations.get]
argv = "curl -sS --max-time 60 {first} {second}"

[capabilities.spawn.limits]
wall_time_ms = 120000
"#;

const FIRST: &str = "http://api.test:8080/";
const SECOND: &str = "http://api.test:8081/";

/// The child: one learning spawn of the manifest's `get`, its result
/// printed as `{"data": …}`.
fn learn_in_this_process(mode: &str, config: &Path, manifest: &Path) {
    let config = Config::load(config, None).expect("the operator config");
    let text = std::fs::read_to_string(manifest).unwrap();
    let options = LoadOptions {
        max_wall_time_ms: config.sandbox.max_wall_time_ms,
    };
    let manifest = parse_manifest(&manifest.display().to_string(), &text, options).unwrap();
    let prepared = Prepared {
        config: std::sync::Arc::new(config),
        manifest: manifest.into(),
        caller: Caller {
            uid: nix::unistd::getuid().as_raw(),
            gid: nix::unistd::getgid().as_raw(),
            pid: Some(std::process::id()),
            home: PathBuf::from("/root"),
            workspace: None,
            other_user_namespace: false,
            label: None,
            origin: std::sync::Arc::new(spawnd::internals::origin::Origin::of_command()),
        },
        request: Request::op("get", &[("first", FIRST), ("second", SECOND)]),
    };
    let learning = match mode {
        "record" => Learning::Record,
        _ => Learning::Forward,
    };
    let result = pipeline::run(Spawn {
        prepared: &prepared,
        access: &Access::Local,
        stdin: StdinSource::Null,
        pump: None,
        timeout_ms: None,
        live: None,
        json: true,
        spawner: None,
        on_started: None,
        signals_end_the_run: false,
        on_notice: &|_| {},
        trace: false,
        ended_by: None,
        network_learning: Some(learning),
        shared_connections: None,
    });
    match result {
        Ok(concluded) => println!("{}", serde_json::json!({ "data": concluded.result })),
        Err(failure) => panic!("the learning spawn failed: {}", failure.message),
    }
}

/// Runs this binary in the world as the child for `mode`.
fn learn_in_world(world: &World, mode: &str, config: &Path, manifest: &Path) -> Run {
    let mut command = Command::new("ip");
    command
        .args(["netns", "exec", world.name()])
        .arg(std::env::current_exe().unwrap())
        .arg("learn_network")
        .env(CHILD, mode)
        .env("SPAWND_LEARN_NETWORK_CONFIG", config)
        .env("SPAWND_LEARN_NETWORK_MANIFEST", manifest);
    Run::of(&mut command)
}

/// The audit log's records of `kind`.
fn records(audit: &Path, kind: &str) -> Vec<Value> {
    std::fs::read_to_string(audit)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|record| record["kind"] == kind)
        .collect()
}

fn check_forward(world: &World, config: &Path, manifest: &Path, servers: &[TcpServer; 2]) {
    let [first, second] = servers;
    let run = learn_in_world(world, "forward", config, manifest);
    let data = &run.json["data"];
    assert_eq!(data["exit_code"], 0, "{data}");
    assert_eq!(run.stdout(), "one\ntwo\n", "{data}");
    assert_eq!((first.accepted(), second.accepted()), (1, 1), "{data}");
    let network = run.network();
    assert_eq!(network["learning"], "forward", "{network}");
    assert_eq!(
        network["contacted"],
        serde_json::json!(["api.test:8080", "api.test:8081"]),
        "{network}"
    );
    assert_eq!(network["contacted_unlisted"], 0, "{network}");
    for c in run.connections() {
        assert_eq!(c["allowed"], true, "{c}");
        assert_eq!(c["host"], "api.test", "{c}");
    }
}

fn check_record(world: &World, config: &Path, manifest: &Path, servers: &[TcpServer; 2]) {
    let run = learn_in_world(world, "record", config, manifest);
    let data = &run.json["data"];
    // curl's connections are reset ("Recv failure").
    assert_ne!(data["exit_code"], 0, "{data}");
    assert_eq!((servers[0].accepted(), servers[1].accepted()), (0, 0));
    // spawnd resolved nothing: the world's DNS server heard no question.
    assert!(world.dns_queries().is_empty(), "{:?}", world.dns_queries());
    let network = run.network();
    assert_eq!(network["learning"], "record", "{network}");
    assert_eq!(
        network["contacted"],
        serde_json::json!(["api.test:8080", "api.test:8081"]),
        "{network}"
    );
    for c in run.connections() {
        assert_eq!(c["reason"], "record_only", "{c}");
        assert_eq!(c["dialed"], Value::Null, "{c}");
    }
}

pub fn main() {
    if let Ok(mode) = std::env::var(CHILD) {
        let path = |key: &str| PathBuf::from(std::env::var_os(key).unwrap());
        learn_in_this_process(
            &mode,
            &path("SPAWND_LEARN_NETWORK_CONFIG"),
            &path("SPAWND_LEARN_NETWORK_MANIFEST"),
        );
        return;
    }
    let Some(world) = World::new() else { return };
    let config = world.operator_config(
        "spawnd",
        &format!("[network]\nallow_cidrs = [\"{WORLD_CIDR}\"]\n"),
    );
    let audit = world.path("spawnd.audit.jsonl");
    let manifest = world.path("learn.toml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    let servers = [
        world.http_server(8080, "one\n"),
        world.http_server(8081, "two\n"),
    ];
    // Record first: the world's DNS server has then heard nothing at all.
    check_record(&world, &config, &manifest, &servers);
    println!("ok: record refuses, resolves and dials nothing, and lists the pairs");
    world.map("api.test", &[WORLD_IP.parse().unwrap()]);
    check_forward(&world, &config, &manifest, &servers);
    println!("ok: forward relays any port of an ungranted name and lists the pairs");
    let decisions: Vec<Value> = records(&audit, "decision")
        .into_iter()
        .map(|d| d["network_learning"].clone())
        .collect();
    assert_eq!(
        decisions,
        [serde_json::json!("record"), serde_json::json!("forward")]
    );
    let net = records(&audit, "net");
    assert!(net.iter().any(|r| r["reason"] == "record_only"), "{net:?}");
    world::run_checked(
        Command::new(world::spawnd_binary())
            .args(["audit", "verify"])
            .arg(&audit),
    );
    println!("ok: the decision records say the network was learned, in a chain that verifies");
}
