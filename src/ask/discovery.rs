//! Discovery endpoints of the ask server (`/advertise`, `/sign/card`, `/sign/verify`,
//! `/recommend`, `/recommend/pending`, `/friend/decision`): not served yet, so they answer
//! 404 like any unknown path.

use super::server::{Request, Response, ServerState};
use std::sync::Arc;

/// Server-wide state of the discovery endpoints.
#[derive(Default)]
pub struct State {}

/// Called once when a server starts (for background refreshes).
pub fn on_start(_state: &Arc<ServerState>) {}

/// Answers the discovery endpoints; `None` for every other path.
pub fn route(_state: &ServerState, _req: &Request) -> Option<Response> {
    None
}
