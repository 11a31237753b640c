//! The checksummed envelope every file under `peer-resources/` is stored in:
//! `{"crc32":"<8 lowercase hex>","body":<body JSON>}`, the crc32 taken over the exact body bytes
//! as they stand in the file. The layout is fixed byte for byte, so a change anywhere — the
//! frame, the digits, the body — is a mismatch: crc32 detects every error confined to 32
//! consecutive bits, which covers any one changed byte. Still plain JSON for `jq` and eyes.

/// Bytes before the eight hex digits.
const HEAD: &[u8] = b"{\"crc32\":\"";
/// Bytes between the hex digits and the body.
const MID: &[u8] = b"\",\"body\":";
/// Length of the checksum's hex digits.
const DIGITS: usize = 8;
/// Envelope bytes around the body.
pub const OVERHEAD: usize = HEAD.len() + DIGITS + MID.len() + 1;

/// Why a file's bytes are not a valid envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broken {
    /// The fixed frame around the body is not there (or the file predates checksums).
    Frame,
    /// The digits are not eight lowercase hex digits, or do not match the body.
    Checksum,
}

impl Broken {
    pub fn describe(self) -> &'static str {
        match self {
            Broken::Frame => "has no valid checksum envelope",
            Broken::Checksum => "fails its checksum",
        }
    }
}

/// Wraps `body` (compact JSON) in the envelope.
pub fn seal(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + OVERHEAD);
    out.extend_from_slice(HEAD);
    out.extend_from_slice(format!("{:08x}", crc32fast::hash(body)).as_bytes());
    out.extend_from_slice(MID);
    out.extend_from_slice(body);
    out.push(b'}');
    out
}

/// The body of a sealed file, only when frame and checksum both hold.
pub fn open(bytes: &[u8]) -> Result<&[u8], Broken> {
    let rest = bytes.strip_prefix(HEAD).ok_or(Broken::Frame)?;
    let (digits, rest) = rest.split_at_checked(DIGITS).ok_or(Broken::Frame)?;
    let rest = rest.strip_prefix(MID).ok_or(Broken::Frame)?;
    let body = rest.strip_suffix(b"}").ok_or(Broken::Frame)?;
    // Lowercase only: a flipped case bit must not parse to the same value.
    if !digits
        .iter()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return Err(Broken::Checksum);
    }
    let text = std::str::from_utf8(digits).map_err(|_| Broken::Checksum)?;
    let stored = u32::from_str_radix(text, 16).map_err(|_| Broken::Checksum)?;
    if stored != crc32fast::hash(body) {
        return Err(Broken::Checksum);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_single_bit_flip_is_refused() {
        let body = br#"{"a":1,"b":"xyz"}"#;
        let sealed = seal(body);
        assert_eq!(sealed.len(), body.len() + OVERHEAD);
        assert_eq!(open(&sealed).unwrap(), body);
        let parsed: serde_json::Value = serde_json::from_slice(&sealed).unwrap();
        assert_eq!(parsed["body"]["b"], "xyz");
        for i in 0..sealed.len() {
            for bit in 0..8 {
                let mut bad = sealed.clone();
                bad[i] ^= 1 << bit;
                assert!(
                    open(&bad).is_err(),
                    "flip of bit {bit} at byte {i} accepted"
                );
            }
        }
        assert_eq!(open(b"").unwrap_err(), Broken::Frame);
        assert_eq!(open(body).unwrap_err(), Broken::Frame);
        assert!(open(&sealed[..sealed.len() - 1]).is_err());
    }

    #[test]
    fn uppercase_digits_are_refused() {
        let sealed = seal(b"{}");
        let text = String::from_utf8(sealed).unwrap();
        let upper = text.replacen(&text[10..18], &text[10..18].to_uppercase(), 1);
        if upper != text {
            assert_eq!(open(upper.as_bytes()).unwrap_err(), Broken::Checksum);
        }
    }
}
