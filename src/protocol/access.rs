//! Which methods an authenticated channel may call. Peers get the messaging methods only:
//! inbox reads, local control and resource operations belong to trusted local adapters.

use super::handshake::Channel;
use crate::error::{Code, Error, Result};

/// Methods only the handshake uses; calling them afterwards is a protocol error.
const HANDSHAKE_METHODS: [&str; 3] = ["peer.hello", "peer.auth", "local.hello"];

/// True for methods a remote peer may never call.
pub fn is_local_only(method: &str) -> bool {
    method == "peer.read" || method.starts_with("local.") || method.starts_with("resource.")
}

/// Checks one call on an established channel. Unknown methods pass: the handler answers
/// `METHOD_NOT_FOUND` for them.
pub fn authorize(channel: &Channel, method: &str) -> Result<()> {
    if HANDSHAKE_METHODS.contains(&method) {
        return Err(Error::new(
            Code::InvalidRequest,
            format!("{method} is only valid as the first message of a connection"),
        ));
    }
    if matches!(channel, Channel::Peer { .. }) && is_local_only(method) {
        return Err(Error::new(
            Code::CapabilityDenied,
            format!(
                "{} is refused over the peer channel; only the root's trusted local adapters may call it",
                crate::sanitize::line(method, crate::config::internal::ECHO_CHARS_MAX)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_cannot_reach_local_methods() {
        let peer = Channel::Peer {
            instance_id: "i-1".into(),
            run_id: None,
        };
        for m in [
            "peer.read",
            "local.anything",
            "resource.request",
            "resource.grant",
        ] {
            assert_eq!(
                authorize(&peer, m).unwrap_err().code,
                Code::CapabilityDenied,
                "{m}"
            );
            assert!(authorize(&Channel::Local, m).is_ok(), "{m}");
        }
        for m in [
            "peer.send",
            "peer.status",
            "peer.subscribe",
            "peer.receipt",
            "peer.directory",
        ] {
            assert!(authorize(&peer, m).is_ok(), "{m}");
        }
        for m in HANDSHAKE_METHODS {
            assert_eq!(authorize(&peer, m).unwrap_err().code, Code::InvalidRequest);
            assert_eq!(
                authorize(&Channel::Local, m).unwrap_err().code,
                Code::InvalidRequest
            );
        }
        assert!(
            authorize(&peer, "peer.reader").is_ok(),
            "only the exact name peer.read is local"
        );
    }
}
