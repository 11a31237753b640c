//! Turns floors and phase-2 samples into the figures of a `peer bench` report: each with its
//! median, p99 and N, the floor it is compared with (from the same run), the ratio, and the
//! durability behind it; and prints them as JSON or as a table. Pure code.

use super::e2e::Outcome;
use super::floors::{DeviceCpu, FLOOR_ROWS, Floors, mean_median};
use super::paired;
use super::stats::{Summary, micros_text, rate_text, ratio, ratio_text, round_ratio, round2};
use serde_json::{Value, json};

/// Durability of every end-to-end figure, as the runtime's contract states it.
const CUSTODY: &str = "receipt only once the receiver's inbox record is fdatasynced and the sender's outbox intent is durable: written out to the device before the first byte leaves, then flushed by the receiver's fdatasync when both journals share a device (flushedDevice), else fdatasynced by the sender before it answers; concurrent commits may share one fdatasync";

/// Fewer samples than this give no real p99: the text table puts it in parentheses and the
/// JSON says `p99FromEnoughSamples: false`.
pub const P99_SAMPLES_MIN: usize = 200;

/// One reported figure.
#[derive(Clone, Debug)]
pub struct Figure {
    pub key: String,
    pub label: String,
    /// `us` for latencies (value = median), `msg/s` for throughput.
    pub unit: &'static str,
    pub latency: Summary,
    pub value: f64,
    pub floor_label: String,
    pub floor: f64,
    pub ratio: f64,
    pub durability: &'static str,
    /// A second floor to compare with: (label, value, ratio).
    pub also: Option<(String, f64, f64)>,
    pub target: Option<&'static str>,
    /// Live `peer host` processes in the namespace while it was measured.
    pub peers: usize,
}

impl Figure {
    fn latency(key: &str, label: &str, samples: &[f64], floor_label: String, floor: f64) -> Figure {
        let latency = Summary::of(samples);
        Figure {
            key: key.to_string(),
            label: label.to_string(),
            unit: "us",
            latency,
            value: latency.median,
            floor_label,
            floor,
            ratio: ratio(latency.median, floor),
            durability: CUSTODY,
            also: None,
            target: None,
            peers: 0,
        }
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "key": self.key,
            "label": self.label,
            "unit": self.unit,
            "n": self.latency.n,
            "medianUs": round2(self.latency.median),
            "p99Us": round2(self.latency.p99),
            "p99FromEnoughSamples": self.latency.n >= P99_SAMPLES_MIN,
            "value": round2(self.value),
            "floor": {"label": self.floor_label, "value": round2(self.floor)},
            "ratio": round_ratio(self.ratio),
            "durability": self.durability,
            "livePeers": self.peers,
        });
        if let Some((label, value, r)) = &self.also {
            v["alsoFloor"] = json!({"label": label, "value": round2(*value), "ratio": round2(*r)});
        }
        if let Some(t) = self.target {
            v["target"] = json!(t);
        }
        v
    }
}

/// Builds the figures from the floors measured before and after, and phase 2's samples.
pub fn figures(before: &Floors, after: &Floors, out: &Outcome) -> Vec<Figure> {
    let f = |name| mean_median(before, after, name);
    let (trip, sync, spawn) = (f("udsTrip"), f("fdatasync"), f("spawn"));
    let mut v = Vec::new();
    let warm = warm_figure(out, trip, sync);
    let mut crowded = warm.clone();
    v.push(warm);
    v.push(cold(out, trip, sync, spawn, f("sign") + f("verify")));
    let mut inbox = Figure::latency(
        "inboxLatency",
        "send start until the receiver's long poll returns it",
        &out.inbox,
        // The sender's intent sync overlaps the delivery: only the receiver's is in series.
        "fdatasync + 3×UDS trip".to_string(),
        sync + 3.0 * trip,
    );
    inbox.peers = out.peers_first;
    v.push(inbox);
    v.push(mcp_figure(out, sync));
    v.extend(
        out.throughput
            .iter()
            .map(|t| throughput(t, super::floors::mean_ceiling(before, after, t.senders))),
    );
    if out.crowd > out.peers_first {
        let s = Summary::of(&out.warm_crowded);
        crowded.key = "warmAcceptCrowded".to_string();
        crowded.label = format!(
            "warm durable accept again, {} live peers in the namespace",
            out.crowd
        );
        crowded.latency = s;
        crowded.value = s.median;
        // Its sends come minutes after the warm phase: the floors before and after.
        crowded.floor_label = "UDS trip + fdatasync".to_string();
        crowded.floor = trip + sync;
        crowded.ratio = ratio(s.median, crowded.floor);
        crowded.also = None;
        crowded.peers = out.crowd;
        v.push(crowded);
    }
    if let Some(h) = &out.history {
        v.push(history(h, out.crowd.max(out.peers_first) + 1));
    }
    v
}

/// The warm accept against a UDS trip + the fdatasync the device gave between its own sends
/// (`bench::paired`), not the one it gave minutes before and after (`sync`, the fallback).
fn warm_figure(out: &Outcome, trip: f64, sync: f64) -> Figure {
    let warm_sync = paired::median_or(&out.warm_sync, sync);
    let mut warm = Figure::latency(
        "warmAccept",
        "warm durable accept, open local channel, sequential",
        &out.warm,
        format!(
            "UDS trip + fdatasync between the sends ({})",
            micros_text(warm_sync)
        ),
        trip + warm_sync,
    );
    warm.target = Some("≤ 2× (UDS trip + one fdatasync)");
    warm.peers = out.peers_first;
    warm.also = Some(floors_around(&warm, "UDS trip + fdatasync", trip + sync));
    warm
}

/// A latency figure's ratio to the floors taken before and after its phase, shown beside the
/// paired one it is judged by (on a device that answers a lone fdatasync slower than one of a
/// tight loop, the paired floor is the higher).
fn floors_around(f: &Figure, label: &str, floor: f64) -> (String, f64, f64) {
    let label = format!("{label} before and after the phases");
    (label, floor, ratio(f.value, floor))
}

/// The MCP send against an MCP ping through the same process + the fdatasync between the
/// sends, as for the warm accept.
fn mcp_figure(out: &Outcome, sync: f64) -> Figure {
    let ping = Summary::of(&out.mcp_ping).median;
    let mcp_sync = paired::median_or(&out.mcp_sync, sync);
    let mut mcp = Figure::latency(
        "mcpSend",
        "send_peer_message through a real peer mcp over stdio, sequential",
        &out.mcp_send,
        format!(
            "MCP ping through the same peer mcp ({}) + fdatasync between the sends ({})",
            micros_text(ping),
            micros_text(mcp_sync)
        ),
        ping + mcp_sync,
    );
    mcp.target = Some("≤ 2× (MCP ping + one fdatasync)");
    mcp.peers = out.peers_first + 1;
    mcp.also = Some(floors_around(&mcp, "MCP ping + fdatasync", ping + sync));
    mcp
}

/// The cold send against spawn + one socket round trip + fdatasync, all from this run's
/// floors; the handshake's key operations (one signature and one verification on each side,
/// two more round trips) are the second floor.
fn cold(out: &Outcome, trip: f64, sync: f64, spawn: f64, sign_verify: f64) -> Figure {
    let mut cold = Figure::latency(
        "coldSend",
        "cold send: new `peer send` process, spawn to exit",
        &out.cold,
        "spawn + UDS trip + fdatasync".to_string(),
        spawn + trip + sync,
    );
    let handshake = spawn + sync + 3.0 * trip + 2.0 * sign_verify;
    cold.also = Some((
        "spawn + fdatasync + handshake (2×sign + 2×verify + 3×UDS trip)".to_string(),
        handshake,
        ratio(cold.value, handshake),
    ));
    cold.peers = out.peers_first;
    cold
}

/// The history row: CPU per message after a long history against the first window's.
fn history(h: &super::e2e::History, peers: usize) -> Figure {
    let (floor_label, floor) = history_basis(h);
    let first = ratio(h.after_cpu_us, h.first_cpu_us);
    Figure {
        key: "history".to_string(),
        label: format!(
            "sender CPU µs per message over {} sends after {} sent (median/p99: their latency)",
            h.window, h.sent
        ),
        unit: "us",
        latency: h.after_latency,
        value: h.after_cpu_us,
        floor_label,
        floor,
        ratio: ratio(h.after_cpu_us, floor),
        durability: CUSTODY,
        also: (h.fresh_cpu_us > 0.0).then(|| {
            let label = format!("its own CPU per message over its first {} sends", h.window);
            (label, h.first_cpu_us, first)
        }),
        target: Some("≤ 1.2× the first window; sender RSS ≤ 16 MB"),
        peers,
    }
}

/// What the history sender's late cost is judged against: a fresh sender's first window,
/// measured send for send alongside it (the same seconds of the same machine), or, when that
/// was not measured, its own first window minutes earlier.
pub fn history_basis(h: &super::e2e::History) -> (String, f64) {
    if h.fresh_cpu_us > 0.0 {
        let label = format!(
            "a fresh sender's CPU per message over its first {} sends, in blocks alternating with these",
            h.window
        );
        (label, h.fresh_cpu_us)
    } else {
        let label = format!("its CPU per message over its first {} sends", h.window);
        (label, h.first_cpu_us)
    }
}

/// Journal fdatasyncs (and the senders' intent write-outs) per accepted message, counted by
/// the roots themselves, per phase.
pub fn fsyncs_json(out: &Outcome) -> Value {
    let per = |n: u64, m: usize| round2(n as f64 / m.max(1) as f64);
    Value::Array(
        out.fsyncs
            .iter()
            .map(|p| {
                let (s, r, m) = (p.senders.syncs, p.receiver.syncs, p.messages);
                json!({"phase": p.phase, "messages": m, "senders": per(s, m), "receiver": per(r, m), "total": per(s + r, m), "senderWriteOuts": per(p.senders.write_outs, m)})
            })
            .collect(),
    )
}

/// The history phase in full: both windows, sender and receiver CPU, sender RSS.
pub fn history_json(out: &Outcome) -> Value {
    let Some(h) = &out.history else {
        return Value::Null;
    };
    json!({
        "window": h.window,
        "sentBefore": h.sent,
        "senderCpuUsPerMessage": {"first": round2(h.first_cpu_us), "after": round2(h.after_cpu_us), "freshAlongside": round2(h.fresh_cpu_us)},
        "receiverCpuUsPerMessage": {"first": round2(h.first_rx_cpu_us), "after": round2(h.after_rx_cpu_us)},
        "senderRssKbAfter": h.sender_rss_kb,
        "compactions": {"first": h.compactions[0], "after": h.compactions[1], "freshAlongside": h.compactions[2]},
        "latency": {
            "first": {"n": h.first_latency.n, "medianUs": round2(h.first_latency.median), "p99Us": round2(h.first_latency.p99)},
            "after": {"n": h.after_latency.n, "medianUs": round2(h.after_latency.median), "p99Us": round2(h.after_latency.p99)},
        },
        "cpuSource": "/proc/PID/task/*/schedstat (clock ticks of /proc/PID/stat when threads exited)",
    })
}

/// One throughput run against the group-commit ceiling with as many writers.
fn throughput(t: &super::e2e::Throughput, ceiling: f64) -> Figure {
    let rate = ratio(t.messages as f64, t.seconds);
    Figure {
        key: super::e2e::throughput_key(t.senders),
        label: format!(
            "accepted msg/s, {} concurrent sender process(es) → 1 receiver",
            t.senders
        ),
        unit: "msg/s",
        latency: Summary::of(&t.latency),
        value: rate,
        floor_label: format!(
            "group-commit ceiling, {} writer(s) on one journal",
            t.senders
        ),
        floor: ceiling,
        ratio: ratio(rate, ceiling),
        durability: CUSTODY,
        also: None,
        target: match t.senders {
            8 => Some("≥ 4,000 msg/s and ≥ 4× one sender"),
            64 => Some("≥ 6,000 msg/s"),
            _ => None,
        },
        peers: t.peers,
    }
}

/// CPU per accepted message of each throughput run, senders and receiver, from /proc; the
/// part of it the journals' device operations take (their counts in the run times the CPU
/// one such operation cost the floor's writing thread, `device`); and the throughput that CPU
/// per message allows when all `cpus` do nothing else.
pub fn cpu_json(out: &Outcome, device: &DeviceCpu, cpus: usize) -> Value {
    Value::Array(
        out.throughput
            .iter()
            .map(|t| {
                let total = t.sender_cpu_us + t.receiver_cpu_us;
                let phase = super::e2e::throughput_key(t.senders);
                let io = out.fsyncs.iter().find(|p| p.phase == phase);
                let device_us = io.map(|p| device_io_us(p, device)).unwrap_or(f64::NAN);
                json!({
                    "senders": t.senders,
                    "messages": t.messages,
                    "senderRootsUs": round2(t.sender_cpu_us),
                    "receiverUs": round2(t.receiver_cpu_us),
                    "totalUs": round2(total),
                    "kernelUs": round2(t.kernel_cpu_us),
                    "deviceIoUs": round2(device_us),
                    "cpuBoundRate": round2(cpu_bound_rate(total, cpus)),
                })
            })
            .collect(),
    )
}

/// The journals' device operations of one phase, per message, priced at the floors' CPU per
/// operation: every fdatasync (senders' and receiver's) at `device.fdatasync`, every intent
/// write-out at `device.write_out`. An estimate: a journal's batch may write a few pages where
/// the floor writes one.
pub fn device_io_us(p: &super::e2e::PhaseIo, device: &DeviceCpu) -> f64 {
    let syncs = (p.senders.syncs + p.receiver.syncs) as f64;
    let write_outs = (p.senders.write_outs + p.receiver.write_outs) as f64;
    (syncs * device.fdatasync + write_outs * device.write_out) / p.messages.max(1) as f64
}

/// Messages per second that `cpus` CPUs fully busy allow at `cpu_us` of CPU per message.
pub fn cpu_bound_rate(cpu_us: f64, cpus: usize) -> f64 {
    if cpu_us > 0.0 {
        cpus as f64 * 1e6 / cpu_us
    } else {
        f64::NAN
    }
}

/// The receiver's and first sender's process counters as JSON.
pub fn process_json(out: &Outcome) -> Value {
    let c = |c: &super::e2e::Counters| {
        json!({
            "idle": {"rssKb": c.idle.rss_kb, "threads": c.idle.threads},
            "peak": {"rssKb": c.peak_rss_kb, "threads": c.peak_threads},
        })
    };
    json!({"receiver": c(&out.receiver), "sender": c(&out.sender), "sampleMs": 20})
}

/// Lost, duplicate and failure counts, per phase and in total.
pub fn integrity_json(out: &Outcome) -> Value {
    let last = out.last_audit();
    json!({
        "accepted": last.accepted,
        "lost": last.lost,
        "duplicates": last.duplicates,
        "unexpected": last.unexpected,
        "failedButDelivered": last.failed_delivered,
        "failedSends": out.failure_count,
        "failures": out.failures,
        "phases": out.audits.iter().map(|(p, a)| json!({"phase": p, "accepted": a.accepted, "lost": a.lost, "duplicates": a.duplicates, "unexpected": a.unexpected, "failedButDelivered": a.failed_delivered})).collect::<Vec<_>>(),
    })
}

/// The floors as a text table, before and after.
pub fn floors_text(before: &Floors, after: &Floors) -> String {
    let mut s = format!(
        "{:<15} {:>10} {:>10} {:>6}   {:>10} {:>10} {:>6}   {}\n",
        "floor", "median", "p99", "N", "after", "p99", "N", "durability"
    );
    for (name, _, durability) in FLOOR_ROWS {
        let (Some(b), Some(a)) = (before.get(name), after.get(name)) else {
            continue;
        };
        s += &format!(
            "{:<15} {:>10} {:>10} {:>6}   {:>10} {:>10} {:>6}   {}\n",
            name,
            micros_text(b.median),
            micros_text(b.p99),
            b.n,
            micros_text(a.median),
            micros_text(a.p99),
            a.n,
            durability
        );
    }
    for (writers, b) in &before.group_commit {
        s += &format!(
            "{:<15} {:>10} {:>10} {:>6}   {:>10} {:>10} {:>6}   {}\n",
            format!("groupCommit{writers}"),
            rate_text(*b),
            "",
            "",
            rate_text(after.group_commit(*writers).unwrap_or(f64::NAN)),
            "",
            "",
            "fdatasync per batch"
        );
    }
    let (b, a) = (&before.device_cpu, &after.device_cpu);
    s += &format!(
        "CPU of the writing thread per record (device I/O under a hypervisor traps to the host on this CPU): fdatasync {} → {}, writeOut {} → {} (before → after)\n",
        micros_text(b.fdatasync),
        micros_text(a.fdatasync),
        micros_text(b.write_out),
        micros_text(a.write_out)
    );
    if !before.fdatasync_by_cpu.is_empty() {
        let per_cpu: Vec<String> = before
            .fdatasync_by_cpu
            .iter()
            .map(|(cpu, b)| {
                let a = after
                    .fdatasync_by_cpu
                    .iter()
                    .find(|(c, _)| c == cpu)
                    .map_or(f64::NAN, |(_, a)| a.median);
                format!("cpu{cpu} {} → {}", micros_text(b.median), micros_text(a))
            })
            .collect();
        s += &format!(
            "fdatasync with the writing thread pinned to each CPU (a device completes on some CPUs only; shown, not a floor): {} (before → after)\n",
            per_cpu.join(", ")
        );
    }
    s
}

/// The figures as a text table.
pub fn figures_text(figs: &[Figure]) -> String {
    let mut s = format!(
        "{:<17} {:>5} {:>6} {:>11} {:>10} {:>10}  {:>8}  floor\n",
        "figure", "peers", "N", "value", "median", "p99", "ratio"
    );
    for f in figs {
        let value = if f.unit == "msg/s" {
            rate_text(f.value)
        } else {
            micros_text(f.value)
        };
        let floor = if f.unit == "msg/s" {
            rate_text(f.floor)
        } else {
            micros_text(f.floor)
        };
        s += &format!(
            "{:<17} {:>5} {:>6} {:>11} {:>10} {:>10}  {:>8}  {} = {}\n",
            f.key,
            f.peers,
            f.latency.n,
            value,
            micros_text(f.latency.median),
            if f.latency.n >= P99_SAMPLES_MIN {
                micros_text(f.latency.p99)
            } else {
                format!("({})", micros_text(f.latency.p99))
            },
            ratio_text(f.ratio),
            f.floor_label,
            floor
        );
        if let Some((label, v, r)) = &f.also {
            s += &format!(
                "{:<17} {:>64}  {} = {}\n",
                "",
                ratio_text(*r),
                label,
                micros_text(*v)
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::e2e::Throughput;

    /// The durability each figure states is the send path's: no sender fdatasync when the
    /// receiver's flush of a shared device covers the written-out intent (it once said the
    /// sender always synced), named by the wire field that carries the statement.
    #[test]
    fn figures_state_the_custody_the_send_path_gives() {
        assert!(CUSTODY.contains(crate::protocol::message::FLUSHED_DEVICE));
        assert!(CUSTODY.contains("written out to the device before the first byte"));
        assert!(!CUSTODY.contains("and the sender's outbox fdatasync"));
    }

    fn floors(us: f64) -> Floors {
        let s = Summary {
            n: 10,
            median: us,
            p99: 2.0 * us,
        };
        Floors {
            uds_trip: s,
            uds_trip_cross_cpu: Some(s),
            fdatasync: s,
            write_out: s,
            fdatasync_append: s,
            atomic_replace: s,
            spawn: s,
            sign: s,
            verify: s,
            group_commit: vec![(64, 50.0 * us)],
            device_cpu: DeviceCpu {
                fdatasync: us / 2.0,
                write_out: us / 4.0,
            },
            fdatasync_by_cpu: vec![
                (0, s),
                (
                    1,
                    Summary {
                        median: 1.5 * us,
                        ..s
                    },
                ),
            ],
        }
    }

    #[test]
    fn figures_carry_floors_and_ratios() {
        let out = Outcome {
            warm: vec![400.0, 600.0, 500.0],
            cold: vec![1000.0],
            inbox: vec![700.0],
            throughput: vec![Throughput {
                senders: 64,
                messages: 1000,
                seconds: 0.1,
                latency: vec![100.0],
                peers: 65,
                sender_cpu_us: 200.0,
                receiver_cpu_us: 50.0,
                kernel_cpu_us: 100.0,
            }],
            mcp_send: vec![800.0, 900.0],
            mcp_ping: vec![100.0, 100.0, 100.0],
            warm_crowded: vec![900.0],
            peers_first: 2,
            crowd: 65,
            ..Outcome::default()
        };
        // Before 100 µs, after 300 µs: every floor quantity is their mean, 200 µs.
        let figs = figures(&floors(100.0), &floors(300.0), &out);
        let keys: Vec<&str> = figs.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "warmAccept",
                "coldSend",
                "inboxLatency",
                "mcpSend",
                "throughput64",
                "warmAcceptCrowded"
            ]
        );
        // Warm: UDS trip + fdatasync.
        assert_eq!(figs[0].floor, 400.0);
        assert_eq!(figs[0].ratio, 500.0 / 400.0);
        assert_eq!(figs[5].ratio, 900.0 / 400.0);
        assert_eq!((figs[0].peers, figs[4].peers, figs[5].peers), (2, 65, 65));
        // Cold: spawn + trip + fdatasync; the handshake's floor adds 2×(sign + verify) + 2 trips.
        assert_eq!(figs[1].floor, 600.0);
        assert_eq!(
            figs[1].also.as_ref().unwrap().1,
            600.0 + 2.0 * 200.0 + 4.0 * 200.0
        );
        // Inbox latency: one fdatasync (the sender's overlaps the delivery) + 3 trips.
        assert_eq!(figs[2].floor, 800.0);
        // MCP: the ping measured in the run (100 µs) + fdatasync.
        assert_eq!(figs[3].floor, 300.0);
        assert_eq!(figs[3].value, 800.0); // nearest-rank median of two
        // Throughput against the group-commit ceiling with as many writers (mean 10,000/s).
        assert_eq!(figs[4].value, 10_000.0);
        assert_eq!(figs[4].floor, 10_000.0);
        assert_eq!(figs[4].ratio, 1.0);
        let j = figs[4].to_json();
        assert_eq!(j["ratio"], json!(1.0));
        assert!(j["target"].is_string());
        let device = DeviceCpu {
            fdatasync: 50.0,
            write_out: 40.0,
        };
        let cpu = cpu_json(&out, &device, 2);
        assert_eq!(cpu[0]["totalUs"], json!(250.0));
        assert_eq!(cpu[0]["kernelUs"], json!(100.0));
        // Two CPUs at 250 µs per message: 8,000 msg/s at most.
        assert_eq!(cpu[0]["cpuBoundRate"], json!(8000.0));
        // No counts for the phase: no estimate.
        assert!(cpu[0]["deviceIoUs"].is_null());
        let text = figures_text(&figs);
        assert!(text.contains("1.25×"), "{text}");
        assert!(text.contains("2.25×"), "{text}");
        let floors_text = floors_text(&floors(1.0), &floors(2.0));
        assert!(floors_text.contains("fdatasync"));
        assert!(floors_text.contains("groupCommit64"), "{floors_text}");
        // Each CPU's pinned fdatasync, before and after, matched by CPU.
        let cpu1 = format!("cpu1 {} → {}", micros_text(1.5), micros_text(3.0));
        assert!(floors_text.contains(&cpu1), "{floors_text}");
        let mut one_cpu = floors(1.0);
        one_cpu.fdatasync_by_cpu.clear();
        assert!(!super::floors_text(&one_cpu, &one_cpu).contains("pinned to each CPU"));
    }

    /// The device share of the CPU per message prices the operations the roots counted in
    /// that very phase; the write-outs per message are reported beside the fdatasyncs.
    #[test]
    fn device_io_prices_the_phase_counts() {
        use crate::bench::adapter::JournalCounts;
        use crate::bench::e2e::PhaseIo;
        let phase = |name: &str, s_syncs, s_wo, r_syncs| PhaseIo {
            phase: name.into(),
            messages: 100,
            senders: JournalCounts {
                syncs: s_syncs,
                write_outs: s_wo,
            },
            receiver: JournalCounts {
                syncs: r_syncs,
                write_outs: 0,
            },
        };
        let out = Outcome {
            throughput: vec![Throughput {
                senders: 8,
                messages: 100,
                seconds: 0.1,
                latency: vec![100.0],
                peers: 9,
                sender_cpu_us: 150.0,
                receiver_cpu_us: 50.0,
                kernel_cpu_us: f64::NAN,
            }],
            fsyncs: vec![phase("warm", 1, 100, 100), phase("throughput8", 2, 100, 50)],
            ..Outcome::default()
        };
        let device = DeviceCpu {
            fdatasync: 60.0,
            write_out: 40.0,
        };
        // (2 + 50) fdatasyncs × 60 µs + 100 write-outs × 40 µs over 100 messages.
        assert_eq!(
            device_io_us(&out.fsyncs[1], &device),
            (52.0 * 60.0 + 100.0 * 40.0) / 100.0
        );
        let cpu = cpu_json(&out, &device, 2);
        assert_eq!(cpu[0]["deviceIoUs"], json!(71.2));
        // No tick passed: no kernel share, null rather than a number.
        assert!(cpu[0]["kernelUs"].is_null());
        assert_eq!(cpu[0]["cpuBoundRate"], json!(10_000.0));
        let f = fsyncs_json(&out);
        assert_eq!(f[1]["senderWriteOuts"], json!(1.0));
        assert_eq!(f[1]["receiver"], json!(0.5));
        assert_eq!(f[0]["total"], json!(1.01));
        assert!(cpu_bound_rate(0.0, 2).is_nan());
    }

    /// The two latency targets take the fdatasync sampled between their own sends when the
    /// phase took samples; the crowded row, minutes later, keeps the floors before and after.
    #[test]
    fn latency_targets_use_the_fdatasync_between_their_sends() {
        let out = Outcome {
            warm: vec![500.0],
            warm_sync: vec![90.0, 110.0, 100.0],
            mcp_send: vec![800.0],
            mcp_ping: vec![100.0],
            mcp_sync: vec![150.0],
            warm_crowded: vec![900.0],
            peers_first: 2,
            crowd: 65,
            ..Outcome::default()
        };
        let figs = figures(&floors(100.0), &floors(300.0), &out);
        let by = |k: &str| figs.iter().find(|f| f.key == k).unwrap();
        // Trip (mean 200) + the paired fdatasync's median (100), not the mean of the floors.
        assert_eq!(by("warmAccept").floor, 300.0);
        assert!(by("warmAccept").floor_label.contains("between the sends"));
        assert_eq!(by("mcpSend").floor, 250.0);
        assert_eq!(by("warmAcceptCrowded").floor, 400.0);
        // Beside each: the ratio to the floors before and after (trip + fdatasync = 400).
        let (label, floor, r) = by("warmAccept").also.clone().unwrap();
        assert!(label.contains("before and after"), "{label}");
        assert_eq!((floor, r), (400.0, 500.0 / 400.0));
        assert_eq!(by("mcpSend").also.as_ref().unwrap().1, 300.0);
        assert!(by("warmAcceptCrowded").also.is_none());
    }

    /// The history row's basis is the fresh sender alongside when measured; its own first
    /// window stays beside, with that ratio.
    #[test]
    fn history_row_shows_both_bases() {
        let mut h = crate::bench::e2e::History {
            window: 2500,
            sent: 25_000,
            first_cpu_us: 100.0,
            after_cpu_us: 130.0,
            fresh_cpu_us: 120.0,
            compactions: [0, 1, 0],
            ..Default::default()
        };
        let out = Outcome {
            history: Some(h),
            ..Outcome::default()
        };
        let j = history_json(&out);
        assert_eq!(
            j["compactions"],
            json!({"first": 0, "after": 1, "freshAlongside": 0})
        );
        let figs = figures(&floors(1.0), &floors(1.0), &out);
        let f = figs.iter().find(|f| f.key == "history").unwrap();
        assert_eq!((f.floor, f.ratio), (120.0, 130.0 / 120.0));
        assert!(f.floor_label.contains("fresh sender"), "{}", f.floor_label);
        assert_eq!(f.also.as_ref().map(|a| (a.1, a.2)), Some((100.0, 1.3)));
        // Not measured: its own first window, nothing beside.
        h.fresh_cpu_us = 0.0;
        let f = history(&h, 3);
        assert_eq!((f.floor, f.also.is_none()), (100.0, true));
    }

    #[test]
    fn empty_samples_give_null_not_panic() {
        let figs = figures(&floors(100.0), &floors(100.0), &Outcome::default());
        assert_eq!(figs.len(), 4);
        assert_eq!(figs[0].to_json()["ratio"], Value::Null);
        assert!(figures_text(&figs).contains("n/a"));
    }
}
