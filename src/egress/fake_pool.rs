//! The fake pool, 198.18.0.0/15: the addresses the sandbox's DNS stub
//! answers granted names with. The name at index i of a spawn's granted
//! names ([`GrantedNames`]) gets 198.18.0.0 + i + 1 ([`fake_ip`]), and a
//! connection to that address is a connection to that name
//! ([`fake_index`], [`GrantedNames::name_of`]). Nothing is allocated or
//! evicted, so the mapping holds for the spawn's life and needs no state
//! beyond the grants. The pool is RFC 2544's benchmarking range, which no
//! real service uses; grants cannot name it and the address policy never
//! dials it.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use thiserror::Error;

use super::grant::Grant;

/// The first address of the fake pool.
pub(crate) const FAKE_POOL_BASE: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);

/// The fake pool's prefix length.
pub(crate) const FAKE_POOL_PREFIX: u8 = 15;

/// How many names the pool has an address for: every address of the /15
/// but its first and its last.
pub(crate) const FAKE_POOL_NAMES: usize = (1 << (32 - FAKE_POOL_PREFIX)) - 2;

/// Whether `ip` is in the fake pool.
pub(crate) fn in_fake_pool(ip: Ipv4Addr) -> bool {
    u32::from(ip) >> (32 - FAKE_POOL_PREFIX) == u32::from(FAKE_POOL_BASE) >> (32 - FAKE_POOL_PREFIX)
}

/// The fake address of the name at `index` of the grants' names:
/// 198.18.0.1 for index 0, up to 198.19.255.254. `None` past the pool.
pub(crate) fn fake_ip(index: usize) -> Option<Ipv4Addr> {
    if index >= FAKE_POOL_NAMES {
        return None;
    }
    let offset = u32::try_from(index).ok()? + 1;
    Some(Ipv4Addr::from(u32::from(FAKE_POOL_BASE) + offset))
}

/// The name index a fake address stands for: the inverse of [`fake_ip`].
/// `None` for the pool's first and last addresses and anything outside.
pub(crate) fn fake_index(ip: Ipv4Addr) -> Option<usize> {
    if !in_fake_pool(ip) {
        return None;
    }
    let offset = u32::from(ip) - u32::from(FAKE_POOL_BASE);
    let index = usize::try_from(offset.checked_sub(1)?).ok()?;
    (index < FAKE_POOL_NAMES).then_some(index)
}

/// The names of a spawn's grants, each once, in grant order, with its
/// fake address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GrantedNames {
    names: Vec<String>,
    index: BTreeMap<String, usize>,
}

/// More granted names than the fake pool has addresses.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{names} granted names, and the fake pool has addresses for {FAKE_POOL_NAMES}")]
pub(crate) struct PoolExhausted {
    /// How many distinct names were granted.
    pub names: usize,
}

impl GrantedNames {
    /// The distinct names of `grants`, in order (IP-literal grants have
    /// none).
    pub(crate) fn new<'a>(
        grants: impl IntoIterator<Item = &'a Grant>,
    ) -> Result<Self, PoolExhausted> {
        let mut names = GrantedNames::default();
        for name in grants.into_iter().filter_map(Grant::name) {
            if !names.index.contains_key(name) {
                names.index.insert(name.to_string(), names.names.len());
                names.names.push(name.to_string());
            }
        }
        if names.names.len() > FAKE_POOL_NAMES {
            return Err(PoolExhausted {
                names: names.names.len(),
            });
        }
        Ok(names)
    }

    /// The names, in the order their fake addresses follow.
    #[cfg(test)]
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// The index of a lowercase name without a trailing dot, if granted.
    pub(crate) fn index_of(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// The fake address of a granted name.
    #[cfg(test)]
    pub(crate) fn fake_ip_of(&self, name: &str) -> Option<Ipv4Addr> {
        fake_ip(self.index_of(name)?)
    }

    /// The granted name a fake address stands for.
    pub(crate) fn name_of(&self, ip: Ipv4Addr) -> Option<&str> {
        self.names.get(fake_index(ip)?).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fake_pool_maps_each_index_to_one_address_and_back() {
        let table = [
            (0, Some(Ipv4Addr::new(198, 18, 0, 1))),
            (1, Some(Ipv4Addr::new(198, 18, 0, 2))),
            (254, Some(Ipv4Addr::new(198, 18, 0, 255))),
            (255, Some(Ipv4Addr::new(198, 18, 1, 0))),
            (65535, Some(Ipv4Addr::new(198, 19, 0, 0))),
            (FAKE_POOL_NAMES - 1, Some(Ipv4Addr::new(198, 19, 255, 254))),
            (FAKE_POOL_NAMES, None),
            (usize::MAX, None),
        ];
        for (index, ip) in table {
            assert_eq!(fake_ip(index), ip, "{index}");
        }
        for index in 0..FAKE_POOL_NAMES {
            let ip = fake_ip(index).unwrap();
            assert!(in_fake_pool(ip));
            assert_eq!(fake_index(ip), Some(index));
        }
        for outside in [
            Ipv4Addr::new(198, 18, 0, 0),
            Ipv4Addr::new(198, 19, 255, 255),
            Ipv4Addr::new(198, 17, 255, 255),
            Ipv4Addr::new(198, 20, 0, 0),
            Ipv4Addr::new(127, 0, 0, 1),
        ] {
            assert_eq!(fake_index(outside), None, "{outside}");
        }
        assert!(!in_fake_pool(Ipv4Addr::new(198, 20, 0, 1)));
    }

    #[test]
    fn granted_names_are_distinct_in_grant_order_and_map_back_from_their_addresses() {
        let grants: Vec<Grant> = [
            "api.example.com:443",
            "api.example.com:80",
            "192.0.2.1:22",
            "files.example.org:443",
        ]
        .iter()
        .map(|g| g.parse().unwrap())
        .collect();
        let g = GrantedNames::new(&grants).unwrap();
        assert_eq!(g.names(), ["api.example.com", "files.example.org"]);
        assert_eq!(
            g.fake_ip_of("files.example.org"),
            Some(Ipv4Addr::new(198, 18, 0, 2))
        );
        assert_eq!(
            g.name_of(Ipv4Addr::new(198, 18, 0, 1)),
            Some("api.example.com")
        );
        assert_eq!(g.name_of(Ipv4Addr::new(198, 18, 0, 3)), None);
        assert_eq!(g.index_of("192.0.2.1"), None);
        assert_eq!(g.fake_ip_of("API.example.com"), None);
    }
}
