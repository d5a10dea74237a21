//! Audit append throughput (not a timed test): durable appends per second by
//! one writer and by 8 concurrent writers sharing one log. Each append returns
//! only after its record is on disk; with group commit (`audit::group_sync`)
//! one writer's `fdatasync` serves every record written before it began, so
//! throughput should rise with concurrency.
//!
//! Run: `cargo bench --bench audit`.

use std::time::Instant;

use serde_json::json;
use spawnd::internals::audit::{AuditLog, Kind};

fn appends_per_second(writers: usize, per_writer: usize) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    AuditLog::open(&path).expect("open");
    let started = Instant::now();
    std::thread::scope(|s| {
        for w in 0..writers {
            let path = path.clone();
            s.spawn(move || {
                let log = AuditLog::open(&path).expect("open");
                for i in 0..per_writer {
                    let body = json!({"op": format!("w{w}-{i}"), "argv_shape": "true"})
                        .as_object()
                        .cloned()
                        .unwrap_or_default();
                    log.append(Kind::Decision, None, body).expect("append");
                }
            });
        }
    });
    let secs = started.elapsed().as_secs_f64();
    let verified = spawnd::internals::audit::verify(&path, None).expect("verify");
    assert_eq!(
        (verified.records as usize, verified.tamper),
        (writers * per_writer, None)
    );
    (writers * per_writer) as f64 / secs
}

fn main() {
    let one = appends_per_second(1, 400);
    let eight = appends_per_second(8, 100);
    let table = format!("| writers | durable appends/s | vs one writer |\n|---|---|---|\n| 1 | {one:.0} | 1.00× |\n| 8 | {eight:.0} | {:.2}× |\n", eight / one);
    println!("{table}");
}
