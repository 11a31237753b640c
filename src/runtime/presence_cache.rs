//! What a root knows about other instances' presence: parsed presence records reused while
//! unchanged on disk, and instances looked up for a short time (presence is a hint; a failed
//! connect or handshake forgets the entry and re-reads it), classified live, silent, gone or
//! unknown (`Reach`): only evidence — the record removed, or its process provably gone — makes
//! an incarnation gone; age alone never does.

use crate::config::Limits;
use crate::config::internal::ADVERTS_MAX;
use crate::config::internal::{
    ADVERT_TTL_MS, MTIME_SETTLED_MS, NAME_RECHECK_MS, WHOLE_SECOND_MTIME_SETTLED_MS,
};
use crate::error::{Code, Error, Result};
use crate::paths::Namespace;
use crate::presence;
use crate::process::Probe;
use crate::transport::Target;
use crate::{clock, identity};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

pub struct PresenceCache {
    ns: Namespace,
    limits: Limits,
    /// Parsed presence records, reused while unchanged on disk.
    files: presence::ReadCache,
    /// Recently looked-up instances.
    adverts: Mutex<HashMap<String, CachedReach>>,
    /// Recent resolutions of a target name, valid while the presence directory is unchanged.
    names: Mutex<HashMap<String, CachedName>>,
    /// The presence directory's mtime as last read, and when (see [`NAME_RECHECK_MS`]).
    dir_mtime: Mutex<Option<(std::time::Instant, Option<std::time::SystemTime>)>>,
    /// Advertised public keys (SPKI base64) already checked to be curve points, and their
    /// bytes: the check decompresses the point (tens of microseconds), which every delivery
    /// would otherwise repeat for the same record. Keyed by text another root wrote, so the
    /// map keeps the default (SipHash) hasher.
    keys: Mutex<HashMap<String, [u8; 32]>>,
    /// The target last built from each instance's record, with the record it was built from:
    /// every delivery needs it, and building it joins the endpoint path and looks the key up.
    /// Valid while the lookup still returns that very record (`Arc::ptr_eq`): the target is a
    /// function of the record alone.
    targets: Mutex<HashMap<String, BuiltTarget>>,
}

/// A target and the record it was built from.
type BuiltTarget = (Arc<presence::Advertisement>, Arc<Target>);

/// A resolved target name: the presence directory's mtime it was read under, when, and the
/// target (peerId, instanceId, runId).
type CachedName = (
    std::time::SystemTime,
    std::time::Instant,
    crate::messaging::TargetRef,
);

/// Whether the directory mtime `mtime`, read at `now`, differs from the stamp of every change
/// made after `now` (see [`MTIME_SETTLED_MS`]).
fn mtime_settled(mtime: std::time::SystemTime, now: std::time::SystemTime) -> bool {
    let whole_second = mtime
        .duration_since(std::time::UNIX_EPOCH)
        .is_ok_and(|d| d.subsec_nanos() == 0);
    let need = if whole_second {
        WHOLE_SECOND_MTIME_SETTLED_MS
    } else {
        MTIME_SETTLED_MS
    };
    now.duration_since(mtime)
        .is_ok_and(|age| age.as_millis() >= need)
}

/// A looked-up instance: when, what it is, and the sessionId its record states.
type CachedReach = (std::time::Instant, Reach, Option<String>);

/// What a sender knows about another instance, from its presence record and process evidence.
/// A record is shared (`Arc`): every send looks its target up, and a copy of the whole record
/// per lookup was a tenth of a sender's instructions.
#[derive(Clone, Debug)]
pub enum Reach {
    /// Current record.
    Live(Arc<presence::Advertisement>),
    /// The record is there but has not been refreshed since the given time, and nothing
    /// proves its process gone: stopped, suspended or slow. Still the same incarnation.
    Silent(Arc<presence::Advertisement>, String),
    /// Provably ended (the reason says how): its owner removed the record or its process no
    /// longer runs.
    Gone(String),
    /// Nothing can be concluded now (unreadable record or directory).
    Unknown(String),
}

impl PresenceCache {
    pub fn new(ns: Namespace, limits: Limits) -> PresenceCache {
        PresenceCache {
            ns,
            limits,
            files: presence::ReadCache::default(),
            adverts: Mutex::new(HashMap::new()),
            names: Mutex::new(HashMap::new()),
            dir_mtime: Mutex::new(None),
            keys: Mutex::new(HashMap::new()),
            targets: Mutex::new(HashMap::new()),
        }
    }

    /// The parsed presence records, reused while their files are unchanged.
    pub fn files(&self) -> &presence::ReadCache {
        &self.files
    }

    /// The key an advert's `publicKey` names, when it is a valid Ed25519 point; checked once
    /// per distinct text while it stays among the last `ADVERTS_MAX` seen.
    pub fn public_key(&self, spki: &str) -> Option<[u8; 32]> {
        if let Some(key) = self.keys.lock().get(spki) {
            return Some(*key);
        }
        let key = identity::parse_spki_b64(spki)?;
        let mut keys = self.keys.lock();
        if keys.len() >= ADVERTS_MAX {
            keys.clear();
        }
        keys.insert(spki.to_string(), key);
        Some(key)
    }

    /// The presence directory's mtime: every record written, replaced or removed changes it.
    pub fn directory_mtime(&self) -> Option<std::time::SystemTime> {
        std::fs::metadata(self.ns.active_agents())
            .and_then(|m| m.modified())
            .ok()
    }

    /// [`directory_mtime`](Self::directory_mtime) as read at most [`NAME_RECHECK_MS`] ago.
    /// An older value only makes a resolution read since then miss later (it was remembered
    /// under an mtime the directory no longer has): it never validates a newer one.
    pub fn recent_directory_mtime(&self) -> Option<std::time::SystemTime> {
        let now = std::time::Instant::now();
        let window = std::time::Duration::from_millis(NAME_RECHECK_MS);
        if let Some((at, mtime)) = *self.dir_mtime.lock()
            && now.saturating_duration_since(at) < window
        {
            return mtime;
        }
        let mtime = self.directory_mtime();
        *self.dir_mtime.lock() = Some((now, mtime));
        mtime
    }

    /// A resolution of `name` read while the presence directory had mtime `mtime`, reused
    /// for at most a heartbeat: no record has changed since, so the directory would say the
    /// same (delivery failures forget it, see `forget_advertisement`).
    pub fn cached_name(
        &self,
        name: &str,
        mtime: Option<std::time::SystemTime>,
    ) -> Option<crate::messaging::TargetRef> {
        let mtime = mtime?;
        let names = self.names.lock();
        let (at_mtime, at, t) = names.get(name)?;
        (*at_mtime == mtime && at.elapsed().as_millis() < u128::from(self.limits.heartbeat_ms))
            .then(|| t.clone())
    }

    /// Remembers a resolution read under `mtime`, when that mtime has settled.
    pub fn remember_name(
        &self,
        name: &str,
        mtime: Option<std::time::SystemTime>,
        t: &crate::messaging::TargetRef,
    ) {
        let Some(mtime) = mtime else { return };
        if !mtime_settled(mtime, std::time::SystemTime::now()) {
            return;
        }
        let mut names = self.names.lock();
        if names.len() >= ADVERTS_MAX {
            names.clear();
        }
        names.insert(
            name.to_string(),
            (mtime, std::time::Instant::now(), t.clone()),
        );
    }

    /// The live advertisement of another instance (cached for a second).
    pub fn advertisement_of(&self, instance_id: &str) -> Option<Arc<presence::Advertisement>> {
        match self.reach_of(instance_id) {
            Reach::Live(ad) => Some(ad),
            _ => None,
        }
    }

    /// What presence and process evidence say about another instance (cached for a second).
    pub fn reach_of(&self, instance_id: &str) -> Reach {
        // A hit copies only the reach (an `Arc`), not the sessionId too.
        if let Some((at, reach, _)) = self.adverts.lock().get(instance_id)
            && at.elapsed().as_millis() < ADVERT_TTL_MS
        {
            return reach.clone();
        }
        self.reach_and_session(instance_id).0
    }

    /// The sessionId another instance's presence record states (the record its handshake key
    /// is verified against), when it has a readable record.
    pub fn session_of(&self, instance_id: &str) -> Option<String> {
        self.reach_and_session(instance_id).1
    }

    /// [`reach_of`](Self::reach_of) and [`session_of`](Self::session_of) from one lookup.
    pub fn reach_and_session(&self, instance_id: &str) -> (Reach, Option<String>) {
        if let Some((at, reach, session)) = self.adverts.lock().get(instance_id)
            && at.elapsed().as_millis() < ADVERT_TTL_MS
        {
            return (reach.clone(), session.clone());
        }
        let (reach, session) = self.read_reach(instance_id);
        let mut cache = self.adverts.lock();
        if cache.len() >= ADVERTS_MAX {
            cache.retain(|_, (at, _, _)| at.elapsed().as_millis() < ADVERT_TTL_MS);
        }
        if cache.len() < ADVERTS_MAX {
            cache.insert(
                instance_id.to_string(),
                (std::time::Instant::now(), reach.clone(), session.clone()),
            );
        }
        (reach, session)
    }

    /// Forgets a cached advertisement after a failed delivery.
    pub fn forget_advertisement(&self, instance_id: &str) {
        self.adverts.lock().remove(instance_id);
        self.names
            .lock()
            .retain(|_, (_, _, t)| t.instance_id != instance_id);
    }

    /// Reads the record of another instance, found by its instance-qualified file name, and
    /// classifies it: live, silent (present but not refreshed; its process may be stopped) or
    /// gone (no record, or its process provably no longer runs).
    fn read_reach(&self, instance_id: &str) -> (Reach, Option<String>) {
        if !identity::is_valid_id(instance_id) {
            return (
                Reach::Gone(format!("{instance_id:?} is not an instance id")),
                None,
            );
        }
        let dir = self.ns.active_agents();
        let suffix = format!(".{instance_id}.json");
        let names: Vec<String> = match std::fs::read_dir(&dir) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(&suffix))
                .take(8)
                .collect(),
            Err(e) => {
                return (
                    Reach::Unknown(format!("cannot list {}: {e}", dir.display())),
                    None,
                );
            }
        };
        let now = clock::now_ms();
        let mut unreadable = None;
        for n in &names {
            let e = presence::read_one(&dir, n, &self.limits, now);
            let Some(ad) = e
                .advert
                .clone()
                .filter(|ad| ad.instance_id == instance_id)
                .map(Arc::new)
            else {
                if let presence::Liveness::Invalid(why) = &e.liveness {
                    unreadable = Some(why.clone());
                }
                continue;
            };
            let session = Some(e.session_id.clone()).filter(|s| identity::is_valid_id(s));
            if e.is_live() {
                return (Reach::Live(ad), session);
            }
            if let Some(why) = presence::process_gone(&e, &Probe::new()) {
                // What the record stated stays true of the incarnation after it ended.
                return (Reach::Gone(why), session);
            }
            let since = e
                .updated_at_ms
                .map_or_else(|| "an unreadable time".to_string(), clock::iso8601);
            return (Reach::Silent(ad, since), session);
        }
        let reach = match unreadable {
            // A record we cannot read proves nothing either way.
            Some(why) => Reach::Unknown(format!("its presence record is unreadable: {why}")),
            None => Reach::Gone(
                "its presence record was removed (by its owner on exit, or after its process was proven gone)"
                    .into(),
            ),
        };
        (reach, None)
    }

    /// Where to reach another instance. A silent record (no heartbeat, process still there) is
    /// still tried: only evidence that the incarnation is gone yields `TARGET_ENDED`.
    pub fn target_of_instance(&self, instance_id: &str) -> Result<Arc<Target>> {
        self.target_of(instance_id, self.reach_of(instance_id))
    }

    /// [`target_of_instance`](Self::target_of_instance) from `reach`, what
    /// [`reach_of`](Self::reach_of) said of `instance_id` just now.
    pub fn target_of(&self, instance_id: &str, reach: Reach) -> Result<Arc<Target>> {
        let ad = match reach {
            Reach::Live(ad) | Reach::Silent(ad, _) => ad,
            Reach::Gone(why) => {
                return Err(Error::new(
                    Code::TargetEnded,
                    format!("instance {instance_id} has ended: {why}"),
                ));
            }
            Reach::Unknown(why) => {
                return Err(Error::new(
                    Code::PeerOffline,
                    format!("instance {instance_id} cannot be reached now: {why}"),
                ));
            }
        };
        if let Some((seen, target)) = self.targets.lock().get(instance_id)
            && Arc::ptr_eq(seen, &ad)
        {
            return Ok(target.clone());
        }
        let public_key = self
            .public_key(&ad.public_key)
            .ok_or_else(|| Error::new(Code::AuthFailed, "advertised public key is malformed"))?;
        let target = Arc::new(Target {
            instance_id: ad.instance_id.clone(),
            endpoint: self.ns.endpoint_path(&ad.endpoint)?,
            public_key,
        });
        let mut targets = self.targets.lock();
        if targets.len() >= ADVERTS_MAX {
            targets.clear();
        }
        targets.insert(instance_id.to_string(), (ad, target.clone()));
        Ok(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messaging::TargetRef;
    use std::time::{Duration, SystemTime};

    #[test]
    fn a_name_is_reused_only_under_the_same_settled_directory_and_until_forgotten() {
        let tmp = crate::fsutil::TempDir::new("names").unwrap();
        let ns = Namespace::new(tmp.path().to_path_buf(), &crate::config::Config::default());
        let c = PresenceCache::new(ns, Limits::default());
        let t = TargetRef {
            peer_id: "p-a".into(),
            instance_id: "i-a".into(),
            run_id: None,
        };
        let old = SystemTime::now() - Duration::from_secs(1);
        c.remember_name("alice", Some(old), &t);
        assert_eq!(c.cached_name("alice", Some(old)), Some(t.clone()));
        // Any record written since changes the directory's mtime.
        assert_eq!(c.cached_name("alice", Some(SystemTime::now())), None);
        assert_eq!(c.cached_name("alice", None), None);
        // A directory changed a moment ago may change again within one coarse timestamp.
        let fresh = SystemTime::now();
        c.remember_name("bob", Some(fresh), &t);
        assert_eq!(c.cached_name("bob", Some(fresh)), None);
        // A failed delivery forgets every name of that instance.
        c.forget_advertisement("i-a");
        assert_eq!(c.cached_name("alice", Some(old)), None);
    }

    /// An mtime is trusted once two of the coarsest ticks passed, or, stamped in whole seconds
    /// (a filesystem without sub-second timestamps), once that span and a tick passed.
    #[test]
    fn an_mtime_settles_after_its_filesystems_granularity() {
        let now = SystemTime::UNIX_EPOCH + Duration::new(1_000_000, 500_000_000);
        let fine = |ago_ms: u64| now - Duration::from_millis(ago_ms) + Duration::from_nanos(1);
        assert!(!mtime_settled(fine(0), now));
        assert!(!mtime_settled(fine(MTIME_SETTLED_MS as u64 - 1), now));
        assert!(mtime_settled(fine(MTIME_SETTLED_MS as u64 + 1), now));
        let whole = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert!(
            !mtime_settled(whole, now),
            "500 ms after a whole-second stamp"
        );
        assert!(!mtime_settled(whole, whole + Duration::from_millis(2_999)));
        assert!(mtime_settled(whole, whole + Duration::from_millis(3_000)));
        // A stamp ahead of the clock (the clock was set back) is never trusted.
        assert!(!mtime_settled(now + Duration::from_secs(1), now));
    }

    /// The directory's mtime is read again once the last read is older than the window, and
    /// only then: a change inside the window is seen at the next read after it.
    #[test]
    fn the_directory_mtime_is_reused_only_within_the_recheck_window() {
        let tmp = crate::fsutil::TempDir::new("mtime").unwrap();
        let ns = Namespace::new(tmp.path().to_path_buf(), &crate::config::Config::default());
        std::fs::create_dir_all(ns.active_agents()).unwrap();
        let set = |t: SystemTime| {
            std::fs::File::open(ns.active_agents())
                .unwrap()
                .set_modified(t)
                .unwrap()
        };
        let c = PresenceCache::new(ns.clone(), Limits::default());
        let (t1, t2) = (
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000),
            SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000),
        );
        set(t1);
        assert_eq!(c.recent_directory_mtime(), Some(t1));
        set(t2);
        // A read that is still recent is reused (dated ahead so that no scheduling delay of
        // this test can age it).
        *c.dir_mtime.lock() = Some((
            std::time::Instant::now() + Duration::from_secs(60),
            Some(t1),
        ));
        assert_eq!(c.recent_directory_mtime(), Some(t1));
        // One older than the window is not.
        let old = std::time::Instant::now() - Duration::from_millis(NAME_RECHECK_MS);
        *c.dir_mtime.lock() = Some((old, Some(t1)));
        assert_eq!(c.recent_directory_mtime(), Some(t2));
        assert_eq!(c.directory_mtime(), Some(t2));
    }

    /// A target is rebuilt for a new record and reused, equal, only for the very record it
    /// was built from (a record read again is a new `Arc`, even with the same content).
    #[test]
    fn a_target_is_reused_only_for_the_record_it_was_built_from() {
        let tmp = crate::fsutil::TempDir::new("targets").unwrap();
        let ns = Namespace::new(tmp.path().to_path_buf(), &crate::config::Config::default());
        let c = PresenceCache::new(ns.clone(), Limits::default());
        let record = |endpoint: &str| {
            Arc::new(presence::Advertisement {
                protocol_version: 1,
                instance_id: "i-a".into(),
                peer_id: "p-a".into(),
                endpoint: endpoint.into(),
                public_key: identity::KeyPair::generate().spki_b64(),
                capabilities: Vec::new(),
                scope: String::new(),
                workspace: String::new(),
                repository: None,
                alias: "a".into(),
                runs: Vec::new(),
                process_start_time: None,
                boot_id: None,
                degraded: None,
            })
        };
        let first = record("peer-runtime/a.sock");
        let t1 = c.target_of("i-a", Reach::Live(first.clone())).unwrap();
        let again = c
            .target_of("i-a", Reach::Silent(first.clone(), "x".into()))
            .unwrap();
        assert!(Arc::ptr_eq(&t1, &again));
        let second = record("peer-runtime/b.sock");
        let t2 = c.target_of("i-a", Reach::Live(second.clone())).unwrap();
        assert_eq!(
            t2.endpoint,
            ns.endpoint_path("peer-runtime/b.sock").unwrap()
        );
        assert_eq!(
            Some(t2.public_key),
            identity::parse_spki_b64(&second.public_key)
        );
        assert_ne!(t1.endpoint, t2.endpoint);
        assert!(c.target_of("i-a", Reach::Gone("ended".into())).is_err());
    }

    /// The remembered key check answers exactly what the check itself does, the second time
    /// too, for valid points, encodings that are no curve point and text that is no SPKI;
    /// the memory stays bounded.
    #[test]
    fn a_checked_public_key_is_remembered_exactly() {
        let tmp = crate::fsutil::TempDir::new("keys").unwrap();
        let ns = Namespace::new(tmp.path().to_path_buf(), &crate::config::Config::default());
        let c = PresenceCache::new(ns, Limits::default());
        let mut texts: Vec<String> = (0..=255u8).map(|b| identity::spki_b64(&[b; 32])).collect();
        texts.push(identity::KeyPair::generate().spki_b64());
        texts.extend(["AAAA".to_string(), String::new(), "not base64!".to_string()]);
        let (mut valid, mut invalid) = (0, 0);
        for t in &texts {
            let want = identity::parse_spki_b64(t);
            assert_eq!(c.public_key(t), want, "{t}");
            assert_eq!(c.public_key(t), want, "{t} (remembered)");
            if want.is_some() {
                valid += 1
            } else {
                invalid += 1
            }
            assert!(c.keys.lock().len() <= ADVERTS_MAX);
        }
        assert!(valid > 0 && invalid > 0, "{valid} valid, {invalid} invalid");
    }
}
