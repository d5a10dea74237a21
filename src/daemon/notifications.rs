//! Notifications (`notify: true` on a spawn): the connection holding the
//! handle is sent `spawn_output {handle, which, offset, data_b64, skipped}`
//! as output arrives and, once, `spawn_exited {handle, status}`.
//!
//! A forwarder task per handle reads the handle's buffers, as
//! `spawn_output_read` does, at most [`CHUNK`] bytes a notification, and
//! waits for its turn in the connection's bounded queue: the output stays in
//! the handle's (bounded) buffers until it is sent, and a connection that
//! reads slowly gets later bytes with the count it missed, never a growing
//! queue. It stops when the handle leaves the connection or the
//! connection closes.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde_json::json;

use super::connection::Connection;
use super::handles::{Handle, MAX_WAIT};
use super::spawns;

/// The most output bytes one `spawn_output` carries.
pub(super) const CHUNK: usize = 64 << 10;

/// Sends `handle`'s output from stream offsets `from`, then its exit.
pub(super) async fn forward(
    conn: Arc<Connection>,
    name: String,
    handle: Arc<Handle>,
    from: [u64; 2],
) {
    let mut offsets = from;
    loop {
        if conn.is_closed() || !conn.handles().map.contains_key(&name) {
            return;
        }
        let mut sent_all = true;
        for (w, offset) in offsets.iter_mut().enumerate() {
            if handle.stream_end(w) <= *offset {
                continue;
            }
            // Read in its turn, so a slow connection holds no chunk of
            // output outside the handle's buffers.
            let sent = conn
                .send(|| {
                    let (data, skipped, _) = handle.read_at(w, *offset, CHUNK);
                    let at = *offset + skipped;
                    *offset = at + data.len() as u64;
                    sent_all &= data.len() < CHUNK;
                    notification(
                        "spawn_output",
                        json!({
                            "handle": name,
                            "which": w,
                            "offset": at,
                            "data_b64": base64::engine::general_purpose::STANDARD.encode(&data),
                            "skipped": skipped,
                        }),
                    )
                })
                .await;
            if !sent {
                return;
            }
        }
        if !sent_all {
            continue;
        }
        let ended = handle.finished();
        let caught_up = (0..2).all(|w| offsets[w] >= handle.stream_end(w));
        if ended && caught_up {
            conn.send(|| {
                notification(
                    "spawn_exited",
                    json!({"handle": name, "status": spawns::status_without_output(&handle)}),
                )
            })
            .await;
            return;
        }
        let [o0, o1] = offsets;
        tokio::select! {
            _ = handle.wait_change(MAX_WAIT, |s| {
                s.ended_at.is_some()
                    || s.past_cap[0].end(s.output[0].len()) > o0
                    || s.past_cap[1].end(s.output[1].len()) > o1
            }) => {}
            _ = conn.until_closed() => return,
        }
        // Output arriving in many small pieces is sent in fewer, larger
        // notifications.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A JSON-RPC notification line.
fn notification(method: &str, params: serde_json::Value) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string()
}
