#![no_main]
//! JSON-RPC parsing, the typed decoder of hot requests, and the peer channel's authorization.
use libfuzzer_sys::fuzz_target;
use peerwire::protocol::handshake::Channel;
use peerwire::protocol::{access, hot, rpc};

fuzz_target!(|data: &[u8]| {
    // Whatever the typed decoder of hot requests decodes, the general path reads as the same
    // method and id.
    if let Some(req) = hot::decode(data) {
        match rpc::parse(data) {
            Ok(rpc::Incoming::Request { id, method, .. }) => {
                assert_eq!(id, req.id);
                assert_eq!(method, req.call.method());
            }
            other => panic!("typed decoder accepted what the general path read as {other:?}"),
        }
    }
    if let Ok(rpc::Incoming::Request { method, .. }) = rpc::parse(data) {
        let peer = Channel::Peer {
            instance_id: "i-a".into(),
            run_id: None,
        };
        if access::is_local_only(&method) {
            assert!(access::authorize(&peer, &method).is_err());
        }
    }
});
