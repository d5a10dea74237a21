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
    /// Something about the log itself (a torn line chained past, a head
    /// file found missing or rewritten, rotated files removed, the HMAC key
    /// rotated).
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
/// map is ordered, so keys come out sorted), made as [`seal`] makes them.
pub(crate) fn canonical(record: &Map<String, Value>) -> Vec<u8> {
    Halves::of(record).canonical()
}

/// The chain hash of a record: `sha256:` of the canonical form, or, with the
/// operator's key, `hmac-sha256:` (an attacker who can write the file but not
/// read the key cannot rebuild a chain that verifies).
pub fn chain_hash(record: &Map<String, Value>, key: Option<&[u8]>) -> String {
    hash_of(&canonical(record), key)
}

/// The chain hash of canonical bytes (see [`chain_hash`]).
fn hash_of(bytes: &[u8], key: Option<&[u8]>) -> String {
    use hmac::{Hmac, Mac};
    match key.and_then(|k| Hmac::<Sha256>::new_from_slice(k).ok()) {
        Some(mut mac) => {
            mac.update(bytes);
            format!("hmac-sha256:{}", hex::encode(mac.finalize().into_bytes()))
        }
        None => format!("sha256:{}", hex::encode(Sha256::digest(bytes))),
    }
}

/// HMAC-SHA256 of `parts` under `key`, as `hmac-sha256:<hex>`.
fn hmac_hex(key: &[u8], parts: &[&[u8]]) -> String {
    use hmac::{Hmac, Mac};
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return String::new();
    };
    for part in parts {
        mac.update(part);
    }
    format!("hmac-sha256:{}", hex::encode(mac.finalize().into_bytes()))
}

/// Whether `mac` is HMAC-SHA256 of `parts` under `key`, compared in
/// constant time.
fn hmac_matches(key: &[u8], parts: &[&[u8]], mac: &str) -> bool {
    use hmac::{Hmac, Mac};
    let Some(Ok(tag)) = mac.strip_prefix("hmac-sha256:").map(hex::decode) else {
        return false;
    };
    let Ok(mut m) = Hmac::<Sha256>::new_from_slice(key) else {
        return false;
    };
    for part in parts {
        m.update(part);
    }
    m.verify_slice(&tag).is_ok()
}

/// A key's public name: `hmac-sha256:` and the first 16 hex digits of the
/// SHA-256 of the key behind a domain string, so that records, notes and
/// messages can say which key without revealing it (nor any hash a key
/// holder could check a guess against outside this use).
pub(crate) fn key_id(key: &[u8]) -> String {
    let digest = Sha256::new()
        .chain_update(b"spawnd audit key id v1\0")
        .chain_update(key)
        .finalize();
    format!("hmac-sha256:{}", &hex::encode(digest)[..16])
}

/// The domain of a head file's MAC.
const HEAD_MAC_DOMAIN: &[u8] = b"spawnd audit head v1\n";

/// The head file's MAC: HMAC-SHA256 under the chain's key of a domain
/// string and the canonical JSON `{"counter":C,"hash":H,"seq":S}`.
pub fn head_mac(key: &[u8], seq: u64, hash: &str, counter: u64) -> String {
    let canon = head_canonical(seq, hash, counter);
    hmac_hex(key, &[HEAD_MAC_DOMAIN, &canon])
}

/// Whether `mac` is the head file's MAC of `seq`, `hash` and `counter`
/// under `key`.
pub(crate) fn head_mac_matches(key: &[u8], seq: u64, hash: &str, counter: u64, mac: &str) -> bool {
    let canon = head_canonical(seq, hash, counter);
    hmac_matches(key, &[HEAD_MAC_DOMAIN, &canon], mac)
}

fn head_canonical(seq: u64, hash: &str, counter: u64) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"counter": counter, "hash": hash, "seq": seq}))
        .unwrap_or_default()
}

/// Whether `record`'s stored `hash` is its chain hash under `key` (`None`:
/// plain SHA-256).
pub(crate) fn sealed_with(record: &Map<String, Value>, key: Option<&[u8]>) -> bool {
    let stored = record.get("hash").and_then(Value::as_str).unwrap_or("");
    match key {
        Some(key) => hmac_matches(key, &[&canonical(record)], stored),
        None => stored == chain_hash(record, None),
    }
}

/// The `note` text of a key rotation record.
pub(crate) const KEY_ROTATED: &str =
    "HMAC key rotated: the records after this one are sealed with the new key";

/// The domain of a key rotation note's MAC under the new key.
const ROTATION_MAC_DOMAIN: &[u8] = b"spawnd audit key rotation v1\n";

/// The canonical bytes a rotation note's `rotation_mac` covers: the record
/// without `hash` and without `rotation_mac`.
fn rotation_canonical(record: &Map<String, Value>) -> Vec<u8> {
    let mut copy = record.clone();
    copy.remove("rotation_mac");
    canonical(&copy)
}

/// Seals the note that moves the chain from the key `from` (`None`: an
/// unkeyed chain) to the key `to`: `key_rotated {from_key_id, to_key_id}`,
/// `rotation_mac` (HMAC under `to` of the note without `hash` and itself),
/// and `hash` under `from`, so the switch is vouched for by both keys.
pub(crate) fn seal_key_rotation(
    seq: u64,
    ts: &str,
    audit_id: &str,
    prev: &str,
    from: Option<&[u8]>,
    to: &[u8],
) -> Map<String, Value> {
    let mut r = Map::new();
    r.insert("note".into(), Value::from(KEY_ROTATED));
    r.insert(
        "key_rotated".into(),
        serde_json::json!({"from_key_id": from.map(key_id), "to_key_id": key_id(to)}),
    );
    r.insert("v".into(), Value::from(1));
    r.insert("kind".into(), Value::from(Kind::Note.as_str()));
    r.insert("seq".into(), Value::from(seq));
    r.insert("ts".into(), Value::from(ts));
    r.insert("audit_id".into(), Value::from(audit_id));
    r.insert("prev".into(), Value::from(prev));
    let mac = hmac_hex(to, &[ROTATION_MAC_DOMAIN, &rotation_canonical(&r)]);
    r.insert("rotation_mac".into(), Value::from(mac));
    let hash = chain_hash(&r, from);
    r.insert("hash".into(), Value::from(hash));
    r
}

/// A key rotation note's `from_key_id` (`None` for an unkeyed chain) and
/// `to_key_id`; `None` when `record` is not one.
pub(crate) fn key_rotation(record: &Map<String, Value>) -> Option<(Option<String>, String)> {
    if record.get("kind").and_then(Value::as_str) != Some(Kind::Note.as_str()) {
        return None;
    }
    let r = record.get("key_rotated")?;
    let from = match r.get("from_key_id")? {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        _ => return None,
    };
    Some((from, r.get("to_key_id")?.as_str()?.to_string()))
}

/// Whether a rotation note's `rotation_mac` verifies under `to`.
pub(crate) fn rotation_vouched_by(record: &Map<String, Value>, to: &[u8]) -> bool {
    let mac = record
        .get("rotation_mac")
        .and_then(Value::as_str)
        .unwrap_or("");
    hmac_matches(to, &[ROTATION_MAC_DOMAIN, &rotation_canonical(record)], mac)
}

/// Seals `body` into a record: envelope fields added, `hash` computed, and
/// the record's line made.
pub(crate) fn seal(
    kind: Kind,
    seq: u64,
    ts: &str,
    audit_id: &str,
    prev: &str,
    body: Map<String, Value>,
    key: Option<&[u8]>,
) -> Sealed {
    let mut r = body;
    r.insert("v".into(), Value::from(1));
    r.insert("kind".into(), Value::from(kind.as_str()));
    r.insert("seq".into(), Value::from(seq));
    r.insert("ts".into(), Value::from(ts));
    r.insert("audit_id".into(), Value::from(audit_id));
    r.insert("prev".into(), Value::from(prev));
    let halves = Halves::of(&r);
    let hash = hash_of(&halves.canonical(), key);
    let line = halves.line(&hash);
    r.insert("hash".into(), Value::from(hash));
    Sealed { record: r, line }
}

/// A sealed record and the line the log holds for it: its JSON, `hash`
/// included, and a newline.
pub(crate) struct Sealed {
    /// The record, `hash` included.
    pub(crate) record: Map<String, Value>,
    /// Its line.
    pub(crate) line: Vec<u8>,
}

impl Sealed {
    /// A record sealed elsewhere, with its line.
    pub(crate) fn from_record(record: Map<String, Value>) -> Sealed {
        let mut line = serde_json::to_vec(&record).unwrap_or_default();
        line.push(b'\n');
        Sealed { record, line }
    }
}

/// A record's JSON in two parts: the keys that sort before `hash` and those
/// after it, each serialized as an object. The map's keys come out sorted,
/// so the canonical form is the two joined, and the line is the two with
/// `"hash":"…"` between them: the record is serialized once for both, not
/// once for its hash and again for the log.
struct Halves {
    before: Vec<u8>,
    after: Vec<u8>,
}

impl Halves {
    fn of(record: &Map<String, Value>) -> Halves {
        let part =
            |keep: fn(&str) -> bool| serde_json::to_vec(&Entries(record, keep)).unwrap_or_default();
        Halves {
            before: part(|k| k < "hash"),
            after: part(|k| k > "hash"),
        }
    }

    /// The record's canonical bytes ([`canonical`]).
    fn canonical(&self) -> Vec<u8> {
        self.join(None)
    }

    /// The record's line with `hash`, as `serde_json::to_vec` of the record
    /// with it, and a newline.
    fn line(&self, hash: &str) -> Vec<u8> {
        let mut line = self.join(Some(hash));
        line.push(b'\n');
        line
    }

    fn join(&self, hash: Option<&str>) -> Vec<u8> {
        let (before, after) = (inside(&self.before), inside(&self.after));
        let mut out = Vec::with_capacity(before.len() + after.len() + 96);
        out.push(b'{');
        out.extend_from_slice(before);
        match hash {
            Some(hash) => {
                if !before.is_empty() {
                    out.push(b',');
                }
                out.extend_from_slice(b"\"hash\":");
                out.extend(serde_json::to_vec(hash).unwrap_or_default());
                if !after.is_empty() {
                    out.push(b',');
                }
            }
            None if !before.is_empty() && !after.is_empty() => out.push(b','),
            None => {}
        }
        out.extend_from_slice(after);
        out.push(b'}');
        out
    }
}

/// An object's JSON without its braces.
fn inside(object: &[u8]) -> &[u8] {
    object
        .get(1..object.len().saturating_sub(1))
        .unwrap_or_default()
}

/// The entries of a record whose keys `keep` takes, as an object.
struct Entries<'a>(&'a Map<String, Value>, fn(&str) -> bool);

impl serde::Serialize for Entries<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().filter(|(k, _)| (self.1)(k)))
    }
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
        let r = seal(Kind::Decision, 1, ts, "a1", GENESIS, body.clone(), None).record;
        assert_eq!(r["hash"], Value::from(chain_hash(&r, None)));
        let mut edited = r.clone();
        edited.insert("op".into(), Value::from("push"));
        assert_ne!(chain_hash(&edited, None), r["hash"].as_str().unwrap());
        let canon = String::from_utf8(canonical(&r)).unwrap();
        assert!(
            canon.starts_with("{\"audit_id\":") && !canon.contains("\"hash\""),
            "{canon}"
        );
        let keyed = seal(Kind::Decision, 1, ts, "a1", GENESIS, body, Some(b"k")).record;
        assert!(keyed["hash"].as_str().unwrap().starts_with("hmac-sha256:"));
        assert_ne!(
            chain_hash(&keyed, Some(b"other")),
            keyed["hash"].as_str().unwrap()
        );
        assert!(sealed_with(&keyed, Some(b"k")) && !sealed_with(&keyed, Some(b"other")));
        assert!(sealed_with(&r, None) && !sealed_with(&r, Some(b"k")));
    }

    /// The line and the hash come from one serialization: the line is what
    /// serializing the sealed record gives, and the hash is over the record
    /// serialized without `hash`, whichever keys sort before or after it.
    #[test]
    fn a_sealed_records_line_and_hash_are_those_of_the_record_serialized() {
        let ts = "2026-01-01T00:00:00.000Z";
        let bodies = [
            serde_json::json!({}),
            serde_json::json!({"a": 1, "zz": [1, {"b": "c"}]}),
            serde_json::json!({"Z": "upper sorts first", "hasg": 1, "hasha": 2, "h\u{e9}": "\"quoted\"\n"}),
            serde_json::json!({"hash": "a body's own hash is replaced", "\u{1f600}": null}),
        ];
        for body in bodies {
            let body = body.as_object().cloned().unwrap();
            for key in [None, Some(&b"k"[..])] {
                let sealed = seal(Kind::Exit, 7, ts, "a1", GENESIS, body.clone(), key);
                let mut line = serde_json::to_vec(&sealed.record).unwrap();
                line.push(b'\n');
                assert_eq!(
                    String::from_utf8(sealed.line.clone()).unwrap(),
                    String::from_utf8(line).unwrap()
                );
                let mut without_hash = sealed.record.clone();
                without_hash.remove("hash");
                let independent = hash_of(&serde_json::to_vec(&without_hash).unwrap(), key);
                assert_eq!(sealed.record["hash"], Value::from(independent));
                assert_eq!(
                    sealed.record["hash"],
                    Value::from(chain_hash(&sealed.record, key))
                );
            }
        }
        // Either half empty, and both.
        for object in [
            serde_json::json!({}),
            serde_json::json!({"a": 1}),
            serde_json::json!({"z": 1}),
            serde_json::json!({"a": 1, "hash": "x", "z": 2}),
        ] {
            let record = object.as_object().cloned().unwrap();
            let halves = Halves::of(&record);
            let mut without_hash = record.clone();
            without_hash.remove("hash");
            assert_eq!(
                halves.canonical(),
                serde_json::to_vec(&without_hash).unwrap(),
                "{record:?}"
            );
            let mut with_hash = record.clone();
            with_hash.insert("hash".into(), Value::from("h"));
            let mut line = serde_json::to_vec(&with_hash).unwrap();
            line.push(b'\n');
            assert_eq!(halves.line("h"), line, "{record:?}");
        }
    }

    #[test]
    fn a_key_id_names_a_key_without_showing_it() {
        let id = key_id(b"0123456789abcdef0123456789abcdef");
        assert!(
            id.starts_with("hmac-sha256:") && id.len() == 12 + 16,
            "{id}"
        );
        assert!(!id.contains("0123456789abcdef"));
        assert_ne!(id, key_id(b"0123456789abcdef0123456789abcdeF"));
        assert_eq!(id, key_id(b"0123456789abcdef0123456789abcdef"));
    }

    #[test]
    fn a_head_mac_covers_seq_hash_and_counter() {
        let mac = head_mac(b"k1", 7, "sha256:aa", 9);
        assert!(head_mac_matches(b"k1", 7, "sha256:aa", 9, &mac));
        assert!(!head_mac_matches(b"k2", 7, "sha256:aa", 9, &mac));
        assert!(!head_mac_matches(b"k1", 6, "sha256:aa", 9, &mac));
        assert!(!head_mac_matches(b"k1", 7, "sha256:ab", 9, &mac));
        assert!(!head_mac_matches(b"k1", 7, "sha256:aa", 8, &mac));
        assert!(!head_mac_matches(
            b"k1",
            7,
            "sha256:aa",
            9,
            "hmac-sha256:zz"
        ));
    }

    #[test]
    fn a_rotation_note_is_sealed_by_the_old_key_and_vouched_for_by_the_new() {
        let ts = "2026-01-01T00:00:00.000Z";
        let note = seal_key_rotation(4, ts, "a1", "hmac-sha256:00", Some(b"old"), b"new");
        assert!(sealed_with(&note, Some(b"old")));
        assert!(rotation_vouched_by(&note, b"new"));
        assert!(!rotation_vouched_by(&note, b"old"));
        assert_eq!(
            key_rotation(&note),
            Some((Some(key_id(b"old")), key_id(b"new")))
        );
        // The new key's MAC covers the chain link too.
        let mut moved = note.clone();
        moved.insert("prev".into(), Value::from("hmac-sha256:01"));
        assert!(!rotation_vouched_by(&moved, b"new"));
        let from_none = seal_key_rotation(1, ts, "a1", GENESIS, None, b"new");
        assert!(sealed_with(&from_none, None) && rotation_vouched_by(&from_none, b"new"));
        assert_eq!(key_rotation(&from_none), Some((None, key_id(b"new"))));
    }
}
