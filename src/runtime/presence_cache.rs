//! What a root knows about other instances' presence: parsed presence records reused while
//! unchanged on disk, and advertisements looked up by instance for a short time (presence is a
//! hint; a failed connect or handshake forgets the entry and re-reads it).

use crate::config::Limits;
use crate::config::internal::ADVERTS_MAX;
use crate::error::{Code, Error, Result};
use crate::paths::Namespace;
use crate::presence;
use crate::transport::Target;
use crate::{clock, identity};
use parking_lot::Mutex;
use std::collections::HashMap;

/// How long a looked-up advertisement is reused.
const ADVERT_TTL_MS: u128 = 1_000;

pub struct PresenceCache {
    ns: Namespace,
    limits: Limits,
    /// Parsed presence records, reused while unchanged on disk.
    pub files: presence::ReadCache,
    /// Recently looked-up advertisements by instance.
    adverts: Mutex<HashMap<String, (std::time::Instant, Option<presence::Advertisement>)>>,
}

impl PresenceCache {
    pub fn new(ns: Namespace, limits: Limits) -> PresenceCache {
        PresenceCache {
            ns,
            limits,
            files: presence::ReadCache::default(),
            adverts: Mutex::new(HashMap::new()),
        }
    }

    /// The live advertisement of another instance (cached for a second).
    pub fn advertisement_of(&self, instance_id: &str) -> Option<presence::Advertisement> {
        if let Some((at, ad)) = self.adverts.lock().get(instance_id)
            && at.elapsed().as_millis() < ADVERT_TTL_MS
        {
            return ad.clone();
        }
        let ad = self.read_advertisement(instance_id);
        let mut cache = self.adverts.lock();
        if cache.len() >= ADVERTS_MAX {
            cache.retain(|_, (at, _)| at.elapsed().as_millis() < ADVERT_TTL_MS);
        }
        if cache.len() < ADVERTS_MAX {
            cache.insert(
                instance_id.to_string(),
                (std::time::Instant::now(), ad.clone()),
            );
        }
        ad
    }

    /// Forgets a cached advertisement after a failed delivery.
    pub fn forget_advertisement(&self, instance_id: &str) {
        self.adverts.lock().remove(instance_id);
    }

    /// The live advertisement of another instance, found by its instance-qualified file name.
    fn read_advertisement(&self, instance_id: &str) -> Option<presence::Advertisement> {
        if !identity::is_valid_id(instance_id) {
            return None;
        }
        let dir = self.ns.active_agents();
        let suffix = format!(".{instance_id}.json");
        let names: Vec<String> = std::fs::read_dir(&dir)
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(&suffix))
            .take(8)
            .collect();
        let now = clock::now_ms();
        names
            .iter()
            .map(|n| presence::read_one(&dir, n, &self.limits, now))
            .filter(|e| e.is_live())
            .filter_map(|e| e.advert)
            .find(|ad| ad.instance_id == instance_id)
    }

    /// Where to reach another instance: `TARGET_ENDED` when it is no longer advertised.
    pub fn target_of_instance(&self, instance_id: &str) -> Result<Target> {
        let ad = self.advertisement_of(instance_id).ok_or_else(|| {
            Error::new(
                Code::TargetEnded,
                format!("instance {instance_id} is no longer advertised"),
            )
        })?;
        let public_key = identity::parse_spki_b64(&ad.public_key)
            .ok_or_else(|| Error::new(Code::AuthFailed, "advertised public key is malformed"))?;
        Ok(Target {
            instance_id: ad.instance_id.clone(),
            endpoint: self.ns.endpoint_path(&ad.endpoint)?,
            public_key,
        })
    }
}
