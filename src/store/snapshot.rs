//! `messages.json`: the compacted state, written atomically (temp, fsync, rename, fsync dir).
//!
//! `{"format":2,"generation":G,"crc32":C,"state":{…}}` where `state` is the compact JSON of
//! [`StateImage`] and `C` the crc32 of `G` (8 bytes, little-endian) followed by that JSON, so a
//! damaged generation is detected like a damaged state. The writer serialises typed values
//! only (fixed field order, lists, no maps), so re-serialising the parsed image reproduces the
//! written bytes and the checksum can be verified after parsing. `G` is the last journal
//! generation whose records the snapshot includes. Format 1 (checksum over the state only) is
//! still read.

use crate::error::{Code, Error, Result};
use crate::messaging::StateImage;
use serde::{Deserialize, Serialize};

pub const SNAPSHOT_FORMAT: u32 = 2;
/// The earlier format whose checksum did not cover the generation; read, never written.
const SNAPSHOT_FORMAT_V1: u32 = 1;

fn checksum(generation: u64, body: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&generation.to_le_bytes());
    h.update(body);
    h.finalize()
}

#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    format: u32,
    generation: u64,
    crc32: u32,
    state: StateImage,
}

/// The snapshot bytes for `image`, covering journal generations up to `generation`.
pub fn encode(image: &StateImage, generation: u64) -> Result<Vec<u8>> {
    let body = serde_json::to_vec(image)
        .map_err(|e| Error::new(Code::Io, format!("cannot encode the snapshot: {e}")))?;
    let crc = checksum(generation, &body);
    let mut out = Vec::with_capacity(body.len() + 96);
    out.extend_from_slice(
        format!(
            "{{\"format\":{SNAPSHOT_FORMAT},\"generation\":{generation},\"crc32\":{crc},\"state\":"
        )
        .as_bytes(),
    );
    out.extend_from_slice(&body);
    out.push(b'}');
    Ok(out)
}

fn corrupt(what: String) -> Error {
    Error::new(
        Code::RecoveryRequired,
        format!(
            "messages.json {what}; the store was left untouched: preserve it and inspect before recovering"
        ),
    )
}

/// Parses and verifies a snapshot: (covered generation, image).
pub fn decode(bytes: &[u8]) -> Result<(u64, StateImage)> {
    let file: SnapshotFile =
        serde_json::from_slice(bytes).map_err(|e| corrupt(format!("cannot be parsed ({e})")))?;
    let body = serde_json::to_vec(&file.state)
        .map_err(|e| corrupt(format!("cannot be re-encoded ({e})")))?;
    let expected = match file.format {
        SNAPSHOT_FORMAT => checksum(file.generation, &body),
        SNAPSHOT_FORMAT_V1 => crc32fast::hash(&body),
        other => {
            return Err(corrupt(format!(
                "has format {other}, this build reads {SNAPSHOT_FORMAT_V1} and {SNAPSHOT_FORMAT}"
            )));
        }
    };
    if expected != file.crc32 {
        return Err(corrupt("checksum mismatch".into()));
    }
    if file.generation == 0 {
        return Err(corrupt("covers generation 0".into()));
    }
    Ok((file.generation, file.state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bit_flips_are_detected() {
        let image = StateImage {
            next_order: 7,
            next_sequence: vec![("p-me".into(), 3)],
            ..StateImage::default()
        };
        let bytes = encode(&image, 4).unwrap();
        let (g, back) = decode(&bytes).unwrap();
        assert_eq!((g, back), (4, image));
        // Every single-bit flip anywhere (format, generation, checksum, state) is refused.
        for at in 0..bytes.len() {
            let mut x = bytes.clone();
            x[at] ^= 0x01;
            assert_eq!(
                decode(&x).unwrap_err().code,
                Code::RecoveryRequired,
                "flip at {at}"
            );
        }
    }

    #[test]
    fn a_flipped_generation_is_refused() {
        let image = StateImage::default();
        let bytes = encode(&image, 26).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        for (from, to) in [("26", "27"), ("26", "24"), ("26", "36")] {
            let flipped = text.replacen(
                &format!("\"generation\":{from}"),
                &format!("\"generation\":{to}"),
                1,
            );
            assert_eq!(
                decode(flipped.as_bytes()).unwrap_err().code,
                Code::RecoveryRequired
            );
        }
    }
}
