//! The on-disk shape of one resource (`<coord>/peer-resources/<hash>.json`): canonical names,
//! the versioned policy, tickets, holders, adopted blockers, counters and the bounded event
//! journal, with the validation run right after every read and right before every write.
#![forbid(unsafe_code)]

use crate::config::internal::RESOURCE_NAME_CHARS_MAX;
use crate::error::{Code, Error, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::process::ProcessEvidence;

/// File format version of a resource file.
pub const RESOURCE_FORMAT: u32 = 1;

/// Trims and checks a resource name: not empty, at most 200 characters, no control characters.
pub fn canonical_name(raw: &str) -> Result<String> {
    let name = raw.trim();
    if name.is_empty() {
        return Err(Error::new(
            Code::Usage,
            "resource name is empty; name it, e.g. port:3000",
        ));
    }
    if name.chars().count() > RESOURCE_NAME_CHARS_MAX {
        return Err(Error::new(
            Code::Usage,
            format!(
                "resource name is over {RESOURCE_NAME_CHARS_MAX} characters; use a shorter name"
            ),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(Error::new(
            Code::Usage,
            "resource name contains control characters; remove them",
        ));
    }
    Ok(name.to_string())
}

/// The file stem of a resource: the first 32 hex digits of SHA-256 over the canonical name.
pub fn name_hash(canonical: &str) -> String {
    let digest = Sha256::digest(canonical.as_bytes());
    crate::identity::hex(&digest).chars().take(32).collect()
}

/// The acting principal as recorded in a resource file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Party {
    pub principal: String,
    pub display: String,
    pub evidence: ProcessEvidence,
}

/// The controller installed by `set_controller`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Controller {
    #[serde(flatten)]
    pub party: Party,
    pub since: u64,
}

/// The versioned policy: every change bumps `epoch`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub epoch: u64,
    pub capacity: u32,
    pub controller: Option<Controller>,
}

/// A waiting request, in FIFO order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    pub id: String,
    #[serde(flatten)]
    pub party: Party,
    pub requested_at: u64,
    pub epoch: u64,
}

/// A granted reservation. `admitted` turns true once a process runs under it (launch ledger);
/// until then it is an unused grant that a policy change revokes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub ticket: String,
    #[serde(flatten)]
    pub party: Party,
    pub token: u64,
    pub granted_at: u64,
    pub epoch: u64,
    pub admitted: bool,
}

/// An unused grant revoked by a policy change; kept (bounded) so its use answers STALE_POLICY.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revoked {
    pub ticket: String,
    pub token: u64,
    pub epoch: u64,
}

/// One journal entry; serialised as a `resource_update` event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub sequence: u64,
    pub kind: String,
    pub request: Option<String>,
    pub epoch: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub token: Option<u64>,
    pub at: u64,
    /// Who acted, recorded for operator overrides (the audit trail of a forced release).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub by: Option<String>,
}

/// Everything stored about one resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceState {
    pub version: u32,
    pub name: String,
    pub policy: Policy,
    pub tickets: Vec<Ticket>,
    pub holders: Vec<Holder>,
    /// Processes admitted under an earlier epoch, adopted so no policy change overlooks them.
    pub blockers: Vec<Holder>,
    pub revoked: Vec<Revoked>,
    pub next_ticket: u64,
    pub next_token: u64,
    pub sequence: u64,
    pub journal: Vec<Event>,
}

impl ResourceState {
    /// A fresh resource: automatic policy at epoch 1.
    pub fn new(name: &str, capacity: u32) -> ResourceState {
        ResourceState {
            version: RESOURCE_FORMAT,
            name: name.to_string(),
            policy: Policy {
                epoch: 1,
                capacity,
                controller: None,
            },
            tickets: Vec::new(),
            holders: Vec::new(),
            blockers: Vec::new(),
            revoked: Vec::new(),
            next_ticket: 1,
            next_token: 1,
            sequence: 0,
            journal: Vec::new(),
        }
    }

    /// Slots in use: grants plus adopted blockers.
    pub fn occupied(&self) -> usize {
        self.holders.len() + self.blockers.len()
    }

    /// Checks the checksum, parses and validates the bytes of a resource file; any failure is
    /// RECOVERY_REQUIRED.
    pub fn decode(bytes: &[u8], expect_name: Option<&str>) -> Result<ResourceState> {
        let body = super::seal::open(bytes).map_err(|b| recovery(b.describe()))?;
        let state: ResourceState = serde_json::from_slice(body)
            .map_err(|e| recovery(&format!("is not a valid resource file ({e})")))?;
        state.validate()?;
        if let Some(want) = expect_name.filter(|w| *w != state.name) {
            return Err(recovery(&format!(
                "names {:?}, not {:?}",
                crate::sanitize::line(&state.name, 60),
                want
            )));
        }
        Ok(state)
    }

    /// Serialises after validating, so a bad state never reaches the disk, and seals the bytes
    /// with their checksum.
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.validate()?;
        serde_json::to_vec(self)
            .map(|body| super::seal::seal(&body))
            .map_err(|e| Error::new(Code::Io, format!("cannot encode resource state: {e}")))
    }

    /// The invariants every transaction keeps.
    pub fn validate(&self) -> Result<()> {
        if self.version != RESOURCE_FORMAT {
            return Err(recovery(&format!(
                "has format version {}, expected {RESOURCE_FORMAT}",
                self.version
            )));
        }
        if canonical_name(&self.name).ok().as_deref() != Some(self.name.as_str()) {
            return Err(recovery("holds a name that is not canonical"));
        }
        if self.policy.capacity == 0 || self.policy.epoch == 0 {
            return Err(recovery("has capacity or epoch 0"));
        }
        let mut ids = std::collections::HashSet::new();
        let granted = self.holders.iter().chain(&self.blockers);
        for id in self
            .tickets
            .iter()
            .map(|t| &t.id)
            .chain(granted.clone().map(|h| &h.ticket))
        {
            if !ids.insert(id.as_str()) {
                return Err(recovery(&format!(
                    "lists ticket {} twice",
                    crate::sanitize::line(id, 40)
                )));
            }
        }
        let mut tokens = std::collections::HashSet::new();
        for h in granted {
            if h.token == 0 || h.token >= self.next_token || !tokens.insert(h.token) {
                return Err(recovery(
                    "holds a fencing token that is duplicated or not below next_token",
                ));
            }
            if h.epoch > self.policy.epoch {
                return Err(recovery("holds a grant from a future epoch"));
            }
        }
        if self
            .journal
            .last()
            .is_some_and(|e| e.sequence > self.sequence)
        {
            return Err(recovery("has a journal ahead of its sequence"));
        }
        if self
            .journal
            .windows(2)
            .any(|w| w[0].sequence >= w[1].sequence)
        {
            return Err(recovery("has a journal out of order"));
        }
        Ok(())
    }
}

/// The high-water marks of one resource, kept in `<hash>.fence` beside its file and written
/// durably before any resource file that raises them. A resource file restored from a backup,
/// or removed and recreated, starts from these marks, so a fencing token or an epoch is never
/// handed out twice.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    pub name: String,
    pub next_token: u64,
    pub epoch: u64,
}

impl Fence {
    /// The marks a state has reached.
    pub fn of(state: &ResourceState) -> Fence {
        Fence {
            name: state.name.clone(),
            next_token: state.next_token,
            epoch: state.policy.epoch,
        }
    }

    /// True when `state` has moved past these marks (the fence must be rewritten first).
    pub fn is_passed_by(&self, state: &ResourceState) -> bool {
        state.next_token > self.next_token || state.policy.epoch > self.epoch
    }

    /// Checks the checksum and the name; any failure is RECOVERY_REQUIRED.
    pub fn decode(bytes: &[u8], expect_name: &str) -> Result<Fence> {
        let fence_error = |what: &str| {
            Error::new(
                Code::RecoveryRequired,
                format!(
                    "fence file {what}; it was left as is: it holds the resource's highest fencing token, \
                     so restore it or raise the resource's next_token past every token ever issued"
                ),
            )
        };
        let body = super::seal::open(bytes).map_err(|b| fence_error(b.describe()))?;
        let fence: Fence = serde_json::from_slice(body)
            .map_err(|e| fence_error(&format!("is not valid ({e})")))?;
        if fence.name != expect_name {
            return Err(fence_error("names another resource"));
        }
        Ok(fence)
    }

    pub fn encode(&self) -> Result<Vec<u8>> {
        serde_json::to_vec(self)
            .map(|body| super::seal::seal(&body))
            .map_err(|e| Error::new(Code::Io, format!("cannot encode a fence: {e}")))
    }
}

fn recovery(what: &str) -> Error {
    Error::new(
        Code::RecoveryRequired,
        format!(
            "resource file {what}; it was left as is: inspect it and move it aside only after checking its holders"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_trimmed_and_bounded() {
        assert_eq!(canonical_name("  port:3000 ").unwrap(), "port:3000");
        assert_eq!(canonical_name("   ").unwrap_err().code, Code::Usage);
        assert_eq!(
            canonical_name(&"x".repeat(201)).unwrap_err().code,
            Code::Usage
        );
        assert!(canonical_name(&"x".repeat(200)).is_ok());
        assert_eq!(canonical_name("a\u{1b}b").unwrap_err().code, Code::Usage);
        assert_eq!(name_hash("port:3000").len(), 32);
        assert_ne!(name_hash("port:3000"), name_hash("port:3001"));
    }

    #[test]
    fn decode_refuses_garbage_and_broken_invariants() {
        assert_eq!(
            ResourceState::decode(b"{", None).unwrap_err().code,
            Code::RecoveryRequired
        );
        let mut s = ResourceState::new("r", 1);
        let ok = s.encode().unwrap();
        assert_eq!(ResourceState::decode(&ok, Some("r")).unwrap(), s);
        assert_eq!(
            ResourceState::decode(&ok, Some("other")).unwrap_err().code,
            Code::RecoveryRequired
        );
        s.policy.capacity = 0;
        assert_eq!(s.encode().unwrap_err().code, Code::RecoveryRequired);
    }

    #[test]
    fn no_single_bit_flip_of_a_resource_file_decodes() {
        let mut s = ResourceState::new("port:3000", 1);
        let party = Party {
            principal: "cli:1".into(),
            display: "me".into(),
            evidence: ProcessEvidence {
                pid: 42,
                start_time: 7,
                boot_id: "b".into(),
            },
        };
        s.holders.push(Holder {
            ticket: "t-1".into(),
            party: party.clone(),
            token: 4,
            granted_at: 1,
            epoch: 1,
            admitted: false,
        });
        s.tickets.push(Ticket {
            id: "t-2".into(),
            party,
            requested_at: 2,
            epoch: 1,
        });
        s.next_token = 5;
        let good = s.encode().unwrap();
        let mut refused = 0;
        for i in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[i] ^= 1 << bit;
                let e = ResourceState::decode(&bad, Some("port:3000")).unwrap_err();
                assert_eq!(e.code, Code::RecoveryRequired);
                refused += 1;
            }
        }
        assert_eq!(refused, good.len() * 8);
    }
}
