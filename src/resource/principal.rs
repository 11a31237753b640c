//! Who is acting on a resource, and which capabilities it has. The command line builds its
//! principal in `cli::res` from the rules below.
//!
//! Identity: `--as ALIAS` gives `cli:ALIAS`; otherwise the control file named by `PEER_CONTROL`
//! (set by the enclosing `peer host`) gives `peer:<peerId>` of the session or of the child run
//! its control file is bound to (or, with the root's file, the run in `PEER_RUN_ID`), the id
//! its MCP/tool calls use (`session:<value>` when the file cannot be read); otherwise
//! `cli:pid-<pid>`. Capabilities: `resource.request` always,
//! `resource.control` only when `allowResourceControl` is true — and, for a child run, only
//! when its root reports that the run was given it (`run-child --delegate-control`).
//! `PEER_CAPABILITIES` (a comma list) can only DROP capabilities from that default — it exists
//! so tests and wrappers can run a deliberately weaker principal; it never adds one.

use super::core::{CAP_CONTROL, CAP_REQUEST};
use crate::config::Config;
use crate::error::{Code, Error, Result};
use crate::process::{Probe, ProcessEvidence};

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
/// `session_root` proves the enclosing session root's pid when asked (see [`check_holder`]).
pub fn session_holder(
    probe: &Probe,
    what: &str,
    session_root: fn() -> Option<u32>,
) -> Result<ProcessEvidence> {
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
    check_holder(pid, session_root)?;
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

/// A grant is anchored only to a process the caller answers for: itself, one of its
/// descendants, a process of its own session (same uid), or the root of the enclosing peer
/// session as the kernel reports it on the root's socket (`session_root`, asked last). Never
/// pid 1 or another user's process: such an anchor would outlive everyone who could release it.
pub fn check_holder(pid: u32, session_root: fn() -> Option<u32>) -> Result<()> {
    use crate::process::{descends_from, owner_of};
    let me = std::process::id();
    if pid == me {
        return Ok(());
    }
    let refuse = |why: &str| {
        Error::new(
            Code::CapabilityDenied,
            format!(
                "PEER_HOLDER_PID {pid} {why}; a holder must be this command, its descendant, a process of its session, or its peer session's root"
            ),
        )
    };
    if pid <= 1 {
        return Err(refuse("is init"));
    }
    let uid = nix::unistd::getuid().as_raw();
    match owner_of(pid) {
        None => return Err(refuse("is not a running process")),
        Some(owner) if owner != uid => return Err(refuse(&format!("belongs to uid {owner}"))),
        Some(_) => {}
    }
    if descends_from(pid, me) {
        return Ok(());
    }
    let sid = |p: Option<nix::unistd::Pid>| nix::unistd::getsid(p).ok();
    let theirs = i32::try_from(pid).ok().map(nix::unistd::Pid::from_raw);
    if theirs.is_some() && sid(theirs).is_some() && sid(theirs) == sid(None) {
        return Ok(());
    }
    if session_root() == Some(pid) {
        return Ok(());
    }
    Err(refuse("is not related to this command"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_must_be_related_to_the_caller() {
        let none = || None;
        check_holder(std::process::id(), none).unwrap();
        assert_eq!(
            check_holder(1, none).unwrap_err().code,
            Code::CapabilityDenied
        );
        assert_eq!(
            check_holder(0, none).unwrap_err().code,
            Code::CapabilityDenied
        );
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        check_holder(child.id(), none).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(
            check_holder(child.id(), none).unwrap_err().code,
            Code::CapabilityDenied
        );
    }

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
