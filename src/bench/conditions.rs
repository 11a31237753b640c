//! What `peer bench` records about the machine around its figures: per-CPU idle share over a
//! short window from /proc/stat, the hypervisor's steal share over the whole run, the other processes using CPU meanwhile, the filesystem type
//! under the benchmark directory, and a process's RSS and thread count from /proc.

use crate::config::internal::{BENCH_IDLE_WINDOW_MS, BENCH_PROC_FILE_BYTES, BENCH_PROCESSES_MAX};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

/// The idle share every CPU should have for figures to be comparable, in percent.
pub const IDLE_PERCENT_MIN: f64 = 90.0;
/// Share of one CPU above which another process is listed, in percent.
const BUSY_PERCENT_MIN: f64 = 5.0;

/// Cumulative ticks of one `cpu…` line: idle (idle + iowait), steal (time a hypervisor ran
/// something else while this virtual CPU wanted to run) and total.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuTicks {
    pub name: String,
    pub idle: u64,
    pub steal: u64,
    pub total: u64,
}

/// Parses the `cpu` lines of /proc/stat; malformed lines are skipped.
pub fn parse_stat(text: &str) -> Vec<CpuTicks> {
    text.lines()
        .filter(|l| l.starts_with("cpu"))
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let name = it.next()?.to_string();
            let v: Vec<u64> = it.map(|x| x.parse().ok()).collect::<Option<_>>()?;
            // user nice system idle iowait irq softirq steal [guest guest_nice, already in user]
            let total = v.iter().take(8).sum();
            let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
            let steal = v.get(7).copied().unwrap_or(0);
            Some(CpuTicks {
                name,
                idle,
                steal,
                total,
            })
        })
        .collect()
}

/// Idle percentage of each CPU between two readings, by name (`cpu` is the whole machine).
pub fn idle_percent(before: &[CpuTicks], after: &[CpuTicks]) -> Vec<(String, f64)> {
    after
        .iter()
        .filter_map(|a| {
            let b = before.iter().find(|b| b.name == a.name)?;
            let total = a.total.checked_sub(b.total)?;
            let idle = a.idle.checked_sub(b.idle)?;
            (total > 0).then(|| (a.name.clone(), 100.0 * idle as f64 / total as f64))
        })
        .collect()
}

/// `utime + stime` of a /proc/PID/stat line (the command may hold spaces and parentheses).
pub fn parse_proc_ticks(line: &str) -> Option<(String, u64)> {
    let (comm, utime, stime) = parse_proc_times(line)?;
    Some((comm, utime + stime))
}

/// The command, `utime` and `stime` (clock ticks) of a /proc/PID/stat line.
fn parse_proc_times(line: &str) -> Option<(String, u64, u64)> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let comm = line.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = line.get(close + 1..)?.split_whitespace().collect();
    // Fields after the command start at `state` (field 3); utime is 14, stime 15.
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    Some((comm, utime, stime))
}

/// A process's (user, system) clock ticks so far.
fn process_times(pid: u32) -> Option<(u64, u64)> {
    let line = read_small(&Path::new("/proc").join(pid.to_string()).join("stat"))?;
    parse_proc_times(&line).map(|(_, u, s)| (u, s))
}

/// The kernel's part of `used_us`, CPU microseconds used while `ticks` (user, system) clock
/// ticks passed: `used_us` (per-thread, fine) split in the ticks' proportion, since only the
/// coarse ticks tell user from system time. NaN when no tick passed. Summed over several
/// processes, the ticks are a sample of where their time went; a process too brief for a tick
/// of its own still counts in `used_us`.
pub fn kernel_part_us(used_us: f64, ticks: (u64, u64)) -> f64 {
    let (user, system) = ticks;
    if user + system == 0 {
        return f64::NAN;
    }
    used_us * system as f64 / (user + system) as f64
}

/// Context switches of every live thread of `pid` so far, (voluntary, involuntary). A
/// voluntary one is a thread going to sleep, so one wake-up of it follows; an involuntary one
/// is a running thread preempted by another task, which says how busy the machine is, not how
/// often the process wakes.
pub fn context_switches(pid: u32) -> (u64, u64) {
    let dir = Path::new("/proc").join(pid.to_string()).join("task");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return (0, 0);
    };
    rd.flatten()
        .take(BENCH_PROCESSES_MAX)
        .filter_map(|e| read_small(&e.path().join("status")))
        .map(|text| {
            let count = |key: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(key))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(0)
            };
            (
                count("voluntary_ctxt_switches:"),
                count("nonvoluntary_ctxt_switches:"),
            )
        })
        .fold((0, 0), |(v, n), (a, b)| (v + a, n + b))
}

/// `ticks` clock ticks of CPU time, in microseconds.
fn ticks_us(ticks: u64) -> f64 {
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|h| *h > 0)
        .unwrap_or(100);
    ticks as f64 * 1e6 / hz as f64
}

/// Nanoseconds on CPU of each live thread of `pid` (`/proc/PID/task/TID/schedstat`): finer
/// than clock ticks; threads that exit between two readings are missed.
pub fn thread_cpu_ns(pid: u32) -> std::collections::HashMap<u32, u64> {
    let dir = Path::new("/proc").join(pid.to_string()).join("task");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Default::default();
    };
    rd.flatten()
        .take(BENCH_PROCESSES_MAX)
        .filter_map(|e| {
            let tid: u32 = e.file_name().to_str()?.parse().ok()?;
            let text = read_small(&e.path().join("schedstat"))?;
            let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
            Some((tid, ns))
        })
        .collect()
}

/// CPU microseconds `pid` used between two [`thread_cpu_ns`] readings; when the clock-tick
/// total (which counts exited threads too) says more by over two 10 ms ticks, that wins.
pub fn cpu_between(
    before: &std::collections::HashMap<u32, u64>,
    after: &std::collections::HashMap<u32, u64>,
    ticks_us: f64,
) -> f64 {
    let ns: u64 = after
        .iter()
        .map(|(tid, n)| n.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum();
    let us = ns as f64 / 1e3;
    if ticks_us > us + 20_000.0 {
        ticks_us
    } else {
        us
    }
}

/// A process's CPU time so far, per thread and in clock ticks, to subtract from later.
#[derive(Clone, Debug)]
pub struct CpuMark {
    pid: u32,
    threads: std::collections::HashMap<u32, u64>,
    /// (user, system) clock ticks: their sum backs up the per-thread times, their split tells
    /// user from kernel time.
    times: (u64, u64),
}

impl CpuMark {
    pub fn now(pid: u32) -> CpuMark {
        CpuMark {
            pid,
            threads: thread_cpu_ns(pid),
            times: process_times(pid).unwrap_or((0, 0)),
        }
    }

    /// [`used_us`](Self::used_us) and the (user, system) clock ticks that passed since this
    /// mark, to split it with [`kernel_part_us`] (none when the process is gone or restarted);
    /// one reading of the process's ticks serves both.
    pub fn used_and_ticks(&self) -> (f64, (u64, u64)) {
        let now = thread_cpu_ns(self.pid);
        let ticks = process_times(self.pid).map_or((0, 0), |(u, s)| {
            (
                u.saturating_sub(self.times.0),
                s.saturating_sub(self.times.1),
            )
        });
        let used = cpu_between(&self.threads, &now, ticks_us(ticks.0 + ticks.1));
        (used, ticks)
    }

    /// CPU microseconds (user + system) the process used since this mark ([`cpu_between`]).
    pub fn used_us(&self) -> f64 {
        self.used_and_ticks().0
    }
}

fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut s = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(BENCH_PROC_FILE_BYTES)
        .read_to_string(&mut s)
        .ok()?;
    Some(s)
}

fn process_ticks() -> Vec<(u32, String, u64)> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .take(BENCH_PROCESSES_MAX)
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let (comm, ticks) = parse_proc_ticks(&read_small(&e.path().join("stat"))?)?;
            Some((pid, comm, ticks))
        })
        .collect()
}

/// The machine's load over one short window.
#[derive(Clone, Debug)]
pub struct IdleCheck {
    pub machine_idle: f64,
    pub per_cpu: Vec<(String, f64)>,
    /// Other processes over `BUSY_PERCENT_MIN` of one CPU: (pid, command, percent).
    pub busy: Vec<(u32, String, f64)>,
}

impl IdleCheck {
    /// Whether every CPU was at least `IDLE_PERCENT_MIN` idle.
    pub fn ok(&self) -> bool {
        !self.per_cpu.is_empty() && self.per_cpu.iter().all(|(_, p)| *p >= IDLE_PERCENT_MIN)
    }

    pub fn to_json(&self) -> Value {
        json!({
            "idlePercent": super::stats::round2(self.machine_idle),
            "perCpuIdlePercent": self.per_cpu.iter().map(|(n, p)| json!({"cpu": n, "idlePercent": super::stats::round2(*p)})).collect::<Vec<_>>(),
            "allCpusIdleOk": self.ok(),
            "thresholdPercent": IDLE_PERCENT_MIN,
            "otherCpuUsers": self.busy.iter().map(|(pid, c, p)| json!({"pid": pid, "command": crate::sanitize::line(c, 40), "cpuPercent": super::stats::round2(*p)})).collect::<Vec<_>>(),
        })
    }
}

/// The `cpu` lines of /proc/stat now (empty when unreadable).
pub fn read_stat() -> Vec<CpuTicks> {
    read_small(Path::new("/proc/stat"))
        .map(|s| parse_stat(&s))
        .unwrap_or_default()
}

/// The machine-wide share of CPU time stolen by the hypervisor between two readings, in
/// percent; `None` without both readings. On a shared virtual machine this is what makes a
/// run's latencies and CPU figures incomparable although every CPU reads idle before and
/// after: the other guests' load lands in the middle of the run.
pub fn steal_percent(before: &[CpuTicks], after: &[CpuTicks]) -> Option<f64> {
    let find = |v: &[CpuTicks]| v.iter().find(|c| c.name == "cpu").cloned();
    let (a, b) = (find(before)?, find(after)?);
    let total = b.total.checked_sub(a.total).filter(|t| *t > 0)?;
    let steal = b.steal.checked_sub(a.steal)?;
    Some(100.0 * steal as f64 / total as f64)
}

/// Reads /proc/stat and every process's CPU time twice, `BENCH_IDLE_WINDOW_MS` apart.
pub fn idle_check() -> IdleCheck {
    let (s0, p0) = (read_stat(), process_ticks());
    std::thread::sleep(Duration::from_millis(BENCH_IDLE_WINDOW_MS));
    let (s1, p1) = (read_stat(), process_ticks());
    let all = idle_percent(&s0, &s1);
    let machine_idle = all
        .iter()
        .find(|(n, _)| n == "cpu")
        .map_or(f64::NAN, |(_, p)| *p);
    let per_cpu: Vec<(String, f64)> = all.into_iter().filter(|(n, _)| n != "cpu").collect();
    // Ticks of one CPU over the window: the machine's total ticks divided by its CPU count.
    let cpu_ticks = match (s0.first(), s1.first()) {
        (Some(a), Some(b)) if !per_cpu.is_empty() => {
            b.total.saturating_sub(a.total) as f64 / per_cpu.len() as f64
        }
        _ => f64::NAN,
    };
    let me = std::process::id();
    let mut busy: Vec<(u32, String, f64)> = p1
        .into_iter()
        .filter(|(pid, _, _)| *pid != me)
        .filter_map(|(pid, comm, t1)| {
            let (_, _, t0) = p0.iter().find(|(p, _, _)| *p == pid)?;
            let pct = 100.0 * t1.saturating_sub(*t0) as f64 / cpu_ticks;
            (pct >= BUSY_PERCENT_MIN).then_some((pid, comm, pct))
        })
        .collect();
    busy.sort_by(|a, b| b.2.total_cmp(&a.2));
    IdleCheck {
        machine_idle,
        per_cpu,
        busy,
    }
}

/// The filesystem type name under `dir` (statfs magic), `unknown` when not recognised.
pub fn filesystem_type(dir: &Path) -> String {
    let Ok(st) = nix::sys::statfs::statfs(dir) else {
        return "unknown".to_string();
    };
    match st.filesystem_type().0 as u64 {
        0xEF53 => "ext2/3/4",
        0x0102_1994 => "tmpfs",
        0x9123_683E => "btrfs",
        0x5846_5342 => "xfs",
        0x794C_7630 => "overlayfs",
        0x2FC1_2FC1 => "zfs",
        0x6969 => "nfs",
        0xF2F5_2010 => "f2fs",
        _ => "unknown",
    }
    .to_string()
}

/// Resident set (kB), peak resident set (kB) and threads of `pid`, from /proc/PID/status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcCounters {
    pub rss_kb: u64,
    /// The part of `rss_kb` that is the process's own memory (heap, stacks); the rest is
    /// code and libraries mapped from files, shared through the page cache.
    pub anon_kb: u64,
    pub hwm_kb: u64,
    pub threads: u64,
}

/// Parses the VmRSS, RssAnon, VmHWM and Threads lines of a /proc/PID/status text.
pub fn parse_status(text: &str) -> Option<ProcCounters> {
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some(ProcCounters {
        rss_kb: field("VmRSS:")?,
        anon_kb: field("RssAnon:").unwrap_or(0),
        hwm_kb: field("VmHWM:").unwrap_or(0),
        threads: field("Threads:")?,
    })
}

/// The counters of a live process, `None` once it is gone.
pub fn proc_counters(pid: u32) -> Option<ProcCounters> {
    parse_status(&read_small(
        &Path::new("/proc").join(pid.to_string()).join("status"),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_per_cpu_idle() {
        let a = parse_stat(
            "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 50 0 50 400 0 0 0 0 0 0\ncpu1 50 0 50 400 0 0 0 0 0 0\nintr 1 2\n",
        );
        let b = parse_stat(
            "cpu  110 0 110 980 0 0 0 0 0 0\ncpu0 60 0 50 490 0 0 0 0 0 0\ncpu1 50 0 60 490 0 0 0 0 0 0\n",
        );
        assert_eq!(a.len(), 3);
        let idle = idle_percent(&a, &b);
        assert_eq!(idle[0], ("cpu".to_string(), 90.0));
        assert_eq!(idle[1], ("cpu0".to_string(), 90.0));
        assert!(parse_stat("cpu x y\n").is_empty());
    }

    #[test]
    fn steal_is_the_share_of_all_ticks_between_two_readings() {
        let a = parse_stat("cpu  100 0 100 700 0 0 0 100 0 0\ncpu0 50 0 50 350 0 0 0 50 0 0\n");
        let b = parse_stat("cpu  150 0 150 840 0 0 0 160 0 0\ncpu0 75 0 75 420 0 0 0 80 0 0\n");
        assert_eq!(a[0].steal, 100);
        assert_eq!(steal_percent(&a, &b), Some(20.0));
        assert_eq!(steal_percent(&a, &a), None, "no ticks passed");
        assert_eq!(steal_percent(&[], &b), None);
        // A kernel that does not report steal (four or five columns) reads as none.
        let old = parse_stat("cpu  1 2 3 4\n");
        assert_eq!(old[0].steal, 0);
    }

    #[test]
    fn proc_stat_line_with_spaces_in_command() {
        let line = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 1 0 100 1 1";
        assert_eq!(parse_proc_ticks(line), Some(("a (b) c".to_string(), 12)));
        assert_eq!(parse_proc_ticks("42 (x) S 1"), None);
        assert_eq!(parse_proc_times(line), Some(("a (b) c".to_string(), 7, 5)));
    }

    /// The kernel's part of the CPU used is the system ticks' share of the ticks that passed.
    #[test]
    fn kernel_part_follows_the_system_ticks_share() {
        // 30 user + 10 system ticks: a quarter of 200 µs.
        assert_eq!(kernel_part_us(200.0, (30, 10)), 50.0);
        assert_eq!(kernel_part_us(200.0, (0, 10)), 200.0);
        assert_eq!(kernel_part_us(200.0, (30, 0)), 0.0);
        assert!(kernel_part_us(200.0, (0, 0)).is_nan());
    }

    #[test]
    fn status_counters() {
        let t =
            "Name:\tpeer\nVmHWM:\t  9000 kB\nVmRSS:\t  8000 kB\nRssAnon:\t  700 kB\nThreads:\t5\n";
        assert_eq!(
            parse_status(t),
            Some(ProcCounters {
                rss_kb: 8000,
                anon_kb: 700,
                hwm_kb: 9000,
                threads: 5
            })
        );
        assert_eq!(parse_status("Name: x\n"), None);
        assert!(proc_counters(std::process::id()).is_some_and(|c| c.threads >= 1));
    }
}
