//! `messages.sync`: the last known sync point of the journal — generation, length and batch
//! count that were durable and acknowledged when the store was opened, compacted or closed —
//! written atomically and durably outside the journal. A journal found shorter than its sync
//! point lost acknowledged batches (truncated or zero-filled, not torn: a torn write only ever
//! damages the last frame, appended after the sync point), so recovery refuses it instead of
//! discarding the difference as a torn tail.
//!
//! `{"format":1,"generation":G,"length":L,"batches":N,"crc32":C}`, C the crc32 of G, L and N
//! (8 bytes each, little-endian).

use super::recovery::JournalFile;
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

fn refused(what: String) -> Error {
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

/// Refuses a journal that holds less than the sync point proves was acknowledged. `covered` is
/// the generation the snapshot includes.
pub fn check(p: &SyncPoint, covered: u64, journal: &JournalFile) -> Result<()> {
    let missing = |what: String| {
        refused(format!(
            "{what}, but its last known sync point is generation {} with {} batches ({} bytes): acknowledged records are missing",
            p.generation, p.batches, p.length
        ))
    };
    match journal {
        JournalFile::Fresh if p.batches > 0 || p.generation > 1 => {
            Err(missing("messages.journal is missing".into()))
        }
        JournalFile::Fresh => Ok(()),
        // The snapshot includes every record of generations up to `covered`.
        JournalFile::Covered { .. } if p.generation <= covered => Ok(()),
        JournalFile::Covered { generation } => Err(missing(format!(
            "messages.journal is generation {generation}, already covered by the snapshot"
        ))),
        JournalFile::Live {
            generation,
            valid_len,
            batches,
            ..
        } => {
            if p.generation > *generation {
                return Err(missing(format!(
                    "messages.journal is generation {generation}"
                )));
            }
            if p.generation == *generation && (*batches < p.batches || *valid_len < p.length) {
                return Err(missing(format!(
                    "messages.journal holds {batches} complete batches ({valid_len} bytes)"
                )));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_bit_flips_and_the_check() {
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
        let live = |generation, valid_len, batches| JournalFile::Live {
            generation,
            valid_len,
            torn_bytes: 0,
            batches,
        };
        assert!(check(&p, 2, &live(3, 4_096, 17)).is_ok());
        assert!(check(&p, 2, &live(3, 5_000, 20)).is_ok());
        assert!(check(&p, 3, &live(4, 32, 0)).is_ok(), "compacted since");
        assert!(check(&p, 3, &JournalFile::Covered { generation: 3 }).is_ok());
        for bad in [live(3, 4_000, 16), live(3, 4_096, 16), live(2, 9_000, 40)] {
            assert_eq!(
                check(&p, 2, &bad).unwrap_err().code,
                Code::RecoveryRequired,
                "{bad:?}"
            );
        }
        assert!(check(&p, 2, &JournalFile::Covered { generation: 2 }).is_err());
        assert!(check(&p, 0, &JournalFile::Fresh).is_err());
    }
}
