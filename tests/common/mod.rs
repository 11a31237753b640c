//! Shared harness for the integration tests: a private temporary namespace per test, the real
//! binaries started as separate processes, and bounded polling helpers.
#![allow(dead_code)]

pub mod ask;

pub use peerwire::fsutil::TempDir;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const PEER: &str = env!("CARGO_BIN_EXE_peer");
pub const PEER_DIR: &str = env!("CARGO_BIN_EXE_peer-dir");
pub const PEER_RES: &str = env!("CARGO_BIN_EXE_peer-res");

/// A temporary namespace and workspace, removed on drop.
pub struct Ns {
    pub root: PathBuf,
    pub home: PathBuf,
    pub work: PathBuf,
    /// Removes `root` and everything under it on drop.
    _dir: TempDir,
}

impl Ns {
    pub fn new(tag: &str) -> Ns {
        let dir = TempDir::new(tag).unwrap();
        let root = dir.path().to_path_buf();
        let home = root.join("ns");
        let work = root.join("work");
        std::fs::create_dir_all(&work).unwrap();
        Ns {
            root,
            home,
            work,
            _dir: dir,
        }
    }

    /// Writes `<home>/config.json` with `sessions.communication` = `comm`.
    pub fn config(&self, comm: Value) {
        peerwire::fsutil::ensure_private_dir(&self.home).unwrap();
        let v = serde_json::json!({"sessions": {"communication": comm}});
        peerwire::fsutil::atomic_write(
            &self.home.join("config.json"),
            v.to_string().as_bytes(),
            peerwire::fsutil::Durability::Durable,
        )
        .unwrap();
    }

    pub fn cmd(&self, bin: &str) -> Command {
        let mut c = Command::new(bin);
        c.arg("--home")
            .arg(&self.home)
            .current_dir(&self.work)
            .env_remove("PEER_HOME")
            .env_remove("PEER_CONTROL")
            .env_remove("PEER_RUN_ID")
            .env("PATH", path_with_peer());
        c
    }

    /// Runs `peer ARGS…` to completion.
    pub fn peer(&self, args: &[&str]) -> Output {
        self.cmd(PEER)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    pub fn peer_dir(&self, args: &[&str]) -> Output {
        self.cmd(PEER_DIR)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// `peer-dir --json ARGS` parsed into its objects.
    pub fn listing(&self, args: &[&str]) -> Vec<Value> {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let out = self.peer_dir(&a);
        assert!(
            out.status.success(),
            "peer-dir failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|v: &Value| v.get("cursor").is_none())
            .collect()
    }

    /// Starts `peer host --json ARGS` and waits for its ready line.
    pub fn host(&self, args: &[&str]) -> Host {
        self.host_with(args, |_| {})
    }

    /// Like [`Ns::host`], letting `prepare` adjust the command first (limits, signals).
    pub fn host_with(&self, args: &[&str], prepare: impl FnOnce(&mut Command)) -> Host {
        let mut cmd = self.cmd(PEER);
        cmd.arg("--json")
            .arg("host")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        prepare(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next();
        let ready: Value = match first {
            Some(Ok(l)) => serde_json::from_str(&l).unwrap_or(Value::Null),
            _ => Value::Null,
        };
        if ready.get("event").and_then(Value::as_str) != Some("ready") {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "host did not get ready: {ready} {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Host {
            child: Some(child),
            ready,
            lines: Some(lines),
        }
    }
}

/// `PATH` with the directory of the built `peer` first, so scripts run by hosts find it.
pub fn path_with_peer() -> std::ffi::OsString {
    let dir = Path::new(PEER).parent().unwrap().to_path_buf();
    let mut paths = vec![dir];
    if let Some(p) = std::env::var_os("PATH") {
        paths.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(paths).unwrap()
}

/// A running `peer host`; killed on drop if still running.
pub struct Host {
    pub child: Option<Child>,
    pub ready: Value,
    pub lines: Option<std::io::Lines<BufReader<std::process::ChildStdout>>>,
}

impl Host {
    pub fn field(&self, k: &str) -> String {
        self.ready
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    }
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), sig).unwrap();
    }
    /// SIGSTOP, then waits (bounded) until every thread of the process is stopped, so nothing
    /// sent afterwards can be processed before SIGCONT (kill(2) returns before the stop lands).
    pub fn pause(&self) {
        self.signal(nix::sys::signal::Signal::SIGSTOP);
        let tasks = format!("/proc/{}/task", self.pid());
        let stopped = || {
            std::fs::read_dir(&tasks).is_ok_and(|dir| {
                dir.flatten().all(|t| {
                    std::fs::read_to_string(t.path().join("stat")).is_ok_and(|stat| {
                        // The state follows the command name's closing parenthesis.
                        stat.rsplit_once(')')
                            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['T', 't']))
                    })
                })
            })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !stopped() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    /// A trusted local channel to this root, through its control file.
    pub fn client(&self) -> peerwire::transport::LocalClient {
        let cf = peerwire::runtime::control::read(Path::new(&self.field("control"))).unwrap();
        peerwire::transport::LocalClient::connect(
            &cf.endpoint,
            cf.secret_bytes().unwrap(),
            &peerwire::config::Limits::default(),
        )
        .unwrap()
    }
    /// For a failure message: how the process ended (killed first if it still ran, then
    /// `None`) and everything it wrote to stderr (a root's panic says why it died).
    pub fn end_for_report(&mut self) -> (Option<i32>, String) {
        let Some(mut child) = self.child.take() else {
            return (None, String::new());
        };
        let ended = child.try_wait().ok().flatten().map(shell_status);
        if ended.is_none() {
            let _ = child.kill();
        }
        let err = child
            .wait_with_output()
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .unwrap_or_default();
        (ended, err)
    }
    /// Waits (bounded) for the process to exit and returns its status code.
    pub fn wait(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return Some(shell_status(st));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("host did not exit in time");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A process's exit status as a shell reports it: its code, or 128 + the signal that ended it.
pub fn shell_status(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or(128 + st.signal().unwrap_or(0))
}

/// Every message `peer_messages` returns for `args` (a filter such as `{"from": …}`, or `{}`),
/// following the cursor page by page from the start of the inbox.
pub fn all_messages(c: &mut peerwire::transport::LocalClient, args: Value) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after = 0u64;
    loop {
        let mut a = args.clone();
        a["after"] = after.into();
        let page = c
            .call_raw(
                "local.tool",
                &serde_json::json!({"version": 1, "tool": "peer_messages", "args": a}),
                20_000,
            )
            .unwrap();
        out.extend(page["messages"].as_array().cloned().unwrap_or_default());
        let next = page["cursor"].as_u64().unwrap_or(after);
        if page["more"] != serde_json::json!(true) || next <= after {
            return out;
        }
        after = next;
    }
}

/// Polls `f` every 20 ms until it returns true or `secs` pass.
pub fn eventually(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// Runs `peer ARGS` acting for `host` (through its control file).
pub fn peer_as(ns: &Ns, host: &Host, args: &[&str]) -> Output {
    ns.cmd(PEER)
        .env("PEER_CONTROL", host.field("control"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The last stdout line of a `--json` command, parsed (Null when absent or not JSON).
pub fn json_of(o: &Output) -> Value {
    let text = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap_or(Value::Null)
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn exit_of(code: peerwire::error::Code) -> i32 {
    code.exit_status()
}

pub fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The files of `dir` (but those named in `skip`) with their bytes: what a read-only step
/// must leave as it was.
pub fn file_bytes(dir: &Path, skip: &[&str]) -> std::collections::BTreeMap<String, Vec<u8>> {
    files_in(dir)
        .into_iter()
        .filter(|n| !skip.contains(&n.as_str()))
        .map(|n| {
            let b = std::fs::read(dir.join(&n)).unwrap();
            (n, b)
        })
        .collect()
}

/// `peer --json recover` of an old instance: the read-only review of its store.
pub fn recover_review(ns: &Ns, instance: &str, session: &str) -> Output {
    ns.peer(&[
        "--json",
        "recover",
        "--instance",
        instance,
        "--session-id",
        session,
    ])
}

/// Where a journal's frames end: the end mark and the zero-filled room the store preallocates
/// after them are not part of them. Walks the frames by their length fields (a frame is
/// `len u32 | len_crc u32 | crc u32 | payload`; the end mark's length field is 0xFFFFFFFF).
pub fn journal_frames_end(journal: &[u8]) -> usize {
    *journal_frame_starts(journal).last().unwrap_or(&32)
}

/// Where each frame of a journal starts, and (last) where its frames end.
pub fn journal_frame_starts(journal: &[u8]) -> Vec<usize> {
    let mut o = 32;
    let mut v = vec![o];
    while let Some(head) = journal.get(o..o + 4) {
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        if len == 0 || len == u32::MAX || o + 12 + len as usize > journal.len() {
            break;
        }
        o += 12 + len as usize;
        v.push(o);
    }
    v
}

/// `journal` as a power loss can leave it in the middle of writing one more frame: that
/// frame's first sector landed over the end mark, the rest did not (a device writes a 512-byte
/// sector whole or not at all).
pub fn journal_with_torn_frame(journal: &[u8]) -> Vec<u8> {
    use peerwire::store::journal as j;
    let scan = j::scan(journal, 1 << 30).unwrap();
    let end = scan.valid_len as usize;
    let n = scan.batches.len() as u64 + 1;
    let records: Vec<peerwire::messaging::Record> = (0..200)
        .map(|cursor| peerwire::messaging::Record::PushDone { cursor })
        .collect();
    let mut frame = j::encode_frame(n, &records).unwrap();
    j::seal(&mut frame, end as u64, scan.generation, n);
    let sector = j::SECTOR_BYTES as usize;
    let b = (end / sector + 1) * sector;
    let mut out = journal.to_vec();
    out.resize(out.len().max(b), 0);
    out[end..b].copy_from_slice(&frame[..b - end]);
    out
}
