//! Owners hear an ask where they are, between real processes: `peer ask serve`'s stderr line
//! (and its `ask_pending` NDJSON event with `--json`), the asker's `waiting for …'s approval`
//! line, and, with `"listen": true`, the event on `peer host --json`'s stdout, the line of its
//! `--notify stderr`, and the `notifications/message` to the owner's own `peer mcp` session.

use crate::common::ask::{ask_config, script};
use crate::common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// Bob's ask settings: friend ada waits for approval; answers echo.
fn bob_ask(ns: &Ns, extra: Value) -> Value {
    let answerer = script(ns, "echo.sh", "cat >/dev/null; echo approved-answer");
    let mut ask = json!({"callerName": "bob", "listenPort": 0, "approvalTimeoutMs": 60000,
        "workspace": ns.work.to_string_lossy(), "answerCommand": [answerer],
            "answerReadPaths": [answerer],
        "peers": [{"name": "ada", "host": "127.0.0.1", "token": "tok-ada-7f3c9e1b5d2a8064c1e9", "mode": "ask"}]});
    for (k, v) in extra.as_object().unwrap() {
        ask[k] = v.clone();
    }
    ask
}

/// Ada's namespace, knowing bob at `port`.
fn ada(ns: &Ns, port: u16) -> PathBuf {
    let home = ns.root.join("ada");
    ask_config(
        &home,
        json!({"callerName": "ada", "timeoutMs": 30000, "peers": [
            {"name": "bob", "host": "127.0.0.1", "port": port, "token": "tok-ada-7f3c9e1b5d2a8064c1e9"}]}),
    );
    home
}

/// Lines of a child's stream, as they come.
fn lines_of(r: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines().map_while(|l| l.ok()) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    rx
}

/// The first line for which `f` holds (30 s at most).
fn first_line(rx: &Receiver<String>, mut f: impl FnMut(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let l = rx.recv_timeout(left).expect("the expected line came");
        if f(&l) {
            return l;
        }
    }
}

/// A child killed on drop.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Ada's `peer ask bob QUESTION`, running.
fn ask_from_ada(ns: &Ns, home: &Path, question: &str) -> Kill {
    Kill(
        ns.cmd(PEER)
            .arg("--home")
            .arg(home)
            .args(["ask", "bob", question])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// Waits for the asker and returns (success, stdout, stderr).
fn finish(mut k: Kill) -> (bool, String, String) {
    let (mut out, mut err) = (String::new(), String::new());
    k.0.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    k.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let ok = k.0.wait().unwrap().success();
    (ok, out, err)
}

/// The ask id in a decide command `… ask decide ID approve|decline`.
fn id_in(decide: &str) -> String {
    let words: Vec<&str> = decide.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "decide").unwrap();
    words[at + 1].to_string()
}

/// `peer ask serve` for `ns`, running: the server (killed on drop), its stderr lines and the
/// port of its ready line.
fn serve(ns: &Ns) -> (Kill, Receiver<String>, u16) {
    let mut bob = Kill(
        ns.cmd(PEER)
            .args(["ask", "serve"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let out = lines_of(bob.0.stdout.take().unwrap());
    let err = lines_of(bob.0.stderr.take().unwrap());
    let ready = first_line(&out, |l| l.contains("listening on"));
    let port: u16 = ready
        .split("listening on ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {ready:?}"));
    (bob, err, port)
}

#[test]
fn serve_tells_the_owner_on_stderr_and_the_asker_hears_it_waits() {
    let ns = Ns::new("notify-serve");
    ask_config(&ns.home, bob_ask(&ns, json!({})));
    let (_bob, err, port) = serve(&ns);
    let home = ada(&ns, port);
    let mut asker = ask_from_ada(
        &ns,
        &home,
        "where is the\x1b[31m db url? and more words follow",
    );
    let asked = lines_of(asker.0.stderr.take().unwrap());
    let line = first_line(&err, |l| l.contains("waits for your approval"));
    assert!(line.contains("from ada"), "{line}");
    assert!(line.contains("where is the"), "{line}");
    assert!(!line.contains('\x1b'), "{line:?}");
    let decide = line.split("decide: ").nth(1).unwrap();
    let home_arg = format!("--home {}", ns.home.display());
    assert!(
        decide.starts_with(&format!("peer {home_arg} ask decide ")),
        "{decide}"
    );
    let id = id_in(decide);
    assert!(line.contains(&format!("ask {} ", &id[..8])), "{line}");
    // The asker hears it waits (its sync ask gives no other word until the decision).
    first_line(&asked, |l| {
        l == "peer ask: waiting for bob's approval (up to 35 s)"
    });
    // The printed command, run as printed, decides.
    let st = ns.peer(&["ask", "decide", &id, "approve"]);
    assert!(st.status.success(), "{}", stderr(&st));
    let mut answer = String::new();
    asker
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut answer)
        .unwrap();
    assert!(asker.0.wait().unwrap().success());
    assert!(answer.contains("approved-answer"), "{answer}");
}

#[test]
fn serve_json_emits_an_ask_pending_event() {
    let ns = Ns::new("notify-json");
    ask_config(&ns.home, bob_ask(&ns, json!({})));
    let mut bob = Kill(
        ns.cmd(PEER)
            .args(["--json", "ask", "serve"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let out = lines_of(bob.0.stdout.take().unwrap());
    let ready: Value = serde_json::from_str(&first_line(&out, |_| true)).unwrap();
    let home = ada(&ns, ready["port"].as_u64().unwrap() as u16);
    let asker = ask_from_ada(&ns, &home, "json please");
    let ev: Value = serde_json::from_str(&first_line(&out, |l| l.contains("ask_pending"))).unwrap();
    assert_eq!(ev["event"], "ask_pending");
    assert_eq!(ev["caller"], "ada");
    assert_eq!(ev["preview"], "json please");
    let id = ev["askId"].as_str().unwrap();
    assert_eq!(ev["decide"].as_str().map(id_in).as_deref(), Some(id));
    assert!(ns.peer(&["ask", "decide", id, "decline"]).status.success());
    let (ok, _, _) = finish(asker);
    assert!(!ok, "a declined ask fails");
}

#[test]
fn host_json_and_notify_show_a_waiting_ask() {
    let ns = Ns::new("notify-host");
    ask_config(&ns.home, bob_ask(&ns, json!({"listen": true})));
    let mut host = ns.host_with(&["--notify", "stderr"], |_| {});
    let port = host.ready["ask"]["port"].as_u64().unwrap() as u16;
    let err = lines_of(host.child.as_mut().unwrap().stderr.take().unwrap());
    let home = ada(&ns, port);
    let asker = ask_from_ada(&ns, &home, "host, are you there?");
    let (tx, out) = channel();
    let lines = host.lines.take().unwrap();
    std::thread::spawn(move || {
        for l in lines.map_while(|l| l.ok()) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    let ev: Value = serde_json::from_str(&first_line(&out, |l| l.contains("ask_pending"))).unwrap();
    assert_eq!(ev["event"], "peer_update");
    assert_eq!(ev["caller"], "ada");
    assert!(
        ev.get("decide").is_none(),
        "the event names no decide command: {ev}"
    );
    let line = first_line(&err, |l| l.contains("waits for your approval"));
    assert!(line.starts_with("peer host: ask "), "{line}");
    let id = ev["askId"].as_str().unwrap();
    assert!(
        line.contains(&format!("ask decide {id} approve|decline")),
        "{line}"
    );
    assert!(ns.peer(&["ask", "decide", id, "approve"]).status.success());
    let (ok, answer, _) = finish(asker);
    assert!(ok && answer.contains("approved-answer"), "{answer}");
}

/// The ask server's address, from the owner-only run file it writes at start.
fn run_file_port(home: &Path) -> Option<u16> {
    let dir = std::fs::read_dir(home.join("ask/run")).ok()?;
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice::<Value>(&b).ok())
        .filter_map(|v| v["listen"].as_str()?.rsplit(':').next()?.parse().ok())
        .next()
}

#[test]
fn mcp_session_gets_a_notification_and_no_decide_tool() {
    let ns = Ns::new("notify-mcp");
    ask_config(&ns.home, bob_ask(&ns, json!({"listen": true})));
    let mut mcp = Kill(
        ns.cmd(PEER)
            .args(["mcp"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut stdin = mcp.0.stdin.take().unwrap();
    let out = lines_of(mcp.0.stdout.take().unwrap());
    let mut send = |v: Value| {
        stdin.write_all(format!("{v}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}),
    );
    first_line(&out, |l| l.contains("\"id\":1"));
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let tools: Value = serde_json::from_str(&first_line(&out, |l| l.contains("\"id\":2"))).unwrap();
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"ask_peer"), "{names:?}");
    assert!(
        names
            .iter()
            .all(|n| !n.contains("decide") && !n.contains("approve")),
        "no tool decides an ask: {names:?}"
    );
    assert!(eventually(10, || run_file_port(&ns.home).is_some()));
    let home = ada(&ns, run_file_port(&ns.home).unwrap());
    let asker = ask_from_ada(&ns, &home, "mcp, are you there?");
    let n: Value = serde_json::from_str(&first_line(&out, |l| l.contains("ask_pending"))).unwrap();
    assert_eq!(n["method"], "notifications/message");
    let data = &n["params"]["data"];
    assert_eq!(
        (data["event"].as_str(), data["caller"].as_str()),
        (Some("peer_update"), Some("ada"))
    );
    assert!(data.get("decide").is_none(), "{n}");
    let id = data["askId"].as_str().unwrap();
    assert!(ns.peer(&["ask", "decide", id, "approve"]).status.success());
    let (ok, answer, _) = finish(asker);
    assert!(ok && answer.contains("approved-answer"), "{answer}");
}

/// An ask that arrives over A2A waits for the owner like any other, so the owner hears it too.
#[test]
fn an_a2a_send_tells_the_owner_too() {
    let ns = Ns::new("notify-a2a");
    ask_config(&ns.home, bob_ask(&ns, json!({})));
    let (_bob, err, port) = serve(&ns);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": "m-1", "role": "ROLE_USER",
                    "parts": [{"text": "which port does the api use?"}]},
        "configuration": {"returnImmediately": true}}})
    .to_string();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "POST /a2a HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer tok-ada-7f3c9e1b5d2a8064c1e9\r\n\
         a2a-version: 1.0\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let line = first_line(&err, |l| l.contains("waits for your approval"));
    assert!(line.contains("from ada"), "{line}");
    assert!(line.contains("which port"), "{line}");
    let id = id_in(line.split("decide: ").nth(1).unwrap());
    let st = ns.peer(&["ask", "decide", &id, "decline"]);
    assert!(st.status.success(), "{}", stderr(&st));
}
