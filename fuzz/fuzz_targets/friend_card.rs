#![no_main]
//! Friend cards (`dsh-ask-peer-card:` strings): parse and verify.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = peerwire::ask::card::parse(&text);
    let _ = peerwire::ask::card::verify(&text, 1_785_150_000_000);
});
