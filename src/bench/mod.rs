//! `peer bench`: the built-in benchmark. It measures the machine's floors in-process (phase 1),
//! then peerwire end to end between real `peer host` processes in a fresh namespace (phase 2),
//! then the floors again, and reports every figure as a ratio to the floors of the same run
//! with median, p99 (nearest rank) and N, the durability behind it, the receiver's process
//! counters, and lost/duplicate counts. It never asserts on wall-clock time: it exits non-zero
//! only when something failed functionally.

pub mod adapter;
pub mod conditions;
pub mod e2e;
pub mod floors;
pub mod hosts;
pub mod mcp;
pub mod paired;
pub mod report;
pub mod stats;
pub mod targets;

use crate::config::internal::{BENCH_SENDER_RUNS_MAX, BENCH_SENDERS_MAX};
use crate::error::{Code, Error, Result};
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

/// The parsed command line.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub quick: bool,
    pub json: bool,
    pub senders: Vec<usize>,
    pub messages: usize,
    pub dir: Option<PathBuf>,
    pub keep: bool,
}

/// Parses `1,8,64` into sender counts, each 1..=`BENCH_SENDERS_MAX`.
pub fn parse_senders(s: &str) -> Result<Vec<usize>> {
    let bad = || {
        Error::new(
            Code::Usage,
            format!(
                "--senders takes up to {BENCH_SENDER_RUNS_MAX} comma-separated counts of 1-{BENCH_SENDERS_MAX}, got {:?}",
                crate::sanitize::line(s, 40)
            ),
        )
    };
    let v: Vec<usize> = s
        .split(',')
        .map(|x| {
            x.trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=BENCH_SENDERS_MAX).contains(n))
        })
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    if v.is_empty() || v.len() > BENCH_SENDER_RUNS_MAX {
        return Err(bad());
    }
    Ok(v)
}

/// Runs the benchmark described by `opts`, prints the report (text, or one JSON object with
/// `--json`), and returns the exit status: 1 when something failed functionally.
pub fn run(opts: &Options) -> Result<i32> {
    let started = Instant::now();
    let parent = match &opts.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir(),
    };
    let dir = e2e::bench_dir(&parent);
    let floor_dir = dir.join("floors");
    crate::fsutil::ensure_private_dir(&dir)?;
    crate::fsutil::ensure_private_dir(&floor_dir)?;
    let exe = std::env::current_exe()
        .map_err(|e| Error::new(Code::Io, format!("cannot find the peer binary: {e}")))?;
    let plan = e2e::Plan::new(opts.messages, &opts.senders);
    let sizes = floors::FloorSizes::new(opts.quick, &opts.senders);
    let idle_before = conditions::idle_check();
    let stat_start = conditions::read_stat();
    if !opts.json && !idle_before.ok() {
        let _ = writeln!(
            std::io::stderr(),
            "peer bench: warning: not every CPU is ≥ {}% idle ({:.1}% machine-wide); figures will be noisy",
            conditions::IDLE_PERCENT_MIN,
            idle_before.machine_idle
        );
    }
    let measured = floors::measure(&floor_dir, &sizes).and_then(|before| {
        // Idle wake-ups need a window long against the heartbeat (5 s by default).
        let idle_ms = if opts.quick { 2_000 } else { 30_000 };
        let out = e2e::run(&exe, &dir, &plan, idle_ms);
        floors::measure(&floor_dir, &sizes).map(|after| (before, out, after))
    });
    let steal = conditions::steal_percent(&stat_start, &conditions::read_stat());
    let idle_after = conditions::idle_check();
    let (before, out, after) = match measured {
        Ok(m) => m,
        Err(e) => {
            remove_dir(&dir, opts);
            return Err(e);
        }
    };
    let run = Measured {
        opts,
        plan: &plan,
        dir: &dir,
        idle: [idle_before, idle_after],
        steal,
        before,
        after,
        out,
    };
    let (report, figs, targets, ok) = run.report(started);
    if ok && !opts.keep {
        remove_dir(&dir, opts);
    }
    if opts.json {
        write_stdout(&format!("{report}\n"))?;
    } else {
        write_stdout(&text(&report, &run, &figs, &targets))?;
    }
    Ok(if ok { 0 } else { 1 })
}

/// Everything one run measured, before it is reported.
struct Measured<'a> {
    opts: &'a Options,
    plan: &'a e2e::Plan,
    dir: &'a std::path::Path,
    /// The machine's idle check before and after.
    idle: [conditions::IdleCheck; 2],
    /// The hypervisor's steal share over the whole run, in percent.
    steal: Option<f64>,
    before: floors::Floors,
    after: floors::Floors,
    out: e2e::Outcome,
}

impl Measured<'_> {
    /// The JSON report, the figures and targets it was built from, and whether nothing failed.
    fn report(&self, started: Instant) -> (Value, Vec<report::Figure>, Vec<targets::Target>, bool) {
        let (out, opts) = (&self.out, self.opts);
        let figs = report::figures(&self.before, &self.after, out);
        let targets = targets::targets(&figs, out);
        let audit = out.last_audit();
        let ok = out.error.is_none()
            && out.failure_count == 0
            && audit.lost == 0
            && audit.duplicates == 0;
        let [idle_before, idle_after] = &self.idle;
        let report = json!({
            "ok": ok,
            "error": out.error,
            "quick": opts.quick,
            "machine": {
                "cpus": idle_before.per_cpu.len(),
                "before": idle_before.to_json(),
                "after": idle_after.to_json(),
                "stealPercent": self.steal.map(stats::round2),
                "filesystem": conditions::filesystem_type(self.dir),
                "dir": self.dir.display().to_string(),
                "kept": opts.keep || !ok,
                "pinning": "none",
            },
            "limitOverrides": self.plan.overrides(),
            "floors": {"before": self.before.to_json(), "after": self.after.to_json(), "ratioBasis": "mean of the before and after medians"},
            "targets": targets.iter().map(targets::Target::to_json).collect::<Vec<_>>(),
            "figures": figs.iter().map(report::Figure::to_json).collect::<Vec<_>>(),
            "cpuPerMessage": report::cpu_json(out, &floors::DeviceCpu::mean(&self.before.device_cpu, &self.after.device_cpu), idle_before.per_cpu.len()),
            "process": report::process_json(out),
            "history": report::history_json(out),
            "fsyncsPerMessage": report::fsyncs_json(out),
            "criticalFsyncs": {
                "n": out.critical_syncs.len(),
                "median": stats::round2(stats::Summary::of(&out.critical_syncs).median),
                "max": stats::round2(out.critical_syncs.iter().copied().fold(f64::NAN, f64::max)),
                "method": "single sends on settled roots: fdatasyncs the sender and the receiver completed between the send's start and its return (an upper bound on the syncs it waited for; the sender's intent is written out, not synced, and the receiver's accept sync flushes it when both journals share an ext4 device; otherwise the sender syncs it after the answer)",
            },
            "idle": out.idle.map(|i| idle_json(&i, "right after start")),
            "idleAfter": out.idle_after.map(|i| idle_json(&i, "after every phase, senders still live")),
            "integrity": report::integrity_json(out),
            "hostExits": out.host_exits.iter().filter(|(_, c)| *c != Some(0)).map(|(a, c)| json!({"alias": a, "exit": c})).collect::<Vec<_>>(),
            "elapsedMs": started.elapsed().as_millis() as u64,
        });
        (report, figs, targets, ok)
    }
}

/// Writes the report; a reader that went away is `Error::stdout_closed` (a quiet end).
fn write_stdout(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Error::stdout_write(&e))
}

fn remove_dir(dir: &std::path::Path, opts: &Options) {
    if !opts.keep {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn text(r: &Value, run: &Measured, figs: &[report::Figure], targets: &[targets::Target]) -> String {
    let mut s = machine_text(r);
    s += &report::floors_text(&run.before, &run.after);
    s += "\n";
    s += &report::figures_text(figs);
    s += "\n";
    s += &targets::text(targets);
    s += &counters_text(r);
    s += &integrity_text(r);
    s
}

/// Steal share above which the text report calls a run disturbed, in percent: quiet runs on
/// the development VM read 0.1–0.6 %, runs with ten-fold p99s 4–14 %.
const STEAL_PERCENT_NOISY: f64 = 2.0;

/// The machine line, other CPU users, the hypervisor's steal and the limit overrides.
fn machine_text(r: &Value) -> String {
    let m = &r["machine"];
    let mut s = format!(
        "peer bench: {} CPUs, idle {}% before / {}% after (all CPUs ≥ 90%: {} / {}), filesystem {} at {}\n",
        m["cpus"],
        m["before"]["idlePercent"],
        m["after"]["idlePercent"],
        m["before"]["allCpusIdleOk"],
        m["after"]["allCpusIdleOk"],
        m["filesystem"].as_str().unwrap_or("?"),
        m["dir"].as_str().unwrap_or("?"),
    );
    for when in ["before", "after"] {
        if let Some(busy) = m[when]["otherCpuUsers"]
            .as_array()
            .filter(|b| !b.is_empty())
        {
            s += &format!("other CPU users {when}: {}\n", Value::Array(busy.clone()));
        }
    }
    if let Some(steal) = m["stealPercent"].as_f64() {
        s += &format!(
            "hypervisor steal during the run: {steal}% of CPU time{}\n",
            if steal > STEAL_PERCENT_NOISY {
                " (other guests ran in the middle of this run: its latencies and CPU figures are disturbed)"
            } else {
                ""
            }
        );
    }
    s += &format!("limit overrides (config.json): {}\n\n", r["limitOverrides"]);
    s
}

/// Process counters, CPU and fdatasyncs per message, the idle receiver and the history run.
fn counters_text(r: &Value) -> String {
    let p = &r["process"];
    let mut s = format!(
        "\nreceiver process: RSS {} kB idle, {} kB peak; threads {} idle, {} peak\n",
        p["receiver"]["idle"]["rssKb"],
        p["receiver"]["peak"]["rssKb"],
        p["receiver"]["idle"]["threads"],
        p["receiver"]["peak"]["threads"]
    );
    for c in r["cpuPerMessage"].as_array().into_iter().flatten() {
        s += &cpu_text(c, &r["machine"]["cpus"]);
    }
    for f in r["fsyncsPerMessage"].as_array().into_iter().flatten() {
        s += &format!(
            "fdatasyncs per message, {}: {} (senders {}, receiver {}) over {} messages; intent write-outs {}\n",
            f["phase"].as_str().unwrap_or("?"),
            f["total"],
            f["senders"],
            f["receiver"],
            f["messages"],
            f["senderWriteOuts"]
        );
    }
    let c = &r["criticalFsyncs"];
    s += &format!(
        "fdatasyncs completed during a single send (critical path, upper bound; the sender's intent is written out and covered by the receiver's accept sync): median {}, max {} over {} sends\n",
        c["median"], c["max"], c["n"]
    );
    for key in ["idle", "idleAfter"] {
        if let Some(i) = r[key].as_object() {
            s += &format!(
                "idle receiver {}: {} wakeups/s (thread sleeps; {} preemptions/s beside) over {} s, RSS {} kB of which {} kB its own memory, the rest mapped code (target ≤ 1 wakeup/s, ≤ 4096 kB)\n",
                i["when"].as_str().unwrap_or_default(),
                i["wakeupsPerSecond"],
                i["preemptionsPerSecond"],
                i["seconds"],
                i["rssKb"],
                i["anonKb"]
            );
        }
    }
    let h = &r["history"];
    if h.is_object() {
        s += &format!(
            "history: sender CPU {} → {} µs/msg (a fresh sender alongside: {}), receiver {} → {} µs/msg (first {} vs after {} sent); sender RSS {} kB after; journal compactions in the windows {} → {} (fresh sender {})\n",
            h["senderCpuUsPerMessage"]["first"],
            h["senderCpuUsPerMessage"]["after"],
            h["senderCpuUsPerMessage"]["freshAlongside"],
            h["receiverCpuUsPerMessage"]["first"],
            h["receiverCpuUsPerMessage"]["after"],
            h["window"],
            h["sentBefore"],
            h["senderRssKbAfter"],
            h["compactions"]["first"],
            h["compactions"]["after"],
            h["compactions"]["freshAlongside"]
        );
    }
    s
}

/// One throughput run's CPU per message (an element of `cpuPerMessage`) as a line.
fn cpu_text(c: &Value, cpus: &Value) -> String {
    format!(
        "CPU per message, {} sender(s): {} µs (sender roots {} + receiver {}) over {} messages; of it {} µs in the kernel (system time, split by the clock ticks), of which ≈ {} µs the journals' device I/O (counted operations × the floors' CPU per operation); at 100% of {} CPUs this allows ≤ {} msg/s\n",
        c["senders"],
        c["totalUs"],
        c["senderRootsUs"],
        c["receiverUs"],
        c["messages"],
        c["kernelUs"],
        c["deviceIoUs"],
        cpus,
        c["cpuBoundRate"]
    )
}

/// Lost, duplicate and failed counts, the error, the kept directory and the elapsed time.
fn integrity_text(r: &Value) -> String {
    let i = &r["integrity"];
    let mut s = format!(
        "integrity: {} accepted, {} lost, {} duplicates, {} unexpected, {} failed sends ({} of them in the inbox after all)\n",
        i["accepted"],
        i["lost"],
        i["duplicates"],
        i["unexpected"],
        i["failedSends"],
        i["failedButDelivered"]
    );
    if let Some(f) = i["failures"].as_array().filter(|f| !f.is_empty()) {
        s += &format!("failures: {}\n", Value::Array(f.clone()));
    }
    if let Some(e) = r["error"].as_str() {
        s += &format!("error: {e}\n");
    }
    if r["machine"]["kept"] == json!(true) {
        s += &format!("kept: {}\n", r["machine"]["dir"].as_str().unwrap_or("?"));
    }
    s += &format!("elapsed: {} ms\n", r["elapsedMs"]);
    s
}

/// One idle window of the receiver as JSON.
fn idle_json(i: &e2e::Idle, when: &str) -> Value {
    json!({
        "when": when,
        "seconds": stats::round2(i.seconds),
        "wakeupsPerSecond": stats::round2(i.wakeups_per_second),
        "preemptionsPerSecond": stats::round2(i.preemptions_per_second),
        "rssKb": i.rss_kb,
        "anonKb": i.anon_kb,
        "target": "≤ 1 wakeup/s between heartbeats, RSS ≤ 4 MiB",
        "source": "/proc/PID/task/*/status voluntary_ctxt_switches (preemptions: nonvoluntary_ctxt_switches)",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text line of a throughput run's CPU states its kernel part beside the total.
    #[test]
    fn cpu_line_states_the_kernel_part() {
        let c = json!({"senders": 8, "totalUs": 189.0, "senderRootsUs": 125.0,
            "receiverUs": 64.0, "messages": 8000, "kernelUs": 111.0, "deviceIoUs": 28.0,
            "cpuBoundRate": 10582.0});
        let line = cpu_text(&c, &json!(2));
        assert!(
            line.starts_with("CPU per message, 8 sender(s): 189.0 µs"),
            "{line}"
        );
        assert!(line.contains("111.0 µs in the kernel"), "{line}");
        assert!(
            line.contains("of 2 CPUs this allows ≤ 10582.0 msg/s"),
            "{line}"
        );
        // A run with no tick counted has no kernel part: null, not a number.
        let none = cpu_text(&json!({"kernelUs": null}), &json!(2));
        assert!(none.contains("null µs in the kernel"), "{none}");
    }
}
