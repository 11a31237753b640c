//! TLS pinned to card keys between real `peer ask serve` processes on loopback: an ask over
//! TLS to the pinned key (the bytes on the wire are a TLS handshake and never the question),
//! a client pinned to another key refused before the question leaves, mutual TLS as a
//! key-pinned friend's whole authentication, plain HTTP on the same port, and the client
//! policy that refuses an unverifiable non-loopback friend. A recording TCP relay between the
//! two processes shows what crossed the wire. Latency figures are printed, never asserted.

use crate::common;

use common::ask::{ask_config, peer_in};
use common::*;
use peerwire::ask::client::{get_json, post_json, post_json_to};
use peerwire::ask::keys::AskKey;
use peerwire::ask::tls::{Pinned, Target};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);
/// A question long enough that it cannot hide in a handshake's byte count.
fn long_question() -> String {
    format!("where is the dev database url? {}", "x".repeat(3000))
}

/// The agent key of `home` (`<home>/ask/keys/<name>.key`, created when missing).
fn key_in(home: &Path, name: &str) -> AskKey {
    peerwire::ask::keys::load_or_create(&home.join("ask").join("keys"), name).unwrap()
}

/// A running `peer ask serve` and the card key its ready line states.
struct Server {
    port: u16,
    key: [u8; 32],
    _serve: common::ask::Server,
}

impl Server {
    fn start(ns: &Ns) -> Server {
        let serve = common::ask::Server::serve(ns, Stdio::null());
        let key = peerwire::ask::canon::parse_sign(&serve.sign()).unwrap();
        Server {
            port: serve.port,
            key,
            _serve: serve,
        }
    }
}

/// bob's server: friend ada pinned to `ada_key` (auto mode), answering with the question.
fn bob(ns: &Ns, ada_key: &AskKey, mode: &str, extra: Value) -> Server {
    let echo = ns.root.join("echo.sh");
    std::fs::write(
        &echo,
        "#!/bin/sh\ninput=$(cat); printf 'answer: %s' \"$input\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&echo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut ask = json!({
        "callerName": "bob", "listenPort": 0, "workspace": ns.work.to_string_lossy(),
        "answerCommand": [echo.to_string_lossy()], "answerReadPaths": [echo.to_string_lossy()],
        "friendAsksPerMinute": 10000,
        "peers": [{"name": "ada", "host": "127.0.0.1", "publicKey": ada_key.sign_string(), "mode": mode},
                  {"name": "cy", "host": "127.0.0.1", "token": "tok-cy-6b3f0e2a9d4c1b7e8f5a2d3c4b1e0f9a8d7c6b5a", "mode": "auto"}],
    });
    for (k, v) in extra.as_object().unwrap() {
        ask[k] = v.clone();
    }
    ask_config(&ns.home, ask);
    Server::start(ns)
}

/// ada's namespace: her key, and bob at `port` pinned to `bob_key` (a sign string).
fn ada(root: &Path, port: u16, bob: Value) -> (std::path::PathBuf, AskKey) {
    let home = common::ask::ada(root, port, bob);
    let key = key_in(&home, "ada");
    (home, key)
}

/// A loopback TCP relay to `to` that records every byte the client sent.
struct Relay {
    port: u16,
    sent: Arc<Mutex<Vec<u8>>>,
}

impl Relay {
    fn to(to: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let log = sent.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(("127.0.0.1", to)) else {
                    return;
                };
                let log = log.clone();
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = c_in.read(&mut buf) {
                        if n == 0 || s_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                        log.lock().unwrap().extend_from_slice(&buf[..n]);
                    }
                    let _ = s_out.shutdown(std::net::Shutdown::Write);
                });
                let (mut s_in, mut c_out) = (server, client);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut s_in, &mut c_out);
                    let _ = c_out.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        Relay { port, sent }
    }

    fn sent(&self) -> Vec<u8> {
        self.sent.lock().unwrap().clone()
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn an_ask_to_the_pinned_card_key_crosses_the_wire_encrypted() {
    let ns = Ns::new("tls-ask");
    let ada_home = ns.root.join("ada-home");
    let ada_key = key_in(&ada_home, "ada");
    let srv = bob(&ns, &ada_key, "auto", json!({}));
    let relay = Relay::to(srv.port);
    let bob_sign = peerwire::ask::canon::sign_of(&srv.key);
    let (home, _) = ada(&ns.root, relay.port, json!({"publicKey": bob_sign}));
    let question = long_question();
    let out = peer_in(&home, &ns, &["--json", "ask", "bob", &question]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json_of(&out);
    assert!(v["answer"].as_str().unwrap().contains(&question), "{v}");
    let sent = relay.sent();
    assert_eq!(
        sent.first(),
        Some(&0x16),
        "a TLS handshake opens the connection"
    );
    assert!(
        !contains(&sent, b"where is the dev database url"),
        "the question crossed in clear"
    );
    assert!(!contains(&sent, b"\"caller\""), "the body crossed in clear");
    assert!(
        !stderr(&out).contains("warning"),
        "no warning for TLS: {}",
        stderr(&out)
    );
}

#[test]
fn a_client_pinned_to_another_key_is_refused_before_the_question_is_sent() {
    let ns = Ns::new("tls-pin");
    let ada_home = ns.root.join("ada-home");
    let ada_key = key_in(&ada_home, "ada");
    // Mode ask: a question that arrived would wait for bob's decision and be listed.
    let srv = bob(&ns, &ada_key, "ask", json!({"approvalTimeoutMs": 60000}));
    let relay = Relay::to(srv.port);
    let other = AskKey::from_seed(&[7; 32]);
    let (home, _) = ada(
        &ns.root,
        relay.port,
        json!({"publicKey": other.sign_string()}),
    );
    let question = long_question();
    let started = Instant::now();
    let out = peer_in(&home, &ns, &["--json", "ask", "bob", &question]);
    assert_eq!(
        out.status.code(),
        Some(exit_of(peerwire::error::Code::AuthFailed)),
        "{}",
        stderr(&out)
    );
    let v = json_of(&out);
    let message = v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    for part in [
        "bob".to_string(),
        other.fingerprint(),
        peerwire::ask::canon::fingerprint(&srv.key),
        "nothing was sent".to_string(),
    ] {
        assert!(message.contains(&part), "{part} missing: {message}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "refused, not timed out"
    );
    // What left ada: a ClientHello and an alert, far less than the question.
    let sent = relay.sent();
    assert_eq!(sent.first(), Some(&0x16));
    assert!(sent.len() < 1500, "{} bytes left ada", sent.len());
    // And bob never saw a question: nothing pending in his namespace.
    let pending = peer_in(&ns.home, &ns, &["--json", "ask", "pending"]);
    assert!(pending.status.success(), "{}", stderr(&pending));
    assert_eq!(
        json_of(&pending)["pending"],
        json!([]),
        "{}",
        json_of(&pending)
    );
}

#[test]
fn mutual_tls_authenticates_a_key_pinned_friend_with_no_token_or_signature() {
    let ns = Ns::new("tls-mutual");
    let ada_key = AskKey::from_seed(&[1; 32]);
    let srv = bob(&ns, &ada_key, "auto", json!({}));
    let eve = AskKey::from_seed(&[2; 32]);
    let unsigned = json!({"protocolVersion": 1, "caller": "ada", "question": "who am i?"});
    let post = |own: Option<&AskKey>, body: &Value| {
        let t = Target {
            name: "bob",
            host: "127.0.0.1",
            port: srv.port,
            tls: Some(Pinned { key: srv.key, own }),
        };
        post_json_to(&t, "/ask", body, T).unwrap()
    };
    // ada's certificate proves her pinned key: no token, no signature, answered.
    let r = post(Some(&ada_key), &unsigned);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body["answer"].as_str().unwrap().contains("who am i?"));
    // The same body over TLS without a client certificate, or with another key: refused.
    let r = post(None, &unsigned);
    assert_eq!(r.status, 403, "{}", r.body);
    let r = post(Some(&eve), &unsigned);
    assert_eq!(r.status, 403, "{}", r.body);
    // The proven key is ada's: it cannot speak for another friend.
    let as_cy = json!({"protocolVersion": 1, "caller": "cy", "question": "q"});
    let r = post(Some(&ada_key), &as_cy);
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.to_string().contains("TLS client key"), "{}", r.body);
}

#[test]
fn plain_http_and_tls_share_one_port() {
    let ns = Ns::new("tls-port");
    let ada_key = AskKey::from_seed(&[1; 32]);
    let srv = bob(&ns, &ada_key, "auto", json!({}));
    // Plain HTTP on loopback, as dsh-ask-peer and local tools speak it.
    let r = get_json("127.0.0.1", srv.port, "/health", T).unwrap();
    assert_eq!(r.body, json!({"ok": true, "peer": "bob"}));
    let token = json!({"protocolVersion": 1, "caller": "cy", "token": "tok-cy-6b3f0e2a9d4c1b7e8f5a2d3c4b1e0f9a8d7c6b5a", "question": "plain?"});
    let r = post_json("127.0.0.1", srv.port, "/ask", &token, T).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    // TLS on the same port, before and after.
    let tls = Target {
        name: "bob",
        host: "127.0.0.1",
        port: srv.port,
        tls: Some(Pinned {
            key: srv.key,
            own: None,
        }),
    };
    let r = peerwire::ask::client::get_json_from(&tls, "/health", T).unwrap();
    assert_eq!(r.body, json!({"ok": true, "peer": "bob"}));
    let r = post_json_to(&tls, "/ask", &token, T).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    // A connection that sends nothing is closed at the header deadline, not held.
    let mut idle = TcpStream::connect(("127.0.0.1", srv.port)).unwrap();
    idle.set_read_timeout(Some(T)).unwrap();
    let mut buf = [0u8; 16];
    assert!(matches!(idle.read(&mut buf), Ok(0) | Err(_)));
}

#[test]
fn a_non_loopback_friend_without_a_key_needs_tls_false() {
    let ns = Ns::new("tls-policy");
    // 0.0.0.0 is no loopback address, yet were the policy broken a connection to it would
    // still stay on this machine; the policy refuses before connecting.
    let home = ns.root.join("ada-home");
    ask_config(
        &home,
        json!({"callerName": "ada", "peers": [
            {"name": "far", "host": "0.0.0.0", "token": "tok-far-6b3f0e2a9d4c1b7e8f5a2d3c4b1e0f9a8d7c6b5a"}]}),
    );
    let started = Instant::now();
    let out = peer_in(&home, &ns, &["--json", "ask", "far", "q?"]);
    assert_eq!(
        out.status.code(),
        Some(exit_of(peerwire::error::Code::ConfigInvalid)),
        "{}",
        stderr(&out)
    );
    let message = json_of(&out)["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("far") && message.contains("\"tls\": false") && message.contains("card"),
        "{message}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    // `"tls": true` without a key to verify is a configuration error.
    ask_config(
        &home,
        json!({"callerName": "ada", "peers": [
            {"name": "far", "host": "0.0.0.0", "token": "tok-far-6b3f0e2a9d4c1b7e8f5a2d3c4b1e0f9a8d7c6b5a", "tls": true}]}),
    );
    let out = peer_in(&home, &ns, &["--json", "ask", "far", "q?"]);
    assert_eq!(
        out.status.code(),
        Some(exit_of(peerwire::error::Code::ConfigInvalid)),
        "{}",
        stderr(&out)
    );
    assert!(
        json_of(&out)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tls")
    );
}

/// 50 sequential asks each way against an auto-mode friend, the same server and answerer:
/// mutual TLS (a handshake per ask, no signature) beside plain HTTP (a signed body).
#[test]
fn latency_over_tls_beside_plain_http() {
    let ns = Ns::new("tls-latency");
    let ada_key = AskKey::from_seed(&[1; 32]);
    let srv = bob(&ns, &ada_key, "auto", json!({}));
    let tls = Target {
        name: "bob",
        host: "127.0.0.1",
        port: srv.port,
        tls: Some(Pinned {
            key: srv.key,
            own: Some(&ada_key),
        }),
    };
    let n = 50;
    let (mut over_tls, mut plain) = (Vec::new(), Vec::new());
    let (mut health_tls, mut health_plain) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        let r = peerwire::ask::client::get_json_from(&tls, "/health", T).unwrap();
        health_tls.push(t.elapsed());
        assert_eq!(r.status, 200);
        let t = Instant::now();
        let r = get_json("127.0.0.1", srv.port, "/health", T).unwrap();
        health_plain.push(t.elapsed());
        assert_eq!(r.status, 200);
    }
    for i in 0..n {
        let body = json!({"protocolVersion": 1, "caller": "ada", "question": format!("q{i}")});
        let t = Instant::now();
        let r = post_json_to(&tls, "/ask", &body, T).unwrap();
        over_tls.push(t.elapsed());
        assert_eq!(r.status, 200, "{}", r.body);
        let mut signed = body.as_object().unwrap().clone();
        let now = peerwire::clock::now_ms();
        peerwire::ask::auth::sign_body(&ada_key, &mut signed, "ask", "bob", now);
        let t = Instant::now();
        let r = post_json("127.0.0.1", srv.port, "/ask", &Value::Object(signed), T).unwrap();
        plain.push(t.elapsed());
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    println!(
        "loopback latency (median of {n}, same run): POST /ask answered by `cat`-like answerer: mutual TLS {:?}, plain HTTP signed {:?}; GET /health: mutual TLS {:?}, plain {:?}",
        median(over_tls),
        median(plain),
        median(health_tls),
        median(health_plain)
    );
}

/// A friend pinned by key whose server answers plain HTTP (dsh-ask-peer, or a busy server's
/// canned 429) is reported as such, with the fix.
#[test]
fn tls_to_a_plain_http_server_names_the_fix() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf);
        let body = r#"{"ok":false,"error":{"code":"bad_request","message":"no"}}"#;
        let _ = write!(
            s,
            "HTTP/1.1 400 Bad Request\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
    });
    let t = Target {
        name: "dee",
        host: "127.0.0.1",
        port,
        tls: Some(Pinned {
            key: [9; 32],
            own: None,
        }),
    };
    let e = peerwire::ask::client::get_json_from(&t, "/health", T).unwrap_err();
    assert_eq!(e.code, peerwire::error::Code::Disconnected, "{e:?}");
    assert!(
        e.message.contains("answered without TLS") && e.message.contains("\"tls\": false"),
        "{e:?}"
    );
    server.join().unwrap();
}
