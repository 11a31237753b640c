//! The ask suites' shared harness: a namespace's `config.json` with an `"ask"` object, an
//! executable answerer script, a running `peer --json ask serve` (its ready line and port;
//! killed on drop), the asking side (ada's namespace, `peer` in it, a raw token ask), and the
//! processes an answerer left.

use super::{Ns, PEER};
use peerwire::ask::client::{Reply, post_json};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// How long one raw ask may take.
const ASK_WAIT: Duration = Duration::from_secs(20);

/// Writes `<home>/config.json` with the given `"ask"` object.
pub fn ask_config(home: &Path, ask: Value) {
    peerwire::fsutil::ensure_private_dir(home).unwrap();
    peerwire::fsutil::atomic_write(
        &home.join("config.json"),
        json!({ "ask": ask }).to_string().as_bytes(),
        peerwire::fsutil::Durability::Visible,
    )
    .unwrap();
}

/// An executable `#!/bin/sh` script `name` in the test root running `body`; its path.
pub fn script(ns: &Ns, name: &str, body: &str) -> String {
    let path = ns.root.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_string_lossy().into_owned()
}

/// Starts `cmd` (no stdin, stderr to `stderr`) and reads its first stdout line, the one a
/// server states its address in.
pub fn first_line(mut cmd: Command, stderr: Stdio) -> (Child, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

/// A running `peer ask serve`; killed on drop.
pub struct Server {
    pub child: Child,
    /// Its first stdout line, `{"ok": true, "port": …, …}`.
    pub ready: Value,
    pub port: u16,
}

impl Server {
    /// `peer --json ask serve` in `ns`, its stderr kept for a failed start's report.
    pub fn start(ns: &Ns) -> Server {
        Server::serve(ns, Stdio::piped())
    }

    /// `peer --json ask serve` in `ns` with its stderr going to `stderr`.
    pub fn serve(ns: &Ns, stderr: Stdio) -> Server {
        let mut cmd = ns.cmd(PEER);
        cmd.args(["--json", "ask", "serve"]);
        Server::spawn(cmd, stderr)
    }

    /// Starts a prepared server command and reads its ready line; a server that is not
    /// ready fails the test with that line (and its stderr, when piped).
    pub fn spawn(cmd: Command, stderr: Stdio) -> Server {
        let (mut child, line) = first_line(cmd, stderr);
        let ready: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        if ready["ok"] != true {
            let _ = child.kill();
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            let _ = child.wait();
            panic!("server not ready: {line} {err}");
        }
        let port = ready["port"].as_u64().unwrap() as u16;
        Server { child, ready, port }
    }

    /// The `ed25519:` card key its ready line states.
    pub fn sign(&self) -> String {
        self.ready["publicKey"].as_str().unwrap().to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client namespace `ada` (`<root>/ada-home`) that knows bob at `port`, with `friend`'s
/// settings added to bob's entry.
pub fn ada(root: &Path, port: u16, friend: Value) -> PathBuf {
    let home = root.join("ada-home");
    let mut bob = json!({"name": "bob", "host": "127.0.0.1", "port": port});
    for (k, v) in friend.as_object().unwrap() {
        bob[k] = v.clone();
    }
    ask_config(
        &home,
        json!({"callerName": "ada", "timeoutMs": 20000, "peers": [bob]}),
    );
    home
}

/// `peer ARGS` in the namespace at `home`.
pub fn peer_in(home: &Path, ns: &Ns, args: &[&str]) -> Output {
    ns.cmd(PEER)
        .arg("--home")
        .arg(home)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A `POST /ask` body from `caller`, with its token if any.
pub fn token_body(caller: &str, token: Option<&str>, question: &str) -> Value {
    let mut b = json!({"protocolVersion": 1, "caller": caller, "question": question});
    if let Some(t) = token {
        b["token"] = json!(t);
    }
    b
}

/// `POST path` with a JSON body to the server on loopback `port`.
pub fn post(port: u16, path: &str, body: &Value) -> Reply {
    post_json("127.0.0.1", port, path, body, ASK_WAIT).unwrap()
}

/// The pids of processes whose command line is exactly `argv`.
pub fn processes_with(argv: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want))
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect()
}

/// A TCP connection to the server from loopback address `127.0.0.<last>`.
pub fn connect_from(last: u8, port: u16) -> TcpStream {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, SockaddrIn, bind, connect, socket};
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrIn::new(127, 0, 0, last, 0),
    )
    .unwrap();
    connect(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrIn::new(127, 0, 0, 1, port),
    )
    .unwrap();
    TcpStream::from(fd)
}
