#![no_main]
//! JSON-RPC parsing, the typed reading of peer and local requests, and the peer channel's
//! authorization.
use libfuzzer_sys::fuzz_target;
use peerwire::protocol::handshake::Channel;
use peerwire::protocol::local::LocalRequest;
use peerwire::protocol::peer::PeerRequest;
use peerwire::protocol::{access, rpc};

fuzz_target!(|data: &[u8]| {
    if let Ok(rpc::Incoming::Request { method, params, .. }) = rpc::parse(data) {
        let peer = Channel::Peer {
            instance_id: "i-a".into(),
            run_id: None,
        };
        if access::is_local_only(&method) {
            assert!(access::authorize(&peer, &method).is_err());
        }
        // Typed reading answers with a typed error, never a panic.
        let _ = PeerRequest::decode(&method, params.clone());
        let _ = LocalRequest::decode(&method, params);
    }
});
