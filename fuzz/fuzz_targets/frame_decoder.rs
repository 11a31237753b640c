#![no_main]
//! The bounded NDJSON frame decoder: frames never exceed the bound or contain a newline.
use libfuzzer_sys::fuzz_target;
use peerwire::protocol::frame::FrameDecoder;

fuzz_target!(|data: &[u8]| {
    let max = 64 + usize::from(data.first().copied().unwrap_or(0));
    let mut d = FrameDecoder::new(max);
    for chunk in data.chunks(17) {
        d.push(chunk);
        while let Some(f) = d.next_frame() {
            if let Ok(frame) = f {
                assert!(frame.len() <= max && !frame.contains(&b'\n'));
            }
        }
    }
});
