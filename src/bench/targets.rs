//! The performance targets `peer bench` judges, each beside the figure it is judged on, the
//! floor or basis from the same run, the ratio, the bound and a verdict. A target is judged
//! only from enough samples: a run that has fewer (`--quick`, a small `--messages`) says so
//! instead of passing or failing it. Pure code.

use super::e2e::{Idle, Outcome, throughput_key};
use super::report::Figure;
use super::stats::{micros_text, rate_text, ratio, ratio_text, round_ratio, round2};
use serde_json::{Value, json};

/// Samples a latency median is judged from (as many as a real p99 needs).
const LATENCY_SAMPLES_MIN: usize = super::report::P99_SAMPLES_MIN;
/// Accepted messages a throughput or CPU-per-message run is judged from.
const RUN_MESSAGES_MIN: usize = 1_000;
/// Messages a sender must have sent before its history cost is judged.
const HISTORY_SENT_MIN: usize = 25_000;
/// Single sends whose fdatasyncs are counted before the critical-path count is judged.
const SYNC_PROBES_MIN: usize = 50;
/// Seconds an idle receiver is watched before its wake-ups are judged (heartbeats included).
const IDLE_SECONDS_MIN: usize = 30;

/// Which way a bound points.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bound {
    AtMost(f64),
    AtLeast(f64),
}

/// A target's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail,
    /// Measured from fewer samples than the target needs: reported, not judged.
    TooFewSamples,
    NotMeasured,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::TooFewSamples => "too few samples",
            Verdict::NotMeasured => "not measured",
        }
    }
}

/// One judged target.
#[derive(Clone, Debug)]
pub struct Target {
    pub key: &'static str,
    pub what: &'static str,
    /// The measured value, in `unit`.
    pub value: f64,
    pub unit: &'static str,
    /// What the value is divided by for the ratio, and its value (same unit).
    pub basis: Option<(String, f64)>,
    /// `value / basis`, or NaN without a basis.
    pub ratio: f64,
    /// The bound, on the ratio when `on_ratio`, else on the value.
    pub bound: Bound,
    pub on_ratio: bool,
    pub n: usize,
    pub n_min: usize,
    pub verdict: Verdict,
}

impl Target {
    #[allow(clippy::too_many_arguments)]
    fn new(
        key: &'static str,
        what: &'static str,
        value: f64,
        unit: &'static str,
        basis: Option<(String, f64)>,
        bound: Bound,
        (n, n_min): (usize, usize),
    ) -> Target {
        let ratio = basis.as_ref().map_or(f64::NAN, |(_, b)| ratio(value, *b));
        let on_ratio = basis.is_some();
        let judged = if on_ratio { ratio } else { value };
        let verdict = if !judged.is_finite() {
            Verdict::NotMeasured
        } else if n < n_min {
            Verdict::TooFewSamples
        } else if match bound {
            Bound::AtMost(b) => judged <= b,
            Bound::AtLeast(b) => judged >= b,
        } {
            Verdict::Pass
        } else {
            Verdict::Fail
        };
        Target {
            key,
            what,
            value,
            unit,
            basis,
            ratio,
            bound,
            on_ratio,
            n,
            n_min,
            verdict,
        }
    }

    /// The same target with a basis but judged on its value (the basis is context).
    fn judged_on_value(mut self) -> Target {
        self.on_ratio = false;
        let again = Target::new(
            self.key,
            self.what,
            self.value,
            self.unit,
            None,
            self.bound,
            (self.n, self.n_min),
        );
        self.verdict = again.verdict;
        self
    }

    pub fn to_json(&self) -> Value {
        let (op, bound) = match self.bound {
            Bound::AtMost(b) => ("<=", b),
            Bound::AtLeast(b) => (">=", b),
        };
        json!({
            "key": self.key,
            "target": self.what,
            "value": round2(self.value),
            "unit": self.unit,
            "basis": self.basis.as_ref().map(|(l, v)| json!({"label": l, "value": round2(*v)})),
            "ratio": round_ratio(self.ratio),
            "bound": {"op": op, "value": bound, "on": if self.on_ratio { "ratio" } else { "value" }},
            "n": self.n,
            "nMin": self.n_min,
            "verdict": self.verdict.name(),
        })
    }
}

fn figure<'a>(figs: &'a [Figure], key: &str) -> Option<&'a Figure> {
    figs.iter().find(|f| f.key == key)
}

/// A latency figure judged on its ratio to its floor.
fn latency_target(figs: &[Figure], fig: &str, key: &'static str, what: &'static str) -> Target {
    let f = figure(figs, fig);
    Target::new(
        key,
        what,
        f.map_or(f64::NAN, |f| f.value),
        "us",
        Some(f.map_or((String::new(), f64::NAN), |f| {
            (f.floor_label.clone(), f.floor)
        })),
        Bound::AtMost(2.0),
        (f.map_or(0, |f| f.latency.n), LATENCY_SAMPLES_MIN),
    )
}

/// Every target, in the order of the performance goals.
pub fn targets(figs: &[Figure], out: &Outcome) -> Vec<Target> {
    let mut v = vec![
        latency_target(
            figs,
            "warmAccept",
            "warmSend",
            "warm durable send ≤ 2× (UDS trip + one fdatasync)",
        ),
        latency_target(
            figs,
            "mcpSend",
            "mcpSend",
            "MCP send ≤ 2× (MCP ping through the same peer mcp + one fdatasync)",
        ),
    ];
    v.extend(throughput_targets(figs, out));
    v.extend(history_targets(out));
    v.extend(idle_targets(out));
    let syncs = super::stats::Summary::of(&out.critical_syncs);
    v.push(Target::new(
        "criticalFsyncs",
        "fdatasyncs on a send's critical path ≤ 1 (median over single sends on settled roots of those both roots completed before the send returned: an upper bound; the receiver's accept sync, which also flushes the sender's written-out intent on a shared ext4 device)",
        syncs.median,
        "fdatasyncs",
        None,
        Bound::AtMost(1.0),
        (syncs.n, SYNC_PROBES_MIN),
    ));
    v
}

fn throughput_targets(figs: &[Figure], out: &Outcome) -> Vec<Target> {
    let run = |k: usize| out.throughput.iter().find(|t| t.senders == k);
    let n = |k: usize| run(k).map_or(0, |t| t.messages);
    let rate = |k: usize| figure(figs, &throughput_key(k)).map_or(f64::NAN, |f| f.value);
    // Context only: a run that was not made has no ceiling to show.
    let ceiling =
        |k: usize| figure(figs, &throughput_key(k)).map(|f| (f.floor_label.clone(), f.floor));
    vec![
        Target::new(
            "cpuPerMessage8",
            "CPU per message end to end (sender roots + receiver, 8 senders) ≤ 0.3 ms",
            run(8).map_or(f64::NAN, |t| t.sender_cpu_us + t.receiver_cpu_us),
            "us",
            None,
            Bound::AtMost(300.0),
            (n(8), RUN_MESSAGES_MIN),
        ),
        Target::new(
            "throughput8",
            "throughput with 8 senders ≥ 4,000 msg/s",
            rate(8),
            "msg/s",
            ceiling(8),
            Bound::AtLeast(4_000.0),
            (n(8), RUN_MESSAGES_MIN),
        )
        .judged_on_value(),
        Target::new(
            "throughput8Scaling",
            "throughput with 8 senders ≥ 4× one sender",
            rate(8),
            "msg/s",
            Some(("throughput with 1 sender".to_string(), rate(1))),
            Bound::AtLeast(4.0),
            (n(8).min(n(1)), RUN_MESSAGES_MIN),
        ),
        Target::new(
            "throughput64",
            "throughput with 64 senders ≥ 6,000 msg/s",
            rate(64),
            "msg/s",
            ceiling(64),
            Bound::AtLeast(6_000.0),
            (n(64), RUN_MESSAGES_MIN),
        )
        .judged_on_value(),
    ]
}

fn history_targets(out: &Outcome) -> Vec<Target> {
    let h = out.history.as_ref();
    let sent = h.map_or(0, |h| h.sent);
    vec![
        Target::new(
            "historyCpu",
            "sender CPU per message after N sent ≤ 1.2× a first window (a fresh sender's, alongside)",
            h.map_or(f64::NAN, |h| h.after_cpu_us),
            "us",
            h.map(super::report::history_basis),
            Bound::AtMost(1.2),
            (sent, HISTORY_SENT_MIN),
        ),
        Target::new(
            "senderRss",
            "sender RSS after N sent ≤ 16 MB (read as 16 MiB)",
            h.map_or(f64::NAN, |h| h.sender_rss_kb as f64),
            "kB",
            None,
            Bound::AtMost(16_384.0),
            (sent, HISTORY_SENT_MIN),
        ),
    ]
}

fn idle_targets(out: &Outcome) -> Vec<Target> {
    let i = out.idle.as_ref();
    // Wake-ups are judged on the busier of the two idle windows (fresh, and after the run).
    let woke =
        [out.idle, out.idle_after]
            .into_iter()
            .flatten()
            .fold(None::<Idle>, |w, x| match w {
                Some(w) if w.wakeups_per_second >= x.wakeups_per_second => Some(w),
                _ => Some(x),
            });
    vec![
        Target::new(
            "idleWakeups",
            "idle receiver ≤ 1 wakeup/s, fresh and after the run (heartbeats included)",
            woke.map_or(f64::NAN, |i| i.wakeups_per_second),
            "/s",
            None,
            Bound::AtMost(1.0),
            (woke.map_or(0, |i| i.seconds as usize), IDLE_SECONDS_MIN),
        ),
        Target::new(
            "idleRss",
            "idle receiver RSS ≤ 4 MiB",
            i.map_or(f64::NAN, |i| i.rss_kb as f64),
            "kB",
            None,
            Bound::AtMost(4_096.0),
            (usize::from(i.is_some()), 1),
        ),
    ]
}

fn value_text(v: f64, unit: &str) -> String {
    match unit {
        "us" => micros_text(v),
        "msg/s" => rate_text(v),
        _ if !v.is_finite() => "n/a".to_string(),
        "kB" => format!("{v:.0} kB"),
        "/s" => format!("{v:.2}/s"),
        _ => format!("{v:.2}"),
    }
}

/// The targets as a text table.
pub fn text(targets: &[Target]) -> String {
    let mut s = format!(
        "{:<19} {:>12} {:>8} {:>13}  {:<15}  {}\n",
        "target", "measured", "ratio", "bound", "verdict", "basis (same run)"
    );
    for t in targets {
        let bound = match (t.bound, t.on_ratio) {
            (Bound::AtMost(b), true) => format!("≤ {b}×"),
            (Bound::AtLeast(b), true) => format!("≥ {b}×"),
            (Bound::AtMost(b), false) => format!("≤ {}", value_text(b, t.unit)),
            (Bound::AtLeast(b), false) => format!("≥ {}", value_text(b, t.unit)),
        };
        let verdict = match t.verdict {
            Verdict::TooFewSamples => format!("n={}<{}", t.n, t.n_min),
            v => v.name().to_string(),
        };
        let basis = t.basis.as_ref().map_or(String::new(), |(l, v)| {
            format!("{l} = {}", value_text(*v, t.unit))
        });
        s += &format!(
            "{:<19} {:>12} {:>8} {:>13}  {:<15}  {}\n",
            t.key,
            value_text(t.value, t.unit),
            ratio_text(t.ratio),
            bound,
            verdict,
            basis
        );
    }
    let unjudged: Vec<&str> = targets
        .iter()
        .filter(|t| t.verdict == Verdict::TooFewSamples)
        .map(|t| t.key)
        .collect();
    if !unjudged.is_empty() {
        s += &format!(
            "not judged (too few samples in this run; a full run judges them): {}\n",
            unjudged.join(", ")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::e2e::{History, Idle, Throughput};
    use crate::bench::stats::Summary;

    fn fig(key: &str, value: f64, floor: f64, n: usize) -> Figure {
        Figure {
            key: key.to_string(),
            label: String::new(),
            unit: "us",
            latency: Summary {
                n,
                median: value,
                p99: value,
            },
            value,
            floor_label: format!("{key} floor"),
            floor,
            ratio: ratio(value, floor),
            durability: "",
            also: None,
            target: None,
            peers: 2,
        }
    }

    fn run(senders: usize, messages: usize, cpu: f64) -> Throughput {
        Throughput {
            senders,
            messages,
            seconds: 1.0,
            latency: Vec::new(),
            peers: senders + 1,
            sender_cpu_us: cpu,
            receiver_cpu_us: cpu / 2.0,
            kernel_cpu_us: cpu / 2.0,
        }
    }

    fn by_key<'a>(t: &'a [Target], key: &str) -> &'a Target {
        t.iter().find(|t| t.key == key).unwrap()
    }

    #[test]
    fn every_target_is_judged_from_enough_samples_only() {
        let figs = vec![
            fig("warmAccept", 900.0, 500.0, 1000),
            fig("mcpSend", 1200.0, 500.0, 20),
            fig("throughput1", 1_000.0, 2_000.0, 4000),
            fig("throughput8", 5_000.0, 20_000.0, 4000),
            fig("throughput64", 5_000.0, 90_000.0, 4000),
        ];
        let out = Outcome {
            throughput: vec![
                run(1, 4000, 100.0),
                run(8, 4000, 150.0),
                run(64, 4000, 400.0),
            ],
            history: Some(History {
                window: 2500,
                sent: 25_000,
                first_cpu_us: 100.0,
                after_cpu_us: 130.0,
                sender_rss_kb: 9_000,
                ..History::default()
            }),
            idle: Some(Idle {
                seconds: 2.0,
                wakeups_per_second: 0.5,
                preemptions_per_second: 3.0,
                rss_kb: 5_000,
                anon_kb: 400,
            }),
            critical_syncs: vec![1.0; 50],
            ..Outcome::default()
        };
        let t = targets(&figs, &out);
        let verdict = |k| by_key(&t, k).verdict;
        assert_eq!(verdict("warmSend"), Verdict::Pass); // 1.8× ≤ 2×
        assert_eq!(verdict("mcpSend"), Verdict::TooFewSamples); // 20 < 200
        assert_eq!(verdict("cpuPerMessage8"), Verdict::Pass); // 150 + 75 ≤ 300
        assert_eq!(by_key(&t, "cpuPerMessage8").value, 225.0);
        assert_eq!(verdict("throughput8"), Verdict::Pass); // 5,000 ≥ 4,000
        // The ceiling is context: 5,000 / 20,000.
        assert_eq!(by_key(&t, "throughput8").ratio, 0.25);
        assert_eq!(verdict("throughput8Scaling"), Verdict::Pass); // 5×
        assert_eq!(verdict("throughput64"), Verdict::Fail);
        assert_eq!(verdict("historyCpu"), Verdict::Fail); // 1.3×
        assert_eq!(verdict("senderRss"), Verdict::Pass);
        assert_eq!(verdict("idleWakeups"), Verdict::TooFewSamples); // 2 s < 30 s
        assert_eq!(verdict("idleRss"), Verdict::Fail);
        assert_eq!(verdict("criticalFsyncs"), Verdict::Pass); // 1 per send
        assert_eq!(t.len(), 11);
        let j = by_key(&t, "throughput8").to_json();
        assert_eq!(
            j["bound"],
            json!({"op": ">=", "value": 4000.0, "on": "value"})
        );
        assert_eq!(j["verdict"], "pass");
        let table = text(&t);
        assert!(table.contains("n=20<200"), "{table}");
        assert!(table.contains("not judged"), "{table}");
        // Nothing measured: every target says so, none passes.
        let none = targets(&[], &Outcome::default());
        assert!(
            none.iter().all(|t| t.verdict == Verdict::NotMeasured),
            "{none:?}"
        );
    }

    /// With a fresh sender measured alongside the late window, history is judged against it,
    /// not against the sender's own first window minutes earlier.
    #[test]
    fn history_is_judged_against_a_fresh_sender_alongside() {
        let out = Outcome {
            history: Some(History {
                window: 2500,
                sent: 25_000,
                first_cpu_us: 100.0,
                after_cpu_us: 130.0,
                fresh_cpu_us: 120.0,
                sender_rss_kb: 9_000,
                ..History::default()
            }),
            ..Outcome::default()
        };
        let t = targets(&[], &out);
        let h = by_key(&t, "historyCpu");
        assert_eq!(h.verdict, Verdict::Pass); // 130 / 120 ≤ 1.2 (130 / 100 would fail)
        assert_eq!(h.ratio, 130.0 / 120.0);
    }
}
