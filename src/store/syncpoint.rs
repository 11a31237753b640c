//! `messages.sync`: the last known sync point of the journal — generation, length and batch
//! count that were durable and acknowledged when the store was opened, compacted or closed —
//! written atomically and durably outside the journal. A journal found shorter than its sync
//! point lost acknowledged batches (truncated or zero-filled, not torn: a torn write only ever
//! damages the last frame, appended after the sync point), so recovery refuses it instead of
//! discarding the difference as a torn tail.
//!
//! `{"format":1,"generation":G,"length":L,"batches":N,"crc32":C}`, C the crc32 of G, L and N
//! (8 bytes each, little-endian).

use crate::error::{Code, Error, Result};
use serde::{Deserialize, Serialize};

pub const SYNC_FORMAT: u32 = 1;

/// A journal position known to have been durable and acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncPoint {
    pub generation: u64,
    pub length: u64,
    pub batches: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SyncFile {
    format: u32,
    generation: u64,
    length: u64,
    batches: u64,
    crc32: u32,
}

fn checksum(p: &SyncPoint) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&p.generation.to_le_bytes());
    h.update(&p.length.to_le_bytes());
    h.update(&p.batches.to_le_bytes());
    h.finalize()
}

pub fn encode(p: &SyncPoint) -> Vec<u8> {
    format!(
        "{{\"format\":{SYNC_FORMAT},\"generation\":{},\"length\":{},\"batches\":{},\"crc32\":{}}}\n",
        p.generation,
        p.length,
        p.batches,
        checksum(p)
    )
    .into_bytes()
}

pub(crate) fn refused(what: String) -> Error {
    Error::new(
        Code::RecoveryRequired,
        format!("{what}; the store was left untouched: preserve it and inspect before recovering"),
    )
}

pub fn decode(bytes: &[u8]) -> Result<SyncPoint> {
    let f: SyncFile = serde_json::from_slice(bytes)
        .map_err(|e| refused(format!("messages.sync cannot be parsed ({e})")))?;
    if f.format != SYNC_FORMAT {
        return Err(refused(format!("messages.sync has format {}", f.format)));
    }
    let p = SyncPoint {
        generation: f.generation,
        length: f.length,
        batches: f.batches,
    };
    if checksum(&p) != f.crc32 {
        return Err(refused("messages.sync fails its checksum".into()));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bit_flips() {
        let p = SyncPoint {
            generation: 3,
            length: 4_096,
            batches: 17,
        };
        let bytes = encode(&p);
        assert_eq!(decode(&bytes).unwrap(), p);
        for at in 0..bytes.len() - 1 {
            let mut x = bytes.clone();
            x[at] ^= 0x01;
            assert!(decode(&x).is_err(), "flip at {at} accepted");
        }
    }
}
