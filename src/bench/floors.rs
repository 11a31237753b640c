//! Phase 1 of `peer bench`: the physical floors measured in-process in the same run (Unix
//! socket round trip, fdatasync of a record written in place into a preallocated zero-filled
//! file and, beside it, of an append, atomic replace, no-op spawn, Ed25519 sign and
//! verify_strict, and the group-commit ceiling: durable commits per second of one journal with
//! N concurrent writers), so that every peerwire figure can be reported as a ratio to them.
//! The durable floors write into preallocated room because that is the cheapest way this
//! filesystem makes a record durable (an fdatasync that writes data blocks only, no inode),
//! which is also how the message store's journal is written.

use super::stats::Summary;
use crate::config::internal::BENCH_CPUS_PLACED_MAX;
use crate::error::{Code, Error, Result};
use crate::{fsutil, identity};
use serde_json::{Value, json};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Instant;

/// Size of one socket round-trip payload, in bytes.
const TRIP_BYTES: usize = 64;
/// Size of one appended record, in bytes.
pub(super) const RECORD_BYTES: usize = 4096;
/// Size of the signed message, in bytes.
const SIGNED_BYTES: usize = 200;

/// How many samples each floor takes (after its warm-up).
#[derive(Clone, Debug)]
pub struct FloorSizes {
    pub trips: usize,
    pub trips_warmup: usize,
    pub syncs: usize,
    pub replaces: usize,
    pub spawns: usize,
    pub signatures: usize,
    /// Records committed in each group-commit measurement (spread over its writers).
    pub group_records: usize,
    /// The writer counts to measure the group-commit ceiling for (the throughput runs').
    pub writers: Vec<usize>,
}

impl FloorSizes {
    pub fn new(quick: bool, writers: &[usize]) -> FloorSizes {
        let d = if quick { 20 } else { 1 };
        FloorSizes {
            trips: 10_000 / d,
            trips_warmup: 1_000 / d,
            syncs: 1_000 / d,
            replaces: 300 / d,
            spawns: 300 / d,
            // Debug builds verify in ≈ 10 ms, and --quick runs in debug CI.
            signatures: if quick { 30 } else { 3_000 },
            group_records: 4_000 / d,
            writers: writers.to_vec(),
        }
    }
}

/// One set of floor measurements (microseconds).
#[derive(Clone, Debug)]
pub struct Floors {
    /// A socket round trip with both threads on one CPU: no wake-up crosses CPUs.
    pub uds_trip: Summary,
    /// The same with the echo thread on another CPU (None with one CPU allowed, or when
    /// threads cannot be placed): each direction wakes the other CPU, on a VM a host IPI.
    pub uds_trip_cross_cpu: Option<Summary>,
    /// A record written in place into preallocated room + fdatasync.
    pub fdatasync: Summary,
    /// A record written in place into preallocated room + written out to the device
    /// (`sync_file_range`, no flush): what a send's intent costs on its path now.
    pub write_out: Summary,
    /// A record appended (the file grows) + fdatasync: the size goes to disk too.
    pub fdatasync_append: Summary,
    pub atomic_replace: Summary,
    pub spawn: Summary,
    pub sign: Summary,
    pub verify: Summary,
    /// Group-commit ceilings: (concurrent writers, durable commits per second).
    pub group_commit: Vec<(usize, f64)>,
    /// CPU the writing thread spent per record of the `fdatasync` and `writeOut` floors.
    pub device_cpu: DeviceCpu,
    /// The `fdatasync` floor again with the writing thread pinned to each allowed CPU in turn
    /// (at most [`BENCH_CPUS_PLACED_MAX`]; empty with one CPU or when threads cannot be placed): a
    /// device delivers its completions on some CPUs only, and on a VM a completion that must
    /// wake a thread on another, idle CPU crosses the host, so one fdatasync can cost a third
    /// more on one CPU than on another. The figures' floors stay the unplaced ones, measured
    /// where the scheduler puts the bench, as a send's own threads are.
    pub fdatasync_by_cpu: Vec<(usize, Summary)>,
}

/// What the per-CPU fdatasync floor measures.
pub const FDATASYNC_BY_CPU_WHAT: &str = "the fdatasync floor with the writing thread pinned to each allowed CPU in turn (at most 8); shown, not used as a floor";

/// Mean CPU time (user + system) of the calling thread per record of an in-place durable
/// floor, in microseconds: what a device operation costs the CPU that asks for it, beside the
/// wall time it takes. Under a hypervisor, submitting I/O traps to the host, and the guest
/// counts that time to the submitting thread, so it is not free for other work.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceCpu {
    pub fdatasync: f64,
    pub write_out: f64,
}

impl DeviceCpu {
    /// The CPU per record of the floor named `name`, for the two floors that have one.
    pub fn of(&self, name: &str) -> Option<f64> {
        match name {
            "fdatasync" => Some(self.fdatasync),
            "writeOut" => Some(self.write_out),
            _ => None,
        }
    }

    /// The mean of two measurements (the floors before and after the run).
    pub fn mean(a: &DeviceCpu, b: &DeviceCpu) -> DeviceCpu {
        DeviceCpu {
            fdatasync: (a.fdatasync + b.fdatasync) / 2.0,
            write_out: (a.write_out + b.write_out) / 2.0,
        }
    }
}

/// The floor names, in report order, with what each measures and the durability it gives.
pub const FLOOR_ROWS: [(&str, &str, &str); 9] = [
    (
        "udsTrip",
        "Unix socket round trip, 64 B, echo thread pinned to the caller's CPU (no wake-up crosses CPUs)",
        "none",
    ),
    (
        "udsTripCrossCpu",
        "Unix socket round trip, 64 B, echo thread pinned to another CPU than the caller's (each direction wakes that CPU); null with one CPU",
        "none",
    ),
    (
        "fdatasync",
        "write 4 KiB in place into a preallocated zero-filled file + fdatasync, benchmark filesystem",
        "fdatasync per record",
    ),
    (
        "writeOut",
        "write 4 KiB in place into a preallocated zero-filled file + sync_file_range (write out and wait, no device flush), benchmark filesystem",
        "none alone: durable at the device's next cache flush (a send's intent, covered by the recipient's accept fdatasync on the same ext4 device)",
    ),
    (
        "fdatasyncAppend",
        "append 4 KiB + fdatasync (the file size changes each time), benchmark filesystem",
        "fdatasync per record",
    ),
    (
        "atomicReplace",
        "fsutil::atomic_write Durable (temp, fsync, rename, fsync dir)",
        "fsync file + directory",
    ),
    ("spawn", "spawn + wait /bin/true", "n/a"),
    ("sign", "Ed25519 sign 200 B", "n/a"),
    ("verify", "Ed25519 verify_strict 200 B", "n/a"),
];

impl Floors {
    pub fn get(&self, name: &str) -> Option<Summary> {
        Some(match name {
            "udsTrip" => self.uds_trip,
            "udsTripCrossCpu" => return self.uds_trip_cross_cpu,
            "fdatasync" => self.fdatasync,
            "writeOut" => self.write_out,
            "fdatasyncAppend" => self.fdatasync_append,
            "atomicReplace" => self.atomic_replace,
            "spawn" => self.spawn,
            "sign" => self.sign,
            "verify" => self.verify,
            _ => return None,
        })
    }

    /// The group-commit ceiling with `writers` concurrent writers, commits per second.
    pub fn group_commit(&self, writers: usize) -> Option<f64> {
        self.group_commit
            .iter()
            .find(|(w, _)| *w == writers)
            .map(|(_, rate)| *rate)
    }

    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        for (name, what, durability) in FLOOR_ROWS {
            let mut v = self.get(name).map(Summary::to_json).unwrap_or(Value::Null);
            if let Some(cpu) = self.device_cpu.of(name) {
                v["cpuUs"] = json!(super::stats::round2(cpu));
            }
            v["what"] = json!(what);
            v["durability"] = json!(durability);
            m.insert(name.to_string(), v);
        }
        m.insert(
            "fdatasyncByCpu".to_string(),
            json!({
                "what": FDATASYNC_BY_CPU_WHAT,
                "cpus": self.fdatasync_by_cpu.iter().map(|(cpu, s)| {
                    let mut v = s.to_json();
                    v["cpu"] = json!(cpu);
                    v
                }).collect::<Vec<_>>(),
            }),
        );
        m.insert(
            "groupCommit".to_string(),
            json!({
                "what": GROUP_COMMIT_WHAT,
                "durability": "fdatasync per batch; every record acknowledged after the sync of its batch",
                "ceilings": self.group_commit.iter().map(|(w, r)| json!({"writers": w, "commitsPerSecond": super::stats::round2(*r)})).collect::<Vec<_>>(),
            }),
        );
        Value::Object(m)
    }
}

/// What the group-commit ceiling measures.
pub const GROUP_COMMIT_WHAT: &str = "N writer threads each hand over a 4 KiB record and wait; one committer writes every queued record in place into a preallocated zero-filled file and fdatasyncs once per batch";

/// Mean of the before and after group-commit ceilings with `writers` writers (NaN if absent).
pub fn mean_ceiling(before: &Floors, after: &Floors, writers: usize) -> f64 {
    match (before.group_commit(writers), after.group_commit(writers)) {
        (Some(b), Some(a)) => (b + a) / 2.0,
        _ => f64::NAN,
    }
}

/// Floor medians used for ratios: the mean of the before and after medians.
pub fn mean_median(before: &Floors, after: &Floors, name: &str) -> f64 {
    match (before.get(name), after.get(name)) {
        (Some(b), Some(a)) => (b.median + a.median) / 2.0,
        _ => f64::NAN,
    }
}

/// Measures every floor; `dir` is a private directory on the benchmark's filesystem.
pub fn measure(dir: &Path, sizes: &FloorSizes) -> Result<Floors> {
    // In the order they always ran: the socket first, then the durable floors.
    let trip = |placement| uds_trip(sizes.trips, sizes.trips_warmup, placement);
    let uds_trip_cross_cpu = trip(Placement::OtherCpu)?;
    // Measured unplaced when it cannot be placed, so it is always there.
    let uds_trip = trip(Placement::SameCpu)?
        .ok_or_else(|| Error::new(Code::Io, "bench floor: the socket trip was not measured"))?;
    let (fdatasync, fdatasync_cpu) = overwrite(dir, sizes.syncs, Settle::Fdatasync)?;
    let (write_out, write_out_cpu) = overwrite(dir, sizes.syncs, Settle::WriteOut)?;
    let fdatasync_by_cpu = on_each_cpu(|| {
        overwrite(dir, (sizes.syncs / 2).max(1), Settle::Fdatasync).map(|(s, _)| s)
    })?;
    Ok(Floors {
        uds_trip,
        uds_trip_cross_cpu,
        fdatasync,
        write_out,
        fdatasync_append: append_sync(dir, sizes.syncs)?,
        atomic_replace: atomic_replace(dir, sizes.replaces)?,
        spawn: spawn(sizes.spawns)?,
        sign: sign(sizes.signatures),
        verify: verify(sizes.signatures)?,
        group_commit: sizes
            .writers
            .iter()
            .map(|&w| group_commit(dir, w, sizes.group_records).map(|rate| (w, rate)))
            .collect::<Result<_>>()?,
        device_cpu: DeviceCpu {
            fdatasync: fdatasync_cpu,
            write_out: write_out_cpu,
        },
        fdatasync_by_cpu,
    })
}

/// `measure` run with the calling thread pinned to each of the first [`BENCH_CPUS_PLACED_MAX`]
/// allowed CPUs in turn, by CPU; empty with fewer than two CPUs allowed or when the mask
/// cannot be read. A CPU the kernel refuses to pin to is left out. The calling thread gets
/// its mask back, also when a measurement fails.
fn on_each_cpu(mut measure: impl FnMut() -> Result<Summary>) -> Result<Vec<(usize, Summary)>> {
    let Some((mask, cpus)) = affinity::allowed() else {
        return Ok(Vec::new());
    };
    if cpus.len() < 2 {
        return Ok(Vec::new());
    }
    let mut by_cpu = Vec::new();
    for &cpu in cpus.iter().take(BENCH_CPUS_PLACED_MAX) {
        if !affinity::pin(cpu) {
            continue;
        }
        match measure() {
            Ok(s) => by_cpu.push((cpu, s)),
            Err(e) => {
                affinity::restore(&mask);
                return Err(e);
            }
        }
    }
    affinity::restore(&mask);
    Ok(by_cpu)
}

/// CPU time (user + system) the calling thread has used, in microseconds; NaN if the clock
/// cannot be read.
fn thread_cpu_us() -> f64 {
    let mut t = nix::libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a system call that writes one `timespec` we own; nothing else is passed.
    let rc = unsafe { nix::libc::clock_gettime(nix::libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    if rc == 0 {
        t.tv_sec as f64 * 1e6 + t.tv_nsec as f64 / 1e3
    } else {
        f64::NAN
    }
}

pub(super) fn io(what: &str, e: std::io::Error) -> Error {
    Error::new(Code::Io, format!("bench floor: {what}: {e}"))
}

pub(super) fn micros(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e6
}

/// Where a socket floor's echo thread runs, relative to the thread that measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Placement {
    /// Both on one CPU: the least a round trip costs, no wake-up crossing CPUs. Left to the
    /// scheduler, two threads land on one CPU in some runs and on two in others, and on this
    /// hypervisor the two medians differ by more than ten times (about 4 and 50–65 µs).
    SameCpu,
    /// On two CPUs: each direction wakes the other one.
    OtherCpu,
}

/// A Unix socket round trip with the echo thread placed as asked; None when the placement
/// cannot be had (one CPU allowed for `OtherCpu`). When this thread cannot be pinned at all
/// (an affinity call refused), the same-CPU trip is measured unplaced, as it once always was.
/// The calling thread gets its own CPU mask back before this returns.
pub(super) fn uds_trip(n: usize, warmup: usize, placement: Placement) -> Result<Option<Summary>> {
    let allowed = affinity::allowed();
    let cpus: &[usize] = allowed.as_ref().map_or(&[], |(_, cpus)| cpus);
    let echo_cpu = match placement {
        Placement::SameCpu => cpus.first(),
        Placement::OtherCpu => cpus.get(1),
    };
    let placed = match (cpus.first(), echo_cpu) {
        (Some(&me), Some(&echo)) if affinity::pin(me) => Some(echo),
        _ => None,
    };
    if placement == Placement::OtherCpu && placed.is_none() {
        return Ok(None);
    }
    let measured = echo_trips(n, warmup, placed);
    if let (Some(_), Some((mask, _))) = (placed, &allowed) {
        affinity::restore(mask);
    }
    measured.map(Some)
}

/// `n` timed round trips (after `warmup`) to an echo thread, pinned to `echo_cpu` if given.
fn echo_trips(n: usize, warmup: usize, echo_cpu: Option<usize>) -> Result<Summary> {
    let (mut a, mut b) = UnixStream::pair().map_err(|e| io("socketpair", e))?;
    let total = n + warmup;
    // The echo side ends on EOF when `a` is dropped early, so an error here never strands it.
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        if let Some(cpu) = echo_cpu {
            affinity::pin(cpu);
        }
        let mut buf = [0u8; TRIP_BYTES];
        for _ in 0..total {
            b.read_exact(&mut buf)?;
            b.write_all(&buf)?;
        }
        Ok(())
    });
    let mut buf = [7u8; TRIP_BYTES];
    let mut samples = Vec::with_capacity(n);
    for i in 0..total {
        let t = Instant::now();
        a.write_all(&buf).map_err(|e| io("socket write", e))?;
        a.read_exact(&mut buf).map_err(|e| io("socket read", e))?;
        if i >= warmup {
            samples.push(micros(t));
        }
    }
    drop(a);
    match echo.join() {
        Ok(Ok(())) => Ok(Summary::of(&samples)),
        Ok(Err(e)) => Err(io("echo thread", e)),
        Err(_) => Err(Error::new(
            Code::Io,
            "bench floor: the echo thread panicked",
        )),
    }
}

/// The calling thread's CPU affinity, through libc (nix's `sched` feature would rename every
/// generic instance and move the idle layout, for two calls).
mod affinity {
    use nix::libc;

    /// This thread's CPU mask and the CPUs in it, ascending; None when it cannot be read.
    pub fn allowed() -> Option<(libc::cpu_set_t, Vec<usize>)> {
        // SAFETY: `cpu_set_t` is plain bits; all zeros is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: the call writes at most `size_of::<cpu_set_t>()` bytes into `set`, which we own.
        let rc =
            unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
        if rc != 0 {
            return None;
        }
        let cpus = (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `CPU_ISSET` reads one bit of `set`, in bounds for every index < CPU_SETSIZE.
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect();
        Some((set, cpus))
    }

    /// Pins this thread to `cpu`; false when the kernel refuses.
    pub fn pin(cpu: usize) -> bool {
        // SAFETY: as in `allowed`: an all-zero `cpu_set_t` is empty, `CPU_SET` sets one bit in
        // bounds (callers pass a CPU read from the mask), and the call only reads `set`.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }

    /// Gives this thread `mask` back.
    pub fn restore(mask: &libc::cpu_set_t) {
        // SAFETY: the call only reads the mask we pass.
        unsafe {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), mask);
        }
    }

    /// The CPU this thread runs on now (None when unknown).
    #[cfg(test)]
    pub fn current() -> Option<usize> {
        // SAFETY: no arguments; returns the CPU number or -1.
        usize::try_from(unsafe { libc::sched_getcpu() }).ok()
    }
}

/// Creates `path` holding `bytes` zeros, written and fdatasynced: room that later writes fill
/// in place without changing the file's size or block map.
pub(super) fn zero_filled(path: &Path, bytes: usize) -> Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| io("create the preallocated file", e))?;
    let zeros = vec![0u8; 64 * 1024];
    let mut at = 0;
    while at < bytes {
        let n = (bytes - at).min(zeros.len());
        f.write_all_at(&zeros[..n], at as u64)
            .map_err(|e| io("preallocate", e))?;
        at += n;
    }
    f.sync_all()
        .map_err(|e| io("fsync the preallocated file", e))?;
    Ok(f)
}

/// How an in-place floor record is made to settle.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Settle {
    Fdatasync,
    WriteOut,
}

/// `n` records written in place and settled one by one: their wall-time summary, and the
/// calling thread's mean CPU per record over the same `n` (see [`DeviceCpu`]).
fn overwrite(dir: &Path, n: usize, settle: Settle) -> Result<(Summary, f64)> {
    let path = dir.join("floor-overwrite.log");
    let warmup = (n / 20).max(2);
    let f = zero_filled(&path, (n + warmup) * RECORD_BYTES);
    let f = match f {
        Ok(f) => f,
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
    };
    let record = [0x5au8; RECORD_BYTES];
    let mut samples = Vec::with_capacity(n);
    let mut cpu_from = f64::NAN;
    let mut run = || -> std::io::Result<()> {
        for i in 0..n + warmup {
            if i == warmup {
                cpu_from = thread_cpu_us();
            }
            let t = Instant::now();
            let at = (i * RECORD_BYTES) as u64;
            f.write_all_at(&record, at)?;
            match settle {
                Settle::Fdatasync => f.sync_data()?,
                Settle::WriteOut => crate::store::flush::write_out(&f, at, RECORD_BYTES as u64)?,
            }
            if i >= warmup {
                samples.push(micros(t));
            }
        }
        Ok(())
    };
    let outcome = run();
    let cpu = (thread_cpu_us() - cpu_from) / n.max(1) as f64;
    drop(f);
    let _ = std::fs::remove_file(&path);
    outcome.map_err(|e| match settle {
        Settle::Fdatasync => io("write in place + fdatasync", e),
        Settle::WriteOut => io("write in place + sync_file_range", e),
    })?;
    Ok((Summary::of(&samples), cpu))
}

fn append_sync(dir: &Path, n: usize) -> Result<Summary> {
    let path = dir.join("floor-append.log");
    let mut f = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&path)
        .map_err(|e| io("create the append file", e))?;
    let record = [0x5au8; RECORD_BYTES];
    let warmup = (n / 20).max(2);
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + warmup {
        let t = Instant::now();
        f.write_all(&record).map_err(|e| io("append", e))?;
        f.sync_data().map_err(|e| io("fdatasync", e))?;
        if i >= warmup {
            samples.push(micros(t));
        }
    }
    drop(f);
    let _ = std::fs::remove_file(&path);
    Ok(Summary::of(&samples))
}

/// Durable commits per second of one journal file with `writers` concurrent writers: each
/// writer hands a record to the committer and waits for its acknowledgement; the committer
/// takes every record queued, writes them in place into the preallocated file, fdatasyncs
/// once and acknowledges the batch. This is
/// what a store with group commit can do at best on this filesystem with that many writers
/// waiting, whatever else the path around it costs.
fn group_commit(dir: &Path, writers: usize, records: usize) -> Result<f64> {
    use crossbeam_channel::{Sender, bounded};
    let writers = writers.max(1);
    let per_writer = (records / writers).max(4);
    let path = dir.join(format!("floor-group-{writers}.log"));
    let f = match zero_filled(&path, writers * per_writer * RECORD_BYTES) {
        Ok(f) => f,
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
    };
    let (queue, jobs) = bounded::<Sender<()>>(writers);
    let record = [0x5au8; RECORD_BYTES];
    let start = Instant::now();
    let committed = std::thread::scope(|s| -> std::io::Result<usize> {
        for _ in 0..writers {
            let queue = queue.clone();
            s.spawn(move || {
                for _ in 0..per_writer {
                    // A committer that failed drops the queue and every acknowledgement it
                    // held: the writer stops.
                    let (ack, acked) = bounded::<()>(1);
                    if queue.send(ack).is_err() || acked.recv().is_err() {
                        return;
                    }
                }
            });
        }
        drop(queue);
        let jobs = jobs;
        let mut committed = 0;
        let mut at = 0u64;
        let mut batch = Vec::with_capacity(writers);
        let mut bytes = Vec::with_capacity(writers * RECORD_BYTES);
        while let Ok(first) = jobs.recv() {
            batch.push(first);
            batch.extend(jobs.try_iter().take(writers - 1));
            bytes.clear();
            for _ in &batch {
                bytes.extend_from_slice(&record);
            }
            f.write_all_at(&bytes, at)?;
            at += bytes.len() as u64;
            f.sync_data()?;
            committed += batch.len();
            for ack in batch.drain(..) {
                let _ = ack.send(());
            }
        }
        Ok(committed)
    });
    let seconds = start.elapsed().as_secs_f64();
    drop(f);
    let _ = std::fs::remove_file(&path);
    let committed = committed.map_err(|e| io("group commit", e))?;
    Ok(committed as f64 / seconds.max(1e-9))
}

fn atomic_replace(dir: &Path, n: usize) -> Result<Summary> {
    let path = dir.join("floor-replace.json");
    let record = [b'x'; RECORD_BYTES];
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        fsutil::atomic_write(&path, &record, fsutil::Durability::Durable)?;
        samples.push(micros(t));
    }
    let _ = std::fs::remove_file(&path);
    Ok(Summary::of(&samples))
}

fn spawn(n: usize) -> Result<Summary> {
    use std::process::{Command, Stdio};
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let status = Command::new("/bin/true")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| io("spawn /bin/true", e))?;
        samples.push(micros(t));
        if !status.success() {
            return Err(Error::new(Code::Io, "bench floor: /bin/true failed"));
        }
    }
    Ok(Summary::of(&samples))
}

fn sign(n: usize) -> Summary {
    let keys = identity::KeyPair::generate();
    let msg = [0x42u8; SIGNED_BYTES];
    let samples: Vec<f64> = (0..n)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(keys.sign(std::hint::black_box(&msg)));
            micros(t)
        })
        .collect();
    Summary::of(&samples)
}

fn verify(n: usize) -> Result<Summary> {
    let keys = identity::KeyPair::generate();
    let msg = [0x42u8; SIGNED_BYTES];
    let sig = keys.sign(&msg);
    let public = keys.public();
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let ok = identity::verify(&public, std::hint::black_box(&msg), &sig);
        samples.push(micros(t));
        if !ok {
            return Err(Error::new(
                Code::Io,
                "bench floor: a fresh signature did not verify",
            ));
        }
    }
    Ok(Summary::of(&samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_floors_measure_every_row() {
        let dir = crate::fsutil::TempDir::new("bench-floors").unwrap();
        let sizes = FloorSizes {
            trips: 5,
            trips_warmup: 2,
            syncs: 3,
            replaces: 2,
            spawns: 2,
            signatures: 3,
            group_records: 16,
            writers: vec![1, 4],
        };
        let f = measure(&dir, &sizes);
        let _ = std::fs::remove_dir_all(&dir);
        let f = f.unwrap();
        assert_eq!(f.uds_trip.n, 5);
        assert_eq!(
            (f.fdatasync.n, f.write_out.n, f.fdatasync_append.n),
            (3, 3, 3)
        );
        assert_eq!(f.verify.n, 3);
        let j = f.to_json();
        // With one CPU allowed there is no other CPU to place the echo thread on.
        let two_cpus = affinity::allowed().is_some_and(|(_, cpus)| cpus.len() >= 2);
        for (name, _, _) in FLOOR_ROWS {
            let measured = name != "udsTripCrossCpu" || two_cpus;
            assert_eq!(j[name]["medianUs"].is_number(), measured, "{name}: {j}");
            assert!(j[name]["durability"].is_string());
        }
        assert_eq!(f.uds_trip_cross_cpu.map(|s| s.n), two_cpus.then_some(5));
        assert!((mean_median(&f, &f, "spawn") - f.spawn.median).abs() < 1e-9);
        assert!(mean_median(&f, &f, "nope").is_nan());
        // Every record of every writer was committed, at some positive rate.
        assert!(f.group_commit(1).is_some_and(|r| r > 0.0));
        assert!(mean_ceiling(&f, &f, 4) > 0.0);
        assert!(mean_ceiling(&f, &f, 8).is_nan());
        assert_eq!(j["groupCommit"]["ceilings"][1]["writers"], 4);
        // The two in-place durable floors say what each record cost the writing thread's CPU:
        // something, and within a loose multiple of the slowest record's wall time (one
        // thread's CPU cannot outrun its wall clock; the margin absorbs clock granularity).
        for (name, wall) in [("fdatasync", f.fdatasync), ("writeOut", f.write_out)] {
            let cpu = j[name]["cpuUs"].as_f64().unwrap_or(f64::NAN);
            assert!(cpu > 0.0, "{name}: {j}");
            let slowest = wall.median.max(wall.p99);
            assert!(
                cpu <= slowest * 3.0 + 1_000.0,
                "{name}: {cpu} against {slowest}"
            );
        }
        assert!(j["udsTrip"].get("cpuUs").is_none());
        // The pinned fdatasync floor: one row per allowed CPU (up to the cap) with two CPUs or
        // more, each of half the syncs (at least one), none with one CPU.
        let cpus = affinity::allowed().map_or(Vec::new(), |(_, c)| c);
        let expected: Vec<usize> = if two_cpus {
            cpus.iter().copied().take(BENCH_CPUS_PLACED_MAX).collect()
        } else {
            Vec::new()
        };
        let got: Vec<usize> = f.fdatasync_by_cpu.iter().map(|(c, _)| *c).collect();
        assert_eq!(got, expected);
        assert!(f.fdatasync_by_cpu.iter().all(|(_, s)| s.n == 1));
        let rows = j["fdatasyncByCpu"]["cpus"].as_array().unwrap();
        assert_eq!(rows.len(), expected.len());
        assert!(
            rows.iter()
                .all(|r| r["medianUs"].is_number() && r["cpu"].is_number())
        );
        // The measuring thread has its own mask back.
        assert_eq!(affinity::allowed().map(|(_, c)| c), Some(cpus));
    }

    /// The socket floors place their threads as they say and leave the measuring thread
    /// with the CPU mask it had.
    #[test]
    fn socket_floors_place_the_echo_thread_and_restore_the_caller() {
        let Some((_, cpus)) = affinity::allowed() else {
            return;
        };
        for placement in [Placement::SameCpu, Placement::OtherCpu] {
            let s = uds_trip(3, 1, placement).unwrap();
            assert_eq!(
                s.map(|s| s.n),
                (placement == Placement::SameCpu || cpus.len() >= 2).then_some(3),
                "{placement:?}"
            );
            assert_eq!(affinity::allowed().map(|(_, c)| c), Some(cpus.clone()));
        }
        // A pinned thread runs where it was pinned.
        let last = *cpus.last().unwrap();
        let ran_on = std::thread::spawn(move || {
            assert!(affinity::pin(last));
            affinity::current()
        })
        .join()
        .unwrap();
        assert_eq!(ran_on, Some(last));
    }

    #[test]
    fn device_cpu_names_its_two_floors_and_averages() {
        let a = DeviceCpu {
            fdatasync: 60.0,
            write_out: 40.0,
        };
        let b = DeviceCpu {
            fdatasync: 40.0,
            write_out: 20.0,
        };
        let m = DeviceCpu::mean(&a, &b);
        assert_eq!((m.fdatasync, m.write_out), (50.0, 30.0));
        assert_eq!(a.of("fdatasync"), Some(60.0));
        assert_eq!(a.of("writeOut"), Some(40.0));
        assert_eq!(a.of("udsTrip"), None);
    }
}
