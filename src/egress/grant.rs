//! A network grant as a manifest writes it, `host:port`: a lowercase DNS
//! name (`api.example.com:443`), a canonical IPv4 address
//! (`192.0.2.1:8080`) or a bracketed IPv6 address (`[2001:db8::1]:443`),
//! always with an explicit port.
//!
//! Parsing is exact: the only accepted spelling of a grant is its canonical
//! form, so `Grant::parse(s)` succeeds only when the grant's `Display` gives
//! `s` back. There is no wildcard, pattern or default of any kind, and every
//! refusal is an error, never a wider grant: an invalid address never
//! becomes `0.0.0.0`, a port of 65536 never becomes "any port". Spellings
//! that other parsers read differently are refused rather than interpreted:
//! `127.1`, `0x7f.0.0.1`, `2130706433` and `010.0.0.1` are IPv4 addresses to
//! `inet_aton` but not here, and a name that ends in a number is read as an
//! attempted address, as URL parsers read it.
//!
//! A refusal is a [`GrantError`]: where in the text it starts, what was
//! wrong ([`GrantProblem`]) and how to write it instead (`hint`), so the
//! manifest lint can show both at the right line and column.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

use crate::printable::printable;

/// The longest name a grant may carry, in bytes, without a trailing dot
/// (RFC 1035's 255 octets on the wire).
pub(crate) const MAX_NAME_LEN: usize = 253;

/// The longest label of a name, in bytes (RFC 1035).
pub(crate) const MAX_LABEL_LEN: usize = 63;

/// The port shown in a hint when the grant's own port is missing or
/// unusable.
const EXAMPLE_PORT: &str = "443";

/// What a grant lets the program reach: a name spawnd resolves itself, or
/// exactly one address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Host {
    /// A lowercase DNS name of LDH labels and A-labels, at least two labels,
    /// no trailing dot.
    Name(String),
    /// One IPv4 or IPv6 address (never IPv4-mapped, unspecified, or in the
    /// fake pool spawnd answers granted names with).
    Ip(IpAddr),
}

impl fmt::Display for Host {
    /// The host as a grant writes it: IPv6 addresses in brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(IpAddr::V4(ip)) => write!(f, "{ip}"),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
        }
    }
}

/// One `host:port` pair a program may connect to. Only [`Grant::parse`]
/// makes one, so a `Grant` is always valid and canonical.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Grant {
    host: Host,
    port: u16,
}

impl Grant {
    /// Parses a grant, exactly: see the module documentation.
    pub fn parse(text: &str) -> Result<Grant, GrantError> {
        parse(text)
    }

    /// The granted host.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The granted port, 1–65535.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The granted name, when the host is a name.
    pub fn name(&self) -> Option<&str> {
        match &self.host {
            Host::Name(name) => Some(name),
            Host::Ip(_) => None,
        }
    }
}

impl fmt::Display for Grant {
    /// The canonical form, which [`Grant::parse`] accepts and nothing else.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl FromStr for Grant {
    type Err = GrantError;

    fn from_str(text: &str) -> Result<Grant, GrantError> {
        parse(text)
    }
}

impl Serialize for Grant {
    /// As its canonical string.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Grant {
    /// From a string, through [`Grant::parse`].
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Grant, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A refused grant: where the problem starts, what it is, and how to write
/// the grant instead.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{problem}; {hint}")]
pub struct GrantError {
    /// Byte offset in the grant's text where the problem starts.
    pub at: usize,
    /// What was wrong.
    pub problem: GrantProblem,
    /// How to write it instead, usually a corrected grant.
    pub hint: String,
}

/// What can be wrong with a grant. Messages quote the grant's text with
/// control characters escaped.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GrantProblem {
    /// Nothing was written.
    #[error("the grant is empty")]
    Empty,
    /// A space, tab, line break or other control character.
    #[error("the grant contains {}", escaped_char(*.0))]
    Whitespace(char),
    /// `scheme://…`: a URL, not a grant.
    #[error("`{}://` is a URL scheme, and a grant is a host and a port alone", printable(.0))]
    Scheme(String),
    /// `user@host`: credentials do not belong in a grant. (What precedes
    /// the `@` is not repeated: it may be a password.)
    #[error("user information (`…@`) cannot be part of a grant")]
    UserInfo,
    /// `*`: grants have no wildcards.
    #[error("`*` is not a wildcard here: a grant names exactly one host")]
    Wildcard,
    /// A `/`, `?` or `#`, and what follows it. (Not repeated: a query may
    /// hold a token.)
    #[error(
        "a path, query or fragment cannot be part of a grant, which is a host and a port alone"
    )]
    Path,
    /// Nothing before the `:`.
    #[error("the host is missing before `:`")]
    EmptyHost,
    /// No `:port` after the host.
    #[error("`{}` has no port", printable(.0))]
    MissingPort(String),
    /// More than one `:` outside brackets, and not an IPv6 address.
    #[error("`:` separates the host from the port and appears only once")]
    ExtraColon,
    /// The port has something other than decimal digits (a sign, a space,
    /// a letter).
    #[error("the port `{}` is not a decimal number", printable(.0))]
    PortNotDecimal(String),
    /// The port starts with `0`.
    #[error("the port `{}` has a leading zero", printable(.0))]
    PortLeadingZero(String),
    /// Port 0.
    #[error("port 0 is no port a program can connect to")]
    PortZero,
    /// A port above 65535.
    #[error("the port `{}` is above 65535", printable(.0))]
    PortTooLarge(String),
    /// An IPv6 address written without brackets.
    #[error("an IPv6 address is written in brackets, before the port")]
    UnbracketedIpv6,
    /// A `[` without its `]`.
    #[error("`[` opens an IPv6 address that is never closed")]
    UnclosedBracket,
    /// Something other than `:port` after `]`.
    #[error("`{}` follows `]`, where only `:port` may", printable(.0))]
    AfterBracket(String),
    /// A stray `[` or `]`.
    #[error("`{0}` belongs only around an IPv6 address")]
    StrayBracket(char),
    /// The text in brackets is not an IPv6 address.
    #[error("`[{}]` is not an IPv6 address", printable(.0))]
    NotIpv6(String),
    /// `%zone` after an IPv6 address.
    #[error("`%{}` is a zone id, which names a link of one machine", printable(.0))]
    ZoneId(String),
    /// `[::ffff:a.b.c.d]`: an IPv4 address in IPv6 clothing.
    #[error("`[{0}]` is the IPv4 address {1} written as IPv6")]
    Ipv4MappedIpv6(Ipv6Addr, Ipv4Addr),
    /// An IPv6 address not in its canonical (RFC 5952) form.
    #[error("`[{}]` is not the canonical form of the IPv6 address {}", printable(.0), .1)]
    NonCanonicalIpv6(String, Ipv6Addr),
    /// A host that ends in a number but is not a canonical dotted quad.
    #[error(
        "`{}` ends in a number, so it is read as an IPv4 address, but it is not four \
         decimal numbers 0-255 without leading zeros{}",
        printable(.0),
        .1.map(|ip| format!(" (inet_aton reads it as {ip})")).unwrap_or_default()
    )]
    NonCanonicalIpv4(String, Option<Ipv4Addr>),
    /// `0.0.0.0` or `[::]`, which `connect` takes for this machine.
    #[error("{0} is the unspecified address, which connect() takes to mean this machine")]
    UnspecifiedAddress(IpAddr),
    /// An address in 198.18.0.0/15, the pool spawnd answers granted names
    /// with.
    #[error("{0} is in 198.18.0.0/15, the pool spawnd answers granted names with")]
    FakePoolAddress(Ipv4Addr),
    /// A name with characters outside ASCII.
    #[error("`{}` is not ASCII", printable(.0))]
    NotAscii(String),
    /// A name with uppercase letters.
    #[error("`{}` has uppercase letters", printable(.0))]
    Uppercase(String),
    /// A name ending in `.`.
    #[error("`{}` ends with a dot", printable(.0))]
    TrailingDot(String),
    /// `..`, or a name starting with `.`.
    #[error("`{}` has an empty label", printable(.0))]
    EmptyLabel(String),
    /// A label longer than 63 bytes.
    #[error("the label `{}` is {} characters long, above the 63 a label may have", printable(.0), .1)]
    LabelTooLong(String, usize),
    /// A name longer than 253 bytes.
    #[error("the name is {0} characters long, above the 253 a name may have")]
    NameTooLong(usize),
    /// A character other than a-z, 0-9 or `-` in a label.
    #[error("the label `{}` has {}, and a label has only a-z, 0-9 and `-`", printable(.0), escaped_char(*.1))]
    LabelCharacter(String, char),
    /// A label that starts or ends with `-`.
    #[error("the label `{}` starts or ends with `-`", printable(.0))]
    LabelHyphen(String),
    /// An `xn--` label that is not the A-label of a valid name label.
    #[error("`{}` is not a valid A-label: it does not decode to a label that encodes back to exactly it", printable(.0))]
    BadALabel(String),
    /// A name of one label.
    #[error("`{}` is a single label", printable(.0))]
    SingleLabel(String),
}

/// `c` quoted for a message, escaped when it would not print.
fn escaped_char(c: char) -> String {
    match c {
        ' ' => "a space".to_string(),
        c => format!("`{}`", printable(c.encode_utf8(&mut [0; 4]))),
    }
}

/// An error at byte `at` with its hint.
fn refuse(at: usize, problem: GrantProblem, hint: impl Into<String>) -> GrantError {
    GrantError {
        at,
        problem,
        hint: hint.into(),
    }
}

/// A generic example for hints that have nothing better to suggest.
const EXAMPLE: &str = "`api.example.com:443`, `192.0.2.1:8080` or `[2001:db8::1]:443`";

fn parse(text: &str) -> Result<Grant, GrantError> {
    if text.is_empty() {
        return Err(refuse(
            0,
            GrantProblem::Empty,
            format!("write a host and a port, e.g. {EXAMPLE}"),
        ));
    }
    refuse_url_parts(text)?;
    let (host_text, bracketed, port_text, port_at) = split_host_port(text)?;
    let host = parse_host(host_text, bracketed, port_text)?;
    let port = parse_port(port_text, port_at, &host)?;
    Ok(Grant { host, port })
}

/// The port text as a hint shows it: the grant's own when it is a valid
/// port, otherwise an example.
fn hint_port(port_text: &str) -> &str {
    match port_text.parse::<u16>() {
        Ok(p) if p > 0 && !port_text.starts_with(['0', '+']) => port_text,
        _ => EXAMPLE_PORT,
    }
}

/// Refuses what makes a grant look like a URL or a pattern, wherever it
/// is: spaces and control characters, a scheme, user information, `*`, a
/// path, query or fragment. Each hint offers what is left once that part
/// is gone, when that is a valid grant.
fn refuse_url_parts(text: &str) -> Result<(), GrantError> {
    if let Some((at, c)) = text
        .char_indices()
        .find(|(_, c)| c.is_whitespace() || c.is_control())
    {
        let trimmed: String = text
            .chars()
            .filter(|c| !c.is_whitespace() && !c.is_control())
            .collect();
        return Err(refuse(
            at,
            GrantProblem::Whitespace(c),
            suggest(&trimmed, "write the grant without it"),
        ));
    }
    if let Some(at) = text.find("://") {
        let scheme = &text[..at];
        let rest = &text[at + 3..];
        let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
        let authority = authority.rsplit('@').next().unwrap_or(authority);
        let default_port = match scheme.to_ascii_lowercase().as_str() {
            "http" | "ws" => Some("80"),
            "https" | "wss" => Some("443"),
            _ => None,
        };
        let candidate = match default_port {
            Some(port) if !has_port(authority) => format!("{authority}:{port}"),
            _ => authority.to_string(),
        };
        return Err(refuse(
            0,
            GrantProblem::Scheme(scheme.to_string()),
            suggest(&candidate, "write the host and port alone"),
        ));
    }
    if let Some(at) = text.rfind('@') {
        let rest = &text[at + 1..];
        return Err(refuse(
            0,
            GrantProblem::UserInfo,
            suggest(
                rest,
                "write the host and port alone; credentials reach a program through the vault",
            ),
        ));
    }
    if let Some(at) = text.find('*') {
        return Err(refuse(
            at,
            GrantProblem::Wildcard,
            "list each host the program needs, e.g. `api.example.com:443`",
        ));
    }
    if let Some(at) = text.find(['/', '?', '#']) {
        return Err(refuse(
            at,
            GrantProblem::Path,
            suggest(&text[..at], "write the host and port alone"),
        ));
    }
    Ok(())
}

/// Whether an authority taken from a URL already names a port.
fn has_port(authority: &str) -> bool {
    match authority.rfind(']') {
        Some(close) => authority[close..].contains(':'),
        None => authority.matches(':').count() == 1,
    }
}

/// "write `candidate`" when `candidate` is a valid grant, else `fallback`
/// with the generic example.
fn suggest(candidate: &str, fallback: &str) -> String {
    match parse(candidate) {
        Ok(grant) => format!("write `{}`", printable(&grant.to_string())),
        Err(_) => format!("{fallback}, e.g. {EXAMPLE}"),
    }
}

/// Splits the text into the host's text, whether it was in brackets (then
/// it is what is inside them), the port's text and the port's offset.
fn split_host_port(text: &str) -> Result<(&str, bool, &str, usize), GrantError> {
    if let Some(inner) = text.strip_prefix('[') {
        let Some(close) = inner.find(']') else {
            return Err(refuse(
                0,
                GrantProblem::UnclosedBracket,
                "write an IPv6 address as `[2001:db8::1]:443`",
            ));
        };
        let host = &inner[..close];
        let after = &inner[close + 1..];
        return match after.strip_prefix(':') {
            Some(port) => Ok((host, true, port, close + 3)),
            None if after.is_empty() => Err(refuse(
                text.len(),
                GrantProblem::MissingPort(text.to_string()),
                format!(
                    "name the port the program connects to, e.g. `{}:{EXAMPLE_PORT}`",
                    printable(text)
                ),
            )),
            None => Err(refuse(
                close + 2,
                GrantProblem::AfterBracket(after.to_string()),
                "write an IPv6 address as `[2001:db8::1]:443`",
            )),
        };
    }
    if let Some(at) = text.find(['[', ']']) {
        let c = if text[at..].starts_with('[') {
            '['
        } else {
            ']'
        };
        return Err(refuse(
            at,
            GrantProblem::StrayBracket(c),
            format!("write a host and a port, e.g. {EXAMPLE}"),
        ));
    }
    match text.matches(':').count() {
        0 => Err(refuse(
            text.len(),
            GrantProblem::MissingPort(text.to_string()),
            format!(
                "name the port the program connects to, e.g. `{}:{EXAMPLE_PORT}`",
                printable(text)
            ),
        )),
        1 => {
            let colon = text.find(':').unwrap_or(text.len());
            Ok((&text[..colon], false, &text[colon + 1..], colon + 1))
        }
        _ => Err(unbracketed(text)),
    }
}

/// The error for a host and port with several colons: an IPv6 address
/// without brackets when it reads as one, else a stray colon.
fn unbracketed(text: &str) -> GrantError {
    // `2001:db8::1:8443` is itself an address, and also an address and a
    // port: offer each reading that parses.
    let mut readings = Vec::new();
    if let Ok(ip) = text.parse::<Ipv6Addr>() {
        readings.push(format!("`[{ip}]:{EXAMPLE_PORT}`"));
    }
    if let Some((host, port)) = text.rsplit_once(':') {
        if let Ok(ip) = host.parse::<Ipv6Addr>() {
            readings.push(format!("`[{ip}]:{}`", hint_port(port)));
        }
    }
    if readings.is_empty() {
        let first = text.find(':').unwrap_or(0);
        let second = text[first + 1..].find(':').map_or(first, |i| first + 1 + i);
        return refuse(
            second,
            GrantProblem::ExtraColon,
            format!("write one host and one port, e.g. {EXAMPLE}"),
        );
    }
    refuse(
        0,
        GrantProblem::UnbracketedIpv6,
        format!(
            "write {}, with the port the program connects to",
            readings.join(" or ")
        ),
    )
}

fn parse_port(port_text: &str, at: usize, host: &Host) -> Result<u16, GrantError> {
    if port_text.is_empty() {
        return Err(refuse(
            at,
            GrantProblem::MissingPort(host.to_string()),
            format!("name the port the program connects to, e.g. `{host}:{EXAMPLE_PORT}`"),
        ));
    }
    // Digits only: `str::parse` would take a leading `+`.
    if !port_text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refuse(
            at,
            GrantProblem::PortNotDecimal(port_text.to_string()),
            format!("write the port in decimal digits, e.g. `{host}:{EXAMPLE_PORT}`"),
        ));
    }
    let trimmed = port_text.trim_start_matches('0');
    if trimmed.is_empty() {
        return Err(refuse(
            at,
            GrantProblem::PortZero,
            format!("name the port the program connects to, 1-65535, e.g. `{host}:{EXAMPLE_PORT}`"),
        ));
    }
    let Ok(port) = trimmed.parse::<u16>() else {
        return Err(refuse(
            at,
            GrantProblem::PortTooLarge(port_text.to_string()),
            "ports run from 1 to 65535",
        ));
    };
    if trimmed.len() != port_text.len() {
        return Err(refuse(
            at,
            GrantProblem::PortLeadingZero(port_text.to_string()),
            format!("write `{host}:{trimmed}`"),
        ));
    }
    Ok(port)
}

/// The host of a grant: the inside of brackets is IPv6, a host ending in a
/// number is IPv4, anything else is a name.
fn parse_host(host_text: &str, bracketed: bool, port_text: &str) -> Result<Host, GrantError> {
    let port = hint_port(port_text);
    if bracketed {
        return parse_bracketed(host_text, port);
    }
    if host_text.is_empty() {
        return Err(refuse(
            0,
            GrantProblem::EmptyHost,
            format!("write the host before the port, e.g. `api.example.com:{port}`"),
        ));
    }
    if let Some(c) = host_text.chars().find(|c| !c.is_ascii()) {
        let at = host_text.find(c).unwrap_or(0);
        let hint = match idna::domain_to_ascii_strict(host_text) {
            Ok(ascii) if parse_name(&ascii, port, 0).is_ok() => {
                format!("write the name in ASCII, as IDNA encodes it: `{ascii}:{port}`")
            }
            _ => "write the name in ASCII, an internationalized name as its A-label \
                  (`xn--…`)"
                .to_string(),
        };
        return Err(refuse(
            at,
            GrantProblem::NotAscii(host_text.to_string()),
            hint,
        ));
    }
    if let Some(without) = host_text.strip_suffix('.') {
        return Err(refuse(
            host_text.len() - 1,
            GrantProblem::TrailingDot(host_text.to_string()),
            suggest(&format!("{without}:{port}"), "drop the final dot"),
        ));
    }
    let last = host_text.rsplit('.').next().unwrap_or(host_text);
    if is_numeric_label(last) {
        return parse_ipv4(host_text, port).map(Host::Ip);
    }
    parse_name(host_text, port, 0).map(Host::Name)
}

/// A bracketed host (the brackets already removed, so errors are at
/// offset 1), or an empty one.
fn parse_bracketed(inner: &str, port: &str) -> Result<Host, GrantError> {
    if let Some(pct) = inner.find('%') {
        return Err(refuse(
            1 + pct,
            GrantProblem::ZoneId(inner[pct + 1..].to_string()),
            "grant an address without a zone id, e.g. `[2001:db8::1]:443`",
        ));
    }
    let Ok(ip) = inner.parse::<Ipv6Addr>() else {
        let hint = if let Ok(v4) = inner.parse::<Ipv4Addr>() {
            format!("an IPv4 address goes without brackets: write `{v4}:{port}`")
        } else {
            format!("brackets hold an IPv6 address, e.g. `[2001:db8::1]:{port}`")
        };
        return Err(refuse(1, GrantProblem::NotIpv6(inner.to_string()), hint));
    };
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Err(refuse(
            1,
            GrantProblem::Ipv4MappedIpv6(ip, v4),
            format!("write `{v4}:{port}`"),
        ));
    }
    if ip.is_unspecified() {
        return Err(refuse(
            1,
            GrantProblem::UnspecifiedAddress(IpAddr::V6(ip)),
            format!("grant the loopback address for a local service, `[::1]:{port}`"),
        ));
    }
    if ip.to_string() != inner {
        return Err(refuse(
            1,
            GrantProblem::NonCanonicalIpv6(inner.to_string(), ip),
            format!("write `[{ip}]:{port}`"),
        ));
    }
    Ok(Host::Ip(IpAddr::V6(ip)))
}

/// Whether a last label makes a host an attempted IPv4 address, as the URL
/// standard decides it: all decimal digits, or `0x` and hex digits.
fn is_numeric_label(label: &str) -> bool {
    let hex = label
        .strip_prefix("0x")
        .or_else(|| label.strip_prefix("0X"));
    match hex {
        Some(digits) => digits.bytes().all(|b| b.is_ascii_hexdigit()),
        None => !label.is_empty() && label.bytes().all(|b| b.is_ascii_digit()),
    }
}

/// A canonical dotted quad: four decimal parts 0–255, none with a leading
/// zero.
fn parse_ipv4(host: &str, port: &str) -> Result<IpAddr, GrantError> {
    let parts: Vec<&str> = host.split('.').collect();
    let canonical = parts.len() == 4
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.len() <= 3
                && p.bytes().all(|b| b.is_ascii_digit())
                && (p.len() == 1 || !p.starts_with('0'))
                && p.parse::<u16>().is_ok_and(|v| v <= 255)
        });
    let parsed = if canonical {
        host.parse::<Ipv4Addr>().ok()
    } else {
        None
    };
    let Some(ip) = parsed else {
        let meaning = inet_aton(host);
        let hint = match meaning {
            Some(ip) => format!("write the address as four decimal numbers: `{ip}:{port}`"),
            None => format!(
                "write an address as four decimal numbers 0-255, e.g. `192.0.2.1:{port}`, or a \
                 name whose last label has a letter"
            ),
        };
        return Err(refuse(
            0,
            GrantProblem::NonCanonicalIpv4(host.to_string(), meaning),
            hint,
        ));
    };
    if ip.is_unspecified() {
        return Err(refuse(
            0,
            GrantProblem::UnspecifiedAddress(IpAddr::V4(ip)),
            format!("grant the loopback address for a local service, `127.0.0.1:{port}`"),
        ));
    }
    if super::fake_pool::in_fake_pool(ip) {
        return Err(refuse(
            0,
            GrantProblem::FakePoolAddress(ip),
            "grant the service by name; spawnd gives each granted name an address there",
        ));
    }
    Ok(IpAddr::V4(ip))
}

/// What `inet_aton` makes of `text`: one to four parts, each decimal,
/// octal (leading `0`) or hex (`0x`), the last filling the remaining
/// bytes. Only for hints: grants never accept these forms.
fn inet_aton(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = text.split('.').collect();
    if parts.len() > 4 {
        return None;
    }
    let mut values = Vec::with_capacity(parts.len());
    for part in &parts {
        let (digits, radix) =
            if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
                (hex, 16)
            } else if part.len() > 1 && part.starts_with('0') {
                (&part[1..], 8)
            } else {
                (*part, 10)
            };
        if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
            return None;
        }
        values.push(u32::from_str_radix(digits, radix).ok()?);
    }
    let (last, leading) = values.split_last()?;
    if leading.iter().any(|&v| v > 255) {
        return None;
    }
    let last_bits = 8 * (4 - leading.len() as u32);
    if last_bits < 32 && *last >> last_bits != 0 {
        return None;
    }
    let mut addr: u32 = 0;
    for (i, v) in leading.iter().enumerate() {
        addr |= v << (24 - 8 * i);
    }
    Some(Ipv4Addr::from(addr | last))
}

/// A DNS name: LDH labels and A-labels, lowercase, 1–63 bytes each, 253
/// at most in all, two labels at least. `at` is the name's offset in the
/// grant.
fn parse_name(name: &str, port: &str, at: usize) -> Result<String, GrantError> {
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        let lower = name.to_ascii_lowercase();
        // Only suggest the lowercase form when that is the only problem.
        let hint = match parse_name(&lower, port, at) {
            Ok(_) => format!("write names in lowercase: `{lower}:{port}`"),
            Err(_) => "write names in lowercase".to_string(),
        };
        let first = name
            .bytes()
            .position(|b| b.is_ascii_uppercase())
            .unwrap_or(0);
        return Err(refuse(
            at + first,
            GrantProblem::Uppercase(name.to_string()),
            hint,
        ));
    }
    let mut offset = at;
    for label in name.split('.') {
        check_label(label, name, offset, port)?;
        offset += label.len() + 1;
    }
    if name.len() > MAX_NAME_LEN {
        return Err(refuse(
            at,
            GrantProblem::NameTooLong(name.len()),
            "grant the name the program really connects to",
        ));
    }
    if !name.contains('.') {
        return Err(refuse(
            at,
            GrantProblem::SingleLabel(name.to_string()),
            format!(
                "grant a fully qualified name, e.g. `api.example.com:{port}`, or for a service on \
                 this machine its address, `127.0.0.1:{port}`"
            ),
        ));
    }
    Ok(name.to_string())
}

/// Whether `label` is a DNS LDH label: 1–63 bytes of ASCII letters,
/// digits and `-`, neither first nor last a `-`. Case is the caller's
/// concern.
pub(crate) fn is_ldh_label(label: &[u8]) -> bool {
    (1..=MAX_LABEL_LEN).contains(&label.len())
        && label
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
        && label.first() != Some(&b'-')
        && label.last() != Some(&b'-')
}

/// One lowercase label of `name`, at byte `at` of the grant.
fn check_label(label: &str, name: &str, at: usize, port: &str) -> Result<(), GrantError> {
    if label.is_empty() {
        return Err(refuse(
            at,
            GrantProblem::EmptyLabel(name.to_string()),
            "separate labels with one dot, e.g. `api.example.com`",
        ));
    }
    if label.len() > MAX_LABEL_LEN {
        return Err(refuse(
            at,
            GrantProblem::LabelTooLong(label.to_string(), label.len()),
            "grant the name the program really connects to",
        ));
    }
    if let Some((i, c)) = label
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(refuse(
            at + i,
            GrantProblem::LabelCharacter(label.to_string(), c),
            format!("write a name of letters, digits and `-`, e.g. `api.example.com:{port}`"),
        ));
    }
    if !is_ldh_label(label.as_bytes()) {
        return Err(refuse(
            at,
            GrantProblem::LabelHyphen(label.to_string()),
            "DNS names have no label that starts or ends with `-`",
        ));
    }
    if label.starts_with("xn--") && !is_a_label(label) {
        return Err(refuse(
            at,
            GrantProblem::BadALabel(label.to_string()),
            "write the A-label an IDNA library gives for the name (e.g. `xn--bcher-kva` for \
             `bücher`)",
        ));
    }
    Ok(())
}

/// Whether an `xn--` label is an A-label: its Punycode decodes to a
/// non-ASCII label that IDNA's strict ToASCII encodes back to exactly it.
fn is_a_label(label: &str) -> bool {
    let Some(unicode) = label
        .strip_prefix("xn--")
        .and_then(idna::punycode::decode_to_string)
    else {
        return false;
    };
    !unicode.is_ascii()
        && !unicode.contains('.')
        && idna::domain_to_ascii_strict(&unicode).is_ok_and(|ascii| ascii == label)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Grant {
        Grant::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    fn err(text: &str) -> GrantError {
        match Grant::parse(text) {
            Ok(g) => panic!("{text:?} parsed as {g:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn names_addresses_and_bracketed_ipv6_parse_to_their_parts() {
        let g = ok("api.example.com:443");
        assert_eq!(g.host(), &Host::Name("api.example.com".into()));
        assert_eq!(g.port(), 443);
        assert_eq!(g.name(), Some("api.example.com"));
        let g = ok("192.0.2.1:8080");
        assert_eq!(g.host(), &Host::Ip("192.0.2.1".parse().unwrap()));
        assert_eq!(g.name(), None);
        let g = ok("[2001:db8::1]:443");
        assert_eq!(g.host(), &Host::Ip("2001:db8::1".parse().unwrap()));
        assert_eq!(ok("127.0.0.1:8080").port(), 8080);
        assert_eq!(ok("[::1]:1").port(), 1);
        assert_eq!(ok("a.b:65535").port(), 65535);
    }

    #[test]
    fn valid_grants_display_exactly_as_written() {
        for text in [
            "api.example.com:443",
            "a.b:1",
            "xn--bcher-kva.example:443",
            "r3---sn-abc.googlevideo.com:443",
            "1password.com:443",
            "example.c0m:80",
            "0.0.0.1:80",
            "255.255.255.255:9",
            "10.0.0.5:5432",
            "[2001:db8::1]:443",
            "[fe80::1]:22",
            "[64:ff9b::7f00:1]:80",
        ] {
            assert_eq!(ok(text).to_string(), text);
        }
        let label = "a".repeat(63);
        let long = format!("{label}.{label}.{label}.{}", "b".repeat(61));
        assert_eq!(long.len(), 253);
        assert_eq!(ok(&format!("{long}:1")).name(), Some(long.as_str()));
    }

    /// Each refused spelling, the problem it is refused for, and a piece of
    /// the hint (often the corrected grant).
    #[test]
    fn each_refusal_names_the_problem_and_how_to_write_it_instead() {
        use GrantProblem as P;
        type Is = fn(&GrantProblem) -> bool;
        let cases: &[(&str, Is, &str)] = &[
            ("", |p| *p == P::Empty, "api.example.com:443"),
            (
                "api.example.com :443",
                |p| *p == P::Whitespace(' '),
                "`api.example.com:443`",
            ),
            (
                " api.example.com:443",
                |p| *p == P::Whitespace(' '),
                "`api.example.com:443`",
            ),
            (
                "api.example.com:443\n",
                |p| *p == P::Whitespace('\n'),
                "`api.example.com:443`",
            ),
            (
                "https://api.example.com",
                |p| matches!(p, P::Scheme(s) if s == "https"),
                "`api.example.com:443`",
            ),
            (
                "http://api.example.com/v1",
                |p| matches!(p, P::Scheme(_)),
                "`api.example.com:80`",
            ),
            (
                "https://api.example.com:8443/x",
                |p| matches!(p, P::Scheme(_)),
                "`api.example.com:8443`",
            ),
            (
                "ftp://files.example.com",
                |p| matches!(p, P::Scheme(_)),
                "e.g.",
            ),
            (
                "user:pw@api.example.com:443",
                |p| *p == P::UserInfo,
                "`api.example.com:443`",
            ),
            ("*.example.com:443", |p| *p == P::Wildcard, "list each host"),
            ("api.example.com:*", |p| *p == P::Wildcard, "list each host"),
            (
                "api.example.com:443/v1",
                |p| *p == P::Path,
                "`api.example.com:443`",
            ),
            (
                "api.example.com:443?x",
                |p| *p == P::Path,
                "`api.example.com:443`",
            ),
            (
                "api.example.com:443#x",
                |p| *p == P::Path,
                "`api.example.com:443`",
            ),
            (
                "api.example.com",
                |p| matches!(p, P::MissingPort(_)),
                "`api.example.com:443`",
            ),
            (
                "api.example.com:",
                |p| matches!(p, P::MissingPort(_)),
                "`api.example.com:443`",
            ),
            (
                "[2001:db8::1]",
                |p| matches!(p, P::MissingPort(_)),
                "`[2001:db8::1]:443`",
            ),
            ("a.example.com:443:80", |p| *p == P::ExtraColon, "e.g."),
            (
                "api.example.com:+443",
                |p| matches!(p, P::PortNotDecimal(_)),
                "decimal",
            ),
            (
                "api.example.com:-1",
                |p| matches!(p, P::PortNotDecimal(_)),
                "decimal",
            ),
            (
                "api.example.com:https",
                |p| matches!(p, P::PortNotDecimal(_)),
                "decimal",
            ),
            (
                "api.example.com:0x1bb",
                |p| matches!(p, P::PortNotDecimal(_)),
                "decimal",
            ),
            (
                "api.example.com:0443",
                |p| matches!(p, P::PortLeadingZero(_)),
                "`api.example.com:443`",
            ),
            ("api.example.com:0", |p| *p == P::PortZero, "1-65535"),
            ("api.example.com:00", |p| *p == P::PortZero, "1-65535"),
            (
                "api.example.com:65536",
                |p| matches!(p, P::PortTooLarge(_)),
                "65535",
            ),
            (
                "api.example.com:99999999999999999999",
                |p| matches!(p, P::PortTooLarge(_)),
                "65535",
            ),
            (
                "2001:db8::1",
                |p| *p == P::UnbracketedIpv6,
                "`[2001:db8::1]:443`",
            ),
            (
                "2001:db8::1:8443",
                |p| *p == P::UnbracketedIpv6,
                "`[2001:db8::1]:8443`",
            ),
            ("::1:80", |p| *p == P::UnbracketedIpv6, "`[::1]:80`"),
            (
                "2001:db8::1:8443",
                |p| *p == P::UnbracketedIpv6,
                "`[2001:db8::1:8443]:443`",
            ),
            (
                "[2001:db8::1:443",
                |p| *p == P::UnclosedBracket,
                "[2001:db8::1]:443",
            ),
            (
                "[2001:db8::1]443",
                |p| matches!(p, P::AfterBracket(s) if s == "443"),
                "[2001:db8::1]:443",
            ),
            (
                "api.[example].com:443",
                |p| *p == P::StrayBracket('['),
                "e.g.",
            ),
            (
                "[192.0.2.1]:443",
                |p| matches!(p, P::NotIpv6(_)),
                "`192.0.2.1:443`",
            ),
            (
                "[api.example.com]:443",
                |p| matches!(p, P::NotIpv6(_)),
                "brackets",
            ),
            ("[]:443", |p| matches!(p, P::NotIpv6(_)), "brackets"),
            (
                "[fe80::1%eth0]:22",
                |p| matches!(p, P::ZoneId(z) if z == "eth0"),
                "without a zone",
            ),
            (
                "[::ffff:127.0.0.1]:80",
                |p| matches!(p, P::Ipv4MappedIpv6(..)),
                "`127.0.0.1:80`",
            ),
            (
                "[::ffff:7f00:1]:80",
                |p| matches!(p, P::Ipv4MappedIpv6(..)),
                "`127.0.0.1:80`",
            ),
            (
                "[2001:DB8::1]:443",
                |p| matches!(p, P::NonCanonicalIpv6(..)),
                "`[2001:db8::1]:443`",
            ),
            (
                "[2001:0db8::1]:443",
                |p| matches!(p, P::NonCanonicalIpv6(..)),
                "`[2001:db8::1]:443`",
            ),
            (
                "[2001:db8:0:0:0:0:0:1]:443",
                |p| matches!(p, P::NonCanonicalIpv6(..)),
                "`[2001:db8::1]:443`",
            ),
            (
                "127.1:80",
                |p| matches!(p, P::NonCanonicalIpv4(_, Some(_))),
                "`127.0.0.1:80`",
            ),
            (
                "0x7f.0.0.1:80",
                |p| matches!(p, P::NonCanonicalIpv4(_, Some(_))),
                "`127.0.0.1:80`",
            ),
            (
                "0x7f000001:80",
                |p| matches!(p, P::NonCanonicalIpv4(_, Some(_))),
                "`127.0.0.1:80`",
            ),
            (
                "2130706433:80",
                |p| matches!(p, P::NonCanonicalIpv4(_, Some(_))),
                "`127.0.0.1:80`",
            ),
            (
                "0177.0.0.1:80",
                |p| matches!(p, P::NonCanonicalIpv4(_, Some(_))),
                "`127.0.0.1:80`",
            ),
            (
                "010.0.0.1:80",
                |p| matches!(p, P::NonCanonicalIpv4(_, Some(_))),
                "`8.0.0.1:80`",
            ),
            (
                "10.0.0.01:80",
                |p| matches!(p, P::NonCanonicalIpv4(_, Some(_))),
                "`10.0.0.1:80`",
            ),
            (
                "256.1.1.1:80",
                |p| matches!(p, P::NonCanonicalIpv4(_, None)),
                "192.0.2.1",
            ),
            (
                "1.2.3.4.5:80",
                |p| matches!(p, P::NonCanonicalIpv4(_, None)),
                "192.0.2.1",
            ),
            (
                "example.123:80",
                |p| matches!(p, P::NonCanonicalIpv4(_, None)),
                "letter",
            ),
            (
                "example.0x1f:80",
                |p| matches!(p, P::NonCanonicalIpv4(_, None)),
                "letter",
            ),
            (
                "0.0.0.0:80",
                |p| matches!(p, P::UnspecifiedAddress(_)),
                "`127.0.0.1:80`",
            ),
            (
                "[::]:80",
                |p| matches!(p, P::UnspecifiedAddress(_)),
                "`[::1]:80`",
            ),
            (
                "198.18.0.1:443",
                |p| matches!(p, P::FakePoolAddress(_)),
                "by name",
            ),
            (
                "198.19.255.255:443",
                |p| matches!(p, P::FakePoolAddress(_)),
                "by name",
            ),
            (
                "bücher.example:443",
                |p| matches!(p, P::NotAscii(_)),
                "`xn--bcher-kva.example:443`",
            ),
            (
                "ex\u{0430}mple.com:443",
                |p| matches!(p, P::NotAscii(_)),
                "`xn--exmple-4nf.com:443`",
            ),
            (
                "\u{ff21}pi.example.com:443",
                |p| matches!(p, P::NotAscii(_)),
                "`api.example.com:443`",
            ),
            (
                "API.Example.com:443",
                |p| matches!(p, P::Uppercase(_)),
                "`api.example.com:443`",
            ),
            (
                "XN--BCHER-KVA.example:443",
                |p| matches!(p, P::Uppercase(_)),
                "`xn--bcher-kva.example:443`",
            ),
            (
                "api.example.com.:443",
                |p| matches!(p, P::TrailingDot(_)),
                "`api.example.com:443`",
            ),
            (
                "api..example.com:443",
                |p| matches!(p, P::EmptyLabel(_)),
                "one dot",
            ),
            (
                ".example.com:443",
                |p| matches!(p, P::EmptyLabel(_)),
                "one dot",
            ),
            (":443", |p| *p == P::EmptyHost, "`api.example.com:443`"),
            (
                ".:443",
                |p| matches!(p, P::TrailingDot(_)),
                "drop the final dot",
            ),
            (
                "_dmarc.example.com:443",
                |p| matches!(p, P::LabelCharacter(_, '_')),
                "letters",
            ),
            (
                "a_b.example.com:443",
                |p| matches!(p, P::LabelCharacter(_, '_')),
                "letters",
            ),
            (
                "api%2eexample.com:443",
                |p| matches!(p, P::LabelCharacter(_, '%')),
                "letters",
            ),
            (
                "api\\.example.com:443",
                |p| matches!(p, P::LabelCharacter(_, '\\')),
                "letters",
            ),
            (
                "-api.example.com:443",
                |p| matches!(p, P::LabelHyphen(_)),
                "`-`",
            ),
            (
                "api-.example.com:443",
                |p| matches!(p, P::LabelHyphen(_)),
                "`-`",
            ),
            (
                "xn--.example:443",
                |p| matches!(p, P::LabelHyphen(_)),
                "`-`",
            ),
            (
                "xn--bcher-kva-.example:443",
                |p| matches!(p, P::LabelHyphen(_)),
                "`-`",
            ),
            (
                "localhost:80",
                |p| matches!(p, P::SingleLabel(_)),
                "`127.0.0.1:80`",
            ),
            (
                "com:443",
                |p| matches!(p, P::SingleLabel(_)),
                "fully qualified",
            ),
        ];
        for (text, is, hint) in cases {
            let e = err(text);
            assert!(is(&e.problem), "{text:?}: {:?}", e.problem);
            assert!(
                e.hint.contains(hint),
                "{text:?}: hint {:?} lacks {hint:?}",
                e.hint
            );
            assert!(e.at <= text.len(), "{text:?}: at {}", e.at);
            assert!(e.to_string().contains(&e.hint));
        }
    }

    /// `xn--` labels whose Punycode decodes, but not to a label IDNA would
    /// encode that way: mapped (fullwidth, uppercase) or disallowed text.
    #[test]
    fn a_labels_must_round_trip_through_idna() {
        for unicode in [
            "\u{ff41}bc",
            "\u{dc}cher",
            "a\u{200d}\u{fc}",
            "\u{fc}\u{2488}",
        ] {
            let label = format!("xn--{}", idna::punycode::encode_str(unicode).unwrap());
            let e = err(&format!("{label}.example:443"));
            assert!(
                matches!(e.problem, GrantProblem::BadALabel(_)),
                "{unicode:?} as {label}: {e}"
            );
        }
        assert!(!is_a_label("xn--abc-"));
        assert!(is_a_label("xn--bcher-kva"));
        assert!(is_a_label("xn--zca"));
    }

    #[test]
    fn overlong_labels_and_names_are_refused() {
        let label = "a".repeat(64);
        let e = err(&format!("{label}.example:443"));
        assert!(matches!(e.problem, GrantProblem::LabelTooLong(_, 64)));
        let l = "a".repeat(63);
        let name = format!("{l}.{l}.{l}.{}", "b".repeat(62));
        let e = err(&format!("{name}:443"));
        assert_eq!(e.problem, GrantProblem::NameTooLong(254));
    }

    #[test]
    fn errors_point_at_the_offending_byte() {
        assert_eq!(err("api.exa_mple.com:443").at, 7);
        assert_eq!(err("api.example.com:0443").at, 16);
        assert_eq!(err("api.example.com:443/x").at, 19);
        assert_eq!(err("api..com:443").at, 4);
        assert_eq!(err("a.b.Com:1").at, 4);
        assert_eq!(err("[fe80::1%1]:1").at, 8);
    }

    #[test]
    fn credentials_and_queries_are_not_repeated_in_messages() {
        for text in [
            "user:hunter2@api.example.com:443",
            "api.example.com:443/v1?token=hunter2",
            "https://user:hunter2@api.example.com/?key=hunter2",
        ] {
            let e = err(text);
            assert!(!e.to_string().contains("hunter2"), "{text}: {e}");
            assert!(
                e.hint.contains("`api.example.com:443`"),
                "{text}: {}",
                e.hint
            );
        }
    }

    #[test]
    fn messages_escape_control_characters_from_the_grant() {
        let e = err("a.b:44\u{1b}[2J");
        assert!(!e.to_string().contains('\u{1b}'), "{e}");
        let e = err("[\u{1b}]:1");
        assert!(!e.to_string().contains('\u{1b}'), "{e}");
    }

    #[test]
    fn inet_aton_reads_the_forms_other_parsers_accept() {
        let table = [
            ("127.1", Some("127.0.0.1")),
            ("127.0.1", Some("127.0.0.1")),
            ("0x7f.1", Some("127.0.0.1")),
            ("2130706433", Some("127.0.0.1")),
            ("0", Some("0.0.0.0")),
            ("4294967295", Some("255.255.255.255")),
            ("4294967296", None),
            ("1.256", Some("1.0.1.0")),
            ("1.2.65536", None),
            ("256.1", None),
            ("08.1.1.1", None),
            ("0x", None),
            ("1.2.3.4.5", None),
            ("a.b", None),
        ];
        for (text, want) in table {
            assert_eq!(inet_aton(text), want.map(|w| w.parse().unwrap()), "{text}");
        }
    }

    #[test]
    fn serde_uses_the_canonical_string_and_parses_on_the_way_in() {
        let g = ok("[2001:db8::1]:443");
        assert_eq!(serde_json::to_string(&g).unwrap(), "\"[2001:db8::1]:443\"");
        let back: Grant = serde_json::from_str("\"api.example.com:443\"").unwrap();
        assert_eq!(back, ok("api.example.com:443"));
        let refused = serde_json::from_str::<Grant>("\"*.example.com:443\"").unwrap_err();
        assert!(refused.to_string().contains("wildcard"), "{refused}");
    }

    /// The failure modes of other parsers (an invalid address becoming
    /// `0.0.0.0`, a port of 65536 becoming the wildcard 0, a pattern
    /// matching more than one host) end here in an error, never a grant.
    #[test]
    fn a_parse_error_never_becomes_a_wider_grant() {
        for text in [
            "1.2.3.256:80",
            "a.b:65536",
            "a.b:0",
            "0.0.0.0:0",
            "*:443",
            "*.*:*",
            ":0",
            "[::]:0",
            "a.b:-0",
            "a.b: 443",
            "**.example.com:443",
            "example.*:443",
            "%2a.example.com:443",
        ] {
            assert!(Grant::parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn ldh_labels_are_letters_digits_and_inner_hyphens() {
        for good in ["a", "a-b", "xn--bcher-kva", "0", "A1"] {
            assert!(is_ldh_label(good.as_bytes()), "{good}");
        }
        for bad in ["", "-a", "a-", "a_b", "a.b", "ü"] {
            assert!(!is_ldh_label(bad.as_bytes()), "{bad}");
        }
        assert!(!is_ldh_label("a".repeat(64).as_bytes()));
    }

    use proptest::prelude::*;

    /// A valid grant's text: a name, an IPv4 or an IPv6 address, and a port.
    fn grant_text() -> impl Strategy<Value = String> {
        let label = "[a-z0-9]([a-z0-9-]{0,12}[a-z0-9])?";
        let name = (prop::collection::vec(label, 1..4), "[a-z][a-z0-9]{0,5}")
            .prop_map(|(labels, tld)| format!("{}.{tld}", labels.join(".")));
        let v4 = any::<u32>()
            .prop_map(Ipv4Addr::from)
            .prop_filter("grantable", |ip| {
                !ip.is_unspecified() && !crate::egress::fake_pool::in_fake_pool(*ip)
            })
            .prop_map(|ip| ip.to_string());
        let v6 = any::<u128>()
            .prop_map(Ipv6Addr::from)
            .prop_filter("grantable", |ip| {
                !ip.is_unspecified() && ip.to_ipv4_mapped().is_none()
            })
            .prop_map(|ip| format!("[{ip}]"));
        (prop_oneof![name, v4, v6], 1..=u16::MAX).prop_map(|(host, port)| format!("{host}:{port}"))
    }

    proptest! {
        #[test]
        fn valid_grants_round_trip_through_display(text in grant_text()) {
            let grant = Grant::parse(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
            prop_assert_eq!(grant.to_string(), text.clone());
            prop_assert_eq!(Grant::parse(&grant.to_string()), Ok(grant));
        }

        /// Any text: no panic; what parses is exactly its canonical form,
        /// has no `*`, and an error points inside the text.
        #[test]
        fn any_text_parses_exactly_or_not_at_all(text in ".{0,40}") {
            match Grant::parse(&text) {
                Ok(grant) => {
                    prop_assert_eq!(grant.to_string(), text.clone());
                    prop_assert!(!text.contains('*'));
                }
                Err(e) => prop_assert!(e.at <= text.len()),
            }
        }

        /// A valid grant with one character inserted, from those that
        /// matter to the grammar: either still exact, or refused.
        #[test]
        fn one_character_more_never_widens_a_grant(
            text in grant_text(),
            at in any::<prop::sample::Index>(),
            c in prop::sample::select(vec!['*', '.', ':', '[', ']', '/', '@', '%', ' ', '0', '-', '_', 'A', 'x', '\n', '\u{fc}']),
        ) {
            let mut bytes: Vec<char> = text.chars().collect();
            bytes.insert(at.index(bytes.len() + 1), c);
            let mutated: String = bytes.into_iter().collect();
            if let Ok(grant) = Grant::parse(&mutated) {
                prop_assert_eq!(grant.to_string(), mutated.clone());
                prop_assert!(!mutated.contains('*'));
            }
        }
    }
}
