//! The addresses of the host the relay dials from, for the address
//! policy's [`HostAddresses`] rule: every address assigned to an interface
//! of the calling thread's network namespace (`getifaddrs`, an rtnetlink
//! dump), up or down, whatever its scope.
//!
//! Read for each connection to a granted name, on the thread that then
//! dials, rather than once per spawn or per process: addresses come and go
//! (DHCP, a VPN, a container runtime's bridge), and a list kept from
//! earlier would let a name reach an address the host took since. The
//! dump costs about as much as the connect that follows on a host with a
//! few interfaces; connections to an address grant never read it.

use std::io;
use std::net::IpAddr;

use nix::ifaddrs::getifaddrs;

use crate::egress::address_policy::HostAddresses;

/// The addresses assigned to the interfaces of the calling thread's
/// network namespace. The error names the call.
pub(super) fn read_host_addresses() -> io::Result<HostAddresses> {
    let interfaces = getifaddrs()
        .map_err(|e| io::Error::new(io::Error::from(e).kind(), format!("getifaddrs: {e}")))?;
    Ok(interfaces
        .filter_map(|interface| {
            let address = interface.address?;
            address
                .as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| address.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::read_host_addresses;

    #[test]
    fn the_host_has_at_least_its_loopback_address() {
        // Any namespace this runs in has `lo`; its addresses are there
        // once it is up, which every test host's is.
        let own = read_host_addresses().expect("getifaddrs");
        assert!(own.contains("127.0.0.1".parse().unwrap()), "{own:?}");
    }
}
