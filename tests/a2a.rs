//! A2A on the ask port, driven by the official SDK clients as real processes: the `a2a-sdk`
//! 1.3.0 Python client (tests/a2a_client.py, from the venv tests/run.sh makes) and the
//! `@a2a-js/sdk` 1.3.0 client (tests/a2a_js/client.mjs, installed by `npm ci` there) against a
//! real `peer ask serve`. Card and its JWS, blocking, streaming, polled, subscribed and canceled
//! asks, an owner's decline as `rejected`, unknown callers refused. Latency is printed beside a
//! plain HTTP ask, never asserted. And the other direction: `peer ask` to an A2A agent built
//! from the `a2a-sdk` server classes (tests/a2a_agent.py) and to our own A2A endpoint.

use crate::common;

use common::ask::{ask_config, script};
use common::*;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);
const ECHO: &str = "input=$(cat); printf 'answer: %s' \"$input\"";

fn python() -> String {
    std::env::var("PEER_TEST_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| {
            let local = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python");
            assert!(
                Path::new(local).exists(),
                "the SDK venv is missing: run 'bash tests/run.sh'"
            );
            local.to_string()
        })
}

/// The JS client's directory when node and its `npm ci` install are there.
fn js_dir() -> Option<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/a2a_js");
    let node = Command::new("node").arg("--version").output().is_ok();
    (node && dir.join("node_modules/@a2a-js/sdk").exists()).then_some(dir)
}

/// bob's running server and its card key (hex and `ed25519:` forms).
struct Server {
    port: u16,
    key_hex: String,
    /// The card key's `ed25519:` form.
    sign: String,
    _serve: common::ask::Server,
}

/// dee's card key: dee has no token and proves this key over mutual TLS.
fn dee_key() -> peerwire::ask::keys::AskKey {
    peerwire::ask::keys::AskKey::from_seed(&[5u8; 32])
}

/// `bob`, serving with ada (token, auto), cy (token, owner approval) and dee (pinned key,
/// auto) as friends.
fn bob(ns: &Ns) -> Server {
    let answerer = script(ns, "echo.sh", ECHO);
    let ask = json!({
        "callerName": "bob", "listenPort": 0, "friendAsksPerMinute": 10000,
        "workspace": ns.work.to_string_lossy(),
        "answerCommand": [answerer],
        "answerReadPaths": [answerer],
        "peers": [
            {"name": "ada", "host": "127.0.0.1", "token": "tok-ada-7f3c9e1b5d2a8064c1e9", "mode": "auto"},
            {"name": "cy", "host": "127.0.0.1", "token": "tok-cy-4b8e2d6f0a1c3e5b7d9f", "mode": "ask"},
            {"name": "dee", "host": "127.0.0.1", "publicKey": dee_key().sign_string(), "mode": "auto"},
        ],
    });
    ask_config(&ns.home, ask);
    let serve = common::ask::Server::serve(ns, Stdio::null());
    let sign = serve.sign();
    let key = peerwire::ask::canon::parse_sign(&sign).unwrap();
    Server {
        port: serve.port,
        key_hex: peerwire::identity::hex(&key),
        sign,
        _serve: serve,
    }
}

/// Runs one scenario of a client script; its JSON line.
fn run(client: &mut Command) -> Value {
    let out = client.stdin(Stdio::null()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|_| {
        panic!(
            "client printed no JSON: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn py(srv: &Server, token: &str, scenario: &str, arg: &str) -> Command {
    let mut c = Command::new(python());
    c.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/a2a_client.py"))
        .arg(format!("http://127.0.0.1:{}", srv.port))
        .args([token, scenario, arg]);
    c
}

fn js(dir: &Path, srv: &Server, token: &str, scenario: &str, arg: &str) -> Command {
    let mut c = Command::new("node");
    c.current_dir(dir)
        .arg("client.mjs")
        .arg(format!("http://127.0.0.1:{}", srv.port))
        .args([token, scenario, arg]);
    c
}

/// The checks both SDK clients must pass; `client` makes the command for a scenario.
fn check_client(ns: &Ns, srv: &Server, client: &dyn Fn(&str, &str, &str) -> Command) {
    let card = run(&mut client("", "card", &srv.key_hex));
    assert_eq!(card["verified"], true, "{card}");
    let c = &card["card"];
    assert_eq!(c["capabilities"]["streaming"], true);
    assert_eq!(c["supportedInterfaces"][0]["protocolVersion"], "1.0");
    let skills: Vec<&str> = c["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(skills, ["ask-workspace", "recommend-peer"]);
    // Another key does not verify the card.
    let other = run(&mut client("", "card", &"11".repeat(32)));
    assert_ne!(other["verified"], true, "{other}");

    let v = run(&mut client(
        "tok-ada-7f3c9e1b5d2a8064c1e9",
        "ask",
        "where is the db url?",
    ));
    assert_eq!(v["first"]["state"], "TASK_STATE_COMPLETED", "{v}");
    let answer = v["first"]["answer"].as_str().unwrap();
    assert!(answer.contains("where is the db url?") && answer.contains("\"caller\":\"ada\""));

    let v = run(&mut client(
        "tok-ada-7f3c9e1b5d2a8064c1e9",
        "stream",
        "streamed?",
    ));
    let events = v["events"].as_array().expect("events");
    assert_eq!(
        events[0]["kind"], "task",
        "the stream starts with the task: {v}"
    );
    let last = events.last().unwrap();
    assert_eq!(last["kind"], "status_update", "{v}");
    assert_eq!(last["state"], "TASK_STATE_COMPLETED", "{v}");
    assert!(
        events.iter().any(|e| e["kind"] == "artifact_update"
            && e["answer"].as_str().unwrap().contains("streamed?")),
        "{v}"
    );

    let v = run(&mut client(
        "tok-ada-7f3c9e1b5d2a8064c1e9",
        "poll",
        "polled?",
    ));
    assert!(
        ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"]
            .contains(&v["first"]["state"].as_str().unwrap()),
        "returnImmediately answers before the answer: {v}"
    );
    assert_eq!(v["final"]["state"], "TASK_STATE_COMPLETED", "{v}");
    assert!(v["final"]["answer"].as_str().unwrap().contains("polled?"));

    // cy's asks wait for the owner, so a cancel lands while the task is submitted.
    let v = run(&mut client(
        "tok-cy-4b8e2d6f0a1c3e5b7d9f",
        "cancel",
        "cancel me",
    ));
    assert_eq!(v["first"]["state"], "TASK_STATE_SUBMITTED", "{v}");
    assert_eq!(v["final"]["state"], "TASK_STATE_CANCELED", "{v}");
    let pending = json_of(&ns.peer(&["--json", "ask", "pending"]));
    assert_eq!(
        pending["pending"],
        json!([]),
        "a canceled ask leaves the owner's list"
    );

    for token in ["", "tok-eve"] {
        let v = run(&mut client(token, "ask", "who are you?"));
        assert!(v.get("error").is_some(), "unknown caller answered: {v}");
    }
}

#[test]
fn python_sdk_client_asks_streams_polls_subscribes_and_cancels() {
    let ns = Ns::new("a2a-py");
    let srv = bob(&ns);
    check_client(&ns, &srv, &|t, s, a| py(&srv, t, s, a));
    let v = run(&mut py(
        &srv,
        "tok-ada-7f3c9e1b5d2a8064c1e9",
        "subscribe",
        "subscribed?",
    ));
    let sub = v["subscribe"].as_array().expect("subscribe events");
    assert_eq!(
        sub[0], "task",
        "a subscription starts with the task snapshot: {v}"
    );
    assert_eq!(v["final"]["state"], "TASK_STATE_COMPLETED", "{v}");
    for (token, status) in [("", "401"), ("tok-eve", "403")] {
        let v = run(&mut py(&srv, token, "ask", "q"));
        assert!(v["text"].as_str().unwrap().contains(status), "{v}");
    }
    latency_beside_plain_http(&srv);
}

#[test]
fn js_sdk_client_asks_streams_polls_subscribes_and_cancels() {
    let Some(dir) = js_dir() else {
        println!("skipped: node or tests/a2a_js/node_modules missing (tests/run.sh runs npm ci)");
        return;
    };
    let ns = Ns::new("a2a-js");
    let srv = bob(&ns);
    check_client(&ns, &srv, &|t, s, a| js(&dir, &srv, t, s, a));
    let v = run(&mut js(
        &dir,
        &srv,
        "tok-ada-7f3c9e1b5d2a8064c1e9",
        "subscribe",
        "subscribed?",
    ));
    let sub = v["subscribe"].as_array().expect("subscribe events");
    assert_eq!(
        sub[0], "task",
        "a subscription starts with the task snapshot: {v}"
    );
    assert_eq!(v["final"]["state"], "TASK_STATE_COMPLETED", "{v}");
}

#[test]
fn owner_decline_is_rejected_for_the_sdk_client() {
    let ns = Ns::new("a2a-decline");
    let srv = bob(&ns);
    let asker = py(&srv, "tok-cy-4b8e2d6f0a1c3e5b7d9f", "ask", "may I?")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut id = String::new();
    assert!(eventually(20, || {
        let v = json_of(&ns.peer(&["--json", "ask", "pending"]));
        match v["pending"].as_array().and_then(|a| a.first()) {
            Some(p) => {
                assert_eq!(p["caller"], "cy");
                assert_eq!(p["question"], "may I?");
                id = p["askId"].as_str().unwrap().to_string();
                true
            }
            None => false,
        }
    }));
    let out = ns.peer(&["--json", "ask", "decide", &id, "decline"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = asker.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["first"]["state"], "TASK_STATE_REJECTED", "{v}");
    assert_eq!(v["first"]["id"], id.as_str(), "the task id is the ask id");
}

/// One raw HTTP exchange on a fresh connection: status and body.
fn raw(port: u16, req: &[u8]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    let status = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0u16);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.as_bytes().to_vec())
        .unwrap_or_default();
    (status, body)
}

fn post(path: &str, auth: Option<&str>, body: &Value) -> Vec<u8> {
    let body = body.to_string();
    let auth = auth.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{auth}content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Same server, same answerer: a plain `POST /ask` and a blocking A2A `SendMessage`.
fn latency_beside_plain_http(srv: &Server) {
    let plain = post(
        "/ask",
        None,
        &json!({"protocolVersion": 1, "caller": "ada", "token": "tok-ada-7f3c9e1b5d2a8064c1e9", "question": "q"}),
    );
    let a2a = post(
        "/a2a",
        Some("tok-ada-7f3c9e1b5d2a8064c1e9"),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": "m", "role": "ROLE_USER", "parts": [{"text": "q"}]}}}),
    );
    let (n, mut p, mut a) = (20, Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        assert_eq!(raw(srv.port, &plain).0, 200);
        p.push(t.elapsed());
        let t = Instant::now();
        let (status, body) = raw(srv.port, &a2a);
        a.push(t.elapsed());
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status, 200);
        assert_eq!(
            v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{v}"
        );
    }
    println!(
        "loopback latency (median of {n}): plain POST /ask {:?}, A2A SendMessage (blocking) {:?}",
        median(p),
        median(a)
    );
}

/// The a2a-sdk example agent (tests/a2a_agent.py) with the Ed25519 key of `seed`; killed on
/// drop.
struct Agent {
    child: Child,
    port: u16,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sdk_agent(seed: [u8; 32], token: &str) -> Agent {
    let mut agent = Command::new(python());
    agent
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/a2a_agent.py"))
        .arg(peerwire::identity::hex(&seed))
        .arg(token);
    let (child, line) = common::ask::first_line(agent, Stdio::null());
    let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
    let port = v["port"]
        .as_u64()
        .unwrap_or_else(|| panic!("agent: {line}")) as u16;
    Agent { child, port }
}

#[test]
fn peer_ask_asks_an_a2a_sdk_agent_and_our_own_a2a_endpoint() {
    let ns = Ns::new("a2a-out");
    let seed = [7u8; 32];
    let agent = sdk_agent(seed, "tok-ext-9a7c5e3b1d0f2e4c6a8b");
    let srv = bob(&ns);
    let sign = peerwire::ask::keys::AskKey::from_seed(&seed).sign_string();
    let other = peerwire::ask::keys::AskKey::from_seed(&[8u8; 32]).sign_string();
    let home = ns.root.join("ada-home");
    let a2a = |name: &str, port: u16, extra: Value| {
        let mut f = json!({"name": name, "host": "127.0.0.1", "port": port, "protocol": "a2a"});
        for (k, v) in extra.as_object().unwrap() {
            f[k] = v.clone();
        }
        f
    };
    let peers = json!([
        a2a(
            "echo",
            agent.port,
            json!({"token": "tok-ext-9a7c5e3b1d0f2e4c6a8b", "publicKey": sign})
        ),
        a2a(
            "forged",
            agent.port,
            json!({"token": "tok-ext-9a7c5e3b1d0f2e4c6a8b", "publicKey": other})
        ),
        a2a("notoken", agent.port, json!({})),
        // The agent's card names 127.0.0.1; fetched as localhost, its endpoint is another host.
        a2a(
            "elsewhere",
            agent.port,
            json!({"token": "tok-ext-9a7c5e3b1d0f2e4c6a8b",
            "cardUrl": format!("http://localhost:{}/.well-known/agent-card.json", agent.port)})
        ),
        a2a(
            "bob",
            srv.port,
            json!({"token": "tok-ada-7f3c9e1b5d2a8064c1e9", "publicKey": srv.sign})
        ),
    ]);
    ask_config(
        &home,
        json!({"callerName": "ada", "timeoutMs": 3000, "peers": peers}),
    );
    let peer = |args: &[&str]| {
        ns.cmd(PEER)
            .arg("--home")
            .arg(&home)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };

    let out = peer(&["--json", "ask", "echo", "hello over a2a"]);
    assert!(
        out.status.success(),
        "{} {}",
        stderr(&out),
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(json_of(&out)["answer"], "echo: hello over a2a");

    let out = peer(&["--json", "ask", "bob", "and to our own server?"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let answer = json_of(&out)["answer"].as_str().unwrap().to_string();
    assert!(answer.contains("and to our own server?") && answer.contains("\"caller\":\"ada\""));

    let out = peer(&["ask", "echo", "please refuse"]);
    assert_eq!(
        out.status.code(),
        Some(exit_of(peerwire::error::Code::AskDeclined)),
        "{}",
        stderr(&out)
    );
    let out = peer(&["ask", "elsewhere", "hi"]);
    assert_eq!(
        out.status.code(),
        Some(exit_of(peerwire::error::Code::InvalidRequest)),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("is not the card's host"),
        "the token goes only to the card's host: {}",
        stderr(&out)
    );
    for (friend, why) in [("forged", "signature"), ("notoken", "401")] {
        let out = peer(&["ask", friend, "hi"]);
        assert_eq!(
            out.status.code(),
            Some(exit_of(peerwire::error::Code::AuthFailed)),
            "{}",
            stderr(&out)
        );
        assert!(stderr(&out).contains(why), "{}", stderr(&out));
    }

    let out = peer(&["ask", "--async", "echo", "queued?"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(eventually(10, || {
        let v = json_of(&peer(&["--json", "ask", "status", "echo", &id]));
        v["status"] == "answered" && v["answer"] == "echo: queued?"
    }));

    // Past timeoutMs the task is canceled at the agent.
    let out = peer(&["ask", "echo", "a slow one"]);
    assert_eq!(
        out.status.code(),
        Some(exit_of(peerwire::error::Code::Timeout)),
        "{}",
        stderr(&out)
    );
    let err = stderr(&out);
    let id = err
        .split("task ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap();
    let v = json_of(&peer(&["--json", "ask", "status", "echo", id]));
    assert_eq!(v["status"], "failed", "{v}");
    assert!(v["error"].as_str().unwrap().contains("CANCELED"), "{v}");
}

#[test]
fn a_pinned_card_key_over_mutual_tls_authenticates_without_a_token() {
    let ns = Ns::new("a2a-mtls");
    let srv = bob(&ns);
    let key = dee_key();
    let cfg = peerwire::ask::config::AskConfig::parse(
        json!({"ask": {"callerName": "dee", "peers": [
            {"name": "bob", "host": "127.0.0.1", "port": srv.port, "publicKey": srv.sign},
        ]}})
        .to_string()
        .as_bytes(),
    )
    .unwrap();
    let body = json!({"jsonrpc": "2.0", "id": "x", "method": "SendMessage", "params": {"message": {
        "messageId": "m", "role": "ROLE_USER", "parts": [{"text": "over mutual TLS"}]}}});
    let bytes = body.to_string().into_bytes();
    let send = |own: Option<&peerwire::ask::keys::AskKey>| {
        let target = peerwire::ask::tls::target(&cfg.peers[0], own).unwrap();
        peerwire::ask::client::request_with(&target, "POST", "/a2a", &[], Some(&bytes), T).unwrap()
    };
    let reply = send(Some(&key));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let task = &reply.body["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_COMPLETED",
        "{}",
        reply.body
    );
    let answer = task["artifacts"][0]["parts"][0]["text"].as_str().unwrap();
    assert!(answer.contains("\"caller\":\"dee\""), "{answer}");
    // The same request over TLS without a client certificate has no credentials.
    assert_eq!(send(None).status, 401);
}

#[test]
fn other_versions_methods_and_batches_are_json_rpc_errors() {
    let ns = Ns::new("a2a-rpc");
    let srv = bob(&ns);
    let call = |extra: &str, body: &str| {
        let req = format!(
            "POST /a2a HTTP/1.1\r\nhost: x\r\nauthorization: Bearer tok-ada-7f3c9e1b5d2a8064c1e9\r\n{extra}content-length: {}\r\n\r\n{body}",
            body.len()
        );
        let (status, bytes) = raw(srv.port, req.as_bytes());
        assert_eq!(status, 200);
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        v["error"]["code"].as_i64().unwrap_or(0)
    };
    let get = r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"nope"}}"#;
    assert_eq!(call("", get), -32001);
    assert_eq!(call("a2a-version: 1.0\r\n", get), -32001);
    assert_eq!(call("a2a-version: 0.3\r\n", get), -32009);
    let legacy = r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x"}}"#;
    assert_eq!(call("", legacy), -32601);
    assert_eq!(call("", &format!("[{get}]")), -32600);
    assert_eq!(call("", "{not json"), -32700);
    let file = r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"url":"file:///etc/passwd"}]}}}"#;
    assert_eq!(call("", file), -32005);
}
