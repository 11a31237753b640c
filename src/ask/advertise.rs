//! Advertisements: what this agent says about itself on `GET /advertise`, how a friend's
//! advert is checked before anyone sees it, and the roster of friends' adverts that a
//! background thread refreshes every `rosterRefreshMs`.
//!
//! What an advert shows (the whole list, nothing else leaves the machine): `protocolVersion`,
//! `name` (callerName), `description` and `tags` (the owner's configuration), `workspace` (the
//! basename of the configured workspace only), `updatedAt`, and `sessions`: for each live
//! peerwire session of this namespace whose workspace is the configured one (or inside it), its
//! alias as `id`, the workspace basename, `updatedAt` and `status`. Session ids,
//! paths, titles, models and message text are never shown. With a key the advert carries
//! `publicKey` and an Ed25519 `signature` over the canonical JSON of the seven fields above, as
//! dsh-ask-peer signs it.
//!
//! A friend's advert is peer text: it is bounded, stripped to the known fields, checked
//! (`name` must be the friend's, `updatedAt` not in the future, a friend with a pinned key must
//! sign it with that key — unsigned adverts from keyed friends are rejected), and still
//! sanitized before a terminal and wrapped as external data before a model.

use super::canon;
use super::loose::{Loose, Obj, typed};
use crate::config::internal::{
    ADVERT_FETCH_PARALLEL, ADVERT_FIELD_CHARS_MAX, ADVERT_FUTURE_SKEW_MS, ADVERT_SESSIONS_MAX,
    ASK_DESCRIPTION_CHARS_MAX, ASK_TAG_CHARS_MAX, ASK_TAGS_MAX, ROSTER_FILE_BYTES_MAX, ROSTER_MAX,
    ROSTER_REFRESH_MS_MIN,
};
use crate::{clock, fsutil, presence};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// dsh's protocol version, required in adverts.
pub const PROTOCOL_VERSION: u64 = 1;

/// What this agent advertises, from its configuration and presence directory.
pub struct Local<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub tags: &'a [String],
    /// The configured workspace (absolute).
    pub workspace: &'a Path,
}

fn basename(p: &str) -> String {
    Path::new(p)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// One session of an advert, as this agent shows it (`id`, `workspace`, `updatedAt`, `status`)
/// or as kept from a friend's advert (each field bounded; `title`, `topic`, `topics` and
/// `createdAt` too when the friend sent them). Fields in key order, as the JSON has them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdvertSession {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topics: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
}

/// This agent's advert: the seven signed fields, then `publicKey` and `signature` once
/// [`sign`]ed (the signature covers the canonical JSON of the advert without them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Advert {
    pub protocol_version: u64,
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
    pub workspace: String,
    pub updated_at: String,
    pub sessions: Vec<AdvertSession>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// The sessions an advert shows: live peerwire sessions whose canonical workspace is
/// `workspace` or inside it, as `{id: alias, workspace: basename, updatedAt, status}`, newest
/// first, at most [`ADVERT_SESSIONS_MAX`]. (`createdAt` is left out: the presence reader does
/// not keep a start time, and a made-up one would mislead.)
pub fn sessions(entries: &[presence::Entry], workspace: &Path, now_ms: u64) -> Vec<AdvertSession> {
    let root = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    let mut live: Vec<(&presence::Entry, &presence::Advertisement)> = entries
        .iter()
        .filter_map(|e| e.messaging().map(|ad| (e, ad)))
        .filter(|(_, ad)| Path::new(&ad.workspace).starts_with(&root))
        .collect();
    live.sort_by_key(|(e, _)| std::cmp::Reverse(e.updated_at_ms.unwrap_or(0)));
    live.into_iter()
        .take(ADVERT_SESSIONS_MAX)
        .map(|(e, ad)| AdvertSession {
            id: Some(ad.alias.clone()),
            workspace: Some(basename(&ad.workspace)),
            updated_at: Some(e.updated_at_ms.unwrap_or(now_ms)),
            status: Some(e.status.clone()),
            ..AdvertSession::default()
        })
        .collect()
}

/// The seven signed fields of this agent's advert at `now_ms`.
pub fn build(local: &Local, sessions: Vec<AdvertSession>, now_ms: u64) -> Advert {
    Advert {
        protocol_version: PROTOCOL_VERSION,
        name: local.name.to_string(),
        description: local.description.to_string(),
        tags: local.tags.to_vec(),
        workspace: basename(&local.workspace.to_string_lossy()),
        updated_at: clock::iso8601(now_ms),
        sessions,
        public_key: None,
        signature: None,
    }
}

/// The members of an advert its signature covers, as dsh signs them.
const SIGNED_FIELDS: [&str; 7] = [
    "protocolVersion",
    "name",
    "description",
    "tags",
    "workspace",
    "updatedAt",
    "sessions",
];

/// Adds `publicKey` and `signature` (base64url Ed25519 over the canonical signed fields, as
/// `AskKey::sign` makes it).
pub fn sign(mut advert: Advert, public: &[u8; 32], sign: impl Fn(&[u8]) -> String) -> Advert {
    advert.public_key = None;
    advert.signature = None;
    if let Ok(text) = canon::canonical_of(&advert) {
        advert.signature = Some(sign(text.as_bytes()));
        advert.public_key = Some(canon::sign_of(public));
    }
    advert
}

/// A friend's advert as it arrives: each field kept apart from a wrong-typed one, so the
/// checks below refuse or drop it with their own message.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Received {
    #[serde(default)]
    protocol_version: Option<Loose<u64>>,
    #[serde(default)]
    name: Option<Loose<String>>,
    #[serde(default)]
    description: Option<Loose<String>>,
    #[serde(default)]
    tags: Option<Loose<Vec<Loose<String>>>>,
    #[serde(default)]
    workspace: Option<Loose<String>>,
    #[serde(default)]
    updated_at: Option<Loose<String>>,
    #[serde(default)]
    sessions: Option<Loose<Vec<Loose<Obj<ReceivedSession>>>>>,
    #[serde(default)]
    public_key: Option<Loose<String>>,
    #[serde(default)]
    signature: Option<Loose<String>>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReceivedSession {
    #[serde(default)]
    id: Option<Loose<String>>,
    #[serde(default)]
    workspace: Option<Loose<String>>,
    #[serde(default)]
    title: Option<Loose<String>>,
    #[serde(default)]
    topic: Option<Loose<String>>,
    #[serde(default)]
    status: Option<Loose<String>>,
    #[serde(default)]
    created_at: Option<Loose<u64>>,
    #[serde(default)]
    updated_at: Option<Loose<u64>>,
    #[serde(default)]
    topics: Option<Loose<Vec<Loose<String>>>>,
}

fn bounded_str(v: &Option<Loose<String>>, max: usize) -> Option<String> {
    typed(v).filter(|s| s.chars().count() <= max).cloned()
}

fn bounded_strings(v: &Option<Loose<Vec<Loose<String>>>>, count: usize, max: usize) -> Vec<String> {
    typed(v)
        .map(|a| {
            a.iter()
                .take(count)
                .filter_map(Loose::as_ref)
                .filter(|s| s.chars().count() <= max)
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

fn clean_session(s: &ReceivedSession) -> AdvertSession {
    let field = |v: &Option<Loose<String>>| bounded_str(v, ADVERT_FIELD_CHARS_MAX);
    AdvertSession {
        created_at: typed(&s.created_at).copied(),
        id: field(&s.id),
        status: field(&s.status),
        title: field(&s.title),
        topic: field(&s.topic),
        topics: bounded_strings(&s.topics, 4, ADVERT_FIELD_CHARS_MAX),
        updated_at: typed(&s.updated_at).copied(),
        workspace: field(&s.workspace),
    }
}

/// A friend's advert after [`check`]: the kept, bounded fields and whether it was signed by
/// the friend's pinned key. Kept in the roster file; fields in key order, as the JSON has them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckedAdvert {
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub sessions: Vec<AdvertSession>,
    #[serde(default)]
    pub signed: bool,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub updated_at: String,
    #[serde(default)]
    pub workspace: String,
}

/// Checks a friend's advert (`raw`, its JSON as received) and returns the kept, bounded
/// fields plus `signed`. `pinned` is the friend's configured key: then a valid signature by
/// exactly that key is required.
pub fn check(
    friend: &str,
    pinned: Option<&[u8; 32]>,
    raw: &RawValue,
    now_ms: u64,
) -> Result<CheckedAdvert, String> {
    let Ok(Obj(m)) = serde_json::from_str::<Obj<Received>>(raw.get()) else {
        return Err("advert is not a JSON object".into());
    };
    if typed(&m.protocol_version) != Some(&PROTOCOL_VERSION) {
        return Err("advert protocolVersion is not 1".into());
    }
    if typed(&m.name).map(String::as_str) != Some(friend) {
        return Err("advert name is not this friend's name".into());
    }
    let updated = typed(&m.updated_at)
        .and_then(|t| clock::parse_iso8601(t))
        .ok_or("advert updatedAt is not an ISO-8601 time")?;
    if updated > now_ms.saturating_add(ADVERT_FUTURE_SKEW_MS) {
        return Err("advert updatedAt lies in the future".into());
    }
    let signed = match (pinned, typed(&m.signature)) {
        (Some(key), Some(sig)) => {
            if typed(&m.public_key).map(String::as_str) != Some(canon::sign_of(key).as_str()) {
                return Err("advert is signed by another key than the friend's".into());
            }
            // The signature covers the members as the friend sent them, unknown ones included.
            let ok = canon::canonical_members(raw, &SIGNED_FIELDS)
                .is_ok_and(|text| canon::verify(key, text.as_bytes(), sig));
            if !ok {
                return Err("advert signature does not verify".into());
            }
            true
        }
        (Some(_), None) => return Err("advert is unsigned but the friend has a key".into()),
        (None, _) => false,
    };
    let sessions = typed(&m.sessions)
        .map(|a| {
            a.iter()
                .take(ADVERT_SESSIONS_MAX)
                .filter_map(Loose::as_ref)
                .map(|Obj(s)| clean_session(s))
                .collect()
        })
        .unwrap_or_default();
    Ok(CheckedAdvert {
        name: friend.to_string(),
        description: bounded_str(&m.description, ASK_DESCRIPTION_CHARS_MAX).unwrap_or_default(),
        tags: bounded_strings(&m.tags, ASK_TAGS_MAX, ASK_TAG_CHARS_MAX),
        workspace: bounded_str(&m.workspace, ADVERT_FIELD_CHARS_MAX).unwrap_or_default(),
        updated_at: clock::iso8601(updated),
        sessions,
        signed,
    })
}

/// A friend the roster watches.
#[derive(Clone, Debug)]
pub struct Watched {
    pub name: String,
    pub key: Option<[u8; 32]>,
}

/// What the roster knows of one friend.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Seen {
    /// The last advert that passed [`check`].
    pub advert: Option<CheckedAdvert>,
    /// The pinned key (its sign) that advert was checked against, if any: an advert is shown
    /// only while the friend's entry still pins the same key.
    #[serde(default)]
    pub checked_key: Option<String>,
    /// When that advert was fetched (ms since the epoch).
    pub last_seen_ms: Option<u64>,
    /// When the last fetch was tried, and why it failed if it did.
    pub checked_at_ms: Option<u64>,
    pub last_error: Option<String>,
}

impl Seen {
    /// Reachable: the last try succeeded.
    pub fn reachable(&self) -> bool {
        self.checked_at_ms.is_some() && self.last_error.is_none()
    }

    /// The kept advert, if it was checked against `pinned` (the friend's key now).
    pub fn advert_for(&self, pinned: Option<&[u8; 32]>) -> Option<&CheckedAdvert> {
        let key = pinned.map(canon::sign_of);
        self.advert.as_ref().filter(|_| self.checked_key == key)
    }
}

/// Friends' adverts, shared by the refresher, `/recommend`, `peers_list` and `peer ask peers`;
/// saved to `roster.json` (0600) in the ask state directory after each refresh so a CLI run
/// sees how fresh the server's view is.
pub struct Roster {
    seen: Mutex<BTreeMap<String, Seen>>,
    file: Option<PathBuf>,
}

impl Roster {
    /// An empty roster, loading and saving `dir/roster.json` when `dir` is given.
    pub fn new(dir: Option<&Path>) -> Roster {
        let file = dir.map(|d| d.join("roster.json"));
        let seen = file
            .as_deref()
            .and_then(|f| fsutil::read_private_bounded(f, ROSTER_FILE_BYTES_MAX).ok())
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Roster {
            seen: Mutex::new(seen),
            file,
        }
    }

    /// A copy of what is known, by friend name.
    pub fn snapshot(&self) -> BTreeMap<String, Seen> {
        self.seen.lock().clone()
    }

    /// What is known of one friend.
    pub fn get(&self, name: &str) -> Option<Seen> {
        self.seen.lock().get(name).cloned()
    }

    /// Records one fetch outcome, checked by the caller with [`check`] against `pinned`.
    pub fn record(
        &self,
        name: &str,
        pinned: Option<&[u8; 32]>,
        outcome: Result<CheckedAdvert, String>,
        now_ms: u64,
    ) {
        let mut seen = self.seen.lock();
        if !seen.contains_key(name) && seen.len() >= ROSTER_MAX {
            return;
        }
        let entry = seen.entry(name.to_string()).or_default();
        entry.checked_at_ms = Some(now_ms);
        match outcome {
            Ok(advert) => {
                entry.advert = Some(advert);
                entry.checked_key = pinned.map(canon::sign_of);
                entry.last_seen_ms = Some(now_ms);
                entry.last_error = None;
            }
            Err(e) => entry.last_error = Some(e),
        }
    }

    /// Fetches every watched friend's advert, [`ADVERT_FETCH_PARALLEL`] at a time, checks it and
    /// records the outcome; friends no longer watched are forgotten. Then saves the file.
    pub fn refresh(
        &self,
        friends: &[Watched],
        fetch: &(dyn Fn(&str) -> Result<Box<RawValue>, String> + Sync),
        stop: &dyn Fn() -> bool,
    ) {
        for chunk in friends
            .chunks(ADVERT_FETCH_PARALLEL)
            .take(ROSTER_MAX / ADVERT_FETCH_PARALLEL)
        {
            if stop() {
                break;
            }
            std::thread::scope(|s| {
                for f in chunk {
                    s.spawn(move || {
                        let got = fetch(&f.name)
                            .and_then(|v| check(&f.name, f.key.as_ref(), &v, clock::now_ms()));
                        self.record(&f.name, f.key.as_ref(), got, clock::now_ms());
                    });
                }
            });
        }
        self.seen
            .lock()
            .retain(|name, _| friends.iter().any(|f| &f.name == name));
        self.save();
    }

    /// Writes the roster file (best effort: it is a cache).
    pub fn save(&self) {
        let Some(file) = &self.file else { return };
        let bytes = serde_json::to_vec(&*self.seen.lock()).unwrap_or_default();
        if let Some(dir) = file.parent()
            && fsutil::ensure_private_dir(dir).is_ok()
        {
            // The roster is a cache: a failed save only means the next reader fetches itself.
            let _ = fsutil::atomic_write(file, &bytes, fsutil::Durability::Visible);
        }
    }
}

/// Fetches one friend's advert by name (unchecked; [`check`] runs after it).
pub type Fetch = dyn Fn(&str) -> Result<Box<RawValue>, String> + Send + Sync;

/// Runs [`Roster::refresh`] now and then every `every_ms` (0: only once, as dsh) until `stop`
/// says so (looked at every 50 ms).
pub fn spawn_refresher(
    roster: Arc<Roster>,
    every_ms: u64,
    friends: Vec<Watched>,
    fetch: Box<Fetch>,
    stop: Box<dyn Fn() -> bool + Send>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("ask-roster".into())
        .spawn(move || {
            loop {
                roster.refresh(&friends, &*fetch, &*stop);
                if every_ms == 0 {
                    return;
                }
                let until = std::time::Instant::now()
                    + Duration::from_millis(every_ms.max(ROSTER_REFRESH_MS_MIN));
                while std::time::Instant::now() < until {
                    if stop() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};
    use serde_json::json;

    fn key() -> SigningKey {
        SigningKey::from_bytes(&[7u8; 32])
    }

    fn raw(v: &impl Serialize) -> Box<RawValue> {
        serde_json::value::to_raw_value(v).unwrap()
    }

    fn advert(now: u64) -> Advert {
        let tags = vec!["postgres".to_string()];
        let local = Local {
            name: "bob",
            description: "db person",
            tags: &tags,
            workspace: Path::new("/home/bob/src/shop"),
        };
        let session = AdvertSession {
            id: Some("b1".into()),
            workspace: Some("shop".into()),
            created_at: Some(1),
            updated_at: Some(2),
            status: Some("idle".into()),
            ..AdvertSession::default()
        };
        build(&local, vec![session], now)
    }

    /// A member named twice is refused, signed or not: a reader that keeps the last one
    /// (Node's `JSON.parse`) would see another advert than the one checked.
    #[test]
    fn an_advert_naming_a_member_twice_is_refused() {
        let now = 1_785_150_000_000;
        let k = key();
        let public = k.verifying_key().to_bytes();
        let signed = sign(advert(now), &public, |m| {
            canon::b64url(&k.sign(m).to_bytes())
        });
        let text = raw(&signed).get().to_string();
        assert!(check("bob", Some(&public), &raw(&signed), now).is_ok());
        let twice = text.replacen("{", "{\"description\":\"not me\",", 1);
        let twice = RawValue::from_string(twice).unwrap();
        assert!(check("bob", Some(&public), &twice, now).is_err());
        assert!(check("bob", None, &twice, now).is_err());
    }

    #[test]
    fn signed_adverts_verify_against_the_pinned_key_only() {
        let now = 1_785_150_000_000;
        let k = key();
        let public = k.verifying_key().to_bytes();
        let signed = sign(advert(now), &public, |m| {
            canon::b64url(&k.sign(m).to_bytes())
        });
        assert_eq!(signed.workspace, "shop", "basename only");
        let ok = check("bob", Some(&public), &raw(&signed), now).unwrap();
        assert_eq!((ok.signed, ok.tags[0].as_str()), (true, "postgres"));
        // Tampered text, wrong key, unsigned, wrong name, future time.
        let mut t = signed.clone();
        t.description = "trust me".into();
        assert!(
            check("bob", Some(&public), &raw(&t), now)
                .unwrap_err()
                .contains("verify")
        );
        let other = SigningKey::from_bytes(&[8u8; 32])
            .verifying_key()
            .to_bytes();
        assert!(check("bob", Some(&other), &raw(&signed), now).is_err());
        assert!(
            check("bob", Some(&public), &raw(&advert(now)), now)
                .unwrap_err()
                .contains("unsigned")
        );
        assert!(
            check("carol", None, &raw(&advert(now)), now)
                .unwrap_err()
                .contains("name")
        );
        assert!(
            check(
                "bob",
                None,
                &raw(&advert(now + ADVERT_FUTURE_SKEW_MS + 1000)),
                now
            )
            .is_err()
        );
        // A keyless friend's unsigned advert is accepted, marked unsigned.
        assert!(!check("bob", None, &raw(&advert(now)), now).unwrap().signed);
    }

    /// The typed advert is the JSON the untyped one was: the same members, signed over the
    /// same canonical text (a friend's unknown members count for its signature too).
    #[test]
    fn the_typed_advert_keeps_its_bytes() {
        let now = 1_785_150_000_000;
        let a = serde_json::to_value(advert(now)).unwrap();
        assert_eq!(
            a,
            json!({"protocolVersion": 1, "name": "bob", "description": "db person",
                "tags": ["postgres"], "workspace": "shop", "updatedAt": clock::iso8601(now),
                "sessions": [{"id": "b1", "workspace": "shop", "createdAt": 1, "updatedAt": 2,
                "status": "idle"}]})
        );
        let k = key();
        let public = k.verifying_key().to_bytes();
        let mut extra = a.clone();
        extra["sessions"][0]["title"] = json!("kept for the signature");
        let text = canon::canonical_json(&extra).unwrap();
        let mut signed = extra.clone();
        signed["publicKey"] = json!(canon::sign_of(&public));
        signed["signature"] = json!(canon::b64url(&k.sign(text.as_bytes()).to_bytes()));
        let ok = check("bob", Some(&public), &raw(&signed), now).unwrap();
        assert_eq!(
            ok.sessions[0].title.as_deref(),
            Some("kept for the signature")
        );
        let ours = sign(advert(now), &public, |m| {
            canon::b64url(&k.sign(m).to_bytes())
        });
        let text = canon::canonical_json(&a).unwrap();
        assert_eq!(
            ours.signature.unwrap(),
            canon::b64url(&k.sign(text.as_bytes()).to_bytes())
        );
    }

    #[test]
    fn received_adverts_are_bounded_and_stripped() {
        let now = 1_785_150_000_000;
        let mut a = serde_json::to_value(advert(now)).unwrap();
        a["description"] = json!("x".repeat(ASK_DESCRIPTION_CHARS_MAX + 1));
        a["tags"] = json!(vec!["t"; 100]);
        a["extra"] = json!("dropped");
        a["sessions"] = json!(vec![
            json!({"id": "s", "secret": "no", "topics": ["a","b","c","d","e"]});
            50
        ]);
        let c = check("bob", None, &raw(&a), now).unwrap();
        assert_eq!(c.description, "");
        assert_eq!(c.tags.len(), ASK_TAGS_MAX);
        assert!(serde_json::to_value(&c).unwrap().get("extra").is_none());
        let sessions = c.sessions;
        assert_eq!(sessions.len(), ADVERT_SESSIONS_MAX);
        assert!(
            serde_json::to_value(&sessions[0])
                .unwrap()
                .get("secret")
                .is_none()
        );
        assert_eq!(sessions[0].topics.len(), 4);
        // A session or an advert that is not an object is not one.
        a["sessions"] = json!([["s"], {"id": "t"}]);
        let c = check("bob", None, &raw(&a), now).unwrap();
        assert_eq!(c.sessions.len(), 1);
        assert_eq!(
            check("bob", None, &raw(&json!([1, "bob"])), now).unwrap_err(),
            "advert is not a JSON object"
        );
    }

    #[test]
    fn roster_records_and_forgets() {
        let r = Roster::new(None);
        let friends = vec![
            Watched {
                name: "bob".into(),
                key: None,
            },
            Watched {
                name: "eve".into(),
                key: None,
            },
        ];
        let now = clock::now_ms();
        let fetch = move |name: &str| -> Result<Box<RawValue>, String> {
            if name == "bob" {
                Ok(raw(&advert(now)))
            } else {
                Err("connection refused".into())
            }
        };
        r.refresh(&friends, &fetch, &|| false);
        let s = r.snapshot();
        assert!(s["bob"].reachable() && s["bob"].advert_for(None).is_some());
        let other = [1u8; 32];
        assert!(
            s["bob"].advert_for(Some(&other)).is_none(),
            "checked without that pin"
        );
        assert!(!s["eve"].reachable() && s["eve"].last_error.is_some());
        r.refresh(&friends[..1], &fetch, &|| false);
        assert_eq!(r.snapshot().len(), 1);
    }
}
