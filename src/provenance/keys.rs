//! Publisher keys (ed25519, `ed25519-dalek` with its PKCS#8 and PEM support):
//! a public key as the ADR's `keys/publisher.pub` holds it, PEM
//! SubjectPublicKeyInfo as `openssl pkey -pubout` prints it or the raw 32
//! bytes in base64; a private key as PKCS#8 PEM, as `openssl genpkey
//! -algorithm ed25519` writes it; and a key id, the first 16 hex digits of
//! the SHA-256 of the raw public key, that names a key in the keyring, in
//! signatures and in listings.

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{
    DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey, KeypairBytes,
};
use ed25519_dalek::{SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

/// Why a key was refused.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Not a public key in a form spawnd reads.
    #[error("not an ed25519 public key: give the PEM that `openssl pkey -pubout` prints (-----BEGIN PUBLIC KEY-----) or the raw 32-byte key in base64 ({0})")]
    Public(String),
    /// A private key where a public one was expected.
    #[error("this is a private key: give its public half (the PREFIX.pub that `spawnd connector keygen` writes, or `openssl pkey -in KEY -pubout`), and keep the private key to the publisher")]
    PrivateGiven,
    /// A low-order point: any signature verifies under it.
    #[error("a weak ed25519 key (a point of small order, under which signatures prove nothing)")]
    Weak,
    /// Not a private key in a form spawnd reads.
    #[error("not an ed25519 private key: give the PKCS#8 PEM (-----BEGIN PRIVATE KEY-----) that `spawnd connector keygen` or `openssl genpkey -algorithm ed25519` writes ({0})")]
    Private(String),
    /// The kernel's randomness could not be read, or a key not encoded.
    #[error("{0}")]
    Generate(String),
}

/// A key's short name: 16 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId(String);

impl KeyId {
    /// The id of `key`.
    pub fn of(key: &VerifyingKey) -> KeyId {
        KeyId(hex::encode(&Sha256::digest(key.as_bytes())[..8]))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for KeyId {
    type Err = String;
    fn from_str(text: &str) -> Result<KeyId, String> {
        if text.len() == 16 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(KeyId(text.to_string()))
        } else {
            Err(format!(
                "`{}` is not a key id: 16 lowercase hex digits, as `spawnd keyring list` shows",
                crate::printable::printable(text)
            ))
        }
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Reads a publisher's public key: PEM SubjectPublicKeyInfo, or 32 raw
/// bytes in base64. A weak key is refused.
pub(crate) fn parse_public_key(text: &str) -> Result<VerifyingKey, KeyError> {
    let text = text.trim();
    let key = if text.starts_with("-----BEGIN") {
        if text.contains("PRIVATE KEY-----") {
            return Err(KeyError::PrivateGiven);
        }
        VerifyingKey::from_public_key_pem(text).map_err(|e| KeyError::Public(e.to_string()))?
    } else {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| KeyError::Public(format!("not PEM, and not base64: {e}")))?;
        let raw: [u8; 32] = raw
            .as_slice()
            .try_into()
            .map_err(|_| KeyError::Public(format!("base64 of {} bytes, not 32", raw.len())))?;
        VerifyingKey::from_bytes(&raw).map_err(|e| KeyError::Public(e.to_string()))?
    };
    if key.is_weak() {
        return Err(KeyError::Weak);
    }
    Ok(key)
}

/// A public key as `PREFIX.pub` and the keyring hold it: PEM
/// SubjectPublicKeyInfo, byte for byte what `openssl pkey -pubout` prints.
pub(crate) fn public_key_pem(key: &VerifyingKey) -> Result<String, KeyError> {
    key.to_public_key_pem(LineEnding::LF)
        .map_err(|e| KeyError::Generate(format!("encoding a public key: {e}")))
}

/// Reads a publisher's private key: PKCS#8 PEM.
pub(crate) fn parse_signing_key(text: &str) -> Result<SigningKey, KeyError> {
    SigningKey::from_pkcs8_pem(text.trim()).map_err(|e| KeyError::Private(e.to_string()))
}

/// A new signing key from 32 bytes of the kernel's randomness.
pub(crate) fn new_signing_key() -> Result<SigningKey, KeyError> {
    let mut seed = zeroize::Zeroizing::new([0u8; 32]);
    getrandom::fill(seed.as_mut_slice())
        .map_err(|e| KeyError::Generate(format!("getrandom: {e}")))?;
    Ok(SigningKey::from_bytes(&seed))
}

/// A private key as `PREFIX` holds it: PKCS#8 v1 PEM, the form `openssl
/// genpkey -algorithm ed25519` writes (and reads).
pub(crate) fn signing_key_pem(key: &SigningKey) -> Result<zeroize::Zeroizing<String>, KeyError> {
    KeypairBytes {
        secret_key: key.to_bytes(),
        public_key: None,
    }
    .to_pkcs8_pem(LineEnding::LF)
    .map_err(|e| KeyError::Generate(format!("encoding a private key: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8410's example key, as `openssl pkey -pubout` prints it.
    const RFC8410_PUBLIC: &str = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n";

    #[test]
    fn a_public_key_is_read_from_pem_or_raw_base64_and_written_as_openssl_does() {
        let from_pem = parse_public_key(RFC8410_PUBLIC).unwrap();
        let raw = base64::engine::general_purpose::STANDARD.encode(from_pem.as_bytes());
        assert_eq!(parse_public_key(&format!("{raw}\n")).unwrap(), from_pem);
        assert_eq!(public_key_pem(&from_pem).unwrap(), RFC8410_PUBLIC);
        let id = KeyId::of(&from_pem);
        assert_eq!(id.as_str().len(), 16);
        assert_eq!(id.as_str().parse::<KeyId>().unwrap(), id);
    }

    #[test]
    fn what_is_not_a_public_key_is_refused_with_the_forms_accepted() {
        let signing = new_signing_key().unwrap();
        let private = signing_key_pem(&signing).unwrap();
        assert!(matches!(
            parse_public_key(&private),
            Err(KeyError::PrivateGiven)
        ));
        for bad in [
            "",
            "hello",
            "AAAA",
            "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----",
        ] {
            let e = parse_public_key(bad).unwrap_err().to_string();
            assert!(e.contains("openssl pkey -pubout"), "{bad}: {e}");
        }
        // The identity point: every signature would verify under it.
        let mut weak = [0u8; 32];
        weak[0] = 1;
        let weak = base64::engine::general_purpose::STANDARD.encode(weak);
        assert!(matches!(parse_public_key(&weak), Err(KeyError::Weak)));
        for bad in ["", "0123", "0123456789ABCDEF", "0123456789abcdeg"] {
            assert!(bad.parse::<KeyId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_private_key_round_trips_through_pkcs8_pem() {
        let key = new_signing_key().unwrap();
        let pem = signing_key_pem(&key).unwrap();
        assert!(
            pem.starts_with("-----BEGIN PRIVATE KEY-----\n"),
            "{}",
            pem.as_str()
        );
        let back = parse_signing_key(&pem).unwrap();
        assert_eq!(back.to_bytes(), key.to_bytes());
        let e = parse_signing_key(RFC8410_PUBLIC).unwrap_err().to_string();
        assert!(e.contains("PKCS#8"), "{e}");
    }
}
