//! How the relay turns a granted name into addresses: spawnd's own
//! resolver, never the sandbox's. The relay asks once per connection and
//! dials only what the answer held and the address policy allowed, so a
//! name cannot change between the check and the connect.

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;

/// A resolution in progress.
pub type Resolving<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;

/// Resolves a granted name (lowercase, no trailing dot) to its addresses,
/// in the order they should be tried.
pub trait Resolve: Send + Sync {
    /// The addresses of `name`; an empty list or an error means it does
    /// not resolve.
    fn resolve<'a>(&'a self, name: &'a str) -> Resolving<'a>;
}

/// The system's resolver, as spawnd's own process sees it (`getaddrinfo`
/// through `tokio::net::lookup_host`, on tokio's blocking threads), asked
/// for the name as an absolute one (a trailing dot): the resolver's search
/// domains never apply, so the addresses are those of the granted name and
/// of no other (`api.example.com` never becomes
/// `api.example.com.corp.example` when the first does not resolve).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> Resolving<'a> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((absolute(name), 0)).await?;
            Ok(addrs.map(|addr| addr.ip()).collect())
        })
    }
}

/// `name` with one trailing dot.
fn absolute(name: &str) -> String {
    format!("{}.", name.trim_end_matches('.'))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_granted_name_is_asked_for_as_an_absolute_name() {
        assert_eq!(super::absolute("api.example.com"), "api.example.com.");
        assert_eq!(super::absolute("api.example.com."), "api.example.com.");
    }
}
