#![no_main]
//! JSON-RPC parsing and the peer channel's authorization.
use libfuzzer_sys::fuzz_target;
use peerwire::protocol::handshake::Channel;
use peerwire::protocol::{access, rpc};

fuzz_target!(|data: &[u8]| {
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
