//! The relay: spawnd's side of a spawn's network grants. The sandbox's
//! init creates listeners inside the program's network namespace (a TCP
//! `[::]:P` per granted port, UDP and TCP `[::]:53` for the DNS stub)
//! behind a `local` route for the fake pool 198.18.0.0/15 and for each
//! granted address, and hands their descriptors to spawnd. A socket stays
//! in the namespace it was made in, so spawnd accepts the program's
//! connections and dials their destinations from its own namespace: these
//! listeners are the program's only way out, and [`serve`] decides what
//! passes.
//!
//! * Each accepted connection's destination is its local address: a fake
//!   address stands for the granted name [`GrantedNames`] gives it, any
//!   other address for itself. `(host, port)` must be exactly a grant;
//!   anything else is reset at once (`connection.rs`).
//! * A granted name is resolved once per connection by a [`Resolve`]r
//!   (spawnd's resolver, never the sandbox's), and only the addresses the
//!   operator's [`AddressPolicy`] allows are dialed, exactly as checked;
//!   never, for a name, an address of spawnd's own host, read as the
//!   connection is checked (`host_addresses.rs`).
//! * For a name, the client's first bytes are held until
//!   [`client_hello::classify`](crate::egress::client_hello::classify)
//!   decides: a TLS ClientHello naming another server is closed
//!   (`sni_mismatch`); anything that is not TLS passes. The server's
//!   bytes flow meanwhile, so protocols where the server speaks first
//!   work.
//! * The DNS stub answers from the grants alone and forwards nothing
//!   (`dns_stub.rs`).
//! * A learning relay ([`RelayMode::Learning`], `spawnd learn` only) has
//!   no grants: its stub gives every name a manifest could grant a fake
//!   address, its one listener takes the connections redirected to it
//!   from every port of the fake pool (their destination read with
//!   `SO_ORIGINAL_DST`), and each connection to a name is recorded as a
//!   `host:port` pair, then refused without dialing or relayed as a
//!   granted one would be ([`Learning`]). The pairs are reported when the
//!   relay stops ([`NetEvent::Contacted`]).
//! * Every other TCP connection attempt and UDP datagram the program
//!   sends, but to its own loopback, is refused by the sandbox's rules
//!   and logged; the log is read here, each entry a `not_granted`
//!   refusal (`refusal_log.rs`).
//! * Every connection that reached its server ends in one
//!   [`NetEvent::Connection`] record; refusals are counted by kind, the
//!   first of each reported; [`serve`] ends, when the spawn does, with
//!   the counts and a [`NetEvent::Summary`]. Nothing is lost, and a
//!   program cannot flood its consumer ([`events`]).

mod connection;
mod dns_stub;
pub(crate) mod events;
mod host_addresses;
mod refusal_log;
pub(crate) mod resolve;

#[cfg(test)]
mod learning_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod world_tests;

use std::collections::BTreeSet;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use thiserror::Error;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::egress::address_policy::AddressPolicy;
use crate::egress::fake_pool::{GrantedNames, PoolExhausted};
use crate::egress::grant::{Grant, Host};
use crate::egress::learning::{Contacted, LearnedNames, Learning};
use crate::sandbox::network::Listeners;
use crate::shares::{Claim, Limits, Pool, Tenants};

pub(crate) use connection::MAX_PROCESS_CONNECTIONS;
pub(crate) use events::{
    reason, ConnectionRecord, DialedCount, NetEvent, RefusalCount, Summary, Transport,
};
pub(crate) use resolve::{Resolve, SystemResolver};

use events::{DnsRefusals, EventSink};

/// The operator's limits and checks for one spawn's relay.
#[derive(Debug, Clone)]
pub(crate) struct RelayConfig {
    /// How long resolving a granted name may take, and connecting to
    /// each of its addresses.
    pub connect_timeout: Duration,
    /// A connection that moves nothing either way for this long is
    /// closed.
    pub idle_timeout: Duration,
    /// How long a ClientHello may take to arrive once its first byte has.
    pub first_flight_timeout: Duration,
    /// Connections open at once; more are reset.
    pub max_connections: usize,
    /// Where the spawn's connections count among every spawn's of this
    /// process: its caller's share of them ([`crate::shares`]).
    pub shared_connections: Claim,
    /// Whether a TLS connection to a granted name must name it (SNI).
    pub sni_check: bool,
    /// Which addresses may be dialed.
    pub policy: AddressPolicy,
}

impl Default for RelayConfig {
    /// The operator config's defaults (10 s to connect, 5 min idle, 64
    /// connections), 5 s for a ClientHello, SNI checked, the fixed address
    /// rules.
    fn default() -> RelayConfig {
        use crate::config::{
            DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_MAX_CONNECTIONS_PER_SPAWN,
            DEFAULT_NETWORK_IDLE_TIMEOUT_MS,
        };
        RelayConfig {
            connect_timeout: Duration::from_millis(DEFAULT_CONNECT_TIMEOUT_MS),
            idle_timeout: Duration::from_millis(DEFAULT_NETWORK_IDLE_TIMEOUT_MS),
            first_flight_timeout: Duration::from_secs(5),
            max_connections: DEFAULT_MAX_CONNECTIONS_PER_SPAWN as usize,
            shared_connections: process_connections(),
            sni_check: true,
            policy: AddressPolicy::default(),
        }
    }
}

/// The relayed connections of one process with a single caller (`spawnd
/// run`, `learn`): [`MAX_PROCESS_CONNECTIONS`], all of them its own. The
/// daemon gives each spawn its caller's claim on its own pool instead.
pub(crate) fn process_connections() -> Claim {
    static POOL: std::sync::OnceLock<Arc<Pool>> = std::sync::OnceLock::new();
    let pool = POOL.get_or_init(|| {
        let all = MAX_PROCESS_CONNECTIONS as u64;
        Pool::new(
            Limits {
                what: "relayed connections",
                whole: ("relayed_connections_per_process", all),
                share: ("relayed_connections_per_process", all),
            },
            Arc::new(Tenants::default()),
        )
    });
    Claim::new(pool, nix::unistd::geteuid().as_raw())
}

/// Why the relay could not start. Nothing was accepted.
#[derive(Debug, Error)]
pub(crate) enum ServeError {
    /// More granted names than the fake pool has addresses.
    #[error(transparent)]
    Pool(#[from] PoolExhausted),
    /// A listener could not be made non-blocking or registered with the
    /// runtime.
    #[error("cannot serve on the {what} listener")]
    Listener {
        /// Which listener.
        what: &'static str,
        /// The failure.
        #[source]
        source: io::Error,
    },
}

/// What a spawn's relay lets through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RelayMode {
    /// Exactly these grants, and DNS answers for their names alone: every
    /// spawn a manifest allowed.
    Grants(Vec<Grant>),
    /// No grants: any name on any TCP port, recorded, then refused or
    /// relayed as [`Learning`] says. Only `spawnd learn` asks for it; the
    /// sandbox's listener must be the learning one
    /// ([`crate::sandbox::network::NetworkSetup::for_learning`]).
    Learning(Learning),
}

/// What a relay decides with, by mode.
enum Rules {
    Grants {
        /// Every `(host, port)` granted.
        grants: BTreeSet<(Host, u16)>,
        names: GrantedNames,
    },
    Learning {
        learning: Learning,
        names: Mutex<LearnedNames>,
        contacted: Mutex<Contacted>,
    },
}

impl Rules {
    /// The name a fake address stands for.
    fn name_of(&self, ip: std::net::Ipv4Addr) -> Option<String> {
        match self {
            Rules::Grants { names, .. } => names.name_of(ip).map(str::to_string),
            Rules::Learning { names, .. } => names
                .lock()
                .ok()
                .and_then(|names| names.name_of(ip).map(str::to_string)),
        }
    }
}

/// What every task of one spawn's relay shares.
struct Relay {
    rules: Rules,
    config: RelayConfig,
    resolver: Arc<dyn Resolve>,
    events: EventSink,
    dns_refusals: Mutex<DnsRefusals>,
    /// One permit per open connection.
    slots: Arc<Semaphore>,
    stop: CancellationToken,
}

/// Held by every task of a relay: `serve` knows they have all ended when
/// the last clone is dropped and its receiver sees the channel closed.
#[derive(Clone)]
struct Running {
    _alive: mpsc::Sender<()>,
}

impl Running {
    /// Runs `task` on the runtime, holding a clone until it ends.
    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let running = self.clone();
        tokio::spawn(async move {
            task.await;
            drop(running);
        });
    }
}

/// Relays the spawn's connections and answers its DNS queries on
/// `listeners`, as `mode` allows, until `stop` is cancelled (the spawn ended); then closes
/// every listener and connection, sends the closing events and returns
/// the totals. Events go to `events` as [`events`] describes: a
/// connection that reached its server waits for room, holding its slot.
///
/// Runs on any tokio runtime; the sockets it dials are made in the
/// network namespace of the thread that polls it.
pub(crate) async fn serve(
    mode: RelayMode,
    config: RelayConfig,
    listeners: Listeners,
    resolver: Arc<dyn Resolve>,
    events: mpsc::Sender<NetEvent>,
    stop: CancellationToken,
) -> Result<Summary, ServeError> {
    let rules = match mode {
        RelayMode::Grants(grants) => Rules::Grants {
            names: GrantedNames::new(&grants)?,
            grants: grants
                .iter()
                .map(|g| (g.host().clone(), g.port()))
                .collect(),
        },
        RelayMode::Learning(learning) => Rules::Learning {
            learning,
            names: Mutex::new(LearnedNames::default()),
            contacted: Mutex::new(Contacted::default()),
        },
    };
    let tcp = listeners
        .tcp
        .into_iter()
        .map(|(_, fd)| tokio_listener(std::net::TcpListener::from(fd), "tcp"))
        .collect::<Result<Vec<_>, _>>()?;
    let dns_tcp = tokio_listener(std::net::TcpListener::from(listeners.dns_tcp), "dns tcp")?;
    let refusal_log = listeners.refusal_log;
    let dns_udp = std::net::UdpSocket::from(listeners.dns_udp);
    let dns_udp = dns_udp
        .set_nonblocking(true)
        .and_then(|()| tokio::net::UdpSocket::from_std(dns_udp))
        .map_err(|source| ServeError::Listener {
            what: "dns udp",
            source,
        })?;
    let relay = Arc::new(Relay {
        rules,
        slots: Arc::new(Semaphore::new(config.max_connections)),
        config,
        resolver,
        events: EventSink::new(events),
        dns_refusals: Mutex::new(DnsRefusals::default()),
        stop,
    });
    let (running, mut all_ended) = mpsc::channel(1);
    let running = Running { _alive: running };
    for listener in tcp {
        running.spawn(connection::accept_loop(
            relay.clone(),
            listener,
            running.clone(),
        ));
    }
    running.spawn(dns_stub::serve_udp(relay.clone(), dns_udp));
    running.spawn(dns_stub::serve_tcp(relay.clone(), dns_tcp, running.clone()));
    running.spawn(refusal_log::watch(relay.clone(), refusal_log));
    drop(running);
    // Every task watches `stop`: the accept loops drop their listeners,
    // connections record how far they got. Nothing is ever sent on the
    // channel, so `recv` returns once every `Running` is gone.
    relay.stop.cancelled().await;
    let _ = all_ended.recv().await;
    let more = relay
        .dns_refusals
        .lock()
        .map(|refusals| refusals.more())
        .unwrap_or_default();
    let contacted = match &relay.rules {
        Rules::Learning { contacted, .. } => contacted.lock().ok().map(|c| NetEvent::Contacted {
            pairs: c.pairs(),
            unlisted: c.unlisted(),
        }),
        Rules::Grants { .. } => None,
    };
    let summary = relay.events.summary();
    relay
        .events
        .finish(
            more.into_iter()
                .chain(contacted)
                .chain([NetEvent::Summary(summary)]),
        )
        .await;
    Ok(summary)
}

/// A std listener as a tokio one.
fn tokio_listener(
    listener: std::net::TcpListener,
    what: &'static str,
) -> Result<tokio::net::TcpListener, ServeError> {
    listener
        .set_nonblocking(true)
        .and_then(|()| tokio::net::TcpListener::from_std(listener))
        .map_err(|source| ServeError::Listener { what, source })
}
