//! A spawn's network grants from the pipeline's side: the listeners its
//! sandbox made (docs/sandbox.md, "Network grants") are served by the relay
//! ([`crate::relay`]) on a thread of its own, with a runtime of its own, from
//! the program's release until its sandbox is gone; then everything the relay
//! reported becomes the result's `network` object (and so the exit record's).
//! A thread per spawn with grants keeps `spawnd run` and the daemon alike,
//! and costs nothing for a spawn without grants.

use std::sync::Arc;
use std::thread::JoinHandle;

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::outcome::Failure;
use crate::config::NetworkConfig;
use crate::egress::address_policy::AddressPolicy;
use crate::egress::fake_pool::GrantedNames;
use crate::egress::grant::Grant;
use crate::relay::{serve, ConnectionRecord, NetEvent, RelayConfig, Summary, SystemResolver};
use crate::sandbox::network::Listeners;

/// Connection records kept for the result; more are counted, not listed.
const MAX_LISTED_CONNECTIONS: usize = 256;

/// The relay serving one spawn.
pub(super) struct Egress {
    stop: CancellationToken,
    thread: Option<JoinHandle<Reported>>,
}

/// An egress dropped unfinished (its spawn failed on the way) is stopped
/// all the same: its listeners and connections close.
impl Drop for Egress {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What the relay reported for one spawn.
#[derive(Default)]
pub(super) struct Reported {
    connections: Vec<ConnectionRecord>,
    unlisted: u64,
    dns_refused: Vec<(String, String)>,
    dns_refused_more: u64,
    summary: Option<Summary>,
    error: Option<String>,
}

/// Starts the relay for `grants` on `listeners`.
pub(super) fn start(
    grants: &[Grant],
    network: &NetworkConfig,
    listeners: Listeners,
) -> Result<Egress, Failure> {
    // What `serve` checks before it accepts, checked here, before the
    // program's release.
    GrantedNames::new(grants)
        .map_err(|e| Failure::sandbox_unavailable(format!("the network relay: {e}")))?;
    let stop = CancellationToken::new();
    let grants = grants.to_vec();
    let config = RelayConfig {
        policy: AddressPolicy::new(network.allow_cidrs.clone(), network.deny_cidrs.clone()),
        ..RelayConfig::default()
    };
    let stopping = stop.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::sandbox_unavailable(format!("the network relay's runtime: {e}")))?;
    let thread = std::thread::Builder::new()
        .name("spawnd-relay".into())
        .spawn(move || runtime.block_on(relay(grants, config, listeners, stopping)))
        .map_err(|e| Failure::sandbox_unavailable(format!("the network relay's thread: {e}")))?;
    Ok(Egress {
        stop,
        thread: Some(thread),
    })
}

impl Egress {
    /// Stops the relay (every listener and connection closes) and gives
    /// back what it reported.
    pub(super) fn finish(mut self) -> Reported {
        self.stop.cancel();
        let failed = || Reported {
            error: Some("the network relay panicked".into()),
            ..Reported::default()
        };
        match self.thread.take() {
            Some(thread) => thread.join().unwrap_or_else(|_| failed()),
            None => failed(),
        }
    }
}

/// Serves until stopped, collecting the relay's events as they come.
async fn relay(
    grants: Vec<Grant>,
    config: RelayConfig,
    listeners: Listeners,
    stop: CancellationToken,
) -> Reported {
    let (events, mut received) = mpsc::channel(1024);
    let serving = serve(
        &grants,
        config,
        listeners,
        Arc::new(SystemResolver),
        events,
        stop,
    );
    let collecting = async {
        let mut reported = Reported::default();
        while let Some(event) = received.recv().await {
            reported.take(event);
        }
        reported
    };
    let (served, mut reported) = tokio::join!(serving, collecting);
    if let Err(e) = served {
        reported.error = Some(e.to_string());
    }
    reported
}

impl Reported {
    fn take(&mut self, event: NetEvent) {
        match event {
            NetEvent::Connection(record) if self.connections.len() < MAX_LISTED_CONNECTIONS => {
                self.connections.push(record)
            }
            NetEvent::Connection(_) => self.unlisted += 1,
            NetEvent::DnsRefused { name, record_type } => {
                self.dns_refused.push((name, record_type.to_string()))
            }
            NetEvent::DnsRefusedMore { count } => self.dns_refused_more += count,
            NetEvent::Summary(summary) => self.summary = Some(summary),
        }
    }

    /// The result's `network` object: totals, each connection (allowed or
    /// refused, and why), and the names the DNS stub refused.
    pub(super) fn to_json(&self) -> Value {
        let summary = self.summary.unwrap_or_default();
        let connections: Vec<Value> = self.connections.iter().map(connection_json).collect();
        let dns_refused: Vec<Value> = self
            .dns_refused
            .iter()
            .map(|(name, kind)| json!({"name": name, "type": kind}))
            .collect();
        let mut v = json!({
            "connections": summary.connections,
            "refused": summary.refused,
            "bytes_up": summary.bytes_up,
            "bytes_down": summary.bytes_down,
            "listed": connections,
            "unlisted": self.unlisted + summary.dropped_events,
            "dns_refused": dns_refused,
            "dns_refused_more": self.dns_refused_more,
        });
        if let Some(e) = &self.error {
            v["error"] = json!(e);
        }
        v
    }
}

fn connection_json(c: &ConnectionRecord) -> Value {
    json!({
        "host": c.host.to_string(),
        "port": c.port,
        "dialed": c.dialed.map(|a| a.to_string()),
        "allowed": c.allowed,
        "reason": c.reason,
        "denial": c.denial.map(|d| d.to_string()),
        "sni": c.sni,
        "error": c.error,
        "bytes_up": c.bytes_up,
        "bytes_down": c.bytes_down,
        "duration_ms": c.duration_ms,
    })
}
