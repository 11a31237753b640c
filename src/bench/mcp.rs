//! The MCP path of `peer bench`: a real `peer mcp` process driven over its stdio with JSON-RPC
//! as an agent's client drives it (`initialize`, `notifications/initialized`, then `tools/call`
//! of `send_peer_message`), and MCP `ping` round trips through the same process, so a send can
//! be compared with the protocol's own cost measured in the same run.

use crate::config::internal::{
    BENCH_MCP_LINE_BYTES, BENCH_MCP_READ_BYTES, BENCH_MCP_START_MS, BENCH_MCP_STOP_MS,
    BENCH_SEND_TIMEOUT_MS,
};
use crate::error::{Code, Error, Result};
use crate::protocol::frame::{LineSplitter, Overlong};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// The MCP revision the benchmark speaks.
const PROTOCOL_VERSION: &str = "2025-11-25";

/// One running `peer mcp` and the JSON-RPC client side of its stdio. Answers are read in the
/// calling thread, blocking in poll(2) until the pipe is readable: an agent's client waits
/// like that, and a reader thread handing lines over a channel would add a wake-up to every
/// answer and spin (spin-then-yield) on this 2-core machine while the server works, so the
/// send and the ping it is compared with would both carry the client's own cost.
pub struct McpClient {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    split: LineSplitter,
    chunk: Vec<u8>,
    next_id: u64,
    err: std::path::PathBuf,
}

impl McpClient {
    /// Starts `peer mcp --alias ALIAS` in the namespace and completes the MCP handshake.
    pub fn start(
        exe: &Path,
        home: &Path,
        workspace: &Path,
        logs: &Path,
        alias: &str,
    ) -> Result<McpClient> {
        let err = logs.join(format!("{alias}.err"));
        let err_file = std::fs::File::create(&err)
            .map_err(|e| Error::io("cannot create a benchmark log file", &err, &e))?;
        let mut child = Command::new(exe)
            .arg("--home")
            .arg(home)
            .args(["mcp", "--alias", alias, "--workspace"])
            .arg(workspace)
            .current_dir(workspace)
            .env_remove(crate::runtime::control::ENV_CONTROL)
            .env_remove(crate::runtime::control::ENV_RUN)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err_file)
            .spawn()
            .map_err(|e| Error::io("cannot start peer mcp", exe, &e))?;
        let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
        let mut c = McpClient {
            child,
            stdin,
            stdout,
            split: LineSplitter::new(BENCH_MCP_LINE_BYTES, Overlong::Stop),
            chunk: vec![0; BENCH_MCP_READ_BYTES],
            next_id: 0,
            err,
        };
        c.call(
            "initialize",
            json!({"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": {"name": "peer-bench", "version": env!("CARGO_PKG_VERSION")}}),
            BENCH_MCP_START_MS,
        )?;
        c.write(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(c)
    }

    fn write(&mut self, msg: &Value) -> Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| Error::new(Code::Io, "bench: peer mcp's stdin is closed"))?;
        stdin
            .write_all(format!("{msg}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(|e| self.failed(&format!("stdin write failed: {e}")))
    }

    /// One request and its answer's `result`; notifications in between are skipped.
    fn call(&mut self, method: &str, params: Value, timeout_ms: u64) -> Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        loop {
            let line = self.next_line(deadline).map_err(|why| {
                self.failed(&format!(
                    "gave no answer to {method} within {timeout_ms} ms ({why})"
                ))
            })?;
            let Ok(msg) = serde_json::from_slice::<Value>(&line) else {
                return Err(self.failed("printed a line that is not JSON"));
            };
            if msg.get("id") != Some(&json!(id)) {
                continue;
            }
            if let Some(e) = msg.get("error") {
                return Err(self.failed(&format!(
                    "answered {method} with {}",
                    crate::sanitize::line(&e.to_string(), 200)
                )));
            }
            return Ok(msg.get("result").cloned().unwrap_or(Value::Null));
        }
    }

    /// The server's next stdout line, read before `deadline`; why not otherwise.
    fn next_line(&mut self, deadline: Instant) -> std::result::Result<Vec<u8>, &'static str> {
        loop {
            match self.split.next_line() {
                Some(Ok(line)) => return Ok(line),
                Some(Err(_)) => return Err("an answer line over its bound"),
                None => {}
            }
            let out = self.stdout.as_mut().ok_or("its stdout ended")?;
            let left = deadline.saturating_duration_since(Instant::now());
            let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            if ms == 0 {
                return Err("timed out");
            }
            let mut fds = [PollFd::new(out.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(0) => continue,
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(_) => return Err("poll failed"),
            }
            match out.read(&mut self.chunk) {
                Ok(0) => {
                    self.stdout = None;
                    return Err("its stdout ended");
                }
                Ok(n) => self.split.push(self.chunk.get(..n).unwrap_or_default()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Err("reading its stdout failed"),
            }
        }
    }

    /// One MCP `ping` round trip.
    pub fn ping(&mut self) -> Result<()> {
        self.call("ping", json!({}), BENCH_SEND_TIMEOUT_MS)
            .map(drop)
    }

    /// `send_peer_message` to `to`; the message id of its `accepted` receipt.
    pub fn send(&mut self, to: &str, content: &str) -> Result<String> {
        let r = self.call(
            "tools/call",
            json!({"name": "send_peer_message", "arguments": {"to": to, "content": content}}),
            BENCH_SEND_TIMEOUT_MS,
        )?;
        if r.get("isError") == Some(&json!(true)) {
            return Err(Error::new(
                Code::Io,
                format!(
                    "bench: send_peer_message through peer mcp failed: {}",
                    crate::sanitize::line(&r["structuredContent"].to_string(), 200)
                ),
            ));
        }
        super::adapter::accepted_id(&r["structuredContent"])
    }

    fn failed(&self, what: &str) -> Error {
        let tail = std::fs::read_to_string(&self.err).unwrap_or_default();
        let start = tail.len().saturating_sub(400);
        Error::new(
            Code::Io,
            format!(
                "bench: peer mcp {what}; stderr: {}",
                crate::sanitize::line(tail.get(start..).unwrap_or("").trim(), 400)
            ),
        )
    }

    /// Closes stdin (an MCP server's end) and waits for the exit; SIGKILL past `BENCH_MCP_STOP_MS`.
    /// The exit code, `None` when it had to be killed.
    pub fn stop(&mut self) -> Option<i32> {
        self.stdin = None;
        let deadline = Instant::now() + Duration::from_millis(BENCH_MCP_STOP_MS);
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(status)) => return status.code(),
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                Err(_) => break,
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        // A benchmark that fails half-way must not leave the server behind.
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}
