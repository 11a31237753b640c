//! The A2A agent card served at `/.well-known/agent-card.json`, signed with the ask key.
//!
//! The signature is a detached JWS (A2A 1.0 §8.4): the payload is the card without
//! `signatures`, canonicalized by JCS (RFC 8785), the protected header is
//! `{"alg":"EdDSA","kid":…,"typ":"JOSE"}`, and the signature is Ed25519 over
//! `b64url(header) "." b64url(payload)`. SDKs canonicalize the card as they parsed it into
//! their protobuf types, which drops unknown members, empty strings, empty lists and false
//! booleans, so the card holds only members of the 1.0 schema and none of those empty forms:
//! what we sign is what they check.

use super::super::canon;
use super::super::keys::AskKey;
use serde_json::{Map, Value, json};

/// The A2A revision served (the card's `supportedInterfaces[].protocolVersion`).
pub const PROTOCOL_VERSION: &str = "1.0";
/// The JSON-RPC endpoint on the ask port.
pub const RPC_PATH: &str = "/a2a";
/// Where clients look for the card.
pub const CARD_PATH: &str = "/.well-known/agent-card.json";

/// The card for `name`, whose JSON-RPC endpoint is `http://{authority}/a2a`, unsigned.
pub fn unsigned(name: &str, authority: &str) -> Value {
    json!({
        "name": name,
        "description": format!(
            "peerwire ask: questions about {name}'s workspace, answered by a sandboxed \
             agent after {name}'s approval. Friends only: a bearer token configured by the \
             owner, or the friend's card key over mutual TLS."
        ),
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [{
            "url": format!("http://{authority}{RPC_PATH}"),
            "protocolBinding": "JSONRPC",
            "protocolVersion": PROTOCOL_VERSION,
        }],
        "capabilities": {"streaming": true},
        "securitySchemes": {
            "bearer": {"httpAuthSecurityScheme": {
                "scheme": "Bearer",
                "description": "the token the owner configured for you in ask.peers",
            }},
            "mtls": {"mtlsSecurityScheme": {
                "description": "TLS on the same port with a certificate of your pinned card key",
            }},
        },
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [
            {
                "id": "ask-workspace",
                "name": "Ask the workspace",
                "description": "A question about this workspace, answered read-only by a \
                    contained agent once the owner approves",
                "tags": ["workspace", "code", "question"],
                "examples": ["Where is the retry policy configured?"],
            },
            {
                "id": "recommend-peer",
                "name": "Recommend a peer",
                "description": "Which friend of this agent knows about a topic (served by \
                    POST /recommend on the same port; an A2A message is answered as an ask)",
                "tags": ["discovery"],
            },
        ],
    })
}

/// The card with one signature by `key`.
pub fn signed(key: &AskKey, name: &str, authority: &str) -> Value {
    let mut card = unsigned(name, authority);
    let header = json!({"alg": "EdDSA", "kid": key.fingerprint(), "typ": "JOSE"});
    let protected = canon::b64url(header.to_string().as_bytes());
    // The card holds strings, booleans, arrays and objects only, which always canonicalize.
    let payload = canon::canonical_json(&card).unwrap_or_default();
    let signing_input = format!("{protected}.{}", canon::b64url(payload.as_bytes()));
    let signature = key.sign(signing_input.as_bytes());
    card["signatures"] = json!([{"protected": protected, "signature": signature}]);
    card
}

/// Checks a fetched card's signatures against `key` (pure): true when one verifies.
pub fn verify(card: &Map<String, Value>, key: &[u8; 32]) -> bool {
    let Some(sigs) = card.get("signatures").and_then(Value::as_array) else {
        return false;
    };
    let mut rest = card.clone();
    rest.remove("signatures");
    let Ok(payload) = canon::canonical_json(&Value::Object(strip_empty(rest))) else {
        return false;
    };
    let payload = canon::b64url(payload.as_bytes());
    sigs.iter().take(8).any(|s| {
        let (Some(protected), Some(signature)) = (
            s.get("protected").and_then(Value::as_str),
            s.get("signature").and_then(Value::as_str),
        ) else {
            return false;
        };
        let alg_ok = canon::unb64url(protected)
            .and_then(|h| serde_json::from_slice::<Value>(&h).ok())
            .is_some_and(|h| h.get("alg").and_then(Value::as_str) == Some("EdDSA"));
        alg_ok && canon::verify(key, format!("{protected}.{payload}").as_bytes(), signature)
    })
}

/// Drops empty strings, lists and objects, as the SDKs do before canonicalizing.
fn strip_empty(map: Map<String, Value>) -> Map<String, Value> {
    map.into_iter()
        .filter_map(|(k, v)| strip_value(v).map(|v| (k, v)))
        .collect()
}

fn strip_value(v: Value) -> Option<Value> {
    match v {
        Value::String(s) if s.is_empty() => None,
        Value::Array(items) => {
            let items: Vec<Value> = items.into_iter().filter_map(strip_value).collect();
            (!items.is_empty()).then_some(Value::Array(items))
        }
        Value::Object(m) => {
            let m = strip_empty(m);
            (!m.is_empty()).then_some(Value::Object(m))
        }
        v => Some(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cards_verify_with_their_key_only() {
        let key = AskKey::from_seed(&[3u8; 32]);
        let card = signed(&key, "bob", "127.0.0.1:9");
        let map = card.as_object().unwrap().clone();
        assert!(verify(&map, &key.public()));
        assert!(!verify(&map, &AskKey::from_seed(&[4u8; 32]).public()));
        let mut changed = map.clone();
        changed.insert("name".into(), json!("eve"));
        assert!(!verify(&changed, &key.public()));
        assert_eq!(
            card["supportedInterfaces"][0]["url"],
            "http://127.0.0.1:9/a2a"
        );
    }
}
