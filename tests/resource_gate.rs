//! End-to-end tests of resource coordination through the real `peer` and `peer-res` binaries,
//! each in its own temporary namespace. Ordering is established through files and the
//! coordinator's own state, never through sleeps; every wait is bounded.

use peerwire::error::Code;
use peerwire::fsutil::TempDir;
use peerwire::resource::model::name_hash;
use peerwire::resource::seal;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const PEER: &str = env!("CARGO_BIN_EXE_peer");
const PEER_RES: &str = env!("CARGO_BIN_EXE_peer-res");
/// Upper bound for any condition a test waits for.
const BOUND: Duration = Duration::from_secs(30);

/// A private namespace, removed when the test ends.
struct Ns {
    home: PathBuf,
    /// Removes `home` on drop.
    _dir: TempDir,
}

impl Ns {
    fn new(tag: &str) -> Ns {
        let dir = TempDir::new(&format!("restest-{tag}")).unwrap();
        Ns {
            home: dir.path().to_path_buf(),
            _dir: dir,
        }
    }

    fn with_control(tag: &str) -> Ns {
        let ns = Ns::new(tag);
        let cfg = r#"{"sessions":{"communication":{"allowResourceControl":true}}}"#;
        std::fs::write(ns.home.join("config.json"), cfg).unwrap();
        std::fs::set_permissions(
            ns.home.join("config.json"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        ns
    }

    fn file(&self, name: &str) -> PathBuf {
        self.home.join(name)
    }

    fn peer(&self) -> Command {
        let mut c = Command::new(PEER);
        c.arg("--home")
            .arg(&self.home)
            .stdin(Stdio::null())
            .env_remove("PEER_CONTROL")
            .env_remove("PEER_HOLDER_PID");
        c.env_remove("PEER_CAPABILITIES");
        c
    }

    /// Starts `peer run --resource NAME [extra…] -- sh -c SCRIPT` in the namespace directory.
    fn gate(&self, name: &str, extra: &[&str], script: &str) -> Child {
        let mut c = self.peer();
        c.current_dir(&self.home)
            .args(["run", "--resource", name])
            .args(extra)
            .args(["--", "sh", "-c", script]);
        c.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `peer-res --json NAME`, parsed (one object).
    fn status(&self, name: &str) -> Value {
        let out = Command::new(PEER_RES)
            .arg("--home")
            .arg(&self.home)
            .args(["--json", name])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "peer-res failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        text.lines()
            .next()
            .map(|l| serde_json::from_str(l).unwrap())
            .unwrap_or(Value::Null)
    }

    fn tickets(&self, name: &str, list: &str) -> Vec<String> {
        let s = self.status(name);
        s[list]
            .as_array()
            .into_iter()
            .flatten()
            .map(|h| h["ticket"].as_str().unwrap().to_string())
            .collect()
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.file(name)).unwrap_or_default()
    }
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (bounded) for a child and collects its output.
fn finish(mut child: Child) -> Output {
    let deadline = Instant::now() + BOUND;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("a peer process did not finish within {BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.wait_with_output().unwrap()
}

fn code_of(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A command that logs enter/exit with ticket, token and a nanosecond clock, and holds for
/// a moment so a competitor would overlap if the gate let it in.
const LOGGED: &str = r#"echo "enter $PEER_TICKET $PEER_FENCING_TOKEN $(date +%s%N)" >> log; sleep 0.02; echo "exit $PEER_TICKET $(date +%s%N)" >> log"#;

fn fifo_run(n: usize) {
    let ns = Ns::new(&format!("fifo{n}"));
    let first = format!("while [ ! -f go ]; do sleep 0.01; done; {LOGGED}");
    let mut gates = vec![ns.gate("port:3000", &[], &first)];
    wait_until("t-1 to hold", || {
        ns.tickets("port:3000", "holders") == ["t-1"]
    });
    for k in 2..=n {
        gates.push(ns.gate("port:3000", &[], LOGGED));
        let want = format!("t-{k}");
        wait_until(&format!("{want} to queue"), || {
            ns.tickets("port:3000", "queue").last() == Some(&want)
        });
    }
    std::fs::write(ns.file("go"), b"").unwrap();
    for g in gates {
        let out = finish(g);
        assert_eq!(code_of(&out), 0, "{}", stderr(&out));
    }
    let log = ns.read("log");
    let lines: Vec<Vec<&str>> = log.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 2 * n, "{log}");
    let mut last_exit = 0u128;
    let mut last_token = 0u64;
    for (i, pair) in lines.chunks(2).enumerate() {
        let (enter, exit) = (&pair[0], &pair[1]);
        let ticket = format!("t-{}", i + 1);
        assert_eq!(
            (enter[0], enter[1]),
            ("enter", ticket.as_str()),
            "FIFO order broken: {log}"
        );
        assert_eq!(
            (exit[0], exit[1]),
            ("exit", ticket.as_str()),
            "two holders overlapped: {log}"
        );
        let token: u64 = enter[2].parse().unwrap();
        assert!(
            token > last_token,
            "fencing tokens must strictly increase: {log}"
        );
        last_token = token;
        let (t_in, t_out): (u128, u128) = (enter[3].parse().unwrap(), exit[2].parse().unwrap());
        assert!(
            t_in >= last_exit && t_out >= t_in,
            "intervals overlap: {log}"
        );
        last_exit = t_out;
    }
    let s = ns.status("port:3000");
    assert!(
        s["holders"].as_array().unwrap().is_empty() && s["queue"].as_array().unwrap().is_empty()
    );
    assert!(
        s["launches"].as_array().unwrap().is_empty(),
        "ledger entries are removed: {s}"
    );
}

#[test]
fn two_concurrent_gates_never_overlap_and_keep_fifo_order() {
    fifo_run(2);
}

#[test]
fn ten_concurrent_gates_never_overlap_and_keep_fifo_order() {
    fifo_run(10);
}

#[test]
fn sigkill_of_a_holding_gate_lets_the_next_ticket_proceed() {
    let ns = Ns::new("kill");
    let mut holder = ns.gate("port:3000", &[], "echo $$ > holder.pid; exec sleep 30");
    wait_until("t-1 to hold", || {
        ns.tickets("port:3000", "holders") == ["t-1"]
    });
    let next = ns.gate("port:3000", &[], "echo next >> log");
    wait_until("t-2 to queue", || {
        ns.tickets("port:3000", "queue") == ["t-2"]
    });
    wait_until("the holder's command to start", || {
        !ns.read("holder.pid").is_empty()
    });
    holder.kill().unwrap();
    holder.wait().unwrap();
    let out = finish(next);
    assert_eq!(code_of(&out), 0, "{}", stderr(&out));
    assert_eq!(ns.read("log"), "next\n");
    let pid: i32 = ns.read("holder.pid").trim().parse().unwrap();
    // The holder's command died with its gate (parent-death signal): nothing is left holding.
    wait_until("the killed gate's command to end", || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z"))
    });
    assert!(ns.tickets("port:3000", "holders").is_empty());
}

#[test]
fn a_killed_gates_surviving_workload_keeps_the_grant_until_it_ends() {
    let ns = Ns::new("orphan");
    let mut holder = ns.gate("port:3000", &[], "sleep 30 & echo $! > bg.pid; wait");
    wait_until("the workload to start", || {
        ns.read("bg.pid").ends_with('\n')
    });
    let next = ns.gate("port:3000", &[], "echo next >> log");
    wait_until("t-2 to queue", || {
        ns.tickets("port:3000", "queue") == ["t-2"]
    });
    holder.kill().unwrap();
    holder.wait().unwrap();
    // This status is a transaction: it sweeps, and the workload's process group still runs.
    let out = ns
        .peer()
        .args(["--json", "res", "status", "port:3000"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["resources"][0]["holders"][0]["ticket"], "t-1", "{v}");
    assert_eq!(
        v["resources"][0]["holders"][0]["life"], "gone",
        "the gate is gone, its workload is not"
    );
    assert_eq!(ns.read("log"), "");
    let bg = ns.read("bg.pid").trim().to_string();
    assert!(Command::new("kill").arg(&bg).status().unwrap().success());
    let out = finish(next);
    assert_eq!(code_of(&out), 0, "{}", stderr(&out));
    assert_eq!(ns.read("log"), "next\n");
}

/// A daemonizing workload (`setsid`: its own session and process group, which the command's
/// group does not cover) outlives its SIGKILLed gate; the grant must stay until it ends.
/// `cgroup`: whether the gate may use a cgroup v2 per launch (`PEER_GATE_CGROUP`); returns
/// the tracking mode the launch ran under.
fn detached_workload_keeps_the_grant(cgroup: bool) -> String {
    let ns = Ns::new(if cgroup { "detached-cg" } else { "detached" });
    let mut gate = ns.peer();
    gate.current_dir(&ns.home)
        .env("PEER_GATE_CGROUP", if cgroup { "1" } else { "0" })
        .args(["run", "--resource", "port:3000", "--", "sh", "-c"])
        .arg("setsid sleep 30 & echo $! > bg.pid; exec sleep 60")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut holder = gate.spawn().unwrap();
    wait_until("the detached workload to start", || {
        ns.read("bg.pid").ends_with('\n')
    });
    let bg: i32 = ns.read("bg.pid").trim().parse().unwrap();
    let mut mode = String::new();
    wait_until("the gate to track the detached workload", || {
        let launch = &ns.status("port:3000")["launches"][0];
        mode = launch["tracking"].as_str().unwrap_or_default().to_string();
        mode == "cgroup"
            || launch["groups"]
                .as_array()
                .is_some_and(|g| g.contains(&Value::from(bg)))
    });
    let next = ns.gate("port:3000", &[], "echo next >> log");
    wait_until("t-2 to queue", || {
        ns.tickets("port:3000", "queue") == ["t-2"]
    });
    let command = ns.status("port:3000")["launches"][0]["childPid"]
        .as_u64()
        .unwrap();
    holder.kill().unwrap();
    holder.wait().unwrap();
    // The gate and the command (parent-death signal) are gone before anyone looks, so only
    // the daemon's own tracking can keep the grant.
    wait_until("the killed gate's command to end", || {
        std::fs::read_to_string(format!("/proc/{command}/stat")).map_or(true, |s| s.contains(") Z"))
    });
    let out = ns
        .peer()
        .args(["--json", "res", "status", "port:3000"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["resources"][0]["holders"][0]["ticket"], "t-1",
        "{mode}: the daemon's grant was reclaimed while it runs: {v}"
    );
    assert_eq!(
        ns.read("log"),
        "",
        "the next holder started beside the daemon"
    );
    assert!(
        Command::new("kill")
            .arg(bg.to_string())
            .status()
            .unwrap()
            .success()
    );
    let out = finish(next);
    assert_eq!(code_of(&out), 0, "{}", stderr(&out));
    assert_eq!(ns.read("log"), "next\n");
    mode
}

#[test]
fn a_killed_gates_detached_workload_keeps_the_grant_with_recorded_groups() {
    assert_eq!(detached_workload_keeps_the_grant(false), "subreaper+groups");
}

#[test]
fn a_killed_gates_detached_workload_keeps_the_grant_in_a_cgroup_when_writable() {
    // Without a writable cgroup v2 the gate falls back, and says so.
    let mode = detached_workload_keeps_the_grant(true);
    assert!(mode == "cgroup" || mode == "subreaper+groups", "{mode}");
    if mode != "cgroup" {
        eprintln!("no writable cgroup v2 here: the fallback was tested instead");
    }
}

#[test]
fn kill_on_release_ends_what_the_command_left_running_in_both_tracking_modes() {
    for cgroup in ["1", "0"] {
        let ns = Ns::new("killrel");
        let out = ns
            .peer()
            .current_dir(&ns.home)
            .env("PEER_GATE_CGROUP", cgroup)
            .args([
                "run",
                "--kill-on-release",
                "--resource",
                "r",
                "--",
                "sh",
                "-c",
            ])
            .arg("setsid sleep 60 & echo $! > bg.pid; sleep 0.3")
            .output()
            .unwrap();
        assert_eq!(code_of(&out), 0, "{}", stderr(&out));
        let bg = ns.read("bg.pid").trim().to_string();
        wait_until("the detached workload to be killed", || {
            std::fs::read_to_string(format!("/proc/{bg}/stat")).map_or(true, |s| s.contains(") Z"))
        });
        assert!(ns.tickets("r", "holders").is_empty());
    }
}

#[test]
fn a_double_forked_grandchild_is_owned_and_waited_for() {
    let ns = Ns::new("fork");
    let first = ns.gate("port:3000", &[], "(sleep 0.3; echo done >> log) & exit 0");
    wait_until("t-1 to hold", || {
        ns.tickets("port:3000", "holders") == ["t-1"]
    });
    // The second holder records the log as it found it when granted: that is the moment the
    // ordering is about, whenever the test itself gets to look.
    let second = ns.gate("port:3000", &[], "cat log > seen; echo second >> log");
    let out = finish(first);
    assert_eq!(code_of(&out), 0, "{}", stderr(&out));
    // The first gate has released by now, so the second may already have run; either way the
    // grandchild's line is there and first.
    let log = ns.read("log");
    assert!(
        log == "done\n" || log == "done\nsecond\n",
        "the gate must exit only after the grandchild: {log:?}"
    );
    assert_eq!(code_of(&finish(second)), 0);
    assert_eq!(
        ns.read("seen"),
        "done\n",
        "the next holder is granted only after the grandchild"
    );
    assert_eq!(
        ns.read("log"),
        "done\nsecond\n",
        "the grant is released only after the grandchild"
    );
}

#[test]
fn capacity_two_admits_two_at_once_but_not_three() {
    let ns = Ns::new("cap2");
    let script = "echo in >> log; while [ ! -f go ]; do sleep 0.01; done";
    let gates: Vec<Child> = (0..3)
        .map(|_| ns.gate("build", &["--capacity", "2"], script))
        .collect();
    wait_until("two holders and one waiter", || {
        let s = ns.status("build");
        s["holders"].as_array().map_or(0, Vec::len) == 2
            && s["queue"].as_array().map_or(0, Vec::len) == 1
    });
    wait_until("both holders to run", || ns.read("log") == "in\nin\n");
    assert_eq!(ns.status("build")["capacity"], 2);
    std::fs::write(ns.file("go"), b"").unwrap();
    for g in gates {
        assert_eq!(code_of(&finish(g)), 0);
    }
    assert_eq!(ns.read("log"), "in\nin\nin\n");
}

#[test]
fn a_corrupt_resource_file_is_recovery_required_and_left_unchanged() {
    let ns = Ns::new("corrupt");
    assert_eq!(code_of(&finish(ns.gate("port:3000", &[], "true"))), 0);
    let path = ns
        .home
        .join("peer-resources")
        .join(format!("{}.json", name_hash("port:3000")));
    let garbage = b"{\"version\": 1, \"name\": \"port:3000\", truncated".to_vec();
    std::fs::write(&path, &garbage).unwrap();
    let out = finish(ns.gate("port:3000", &[], "echo ran >> log"));
    assert_eq!(code_of(&out), 125, "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("peer: RECOVERY_REQUIRED: "),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        garbage,
        "the file must be left exactly as it was"
    );
    assert_eq!(ns.read("log"), "", "nothing ran");
    let viewer = Command::new(PEER_RES)
        .arg("--home")
        .arg(&ns.home)
        .output()
        .unwrap();
    assert_eq!(
        viewer.status.code(),
        Some(Code::RecoveryRequired.exit_status())
    );
    assert!(String::from_utf8_lossy(&viewer.stderr).starts_with("peer-res: RECOVERY_REQUIRED: "));
    // One corrupt file does not hide the healthy ones: they are shown, the corrupt one is
    // listed with its code, and the exit status still says RECOVERY_REQUIRED.
    assert_eq!(code_of(&finish(ns.gate("db", &[], "true"))), 0);
    let viewer = Command::new(PEER_RES)
        .arg("--home")
        .arg(&ns.home)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&viewer.stdout);
    assert_eq!(
        viewer.status.code(),
        Some(Code::RecoveryRequired.exit_status())
    );
    assert!(shown.starts_with("db  automatic"), "{shown}");
    assert!(
        shown.contains(&format!("corrupt  {}  RECOVERY_REQUIRED", path.display())),
        "{shown}"
    );
    let viewer = Command::new(PEER_RES)
        .arg("--home")
        .arg(&ns.home)
        .arg("--json")
        .output()
        .unwrap();
    let objs: Vec<Value> = String::from_utf8_lossy(&viewer.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(objs.len(), 2, "{objs:?}");
    assert_eq!(objs[0]["resource"], "db");
    assert_eq!(objs[1]["corrupt"], path.display().to_string());
    assert_eq!(objs[1]["code"], "RECOVERY_REQUIRED");
    let status = ns.peer().args(["res", "status"]).output().unwrap();
    assert_eq!(
        status.status.code(),
        Some(Code::RecoveryRequired.exit_status())
    );
    assert!(String::from_utf8_lossy(&status.stdout).starts_with("db  automatic"));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        garbage,
        "still left as it was"
    );
}

#[test]
fn a_request_without_resource_request_capability_is_refused() {
    let ns = Ns::new("cap");
    let out = ns
        .peer()
        .env("PEER_CAPABILITIES", "")
        .args(["run", "--resource", "r", "--", "true"])
        .output()
        .unwrap();
    // peer run is a wrapper: its own failures exit 125 with the code on stderr.
    assert_eq!(code_of(&out), 125);
    assert!(
        stderr(&out).starts_with("peer: CAPABILITY_DENIED: "),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_short_wait_times_out_and_authorizes_nothing() {
    let ns = Ns::new("timeout");
    let holder = ns.gate("port:3000", &[], "while [ ! -f go ]; do sleep 0.01; done");
    wait_until("t-1 to hold", || {
        ns.tickets("port:3000", "holders") == ["t-1"]
    });
    let out = finish(ns.gate("port:3000", &["--wait", "100"], "echo ran >> log"));
    assert_eq!(code_of(&out), 125, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("RESOURCE_WAIT_TIMEOUT"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("nothing was authorized"),
        "{}",
        stderr(&out)
    );
    assert_eq!(ns.read("log"), "");
    assert!(
        ns.tickets("port:3000", "queue").is_empty(),
        "the timed-out ticket is cancelled"
    );
    assert_eq!(ns.tickets("port:3000", "holders"), ["t-1"]);
    std::fs::write(ns.file("go"), b"").unwrap();
    assert_eq!(code_of(&finish(holder)), 0);
}

#[test]
fn fencing_tokens_strictly_increase_across_grants_and_exit_status_is_passed_through() {
    let ns = Ns::new("tokens");
    for expect in 1..=3 {
        let out = finish(ns.gate(
            "r",
            &[],
            "echo $PEER_FENCING_TOKEN $PEER_RESOURCE $PEER_TICKET >> log; exit 7",
        ));
        assert_eq!(code_of(&out), 7);
        assert!(
            ns.read("log")
                .ends_with(&format!("{expect} r t-{expect}\n")),
            "{}",
            ns.read("log")
        );
    }
    let out = finish(ns.gate("r", &[], "kill -TERM $$"));
    assert_eq!(
        code_of(&out),
        128 + 15,
        "a command killed by a signal exits 128+N"
    );
}

#[test]
fn peer_res_json_shows_holder_queue_and_launch() {
    let ns = Ns::new("view");
    let holder = ns.gate("port:3000", &[], "while [ ! -f go ]; do sleep 0.01; done");
    wait_until("t-1 to hold", || {
        ns.tickets("port:3000", "holders") == ["t-1"]
    });
    let waiter = ns.gate("port:3000", &[], "true");
    wait_until("t-2 to queue", || {
        ns.tickets("port:3000", "queue") == ["t-2"]
    });
    // The gate adds the command's evidence to the ledger just after spawning it.
    wait_until("the launch to record its command", || {
        ns.status("port:3000")["launches"][0]["childPid"]
            .as_u64()
            .is_some()
    });
    let s = ns.status("port:3000");
    assert_eq!(s["resource"], "port:3000");
    assert_eq!(
        (
            s["policy"].as_str(),
            s["epoch"].as_u64(),
            s["capacity"].as_u64()
        ),
        (Some("automatic"), Some(1), Some(1))
    );
    let h = &s["holders"][0];
    assert_eq!(
        (
            h["ticket"].as_str(),
            h["token"].as_u64(),
            h["life"].as_str()
        ),
        (Some("t-1"), Some(1), Some("alive"))
    );
    assert_eq!(h["admitted"], true);
    assert_eq!(s["queue"][0]["position"], 1);
    assert_eq!(s["launches"][0]["ticket"], "t-1");
    assert_eq!(s["launches"][0]["command"], "sh");
    assert!(s["launches"][0]["childPid"].as_u64().is_some());
    let human = Command::new(PEER_RES)
        .arg("--home")
        .arg(&ns.home)
        .output()
        .unwrap();
    let text = String::from_utf8(human.stdout).unwrap();
    assert!(
        text.contains("holder") && text.contains("queue") && text.contains("launch"),
        "{text}"
    );
    std::fs::write(ns.file("go"), b"").unwrap();
    assert_eq!(code_of(&finish(holder)), 0);
    assert_eq!(code_of(&finish(waiter)), 0);
}

/// A long-lived process standing in for a session root (`PEER_HOLDER_PID`).
struct Session(Child);

impl Session {
    fn start() -> Session {
        Session(Command::new("sleep").arg("60").spawn().unwrap())
    }
    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn res(ns: &Ns, who: &str, session: Option<&Session>, args: &[&str]) -> Output {
    let mut c = ns.peer();
    c.args(["--as", who, "--json", "res"]).args(args);
    if let Some(s) = session {
        c.env("PEER_HOLDER_PID", s.pid());
    }
    c.output().unwrap()
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

#[test]
fn a_stale_epoch_grant_is_refused_with_stale_policy() {
    let ns = Ns::with_control("stale");
    let (ctl, me) = (Session::start(), Session::start());
    assert!(
        res(&ns, "ctl", Some(&ctl), &["set-controller", "r"])
            .status
            .success()
    );
    let queued = json_of(&res(&ns, "me", Some(&me), &["request", "r"]));
    assert_eq!(
        (queued["state"].as_str(), queued["ticket"].as_str()),
        (Some("queued"), Some("t-1")),
        "{queued}"
    );
    let granted = json_of(&res(&ns, "ctl", None, &["grant", "r", "t-1"]));
    assert_eq!(
        (granted["state"].as_str(), granted["epoch"].as_u64()),
        (Some("granted"), Some(2)),
        "{granted}"
    );
    let token = granted["token"].as_u64().unwrap().to_string();
    let policy = json_of(&res(
        &ns,
        "ctl",
        Some(&ctl),
        &["set-controller", "r", "--capacity", "1"],
    ));
    assert_eq!(policy["epoch"], 3, "{policy}");
    let mut run = ns.peer();
    run.args([
        "--as",
        "me",
        "run",
        "--resource",
        "r",
        "--ticket",
        "t-1",
        "--",
        "true",
    ]);
    let out = run.output().unwrap();
    assert_eq!(code_of(&out), 125, "{}", stderr(&out));
    assert!(stderr(&out).contains("STALE_POLICY"), "{}", stderr(&out));
    let out = res(&ns, "me", None, &["release", "r", "--token", &token]);
    assert_eq!(code_of(&out), Code::StalePolicy.exit_status());
    assert_eq!(json_of(&out)["error"]["code"], "STALE_POLICY");
}

#[test]
fn controller_rules_through_the_cli() {
    let ns = Ns::with_control("ctl");
    let (one, two) = (Session::start(), Session::start());
    assert!(
        res(&ns, "one", Some(&one), &["set-controller", "r"])
            .status
            .success()
    );
    let out = res(&ns, "two", Some(&two), &["set-controller", "r", "--force"]);
    assert_eq!(
        code_of(&out),
        Code::CapabilityDenied.exit_status(),
        "a live controller is never replaced"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("--force"),
        "the refusal does not hand out the override"
    );
    drop(one);
    let out = res(&ns, "two", Some(&two), &["set-controller", "r"]);
    assert_eq!(
        code_of(&out),
        Code::CapabilityDenied.exit_status(),
        "a dead controller needs an explicit force"
    );
    let out = res(&ns, "two", Some(&two), &["set-controller", "r", "--force"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let ns2 = Ns::new("noctl");
    let out = res(&ns2, "x", Some(&two), &["set-controller", "r"]);
    assert_eq!(
        code_of(&out),
        Code::CapabilityDenied.exit_status(),
        "allowResourceControl is false by default"
    );
}

#[test]
fn session_requests_release_by_principal_is_ambiguous_with_two() {
    let ns = Ns::new("ambig");
    let s = Session::start();
    let out = res(&ns, "me", None, &["request", "r"]);
    assert_eq!(
        code_of(&out),
        2,
        "a request from a short-lived CLI needs a holder process"
    );
    for _ in 0..2 {
        let g = json_of(&res(
            &ns,
            "me",
            Some(&s),
            &["request", "r", "--capacity", "2"],
        ));
        assert_eq!(g["state"], "granted", "{g}");
    }
    let out = res(&ns, "me", None, &["release", "r"]);
    assert_eq!(code_of(&out), Code::AmbiguousTarget.exit_status());
    assert!(
        res(&ns, "me", None, &["release", "r", "--ticket", "t-1"])
            .status
            .success()
    );
    assert!(
        res(&ns, "me", None, &["release", "r"]).status.success(),
        "one reservation left: unambiguous"
    );
    let out = res(&ns, "me", None, &["status", "r"]);
    let v = json_of(&out);
    assert_eq!(
        v["resources"][0]["holders"].as_array().map(Vec::len),
        Some(0),
        "{v}"
    );
}

#[test]
fn a_holder_without_decidable_evidence_needs_an_operator() {
    let ns = Ns::new("unknown");
    let s = Session::start();
    let g = json_of(&res(&ns, "me", Some(&s), &["request", "r"]));
    assert_eq!(g["state"], "granted", "{g}");
    let path = ns
        .home
        .join("peer-resources")
        .join(format!("{}.json", name_hash("r")));
    // An operator's edit: the file is re-sealed with a correct checksum.
    let sealed = std::fs::read(&path).unwrap();
    let mut state: Value = serde_json::from_slice(seal::open(&sealed).unwrap()).unwrap();
    state["holders"][0]["evidence"]["start_time"] = 0.into();
    std::fs::write(&path, seal::seal(&serde_json::to_vec(&state).unwrap())).unwrap();
    let out = finish(ns.gate("r", &[], "echo ran >> log"));
    assert_eq!(code_of(&out), 125, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("RECOVERY_REQUIRED"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("verify that process"),
        "{}",
        stderr(&out)
    );
    assert_eq!(ns.status("r")["holders"][0]["life"], "unknown");
    drop(s);
    assert_eq!(
        ns.tickets("r", "holders"),
        ["t-1"],
        "never reclaimed without evidence"
    );
    assert!(
        res(&ns, "me", None, &["release", "r", "--ticket", "t-1"])
            .status
            .success()
    );
    assert_eq!(code_of(&finish(ns.gate("r", &[], "echo ran >> log"))), 0);
    assert_eq!(ns.read("log"), "ran\n");
}

#[test]
fn an_interactive_command_gets_the_terminal_foreground() {
    // `script` (util-linux) runs the gate on a fresh pseudo-terminal. Without the hand-over the
    // command, in its own process group, would be stopped by SIGTTOU at `stty`.
    let ns = Ns::new("tty");
    let inner = format!(
        "{PEER} --home {} run --resource r -- sh -c 'stty -echo; read x; echo got $x; stty echo'",
        ns.home.display()
    );
    let mut child = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the util-linux `script` command is needed for this test");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"hello\n").unwrap();
    let deadline = Instant::now() + BOUND;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the command under peer run was stopped instead of reading the terminal");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("got hello"),
        "{:?}",
        out
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn under_a_controller_a_waiting_gate_runs_when_the_controller_grants_it() {
    let ns = Ns::with_control("grant");
    let ctl = Session::start();
    assert!(
        res(&ns, "ctl", Some(&ctl), &["set-controller", "r"])
            .status
            .success()
    );
    let gate = ns.gate("r", &[], "echo ran $PEER_FENCING_TOKEN >> log");
    wait_until("t-1 to queue", || ns.tickets("r", "queue") == ["t-1"]);
    assert_eq!(ns.status("r")["policy"], "controlled");
    let out = res(&ns, "someone", None, &["grant", "r", "t-1"]);
    assert_eq!(
        code_of(&out),
        Code::CapabilityDenied.exit_status(),
        "only the controller grants"
    );
    let g = json_of(&res(&ns, "ctl", None, &["grant", "r", "t-1"]));
    assert_eq!(g["state"], "granted", "{g}");
    let out = finish(gate);
    assert_eq!(code_of(&out), 0, "{}", stderr(&out));
    assert_eq!(ns.read("log"), format!("ran {}\n", g["token"]));
}

#[test]
fn signals_reach_descendants_that_left_the_process_group() {
    let ns = Ns::new("setsid");
    let inner =
        r#"trap 'echo term >> log; exit 0' TERM; echo ready >> log; while :; do sleep 0.02; done"#;
    let script = format!("setsid sh -c \"{inner}\" & exit 0");
    let mut gate = ns.gate("r", &[], &script);
    wait_until("the detached descendant to start", || {
        ns.read("log") == "ready\n"
    });
    // The gate records the child's evidence just after spawning it: wait for that record.
    wait_until("the launch to record its child", || {
        ns.status("r")["launches"][0]["childPid"].as_u64().is_some()
    });
    let child = ns.status("r")["launches"][0]["childPid"].as_u64().unwrap();
    // Once the gate has reaped its direct child, the detached descendant is re-parented to it.
    wait_until("the direct child to be reaped", || {
        !Path::new(&format!("/proc/{child}")).exists()
    });
    assert!(
        gate.try_wait().unwrap().is_none(),
        "the gate waits for the detached descendant"
    );
    let pid = gate.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let out = finish(gate);
    assert_eq!(code_of(&out), 0, "{}", stderr(&out));
    assert_eq!(ns.read("log"), "ready\nterm\n");
    assert!(ns.tickets("r", "holders").is_empty());
}

#[test]
fn peer_run_json_result_is_the_last_stdout_line_after_every_descendant() {
    let ns = Ns::new("runjson");
    let out = ns
        .peer()
        .current_dir(&ns.home)
        .args(["--json", "run", "--resource", "r", "--"])
        .args(["sh", "-c", "echo first; (sleep 0.2; echo late) & exit 3"])
        .output()
        .unwrap();
    assert_eq!(code_of(&out), 3, "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(&lines[..2], ["first", "late"]);
    let v: Value = serde_json::from_str(lines[2]).unwrap();
    assert_eq!(
        (
            v["op"].as_str(),
            v["resource"].as_str(),
            v["status"].as_i64()
        ),
        (Some("run"), Some("r"), Some(3)),
        "{v}"
    );
}

#[test]
fn a_holder_must_be_the_callers_own_and_an_operator_can_always_release() {
    let ns = Ns::new("holderpid");
    // init, and a process of this uid in another session, are refused as anchors.
    let mut init = ns.peer();
    init.args(["--as", "me", "--json", "res", "request", "db:x"])
        .env("PEER_HOLDER_PID", "1");
    let out = init.output().unwrap();
    assert_eq!(
        code_of(&out),
        Code::CapabilityDenied.exit_status(),
        "{}",
        stderr(&out)
    );
    let mut detached = Command::new("sleep");
    detached.arg("60");
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut detached, || {
            nix::unistd::setsid()
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
    let mut other = Session(detached.spawn().unwrap());
    let out = res(&ns, "me", Some(&other), &["request", "db:x"]);
    assert_eq!(
        code_of(&out),
        Code::CapabilityDenied.exit_status(),
        "{}",
        stderr(&out)
    );
    let said = format!("{}{}", stderr(&out), String::from_utf8_lossy(&out.stdout));
    assert!(said.contains("not related"), "{said}");
    let _ = other.0.kill();
    // A process of the caller's own session is accepted; a stranger cannot release it, an
    // operator's forced release can, and the journal records who did it.
    let s = Session::start();
    let g = json_of(&res(&ns, "me", Some(&s), &["request", "db:x"]));
    assert_eq!(g["state"], "granted", "{g}");
    let out = res(
        &ns,
        "stranger",
        None,
        &["release", "db:x", "--ticket", "t-1"],
    );
    assert_eq!(code_of(&out), Code::CapabilityDenied.exit_status());
    let out = res(&ns, "stranger", None, &["release", "db:x", "--force"]);
    assert_eq!(
        code_of(&out),
        Code::Usage.exit_status(),
        "must name a ticket"
    );
    let out = res(
        &ns,
        "operator",
        None,
        &["release", "db:x", "--ticket", "t-1", "--force"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("override: cli:operator released ticket t-1"),
        "{}",
        stderr(&out)
    );
    assert_eq!(json_of(&out)["state"], "released");
    let st = ns.status("db:x");
    assert_eq!(st["holders"].as_array().map(Vec::len), Some(0), "{st}");
    let path = ns
        .home
        .join("peer-resources")
        .join(format!("{}.json", name_hash("db:x")));
    let body: Value =
        serde_json::from_slice(seal::open(&std::fs::read(path).unwrap()).unwrap()).unwrap();
    let last = body["journal"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["kind"], "released_by_override", "{last}");
    assert_eq!(last["by"], "cli:operator", "{last}");
}

#[test]
fn a_corrupt_ledger_and_a_failed_release_get_one_answer_everywhere() {
    let ns = Ns::new("oneanswer");
    // The command damages the launch ledger while it runs: the gate's release then fails,
    // and that failure is the run's answer (not "ok" beside an error line).
    let ledger = ns.home.join("peer-resources").join("launches.json");
    // It waits until the gate has recorded its evidence (the gate's last ledger write before
    // the release), so the damage is not replaced by that write.
    let script = format!(
        "i=0; until grep -q '\"child\":{{' '{l}'; do i=$((i+1)); [ $i -gt 3000 ] && exit 9; sleep 0.01; done; printf garbage > '{l}'",
        l = ledger.display()
    );
    let mut c = ns.peer();
    let out = c
        .current_dir(&ns.home)
        .args([
            "--json",
            "run",
            "--resource",
            "db",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    // A wrapper's own failure is the reserved status 125, its code on stderr.
    assert_eq!(code_of(&out), 125, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("RECOVERY_REQUIRED"),
        "{}",
        stderr(&out)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap();
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["status"], 0, "{v}");
    assert_eq!(v["error"]["code"], "RECOVERY_REQUIRED", "{v}");
    // `peer res status` and `peer-res` agree: RECOVERY_REQUIRED, the file left as it is.
    for args in [&["res", "status", "db"][..], &["res", "status"][..]] {
        let out = ns.peer().args(args).output().unwrap();
        assert_eq!(
            code_of(&out),
            Code::RecoveryRequired.exit_status(),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let viewer = Command::new(PEER_RES)
        .arg("--home")
        .arg(&ns.home)
        .arg("db")
        .output()
        .unwrap();
    assert_eq!(
        viewer.status.code(),
        Some(Code::RecoveryRequired.exit_status())
    );
    assert_eq!(std::fs::read(&ledger).unwrap(), b"garbage");
}

/// `peer-res --json` reports an error as one JSON object on stdout, as `peer-dir --json` and
/// `peer --json` do, with the same exit status as without `--json`.
#[test]
fn peer_res_json_errors_are_one_object() {
    let ns = Ns::new("res-json-err");
    for (args, code) in [
        (&["--json", "--bogus"][..], Code::Usage),
        (&["--json", ""][..], Code::Usage),
    ] {
        let out = Command::new(PEER_RES)
            .arg("--home")
            .arg(&ns.home)
            .args(args)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{args:?}: not one JSON object ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        assert_eq!(v["ok"], Value::Bool(false), "{v}");
        assert_eq!(v["error"]["code"], Value::from(code.name()), "{v}");
        assert_eq!(out.status.code(), Some(code.exit_status()));
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
