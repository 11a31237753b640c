//! The `peer host` processes a benchmark runs against: started in parallel from this same
//! binary, each with its stdout/stderr in a file of the benchmark directory, ready once its
//! JSON ready line appears, and stopped (SIGTERM, then SIGKILL past a bound) only by the pid
//! we spawned.

use crate::config::internal::{
    BENCH_HOST_STOP_MS, BENCH_POLL_MS, BENCH_READY_LINE_BYTES, BENCH_READY_MS,
    BENCH_STDERR_TAIL_CHARS,
};
use crate::error::{Code, Error, Result};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One running `peer host`.
pub struct Host {
    pub alias: String,
    pub pid: u32,
    pub peer_id: String,
    pub control: PathBuf,
    child: Option<Child>,
    out: PathBuf,
    err: PathBuf,
}

/// Where and how to start hosts.
pub struct HostPlan<'a> {
    pub exe: &'a Path,
    pub home: &'a Path,
    pub workspace: &'a Path,
    pub logs: &'a Path,
}

fn spawn(plan: &HostPlan, alias: &str) -> Result<Host> {
    let out = plan.logs.join(format!("{alias}.out"));
    let err = plan.logs.join(format!("{alias}.err"));
    let file = |p: &Path| {
        std::fs::File::create(p).map_err(|e| Error::io("cannot create a benchmark log file", p, &e))
    };
    let child = Command::new(plan.exe)
        .arg("--home")
        .arg(plan.home)
        .args(["--json", "host", "--alias", alias, "--workspace"])
        .arg(plan.workspace)
        .current_dir(plan.workspace)
        .env_remove(crate::runtime::control::ENV_CONTROL)
        .env_remove(crate::runtime::control::ENV_RUN)
        .stdin(Stdio::null())
        .stdout(file(&out)?)
        .stderr(file(&err)?)
        .spawn()
        .map_err(|e| Error::io("cannot start peer host", plan.exe, &e))?;
    Ok(Host {
        alias: alias.to_string(),
        pid: child.id(),
        peer_id: String::new(),
        control: PathBuf::new(),
        child: Some(child),
        out,
        err,
    })
}

/// Starts one host per alias in parallel and waits until all printed their ready line.
/// On failure every host already started is stopped.
pub fn start_all(plan: &HostPlan, aliases: &[String]) -> Result<Vec<Host>> {
    let mut hosts = Vec::with_capacity(aliases.len());
    for a in aliases {
        hosts.push(spawn(plan, a)?);
    }
    let deadline = Instant::now() + Duration::from_millis(BENCH_READY_MS);
    for h in hosts.iter_mut() {
        h.wait_ready(deadline)?;
    }
    Ok(hosts)
}

impl Host {
    fn wait_ready(&mut self, deadline: Instant) -> Result<()> {
        loop {
            match first_line(&self.out) {
                Ok(Some(line)) => return self.take_ready(&line),
                Ok(None) => {}
                Err(e) => return Err(self.failed(&e.message)),
            }
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                return Err(self.failed(&format!("exited with {status} before its ready line")));
            }
            if Instant::now() >= deadline {
                return Err(
                    self.failed(&format!("printed no ready line within {BENCH_READY_MS} ms"))
                );
            }
            std::thread::sleep(Duration::from_millis(BENCH_POLL_MS));
        }
    }

    fn take_ready(&mut self, line: &str) -> Result<()> {
        let v: Value = serde_json::from_str(line)
            .map_err(|_| self.failed("printed a ready line that is not JSON"))?;
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        match (s("event").as_deref(), s("peerId"), s("control")) {
            (Some("ready"), Some(peer), Some(control)) => {
                self.peer_id = peer;
                self.control = PathBuf::from(control);
                Ok(())
            }
            _ => Err(self.failed("printed a ready line without event, peerId and control")),
        }
    }

    fn failed(&self, what: &str) -> Error {
        let tail = std::fs::read_to_string(&self.err).unwrap_or_default();
        let start = tail.len().saturating_sub(BENCH_STDERR_TAIL_CHARS);
        let tail = tail.get(start..).unwrap_or("");
        Error::new(
            Code::Io,
            format!(
                "bench: peer host {} {what}; stderr: {}",
                self.alias,
                crate::sanitize::line(tail.trim(), BENCH_STDERR_TAIL_CHARS)
            ),
        )
    }

    /// Asks the host to stop and waits for it (SIGKILL past `BENCH_HOST_STOP_MS`); returns its exit
    /// code, or `None` when it had to be killed.
    pub fn stop(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        let _ = kill(Pid::from_raw(self.pid as i32), Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_millis(BENCH_HOST_STOP_MS);
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(status)) => return status.code(),
                Ok(None) => std::thread::sleep(Duration::from_millis(BENCH_POLL_MS)),
                Err(_) => break,
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // A benchmark that fails half-way must not leave hosts behind.
        self.stop();
    }
}

/// Sends SIGTERM to every host first, then waits for each: they shut down in parallel.
pub fn stop_all(hosts: &mut [Host]) -> Vec<(String, Option<i32>)> {
    for h in hosts.iter() {
        if h.child.is_some() {
            let _ = kill(Pid::from_raw(h.pid as i32), Signal::SIGTERM);
        }
    }
    hosts
        .iter_mut()
        .map(|h| (h.alias.clone(), h.stop()))
        .collect()
}

/// The first complete line of a file, if one is there yet; an error when it is longer than
/// `BENCH_READY_LINE_BYTES` (a host that prints that much before its ready line is broken).
fn first_line(path: &Path) -> Result<Option<String>> {
    use crate::protocol::frame::{LineSplitter, Overlong};
    use std::io::Read;
    let mut buf = Vec::new();
    let Ok(file) = std::fs::File::open(path) else {
        return Ok(None);
    };
    // One byte past the bound proves a line is too long without its newline.
    if file
        .take(BENCH_READY_LINE_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .is_err()
    {
        return Ok(None);
    }
    let mut lines = LineSplitter::new(BENCH_READY_LINE_BYTES, Overlong::Stop);
    lines.push(&buf);
    match lines.next_line() {
        None => Ok(None),
        Some(Ok(line)) => Ok(String::from_utf8(line).ok()),
        Some(Err(_)) => Err(Error::new(
            Code::Io,
            format!("its first output line is longer than {BENCH_READY_LINE_BYTES} bytes"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_line_only_when_complete() {
        let dir = crate::fsutil::TempDir::new("bench-hosts").unwrap();
        let p = dir.join("x.out");
        std::fs::write(&p, b"{\"event\":\"rea").unwrap();
        let partial = first_line(&p).unwrap();
        std::fs::write(&p, b"{\"event\":\"ready\"}\nmore\n").unwrap();
        let full = first_line(&p).unwrap();
        std::fs::write(&p, vec![b'x'; BENCH_READY_LINE_BYTES]).unwrap();
        let at_limit = first_line(&p).unwrap();
        std::fs::write(&p, vec![b'x'; BENCH_READY_LINE_BYTES + 1]).unwrap();
        let too_long = first_line(&p);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(partial, None);
        assert_eq!(full.as_deref(), Some("{\"event\":\"ready\"}"));
        // A line of exactly the bound may still get its newline; one byte more never can.
        assert_eq!(at_limit, None);
        assert!(too_long.is_err());
    }
}
