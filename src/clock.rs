//! Wall-clock time in epoch milliseconds and its ISO-8601 form, as presence records need.
#![forbid(unsafe_code)]

use std::time::{SystemTime, UNIX_EPOCH};

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `2026-12-03T09:15:02.481Z` for an epoch-millisecond time.
pub fn iso8601(ms: u64) -> String {
    let secs = (ms / 1000) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        ms % 1000
    )
}

/// Parses the ISO-8601 UTC forms JavaScript's `toISOString` and we write; `None` otherwise.
pub fn parse_iso8601(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (y, mo, d, h, mi, se) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let rest = &s[19..];
    let (frac_ms, tail) = match rest.strip_prefix('.') {
        Some(r) => {
            let digits: String = r.chars().take_while(|c| c.is_ascii_digit()).collect();
            if digits.is_empty() {
                return None;
            }
            let mut ms: i64 = 0;
            for (i, c) in digits.chars().take(3).enumerate() {
                ms += (c as i64 - '0' as i64) * [100, 10, 1][i];
            }
            (ms, &r[digits.len()..])
        }
        None => (0, rest),
    };
    if tail != "Z" {
        return None;
    }
    let days = days_from_civil(y, mo as u32, d as u32);
    let total = ((days * 86_400 + h * 3600 + mi * 60 + se) * 1000) + frac_ms;
    u64::try_from(total).ok()
}

// Howard Hinnant's civil-date algorithms.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 } as i64;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_round_trips() {
        for ms in [0u64, 1_786_003_200_123, 1_796_288_102_481, 951_782_400_000] {
            assert_eq!(parse_iso8601(&iso8601(ms)), Some(ms), "{}", iso8601(ms));
        }
        assert_eq!(iso8601(1_796_288_102_481), "2026-12-03T08:55:02.481Z");
        assert_eq!(
            parse_iso8601("2026-12-03T09:15:02Z"),
            Some(1_796_289_302_000)
        );
        assert_eq!(parse_iso8601("garbage"), None);
        assert_eq!(parse_iso8601("2026-12-03T09:15:02+01:00"), None);
    }
}
