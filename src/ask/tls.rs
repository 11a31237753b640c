//! TLS for the ask protocol, pinned to card keys: rustls with the ring provider, blocking.
//!
//! - Both sides present a self-signed certificate of their own Ed25519 card key (`rcgen`).
//!   Names, validity dates and issuers in it mean nothing: a certificate is only a carrier
//!   for the key, and the handshake signature (checked with the provider's algorithms) proves
//!   the peer holds it.
//! - A client accepts exactly the key pinned for the friend it asks (the card's `publicKey`):
//!   no CA, no trust on first use. Anything else ends the handshake before a byte of the
//!   question is written, and the error names the friend and both fingerprints.
//! - The server offers, never requires, a client certificate and reports the Ed25519 key a
//!   client proved; auth maps it to the friend who pinned it.
//! - `target` is the client policy: which friends are asked over TLS, which over plain HTTP.

use super::config::Friend;
use super::keys::AskKey;
use crate::error::{Code, Error, Result};
use parking_lot::Mutex;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, ClientConfig, ClientConnection, DigitallySignedStruct, DistinguishedName,
    ServerConfig, ServerConnection, SignatureScheme, StreamOwned,
};
use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The first byte of every TLS connection (a handshake record); an HTTP request starts with a
/// method's letter.
pub const HANDSHAKE_RECORD: u8 = 0x16;

/// DER of an Ed25519 SubjectPublicKeyInfo up to the 32 key bytes (RFC 8410).
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];
/// The name in our certificates and the SNI we send when a host is no DNS name: unused by
/// either verifier, present because X.509 and rustls want one.
const CERT_NAME: &str = "peerwire-ask";

/// A stream the ask server and client speak HTTP over: a plain socket or TLS on one. Deadlines
/// are set on the socket underneath.
pub trait Wire: Read + Write {
    fn socket(&self) -> &TcpStream;
}

impl Wire for TcpStream {
    fn socket(&self) -> &TcpStream {
        self
    }
}

/// The server's side of one TLS connection.
pub type ServerStream = StreamOwned<ServerConnection, TcpStream>;

impl Wire for ServerStream {
    fn socket(&self) -> &TcpStream {
        &self.sock
    }
}

impl Wire for StreamOwned<ClientConnection, TcpStream> {
    fn socket(&self) -> &TcpStream {
        &self.sock
    }
}

/// The ring provider, X25519 first. rustls marks it deprecated because ring has no
/// post-quantum key exchange; the alternative (aws-lc) needs a C/CMake build this project
/// avoids (SECURITY.md says what that leaves). Its default order starts with P-384, whose
/// key generation and exchange were most of a handshake's CPU time in a profile of
/// `peer ask`; X25519 matches the Ed25519 keys' strength at a fraction of the cost.
#[allow(deprecated)]
fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| {
            use rustls::crypto::ring::kx_group;
            let mut p = rustls::crypto::ring::default_provider();
            p.kx_groups = vec![kx_group::X25519, kx_group::SECP256R1, kx_group::SECP384R1];
            Arc::new(p)
        })
        .clone()
}

fn algorithms() -> WebPkiSupportedAlgorithms {
    provider().signature_verification_algorithms
}

/// The only handshake signature both verifiers take: the card keys are Ed25519.
const SCHEMES: [SignatureScheme; 1] = [SignatureScheme::ED25519];

#[derive(Clone, Copy)]
enum Tls {
    V12,
    V13,
}

/// Checks a handshake signature with the provider's algorithms, for both verifiers.
fn verify_signature(
    version: Tls,
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
    let algorithms = algorithms();
    match version {
        Tls::V12 => rustls::crypto::verify_tls12_signature(message, cert, dss, &algorithms),
        Tls::V13 => rustls::crypto::verify_tls13_signature(message, cert, dss, &algorithms),
    }
}

fn tls_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(Code::Io, format!("{what}: {e}"))
}

/// The Ed25519 key a certificate carries in its SubjectPublicKeyInfo; `None` for any other
/// key type or an unparsable certificate.
pub fn ed25519_key_of(cert: &CertificateDer<'_>) -> Option<[u8; 32]> {
    let parsed = rustls::server::ParsedCertificate::try_from(cert).ok()?;
    let spki = parsed.subject_public_key_info();
    let rest = spki.as_ref().strip_prefix(&ED25519_SPKI_PREFIX[..])?;
    rest.try_into().ok()
}

/// A self-signed certificate of `key` and the key itself, as rustls takes them.
fn certified(key: &AskKey) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let der = key.pkcs8_der();
    let pkcs8 = PrivatePkcs8KeyDer::from(der.to_vec());
    let pair = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8, &rcgen::PKCS_ED25519)
        .map_err(|e| tls_error("cannot use the ask key for TLS", e))?;
    let cert = rcgen::CertificateParams::new(vec![CERT_NAME.to_string()])
        .and_then(|p| p.self_signed(&pair))
        .map_err(|e| tls_error("cannot make the TLS certificate", e))?;
    Ok((vec![cert.der().clone()], PrivateKeyDer::Pkcs8(pkcs8)))
}

/// The server side: this agent's certificate, client certificates offered and not required.
pub fn server_config(key: &AskKey) -> Result<Arc<ServerConfig>> {
    let (chain, private) = certified(key)?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error("TLS setup", e))?
        .with_client_cert_verifier(Arc::new(AnyEd25519Client))
        .with_single_cert(chain, private)
        .map_err(|e| tls_error("TLS setup", e))?;
    // One request per connection and clients that keep no sessions: tickets would be bytes
    // and work for nothing.
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

/// Accepts any client that proves an Ed25519 key; which friend that is, if any, is auth's
/// question.
#[derive(Debug)]
struct AnyEd25519Client;

impl ClientCertVerifier for AnyEd25519Client {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        match ed25519_key_of(end_entity) {
            Some(_) => Ok(ClientCertVerified::assertion()),
            None => Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_signature(Tls::V12, message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_signature(Tls::V13, message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        SCHEMES.to_vec()
    }
}

/// Accepts exactly one server key, and remembers what the server presented so a refusal can
/// say it.
#[derive(Debug)]
pub struct PinnedServer {
    pinned: [u8; 32],
    /// `Some(presented)` once a certificate arrived; `Some(None)`: not an Ed25519 key.
    seen: Mutex<Option<Option<[u8; 32]>>>,
}

impl PinnedServer {
    pub fn new(pinned: [u8; 32]) -> PinnedServer {
        PinnedServer {
            pinned,
            seen: Mutex::new(None),
        }
    }

    /// What the server presented, once it did.
    pub fn seen(&self) -> Option<Option<[u8; 32]>> {
        *self.seen.lock()
    }
}

impl ServerCertVerifier for PinnedServer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let presented = ed25519_key_of(end_entity);
        *self.seen.lock() = Some(presented);
        if presented == Some(self.pinned) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_signature(Tls::V12, message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_signature(Tls::V13, message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        SCHEMES.to_vec()
    }
}

/// How to reach one server: where, and whether over TLS pinned to which key.
pub struct Target<'a> {
    /// The friend's name, for errors.
    pub name: &'a str,
    pub host: &'a str,
    pub port: u16,
    pub tls: Option<Pinned<'a>>,
}

/// TLS to a server whose key is `key`, presenting `own` (mutual TLS) when given.
pub struct Pinned<'a> {
    pub key: [u8; 32],
    pub own: Option<&'a AskKey>,
}

impl Target<'_> {
    /// Plain HTTP to `host:port` (loopback tools, dsh-ask-peer, the owner's own server).
    pub fn plain<'a>(host: &'a str, port: u16) -> Target<'a> {
        Target {
            name: host,
            host,
            port,
            tls: None,
        }
    }

    /// Whether the connection itself proves who the caller is (mutual TLS with our key), so
    /// a request body needs no signature.
    pub fn proves_caller(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.own.is_some())
    }
}

/// Whether `host` names this machine's loopback.
pub fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The client policy for friend `f`: TLS pinned to its `publicKey` unless `"tls": false`;
/// plain HTTP to loopback; plain HTTP elsewhere only with `"tls": false`, and then a warning
/// on stderr every time. A non-loopback friend with neither a key nor `"tls": false` is
/// refused: nothing could verify it.
pub fn target<'a>(f: &'a Friend, own: Option<&'a AskKey>) -> Result<Target<'a>> {
    let t = |tls| Target {
        name: &f.name,
        host: &f.host,
        port: f.port,
        tls,
    };
    match (f.key, f.tls) {
        (Some(key), None | Some(true)) => Ok(t(Some(Pinned { key, own }))),
        (_, Some(false)) => {
            if !is_loopback(&f.host) {
                eprintln!(
                    "warning: asking {} at {}:{} over plain HTTP (\"tls\": false): the question, the answer and any token cross the network in clear",
                    crate::sanitize::line(&f.name, 64),
                    crate::sanitize::line(&f.host, 253),
                    f.port
                );
            }
            Ok(t(None))
        }
        (None, _) if is_loopback(&f.host) => Ok(t(None)),
        (None, _) => Err(Error::new(
            Code::ConfigInvalid,
            format!(
                "friend {} at {}:{} has no pinned publicKey, so TLS cannot verify it; add its card (peer ask card add) to pin its key, or set \"tls\": false on it to ask over plain HTTP in clear",
                crate::sanitize::line(&f.name, 64),
                crate::sanitize::line(&f.host, 253),
                f.port
            ),
        )),
    }
}

/// What is left of `deadline`; `TIMEOUT` naming `where_` when nothing is.
pub(super) fn time_left(deadline: Instant, where_: &str) -> Result<Duration> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        return Err(Error::new(
            Code::Timeout,
            format!("{where_} did not answer in time"),
        ));
    }
    Ok(d)
}

/// Runs the client handshake on `sock` before `deadline`. Nothing of the request is written
/// until the server proved the pinned key.
pub fn connect(
    sock: TcpStream,
    t: &Target,
    pinned: &Pinned,
    deadline: Instant,
) -> Result<StreamOwned<ClientConnection, TcpStream>> {
    let where_ = format!("{}:{}", t.host, t.port);
    let verifier = Arc::new(PinnedServer::new(pinned.key));
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error("TLS setup", e))?
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone());
    let config = match pinned.own {
        Some(own) => {
            let (chain, key) = certified(own)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| tls_error("TLS setup", e))?
        }
        None => builder.with_no_client_auth(),
    };
    let bare = t.host.trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(bare.to_string())
        .or_else(|_| ServerName::try_from(CERT_NAME.to_string()))
        .map_err(|e| tls_error("TLS setup", e))?;
    let conn =
        ClientConnection::new(Arc::new(config), name).map_err(|e| tls_error("TLS setup", e))?;
    let mut tls = StreamOwned::new(conn, sock);
    while tls.conn.is_handshaking() {
        let left = time_left(deadline, &where_)?;
        let _ = tls.sock.set_read_timeout(Some(left));
        let _ = tls.sock.set_write_timeout(Some(left));
        if let Err(e) = tls.conn.complete_io(&mut tls.sock) {
            return Err(handshake_error(t, pinned, &verifier, &where_, &e));
        }
    }
    Ok(tls)
}

/// Why a client handshake failed, the pinned-key refusal named as such.
fn handshake_error(
    t: &Target,
    pinned: &Pinned,
    verifier: &PinnedServer,
    where_: &str,
    e: &std::io::Error,
) -> Error {
    let name = crate::sanitize::line(t.name, 64);
    if let Some(presented) = verifier.seen().filter(|p| *p != Some(pinned.key)) {
        let shown = match presented {
            Some(k) => super::canon::fingerprint(&k),
            None => "a certificate with no Ed25519 key".into(),
        };
        return Error::new(
            Code::AuthFailed,
            format!(
                "{name} at {where_} is not who its pinned key says: expected key {}, the server presented {shown}; nothing was sent",
                super::canon::fingerprint(&pinned.key)
            ),
        );
    }
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::new(
            Code::Timeout,
            format!("{where_} did not finish the TLS handshake in time"),
        ),
        _ if is_not_tls(e) => Error::new(
            Code::Disconnected,
            format!(
                "{name} at {where_} answered without TLS: a dsh-ask-peer server speaks plain HTTP only (set \"tls\": false on it), or the server was too busy to start TLS"
            ),
        ),
        _ => Error::new(
            Code::Disconnected,
            format!("TLS handshake with {name} at {where_} failed ({e})"),
        ),
    }
}

/// Whether a handshake failed because the bytes that came back were no TLS records (a plain
/// HTTP answer).
fn is_not_tls(e: &std::io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|r| matches!(r, rustls::Error::InvalidMessage(_)))
}

/// The server handshake on an accepted socket before `deadline`: the stream, and the Ed25519
/// key the client proved (`None` when it presented no certificate). `None` overall: the
/// handshake failed or ran out of time; close without an answer.
pub fn accept(
    sock: TcpStream,
    config: &Arc<ServerConfig>,
    deadline: Instant,
) -> Option<(ServerStream, Option<[u8; 32]>)> {
    let conn = ServerConnection::new(config.clone()).ok()?;
    let mut tls = StreamOwned::new(conn, sock);
    while tls.conn.is_handshaking() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        tls.sock.set_read_timeout(Some(left)).ok()?;
        tls.sock.set_write_timeout(Some(left)).ok()?;
        tls.conn.complete_io(&mut tls.sock).ok()?;
    }
    let client = tls
        .conn
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(ed25519_key_of);
    Some((tls, client))
}

/// Sends TLS's end-of-data alert after the response, so the client sees a clean close.
pub fn finish(tls: &mut ServerStream) {
    tls.conn.send_close_notify();
    let _ = tls.conn.complete_io(&mut tls.sock);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> AskKey {
        AskKey::from_seed(&[b; 32])
    }

    fn cert_of(k: &AskKey) -> CertificateDer<'static> {
        certified(k).unwrap().0.remove(0)
    }

    #[test]
    fn certificates_carry_the_card_key() {
        let k = key(1);
        assert_eq!(ed25519_key_of(&cert_of(&k)), Some(k.public()));
        assert_eq!(
            ed25519_key_of(&CertificateDer::from(vec![0x30, 0x00])),
            None
        );
    }

    fn verify(v: &PinnedServer, c: &CertificateDer) -> bool {
        let name = ServerName::try_from("h.example").unwrap();
        v.verify_server_cert(c, &[], &name, &[], UnixTime::now())
            .is_ok()
    }

    #[test]
    fn the_pinned_key_is_accepted_and_any_other_refused() {
        let (right, other) = (key(1), key(2));
        let v = PinnedServer::new(right.public());
        assert!(verify(&v, &cert_of(&right)));
        assert_eq!(v.seen(), Some(Some(right.public())));
        let v = PinnedServer::new(right.public());
        assert!(!verify(&v, &cert_of(&other)));
        assert_eq!(v.seen(), Some(Some(other.public())));
        assert!(!verify(&v, &CertificateDer::from(vec![0x30, 0x00])));
        assert_eq!(v.seen(), Some(None));
    }

    /// A full handshake in memory: the pinned key passes and the client key is reported; a
    /// server with another key is refused by the client before any application data.
    #[test]
    fn handshakes_pin_the_server_and_report_the_client() {
        let (server_key, client_key, other) = (key(3), key(4), key(5));
        let run = |pinned: [u8; 32]| {
            let v = Arc::new(PinnedServer::new(pinned));
            let (chain, private) = certified(&client_key).unwrap();
            let cc = ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .dangerous()
                .with_custom_certificate_verifier(v)
                .with_client_auth_cert(chain, private)
                .unwrap();
            let name = ServerName::try_from(CERT_NAME).unwrap();
            let mut c = ClientConnection::new(Arc::new(cc), name).unwrap();
            let mut s = ServerConnection::new(server_config(&server_key).unwrap()).unwrap();
            for _ in 0..10 {
                let mut buf = Vec::new();
                c.write_tls(&mut buf).unwrap();
                s.read_tls(&mut &buf[..]).unwrap();
                if s.process_new_packets().is_err() {
                    return Err("server");
                }
                let mut buf = Vec::new();
                s.write_tls(&mut buf).unwrap();
                c.read_tls(&mut &buf[..]).unwrap();
                if c.process_new_packets().is_err() {
                    return Err("client");
                }
                if !c.is_handshaking() && !s.is_handshaking() {
                    break;
                }
            }
            let proven = s
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(ed25519_key_of);
            Ok(proven)
        };
        assert_eq!(run(server_key.public()), Ok(Some(client_key.public())));
        assert_eq!(run(other.public()), Err("client"));
    }

    #[test]
    fn policy_pins_tls_and_refuses_unverifiable_friends() {
        let cfg = |peer: serde_json::Value| {
            let v = serde_json::json!({"ask": {"callerName": "me", "peers": [peer]}});
            super::super::config::AskConfig::parse(v.to_string().as_bytes())
        };
        const TOKEN: &str = "Xh3vQ9wLr2Tk7Nb5Zc1Mp8Yd4Ge6Ja0Fs-Ui_Ko2Wq";
        let sign = key(1).sign_string();
        let c =
            cfg(serde_json::json!({"name": "a", "host": "10.0.0.2", "publicKey": sign})).unwrap();
        assert!(target(&c.peers[0], None).unwrap().tls.is_some());
        let c = cfg(
            serde_json::json!({"name": "a", "host": "10.0.0.2", "publicKey": sign, "tls": false}),
        )
        .unwrap();
        assert!(target(&c.peers[0], None).unwrap().tls.is_none());
        let c = cfg(serde_json::json!({"name": "a", "host": "127.0.0.1", "token": TOKEN})).unwrap();
        assert!(target(&c.peers[0], None).unwrap().tls.is_none());
        let c = cfg(serde_json::json!({"name": "a", "host": "10.0.0.2", "token": TOKEN})).unwrap();
        let e = target(&c.peers[0], None).err().unwrap();
        assert_eq!(e.code, Code::ConfigInvalid);
        assert!(e.message.contains("\"tls\": false"), "{e:?}");
        let e = cfg(serde_json::json!({"name": "a", "host": "h", "token": TOKEN, "tls": true}));
        assert_eq!(e.err().unwrap().code, Code::ConfigInvalid);
        assert!(is_loopback("[::1]") && is_loopback("localhost") && !is_loopback("10.0.0.1"));
    }
}
