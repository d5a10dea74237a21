//! spawnd-launch-checks: the integration suites that launch sandboxes from
//! their own process, which must then be single-threaded (`sandbox::launch`
//! refuses otherwise). libtest runs every test on a thread of its own, so
//! the integration binary never is; its tests `netns::…` and
//! `learn_network::…` run this program instead:
//!
//! ```text
//! spawnd-launch-checks netns           # integration/netns.rs
//! spawnd-launch-checks learn_network   # integration/learn_network.rs
//! ```
//!
//! Each prints an `ok: …` line per check and exits 0, or panics (exit 101).
//! Both re-execute this program (as nobody, or in the world's network
//! namespace) with the same argument. Exit 2 on a usage error.

#[path = "../learn_network.rs"]
mod learn_network;
#[path = "../netns.rs"]
mod netns;
#[path = "../world.rs"]
mod world;

use std::process::ExitCode;

const USAGE: &str = "usage: spawnd-launch-checks netns | learn_network";

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        Some("netns") => netns::main(),
        Some("learn_network") => learn_network::main(),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}
