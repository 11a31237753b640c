//! The ask suites' shared harness: a namespace's `config.json` with an `"ask"` object, an
//! executable answerer script, and a running `peer --json ask serve` (its ready line and
//! port; killed on drop).

use super::{Ns, PEER};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};

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
