//! `messages.json`: the compacted state, written atomically (temp, fsync, rename, fsync dir).
//!
//! `{"format":1,"generation":G,"crc32":C,"state":{…}}` where `state` is the compact JSON of
//! [`StateImage`] and `C` its crc32. The writer serialises typed values only (fixed field
//! order, lists, no maps), so re-serialising the parsed image reproduces the written bytes and
//! the checksum can be verified after parsing. `G` is the last journal generation whose
//! records the snapshot includes.

use crate::error::{Code, Error, Result};
use crate::messaging::StateImage;
use serde::{Deserialize, Serialize};

pub const SNAPSHOT_FORMAT: u32 = 1;

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
    let crc = crc32fast::hash(&body);
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
    if file.format != SNAPSHOT_FORMAT {
        return Err(corrupt(format!(
            "has format {}, this build reads {SNAPSHOT_FORMAT}",
            file.format
        )));
    }
    let body = serde_json::to_vec(&file.state)
        .map_err(|e| corrupt(format!("cannot be re-encoded ({e})")))?;
    if crc32fast::hash(&body) != file.crc32 {
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
        let body_start = bytes.windows(8).position(|w| w == b"\"state\":").unwrap() + 8;
        for at in body_start..bytes.len() - 1 {
            let mut x = bytes.clone();
            x[at] ^= 0x01;
            assert_eq!(
                decode(&x).unwrap_err().code,
                Code::RecoveryRequired,
                "flip at {at}"
            );
        }
    }
}
