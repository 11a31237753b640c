//! Signed friend cards in dsh-ask-peer's format: `dsh-ask-peer-card:` + base64url of the compact
//! JSON `{v, name, host, port, publicKey, description?, tags?, issued, ttl, tls?, signature}`
//! (in that order), the signature being Ed25519 over the canonical JSON of the card minus
//! `signature`, made with the key the card carries. `tls: true` (ours; dsh has no such field)
//! says the server also speaks TLS with that key on the same port. dsh parses only the fields
//! it knows and verifies the signature over the whole document, so it accepts our cards, and a
//! dsh card simply lacks it (plain HTTP). A card proves possession of that key, nothing more: the
//! name in it is a claim, which is why adding a card never replaces a friend of the same name
//! with a different key (see `friends`).
//!
//! Pure code: issuing takes a signing function, verifying takes the current time.

#![forbid(unsafe_code)]

use super::canon;
use super::loose::{Loose, Obj, typed};
use crate::config::internal::{
    ASK_DESCRIPTION_CHARS_MAX, ASK_NAME_CHARS_MAX, ASK_TAG_CHARS_MAX, ASK_TAGS_MAX, CARD_CHARS_MAX,
    CARD_HOST_CHARS_MAX, CARD_ISSUED_SKEW_MS, CARD_TTL_MS,
};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Every card string starts with this.
pub const CARD_PREFIX: &str = "dsh-ask-peer-card:";
/// The only card version.
pub const CARD_VERSION: u64 = 1;

/// Why a card was refused. The `Display` text is the `reason` of `/sign/verify`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CardError {
    /// Longer than [`CARD_CHARS_MAX`].
    TooLong,
    /// Does not start with [`CARD_PREFIX`].
    Prefix,
    /// Not base64url, not UTF-8 JSON, or not an object.
    Encoding,
    /// A field is missing, mistyped or out of bounds.
    Field(&'static str, &'static str),
    /// `publicKey` is not a dsh Ed25519 sign (other key types are refused).
    KeyType,
    /// `issued + ttl` lies in the past.
    Expired,
    /// `issued` lies further in the future than [`CARD_ISSUED_SKEW_MS`].
    FromTheFuture,
    /// The self-signature does not verify against the card's own key.
    Signature,
}

impl fmt::Display for CardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CardError::TooLong => write!(f, "card is longer than {CARD_CHARS_MAX} characters"),
            CardError::Prefix => write!(f, "card must start with {CARD_PREFIX}"),
            CardError::Encoding => write!(f, "card is not base64url-encoded JSON object"),
            CardError::Field(name, want) => write!(f, "card field {name} must be {want}"),
            CardError::KeyType => write!(f, "card publicKey is not an Ed25519 sign (ed25519:…)"),
            CardError::Expired => write!(f, "card expired"),
            CardError::FromTheFuture => write!(f, "card is issued in the future (clock skew?)"),
            CardError::Signature => write!(f, "card signature does not verify"),
        }
    }
}

/// What a card says about its owner, after [`verify`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Card {
    pub name: String,
    pub host: String,
    pub port: u16,
    /// The dsh sign, `ed25519:…`.
    pub public_key: String,
    /// The raw Ed25519 key the sign encodes.
    pub key: [u8; 32],
    pub description: Option<String>,
    pub tags: Vec<String>,
    pub issued: u64,
    pub ttl: u64,
    /// The server speaks TLS with `key` (our extension; absent in dsh cards).
    pub tls: bool,
    /// The card document as received, JSON text (its signature covers it minus `signature`).
    pub document: String,
}

impl Card {
    /// `issued + ttl`, in ms since the epoch.
    pub fn expires_at(&self) -> u64 {
        self.issued.saturating_add(self.ttl)
    }

    /// The display fields dsh shows for a card: `{name, host, port, publicKey, description?,
    /// tags?}`. Text fields are the card's claims; sanitize before a terminal.
    pub fn peer_view(&self) -> PeerView {
        PeerView {
            name: self.name.clone(),
            host: self.host.clone(),
            port: self.port,
            public_key: self.public_key.clone(),
            description: self.description.clone(),
            tags: self.tags.clone(),
            tls: self.tls,
        }
    }
}

/// A card as front ends show it (see [`Card::peer_view`]); `tls` only when true.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerView {
    pub name: String,
    pub host: String,
    pub port: u16,
    pub public_key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tls: bool,
}

/// What goes into a card we issue.
#[derive(Clone, Debug)]
pub struct Issue<'a> {
    pub name: &'a str,
    pub host: &'a str,
    pub port: u16,
    pub public: &'a [u8; 32],
    pub description: &'a str,
    pub tags: &'a [String],
    pub issued: u64,
    /// Say that the server speaks TLS with this key.
    pub tls: bool,
}

/// The wire document, in dsh's field order (serialised structs keep declaration order).
#[derive(Serialize)]
struct Wire<'a> {
    v: u64,
    name: &'a str,
    host: &'a str,
    port: u16,
    #[serde(rename = "publicKey")]
    public_key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tags: Option<&'a [String]>,
    issued: u64,
    ttl: u64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    tls: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    signature: Option<&'a str>,
}

/// Builds and self-signs a card with `sign` (base64url Ed25519 with the key whose public half
/// is `card.public`, as `AskKey::sign` gives). Empty description and tags are omitted, as dsh
/// does.
pub fn issue(card: &Issue, sign: impl Fn(&[u8]) -> String) -> String {
    let public_key = canon::sign_of(card.public);
    let description = (!card.description.is_empty()).then_some(card.description);
    let tags = (!card.tags.is_empty()).then_some(card.tags);
    let mut wire = Wire {
        v: CARD_VERSION,
        name: card.name,
        host: card.host,
        port: card.port,
        public_key: &public_key,
        description,
        tags,
        issued: card.issued,
        ttl: CARD_TTL_MS,
        tls: card.tls,
        signature: None,
    };
    let signature = sign(&signed_bytes_of(&wire));
    wire.signature = Some(&signature);
    // A struct of strings and integers always serialises.
    let json = serde_json::to_vec(&wire).unwrap_or_default();
    format!("{CARD_PREFIX}{}", canon::b64url(&json))
}

/// The canonical bytes a card's signature covers: the document without `signature`. Our own
/// card holds only strings and safe integers, which always canonicalize.
fn signed_bytes_of(wire: &Wire) -> Vec<u8> {
    canon::canonical_of(wire)
        .map(String::into_bytes)
        .unwrap_or_default()
}

/// A card document as it arrives: each member kept apart from a wrong-typed one, so each is
/// refused with its own message.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CardFields {
    #[serde(default)]
    v: Option<Loose<u64>>,
    #[serde(default)]
    name: Option<Loose<String>>,
    #[serde(default)]
    host: Option<Loose<String>>,
    #[serde(default)]
    port: Option<Loose<u64>>,
    #[serde(default)]
    public_key: Option<Loose<String>>,
    #[serde(default)]
    description: Option<Loose<String>>,
    #[serde(default)]
    tags: Option<Loose<Vec<Loose<String>>>>,
    #[serde(default)]
    issued: Option<Loose<serde_json::Number>>,
    #[serde(default)]
    ttl: Option<Loose<serde_json::Number>>,
    #[serde(default)]
    tls: Option<Loose<bool>>,
    #[serde(default)]
    signature: Option<Loose<String>>,
}

fn one_line(s: &str, max: usize) -> bool {
    s.chars().count() <= max && !s.chars().any(char::is_control)
}

fn text(
    v: &Option<Loose<String>>,
    name: &'static str,
    max: usize,
) -> Result<Option<String>, CardError> {
    match v {
        None => Ok(None),
        Some(Loose::Is(s)) if one_line(s, max) => Ok(Some(s.clone())),
        Some(_) => Err(CardError::Field(
            name,
            "a one-line string of bounded length",
        )),
    }
}

fn required(
    v: &Option<Loose<String>>,
    name: &'static str,
    max: usize,
) -> Result<String, CardError> {
    match text(v, name, max)? {
        Some(s) if !s.trim().is_empty() => Ok(s),
        _ => Err(CardError::Field(name, "a non-empty string")),
    }
}

fn tags(v: &Option<Loose<Vec<Loose<String>>>>) -> Result<Vec<String>, CardError> {
    let bad = CardError::Field("tags", "an array of short one-line strings");
    match v {
        None => Ok(Vec::new()),
        Some(Loose::Is(a)) if a.len() <= ASK_TAGS_MAX => a
            .iter()
            .map(|t| match t.as_ref() {
                Some(s) if one_line(s, ASK_TAG_CHARS_MAX) => Ok(s.clone()),
                _ => Err(bad.clone()),
            })
            .collect(),
        Some(_) => Err(bad),
    }
}

/// A non-negative integer a JavaScript peer can represent exactly (≤ 2^53).
fn safe_integer(n: &serde_json::Number) -> Option<u64> {
    const SAFE_MAX: u64 = 1 << 53;
    if let Some(n) = n.as_u64() {
        return (n <= SAFE_MAX).then_some(n);
    }
    let f = n.as_f64()?;
    // The range check makes the cast exact.
    (f.fract() == 0.0 && (0.0..=SAFE_MAX as f64).contains(&f)).then_some(f as u64)
}

/// Parses a card string by dsh's rules (prefix, JSON, `v == 1`, non-empty `name` and `host`,
/// integer `port` 1–65535, `publicKey`, numeric `issued`, string `signature`, missing or
/// non-positive `ttl` meaning 90 days), plus bounds on every field and an Ed25519-only key.
/// Neither the expiry nor the signature is checked here; see [`verify`].
pub fn parse(card: &str) -> Result<(Card, String), CardError> {
    let card = card.trim();
    if card.len() > CARD_CHARS_MAX {
        return Err(CardError::TooLong);
    }
    let body = card.strip_prefix(CARD_PREFIX).ok_or(CardError::Prefix)?;
    let bytes = canon::unb64url(body).ok_or(CardError::Encoding)?;
    let document = String::from_utf8(bytes).map_err(|_| CardError::Encoding)?;
    let Ok(Obj(m)) = serde_json::from_str::<Obj<CardFields>>(&document) else {
        return Err(CardError::Encoding);
    };
    if typed(&m.v) != Some(&CARD_VERSION) {
        return Err(CardError::Field("v", "1"));
    }
    let name = required(&m.name, "name", ASK_NAME_CHARS_MAX)?;
    let host = required(&m.host, "host", CARD_HOST_CHARS_MAX)?;
    let port = typed(&m.port)
        .and_then(|p| u16::try_from(*p).ok())
        .filter(|p| *p > 0)
        .ok_or(CardError::Field("port", "an integer 1-65535"))?;
    let public_key = required(&m.public_key, "publicKey", 512)?;
    let key = canon::parse_sign(&public_key).map_err(|_| CardError::KeyType)?;
    let description = text(&m.description, "description", ASK_DESCRIPTION_CHARS_MAX)?;
    let tags = tags(&m.tags)?;
    let issued = typed(&m.issued)
        .and_then(safe_integer)
        .ok_or(CardError::Field("issued", "a time in ms since the epoch"))?;
    let ttl = match &m.ttl {
        None => CARD_TTL_MS,
        Some(Loose::Is(n)) if n.as_f64().is_some_and(|f| f <= 0.0) => CARD_TTL_MS,
        Some(v) => v
            .as_ref()
            .and_then(safe_integer)
            .ok_or(CardError::Field("ttl", "a duration in ms"))?,
    };
    let tls = match &m.tls {
        None => false,
        Some(Loose::Is(b)) => *b,
        Some(_) => return Err(CardError::Field("tls", "true or false")),
    };
    let signature = match typed(&m.signature) {
        Some(s) if s.len() <= 200 => s.clone(),
        _ => return Err(CardError::Field("signature", "a string")),
    };
    let card = Card {
        name,
        host,
        port,
        public_key,
        key,
        description: description.filter(|d| !d.is_empty()),
        tags,
        issued,
        ttl,
        tls,
        document,
    };
    Ok((card, signature))
}

/// Parses and verifies a card at `now_ms`: not expired, not issued implausibly far in the
/// future, and self-signed by the key it carries.
pub fn verify(card: &str, now_ms: u64) -> Result<Card, CardError> {
    let (card, signature) = parse(card)?;
    if now_ms > card.expires_at() {
        return Err(CardError::Expired);
    }
    if card.issued > now_ms.saturating_add(CARD_ISSUED_SKEW_MS) {
        return Err(CardError::FromTheFuture);
    }
    // A document that cannot be canonicalized (a float, an integer past 2^53) cannot carry a
    // signature dsh could have made either.
    let signed = canon::canonical_text_without(&card.document, &["signature"])
        .map_err(|_| CardError::Signature)?;
    if !canon::verify(&card.key, signed.as_bytes(), &signature) {
        return Err(CardError::Signature);
    }
    Ok(card)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};
    use serde_json::Value;

    const VECTOR_SIGN: &str = "ed25519:LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0KTUNvd0JRWURLMlZ3QXlFQUE2RUh2L1BPRUw0ZGNOMFk1MHZBbVdmazFqQ2JwUTFmSGR5R1pCSlZNYmc9Ci0tLS0tRU5EIFBVQkxJQyBLRVktLS0tLQo";
    const VECTOR_CANONICAL: &str = "{\"description\":\"backend, Postgres\",\"host\":\"192.0.2.10\",\"issued\":1785150000000,\"name\":\"ada\",\"port\":3877,\"publicKey\":\"ed25519:LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0KTUNvd0JRWURLMlZ3QXlFQUE2RUh2L1BPRUw0ZGNOMFk1MHZBbVdmazFqQ2JwUTFmSGR5R1pCSlZNYmc9Ci0tLS0tRU5EIFBVQkxJQyBLRVktLS0tLQo\",\"tags\":[\"postgres\",\"migrations\"],\"ttl\":7776000000,\"v\":1}";
    const VECTOR_SIGNATURE: &str =
        "AIfjVouaMnVoyV_wBh4NNnD3NjZTi8UXX33FPAGp4ulP7onu5xo_Vt3S6b8SSl-2rI2hYHaSOG2PopM1ar7PAA";
    const ISSUED: u64 = 1_785_150_000_000;

    fn vector_key() -> SigningKey {
        let seed: [u8; 32] = std::array::from_fn(|i| i as u8);
        SigningKey::from_bytes(&seed)
    }

    fn vector_card() -> String {
        let key = vector_key();
        let public = key.verifying_key().to_bytes();
        let tags = vec!["postgres".to_string(), "migrations".to_string()];
        issue(
            &Issue {
                name: "ada",
                host: "192.0.2.10",
                port: 3877,
                public: &public,
                description: "backend, Postgres",
                tags: &tags,
                issued: ISSUED,
                tls: false,
            },
            |m| canon::b64url(&key.sign(m).to_bytes()),
        )
    }

    /// A member named twice is refused: Node's `JSON.parse` keeps the last one, and the
    /// signature checked over one reading must not vouch for another.
    #[test]
    fn a_card_naming_a_member_twice_is_refused() {
        let card = vector_card();
        assert!(verify(&card, ISSUED).is_ok());
        let body = card.strip_prefix(CARD_PREFIX).unwrap();
        let text = String::from_utf8(canon::unb64url(body).unwrap()).unwrap();
        let twice = text.replacen("{", "{\"name\":\"mallory\",", 1);
        let forged = format!("{CARD_PREFIX}{}", canon::b64url(twice.as_bytes()));
        assert!(matches!(parse(&forged), Err(CardError::Encoding)));
        assert!(verify(&forged, ISSUED).is_err());
    }

    #[test]
    fn dsh_card_vector_byte_for_byte() {
        let key = vector_key();
        assert_eq!(canon::sign_of(&key.verifying_key().to_bytes()), VECTOR_SIGN);
        let card = vector_card();
        assert_eq!(card.len(), 597);
        let json = canon::unb64url(card.strip_prefix(CARD_PREFIX).unwrap()).unwrap();
        let json = String::from_utf8(json).unwrap();
        let expected = format!(
            "{{\"v\":1,\"name\":\"ada\",\"host\":\"192.0.2.10\",\"port\":3877,\"publicKey\":\"{VECTOR_SIGN}\",\"description\":\"backend, Postgres\",\"tags\":[\"postgres\",\"migrations\"],\"issued\":{ISSUED},\"ttl\":7776000000,\"signature\":\"{VECTOR_SIGNATURE}\"}}"
        );
        assert_eq!(json, expected);
        let (parsed, sig) = parse(&card).unwrap();
        assert_eq!(
            canon::canonical_text_without(&parsed.document, &["signature"]).unwrap(),
            VECTOR_CANONICAL
        );
        assert_eq!(VECTOR_CANONICAL.len(), 333);
        assert_eq!(sig, VECTOR_SIGNATURE);
        let ok = verify(&card, ISSUED + 1).unwrap();
        assert_eq!(
            (ok.name.as_str(), ok.port, ok.ttl),
            ("ada", 3877, CARD_TTL_MS)
        );
        assert_eq!(ok.tags, ["postgres", "migrations"]);
    }

    /// `tls: true` is inside the signed document: it verifies, survives a round trip, and
    /// cannot be stripped or added without breaking the signature.
    #[test]
    fn tls_is_signed_and_optional() {
        let key = vector_key();
        let public = key.verifying_key().to_bytes();
        let mut issue_ = Issue {
            name: "ada",
            host: "192.0.2.10",
            port: 3877,
            public: &public,
            description: "",
            tags: &[],
            issued: ISSUED,
            tls: true,
        };
        let sign = |m: &[u8]| canon::b64url(&key.sign(m).to_bytes());
        let with = issue(&issue_, sign);
        let c = verify(&with, ISSUED).unwrap();
        assert!(c.tls);
        assert!(c.peer_view().tls);
        assert_eq!(
            serde_json::to_value(c.peer_view()).unwrap()["tls"],
            Value::Bool(true)
        );
        let json = String::from_utf8(canon::unb64url(&with[CARD_PREFIX.len()..]).unwrap()).unwrap();
        assert!(json.contains(",\"tls\":true,\"signature\""), "{json}");
        let stripped = json.replace(",\"tls\":true", "");
        let stripped = format!("{CARD_PREFIX}{}", canon::b64url(stripped.as_bytes()));
        assert_eq!(verify(&stripped, ISSUED), Err(CardError::Signature));
        issue_.tls = false;
        let without = issue(&issue_, sign);
        assert!(!verify(&without, ISSUED).unwrap().tls);
        let json =
            String::from_utf8(canon::unb64url(&without[CARD_PREFIX.len()..]).unwrap()).unwrap();
        assert!(!json.contains("tls"));
    }

    #[test]
    fn expiry_future_and_tampering_are_refused() {
        let card = vector_card();
        assert_eq!(
            verify(&card, ISSUED + CARD_TTL_MS),
            Ok(verify(&card, ISSUED).unwrap())
        );
        assert_eq!(
            verify(&card, ISSUED + CARD_TTL_MS + 1),
            Err(CardError::Expired)
        );
        assert_eq!(
            verify(&card, ISSUED - CARD_ISSUED_SKEW_MS - 1),
            Err(CardError::FromTheFuture)
        );
        // Change the port inside the signed JSON: the signature no longer verifies.
        let json = canon::unb64url(card.strip_prefix(CARD_PREFIX).unwrap()).unwrap();
        let tampered = String::from_utf8(json).unwrap().replace("3877", "3878");
        let tampered = format!("{CARD_PREFIX}{}", canon::b64url(tampered.as_bytes()));
        assert_eq!(verify(&tampered, ISSUED), Err(CardError::Signature));
        // Standard base64 with padding decodes too (Node's decoder is lenient the same way).
        use base64::Engine as _;
        let std = base64::engine::general_purpose::STANDARD
            .encode(canon::unb64url(card.strip_prefix(CARD_PREFIX).unwrap()).unwrap());
        assert!(verify(&format!("{CARD_PREFIX}{std}"), ISSUED).is_ok());
    }

    #[test]
    fn malformed_cards_get_their_reason() {
        let enc = |v: Value| format!("{CARD_PREFIX}{}", canon::b64url(v.to_string().as_bytes()));
        let good = serde_json::json!({"v":1,"name":"a","host":"h","port":1,"publicKey":VECTOR_SIGN,
            "issued":1,"signature":"x"});
        assert!(parse(&enc(good.clone())).is_ok());
        let cases = [
            ("v", serde_json::json!(2), "v"),
            ("name", serde_json::json!(""), "name"),
            ("host", serde_json::json!(" "), "host"),
            ("port", serde_json::json!(0), "port"),
            ("port", serde_json::json!(70000), "port"),
            ("port", serde_json::json!("1"), "port"),
            ("issued", serde_json::json!("x"), "issued"),
            ("signature", serde_json::json!(5), "signature"),
            ("name", serde_json::json!("a\u{1b}[2J"), "name"),
            ("tags", serde_json::json!([1]), "tags"),
            ("tls", serde_json::json!("yes"), "tls"),
        ];
        for (field, value, named) in cases {
            let mut v = good.clone();
            v[field] = value;
            match parse(&enc(v)) {
                Err(CardError::Field(f, _)) => assert_eq!(f, named),
                other => panic!("{field}: {other:?}"),
            }
        }
        let mut rsa = good.clone();
        rsa["publicKey"] = serde_json::json!("ed25519:LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0K");
        assert_eq!(parse(&enc(rsa)).err(), Some(CardError::KeyType));
        let mut no_ttl = good.clone();
        no_ttl["ttl"] = serde_json::json!(-5);
        assert_eq!(parse(&enc(no_ttl)).unwrap().0.ttl, CARD_TTL_MS);
        assert_eq!(parse("hello").err(), Some(CardError::Prefix));
        assert_eq!(
            parse(&format!("{CARD_PREFIX}!!")).err(),
            Some(CardError::Encoding)
        );
        assert_eq!(
            parse(&format!("{CARD_PREFIX}{}", canon::b64url(b"[1]"))).err(),
            Some(CardError::Encoding)
        );
        assert_eq!(
            parse(&"x".repeat(CARD_CHARS_MAX + 1)).err(),
            Some(CardError::TooLong)
        );
    }
}
