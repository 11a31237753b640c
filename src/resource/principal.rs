//! Who is acting on a resource from the command line, and which capabilities it has.
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

impl Principal {
    /// The principal of a `peer` command-line invocation.
    pub fn for_cli(alias: Option<&str>, cfg: &Config) -> Principal {
        let control = std::env::var("PEER_CONTROL").ok().filter(|v| !v.is_empty());
        let mut granted: Option<Vec<String>> = None;
        let (id, display) = match (alias, control) {
            (Some(a), _) => (format!("cli:{a}"), a.to_string()),
            (None, Some(c)) => match crate::runtime::control::read(std::path::Path::new(&c)) {
                // The same id the session's own tools use, so the CLI, MCP and the gate agree
                // on who holds what.
                Ok(cf) => {
                    // A run's own control file decides the run; the variable only for the root.
                    let run = cf.run_id.clone().or_else(|| {
                        std::env::var(crate::runtime::control::ENV_RUN)
                            .ok()
                            .filter(|r| !r.is_empty())
                    });
                    let peer = crate::identity::peer_id(&cf.instance_id, run.as_deref());
                    if let Some(r) = &run {
                        // A child run has only what its root gave it; unknown means less.
                        granted = Some(run_capabilities(&cf, r, &cfg.limits).unwrap_or_default());
                    }
                    let alias = std::env::var("PEER_ALIAS").unwrap_or_else(|_| peer.clone());
                    (crate::runtime::resources::principal_id(&peer), alias)
                }
                Err(_) => {
                    let c = crate::sanitize::line(&c, 120);
                    (format!("session:{c}"), c)
                }
            },
            (None, None) => {
                let pid = std::process::id();
                (format!("cli:pid-{pid}"), format!("pid-{pid}"))
            }
        };
        let keep = std::env::var("PEER_CAPABILITIES").ok();
        let mut capabilities = restrict(default_capabilities(cfg), keep.as_deref());
        if let Some(g) = granted {
            capabilities.retain(|c| c == CAP_REQUEST || g.contains(c));
        }
        Principal {
            id,
            display: crate::sanitize::line(&display, 120),
            capabilities,
        }
    }
}

/// The capabilities the root behind `cf` gave child run `run` (`local.info`).
fn run_capabilities(
    cf: &crate::runtime::control::ControlFile,
    run: &str,
    limits: &crate::config::Limits,
) -> Result<Vec<String>> {
    let mut client =
        crate::transport::LocalClient::connect(&cf.endpoint, cf.secret_bytes()?, limits)?;
    let info = client.call(
        "local.info",
        serde_json::json!({"version": 1, "runId": run}),
        limits.acknowledgement_ms,
    )?;
    Ok(info
        .get("capabilities")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str().map(str::to_string))
        .collect())
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
    check_holder(pid)?;
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
/// session as the kernel reports it on the root's socket (SO_PEERCRED). Never pid 1 or
/// another user's process: such an anchor would outlive everyone who could release it.
pub fn check_holder(pid: u32) -> Result<()> {
    use super::evidence::{descends_from, owner_of};
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
    if enclosing_root_pid() == Some(pid) {
        return Ok(());
    }
    Err(refuse("is not related to this command"))
}

/// The pid of the enclosing session's root, proven by SO_PEERCRED after `local.hello`.
fn enclosing_root_pid() -> Option<u32> {
    let cf = crate::runtime::control::from_env().ok()??;
    let limits = crate::config::Limits::default();
    let client =
        crate::transport::LocalClient::connect(&cf.endpoint, cf.secret_bytes().ok()?, &limits)
            .ok()?;
    client.root_pid()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_must_be_related_to_the_caller() {
        check_holder(std::process::id()).unwrap();
        assert_eq!(check_holder(1).unwrap_err().code, Code::CapabilityDenied);
        assert_eq!(check_holder(0).unwrap_err().code, Code::CapabilityDenied);
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        check_holder(child.id()).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(
            check_holder(child.id()).unwrap_err().code,
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
