//! Replay memory of signed requests: one bounded nonce set per friend, so one friend's flood
//! can fill only its own, and each set mirrored in an append-only file in the namespace
//! (`<home>/ask/nonces/<friend>`, 0600 in a 0700 directory) that is fsync'd before the
//! request is answered, so a captured request is refused again after a restart. A nonce is
//! kept for twice the signature window after it was first seen: past that its timestamp is
//! refused as stale anyway. The file is rewritten with only live entries when it has grown to
//! twice the set's bound, so it stays bounded too.

use super::super::http::ApiError;
use crate::config::internal::{REPLAY_FILE_BYTES_MAX, REPLAY_KEEP_MS, REPLAY_PER_FRIEND_MAX};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

pub type Nonce = [u8; crate::config::internal::ASK_NONCE_BYTES];

/// One friend's remembered nonces, oldest first, and its file.
#[derive(Default)]
struct Set {
    seen: HashSet<Nonce>,
    order: VecDeque<(u64, Nonce)>,
    /// Lines in the file (live or not), to know when to compact it.
    lines: usize,
}

impl Set {
    fn expire(&mut self, now_ms: u64) {
        while let Some((at, n)) = self.order.front().copied() {
            if now_ms.saturating_sub(at) <= REPLAY_KEEP_MS {
                break;
            }
            self.order.pop_front();
            self.seen.remove(&n);
        }
    }

    fn push(&mut self, at: u64, n: Nonce) {
        if self.seen.insert(n) {
            self.order.push_back((at, n));
        }
    }
}

/// Every friend's set; `dir` is `None` in unit tests (memory only).
pub struct Replay {
    dir: Option<PathBuf>,
    sets: Mutex<HashMap<String, Arc<Mutex<Set>>>>,
}

impl Replay {
    pub fn new(dir: Option<PathBuf>) -> Replay {
        Replay {
            dir,
            sets: Mutex::new(HashMap::new()),
        }
    }

    /// Records `nonce` for `friend` (a configured name, so the map is bounded by the peers):
    /// 403 when it was seen, 429 when the friend's set is full, 500 when it cannot be made
    /// durable (then the request is refused rather than left replayable).
    pub fn insert(&self, friend: &str, nonce: Nonce, now_ms: u64) -> Result<(), ApiError> {
        let set = self.set(friend, now_ms);
        let mut set = set.lock();
        set.expire(now_ms);
        if set.seen.contains(&nonce) {
            return Err(replayed());
        }
        if set.seen.len() >= REPLAY_PER_FRIEND_MAX {
            return Err(ApiError::rate_limited(format!(
                "peer \"{friend}\" sent too many signed requests; retry later"
            )));
        }
        self.persist(friend, &mut set, now_ms, nonce)?;
        set.push(now_ms, nonce);
        Ok(())
    }

    /// Refuses a nonce already seen, keeping nothing: a replayed request is refused before it
    /// can spend its friend's rate budgets.
    pub fn check(&self, friend: &str, nonce: &Nonce, now_ms: u64) -> Result<(), ApiError> {
        let set = self.set(friend, now_ms);
        let mut set = set.lock();
        set.expire(now_ms);
        if set.seen.contains(nonce) {
            return Err(replayed());
        }
        Ok(())
    }

    /// The friend's set, loaded from its file on first use.
    fn set(&self, friend: &str, now_ms: u64) -> Arc<Mutex<Set>> {
        let mut sets = self.sets.lock();
        match sets.get(friend) {
            Some(s) => s.clone(),
            None => {
                let s = Arc::new(Mutex::new(self.load(friend, now_ms)));
                sets.insert(friend.to_string(), s.clone());
                s
            }
        }
    }

    fn path(&self, friend: &str) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(friend))
    }

    /// The friend's live nonces from its file (none when there is no file or it is unreadable:
    /// the signature window still bounds what could be replayed).
    fn load(&self, friend: &str, now_ms: u64) -> Set {
        let mut set = Set::default();
        let Some(path) = self.path(friend) else {
            return set;
        };
        let Ok(bytes) = crate::fsutil::read_private_bounded(&path, REPLAY_FILE_BYTES_MAX) else {
            return set;
        };
        for line in String::from_utf8_lossy(&bytes).lines() {
            set.lines += 1;
            let Some((at, n)) = line.split_once(' ') else {
                continue;
            };
            let at = at.parse::<u64>().unwrap_or(0);
            let n = super::super::canon::unb64url(n).and_then(|n| Nonce::try_from(n).ok());
            if let Some(n) = n
                && now_ms.saturating_sub(at) <= REPLAY_KEEP_MS
            {
                set.push(at, n);
            }
        }
        set
    }

    /// Appends the nonce to the friend's file and syncs it; compacts the file first when it
    /// has grown to twice the set's bound.
    fn persist(&self, friend: &str, set: &mut Set, now_ms: u64, n: Nonce) -> Result<(), ApiError> {
        let Some(path) = self.path(friend) else {
            return Ok(());
        };
        let fail = |e: crate::error::Error| {
            ApiError::internal(format!("cannot record the request's nonce: {}", e.message))
        };
        if let Some(dir) = &self.dir {
            crate::fsutil::ensure_private_dir(dir).map_err(fail)?;
        }
        let line = |at: u64, n: &Nonce| format!("{at} {}\n", super::super::canon::b64url(n));
        if set.lines >= 2 * REPLAY_PER_FRIEND_MAX {
            let mut text: String = set.order.iter().map(|(at, n)| line(*at, n)).collect();
            text.push_str(&line(now_ms, &n));
            crate::fsutil::atomic_write(&path, text.as_bytes(), crate::fsutil::Durability::Durable)
                .map_err(fail)?;
            set.lines = set.order.len() + 1;
            return Ok(());
        }
        let mut f = crate::fsutil::open_private_rw(&path).map_err(fail)?;
        let io = |e: std::io::Error| ApiError::internal(format!("cannot record the nonce: {e}"));
        let end = std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0)).map_err(io)?;
        f.write_all(line(now_ms, &n).as_bytes()).map_err(io)?;
        f.sync_data().map_err(io)?;
        if end == 0
            && let Some(dir) = &self.dir
        {
            // A new file's directory entry must be durable too.
            crate::fsutil::fsync_dir(dir).map_err(fail)?;
        }
        set.lines += 1;
        Ok(())
    }
}

fn replayed() -> ApiError {
    ApiError::forbidden("replayed request: nonce already seen")
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_785_150_000_000;

    #[test]
    fn one_friends_flood_fills_only_its_own_set() {
        let r = Replay::new(None);
        for i in 0..REPLAY_PER_FRIEND_MAX as u64 {
            let mut n = [0u8; 16];
            n[..8].copy_from_slice(&i.to_le_bytes());
            r.insert("eve", n, NOW).unwrap();
        }
        assert_eq!(r.insert("eve", [0xff; 16], NOW).unwrap_err().status, 429);
        r.insert("ada", [0xff; 16], NOW).unwrap();
        assert_eq!(r.insert("ada", [0xff; 16], NOW).unwrap_err().status, 403);
        // Old nonces leave with time.
        r.insert("eve", [0xff; 16], NOW + REPLAY_KEEP_MS + 1)
            .unwrap();
    }

    #[test]
    fn nonces_survive_a_restart_and_the_file_stays_bounded() {
        let dir = crate::fsutil::TempDir::new("nonces").unwrap();
        let nonces = dir.join("nonces");
        let r = Replay::new(Some(nonces.clone()));
        r.insert("ada", [1; 16], NOW).unwrap();
        let again = Replay::new(Some(nonces.clone()));
        assert_eq!(
            again.insert("ada", [1; 16], NOW + 1).unwrap_err().status,
            403
        );
        // Past the keep time a nonce is forgotten (its timestamp is stale by then).
        let later = Replay::new(Some(nonces.clone()));
        later
            .insert("ada", [1; 16], NOW + REPLAY_KEEP_MS + 1)
            .unwrap();
        let r = Replay::new(Some(nonces.clone()));
        for i in 0..(3 * REPLAY_PER_FRIEND_MAX) as u64 {
            let mut n = [2u8; 16];
            n[..8].copy_from_slice(&i.to_le_bytes());
            // Spread over time so the set never fills.
            r.insert(
                "cy",
                n,
                NOW + i * (REPLAY_KEEP_MS / REPLAY_PER_FRIEND_MAX as u64 + 1),
            )
            .unwrap();
        }
        let len = std::fs::metadata(nonces.join("cy")).unwrap().len();
        assert!(len <= REPLAY_FILE_BYTES_MAX, "{len}");
    }
}
