//! The sandbox's DNS stub on its two sockets, `[::]:53` over UDP and
//! TCP: each query is answered by
//! [`egress::dns::respond`](crate::egress::dns::respond) from the grants
//! alone (in a learning relay,
//! [`respond_learning`](crate::egress::dns::respond_learning), which gives
//! each name a fake address) and never forwarded, so DNS is no way out. A
//! name that is not granted (NXDOMAIN) is reported through the spawn's
//! [`DnsRefusals`](super::events::DnsRefusals).
//!
//! Replies to UDP queries go out from the wildcard socket, so their
//! source is the address the kernel picks towards the client: the stub
//! answers at 127.0.0.1 and `::1`, where the sandbox's `resolv.conf`
//! points.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;
use tokio::time::{sleep, timeout};

use crate::egress::dns::{
    next_tcp_message, respond, respond_learning, tcp_frame, Answer, Outcome, TcpMessage, Transport,
    UDP_RECEIVE_BUFFER,
};

use super::{Relay, Rules, Running};

/// TCP connections to the stub open at once; more are closed. A stub
/// client needs one.
const MAX_DNS_TCP_CONNECTIONS: usize = 8;

/// How long a failed receive or accept waits before the next, so an
/// error that repeats does not spin.
const RETRY: Duration = Duration::from_millis(100);

/// Answers UDP queries until the spawn ends.
pub(super) async fn serve_udp(relay: Arc<Relay>, socket: UdpSocket) {
    let mut buffer = vec![0u8; UDP_RECEIVE_BUFFER];
    loop {
        let received = tokio::select! {
            () = relay.stop.cancelled() => return,
            received = socket.recv_from(&mut buffer) => received,
        };
        let (len, peer) = match received {
            Ok(received) => received,
            Err(e) => {
                tracing::debug!("relay: dns stub: receive: {e}");
                sleep(RETRY).await;
                continue;
            }
        };
        if let Some(reply) = answer(&relay, &buffer[..len], Transport::Udp) {
            // A reply that cannot be sent is lost, as UDP allows; the
            // client asks again.
            if let Err(e) = socket.send_to(&reply, peer).await {
                tracing::debug!("relay: dns stub: reply to {peer}: {e}");
            }
        }
    }
}

/// Accepts TCP connections to the stub until the spawn ends.
pub(super) async fn serve_tcp(relay: Arc<Relay>, listener: TcpListener, running: Running) {
    let slots = Arc::new(Semaphore::new(MAX_DNS_TCP_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            () = relay.stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _peer)) => {
                // Past the limit the connection is dropped: closed.
                if let Ok(permit) = slots.clone().try_acquire_owned() {
                    let relay_for_task = relay.clone();
                    running.spawn(async move {
                        tokio::select! {
                            () = relay_for_task.stop.cancelled() => {}
                            () = answer_stream(&relay_for_task, stream) => {}
                        }
                        drop(permit);
                    });
                }
            }
            Err(e) => {
                tracing::debug!("relay: dns stub: accept: {e}");
                sleep(RETRY).await;
            }
        }
    }
}

/// Answers the length-prefixed queries of one TCP connection in turn,
/// until the client closes, sends something that is no query, or is idle
/// for the relay's idle timeout.
async fn answer_stream(relay: &Relay, mut stream: TcpStream) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        match next_tcp_message(&buffer) {
            TcpMessage::Complete { message, consumed } => {
                let reply = answer(relay, message, Transport::Tcp);
                buffer.drain(..consumed);
                let Some(framed) = reply.as_deref().and_then(tcp_frame) else {
                    // Unanswerable (a response, too short): nothing more
                    // is read from this client.
                    return;
                };
                if stream.write_all(&framed).await.is_err() {
                    return;
                }
            }
            TcpMessage::TooLong(_) => return,
            TcpMessage::Incomplete => {
                let read = timeout(relay.config.idle_timeout, stream.read(&mut chunk)).await;
                match read {
                    Ok(Ok(n)) if n > 0 => buffer.extend_from_slice(&chunk[..n]),
                    _ => return,
                }
            }
        }
    }
}

/// The stub's reply to one message, after reporting a refused name.
fn answer(relay: &Relay, message: &[u8], transport: Transport) -> Option<Vec<u8>> {
    let response = match &relay.rules {
        Rules::Grants { names, .. } => respond(message, names, transport),
        // A poisoned table (a task panicked holding it) answers nothing.
        Rules::Learning { names, .. } => {
            respond_learning(message, &mut *names.lock().ok()?, transport)
        }
    };
    if let Outcome::Answered {
        name,
        record_type,
        answer: Answer::NxDomain,
    } = &response.outcome
    {
        let event = relay
            .dns_refusals
            .lock()
            .ok()
            .and_then(|mut refusals| refusals.refused(name, *record_type));
        if let Some(event) = event {
            relay.events.report(event);
        }
    }
    response.reply
}
