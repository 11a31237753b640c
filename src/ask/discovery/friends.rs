//! Adding a verified friend card to `ask.peers` in `<home>/config.json`: a pure merge decision
//! over the JSON list, and the locked, validated, atomic rewrite of the file around it.
//!
//! Unlike dsh-ask-peer, a card never silently replaces a friend: the same name with a different
//! (or no) pinned key, or the same key under another name, is refused unless the owner says
//! `--replace`; a replacement keeps the friend's token and mode. A card from the same key
//! updates the address (the key holder said where it is now) and keeps everything else.

use crate::ask::card::Card;
use crate::config::internal::{ASK_CONFIG_LOCK_WAIT_MS, ASK_FRIENDS_MAX};
use crate::error::{Code, Error, Result};
use crate::{fsutil, sanitize};
use serde_json::{Map, Value, json};
use std::path::Path;

/// Friend modes a card may be added with.
pub const MODES: [&str; 3] = ["ask", "auto", "deny"];

/// What an add did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Merged {
    /// A new friend.
    Added,
    /// The same key under the same name: host, port and description refreshed.
    Updated,
    /// Nothing changed.
    Unchanged,
    /// `--replace`: an existing friend of that name now pins the card's key.
    Replaced,
}

impl Merged {
    pub fn name(&self) -> &'static str {
        match self {
            Merged::Added => "added",
            Merged::Updated => "updated",
            Merged::Unchanged => "unchanged",
            Merged::Replaced => "replaced",
        }
    }
}

fn conflict(message: String) -> Error {
    Error::new(Code::AuthFailed, message)
}

/// Refuses a card whose key an existing friend of another name already holds.
fn key_owned_by_another(peers: &[Value], card: &Card, name: &str) -> Result<()> {
    let other = peers.iter().find(|p| {
        p.get("publicKey").and_then(Value::as_str) == Some(card.public_key.as_str())
            && p.get("name").and_then(Value::as_str) != Some(card.name.as_str())
    });
    match other {
        None => Ok(()),
        Some(other) => {
            let other = other.get("name").and_then(Value::as_str).unwrap_or("?");
            Err(conflict(format!(
                "this key already belongs to friend {:?}; the card calls itself {name:?}. Remove one first",
                sanitize::line(other, 64)
            )))
        }
    }
}

/// Writes the card's address (host, port, description, and how it is reached) into a friend
/// entry: a card without `tls` (dsh-ask-peer's) gets `"tls": false`, plain HTTP, since its
/// server cannot answer TLS; one with it is asked over TLS pinned to its key (the default).
fn address_of(card: &Card, m: &mut Map<String, Value>) {
    m.insert("host".into(), json!(card.host));
    m.insert("port".into(), json!(card.port));
    if card.tls {
        m.remove("tls");
    } else {
        m.insert("tls".into(), json!(false));
    }
    match &card.description {
        Some(d) => m.insert("description".into(), json!(d)),
        None => m.remove("description"),
    };
}

/// Merges `card` into the `peers` list (pure). `mode` applies to a new friend only.
pub fn merge(peers: &mut Vec<Value>, card: &Card, mode: &str, replace: bool) -> Result<Merged> {
    let name = sanitize::line(&card.name, 64);
    key_owned_by_another(peers, card, &name)?;
    let address = |m: &mut Map<String, Value>| address_of(card, m);
    let Some(existing) = peers
        .iter_mut()
        .find(|p| p.get("name").and_then(Value::as_str) == Some(card.name.as_str()))
    else {
        if peers.len() >= ASK_FRIENDS_MAX {
            return Err(Error::new(
                Code::QueueFull,
                format!("ask.peers already lists {ASK_FRIENDS_MAX} friends"),
            ));
        }
        let mut m = Map::new();
        m.insert("name".into(), json!(card.name));
        address(&mut m);
        m.insert("publicKey".into(), json!(card.public_key));
        m.insert("mode".into(), json!(mode));
        peers.push(Value::Object(m));
        return Ok(Merged::Added);
    };
    let Some(m) = existing.as_object_mut() else {
        return Err(Error::new(
            Code::ConfigInvalid,
            format!("ask.peers entry {name:?} is not an object"),
        ));
    };
    let before = m.clone();
    let pinned = m
        .get("publicKey")
        .and_then(Value::as_str)
        .map(str::to_string);
    if pinned.as_deref() == Some(card.public_key.as_str()) {
        address(m);
        return Ok(if *m == before {
            Merged::Unchanged
        } else {
            Merged::Updated
        });
    }
    if !replace {
        let what = if pinned.is_some() {
            "a different key"
        } else {
            "no pinned key (token only)"
        };
        return Err(conflict(format!(
            "a friend named {name:?} already exists with {what}; the card's key is not theirs unless \
             they confirm it. Compare fingerprints, then add again with --replace"
        )));
    }
    address(m);
    m.insert("publicKey".into(), json!(card.public_key));
    Ok(Merged::Replaced)
}

/// Adds `card` to `<home>/config.json` under the file's lock. `validate` is the configuration
/// check of the whole file (the same one `peer` runs at start), applied to the new bytes
/// before they replace the old ones, so an add never leaves an unloadable config.
pub fn add_to_config(
    home: &Path,
    card: &Card,
    mode: &str,
    replace: bool,
    validate: impl Fn(&[u8]) -> Result<()>,
) -> Result<Merged> {
    if !MODES.contains(&mode) {
        return Err(Error::new(
            Code::Usage,
            format!("--mode must be one of {}", MODES.join("|")),
        ));
    }
    fsutil::ensure_private_dir(home)?;
    let path = crate::config::file_path(home);
    let _lock = fsutil::FileLock::acquire(&home.join("config.json.lock"), ASK_CONFIG_LOCK_WAIT_MS)?;
    let mut root = crate::config::load_file(home, |bytes| {
        serde_json::from_slice::<Value>(bytes)
            .map_err(|e| Error::new(Code::ConfigInvalid, format!("not valid JSON ({e})")))
    })?
    .unwrap_or_else(|| json!({}));
    let peers = root
        .as_object_mut()
        .ok_or_else(|| Error::new(Code::ConfigInvalid, "the top level must be a JSON object"))?
        .entry("ask")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| Error::new(Code::ConfigInvalid, "ask must be an object"))?
        .entry("peers")
        .or_insert_with(|| json!([]));
    let Value::Array(list) = peers else {
        return Err(Error::new(
            Code::ConfigInvalid,
            "ask.peers must be an array",
        ));
    };
    let merged = merge(list, card, mode, replace)?;
    if merged == Merged::Unchanged {
        return Ok(merged);
    }
    let bytes = serde_json::to_vec_pretty(&root)
        .map_err(|e| Error::new(Code::Io, format!("cannot encode the configuration: {e}")))?;
    validate(&bytes)?;
    fsutil::atomic_write(&path, &bytes, fsutil::Durability::Durable)?;
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(name: &str, key: &str, port: u16) -> Card {
        Card {
            name: name.into(),
            host: "10.0.0.2".into(),
            port,
            public_key: key.into(),
            key: [0; 32],
            description: None,
            tags: vec![],
            issued: 0,
            ttl: 1,
            tls: true,
            document: String::new(),
        }
    }

    #[test]
    fn merge_never_silently_replaces() {
        let mut peers =
            vec![json!({"name": "bob", "host": "h", "port": 1, "token": "t", "mode": "auto"})];
        let err = merge(&mut peers, &card("bob", "ed25519:K", 2), "ask", false).unwrap_err();
        assert!(err.message.contains("--replace"), "{}", err.message);
        assert_eq!(peers[0]["port"], 1, "nothing changed");
        assert_eq!(
            merge(&mut peers, &card("bob", "ed25519:K", 2), "ask", true).unwrap(),
            Merged::Replaced
        );
        assert_eq!(
            (peers[0]["token"].as_str(), peers[0]["mode"].as_str()),
            (Some("t"), Some("auto"))
        );
        assert_eq!(
            merge(&mut peers, &card("bob", "ed25519:K", 3), "ask", false).unwrap(),
            Merged::Updated
        );
        assert_eq!(
            merge(&mut peers, &card("bob", "ed25519:K", 3), "ask", false).unwrap(),
            Merged::Unchanged
        );
        // A different key under the pinned name, and the pinned key under another name.
        assert!(merge(&mut peers, &card("bob", "ed25519:X", 3), "ask", false).is_err());
        assert!(merge(&mut peers, &card("eve", "ed25519:K", 3), "ask", true).is_err());
        assert_eq!(
            merge(&mut peers, &card("carol", "ed25519:C", 4), "deny", false).unwrap(),
            Merged::Added
        );
        assert_eq!(peers[1]["mode"], "deny");
        assert_eq!(peers.len(), 2);
    }

    /// A dsh card (no `tls`) is asked over plain HTTP, said in the entry; a later card of the
    /// same key that speaks TLS takes the entry back to the default.
    #[test]
    fn cards_without_tls_get_plain_http() {
        let mut peers = Vec::new();
        let mut dsh = card("dee", "ed25519:D", 1);
        dsh.tls = false;
        assert_eq!(
            merge(&mut peers, &dsh, "ask", false).unwrap(),
            Merged::Added
        );
        assert_eq!(peers[0]["tls"], false);
        let ours = card("dee", "ed25519:D", 1);
        assert_eq!(
            merge(&mut peers, &ours, "ask", false).unwrap(),
            Merged::Updated
        );
        assert_eq!(peers[0].get("tls"), None);
    }
}
