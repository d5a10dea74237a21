//! The pure core of network grants: what a program in a sandbox may reach,
//! and how spawnd's egress engine decides it. The engine's sockets live in
//! the sandbox's network namespace and are its only way out; everything
//! here is what it decides with, on bytes and values alone (no sockets, no
//! clock, no resolver), so each piece is tested with tables, properties and
//! a fuzzer.
//!
//! * [`grant`]: a grant, `host:port`, parsed exactly from a manifest's text.
//! * [`address_policy`]: which resolved addresses a grant may be dialed at
//!   (never loopback, link-local, metadata…; private ranges only when the
//!   operator allows them), and the CIDR type of the operator's lists.
//! * [`fake_pool`]: the addresses granted names are answered with,
//!   198.18.0.0/15, one per name, mapped both ways.
//! * [`dns`]: the sandbox's DNS stub: strict query parsing, and answers
//!   from the grants alone.
//! * [`learning`]: `spawnd learn`'s names and contacted pairs, when no
//!   grant is known in advance.
//! * [`client_hello`]: what a client's first bytes are (TLS or not, and the
//!   SNI of a ClientHello), so a TLS connection to a granted name must name
//!   that name.

pub(crate) mod address_policy;
pub(crate) mod client_hello;
pub(crate) mod dns;
pub(crate) mod fake_pool;
pub(crate) mod grant;
pub(crate) mod learning;

#[cfg(test)]
mod dns_tests;
