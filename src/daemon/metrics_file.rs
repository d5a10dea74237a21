//! `[server] metrics_file`: the process's metrics ([`crate::metrics`]) in
//! Prometheus's text format, for the node exporter's textfile collector.
//! The file is replaced whole (a temporary file beside it, renamed over
//! it), so the collector never reads half of one.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Writes the metrics to `path` every `every`, until the task is dropped.
pub(super) async fn write_every(path: PathBuf, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let at = path.clone();
        let _ = tokio::task::spawn_blocking(move || write_logged(&at)).await;
    }
}

/// Writes the metrics to `path`; a failure is logged, never fatal: a
/// metrics file the daemon cannot write stops no spawn.
pub(super) fn write_logged(path: &Path) {
    if let Err(e) = write(path) {
        tracing::warn!(file = %path.display(), error = %e, "the metrics file could not be written");
    }
}

fn write(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut file = tempfile::Builder::new()
        .prefix(".spawnd-metrics")
        .tempfile_in(dir)?;
    file.write_all(crate::metrics::render().as_bytes())?;
    // Readable by the collector, which runs as another user.
    std::fs::set_permissions(
        file.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}
