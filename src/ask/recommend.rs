//! Friend recommendations (`POST /recommend`) with bounded forwarding. Not implemented yet.

use super::server::{Request, Response, ServerState};

/// Answers this module's endpoints; `None` for every other path.
pub fn route(_state: &ServerState, _req: &Request) -> Option<Response> {
    None
}
