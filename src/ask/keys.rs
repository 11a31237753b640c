//! This agent's Ed25519 signing key in `keyDir`, in dsh-ask-peer's layout: `<name>.key` is
//! the PKCS#8 PEM of the private key, `<name>.pub` the sign and a newline. The directory is
//! 0700 and both files 0600 from creation (src/fsutil.rs); the private key is never printed.

use super::canon;
use crate::config::internal::ASK_KEY_FILE_BYTES_MAX;
use crate::error::{Code, Error, Result};
use base64::Engine;
use ed25519_dalek::SigningKey;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// PKCS#8 v1 DER prefix of an Ed25519 private key; the 32-byte seed follows.
const PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];
const PEM_BEGIN: &str = "-----BEGIN PRIVATE KEY-----";
const PEM_END: &str = "-----END PRIVATE KEY-----";

/// A loaded key pair. `Debug` shows only the public half.
pub struct AskKey {
    signing: SigningKey,
    public: [u8; 32],
}

impl std::fmt::Debug for AskKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AskKey({})", self.fingerprint())
    }
}

impl AskKey {
    pub fn from_seed(seed: &[u8; 32]) -> AskKey {
        let signing = SigningKey::from_bytes(seed);
        let public = signing.verifying_key().to_bytes();
        AskKey { signing, public }
    }

    pub fn public(&self) -> [u8; 32] {
        self.public
    }

    /// The wire form of the public key (`ed25519:…`, 159 characters).
    pub fn sign_string(&self) -> String {
        canon::sign_of(&self.public)
    }

    pub fn fingerprint(&self) -> String {
        canon::fingerprint(&self.public)
    }

    /// The private key as PKCS#8 v1 DER (what the TLS certificate and handshake sign with);
    /// zeroed when dropped.
    pub fn pkcs8_der(&self) -> zeroize::Zeroizing<Vec<u8>> {
        let mut der = zeroize::Zeroizing::new(PKCS8_PREFIX.to_vec());
        der.extend_from_slice(self.signing.as_bytes());
        der
    }

    /// base64url Ed25519 signature over `msg`.
    pub fn sign(&self, msg: &[u8]) -> String {
        canon::signature(&self.signing, msg)
    }
}

fn key_path(dir: &Path, name: &str) -> Result<(PathBuf, PathBuf)> {
    if !super::config::valid_name(name) {
        return Err(Error::new(
            Code::ConfigInvalid,
            "ask.callerName is not usable as a key file name",
        ));
    }
    Ok((
        dir.join(format!("{name}.key")),
        dir.join(format!("{name}.pub")),
    ))
}

/// Loads `<dir>/<name>.key`, or creates the pair when it does not exist yet.
pub fn load_or_create(dir: &Path, name: &str) -> Result<AskKey> {
    crate::fsutil::ensure_private_dir(dir)?;
    match load(dir, name) {
        Err(e) if e.code == Code::NotFound => {}
        other => return other,
    }
    let (key_file, pub_file) = key_path(dir, name)?;
    let mut seed = [0u8; 32];
    crate::identity::random_bytes(&mut seed);
    let key = AskKey::from_seed(&seed);
    let pem = private_pem(&seed);
    seed.fill(0);
    let mut file = match crate::fsutil::create_private_new(&key_file) {
        Ok(f) => f,
        // Another process created it first: use theirs.
        Err(_) if key_file.exists() => return load(dir, name),
        Err(e) => return Err(e),
    };
    file.write_all(pem.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::io("cannot write", &key_file, &e))?;
    crate::fsutil::atomic_write(
        &pub_file,
        format!("{}\n", key.sign_string()).as_bytes(),
        crate::fsutil::Durability::Durable,
    )?;
    Ok(key)
}

/// Loads an existing key; `NOT_FOUND` when there is none. A key file others can read is
/// refused (`UNSAFE_PATH`).
pub fn load(dir: &Path, name: &str) -> Result<AskKey> {
    let (key_file, _) = key_path(dir, name)?;
    let file = crate::fsutil::open_private(&key_file)?;
    let mode = file
        .metadata()
        .map_err(|e| Error::io("cannot stat", &key_file, &e))?
        .mode();
    if mode & 0o077 != 0 {
        return Err(Error::new(
            Code::UnsafePath,
            format!(
                "{} is readable by others (mode {:o}); run: chmod 600 '{}'",
                key_file.display(),
                mode & 0o777,
                key_file.display()
            ),
        ));
    }
    drop(file);
    let bytes = crate::fsutil::read_private_bounded(&key_file, ASK_KEY_FILE_BYTES_MAX)?;
    let seed = parse_private_pem(&bytes).ok_or_else(|| {
        Error::new(
            Code::ConfigInvalid,
            format!("{} is not an Ed25519 PKCS#8 PEM key", key_file.display()),
        )
    })?;
    Ok(AskKey::from_seed(&seed))
}

fn private_pem(seed: &[u8; 32]) -> String {
    let mut der = PKCS8_PREFIX.to_vec();
    der.extend_from_slice(seed);
    let b64 = base64::engine::general_purpose::STANDARD.encode(&der);
    der.fill(0);
    format!("{PEM_BEGIN}\n{b64}\n{PEM_END}\n")
}

fn parse_private_pem(bytes: &[u8]) -> Option<[u8; 32]> {
    let text = std::str::from_utf8(bytes).ok()?;
    let inner = text.trim().strip_prefix(PEM_BEGIN)?.strip_suffix(PEM_END)?;
    let b64: String = inner.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let der = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    if der.len() != 48 || der[..16] != PKCS8_PREFIX {
        return None;
    }
    let mut seed = [0u8; 32];
    seed.copy_from_slice(&der[16..]);
    Some(seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_round_trips_and_matches_openssl_layout() {
        let mut seed = [0u8; 32];
        for (i, b) in seed.iter_mut().enumerate() {
            *b = i as u8;
        }
        let pem = private_pem(&seed);
        // What `openssl genpkey -algorithm ed25519` writes for this seed.
        assert_eq!(
            pem,
            "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f\n-----END PRIVATE KEY-----\n"
        );
        assert_eq!(parse_private_pem(pem.as_bytes()), Some(seed));
        assert_eq!(
            parse_private_pem(b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"),
            None
        );
    }

    #[test]
    fn created_private_and_reloaded() {
        let dir = std::env::temp_dir().join(format!(
            "pw-askkeys-{}-{}",
            std::process::id(),
            crate::identity::random_u64()
        ));
        let keys = dir.join("keys");
        let a = load_or_create(&keys, "ada").unwrap();
        let b = load_or_create(&keys, "ada").unwrap();
        assert_eq!(a.public(), b.public());
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode(&keys), 0o700);
        assert_eq!(mode(&keys.join("ada.key")), 0o600);
        assert_eq!(mode(&keys.join("ada.pub")), 0o600);
        let public = std::fs::read_to_string(keys.join("ada.pub")).unwrap();
        assert_eq!(public, format!("{}\n", a.sign_string()));
        assert!(!format!("{a:?}").contains("PRIVATE"));
    }
}
