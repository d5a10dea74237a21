//! A spawn's network grants from the pipeline's side: the listeners its
//! sandbox made (docs/sandbox.md, "Network grants") are served by the relay
//! ([`crate::relay`]) on a thread of its own, with a runtime of its own, from
//! the program's release until its sandbox is gone. What the relay reports
//! goes into the audit chain as it comes, one `net` record per connection
//! that reached its server, per first refusal of a kind and per refused DNS
//! name (the relay counts repeats, so a program cannot flood the log), and
//! at the end becomes the result's `network` object, whose totals and
//! refusal counts the exit record carries. The records are written in
//! batches, off the relay's thread, and made durable before the exit
//! record; if the log fails, the relay stops at once (every listener and
//! connection closes) and the result says why.
//! A thread per spawn with grants keeps `spawnd run` and the daemon alike,
//! and costs nothing for a spawn without grants.
//! A learning spawn (`spawnd learn`, [`SpawnPlan::network_learning`]) is
//! served the same way by a learning relay, and its `network` object also
//! says how it learned and lists the `host:port` pairs the program
//! contacted (`learning`, `contacted`, `contacted_unlisted`).

use std::sync::Arc;
use std::thread::JoinHandle;

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::audit::{events, AuditError, AuditLog, Kind};
use crate::config::NetworkConfig;
use crate::egress::address_policy::AddressPolicy;
use crate::egress::fake_pool::GrantedNames;
use crate::egress::grant::Grant;
use crate::egress::learning::Learning;
use crate::failure::Failure;
use crate::manifest::OnViolation;
use crate::plan::SpawnPlan;
use crate::relay::{
    serve, ConnectionRecord, DialedCount, NetEvent, RefusalCount, RelayConfig, RelayMode, Summary,
    SystemResolver,
};
use crate::sandbox::network::Listeners;
use crate::shares::Claim;
use crate::spawn_result::{
    Connection, DnsRefused, NetworkReport, RefusalsOfAKind, UnreportedConnections, Violation,
};
use crate::supervise::Killer;

/// Connection records kept for the result; more are counted, not listed
/// (every one is in the audit log).
const MAX_LISTED_CONNECTIONS: usize = 256;

/// Threads a spawn's relay may block on at once: name resolutions
/// (`getaddrinfo`) and audit writes. More wait their turn, within the
/// connect timeout for a resolution.
const RELAY_BLOCKING_THREADS: usize = 8;

/// Name resolutions a spawn's relay runs at once: fewer than its blocking
/// threads, so its audit records always find one.
const RESOLUTIONS_AT_ONCE: usize = 4;

/// Events written to the audit log under one lock and sync, at most.
const MAX_BATCH: usize = 256;

/// Where a spawn's `net` records go: its log, and what each record names.
pub(super) struct NetAudit {
    pub(super) log: AuditLog,
    pub(super) audit_id: String,
    pub(super) connector: String,
    pub(super) op: String,
}

impl NetAudit {
    /// Writes one record per event that has one, under one hold of the
    /// log's lock, then makes them durable with one sync.
    fn record(&self, events: &[NetEvent]) -> Result<(), AuditError> {
        let bodies: Vec<_> = events
            .iter()
            .filter_map(net_record)
            .map(|event| events::net(&self.connector, &self.op, event))
            .collect();
        if bodies.is_empty() {
            return Ok(());
        }
        self.log
            .write_batch(Kind::Net, Some(&self.audit_id), bodies)?
            .commit()
            .map(drop)
    }
}

/// The `net` record of an event, if it has one: a connection, or a DNS
/// name refused. Counts and totals go into the exit record instead.
fn net_record(event: &NetEvent) -> Option<Value> {
    match event {
        NetEvent::Connection(record) => serde_json::to_value(connection(record)).ok(),
        NetEvent::DnsRefused { name, record_type } => Some(json!({
            "protocol": "dns",
            "query": name,
            "type": record_type.to_string(),
            "allowed": false,
            "reason": crate::relay::reason::NOT_GRANTED,
        })),
        NetEvent::DnsRefusedMore { .. }
        | NetEvent::Contacted { .. }
        | NetEvent::Refusals { .. }
        | NetEvent::Unreported { .. }
        | NetEvent::Summary(_) => None,
    }
}

/// The relay serving one spawn.
pub(super) struct Egress {
    stop: CancellationToken,
    thread: Option<JoinHandle<Reported>>,
    /// Under `on_violation = "terminate"`: what kills the sandbox at the
    /// first refused egress.
    tripwire: Option<Arc<Tripwire>>,
}

/// `on_violation = "terminate"`: the first refused egress kills the
/// sandbox, once the pipeline has armed the tripwire with a way to (the
/// program is released just before; a refusal in between kills it as the
/// tripwire is armed).
#[derive(Default)]
pub(super) struct Tripwire {
    state: std::sync::Mutex<TripState>,
}

#[derive(Default)]
struct TripState {
    killer: Option<Killer>,
    tripped: bool,
}

impl Tripwire {
    fn lock(&self) -> std::sync::MutexGuard<'_, TripState> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// A refused egress: the sandbox is killed now, or as soon as armed.
    fn trip(&self) {
        let mut state = self.lock();
        state.tripped = true;
        if let Some(kill) = &state.killer {
            kill();
        }
    }

    /// Gives the tripwire its way to kill the sandbox.
    fn arm(&self, killer: Killer) {
        let mut state = self.lock();
        if state.tripped {
            killer();
        }
        state.killer = Some(killer);
    }
}

/// Whether spawnd refusing `event` is a violation of the spawn's grants
/// (a destination, name or server it was not granted; not a limit such as
/// its number of connections), and if so, what was requested.
fn violation_of(event: &NetEvent) -> Option<(String, &'static str)> {
    use crate::relay::reason;
    match event {
        NetEvent::Connection(r)
            if !r.allowed
                && !matches!(
                    r.reason,
                    Some(
                        reason::TOO_MANY_CONNECTIONS
                            | reason::RECORD_ONLY
                            | reason::UNRESOLVED
                            | reason::CONNECT_FAILED
                            | reason::CONNECT_TIMEOUT
                            | reason::HOST_ADDRESSES_UNREADABLE
                    )
                ) =>
        {
            let datagram = match r.transport {
                crate::relay::Transport::Tcp => "",
                crate::relay::Transport::Udp => "/udp",
                crate::relay::Transport::Other(_) => "/other",
            };
            Some((
                format!("network:{}:{}{datagram}", r.host, r.port),
                r.reason.unwrap_or(reason::NOT_GRANTED),
            ))
        }
        NetEvent::DnsRefused { name, .. } => Some((format!("network:{name}"), reason::NOT_GRANTED)),
        _ => None,
    }
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
    refusals: Vec<RefusalCount>,
    refusals_unreported: u64,
    unreported: Vec<DialedCount>,
    summary: Option<Summary>,
    error: Option<String>,
    /// Under `on_violation = "terminate"`, the refused egress that ended
    /// the sandbox.
    violation: Option<Violation>,
    /// A learning spawn's mode, and what its program contacted.
    learning: Option<Learning>,
    contacted: Vec<Grant>,
    contacted_unlisted: u64,
}

/// What a spawn's relay runs under: the operator's `[network]`, and where
/// its connections count among every spawn's of this process.
pub(super) struct RelayTerms<'a> {
    pub(super) network: &'a NetworkConfig,
    pub(super) shared_connections: Option<Claim>,
}

/// Starts the relay for `plan`'s grants (or, learning, for any name) on
/// `listeners`, its records going to `audit`; under `on_violation =
/// "terminate"` with a tripwire for [`Egress::arm`].
pub(super) fn start(
    plan: &SpawnPlan,
    terms: &RelayTerms<'_>,
    listeners: Listeners,
    audit: NetAudit,
) -> Result<Egress, Failure> {
    let network = terms.network;
    let mode = relay_mode(plan, network)?;
    let stop = CancellationToken::new();
    let config = RelayConfig {
        policy: AddressPolicy::new(network.allow_cidrs.clone(), network.deny_cidrs.clone()),
        connect_timeout: std::time::Duration::from_millis(network.connect_timeout_ms),
        idle_timeout: std::time::Duration::from_millis(network.idle_timeout_ms),
        max_connections: network.max_connections_per_spawn as usize,
        shared_connections: terms
            .shared_connections
            .clone()
            .unwrap_or_else(crate::relay::process_connections),
        ..RelayConfig::default()
    };
    let stopping = stop.clone();
    let tripwire = (plan.on_violation == OnViolation::Terminate && plan.network_learning.is_none())
        .then(|| Arc::new(Tripwire::default()));
    let trip = tripwire.as_ref().map(|t| Violations {
        tripwire: Arc::clone(t),
        granted: plan
            .network
            .iter()
            .map(|g| format!("network:{g}"))
            .collect(),
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(RELAY_BLOCKING_THREADS)
        .build()
        .map_err(|e| Failure::sandbox_unavailable(format!("the network relay's runtime: {e}")))?;
    let thread = std::thread::Builder::new()
        .name("spawnd-relay".into())
        .spawn(move || {
            let reported = runtime.block_on(relay(mode, config, listeners, audit, stopping, trip));
            // A name resolution past its timeout may still be blocking a
            // thread: it is not waited for.
            runtime.shutdown_background();
            reported
        })
        .map_err(|e| Failure::sandbox_unavailable(format!("the network relay's thread: {e}")))?;
    Ok(Egress {
        stop,
        thread: Some(thread),
        tripwire,
    })
}

/// What the relay of `plan` lets through, checked as `serve` would before
/// it accepts, here, before the program's release. Forwarding while
/// learning needs the network the operator may have disabled
/// (`[network] enabled = false`); recording leaves nothing out and
/// resolves nothing, so it does not.
fn relay_mode(plan: &SpawnPlan, network: &NetworkConfig) -> Result<RelayMode, Failure> {
    match plan.network_learning {
        Some(Learning::Forward) if !network.enabled => Err(Failure::config(
            "the operator's [network] enabled = false: learning cannot forward connections; learn in record mode, or enable the network; nothing was run",
        )),
        Some(learning) => Ok(RelayMode::Learning(learning)),
        None => {
            GrantedNames::new(&plan.network)
                .map_err(|e| Failure::sandbox_unavailable(format!("the network relay: {e}")))?;
            Ok(RelayMode::Grants(plan.network.clone()))
        }
    }
}

/// What the recording side of a terminating relay needs: the tripwire, and
/// the grants a violation's record names.
struct Violations {
    tripwire: Arc<Tripwire>,
    granted: Vec<String>,
}

impl Egress {
    /// Under `on_violation = "terminate"`, gives the relay its way to kill
    /// the sandbox (right after the program's release); a no-op otherwise.
    pub(super) fn arm(&self, killer: Killer) {
        if let Some(tripwire) = &self.tripwire {
            tripwire.arm(killer);
        }
    }

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

/// Serves until stopped, recording the relay's events as they come.
async fn relay(
    mode: RelayMode,
    config: RelayConfig,
    listeners: Listeners,
    audit: NetAudit,
    stop: CancellationToken,
    trip: Option<Violations>,
) -> Reported {
    let learning = match &mode {
        RelayMode::Learning(learning) => Some(*learning),
        RelayMode::Grants(_) => None,
    };
    let (events, received) = mpsc::channel(1024);
    let serving = serve(
        mode,
        config,
        listeners,
        Arc::new(SystemResolver::new(RESOLUTIONS_AT_ONCE)),
        events,
        stop.clone(),
    );
    let (served, mut reported) = tokio::join!(serving, record(received, audit, stop, trip));
    if let Err(e) = served {
        reported.error = Some(e.to_string());
    }
    reported.learning = learning;
    reported
}

/// Takes the relay's events in batches, writes their `net` records (off
/// this thread: syncing blocks), and keeps them for the result. When the
/// log fails, stops the relay and records no more.
async fn record(
    mut received: mpsc::Receiver<NetEvent>,
    audit: NetAudit,
    stop: CancellationToken,
    trip: Option<Violations>,
) -> Reported {
    let audit = Arc::new(audit);
    let mut reported = Reported::default();
    let mut batch = Vec::new();
    while received.recv_many(&mut batch, MAX_BATCH).await > 0 {
        // Before the records are written: the first violation ends the
        // sandbox at once.
        if let (Some(trip), None) = (&trip, &reported.violation) {
            if let Some((requested, reason)) = batch.iter().find_map(violation_of) {
                reported.violation = Some(Violation {
                    requested,
                    reason: reason.to_string(),
                    granted: trip.granted.clone(),
                });
                trip.tripwire.trip();
            }
        }
        if reported.error.is_none() {
            let writer = audit.clone();
            let events = std::mem::take(&mut batch);
            let writing = tokio::task::spawn_blocking(move || {
                let written = writer.record(&events);
                (events, written)
            })
            .await;
            let written = match writing {
                Ok((events, written)) => {
                    batch = events;
                    written.map_err(|e| e.to_string())
                }
                Err(e) => Err(format!("the network records' writer failed: {e}")),
            };
            if let Err(e) = written {
                tracing::error!(audit_id = %audit.audit_id, error = %e, "a network record could not be written; the spawn's network is closed");
                reported.error = Some(format!(
                    "audit unavailable: {e}; the spawn's network was closed"
                ));
                stop.cancel();
            }
        }
        for event in batch.drain(..) {
            reported.take(event);
        }
    }
    reported
}

impl Reported {
    fn take(&mut self, event: NetEvent) {
        if let NetEvent::Connection(record) = &event {
            let outcome = match (record.allowed && record.connected, record.reason) {
                (true, _) | (false, None) if record.allowed => "relayed",
                (_, Some(reason)) => reason,
                (_, None) => "refused",
            };
            crate::metrics::relay_connection(outcome, record.bytes_up, record.bytes_down);
        }
        match event {
            NetEvent::Connection(record) if self.connections.len() < MAX_LISTED_CONNECTIONS => {
                self.connections.push(record)
            }
            NetEvent::Connection(_) => self.unlisted += 1,
            NetEvent::DnsRefused { name, record_type } => {
                self.dns_refused.push((name, record_type.to_string()))
            }
            NetEvent::DnsRefusedMore { count } => self.dns_refused_more += count,
            NetEvent::Refusals { counts, unreported } => {
                self.refusals = counts;
                self.refusals_unreported = unreported;
            }
            NetEvent::Unreported { connections } => self.unreported = connections,
            NetEvent::Contacted { pairs, unlisted } => {
                self.contacted = pairs;
                self.contacted_unlisted = unlisted;
            }
            NetEvent::Summary(summary) => self.summary = Some(summary),
        }
    }

    /// The result's `network`: totals, each connection that reached its
    /// server and the first refusal of each kind, how often each kind of
    /// refusal happened, and the names the DNS stub refused; for a learning
    /// spawn, also its mode and the `host:port` pairs its program contacted,
    /// sorted, each once.
    pub(super) fn to_report(&self) -> NetworkReport {
        let summary = self.summary.unwrap_or_default();
        let learning = self.learning.map(|l| {
            let contacted: Vec<String> = self.contacted.iter().map(Grant::to_string).collect();
            (l.as_str().to_string(), contacted, self.contacted_unlisted)
        });
        NetworkReport {
            connections: summary.connections,
            refused: summary.refused,
            bytes_up: summary.bytes_up,
            bytes_down: summary.bytes_down,
            listed: self.connections.iter().map(connection).collect(),
            unlisted: self.unlisted,
            refusals: self
                .refusals
                .iter()
                .map(|c| RefusalsOfAKind {
                    host: c.kind.host.to_string(),
                    port: c.kind.port,
                    protocol: c.kind.transport.as_str().to_string(),
                    ip_protocol: c.kind.transport.ip_protocol(),
                    reason: c.kind.reason.to_string(),
                    count: c.count,
                })
                .collect(),
            refusals_unreported: self.refusals_unreported,
            connections_unreported: self
                .unreported
                .iter()
                .map(|c| UnreportedConnections {
                    host: c.host.to_string(),
                    port: c.port,
                    count: c.count,
                    refused: c.refused,
                    bytes_up: c.bytes_up,
                    bytes_down: c.bytes_down,
                })
                .collect(),
            dns_refused: self
                .dns_refused
                .iter()
                .map(|(name, kind)| DnsRefused {
                    name: name.clone(),
                    record_type: kind.clone(),
                })
                .collect(),
            dns_refused_more: self.dns_refused_more,
            learning: learning.as_ref().map(|(mode, _, _)| mode.clone()),
            contacted: learning.as_ref().map(|(_, contacted, _)| contacted.clone()),
            contacted_unlisted: learning.as_ref().map(|(_, _, unlisted)| *unlisted),
            error: self.error.clone(),
            violation: self.violation.clone(),
        }
    }
}

fn connection(c: &ConnectionRecord) -> Connection {
    Connection {
        protocol: c.transport.as_str().to_string(),
        ip_protocol: c.transport.ip_protocol(),
        host: c.host.to_string(),
        port: c.port,
        dialed: c.dialed.map(|a| a.to_string()),
        allowed: c.allowed,
        connected: c.connected,
        reason: c.reason.map(String::from),
        denial: c.denial.map(|d| d.to_string()),
        sni: c.sni.clone(),
        error: c.error.clone(),
        bytes_up: c.bytes_up,
        bytes_down: c.bytes_down,
        duration_ms: c.duration_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(network: &[&str], learning: Option<Learning>) -> SpawnPlan {
        SpawnPlan {
            network: network.iter().map(|g| g.parse().unwrap()).collect(),
            network_learning: learning,
            ..SpawnPlan::of_true()
        }
    }

    fn network(enabled: bool) -> NetworkConfig {
        let mut config = crate::config::Config::defaults(None).unwrap().network;
        config.enabled = enabled;
        config
    }

    #[test]
    fn a_plan_s_relay_serves_its_grants_unless_it_learns() {
        let granted = plan(&["api.example.com:443"], None);
        assert_eq!(
            relay_mode(&granted, &network(true)).unwrap(),
            RelayMode::Grants(granted.network.clone())
        );
        for learning in [Learning::Record, Learning::Forward] {
            assert_eq!(
                relay_mode(&plan(&[], Some(learning)), &network(true)).unwrap(),
                RelayMode::Learning(learning)
            );
        }
    }

    #[test]
    fn forwarding_while_learning_needs_the_network_the_operator_may_disable() {
        let failure = relay_mode(&plan(&[], Some(Learning::Forward)), &network(false)).unwrap_err();
        assert!(
            failure.message.contains("[network] enabled = false"),
            "{}",
            failure.message
        );
        // Recording lets nothing out.
        assert_eq!(
            relay_mode(&plan(&[], Some(Learning::Record)), &network(false)).unwrap(),
            RelayMode::Learning(Learning::Record)
        );
    }

    #[test]
    fn a_learning_result_lists_its_mode_and_contacted_pairs_and_a_granted_one_does_not() {
        let mut reported = Reported::default();
        let granted = serde_json::to_value(reported.to_report()).unwrap();
        assert!(granted.get("learning").is_none() && granted.get("contacted").is_none());
        reported.learning = Some(Learning::Forward);
        reported.take(NetEvent::Contacted {
            pairs: vec![
                "a.example:80".parse().unwrap(),
                "a.example:443".parse().unwrap(),
            ],
            unlisted: 2,
        });
        let learned = serde_json::to_value(reported.to_report()).unwrap();
        assert_eq!(learned["learning"], "forward");
        assert_eq!(
            learned["contacted"],
            json!(["a.example:80", "a.example:443"])
        );
        assert_eq!(learned["contacted_unlisted"], 2);
    }

    #[test]
    fn only_refusals_of_what_was_not_granted_are_violations() {
        use crate::relay::reason;
        let refused = |why: &'static str| {
            NetEvent::Connection(crate::relay::ConnectionRecord {
                host: crate::egress::grant::Host::Name("api.example.com".into()),
                port: 443,
                transport: Default::default(),
                dialed: None,
                allowed: false,
                connected: false,
                reason: Some(why),
                denial: None,
                sni: None,
                error: None,
                bytes_up: 0,
                bytes_down: 0,
                duration_ms: 0,
            })
        };
        for why in [
            reason::NOT_GRANTED,
            reason::SNI_MISMATCH,
            reason::RESOLVED_TO_DENIED_ADDRESS,
        ] {
            assert_eq!(
                violation_of(&refused(why)),
                Some(("network:api.example.com:443".to_string(), why))
            );
        }
        // A limit, or spawnd's own failure, is no violation of the grants.
        for why in [
            reason::TOO_MANY_CONNECTIONS,
            reason::UNRESOLVED,
            reason::CONNECT_FAILED,
            reason::CONNECT_TIMEOUT,
            reason::HOST_ADDRESSES_UNREADABLE,
        ] {
            assert_eq!(violation_of(&refused(why)), None, "{why}");
        }
    }
}
