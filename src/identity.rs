//! Who a root is: session, instance, run and peer ids, the in-memory Ed25519 key pair and its
//! canonical SPKI encoding, alias rules, and the random source for ids and nonces.

use crate::config::internal::ALIAS_CHARS_MAX;
use crate::error::{Code, Error, Result};
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

/// The fixed DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410); 32 key bytes follow.
pub const SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// Fills `buf` from the OS random source. Failure of the OS generator is not recoverable and
/// not caused by input, so it aborts loudly rather than producing weak ids.
pub fn random_bytes(buf: &mut [u8]) {
    if let Err(e) = getrandom::fill(buf) {
        panic!("the operating system random source failed: {e}");
    }
}

pub fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    random_bytes(&mut b);
    u64::from_le_bytes(b)
}

/// Lower-case hex, two digits a byte. Written out by table: a `format!` per byte (an
/// allocation and a formatter run each) made digests a visible part of every send.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

/// A fresh instance id: `i-` and 16 hex digits, new at every root start.
pub fn new_instance_id() -> String {
    format!("i-{:016x}", random_u64())
}

/// A fresh run id for a child run.
pub fn new_run_id() -> String {
    format!("r-{:016x}", random_u64())
}

/// A fresh saved-session id in Autohand's shape: a v4 UUID and the epoch milliseconds.
pub fn new_session_id() -> String {
    let mut b = [0u8; 16];
    random_bytes(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    format!(
        "{}-{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32],
        crate::clock::now_ms()
    )
}

/// The opaque routing id of a root (`run_id` = None) or of one of its child runs.
pub fn peer_id(instance_id: &str, run_id: Option<&str>) -> String {
    let mut h = Sha256::new();
    h.update(b"peerwire/peer-id/v1\0");
    h.update(instance_id.as_bytes());
    h.update([0u8]);
    h.update(run_id.unwrap_or("").as_bytes());
    // 24 hex digits: the first 12 bytes of the hash.
    let digest = h.finalize();
    format!("p-{}", hex(digest.get(..12).unwrap_or_default()))
}

/// Constant-time equality for secrets: no early exit on the first differing byte, and the
/// accumulated difference passes `black_box` so the compiler cannot add one (length is not
/// secret). The one comparison of secrets in the crate.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// True for ids we generate and accept on the wire: short, printable, `[A-Za-z0-9_.-]`.
pub fn is_valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= crate::config::internal::ID_CHARS_MAX
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// Aliases are readable names: 1–48 chars of letters, digits, `-`, `_`, `.`, starting with a
/// letter or digit. They never route on their own.
pub fn validate_alias(alias: &str) -> Result<()> {
    let ok = !alias.is_empty()
        && alias.chars().count() <= ALIAS_CHARS_MAX
        && alias
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && alias
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(Error::new(
            Code::Usage,
            format!(
                "alias {:?} is invalid: use 1-{ALIAS_CHARS_MAX} letters, digits, '-', '_' or '.', starting with a letter or digit",
                crate::sanitize::line(alias, 60)
            ),
        ))
    }
}

/// A generated alias when none is configured: the workspace's base name and 4 hex digits.
pub fn generated_alias(workspace: &std::path::Path) -> String {
    let base: String = workspace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
        .take(32)
        .collect();
    let base = base.trim_start_matches(['-', '_', '.']);
    let base = if base.is_empty() { "peer" } else { base };
    format!("{base}-{:04x}", random_u64() & 0xffff)
}

/// A root's signing key. It lives in memory only and is never written anywhere.
pub struct KeyPair {
    signing: SigningKey,
}

impl KeyPair {
    pub fn generate() -> KeyPair {
        let mut seed = [0u8; 32];
        random_bytes(&mut seed);
        let signing = SigningKey::from_bytes(&seed);
        seed.fill(0);
        KeyPair { signing }
    }

    pub fn sign(&self, msg: &[u8]) -> [u8; 64] {
        self.signing.sign(msg).to_bytes()
    }

    pub fn public(&self) -> [u8; 32] {
        self.signing.verifying_key().to_bytes()
    }

    /// The advertised form: base64 of the DER SPKI.
    pub fn spki_b64(&self) -> String {
        spki_b64(&self.public())
    }
}

pub fn spki_der(public: &[u8; 32]) -> Vec<u8> {
    let mut der = SPKI_PREFIX.to_vec();
    der.extend_from_slice(public);
    der
}

pub fn spki_b64(public: &[u8; 32]) -> String {
    b64(&spki_der(public))
}

/// Decodes an advertised SPKI back to the 32-byte key; anything but the exact Ed25519 form
/// is refused.
pub fn parse_spki_b64(s: &str) -> Option<[u8; 32]> {
    if s.len() > 64 {
        return None;
    }
    let der = unb64(s)?;
    if der.len() != 44 || der[..12] != SPKI_PREFIX {
        return None;
    }
    let mut key = [0u8; 32];
    key.copy_from_slice(&der[12..]);
    // Reject encodings that are not a valid curve point.
    VerifyingKey::from_bytes(&key).ok()?;
    Some(key)
}

/// `verify_strict` of an Ed25519 signature; false for any malformed input.
pub fn verify(public: &[u8; 32], msg: &[u8], sig: &[u8]) -> bool {
    let Ok(key) = VerifyingKey::from_bytes(public) else {
        return false;
    };
    let Ok(sig) = <[u8; 64]>::try_from(sig) else {
        return false;
    };
    key.verify_strict(msg, &Signature::from_bytes(&sig)).is_ok()
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn unb64(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

/// SHA-256 as lowercase hex, for content fingerprints and resource file names.
pub fn sha256_hex(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    hex(&h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_two_lower_case_digits_a_byte() {
        let all: Vec<u8> = (0..=255u8).collect();
        let want: String = all.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex(&all), want);
        assert_eq!(hex(&[]), "");
        assert_eq!(hex(&[0x0a, 0xf0]), "0af0");
        // A peer id is the first 24 hex digits of its hash, as it always was.
        let mut h = Sha256::new();
        h.update(b"peerwire/peer-id/v1\0i-1\0r");
        let full: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(peer_id("i-1", Some("r")), format!("p-{}", &full[..24]));
    }

    #[test]
    fn spki_round_trips_and_signatures_verify() {
        let k = KeyPair::generate();
        let spki = k.spki_b64();
        assert!(spki.starts_with("MCowBQYDK2VwAyEA"));
        let public = parse_spki_b64(&spki).unwrap();
        let sig = k.sign(b"hello");
        assert!(verify(&public, b"hello", &sig));
        assert!(!verify(&public, b"hellp", &sig));
        assert!(parse_spki_b64("AAAA").is_none());
    }

    #[test]
    fn ids_have_their_shapes() {
        assert!(new_instance_id().starts_with("i-"));
        assert_eq!(new_instance_id().len(), 18);
        assert!(is_valid_id(&new_session_id()));
        let a = peer_id("i-1", None);
        assert_ne!(a, peer_id("i-1", Some("r-1")));
        assert_eq!(a, peer_id("i-1", None));
        assert!(validate_alias("alice").is_ok());
        assert!(validate_alias("-x").is_err());
        assert!(validate_alias("a\u{1b}[31m").is_err());
        assert!(validate_alias(&"a".repeat(49)).is_err());
    }
}
