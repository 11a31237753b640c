//! `messages.journal`: byte layout, frame encoding and the recovery scan (pure over bytes).
//!
//! ```text
//! header (32 bytes, written once by temp file + fsync + rename, never torn)
//!   0   magic       8  89 50 57 4A 0D 0A 1A 0A   ("\x89PWJ\r\n\x1a\n", PNG-style)
//!   8   version     u32 LE = 2 (1: written before end marks, read as before, see below)
//!   12  flags       u32 LE = 0
//!   16  generation  u64 LE   (≥ 1; the snapshot says which generation it covers)
//!   24  header_crc  u32 LE   crc32(bytes 0..24)
//!   28  reserved    u32 LE = 0
//! frame (one per group commit, written with one pwrite at the logical end, then fdatasync)
//!   0   len         u32 LE   payload bytes, 1 ..= frame_bytes_max
//!   4   len_crc     u32 LE   crc32("pwjf" ‖ len LE): a torn or flipped length is detected
//!   8   crc         u32 LE   crc32(payload)
//!   12  payload     len bytes: JSON {"batch":n,"records":[Record…]}, n = 1, 2, 3 … per
//!                   generation, then one space when the frame would otherwise end on a
//!                   512-byte boundary of the file
//! end mark (version 2: 20 bytes right after the last frame, in the same pwrite as that frame;
//!   the next frame is written over it)
//!   0   len         u32 LE = 0xFFFF_FFFF (never a frame's length)
//!   4   len_crc     u32 LE   crc32("pwjf" ‖ 0xFFFF_FFFF LE)
//!   8   batches     u64 LE   complete frames before the mark (0 in a new journal)
//!   16  mark_crc    u32 LE   crc32("pwje" ‖ generation LE ‖ batches LE)
//! room (0x00 bytes up to the file's size: preallocated by the writer, written as real zeros
//!   and fdatasynced before any frame is written into it, so the file size and its blocks are
//!   already durable and a frame's fdatasync writes data blocks only)
//! ```
//!
//! The *logical end* is the end of the last complete frame; the end mark lies there, and
//! everything after the mark is 0x00 room. A writer appends at the logical end, never at the
//! file's size.
//!
//! **The end mark is the durable commit mark.** A frame and the mark after it go out in one
//! `pwrite` and are made durable by the one fdatasync that makes the batch durable: no other
//! write, no other sync, no other block (the mark is contiguous with the frame). So after any
//! crash the last durable frame is followed by its mark, or by a later frame that overwrote it.
//! Zeros where a mark should be are therefore never "room never written": a version-2 journal
//! whose frames end without a mark lost committed bytes (zeroed or truncated) and is
//! `RECOVERY_REQUIRED`. A frame never ends on a 512-byte boundary (one space pads it), so the
//! mark's first byte shares a sector with the frame's last byte: a torn write that kept the
//! whole frame cannot have lost the whole mark.
//!
//! Recovery classifies the first defective frame at offset `o`. Let `z` be where the run of
//! 0x00 bytes that ends the file starts (JSON payloads never end in 0x00, so `z` is the end of
//! everything the disk really wrote; a frame is only looked for before `z`). The defect is a
//! torn tail — the unacknowledged last batch, discarded by truncating to `o` — exactly when:
//!   1. fewer than 12 header bytes remain after `o`; or
//!   2. `len_crc` fails and the header reaches into the zero suffix (`z < o + 12`); or
//!   3. the header is valid but the payload runs past end of file; or
//!   4. the payload crc fails and the payload reaches into the zero suffix (`z < end`);
//!
//! and, in a version-2 journal, the written bytes end where a torn write can end them: on a
//! 512-byte sector boundary (a device writes a sector whole or not at all), or within the
//! first [`MARK_BYTES`] after `o` (the frame's header, or the remains of the previous mark the
//! torn frame was written over, may hold 0x00 bytes). A mark whose first 8 bytes are there but
//! whose rest is zeros is torn the same way when a sector boundary cuts it.
//!
//! Every other defect — a bad header crc or bad payload crc with written bytes after it, a
//! valid crc over unparsable JSON, an out-of-order batch number, a bad file header, a missing
//! or wrong end mark — is damage to acknowledged data: `RECOVERY_REQUIRED`, and the files are
//! left untouched. Cases 1–4 can only arise from the last write because every earlier frame
//! was completely written and fdatasynced before the next write began, and a bit flip cannot
//! produce a zero suffix reaching back into a complete frame (its last byte is `}` or a space,
//! not 0x00).

use crate::config::internal::FRAME_CAPACITY_MAX;
use crate::error::{Code, Error, Result};
use crate::messaging::Record;
use crate::protocol::rpc;
use serde::{Deserialize, Serialize};

pub const MAGIC: [u8; 8] = [0x89, b'P', b'W', b'J', b'\r', b'\n', 0x1a, b'\n'];
/// The version this build writes: frames followed by an end mark.
pub const FORMAT_VERSION: u32 = 2;
/// Journals written before the end mark: read without it, and replaced at open.
pub const FORMAT_VERSION_UNMARKED: u32 = 1;
const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + MAGIC.len();
const FLAGS_OFFSET: usize = VERSION_OFFSET + 4;
const GENERATION_OFFSET: usize = FLAGS_OFFSET + 4;
const HEADER_CRC_OFFSET: usize = GENERATION_OFFSET + 8;
const RESERVED_OFFSET: usize = HEADER_CRC_OFFSET + 4;
pub const HEADER_BYTES: usize = RESERVED_OFFSET + 4;

const FRAME_LEN_OFFSET: usize = 0;
const FRAME_LEN_CRC_OFFSET: usize = FRAME_LEN_OFFSET + 4;
const FRAME_CRC_OFFSET: usize = FRAME_LEN_CRC_OFFSET + 4;
pub const FRAME_HEADER_BYTES: usize = FRAME_CRC_OFFSET + 4;
const LEN_CRC_DOMAIN: &[u8; 4] = b"pwjf";
const MARK_CRC_DOMAIN: &[u8; 4] = b"pwje";
/// The length field of an end mark: no frame is ever this long.
const MARK_LEN: u32 = u32::MAX;
const MARK_BATCHES_OFFSET: usize = FRAME_CRC_OFFSET;
const MARK_CRC_OFFSET: usize = MARK_BATCHES_OFFSET + 8;
/// Bytes of the end mark after the last frame.
pub const MARK_BYTES: usize = MARK_CRC_OFFSET + 4;
/// The write unit a device never tears (a 512-byte sector; larger physical sectors are
/// multiples of it).
pub const SECTOR_BYTES: u64 = 512;

const _: () = assert!(HEADER_BYTES == 32);
const _: () = assert!(FRAME_HEADER_BYTES == 12);
const _: () = assert!(MARK_BYTES == 20);

/// The payload of one frame: one group commit.
#[derive(Debug, Serialize, Deserialize)]
struct BatchBody<R> {
    batch: u64,
    records: R,
}

/// The 32-byte file header for `generation`, in the format this build writes.
pub fn encode_header(generation: u64) -> [u8; HEADER_BYTES] {
    encode_header_version(generation, FORMAT_VERSION)
}

/// The 32-byte file header for `generation` in format `version` (tests write old journals).
pub fn encode_header_version(generation: u64, version: u32) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[MAGIC_OFFSET..VERSION_OFFSET].copy_from_slice(&MAGIC);
    h[VERSION_OFFSET..FLAGS_OFFSET].copy_from_slice(&version.to_le_bytes());
    h[GENERATION_OFFSET..HEADER_CRC_OFFSET].copy_from_slice(&generation.to_le_bytes());
    let crc = crc32fast::hash(&h[..HEADER_CRC_OFFSET]);
    h[HEADER_CRC_OFFSET..RESERVED_OFFSET].copy_from_slice(&crc.to_le_bytes());
    h
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn corrupt(what: String) -> Error {
    Error::new(
        Code::RecoveryRequired,
        format!(
            "messages.journal {what}; the store was left untouched: preserve it and inspect before recovering"
        ),
    )
}

/// Validates the file header and returns its generation.
pub fn decode_header(bytes: &[u8]) -> Result<u64> {
    decode_header_version(bytes).map(|(generation, _)| generation)
}

/// Validates the file header and returns its generation and format version.
pub fn decode_header_version(bytes: &[u8]) -> Result<(u64, u32)> {
    if bytes.len() < HEADER_BYTES {
        return Err(corrupt(format!(
            "is {} bytes, shorter than its header",
            bytes.len()
        )));
    }
    if bytes[MAGIC_OFFSET..VERSION_OFFSET] != MAGIC {
        return Err(corrupt("does not start with the journal magic".into()));
    }
    let crc = u32_at(bytes, HEADER_CRC_OFFSET);
    if crc != crc32fast::hash(&bytes[..HEADER_CRC_OFFSET]) {
        return Err(corrupt("header checksum mismatch".into()));
    }
    let version = u32_at(bytes, VERSION_OFFSET);
    if version != FORMAT_VERSION && version != FORMAT_VERSION_UNMARKED {
        return Err(corrupt(format!(
            "has format version {version}, this build reads {FORMAT_VERSION_UNMARKED} and {FORMAT_VERSION}"
        )));
    }
    let mut g = [0u8; 8];
    g.copy_from_slice(&bytes[GENERATION_OFFSET..HEADER_CRC_OFFSET]);
    let generation = u64::from_le_bytes(g);
    if generation == 0 {
        return Err(corrupt("has generation 0".into()));
    }
    Ok((generation, version))
}

fn len_crc(len: u32) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(LEN_CRC_DOMAIN);
    h.update(&len.to_le_bytes());
    h.finalize()
}

/// One frame holding batch number `batch` and its records.
///
/// The payload is serialised in place after a header-sized gap that is filled in afterwards:
/// one buffer, sized up front for the batch (each record's fields, plus its peer text with a
/// margin for escapes), instead of a payload grown from empty (a reallocation and a copy per
/// doubling: four buffers for a 4 KB message) and then copied behind its header.
pub fn encode_frame(batch: u64, records: &[Record]) -> Result<Vec<u8>> {
    let mut f = Vec::with_capacity(frame_capacity(records));
    f.resize(FRAME_HEADER_BYTES, 0);
    serde_json::to_writer(&mut f, &BatchBody { batch, records })
        .map_err(|e| Error::new(Code::Io, format!("cannot encode a journal batch: {e}")))?;
    let payload = f.get(FRAME_HEADER_BYTES..).unwrap_or_default();
    let len = u32::try_from(payload.len())
        .map_err(|_| Error::new(Code::Io, "journal batch exceeds 4 GiB"))?;
    assert!(payload.last() != Some(&0), "a payload never ends in 0x00");
    let crc = crc32fast::hash(payload);
    let mut header = [0u8; FRAME_HEADER_BYTES];
    header[FRAME_LEN_OFFSET..FRAME_LEN_CRC_OFFSET].copy_from_slice(&len.to_le_bytes());
    header[FRAME_LEN_CRC_OFFSET..FRAME_CRC_OFFSET].copy_from_slice(&len_crc(len).to_le_bytes());
    header[FRAME_CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
    if let Some(gap) = f.get_mut(..FRAME_HEADER_BYTES) {
        gap.copy_from_slice(&header);
    }
    Ok(f)
}

/// The buffer a frame of `records` is encoded into: its header, and per record its fields
/// and its peer text with a margin for escapes (at most [`FRAME_CAPACITY_MAX`] in all).
fn frame_capacity(records: &[Record]) -> usize {
    let payload = records
        .iter()
        .map(|r| FRAME_CAPACITY_HINT + rpc::escaped_len_hint(r.text_len()))
        .fold(0usize, usize::saturating_add)
        .min(FRAME_CAPACITY_MAX);
    FRAME_HEADER_BYTES + payload
}

/// Bytes reserved per record when a frame's buffer is allocated, beside its peer text: a
/// message's outbox or inbox record with a short body fits, so most frames are written
/// without growing their buffer.
const FRAME_CAPACITY_HINT: usize = 1024;

fn mark_crc(generation: u64, batches: u64) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(MARK_CRC_DOMAIN);
    h.update(&generation.to_le_bytes());
    h.update(&batches.to_le_bytes());
    h.finalize()
}

/// The end mark of journal `generation` after `batches` complete frames.
pub fn encode_mark(generation: u64, batches: u64) -> [u8; MARK_BYTES] {
    let mut m = [0u8; MARK_BYTES];
    m[FRAME_LEN_OFFSET..FRAME_LEN_CRC_OFFSET].copy_from_slice(&MARK_LEN.to_le_bytes());
    m[FRAME_LEN_CRC_OFFSET..MARK_BATCHES_OFFSET].copy_from_slice(&len_crc(MARK_LEN).to_le_bytes());
    m[MARK_BATCHES_OFFSET..MARK_CRC_OFFSET].copy_from_slice(&batches.to_le_bytes());
    m[MARK_CRC_OFFSET..].copy_from_slice(&mark_crc(generation, batches).to_le_bytes());
    m
}

/// Makes `frame` (from [`encode_frame`]: batch `batch` of journal `generation`, to be written
/// at byte `at`) ready for its one `pwrite`: pads its payload with one space when the frame
/// would end on a sector boundary (so its last byte and the mark's first share a sector), then
/// appends the end mark. Returns the frame's length without the mark.
pub fn seal(frame: &mut Vec<u8>, at: u64, generation: u64, batch: u64) -> usize {
    if (at + frame.len() as u64).is_multiple_of(SECTOR_BYTES) && frame.len() > FRAME_HEADER_BYTES {
        frame.push(b' ');
        let payload = frame.get(FRAME_HEADER_BYTES..).unwrap_or_default();
        let len = payload.len() as u32;
        let crc = crc32fast::hash(payload);
        frame[FRAME_LEN_OFFSET..FRAME_LEN_CRC_OFFSET].copy_from_slice(&len.to_le_bytes());
        frame[FRAME_LEN_CRC_OFFSET..FRAME_CRC_OFFSET].copy_from_slice(&len_crc(len).to_le_bytes());
        frame[FRAME_CRC_OFFSET..FRAME_HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    }
    let own = frame.len();
    frame.extend_from_slice(&encode_mark(generation, batch));
    own
}

/// The result of scanning a journal file.
#[derive(Debug, Default)]
pub struct Scan {
    pub generation: u64,
    /// Whether the journal carries end marks (format 2); an older one is replaced at open.
    pub marked: bool,
    /// Records of every complete batch, in order.
    pub batches: Vec<Vec<Record>>,
    /// Bytes that hold the header and complete batches; a torn tail starts here.
    pub valid_len: u64,
    /// Written bytes after `valid_len` (a torn, never acknowledged tail) to discard; the
    /// zeros after them are not counted (0 for a clean end, preallocated or not).
    pub torn_bytes: u64,
    /// The file's size: `valid_len` plus the torn tail plus the zero-filled room after it.
    pub file_len: u64,
}

/// Scans a whole journal file. A torn tail is reported (not an error); corruption, and in a
/// marked journal any committed frame missing, is `RECOVERY_REQUIRED`. `frame_bytes_max`
/// bounds one frame's payload.
pub fn scan(bytes: &[u8], frame_bytes_max: u64) -> Result<Scan> {
    let (generation, version) = decode_header_version(bytes)?;
    let end = bytes.len();
    let zero_from = end - bytes.iter().rev().take_while(|b| **b == 0).count();
    let mut scan = Scan {
        generation,
        marked: version == FORMAT_VERSION,
        ..Scan::default()
    };
    let mut o = HEADER_BYTES;
    loop {
        let done = scan.batches.len() as u64;
        if scan.marked {
            match mark_at(bytes, o, zero_from, generation, done)? {
                Mark::Absent => {}
                Mark::End => break,
                Mark::Torn => {
                    scan.torn_bytes = (zero_from - o) as u64;
                    break;
                }
            }
        }
        if o >= zero_from {
            if scan.marked {
                return Err(corrupt(format!(
                    "has no end mark after batch {done} at byte {o}: committed bytes from byte {o} on were zeroed or cut off, at least 1 committed batch (batch {} on) is missing",
                    done + 1
                )));
            }
            // Zeros from `o` to the end are the preallocated, never written room.
            break;
        }
        let reach = if scan.marked {
            MARK_BYTES + 1
        } else {
            FRAME_HEADER_BYTES
        };
        match frame_at(bytes, o, zero_from, frame_bytes_max, reach)? {
            Frame::Torn => {
                if scan.marked && !tear_can_end_at(o, zero_from) {
                    return Err(corrupt(format!(
                        "frame of batch {} at byte {o} ends at byte {zero_from}, where no torn write ends: committed bytes were zeroed or cut off, at least 1 committed batch (batch {} on) is damaged",
                        done + 1,
                        done + 1
                    )));
                }
                scan.torn_bytes = (zero_from - o) as u64;
                break;
            }
            Frame::Complete {
                next,
                batch,
                records,
            } => {
                let want = done + 1;
                if batch != want {
                    return Err(corrupt(format!(
                        "batch at byte {o} is number {batch}, expected {want}"
                    )));
                }
                scan.batches.push(records);
                o = next;
            }
        }
    }
    scan.valid_len = o.min(end) as u64;
    scan.file_len = end as u64;
    Ok(scan)
}

/// Whether a torn write of a frame begun at `o` (over the end mark there) can leave the file's
/// written bytes ending at `written_to`. The sectors that landed hold new bytes up to a sector
/// boundary `b` (payload bytes are never 0x00, so they end exactly there), or, when `b` cuts
/// the old mark, the old mark's remaining bytes follow up to at most `o + MARK_BYTES`.
pub fn tear_can_end_at(o: usize, written_to: usize) -> bool {
    let b = (o as u64 / SECTOR_BYTES + 1) * SECTOR_BYTES;
    (written_to as u64).is_multiple_of(SECTOR_BYTES)
        || (b < (o + MARK_BYTES) as u64 && b < written_to as u64 && written_to <= o + MARK_BYTES)
}

enum Mark {
    /// No mark starts at this offset (a frame, or nothing).
    Absent,
    /// The end mark for the batches before it, and only room after it.
    End,
    /// The first bytes of the mark, cut at a sector boundary: a torn write of the frame
    /// before it (complete, but never synced, so never acknowledged).
    Torn,
}

fn mark_at(
    bytes: &[u8],
    o: usize,
    zero_from: usize,
    generation: u64,
    batches: u64,
) -> Result<Mark> {
    let end = bytes.len();
    if o + MARK_BATCHES_OFFSET > end
        || u32_at(bytes, o + FRAME_LEN_OFFSET) != MARK_LEN
        || u32_at(bytes, o + FRAME_LEN_CRC_OFFSET) != len_crc(MARK_LEN)
    {
        return Ok(Mark::Absent);
    }
    let want = encode_mark(generation, batches);
    let have = &bytes[o..end.min(o + MARK_BYTES)];
    if have == want {
        if zero_from > o + MARK_BYTES {
            return Err(corrupt(format!(
                "has bytes after its end mark at byte {o} (a frame is only written at the end)"
            )));
        }
        return Ok(Mark::End);
    }
    let sector_end = ((o as u64 / SECTOR_BYTES + 1) * SECTOR_BYTES) as usize;
    let written = zero_from.min(end);
    if sector_end < o + MARK_BYTES
        && written <= sector_end
        && bytes.get(o..written) == want.get(..written - o)
    {
        return Ok(Mark::Torn);
    }
    Err(corrupt(format!(
        "end mark at byte {o} does not match the {batches} batches before it"
    )))
}

enum Frame {
    Torn,
    Complete {
        next: usize,
        batch: u64,
        records: Vec<Record>,
    },
}

/// The frame at `o`. A header whose checksum fails is a torn one when the written bytes end
/// within `header_reach` bytes of `o` (the frame's header; in a marked journal, the mark the
/// torn frame was written over, whose remains may follow the header's written part).
fn frame_at(
    bytes: &[u8],
    o: usize,
    zero_from: usize,
    frame_bytes_max: u64,
    header_reach: usize,
) -> Result<Frame> {
    let end = bytes.len();
    if end - o < FRAME_HEADER_BYTES {
        return Ok(Frame::Torn);
    }
    let len = u32_at(bytes, o + FRAME_LEN_OFFSET);
    if u32_at(bytes, o + FRAME_LEN_CRC_OFFSET) != len_crc(len) {
        if zero_from < o + header_reach {
            return Ok(Frame::Torn);
        }
        return Err(corrupt(format!(
            "frame header checksum mismatch at byte {o}"
        )));
    }
    // One byte over the bound: the space that keeps a frame off a sector boundary.
    if len == 0 || u64::from(len) > frame_bytes_max.saturating_add(1) {
        return Err(corrupt(format!(
            "frame at byte {o} claims {len} bytes (bound {frame_bytes_max})"
        )));
    }
    let body_at = o + FRAME_HEADER_BYTES;
    let next = body_at + len as usize;
    if next > end {
        return Ok(Frame::Torn);
    }
    let payload = &bytes[body_at..next];
    if crc32fast::hash(payload) != u32_at(bytes, o + FRAME_CRC_OFFSET) {
        if zero_from < next {
            return Ok(Frame::Torn);
        }
        return Err(corrupt(format!("frame checksum mismatch at byte {o}")));
    }
    let body: BatchBody<Vec<Record>> = serde_json::from_slice(payload).map_err(|e| {
        corrupt(format!(
            "frame at byte {o} has a valid checksum but cannot be parsed ({e})"
        ))
    })?;
    Ok(Frame::Complete {
        next,
        batch: body.batch,
        records: body.records,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messaging::Record;

    fn rec(n: u64) -> Record {
        Record::PushDone { cursor: n }
    }

    /// A journal written before end marks (format 1), and its frame boundaries.
    fn file(batches: &[&[Record]]) -> (Vec<u8>, Vec<usize>) {
        let mut f = encode_header_version(3, FORMAT_VERSION_UNMARKED).to_vec();
        let mut ends = vec![f.len()];
        for (i, b) in batches.iter().enumerate() {
            f.extend(encode_frame(i as u64 + 1, b).unwrap());
            ends.push(f.len());
        }
        (f, ends)
    }

    /// A frame is its payload's length, that length's checksum, the payload's crc32 and the
    /// payload (the batch as compact JSON), whatever the batch's size against the buffer's
    /// initial capacity.
    #[test]
    fn a_frame_is_its_header_then_the_batch_json() {
        for n in [0usize, 1, 3, 40] {
            let records: Vec<Record> = (0..n as u64).map(rec).collect();
            let payload = serde_json::to_vec(&BatchBody {
                batch: 7,
                records: &records,
            })
            .unwrap();
            let len = payload.len() as u32;
            let mut want = len.to_le_bytes().to_vec();
            want.extend(len_crc(len).to_le_bytes());
            want.extend(crc32fast::hash(&payload).to_le_bytes());
            want.extend(&payload);
            assert_eq!(encode_frame(7, &records).unwrap(), want, "{n} records");
        }
    }

    /// A record carrying kilobytes of peer text fits the buffer sized up front (no
    /// reallocation, no copy per doubling); text with more escapes than the margin still
    /// encodes whole.
    #[test]
    fn a_frame_is_sized_for_its_peer_text() {
        let note = |text: String| Record::Context {
            entry: crate::messaging::ContextEntry {
                recipient_peer_id: "p-recipient".into(),
                sequence: 1,
                message_id: "m-1".into(),
                note: text,
                implicit: false,
                at_ms: 5,
            },
        };
        for len in [0usize, 200, 1500, 4000, 8000] {
            // Prose, and code: a line break and a quote or two in every 40 bytes.
            let code = "    let s = \"a line of code\";       \n".repeat(len / 40);
            for text in ["a".repeat(len), code] {
                let records = [note(text), rec(1)];
                let f = encode_frame(1, &records).unwrap();
                assert!(f.len() <= frame_capacity(&records), "{len} bytes");
                assert_eq!(scan_frames(&f), vec![records.to_vec()]);
            }
        }
        let records = [note("\n".repeat(4000))];
        let f = encode_frame(1, &records).unwrap();
        assert!(f.len() > frame_capacity(&records));
        assert_eq!(scan_frames(&f), vec![records.to_vec()]);
    }

    /// The batches of a journal made of a header and `frame`.
    fn scan_frames(frame: &[u8]) -> Vec<Vec<Record>> {
        let mut f = encode_header_version(1, FORMAT_VERSION_UNMARKED).to_vec();
        f.extend_from_slice(frame);
        scan(&f, 1 << 20).unwrap().batches
    }

    #[test]
    fn round_trip_and_header_checks() {
        let (f, ends) = file(&[&[rec(1), rec(2)], &[rec(3)]]);
        let s = scan(&f, 1 << 20).unwrap();
        assert_eq!(
            (s.generation, s.batches.len(), s.valid_len, s.torn_bytes),
            (3, 2, *ends.last().unwrap() as u64, 0)
        );
        assert_eq!(s.batches[1], vec![rec(3)]);
        assert_ne!(len_crc(0), 0, "an all-zero frame header must never verify");
        let mut bad = f.clone();
        bad[9] ^= 1;
        assert_eq!(
            scan(&bad, 1 << 20).unwrap_err().code,
            Code::RecoveryRequired
        );
        assert_eq!(
            scan(&f[..20], 1 << 20).unwrap_err().code,
            Code::RecoveryRequired
        );
    }

    #[test]
    fn every_truncation_inside_the_last_batch_is_a_torn_tail() {
        let (f, ends) = file(&[&[rec(1)], &[rec(2), rec(3)]]);
        for cut in ends[1]..ends[2] {
            let s = scan(&f[..cut], 1 << 20).unwrap();
            assert_eq!(
                (s.batches.len(), s.valid_len as usize),
                (1, ends[1]),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn zero_filled_tails_are_torn() {
        let (f, ends) = file(&[&[rec(1)], &[rec(2), rec(3)]]);
        for from in ends[1]..ends[2] {
            let mut z = f.clone();
            z[from..].iter_mut().for_each(|b| *b = 0);
            z.extend([0u8; 4096]);
            let s = scan(&z, 1 << 20).unwrap();
            assert_eq!(
                (s.batches.len(), s.valid_len as usize),
                (1, ends[1]),
                "zeros from {from}"
            );
        }
        let mut pre = f.clone();
        pre.extend([0u8; 100]);
        assert_eq!(scan(&pre, 1 << 20).unwrap().batches.len(), 2);
    }

    /// `f` followed by zero-filled room up to `size` bytes, as the writer preallocates it.
    fn with_room(f: &[u8], size: usize) -> Vec<u8> {
        let mut r = f.to_vec();
        r.resize(size, 0);
        r
    }

    #[test]
    fn a_preallocated_clean_end_is_not_torn() {
        let (f, ends) = file(&[&[rec(1)], &[rec(2), rec(3)]]);
        for size in [
            f.len(),
            f.len() + 1,
            f.len() + 11,
            f.len() + 12,
            4096,
            65_536,
        ] {
            let s = scan(&with_room(&f, size), 1 << 20).unwrap();
            assert_eq!(
                (s.batches.len(), s.valid_len, s.torn_bytes, s.file_len),
                (2, ends[2] as u64, 0, size as u64),
                "room up to {size}"
            );
        }
        // A journal that is only its header and room: no batch, nothing torn.
        let s = scan(
            &with_room(&encode_header_version(1, FORMAT_VERSION_UNMARKED), 4096),
            1 << 20,
        )
        .unwrap();
        assert_eq!(
            (s.batches.len(), s.valid_len, s.torn_bytes),
            (0, HEADER_BYTES as u64, 0)
        );
    }

    #[test]
    fn a_frame_torn_inside_the_room_at_every_byte_is_a_torn_tail() {
        let (f, ends) = file(&[&[rec(1)], &[rec(2), rec(3)]]);
        let size = 4096;
        for cut in ends[1]..ends[2] {
            let s = scan(&with_room(&f[..cut], size), 1 << 20).unwrap();
            // The torn frame's written bytes end at its last non-zero byte before the cut.
            let written = cut - f[..cut].iter().rev().take_while(|b| **b == 0).count();
            assert_eq!(
                (s.batches.len(), s.valid_len as usize, s.torn_bytes as usize),
                (1, ends[1], written.max(ends[1]) - ends[1]),
                "cut at {cut}"
            );
        }
    }

    /// Flipping bit 0, 3 or 7 of any byte in `range` of `bytes` is corruption.
    fn assert_flips_are_corruption(bytes: &[u8], range: std::ops::Range<usize>) {
        for at in range {
            for bit in [0, 3, 7] {
                let mut x = bytes.to_vec();
                x[at] ^= 1 << bit;
                let e = scan(&x, 1 << 20).unwrap_err();
                assert_eq!(e.code, Code::RecoveryRequired, "flip at {at} bit {bit}");
            }
        }
    }

    #[test]
    fn bit_flips_in_a_preallocated_journal_stay_corruption() {
        let (f, ends) = file(&[&[rec(1)], &[rec(2)], &[rec(3)]]);
        let room = with_room(&f, 4096);
        assert_flips_are_corruption(&room, ends[0]..ends[2]);
        // The complete last frame with a bad checksum and zeros after it: corruption too.
        let mut x = room.clone();
        x[ends[3] - 2] ^= 0x10;
        assert_eq!(scan(&x, 1 << 20).unwrap_err().code, Code::RecoveryRequired);
        // Bytes in the room past a gap of zeros were never a frame written at the end.
        for at in [ends[3] + FRAME_HEADER_BYTES, 4000] {
            let mut x = room.clone();
            x[at] = 1;
            assert_eq!(
                scan(&x, 1 << 20).unwrap_err().code,
                Code::RecoveryRequired,
                "byte set at {at}"
            );
        }
    }

    #[test]
    fn any_bit_flip_in_an_earlier_batch_is_corruption() {
        let (f, ends) = file(&[&[rec(1)], &[rec(2)], &[rec(3)]]);
        assert_flips_are_corruption(&f, ends[0]..ends[2]);
    }

    #[test]
    fn a_complete_last_frame_with_a_bad_checksum_is_corruption() {
        let (f, ends) = file(&[&[rec(1)], &[rec(2)]]);
        let mut x = f.clone();
        x[ends[1] + FRAME_HEADER_BYTES + 2] ^= 0x10;
        assert_eq!(scan(&x, 1 << 20).unwrap_err().code, Code::RecoveryRequired);
        // Oversized frames and repeated batch numbers too.
        assert_eq!(scan(&f, 8).unwrap_err().code, Code::RecoveryRequired);
        let mut dup = encode_header_version(1, FORMAT_VERSION_UNMARKED).to_vec();
        dup.extend(encode_frame(1, &[rec(1)]).unwrap());
        dup.extend(encode_frame(1, &[rec(2)]).unwrap());
        assert_eq!(
            scan(&dup, 1 << 20).unwrap_err().code,
            Code::RecoveryRequired
        );
    }

    /// A marked journal (format 2) of `batches`, written frame by frame as the writer does:
    /// each frame sealed at its offset, its mark after it, the next frame over that mark.
    /// Returns the bytes (room up to `size`) and the frames' start offsets plus the logical end.
    fn marked(batches: &[&[Record]], size: usize) -> (Vec<u8>, Vec<usize>) {
        let mut f = encode_header(3).to_vec();
        f.extend(encode_mark(3, 0));
        let mut ends = vec![HEADER_BYTES];
        for (i, b) in batches.iter().enumerate() {
            let at = *ends.last().unwrap();
            let mut frame = encode_frame(i as u64 + 1, b).unwrap();
            let own = seal(&mut frame, at as u64, 3, i as u64 + 1);
            f.truncate(at);
            f.extend(&frame);
            ends.push(at + own);
        }
        f.resize(size.max(f.len()), 0);
        (f, ends)
    }

    fn three() -> Vec<Vec<Record>> {
        vec![vec![rec(1)], vec![rec(2), rec(3)], vec![rec(4)]]
    }

    #[test]
    fn a_marked_journal_reads_back_with_or_without_room() {
        let b = three();
        let refs: Vec<&[Record]> = b.iter().map(|v| v.as_slice()).collect();
        for size in [0, 4096] {
            let (f, ends) = marked(&refs, size);
            let s = scan(&f, 1 << 20).unwrap();
            assert!(s.marked);
            assert_eq!(
                (s.batches, s.valid_len, s.torn_bytes),
                (b.clone(), ends[3] as u64, 0)
            );
        }
        let (f, _) = marked(&[], 4096);
        assert_eq!(scan(&f, 1 << 20).unwrap().batches.len(), 0);
    }

    /// Zeros from, or a cut at, any frame boundary of a marked journal (the mark included)
    /// lose committed frames: refused, never read as room.
    #[test]
    fn zeros_or_a_cut_at_any_frame_boundary_are_refused() {
        let b = three();
        let refs: Vec<&[Record]> = b.iter().map(|v| v.as_slice()).collect();
        let (f, ends) = marked(&refs, 4096);
        for &at in &ends {
            let mut z = f.clone();
            z[at..].fill(0);
            let e = scan(&z, 1 << 20).unwrap_err();
            assert_eq!(e.code, Code::RecoveryRequired, "zeros from {at}");
            assert!(e.message.contains(&format!("byte {at}")), "{}", e.message);
            let e = scan(&f[..at], 1 << 20).unwrap_err();
            assert_eq!(e.code, Code::RecoveryRequired, "cut at {at}");
        }
    }

    /// Zeros from any byte inside the journal are refused unless a torn write could have left
    /// them (a sector boundary, or a frame's first bytes): then only the last frame is lost.
    #[test]
    fn zeros_inside_a_frame_are_refused_unless_a_tear_could_leave_them() {
        let b = three();
        let refs: Vec<&[Record]> = b.iter().map(|v| v.as_slice()).collect();
        let (f, ends) = marked(&refs, 4096);
        for at in HEADER_BYTES..ends[3] + MARK_BYTES {
            let mut z = f.clone();
            z[at..].fill(0);
            match scan(&z, 1 << 20) {
                Err(e) => assert_eq!(e.code, Code::RecoveryRequired),
                Ok(s) => {
                    let i = ends.iter().rposition(|e| *e <= at).unwrap();
                    let last = ends[i];
                    assert!(
                        (at as u64).is_multiple_of(SECTOR_BYTES)
                            || (last..last + MARK_BYTES).contains(&at),
                        "zeros from {at} read as a tear"
                    );
                    assert_eq!(s.batches.len(), i, "zeros from {at}: frames before kept");
                    assert!(s.torn_bytes > 0, "zeros from {at}");
                }
            }
        }
    }

    /// A torn write of the next frame over the mark — any prefix of its sectors landed — is a
    /// torn tail: the frames before it all read back, nothing is refused.
    #[test]
    fn a_frame_torn_at_any_sector_boundary_is_a_torn_tail() {
        let big = Record::Context {
            entry: crate::messaging::ContextEntry {
                recipient_peer_id: "p".into(),
                sequence: 1,
                message_id: "m".into(),
                note: "n".repeat(1500),
                implicit: false,
                at_ms: 1,
            },
        };
        for pad in 0..40 {
            let first = vec![Record::Context {
                entry: crate::messaging::ContextEntry {
                    recipient_peer_id: "p".into(),
                    sequence: 1,
                    message_id: "m".into(),
                    note: "x".repeat(pad * 13),
                    implicit: false,
                    at_ms: 1,
                },
            }];
            let (before, ends) = marked(&[&first], 8192);
            let (after, ends2) = marked(&[&first, std::slice::from_ref(&big)], 8192);
            assert_ne!(
                ends2[2] as u64 % SECTOR_BYTES,
                0,
                "a frame never ends on a sector"
            );
            let start = ends[1];
            let stop = ends2[2] + MARK_BYTES;
            let mut b = start as u64 / SECTOR_BYTES * SECTOR_BYTES + SECTOR_BYTES;
            while (b as usize) < stop {
                let mut torn = before.clone();
                torn[start..b as usize].copy_from_slice(&after[start..b as usize]);
                let s = scan(&torn, 1 << 20)
                    .unwrap_or_else(|e| panic!("pad {pad}, torn at {b}: {e:?}"));
                assert!(!s.batches.is_empty(), "pad {pad} torn at {b}");
                b += SECTOR_BYTES;
            }
        }
    }

    /// The fuzz corpus holds a marked journal, so mutations start from the current format.
    #[test]
    fn the_fuzz_seed_is_a_marked_journal() {
        let seed = include_bytes!("../../fuzz/corpus/journal_scan/marked-one-batch");
        let s = scan(seed, 4096).unwrap();
        assert!(s.marked);
        assert_eq!((s.batches.len(), s.torn_bytes), (1, 0));
    }
}
