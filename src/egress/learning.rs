//! Learning: the network side of `spawnd learn`, which runs a program once
//! to draft its manifest. No grants are known in advance, so the sandbox's
//! DNS stub gives every name a program asks about a fake address, as if it
//! were granted on every port ([`LearnedNames`]), and the relay takes any
//! TCP connection to such an address as it would a granted one: it
//! records the `host:port` pair ([`Contacted`]) and then, as the caller
//! chose ([`Learning`]), refuses it without dialing or relays it under the
//! same checks as a grant (address policy, SNI, limits). What was
//! contacted becomes the draft's `network` list.
//!
//! A draft names hosts, never addresses, and only what a manifest could
//! grant: a name the grant parser refuses (one label, a last label of
//! digits, an address written as a name) gets NXDOMAIN, as would a name
//! past [`MAX_LEARNED_NAMES`]. Nothing here is reachable from a manifest or
//! a daemon request: only code that asks for a [`Learning`] explicitly
//! (the CLI's `learn`) gets one.

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use super::fake_pool::{fake_index, fake_ip};
use super::grant::{Grant, Host};

/// How a learning spawn treats the connections it records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Learning {
    /// Each connection is recorded, then refused (reset) without dialing:
    /// nothing leaves the machine, and no name is resolved.
    Record,
    /// Each connection is recorded, then handled exactly as one to a
    /// granted `host:port`: resolved by spawnd, checked against the
    /// address policy and the SNI, dialed and relayed.
    Forward,
}

impl Learning {
    /// Its name in results and records: `record` or `forward`.
    pub fn as_str(self) -> &'static str {
        match self {
            Learning::Record => "record",
            Learning::Forward => "forward",
        }
    }
}

/// The most names one learning spawn gets fake addresses for; later
/// names get NXDOMAIN (and are reported as refused).
pub(crate) const MAX_LEARNED_NAMES: usize = 4096;

/// The most distinct `host:port` pairs one learning spawn lists; later
/// ones are counted ([`Contacted::unlisted`]).
pub(crate) const MAX_CONTACTED: usize = 4096;

/// The names a learning spawn's DNS stub has answered, each with the fake
/// address it was given, in the order they were first asked for: the
/// first gets 198.18.0.1, as the first granted name would. An address,
/// once given, stands for its name for the spawn's life.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LearnedNames {
    names: Vec<String>,
    index: HashMap<String, usize>,
}

impl LearnedNames {
    /// Whether `name` (lowercase, no trailing dot) is one a manifest could
    /// grant: what a draft can name.
    pub(crate) fn learnable(name: &str) -> bool {
        grant_for(name, 1).is_some()
    }

    /// The fake address of `name`, given now when it has none. `None` when
    /// the name is not [`learnable`](Self::learnable) or
    /// [`MAX_LEARNED_NAMES`] have been given.
    pub(crate) fn address_for(&mut self, name: &str) -> Option<Ipv4Addr> {
        if let Some(&index) = self.index.get(name) {
            return fake_ip(index);
        }
        if self.names.len() >= MAX_LEARNED_NAMES || !Self::learnable(name) {
            return None;
        }
        let index = self.names.len();
        let ip = fake_ip(index)?;
        self.names.push(name.to_string());
        self.index.insert(name.to_string(), index);
        Some(ip)
    }

    /// The name a fake address was given to.
    pub(crate) fn name_of(&self, ip: Ipv4Addr) -> Option<&str> {
        self.names.get(fake_index(ip)?).map(String::as_str)
    }

    /// How many names have an address.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether no name has an address yet.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// The `host:port` pairs a learning spawn's program connected to (or
/// tried to), each once, in [`Grant`] order, up to [`MAX_CONTACTED`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Contacted {
    pairs: BTreeSet<Grant>,
    unlisted: u64,
}

impl Contacted {
    /// Adds `name:port`; `false` when it is no grant a manifest could
    /// hold (port 0, say), and then nothing is added.
    pub(crate) fn add(&mut self, name: &str, port: u16) -> bool {
        let Some(grant) = grant_for(name, port) else {
            return false;
        };
        if !self.pairs.contains(&grant) {
            if self.pairs.len() >= MAX_CONTACTED {
                self.unlisted += 1;
                return true;
            }
            self.pairs.insert(grant);
        }
        true
    }

    /// The pairs, sorted (by host, then port), each once.
    pub(crate) fn pairs(&self) -> Vec<Grant> {
        self.pairs.iter().cloned().collect()
    }

    /// Connections to pairs past [`MAX_CONTACTED`], not listed.
    pub(crate) fn unlisted(&self) -> u64 {
        self.unlisted
    }
}

/// `name:port` as a grant of a name, if a manifest could hold it.
fn grant_for(name: &str, port: u16) -> Option<Grant> {
    Grant::parse(&format!("{name}:{port}"))
        .ok()
        .filter(|g| matches!(g.host(), Host::Name(n) if n == name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_get_pool_addresses_in_the_order_first_asked_and_keep_them() {
        let mut names = LearnedNames::default();
        assert_eq!(
            names.address_for("api.example.com"),
            Some(Ipv4Addr::new(198, 18, 0, 1))
        );
        assert_eq!(
            names.address_for("files.example.org"),
            Some(Ipv4Addr::new(198, 18, 0, 2))
        );
        assert_eq!(
            names.address_for("api.example.com"),
            Some(Ipv4Addr::new(198, 18, 0, 1))
        );
        assert_eq!(names.len(), 2);
        assert_eq!(
            names.name_of(Ipv4Addr::new(198, 18, 0, 2)),
            Some("files.example.org")
        );
        assert_eq!(names.name_of(Ipv4Addr::new(198, 18, 0, 3)), None);
        assert_eq!(names.name_of(Ipv4Addr::new(10, 0, 0, 1)), None);
    }

    #[test]
    fn only_names_a_manifest_could_grant_are_learned() {
        let mut names = LearnedNames::default();
        for refused in [
            "localhost",
            "wpad",
            "192.0.2.1",
            "198.18.0.1",
            "example.123",
            "API.example.com",
            "api.example.com.",
            "",
        ] {
            assert!(!LearnedNames::learnable(refused), "{refused}");
            assert_eq!(names.address_for(refused), None, "{refused}");
        }
        assert!(names.is_empty());
        assert!(LearnedNames::learnable("xn--bcher-kva.example"));
    }

    #[test]
    fn names_past_the_cap_get_no_address() {
        let mut names = LearnedNames::default();
        for i in 0..MAX_LEARNED_NAMES {
            assert!(names.address_for(&format!("n{i}.example")).is_some());
        }
        assert_eq!(names.address_for("late.example"), None);
        // Names already learned keep their address.
        assert_eq!(
            names.address_for("n0.example"),
            Some(Ipv4Addr::new(198, 18, 0, 1))
        );
    }

    #[test]
    fn contacted_pairs_are_distinct_grants_sorted_by_host_then_port() {
        let mut contacted = Contacted::default();
        for (name, port) in [
            ("b.example", 443),
            ("a.example", 8080),
            ("a.example", 443),
            ("b.example", 443),
            ("a.example", 80),
        ] {
            assert!(contacted.add(name, port));
        }
        assert!(!contacted.add("a.example", 0));
        assert!(!contacted.add("localhost", 80));
        let shown: Vec<String> = contacted.pairs().iter().map(Grant::to_string).collect();
        assert_eq!(
            shown,
            [
                "a.example:80",
                "a.example:443",
                "a.example:8080",
                "b.example:443"
            ]
        );
        assert_eq!(contacted.unlisted(), 0);
    }

    #[test]
    fn contacted_pairs_past_the_cap_are_counted() {
        let mut contacted = Contacted::default();
        for port in 1..=MAX_CONTACTED as u16 {
            contacted.add("a.example", port);
        }
        contacted.add("a.example", 1);
        contacted.add("z.example", 1);
        contacted.add("z.example", 1);
        assert_eq!(contacted.pairs().len(), MAX_CONTACTED);
        assert_eq!(contacted.unlisted(), 2);
    }
}
