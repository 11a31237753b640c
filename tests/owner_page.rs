//! The owner's approval page of `peer ask serve` between real processes over loopback: the
//! secret (none, wrong, right → cookie), the browser headers, foreign `Host` names, the live
//! event stream showing a new ask, a decision through the page's endpoint answering the asker,
//! and a real browser (Debian's chromium driven by Playwright for Python, `owner_browser.py`)
//! that waits for a hostile ask to appear live, shows it as text and approves it.

use crate::common;

use common::ask::{ask_config, script};
use common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const TOKEN: &str = "kQ3vZr8TnW1pLx6YcB0dHs4JmE9gUf2Ka7oRi5Nw-tA";
const ECHO: &str = "input=$(cat); printf 'answer: %s' \"$input\"";
const HOSTILE: &str = "<script>document.title='pwned';window.__pwned=1</script>\
                       <img src=x onerror=\"window.__pwned=2\"> & where is the db url?";

/// `peer ask serve` for bob (ada in `ask` mode), with its owner URL read from stderr.
struct Bob {
    _serve: common::ask::Server,
    port: u16,
    url: String,
    secret: String,
}

impl Bob {
    fn start(ns: &Ns) -> Bob {
        let echo = script(ns, "echo.sh", ECHO);
        ask_config(
            &ns.home,
            json!({
                "callerName": "bob", "listenPort": 0,
                "workspace": ns.work.to_string_lossy(),
                "answerCommand": [echo], "answerReadPaths": [echo],
                "peers": [{"name": "ada", "host": "127.0.0.1", "token": TOKEN, "mode": "ask"}],
            }),
        );
        let mut serve = common::ask::Server::serve(ns, Stdio::piped());
        let port = serve.port;
        // Read stderr on a thread (it keeps draining it) until the owner line arrives.
        let (tx, rx) = mpsc::channel();
        let err = serve.child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                if let Some(url) = l.strip_prefix("owner page: ") {
                    let _ = tx.send(url.to_string());
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("peer ask serve printed no owner page URL on stderr");
        assert!(
            url.starts_with(&format!("http://127.0.0.1:{port}/owner?secret=")),
            "{url}"
        );
        let secret = url.rsplit_once("secret=").unwrap().1.to_string();
        assert_eq!(secret.len(), 43, "256 bits in base64url");
        Bob {
            _serve: serve,
            port,
            url,
            secret,
        }
    }

    fn cookie(&self) -> String {
        format!("peer-owner-{}={}", self.port, self.secret)
    }
}

/// ada's namespace, knowing bob at `port`.
fn ada(root: &Path, port: u16) -> PathBuf {
    let home = root.join("ada-home");
    ask_config(
        &home,
        json!({"callerName": "ada", "timeoutMs": 30000,
               "peers": [{"name": "bob", "host": "127.0.0.1", "port": port, "token": TOKEN}]}),
    );
    home
}

fn ask(ns: &Ns, home: &Path, question: &str) -> Child {
    ns.cmd(PEER)
        .arg("--home")
        .arg(home)
        .args(["--json", "ask", "bob", question])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The asker's JSON result once it exits.
fn result_of(asker: Child) -> Value {
    let out = asker.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    json_of(&out)
}

/// One raw HTTP exchange: status line code, the head (lower-case) and the body.
fn http(port: u16, request: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, head.to_ascii_lowercase(), body.to_string())
}

fn get(port: u16, path: &str, host: &str, cookie: Option<&str>) -> (u16, String, String) {
    let cookie = cookie
        .map(|c| format!("Cookie: {c}\r\n"))
        .unwrap_or_default();
    http(
        port,
        &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{cookie}Connection: close\r\n\r\n"),
    )
}

fn decide(bob: &Bob, body: &Value, origin: Option<&str>, ctype: &str) -> (u16, String, String) {
    let body = body.to_string();
    let origin = origin
        .map(|o| format!("Origin: {o}\r\n"))
        .unwrap_or_default();
    http(
        bob.port,
        &format!(
            "POST /owner/decide HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nCookie: {}\r\n{origin}\
             Content-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            bob.port,
            bob.cookie(),
            body.len()
        ),
    )
}

#[test]
fn the_page_needs_the_secret_a_loopback_host_and_sends_browser_headers() {
    let ns = Ns::new("owner-secret");
    let bob = Bob::start(&ns);
    let host = format!("127.0.0.1:{}", bob.port);
    // No secret, a wrong one, a wrong cookie: 403, and the page is not in the answer.
    let (code, _, body) = get(bob.port, "/owner", &host, None);
    assert_eq!(code, 403);
    assert!(!body.contains("<html"));
    let wrong = format!("/owner?secret={}", "A".repeat(43));
    assert_eq!(get(bob.port, &wrong, &host, None).0, 403);
    let bad_cookie = format!("peer-owner-{}={}", bob.port, "A".repeat(43));
    assert_eq!(get(bob.port, "/owner", &host, Some(&bad_cookie)).0, 403);
    for path in ["/owner/events", "/owner/state", "/owner/app.js"] {
        assert_eq!(get(bob.port, path, &host, None).0, 403, "{path}");
    }
    // The right secret becomes an HttpOnly, SameSite=Strict cookie and leaves the URL.
    let path = bob.url.split_once(&host).unwrap().1;
    let (code, head, _) = get(bob.port, path, &host, None);
    assert_eq!(code, 303);
    assert!(head.contains("location: /owner\r\n"), "{head}");
    let set = format!(
        "set-cookie: {}; path=/owner; httponly; samesite=strict",
        bob.cookie().to_ascii_lowercase()
    );
    assert!(head.contains(&set), "{head}");
    // With the cookie: the page and its script, with the browser headers and no CORS.
    let (code, head, body) = get(bob.port, "/owner", &host, Some(&bob.cookie()));
    assert_eq!(code, 200);
    assert!(body.contains("<script src=\"/owner/app.js\""));
    for needed in [
        "content-security-policy: default-src 'none'; script-src 'self';",
        "x-frame-options: deny",
        "cache-control: no-store",
        "referrer-policy: no-referrer",
    ] {
        assert!(head.contains(needed), "{needed} in {head}");
    }
    assert!(!head.contains("access-control-allow-origin"));
    let (code, head, _) = get(bob.port, "/owner/app.js", &host, Some(&bob.cookie()));
    assert_eq!(code, 200);
    assert!(head.contains("content-type: text/javascript"));
    // A site rebinding its name to 127.0.0.1 names itself as the Host: not found, even with
    // the secret; so does a caller naming no host.
    let evil = format!("evil.example:{}", bob.port);
    assert_eq!(get(bob.port, "/owner", &evil, Some(&bob.cookie())).0, 404);
    assert_eq!(get(bob.port, path, &evil, None).0, 404);
    let (code, _, _) = http(bob.port, "GET /owner HTTP/1.0\r\nConnection: close\r\n\r\n");
    assert_eq!(code, 404);
    // Decisions: JSON only, from the page's own origin only.
    let body = json!({"kind": "ask", "id": "x", "decision": "approve"});
    let own = format!("http://{host}");
    assert_eq!(decide(&bob, &body, None, "application/json").0, 403);
    let foreign = Some("http://evil.example");
    assert_eq!(decide(&bob, &body, foreign, "application/json").0, 403);
    assert_eq!(decide(&bob, &body, Some(&own), "text/plain").0, 415);
    assert_eq!(decide(&bob, &body, Some(&own), "application/json").0, 404);
}

/// Reads server-sent events until one `state` event satisfies `want`.
fn next_state(lines: &mut impl Iterator<Item = String>, want: impl Fn(&Value) -> bool) -> Value {
    for line in lines {
        if let Some(data) = line.strip_prefix("data: ") {
            let v: Value = serde_json::from_str(data).unwrap();
            if want(&v) {
                return v;
            }
        }
    }
    panic!("the event stream ended without the wanted state");
}

#[test]
fn the_event_stream_shows_a_new_ask_and_the_page_decision_answers_the_asker() {
    let ns = Ns::new("owner-events");
    let bob = Bob::start(&ns);
    let home = ada(&ns.root, bob.port);
    let mut s = TcpStream::connect(("127.0.0.1", bob.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET /owner/events HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nCookie: {}\r\n\r\n",
        bob.port,
        bob.cookie()
    )
    .unwrap();
    let mut lines = BufReader::new(s).lines().map_while(Result::ok);
    let status = lines.next().unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert!(
        lines
            .by_ref()
            .take_while(|l| !l.is_empty())
            .any(|l| l.eq_ignore_ascii_case("content-type: text/event-stream"))
    );
    let first = next_state(&mut lines, |_| true);
    assert_eq!(first["peer"], "bob");
    assert_eq!(first["asks"], json!([]));

    let asker = ask(&ns, &home, HOSTILE);
    let seen = next_state(&mut lines, |v| {
        v["asks"].as_array().is_some_and(|a| !a.is_empty())
    });
    let a = &seen["asks"][0];
    assert_eq!(a["caller"], "ada");
    assert_eq!(
        a["question"], HOSTILE,
        "raw text; the page renders it as text"
    );
    assert!(a.get("decisionToken").is_none() && a.get("token").is_none());
    assert!(a["expiresAt"].as_str().is_some_and(|e| !e.is_empty()));
    let id = a["askId"].as_str().unwrap().to_string();

    let own = format!("http://127.0.0.1:{}", bob.port);
    let body = json!({"kind": "ask", "id": id, "decision": "approve"});
    let (code, _, reply) = decide(&bob, &body, Some(&own), "application/json");
    assert_eq!(code, 200, "{reply}");
    let v = result_of(asker);
    assert!(
        v["answer"]
            .as_str()
            .unwrap()
            .contains("where is the db url?")
    );
    // Decided once: the list empties on the stream and a second decision finds nothing.
    next_state(&mut lines, |v| v["asks"] == json!([]));
    assert_eq!(decide(&bob, &body, Some(&own), "application/json").0, 404);
}

fn python() -> Option<String> {
    let p = std::env::var("PEER_TEST_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python").to_string());
    Path::new(&p).exists().then_some(p)
}

#[test]
fn a_real_browser_sees_the_ask_live_shows_it_as_text_and_approves_it() {
    let chromium = "/usr/bin/chromium";
    if !Path::new(chromium).exists() {
        eprintln!("skipped: {chromium} is missing (apt-get install chromium; tests/run.sh does)");
        return;
    }
    let Some(python) = python() else {
        eprintln!("skipped: no Python venv with Playwright (run 'bash tests/run.sh')");
        return;
    };
    let has_playwright = std::process::Command::new(&python)
        .args(["-c", "import playwright.sync_api"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_playwright {
        eprintln!("skipped: Playwright for Python is not installed in {python} (tests/run.sh)");
        return;
    }
    let ns = Ns::new("owner-browser");
    let bob = Bob::start(&ns);
    let home = ada(&ns.root, bob.port);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/owner_browser.py");
    let mut browser = std::process::Command::new(&python)
        .arg(script)
        .arg(&bob.url)
        .arg(HOSTILE)
        .env("PEER_BROWSER", chromium)
        .env("HOME", &ns.root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The browser opens the page first; the ask arrives while it is open (live, over SSE).
    let mut out = BufReader::new(browser.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "page open", "{line}");
    let mut asker = ask(&ns, &home, HOSTILE);
    // The script sees the ask arrive, checks it, clicks Approve and exits.
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let mut err = String::new();
    browser
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = browser.wait().unwrap();
    if !status.success() {
        let _ = asker.kill();
        panic!("browser script failed: {rest}\n{err}");
    }
    assert!(rest.contains("approved"), "{rest}");
    let v = result_of(asker);
    assert!(
        v["answer"]
            .as_str()
            .unwrap()
            .contains("where is the db url?")
    );
}

#[test]
fn a_recommendation_shows_on_the_page_and_is_added_from_it() {
    let ns = Ns::new("owner-recs");
    let bob = Bob::start(&ns);
    let key = peerwire::ask::keys::AskKey::from_seed(&[7u8; 32]);
    let now = peerwire::clock::now_ms();
    let description = "<img src=x onerror=alert(1)> knows the billing service";
    let card = peerwire::ask::card::issue(
        &peerwire::ask::card::Issue {
            name: "carol",
            host: "127.0.0.1",
            port: 4999,
            public: &key.public(),
            description,
            tags: &[],
            issued: now,
            tls: true,
        },
        |m| key.sign(m),
    );
    let store = peerwire::ask::recommend::pending::Store::new(&ns.home.join("ask"));
    let rec = store
        .add(
            "ada",
            Default::default(),
            &card,
            &key.sign_string(),
            None,
            now,
        )
        .unwrap();
    let host = format!("127.0.0.1:{}", bob.port);
    let (code, _, body) = get(bob.port, "/owner/state", &host, Some(&bob.cookie()));
    assert_eq!(code, 200);
    let state: Value = serde_json::from_str(&body).unwrap();
    let r = &state["recommendations"][0];
    assert_eq!(r["recId"], rec.rec_id.as_str());
    assert_eq!(r["from"], "ada");
    assert_eq!(r["peer"]["name"], "carol");
    assert!(r.get("token").is_none() && r.get("card").is_none());
    assert!(
        !body.contains(&rec.token),
        "the decision token stays private"
    );

    let own = format!("http://{host}");
    let add = json!({"kind": "recommendation", "id": rec.rec_id, "decision": "add"});
    let (code, _, reply) = decide(&bob, &add, Some(&own), "application/json");
    assert_eq!(code, 200, "{reply}");
    let config = std::fs::read_to_string(ns.home.join("config.json")).unwrap();
    assert!(config.contains("\"carol\""), "{config}");
    assert!(store.list(peerwire::clock::now_ms()).unwrap().is_empty());
    assert_eq!(decide(&bob, &add, Some(&own), "application/json").0, 404);
}

#[test]
fn event_streams_are_bounded() {
    let ns = Ns::new("owner-streams");
    let bob = Bob::start(&ns);
    let open = || {
        let mut s = TcpStream::connect(("127.0.0.1", bob.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(
            s,
            "GET /owner/events HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nCookie: {}\r\n\r\n",
            bob.port,
            bob.cookie()
        )
        .unwrap();
        let mut r = BufReader::new(s);
        let mut status = String::new();
        r.read_line(&mut status).unwrap();
        (status, r)
    };
    // Two streams hold their places while open; a third is refused until one closes.
    let (a, first) = open();
    let (b, _second) = open();
    assert!(
        a.starts_with("HTTP/1.1 200") && b.starts_with("HTTP/1.1 200"),
        "{a} {b}"
    );
    let (c, _) = open();
    assert!(c.starts_with("HTTP/1.1 429"), "{c}");
    drop(first);
    // The server notices the closed stream at its next write (a change or the heartbeat).
    assert!(eventually(30, || open().0.starts_with("HTTP/1.1 200")));
}
