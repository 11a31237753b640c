//! Who may call: the friend allowlist, shared tokens, signatures, replay protection and rate
//! limits. A caller is a configured friend by name. With the friend's `publicKey`, the body
//! must be signed over dsh-ask-peer's canonical encoding (everything but `publicKey` and
//! `signature`) and, beyond dsh, carry inside the signed bytes a `timestamp` (ms) within
//! ±5 minutes, a fresh 16-byte `nonce`, the `purpose` of the endpoint and the `audience` (the
//! server's `callerName`), so a captured request works neither twice, nor later, nor at
//! another endpoint or server. A dsh server verifies whatever it receives, so these extra
//! members keep our signed requests valid there. Without a key, a non-empty token compared in
//! constant time is required; an empty or missing token never authenticates, and a friend
//! with neither token nor key cannot call at all. Nonces are remembered per friend and on
//! disk (`replay`). Refusals are paid for by whoever can be held to them: the address for
//! unknown callers, the address and the named friend's guess budget for refused tokens (see
//! [`Guard::authenticate`]). Over mutual TLS, a client whose handshake proved the key a friend
//! pinned is that friend (`authenticate_request`).

mod replay;

use crate::config::internal::{ASK_ADDRESSES_MAX, ASK_NONCE_BYTES, ASK_SIGNATURE_WINDOW_MS};

use super::config::{AskConfig, Friend};
use super::http::{ApiError, Request};
use super::keys::AskKey;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::net::IpAddr;

/// The members a signed body carries beyond dsh-ask-peer's.
pub const SIGNED_EXTRA: [&str; 4] = ["timestamp", "nonce", "purpose", "audience"];

/// An outbound body with our credentials: its own members, the friend's `token` when one is
/// configured, and the replay-safe signature members (see [`credentials`]).
#[derive(Serialize)]
pub struct Credentialed<'a, T: Serialize> {
    #[serde(flatten)]
    body: &'a T,
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<&'a str>,
    #[serde(flatten)]
    signed: Option<Signature>,
}

/// The members a signature adds: `timestamp`, `nonce`, `purpose`, `audience`, then our
/// `publicKey` and the `signature` over the canonical body with everything before them.
#[derive(Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Signature {
    timestamp: u64,
    nonce: String,
    purpose: String,
    audience: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    public_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    signature: Option<String>,
}

/// `body` with the friend's `token` and, unless `proven` (mutual TLS proves who we are), our
/// replay-safe signature for `purpose` at `audience` over all of it.
pub fn credentials<'a, T: Serialize>(
    key: &AskKey,
    body: &'a T,
    token: Option<&'a str>,
    proven: bool,
    purpose: &str,
    audience: &str,
) -> Credentialed<'a, T> {
    let mut out = Credentialed {
        body,
        token,
        signed: None,
    };
    if !proven {
        let now = crate::clock::now_ms();
        out.signed = Some(signature(key, &out, purpose, audience, now));
    }
    out
}

/// The signature members for `body` (which carries none yet).
fn signature(
    key: &AskKey,
    body: &impl Serialize,
    purpose: &str,
    audience: &str,
    now_ms: u64,
) -> Signature {
    let mut nonce = [0u8; ASK_NONCE_BYTES];
    crate::identity::random_bytes(&mut nonce);
    let mut s = Signature {
        timestamp: now_ms,
        nonce: super::canon::b64url(&nonce),
        purpose: purpose.to_string(),
        audience: audience.to_string(),
        public_key: None,
        signature: None,
    };
    // Our own bodies hold only strings, booleans, arrays and small integers.
    let text = super::canon::canonical_of(&Credentialed {
        body,
        token: None,
        signed: Some(s.clone()),
    })
    .unwrap_or_default();
    s.public_key = Some(key.sign_string());
    s.signature = Some(key.sign(text.as_bytes()));
    s
}

/// Adds the replay-safe members, our `publicKey` and the `signature` to a request body held
/// as a JSON object (tests and tools that forge bodies).
pub fn sign_body(
    key: &AskKey,
    body: &mut Map<String, Value>,
    purpose: &str,
    audience: &str,
    now_ms: u64,
) {
    body.remove("publicKey");
    body.remove("signature");
    let s = signature(key, &*body, purpose, audience, now_ms);
    if let Ok(Value::Object(members)) = serde_json::to_value(s) {
        body.extend(members);
    }
}

/// Checks a signed body against the friend's key, purpose, audience and clock (pure); returns
/// the nonce to record.
pub fn verify_signed(
    friend_key: &[u8; 32],
    body: &Map<String, Value>,
    purpose: &str,
    audience: &str,
    now_ms: u64,
) -> Result<[u8; ASK_NONCE_BYTES], ApiError> {
    signed_by(friend_key, body)?;
    let timestamp = body
        .get("timestamp")
        .and_then(Value::as_u64)
        .ok_or_else(|| {
            ApiError::forbidden("signed requests must carry a timestamp (ms since the epoch)")
        })?;
    if timestamp.abs_diff(now_ms) > ASK_SIGNATURE_WINDOW_MS {
        return Err(ApiError::forbidden(
            "stale signature: timestamp is outside the 5-minute window",
        ));
    }
    let nonce = body
        .get("nonce")
        .and_then(Value::as_str)
        .and_then(super::canon::unb64url)
        .and_then(|n| <[u8; ASK_NONCE_BYTES]>::try_from(n).ok())
        .ok_or_else(|| ApiError::forbidden("signed requests must carry a 16-byte nonce"))?;
    if body.get("purpose").and_then(Value::as_str) != Some(purpose) {
        return Err(ApiError::forbidden(format!(
            "signature is not for this endpoint (purpose must be {purpose:?})"
        )));
    }
    if body.get("audience").and_then(Value::as_str) != Some(audience) {
        return Err(ApiError::forbidden(
            "signature is for another server (audience mismatch)",
        ));
    }
    Ok(nonce)
}

/// The body names `friend_key` as its `publicKey` and carries its valid `signature` over the
/// canonical rest (both signed forms start here).
fn signed_by(friend_key: &[u8; 32], body: &Map<String, Value>) -> Result<(), ApiError> {
    let presented = body.get("publicKey").and_then(Value::as_str);
    match presented.map(super::canon::parse_sign) {
        Some(Ok(k)) if crate::identity::ct_eq(&k, friend_key) => {}
        _ => return Err(ApiError::forbidden("public key mismatch")),
    }
    let signature = body
        .get("signature")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::forbidden("invalid signature"))?;
    let bytes = super::canon::canonical_without(body, &["publicKey", "signature"])
        .map_err(|_| ApiError::forbidden("invalid signature"))?;
    if !super::canon::verify(friend_key, &bytes, signature) {
        return Err(ApiError::forbidden("invalid signature"));
    }
    Ok(())
}

/// Whether a signed body is dsh-ask-peer's form: neither a timestamp nor a nonce.
fn is_dsh_signed(body: &Map<String, Value>) -> bool {
    !body.contains_key("timestamp") && !body.contains_key("nonce")
}

/// dsh-ask-peer's signature (no timestamp, nonce, purpose or audience), accepted only for a
/// friend with `acceptDshSignatures` and only with that friend's token as well (pure). Such a
/// body can be replayed by anyone who saw it, so the token, not the signature, is what this
/// mode rests on; the signature still proves the key was used once (SECURITY.md).
pub fn verify_dsh_signed(
    friend: &Friend,
    friend_key: &[u8; 32],
    body: &Map<String, Value>,
) -> Result<(), ApiError> {
    signed_by(friend_key, body)?;
    check_token(friend, body)
}

/// Token check for a keyless friend (pure).
pub fn check_token(friend: &Friend, body: &Map<String, Value>) -> Result<(), ApiError> {
    let Some(expected) = friend.token.as_deref().filter(|t| !t.is_empty()) else {
        return Err(ApiError::forbidden(format!(
            "peer \"{}\" has neither a token nor a public key configured here",
            friend.name
        )));
    };
    let presented = body.get("token").and_then(Value::as_str).unwrap_or("");
    if presented.is_empty() || !secret_eq(presented, expected) {
        return Err(ApiError::forbidden("invalid token"));
    }
    Ok(())
}

/// Compares two secrets in constant time without revealing the expected one's length: both
/// are hashed first, and the fixed-size digests are compared.
pub fn secret_eq(presented: &str, expected: &str) -> bool {
    use sha2::{Digest, Sha256};
    let a = Sha256::digest(presented.as_bytes());
    let b = Sha256::digest(expected.as_bytes());
    crate::identity::ct_eq(&a, &b)
}

/// Token bucket refilled continuously at `per_minute` per minute.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at_ms: u64,
}

impl Bucket {
    fn full(per_minute: u32, now_ms: u64) -> Bucket {
        Bucket {
            tokens: f64::from(per_minute),
            at_ms: now_ms,
        }
    }
    fn refill(&mut self, per_minute: u32, now_ms: u64) {
        let cap = f64::from(per_minute);
        let elapsed = now_ms.saturating_sub(self.at_ms) as f64;
        self.tokens = (self.tokens + elapsed * cap / 60_000.0).min(cap);
        self.at_ms = now_ms;
    }
    fn take(&mut self, per_minute: u32, now_ms: u64) -> bool {
        self.refill(per_minute, now_ms);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Token buckets keyed by friend name or address, each refilled at `per_minute`. Bounded by
/// `max` keys: past it, keys whose bucket is full again are forgotten (a full bucket is what a
/// new key starts with), and if none is, the stalest goes.
struct Buckets<K> {
    map: Mutex<HashMap<K, Bucket>>,
    per_minute: u32,
    max: usize,
}

impl<K: std::hash::Hash + Eq + Clone> Buckets<K> {
    fn new(per_minute: u32, max: usize) -> Buckets<K> {
        Buckets {
            map: Mutex::new(HashMap::new()),
            per_minute,
            max,
        }
    }

    /// Whether `k` has at least one token left (spends nothing).
    fn has(&self, k: &K, now_ms: u64) -> bool {
        let mut map = self.map.lock();
        map.get_mut(k).is_none_or(|b| {
            b.refill(self.per_minute, now_ms);
            b.tokens >= 1.0
        })
    }

    /// Spends one token of `k`; false when none was left.
    fn take(&self, k: &K, now_ms: u64) -> bool {
        let per = self.per_minute;
        let mut map = self.map.lock();
        if map.len() >= self.max && !map.contains_key(k) {
            map.retain(|_, b| {
                b.refill(per, now_ms);
                b.tokens < f64::from(per)
            });
            if map.len() >= self.max
                && let Some(oldest) = map
                    .iter()
                    .min_by_key(|(_, b)| b.at_ms)
                    .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        map.entry(k.clone())
            .or_insert_with(|| Bucket::full(per, now_ms))
            .take(per, now_ms)
    }
}

/// The shared, bounded state of authentication: per-friend replay memory and rate buckets.
pub struct Guard {
    replay: replay::Replay,
    /// Asks (and recommendations) per friend.
    friends: Buckets<String>,
    /// Authenticated status polls per friend.
    status: Buckets<String>,
    /// Refused tokens per claimed friend name, across every address.
    guesses: Buckets<String>,
    /// Refused requests per source address.
    addresses: Buckets<IpAddr>,
}

impl Guard {
    /// `nonce_dir`: where replay memory is kept across restarts (`None`: memory only).
    pub fn new(config: &AskConfig, nonce_dir: Option<std::path::PathBuf>) -> Guard {
        let friends = config.peers.len().max(1);
        Guard {
            replay: replay::Replay::new(nonce_dir),
            friends: Buckets::new(config.friend_asks_per_minute, friends),
            status: Buckets::new(config.friend_status_per_minute, friends),
            guesses: Buckets::new(config.friend_failures_per_minute, friends),
            addresses: Buckets::new(config.address_failures_per_minute, ASK_ADDRESSES_MAX),
        }
    }

    /// Refuses an address whose failure budget is spent, before any authentication work.
    pub fn admit_address(&self, ip: IpAddr, now_ms: u64) -> Result<(), ApiError> {
        if self.addresses.has(&ip, now_ms) {
            Ok(())
        } else {
            Err(ApiError::rate_limited(
                "too many refused requests from this address; retry later",
            ))
        }
    }

    /// Charges a refused request to its address.
    pub fn note_failure(&self, ip: IpAddr, now_ms: u64) {
        self.addresses.take(&ip, now_ms);
    }

    /// Charges one ask (or recommendation) to an authenticated friend.
    pub fn charge_friend(&self, name: &str, now_ms: u64) -> Result<(), ApiError> {
        if self.friends.take(&name.to_string(), now_ms) {
            Ok(())
        } else {
            Err(ApiError::rate_limited(format!(
                "peer \"{name}\" asks faster than {} per minute",
                self.friends.per_minute
            )))
        }
    }

    /// Authenticates `req`: a caller whose TLS handshake proved the key pinned for the friend
    /// its body names is that friend, with no token or signature (the proof is bound to this
    /// connection, so it cannot be replayed); naming another friend is refused. Any other
    /// request as [`Guard::authenticate`].
    pub fn authenticate_request<'c>(
        &self,
        config: &'c AskConfig,
        req: &Request,
        body: &Map<String, Value>,
        purpose: &str,
        now_ms: u64,
        admit: impl FnOnce(&Friend) -> Result<(), ApiError>,
    ) -> Result<&'c Friend, ApiError> {
        let Some(friend) = tls_friend(config, req) else {
            return self.authenticate(config, req.ip(), body, purpose, now_ms, admit);
        };
        let caller = body.get("caller").and_then(Value::as_str).unwrap_or("");
        if caller == friend.name {
            admit(friend)?;
            return Ok(friend);
        }
        self.note_failure(req.ip(), now_ms);
        Err(ApiError::forbidden(format!(
            "the TLS client key is friend \"{}\"'s, not caller \"{}\"'s",
            friend.name,
            crate::sanitize::line(caller, 64)
        )))
    }

    /// Charges one authenticated status poll to a friend.
    pub fn charge_status(&self, name: &str, now_ms: u64) -> Result<(), ApiError> {
        if self.status.take(&name.to_string(), now_ms) {
            Ok(())
        } else {
            Err(ApiError::rate_limited(format!(
                "peer \"{name}\" polls status faster than {} per minute",
                self.status.per_minute
            )))
        }
    }

    /// Authenticates a request body for `purpose`, then runs `admit` (the endpoint's policy
    /// and rate limit) before the request's nonce is kept, so refused requests fill no replay
    /// memory. Who pays for a refusal:
    /// - a caller that names no friend is judged by its address: refused at once (429) when the
    ///   address's failure budget is spent, and each refusal spends it;
    /// - a caller naming a friend is judged by its credentials, so a friend who authenticates
    ///   is served from an address others have penalized (NAT, VPN, one host). A refused token
    ///   spends the address's budget and that friend's guess budget, which every address
    ///   shares: once it is spent, tokens for that name are not even compared until it refills.
    ///   A refused signature spends only the address's budget, since signatures cannot be
    ///   guessed and a forger must not lock a keyed friend out.
    pub fn authenticate<'c>(
        &self,
        config: &'c AskConfig,
        ip: IpAddr,
        body: &Map<String, Value>,
        purpose: &str,
        now_ms: u64,
        admit: impl FnOnce(&Friend) -> Result<(), ApiError>,
    ) -> Result<&'c Friend, ApiError> {
        let caller = body.get("caller").and_then(Value::as_str).unwrap_or("");
        let Some(friend) = config.friend(caller) else {
            self.admit_address(ip, now_ms)?;
            self.note_failure(ip, now_ms);
            return Err(ApiError::forbidden(format!(
                "caller \"{}\" is not an allowed peer",
                crate::sanitize::line(caller, 64)
            )));
        };
        let verified = match &friend.key {
            // dsh-ask-peer's signatures carry no timestamp or nonce, so there is nothing to
            // remember against a replay: accepted only where the owner opted in, and only
            // together with the friend's token.
            Some(key) if friend.accept_dsh_signatures && is_dsh_signed(body) => {
                verify_dsh_signed(friend, key, body).map(|()| None)
            }
            Some(key) => verify_signed(key, body, purpose, &config.caller_name, now_ms).map(Some),
            None => {
                if !self.guesses.has(&friend.name, now_ms) {
                    self.note_failure(ip, now_ms);
                    return Err(ApiError::rate_limited(format!(
                        "too many refused tokens for peer \"{}\"; retry later",
                        friend.name
                    )));
                }
                let checked = check_token(friend, body);
                if checked.is_err() {
                    self.guesses.take(&friend.name, now_ms);
                }
                checked.map(|()| None)
            }
        };
        let nonce = match verified {
            Ok(n) => n,
            Err(e) => {
                self.note_failure(ip, now_ms);
                return Err(e);
            }
        };
        if let Some(n) = &nonce {
            self.replay
                .check(&friend.name, n, now_ms)
                .inspect_err(|_| {
                    self.note_failure(ip, now_ms);
                })?;
        }
        admit(friend)?;
        if let Some(n) = nonce {
            self.replay.insert(&friend.name, n, now_ms)?;
        }
        Ok(friend)
    }
}

/// The friend whose pinned key the connection's mutual-TLS handshake proved, if any.
pub fn tls_friend<'c>(config: &'c AskConfig, req: &Request) -> Option<&'c Friend> {
    let key = req.tls_peer_key?;
    config.peers.iter().find(|f| f.key == Some(key))
}

/// The policy check every endpoint shares: `deny` refuses the friend.
pub fn not_denied(friend: &Friend) -> Result<(), ApiError> {
    if friend.mode == super::config::Mode::Deny {
        return Err(ApiError::forbidden(format!(
            "policy denies requests from \"{}\"",
            friend.name
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: u64 = 1_785_150_000_000;
    const CY: &str = "Pz4hX9wLq2Ve7Rb1Nt6Ym3Ks8Jd0Gu5Fa-Wc_Ho3Ee";

    fn setup() -> (AskConfig, AskKey) {
        let key = AskKey::from_seed(&[9u8; 32]);
        let cfg = serde_json::json!({"ask": {"callerName": "bob", "peers": [
            {"name": "ada", "host": "h", "publicKey": key.sign_string()},
            {"name": "cy", "host": "h", "token": CY},
            {"name": "nobody", "host": "h"},
        ]}});
        (AskConfig::parse(cfg.to_string().as_bytes()).unwrap(), key)
    }

    fn signed(key: &AskKey, purpose: &str, audience: &str, at: u64) -> Map<String, Value> {
        let mut b = json!({"protocolVersion": 1, "caller": "ada", "question": "q?"})
            .as_object()
            .unwrap()
            .clone();
        sign_body(key, &mut b, purpose, audience, at);
        b
    }

    fn ip() -> IpAddr {
        IpAddr::from([127, 0, 0, 1])
    }

    #[test]
    fn signed_requests_verify_once() {
        let (cfg, key) = setup();
        let g = Guard::new(&cfg, None);
        let body = signed(&key, "ask", "bob", NOW);
        assert_eq!(
            g.authenticate(&cfg, ip(), &body, "ask", NOW, |_| Ok(()))
                .unwrap()
                .name,
            "ada"
        );
        let again = g
            .authenticate(&cfg, ip(), &body, "ask", NOW + 1, |_| Ok(()))
            .unwrap_err();
        assert!(again.message.contains("replayed"), "{again:?}");
    }

    #[test]
    fn our_signed_bodies_verify_the_way_dsh_verifies() {
        // dsh-ask-peer checks the signature over everything but publicKey and signature, so
        // the replay-safe members ride along inside the signed bytes.
        let (_, key) = setup();
        let body = signed(&key, "ask", "bob", NOW);
        let bytes =
            crate::ask::canon::canonical_without(&body, &["publicKey", "signature"]).unwrap();
        let sign = body["publicKey"].as_str().unwrap();
        let public = crate::ask::canon::parse_sign(sign).unwrap();
        assert!(crate::ask::canon::verify(
            &public,
            &bytes,
            body["signature"].as_str().unwrap()
        ));
        for k in SIGNED_EXTRA {
            assert!(body.contains_key(k), "{k}");
        }
    }

    #[test]
    fn dsh_signatures_need_the_opt_in_and_the_token() {
        const TOK: &str = "t0ken-7c1e9a3f5b2d8e0c4a6f";
        let key = AskKey::from_seed(&[9u8; 32]);
        let peers = |extra: Value| {
            let mut f =
                json!({"name": "ada", "host": "h", "publicKey": key.sign_string(), "token": TOK});
            f.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let cfg = json!({"ask": {"callerName": "bob", "peers": [f]}});
            AskConfig::parse(cfg.to_string().as_bytes())
        };
        let dsh = |token: &str| {
            let mut b =
                json!({"protocolVersion": 1, "caller": "ada", "question": "q?", "token": token})
                    .as_object()
                    .unwrap()
                    .clone();
            let bytes = crate::ask::canon::canonical_without(&b, &[]).unwrap();
            b.insert("signature".into(), json!(key.sign(&bytes)));
            b.insert("publicKey".into(), json!(key.sign_string()));
            b
        };
        let strict = peers(json!({})).unwrap();
        let g = Guard::new(&strict, None);
        let e = g
            .authenticate(&strict, ip(), &dsh(TOK), "ask", NOW, |_| Ok(()))
            .unwrap_err();
        assert!(e.message.contains("timestamp"), "{e:?}");
        let open = peers(json!({"acceptDshSignatures": true})).unwrap();
        let g = Guard::new(&open, None);
        let ok = g
            .authenticate(&open, ip(), &dsh(TOK), "ask", NOW, |_| Ok(()))
            .unwrap();
        assert_eq!(ok.name, "ada");
        let e = g
            .authenticate(&open, ip(), &dsh("wrong"), "ask", NOW, |_| Ok(()))
            .unwrap_err();
        assert_eq!(e.message, "invalid token");
        let mut forged = dsh(TOK);
        forged.insert("question".into(), json!("other"));
        let e = g
            .authenticate(&open, ip(), &forged, "ask", NOW, |_| Ok(()))
            .unwrap_err();
        assert_eq!(e.message, "invalid signature");
        let no_token = json!({"ask": {"peers": [{"name": "ada", "host": "h",
            "publicKey": key.sign_string(), "acceptDshSignatures": true}]}});
        assert!(AskConfig::parse(no_token.to_string().as_bytes()).is_err());
    }

    #[test]
    fn signed_refusals() {
        let (cfg, key) = setup();
        let g = Guard::new(&cfg, None);
        let check = |b: &Map<String, Value>, purpose: &str, want: &str| {
            let e = g
                .authenticate(&cfg, ip(), b, purpose, NOW, |_| Ok(()))
                .unwrap_err();
            assert_eq!(e.status, 403);
            assert!(e.message.contains(want), "{want}: {e:?}");
        };
        check(
            &signed(&key, "ask", "bob", NOW - ASK_SIGNATURE_WINDOW_MS - 1),
            "ask",
            "stale",
        );
        check(
            &signed(&key, "ask", "bob", NOW + ASK_SIGNATURE_WINDOW_MS + 1),
            "ask",
            "stale",
        );
        check(&signed(&key, "recommend", "bob", NOW), "ask", "purpose");
        check(&signed(&key, "ask", "carol", NOW), "ask", "audience");
        let mut tampered = signed(&key, "ask", "bob", NOW);
        tampered.insert("question".into(), json!("other?"));
        check(&tampered, "ask", "invalid signature");
        let impostor = AskKey::from_seed(&[1u8; 32]);
        check(
            &signed(&impostor, "ask", "bob", NOW),
            "ask",
            "public key mismatch",
        );
        let mut unsigned = signed(&key, "ask", "bob", NOW);
        unsigned.remove("signature");
        check(&unsigned, "ask", "invalid signature");
        let mut float = signed(&key, "ask", "bob", NOW);
        float.insert("timeoutMs".into(), json!(1.5));
        check(&float, "ask", "invalid signature");
    }

    #[test]
    fn secrets_compare_by_digest() {
        assert!(secret_eq("s3cret", "s3cret"));
        assert!(!secret_eq("s3cre", "s3cret"));
        assert!(!secret_eq("", "s3cret"));
    }

    #[test]
    fn tokens_and_allowlist() {
        let (cfg, _) = setup();
        let g = Guard::new(&cfg, None);
        let body = |caller: &str, token: Option<&str>| {
            let mut b = json!({"caller": caller}).as_object().unwrap().clone();
            if let Some(t) = token {
                b.insert("token".into(), json!(t));
            }
            b
        };
        assert!(
            g.authenticate(&cfg, ip(), &body("cy", Some(CY)), "ask", NOW, |_| Ok(()))
                .is_ok()
        );
        for (b, want) in [
            (body("cy", Some("s3creT")), "invalid token"),
            (body("cy", Some("")), "invalid token"),
            (body("cy", None), "invalid token"),
            (body("eve", Some(CY)), "not an allowed peer"),
            (body("nobody", Some("")), "neither a token"),
            (body("nobody", None), "neither a token"),
        ] {
            let e = g
                .authenticate(&cfg, ip(), &b, "ask", NOW, |_| Ok(()))
                .unwrap_err();
            assert!(e.message.contains(want), "{want}: {e:?}");
        }
    }

    #[test]
    fn failures_spend_the_address_budget_and_friends_have_theirs() {
        let (mut cfg, _) = setup();
        cfg.address_failures_per_minute = 3;
        cfg.friend_asks_per_minute = 2;
        let g = Guard::new(&cfg, None);
        let bad = json!({"caller": "eve"}).as_object().unwrap().clone();
        for _ in 0..3 {
            assert_eq!(
                g.authenticate(&cfg, ip(), &bad, "ask", NOW, |_| Ok(()))
                    .unwrap_err()
                    .status,
                403
            );
        }
        assert_eq!(
            g.authenticate(&cfg, ip(), &bad, "ask", NOW, |_| Ok(()))
                .unwrap_err()
                .status,
            429
        );
        // Another address is unaffected; the budget refills with time.
        let other = IpAddr::from([127, 0, 0, 2]);
        assert_eq!(
            g.authenticate(&cfg, other, &bad, "ask", NOW, |_| Ok(()))
                .unwrap_err()
                .status,
            403
        );
        assert_eq!(
            g.authenticate(&cfg, ip(), &bad, "ask", NOW + 20_000, |_| Ok(()))
                .unwrap_err()
                .status,
            403
        );
        assert!(g.charge_friend("cy", NOW).is_ok());
        assert!(g.charge_friend("cy", NOW).is_ok());
        assert_eq!(g.charge_friend("cy", NOW).unwrap_err().status, 429);
        assert!(g.charge_friend("ada", NOW).is_ok());
    }

    #[test]
    fn friends_are_judged_by_credentials_and_guesses_spend_the_names_budget() {
        let (mut cfg, key) = setup();
        cfg.address_failures_per_minute = 2;
        cfg.friend_failures_per_minute = 3;
        let g = Guard::new(&cfg, None);
        let ok = |_: &Friend| Ok(());
        let tok = |t: &str| {
            json!({"caller": "cy", "token": t})
                .as_object()
                .unwrap()
                .clone()
        };
        let eve = json!({"caller": "eve"}).as_object().unwrap().clone();
        let auth = |b: &Map<String, Value>, ip: IpAddr, at: u64| {
            g.authenticate(&cfg, ip, b, "ask", at, ok)
                .map(|f| f.name.clone())
        };
        for _ in 0..2 {
            assert_eq!(auth(&eve, ip(), NOW).unwrap_err().status, 403);
        }
        assert_eq!(auth(&eve, ip(), NOW).unwrap_err().status, 429);
        // The penalized address still serves friends that authenticate.
        assert_eq!(auth(&tok(CY), ip(), NOW).unwrap(), "cy");
        let signed_ada = signed(&key, "ask", "bob", NOW);
        assert_eq!(auth(&signed_ada, ip(), NOW).unwrap(), "ada");
        // Token guesses for one name from many addresses share one budget...
        for i in 0..3u8 {
            let from = IpAddr::from([10, 0, 0, i]);
            assert_eq!(auth(&tok("wrong"), from, NOW).unwrap_err().status, 403);
        }
        let from = IpAddr::from([10, 0, 0, 9]);
        assert_eq!(auth(&tok("wrong"), from, NOW).unwrap_err().status, 429);
        // ...which, spent, compares nothing, not even the right token, until it refills.
        assert_eq!(auth(&tok(CY), from, NOW).unwrap_err().status, 429);
        assert_eq!(auth(&tok(CY), from, NOW + 20_001).unwrap(), "cy");
        // Forged signatures cannot lock a keyed friend out.
        let forger = AskKey::from_seed(&[1u8; 32]);
        for i in 0..10u8 {
            let b = signed(&forger, "ask", "bob", NOW);
            let from = IpAddr::from([10, 1, 0, i]);
            assert_eq!(auth(&b, from, NOW).unwrap_err().status, 403);
        }
        let b = signed(&key, "ask", "bob", NOW + 1);
        assert_eq!(
            auth(&b, IpAddr::from([10, 1, 0, 0]), NOW + 1).unwrap(),
            "ada"
        );
    }

    #[test]
    fn a_replay_is_refused_before_it_spends_the_friends_budget() {
        let (cfg, key) = setup();
        let g = Guard::new(&cfg, None);
        let body = signed(&key, "ask", "bob", NOW);
        let charge = |f: &Friend| g.charge_friend(&f.name, NOW);
        g.authenticate(&cfg, ip(), &body, "ask", NOW, charge)
            .unwrap();
        for _ in 0..100 {
            let e = g.authenticate(&cfg, ip(), &body, "ask", NOW, charge);
            assert_eq!(e.unwrap_err().status, 403);
        }
        let fresh = signed(&key, "ask", "bob", NOW);
        assert!(
            g.authenticate(&cfg, ip(), &fresh, "ask", NOW, charge)
                .is_ok()
        );
    }

    #[test]
    fn a_refused_policy_keeps_no_nonce() {
        let (cfg, key) = setup();
        let g = Guard::new(&cfg, None);
        let body = signed(&key, "status", "bob", NOW);
        let deny = |_: &Friend| Err(ApiError::forbidden("denied"));
        let e = g
            .authenticate(&cfg, ip(), &body, "status", NOW, deny)
            .unwrap_err();
        assert_eq!(e.message, "denied");
        // Not kept: the same request is judged again, not refused as a replay.
        let f = g.authenticate(&cfg, ip(), &body, "status", NOW, |_| Ok(()));
        assert_eq!(f.unwrap().name, "ada");
    }
}
