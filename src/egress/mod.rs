//! The pure core of network grants: what a program in a sandbox may reach,
//! and how spawnd's egress engine decides it. The engine's sockets live in
//! the sandbox's network namespace and are its only way out; everything
//! here is what it decides with, on bytes and values alone (no sockets, no
//! clock, no resolver), so each piece is tested with tables, properties and
//! a fuzzer.
//!
//! * [`grant`]: a grant, `host:port`, parsed exactly from a manifest's text.
//! * [`fake_pool`]: the addresses granted names are answered with,
//!   198.18.0.0/15, one per name, mapped both ways.

pub mod fake_pool;
pub mod grant;
