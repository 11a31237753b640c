//! `messages.json`: the compacted state, written atomically (temp, fsync, rename, fsync dir).
//!
//! `{"format":2,"generation":G,"crc32":C,"state":{…}}` where `state` is the compact JSON of
//! [`StateImage`] and `C` the crc32 of `G` (8 bytes, little-endian) followed by that JSON, so a
//! damaged generation is detected like a damaged state. The writer serialises typed values
//! only (fixed field order, lists, no maps), so re-serialising the parsed image reproduces the
//! written bytes and the checksum can be verified after parsing. `G` is the last journal
//! generation whose records the snapshot includes. Format 1 (checksum over the state only) is
//! still read.

use crate::config::internal::SNAPSHOT_WRITE_BUFFER_BYTES as WRITE_BUFFER_BYTES;
use crate::error::{Code, Error, Result};
use crate::fsutil::{self, Durability};
use crate::messaging::{State, StateImage};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

pub const SNAPSHOT_FORMAT: u32 = 2;
/// The earlier format whose checksum did not cover the generation; read, never written.
const SNAPSHOT_FORMAT_V1: u32 = 1;

#[cfg(test)]
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

/// The snapshot bytes for `image`, covering journal generations up to `generation` (what
/// [`write`] streams; kept to check it against).
#[cfg(test)]
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

/// Counts and checksums bytes without keeping them.
struct CrcSink {
    hasher: crc32fast::Hasher,
    bytes: u64,
}

impl Write for CrcSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.hasher.update(buf);
        self.bytes += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes the snapshot of `state` covering generations up to `generation` to `path`
/// atomically and durably (temp file, fdatasync, rename, directory fsync), streaming: the
/// state is serialised twice (once for the checksum, which precedes it in the file, once into
/// the file) and never copied or held as one buffer. The bytes equal
/// `encode(&state.image(), generation)`. Returns the snapshot's size in bytes.
pub fn write(path: &Path, state: &State, generation: u64) -> Result<u64> {
    let view = state.image_view();
    let mut sink = CrcSink {
        hasher: crc32fast::Hasher::new(),
        bytes: 0,
    };
    sink.hasher.update(&generation.to_le_bytes());
    serde_json::to_writer(&mut sink, &view)
        .map_err(|e| Error::new(Code::Io, format!("cannot encode the snapshot: {e}")))?;
    let crc = sink.hasher.finalize();
    let head = format!(
        "{{\"format\":{SNAPSHOT_FORMAT},\"generation\":{generation},\"crc32\":{crc},\"state\":"
    );
    fsutil::atomic_write_with(path, Durability::Durable, |f| {
        let mut w = std::io::BufWriter::with_capacity(WRITE_BUFFER_BYTES, f);
        w.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
        serde_json::to_writer(&mut w, &view).map_err(|e| e.to_string())?;
        w.write_all(b"}").map_err(|e| e.to_string())?;
        w.flush().map_err(|e| e.to_string())
    })?;
    Ok(head.len() as u64 + sink.bytes + 1)
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
    // Re-encoded into a checksum sink: verifying needs no second copy of the state.
    let mut sink = CrcSink {
        hasher: crc32fast::Hasher::new(),
        bytes: 0,
    };
    if file.format == SNAPSHOT_FORMAT {
        sink.hasher.update(&file.generation.to_le_bytes());
    }
    serde_json::to_writer(&mut sink, &file.state)
        .map_err(|e| corrupt(format!("cannot be re-encoded ({e})")))?;
    let expected = match file.format {
        SNAPSHOT_FORMAT | SNAPSHOT_FORMAT_V1 => sink.hasher.finalize(),
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
    fn the_streamed_snapshot_is_the_encoded_image() {
        use crate::messaging::{OutboxEntry, Receipt, ReceiptState, Record, TargetRef};
        let tmp = crate::fsutil::TempDir::new("snapshot").unwrap();
        let mut state = State::default();
        for i in 0..5u64 {
            let id = format!("m-{i}");
            let mut entry = OutboxEntry {
                order: i + 1,
                from_peer_id: "p-me".into(),
                to: TargetRef {
                    peer_id: "p-you".into(),
                    instance_id: "i-you".into(),
                    run_id: None,
                },
                message_id: id.clone(),
                body: crate::protocol::message::MessageBody {
                    content: "x".repeat(100),
                    topic: (i == 2).then(|| "t".into()),
                    reply_to: None,
                },
                content_digest: None,
                correlation_id: id.clone(),
                expires_at_ms: 10,
                created_at_ms: 1,
                receipt: None,
                updated_at_ms: 1,
                redelivered_from: None,
            };
            state.apply(&Record::OutboxAdded {
                entry: entry.clone(),
            });
            if i % 2 == 0 {
                entry.receipt = Some(Receipt {
                    message_id: id.clone(),
                    from_peer_id: "p-me".into(),
                    to_peer_id: "p-you".into(),
                    state: ReceiptState::Accepted,
                    sequence: i + 1,
                    correlation_id: id.clone(),
                    at_ms: 2,
                    reply_message_id: None,
                    code: None,
                });
                state.apply(&Record::OutboxReceipt {
                    to_peer_id: "p-you".into(),
                    message_id: id,
                    receipt: entry.receipt.clone().unwrap(),
                    at_ms: 2,
                    event: None,
                });
            }
        }
        assert_eq!(
            state.settled.len(),
            3,
            "resolved entries are held compactly"
        );
        let path = tmp.path().join("messages.json");
        let n = write(&path, &state, 3).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(n, bytes.len() as u64);
        assert_eq!(bytes, encode(&state.image(), 3).unwrap());
        let (g, back) = decode(&bytes).unwrap();
        assert_eq!(g, 3);
        assert_eq!(State::from_image(back), state);
    }

    #[test]
    fn format_1_is_read_with_its_state_only_checksum() {
        let image = StateImage {
            next_order: 3,
            ..StateImage::default()
        };
        let body = serde_json::to_vec(&image).unwrap();
        let crc = crc32fast::hash(&body);
        let mut v1 =
            format!("{{\"format\":1,\"generation\":5,\"crc32\":{crc},\"state\":").into_bytes();
        v1.extend_from_slice(&body);
        v1.push(b'}');
        assert_eq!(decode(&v1).unwrap(), (5, image));
        let wrong =
            String::from_utf8(v1)
                .unwrap()
                .replacen(&format!("{crc}"), &format!("{}", crc ^ 1), 1);
        assert_eq!(
            decode(wrong.as_bytes()).unwrap_err().code,
            Code::RecoveryRequired
        );
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
