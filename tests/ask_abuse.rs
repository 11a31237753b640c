//! The ask server under abuse, between real processes over loopback: no one address or friend
//! can starve the others. Slow connections from one address, a penalized address shared with
//! an honest friend, status floods, one friend's signed flood, bogus decisions against the
//! owner's own `peer ask decide`, a signed ask replayed after a restart, duplicate
//! `Content-Length`, token guessing from many addresses, weak tokens, and hostile `via` chains.
//! Counts are printed; nothing asserts wall-clock speed.

use crate::common;

use common::ask::{Server, ask_config, connect_from, post, script, token_body};
use common::*;
use peerwire::ask::auth::sign_body;
use peerwire::ask::keys::AskKey;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);
/// A token of the generated kind (`peer ask token new`).
const ADA_TOKEN: &str = "q7Vd3kQmxZr2Lp9WfTb6Hn1YcJs8Ge4Ua0Ko5RiNw";
const EVE_TOKEN: &str = "Z9mEw2rTq8LkP4vXc6Bn1HsYj7Gf3Da5Ue0Io2WtRb";
const ECHO: &str = "input=$(cat); printf 'answer: %s' \"$input\"";

/// Writes bob's config (answerer, friends, extra settings) and starts his server.
fn bob(ns: &Ns, peers: Value, extra: Value) -> Server {
    let echo = script(ns, "echo.sh", ECHO);
    let mut ask = json!({
        "callerName": "bob", "listenPort": 0,
        "workspace": ns.work.to_string_lossy(),
        "answerCommand": [echo], "answerReadPaths": [echo], "peers": peers,
    });
    for (k, v) in extra.as_object().unwrap() {
        ask[k] = v.clone();
    }
    ask_config(&ns.home, ask);
    Server::start(ns)
}

fn test_key(seed: u8) -> AskKey {
    AskKey::from_seed(&[seed; 32])
}

fn signed(key: &AskKey, caller: &str, purpose: &str, extra: Value) -> Value {
    let mut b = json!({"protocolVersion": 1, "caller": caller, "question": "signed?"});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    let mut m = b.as_object().unwrap().clone();
    sign_body(key, &mut m, purpose, "bob", peerwire::clock::now_ms());
    Value::Object(m)
}

/// Sends raw bytes, returns the status (0: closed without an answer) and the body.
fn raw(mut s: TcpStream, request: &[u8]) -> (u16, Value) {
    s.set_read_timeout(Some(T)).unwrap();
    let _ = s.write_all(request);
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    peerwire::ask::client::parse_response(&buf)
        .map(|r| (r.status, r.body))
        .unwrap_or((0, Value::Null))
}

fn post_request(path: &str, headers: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\n{headers}content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn json_post(path: &str, body: &Value) -> Vec<u8> {
    post_request(
        path,
        "content-type: application/json\r\n",
        &body.to_string(),
    )
}

fn tally<K: Ord>(counts: &mut BTreeMap<K, u32>, key: K) {
    *counts.entry(key).or_insert(0) += 1;
}

#[test]
fn slow_connections_from_one_address_leave_other_addresses_served() {
    let ns = Ns::new("abuse-slow");
    let peers = json!([{"name": "ada", "host": "127.0.0.1", "token": ADA_TOKEN, "mode": "auto"}]);
    let srv = bob(&ns, peers, json!({"headerTimeoutMs": 60000}));
    // 64 connections from one address, each sending half a head and then nothing.
    let mut slow = Vec::new();
    let mut refused_at_once = 0;
    for _ in 0..64 {
        let mut s = connect_from(2, srv.port);
        let _ = s.write_all(b"GET /health HTTP/1.1\r\n");
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut b = [0u8; 64];
        if matches!(s.read(&mut b), Ok(n) if n > 0) {
            refused_at_once += 1;
        }
        slow.push(s);
    }
    let mut honest = BTreeMap::new();
    for last in 3..13u8 {
        let (status, _) = raw(
            connect_from(last, srv.port),
            b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n",
        );
        tally(&mut honest, status);
    }
    println!(
        "slow flood: 64 slow connections from 127.0.0.2 ({refused_at_once} refused at once); honest requests from 10 other addresses by status {honest:?}"
    );
    assert_eq!(honest, BTreeMap::from([(200, 10)]));
    assert!(
        refused_at_once >= 32,
        "one address holds at most its own share"
    );
}

#[test]
fn a_friend_who_authenticates_is_served_on_a_penalized_address() {
    let ns = Ns::new("abuse-nat");
    let peers = json!([{"name": "ada", "host": "127.0.0.1", "token": ADA_TOKEN, "mode": "auto"}]);
    let srv = bob(&ns, peers, json!({"addressFailuresPerMinute": 5}));
    // Someone else behind the same address (NAT, VPN, one host) spends its failure budget.
    let mut counts = BTreeMap::new();
    for _ in 0..20 {
        let body = token_body("mallory", Some("guess"), "let me in");
        tally(
            &mut counts,
            raw(connect_from(2, srv.port), &json_post("/ask", &body)).0,
        );
    }
    assert_eq!(counts.get(&429).copied().unwrap_or(0), 15, "{counts:?}");
    // The known friend who authenticates from that address is still served...
    for _ in 0..3 {
        let body = token_body("ada", Some(ADA_TOKEN), "honest");
        let (status, reply) = raw(connect_from(2, srv.port), &json_post("/ask", &body));
        assert_eq!(status, 200, "{reply}");
    }
    // ...while unauthenticated requests from it are still refused without work.
    let body = token_body("mallory", Some("guess"), "again");
    assert_eq!(
        raw(connect_from(2, srv.port), &json_post("/ask", &body)).0,
        429
    );
    println!("penalized address: refused {counts:?}; the friend on it got 3 of 3 answered");
}

#[test]
fn status_honours_deny_and_is_rate_limited_per_friend() {
    let ns = Ns::new("abuse-status");
    let peers = json!([
        {"name": "ada", "host": "127.0.0.1", "token": ADA_TOKEN, "mode": "auto"},
        {"name": "eve", "host": "127.0.0.1", "token": EVE_TOKEN, "mode": "deny"},
    ]);
    let srv = bob(&ns, peers, json!({}));
    let mut b = token_body("eve", Some(EVE_TOKEN), "x");
    b["askId"] = json!("00000000-0000-4000-8000-000000000000");
    let r = post(srv.port, "/ask/status", &b);
    assert_eq!(r.status, 403, "a denied friend learns nothing: {}", r.body);
    let mut counts = BTreeMap::new();
    let mut a = token_body("ada", Some(ADA_TOKEN), "x");
    a["askId"] = json!("00000000-0000-4000-8000-000000000000");
    // 200 polls against the default friendStatusPerMinute of 120.
    for _ in 0..200 {
        tally(&mut counts, post(srv.port, "/ask/status", &a).status);
    }
    println!("status flood by one friend: {counts:?}");
    assert!(counts.get(&429).copied().unwrap_or(0) >= 60, "{counts:?}");
    // Another friend's budget is its own; asks are not charged by status polls.
    let r = post(srv.port, "/ask", &token_body("ada", Some(ADA_TOKEN), "q"));
    assert_eq!(r.status, 200, "{}", r.body);
}

#[test]
fn signed_floods_fill_only_their_own_friends_replay_memory() {
    let ns = Ns::new("abuse-replay");
    let (ada, eve, mal) = (test_key(7), test_key(8), test_key(9));
    let peers = json!([
        {"name": "ada", "host": "127.0.0.1", "publicKey": ada.sign_string(), "mode": "auto"},
        {"name": "eve", "host": "127.0.0.1", "publicKey": eve.sign_string(), "mode": "deny"},
        {"name": "mal", "host": "127.0.0.1", "publicKey": mal.sign_string(), "mode": "auto"},
    ]);
    let srv = bob(&ns, peers, json!({}));
    let port = srv.port;
    // A denied friend and an allowed one each flood signed status polls.
    let flood: Vec<_> = (0..4u8)
        .map(|t| {
            std::thread::spawn(move || {
                let (name, seed) = if t % 2 == 0 { ("eve", 8) } else { ("mal", 9) };
                let key = test_key(seed);
                let mut counts = BTreeMap::new();
                for _ in 0..250 {
                    let b = signed(&key, name, "status", json!({"askId": "x"}));
                    tally(&mut counts, (name, post(port, "/ask/status", &b).status));
                }
                counts
            })
        })
        .collect();
    for i in 0..5 {
        let b = signed(&ada, "ada", "ask", json!({"question": format!("q{i}")}));
        let r = post(port, "/ask", &b);
        assert_eq!(r.status, 200, "ada refused during eve's flood: {}", r.body);
    }
    let mut total = BTreeMap::new();
    for t in flood {
        for (k, v) in t.join().unwrap() {
            *total.entry(k).or_insert(0) += v;
        }
    }
    println!("signed status floods (friend, status): {total:?}; ada answered 5 of 5");
    assert_eq!(total.get(&("eve", 403)), Some(&500), "{total:?}");
    // The allowed friend's polls past its budget are refused before a nonce is kept.
    assert!(
        total.get(&("mal", 429)).copied().unwrap_or(0) >= 100,
        "{total:?}"
    );
    // Replay memory is per friend, on disk: ada's nonces are kept, a denied friend's are not,
    // and the flooding friend's hold no more than its budget let through.
    let dir = ns.home.join("ask/nonces");
    assert!(dir.join("ada").exists(), "ada's nonces are remembered");
    assert!(!dir.join("eve").exists(), "a refused friend fills nothing");
    let kept = std::fs::read_to_string(dir.join("mal"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(
        kept as u32,
        total[&("mal", 404)],
        "one nonce per served poll"
    );
}

/// The pending ask of bob's running server, from his private state file.
fn pending_ask(ns: &Ns) -> (String, String) {
    let mut found = None;
    assert!(eventually(10, || {
        for e in std::fs::read_dir(ns.home.join("ask/run"))
            .unwrap()
            .flatten()
        {
            if e.path().extension().is_some_and(|x| x == "json") {
                let v: Value = serde_json::from_slice(&std::fs::read(e.path()).unwrap())
                    .unwrap_or(Value::Null);
                if let Some(p) = v["pending"].get(0) {
                    found = Some((
                        p["askId"].as_str().unwrap().to_string(),
                        p["decisionToken"].as_str().unwrap().to_string(),
                    ));
                    return true;
                }
            }
        }
        false
    }));
    found.unwrap()
}

fn async_ask(port: u16) -> String {
    let mut b = token_body("ada", Some(ADA_TOKEN), "may I?");
    b["async"] = json!(true);
    let r = post(port, "/ask", &b);
    assert_eq!(r.status, 202, "{}", r.body);
    r.body["askId"].as_str().unwrap().to_string()
}

#[test]
fn bogus_http_decisions_do_not_stop_the_owners_decide() {
    let ns = Ns::new("abuse-decide");
    let peers = json!([{"name": "ada", "host": "127.0.0.1", "token": ADA_TOKEN, "mode": "ask"}]);
    let srv = bob(&ns, peers, json!({"approvalTimeoutMs": 60000}));
    let ask_id = async_ask(srv.port);
    let mut counts = BTreeMap::new();
    for _ in 0..60 {
        let bogus = json!({"askId": ask_id, "token": "guess", "decision": "approve"});
        tally(&mut counts, post(srv.port, "/ask/decision", &bogus).status);
    }
    let out = ns.peer(&["ask", "decide", &ask_id, "approve"]);
    println!(
        "60 bogus decisions from loopback: {counts:?}; owner's decide exit {:?}",
        out.status.code()
    );
    assert!(
        out.status.success(),
        "the owner's decide failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut s = token_body("ada", Some(ADA_TOKEN), "x");
    s["askId"] = json!(ask_id);
    assert!(eventually(
        10,
        || post(srv.port, "/ask/status", &s).body["status"] == "answered"
    ));
    // The control socket is the owner's only: private, in the private run directory.
    let socks: Vec<_> = std::fs::read_dir(ns.home.join("ask/run"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "sock"))
        .collect();
    assert_eq!(socks.len(), 1);
    use std::os::unix::fs::PermissionsExt;
    let mode = socks[0].metadata().unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "socket mode {mode:o}");
}

#[test]
fn http_decisions_need_json_and_a_matching_origin() {
    let ns = Ns::new("abuse-origin");
    let peers = json!([{"name": "ada", "host": "127.0.0.1", "token": ADA_TOKEN, "mode": "ask"}]);
    let srv = bob(&ns, peers, json!({"approvalTimeoutMs": 60000}));
    let ask_id = async_ask(srv.port);
    let (id, token) = pending_ask(&ns);
    assert_eq!(id, ask_id);
    let body = json!({"askId": id, "token": token, "decision": "approve"}).to_string();
    // A form post (what a page can send without preflight) is refused.
    let form = post_request("/ask/decision", "content-type: text/plain\r\n", &body);
    let (status, _) = raw(TcpStream::connect(("127.0.0.1", srv.port)).unwrap(), &form);
    assert_eq!(status, 415);
    // A browser on another origin is refused, even with JSON.
    let foreign = post_request(
        "/ask/decision",
        "content-type: application/json\r\norigin: http://evil.example\r\n",
        &body,
    );
    let (status, _) = raw(
        TcpStream::connect(("127.0.0.1", srv.port)).unwrap(),
        &foreign,
    );
    assert_eq!(status, 403);
    // The refusals consumed nothing: the server's own origin decides.
    let own = post_request(
        "/ask/decision",
        &format!(
            "content-type: application/json; charset=utf-8\r\norigin: http://127.0.0.1:{}\r\n",
            srv.port
        ),
        &body,
    );
    let (status, reply) = raw(TcpStream::connect(("127.0.0.1", srv.port)).unwrap(), &own);
    assert_eq!(status, 200, "{reply}");
}

#[test]
fn a_signed_ask_replayed_after_a_restart_is_refused() {
    let ns = Ns::new("abuse-restart");
    let ada = test_key(7);
    let peers = json!([{"name": "ada", "host": "127.0.0.1", "publicKey": ada.sign_string(), "mode": "auto"}]);
    let srv = bob(&ns, peers, json!({}));
    let captured = signed(&ada, "ada", "ask", json!({}));
    assert_eq!(post(srv.port, "/ask", &captured).status, 200);
    drop(srv);
    let srv = Server::start(&ns);
    let r = post(srv.port, "/ask", &captured);
    assert_eq!(r.status, 403, "replayed after restart: {}", r.body);
    assert!(r.body.to_string().contains("replayed"), "{}", r.body);
    // A fresh signature still works.
    let fresh = signed(&ada, "ada", "ask", json!({}));
    assert_eq!(post(srv.port, "/ask", &fresh).status, 200);
}

#[test]
fn duplicate_or_conflicting_content_length_is_refused() {
    let ns = Ns::new("abuse-cl");
    let peers = json!([{"name": "ada", "host": "127.0.0.1", "token": ADA_TOKEN, "mode": "auto"}]);
    let srv = bob(&ns, peers, json!({}));
    let body = token_body("ada", Some(ADA_TOKEN), "q").to_string();
    let n = body.len();
    let cases = [
        format!("content-length: {n}\r\ncontent-length: 2\r\n"),
        format!("content-length: 2\r\ncontent-length: {n}\r\n"),
        format!("content-length: {n}\r\ncontent-length: {n}\r\n"),
        format!("content-length: {n}\r\ntransfer-encoding: chunked\r\n"),
        format!("content-length: {n}, {n}\r\n"),
    ];
    for headers in cases {
        let req = format!(
            "POST /ask HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{headers}\r\n{body}"
        );
        let (status, _) = raw(
            TcpStream::connect(("127.0.0.1", srv.port)).unwrap(),
            req.as_bytes(),
        );
        assert_eq!(status, 400, "{headers:?}");
    }
}

#[test]
fn token_guesses_from_50_addresses_are_stopped_per_friend() {
    let ns = Ns::new("abuse-guess");
    let peers = json!([{"name": "ada", "host": "127.0.0.1", "token": ADA_TOKEN, "mode": "auto"}]);
    // friendFailuresPerMinute at its default, 10.
    let srv = bob(&ns, peers, json!({}));
    let port = srv.port;
    let threads: Vec<_> = (0..10u8)
        .map(|t| {
            std::thread::spawn(move || {
                let mut counts = BTreeMap::new();
                for a in 0..5u8 {
                    for i in 0..60 {
                        let guess = format!("guess-{t}-{a}-{i}-aaaaaaaaaaaaaaaaaaaa");
                        let body = token_body("ada", Some(&guess), "let me in");
                        let s = connect_from(10 + t * 5 + a, port);
                        tally(&mut counts, raw(s, &json_post("/ask", &body)).0);
                    }
                }
                counts
            })
        })
        .collect();
    let mut total = BTreeMap::new();
    for t in threads {
        for (k, v) in t.join().unwrap() {
            *total.entry(k).or_insert(0u32) += v;
        }
    }
    println!("3000 token guesses from 50 addresses: {total:?}");
    assert_eq!(total.values().sum::<u32>(), 3000);
    let tested = total.get(&403).copied().unwrap_or(0);
    assert!(tested <= 200, "{tested} guesses were tested: {total:?}");
    // The budget refills (10 a minute): the honest friend is served again within seconds.
    assert!(eventually(20, || post(
        port,
        "/ask",
        &token_body("ada", Some(ADA_TOKEN), "honest")
    )
    .status
        == 200));
}

fn serve_fails_with(ns: &Ns, token: &str) -> String {
    ask_config(
        &ns.home,
        json!({"callerName": "bob", "listenPort": 0,
               "peers": [{"name": "ada", "host": "127.0.0.1", "token": token}]}),
    );
    let mut child = ns
        .cmd(PEER)
        .args(["--json", "ask", "serve"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A server that accepted the token would run until killed.
    if !eventually(10, || child.try_wait().unwrap().is_some()) {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{token:?} accepted: {text}");
    assert!(text.contains("CONFIG_INVALID"), "{text}");
    assert!(text.contains(r#"peer \"ada\""#), "names the friend: {text}");
    text
}

#[test]
fn weak_tokens_are_refused_and_token_new_makes_strong_ones() {
    let ns = Ns::new("abuse-weak");
    for weak in [
        "s3cret-shared",
        "0123456789abcdef0123456789abcde",
        "abababababababababababababababab",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    ] {
        serve_fails_with(&ns, weak);
    }
    let a = ns.peer(&["ask", "token", "new"]);
    let b = ns.peer(&["ask", "token", "new"]);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    let (a, b) = (
        String::from_utf8(a.stdout).unwrap(),
        String::from_utf8(b.stdout).unwrap(),
    );
    let a = a.trim();
    assert_eq!(a.len(), 43, "{a}");
    assert!(
        a.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    );
    assert_ne!(a, b.trim());
    ask_config(
        &ns.home,
        json!({"callerName": "bob", "listenPort": 0, "workspace": ns.work.to_string_lossy(),
               "peers": [{"name": "ada", "host": "127.0.0.1", "token": a}]}),
    );
    drop(Server::start(&ns));
    let readme = std::fs::read_to_string("README.md").unwrap();
    assert!(!readme.contains("s3cret"), "README example token");
}

/// A fake friend that answers one `/recommend` with a valid card and a hostile `via`.
fn hostile_recommender() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = listener.accept() else {
            return;
        };
        s.set_read_timeout(Some(T)).unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while let Ok(n) = s.read(&mut chunk) {
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf);
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                    })
                    .unwrap_or(0);
                if body.len() >= len {
                    break;
                }
            }
        }
        let key = test_key(42);
        let card = peerwire::ask::card::issue(
            &peerwire::ask::card::Issue {
                name: "mallet",
                host: "127.0.0.1",
                port: 9,
                public: &key.public(),
                description: "",
                tags: &[],
                issued: peerwire::clock::now_ms(),
                tls: false,
            },
            |b| key.sign(b),
        );
        let evil = format!("\u{1b}]0;pwned\u{7}\u{1b}[2J{}", "x".repeat(500));
        let via: Vec<String> = (0..500).map(|_| evil.clone()).collect();
        let body = json!({"ok": true, "from": "mallet", "card": card, "via": via}).to_string();
        let _ = s.write_all(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
    });
    port
}

fn assert_clean_via(via: &[Value], what: &str) {
    assert!(via.len() <= 9, "{what}: {} via names", via.len());
    for v in via {
        let s = v.as_str().unwrap();
        assert!(
            s.chars().count() <= 64,
            "{what}: a via name of {} chars",
            s.len()
        );
        assert!(!s.chars().any(char::is_control), "{what}: {s:?}");
    }
}

#[test]
fn via_names_are_bounded_and_sanitized_everywhere() {
    let ns = Ns::new("abuse-via");
    let port = hostile_recommender();
    ask_config(
        &ns.home,
        json!({"callerName": "ada", "peers": [
            {"name": "bob", "host": "127.0.0.1", "port": port, "token": ADA_TOKEN}]}),
    );
    let out = ns.peer(&["--json", "ask", "recommend", "bob"]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    let via = rec["via"].as_array().cloned().unwrap_or_default();
    assert_clean_via(&via, "the recommend answer");
    let file: Value =
        serde_json::from_slice(&std::fs::read(ns.home.join("ask/recommendations.json")).unwrap())
            .unwrap();
    assert_clean_via(
        file["pending"][0]["via"].as_array().unwrap(),
        "the pending store",
    );
    let shown = ns.peer(&["ask", "friends", "pending"]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(!text.contains('\u{1b}'), "terminal escapes reach the owner");
    assert!(text.len() < 4000, "{} bytes shown", text.len());
}
