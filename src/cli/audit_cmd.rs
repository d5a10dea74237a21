//! `spawnd audit verify`.

use std::path::Path;

use super::args::Cli;
use super::context::load_config;
use super::output::{Failure, Success};
use crate::audit::verify as verify_chain;

/// Verifies a log: exit 0 intact (warnings allowed), 1 tampered.
pub fn verify_log(file: &Path) -> Result<Success, Failure> {
    let report = verify_chain(file).map_err(|e| {
        Failure::new(
            if e.kind() == std::io::ErrorKind::NotFound {
                6
            } else {
                4
            },
            format!("cannot read audit log {}: {e}", file.display()),
        )
    })?;
    let mut text = match &report.tamper {
        None => format!(
            "{}: intact, {} records (last seq {})",
            file.display(),
            report.records,
            report.last_seq
        ),
        Some(t) => format!(
            "{}: TAMPERED at seq {}{}: {}",
            file.display(),
            t.seq,
            if t.line > 0 {
                format!(" (line {})", t.line)
            } else {
                String::new()
            },
            t.reason
        ),
    };
    for w in &report.warnings {
        text.push_str(&format!("\nwarning: {w}"));
    }
    let tampered = report.tamper.is_some();
    let mut data = serde_json::to_value(&report).unwrap_or_default();
    data["file"] = serde_json::json!(file);
    data["intact"] = serde_json::json!(!tampered);
    let mut s = Success::new(data, text);
    if tampered {
        s.exit = 1;
        s.keep_ok = true;
    }
    Ok(s)
}

/// `spawnd audit verify [FILE]` (default: the config's audit path).
pub fn verify(cli: &Cli, file: Option<&Path>) -> Result<Success, Failure> {
    match file {
        Some(f) => verify_log(f),
        None => {
            let config = load_config(cli)?;
            let path = config.audit.path.ok_or_else(|| {
                Failure::config("no audit location: give FILE or set [audit] path")
            })?;
            verify_log(&path)
        }
    }
}
