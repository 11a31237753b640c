#![no_main]
//! Resource files, fences and the seal: anything but exact sealed bytes is refused.
use libfuzzer_sys::fuzz_target;
use peerwire::error::Code;
use peerwire::resource::model::{Fence, ResourceState};
use peerwire::resource::seal;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = ResourceState::decode(data, None) {
        assert_eq!(e.code, Code::RecoveryRequired);
    }
    if let Err(e) = Fence::decode(data, "r") {
        assert_eq!(e.code, Code::RecoveryRequired);
    }
    if let Ok(body) = seal::open(data) {
        assert_eq!(seal::seal(body), data);
    }
});
