#![no_main]
//! The ask server's request heads (method, path, headers, `Content-Length` rules).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = peerwire::ask::http::parse_head(data);
});
