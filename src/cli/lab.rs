//! `peer lab`: the two-session demonstration. It starts real `peer host` processes in a fresh
//! temporary namespace, drives them only through the public CLI, prints each step, and exits 0
//! when every step held (non-zero with the failing step otherwise). With `--json` the steps go
//! to standard error and standard output carries only the one JSON result. Nothing outside the
//! temporary namespace is touched.

use super::{Ctx, args, out};
use crate::error::{Code, Error, Result};
use crate::protocol::message::ReceiptState;
use crate::toolspec::answer::{MessagesPage, PeerView, SendAnswer, SentView};
use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::Value;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const HELP: &str = "usage: peer lab [--keep]

Runs the two-session lab in a temporary namespace: discovery, a message whose receipt goes
accepted -> consumed -> replied, two commands sharing port:3000 through the resource gate,
and an ask to a friend's server on loopback answered by the built-in answerer, which
searches the workspace. --keep leaves the namespace for inspection. Exits 0 when every
step holds.
";

/// A host started by the lab, stopped on drop.
struct LabHost {
    child: Child,
    /// The control file its ready line names.
    control: String,
    /// Kept open: a host whose output reader is gone ends, as any command on a closed pipe.
    _events: BufReader<std::process::ChildStdout>,
}

impl Drop for LabHost {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Lab {
    exe: PathBuf,
    home: PathBuf,
    work: PathBuf,
    step: usize,
    /// `--json`: narration on stderr, only the result on stdout.
    json: bool,
}

impl Lab {
    fn say(&mut self, title: &str) -> Result<()> {
        self.step += 1;
        self.note(&format!("\n[{}] {title}", self.step))
    }

    /// One line of narration: stdout for a person, stderr when stdout is for JSON.
    fn note(&self, text: &str) -> Result<()> {
        if self.json {
            out::err_line(text);
            Ok(())
        } else {
            out::line(text)
        }
    }

    fn check(&self, cond: bool, what: &str) -> Result<()> {
        if cond {
            self.note(&format!("    ok: {what}"))
        } else {
            Err(Error::new(Code::Io, format!("lab step failed: {what}")))
        }
    }

    /// Where a shown subcommand writes: the terminal, or stderr under `--json`.
    fn shown_stdout(&self) -> Stdio {
        if self.json {
            Stdio::from(std::io::stderr())
        } else {
            Stdio::inherit()
        }
    }

    fn host(&self, alias: &str) -> Result<LabHost> {
        let mut child = Command::new(&self.exe)
            .args(["--home"])
            .arg(&self.home)
            .args(["--json", "host", "--alias", alias])
            .current_dir(&self.work)
            .env_remove("PEER_CONTROL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Error::new(Code::Io, format!("cannot start peer host: {e}")))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::new(Code::Io, "no stdout from peer host"))?;
        let mut line = String::new();
        let mut events = BufReader::new(stdout);
        events
            .read_line(&mut line)
            .map_err(|e| Error::new(Code::Io, e.to_string()))?;
        let ready = Ready::of(&line);
        if ready.event != "ready" {
            let _ = child.kill();
            return Err(Error::new(
                Code::Io,
                format!("peer host {alias} did not report ready"),
            ));
        }
        Ok(LabHost {
            child,
            control: ready.control,
            _events: events,
        })
    }

    /// Runs `peer ARGS` acting for `host`, returns its JSON stdout (last line) as a `T`.
    fn peer_as<T: DeserializeOwned>(&self, host: &LabHost, args: &[&str]) -> Result<T> {
        let control = &host.control;
        let out = Command::new(&self.exe)
            .arg("--home")
            .arg(&self.home)
            .arg("--json")
            .args(args)
            .current_dir(&self.work)
            .env("PEER_CONTROL", control)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::new(Code::Io, format!("cannot run peer: {e}")))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let last = text.lines().last().unwrap_or("null");
        if !out.status.success() {
            return Err(Error::new(
                Code::Io,
                format!(
                    "peer {} failed: {}",
                    args.join(" "),
                    crate::sanitize::line(last, 300)
                ),
            ));
        }
        serde_json::from_str(last).map_err(|e| {
            Error::new(
                Code::Io,
                format!("peer {} answered what it never writes: {e}", args.join(" ")),
            )
        })
    }

    fn show(&self, args: &[&str]) {
        let _ = Command::new(&self.exe)
            .arg("--home")
            .arg(&self.home)
            .args(args)
            .current_dir(&self.work)
            .stdout(self.shown_stdout())
            .status();
    }
}

/// The fields the lab reads of a ready line (`peer host`'s, `peer ask serve`'s).
#[derive(Default, Deserialize)]
#[serde(default)]
struct Ready {
    event: String,
    control: String,
    port: u64,
}

impl Ready {
    /// The ready line's fields; none when it is not one.
    fn of(line: &str) -> Ready {
        serde_json::from_str(line).unwrap_or_default()
    }
}

pub fn cmd(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let mut keep = false;
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("keep") => keep = true,
            Long("help") | Short('h') => {
                out::text(HELP)?;
                return Ok(0);
            }
            other => return Err(args::unexpected(other)),
        }
    }
    let exe = std::env::current_exe()
        .map_err(|e| Error::new(Code::Io, format!("cannot find the peer binary: {e}")))?;
    let root = std::env::temp_dir().join(format!(
        "peer-lab-{}-{:08x}",
        std::process::id(),
        crate::identity::random_u64() as u32
    ));
    let home = root.join("ns");
    let work = root.join("shop-api");
    crate::fsutil::ensure_private_dir(&work)?;
    let mut lab = Lab {
        exe,
        home,
        work,
        step: 0,
        json: ctx.json,
    };
    lab.note(&format!("peer lab: namespace {}", lab.home.display()))?;
    let started = Instant::now();
    let result = run(&mut lab);
    if !keep {
        let _ = std::fs::remove_dir_all(&root);
    }
    match result {
        Ok(()) => {
            let ms = started.elapsed().as_millis() as u64;
            lab.note(&format!(
                "\npeer lab: all {} steps passed in {ms} ms",
                lab.step
            ))?;
            if ctx.json {
                super::print_json(
                    &serde_json::json!({"ok": true, "steps": lab.step, "elapsedMs": ms}),
                )?;
            }
            Ok(0)
        }
        Err(e) => Err(e),
    }
}

/// The demo, act by act: discovery, a message and its receipts, a shared port.
fn run(lab: &mut Lab) -> Result<()> {
    lab.say("two sessions start and discover each other")?;
    let alice = lab.host("alice")?;
    let bob = lab.host("bob")?;
    lab.show(&["dir"]);
    let listed = list_aliases(lab)?;
    lab.check(
        listed.contains(&"alice".to_string()) && listed.contains(&"bob".to_string()),
        "alice and bob see each other",
    )?;
    message_and_receipts(lab, &alice, &bob)?;
    shared_port(lab, &alice, &bob)?;
    drop(bob);
    drop(alice);
    ask_a_friend(lab)
}

/// Writes `{"ask": ask}` as the private config of the namespace at `home`.
fn write_ask_config(home: &std::path::Path, ask: Value) -> Result<()> {
    crate::fsutil::ensure_private_dir(home)?;
    let doc = serde_json::json!({ "ask": ask }).to_string();
    crate::fsutil::atomic_write(
        &home.join("config.json"),
        doc.as_bytes(),
        crate::fsutil::Durability::Durable,
    )
}

/// The README's ask, on loopback: "bob's machine" (its own namespace) serves with the built-in
/// answerer, and this namespace asks it about the shared workspace.
fn ask_a_friend(lab: &mut Lab) -> Result<()> {
    lab.say("ada asks bob's ask server; the built-in answerer answers from the workspace")?;
    let file = "docker-compose.yml";
    let compose =
        "services:\n  app:\n    environment:\n      DATABASE_URL: postgres://dev@db/app\n";
    std::fs::write(lab.work.join(file), compose)
        .map_err(|e| Error::new(Code::Io, format!("cannot write {file}: {e}")))?;
    let bob_home = lab.home.with_file_name("bob-machine");
    let token = crate::ask::config::new_token();
    let exe = lab.exe.to_string_lossy().into_owned();
    // The lab's throwaway workspace: answered even where the kernel lacks Landlock.
    write_ask_config(
        &bob_home,
        serde_json::json!({"callerName": "bob", "listenHost": "127.0.0.1", "listenPort": 0,
            "workspace": lab.work.to_string_lossy(), "answerIsolation": "reduced",
            "answerCommand": [exe, "ask", "answer", "--from-workspace"],
            "peers": [{"name": "ada", "host": "127.0.0.1", "token": token, "mode": "auto"}]}),
    )?;
    let server = LabServer::start(lab, &bob_home)?;
    write_ask_config(
        &lab.home,
        serde_json::json!({"callerName": "ada", "peers":
            [{"name": "bob", "host": "127.0.0.1", "port": server.port, "token": token}]}),
    )?;
    let question = "where is the DATABASE_URL configured?";
    lab.note(&format!(
        "    $ peer ask bob {question:?} --context-file {file}"
    ))?;
    let out = Command::new(&lab.exe)
        .arg("--home")
        .arg(&lab.home)
        .args(["ask", "bob", question, "--context-file", file])
        .current_dir(&lab.work)
        .env_remove("PEER_CONTROL")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::new(Code::Io, format!("cannot run peer ask: {e}")))?;
    let answer = String::from_utf8_lossy(&out.stdout).into_owned();
    for line in answer.lines().take(8) {
        lab.note(&format!("    {}", crate::sanitize::line(line, 200)))?;
    }
    drop(server);
    lab.check(
        out.status.success() && answer.contains("docker-compose.yml:4:"),
        "bob's answer cites docker-compose.yml:4",
    )
}

/// `peer ask serve` in its own namespace, stopped on drop.
struct LabServer {
    child: Child,
    port: u64,
}

impl LabServer {
    fn start(lab: &Lab, home: &std::path::Path) -> Result<LabServer> {
        let mut child = Command::new(&lab.exe)
            .arg("--home")
            .arg(home)
            .args(["--json", "ask", "serve"])
            .current_dir(&lab.work)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Error::new(Code::Io, format!("cannot start peer ask serve: {e}")))?;
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            let _ = BufReader::new(stdout).read_line(&mut line);
        }
        let server = LabServer {
            child,
            port: Ready::of(&line).port,
        };
        if server.port == 0 {
            return Err(Error::new(
                Code::Io,
                format!(
                    "peer ask serve did not start: {}",
                    crate::sanitize::line(&line, 300)
                ),
            ));
        }
        Ok(server)
    }
}

impl Drop for LabServer {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

/// Alice sends, Bob consumes and replies; Alice watches the receipt move.
fn message_and_receipts(lab: &mut Lab, alice: &LabHost, bob: &LabHost) -> Result<()> {
    lab.say("alice sends bob a message; bob's root takes custody on disk")?;
    let sent: SendAnswer =
        lab.peer_as(alice, &["send", "@bob", "The build is ready for review."])?;
    let receipt = sent.receipt;
    lab.note(&format!(
        "    receipt: {} #{} {}",
        receipt.state.name(),
        receipt.sequence,
        receipt.message_id
    ))?;
    lab.check(
        receipt.state == ReceiptState::Accepted,
        "receipt is accepted",
    )?;
    let id = receipt.message_id.clone();

    lab.say("bob reads and consumes it; alice sees the receipt move to consumed")?;
    let page: MessagesPage = lab.peer_as(bob, &["inbox"])?;
    let got = page.messages.first();
    lab.note(&format!(
        "    bob got: {}",
        crate::sanitize::line(got.map_or("", |m| &m.content), 80)
    ))?;
    lab.check(
        got.is_some_and(|m| m.message_id == id),
        "bob's inbox holds alice's message",
    )?;
    lab.peer_as::<IgnoredAny>(bob, &["consume", &id])?;
    lab.check(
        wait_state(lab, alice, &id, "consumed")?,
        "alice sees consumed",
    )?;

    lab.say("bob replies; alice sees replied and reads the reply")?;
    lab.peer_as::<IgnoredAny>(bob, &["reply", &id, "Reviewed: looks good."])?;
    lab.check(
        wait_state(lab, alice, &id, "replied")?,
        "alice sees replied",
    )?;
    let page: MessagesPage = lab.peer_as(alice, &["inbox"])?;
    let reply = page.messages.first();
    lab.check(
        reply.and_then(|m| m.reply_to.as_deref()) == Some(id.as_str()),
        "the reply names the original message",
    )?;
    lab.check(
        reply.is_some_and(|m| m.correlation_id == receipt.correlation_id),
        "the reply keeps the correlation",
    )
}

/// Both start a dev server on one port through `peer run`: the gate runs one at a time.
fn shared_port(lab: &mut Lab, alice: &LabHost, bob: &LabHost) -> Result<()> {
    lab.say(
        "alice and bob both start a dev server on port:3000; the gate runs them one at a time",
    )?;
    let log = lab.work.join("port-3000.log");
    let script = format!(
        "echo \"enter $(date +%s%N) $PEER_FENCING_TOKEN\" >> '{0}'; sleep 0.3; echo \"exit $(date +%s%N)\" >> '{0}'",
        log.display()
    );
    let spawn = |host: &LabHost| -> Result<Child> {
        let control = host.control.clone();
        Command::new(&lab.exe)
            .arg("--home")
            .arg(&lab.home)
            .args(["run", "--resource", "port:3000", "--", "sh", "-c", &script])
            .current_dir(&lab.work)
            .env("PEER_CONTROL", control)
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| Error::new(Code::Io, e.to_string()))
    };
    let mut a = spawn(alice)?;
    let mut b = spawn(bob)?;
    let (sa, sb) = (a.wait(), b.wait());
    lab.check(
        sa.is_ok_and(|s| s.success()) && sb.is_ok_and(|s| s.success()),
        "both commands ran and exited 0",
    )?;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    for l in text.lines() {
        lab.note(&format!("    {l}"))?;
    }
    lab.check(no_overlap(&text), "never two holders at once")?;
    lab.show(&["res", "status", "port:3000"]);
    Ok(())
}

fn list_aliases(lab: &Lab) -> Result<Vec<String>> {
    let out = Command::new(&lab.exe)
        .arg("--home")
        .arg(&lab.home)
        .args(["--json", "dir"])
        .current_dir(&lab.work)
        .output()
        .map_err(|e| Error::new(Code::Io, e.to_string()))?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<PeerView>(l).ok())
        .filter_map(|p| p.alias)
        .collect())
}

/// Polls `peer status` (bounded) until the receipt reaches `state`; receipts travel back to
/// the sender asynchronously.
fn wait_state(lab: &Lab, host: &LabHost, id: &str, state: &str) -> Result<bool> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let r: SentView = lab.peer_as(host, &["status", id])?;
        if r.state == state {
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(false)
}

/// True when the enter/exit lines never interleave two holders.
fn no_overlap(log: &str) -> bool {
    let mut inside = false;
    let mut entries = 0;
    for l in log.lines() {
        if l.starts_with("enter") {
            if inside {
                return false;
            }
            inside = true;
            entries += 1;
        } else if l.starts_with("exit") {
            inside = false;
        }
    }
    entries == 2 && !inside
}
