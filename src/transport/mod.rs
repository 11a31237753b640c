//! The blocking socket shell around `protocol`: a private Unix-socket [`Endpoint`] with one
//! thread per connection, an outbound [`Pool`] of authenticated connections, and the
//! [`LocalClient`] trusted adapters use to reach their own root. Every read, write, queue and
//! connection count is bounded by `Limits`; the sender of a request is always the authenticated
//! connection, never a field of the request.

mod admission;
mod connection;
mod endpoint;
mod local;
mod pool;

#[cfg(test)]
mod tests;

pub use connection::Notifier;
pub use endpoint::Endpoint;
pub use local::LocalClient;
pub use pool::{NotificationSink, Pool};

use crate::error::Result;
use crate::protocol::local::LocalRequest;
use crate::protocol::message::ReceiptPush;
use crate::protocol::peer::PeerRequest;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// This root as the transport presents it.
#[derive(Clone)]
pub struct LocalIdentity {
    pub instance_id: String,
    pub keys: Arc<crate::identity::KeyPair>,
}

/// Presence lookup done by the integrator: the key an instance's own live advertisement
/// publishes, or `None` when it has none.
pub trait Verifier: Send + Sync {
    fn advertised_key(&self, instance_id: &str) -> Option<[u8; 32]>;
}

/// The authenticated remote root of a connection. `run_id` is that root's own claim.
#[derive(Clone, Debug)]
pub struct PeerInfo {
    pub instance_id: String,
    pub run_id: Option<String>,
    /// The first peerId asked of this connection (keyed by its run), so the SHA-256 behind
    /// a peerId is computed once per connection rather than once per message; one entry
    /// keeps the memo bounded, and any other run is computed afresh.
    memo: OnceLock<(Option<String>, String)>,
}

impl PeerInfo {
    pub fn new(instance_id: String, run_id: Option<String>) -> PeerInfo {
        PeerInfo {
            instance_id,
            run_id,
            memo: OnceLock::new(),
        }
    }

    /// The peerId of `run` (or of the root itself for `None`) of this authenticated
    /// instance: `identity::peer_id`, remembered for the first run asked.
    pub fn peer_id(&self, run: Option<&str>) -> String {
        let (memo_run, id) = self.memo.get_or_init(|| {
            let id = crate::identity::peer_id(&self.instance_id, run);
            (run.map(str::to_owned), id)
        });
        if memo_run.as_deref() == run {
            id.clone()
        } else {
            crate::identity::peer_id(&self.instance_id, run)
        }
    }
}

impl PartialEq for PeerInfo {
    fn eq(&self, o: &PeerInfo) -> bool {
        self.instance_id == o.instance_id && self.run_id == o.run_id
    }
}

impl Eq for PeerInfo {}

/// The result of a call as its compact JSON text, keys in sorted order (byte for byte what
/// serialising its `Value` gives): a typed answer writes it itself.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer(pub Vec<u8>);

impl Answer {
    /// The JSON text of anything that serialises with sorted keys (a `Value`, or a typed
    /// answer that writes them in order).
    pub fn of<T: serde::Serialize + ?Sized>(result: &T) -> Result<Answer> {
        serde_json::to_vec(result).map(Answer).map_err(|e| {
            crate::error::Error::new(
                crate::error::Code::Io,
                format!("cannot encode an answer: {e}"),
            )
        })
    }
}

/// What the root does with authenticated calls, as typed requests: the endpoint has already
/// checked the channel's access and decoded the frame's params (a refused or malformed frame
/// never reaches the handler). Calls on one connection are handled one at a time, in order,
/// on that connection's thread.
pub trait Handler: Send + Sync {
    /// A request from an authenticated peer (local-only methods were already refused).
    fn peer_request(&self, from: &PeerInfo, req: PeerRequest, notify: &Notifier) -> Result<Answer>;
    /// Called by a connection's thread right after it answered a request (or failed to write
    /// the answer): bookkeeping the answer did not need is done here, while the client
    /// reads, instead of on the path of the request or the next one. The default does
    /// nothing.
    fn after_reply(&self) {}
    /// A request from a trusted local adapter (the root's CLI/MCP, or with `run_id` a command
    /// of that child run, proven by the run's own secret).
    fn local_request(
        &self,
        run_id: Option<&str>,
        req: LocalRequest,
        notify: &Notifier,
    ) -> Result<Answer>;
    /// The live child run whose own local secret `secret` is (compared in constant time); the
    /// default knows no runs, so no connection speaks for one.
    fn run_for_secret(&self, secret: &[u8; 32]) -> Option<String> {
        let _ = secret;
        None
    }
    /// A `peer.receipt` notification from an authenticated peer (see
    /// `protocol::peer::receipt_notification`); the default ignores it.
    fn receipt_notification(&self, from: &PeerInfo, push: ReceiptPush) {
        let _ = (from, push);
    }
}

/// An exact destination: the advertisement the caller resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub instance_id: String,
    pub endpoint: PathBuf,
    pub public_key: [u8; 32],
}
