//! A live copy of every record to the host's log service (`[audit]
//! forward`): `syslog` sends each record's JSON line as one datagram to
//! `/dev/log` (facility authpriv, the security/authorization messages);
//! `journald` sends it to journald's native socket with fields a journal
//! query can filter on (`SPAWND_KIND`, `SPAWND_SEQ`, `SPAWND_AUDIT_ID`,
//! `SPAWND_CONNECTOR`, `SPAWND_REASON`) and the record whole in
//! `SPAWND_RECORD`.
//!
//! The file stays the system of record: a record is forwarded once it is in
//! the file, while the chain's lock is held (so forwarded records come in
//! the chain's order), without waiting — a log service that is down or
//! full drops the copy, which is counted and reported in spawnd's own log;
//! `spawnd audit export --follow` is the complete feed. The socket is a
//! plain datagram socket: sending one needs no crate.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};

use crate::config::LogService;

/// The socket of a service when the config names none.
pub(crate) fn default_socket(service: LogService) -> &'static Path {
    match service {
        LogService::Syslog => Path::new("/dev/log"),
        LogService::Journald => Path::new("/run/systemd/journal/socket"),
    }
}

/// Sends copies of records to one service.
#[derive(Debug)]
pub struct Forwarder {
    service: LogService,
    socket_path: PathBuf,
    socket: Option<UnixDatagram>,
    dropped: AtomicU64,
}

/// syslog's authpriv facility (10), shifted as a priority value wants it.
const AUTHPRIV: u8 = 10 << 3;

impl Forwarder {
    /// A forwarder to `service` at `socket` (its default when `None`).
    pub fn new(service: LogService, socket: Option<&Path>) -> Forwarder {
        let socket_path =
            socket.map_or_else(|| default_socket(service).to_path_buf(), Path::to_path_buf);
        let socket = UnixDatagram::unbound()
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .ok();
        Forwarder {
            service,
            socket_path,
            socket,
            dropped: AtomicU64::new(0),
        }
    }

    /// Sends a copy of `record`, whose line in the file is `line`.
    pub fn send(&self, record: &Map<String, Value>, line: &[u8]) {
        let datagram = match self.service {
            LogService::Syslog => syslog_datagram(record, line),
            LogService::Journald => journald_datagram(record, line),
        };
        let sent = self
            .socket
            .as_ref()
            .ok_or_else(|| std::io::Error::other("no socket"))
            .and_then(|s| s.send_to(&datagram, &self.socket_path));
        if let Err(e) = sent {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // The first loss, then every thousandth: a service that is down
            // must not flood spawnd's own log.
            if dropped == 1 || dropped.is_multiple_of(1000) {
                tracing::warn!(socket = %self.socket_path.display(), error = %e, dropped, "audit forward: a record's copy was dropped (the audit file has it)");
            }
        }
    }
}

fn text<'a>(record: &'a Map<String, Value>, key: &str) -> &'a str {
    record.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The syslog severity of a record: notice for a refusal, warning for a
/// note about the log itself, info otherwise.
fn severity(record: &Map<String, Value>) -> u8 {
    match text(record, "kind") {
        "denial" => 5,
        "note" => 4,
        _ => 6,
    }
}

/// `<PRI>spawnd[PID]: LINE`, the form `/dev/log` readers (rsyslog,
/// syslog-ng, journald) all take; the line without its newline.
fn syslog_datagram(record: &Map<String, Value>, line: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "<{}>spawnd[{}]: ",
        AUTHPRIV + severity(record),
        std::process::id()
    )
    .into_bytes();
    out.extend_from_slice(line.strip_suffix(b"\n").unwrap_or(line));
    out
}

/// journald's native datagram: `FIELD=value` lines. Every value here is
/// one line (the record's JSON escapes its newlines; a caller-chosen text
/// such as a connector name could hold one, so those are sent in the
/// protocol's length-prefixed form).
fn journald_datagram(record: &Map<String, Value>, line: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len() + 256);
    let mut field = |name: &str, value: &[u8]| {
        out.extend_from_slice(name.as_bytes());
        if value.contains(&b'\n') {
            out.push(b'\n');
            out.extend_from_slice(&(value.len() as u64).to_le_bytes());
        } else {
            out.push(b'=');
        }
        out.extend_from_slice(value);
        out.push(b'\n');
    };
    let kind = text(record, "kind");
    let seq = record.get("seq").and_then(Value::as_u64).unwrap_or(0);
    let message = format!(
        "spawnd audit {kind} #{seq} {} {}{}",
        text(record, "connector"),
        text(record, "op"),
        match text(record, "reason") {
            "" => String::new(),
            reason => format!(" ({reason})"),
        }
    );
    field("MESSAGE", message.as_bytes());
    field("PRIORITY", severity(record).to_string().as_bytes());
    field("SYSLOG_FACILITY", b"10");
    field("SYSLOG_IDENTIFIER", b"spawnd");
    field("SPAWND_KIND", kind.as_bytes());
    field("SPAWND_SEQ", seq.to_string().as_bytes());
    field("SPAWND_AUDIT_ID", text(record, "audit_id").as_bytes());
    for (name, key) in [
        ("SPAWND_CONNECTOR", "connector"),
        ("SPAWND_REASON", "reason"),
    ] {
        if !text(record, key).is_empty() {
            field(name, text(record, key).as_bytes());
        }
    }
    field("SPAWND_RECORD", line.strip_suffix(b"\n").unwrap_or(line));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record() -> Map<String, Value> {
        json!({"kind": "denial", "seq": 7, "audit_id": "ab", "connector": "local://a/b\nc", "op": "x", "reason": "arg_unknown"})
            .as_object()
            .cloned()
            .unwrap()
    }

    #[test]
    fn a_syslog_datagram_is_the_line_behind_authpriv_and_the_severity() {
        let d = syslog_datagram(&record(), b"{\"a\":1}\n");
        let text = String::from_utf8(d).unwrap();
        assert!(text.starts_with("<85>spawnd["), "{text}");
        assert!(text.ends_with("]: {\"a\":1}"), "{text}");
    }

    #[test]
    fn a_journald_datagram_keeps_a_value_with_a_newline_length_prefixed() {
        let d = journald_datagram(&record(), b"{\"a\":1}\n");
        let needle = b"SPAWND_CONNECTOR\n";
        let at = d.windows(needle.len()).position(|w| w == needle).unwrap() + needle.len();
        let len = u64::from_le_bytes(d[at..at + 8].try_into().unwrap()) as usize;
        assert_eq!(&d[at + 8..at + 8 + len], b"local://a/b\nc");
        let text = String::from_utf8_lossy(&d);
        assert!(text.contains("SPAWND_SEQ=7\n"), "{text}");
        assert!(text.contains("PRIORITY=5\n"), "{text}");
        assert!(text.ends_with("SPAWND_RECORD={\"a\":1}\n"), "{text}");
    }
}
