#![no_main]
//! `/ask` bodies against the default bounds, and the same bytes as a chunked answer.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let config = peerwire::ask::config::AskConfig::default();
    if let Ok(serde_json::Value::Object(body)) = serde_json::from_slice(data) {
        let _ = peerwire::ask::jobs::parse_ask(&body, &config);
    }
    let _ = peerwire::ask::chunked::decode(data, peerwire::ask::chunked::Limits::for_body(4096));
});
