//! Phase 2 of `peer bench`: end-to-end figures between real `peer host` processes in a fresh
//! namespace — warm durable accept, cold CLI send, long-poll inbox latency, sends through a real
//! `peer mcp` beside MCP pings, throughput with concurrent senders and the CPU it costs, the
//! receiver's process counters — auditing the receiver's inbox for lost and duplicate messages
//! after every phase.

use super::adapter::{self, Adapter, Audit, JournalCounts};
use super::conditions::{self, CpuMark, ProcCounters};
use super::hosts::{self, Host, HostPlan};
use super::paired::PairedSync;
use crate::config::Limits;
use crate::config::internal::{
    BENCH_FAILURES_KEPT, BENCH_POLL_WAIT_MS, BENCH_PROBE_MS, BENCH_SAMPLE_MS, BENCH_SETTLE_MS,
    BENCH_SETTLE_STEP_MS, BENCH_SETTLE_TRIES,
};
use crate::error::{Code, Error, Result};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Size of every benchmark message body, in bytes (the competitor figures used 200 B).
const BODY_BYTES: usize = 200;

/// How many messages each phase sends.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub warmup: usize,
    pub warm: usize,
    pub cold: usize,
    pub probes: usize,
    /// Sends through `peer mcp`, and as many MCP pings.
    pub mcp: usize,
    /// Single sends on a settled pair of roots whose fdatasyncs are counted one by one.
    pub sync_probes: usize,
    /// Warm sends repeated at the end, with every sender process still live.
    pub crowded: usize,
    /// (concurrent senders, messages per sender) for each throughput run.
    pub throughput: Vec<(usize, usize)>,
    /// History: a fresh sender's CPU per message over its first `history.0` sends, and again
    /// over `history.0` sends once `history.1` have been sent.
    pub history: (usize, usize),
}

impl Plan {
    /// `messages` measured warm sends; the other phases scale from it.
    pub fn new(messages: usize, senders: &[usize]) -> Plan {
        let n = messages.max(1);
        let total = 4 * n;
        Plan {
            warmup: (n / 10).clamp(3, 100),
            warm: n,
            cold: (n / 20).clamp(3, 50),
            probes: (n / 2).max(3),
            mcp: n,
            sync_probes: (n / 20).clamp(5, 50),
            crowded: (n / 4).clamp(3, 250),
            throughput: senders
                .iter()
                .map(|&k| (k, (total / k.max(1)).max(2)))
                .collect(),
            history: {
                let first = (5 * n).clamp(100, 2_500);
                (first, 10 * first)
            },
        }
    }

    /// Every message the receiver will be asked to accept.
    pub fn total(&self) -> usize {
        self.warmup
            + self.warm
            + self.cold
            + self.probes
            + self.warmup
            + self.mcp
            + self.sync_probes
            + self.crowded
            + self
                .throughput
                .iter()
                .map(|(k, m)| k * (m + 1))
                .sum::<usize>()
            + self.history.0
            + self.history.1
            // The fresh sender beside the history sender's last window, and its warm-up.
            + self.history.0
            + 1
    }

    pub fn senders_max(&self) -> usize {
        self.throughput
            .iter()
            .map(|(k, _)| *k)
            .max()
            .unwrap_or(1)
            .max(1)
    }

    /// The limit overrides the benchmark writes into its namespace's config.json: the
    /// defaults (10 msg/s per sender, 32 unconsumed messages) would measure the limits.
    pub fn overrides(&self) -> Value {
        let total = self.total() as u64;
        json!({
            "ratePerSecond": 1_000_000,
            "rateBurst": 1_000_000,
            "inboxMessages": 2 * total + 1024,
            "storageBytes": (total * 8192).max(64 << 20),
            "inboundConnections": 2 * self.senders_max() as u64 + 16,
        })
    }
}

/// The name of the throughput run with `senders` concurrent senders: its phase, its figure's
/// key and the target rows that read that figure.
pub fn throughput_key(senders: usize) -> String {
    format!("throughput{senders}")
}

/// One throughput run.
#[derive(Clone, Debug)]
pub struct Throughput {
    pub senders: usize,
    pub messages: usize,
    pub seconds: f64,
    pub latency: Vec<f64>,
    /// Live `peer host` processes during the run.
    pub peers: usize,
    /// CPU microseconds (user + system) per accepted message of the sender roots together
    /// and of the receiver, over the run.
    pub sender_cpu_us: f64,
    pub receiver_cpu_us: f64,
    /// The kernel's part (system time: system calls, the device's kicks and completions,
    /// wake-ups) of the sender roots' and the receiver's CPU per message, together.
    pub kernel_cpu_us: f64,
}

/// CPU cost per message of one fresh sender, early and after a long history.
#[derive(Clone, Copy, Debug, Default)]
pub struct History {
    /// Messages in each measured window.
    pub window: usize,
    /// Messages sent before the second window starts.
    pub sent: usize,
    /// Sender CPU µs per message over its first `window` sends.
    pub first_cpu_us: f64,
    /// Sender CPU µs per message over `window` sends after `sent`.
    pub after_cpu_us: f64,
    /// A fresh sender's CPU µs per message over its first `window` sends, in blocks
    /// alternating with those `window` (the basis its verdict is judged by: the same seconds
    /// of the same machine); 0 when not measured.
    pub fresh_cpu_us: f64,
    /// The receiver's CPU µs per message over the same two windows (the second carries the
    /// fresh sender's messages too).
    pub first_rx_cpu_us: f64,
    pub after_rx_cpu_us: f64,
    /// The sender's resident set after the second window.
    pub sender_rss_kb: u64,
    /// Journal compactions (whole snapshot rewrites) during the first window, the late one,
    /// and the fresh sender's window: a late window's extra CPU may be one of these.
    pub compactions: [u64; 3],
    /// Send latencies of the two windows.
    pub first_latency: super::stats::Summary,
    pub after_latency: super::stats::Summary,
}

/// An idle receiver over a quiet window: how often its threads woke, and its resident set.
#[derive(Clone, Copy, Debug, Default)]
pub struct Idle {
    pub seconds: f64,
    /// Voluntary context switches per second: each thread sleep is one wake-up.
    pub wakeups_per_second: f64,
    /// Involuntary context switches per second (preemptions by other tasks), shown beside.
    pub preemptions_per_second: f64,
    pub rss_kb: u64,
    /// Of `rss_kb`, the process's own (anonymous) memory.
    pub anon_kb: u64,
}

/// Peak counters seen while sampling, next to the idle reading.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub idle: ProcCounters,
    pub peak_rss_kb: u64,
    pub peak_threads: u64,
}

/// Everything phase 2 measured; partial when `error` is set.
#[derive(Debug, Default)]
pub struct Outcome {
    pub warm: Vec<f64>,
    /// Warm sends at the end, with `crowd` live peer processes in the namespace.
    pub warm_crowded: Vec<f64>,
    /// Live `peer host` processes during the first phases and during the crowded one.
    pub peers_first: usize,
    pub crowd: usize,
    pub cold: Vec<f64>,
    pub inbox: Vec<f64>,
    /// Per single send on settled roots: fdatasyncs the sender and receiver completed between
    /// the send's start and its return (an upper bound on those it waited for).
    pub critical_syncs: Vec<f64>,
    /// `send_peer_message` through `peer mcp`, and MCP pings through the same process.
    pub mcp_send: Vec<f64>,
    pub mcp_ping: Vec<f64>,
    /// fdatasync floor samples taken right after each measured warm send, and each measured
    /// MCP send (see `bench::paired`).
    pub warm_sync: Vec<f64>,
    pub mcp_sync: Vec<f64>,
    pub throughput: Vec<Throughput>,
    pub history: Option<History>,
    /// The receiver idle right after it started.
    pub idle: Option<Idle>,
    /// The receiver idle again after every phase, its senders still live: what it keeps
    /// doing for the state a real run left behind (receipt pushes, sweeps, cached connections).
    pub idle_after: Option<Idle>,
    /// Journal fdatasyncs and intent write-outs counted by the roots (`local.info`) per phase.
    pub fsyncs: Vec<PhaseIo>,
    pub receiver: Counters,
    pub sender: Counters,
    pub audits: Vec<(String, Audit)>,
    pub failures: Vec<String>,
    pub failure_count: usize,
    pub host_exits: Vec<(String, Option<i32>)>,
    pub error: Option<String>,
}

/// The journal device operations the roots counted (`local.info`) over one phase.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseIo {
    pub phase: String,
    /// Accepted messages the counts cover.
    pub messages: usize,
    /// Summed over the phase's sender roots.
    pub senders: JournalCounts,
    pub receiver: JournalCounts,
}

impl Outcome {
    fn fail(&mut self, e: &Error) {
        self.failure_count += 1;
        if self.failures.len() < BENCH_FAILURES_KEPT {
            self.failures.push(e.to_string());
        }
    }

    /// The last audit (it covers every message accepted so far).
    pub fn last_audit(&self) -> Audit {
        self.audits.last().map(|(_, a)| *a).unwrap_or_default()
    }
}

fn body(label: &str, i: usize) -> String {
    let mut s = format!("peer bench {label} {i} ");
    while s.len() < BODY_BYTES {
        s.push('.');
    }
    s
}

/// The state shared by the phases.
struct Run<'a> {
    exe: &'a Path,
    dir: PathBuf,
    limits: Limits,
    rx: Host,
    tx: Vec<Host>,
    b: Adapter,
    a1: Adapter,
    /// Distinguishes this run's message ids.
    tag: String,
    accepted: Vec<String>,
    /// Ids whose send failed; the audit looks for them too.
    failed: Vec<String>,
    out: Outcome,
}

/// Runs phase 2 in a fresh namespace under `dir`.
pub fn run(exe: &Path, dir: &Path, plan: &Plan, idle_ms: u64) -> Outcome {
    let mut out = Outcome::default();
    let mut run = match setup(exe, dir, plan) {
        Ok(r) => r,
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let pids = [run.rx.pid, run.tx.first().map_or(0, |h| h.pid)];
    std::thread::sleep(Duration::from_millis(BENCH_SETTLE_MS));
    run.out.idle = Some(idle(run.rx.pid, idle_ms));
    let sampler = spawn_sampler(pids, stop.clone());
    run.phases(plan);
    stop.store(true, Ordering::SeqCst);
    if let Ok([r, s]) = sampler.join() {
        run.out.receiver = r;
        run.out.sender = s;
    }
    std::thread::sleep(Duration::from_millis(BENCH_SETTLE_MS));
    run.out.idle_after = Some(idle(run.rx.pid, idle_ms));
    let mut all: Vec<Host> = std::iter::once(run.rx).chain(run.tx).collect();
    run.out.host_exits = hosts::stop_all(&mut all);
    run.out
}

/// The namespace home, the hosts' workspace and their log directory under `dir`.
fn layout(dir: &Path) -> [PathBuf; 3] {
    [dir.join("home"), dir.join("workspace"), dir.join("logs")]
}

/// Starts the receiver and one sender; more senders start before the throughput runs, so
/// the first figures see a namespace of two peers.
fn setup<'a>(exe: &'a Path, dir: &Path, plan: &Plan) -> Result<Run<'a>> {
    let [home, ws, logs] = layout(dir);
    for d in [&home, &ws, &logs] {
        crate::fsutil::ensure_private_dir(d)?;
    }
    let config =
        json!({"sessions": {"communication": {"enabled": true, "limits": plan.overrides()}}});
    crate::fsutil::atomic_write(
        &home.join("config.json"),
        config.to_string().as_bytes(),
        crate::fsutil::Durability::Durable,
    )?;
    let limits = crate::config::Config::load(&home)?.limits;
    let aliases = ["bench-rx".to_string(), sender_alias(1)];
    let hp = HostPlan {
        exe,
        home: &home,
        workspace: &ws,
        logs: &logs,
    };
    let mut all = hosts::start_all(&hp, &aliases)?;
    let tx = all.split_off(1);
    let rx = all
        .pop()
        .ok_or_else(|| Error::new(Code::Io, "bench: the receiver did not start"))?;
    let first = tx
        .first()
        .ok_or_else(|| Error::new(Code::Io, "bench: no sender started"))?;
    let b = Adapter::connect(&rx.control, &limits)?;
    let a1 = Adapter::connect(&first.control, &limits)?;
    Ok(Run {
        exe,
        dir: dir.to_path_buf(),
        limits,
        rx,
        tx,
        b,
        a1,
        tag: format!("{:08x}", crate::identity::random_u64() as u32),
        accepted: Vec::new(),
        failed: Vec::new(),
        out: Outcome::default(),
    })
}

/// One sequential send of message `id` through `a`, timed; its id goes to `accepted`, or to
/// `failed` with the error.
fn timed_send(
    a: &mut Adapter,
    to: &str,
    id: String,
    content: &str,
    accepted: &mut Vec<String>,
    failed: &mut Vec<String>,
) -> Result<f64> {
    let t = Instant::now();
    match a.send(to, content, &id) {
        Ok(()) => {
            let us = micros_since(t);
            accepted.push(id);
            Ok(us)
        }
        Err(e) => {
            let err = Error::new(e.code, format!("message {id}: {}", e.message));
            failed.push(id);
            Err(err)
        }
    }
}

/// Blocks the history sender's late window and the fresh sender's first one alternate in.
const HISTORY_BLOCKS: usize = 10;

/// `total` per one of `n`.
fn per(total: f64, n: usize) -> f64 {
    total / n.max(1) as f64
}

fn sender_alias(i: usize) -> String {
    format!("bench-tx{i:02}")
}

fn spawn_sampler(pids: [u32; 2], stop: Arc<AtomicBool>) -> std::thread::JoinHandle<[Counters; 2]> {
    std::thread::spawn(move || {
        let mut c = pids.map(|p| {
            let idle = conditions::proc_counters(p).unwrap_or_default();
            Counters {
                idle,
                peak_rss_kb: idle.rss_kb,
                peak_threads: idle.threads,
            }
        });
        while !stop.load(Ordering::SeqCst) {
            for (pid, c) in pids.iter().zip(c.iter_mut()) {
                if let Some(now) = conditions::proc_counters(*pid) {
                    // VmHWM catches peaks between samples; threads are only sampled.
                    c.peak_rss_kb = c.peak_rss_kb.max(now.rss_kb).max(now.hwm_kb);
                    c.peak_threads = c.peak_threads.max(now.threads);
                }
            }
            std::thread::sleep(Duration::from_millis(BENCH_SAMPLE_MS));
        }
        c
    })
}

/// Watches an idle process for `ms` milliseconds without touching it.
fn idle(pid: u32, ms: u64) -> Idle {
    let before = conditions::context_switches(pid);
    let t = Instant::now();
    std::thread::sleep(Duration::from_millis(ms));
    let seconds = t.elapsed().as_secs_f64();
    let after = conditions::context_switches(pid);
    let per_second = |n: u64| n as f64 / seconds.max(1e-3);
    let counters = conditions::proc_counters(pid);
    Idle {
        seconds,
        wakeups_per_second: per_second(after.0.saturating_sub(before.0)),
        preemptions_per_second: per_second(after.1.saturating_sub(before.1)),
        rss_kb: counters.map_or(0, |p| p.rss_kb),
        anon_kb: counters.map_or(0, |p| p.anon_kb),
    }
}

fn micros_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

impl Run<'_> {
    /// Runs every phase; a failed phase is recorded and the next one still runs, and the
    /// inbox is audited after each.
    fn phases(&mut self, plan: &Plan) {
        self.out.peers_first = 1 + self.tx.len();
        let r = self.warm(plan);
        self.after("warm", r);
        let r = self.sync_probes(plan.sync_probes);
        self.after("syncProbes", r);
        let r = self.cold(plan.cold);
        self.after("cold", r);
        let r = self.inbox(plan.probes);
        self.after("inbox", r);
        let r = self.mcp(plan.warmup, plan.mcp);
        self.after("mcp", r);
        for &(k, m) in &plan.throughput {
            let r = self.grow(k).and_then(|()| self.throughput(k, m));
            self.after(&throughput_key(k), r);
        }
        self.out.crowd = 1 + self.tx.len();
        if self.out.crowd > self.out.peers_first {
            let r = self.crowded(plan.crowded);
            self.after("warmCrowded", r);
        }
        let r = self.history(plan.history);
        self.after("history", r);
    }

    /// A fresh sender host sends `window` messages, then until `sent` have gone, then
    /// `window` more: its CPU per message in the first and the last window.
    fn history(&mut self, (window, sent): (usize, usize)) -> Result<()> {
        let (mut a, pid) = self.start_sender("bench-history")?;
        let mut h = History {
            window,
            sent,
            ..History::default()
        };
        let mut i = 0;
        let rx_pid = self.rx.pid;
        let k0 = a.compactions()?;
        let (c0, r0) = (CpuMark::now(pid), CpuMark::now(rx_pid));
        let mut lat = Vec::with_capacity(window);
        for _ in 0..window {
            lat.push(self.history_send(&mut a, &mut i)?);
        }
        (h.first_cpu_us, h.first_rx_cpu_us) =
            (per(c0.used_us(), window), per(r0.used_us(), window));
        h.compactions[0] = a.compactions()?.saturating_sub(k0);
        h.first_latency = super::stats::Summary::of(&lat);
        for _ in 0..sent.saturating_sub(window) {
            self.history_send(&mut a, &mut i)?;
        }
        // The last window alternates with a fresh sender's first one, block by block: both CPU
        // figures come from the same seconds, so the machine's drift over the run cannot pass
        // for history. Blocks, not single sends: a root that waits through another's send
        // between each of its own costs about twice the CPU per message (two runs: 152-179 µs
        // against 85-90 alone), which would dilute a real growth toward 1×.
        let (mut f, fresh_pid) = self.start_sender("bench-fresh")?;
        self.history_send(&mut f, &mut i)?; // its first contact: connection and handshake
        let (k0, kf0) = (a.compactions()?, f.compactions()?);
        let (c0, f0, r0) = (
            CpuMark::now(pid),
            CpuMark::now(fresh_pid),
            CpuMark::now(rx_pid),
        );
        let mut lat = Vec::with_capacity(window);
        let block = (window / HISTORY_BLOCKS).max(1);
        let mut done = 0;
        while done < window {
            let k = block.min(window - done);
            for _ in 0..k {
                lat.push(self.history_send(&mut a, &mut i)?);
            }
            for _ in 0..k {
                self.history_send(&mut f, &mut i)?;
            }
            done += k;
        }
        h.after_cpu_us = per(c0.used_us(), window);
        h.fresh_cpu_us = per(f0.used_us(), window);
        h.after_rx_cpu_us = per(r0.used_us(), 2 * window);
        h.compactions[1] = a.compactions()?.saturating_sub(k0);
        h.compactions[2] = f.compactions()?.saturating_sub(kf0);
        h.after_latency = super::stats::Summary::of(&lat);
        h.sender_rss_kb = conditions::proc_counters(pid).map_or(0, |p| p.rss_kb);
        self.out.history = Some(h);
        Ok(())
    }

    /// Starts one more sender root (kept with the others until the run ends) and opens its
    /// local channel.
    fn start_sender(&mut self, alias: &str) -> Result<(Adapter, u32)> {
        let host = self
            .start_hosts(&[alias.to_string()])?
            .pop()
            .ok_or_else(|| Error::new(Code::Io, format!("bench: sender {alias} did not start")))?;
        let a = Adapter::connect(&host.control, &self.limits)?;
        let pid = host.pid;
        self.tx.push(host);
        Ok((a, pid))
    }

    /// One history send through `a`, numbered `*i`; its latency.
    fn history_send(&mut self, a: &mut Adapter, i: &mut usize) -> Result<f64> {
        let id = self.id("history", *i);
        *i += 1;
        let to = self.rx.peer_id.clone();
        let content = body("history", *i);
        timed_send(a, &to, id, &content, &mut self.accepted, &mut self.failed)
    }

    /// Starts `peer host` processes with these aliases in the run's namespace (not kept).
    fn start_hosts(&self, aliases: &[String]) -> Result<Vec<Host>> {
        let [home, ws, logs] = layout(&self.dir);
        let hp = HostPlan {
            exe: self.exe,
            home: &home,
            workspace: &ws,
            logs: &logs,
        };
        hosts::start_all(&hp, aliases)
    }

    /// Starts senders until there are `k` (not timed).
    fn grow(&mut self, k: usize) -> Result<()> {
        if self.tx.len() >= k {
            return Ok(());
        }
        let aliases: Vec<String> = (self.tx.len() + 1..=k).map(sender_alias).collect();
        let started = self.start_hosts(&aliases)?;
        self.tx.extend(started);
        Ok(())
    }

    fn crowded(&mut self, n: usize) -> Result<()> {
        for i in 0..n {
            let us = self.send_one("crowded", i)?;
            self.out.warm_crowded.push(us);
        }
        Ok(())
    }

    fn after(&mut self, phase: &str, result: Result<()>) {
        if let Err(e) = result {
            self.out
                .fail(&Error::new(e.code, format!("{phase}: {}", e.message)));
        }
        let pages = self.accepted.len() + self.failed.len() + 64;
        match adapter::read_all(&mut self.b, pages) {
            Ok((inbox, _)) => {
                let a = adapter::audit(&self.accepted, &self.failed, &inbox);
                self.out.audits.push((phase.to_string(), a));
            }
            Err(e) => {
                self.out
                    .error
                    .get_or_insert(format!("audit after {phase}: {e}"));
            }
        }
    }

    fn id(&self, label: &str, i: usize) -> String {
        format!("bench-{}-{label}-{i}", self.tag)
    }

    /// One sequential send from the first sender; a failure is remembered by id.
    fn send_one(&mut self, label: &str, i: usize) -> Result<f64> {
        let (to, id) = (self.rx.peer_id.clone(), self.id(label, i));
        let content = body(label, i);
        let (a, accepted, failed) = (&mut self.a1, &mut self.accepted, &mut self.failed);
        timed_send(a, &to, id, &content, accepted, failed)
    }

    /// Sends `n` messages one at a time, each once the sender's sync count has stopped moving,
    /// and counts the fdatasyncs both roots completed before the send returned. Syncs the
    /// sender starts without waiting for (a receipt record) only count when they finish
    /// first, so each count is an upper bound on the syncs on the send's critical path.
    fn sync_probes(&mut self, n: usize) -> Result<()> {
        for i in 0..n {
            let mut before = self.a1.syncs()?;
            for _ in 0..BENCH_SETTLE_TRIES {
                std::thread::sleep(Duration::from_millis(BENCH_SETTLE_STEP_MS));
                let now = self.a1.syncs()?;
                if now == before {
                    break;
                }
                before = now;
            }
            let r0 = self.b.syncs()?;
            self.send_one("syncs", i)?;
            let s1 = self.a1.syncs()?;
            let r1 = self.b.syncs()?;
            let counted = s1.saturating_sub(before) + r1.saturating_sub(r0);
            self.out.critical_syncs.push(counted as f64);
        }
        Ok(())
    }

    fn warm(&mut self, plan: &Plan) -> Result<()> {
        let mut counted = None;
        let mut paired = PairedSync::start(&self.dir, plan.warm)?;
        for i in 0..plan.warmup + plan.warm {
            if i == plan.warmup {
                counted = Some((self.a1.journal_io()?, self.b.journal_io()?));
            }
            let us = self.send_one("warm", i)?;
            if i >= plan.warmup {
                self.out.warm.push(us);
                paired.sample()?;
            }
        }
        self.out.warm_sync = paired.finish();
        if let Some((s0, r0)) = counted {
            let (s1, r1) = (self.a1.journal_io()?, self.b.journal_io()?);
            self.out.fsyncs.push(PhaseIo {
                phase: "warm".into(),
                messages: plan.warm,
                senders: s1.since(s0),
                receiver: r1.since(r0),
            });
        }
        Ok(())
    }

    /// `warmup` then `n` sends through a fresh `peer mcp`, each after one MCP ping.
    fn mcp(&mut self, warmup: usize, n: usize) -> Result<()> {
        let [home, ws, logs] = layout(&self.dir);
        let mut client = super::mcp::McpClient::start(self.exe, &home, &ws, &logs, "bench-mcp")?;
        let to = self.rx.peer_id.clone();
        let mut paired = PairedSync::start(&self.dir, n)?;
        for i in 0..warmup + n {
            let t = Instant::now();
            client.ping()?;
            let ping = micros_since(t);
            let t = Instant::now();
            let id = client.send(&to, &body("mcp", i))?;
            let send = micros_since(t);
            self.accepted.push(id);
            if i >= warmup {
                self.out.mcp_ping.push(ping);
                self.out.mcp_send.push(send);
                paired.sample()?;
            }
        }
        self.out.mcp_sync = paired.finish();
        client.stop();
        Ok(())
    }

    fn cold(&mut self, n: usize) -> Result<()> {
        use std::process::{Command, Stdio};
        let control = self
            .tx
            .first()
            .map(|h| h.control.clone())
            .unwrap_or_default();
        for i in 0..n {
            let id = self.id("cold", i);
            let t = Instant::now();
            let out = Command::new(self.exe)
                .args(["--json", "send", "--message-id", &id, &self.rx.peer_id])
                .arg(body("cold", i))
                .env(crate::runtime::control::ENV_CONTROL, &control)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| Error::io("cannot start peer send", self.exe, &e))?;
            let us = micros_since(t);
            let receipt = last_json_line(&out.stdout);
            match (
                out.status.success(),
                receipt.as_ref().map(adapter::accepted_id),
            ) {
                (true, Some(Ok(got))) if got == id => {
                    self.accepted.push(id);
                    self.out.cold.push(us);
                }
                _ => {
                    self.failed.push(id.clone());
                    return Err(Error::new(
                        Code::Io,
                        format!(
                            "message {id}: peer send exited with {} and printed {}; stderr: {}",
                            out.status,
                            crate::sanitize::line(&String::from_utf8_lossy(&out.stdout), 200),
                            crate::sanitize::line(&String::from_utf8_lossy(&out.stderr), 200)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn inbox(&mut self, n: usize) -> Result<()> {
        let pages = self.accepted.len() + self.failed.len() + 64;
        let (_, cursor) = adapter::read_all(&mut self.b, pages)?;
        let mut poller = Adapter::connect(&self.rx.control, &self.limits)?;
        let (seen_tx, seen_rx) = crossbeam_channel::bounded::<(String, Instant)>(n + 64);
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::spawn(move || -> Result<()> {
            let mut cursor = cursor;
            while !stop2.load(Ordering::SeqCst) {
                let page = poller.page(cursor, BENCH_POLL_WAIT_MS)?;
                let at = Instant::now();
                for id in page.ids {
                    // A full channel means the main side stopped listening.
                    if seen_tx.try_send((id, at)).is_err() {
                        return Ok(());
                    }
                }
                cursor = cursor.max(page.cursor);
            }
            Ok(())
        });
        let result = self.probe(n, &seen_rx);
        stop.store(true, Ordering::SeqCst);
        drop(seen_rx);
        let joined = handle
            .join()
            .unwrap_or_else(|_| Err(Error::new(Code::Io, "bench: the long-poll thread panicked")));
        result.and(joined)
    }

    fn probe(
        &mut self,
        n: usize,
        seen: &crossbeam_channel::Receiver<(String, Instant)>,
    ) -> Result<()> {
        for i in 0..n {
            let t = Instant::now();
            self.send_one("inbox", i)?;
            let id = self.id("inbox", i);
            loop {
                match seen.recv_timeout(Duration::from_millis(BENCH_PROBE_MS)) {
                    Ok((got, at)) if got == id => {
                        self.out
                            .inbox
                            .push(at.duration_since(t).as_secs_f64() * 1e6);
                        break;
                    }
                    Ok(_) => continue,
                    Err(_) => {
                        return Err(Error::new(
                            Code::Timeout,
                            format!(
                                "bench: the long poll did not return message {id} within {BENCH_PROBE_MS} ms"
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn throughput(&mut self, k: usize, m: usize) -> Result<()> {
        let mut adapters = Vec::with_capacity(k);
        let mut senders_before = JournalCounts::default();
        for h in self.tx.iter().take(k) {
            let mut a = Adapter::connect(&h.control, &self.limits)?;
            senders_before = senders_before + a.journal_io()?;
            adapters.push(a);
        }
        let receiver_before = self.b.journal_io()?;
        let barrier = Arc::new(std::sync::Barrier::new(adapters.len() + 1));
        let to = self.rx.peer_id.clone();
        let threads: Vec<_> = adapters
            .into_iter()
            .enumerate()
            .map(|(s, a)| {
                let label = format!("tp{k}-s{s}");
                let prefix = format!("bench-{}-{label}-", self.tag);
                let (barrier, to) = (barrier.clone(), to.clone());
                std::thread::spawn(move || send_run(a, &barrier, &to, &label, &prefix, m))
            })
            .collect();
        // Every sender has sent its warm-up message when the first wait ends; the CPU marks
        // are taken before the second releases the measured sends.
        barrier.wait();
        let cpu: Vec<CpuMark> = std::iter::once(self.rx.pid)
            .chain(self.tx.iter().take(k).map(|h| h.pid))
            .map(CpuMark::now)
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut run = Throughput {
            senders: k,
            messages: 0,
            seconds: 0.0,
            latency: Vec::new(),
            peers: 1 + self.tx.len(),
            sender_cpu_us: f64::NAN,
            receiver_cpu_us: f64::NAN,
            kernel_cpu_us: f64::NAN,
        };
        // Each sender's channel stays open until its root's CPU is read below: closing it
        // ends the root's connection thread, and an exited thread's CPU time is invisible
        // to the per-thread reading (a root that sent a few dozen messages is under the
        // clock-tick fallback's threshold, so its work went uncounted).
        let joined = self.join_senders(threads, &mut run);
        run.seconds = start.elapsed().as_secs_f64();
        let (used, ticks): (Vec<f64>, Vec<(u64, u64)>) =
            cpu.iter().map(CpuMark::used_and_ticks).unzip();
        drop(joined.open);
        let per = |us: f64| us / run.messages.max(1) as f64;
        run.receiver_cpu_us = per(used.first().copied().unwrap_or(f64::NAN));
        run.sender_cpu_us = per(used.iter().skip(1).sum());
        // Split over all the roots together: with 64 senders each root runs too briefly for
        // its own ticks to say much, their sum still does.
        let all = ticks.iter().fold((0, 0), |(u, s), (a, b)| (u + a, s + b));
        run.kernel_cpu_us = per(conditions::kernel_part_us(used.iter().sum(), all));
        let receiver_after = self.b.journal_io()?;
        // The counts start from before the warm-up messages: those messages count here.
        self.out.fsyncs.push(PhaseIo {
            phase: throughput_key(k),
            messages: run.messages + joined.warmed,
            senders: joined.io.since(senders_before),
            receiver: receiver_after.since(receiver_before),
        });
        self.out.throughput.push(run);
        Ok(())
    }

    /// Waits for every sender thread of a throughput run, records what each accepted or
    /// failed, and adds their measured sends and latencies to `run`.
    fn join_senders(
        &mut self,
        threads: Vec<std::thread::JoinHandle<SendRun>>,
        run: &mut Throughput,
    ) -> Joined {
        let mut joined = Joined {
            open: Vec::with_capacity(threads.len()),
            warmed: 0,
            io: JournalCounts::default(),
        };
        for t in threads {
            match t.join() {
                Ok(mut sent) => {
                    joined.open.extend(sent.channel.take());
                    if let Some(id) = sent.warm_id.take() {
                        joined.warmed += 1;
                        self.accepted.push(id);
                    }
                    joined.io = joined.io + sent.io;
                    run.latency.extend(sent.latency);
                    run.messages += sent.ids.len();
                    self.accepted.extend(sent.ids);
                    if let Some((id, e)) = sent.failed {
                        self.failed.push(id);
                        self.out.fail(&e);
                    }
                }
                Err(_) => self
                    .out
                    .fail(&Error::new(Code::Io, "bench: a sender thread panicked")),
            }
        }
        joined
    }
}

/// The sender threads of a throughput run, joined.
struct Joined {
    /// Their channels, still open (see `throughput`).
    open: Vec<Adapter>,
    /// Accepted warm-up messages.
    warmed: usize,
    /// The sender roots' journal counts at the end, summed.
    io: JournalCounts,
}

/// What one sender thread of a throughput run did.
struct SendRun {
    latency: Vec<f64>,
    ids: Vec<String>,
    /// The send that failed (one failure ends this sender; the others go on).
    failed: Option<(String, Error)>,
    /// The sender root's journal counts at the end.
    io: JournalCounts,
    /// The channel, still open, for the caller to close after reading the root's CPU.
    channel: Option<Adapter>,
    /// The accepted warm-up message (not measured); `None` when it failed, and then no
    /// measured message was sent.
    warm_id: Option<String>,
}

/// One sender of a throughput run: sends one warm-up message to `to` (its root's first
/// contact with the receiver: connection, handshake, cold caches), waits at `barrier` twice
/// (the caller reads the CPU marks in between), then sends the `m` measured messages.
fn send_run(
    mut a: Adapter,
    barrier: &std::sync::Barrier,
    to: &str,
    label: &str,
    prefix: &str,
    m: usize,
) -> SendRun {
    let mut run = SendRun {
        latency: Vec::with_capacity(m),
        ids: Vec::with_capacity(m),
        failed: None,
        io: JournalCounts::default(),
        channel: None,
        warm_id: None,
    };
    let warm_id = format!("{prefix}warm");
    match a.send(to, &body(label, m), &warm_id) {
        Ok(()) => run.warm_id = Some(warm_id),
        Err(e) => {
            let e = Error::new(e.code, format!("message {warm_id}: {}", e.message));
            run.failed = Some((warm_id, e));
        }
    }
    barrier.wait();
    barrier.wait();
    let measured = if run.warm_id.is_some() { m } else { 0 };
    for j in 0..measured {
        let id = format!("{prefix}{j}");
        let t = Instant::now();
        match a.send(to, &body(label, j), &id) {
            Ok(()) => {
                run.latency.push(micros_since(t));
                run.ids.push(id);
            }
            Err(e) => {
                let e = Error::new(e.code, format!("message {id}: {}", e.message));
                run.failed = Some((id, e));
                break;
            }
        }
    }
    run.io = a.journal_io().unwrap_or_default();
    run.channel = Some(a);
    run
}

/// The last line of `stdout` that parses as a JSON object.
fn last_json_line(stdout: &[u8]) -> Option<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(Value::is_object)
}

/// The directory a benchmark namespace lives in.
pub fn bench_dir(parent: &Path) -> PathBuf {
    parent.join(format!(
        "peerwire-bench-{}-{:08x}",
        std::process::id(),
        crate::identity::random_u64() as u32
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_scales_and_raises_limits() {
        let p = Plan::new(20, &[1, 8, 64]);
        assert_eq!(p.warm, 20);
        assert_eq!(p.warmup, 3);
        assert_eq!(p.cold, 3);
        assert_eq!(p.probes, 10);
        assert_eq!(p.throughput, vec![(1, 80), (8, 10), (64, 2)]);
        assert_eq!(p.crowded, 5);
        assert_eq!(p.history, (100, 1000));
        assert_eq!((p.mcp, p.sync_probes), (20, 5));
        assert_eq!(
            p.total(),
            3 + 20 + 3 + 10 + 3 + 20 + 5 + 5 + 81 + 88 + 192 + 100 + 1000 + 100 + 1
        );
        assert_eq!(Plan::new(1000, &[1]).history, (2500, 25_000));
        assert_eq!(p.senders_max(), 64);
        let o = p.overrides();
        assert_eq!(o["inboxMessages"], json!(2 * p.total() as u64 + 1024));
        assert_eq!(o["inboundConnections"], json!(144));
        let mut l = Limits::default();
        for (k, v) in o.as_object().unwrap() {
            l.set(k, v).unwrap();
        }
        l.validate().unwrap();
    }

    #[test]
    fn bodies_and_receipt_lines() {
        assert_eq!(body("warm", 3).len(), BODY_BYTES);
        let out = b"noise\n{\"messageId\":\"m\",\"state\":\"accepted\"}\n";
        assert_eq!(last_json_line(out).unwrap()["messageId"], "m");
        assert_eq!(last_json_line(b"[1]\nx\n"), None);
    }
}
