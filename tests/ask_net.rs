//! The discovery half of `peer ask` between real processes: friend cards (show → verify → add,
//! tampering, impostors, wildcard hosts), a two-hop recommendation through a friend graph with
//! a loop (three `peer ask serve` processes on loopback, configured after their ready lines),
//! the owner-only decision path, the MCP ask tools driven by the official MCP SDK client, and
//! the same across network namespaces joined by veth pairs (as root; skipped with a message
//! elsewhere).

use crate::common;

use common::*;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// Writes `<home>/config.json` as `{"ask": ask}`.
fn write_ask(ns: &Ns, ask: Value) {
    common::ask::ask_config(&ns.home, ask);
}

fn read_ask(ns: &Ns) -> Value {
    let bytes = std::fs::read(ns.home.join("config.json")).unwrap();
    serde_json::from_slice::<Value>(&bytes).unwrap()["ask"].clone()
}

/// `[prefix…] peer --home H --json ARGS` → (exit status, last JSON line, stderr).
fn peer_json(ns: &Ns, prefix: &[String], args: &[&str]) -> (i32, Value, String) {
    let mut c = match prefix.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(PEER);
            c
        }
        None => Command::new(PEER),
    };
    let out = c
        .arg("--home")
        .arg(&ns.home)
        .arg("--json")
        .args(args)
        .current_dir(&ns.work)
        .env_remove("PEER_HOME")
        .env_remove("PEER_CONTROL")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Value>(l).ok())
        .unwrap_or(Value::Null);
    // With --json an error is the last line's `error.message`; keep it with stderr.
    let err = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        last["error"]["message"].as_str().unwrap_or("")
    );
    (out.status.code().unwrap_or(-1), last, err)
}

fn exit_of(code: &str) -> i32 {
    peerwire::error::Code::from_name(code)
        .unwrap()
        .exit_status()
}

/// A running `peer ask serve`, killed on drop.
struct Server(common::ask::Server);

impl Server {
    fn start(ns: &Ns, prefix: &[String]) -> Server {
        let mut c = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(PEER);
                c
            }
            None => Command::new(PEER),
        };
        c.arg("--home")
            .arg(&ns.home)
            .args(["--json", "ask", "serve"])
            .current_dir(&ns.work)
            .env_remove("PEER_HOME")
            .env_remove("PEER_CONTROL");
        Server(common::ask::Server::spawn(c, Stdio::piped()))
    }
    fn port(&self) -> u16 {
        self.0.port
    }
    fn key(&self) -> String {
        self.0.sign()
    }
}

/// One plain HTTP/1.1 request on loopback; (status, JSON body).
fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let payload = body.map(Value::to_string).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{payload}",
        payload.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, body)
}

/// The sign of an agent that runs no server: `peer ask card show` creates its key.
fn key_of(ns: &Ns) -> String {
    let (code, v, err) = peer_json(
        ns,
        &[],
        &["ask", "card", "show", "--host", "127.0.0.1", "--port", "1"],
    );
    assert_eq!(code, 0, "{err}");
    v["publicKey"].as_str().unwrap().to_string()
}

fn decode_card(card: &str) -> Value {
    let body = card.strip_prefix("dsh-ask-peer-card:").unwrap();
    serde_json::from_slice(&peerwire::ask::canon::unb64url(body).unwrap()).unwrap()
}

fn encode_card(v: &Value) -> String {
    format!(
        "dsh-ask-peer-card:{}",
        peerwire::ask::canon::b64url(v.to_string().as_bytes())
    )
}

#[test]
fn cards_round_trip_and_never_silently_replace_a_friend() {
    let ada = Ns::new("card-ada");
    let bob = Ns::new("card-bob");
    let eve = Ns::new("card-eve");
    write_ask(
        &ada,
        json!({"callerName": "ada", "listenHost": "127.0.0.1", "listenPort": 3877,
               "description": "backend, Postgres", "tags": ["postgres", "migrations"]}),
    );
    write_ask(&bob, json!({"callerName": "bob"}));
    // An impostor who also calls itself ada, with its own key.
    write_ask(
        &eve,
        json!({"callerName": "ada", "listenHost": "127.0.0.2"}),
    );

    let (code, shown, err) = peer_json(&ada, &[], &["ask", "card", "show"]);
    assert_eq!(code, 0, "{err}");
    let card = shown["card"].as_str().unwrap().to_string();
    assert!(card.starts_with("dsh-ask-peer-card:"));
    assert!(
        shown["fingerprint"]
            .as_str()
            .unwrap()
            .starts_with("SHA256:")
    );
    let doc = decode_card(&card);
    let order: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    // dsh's ten fields and ours, `tls`: the server answers TLS with the card's key.
    assert_eq!(order.len(), 11, "{doc}");
    assert_eq!(doc["tls"], true, "{doc}");
    assert_eq!(
        (doc["host"].as_str(), doc["port"].as_u64()),
        (Some("127.0.0.1"), Some(3877))
    );

    let (code, verified, err) = peer_json(&bob, &[], &["ask", "card", "verify", &card]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(verified["ok"], true);
    assert_eq!(verified["peer"]["name"], "ada");
    assert_eq!(verified["peer"]["tags"], json!(["postgres", "migrations"]));

    let (code, added, err) = peer_json(&bob, &[], &["ask", "card", "add", &card]);
    assert_eq!(
        (code, added["result"].as_str()),
        (0, Some("added")),
        "{err}"
    );
    let friends = read_ask(&bob)["peers"].clone();
    assert_eq!(friends[0]["name"], "ada");
    assert_eq!(friends[0]["publicKey"], shown["publicKey"]);
    assert_eq!(
        (friends[0]["mode"].as_str(), friends[0]["port"].as_u64()),
        (Some("ask"), Some(3877))
    );
    // A card that says tls is asked over TLS, the default: no `tls` key is written.
    assert_eq!(friends[0].get("tls"), None, "{friends}");
    let (_, again, _) = peer_json(&bob, &[], &["ask", "card", "add", &card]);
    assert_eq!(again["result"], "unchanged");

    // Tampered: the port changed after signing.
    let mut forged = doc.clone();
    forged["port"] = json!(4444);
    let forged = encode_card(&forged);
    let (code, v, err) = peer_json(&bob, &[], &["ask", "card", "verify", &forged]);
    assert_eq!(
        (code, v["ok"].as_bool()),
        (exit_of("AUTH_FAILED"), Some(false))
    );
    assert!(err.contains("signature does not verify"), "{err}");
    let (code, _, err) = peer_json(&bob, &[], &["ask", "card", "add", &forged]);
    assert_eq!(code, exit_of("AUTH_FAILED"), "{err}");
    // dsh-ask-peer's published card vector: it parses and its signature is not what fails
    // (it was issued 2026-07-27 for 90 days).
    let seed: [u8; 32] = std::array::from_fn(|i| i as u8);
    let vector_key = peerwire::ask::keys::AskKey::from_seed(&seed);
    let tags = vec!["postgres".to_string(), "migrations".to_string()];
    let vector = peerwire::ask::card::issue(
        &peerwire::ask::card::Issue {
            name: "ada",
            host: "192.0.2.10",
            port: 3877,
            public: &vector_key.public(),
            description: "backend, Postgres",
            tags: &tags,
            issued: 1_785_150_000_000,
            tls: false,
        },
        |m| vector_key.sign(m),
    );
    assert_eq!(vector.len(), 597);
    let vector = vector.as_str();
    let (code, _, err) = peer_json(&bob, &[], &["ask", "card", "verify", vector]);
    if peerwire::clock::now_ms() > 1_785_150_000_000 + 7_776_000_000 {
        assert_eq!(code, exit_of("AUTH_FAILED"));
        assert!(err.ends_with("card refused: card expired"), "{err}");
    } else {
        assert_eq!(code, 0, "{err}");
    }

    // The impostor's card: same name, another key. Refused until the owner says --replace.
    let (code, eve_card, err) = peer_json(&eve, &[], &["ask", "card", "show", "--port", "3999"]);
    assert_eq!(code, 0, "{err}");
    let eve_card = eve_card["card"].as_str().unwrap().to_string();
    let (code, _, err) = peer_json(&bob, &[], &["ask", "card", "add", &eve_card]);
    assert_eq!(code, exit_of("AUTH_FAILED"));
    assert!(err.contains("--replace"), "{err}");
    assert_eq!(read_ask(&bob)["peers"][0]["publicKey"], shown["publicKey"]);
    let (code, v, err) = peer_json(&bob, &[], &["ask", "card", "add", &eve_card, "--replace"]);
    assert_eq!((code, v["result"].as_str()), (0, Some("replaced")), "{err}");
    assert_eq!(read_ask(&bob)["peers"][0]["port"], 3999);
    assert_eq!(read_ask(&bob)["peers"].as_array().unwrap().len(), 1);
}

#[test]
fn a_wildcard_listen_host_is_never_put_in_a_card_as_loopback() {
    let ns = Ns::new("card-wild");
    write_ask(&ns, json!({"callerName": "ada", "listenHost": "0.0.0.0"}));
    let (code, _, err) = peer_json(&ns, &[], &["ask", "card", "show"]);
    assert_eq!(code, exit_of("CONFIG_INVALID"));
    assert!(err.contains("advertisedHost"), "{err}");
    write_ask(
        &ns,
        json!({"callerName": "ada", "listenHost": "0.0.0.0", "advertisedHost": "192.0.2.7"}),
    );
    let (code, v, err) = peer_json(&ns, &[], &["ask", "card", "show"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        decode_card(v["card"].as_str().unwrap())["host"],
        "192.0.2.7"
    );
}

/// Agents of one friend graph: name → (namespace, server).
struct Graph {
    servers: Vec<(String, Server)>,
}

impl Graph {
    fn port(&self, name: &str) -> u16 {
        self.servers
            .iter()
            .find(|(n, _)| n == name)
            .unwrap()
            .1
            .port()
    }
}

fn friend(name: &str, port: u16, key: &str, mode: &str) -> Value {
    json!({"name": name, "host": "127.0.0.1", "port": port, "publicKey": key, "mode": mode})
}

/// bob, carol and dan serve on loopback. The friend graph has loops (bob ↔ carol, and
/// dan → bob); dan is the one who knows quantum computing. Ports come from the ready lines of a
/// first start with `listenPort` 0; the second start binds the same ports with the full
/// configuration.
fn start_graph(bob: &Ns, carol: &Ns, dan: &Ns, ada_key: &str) -> Graph {
    let base = |name: &str| json!({"callerName": name, "listenHost": "127.0.0.1", "listenPort": 0, "rosterRefreshMs": 0});
    let mut dan_cfg = base("dan");
    dan_cfg["tags"] = json!(["quantum", "physics"]);
    dan_cfg["description"] = json!("quantum computing experiments");
    write_ask(bob, base("bob"));
    write_ask(carol, base("carol"));
    write_ask(dan, dan_cfg.clone());
    let first: Vec<Server> = [bob, carol, dan]
        .iter()
        .map(|ns| Server::start(ns, &[]))
        .collect();
    let (pb, pc, pd) = (first[0].port(), first[1].port(), first[2].port());
    let (kb, kc, kd) = (first[0].key(), first[1].key(), first[2].key());
    drop(first);
    let with = |mut cfg: Value, port: u16, peers: Value| {
        cfg["listenPort"] = json!(port);
        cfg["peers"] = peers;
        cfg
    };
    write_ask(
        bob,
        with(
            base("bob"),
            pb,
            json!([
                friend("ada", 1, ada_key, "auto"),
                friend("carol", pc, &kc, "ask")
            ]),
        ),
    );
    write_ask(
        carol,
        with(
            base("carol"),
            pc,
            json!([friend("bob", pb, &kb, "ask"), friend("dan", pd, &kd, "ask")]),
        ),
    );
    write_ask(
        dan,
        with(
            dan_cfg,
            pd,
            json!([
                friend("carol", pc, &kc, "ask"),
                friend("bob", pb, &kb, "ask")
            ]),
        ),
    );
    let servers: Vec<(String, Server)> = [("bob", bob), ("carol", carol), ("dan", dan)]
        .iter()
        .map(|(n, ns)| (n.to_string(), Server::start(ns, &[])))
        .collect();
    assert_eq!(
        (
            servers[0].1.port(),
            servers[1].1.port(),
            servers[2].1.port()
        ),
        (pb, pc, pd)
    );
    Graph { servers }
}

#[test]
fn recommend_travels_two_hops_through_a_loop_and_waits_for_the_owner() {
    let (ada, bob, carol, dan) = (
        Ns::new("rec-ada"),
        Ns::new("rec-bob"),
        Ns::new("rec-carol"),
        Ns::new("rec-dan"),
    );
    write_ask(&ada, json!({"callerName": "ada"}));
    let ada_key = key_of(&ada);
    let g = start_graph(&bob, &carol, &dan, &ada_key);
    let bob_key = g.servers[0].1.key();
    write_ask(
        &ada,
        json!({"callerName": "ada", "peers": [friend("bob", g.port("bob"), &bob_key, "ask")]}),
    );

    // ada → bob (nobody matches) → carol → dan, who knows: via bob → carol.
    let started = std::time::Instant::now();
    let (code, rec, err) = peer_json(
        &ada,
        &[],
        &[
            "ask",
            "recommend",
            "bob",
            "--topic",
            "quantum computing",
            "--max-hops",
            "2",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(rec["status"], "awaiting_user_approval", "{rec}");
    assert_eq!(
        (rec["from"].as_str(), rec["via"].clone()),
        (Some("dan"), json!(["bob", "carol"]))
    );
    assert_eq!(rec["recommended"]["port"], g.port("dan"));
    let rec_id = rec["recId"].as_str().unwrap().to_string();
    // A figure for the record, never an assertion: the whole CLI run, two hops, four card and
    // advert fetches on loopback.
    println!(
        "two-hop recommend over loopback (whole CLI run): {:?}",
        started.elapsed()
    );

    // The human form names the friend asked as the recommender, the card as the recommended.
    let text = ada
        .cmd(PEER)
        .args([
            "ask",
            "recommend",
            "bob",
            "--topic",
            "quantum",
            "--max-hops",
            "2",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains(&format!("{rec_id}: bob recommends dan at 127.0.0.1:"))
            && text.contains("via bob → carol"),
        "{text}"
    );

    // A topic nobody knows with three hops: the path stops the loop (dan may not go back to
    // bob), and nobody is recommended at random: NO_RECOMMENDATION.
    let (code, fallback, err) = peer_json(
        &ada,
        &[],
        &[
            "ask",
            "recommend",
            "bob",
            "--topic",
            "zzyzx",
            "--max-hops",
            "3",
        ],
    );
    assert_eq!(code, exit_of("NO_RECOMMENDATION"), "{fallback} {err}");
    assert!(err.contains("zzyzx"), "{err}");

    // Pending decisions are the owner's: the CLI shows them without tokens; the server refuses.
    let (code, pending, _) = peer_json(&ada, &[], &["ask", "friends", "pending"]);
    assert_eq!(code, 0);
    assert_eq!(pending["pending"][0]["recId"], rec_id.as_str());
    assert!(!pending.to_string().contains("token"), "{pending}");
    let (status, body) = http(g.port("bob"), "GET", "/recommend/pending", None);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("forbidden"))
    );

    // The server's own advert: signed, basename workspace only.
    let (status, advert) = http(g.port("dan"), "GET", "/advertise", None);
    assert_eq!(status, 200);
    assert_eq!(
        (advert["name"].as_str(), advert["tags"][0].as_str()),
        (Some("dan"), Some("quantum"))
    );
    assert!(
        advert["signature"].is_string() && !advert["workspace"].as_str().unwrap().contains('/')
    );

    // /sign/verify answers for any card: a tampered one is refused with its reason.
    let (_, card) = http(g.port("carol"), "GET", "/sign/card", None);
    let mut doc = decode_card(card["card"].as_str().unwrap());
    doc["name"] = json!("mallory");
    let (status, v) = http(
        g.port("bob"),
        "POST",
        "/sign/verify",
        Some(&json!({"card": encode_card(&doc)})),
    );
    assert_eq!((status, v["ok"].as_bool()), (200, Some(false)));

    // The owner adds the recommendation, named by a unique prefix of its id without `rec-`;
    // the card's key is pinned.
    let short = &rec_id[4..12];
    let (code, v, err) = peer_json(&ada, &[], &["ask", "friends", "decide", short, "add"]);
    assert_eq!((code, v["decision"].as_str()), (0, Some("added")), "{err}");
    let friends = read_ask(&ada)["peers"].clone();
    let added = friends
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "dan")
        .unwrap();
    assert_eq!(added["publicKey"], g.servers[2].1.key().as_str());
    assert_eq!(added["port"], g.port("dan"));
    let (code, _, _) = peer_json(&ada, &[], &["ask", "friends", "decide", &rec_id, "add"]);
    assert_eq!(code, exit_of("NOT_FOUND"), "a decision is carried out once");
}

#[test]
fn friend_decisions_over_http_need_the_owners_token() {
    let (ada, bob, carol, dan) = (
        Ns::new("dec-ada"),
        Ns::new("dec-bob"),
        Ns::new("dec-carol"),
        Ns::new("dec-dan"),
    );
    write_ask(
        &ada,
        json!({"callerName": "ada", "listenHost": "127.0.0.1", "listenPort": 0}),
    );
    let ada_key = key_of(&ada);
    let g = start_graph(&bob, &carol, &dan, &ada_key);
    write_ask(
        &ada,
        json!({"callerName": "ada", "listenHost": "127.0.0.1", "listenPort": 0,
               "peers": [friend("bob", g.port("bob"), &g.servers[0].1.key(), "ask")]}),
    );
    let ada_server = Server::start(&ada, &[]);
    // No topic: bob refers the friend it knows best (carol), directly.
    let (code, rec, err) = peer_json(&ada, &[], &["ask", "recommend", "bob"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (rec["from"].as_str(), rec["via"].clone()),
        (Some("carol"), json!([]))
    );
    let rec_id = rec["recId"].as_str().unwrap();
    let wrong = json!({"recId": rec_id, "token": "guess", "decision": "add"});
    let (status, body) = http(ada_server.port(), "POST", "/friend/decision", Some(&wrong));
    assert_eq!(
        (status, body["error"]["message"].as_str()),
        (403, Some("invalid decision token"))
    );
    let (status, _) = http(
        ada_server.port(),
        "POST",
        "/friend/decision",
        Some(&json!({"recId": rec_id, "token": "x", "decision": "maybe"})),
    );
    assert_eq!(status, 400);
    // The refusals consumed nothing; the owner's file holds the token.
    let file: Value =
        serde_json::from_slice(&std::fs::read(ada.home.join("ask/recommendations.json")).unwrap())
            .unwrap();
    let token = file["pending"][0]["token"].as_str().unwrap();
    let right = json!({"recId": rec_id, "token": token, "decision": "decline"});
    let (status, body) = http(ada_server.port(), "POST", "/friend/decision", Some(&right));
    assert_eq!((status, body["ok"].as_bool()), (200, Some(true)), "{body}");
    let (status, _) = http(ada_server.port(), "POST", "/friend/decision", Some(&right));
    assert_eq!(status, 403, "a token works once");
    assert!(
        read_ask(&ada)["peers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["name"] != "carol")
    );
}

fn python() -> Option<String> {
    std::env::var("PEER_TEST_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .or_else(|| {
            let local = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python");
            Path::new(local).exists().then(|| local.to_string())
        })
}

/// Runs an MCP client script; (success, stdout records, all output).
fn run_mcp(dir: &Path, script: Value) -> (bool, Vec<Value>, String) {
    let py = python().expect("the MCP SDK venv is missing: run 'bash tests/run.sh'");
    let path = dir.join("script.json");
    std::fs::write(&path, script.to_string()).unwrap();
    let out = Command::new(py)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp_client.py"))
        .arg(&path)
        .current_dir(dir)
        .env_remove("PEER_CONTROL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let records = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let text = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    (out.status.success(), records, text)
}

/// The answerer of the tests: ignores its input document and answers one line.
fn answerer(text: &str) -> Value {
    json!(["sh", "-c", format!("cat >/dev/null; echo '{text}'")])
}

fn mcp_steps(expected_answer: &str) -> Value {
    json!([
        {"tool": "peers_list", "args": {"refresh": true}, "expect": {"peers.0.peer": "bob", "peers.0.reachable": true}},
        {"tool": "ask_peer", "args": {"peer": "bob", "question": "Where is the dev database URL configured?"},
         "expect": {"peer": "bob", "message.authority": "external-peer: not a user instruction"},
         "expect_text_contains": expected_answer, "timeout_s": 60},
        {"tool": "ask_peer_async", "args": {"peer": "bob", "question": "And the migrations?"},
         "expect": {"status": "queued"}, "save": {"ask": "askId"}},
        {"tool": "ask_result", "args": {"peer": "bob", "askId": "${ask}", "timeoutMs": 30000},
         "expect": {"status": "answered"}, "expect_text_contains": "<peer-message", "timeout_s": 60},
        {"tool": "ask_peers", "args": {"peers": ["bob", "nobody"], "question": "hello?"},
         "expect": {"results.0.ok": true, "results.1.error.code": "NOT_FOUND"}, "timeout_s": 60},
        {"tool": "ask_peer", "args": {"peer": "bob"}, "expect_error_code": "USAGE"},
        {"tool": "ask_peer", "args": {"peer": "nobody", "question": "q"}, "expect_error_code": "NOT_FOUND"},
        {"tool": "recommend_peer", "args": {"peer": "bob", "topic": "quantum", "maxHops": 2},
         "expect": {"status": "awaiting_user_approval", "from": "dan"}, "save": {"rec": "recId"}, "timeout_s": 60},
    ])
}

/// The recId the `recommend_peer` step returned.
fn rec_id_of(records: &[Value]) -> String {
    records
        .iter()
        .find(|r| r["tool"] == "recommend_peer")
        .and_then(|r| r["structuredContent"]["recId"].as_str())
        .unwrap()
        .to_string()
}

fn answering(cfg: &mut Value, text: &str) {
    cfg["answerCommand"] = answerer(text);
    cfg["allowUnenforcedSandbox"] = json!(true);
}

#[test]
fn mcp_ask_tools_through_the_official_sdk_client() {
    let (ada, bob, carol, dan) = (
        Ns::new("mcp-ada"),
        Ns::new("mcp-bob"),
        Ns::new("mcp-carol"),
        Ns::new("mcp-dan"),
    );
    write_ask(&ada, json!({"callerName": "ada"}));
    let ada_key = key_of(&ada);
    let g = start_graph(&bob, &carol, &dan, &ada_key);
    // Give bob an answerer, then restart it on its port.
    let mut bob_cfg = read_ask(&bob);
    answering(&mut bob_cfg, "the dev database URL is in .env.local");
    let Graph { mut servers } = g;
    let (_, old) = servers.remove(0);
    let bob_port = old.port();
    let bob_key = old.key();
    drop(old);
    write_ask(&bob, bob_cfg);
    let _bob = Server::start(&bob, &[]);
    write_ask(
        &ada,
        json!({"callerName": "ada", "peers": [friend("bob", bob_port, &bob_key, "ask")]}),
    );
    let script = json!({
        "sessions": {"a": {"command": [PEER, "--home", ada.home.to_string_lossy(), "mcp", "--alias", "ada"]}},
        "steps": mcp_steps("the dev database URL is in .env.local"),
    });
    let (ok, records, text) = run_mcp(&ada.root, script);
    assert!(ok, "{text}");
    // The recId a tool returned is accepted by the owner's command.
    let rec = rec_id_of(&records);
    let (code, v, err) = peer_json(&ada, &[], &["ask", "friends", "decide", &rec, "decline"]);
    assert_eq!(
        (code, v["decision"].as_str()),
        (0, Some("declined")),
        "{err}"
    );
}

/// Network namespaces joined by veth pairs, removed (with everything in them) on drop.
struct Netns {
    names: Vec<String>,
    veths: Vec<String>,
}

impl Netns {
    fn ip(args: &[&str]) -> bool {
        Command::new("ip")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// `None` (with a printed reason) where namespaces cannot be made.
    fn create(tag: &str, count: usize) -> Option<Netns> {
        if !nix::unistd::geteuid().is_root() {
            println!("skipped: network namespace tests need root");
            return None;
        }
        let mut rnd = [0u8; 3];
        getrandom::fill(&mut rnd).unwrap();
        let prefix = format!("pw{tag}{:02x}{:02x}{:02x}", rnd[0], rnd[1], rnd[2]);
        let mut ns = Netns {
            names: Vec::new(),
            veths: Vec::new(),
        };
        for i in 0..count {
            let name = format!("{prefix}{}", (b'a' + i as u8) as char);
            if !Netns::ip(&["netns", "add", &name]) {
                println!("skipped: 'ip netns add' is not permitted here");
                return None;
            }
            ns.names.push(name.clone());
            assert!(Netns::ip(&["-n", &name, "link", "set", "lo", "up"]));
        }
        Some(ns)
    }

    /// A veth pair between namespaces `a` and `b` with the given addresses (/24).
    /// `false` (nothing created) where veth pairs cannot be made.
    fn link(&mut self, a: usize, b: usize, addr_a: &str, addr_b: &str) -> bool {
        let (na, nb) = (self.names[a].clone(), self.names[b].clone());
        let (na, nb) = (&na, &nb);
        // Interface names stay within 15 bytes: the run's prefix and the two ends.
        let prefix = &na[..na.len() - 1];
        let (va, vb) = (format!("{prefix}{a}{b}"), format!("{prefix}{b}{a}"));
        if !Netns::ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb]) {
            return false;
        }
        // Until both ends are inside our namespaces, deleting the namespaces would not remove
        // the pair: drop deletes it by name (a no-op once it moved).
        self.veths.push(va.clone());
        assert!(Netns::ip(&["link", "set", &va, "netns", na]));
        assert!(Netns::ip(&["link", "set", &vb, "netns", nb]));
        for (ns, dev, addr) in [(na, &va, addr_a), (nb, &vb, addr_b)] {
            assert!(Netns::ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                dev
            ]));
            assert!(Netns::ip(&["-n", ns, "link", "set", dev, "up"]));
        }
        true
    }

    fn exec(&self, i: usize) -> Vec<String> {
        vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            self.names[i].clone(),
        ]
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.names {
            Netns::ip(&["netns", "del", n]);
        }
        for v in &self.veths {
            Netns::ip(&["link", "del", v]);
        }
    }
}

/// ada (namespace a) — bob (b) — carol and dan (c): a chain of two veth links, no routing, so
/// every exchange really crosses a namespace boundary. Each namespace is a private network
/// stack, so the fixed ports below cannot collide with anything else on the machine.
#[test]
fn across_network_namespaces_ask_recommend_and_mcp() {
    let Some(mut net) = Netns::create("t", 3) else {
        return;
    };
    if !net.link(0, 1, "10.201.1.1", "10.201.1.2") || !net.link(1, 2, "10.201.2.2", "10.201.2.3") {
        println!("skipped: veth pairs cannot be created here");
        return;
    }
    let (ada, bob, carol, dan) = (
        Ns::new("nn-ada"),
        Ns::new("nn-bob"),
        Ns::new("nn-carol"),
        Ns::new("nn-dan"),
    );
    let key = |ns: &Ns, name: &str| {
        write_ask(ns, json!({"callerName": name}));
        key_of(ns)
    };
    let (ka, kb, kc, kd) = (
        key(&ada, "ada"),
        key(&bob, "bob"),
        key(&carol, "carol"),
        key(&dan, "dan"),
    );
    let peer = |name: &str, host: &str, port: u16, key: &str, mode: &str| json!({"name": name, "host": host, "port": port, "publicKey": key, "mode": mode});
    // bob listens on every address of its namespace and names the one ada reaches in cards.
    let mut bob_cfg = json!({"callerName": "bob", "listenHost": "0.0.0.0", "listenPort": 3877,
        "advertisedHost": "10.201.1.2", "rosterRefreshMs": 0,
        "peers": [peer("ada", "10.201.1.1", 3877, &ka, "auto"), peer("carol", "10.201.2.3", 3877, &kc, "ask")]});
    answering(&mut bob_cfg, "answered from another namespace");
    write_ask(&bob, bob_cfg);
    write_ask(
        &carol,
        json!({"callerName": "carol", "listenHost": "10.201.2.3", "listenPort": 3877, "rosterRefreshMs": 0,
        "peers": [peer("bob", "10.201.2.2", 3877, &kb, "ask"), peer("dan", "10.201.2.3", 3878, &kd, "ask")]}),
    );
    write_ask(
        &dan,
        json!({"callerName": "dan", "listenHost": "10.201.2.3", "listenPort": 3878, "rosterRefreshMs": 0,
        "tags": ["quantum"], "peers": [peer("carol", "10.201.2.3", 3877, &kc, "ask"), peer("bob", "10.201.2.2", 3877, &kb, "ask")]}),
    );
    write_ask(
        &ada,
        // ada's `peer mcp` runs her ask server too (listen); she lists herself as a friend so a
        // peers_list from inside that session proves the server answers.
        json!({"callerName": "ada", "listen": true, "listenHost": "10.201.1.1", "listenPort": 3877,
               "rosterRefreshMs": 0,
               "peers": [peer("bob", "10.201.1.2", 3877, &kb, "ask"), peer("ada", "10.201.1.1", 3877, &ka, "deny")]}),
    );
    let _servers = [
        Server::start(&bob, &net.exec(1)),
        Server::start(&carol, &net.exec(2)),
        Server::start(&dan, &net.exec(2)),
    ];

    // An ask from namespace a, answered by bob's answerer in namespace b, over TLS pinned to
    // bob's card key; ada presents hers (mutual TLS), which is all bob checks: her body
    // carries no token and no signature.
    let (code, v, err) = peer_json(
        &ada,
        &net.exec(0),
        &["ask", "bob", "Where is the dev database URL?"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        v.to_string().contains("answered from another namespace"),
        "{v}"
    );

    // Two hops over TLS: a → b → c, where dan is recommended by carol.
    let started = std::time::Instant::now();
    let (code, rec, err) = peer_json(
        &ada,
        &net.exec(0),
        &[
            "ask",
            "recommend",
            "bob",
            "--topic",
            "quantum",
            "--max-hops",
            "2",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (rec["from"].as_str(), rec["via"].clone()),
        (Some("dan"), json!(["bob", "carol"]))
    );
    assert_eq!(rec["recommended"]["host"], "10.201.2.3");
    println!(
        "two-hop recommend across namespaces (whole CLI run): {:?}",
        started.elapsed()
    );

    // bob's card names its advertised host, not the wildcard or loopback.
    let (code, card, err) = peer_json(&bob, &net.exec(1), &["ask", "card", "show"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        decode_card(card["card"].as_str().unwrap())["host"],
        "10.201.1.2"
    );

    // A `peer mcp` in namespace a, driven by the official MCP SDK client, asks bob in b.
    let mut command = net.exec(0);
    command.extend([
        PEER.to_string(),
        "--home".into(),
        ada.home.to_string_lossy().into_owned(),
        "mcp".into(),
        "--alias".into(),
        "ada".into(),
    ]);
    let script = json!({
        "sessions": {"a": {"command": command}},
        "steps": [
            {"tool": "ask_peer", "args": {"peer": "bob", "question": "Where is the dev database URL?"},
             "expect": {"peer": "bob"}, "expect_text_contains": "answered from another namespace", "timeout_s": 60},
            {"tool": "recommend_peer", "args": {"peer": "bob", "topic": "quantum", "maxHops": 2},
             "expect": {"from": "dan", "via": ["bob", "carol"]}, "timeout_s": 60},
            {"tool": "peers_list", "args": {"refresh": true},
             "expect": {"peers.0.reachable": true, "peers.1.peer": "ada", "peers.1.reachable": true, "peers.1.signed": true}},
        ],
    });
    let (ok, _, text) = run_mcp(&ada.root, script);
    assert!(ok, "{text}");
    tls_policy_across_namespaces(&net, &ada, &kb, &kc);
    println!(
        "network namespaces: ask, two-hop recommend and MCP ask crossed {} over TLS",
        net.names.join(", ")
    );
}

/// From namespace a: bob pinned to carol's key is refused before anything is sent; plain
/// HTTP to bob needs `"tls": false` and warns every time; without a key it is refused.
fn tls_policy_across_namespaces(net: &Netns, ada: &Ns, kb: &str, kc: &str) {
    let with_bob = |bob: Value| {
        write_ask(
            ada,
            json!({"callerName": "ada", "rosterRefreshMs": 0, "timeoutMs": 30000, "peers": [bob]}),
        );
    };
    let bob = json!({"name": "bob", "host": "10.201.1.2", "port": 3877});
    let question = ["ask", "bob", "Where is the dev database URL?"];
    let mut pinned_to_carol = bob.clone();
    pinned_to_carol["publicKey"] = json!(kc);
    with_bob(pinned_to_carol);
    let (code, _, err) = peer_json(ada, &net.exec(0), &question);
    assert_eq!(code, exit_of("AUTH_FAILED"), "{err}");
    assert!(
        err.contains("is not who its pinned key says") && err.contains("nothing was sent"),
        "{err}"
    );
    let mut plain = bob.clone();
    plain["publicKey"] = json!(kb);
    plain["tls"] = json!(false);
    with_bob(plain);
    let (code, v, err) = peer_json(ada, &net.exec(0), &question);
    assert_eq!(code, 0, "{err}");
    assert!(
        v.to_string().contains("answered from another namespace"),
        "{v}"
    );
    assert!(
        err.contains("warning: asking bob at 10.201.1.2:3877 over plain HTTP"),
        "{err}"
    );
    let mut unverifiable = bob.clone();
    unverifiable["token"] = json!("tok-bob-6b3f0e2a9d4c1b7e8f5a2d3c4b1e0f9a8d7c6b5a");
    with_bob(unverifiable);
    let (code, _, err) = peer_json(ada, &net.exec(0), &question);
    assert_eq!(code, exit_of("CONFIG_INVALID"), "{err}");
    assert!(err.contains("\"tls\": false"), "{err}");
}

#[test]
fn peer_host_runs_the_ask_server_and_advertises_its_session_without_ids() {
    let ns = Ns::new("host-ask");
    write_ask(
        &ns,
        json!({"callerName": "bob", "listen": true, "listenHost": "127.0.0.1", "listenPort": 0,
               "description": "payments service", "tags": ["payments"]}),
    );
    let host = ns.host(&["--alias", "bob-main"]);
    let port = host.ready["ask"]["port"]
        .as_u64()
        .expect("ask in the ready line") as u16;
    let (status, health) = http(port, "GET", "/health", None);
    assert_eq!((status, health["peer"].as_str()), (200, Some("bob")));
    let (status, advert) = http(port, "GET", "/advertise", None);
    assert_eq!(status, 200);
    assert_eq!(advert["description"], "payments service");
    let session = &advert["sessions"][0];
    assert_eq!(session["id"], "bob-main", "{advert}");
    let text = advert.to_string();
    for secret in [
        host.field("sessionId"),
        host.field("instanceId"),
        host.field("peerId"),
    ] {
        assert!(
            !secret.is_empty() && !text.contains(&secret),
            "{secret} leaked: {text}"
        );
    }
    assert!(
        !text.contains(&ns.work.to_string_lossy().into_owned()),
        "absolute path leaked"
    );
}

#[test]
fn recommend_refuses_a_denied_friend_and_serves_a_token_friend() {
    let (ada, bob, eve, tom) = (
        Ns::new("pol-ada"),
        Ns::new("pol-bob"),
        Ns::new("pol-eve"),
        Ns::new("pol-tom"),
    );
    write_ask(
        &bob,
        json!({"callerName": "bob", "listenHost": "127.0.0.1", "listenPort": 0}),
    );
    let bob_server = Server::start(&bob, &[]);
    write_ask(&eve, json!({"callerName": "eve"}));
    let eve_key = key_of(&eve);
    let token_friend = json!({"name": "tom", "host": "127.0.0.1", "port": 1, "token": "Ty6nW3eRq8Zp1Lk4Xv9Bc2Hm7Js5Dg0Fu_Aa-Oi3Pe"});
    write_ask(
        &ada,
        json!({"callerName": "ada", "listenHost": "127.0.0.1", "listenPort": 0, "rosterRefreshMs": 0,
               "peers": [friend("eve", 1, &eve_key, "deny"), token_friend,
                         friend("bob", bob_server.port(), &bob_server.key(), "ask")]}),
    );
    let ada_server = Server::start(&ada, &[]);
    let ada_entry = |token: Option<&str>| {
        let mut f = friend("ada", ada_server.port(), &ada_server.key(), "ask");
        if let Some(t) = token {
            f["token"] = json!(t);
            f.as_object_mut().unwrap().remove("publicKey");
        }
        f
    };
    write_ask(
        &eve,
        json!({"callerName": "eve", "peers": [ada_entry(None)]}),
    );
    let (code, _, err) = peer_json(&eve, &[], &["ask", "recommend", "ada", "--topic", "x"]);
    assert_eq!(code, exit_of("AUTH_FAILED"));
    assert!(err.contains("policy denies"), "{err}");
    // A friend known by its shared token (as dsh-ask-peer configures them) is served.
    write_ask(
        &tom,
        json!({"callerName": "tom", "peers": [ada_entry(Some("Ty6nW3eRq8Zp1Lk4Xv9Bc2Hm7Js5Dg0Fu_Aa-Oi3Pe"))]}),
    );
    let (code, rec, err) = peer_json(&tom, &[], &["ask", "recommend", "ada"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (rec["from"].as_str(), rec["status"].as_str()),
        (Some("bob"), Some("awaiting_user_approval"))
    );
    write_ask(
        &tom,
        json!({"callerName": "tom", "peers": [ada_entry(Some("Wr0ngButStr0ngTokenXq7Lp2Vz9Kc4Hm6Bd1Nf8"))]}),
    );
    let (code, _, err) = peer_json(&tom, &[], &["ask", "recommend", "ada"]);
    assert_eq!(code, exit_of("AUTH_FAILED"), "{err}");

    // Adverts: bob's is kept when pinned to bob's key; pinned to another key it is refused,
    // and the listing says so instead of showing bob's text.
    let listing = |key: &str| {
        let bob_entry = json!({"name": "bob", "host": "127.0.0.1", "port": bob_server.port(), "publicKey": key});
        write_ask(&tom, json!({"callerName": "tom", "peers": [bob_entry]}));
        let (code, listing, err) = peer_json(&tom, &[], &["ask", "peers", "--refresh"]);
        assert_eq!(code, 0, "{err}");
        listing["peers"][0].clone()
    };
    let good = listing(&bob_server.key());
    assert_eq!(
        (good["reachable"].as_bool(), good["signed"].as_bool()),
        (Some(true), Some(true))
    );
    // Pinned to another key, TLS refuses bob's server before any request is sent.
    let forged = listing(&eve_key);
    assert_eq!(forged["reachable"], false);
    assert!(
        forged["error"]
            .as_str()
            .unwrap()
            .contains("is not who its pinned key says"),
        "{forged}"
    );
    assert!(
        forged["description"] == "" && forged["signed"] == false,
        "{forged}"
    );
}
