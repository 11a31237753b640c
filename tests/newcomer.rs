//! A newcomer's first hour: every step the README and the man pages describe works as written,
//! and every command speaks one language (names, ids, errors) — each test here was a stumble.

use crate::common;

use common::*;
use serde_json::{Value, json};
use std::io::Write;
use std::process::Stdio;

/// Runs `peer mcp` in `ns`, writes `lines` (one JSON-RPC message each), reads `expect` answer
/// lines (stdin stays open meanwhile: its end cancels calls in flight), then closes stdin; the
/// answers, in order.
fn mcp_session(ns: &Ns, lines: &[Value], expect: usize) -> Vec<Value> {
    use std::io::BufRead;
    let mut child = ns
        .cmd(PEER)
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
    }
    // A server that never answers is ended after 30 s, so the test fails instead of hanging.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let watchdog = std::thread::spawn(move || {
        if done_rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .is_err()
        {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
    });
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let got: Vec<Value> = stdout
        .lines()
        .map_while(|l| l.ok())
        .filter_map(|l| serde_json::from_str(&l).ok())
        .take(expect)
        .collect();
    drop(stdin);
    let _ = child.wait();
    let _ = done_tx.send(());
    let _ = watchdog.join();
    got
}

fn init_lines(version: &str) -> Vec<Value> {
    vec![
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ]
}

#[test]
fn mcp_help_does_not_advise_a_fixed_alias() {
    let ns = Ns::new("mcphelp");
    let o = ns.peer(&["mcp", "--help"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    assert!(!text.contains("--alias NAME"), "{text}");
    assert!(text.contains("command 'peer mcp'"), "{text}");
}

#[test]
fn ask_tools_are_not_listed_without_friends() {
    let ns = Ns::new("noaskt");
    let mut lines = init_lines("2025-11-25");
    lines.push(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    lines.push(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "ask_peer", "arguments": {"peer": "bob", "question": "q"}}}));
    let out = mcp_session(&ns, &lines, 3);
    let list = out
        .iter()
        .find(|m| m["id"] == 2)
        .expect("tools/list answered");
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "list_peers",
            "send_peer_message",
            "peer_messages",
            "coordinate_resource"
        ]
    );
    let call = out
        .iter()
        .find(|m| m["id"] == 3)
        .expect("tools/call answered");
    let msg = call["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("friends configured"), "{call}");
}

fn write_ask(ns: &Ns, ask: Value) {
    common::ask::ask_config(&ns.home, ask);
}

#[test]
fn a_loopback_card_is_issued_and_added_with_a_warning() {
    let (bob, ada) = (Ns::new("lcard-bob"), Ns::new("lcard-ada"));
    write_ask(&bob, json!({"callerName": "bob"}));
    write_ask(&ada, json!({"callerName": "ada"}));
    // Without listenHost the card names 127.0.0.1: said, not silent.
    let o = bob.peer(&["--json", "ask", "card", "show"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("loopback"), "{}", stderr(&o));
    let loopback = json_of(&o)["card"].as_str().unwrap().to_string();
    let o = bob.peer(&["--json", "ask", "card", "show", "--host", "10.0.0.2"]);
    assert!(
        o.status.success() && !stderr(&o).contains("loopback"),
        "{}",
        stderr(&o)
    );
    let reachable = json_of(&o)["card"].as_str().unwrap().to_string();
    let o = ada.peer(&["ask", "card", "add", &reachable]);
    assert!(
        o.status.success() && !stderr(&o).contains("loopback"),
        "{}",
        stderr(&o)
    );
    // The same friend's card for loopback moves it: a warning names both addresses.
    let o = ada.peer(&["ask", "card", "add", &loopback, "--replace"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("moves from 10.0.0.2:3877 to 127.0.0.1:3877"),
        "{}",
        stderr(&o)
    );
}

/// One naming rule: wherever a peer is shown to a person it is `alias (peerId)`, as `send`
/// shows it: reply, status, inbox receipts and consume (which names the sender, not itself).
#[test]
fn every_receipt_line_names_the_peer_by_alias() {
    let ns = Ns::new("names");
    let out = ns.root.join("out");
    let done = ns.root.join("done");
    let env_out = format!("OUT={}", out.display());
    let env_done = format!("DONE={}", done.display());
    let bob_script = r#"
        j=$(peer --json inbox --wait 20000) || exit 90
        id=$(printf '%s' "$j" | sed -n 's/.*"messageId":"\([^"]*\)".*/\1/p' | head -n 1)
        { echo "REPLY $(peer reply "$id" pong)"; echo "CONSUME $(peer consume "$id")"; } >>"$OUT"
        for i in $(seq 200); do [ -e "$DONE" ] && exit 0; sleep 0.1; done
    "#;
    let alice_script = r#"
        j=$(peer --json send @bob hi) || exit 80
        id=$(printf '%s' "$j" | sed -n 's/.*"messageId":"\([^"]*\)".*/\1/p')
        peer --json inbox --reply-to "$id" --wait 20000 >/dev/null || exit 81
        for i in $(seq 100); do peer status "$id" | grep -q replied && break; sleep 0.05; done
        { echo "STATUS $(peer status "$id")"; peer inbox --all | sed 's/^/INBOX /'; } >>"$OUT"
        : >"$DONE"
    "#;
    let _bob = ns.host(&[
        "--alias", "bob", "--", "env", &env_out, &env_done, "sh", "-c", bob_script,
    ]);
    let o = ns.peer(&[
        "host",
        "--alias",
        "alice",
        "--",
        "env",
        &env_out,
        &env_done,
        "sh",
        "-c",
        alice_script,
    ]);
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(o.status.success(), "{text} {}", stderr(&o));
    let line = |tag: &str| {
        text.lines()
            .find(|l| l.starts_with(tag))
            .unwrap_or_else(|| panic!("no {tag} line in {text}"))
            .to_string()
    };
    assert!(line("REPLY ").contains("accepted alice (p-"), "{text}");
    assert!(line("CONSUME ").contains(" from alice (p-"), "{text}");
    assert!(line("STATUS ").contains("replied bob (p-"), "{text}");
    assert!(line("INBOX receipt:").contains("bob (p-"), "{text}");
}

#[test]
fn peer_dir_outside_the_workspace_hints_and_gives_reasons() {
    let ns = Ns::new("dirhint");
    let elsewhere = ns.root.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let elsewhere = elsewhere.to_string_lossy().into_owned();
    let _bob = ns.host(&["--alias", "bob", "--", "sleep", "30"]);
    let o = ns.peer_dir(&["--workspace", &elsewhere]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("1 live peer(s) elsewhere") && stderr(&o).contains("--all"),
        "{}",
        stderr(&o)
    );
    let all = ns.listing(&["--all", "--workspace", &elsewhere]);
    let bob = all
        .iter()
        .find(|p| p["alias"] == "bob")
        .expect("bob listed");
    assert_eq!(bob["inScope"], false);
    assert_eq!(bob["reason"], "outside your workspace scope", "{bob}");
    // In scope: no reason, no hint.
    let o = ns.peer_dir(&[]);
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    let here = ns.listing(&["--all"]);
    assert!(
        here.iter()
            .any(|p| p["alias"] == "bob" && p["reason"].is_null())
    );
}

#[test]
fn peer_run_refuses_a_missing_command_before_queueing_and_names_whose_ticket() {
    let ns = Ns::new("runmiss");
    let flag = ns.root.join("held");
    let mut holder = ns
        .cmd(PEER)
        .args(["run", "--resource", "port:3000", "--", "sh", "-c"])
        .arg(format!(": >'{}'; sleep 30", flag.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(20, || flag.exists()), "the holder never ran");
    let started = std::time::Instant::now();
    let o = ns.peer(&[
        "run",
        "--resource",
        "port:3000",
        "--wait",
        "3000",
        "--",
        "nonexistent-cmd-35",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(127), "{err}");
    assert!(err.starts_with("peer: NOT_FOUND: "), "{err}");
    assert!(!err.contains("waiting for"), "queued first: {err}");
    println!("refused after {:?}", started.elapsed());
    // A command that exists queues, and the line says the ticket is the waiter's own.
    let o = ns.peer(&[
        "run",
        "--resource",
        "port:3000",
        "--wait",
        "300",
        "--",
        "true",
    ]);
    let err = stderr(&o);
    assert!(
        err.contains("held by")
            && err.contains("; your ticket is t-")
            && err.contains("number 1 in the queue"),
        "{err}"
    );
    // SIGTERM: the gate forwards it to its command and releases the grant.
    let pid = nix::unistd::Pid::from_raw(holder.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let _ = holder.wait();
}

#[test]
fn inbox_wait_over_the_limit_names_the_cli_flag() {
    let ns = Ns::new("waitmax");
    let host = ns.host(&["--alias", "x", "--", "sleep", "30"]);
    let o = peer_as(&ns, &host, &["inbox", "--wait", "60000"]);
    let err = stderr(&o);
    assert_eq!(
        o.status.code(),
        Some(exit_of(peerwire::error::Code::Usage)),
        "{err}"
    );
    assert!(err.contains("--wait takes at most 30000 ms"), "{err}");
    assert!(
        !err.contains("peer_messages") && !err.contains("waitMs`"),
        "{err}"
    );
}

#[test]
fn the_tools_answer_version_and_every_page_has_one_header() {
    let ns = Ns::new("version");
    let want = env!("CARGO_PKG_VERSION");
    for (bin, name) in [
        (PEER, "peer"),
        (PEER_DIR, "peer-dir"),
        (PEER_RES, "peer-res"),
    ] {
        let o = ns.cmd(bin).arg("--version").output().unwrap();
        assert!(o.status.success(), "{name} --version: {}", stderr(&o));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim(),
            format!("{name} {want}")
        );
    }
    for dir in ["man/man1", "man/man5", "man/man7"] {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap();
            let th = text.lines().next().unwrap_or_default();
            let stem = e
                .path()
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .to_uppercase();
            assert!(
                th.starts_with(&format!(".TH {} ", stem.replace('-', "\\-")))
                    && th.ends_with(&format!("\"peerwire {want}\" \"peerwire manual\"")),
                "{}: {th}",
                e.path().display()
            );
        }
    }
}

#[test]
fn res_status_shows_the_launch_lines_peer_res_shows() {
    let ns = Ns::new("reslaunch");
    let flag = ns.root.join("running");
    let mut gate = ns
        .cmd(PEER)
        .args(["run", "--resource", "port:3100", "--", "sh", "-c"])
        .arg(format!(": >'{}'; sleep 30", flag.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(20, || flag.exists()), "the command never ran");
    let viewer = ns.cmd(PEER_RES).output().unwrap();
    let viewer = String::from_utf8_lossy(&viewer.stdout).into_owned();
    assert!(viewer.contains("  launch "), "{viewer}");
    for args in [&["res", "status"][..], &["res", "status", "port:3100"][..]] {
        let o = ns.peer(args);
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("  launch "), "peer {args:?}: {text}");
    }
    let pid = nix::unistd::Pid::from_raw(gate.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let _ = gate.wait();
}

/// An autoCommand finds the running `peer` first on its PATH, as a `peer host -- CMD` child
/// does: `sh -c 'peer reply …'` works where peer is not installed.
#[test]
fn an_auto_command_finds_the_running_peer() {
    let ns = Ns::new("autopath");
    ns.config(json!({
        "idleBehavior": "auto",
        "autoCommand": ["sh", "-c", "peer reply \"$PEER_MESSAGE_ID\" auto-pong"],
    }));
    let pong = ns.host_with(&["--alias", "pong"], |c| {
        c.env("PATH", "/usr/bin:/bin");
    });
    let ping = ns.host(&["--alias", "ping", "--", "sleep", "60"]);
    let o = peer_as(&ns, &ping, &["send", "@pong", "hello"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = || {
        let v = json_of(&peer_as(&ns, &ping, &["--json", "inbox", "--all"]));
        v.to_string().contains("auto-pong")
    };
    assert!(eventually(30, got), "the autoCommand's reply never came");
    drop(pong);
}

/// Under MCP 2025-03-26 a JSON-RPC batch is answered by one array (JSON-RPC 2.0 §6), the
/// answers of tool calls included; notifications in it add nothing.
#[test]
fn a_batch_is_answered_with_one_array() {
    let ns = Ns::new("batch");
    let mut lines = init_lines("2025-03-26");
    lines.push(json!([
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/whatever"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "list_peers", "arguments": {}}},
        {"jsonrpc": "2.0", "id": 4, "method": "no/such/method"},
    ]));
    lines.push(json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}));
    let out = mcp_session(&ns, &lines, 3);
    let batch: Vec<&Value> = out.iter().filter(|m| m.is_array()).collect();
    assert_eq!(batch.len(), 1, "{out:?}");
    let mut ids: Vec<i64> = batch[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [2, 3, 4], "{out:?}");
    let loose: Vec<&Value> = out.iter().filter(|m| m.is_object()).collect();
    assert!(
        loose.iter().all(|m| m["id"] == 1 || m["id"] == 5),
        "answers outside the array: {out:?}"
    );
}

/// `peer ask serve --json` in `ns`, with a `PATH` that has no `peer` on it; the child and its
/// ready line (the child's stderr is piped).
fn ask_serve(ns: &Ns) -> (std::process::Child, Value) {
    let mut serve = ns.cmd(PEER);
    serve
        .args(["--json", "ask", "serve"])
        .env("PATH", "/usr/bin:/bin");
    let (child, line) = common::ask::first_line(serve, Stdio::piped());
    let ready: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
    (child, ready)
}

fn stop_and_stderr(mut child: std::process::Child) -> String {
    use std::io::Read;
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let _ = child.wait();
    err
}

/// The README's ask example with the answerer that ships, across two loopback addresses: bob
/// serves on 127.0.0.2 and answers from his workspace; a failing answerer is named on both
/// sides; a missing one is refused at start.
#[test]
fn the_shipped_answerer_answers_from_the_workspace() {
    let (bob, ada) = (Ns::new("ans-bob"), Ns::new("ans-ada"));
    std::fs::write(
        bob.work.join("docker-compose.yml"),
        "services:\n  app:\n    environment:\n      DATABASE_URL: postgres://dev@db/app\n",
    )
    .unwrap();
    std::fs::create_dir_all(bob.work.join("src")).unwrap();
    std::fs::write(
        bob.work.join("src/db.rs"),
        "// reads DATABASE_URL at start\n",
    )
    .unwrap();
    let bob_cfg = |answer: Value| {
        json!({"callerName": "bob", "listenHost": "127.0.0.2", "listenPort": 0,
               "workspace": bob.work.to_string_lossy(), "answerCommand": answer,
               "allowUnenforcedSandbox": true,
               "peers": [{"name": "ada", "host": "127.0.0.1", "token": "tok-ada-7f3c9e1b5d2a8064c1e9", "mode": "auto"}]})
    };
    // A missing answerer is refused at start, naming it.
    write_ask(&bob, bob_cfg(json!(["/nonexistent/answer-with-agent"])));
    let (child, ready) = ask_serve(&bob);
    let err = stop_and_stderr(child);
    assert_eq!(ready["error"]["code"], "CONFIG_INVALID", "{ready} {err}");
    let msg = ready["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("/nonexistent/answer-with-agent"), "{ready}");
    // The shipped one, written as in the README, answers with file:line excerpts: "peer" is
    // the running peer even where it is not on the server's PATH.
    write_ask(
        &bob,
        bob_cfg(json!(["peer", "ask", "answer", "--from-workspace"])),
    );
    let (child, ready) = ask_serve(&bob);
    assert_eq!(ready["ok"], true, "{ready}");
    let port = ready["port"].as_u64().unwrap();
    write_ask(
        &ada,
        json!({"callerName": "ada", "timeoutMs": 30000,
               "peers": [{"name": "bob", "host": "127.0.0.2", "port": port, "token": "tok-ada-7f3c9e1b5d2a8064c1e9"}]}),
    );
    let o = ada.peer(&[
        "ask",
        "bob",
        "where is the DATABASE_URL configured?",
        "--context-file",
        "docker-compose.yml",
    ]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = stop_and_stderr(child);
    assert!(o.status.success(), "{} {err}", stderr(&o));
    assert!(
        text.contains("docker-compose.yml:4: DATABASE_URL: postgres://dev@db/app"),
        "{text}"
    );
    assert!(text.contains("src/db.rs:1:"), "{text}");
    // A failing answerer is named to the asker and on the server's stderr.
    write_ask(
        &bob,
        bob_cfg(json!(["sh", "-c", "cat >/dev/null; exit 35"])),
    );
    let (child, ready) = ask_serve(&bob);
    let port = ready["port"].as_u64().unwrap();
    write_ask(
        &ada,
        json!({"callerName": "ada", "timeoutMs": 30000,
               "peers": [{"name": "bob", "host": "127.0.0.2", "port": port, "token": "tok-ada-7f3c9e1b5d2a8064c1e9"}]}),
    );
    let o = ada.peer(&["ask", "bob", "anything?"]);
    let server_err = stop_and_stderr(child);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("answerCommand \"sh\""),
        "{}",
        stderr(&o)
    );
    assert!(
        server_err.contains("answerCommand \"sh\"") && server_err.contains("status 35"),
        "{server_err}"
    );
}

/// The `--flags` the CLI's parsers accept, read from `Long("…")` in src/cli (alternatives in
/// `Long(flag @ ("a" | "b"))` included); `--help` itself and the internal `sandbox-exec`
/// options (the server's, never typed by a person) left out.
fn parser_flags() -> Vec<String> {
    // `peer ask sandbox-exec` is the ask server's own launcher for answerers, never typed by a
    // person: its flags are not part of the documented command line.
    let internal = [
        "help",
        "scratch",
        "protect",
        "allow-unenforced",
        "workspace",
        "read",
        "hide",
        "proxy",
        "memory-mb",
        "cpu-seconds",
        "processes",
        "reduced",
        "no-namespaces",
        "probe",
        "init",
        "launcher",
        "server",
    ];
    let mut flags: Vec<String> = Vec::new();
    for e in std::fs::read_dir("src/cli").unwrap().flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap();
        for part in text.split("Long(").skip(1) {
            let Some(end) = part.find(") =>") else {
                continue;
            };
            for name in part[..end].split('"').skip(1).step_by(2) {
                let flag = format!("--{name}");
                if !internal.contains(&name) && !flags.contains(&flag) {
                    flags.push(flag);
                }
            }
        }
    }
    flags
}

/// The words of a script, split at blanks and quotes.
fn tokens(script: &str) -> Vec<&str> {
    script
        .split(|c: char| c.is_whitespace() || c == '"')
        .filter(|w| !w.is_empty())
        .collect()
}

fn run_text(bin: &str, args: &[&str]) -> String {
    let o = std::process::Command::new(bin).args(args).output().unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Every subcommand and every flag the parsers accept is in the `--help` texts and in the
/// three completion scripts; the scripts cover `peer-dir` and `peer-res`, list the actions of
/// `peer ask` and the shells of `peer completions`, complete flag values, and name no word
/// twice.
#[test]
fn completions_and_help_cover_every_parsed_subcommand_and_flag() {
    let top = run_text(PEER, &["--help"]);
    let subs: Vec<String> = top
        .lines()
        .filter_map(|l| l.strip_prefix("  ")?.split_whitespace().next())
        .filter(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        .map(str::to_string)
        .collect();
    assert!(subs.len() > 10, "{top}");
    let mut help = top.clone();
    for s in &subs {
        help.push_str(&run_text(PEER, &[s, "--help"]));
    }
    for s in ["answer", "peers", "card", "recommend", "friends"] {
        help.push_str(&run_text(PEER, &["ask", s, "--help"]));
    }
    help.push_str(&run_text(PEER_DIR, &["--help"]));
    help.push_str(&run_text(PEER_RES, &["--help"]));
    let (bash, fish) = (
        run_text(PEER, &["completions", "bash"]),
        run_text(PEER, &["completions", "fish"]),
    );
    let zsh = run_text(PEER, &["completions", "zsh"]);
    // The bash script parses (bash is on every CI machine this runs on).
    let syntax = std::process::Command::new("bash")
        .args(["-n", "-c", &bash])
        .output()
        .unwrap();
    assert!(syntax.status.success(), "{}", stderr(&syntax));
    assert!(zsh.contains(&bash) && zsh.starts_with("#compdef peer peer-dir peer-res"));
    let mut man = String::new();
    for e in std::fs::read_dir("man/man1").unwrap().flatten() {
        man.push_str(
            &std::fs::read_to_string(e.path())
                .unwrap()
                .replace("\\-", "-"),
        );
    }
    for flag in parser_flags() {
        assert!(
            man.contains(&flag),
            "{flag} is parsed but no man page names it"
        );
        assert!(
            help.contains(&flag),
            "{flag} is parsed but no --help names it"
        );
        assert!(tokens(&bash).contains(&flag.as_str()), "bash lacks {flag}");
        assert!(
            fish.contains(&format!(" -l {} ", &flag[2..]))
                || fish.contains(&format!(" -l {}\n", &flag[2..])),
            "fish lacks {flag}"
        );
    }
    let line = |script: &str, arm: &str| {
        script
            .lines()
            .find(|l| l.trim_start().starts_with(arm))
            .unwrap_or_else(|| panic!("no {arm} arm"))
            .to_string()
    };
    for s in &subs {
        assert!(
            line(&bash, "\"\") words=").contains(&format!(" {s} "))
                || line(&bash, "\"\") words=").contains(&format!("\"{s} ")),
            "bash lacks {s}"
        );
        assert!(fish.contains(&format!("-a {s} -d")), "fish lacks {s}");
    }
    let ask = line(&bash, "\"ask \"*) words=");
    for w in [
        "serve",
        "status",
        "pending",
        "decide",
        "answer",
        "peers",
        "card",
        "recommend",
        "friends",
    ] {
        assert!(
            ask.contains(&format!(" {w} ")) || ask.contains(&format!("\"{w} ")),
            "{ask}"
        );
        assert!(
            fish.contains(&format!("__fish_seen_subcommand_from ask' -a {w}\n")),
            "fish ask {w}"
        );
    }
    let shells = line(&bash, "\"completions \"*) words=");
    assert!(shells.contains("\"bash zsh fish "), "{shells}");
    assert!(
        bash.contains("--notify) COMPREPLY=($(compgen -W \"bell stderr none\""),
        "{bash}"
    );
    assert!(fish.contains("-l notify -xa 'bell stderr none'"), "{fish}");
    assert!(bash.contains("complete -o default -F _peer_tools peer-dir peer-res"));
    assert!(line(&bash, "peer-dir) words=").contains("--scope"));
    assert!(fish.contains("complete -c peer-res -l json"));
    assert!(
        fish.contains("friend\\'s agent"),
        "fish must keep the apostrophe"
    );
    for l in bash.lines().filter(|l| l.contains(" words=\"")) {
        let words: Vec<&str> = l.split('"').nth(1).unwrap().split_whitespace().collect();
        let mut sorted = words.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), words.len(), "a word twice: {l}");
    }
}

/// The bash script run as bash runs it on TAB: `_peer`/`_peer_tools` with the typed words give
/// the next words of the command path, the flags of that path and a one-of flag's values.
#[test]
fn bash_completion_completes_paths_flags_and_values() {
    let script = run_text(PEER, &["completions", "bash"]);
    let complete = |words: &[&str]| -> Vec<String> {
        let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
        let func = if words[0] == "peer" {
            "_peer"
        } else {
            "_peer_tools"
        };
        let probe = format!(
            "{script}\nCOMP_WORDS=({}); COMP_CWORD={}; {func}; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            quoted.join(" "),
            words.len() - 1
        );
        let o = std::process::Command::new("bash")
            .args(["--norc", "-c", &probe])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    };
    let has = |got: &[String], want: &[&str]| {
        for w in want {
            assert!(got.iter().any(|g| g == w), "{w} missing from {got:?}");
        }
    };
    has(
        &complete(&["peer", "ask", ""]),
        &[
            "serve",
            "status",
            "peers",
            "card",
            "recommend",
            "friends",
            "--async",
        ],
    );
    has(
        &complete(&["peer", "--home", "/x", "ask", "card", ""]),
        &["show", "verify", "add"],
    );
    has(
        &complete(&["peer", "ask", "card", "show", "--"]),
        &["--host", "--port"],
    );
    has(
        &complete(&["peer", "completions", ""]),
        &["bash", "zsh", "fish"],
    );
    has(
        &complete(&["peer", "host", "--notify", ""]),
        &["bell", "stderr", "none"],
    );
    has(
        &complete(&["peer", "send", "bob", "--wait-receipt", "c"]),
        &["consumed"],
    );
    has(
        &complete(&["peer-dir", "--scope", ""]),
        &["workspace", "repository", "machine"],
    );
    has(
        &complete(&["peer-res", "--"]),
        &["--json", "--home", "--version"],
    );
    let ask_serve = complete(&["peer", "ask", "serve", "--"]);
    has(&ask_serve, &["--listen", "--json"]);
    assert!(!ask_serve.iter().any(|w| w == "--async"), "{ask_serve:?}");
    let home_twice = complete(&["peer", "inbox", "--"]);
    assert_eq!(home_twice.iter().filter(|w| *w == "--home").count(), 1);
}
