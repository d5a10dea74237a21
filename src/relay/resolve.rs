//! How the relay turns a granted name into addresses: spawnd's own
//! resolver, never the sandbox's. The relay asks once per connection and
//! dials only what the answer held and the address policy allowed, so a
//! name cannot change between the check and the connect.
//!
//! [`SystemResolver`] reads spawnd's host table (`/etc/hosts`) itself,
//! then asks `getaddrinfo` for the absolute name: `getaddrinfo` can skip
//! the search domains (a trailing dot) but then no longer matches the host
//! table's names, and an operator who pins a granted name there means it.
//! The table's format is a line of an address and names, `#` comments.

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::net::ToSocketAddrs;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::Semaphore;

/// A resolution in progress.
pub(crate) type Resolving<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;

/// Resolves a granted name (lowercase, no trailing dot) to its addresses,
/// in the order they should be tried.
pub(crate) trait Resolve: Send + Sync {
    /// The addresses of `name`; an empty list or an error means it does
    /// not resolve.
    fn resolve<'a>(&'a self, name: &'a str) -> Resolving<'a>;
}

/// The system's resolver, as spawnd's own process sees it (`getaddrinfo`
/// on the runtime's blocking threads), asked for the name as an absolute
/// one (a trailing dot): the resolver's search domains never apply, so the
/// addresses are those of the granted name and of no other
/// (`api.example.com` never becomes `api.example.com.corp.example` when
/// the first does not resolve).
///
/// At most `at_once` resolutions block threads at a time. A resolution
/// that outlives its caller's timeout still holds its permit until
/// `getaddrinfo` returns, so a slow resolver makes later connections wait
/// (within their own timeouts) rather than piling blocked work up behind
/// the spawn's other blocking work (its audit records).
#[derive(Debug, Clone)]
pub(crate) struct SystemResolver {
    at_once: Arc<Semaphore>,
}

impl SystemResolver {
    /// A resolver running at most `at_once` resolutions at a time.
    pub(crate) fn new(at_once: usize) -> SystemResolver {
        SystemResolver {
            at_once: Arc::new(Semaphore::new(at_once.max(1))),
        }
    }
}

impl Resolve for SystemResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> Resolving<'a> {
        let at_once = self.at_once.clone();
        let name = absolute(name);
        Box::pin(async move {
            let permit = at_once
                .acquire_owned()
                .await
                .map_err(|_| io::Error::other("the resolver is closed"))?;
            tokio::task::spawn_blocking(move || {
                let _permit = permit;
                let pinned = std::fs::read_to_string(HOST_TABLE)
                    .map(|table| in_host_table(&table, name.trim_end_matches('.')))
                    .unwrap_or_default();
                if !pinned.is_empty() {
                    return Ok(pinned);
                }
                (name.as_str(), 0)
                    .to_socket_addrs()
                    .map(|addrs| addrs.map(|addr| addr.ip()).collect())
            })
            .await
            .map_err(io::Error::other)?
        })
    }
}

/// spawnd's host table.
const HOST_TABLE: &str = "/etc/hosts";

/// The addresses `table` (in `/etc/hosts` form) gives `name`, in order.
fn in_host_table(table: &str, name: &str) -> Vec<IpAddr> {
    table
        .lines()
        .filter_map(|line| {
            let mut fields = line.split('#').next()?.split_ascii_whitespace();
            let address: IpAddr = fields.next()?.parse().ok()?;
            fields
                .any(|n| n.trim_end_matches('.').eq_ignore_ascii_case(name))
                .then_some(address)
        })
        .collect()
}

/// `name` with one trailing dot.
fn absolute(name: &str) -> String {
    format!("{}.", name.trim_end_matches('.'))
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    #[test]
    fn the_host_table_pins_a_name_by_its_exact_spelling() {
        let table = "127.0.0.1 localhost\n# 10.0.0.1 api.example.com\n203.0.113.7  api.example.com mirror # pinned\n2001:db8::7\tAPI.example.com.\nnot-an-address api.example.com\n";
        let found = super::in_host_table(table, "api.example.com");
        assert_eq!(
            found,
            [
                "203.0.113.7".parse::<IpAddr>().unwrap(),
                "2001:db8::7".parse().unwrap()
            ]
        );
        assert!(super::in_host_table(table, "example.com").is_empty());
        assert!(super::in_host_table(table, "api.example.co").is_empty());
    }

    #[test]
    fn a_granted_name_is_asked_for_as_an_absolute_name() {
        assert_eq!(super::absolute("api.example.com"), "api.example.com.");
        assert_eq!(super::absolute("api.example.com."), "api.example.com.");
    }
}
