//! spawnd's own diagnostics: `tracing` events to stderr, warnings by default,
//! debug detail with `--verbose` (or `RUST_LOG`). Events name connectors,
//! operations, reasons and hashes — never argument or env values.

use tracing_subscriber::EnvFilter;

/// Installs the stderr subscriber once per process.
pub fn init(verbose: bool) {
    let default = if verbose {
        "spawnd=debug"
    } else {
        "spawnd=warn"
    };
    let filter = EnvFilter::try_from_env("RUST_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}
