//! The network grants of `[capabilities.spawn]`: `network = ["host:port", …]`
//! for the connector, and per operation a `network` list that narrows it.
//! Each entry is parsed exactly ([`crate::egress::grant`]): a name or an IP
//! literal with an explicit port, never a wildcard, so a typo is a problem
//! with its line and column, not a wider grant. Grants that reach the host's
//! own or private addresses are legal as literals, and said so in a warning.

use std::ops::Range;

use toml::Spanned;

use super::validate::Checker;
use crate::egress::address_policy::{classify_v4, classify_v6, Class, DenyReason};
use crate::egress::grant::{Grant, Host};

/// The connector's grants, each parsed, none listed twice.
pub(super) fn check_grants(c: &mut Checker, raw: &[Spanned<String>], key: &str) -> Vec<Grant> {
    let mut grants: Vec<Grant> = Vec::new();
    for (i, entry) in raw.iter().enumerate() {
        let key = format!("{key}[{i}]");
        let Some(grant) = parse_one(c, entry, &key) else {
            continue;
        };
        if grant.port() == 53 {
            c.error(
                entry.span(),
                &key,
                format!("`{grant}`: port 53 is the sandbox's own DNS, which spawnd answers from the grants"),
                "programs resolve granted names through spawnd; remove the DNS server's grant",
            );
            continue;
        }
        if let Some(reason) = never_dialed(&grant) {
            c.error(
                entry.span(),
                &key,
                format!("`{grant}` is a {reason} address, which spawnd never dials, even when granted by address: cloud credential services listen there"),
                "remove it; grant the service by its name or its routable address",
            );
            continue;
        }
        if grants.contains(&grant) {
            c.error(
                entry.span(),
                &key,
                format!("`{grant}` is listed twice"),
                "list each host:port once",
            );
            continue;
        }
        grants.push(grant);
    }
    grants
}

/// An operation's grants: the connector's when it lists none, else its own,
/// each of which the connector must grant too.
pub(super) fn check_operation_grants(
    c: &mut Checker,
    raw: Option<&Vec<Spanned<String>>>,
    connector: &[Grant],
    key: &str,
) -> Vec<Grant> {
    let Some(raw) = raw else {
        return connector.to_vec();
    };
    let own = check_grants(c, raw, key);
    for (grant, entry) in own.iter().zip(raw) {
        if !connector.contains(grant) {
            c.error(
                entry.span(),
                key,
                format!("`{grant}` is not in capabilities.spawn.network"),
                "an operation's network list narrows the connector's: add it there first",
            );
        }
    }
    own
}

/// What the address policy makes of a literal grant's address.
fn class_of(ip: std::net::IpAddr) -> Class {
    match ip {
        std::net::IpAddr::V4(v4) => classify_v4(v4),
        std::net::IpAddr::V6(v6) => classify_v6(v6).0,
    }
}

/// The reason a literal grant can never be dialed: metadata and
/// link-local addresses, whatever the manifest says.
fn never_dialed(grant: &Grant) -> Option<&'static str> {
    let Host::Ip(ip) = grant.host() else {
        return None;
    };
    match class_of(*ip) {
        Class::AlwaysDenied(r @ (DenyReason::Metadata | DenyReason::LinkLocal)) => {
            Some(if r == DenyReason::Metadata {
                "metadata"
            } else {
                "link-local"
            })
        }
        _ => None,
    }
}

/// Says what literal grants of the host's own, private or special
/// addresses reach: spawnd dials exactly such an address when a manifest
/// names it, and never when a name resolves to it.
pub(super) fn warn_of_special_literals(c: &mut Checker, grants: &[Grant]) {
    for grant in grants {
        let Host::Ip(ip) = grant.host() else { continue };
        let reason = match class_of(*ip) {
            Class::Public => continue,
            Class::DeniedUnlessAllowed(reason) | Class::AlwaysDenied(reason) => reason,
        };
        c.warn(
            "capabilities.spawn.network",
            format!(
                "`{grant}` is a {} address: the program reaches the service listening there on this host's side, with that service's authority",
                reason.as_str().replace('_', "-")
            ),
        );
    }
}

/// One entry, or its problem at the column where it starts.
fn parse_one(c: &mut Checker, entry: &Spanned<String>, key: &str) -> Option<Grant> {
    match Grant::parse(entry.get_ref()) {
        Ok(grant) => Some(grant),
        Err(e) => {
            c.error(
                at_offset(entry.span(), e.at),
                key,
                e.problem.to_string(),
                &e.hint,
            );
            None
        }
    }
}

/// The span of byte `at` inside a quoted TOML string whose span is `span`.
fn at_offset(span: Range<usize>, at: usize) -> Range<usize> {
    let start = (span.start + 1 + at).min(span.end.saturating_sub(1).max(span.start));
    start..start + 1
}
