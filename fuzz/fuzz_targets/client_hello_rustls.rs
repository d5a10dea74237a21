//! Fuzz target: spawnd's first-flight classifier against a real TLS
//! server's ClientHello parser, one way round: whenever rustls' server
//! side (`Acceptor`) reads a ClientHello naming a server,
//! `spawnd::fuzzing::client_hello_against` checks that spawnd reads the
//! same name or holds or refuses the flight. rustls is a dependency of
//! this fuzz crate only, never of spawnd.
//!
//! rustls frames records strictly (version 3.x only); Go's server does
//! not, so rustls is asked twice: about the bytes as sent, and about the
//! records as Go's server reads them ([`as_go_reads_it`]), which is how
//! a hello behind `16 00 01` reached a Go front end unchecked.
#![no_main]

use rustls::server::Acceptor;

/// Record content types.
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
/// The largest record rustls takes, and the largest Go's server takes
/// (`maxCiphertext`, a TLS 1.2 ciphertext's bound).
const MAX_RECORD: usize = 16384;
const GO_MAX_RECORD: usize = 16384 + 2048;

/// The server name rustls reads from `data` as a server's first bytes,
/// if it reads a ClientHello with one.
fn rustls_server_name(data: &[u8]) -> Option<String> {
    let mut acceptor = Acceptor::default();
    let mut rest = data;
    // `read_tls` takes what its buffer holds per call; an error (a full
    // buffer) ends the reading, and rustls decides on what it has.
    while !rest.is_empty() {
        match acceptor.read_tls(&mut rest) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    let accepted = acceptor.accept().ok()??;
    accepted.client_hello().server_name().map(str::to_string)
}

/// The records a Go TLS server (crypto/tls, `readRecordOrCCS` before a
/// version is negotiated) reads from `data` as its first flight, framed
/// as rustls takes them: handshake and alert records of any version below
/// 16.0 are accepted, warning alerts other than close_notify are dropped,
/// and the handshake records are kept with version 3.3 (split to rustls'
/// record size). Reading stops at the first record Go refuses.
fn as_go_reads_it(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = data;
    while let [kind, major, _, high, low, after @ ..] = rest {
        let len = usize::from(u16::from_be_bytes([*high, *low]));
        if *major >= 0x10 || len > GO_MAX_RECORD || after.len() < len {
            break;
        }
        let fragment = &after[..len];
        match (*kind, fragment) {
            (HANDSHAKE, _) if len > 0 => {
                for chunk in fragment.chunks(MAX_RECORD) {
                    out.extend_from_slice(&[HANDSHAKE, 3, 3]);
                    out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
                    out.extend_from_slice(chunk);
                }
            }
            (ALERT, [1, description]) if *description != 0 => {}
            _ => break,
        }
        rest = &after[len..];
    }
    out
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    spawnd::fuzzing::client_hello_against(data, rustls_server_name(data).as_deref());
    let go = as_go_reads_it(data);
    if go != data {
        spawnd::fuzzing::client_hello_against(data, rustls_server_name(&go).as_deref());
    }
});
