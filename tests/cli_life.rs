//! The `peer` CLI as people live in it, between real processes: closed pipes end commands
//! quietly, stop signals make every root remove exactly what it owns, exit statuses follow
//! env(1)/timeout(1), inbox semantics and paging, terminals owned by the wrapped command.

use crate::common;

use common::*;
use nix::sys::signal::Signal;
use std::io::{BufRead, BufReader};
use std::os::fd::OwnedFd;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A pipe whose reader is already closed: every write to it fails with EPIPE, so the outcome
/// does not depend on who runs first (unlike `| true`).
fn closed_pipe() -> OwnedFd {
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    write
}

/// Waits (bounded) for a child and returns its status as the shell reports it.
fn wait_child(child: &mut Child) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return shell_status(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("process did not exit in time");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn read_stderr(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut s);
    }
    s
}

/// The `.sock` and `.ctl` files and presence records left in the namespace.
fn leftovers(ns: &Ns) -> Vec<String> {
    let mut v = files_in(&ns.home.join("active-agents"));
    v.extend(
        files_in(&ns.home.join("peer-runtime"))
            .into_iter()
            .filter(|f| f.ends_with(".sock") || f.ends_with(".ctl")),
    );
    v
}

fn presence_count(ns: &Ns) -> usize {
    files_in(&ns.home.join("active-agents"))
        .iter()
        .filter(|f| f.ends_with(".json"))
        .count()
}

#[test]
fn a_closed_pipe_ends_every_command_quietly() {
    let ns = Ns::new("epipe");
    let _host = ns.host(&["--alias", "alice"]);
    let cases: Vec<(&str, Vec<&str>)> = vec![
        (PEER_DIR, vec![]),
        (PEER_DIR, vec!["--json"]),
        (PEER, vec!["--help"]),
        (PEER, vec!["--version"]),
        (PEER, vec!["dir"]),
        (PEER, vec!["inbox", "--help"]),
        (PEER_RES, vec![]),
        (PEER_RES, vec!["--help"]),
        (PEER, vec!["--as", "carol", "inbox"]),
    ];
    for (bin, args) in cases {
        let o = ns
            .cmd(bin)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(closed_pipe())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{bin} {args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o), "", "{bin} {args:?} was not quiet");
    }
    // The one-off root of `--as carol` removed what it owned.
    assert_eq!(presence_count(&ns), 1, "{:?}", leftovers(&ns));
}

#[test]
fn inbox_follow_into_head_ends_after_the_first_line() {
    let ns = Ns::new("follow-head");
    let mut follow = ns
        .cmd(PEER)
        .args(["--as", "reader", "--json", "inbox", "--follow"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        eventually(20, || presence_count(&ns) == 1),
        "reader never started"
    );
    let o = ns.peer(&["--as", "writer", "send", "@reader", "one line is enough"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // `head -1`: read one line, then close the pipe; nothing more arrives.
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("one line is enough"), "{first}");
    drop(lines);
    assert_eq!(wait_child(&mut follow), 0, "{}", read_stderr(&mut follow));
    assert_eq!(read_stderr(&mut follow), "");
    assert!(leftovers(&ns).is_empty(), "{:?}", leftovers(&ns));
}

fn signal(child: &Child, sig: Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
}

#[test]
fn peer_mcp_on_sigterm_removes_its_record_socket_and_control_file() {
    let ns = Ns::new("mcp-term");
    let mut mcp = ns
        .cmd(PEER)
        .args(["mcp", "--alias", "agent"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The client keeps stdin open, as MCP clients do; SIGTERM is how they stop a server.
    assert!(
        eventually(20, || leftovers(&ns).len() == 3),
        "{:?}",
        leftovers(&ns)
    );
    signal(&mcp, Signal::SIGTERM);
    assert_eq!(wait_child(&mut mcp), 0, "{}", read_stderr(&mut mcp));
    assert!(leftovers(&ns).is_empty(), "{:?}", leftovers(&ns));
}

#[test]
fn inbox_follow_as_a_one_off_root_cleans_up_on_sigint_and_sigterm() {
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        let ns = Ns::new("follow-sig");
        let mut follow = ns
            .cmd(PEER)
            .args(["--as", "x", "inbox", "--follow"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        assert!(
            eventually(20, || leftovers(&ns).len() == 3),
            "{:?}",
            leftovers(&ns)
        );
        signal(&follow, sig);
        assert_eq!(
            wait_child(&mut follow),
            128 + sig as i32,
            "{sig}: {}",
            read_stderr(&mut follow)
        );
        assert!(leftovers(&ns).is_empty(), "{sig}: {:?}", leftovers(&ns));
    }
}

#[test]
fn peer_host_on_sighup_removes_exactly_its_own_files() {
    let ns = Ns::new("host-hup");
    let mut a = ns.host(&["--alias", "a"]);
    let b = ns.host(&["--alias", "b"]);
    a.signal(Signal::SIGHUP);
    assert_eq!(a.wait(), Some(0));
    let left = leftovers(&ns);
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(
        left.iter().all(|f| f.contains(&b.field("instanceId"))),
        "{left:?}"
    );
}

/// A file that exists but cannot be executed (mode 0600).
fn not_executable(ns: &Ns) -> String {
    let path = ns.work.join("not-exec.sh");
    std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn wrappers_exit_like_env_and_timeout() {
    let ns = Ns::new("exits");
    let noexec = not_executable(&ns);
    let host = |cmd: &[&str]| {
        let mut a = vec!["host", "--alias", "w", "--"];
        a.extend_from_slice(cmd);
        ns.peer(&a)
    };
    let run = |cmd: &[&str]| {
        let mut a = vec!["run", "--resource", "r", "--"];
        a.extend_from_slice(cmd);
        ns.peer(&a)
    };
    for (name, wrap) in [("host", &host as &dyn Fn(&[&str]) -> _), ("run", &run)] {
        // The command's own status, even one that equals a peerwire code's status.
        let o = wrap(&["sh", "-c", "exit 17"]);
        assert_eq!(o.status.code(), Some(17), "{name}: {}", stderr(&o));
        let o = wrap(&["/nonexistent/command"]);
        assert_eq!(o.status.code(), Some(127), "{name}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("/nonexistent/command"),
            "{}",
            stderr(&o)
        );
        let o = wrap(&[&noexec]);
        assert_eq!(o.status.code(), Some(126), "{name}: {}", stderr(&o));
    }
    // peerwire's own failure around the command: 125 and the code on stderr.
    ns.config(serde_json::json!({"enabled": false}));
    let o = host(&["sh", "-c", "exit 0"]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("peer: COMMUNICATION_DISABLED: "),
        "{}",
        stderr(&o)
    );
    let o = ns.peer(&["run", "--resource", "r", "--bogus", "--", "true"]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(stderr(&o).starts_with("peer: USAGE: "), "{}", stderr(&o));
}

#[test]
fn peer_without_arguments_prints_usage_and_exits_2() {
    let ns = Ns::new("noargs");
    let o = ns.peer(&[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    assert!(stderr(&o).contains("usage: peer"), "{}", stderr(&o));
}

#[test]
fn peer_lab_json_prints_only_json() {
    let ns = Ns::new("labjson");
    let o = ns.peer(&["--json", "lab"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["ok"], true);
    assert!(stderr(&o).contains("alice sees replied"), "{}", stderr(&o));
}

/// Runs `script` inside `peer host --alias bob` and expects it to succeed.
fn as_bob(ns: &Ns, script: &str) {
    let o = ns.peer(&["host", "--alias", "bob", "--", "sh", "-c", script]);
    assert_eq!(o.status.code(), Some(0), "bob's script: {}", stderr(&o));
}

fn ids_in(text: &str) -> Vec<String> {
    let mut ids: Vec<String> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("m-"))
        .map(str::to_string)
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

#[test]
fn inbox_wait_blocks_until_an_unconsumed_message_and_times_out_with_its_own_status() {
    let ns = Ns::new("inbox-wait");
    let alice = ns.host(&["--alias", "alice"]);
    let timeout = exit_of(peerwire::error::Code::Timeout);
    // Nothing there: the wait runs out with TIMEOUT.
    let o = peer_as(&ns, &alice, &["inbox", "--wait", "200"]);
    assert_eq!(o.status.code(), Some(timeout), "{}", stderr(&o));
    assert!(stderr(&o).starts_with("peer: TIMEOUT: "), "{}", stderr(&o));
    as_bob(&ns, "peer send @alice first");
    // One is there: the wait returns at once with it.
    let o = peer_as(&ns, &alice, &["--json", "inbox", "--wait", "30000"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let page = json_of(&o);
    let id = page["messages"][0]["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(page["messages"][0]["content"], "first");
    // Once consumed it no longer ends a wait (a shell loop would spin otherwise)...
    let o = peer_as(&ns, &alice, &["consume", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = peer_as(&ns, &alice, &["inbox", "--wait", "300"]);
    assert_eq!(o.status.code(), Some(timeout), "{}", stderr(&o));
    let o = peer_as(&ns, &alice, &["inbox"]);
    assert!(!String::from_utf8_lossy(&o.stdout).contains(&id));
    // ...but --all still shows it.
    let o = peer_as(&ns, &alice, &["inbox", "--all"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(&id),
        "{}",
        stderr(&o)
    );
    // A waiting reader gets the next message when it arrives.
    let waiter = ns
        .cmd(PEER)
        .env("PEER_CONTROL", alice.field("control"))
        .args(["--json", "inbox", "--wait", "30000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    as_bob(&ns, "peer send @alice second");
    let o = waiter.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(json_of(&o)["messages"][0]["content"], "second");
}

#[test]
fn inbox_pages_are_bounded_by_bytes_and_people_see_every_page() {
    let ns = Ns::new("inbox-pages");
    ns.config(serde_json::json!({"limits": {"directoryPageSize": 9, "ratePerSecond": 1000, "rateBurst": 1000}}));
    let alice = ns.host(&["--alias", "alice"]);
    // Ten messages of 7,900 bytes: together above frameBytes (65,536).
    as_bob(
        &ns,
        "for i in $(seq 10); do head -c 7900 /dev/zero | tr '\\0' x | peer send @alice - >/dev/null || exit 1; done",
    );
    as_bob(
        &ns,
        "for i in $(seq 3); do peer send @alice \"short $i\" >/dev/null || exit 1; done",
    );
    // Nine of them (a page by count) would not fit one frame. A person sees every page.
    let o = peer_as(&ns, &alice, &["inbox"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(ids_in(&text).len(), 13, "{text}");
    // A script pages with --json: each page fits a frame; more/cursor continue it.
    let mut seen = Vec::new();
    let mut args = vec!["--json".to_string(), "inbox".to_string()];
    for _ in 0..20 {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = peer_as(&ns, &alice, &a);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(
            o.stdout.len() < 65_536,
            "a page of {} bytes",
            o.stdout.len()
        );
        let page = json_of(&o);
        for m in page["messages"].as_array().unwrap() {
            seen.push(m["messageId"].as_str().unwrap().to_string());
        }
        if page["more"] != true {
            break;
        }
        args = vec![
            "--json".into(),
            "inbox".into(),
            "--after".into(),
            page["cursor"].to_string(),
            "--events-after".into(),
            page["eventCursor"].to_string(),
        ];
    }
    let n = seen.len();
    seen.sort();
    seen.dedup();
    assert_eq!((n, seen.len()), (13, 13));
}

/// A command running under a real pseudo-terminal (util-linux `script`), with everything it
/// writes to the terminal collected.
struct Tty {
    child: Child,
    screen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    input: Option<std::process::ChildStdin>,
}

impl Tty {
    fn start(ns: &Ns, command: &str, path: &std::ffi::OsStr) -> Tty {
        let mut child = std::process::Command::new("script")
            .args(["-q", "-e", "-c", command, "/dev/null"])
            .current_dir(&ns.work)
            .env_remove("PEER_CONTROL")
            .env("PATH", path)
            .env("TERM", "dumb")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("util-linux script is installed");
        let screen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut out = child.stdout.take().unwrap();
        let sink = screen.clone();
        let reader = std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 4096];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let input = child.stdin.take();
        Tty {
            child,
            screen,
            reader: Some(reader),
            input,
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    fn shown(&self, needle: &str) -> bool {
        self.text().contains(needle)
    }

    fn send(&mut self, bytes: &[u8]) {
        use std::io::Write;
        let input = self.input.as_mut().unwrap();
        input.write_all(bytes).unwrap();
        input.flush().unwrap();
    }

    /// Waits for the end and returns everything the terminal showed.
    fn finish(mut self) -> (i32, String) {
        drop(self.input.take());
        let status = wait_child(&mut self.child);
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        (status, self.text())
    }
}

/// A hosted command that records where `peer` is found and its control file, then waits for
/// a `stop` file and prints a marker.
fn hosted(ns: &Ns, host_args: &str) -> String {
    let peer = std::path::Path::new(PEER).display().to_string();
    let script = "command -v peer > where; echo \"$PEER_CONTROL\" > ctl; \
                  while [ ! -f stop ]; do sleep 0.02; done; echo child-done";
    format!(
        "'{peer}' --home '{}' host --alias alice {host_args} -- sh -c '{script}'",
        ns.home.display()
    )
}

/// Starts `hosted` under a terminal, sends alice one message, lets the command finish.
fn arrival_under_terminal(ns: &Ns, host_args: &str) -> (i32, String) {
    // A PATH without the build directory: the host must put its own directory first.
    let tty = Tty::start(
        ns,
        &hosted(ns, host_args),
        std::ffi::OsStr::new("/usr/bin:/bin"),
    );
    let ctl = ns.work.join("ctl");
    assert!(
        eventually(20, || std::fs::read_to_string(&ctl)
            .is_ok_and(|s| s.ends_with('\n'))),
        "the hosted command never started: {}",
        tty.text()
    );
    let o = ns.peer(&["--as", "bob", "send", "@alice", "knock knock"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The arrival is in alice's inbox (and on the host's event bus) before the command ends.
    let control = std::fs::read_to_string(&ctl).unwrap().trim().to_string();
    let o = ns
        .cmd(PEER)
        .env("PEER_CONTROL", &control)
        .args(["inbox"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("knock knock"));
    std::fs::write(ns.work.join("stop"), b"").unwrap();
    tty.finish()
}

#[test]
fn peer_host_writes_nothing_into_the_terminal_its_command_owns() {
    let ns = Ns::new("host-tty");
    let (status, screen) = arrival_under_terminal(&ns, "");
    assert_eq!(status, 0, "{screen}");
    assert!(screen.contains("child-done"), "{screen}");
    assert!(
        !screen.contains("message"),
        "a notice reached CMD's terminal: {screen:?}"
    );
    assert!(!screen.contains('\u{7}'), "{screen:?}");
    // `peer` inside the session is the running binary, found through PATH.
    let dir = std::path::Path::new(PEER).parent().unwrap();
    let found = std::fs::read_to_string(ns.work.join("where")).unwrap();
    assert_eq!(found.trim(), dir.join("peer").display().to_string());
}

#[test]
fn peer_host_notify_is_opt_in() {
    let ns = Ns::new("host-notify");
    let (status, screen) = arrival_under_terminal(&ns, "--notify stderr");
    assert_eq!(status, 0, "{screen}");
    assert!(screen.contains("peer host: message m-"), "{screen:?}");
    let ns = Ns::new("host-bell");
    let (status, screen) = arrival_under_terminal(&ns, "--notify bell");
    assert_eq!(status, 0, "{screen}");
    assert!(screen.contains('\u{7}'), "{screen:?}");
    assert!(!screen.contains("peer host: message"), "{screen:?}");
}

/// The messages bob has received, in order.
fn contents(ns: &Ns, bob: &Host) -> Vec<String> {
    let v = json_of(&peer_as(ns, bob, &["--json", "inbox", "--all"]));
    v["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|x| x["content"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn chat_edits_lines_with_the_usual_keys_and_keeps_commands_local() {
    let ns = Ns::new("chat-keys");
    let alice = ns.host(&["--alias", "alice"]);
    let bob = ns.host(&["--alias", "bob"]);
    let peer = std::path::Path::new(PEER).display().to_string();
    let cmd = format!(
        "env PEER_CONTROL='{}' '{peer}' --home '{}' chat",
        alice.field("control"),
        ns.home.display()
    );
    let mut tty = Tty::start(&ns, &cmd, &path_with_peer());
    assert!(eventually(20, || tty.shown("peer> ")), "no prompt");
    // /help is answered here and never sent; an unknown /word is refused here.
    tty.send(b"/help\r");
    assert!(
        eventually(20, || tty.shown("Commands stay local")),
        "{}",
        tty.text()
    );
    tty.send(b"/nonsense\r");
    assert!(eventually(20, || tty.shown("/nonsense is not a chat command")));
    // Ctrl-W, Ctrl-Left, Right, End, Backspace, Alt-c, Home, End and Delete edit the line;
    // none of them inserts anything.
    tty.send(
        b"@bob junk\x17hello wrld\x1b[1;5D\x1b[Co\x1b[F x\x7f\x7f\x1bc\x1b[1~\x1b[4~\x1b[3~\r",
    );
    assert!(
        eventually(20, || contents(&ns, &bob).len() == 1),
        "{}",
        tty.text()
    );
    // SS3 Home, Delete twice; Ctrl-U kills a whole line; Ctrl-A/Ctrl-E move.
    tty.send(b"zz@bob second\x1bOH\x1b[3~\x1b[3~\r");
    tty.send(b"@bob nope\x15@bob thd\x01\x05\x02ir\r");
    assert!(
        eventually(20, || contents(&ns, &bob).len() == 3),
        "{}",
        tty.text()
    );
    assert_eq!(contents(&ns, &bob), ["hello world", "second", "third"]);
    tty.send(b"/quit\r");
    let (status, screen) = tty.finish();
    assert_eq!(status, 0, "{screen}");
    // One line per send: no echo of the typed line, no second "accepted" receipt line.
    assert_eq!(
        screen.matches("you → @bob: hello world").count(),
        1,
        "{screen:?}"
    );
    assert_eq!(screen.matches("accepted").count(), 3, "{screen:?}");
    assert!(!screen.contains("\r\u{1b}[2K> "), "{screen:?}");
}

#[test]
fn a_duplicate_alias_is_warned_about_at_start() {
    let ns = Ns::new("dup-alias");
    let _alice = ns.host(&["--alias", "alice"]);
    let o = ns.peer(&["host", "--alias", "alice", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: alias alice is also used by p-"),
        "{}",
        stderr(&o)
    );
    let o = ns.peer(&["host", "--alias", "carol", "--", "true"]);
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
}

#[test]
fn a_git_work_tree_is_one_workspace_and_scope_denied_says_how_to_widen() {
    let ns = Ns::new("git-ws");
    let repo = ns.work.join("repo");
    for d in [".git", "a", "b"] {
        std::fs::create_dir_all(repo.join(d)).unwrap();
    }
    let a = repo.join("a").display().to_string();
    let b = repo.join("b").display().to_string();
    let alice = ns.host(&["--alias", "alice", "--workspace", &a]);
    let _bob = ns.host(&["--alias", "bob", "--workspace", &b]);
    let mut seen: Vec<String> = ns
        .listing(&["--workspace", &a])
        .iter()
        .filter_map(|p| p["alias"].as_str().map(str::to_string))
        .collect();
    seen.sort();
    assert_eq!(seen, ["alice", "bob"]);
    assert_eq!(
        alice.field("workspace"),
        std::fs::canonicalize(&repo).unwrap().display().to_string()
    );
    let o = peer_as(&ns, &alice, &["send", "@bob", "same repository"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Outside the repository: refused, with the way to widen the scope.
    let elsewhere = ns.work.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let _carol = ns.host(&[
        "--alias",
        "carol",
        "--workspace",
        &elsewhere.display().to_string(),
    ]);
    let o = peer_as(&ns, &alice, &["send", "@carol", "hi"]);
    assert_eq!(
        o.status.code(),
        Some(exit_of(peerwire::error::Code::ScopeDenied)),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("\"scope\": \"repository\" or \"machine\""),
        "{}",
        stderr(&o)
    );
}

#[test]
fn human_output_names_peers_by_alias_and_ids_by_prefix() {
    let ns = Ns::new("names");
    let alice = ns.host(&["--alias", "alice"]);
    // bob sends and leaves: the message still says it came from bob.
    let o = ns.peer(&[
        "host", "--alias", "bob", "--", "peer", "send", "@alice", "bye",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let sent = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(sent.contains("accepted alice (p-"), "{sent}");
    let o = peer_as(&ns, &alice, &["inbox"]);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(text.contains("from bob (p-"), "{text}");
    let id = ids_in(&text).pop().unwrap();
    // A unique prefix names the message; errors never show Rust debug text.
    let o = peer_as(&ns, &alice, &["consume", &id[..8]]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&id));
    let o = peer_as(&ns, &alice, &["consume", "m-nonexistent"]);
    assert_eq!(
        o.status.code(),
        Some(exit_of(peerwire::error::Code::NotFound))
    );
    assert!(!stderr(&o).contains("Id("), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no message m-nonexistent"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_queued_run_says_what_it_waits_for() {
    let ns = Ns::new("run-wait");
    let mut holder = ns
        .cmd(PEER)
        .args(["--as", "alice", "run", "--resource", "port:3000", "--"])
        .args([
            "sh",
            "-c",
            "touch held; while [ ! -f go ]; do sleep 0.02; done",
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(20, || ns.work.join("held").exists()));
    let o = ns.peer(&[
        "run",
        "--resource",
        "port:3000",
        "--wait",
        "200",
        "--",
        "true",
    ]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("peer run: waiting for port:3000, held by alice"),
        "{}",
        stderr(&o)
    );
    std::fs::write(ns.work.join("go"), b"").unwrap();
    assert_eq!(wait_child(&mut holder), 0);
}

/// The presence fields Autohand's agent list prints (projectName, model, sessionId, pid,
/// status) tell peerwire sessions apart: the model names the alias and what the session runs.
#[test]
fn presence_tells_sessions_apart_in_autohand_listings() {
    let ns = Ns::new("presence-v1");
    let _a = ns.host(&["--alias", "alice"]);
    let _b = ns.host(&["--alias", "bob", "--", "sleep", "30"]);
    let dir = ns.home.join("active-agents");
    let records: Vec<serde_json::Value> = files_in(&dir)
        .iter()
        .map(|f| serde_json::from_slice(&std::fs::read(dir.join(f)).unwrap()).unwrap())
        .collect();
    let mut models: Vec<&str> = records
        .iter()
        .map(|r| r["model"].as_str().unwrap())
        .collect();
    models.sort();
    assert_eq!(models, ["alice (peer host)", "bob (sleep)"]);
    for r in &records {
        assert_eq!(r["version"], 1);
        assert_eq!(r["provider"], "peerwire");
        assert_eq!(r["mode"], "command");
        assert_eq!(r["status"], "idle");
        assert_eq!(r["projectName"], "work");
        assert_eq!(
            r["communication"]["alias"],
            r["model"].as_str().unwrap().split(' ').next().unwrap()
        );
    }
}

/// Completions come from the same table as --help and work in a real bash.
#[test]
fn bash_completion_offers_subcommands_and_their_flags() {
    let ns = Ns::new("completions");
    let peer = std::path::Path::new(PEER).display().to_string();
    let script = format!(
        "source <('{peer}' completions bash) || exit 9
         COMP_WORDS=(peer ho); COMP_CWORD=1; _peer; echo \"${{COMPREPLY[@]}}\"
         COMP_WORDS=(peer --home /x host --no); COMP_CWORD=4; _peer; echo \"${{COMPREPLY[@]}}\"
         COMP_WORDS=(peer inbox --a); COMP_CWORD=2; _peer; echo \"${{COMPREPLY[@]}}\""
    );
    let o = std::process::Command::new("bash")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines, ["host", "--notify", "--all --after --as"], "{text}");
    let o = ns.peer(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
}

/// Voluntary context switches of every thread of `pid` so far (each one is a thread waking
/// from a sleep or a wait).
fn voluntary_switches(pid: i32) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .flat_map(|s| {
            s.lines()
                .filter_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .filter_map(|n| n.trim().parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// An idle `peer host` sleeps until its next deadline (the heartbeat every 5 s, the sweep once a
/// minute) instead of polling: a count of wake-ups over a quiet window, not a timing. Before,
/// its store writer and root worker woke about 16 times a second between heartbeats.
#[test]
fn an_idle_host_sleeps_between_heartbeats() {
    const WINDOW_S: u64 = 6;
    let ns = Ns::new("idlewake");
    let host = ns.host(&["--alias", "idle"]);
    std::thread::sleep(Duration::from_millis(1_000));
    let before = voluntary_switches(host.pid());
    std::thread::sleep(Duration::from_secs(WINDOW_S));
    let woke = voluntary_switches(host.pid()) - before;
    // A heartbeat costs a few wake-ups (its thread, the presence write, the resource watch's
    // fallback re-read); two heartbeats fall in the window.
    assert!(
        woke <= 2 * WINDOW_S,
        "an idle host woke {woke} times in {WINDOW_S} s"
    );
}

/// A root maps only the shared libraries it uses: libm held nothing the binary needs once the
/// bench's number formatting stopped calling `log10` (its only libm function), and mapping it
/// cost every idle root ≈ 330 kB of resident code and relocation data.
#[test]
fn a_host_maps_no_libm() {
    let ns = Ns::new("nolibm");
    let host = ns.host(&["--alias", "lean"]);
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", host.pid())).unwrap();
    assert!(
        maps.contains("/libc.so"),
        "no libc in the maps read: {maps}"
    );
    assert!(!maps.contains("/libm.so"), "a host maps libm: {maps}");
}
