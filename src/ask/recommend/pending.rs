//! Recommendations waiting for the owner: a private file `recommendations.json` (0600) in the
//! ask state directory, changed only under its lock. Each entry holds the verified card, who
//! recommended it and through whom, and a one-time decision token. The token never leaves this
//! machine's owner: the CLI reads the file directly, and `POST /friend/decision` compares a
//! presented token in constant time *before* anything is consumed; an entry is removed only
//! after its decision was carried out.

use super::Via;
use crate::config::internal::{
    RECOMMEND_FILE_BYTES_MAX, RECOMMEND_LOCK_WAIT_MS, RECOMMEND_PENDING_MAX,
    RECOMMEND_PENDING_TTL_MS,
};
use crate::error::{Code, Error, Result};
use crate::{clock, fsutil, identity, sanitize};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The refusal of a wrong decision token.
pub const INVALID_TOKEN: &str = "invalid decision token";

/// One recommendation as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    pub rec_id: String,
    /// One-time decision token (base64url of 32 random bytes); owner only.
    pub token: String,
    /// The friend we asked.
    pub from: String,
    /// Agents the request travelled through, as the answer claimed (cleaned again when the
    /// file is read: it may predate the bounds, or be edited).
    #[serde(default)]
    pub via: Via,
    /// The card string, verified when stored and again before it is added.
    pub card: String,
    /// The card's key (its sign), so one key waits only once.
    pub public_key: String,
    /// The topic we asked about, if any.
    #[serde(default)]
    pub topic: Option<String>,
    pub created_at_ms: u64,
}

impl Pending {
    /// What the owner sees (no token). Peer-supplied text stays raw here; front ends sanitize.
    pub fn view(&self, now_ms: u64) -> PendingShown<'_> {
        PendingShown {
            rec_id: &self.rec_id,
            from: &self.from,
            via: &self.via,
            topic: self.topic.as_deref(),
            peer: crate::ask::card::parse(&self.card)
                .map(|(c, _)| c.peer_view())
                .ok(),
            card: &self.card,
            created_at: clock::iso8601(self.created_at_ms),
            expires_in_ms: self
                .created_at_ms
                .saturating_add(RECOMMEND_PENDING_TTL_MS)
                .saturating_sub(now_ms),
        }
    }
}

/// A [`Pending`] as the owner sees it: `peer` is `null` when the card no longer parses.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingShown<'a> {
    pub rec_id: &'a str,
    pub from: &'a str,
    pub via: &'a Via,
    pub topic: Option<&'a str>,
    pub peer: Option<crate::ask::card::PeerView>,
    pub card: &'a str,
    pub created_at: String,
    pub expires_in_ms: u64,
}

#[derive(Default, Serialize, Deserialize)]
struct File {
    #[serde(default)]
    pending: Vec<Pending>,
}

/// The owner's decision on one recommendation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Add,
    Decline,
}

impl Decision {
    pub fn parse(s: &str) -> Option<Decision> {
        match s {
            "add" => Some(Decision::Add),
            "decline" => Some(Decision::Decline),
            _ => None,
        }
    }
}

/// The recommendations file of one ask state directory.
pub struct Store {
    path: PathBuf,
    lock: PathBuf,
}

/// Equal-length comparison of two secrets whose time does not depend on where they differ or
/// on their lengths (both are hashed first).
pub fn secret_eq(a: &str, b: &str) -> bool {
    let (x, y) = (
        identity::sha256_hex(&[a.as_bytes()]),
        identity::sha256_hex(&[b.as_bytes()]),
    );
    let diff = x
        .bytes()
        .zip(y.bytes())
        .fold(0u8, |acc, (p, q)| acc | (p ^ q));
    diff == 0 && !a.is_empty()
}

impl Store {
    /// The store in `dir` (created 0700 on first write).
    pub fn new(dir: &Path) -> Store {
        Store {
            path: dir.join("recommendations.json"),
            lock: dir.join("recommendations.lock"),
        }
    }

    fn read(&self, now_ms: u64) -> Result<File> {
        let bytes = match fsutil::read_private_bounded(&self.path, RECOMMEND_FILE_BYTES_MAX) {
            Ok(b) => b,
            Err(e) if e.code == Code::NotFound => return Ok(File::default()),
            Err(e) => return Err(e),
        };
        let mut file: File = serde_json::from_slice(&bytes).map_err(|e| {
            Error::new(
                Code::RecoveryRequired,
                format!(
                    "{} is not a recommendations file ({e}); move it aside",
                    self.path.display()
                ),
            )
        })?;
        file.pending
            .retain(|p| p.created_at_ms.saturating_add(RECOMMEND_PENDING_TTL_MS) >= now_ms);
        Ok(file)
    }

    fn write(&self, file: &File) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(file)
            .map_err(|e| Error::new(Code::Io, format!("cannot encode recommendations: {e}")))?;
        fsutil::atomic_write(&self.path, &bytes, fsutil::Durability::Durable)
    }

    fn locked(&self) -> Result<fsutil::FileLock> {
        if let Some(dir) = self.path.parent() {
            fsutil::ensure_private_dir(dir)?;
        }
        fsutil::FileLock::acquire(&self.lock, RECOMMEND_LOCK_WAIT_MS)
    }

    /// Recommendations still waiting, oldest first.
    pub fn list(&self, now_ms: u64) -> Result<Vec<Pending>> {
        Ok(self.read(now_ms)?.pending)
    }

    /// Stores a verified recommendation. The same key already waiting is not stored twice: the
    /// waiting entry is returned.
    pub fn add(
        &self,
        from: &str,
        via: Via,
        card: &str,
        public_key: &str,
        topic: Option<String>,
        now_ms: u64,
    ) -> Result<Pending> {
        let _lock = self.locked()?;
        let mut file = self.read(now_ms)?;
        if let Some(p) = file.pending.iter().find(|p| p.public_key == public_key) {
            return Ok(p.clone());
        }
        if file.pending.len() >= RECOMMEND_PENDING_MAX {
            return Err(Error::new(
                Code::QueueFull,
                format!(
                    "{RECOMMEND_PENDING_MAX} recommendations are already waiting; decide some with 'peer ask friends decide'"
                ),
            ));
        }
        let mut secret = [0u8; 32];
        identity::random_bytes(&mut secret);
        let p = Pending {
            rec_id: format!("rec-{:016x}", identity::random_u64()),
            token: crate::ask::canon::b64url(&secret),
            from: from.to_string(),
            via,
            card: card.to_string(),
            public_key: public_key.to_string(),
            topic,
            created_at_ms: now_ms,
        };
        file.pending.push(p.clone());
        self.write(&file)?;
        Ok(p)
    }

    /// Carries out the owner's decision on `rec_id`. With `token` (the HTTP path) it must match
    /// in constant time; without, the caller is the owner reading this private file. Every
    /// check — the id, the token, then `apply` (which re-verifies and adds the card) — happens
    /// before the entry is removed, so a refused decision consumes nothing and can be retried.
    pub fn decide<T>(
        &self,
        rec_id: &str,
        token: Option<&str>,
        now_ms: u64,
        apply: impl FnOnce(&Pending) -> Result<T>,
    ) -> Result<T> {
        let _lock = self.locked()?;
        let mut file = self.read(now_ms)?;
        let i = position(&file.pending, rec_id, token.is_none())?;
        if let Some(t) = token
            && !secret_eq(t, &file.pending[i].token)
        {
            return Err(Error::new(Code::AuthFailed, INVALID_TOKEN));
        }
        let out = apply(&file.pending[i])?;
        file.pending.remove(i);
        self.write(&file)?;
        Ok(out)
    }
}

/// Where `rec_id` is in `pending`. The owner (`prefix_ok`, no token) may give a unique prefix
/// of the id, with or without its `rec-`, as message ids are named; the HTTP path names it
/// exactly.
fn position(pending: &[Pending], rec_id: &str, prefix_ok: bool) -> Result<usize> {
    use crate::messaging::types::{ambiguous_prefix, ids_matching};
    let ids = pending.iter().map(|p| p.rec_id.as_str());
    let hits = match (ids.clone().any(|i| i == rec_id), prefix_ok) {
        (true, _) => vec![rec_id],
        (false, false) => Vec::new(),
        (false, true) if rec_id.starts_with("rec-") => ids_matching(rec_id, ids),
        (false, true)
            if rec_id.chars().count() >= crate::config::internal::MESSAGE_ID_PREFIX_MIN =>
        {
            ids_matching(&format!("rec-{rec_id}"), ids)
        }
        (false, true) => Vec::new(),
    };
    match hits.as_slice() {
        [one] => pending
            .iter()
            .position(|p| p.rec_id == *one)
            .ok_or_else(|| Error::new(Code::NotFound, "the recommendation vanished")),
        [] => Err(Error::new(
            Code::NotFound,
            format!(
                "no recommendation {:?} is waiting (expired or decided); see 'peer ask friends pending'",
                sanitize::line(rec_id, 40)
            ),
        )),
        several => Err(ambiguous_prefix(rec_id, several, "recommendation")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_names_a_recommendation_by_a_unique_prefix() {
        let rec = |id: &str| Pending {
            rec_id: id.into(),
            token: "t".into(),
            from: "bob".into(),
            via: Via::default(),
            card: String::new(),
            public_key: String::new(),
            topic: None,
            created_at_ms: 0,
        };
        let list = [rec("rec-66cc680b00000001"), rec("rec-66cc77aa00000002")];
        assert_eq!(position(&list, "rec-66cc680b00000001", false).unwrap(), 0);
        assert_eq!(position(&list, "rec-66cc77", true).unwrap(), 1);
        assert_eq!(position(&list, "66cc680b", true).unwrap(), 0);
        let e = position(&list, "66cc6", false).unwrap_err();
        assert_eq!(e.code, Code::NotFound);
        // The HTTP path (a token) names the id exactly; a short or shared prefix is refused.
        assert_eq!(
            position(&list, "rec-66cc680b", false).unwrap_err().code,
            Code::NotFound
        );
        assert_eq!(
            position(&list, "66cc", true).unwrap_err().code,
            Code::NotFound
        );
        let e = position(&list, "rec-66cc", true).unwrap_err();
        assert_eq!(e.code, Code::AmbiguousTarget, "{}", e.message);
    }

    #[test]
    fn secrets_compare_by_content_only() {
        assert!(secret_eq("abc", "abc"));
        assert!(!secret_eq("abc", "abd"));
        assert!(!secret_eq("abc", "abcd"));
        assert!(!secret_eq("", ""));
    }

    #[test]
    fn decisions_are_checked_before_anything_is_consumed() {
        let dir = std::env::temp_dir().join(format!(
            "pw-pending-{}-{:x}",
            std::process::id(),
            identity::random_u64()
        ));
        let store = Store::new(&dir);
        let p = store
            .add("bob", Via::default(), "card-a", "k1", None, 1000)
            .unwrap();
        // Same key again: the waiting entry, not a second one.
        assert_eq!(
            store
                .add("carol", Via::default(), "card-a", "k1", None, 1001)
                .unwrap()
                .rec_id,
            p.rec_id
        );
        let wrong = store.decide(&p.rec_id, Some("nope"), 1002, |_| Ok(()));
        assert_eq!(wrong.unwrap_err().code, Code::AuthFailed);
        let failed: Result<()> = store.decide(&p.rec_id, Some(&p.token), 1003, |_| {
            Err(Error::new(Code::Usage, "x"))
        });
        assert_eq!(failed.unwrap_err().code, Code::Usage);
        assert_eq!(
            store.list(1004).unwrap().len(),
            1,
            "a refused decision burns nothing"
        );
        store
            .decide(&p.rec_id, Some(&p.token), 1005, |_| Ok(()))
            .unwrap();
        assert!(store.list(1006).unwrap().is_empty());
        let again = store.decide(&p.rec_id, Some(&p.token), 1007, |_| Ok(()));
        assert_eq!(again.unwrap_err().code, Code::NotFound);
        // Expiry.
        store
            .add("bob", Via::default(), "card-b", "k2", None, 2000)
            .unwrap();
        assert!(
            store
                .list(2000 + RECOMMEND_PENDING_TTL_MS + 1)
                .unwrap()
                .is_empty()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
