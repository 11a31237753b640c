#![no_main]
//! The message journal's header and frame scan.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = peerwire::store::journal::decode_header(data);
    let _ = peerwire::store::journal::scan(data, 4096);
});
