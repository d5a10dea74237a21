//! spawnd's own diagnostics: `tracing` events to stderr, warnings by default,
//! debug detail with `--verbose` (or `RUST_LOG`). `spawnd serve` also logs
//! the daemon's own life at info (start, each reload and what it changed, a
//! refused reload, drain): an operator sees what it serves without
//! `--verbose`, and each spawn stays in the audit log, not here. Every line
//! starts with `spawnd:` so it can be told apart from a child's streamed
//! stderr. Events name connectors, operations, reasons, hashes and timings
//! — never argument or env values.

use std::io::{IsTerminal, Write};

use tracing_subscriber::EnvFilter;

/// Writes each formatted event to stderr behind the `spawnd:` prefix.
struct PrefixedStderr;

impl Write for PrefixedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut line = b"spawnd: ".to_vec();
        line.extend_from_slice(buf);
        std::io::stderr().lock().write_all(&line)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Installs the stderr subscriber once per process: human lines behind
/// `spawnd:`, or JSON objects (one per line) for a log pipeline. `serving`:
/// this process is `spawnd serve`, whose daemon events are shown at info.
pub(super) fn init(verbose: bool, json: bool, serving: bool) {
    let default = match (verbose, serving) {
        (true, _) => "spawnd=debug",
        (false, true) => "spawnd=warn,spawnd::daemon=info",
        (false, false) => "spawnd=warn",
    };
    let filter = EnvFilter::try_from_env("RUST_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let _ = if json {
        builder.json().with_writer(std::io::stderr).try_init()
    } else {
        builder
            .with_writer(|| PrefixedStderr)
            .with_ansi(std::io::stderr().is_terminal())
            .without_time()
            .try_init()
    };
}
