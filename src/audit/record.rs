//! Audit records as values: the fixed envelope (`v`, `kind`, `seq`, `ts`,
//! `audit_id`, `prev`, `hash`) around a body, and the hash chain. A record's
//! hash is SHA-256 over its canonical form — the JSON object without `hash`,
//! keys sorted, no whitespace — and `prev` is the hash of the record before
//! it (all zeros for the first), so editing, deleting, inserting or
//! reordering any record breaks the chain at that point.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The `prev` of the first record.
pub const GENESIS: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// What a record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An allowed spawn, written before the child starts.
    Decision,
    /// A refused request, written before the refusal is returned.
    Denial,
    /// How an allowed spawn ended.
    Exit,
    /// A detached spawn taken up again (`spawn_attach`), by whom; between
    /// its decision and its exit.
    Attach,
    /// One of a spawn's network connections, or the first refusal of a
    /// kind, or a DNS name refused; between its decision and its exit.
    Net,
    /// Something about the log itself (a torn line chained past).
    Note,
    /// The daemon's own life: its start (what it serves, and the spawns
    /// an earlier daemon left without an exit record), a reload (what
    /// changed), its stop.
    Lifecycle,
    /// The daemon is alive and writing: every `[audit] heartbeat_secs`.
    Heartbeat,
}

impl Kind {
    /// Every kind, in the order the docs list them.
    pub const ALL: [Kind; 8] = [
        Kind::Decision,
        Kind::Denial,
        Kind::Exit,
        Kind::Attach,
        Kind::Net,
        Kind::Note,
        Kind::Lifecycle,
        Kind::Heartbeat,
    ];

    /// The kind whose wire name is `name`, exactly.
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Decision => "decision",
            Kind::Denial => "denial",
            Kind::Exit => "exit",
            Kind::Attach => "attach",
            Kind::Net => "net",
            Kind::Note => "note",
            Kind::Lifecycle => "lifecycle",
            Kind::Heartbeat => "heartbeat",
        }
    }
}

/// The canonical bytes of a record: its JSON without `hash` (serde_json's
/// map is ordered, so keys come out sorted).
pub fn canonical(record: &Map<String, Value>) -> Vec<u8> {
    serde_json::to_vec(&WithoutHash(record)).unwrap_or_default()
}

/// A record's object without its `hash`, serialized in place (no copy of
/// the record: the daemon seals two per spawn).
struct WithoutHash<'a>(&'a Map<String, Value>);

impl serde::Serialize for WithoutHash<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().filter(|(k, _)| k.as_str() != "hash"))
    }
}

/// The chain hash of a record: `sha256:` of the canonical form, or, with the
/// operator's key, `hmac-sha256:` (an attacker who can write the file but not
/// read the key cannot rebuild a chain that verifies).
pub fn chain_hash(record: &Map<String, Value>, key: Option<&[u8]>) -> String {
    use hmac::{Hmac, Mac};
    let bytes = canonical(record);
    match key.and_then(|k| Hmac::<Sha256>::new_from_slice(k).ok()) {
        Some(mut mac) => {
            mac.update(&bytes);
            format!("hmac-sha256:{}", hex::encode(mac.finalize().into_bytes()))
        }
        None => format!("sha256:{}", hex::encode(Sha256::digest(bytes))),
    }
}

/// Seals `body` into a record: envelope fields added, `hash` computed.
pub fn seal(
    kind: Kind,
    seq: u64,
    ts: &str,
    audit_id: &str,
    prev: &str,
    body: Map<String, Value>,
    key: Option<&[u8]>,
) -> Map<String, Value> {
    let mut r = body;
    r.insert("v".into(), Value::from(1));
    r.insert("kind".into(), Value::from(kind.as_str()));
    r.insert("seq".into(), Value::from(seq));
    r.insert("ts".into(), Value::from(ts));
    r.insert("audit_id".into(), Value::from(audit_id));
    r.insert("prev".into(), Value::from(prev));
    let hash = chain_hash(&r, key);
    r.insert("hash".into(), Value::from(hash));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_found_by_its_wire_name_and_only_by_it() {
        for kind in Kind::ALL {
            assert_eq!(Kind::from_name(kind.as_str()), Some(kind));
        }
        for name in ["", "Denial", "denial ", "bogus"] {
            assert_eq!(Kind::from_name(name), None, "{name:?}");
        }
    }

    #[test]
    fn the_hash_covers_everything_but_itself_and_changes_with_any_field() {
        let mut body = Map::new();
        body.insert("op".into(), Value::from("log"));
        let ts = "2026-01-01T00:00:00.000Z";
        let r = seal(Kind::Decision, 1, ts, "a1", GENESIS, body.clone(), None);
        assert_eq!(r["hash"], Value::from(chain_hash(&r, None)));
        let mut edited = r.clone();
        edited.insert("op".into(), Value::from("push"));
        assert_ne!(chain_hash(&edited, None), r["hash"].as_str().unwrap());
        let canon = String::from_utf8(canonical(&r)).unwrap();
        assert!(
            canon.starts_with("{\"audit_id\":") && !canon.contains("\"hash\""),
            "{canon}"
        );
        let keyed = seal(Kind::Decision, 1, ts, "a1", GENESIS, body, Some(b"k"));
        assert!(keyed["hash"].as_str().unwrap().starts_with("hmac-sha256:"));
        assert_ne!(
            chain_hash(&keyed, Some(b"other")),
            keyed["hash"].as_str().unwrap()
        );
    }
}
