//! Sample statistics and figure formatting for `peer bench`: nearest-rank percentiles, the
//! median/p99/N summary every figure carries, and the ratio-to-floor text. Pure code.

use serde_json::{Value, json};

/// Nearest-rank percentile of ascending `sorted`: `v[ceil(n·p) − 1]`, `None` when empty.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=1.0).contains(&p) {
        return None;
    }
    let n = sorted.len();
    let rank = (n as f64 * p).ceil() as usize;
    // p = 0 gives rank 0; the nearest-rank minimum is the first sample.
    sorted.get(rank.max(1) - 1).copied()
}

/// Median, p99 and count of one set of samples (microseconds for latencies).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub p99: f64,
}

impl Summary {
    /// Summarises `samples` (any order; non-finite values are dropped).
    pub fn of(samples: &[f64]) -> Summary {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        Summary {
            n: v.len(),
            median: percentile(&v, 0.5).unwrap_or(f64::NAN),
            p99: percentile(&v, 0.99).unwrap_or(f64::NAN),
        }
    }

    pub fn to_json(self) -> Value {
        json!({"n": self.n, "medianUs": round2(self.median), "p99Us": round2(self.p99)})
    }
}

/// `value / floor`, `NaN` when the floor is not a positive finite number.
pub fn ratio(value: f64, floor: f64) -> f64 {
    if floor.is_finite() && floor > 0.0 && value.is_finite() {
        value / floor
    } else {
        f64::NAN
    }
}

/// A ratio as text: `2.31×`, `0.0512×` below 0.1 (three significant digits), or `n/a` when
/// it could not be computed.
pub fn ratio_text(r: f64) -> String {
    if !r.is_finite() {
        "n/a".to_string()
    } else if r.abs() < 0.1 && r != 0.0 {
        let decimals = (2 - decimal_exponent(r)).clamp(0, 12) as usize;
        format!("{r:.decimals$}×")
    } else {
        format!("{r:.2}×")
    }
}

/// A ratio for JSON output: two decimals, or three significant digits below 0.1 (a ceiling
/// far above the figure must not round to 0); `null` for non-finite values.
pub fn round_ratio(x: f64) -> Value {
    if !x.is_finite() || x.abs() >= 0.1 || x == 0.0 {
        return round2(x);
    }
    let scale = 10f64.powi(2 - decimal_exponent(x));
    json!((x * scale).round() / scale)
}

/// The power of ten of `x`'s leading digit (`-3` for `0.00512`), read from the exact
/// scientific formatting of the standard library rather than `log10`: `log10` was the only
/// libm function the binary called, and without it no root maps libm at all.
fn decimal_exponent(x: f64) -> i32 {
    let text = format!("{:e}", x.abs());
    text.rsplit_once('e')
        .and_then(|(_, e)| e.parse().ok())
        .unwrap_or(0)
}

/// A duration in microseconds as text with a unit that keeps 3 significant digits.
pub fn micros_text(us: f64) -> String {
    if !us.is_finite() {
        return "n/a".to_string();
    }
    if us >= 1_000_000.0 {
        format!("{:.2} s", us / 1_000_000.0)
    } else if us >= 1_000.0 {
        format!("{:.2} ms", us / 1_000.0)
    } else {
        format!("{us:.1} µs")
    }
}

/// A rate as text, e.g. `12 345 msg/s`.
pub fn rate_text(per_second: f64) -> String {
    if per_second.is_finite() {
        format!("{per_second:.0} msg/s")
    } else {
        "n/a".to_string()
    }
}

/// Rounds to two decimals for JSON output; `null` for non-finite values.
pub fn round2(x: f64) -> Value {
    if x.is_finite() {
        json!((x * 100.0).round() / 100.0)
    } else {
        Value::Null
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_ratios_keep_three_significant_digits() {
        assert_eq!(ratio_text(2.3149), "2.31×");
        assert_eq!(ratio_text(0.0051234), "0.00512×");
        assert_eq!(ratio_text(f64::NAN), "n/a");
        assert_eq!(round_ratio(0.0051234), json!(0.00512));
        assert_eq!(round_ratio(0.05), json!(0.05));
        assert_eq!(round_ratio(1.234), json!(1.23));
        assert_eq!(round_ratio(f64::INFINITY), Value::Null);
        // Exact powers of ten and negative ratios take the same digits.
        assert_eq!(ratio_text(0.001), "0.00100×");
        assert_eq!(ratio_text(-0.05), "-0.0500×");
        assert_eq!(round_ratio(0.0999), json!(0.0999));
        assert_eq!(round_ratio(1.0e-9), json!(1.0e-9));
        assert_eq!(decimal_exponent(0.0051234), -3);
        assert_eq!(decimal_exponent(0.1), -1);
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), Some(50.0));
        assert_eq!(percentile(&v, 0.99), Some(99.0));
        assert_eq!(percentile(&v, 1.0), Some(100.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        // n = 10: ceil(9.9) − 1 = 9, the maximum; ceil(5) − 1 = 4.
        let w: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&w, 0.99), Some(10.0));
        assert_eq!(percentile(&w, 0.5), Some(5.0));
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&w, 1.5), None);
    }

    #[test]
    fn summary_sorts_and_drops_non_finite() {
        let s = Summary::of(&[3.0, f64::NAN, 1.0, 2.0, f64::INFINITY]);
        assert_eq!(s.n, 3);
        assert_eq!(s.median, 2.0);
        assert_eq!(s.p99, 3.0);
        let empty = Summary::of(&[]);
        assert_eq!(empty.n, 0);
        assert!(empty.median.is_nan());
        assert_eq!(empty.to_json()["medianUs"], Value::Null);
    }

    #[test]
    fn ratio_and_its_text() {
        assert_eq!(ratio(300.0, 200.0), 1.5);
        assert_eq!(ratio_text(ratio(300.0, 200.0)), "1.50×");
        assert_eq!(ratio_text(ratio(1.0, 0.0)), "n/a");
        assert_eq!(ratio_text(ratio(1.0, f64::NAN)), "n/a");
        assert_eq!(ratio_text(ratio(f64::NAN, 2.0)), "n/a");
        assert_eq!(ratio_text(ratio(1.0, -2.0)), "n/a");
    }

    #[test]
    fn unit_text() {
        assert_eq!(micros_text(12.34), "12.3 µs");
        assert_eq!(micros_text(1234.0), "1.23 ms");
        assert_eq!(micros_text(2_500_000.0), "2.50 s");
        assert_eq!(micros_text(f64::NAN), "n/a");
        assert_eq!(rate_text(5123.4), "5123 msg/s");
        assert_eq!(round2(1.005_1), json!(1.01));
    }
}
