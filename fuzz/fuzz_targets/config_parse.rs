#![no_main]
//! `<home>/config.json`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = peerwire::config::Config::parse(data);
});
