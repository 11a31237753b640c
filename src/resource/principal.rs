//! Who is acting on a resource, and which capabilities it has. The command line builds its
//! principal in `cli::res` from the rules below.
//!
//! Identity: `--as ALIAS` gives `cli:ALIAS`; otherwise the control file named by `PEER_CONTROL`
//! (set by the enclosing `peer host`) gives `peer:<peerId>` of the session or of the child run
//! in `PEER_RUN_ID`, the id its MCP/tool calls use (`session:<value>` when the file cannot be
//! read); otherwise `cli:pid-<pid>`. Capabilities: `resource.request` always,
//! `resource.control` only when `allowResourceControl` is true — and, for a child run, only
//! when its root reports that the run was given it (`run-child --delegate-control`).
//! `PEER_CAPABILITIES` (a comma list) can only DROP capabilities from that default — it exists
//! so tests and wrappers can run a deliberately weaker principal; it never adds one.

use super::core::{CAP_CONTROL, CAP_REQUEST};
use super::evidence::Probe;
use super::model::ProcessEvidence;
use crate::config::Config;
use crate::error::{Code, Error, Result};

/// The acting principal: a stable id, a display name and its capabilities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    pub id: String,
    pub display: String,
    pub capabilities: Vec<String>,
}

/// The principal id of a session or child run with this peerId: the same for its MCP tools,
/// its `peer` commands and the gate, so all three agree on who holds what.
pub fn principal_id(peer_id: &str) -> String {
    format!("peer:{peer_id}")
}

/// The capabilities a namespace grants by default.
pub fn default_capabilities(cfg: &Config) -> Vec<String> {
    let mut caps = vec![CAP_REQUEST.to_string()];
    if cfg.allow_resource_control {
        caps.push(CAP_CONTROL.to_string());
    }
    caps
}

/// Keeps only the capabilities also named in `keep` (a comma list); `None` keeps all.
pub fn restrict(caps: Vec<String>, keep: Option<&str>) -> Vec<String> {
    let Some(keep) = keep else { return caps };
    let named: Vec<&str> = keep
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    caps.into_iter()
        .filter(|c| named.contains(&c.as_str()))
        .collect()
}

/// Evidence of the enclosing session root named by `PEER_HOLDER_PID`, for operations whose
/// effect outlives the short-lived CLI (`peer res request`, `set-controller`).
pub fn session_holder(probe: &Probe, what: &str) -> Result<ProcessEvidence> {
    let Some(raw) = std::env::var("PEER_HOLDER_PID")
        .ok()
        .filter(|v| !v.is_empty())
    else {
        return Err(Error::new(
            Code::Usage,
            format!(
                "{what} needs a process that holds it: run the command under 'peer run --resource NAME -- CMD', or inside a session that sets PEER_HOLDER_PID"
            ),
        ));
    };
    let pid: u32 = raw
        .trim()
        .parse()
        .map_err(|_| Error::new(Code::Usage, "PEER_HOLDER_PID must be a process id"))?;
    probe.evidence(pid).map_err(|e| {
        Error::new(
            Code::Usage,
            format!(
                "PEER_HOLDER_PID {pid} is not a running process ({})",
                e.message
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_can_only_be_dropped() {
        let mut cfg = Config::default();
        assert_eq!(default_capabilities(&cfg), [CAP_REQUEST]);
        cfg.allow_resource_control = true;
        let all = default_capabilities(&cfg);
        assert_eq!(all, [CAP_REQUEST, CAP_CONTROL]);
        assert_eq!(restrict(all.clone(), None), all);
        assert_eq!(
            restrict(all.clone(), Some("resource.control")),
            [CAP_CONTROL]
        );
        assert!(restrict(all.clone(), Some("")).is_empty());
        cfg.allow_resource_control = false;
        assert_eq!(
            restrict(
                default_capabilities(&cfg),
                Some("resource.control,resource.request")
            ),
            [CAP_REQUEST]
        );
    }
}
