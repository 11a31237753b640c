//! dsh-ask-peer's transport both ways, with Node's own standard library standing in for it
//! (tests/dsh_node.mjs: an `http` server answering chunked as dsh's does, a `fetch` client
//! posting as dsh's `postAsk` does; dsh-ask-peer's code itself is never copied here), against
//! real `peer ask` and `peer ask serve` processes. Skipped, saying so, when `node` is missing
//! (tests/run.sh installs it for CI). `dsh_modules` runs dsh-ask-peer's own modules when
//! `DSH_ASK_PEER_DIR` names a checkout.

use crate::common::ask::{Server, ask_config, peer_in, script};
use crate::common::*;
use peerwire::error::Code;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dsh_node.mjs");
const DAN_SEED: &str = "0707070707070707070707070707070707070707070707070707070707070707";

/// Whether `node` runs; prints why a test is skipped when it does not.
fn node_available(test: &str) -> bool {
    let ok = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("{test}: skipped: node is not installed (tests/run.sh installs nodejs)");
    }
    ok
}

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a process and reads its first stdout line as JSON.
fn start_reading_first_line(mut c: Command) -> (Proc, Value, BufReader<std::process::ChildStdout>) {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
    assert!(v.is_object(), "no start line: {line:?}");
    (Proc(child), v, out)
}

/// The Node stand-in for a dsh-ask-peer server named `name`: its port and `ed25519:` sign.
fn node_server(name: &str) -> (Proc, u16, String) {
    let mut c = Command::new("node");
    c.args([SCRIPT, "serve", name, DAN_SEED]);
    let (p, v, _) = start_reading_first_line(c);
    let port = v["port"].as_u64().unwrap() as u16;
    (p, port, v["sign"].as_str().unwrap().to_string())
}

/// One request by the Node `fetch` client: `{status, body, error}`.
fn node_fetch(spec: Value) -> Value {
    let out = Command::new("node")
        .args([SCRIPT, "fetch", &spec.to_string()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "node fetch printed nothing parseable: {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Our client (`peer ask`) against the Node `http` server answering chunked.
#[test]
fn our_client_reads_a_node_http_server_answering_chunked() {
    if !node_available("our_client_reads_a_node_http_server_answering_chunked") {
        return;
    }
    let ns = Ns::new("dsh-node-client");
    let (_node, port, sign) = node_server("dan");
    let home: PathBuf = ns.root.join("ada");
    ask_config(
        &home,
        json!({"callerName": "ada", "timeoutMs": 20000, "peers": [
            {"name": "dan", "host": "127.0.0.1", "port": port, "token": "tok-dan-3e5a7c9b1d0f2468ace1",
             "publicKey": sign, "tls": false},
        ]}),
    );
    let run = |args: &[&str]| peer_in(&home, &ns, args);
    // A synchronous ask: Node frames the answer in chunks.
    let out = run(&["--json", "ask", "dan", "where is the db?"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json_of(&out);
    assert!(
        v["answer"]
            .as_str()
            .unwrap()
            .starts_with("node answers: where is the db?")
    );
    // Async, then status: dsh has no POST /ask/status (404), so the GET form answers.
    let out = run(&["--json", "ask", "dan", "later?", "--async"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = json_of(&out)["askId"].as_str().unwrap().to_string();
    let out = run(&["--json", "ask", "status", "dan", &id]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json_of(&out);
    assert_eq!(v["status"], "answered", "{v}");
    assert!(
        v["answer"]
            .as_str()
            .unwrap()
            .starts_with("node answers: later?")
    );
    // Every dsh error shape keeps its meaning.
    for (question, code) in [
        ("declined", Code::AskDeclined),
        ("approval_unavailable", Code::ApprovalUnavailable),
        ("forbidden", Code::AuthFailed),
        ("bad_request", Code::InvalidRequest),
        ("ask_failed", Code::AskFailed),
        ("internal", Code::Io),
        ("not_found", Code::NotFound),
    ] {
        let out = run(&["--json", "ask", "dan", question]);
        assert_eq!(
            out.status.code(),
            Some(exit_of(code)),
            "{question}: {}",
            stderr(&out)
        );
        let msg = json_of(&out)["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(msg.contains(question), "{question}: {msg}");
    }
    // The advert (signed by Node with the pinned key) makes dan reachable.
    let out = run(&["--json", "ask", "peers", "--refresh"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("\"reachable\":true"), "{text}");
    assert!(text.contains("\"signed\":true"), "{text}");
    // A recommendation: dan answers with erin's card, which verifies.
    let out = run(&["--json", "ask", "recommend", "dan", "--topic", "postgres"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("erin"));
}

/// A `peer ask serve` for the Node client: bob, with friend ada (token, auto), kid (a dsh key
/// with `acceptDshSignatures` and a token), lee (a dsh key without it) and dan (the Node
/// server, for recommendations).
fn bob_for_node(ns: &Ns, dan_port: u16, dan_sign: &str) -> (Server, u16) {
    let answerer = script(
        ns,
        "echo.sh",
        "input=$(cat); printf 'bob answers: %s' \"$input\"",
    );
    let kid = peerwire::ask::keys::AskKey::from_seed(&[7u8; 32]).sign_string();
    ask_config(
        &ns.home,
        json!({"callerName": "bob", "listenPort": 0, "workspace": ns.work.to_string_lossy(),
            "answerCommand": [answerer],
            "answerReadPaths": [answerer], "peers": [
            {"name": "ada", "host": "127.0.0.1", "token": "tok-ada-7f3c9e1b5d2a8064c1e9", "mode": "auto"},
            {"name": "kid", "host": "127.0.0.1", "token": "tok-kid-8b6d4f2a0c1e3579bdf2", "publicKey": kid,
             "acceptDshSignatures": true, "mode": "auto"},
            {"name": "lee", "host": "127.0.0.1", "token": "tok-lee-5c7e9a1b3d0f2468ace3", "publicKey": kid,
             "mode": "auto"},
            {"name": "dan", "host": "127.0.0.1", "port": dan_port, "publicKey": dan_sign,
             "tls": false, "token": "tok-dan-3e5a7c9b1d0f2468ace1"},
        ]}),
    );
    let bob = Server::start(ns);
    let port = bob.port;
    (bob, port)
}

/// Whether a reply carries bob's answer to `question` (the answerer echoes its input).
fn answered(body: &Value, question: &str) -> bool {
    body["answer"].as_str().is_some_and(|a| {
        a.starts_with("bob answers: ") && a.contains(&format!("\"question\":\"{question}\""))
    })
}

fn ask_body(caller: &str, token: &str, question: &str) -> Value {
    json!({"protocolVersion": 1, "caller": caller, "token": token, "question": question})
}

/// Node's `fetch` (as dsh's `postAsk`) against `peer ask serve`.
#[test]
fn node_fetch_client_speaks_to_peer_ask_serve() {
    if !node_available("node_fetch_client_speaks_to_peer_ask_serve") {
        return;
    }
    let ns = Ns::new("dsh-node-server");
    let (_dan, dan_port, dan_sign) = node_server("dan");
    let (_bob, port) = bob_for_node(&ns, dan_port, &dan_sign);
    let url = |p: &str| format!("http://127.0.0.1:{port}{p}");
    let r = node_fetch(
        json!({"url": url("/ask"), "json": ask_body("ada", "tok-ada-7f3c9e1b5d2a8064c1e9", "sync?")}),
    );
    assert_eq!(r["status"], 200, "{r}");
    assert!(answered(&r["body"], "sync?"), "{r}");
    // Async, then dsh's GET /ask/status from the asking address: the answer is there.
    let mut a = ask_body("ada", "tok-ada-7f3c9e1b5d2a8064c1e9", "async?");
    a["async"] = json!(true);
    let r = node_fetch(json!({"url": url("/ask"), "json": a}));
    assert_eq!(r["status"], 202, "{r}");
    let id = r["body"]["askId"].as_str().unwrap().to_string();
    let mut last = Value::Null;
    assert!(
        eventually(15, || {
            last = node_fetch(json!({"url": url(&format!("/ask/status?askId={id}"))}));
            last["body"]["status"] == "answered"
        }),
        "{last}"
    );
    assert!(answered(&last["body"], "async?"), "{last}");
    // Advert and card.
    let r = node_fetch(json!({"url": url("/advertise")}));
    assert_eq!(
        (r["status"].clone(), r["body"]["name"].clone()),
        (json!(200), json!("bob"))
    );
    let r = node_fetch(json!({"url": url("/sign/card")}));
    assert!(
        r["body"]["card"]
            .as_str()
            .unwrap()
            .starts_with("dsh-ask-peer-card:"),
        "{r}"
    );
    // A recommendation: bob reads dan's (chunked) advert and card and hands dan's card over.
    let rec = json!({"protocolVersion": 1, "caller": "ada", "token": "tok-ada-7f3c9e1b5d2a8064c1e9",
        "topic": "postgres"});
    let r = node_fetch(json!({"url": url("/recommend"), "json": rec}));
    assert_eq!(r["status"], 200, "{r}");
    assert_eq!(r["body"]["from"], "dan", "{r}");
    // Every refusal arrives as a status with dsh's error body.
    for (body, status, code) in [
        (ask_body("eve", "x", "q"), 403, "forbidden"),
        (ask_body("ada", "wrong", "q"), 403, "forbidden"),
        (
            json!({"protocolVersion": 2, "caller": "ada", "question": "q"}),
            400,
            "bad_request",
        ),
    ] {
        let r = node_fetch(json!({"url": url("/ask"), "json": body}));
        assert_eq!(
            (r["status"].clone(), r["body"]["error"]["code"].clone()),
            (json!(status), json!(code)),
            "{r}"
        );
    }
    let r = node_fetch(json!({"url": url("/nowhere")}));
    assert_eq!(r["body"]["error"]["code"], "not_found", "{r}");
    let r = node_fetch(json!({"url": url("/ask/status?askId=nope")}));
    assert_eq!(r["status"], 404, "{r}");
    // An oversized body: fetch sees the 413, not a reset.
    let r = node_fetch(json!({"url": url("/ask"), "padBytes": 6 << 20}));
    assert_eq!(r["status"], 413, "{r}");
    assert_eq!(r["body"]["error"]["code"], "payload_too_large", "{r}");
}

/// dsh's replayable signatures: refused by default, accepted with `acceptDshSignatures` and
/// only together with the friend's token.
#[test]
fn dsh_signatures_need_the_opt_in_and_the_token() {
    if !node_available("dsh_signatures_need_the_opt_in_and_the_token") {
        return;
    }
    let ns = Ns::new("dsh-node-sig");
    let (_dan, dan_port, dan_sign) = node_server("dan");
    let (_bob, port) = bob_for_node(&ns, dan_port, &dan_sign);
    let seed = "07".repeat(32);
    let ask = |caller: &str, token: Option<&str>| {
        let mut b = json!({"protocolVersion": 1, "caller": caller, "question": "signed?"});
        if let Some(t) = token {
            b["token"] = json!(t);
        }
        node_fetch(
            json!({"url": format!("http://127.0.0.1:{port}/ask"), "json": b,
            "signSeedHex": seed}),
        )
    };
    let r = ask("kid", Some("tok-kid-8b6d4f2a0c1e3579bdf2"));
    assert_eq!(r["status"], 200, "{r}");
    assert!(answered(&r["body"], "signed?"), "{r}");
    let r = ask("kid", None);
    assert_eq!(
        (r["status"].clone(), r["body"]["error"]["message"].clone()),
        (json!(403), json!("invalid token")),
        "{r}"
    );
    // A dsh node forwarding a recommendation signs it the same way: served, not refused.
    let rec = json!({"protocolVersion": 1, "caller": "kid", "token": "tok-kid-8b6d4f2a0c1e3579bdf2", "topic": "postgres"});
    let r = node_fetch(
        json!({"url": format!("http://127.0.0.1:{port}/recommend"), "json": rec,
        "signSeedHex": seed}),
    );
    assert_eq!(
        (r["status"].clone(), r["body"]["from"].clone()),
        (json!(200), json!("dan")),
        "{r}"
    );
    let r = ask("lee", Some("tok-lee-5c7e9a1b3d0f2468ace3"));
    assert_eq!(r["status"], 403, "{r}");
    assert!(
        r["body"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("timestamp"),
        "{r}"
    );
}

/// dsh-ask-peer's own modules against ours, when a checkout is given: tests/dsh_modules.mjs
/// loads its `peer-client` and `card` modules (the layout of the reference, commit `ce33976`)
/// and has them ask `peer ask serve` and verify its card. Skipped, saying so, without
/// `DSH_ASK_PEER_DIR`.
#[test]
fn dsh_modules() {
    let Some(dir) = std::env::var_os("DSH_ASK_PEER_DIR") else {
        eprintln!("dsh_modules: skipped: DSH_ASK_PEER_DIR not set");
        return;
    };
    if !node_available("dsh_modules") {
        return;
    }
    let ns = Ns::new("dsh-modules");
    let (_dan, dan_port, dan_sign) = node_server("dan");
    let (_bob, port) = bob_for_node(&ns, dan_port, &dan_sign);
    let driver = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dsh_modules.mjs");
    let out = Command::new("node")
        .arg(driver)
        .env("DSH_ASK_PEER_DIR", &dir)
        .env("DSH_PEER_URL", format!("http://127.0.0.1:{port}"))
        .env("DSH_CALLER", "ada")
        .env("DSH_TOKEN", "tok-ada-7f3c9e1b5d2a8064c1e9")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dsh-ask-peer's modules against ours: {} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A server answering with hostile chunked bodies: `peer ask` stops within the decoder's
/// bounds and says why, instead of reading without end (no Node needed).
#[test]
fn hostile_chunked_answers_are_cut_within_bounds() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("more than 65536 chunks", b"1\r\na\r\n".repeat(70_000)),
        ("chunk-size line longer", {
            let mut b = b"5;".to_vec();
            b.resize(4096, b'x');
            b
        }),
        ("exceeds", b"ffffffff\r\n".to_vec()),
        ("malformed chunk-size", b"zz\r\n".to_vec()),
        ("trailers exceed", {
            let mut b = b"0\r\n".to_vec();
            b.extend(b"x-t: y\r\n".repeat(4000));
            b
        }),
    ];
    let n = bodies.len();
    let server = std::thread::spawn({
        let bodies: Vec<Vec<u8>> = bodies.iter().map(|(_, b)| b.clone()).collect();
        move || {
            for body in bodies {
                let (mut s, _) = listener.accept().unwrap();
                let mut head = [0u8; 4096];
                let _ = s.read(&mut head);
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
                );
                let _ = s.write_all(&body);
                let _ = s.flush();
            }
        }
    });
    let ns = Ns::new("dsh-hostile");
    let home = ns.root.join("ada");
    ask_config(
        &home,
        json!({"callerName": "ada", "timeoutMs": 5000, "peers": [
            {"name": "evil", "host": "127.0.0.1", "port": port, "token": "tok-evil-1a2b3c4d5e6f7a8b9c0d", "tls": false}]}),
    );
    for (want, _) in &bodies[..n] {
        let out = peer_in(&home, &ns, &["--json", "ask", "evil", "hi"]);
        assert!(!out.status.success());
        let msg = json_of(&out)["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(msg.contains(want), "want {want:?}: {msg}");
    }
    server.join().unwrap();
}
