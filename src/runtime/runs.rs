//! Child runs a root publishes: each has a runId and peerId, routes through the parent's
//! endpoint, inherits message/request capabilities (not `resource.control` unless delegated),
//! and is bounded by `publishedRuns`. Each live run has its own local secret: a connection
//! that proves it speaks for that run only. Retired runs are remembered (without their secret)
//! so later sends get `TARGET_ENDED` instead of `PEER_OFFLINE`.

use crate::error::{Code, Error, Result};
use crate::identity;
use crate::presence::RunAd;
use std::collections::{BTreeMap, VecDeque};
use zeroize::Zeroizing;

use crate::config::internal::RETIRED_REMEMBERED_MAX;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub run_id: String,
    pub peer_id: String,
    pub alias: String,
    pub capabilities: Vec<String>,
}

#[derive(Default)]
pub struct Runs {
    live: BTreeMap<String, Run>,
    /// The local secret of each live run, wiped from memory when the run retires.
    secrets: BTreeMap<String, Zeroizing<[u8; 32]>>,
    retired: VecDeque<Run>,
}

impl Runs {
    /// Publishes a new run of `instance_id` with its local `secret`, bounded by `max_live`.
    pub fn publish(
        &mut self,
        instance_id: &str,
        alias: &str,
        root_caps: &[String],
        delegate_control: bool,
        max_live: u64,
        secret: Zeroizing<[u8; 32]>,
    ) -> Result<Run> {
        identity::validate_alias(alias)?;
        if self.live.len() as u64 >= max_live {
            return Err(Error::new(
                Code::QueueFull,
                format!("this root already publishes {max_live} live runs (publishedRuns)"),
            ));
        }
        let run_id = identity::new_run_id();
        let capabilities = root_caps
            .iter()
            .filter(|c| delegate_control || c.as_str() != "resource.control")
            .cloned()
            .collect();
        let run = Run {
            peer_id: identity::peer_id(instance_id, Some(&run_id)),
            run_id: run_id.clone(),
            alias: alias.to_string(),
            capabilities,
        };
        self.secrets.insert(run_id.clone(), secret);
        self.live.insert(run_id, run.clone());
        Ok(run)
    }

    /// Retires a live run; its peerId then answers `TARGET_ENDED`.
    pub fn retire(&mut self, run_id: &str) -> Result<Run> {
        let run = self
            .live
            .remove(run_id)
            .ok_or_else(|| Error::new(Code::NotFound, "no such live run"))?;
        self.secrets.remove(run_id);
        self.retired.push_back(run.clone());
        while self.retired.len() > RETIRED_REMEMBERED_MAX {
            self.retired.pop_front();
        }
        Ok(run)
    }

    /// The live run whose secret `secret` is; every candidate is compared in full, in
    /// constant time, so timing tells nothing about which bytes matched.
    pub fn by_secret(&self, secret: &[u8; 32]) -> Option<String> {
        let mut found = None;
        for (run_id, s) in &self.secrets {
            if crate::identity::ct_eq(s.as_slice(), secret) {
                found = Some(run_id.clone());
            }
        }
        found
    }

    pub fn get(&self, run_id: &str) -> Option<&Run> {
        self.live.get(run_id)
    }

    pub fn by_peer_or_alias(&self, name: &str) -> Vec<&Run> {
        self.live
            .values()
            .filter(|r| r.peer_id == name || r.alias == name)
            .collect()
    }

    pub fn is_retired_peer(&self, peer_id: &str) -> bool {
        self.retired.iter().any(|r| r.peer_id == peer_id)
    }

    pub fn live(&self) -> impl Iterator<Item = &Run> {
        self.live.values()
    }

    /// The presence form of the live runs.
    pub fn ads(&self) -> Vec<RunAd> {
        self.live
            .values()
            .map(|r| RunAd {
                run_id: r.run_id.clone(),
                peer_id: r.peer_id.clone(),
                alias: r.alias.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_inherit_without_control_and_are_bounded() {
        let mut runs = Runs::default();
        let caps: Vec<String> = ["message.send", "resource.control"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let secret = || Zeroizing::new([5u8; 32]);
        let r = runs
            .publish("i-1", "helper", &caps, false, 1, secret())
            .unwrap();
        assert_eq!(r.capabilities, vec!["message.send".to_string()]);
        assert_eq!(runs.by_secret(&[5; 32]), Some(r.run_id.clone()));
        assert_eq!(runs.by_secret(&[6; 32]), None);
        assert_eq!(
            runs.publish("i-1", "two", &caps, true, 1, secret())
                .unwrap_err()
                .code,
            Code::QueueFull
        );
        runs.retire(&r.run_id).unwrap();
        assert!(runs.is_retired_peer(&r.peer_id));
        assert_eq!(
            runs.by_secret(&[5; 32]),
            None,
            "a retired run's secret is gone"
        );
        let d = runs
            .publish("i-1", "two", &caps, true, 1, secret())
            .unwrap();
        assert!(d.capabilities.contains(&"resource.control".to_string()));
    }
}
