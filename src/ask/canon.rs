//! Canonical JSON and the signature encoding of dsh-ask-peer, byte for byte: keys sorted by
//! UTF-16 code units, strings escaped as JavaScript's `JSON.stringify` does, no whitespace,
//! integers only up to 2^53 (JavaScript would round larger ones, and prints `1.0` as `1`, so
//! floats are refused rather than guessed at). A public key travels as its "sign":
//! `ed25519:` followed by base64url (no padding) of the PEM text of its SPKI. Only Ed25519
//! SPKI keys are accepted. Pure code: no I/O.

use crate::config::internal::{CANON_DEPTH_MAX, SIGN_KEY_CHARS_MAX};
use crate::error::{Code, Error, Result};
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The largest integer JavaScript represents exactly; larger ones are refused in signed bodies.
pub const SAFE_INTEGER_MAX: u64 = 1 << 53;
/// Prefix of a sign (the public-key string of the wire).
pub const SIGN_PREFIX: &str = "ed25519:";
/// DER prefix of an Ed25519 SubjectPublicKeyInfo; the 32-byte key follows.
const SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];
const PEM_BEGIN: &str = "-----BEGIN PUBLIC KEY-----";
const PEM_END: &str = "-----END PUBLIC KEY-----";

fn invalid(message: impl Into<String>) -> Error {
    Error::new(Code::InvalidRequest, message)
}

/// The canonical text of a JSON value.
pub fn canonical_json(value: &Value) -> Result<String> {
    let mut out = String::new();
    write_value(&mut out, value, 0)?;
    Ok(out)
}

/// The canonical text of the members `keep` of a JSON object as received (absent ones left
/// out): a signature over part of an object covers exactly what its signer sent.
pub fn canonical_members(raw: &serde_json::value::RawValue, keep: &[&str]) -> Result<String> {
    let m = object_of(raw.get())?;
    let part: Map<String, Value> = m
        .into_iter()
        .filter(|(k, _)| keep.contains(&k.as_str()))
        .collect();
    canonical_json(&Value::Object(part))
}

/// The canonical text of the JSON object `text` without the named members (a card's signed
/// form: the document without `signature`).
pub fn canonical_text_without(text: &str, without: &[&str]) -> Result<String> {
    let m = object_of(text)?;
    let mut out = String::new();
    write_object(&mut out, &m, without, 0)?;
    Ok(out)
}

/// The JSON object `text` without the named members, as JSON text (a card's signed document,
/// shown); `None` when `text` is not an object.
pub fn object_without(text: &str, without: &[&str]) -> Option<Box<serde_json::value::RawValue>> {
    let mut m = object_of(text).ok()?;
    for k in without {
        m.remove(*k);
    }
    serde_json::value::to_raw_value(&m).ok()
}

fn object_of(text: &str) -> Result<Map<String, Value>> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(invalid("not a JSON object")),
    }
}

/// The canonical bytes of an object without the named members (the signed form of a body
/// without `publicKey` and `signature`).
pub fn canonical_without(body: &Map<String, Value>, without: &[&str]) -> Result<Vec<u8>> {
    let mut out = String::new();
    write_object(&mut out, body, without, 0)?;
    Ok(out.into_bytes())
}

fn write_value(out: &mut String, value: &Value, depth: usize) -> Result<()> {
    if depth > CANON_DEPTH_MAX {
        return Err(invalid("JSON nests too deeply to sign"));
    }
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n)?,
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item, depth + 1)?;
            }
            out.push(']');
        }
        Value::Object(map) => write_object(out, map, &[], depth)?,
    }
    Ok(())
}

fn write_object(
    out: &mut String,
    map: &Map<String, Value>,
    without: &[&str],
    depth: usize,
) -> Result<()> {
    let mut keys: Vec<&String> = map
        .keys()
        .filter(|k| !without.contains(&k.as_str()))
        .collect();
    // JavaScript sorts strings by UTF-16 code units, which differs from byte order for
    // characters above U+FFFF against U+E000–U+FFFF.
    keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
    out.push('{');
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, key);
        out.push(':');
        write_value(out, &map[key.as_str()], depth + 1)?;
    }
    out.push('}');
    Ok(())
}

fn write_number(out: &mut String, n: &serde_json::Number) -> Result<()> {
    if let Some(u) = n.as_u64() {
        if u > SAFE_INTEGER_MAX {
            return Err(invalid(format!("integer {u} is above 2^53")));
        }
        out.push_str(&u.to_string());
    } else if let Some(i) = n.as_i64() {
        if i.unsigned_abs() > SAFE_INTEGER_MAX {
            return Err(invalid(format!("integer {i} is below -2^53")));
        }
        out.push_str(&i.to_string());
    } else {
        return Err(invalid("fractional numbers cannot be signed"));
    }
    Ok(())
}

/// `JSON.stringify` of a string: `"` and `\` escaped, U+0000–U+001F as `\b \t \n \f \r` or
/// lowercase `\u00xx`; `/`, non-ASCII and U+2028/U+2029 stay raw.
pub fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// base64url without padding (signatures, nonces, signs).
pub fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes base64url the tolerant way Node does: padding and the `+`/`/` alphabet accepted.
pub fn unb64url(s: &str) -> Option<Vec<u8>> {
    let normal: String = s
        .trim_end_matches('=')
        .chars()
        .map(|c| match c {
            '+' => '-',
            '/' => '_',
            c => c,
        })
        .collect();
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(normal)
        .ok()
}

/// The PEM text Node exports for an Ed25519 public key (113 bytes).
pub fn public_pem(public: &[u8; 32]) -> String {
    let mut der = SPKI_PREFIX.to_vec();
    der.extend_from_slice(public);
    format!(
        "{PEM_BEGIN}\n{}\n{PEM_END}\n",
        base64::engine::general_purpose::STANDARD.encode(der)
    )
}

/// The sign of a public key: `ed25519:` + base64url(PEM), 159 characters.
pub fn sign_of(public: &[u8; 32]) -> String {
    format!("{SIGN_PREFIX}{}", b64url(public_pem(public).as_bytes()))
}

/// Parses a sign (with or without the `ed25519:` prefix) back to the 32-byte key. Only an
/// Ed25519 SubjectPublicKeyInfo in a `PUBLIC KEY` PEM is accepted: RSA, EC, Ed448 and private
/// keys are refused, and the point must decode.
pub fn parse_sign(sign: &str) -> Result<[u8; 32]> {
    if sign.len() > SIGN_KEY_CHARS_MAX {
        return Err(invalid("public key is too long to be an Ed25519 sign"));
    }
    let body = sign.strip_prefix(SIGN_PREFIX).unwrap_or(sign);
    let pem = unb64url(body)
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| invalid("public key is not base64url of a PEM text"))?;
    let inner = pem
        .trim_end()
        .strip_prefix(PEM_BEGIN)
        .and_then(|p| p.strip_suffix(PEM_END))
        .ok_or_else(|| invalid("public key is not a PUBLIC KEY PEM"))?;
    let b64: String = inner.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| invalid("public key PEM body is not base64"))?;
    if der.len() != 44 || der[..12] != SPKI_PREFIX {
        return Err(invalid("public key is not an Ed25519 key"));
    }
    let mut key = [0u8; 32];
    key.copy_from_slice(&der[12..]);
    VerifyingKey::from_bytes(&key).map_err(|_| invalid("public key is not a valid point"))?;
    Ok(key)
}

/// A fingerprint people can compare: `SHA256:` + unpadded base64 of SHA-256 over the SPKI
/// DER, the form OpenSSH prints. (dsh-ask-peer shows the first 23 characters of the sign,
/// which are the same for every key.)
pub fn fingerprint(public: &[u8; 32]) -> String {
    let mut der = SPKI_PREFIX.to_vec();
    der.extend_from_slice(public);
    let digest = Sha256::digest(&der);
    format!(
        "SHA256:{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
    )
}

/// Pure Ed25519 over `msg`, as base64url without padding (86 characters).
pub fn signature(key: &SigningKey, msg: &[u8]) -> String {
    b64url(&key.sign(msg).to_bytes())
}

/// Verifies a base64url signature strictly; false for any malformed input.
pub fn verify(public: &[u8; 32], msg: &[u8], signature: &str) -> bool {
    if signature.len() > 128 {
        return false;
    }
    match unb64url(signature) {
        Some(sig) => crate::identity::verify(public, msg, &sig),
        None => false,
    }
}

/// The canonical text of a typed value, written straight from its `Serialize` implementation
/// (no `Value` tree in between): the same text as [`canonical_json`] of its JSON value, so
/// floats are refused, integers are bounded by 2^53, and members are sorted.
pub fn canonical_of(value: &impl serde::Serialize) -> Result<String> {
    value
        .serialize(Canonical { depth: 0 })
        .map_err(|e| invalid(e.0))
}

/// Why a typed value has no canonical form.
#[derive(Debug)]
struct NotCanonical(String);

impl std::fmt::Display for NotCanonical {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotCanonical {}

impl serde::ser::Error for NotCanonical {
    fn custom<T: std::fmt::Display>(msg: T) -> NotCanonical {
        NotCanonical(msg.to_string())
    }
}

/// Writes one value's canonical text; `depth` counts the arrays and objects around it.
#[derive(Clone, Copy)]
struct Canonical {
    depth: usize,
}

impl Canonical {
    fn nested(self) -> std::result::Result<Canonical, NotCanonical> {
        if self.depth >= CANON_DEPTH_MAX {
            return Err(NotCanonical("JSON nests too deeply to sign".into()));
        }
        Ok(Canonical {
            depth: self.depth + 1,
        })
    }

    fn integer(self, v: i128) -> std::result::Result<String, NotCanonical> {
        if v.unsigned_abs() > u128::from(SAFE_INTEGER_MAX) {
            let side = if v < 0 { "below -2^53" } else { "above 2^53" };
            return Err(NotCanonical(format!("integer {v} is {side}")));
        }
        Ok(v.to_string())
    }
}

/// An array being written.
struct Items {
    inner: Canonical,
    out: String,
    /// `Some(name)` for an enum's tuple variant: `{"name":[…]}`.
    variant: Option<&'static str>,
}

impl Items {
    fn push(
        &mut self,
        v: &(impl serde::Serialize + ?Sized),
    ) -> std::result::Result<(), NotCanonical> {
        if self.out.len() > 1 {
            self.out.push(',');
        }
        let text = v.serialize(self.inner)?;
        self.out.push_str(&text);
        Ok(())
    }

    fn close(mut self) -> std::result::Result<String, NotCanonical> {
        self.out.push(']');
        Ok(match self.variant {
            Some(name) => one_member(name, self.out),
            None => self.out,
        })
    }
}

/// An object being written: members collected, then sorted as JavaScript sorts keys.
struct Members {
    inner: Canonical,
    members: Vec<(String, String)>,
    key: Option<String>,
    variant: Option<&'static str>,
}

impl Members {
    fn close(mut self) -> std::result::Result<String, NotCanonical> {
        // Stable: of two members with one key (a flattened collision) the last is kept, as a
        // JSON object keeps it.
        self.members
            .sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
        let mut out = String::from("{");
        let mut i = 0;
        while i < self.members.len() {
            let mut last = i;
            while last + 1 < self.members.len() && self.members[last + 1].0 == self.members[i].0 {
                last += 1;
            }
            if out.len() > 1 {
                out.push(',');
            }
            write_string(&mut out, &self.members[last].0);
            out.push(':');
            out.push_str(&self.members[last].1);
            i = last + 1;
        }
        out.push('}');
        Ok(match self.variant {
            Some(name) => one_member(name, out),
            None => out,
        })
    }
}

fn one_member(name: &str, value: String) -> String {
    let mut out = String::from("{");
    write_string(&mut out, name);
    out.push(':');
    out.push_str(&value);
    out.push('}');
    out
}

/// A member name from its canonical text: a string, or an integer written as its decimal
/// text (as serde_json names a member keyed by a number).
fn member_name(text: &str) -> std::result::Result<String, NotCanonical> {
    if text.starts_with('"') {
        return serde_json::from_str(text).map_err(|e| NotCanonical(e.to_string()));
    }
    if !text.is_empty()
        && text
            .trim_start_matches('-')
            .bytes()
            .all(|b| b.is_ascii_digit())
    {
        return Ok(text.to_string());
    }
    Err(NotCanonical("a member name must be a string".into()))
}

type Done = std::result::Result<String, NotCanonical>;

impl serde::Serializer for Canonical {
    type Ok = String;
    type Error = NotCanonical;
    type SerializeSeq = Items;
    type SerializeTuple = Items;
    type SerializeTupleStruct = Items;
    type SerializeTupleVariant = Items;
    type SerializeMap = Members;
    type SerializeStruct = Members;
    type SerializeStructVariant = Members;

    fn serialize_bool(self, v: bool) -> Done {
        Ok(if v { "true" } else { "false" }.to_string())
    }
    fn serialize_i8(self, v: i8) -> Done {
        self.integer(v.into())
    }
    fn serialize_i16(self, v: i16) -> Done {
        self.integer(v.into())
    }
    fn serialize_i32(self, v: i32) -> Done {
        self.integer(v.into())
    }
    fn serialize_i64(self, v: i64) -> Done {
        self.integer(v.into())
    }
    fn serialize_i128(self, v: i128) -> Done {
        self.integer(v)
    }
    fn serialize_u8(self, v: u8) -> Done {
        self.integer(v.into())
    }
    fn serialize_u16(self, v: u16) -> Done {
        self.integer(v.into())
    }
    fn serialize_u32(self, v: u32) -> Done {
        self.integer(v.into())
    }
    fn serialize_u64(self, v: u64) -> Done {
        self.integer(v.into())
    }
    fn serialize_u128(self, v: u128) -> Done {
        i128::try_from(v)
            .map_err(|_| NotCanonical(format!("integer {v} is above 2^53")))
            .and_then(|v| self.integer(v))
    }
    fn serialize_f32(self, v: f32) -> Done {
        self.serialize_f64(v.into())
    }
    fn serialize_f64(self, v: f64) -> Done {
        // A JSON value has no NaN or infinity (they become null); any other float is refused.
        if !v.is_finite() {
            return Ok("null".into());
        }
        Err(NotCanonical("fractional numbers cannot be signed".into()))
    }
    fn serialize_char(self, v: char) -> Done {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Done {
        let mut out = String::new();
        write_string(&mut out, v);
        Ok(out)
    }
    fn serialize_bytes(self, v: &[u8]) -> Done {
        use serde::ser::SerializeSeq;
        let mut items = self.serialize_seq(Some(v.len()))?;
        for b in v {
            items.serialize_element(b)?;
        }
        items.end()
    }
    fn serialize_none(self) -> Done {
        Ok("null".into())
    }
    fn serialize_some<T: serde::Serialize + ?Sized>(self, v: &T) -> Done {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Done {
        Ok("null".into())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Done {
        Ok("null".into())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Done {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: serde::Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Done {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: serde::Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        v: &T,
    ) -> Done {
        Ok(one_member(variant, v.serialize(self.nested()?)?))
    }
    fn serialize_seq(self, _: Option<usize>) -> std::result::Result<Items, NotCanonical> {
        Ok(Items {
            inner: self.nested()?,
            out: "[".into(),
            variant: None,
        })
    }
    fn serialize_tuple(self, len: usize) -> std::result::Result<Items, NotCanonical> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        len: usize,
    ) -> std::result::Result<Items, NotCanonical> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> std::result::Result<Items, NotCanonical> {
        Ok(Items {
            inner: self.nested()?.nested()?,
            out: "[".into(),
            variant: Some(variant),
        })
    }
    fn serialize_map(self, _: Option<usize>) -> std::result::Result<Members, NotCanonical> {
        Ok(Members {
            inner: self.nested()?,
            members: Vec::new(),
            key: None,
            variant: None,
        })
    }
    fn serialize_struct(
        self,
        _: &'static str,
        len: usize,
    ) -> std::result::Result<Members, NotCanonical> {
        self.serialize_map(Some(len))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> std::result::Result<Members, NotCanonical> {
        Ok(Members {
            inner: self.nested()?.nested()?,
            members: Vec::new(),
            key: None,
            variant: Some(variant),
        })
    }
}

/// The array traits differ only in their names: each pushes an element and closes.
macro_rules! write_items {
    ($($trait:ident :: $method:ident),*) => {$(
        impl serde::ser::$trait for Items {
            type Ok = String;
            type Error = NotCanonical;
            fn $method<T: serde::Serialize + ?Sized>(
                &mut self,
                v: &T,
            ) -> std::result::Result<(), NotCanonical> {
                self.push(v)
            }
            fn end(self) -> Done {
                self.close()
            }
        }
    )*};
}

write_items!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl serde::ser::SerializeMap for Members {
    type Ok = String;
    type Error = NotCanonical;
    fn serialize_key<T: serde::Serialize + ?Sized>(
        &mut self,
        k: &T,
    ) -> std::result::Result<(), NotCanonical> {
        self.key = Some(member_name(&k.serialize(self.inner)?)?);
        Ok(())
    }
    fn serialize_value<T: serde::Serialize + ?Sized>(
        &mut self,
        v: &T,
    ) -> std::result::Result<(), NotCanonical> {
        let key = self
            .key
            .take()
            .ok_or_else(|| NotCanonical("a member value without its name".into()))?;
        self.members.push((key, v.serialize(self.inner)?));
        Ok(())
    }
    fn end(self) -> Done {
        self.close()
    }
}

/// A struct and a struct variant both write named members.
macro_rules! write_members {
    ($($trait:ident),*) => {$(
        impl serde::ser::$trait for Members {
            type Ok = String;
            type Error = NotCanonical;
            fn serialize_field<T: serde::Serialize + ?Sized>(
                &mut self,
                name: &'static str,
                v: &T,
            ) -> std::result::Result<(), NotCanonical> {
                self.members.push((name.to_string(), v.serialize(self.inner)?));
                Ok(())
            }
            fn end(self) -> Done {
                self.close()
            }
        }
    )*};
}

write_members!(SerializeStruct, SerializeStructVariant);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::hex;
    use serde_json::json;

    const SIGN: &str = "ed25519:LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0KTUNvd0JRWURLMlZ3QXlFQUE2RUh2L1BPRUw0ZGNOMFk1MHZBbVdmazFqQ2JwUTFmSGR5R1pCSlZNYmc9Ci0tLS0tRU5EIFBVQkxJQyBLRVktLS0tLQo";

    fn vector_key() -> SigningKey {
        let mut seed = [0u8; 32];
        for (i, b) in seed.iter_mut().enumerate() {
            *b = i as u8;
        }
        SigningKey::from_bytes(&seed)
    }

    #[test]
    fn vector_key_pem_and_sign() {
        let public = vector_key().verifying_key().to_bytes();
        assert_eq!(
            hex(&public),
            "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"
        );
        let pem = public_pem(&public);
        assert_eq!(
            pem,
            "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAA6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg=\n-----END PUBLIC KEY-----\n"
        );
        assert_eq!(pem.len(), 113);
        assert_eq!(sign_of(&public), SIGN);
        assert_eq!(SIGN.len(), 159);
        assert_eq!(parse_sign(SIGN).unwrap(), public);
        assert_eq!(parse_sign(&SIGN[8..]).unwrap(), public);
        // A real fingerprint differs between keys, unlike the sign's constant prefix.
        let other = SigningKey::from_bytes(&[7u8; 32])
            .verifying_key()
            .to_bytes();
        assert_ne!(fingerprint(&public), fingerprint(&other));
        assert!(fingerprint(&public).starts_with("SHA256:"));
    }

    #[test]
    fn vector_ask_signature() {
        let body = json!({
            "protocolVersion": 1, "caller": "ada",
            "question": "Where is the dev database URL configured?",
            "contextFiles": ["docker-compose.yml"], "timeoutMs": 60000,
            "publicKey": SIGN, "signature": "ignored",
        });
        let bytes =
            canonical_without(body.as_object().unwrap(), &["publicKey", "signature"]).unwrap();
        let text = r#"{"caller":"ada","contextFiles":["docker-compose.yml"],"protocolVersion":1,"question":"Where is the dev database URL configured?","timeoutMs":60000}"#;
        assert_eq!(std::str::from_utf8(&bytes).unwrap(), text);
        assert_eq!(bytes.len(), 147);
        let sig = signature(&vector_key(), &bytes);
        assert_eq!(
            sig,
            "GQ81w6Aev4U6ezHyZh9uIiGJODuZkn3aEUSd0j-T8ZUZjmVWCeuJCWvEsiL5qYn6EFW6lbJphJmwnwnOXl1OBg"
        );
        assert_eq!(sig.len(), 86);
        let public = parse_sign(SIGN).unwrap();
        assert!(verify(&public, &bytes, &sig));
        let mut tampered = bytes.clone();
        tampered[10] ^= 1;
        assert!(!verify(&public, &tampered, &sig));
    }

    #[test]
    fn vector_recommend_signature() {
        let body =
            json!({"caller":"ada","maxHops":1,"protocolVersion":1,"topic":"postgres migrations"});
        let text = canonical_json(&body).unwrap();
        assert_eq!(
            text,
            r#"{"caller":"ada","maxHops":1,"protocolVersion":1,"topic":"postgres migrations"}"#
        );
        assert_eq!(
            signature(&vector_key(), text.as_bytes()),
            "a0OYttjuddh37h57xSrlrPOvoO63iXGZqW4s8nn8dUlpGB5X00IvHh9ehSunu-_zDOc853QpozQwV6PtCsUyCQ"
        );
    }

    #[test]
    fn vector_card_signature() {
        let payload = json!({
            "v": 1, "name": "ada", "host": "192.0.2.10", "port": 3877, "publicKey": SIGN,
            "description": "backend, Postgres", "tags": ["postgres", "migrations"],
            "issued": 1785150000000u64, "ttl": 7776000000u64,
        });
        let text = canonical_json(&payload).unwrap();
        assert_eq!(text.len(), 333);
        assert_eq!(
            text,
            format!(
                r#"{{"description":"backend, Postgres","host":"192.0.2.10","issued":1785150000000,"name":"ada","port":3877,"publicKey":"{SIGN}","tags":["postgres","migrations"],"ttl":7776000000,"v":1}}"#
            )
        );
        let sig = signature(&vector_key(), text.as_bytes());
        assert_eq!(
            sig,
            "AIfjVouaMnVoyV_wBh4NNnD3NjZTi8UXX33FPAGp4ulP7onu5xo_Vt3S6b8SSl-2rI2hYHaSOG2PopM1ar7PAA"
        );
        // The card string: the payload in its documented member order plus the signature.
        let card = format!(
            r#"{{"v":1,"name":"ada","host":"192.0.2.10","port":3877,"publicKey":"{SIGN}","description":"backend, Postgres","tags":["postgres","migrations"],"issued":1785150000000,"ttl":7776000000,"signature":"{sig}"}}"#
        );
        assert_eq!(
            format!("dsh-ask-peer-card:{}", b64url(card.as_bytes())).len(),
            597
        );
    }

    #[test]
    fn strings_escape_like_json_stringify() {
        let v = json!({"s": "a\"b\\c\u{8}\t\n\u{c}\r\u{1}\u{1f}/é\u{2028}"});
        assert_eq!(
            canonical_json(&v).unwrap(),
            "{\"s\":\"a\\\"b\\\\c\\b\\t\\n\\f\\r\\u0001\\u001f/é\u{2028}\"}"
        );
    }

    #[test]
    fn keys_sort_by_utf16_code_units() {
        // U+FF61 sorts after U+1F600 by bytes but before it by UTF-16 code units (0xD83D).
        let v = json!({"\u{ff61}": 1, "\u{1f600}": 2, "b": 3, "a": [true, null, -5]});
        assert_eq!(
            canonical_json(&v).unwrap(),
            "{\"a\":[true,null,-5],\"b\":3,\"\u{1f600}\":2,\"\u{ff61}\":1}"
        );
    }

    #[test]
    fn unsafe_numbers_are_refused() {
        assert!(canonical_json(&json!({"n": 1.5})).is_err());
        assert!(canonical_json(&json!({"n": (1u64 << 53) + 1})).is_err());
        assert!(canonical_json(&json!({"n": -(1i64 << 53) - 1})).is_err());
        assert_eq!(
            canonical_json(&json!(1u64 << 53)).unwrap(),
            "9007199254740992"
        );
    }

    #[test]
    fn only_ed25519_public_keys_parse() {
        assert!(parse_sign("ed25519:").is_err());
        let private = b64url(b"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f\n-----END PRIVATE KEY-----\n");
        assert!(parse_sign(&format!("ed25519:{private}")).is_err());
        // An X25519 SPKI (OID 1.3.101.110) has the same length but another algorithm.
        let x25519 = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VuAyEAA6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg=\n-----END PUBLIC KEY-----\n";
        assert!(parse_sign(&format!("ed25519:{}", b64url(x25519.as_bytes()))).is_err());
        // Node's tolerant alphabet: padding and '+'/'/' are accepted.
        let padded = format!(
            "ed25519:{}",
            base64::engine::general_purpose::STANDARD.encode(public_pem(&[
                0x03, 0xa1, 0x07, 0xbf, 0xf3, 0xce, 0x10, 0xbe, 0x1d, 0x70, 0xdd, 0x18, 0xe7, 0x4b,
                0xc0, 0x99, 0x67, 0xe4, 0xd6, 0x30, 0x9b, 0xa5, 0x0d, 0x5f, 0x1d, 0xdc, 0x86, 0x64,
                0x12, 0x55, 0x31, 0xb8
            ]))
        );
        assert!(parse_sign(&padded).is_ok());
    }

    /// A typed value's canonical text is its JSON value's, written without building one.
    #[test]
    fn typed_values_canonicalize_as_their_json() {
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Inner {
            z_last: Option<u8>,
            #[serde(skip_serializing_if = "Option::is_none")]
            gone: Option<u8>,
            list: Vec<(u8, bool)>,
        }
        #[derive(serde::Serialize)]
        struct Outer {
            b: String,
            a: Inner,
            #[serde(rename = "\u{e000}")]
            high: i64,
            #[serde(rename = "\u{10000}")]
            higher: char,
            map: std::collections::BTreeMap<u32, &'static str>,
        }
        let v = Outer {
            b: "quote \" slash / tab \t nul \u{0} é \u{2028}".into(),
            a: Inner {
                z_last: None,
                gone: None,
                list: vec![(1, true), (2, false)],
            },
            high: -(1 << 53),
            higher: 'x',
            map: [(10, "ten"), (9, "nine")].into_iter().collect(),
        };
        let via_value = canonical_json(&serde_json::to_value(&v).unwrap()).unwrap();
        assert_eq!(canonical_of(&v).unwrap(), via_value);
        assert!(canonical_of(&((1u64 << 53) + 1)).is_err());
        assert!(canonical_of(&1.5f64).is_err());
        assert!(canonical_json(&serde_json::to_value(1.5f64).unwrap()).is_err());
    }
}
