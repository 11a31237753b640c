#![no_main]
//! `/ask` bodies against the default bounds, and the same bytes as a chunked answer.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let config = peerwire::ask::config::AskConfig::default();
    // The server's own reading: the typed body first, then its validation.
    if let Ok(body) = serde_json::from_slice::<peerwire::ask::jobs::AskBody>(data) {
        let _ = peerwire::ask::jobs::parse_ask(&body, &config);
    }
    let _ = peerwire::ask::chunked::decode(data, peerwire::ask::chunked::Limits::for_body(4096));
});
