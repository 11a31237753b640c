//! Who this root is (`Incarnation`): its session, instance, peerId, alias and the
//! capabilities it grants itself, fixed for its lifetime; and who is calling a tool or local
//! method (`Caller`): the root itself or one of its child runs.

use crate::messaging::Principal;
use std::sync::Arc;

/// This root's ids and name, set once at start.
pub struct Incarnation {
    session_id: String,
    instance_id: String,
    peer_id: String,
    alias: String,
    capabilities: Arc<[String]>,
}

impl Incarnation {
    pub fn new(
        session_id: String,
        instance_id: String,
        peer_id: String,
        alias: String,
        capabilities: Arc<[String]>,
    ) -> Incarnation {
        Incarnation {
            session_id,
            instance_id,
            peer_id,
            alias,
            capabilities,
        }
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// The root's own peerId (its runs have their own).
    pub fn peer_id(&self) -> &str {
        &self.peer_id
    }

    pub fn alias(&self) -> &str {
        &self.alias
    }

    pub fn capabilities(&self) -> &Arc<[String]> {
        &self.capabilities
    }

    /// Whether `instance_id` is this very incarnation.
    pub fn is(&self, instance_id: &str) -> bool {
        instance_id == self.instance_id
    }

    /// The principal of one of this root's own peers (itself or a child run), as a receiving
    /// side sees it.
    pub fn principal_of(&self, peer_id: &str, run_id: Option<String>) -> Principal {
        Principal {
            instance_id: self.instance_id.clone(),
            run_id,
            peer_id: peer_id.to_string(),
        }
    }

    /// The root itself as a caller.
    pub fn root_caller(&self) -> Caller {
        Caller {
            peer_id: self.peer_id.clone(),
            run_id: None,
            alias: self.alias.clone(),
            capabilities: self.capabilities.clone(),
            automatic: false,
        }
    }
}

/// Who is calling a tool or local method: the root itself or one of its child runs.
#[derive(Clone, Debug)]
pub struct Caller {
    pub peer_id: String,
    pub run_id: Option<String>,
    pub alias: String,
    /// Shared with the root's own list when the caller is the root (every MCP call is).
    pub capabilities: Arc<[String]>,
    /// The call comes from the auto handler: its sends spend the conversation budget.
    pub automatic: bool,
}
