//! One program connection, from accept to its record: where it was going,
//! whether a grant covers it, which checked address to dial, the client's
//! first flight when it may be TLS, then bytes both ways until both sides
//! close, nothing moves for the idle timeout, or the spawn ends.
//!
//! A refusal before dialing resets the program's connection (SO_LINGER 0),
//! so the program sees it fail at once rather than a connection that
//! opened and closed. The decision that needs no waiting (the grant, the
//! connection limit, a learning relay's record) is taken in the accept
//! loop, so a flood of refused connections spawns no task.
//!
//! A learning relay's connections arrive redirected to its one listener:
//! where each was going is its original destination (`SO_ORIGINAL_DST`),
//! not its local address. Any other relay's listeners take connections
//! addressed to them, and the local address is the destination.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
use nix::sys::socket::{getsockopt, sockopt};
use nix::unistd::pipe2;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{sleep, sleep_until, timeout, timeout_at};

use crate::egress::address_policy::{Denial, HostAddresses};
use crate::egress::client_hello::{classify, sni_matches, FirstFlight, MAX_FIRST_FLIGHT};
use crate::egress::fake_pool::in_fake_pool;
use crate::egress::grant::Host;
use crate::egress::learning::Learning;

use super::events::{reason, ConnectionRecord};
use super::{host_addresses, Relay, Rules, Running};

/// The chunk each direction of a relay reads at a time when it copies
/// through a buffer.
const RELAY_BUFFER: usize = 16 * 1024;

/// How long a connection open when its spawn ends may still move what
/// its program wrote before it exited.
const DRAIN_ON_STOP: Duration = Duration::from_secs(1);

/// How long an accept loop waits after a failed accept (out of
/// descriptors, say) before trying again, so it does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Accepts the program's connections on one granted port until the spawn
/// ends, then drops the listener, so later connections are refused.
pub(super) async fn accept_loop(relay: Arc<Relay>, listener: TcpListener, running: Running) {
    loop {
        let accepted = tokio::select! {
            () = relay.stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((client, _peer)) => admit(&relay, client, &running),
            Err(e) => {
                tracing::warn!("relay: accept on {:?}: {e}", listener.local_addr());
                sleep(ACCEPT_RETRY).await;
            }
        }
    }
}

/// Decides on an accepted connection at once: reset and record it when
/// no grant covers its destination (in a learning relay: when it is not
/// to a learned name, or is only to be recorded) or the spawn has its
/// maximum open, else hand it to a task of its own.
fn admit(relay: &Arc<Relay>, client: TcpStream, running: &Running) {
    let started = Instant::now();
    let mut record = match connection_destination(relay, &client) {
        Ok(to) => destination(relay, to),
        // Without its destination a connection has no grant that covers
        // it.
        Err(e) => {
            let mut record = ConnectionRecord::new(Host::Ip(IpAddr::from([0u8; 16])), 0);
            record.error = Some(e.to_string());
            record
        }
    };
    let refusal = match &relay.rules {
        Rules::Grants { grants, .. } => {
            (!grants.contains(&(record.host.clone(), record.port))).then_some(reason::NOT_GRANTED)
        }
        Rules::Learning {
            learning,
            contacted,
            ..
        } => {
            let learned = match &record.host {
                Host::Name(name) => contacted
                    .lock()
                    .is_ok_and(|mut contacted| contacted.add(name, record.port)),
                Host::Ip(_) => false,
            };
            match (learned, learning) {
                (false, _) => Some(reason::NOT_GRANTED),
                (true, Learning::Record) => Some(reason::RECORD_ONLY),
                (true, Learning::Forward) => None,
            }
        }
    };
    if let Some(why) = refusal {
        record.refuse(why);
        reset(client);
        relay.events.refused(record, started);
        return;
    }
    let permits = match relay.slots.clone().try_acquire_owned() {
        Ok(own) => relay
            .config
            .shared_connections
            .take(1)
            .map(|shared| (own, shared))
            .map_err(|refusal| refusal.to_string()),
        Err(_) => Err(format!(
            "at this spawn's limit of {} relayed connections ([network] max_connections_per_spawn)",
            relay.config.max_connections
        )),
    };
    let permit = match permits {
        Ok(permit) => permit,
        Err(why) => {
            record.refuse(reason::TOO_MANY_CONNECTIONS);
            record.error = Some(why);
            reset(client);
            relay.events.refused(record, started);
            return;
        }
    };
    running.spawn(run(relay.clone(), client, record, started, permit));
}

/// Relayed connections of every spawn this process serves, at most: each
/// holds two sockets (the program's side and the dialed side) and, while
/// it relays, a splice pipe per direction (six descriptors in all), so the
/// relays of many spawns together stay well inside the daemon's limit of
/// open files. Shared among callers ([`crate::shares`]), so one caller's
/// programs cannot starve the others'.
pub(crate) const MAX_PROCESS_CONNECTIONS: usize =
    crate::config::MAX_CONNECTIONS_PER_PROCESS as usize;

/// The address an accepted connection was going to: its local address,
/// or, in a learning relay, where it was going before the sandbox's
/// redirect.
fn connection_destination(relay: &Relay, client: &TcpStream) -> io::Result<SocketAddr> {
    match relay.rules {
        Rules::Grants { .. } => client.local_addr(),
        Rules::Learning { .. } => original_destination(client),
    }
}

/// Where a redirected connection was going (`SO_ORIGINAL_DST`, from the
/// connection tracking of the sandbox's namespace). The redirect is of
/// IPv4 alone.
fn original_destination(client: &TcpStream) -> io::Result<SocketAddr> {
    let original = getsockopt(client, sockopt::OriginalDst)
        .map_err(|e| io::Error::new(io::Error::from(e).kind(), format!("SO_ORIGINAL_DST: {e}")))?;
    let ip = Ipv4Addr::from(u32::from_be(original.sin_addr.s_addr));
    Ok(SocketAddr::new(
        IpAddr::V4(ip),
        u16::from_be(original.sin_port),
    ))
}

/// Where a connection accepted for `to` was going: the granted (or
/// learned) name its fake address stands for, or the address itself (an
/// IPv4 address seen through the dual-stack listener as `::ffff:a.b.c.d`
/// is unmapped).
fn destination(relay: &Relay, to: SocketAddr) -> ConnectionRecord {
    let ip = to.ip().to_canonical();
    let host = match ip {
        IpAddr::V4(v4) if in_fake_pool(v4) => match relay.rules.name_of(v4) {
            Some(name) => Host::Name(name),
            None => Host::Ip(ip),
        },
        _ => Host::Ip(ip),
    };
    ConnectionRecord::new(host, to.port())
}

/// A granted connection's task: relays it until it ends or the spawn
/// does, then reports it. The permits are its slots among its spawn's
/// open connections and the whole process's.
async fn run(
    relay: Arc<Relay>,
    client: TcpStream,
    mut record: ConnectionRecord,
    started: Instant,
    _permit: (OwnedSemaphorePermit, crate::shares::Taken),
) {
    // Biased: a connection that has ended as the spawn stops is recorded
    // as ended, not as stopped. When the spawn ends first, what its
    // program wrote before it exited still goes on, for a moment.
    let stopped = {
        let relaying = relay_granted(&relay, client, &mut record);
        tokio::pin!(relaying);
        tokio::select! {
            biased;
            () = &mut relaying => false,
            () = relay.stop.cancelled() => timeout(DRAIN_ON_STOP, &mut relaying).await.is_err(),
        }
    };
    // Stopping dropped both sockets: each side sees its connection close.
    if stopped {
        record.reason = Some(reason::STOPPED);
    }
    // Reported while the permits are still held: a consumer that falls
    // behind slows new connections, and loses nothing.
    if let Some(reached) = relay.events.connection_ended(record, started) {
        relay.events.send(reached).await;
    }
}

/// Resolves, checks, dials and relays a granted connection, writing into
/// `record` as it goes (so a stop midway still records how far it got).
async fn relay_granted(relay: &Relay, client: TcpStream, record: &mut ConnectionRecord) {
    let addresses = match allowed_addresses(relay, &record.host).await {
        Ok(addresses) => addresses,
        Err(refusal) => {
            record.refuse(refusal.reason);
            record.denial = refusal.denial;
            record.error = refusal.error;
            reset(client);
            return;
        }
    };
    let upstream = match dial(&addresses, record, relay.config.connect_timeout).await {
        Ok(upstream) => upstream,
        Err(()) => {
            reset(client);
            return;
        }
    };
    let check_sni = match &record.host {
        Host::Name(name) if relay.config.sni_check => Some(name.clone()),
        _ => None,
    };
    pump(relay, client, upstream, check_sni.as_deref(), record).await;
}

/// Why a granted connection has nothing to dial.
struct AddressRefusal {
    reason: &'static str,
    denial: Option<Denial>,
    error: Option<String>,
}

/// The addresses a granted host may be dialed at, in order: an address
/// grant's own address, or what a name resolved to (once) that the
/// policy allows, without repeats, none of them an address of the host
/// this thread dials from. Each is canonical (IPv4 unmapped), so what
/// was checked is exactly what is dialed.
async fn allowed_addresses(relay: &Relay, host: &Host) -> Result<Vec<IpAddr>, AddressRefusal> {
    let policy = &relay.config.policy;
    let name = match host {
        Host::Ip(ip) => {
            // A grant of the address itself may reach the host: the
            // host's addresses are not read.
            return match policy.check(host, *ip, &HostAddresses::default()) {
                Ok(()) => Ok(vec![*ip]),
                Err(denial) => Err(AddressRefusal {
                    reason: reason::DENIED_ADDRESS,
                    denial: Some(denial),
                    error: None,
                }),
            };
        }
        Host::Name(name) => name,
    };
    let unresolved = |error: String| AddressRefusal {
        reason: reason::UNRESOLVED,
        denial: None,
        error: Some(error),
    };
    let resolved = match timeout(relay.config.connect_timeout, relay.resolver.resolve(name)).await {
        Ok(Ok(resolved)) => resolved,
        Ok(Err(e)) => return Err(unresolved(e.to_string())),
        Err(_) => return Err(unresolved("resolving timed out".to_string())),
    };
    if resolved.is_empty() {
        return Err(unresolved("no address".to_string()));
    }
    // Read after resolving, just before dialing, on the thread that
    // dials. When they cannot be read, no address can be told apart
    // from the host's, so none is dialed.
    let own = host_addresses::read_host_addresses().map_err(|e| AddressRefusal {
        reason: reason::HOST_ADDRESSES_UNREADABLE,
        denial: None,
        error: Some(format!("cannot read the host's addresses: {e}")),
    })?;
    let mut allowed = Vec::new();
    let mut first_denial = None;
    for ip in resolved.into_iter().map(|ip| ip.to_canonical()) {
        match policy.check(host, ip, &own) {
            Ok(()) if !allowed.contains(&ip) => allowed.push(ip),
            Ok(()) => {}
            Err(denial) => {
                first_denial.get_or_insert(denial);
            }
        }
    }
    if allowed.is_empty() {
        return Err(AddressRefusal {
            reason: reason::RESOLVED_TO_DENIED_ADDRESS,
            denial: first_denial,
            error: None,
        });
    }
    Ok(allowed)
}

/// Connects to each address in turn, within the connect timeout each,
/// until one answers. A failure is written into `record` (the last
/// address tried, why, and the error).
async fn dial(
    addresses: &[IpAddr],
    record: &mut ConnectionRecord,
    connect_timeout: Duration,
) -> Result<TcpStream, ()> {
    for &ip in addresses {
        let addr = SocketAddr::new(ip, record.port);
        record.dialed = Some(addr);
        match timeout(connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(upstream)) => {
                record.reason = None;
                record.error = None;
                record.connected = true;
                return Ok(upstream);
            }
            Ok(Err(e)) => {
                record.reason = Some(reason::CONNECT_FAILED);
                record.error = Some(e.to_string());
            }
            Err(_) => {
                record.reason = Some(reason::CONNECT_TIMEOUT);
                record.error = Some(format!("no answer within {connect_timeout:?}"));
            }
        }
    }
    Err(())
}

/// How a relay ended, when not by both sides closing.
enum Ending {
    /// The first flight was refused for this reason.
    Refused(&'static str),
    /// Nothing moved for the idle timeout.
    Idle,
    /// A read or write failed.
    Io(io::Error),
}

/// Relays both ways until both sides have closed, one fails, or nothing
/// moves for the idle timeout. With `check_sni`, the client's bytes are
/// held until its first flight is classified; the server's flow from the
/// start.
async fn pump(
    relay: &Relay,
    mut client: TcpStream,
    mut upstream: TcpStream,
    check_sni: Option<&str>,
    record: &mut ConnectionRecord,
) {
    let start = tokio::time::Instant::now();
    // Milliseconds from `start` to the last byte moved, either way.
    let activity = AtomicU64::new(0);
    let ended = {
        let (mut client_read, mut client_write) = client.split();
        let (mut upstream_read, mut upstream_write) = upstream.split();
        let ConnectionRecord {
            bytes_up,
            bytes_down,
            sni,
            error,
            ..
        } = record;
        let up = async {
            if let Some(granted) = check_sni {
                let held = first_flight(
                    &mut client_read,
                    granted,
                    relay.config.first_flight_timeout,
                    (sni, error),
                    (&activity, start),
                )
                .await?;
                upstream_write.write_all(&held).await.map_err(Ending::Io)?;
                *bytes_up += held.len() as u64;
            }
            copy_one_way(
                &mut client_read,
                &mut upstream_write,
                bytes_up,
                &activity,
                start,
            )
            .await
        };
        let down = copy_one_way(
            &mut upstream_read,
            &mut client_write,
            bytes_down,
            &activity,
            start,
        );
        tokio::select! {
            result = async { tokio::try_join!(up, down) } => result.err(),
            () = idle(start, &activity, relay.config.idle_timeout) => Some(Ending::Idle),
        }
    };
    match ended {
        None => {}
        Some(Ending::Idle) => record.reason = Some(reason::IDLE_TIMEOUT),
        Some(Ending::Refused(why)) => {
            record.refuse(why);
            reset(client);
        }
        Some(Ending::Io(e)) => {
            record.reason = Some(reason::IO_ERROR);
            record.error = Some(e.to_string());
        }
    }
}

/// Reads the client's first flight, holding it, until it is classified:
/// not TLS, or a ClientHello whose server name (recorded in `sni`) is the
/// granted name, gives back the held bytes to forward; a ClientHello
/// naming another server, a malformed one (what is wrong recorded in
/// `problem`), or one not complete within `first_flight_timeout` of its
/// first byte is refused. The timer starts
/// with the first byte because nothing is held before it: a client may
/// wait for a server that speaks first, bounded by the idle timeout.
async fn first_flight<R: AsyncRead + Unpin>(
    client: &mut R,
    granted: &str,
    first_flight_timeout: Duration,
    (sni, problem): (&mut Option<String>, &mut Option<String>),
    (activity, start): (&AtomicU64, tokio::time::Instant),
) -> Result<Vec<u8>, Ending> {
    let mut held = vec![0u8; MAX_FIRST_FLIGHT];
    let mut len = 0;
    let mut deadline = None;
    loop {
        let read = client.read(&mut held[len..]);
        let n = match deadline {
            None => read.await,
            Some(deadline) => timeout_at(deadline, read)
                .await
                .map_err(|_| Ending::Refused(reason::FIRST_FLIGHT_TIMEOUT))?,
        }
        .map_err(Ending::Io)?;
        if n == 0 {
            // The client closed its side: nothing held passes as is (the
            // relay then forwards the close); a ClientHello begun and not
            // finished is refused.
            if len == 0 {
                return Ok(Vec::new());
            }
            *problem = Some("the client closed before its ClientHello was complete".into());
            return Err(Ending::Refused(reason::MALFORMED_CLIENT_HELLO));
        }
        len += n;
        mark(activity, start);
        deadline.get_or_insert_with(|| tokio::time::Instant::now() + first_flight_timeout);
        match classify(&held[..len]) {
            FirstFlight::NeedMore if len < held.len() => continue,
            // `classify` decides within the 16 KiB held; were it not to,
            // refusing is the answer that lets nothing through unread.
            FirstFlight::NeedMore => {
                return Err(Ending::Refused(reason::MALFORMED_CLIENT_HELLO));
            }
            FirstFlight::Malformed(why) => {
                *problem = Some(why.to_string());
                return Err(Ending::Refused(reason::MALFORMED_CLIENT_HELLO));
            }
            FirstFlight::NotTls => {}
            // A granted name's TLS must say which server it wants: a hello
            // without a name could be meant for any site behind the address.
            FirstFlight::Tls { sni: None } => return Err(Ending::Refused(reason::SNI_MISSING)),
            FirstFlight::Tls { sni: Some(name) } => {
                let matches = sni_matches(granted, &name);
                *sni = Some(name);
                if !matches {
                    return Err(Ending::Refused(reason::SNI_MISMATCH));
                }
            }
        }
        held.truncate(len);
        return Ok(held);
    }
}

/// Copies one direction until its reader closes, then closes the
/// writer's side (a half-close, so the other direction goes on). Counts
/// the bytes written and marks the time of each. The bytes go through a
/// pipe with splice(2), so the kernel hands pages from one socket to the
/// other and they are never copied into spawnd; without a pipe (out of
/// descriptors, say), through a buffer.
async fn copy_one_way(
    from: &mut ReadHalf<'_>,
    to: &mut WriteHalf<'_>,
    count: &mut u64,
    activity: &AtomicU64,
    start: tokio::time::Instant,
) -> Result<(), Ending> {
    match SplicePipe::new() {
        Ok(pipe) => splice_one_way(pipe, from, to, count, activity, start).await,
        Err(e) => {
            tracing::debug!("relay: pipe2 for splice: {e}; copying through a buffer");
            buffer_one_way(from, to, count, activity, start).await
        }
    }
}

/// What a splice pipe holds once its direction carries bulk data: more
/// per call means fewer calls. It is `fs.pipe-max-size`'s default, the
/// most an unprivileged process may ask for. A direction that has moved
/// this much is a bulk one.
const BULK_PIPE_SIZE: usize = 1 << 20;

/// The pipe one direction's bytes pass through: spliced in from the
/// source socket, then out to the destination, emptied before the next
/// splice in.
struct SplicePipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Whether it was asked to grow to [`BULK_PIPE_SIZE`].
    grown: bool,
}

impl SplicePipe {
    fn new() -> io::Result<SplicePipe> {
        let (read, write) = pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
        Ok(SplicePipe {
            read,
            write,
            grown: false,
        })
    }

    /// Grows the pipe (empty) to [`BULK_PIPE_SIZE`] once its direction
    /// has moved that much in all. Only bulk directions grow: the kernel
    /// counts a pipe's size against its user's pipe pages, and a user past
    /// `fs.pipe-user-pages-soft` gets small pipes everywhere. A size
    /// refused leaves the pipe as it was (16 pages), which works in more
    /// calls.
    fn grow_when_bulk(&mut self, moved: u64) {
        if self.grown || moved < BULK_PIPE_SIZE as u64 {
            return;
        }
        self.grown = true;
        let size = libc::c_int::try_from(BULK_PIPE_SIZE).unwrap_or(libc::c_int::MAX);
        if let Err(e) = fcntl(&self.write, FcntlArg::F_SETPIPE_SZ(size)) {
            tracing::debug!("relay: F_SETPIPE_SZ {BULK_PIPE_SIZE} on a splice pipe: {e}");
        }
    }
}

/// [`copy_one_way`] through `pipe`. Each splice is non-blocking, so a
/// would-block waits for the socket's readiness in the runtime.
async fn splice_one_way(
    mut pipe: SplicePipe,
    from: &mut ReadHalf<'_>,
    to: &mut WriteHalf<'_>,
    count: &mut u64,
    activity: &AtomicU64,
    start: tokio::time::Instant,
) -> Result<(), Ending> {
    let flags = SpliceFFlags::SPLICE_F_NONBLOCK;
    loop {
        let source: &TcpStream = from.as_ref();
        let n = source
            .async_io(Interest::READABLE, || {
                splice(source, None, &pipe.write, None, BULK_PIPE_SIZE, flags)
                    .map_err(io::Error::from)
            })
            .await
            .map_err(Ending::Io)?;
        if n == 0 {
            return to.shutdown().await.map_err(Ending::Io);
        }
        let sink: &TcpStream = to.as_ref();
        let mut held = n;
        while held > 0 {
            let moved = sink
                .async_io(Interest::WRITABLE, || {
                    splice(&pipe.read, None, sink, None, held, flags).map_err(io::Error::from)
                })
                .await
                .map_err(Ending::Io)?;
            held -= moved;
            *count += moved as u64;
            mark(activity, start);
        }
        pipe.grow_when_bulk(*count);
    }
}

/// [`copy_one_way`] through a buffer of [`RELAY_BUFFER`] bytes.
async fn buffer_one_way(
    from: &mut ReadHalf<'_>,
    to: &mut WriteHalf<'_>,
    count: &mut u64,
    activity: &AtomicU64,
    start: tokio::time::Instant,
) -> Result<(), Ending> {
    let mut buffer = vec![0u8; RELAY_BUFFER];
    loop {
        let n = from.read(&mut buffer).await.map_err(Ending::Io)?;
        if n == 0 {
            return to.shutdown().await.map_err(Ending::Io);
        }
        to.write_all(&buffer[..n]).await.map_err(Ending::Io)?;
        *count += n as u64;
        mark(activity, start);
    }
}

/// Records that a byte moved now.
fn mark(activity: &AtomicU64, start: tokio::time::Instant) {
    let now = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    activity.store(now, Ordering::Relaxed);
}

/// Returns once nothing has moved for `idle_timeout` (`activity` is the
/// milliseconds from `start` to the last byte moved).
async fn idle(start: tokio::time::Instant, activity: &AtomicU64, idle_timeout: Duration) {
    loop {
        let last = activity.load(Ordering::Relaxed);
        sleep_until(start + Duration::from_millis(last) + idle_timeout).await;
        if activity.load(Ordering::Relaxed) == last {
            return;
        }
    }
}

/// Closes a connection with a reset (SO_LINGER 0) rather than a FIN, so
/// the program sees a refusal, not a connection that opened and closed.
fn reset(stream: TcpStream) {
    // When SO_LINGER cannot be set the close is an ordinary one, which
    // still refuses.
    if let Err(e) = stream.set_zero_linger() {
        tracing::debug!("relay: SO_LINGER 0 on a refused connection: {e}");
    }
}
