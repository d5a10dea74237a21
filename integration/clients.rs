//! The official clients (`clients/python`, `clients/go`) run their own test
//! suites against a real `spawnd serve`: each suite is told the socket and
//! the test connector in `SPAWND_SOCKET` and `SPAWND_CONNECTOR`, and the
//! connector's operation `sh` runs its `script` argument with bash. A second
//! daemon, whose `[server] idle_timeout_ms` is short, is at
//! `SPAWND_IDLE_SOCKET`: the suites see it close an idle connection and
//! their client connect again.

use crate::daemon_harness;

use std::path::Path;
use std::process::Command;

use daemon_harness::{Daemon, CONNECTOR};

/// Runs `clients/<name>/run-tests` against a fresh daemon and fails with
/// its output unless it passes.
fn client_suite_passes(name: &str) {
    let d = Daemon::start(&format!("client-{name}"), "");
    let idle = Daemon::start(&format!("client-{name}-idle"), "idle_timeout_ms = 300\n");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("clients")
        .join(name);
    let out = Command::new(dir.join("run-tests"))
        .current_dir(&dir)
        .env("SPAWND_SOCKET", &d.socket)
        .env("SPAWND_CONNECTOR", CONNECTOR)
        .env("SPAWND_IDLE_SOCKET", &idle.socket)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "clients/{name}/run-tests failed\n--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_python_client_passes_its_suite() {
    client_suite_passes("python");
}

#[test]
fn the_go_client_passes_its_suite() {
    client_suite_passes("go");
}
