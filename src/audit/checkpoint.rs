//! Signed checkpoints: one JSON line that says "on this host, at this time,
//! the chain's record `seq` had this `hash`", signed with an ed25519 key
//! (`ed25519-dalek`). Shipped off the host, a checkpoint is an anchor that
//! nobody on the host can move: root holding the HMAC key can rebuild a
//! chain that verifies, but not one whose record at `seq` has the hash a
//! checkpoint signed before, nor a log that no longer reaches `seq`.
//!
//! The line is `{v, seq, hash, ts, machine {hostname, machine_id, boot_id}, log,
//! public_key, signature}`; `signature` is over a domain string and the
//! canonical JSON of every other field (keys sorted, no spacing). The
//! `public_key` in the line only says which key signed it: a verifier
//! trusts the keys it is given, never the line's own.

use std::path::Path;

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde_json::{json, Map, Value};

use super::verify::Anchor;

/// The domain of a checkpoint's signature.
const SIGNATURE_DOMAIN: &[u8] = b"spawnd audit checkpoint v1\n";

/// Why a key or a checkpoint was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckpointError {
    /// A signing key file that is not 64 hex digits.
    #[error("not an ed25519 signing key (64 hex digits, as `spawnd audit keygen --signing FILE` writes)")]
    SigningKey,
    /// A public key that is not `ed25519:` and 64 hex digits of a point.
    #[error("{0:?} is not an ed25519 public key (`ed25519:` and 64 hex digits, as `spawnd audit keygen --signing` prints)")]
    PublicKey(String),
    /// A line that is not a checkpoint.
    #[error("not a checkpoint: {0}")]
    Malformed(String),
    /// Signed by a key the verifier was not given.
    #[error("signed by {0}, which is not among the public keys given (--public-key)")]
    Untrusted(String),
    /// The signature does not verify: the line was edited.
    #[error("its signature does not verify under {0}: edited or forged")]
    Signature(String),
}

/// Reads a signing key: 64 hex digits (the 32-byte ed25519 seed).
pub(crate) fn signing_key(text: &[u8]) -> Result<SigningKey, CheckpointError> {
    let text = std::str::from_utf8(text).map_err(|_| CheckpointError::SigningKey)?;
    let mut seed = zeroize::Zeroizing::new([0u8; 32]);
    hex::decode_to_slice(text.trim(), seed.as_mut_slice())
        .map_err(|_| CheckpointError::SigningKey)?;
    Ok(SigningKey::from_bytes(&seed))
}

/// A new signing key's text (64 hex digits and a newline) from 32 bytes of
/// the kernel's randomness.
pub(crate) fn new_signing_key_text() -> std::io::Result<zeroize::Zeroizing<String>> {
    let mut seed = zeroize::Zeroizing::new([0u8; 32]);
    getrandom::fill(seed.as_mut_slice())
        .map_err(|e| std::io::Error::other(format!("getrandom: {e}")))?;
    let mut text = zeroize::Zeroizing::new(hex::encode(seed.as_slice()));
    text.push('\n');
    Ok(text)
}

/// A public key as checkpoints and verifiers write it: `ed25519:<hex>`.
pub(crate) fn public_key_text(key: &VerifyingKey) -> String {
    format!("ed25519:{}", hex::encode(key.as_bytes()))
}

/// Parses `ed25519:<64 hex>`.
pub(crate) fn parse_public_key(text: &str) -> Result<VerifyingKey, CheckpointError> {
    let bad = || CheckpointError::PublicKey(text.to_string());
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(
        text.trim().strip_prefix("ed25519:").ok_or_else(bad)?,
        &mut bytes,
    )
    .map_err(|_| bad())?;
    VerifyingKey::from_bytes(&bytes).map_err(|_| bad())
}

/// The signed line for record `seq` with `hash` of the chain at `log`.
pub(crate) fn sign(
    key: &SigningKey,
    seq: u64,
    hash: &str,
    ts: &str,
    machine: Value,
    log: &Path,
) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("v".into(), json!(1));
    fields.insert("seq".into(), json!(seq));
    fields.insert("hash".into(), json!(hash));
    fields.insert("ts".into(), json!(ts));
    fields.insert("machine".into(), machine);
    fields.insert("log".into(), json!(log.display().to_string()));
    fields.insert(
        "public_key".into(),
        json!(public_key_text(&key.verifying_key())),
    );
    let signature = key.sign(&signed_bytes(&fields));
    fields.insert(
        "signature".into(),
        json!(format!("ed25519:{}", hex::encode(signature.to_bytes()))),
    );
    fields
}

/// What a signature covers: the domain and the canonical JSON of every
/// field but `signature`.
fn signed_bytes(fields: &Map<String, Value>) -> Vec<u8> {
    let mut rest = fields.clone();
    rest.remove("signature");
    let mut bytes = SIGNATURE_DOMAIN.to_vec();
    bytes.extend(serde_json::to_vec(&rest).unwrap_or_default());
    bytes
}

/// Checks one checkpoint line against the trusted public keys and returns
/// the anchor it vouches for (`by` names `source` and when it was signed).
pub(crate) fn verify_line(
    line: &str,
    trusted: &[VerifyingKey],
    source: &str,
) -> Result<Anchor, CheckpointError> {
    let malformed = |what: &str| CheckpointError::Malformed(what.to_string());
    let fields: Map<String, Value> =
        serde_json::from_str(line).map_err(|e| malformed(&format!("not a JSON object ({e})")))?;
    if fields.get("v").and_then(Value::as_u64) != Some(1) {
        return Err(malformed("no `v: 1`"));
    }
    let seq = fields
        .get("seq")
        .and_then(Value::as_u64)
        .ok_or_else(|| malformed("no `seq`"))?;
    let hash = fields
        .get("hash")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("no `hash`"))?
        .to_string();
    let ts = fields.get("ts").and_then(Value::as_str).unwrap_or("?");
    let public = fields
        .get("public_key")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("no `public_key`"))?;
    let key = parse_public_key(public)?;
    if !trusted.contains(&key) {
        return Err(CheckpointError::Untrusted(public.to_string()));
    }
    let signature = fields
        .get("signature")
        .and_then(Value::as_str)
        .and_then(|s| s.strip_prefix("ed25519:"))
        .and_then(|h| hex::decode(h).ok())
        .and_then(|b| Signature::from_slice(&b).ok())
        .ok_or_else(|| malformed("no `signature` (`ed25519:` and 128 hex digits)"))?;
    key.verify(&signed_bytes(&fields), &signature)
        .map_err(|_| CheckpointError::Signature(public.to_string()))?;
    Ok(Anchor {
        seq,
        hash,
        by: format!("checkpoint {source} (signed {ts})"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SigningKey {
        signing_key(new_signing_key_text().unwrap().as_bytes()).unwrap()
    }

    #[test]
    fn a_checkpoint_verifies_under_its_key_and_nothing_in_it_can_change() {
        let k = key();
        let line = Value::Object(sign(
            &k,
            7,
            "sha256:ab",
            "2026-01-01T00:00:00.000Z",
            crate::audit::machine::this_machine().clone(),
            Path::new("/var/log/spawnd/audit.jsonl"),
        ))
        .to_string();
        let trusted = [k.verifying_key()];
        let anchor = verify_line(&line, &trusted, "c.jsonl:1").unwrap();
        assert_eq!((anchor.seq, anchor.hash.as_str()), (7, "sha256:ab"));
        assert!(anchor.by.contains("c.jsonl:1"), "{}", anchor.by);
        for (from, to) in [
            ("\"seq\":7", "\"seq\":8"),
            ("sha256:ab", "sha256:ac"),
            ("2026-01-01", "2026-01-02"),
            ("/var/log", "/var/tmp"),
        ] {
            let edited = line.replacen(from, to, 1);
            assert_ne!(edited, line);
            assert!(
                matches!(
                    verify_line(&edited, &trusted, "x"),
                    Err(CheckpointError::Signature(_))
                ),
                "{from}"
            );
        }
        // Another key's checkpoint is not trusted, whatever it says.
        let other = key();
        assert!(matches!(
            verify_line(&line, &[other.verifying_key()], "x"),
            Err(CheckpointError::Untrusted(_))
        ));
        // Re-signed by another key with that key's public key in the line:
        // still untrusted.
        let forged = Value::Object(sign(
            &other,
            7,
            "sha256:ab",
            "2026-01-01T00:00:00.000Z",
            crate::audit::machine::this_machine().clone(),
            Path::new("/x"),
        ))
        .to_string();
        assert!(matches!(
            verify_line(&forged, &trusted, "x"),
            Err(CheckpointError::Untrusted(_))
        ));
    }

    #[test]
    fn keys_round_trip_through_their_text_and_bad_text_is_refused() {
        let k = key();
        let public = public_key_text(&k.verifying_key());
        assert!(public.starts_with("ed25519:") && public.len() == 8 + 64);
        assert_eq!(parse_public_key(&public).unwrap(), k.verifying_key());
        for bad in ["", "ed25519:", "ed25519:zz", &public[8..], "rsa:00"] {
            assert!(parse_public_key(bad).is_err(), "{bad}");
        }
        for bad in [&b""[..], b"abc", &[b'g'; 64][..]] {
            assert!(signing_key(bad).is_err());
        }
    }
}
