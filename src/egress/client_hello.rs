//! What a client's first bytes on a granted connection are: TLS or not,
//! and for TLS the server name (SNI) its ClientHello asks for, so the
//! engine can close a TLS connection that names another host than the one
//! granted (domain fronting by SNI) without ever decrypting anything.
//!
//! The engine holds the client's bytes until [`classify`] decides, calling
//! it again on everything received so far while it answers
//! [`FirstFlight::NeedMore`], for at most [`MAX_FIRST_FLIGHT`] bytes.
//!
//! What counts as TLS is what some server would read as TLS, not what a
//! well-behaved client sends, since only [`FirstFlight::NotTls`] passes
//! without a name checked. A TLS record begins with its content type;
//! servers differ on the two version bytes after it (Go's accepts any
//! version below 16.0 in a first record, OpenSSL's and rustls' only 3.x),
//! and Go's skips warning alerts ahead of the ClientHello. So, by the
//! first bytes:
//!
//! * 22 (handshake) is TLS whatever follows. Its records must say 3.0–3.4
//!   (SSL 3.0 to TLS 1.3) and carry a ClientHello, read strictly (below);
//!   any other version is [`FirstFlight::Malformed`].
//! * 20 (change_cipher_spec), 21 (alert), 23 (application_data) and 24
//!   (heartbeat) are TLS too, and Malformed on that first byte, whatever
//!   the version bytes: no client begins with one, and a server that skips
//!   an alert or a change_cipher_spec before the hello would read a hello
//!   nobody checked; application data or a heartbeat first is at best an
//!   error to a server, so refusing it costs nothing.
//! * An SSLv2-format record header (high bit of the first byte set) with
//!   CLIENT-HELLO (1) as third byte is Malformed, whatever version it
//!   names: OpenSSL and NSS servers still accept such a hello and
//!   negotiate TLS 1.0–1.2 from it, and it has no extensions, so no
//!   server name: the server would answer as its default host.
//! * Anything else is NotTls and passes, since the grant is `host:port`:
//!   no server reads it as TLS. The cost of the rules above is that a
//!   plain-text or binary protocol whose first byte is 20–24 (a
//!   little-endian length of 20–24 bytes, say), or whose first byte has
//!   its high bit set and whose third is 1, cannot be spoken to a granted
//!   name; no common protocol begins that way.
//!
//! A ClientHello is parsed strictly up to the server_name extension, and
//! every irregularity is Malformed, which the engine closes: a server may
//! read an irregular hello differently, and a parser that guesses could
//! be shown one name while the server sees another. Strict means:
//! handshake records only, each 1–16384 bytes, the ClientHello
//! reassembled across them (a first record shorter than the hello is
//! never enough: what follows must be more handshake records of it, up to
//! [`MAX_FIRST_FLIGHT`]); the first handshake message a ClientHello; the
//! fields before the extensions within their bounds; the extensions
//! exactly filling the message, none twice; a server_name list of exactly
//! one host_name of printable ASCII.
//!
//! Hand-written rather than `tls-parser`: only the path to one field is
//! needed, that crate brings `nom` and derive macros for it, and it parses
//! one record at a time, leaving the reassembly of a fragmented
//! ClientHello to the caller anyway. Every read below goes through
//! `Reader`, which checks each length against what remains.
//!
//! Only the first ClientHello is read. After a HelloRetryRequest the
//! client sends a second one, which RFC 8446 requires to repeat the first
//! but servers check to varying degrees; a client that changes its SNI
//! there is a residual risk, as is fronting by the Host header inside TLS.

use thiserror::Error;

/// The most bytes the engine holds before deciding: a ClientHello, with
/// its record headers, must fit.
pub(crate) const MAX_FIRST_FLIGHT: usize = 16 * 1024;

/// The largest TLS plaintext record (RFC 8446 §5.1).
const MAX_RECORD: usize = 16 * 1024;

/// The longest server name kept: a DNS name and its trailing dot, with
/// room to spare.
const MAX_HOST_NAME: usize = 255;

/// Record content type of a handshake.
const HANDSHAKE: u8 = 22;

/// Handshake message type of a ClientHello.
const CLIENT_HELLO: u8 = 1;

/// Extension type of server_name (RFC 6066).
const SERVER_NAME: u16 = 0;
/// The encrypted_client_hello extension (RFC 9849 draft code point).
const ENCRYPTED_CLIENT_HELLO: u16 = 0xfe0d;
/// The draft encrypted_server_name extension some clients still send.
const DRAFT_ESNI: u16 = 0xffce;
/// TLS record content types other than handshake: change_cipher_spec (20),
/// alert (21), (handshake is 22), application_data (23), heartbeat (24).
const OTHER_TLS_RECORD_FIRST: u8 = 20;
const OTHER_TLS_RECORD_LAST: u8 = 24;

/// The message type of an SSLv2 CLIENT-HELLO, the third byte of an
/// SSLv2-format record.
const SSL2_CLIENT_HELLO: u8 = 1;

/// The server_name entry type of a DNS host name.
const HOST_NAME: u8 = 0;

/// What the first bytes of a connection are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FirstFlight {
    /// A TLS handshake record has begun, and its ClientHello is not
    /// complete yet (or not a byte has arrived).
    NeedMore,
    /// Not a TLS handshake.
    NotTls,
    /// A ClientHello, and the server name it asks for (lowercase, without
    /// a trailing dot), if it has one.
    Tls {
        /// The host_name of the server_name extension.
        sni: Option<String>,
    },
    /// A TLS handshake that is not a well-formed ClientHello.
    Malformed(HelloProblem),
}

/// What is wrong with a TLS handshake that should carry a ClientHello.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum HelloProblem {
    /// A record of another content type before the ClientHello ends.
    #[error("a record of content type {0} inside the ClientHello")]
    NotHandshakeRecord(u8),
    /// A record whose version is not 3.0–3.4 (SSL 3.0 to TLS 1.3).
    #[error("record version {0}.{1}")]
    RecordVersion(u8, u8),
    /// A record of zero bytes, or more than 16384.
    #[error("a record of {0} bytes")]
    RecordLength(usize),
    /// The first handshake message is not a ClientHello.
    #[error("handshake message type {0}, not ClientHello")]
    NotClientHello(u8),
    /// The ClientHello needs more than [`MAX_FIRST_FLIGHT`] bytes.
    #[error("a ClientHello larger than 16 KiB")]
    TooLarge,
    /// A length inside the ClientHello runs past its end.
    #[error("the {0} run past the end of the ClientHello")]
    Truncated(&'static str),
    /// A ClientHello version that is not 3.x.
    #[error("ClientHello version {0}.{1}")]
    HelloVersion(u8, u8),
    /// A session id longer than 32 bytes.
    #[error("a session id of {0} bytes")]
    SessionId(usize),
    /// No cipher suites, or an odd number of bytes of them.
    #[error("{0} bytes of cipher suites")]
    CipherSuites(usize),
    /// No compression methods.
    #[error("no compression methods")]
    NoCompression,
    /// Bytes after the extensions, or after a server_name list.
    #[error("bytes after the {0}")]
    TrailingBytes(&'static str),
    /// An extension type twice.
    #[error("extension {0} twice")]
    DuplicateExtension(u16),
    /// An empty server_name list.
    #[error("an empty server_name list")]
    EmptyServerNameList,
    /// A server_name entry of a type other than host_name.
    #[error("server_name entry type {0}, not host_name")]
    ServerNameType(u8),
    /// A host_name that is empty, too long, not printable ASCII, or has an
    /// empty label (a leading dot, two dots in a row, two at the end).
    #[error("a host_name that is not a printable ASCII name of non-empty labels")]
    HostName,
    /// An encrypted_client_hello (or draft ESNI) extension: the server
    /// name that counts is hidden, so the visible one proves nothing.
    #[error("an encrypted ClientHello (extension {0:#06x}) hides the server name")]
    EncryptedServerName(u16),
    /// The first record is a TLS record of another type (alert, change
    /// cipher spec, application data, heartbeat, whatever its version
    /// bytes) ahead of any ClientHello, or an SSLv2-format hello: TLS, but
    /// not a hello whose name can be read first.
    #[error("TLS record type {0} before the ClientHello")]
    NotHelloFirst(u8),
}

/// Classifies the first bytes a client sent on a connection: see the
/// module documentation. Pure: the same bytes give the same answer, so
/// the caller calls it again with more; once it answers anything but
/// [`FirstFlight::NeedMore`], more bytes give the same answer.
pub(crate) fn classify(bytes: &[u8]) -> FirstFlight {
    // Only the first 16 KiB count, so more bytes never change a decision.
    let bytes = &bytes[..bytes.len().min(MAX_FIRST_FLIGHT)];
    match bytes {
        [] => return FirstFlight::NeedMore,
        // A handshake record whatever its version bytes: `client_hello`
        // reads 3.0–3.4 and refuses any other.
        [HANDSHAKE, ..] => {}
        // Any other record type, decided on its first byte alone.
        [t @ OTHER_TLS_RECORD_FIRST..=OTHER_TLS_RECORD_LAST, ..] => {
            return FirstFlight::Malformed(HelloProblem::NotHelloFirst(*t))
        }
        // SSLv2's two-byte record header (high bit set), then
        // CLIENT-HELLO (1), whatever version follows.
        [b] | [b, _] if b & 0x80 != 0 => return FirstFlight::NeedMore,
        [b, _, SSL2_CLIENT_HELLO, ..] if b & 0x80 != 0 => {
            return FirstFlight::Malformed(HelloProblem::NotHelloFirst(*b))
        }
        _ => return FirstFlight::NotTls,
    }
    match client_hello(bytes) {
        Ok(FirstFlight::NeedMore) if bytes.len() >= MAX_FIRST_FLIGHT => {
            FirstFlight::Malformed(HelloProblem::TooLarge)
        }
        Ok(flight) => flight,
        Err(problem) => FirstFlight::Malformed(problem),
    }
}

/// The ClientHello reassembled from handshake records: its server name,
/// or [`FirstFlight::NeedMore`] while it is incomplete.
fn client_hello(bytes: &[u8]) -> Result<FirstFlight, HelloProblem> {
    let mut handshake = Vec::new();
    let mut rest = bytes;
    loop {
        if let [kind, a, b, c, ..] = handshake[..] {
            if kind != CLIENT_HELLO {
                return Err(HelloProblem::NotClientHello(kind));
            }
            let len = (usize::from(a) << 16) | (usize::from(b) << 8) | usize::from(c);
            if 4 + len > MAX_FIRST_FLIGHT {
                return Err(HelloProblem::TooLarge);
            }
            if let Some(body) = handshake.get(4..4 + len) {
                return Ok(FirstFlight::Tls {
                    sni: server_name_of(body)?,
                });
            }
        }
        match *rest {
            [kind, ..] if kind != HANDSHAKE => return Err(HelloProblem::NotHandshakeRecord(kind)),
            // Decided only once both version bytes are here, so that more
            // bytes never change the answer.
            [_, major, minor, ..] if major != 3 || minor > 4 => {
                return Err(HelloProblem::RecordVersion(major, minor))
            }
            [_, _, _, high, low, ref after @ ..] => {
                let len = usize::from(u16::from_be_bytes([high, low]));
                if len == 0 || len > MAX_RECORD {
                    return Err(HelloProblem::RecordLength(len));
                }
                let Some(fragment) = after.get(..len) else {
                    return Ok(FirstFlight::NeedMore);
                };
                handshake.extend_from_slice(fragment);
                rest = &after[len..];
            }
            _ => return Ok(FirstFlight::NeedMore),
        }
    }
}

/// A cursor over a ClientHello that checks every length against what
/// remains.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], HelloProblem> {
        if n > self.rest.len() {
            return Err(HelloProblem::Truncated(what));
        }
        let (taken, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(taken)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, HelloProblem> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, HelloProblem> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A vector with a one-byte length.
    fn vec8(&mut self, what: &'static str) -> Result<&'a [u8], HelloProblem> {
        let len = self.u8(what)?;
        self.take(usize::from(len), what)
    }

    /// A vector with a two-byte length.
    fn vec16(&mut self, what: &'static str) -> Result<&'a [u8], HelloProblem> {
        let len = self.u16(what)?;
        self.take(usize::from(len), what)
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
}

/// The server name of a ClientHello's body (after its four-byte header).
fn server_name_of(body: &[u8]) -> Result<Option<String>, HelloProblem> {
    let mut r = Reader { rest: body };
    let version = r.take(2, "version")?;
    if version[0] != 3 {
        return Err(HelloProblem::HelloVersion(version[0], version[1]));
    }
    r.take(32, "random")?;
    let session_id = r.vec8("session id")?;
    if session_id.len() > 32 {
        return Err(HelloProblem::SessionId(session_id.len()));
    }
    let suites = r.vec16("cipher suites")?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Err(HelloProblem::CipherSuites(suites.len()));
    }
    if r.vec8("compression methods")?.is_empty() {
        return Err(HelloProblem::NoCompression);
    }
    // A ClientHello without extensions (before TLS 1.2) ends here.
    if r.is_empty() {
        return Ok(None);
    }
    let mut extensions = Reader {
        rest: r.vec16("extensions")?,
    };
    if !r.is_empty() {
        return Err(HelloProblem::TrailingBytes("extensions"));
    }
    let mut seen = Vec::new();
    let mut sni = None;
    while !extensions.is_empty() {
        let kind = extensions.u16("extensions")?;
        let data = extensions.vec16("extensions")?;
        if seen.contains(&kind) {
            return Err(HelloProblem::DuplicateExtension(kind));
        }
        seen.push(kind);
        if kind == ENCRYPTED_CLIENT_HELLO || kind == DRAFT_ESNI {
            return Err(HelloProblem::EncryptedServerName(kind));
        }
        if kind == SERVER_NAME {
            sni = Some(host_name_of(data)?);
        }
    }
    Ok(sni)
}

/// The one host_name of a server_name extension, lowercase, without a
/// trailing dot.
fn host_name_of(data: &[u8]) -> Result<String, HelloProblem> {
    let mut ext = Reader { rest: data };
    let mut list = Reader {
        rest: ext.vec16("server_name list")?,
    };
    if !ext.is_empty() {
        return Err(HelloProblem::TrailingBytes("server_name list"));
    }
    if list.is_empty() {
        return Err(HelloProblem::EmptyServerNameList);
    }
    let kind = list.u8("server_name list")?;
    if kind != HOST_NAME {
        return Err(HelloProblem::ServerNameType(kind));
    }
    let name = list.vec16("server_name list")?;
    // Exactly one name: servers differ on which of several they use.
    if !list.is_empty() {
        return Err(HelloProblem::TrailingBytes("host_name"));
    }
    let name = name.strip_suffix(b".").unwrap_or(name);
    let printable = name.iter().all(|b| b.is_ascii_graphic());
    let labels_non_empty = name.split(|&b| b == b'.').all(|label| !label.is_empty());
    if name.len() > MAX_HOST_NAME || !printable || !labels_non_empty {
        return Err(HelloProblem::HostName);
    }
    Ok(String::from_utf8_lossy(name).to_ascii_lowercase())
}

/// Whether a ClientHello's server name names the granted host: the same
/// name, ignoring ASCII case and a trailing dot on either side.
pub(crate) fn sni_matches(granted_name: &str, sni: &str) -> bool {
    let granted = granted_name.strip_suffix('.').unwrap_or(granted_name);
    let sni = sni.strip_suffix('.').unwrap_or(sni);
    !granted.is_empty() && granted.eq_ignore_ascii_case(sni)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One extension: type, then its data with a two-byte length.
    fn ext(kind: u16, data: &[u8]) -> Vec<u8> {
        let mut out = kind.to_be_bytes().to_vec();
        out.extend_from_slice(&(data.len() as u16).to_be_bytes());
        out.extend_from_slice(data);
        out
    }

    /// server_name extension data holding `entries` (type, name).
    fn server_names(entries: &[(u8, &[u8])]) -> Vec<u8> {
        let mut list = Vec::new();
        for (kind, name) in entries {
            list.push(*kind);
            list.extend_from_slice(&(name.len() as u16).to_be_bytes());
            list.extend_from_slice(name);
        }
        let mut out = (list.len() as u16).to_be_bytes().to_vec();
        out.extend(list);
        out
    }

    fn sni_ext(name: &str) -> Vec<u8> {
        ext(0, &server_names(&[(0, name.as_bytes())]))
    }

    /// A ClientHello body with the given extensions block (`None`: none).
    fn body(extensions: Option<&[u8]>) -> Vec<u8> {
        let mut b = vec![3, 3];
        b.extend_from_slice(&[0xab; 32]);
        b.push(32);
        b.extend_from_slice(&[0xcd; 32]);
        b.extend_from_slice(&[0, 4, 0x13, 0x01, 0x13, 0x02]);
        b.extend_from_slice(&[1, 0]);
        if let Some(exts) = extensions {
            b.extend_from_slice(&(exts.len() as u16).to_be_bytes());
            b.extend_from_slice(exts);
        }
        b
    }

    /// The handshake message around a body.
    fn handshake(kind: u8, body: &[u8]) -> Vec<u8> {
        let len = body.len() as u32;
        let mut h = vec![kind, (len >> 16) as u8, (len >> 8) as u8, len as u8];
        h.extend_from_slice(body);
        h
    }

    /// Records of at most `size` bytes carrying `data`.
    fn records(data: &[u8], size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in data.chunks(size) {
            out.extend_from_slice(&[22, 3, 1]);
            out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            out.extend_from_slice(chunk);
        }
        out
    }

    /// A typical ClientHello for `name`, among other extensions.
    fn hello(name: &str) -> Vec<u8> {
        let exts = [
            ext(0xff01, &[0]),
            sni_ext(name),
            ext(10, &[0, 4, 0, 0x1d, 0, 0x17]),
            ext(43, &[2, 3, 4]),
            ext(21, &[0; 100]),
        ]
        .concat();
        records(&handshake(1, &body(Some(&exts))), MAX_RECORD)
    }

    fn tls(sni: Option<&str>) -> FirstFlight {
        FirstFlight::Tls {
            sni: sni.map(str::to_string),
        }
    }

    fn malformed(bytes: &[u8]) -> HelloProblem {
        match classify(bytes) {
            FirstFlight::Malformed(problem) => problem,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_client_hello_gives_its_server_name_lowercased_without_a_trailing_dot() {
        assert_eq!(
            classify(&hello("api.example.com")),
            tls(Some("api.example.com"))
        );
        assert_eq!(
            classify(&hello("API.Example.COM.")),
            tls(Some("api.example.com"))
        );
        assert_eq!(classify(&hello("192.0.2.1")), tls(Some("192.0.2.1")));
        // Bytes after the ClientHello (say, early data) do not matter.
        let mut more = hello("api.example.com");
        more.extend_from_slice(&[23, 3, 3, 0, 1, 0]);
        assert_eq!(classify(&more), tls(Some("api.example.com")));
    }

    /// ClientHellos real clients sent to a loopback listener (kept as
    /// fuzz seeds): OpenSSL 3.0 `s_client`, curl 7.88 asking for
    /// `API.Example.com`, the first re-framed in 50-byte records, and a
    /// TLS 1.2 hello without SNI.
    #[test]
    fn hellos_of_real_clients_give_their_server_names() {
        let seeds: [(&[u8], Option<&str>); 4] = [
            (
                include_bytes!("../../fuzz/seeds/client_hello/openssl-s_client"),
                Some("api.example.com"),
            ),
            (
                include_bytes!("../../fuzz/seeds/client_hello/curl"),
                Some("api.example.com"),
            ),
            (
                include_bytes!("../../fuzz/seeds/client_hello/openssl-s_client-50-byte-records"),
                Some("api.example.com"),
            ),
            (
                include_bytes!("../../fuzz/seeds/client_hello/openssl-tls12-no-sni"),
                None,
            ),
        ];
        for (bytes, sni) in seeds {
            assert_eq!(classify(bytes), tls(sni));
            assert_eq!(classify(&bytes[..bytes.len() - 1]), FirstFlight::NeedMore);
        }
    }

    #[test]
    fn a_client_hello_without_server_name_is_tls_without_sni() {
        let no_exts = records(&handshake(1, &body(None)), MAX_RECORD);
        assert_eq!(classify(&no_exts), tls(None));
        let other_exts = records(&handshake(1, &body(Some(&ext(43, &[2, 3, 4])))), MAX_RECORD);
        assert_eq!(classify(&other_exts), tls(None));
        let empty_exts = records(&handshake(1, &body(Some(&[]))), MAX_RECORD);
        assert_eq!(classify(&empty_exts), tls(None));
    }

    #[test]
    fn a_client_hello_split_across_records_is_reassembled() {
        let message = handshake(1, &body(Some(&sni_ext("api.example.com"))));
        for size in [1, 2, 3, 5, 40, 100, message.len()] {
            let bytes = records(&message, size);
            assert_eq!(
                classify(&bytes),
                tls(Some("api.example.com")),
                "records of {size}"
            );
        }
    }

    #[test]
    fn every_prefix_of_a_client_hello_needs_more() {
        for bytes in [
            hello("api.example.com"),
            records(&handshake(1, &body(Some(&sni_ext("a.b")))), 7),
        ] {
            for cut in 0..bytes.len() {
                assert_eq!(
                    classify(&bytes[..cut]),
                    FirstFlight::NeedMore,
                    "{cut} of {}",
                    bytes.len()
                );
            }
        }
    }

    #[test]
    fn other_protocols_are_not_tls() {
        for bytes in [
            &b"GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n"[..],
            b"SSH-2.0-OpenSSH_9.6\r\n",
            b"\x00",
            b"\x13\x03\x01",
            b"\x19\x03\x01",
            b"\x80\x2e\x02",
            b"\xff\xff\x00\x03\x01",
        ] {
            assert_eq!(classify(bytes), FirstFlight::NotTls, "{bytes:?}");
        }
        assert_eq!(classify(b""), FirstFlight::NeedMore);
        assert_eq!(classify(b"\x16"), FirstFlight::NeedMore);
        assert_eq!(classify(b"\x16\x00"), FirstFlight::NeedMore);
    }

    /// A server reads a first byte of 22 as a TLS handshake record
    /// whatever its version bytes (Go's accepts any version below 16.0 in
    /// the first record), so a hello behind `16 00 01` is TLS, and only
    /// record versions 3.0–3.4 are read: any other is refused, never
    /// passed as plain text with its server name unread.
    #[test]
    fn a_handshake_record_is_tls_whatever_its_version_and_only_3_0_to_3_4_is_read() {
        let message = handshake(1, &body(Some(&sni_ext("evil.example.org"))));
        let with_version = |major: u8, minor: u8| {
            let mut bytes = records(&message, MAX_RECORD);
            bytes[1..3].copy_from_slice(&[major, minor]);
            bytes
        };
        for (major, minor) in [
            (0, 1),
            (0, 0),
            (1, 0),
            (2, 0),
            (3, 5),
            (3, 0xff),
            (0x0f, 0xff),
            (0x10, 0),
            (0xfe, 0xfd),
            (0xff, 0xff),
        ] {
            let bytes = with_version(major, minor);
            assert_eq!(
                malformed(&bytes),
                HelloProblem::RecordVersion(major, minor),
                "{major}.{minor}"
            );
            assert_eq!(
                malformed(&bytes[..3]),
                HelloProblem::RecordVersion(major, minor),
                "{major}.{minor}, three bytes"
            );
        }
        for minor in 0..=4 {
            assert_eq!(
                classify(&with_version(3, minor)),
                tls(Some("evil.example.org")),
                "3.{minor}"
            );
        }
        // A later record of the same hello is held to the same versions.
        let mut second = records(&message, 40);
        second[45..48].copy_from_slice(&[22, 0, 1]);
        assert_eq!(malformed(&second), HelloProblem::RecordVersion(0, 1));
    }

    /// A TLS record of another type first (an alert or a change cipher
    /// spec a server may skip before the real ClientHello), or an SSLv2
    /// hello, would let a hello with any server name through unread; so
    /// would the same records with version bytes other than 3.x, which Go
    /// accepts in a first record (a warning alert, skipped, then the
    /// hello).
    #[test]
    fn tls_that_does_not_begin_with_a_readable_hello_is_malformed() {
        let mut alert_then_hello = b"\x15\x03\x03\x00\x02\x01\x00".to_vec();
        alert_then_hello.extend(hello("other.example.com"));
        let mut odd_alert_then_hello = b"\x15\x00\x01\x00\x02\x01\x5a".to_vec();
        odd_alert_then_hello.extend(hello("other.example.com"));
        for (bytes, first) in [
            (&b"\x15\x03\x03\x00\x02\x02\x28"[..], 21),
            (&alert_then_hello[..], 21),
            (&odd_alert_then_hello[..], 21),
            (b"\x15", 21),
            (b"\x15\x02", 21),
            (b"\x15\x00\x01\x00\x02\x01\x00", 21),
            (b"\x14\x03\x03\x00\x01\x01", 20),
            (b"\x14\x00\x01\x00\x01\x01", 20),
            (b"\x14", 20),
            (b"\x17\x03\x03", 23),
            (b"\x17\x00\x00\x00", 23),
            (b"\x17", 23),
            (b"\x18\x03\x01", 24),
            (b"\x18\x01\x00", 24),
            (b"\x18", 24),
            (b"\x80\x2e\x01\x00\x02", 0x80),
            (b"\x80\x2e\x01\x03\x01", 0x80),
            (b"\x80\x2e\x01", 0x80),
            (b"\x80\x2e\x01\x01\x01", 0x80),
            (b"\x80\x2e\x01\x04\x00", 0x80),
            (b"\x80\x2e\x01\xff\xff", 0x80),
            (b"\xff\xff\x01\x03\x03", 0xff),
        ] {
            assert_eq!(
                classify(bytes),
                FirstFlight::Malformed(HelloProblem::NotHelloFirst(first)),
                "{bytes:?}"
            );
        }
        for prefix in [&b"\x80"[..], b"\x80\x2e", b"\xc1\x00"] {
            assert_eq!(classify(prefix), FirstFlight::NeedMore, "{prefix:?}");
        }
    }

    /// A first record that carries only part of the hello is never
    /// enough: the rest is read from the records after it, or the flight
    /// is refused. Neither a short first record nor a first message that
    /// is not a ClientHello lets later records through unread.
    #[test]
    fn a_hello_is_read_whole_across_records_or_refused() {
        let message = handshake(1, &body(Some(&sni_ext("evil.example.org"))));
        let split = records(&message, 20);
        // Every record boundary: the first records alone need more.
        let mut at = 0;
        while at < split.len() {
            assert_eq!(classify(&split[..at]), FirstFlight::NeedMore, "{at}");
            at += 25;
        }
        assert_eq!(classify(&split), tls(Some("evil.example.org")));
        // The rest of the hello in an application_data record, or after
        // an alert, is not reassembled.
        for kind in [20, 21, 23, 24] {
            let mut bytes = split.clone();
            bytes[25] = kind;
            assert_eq!(
                malformed(&bytes),
                HelloProblem::NotHandshakeRecord(kind),
                "{kind}"
            );
        }
        // The first record ends, and plain text follows.
        let mut plain = split[..25].to_vec();
        plain.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(malformed(&plain), HelloProblem::NotHandshakeRecord(b'G'));
        // A first message other than a ClientHello, then a hello.
        let mut request_then_hello = records(&handshake(0, &[]), MAX_RECORD);
        request_then_hello.extend(records(&message, MAX_RECORD));
        assert_eq!(
            malformed(&request_then_hello),
            HelloProblem::NotClientHello(0)
        );
        let mut finished_first = records(&handshake(20, &[0; 12]), MAX_RECORD);
        finished_first.extend(records(&message, MAX_RECORD));
        assert_eq!(malformed(&finished_first), HelloProblem::NotClientHello(20));
    }

    /// An encrypted ClientHello carries the name that counts inside: the
    /// outer, readable one could name the granted host while the server
    /// is asked for another behind the same address.
    #[test]
    fn an_encrypted_client_hello_is_malformed_whatever_its_outer_name() {
        for kind in [0xfe0d, 0xffce] {
            let exts = [sni_ext("api.example.com"), ext(kind, &[0; 40])].concat();
            let bytes = records(&handshake(1, &body(Some(&exts))), MAX_RECORD);
            assert_eq!(
                classify(&bytes),
                FirstFlight::Malformed(HelloProblem::EncryptedServerName(kind)),
                "{kind:#x}"
            );
        }
    }

    #[test]
    fn irregular_handshakes_are_malformed() {
        use HelloProblem as P;
        let full = |exts: &[u8]| records(&handshake(1, &body(Some(exts))), MAX_RECORD);
        let with_body = |b: &[u8]| records(&handshake(1, b), MAX_RECORD);
        let mut interleaved = records(&handshake(1, &body(Some(&sni_ext("a.b")))), 30);
        interleaved.splice(35..35, [20, 3, 3, 0, 1, 1]);
        let mut short_session = body(None);
        short_session[34] = 33;
        let mut odd_suites = body(None);
        odd_suites[67..69].copy_from_slice(&[0, 3]);
        let mut bad_version = body(None);
        bad_version[0] = 2;
        let mut no_compression = body(None);
        let at = no_compression.len() - 2;
        no_compression[at] = 0;
        no_compression.pop();
        let mut ext_trailing = body(Some(&sni_ext("a.b")));
        ext_trailing.push(0);
        let cases: Vec<(Vec<u8>, HelloProblem)> = vec![
            (vec![22, 3, 5, 0, 1, 1], P::RecordVersion(3, 5)),
            (
                [&records(&handshake(1, &body(None)), 30)[..35], &[22, 2, 1]].concat(),
                P::RecordVersion(2, 1),
            ),
            (vec![22, 3, 1, 0, 0], P::RecordLength(0)),
            (vec![22, 3, 1, 0x40, 1], P::RecordLength(16385)),
            (interleaved, P::NotHandshakeRecord(20)),
            (
                records(&handshake(2, &body(None)), MAX_RECORD),
                P::NotClientHello(2),
            ),
            (records(&[1, 1, 0, 0], MAX_RECORD), P::TooLarge),
            (with_body(&bad_version), P::HelloVersion(2, 3)),
            (with_body(&short_session), P::SessionId(33)),
            (with_body(&odd_suites), P::CipherSuites(3)),
            (with_body(&no_compression), P::NoCompression),
            (with_body(&body(None)[..50]), P::Truncated("session id")),
            (with_body(&ext_trailing), P::TrailingBytes("extensions")),
            (full(&[0, 0, 0, 9]), P::Truncated("extensions")),
            (full(&[0, 0]), P::Truncated("extensions")),
            (
                full(&[sni_ext("a.b"), sni_ext("a.b")].concat()),
                P::DuplicateExtension(0),
            ),
            (
                full(&[ext(10, &[]), ext(10, &[])].concat()),
                P::DuplicateExtension(10),
            ),
            (full(&ext(0, &[])), P::Truncated("server_name list")),
            (full(&ext(0, &[0, 0])), P::EmptyServerNameList),
            (
                full(&ext(0, &[0, 5, 0, 0, 1, b'a'])),
                P::Truncated("server_name list"),
            ),
            (
                full(&ext(0, &[0, 4, 0, 0, 1, b'a', 9])),
                P::TrailingBytes("server_name list"),
            ),
            (
                full(&ext(0, &server_names(&[(1, b"a.b")]))),
                P::ServerNameType(1),
            ),
            (
                full(&ext(0, &server_names(&[(0, b"a.b"), (0, b"c.d")]))),
                P::TrailingBytes("host_name"),
            ),
            (full(&ext(0, &server_names(&[(0, b"")]))), P::HostName),
            (full(&ext(0, &server_names(&[(0, b".")]))), P::HostName),
            (full(&ext(0, &server_names(&[(0, b"a.b..")]))), P::HostName),
            (full(&ext(0, &server_names(&[(0, b"a..b")]))), P::HostName),
            (full(&ext(0, &server_names(&[(0, b".a.b")]))), P::HostName),
            (
                full(&ext(0, &server_names(&[(0, b"a.b\0.evil")]))),
                P::HostName,
            ),
            (full(&ext(0, &server_names(&[(0, b"a b")]))), P::HostName),
            (
                full(&ext(0, &server_names(&[(0, "bücher.de".as_bytes())]))),
                P::HostName,
            ),
            (
                full(&ext(0, &server_names(&[(0, &[b'a'; 256])]))),
                P::HostName,
            ),
        ];
        for (i, (bytes, problem)) in cases.iter().enumerate() {
            assert_eq!(&malformed(bytes), problem, "case {i}");
        }
    }

    #[test]
    fn a_hello_that_never_completes_within_16_kib_is_malformed() {
        // One-byte records of a hello that declares itself near the limit.
        let message = handshake(1, &vec![0; MAX_FIRST_FLIGHT - 4]);
        let bytes = records(&message, 1);
        assert_eq!(
            classify(&bytes[..MAX_FIRST_FLIGHT - 1]),
            FirstFlight::NeedMore
        );
        assert_eq!(
            malformed(&bytes[..MAX_FIRST_FLIGHT]),
            HelloProblem::TooLarge
        );
        assert_eq!(
            malformed(&records(
                &handshake(1, &vec![0; MAX_FIRST_FLIGHT]),
                MAX_RECORD
            )),
            HelloProblem::TooLarge
        );
    }

    #[test]
    fn sni_matches_is_exact_but_for_case_and_a_trailing_dot() {
        let table = [
            ("api.example.com", "api.example.com", true),
            ("api.example.com", "API.EXAMPLE.COM", true),
            ("api.example.com", "api.example.com.", true),
            ("api.example.com.", "api.example.com", true),
            ("api.example.com", "example.com", false),
            ("api.example.com", "x.api.example.com", false),
            ("api.example.com", "api.example.com..", false),
            ("api.example.com", "api.example.co", false),
            ("api.example.com", "", false),
            ("", "", false),
            (".", ".", false),
            ("xn--bcher-kva.example", "XN--BCHER-KVA.example", true),
        ];
        for (granted, sni, want) in table {
            assert_eq!(sni_matches(granted, sni), want, "{granted:?} {sni:?}");
        }
    }

    proptest! {
        /// Any bytes, and any bytes behind a handshake record header: no
        /// panic, and 16 KiB or more is never "need more".
        #[test]
        fn classify_never_panics_and_always_decides_within_the_cap(
            tail in prop::collection::vec(any::<u8>(), 0..600),
            framed in any::<bool>(),
        ) {
            let bytes = if framed {
                let mut b = vec![22, 3, 1];
                b.extend_from_slice(&(tail.len() as u16).to_be_bytes());
                b.extend_from_slice(&tail);
                b
            } else {
                tail
            };
            let _ = classify(&bytes);
            let mut padded = bytes.clone();
            padded.resize(MAX_FIRST_FLIGHT, 0);
            prop_assert_ne!(classify(&padded), FirstFlight::NeedMore);
        }

        /// A ClientHello for a generated name, fragmented at any record
        /// size, gives that name; and it matches only itself.
        #[test]
        fn any_fragmentation_gives_the_same_name(
            labels in prop::collection::vec("[a-zA-Z0-9-]{1,20}", 1..5),
            size in 1usize..300,
        ) {
            let name = labels.join(".");
            let message = handshake(1, &body(Some(&sni_ext(&name))));
            let got = classify(&records(&message, size));
            let lower = name.to_ascii_lowercase();
            prop_assert_eq!(got, tls(Some(&lower)));
            prop_assert!(sni_matches(&lower, &name));
            let other = format!("x{lower}");
            prop_assert!(!sni_matches(&other, &name));
        }
    }
}
