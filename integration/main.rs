//! The integration tests, one binary: each suite is a module (a file here,
//! or in tests/), and its tests are named after it, so
//! `cargo test --test integration escape::` runs the escape suite. One
//! binary links the crate once, where a binary per suite linked it once
//! each.
//!
//! The suites share one process: one test world (`harness::world`), with
//! each daemon, scratch directory and network namespace under a name of
//! its own, and libtest's threads running tests of every suite side by
//! side.

// The helpers the suites share.
mod daemon_harness;
#[path = "sandbox/harness.rs"]
mod harness;
mod world;

// The suites.
mod audit;
mod benign;
mod ci_recipes;
mod cli;
mod clients;
mod daemon;
mod daemon_protocol;
mod daemon_spawner;
mod escape;
mod faults;
mod host_authority;
mod host_kernel;
mod idmap;
mod learn;
mod learn_corpus;
mod limits;
mod network;
mod network_clients;
mod network_escape;
mod provenance;

// The suites in tests/: the source tree, the docs and the packaging.
#[path = "../tests/apparmor_profile.rs"]
mod apparmor_profile;
#[path = "../tests/docs_in_sync.rs"]
mod docs_in_sync;
#[path = "../tests/fuzz_regressions.rs"]
mod fuzz_regressions;
#[path = "../tests/layering.rs"]
mod layering;

/// integration/netns.rs: a sandbox's network below the exec pipeline. Its
/// sandboxes are launched from a single-threaded process,
/// `spawnd-launch-checks` (integration/launch_checks/).
mod netns {
    #[test]
    fn grants_and_learning_as_root_through_a_spare_and_as_nobody() {
        crate::launch_checks("netns");
    }
}

/// integration/learn_network.rs: `spawnd learn`'s network end to end through
/// the library, from a single-threaded process in a world network namespace
/// (`spawnd-launch-checks`, integration/launch_checks/).
mod learn_network {
    #[test]
    fn record_and_forward_list_the_pairs_and_audit_the_learning() {
        crate::launch_checks("learn_network");
    }
}

/// Runs `spawnd-launch-checks suite`, its output passed on, and asserts it
/// succeeded.
fn launch_checks(suite: &str) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_spawnd-launch-checks"))
        .arg(suite)
        .output()
        .unwrap();
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "spawnd-launch-checks {suite}: {}",
        out.status
    );
}
