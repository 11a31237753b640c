//! The contained answerer under attack: each test runs a real `peer ask serve` whose
//! `answerCommand` is a hostile shell script (what a prompt-injected agent would do) and
//! checks from outside that the attack did not land: terminal injection into the owner's
//! shell, chmod of the key and the workspace, a live session's control socket, TCP and UDP to
//! a loopback listener, a signal to the owner's process, a daemon outliving the answer,
//! another answerer's scratch, and `~/.ssh`. They need unprivileged user namespaces and
//! Landlock; where the kernel lacks them they print "skipped: …".

use crate::common;

use common::ask::{processes_with, script};
use common::*;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);
/// A token of 256 bits, so no token-strength rule refuses the configuration.
const TOKEN: &str = "c0ntain-9f2b6a4e1d7c3b8a5f0e2d4c6b8a1f3e5d7c9b0a2e4f6a8c1d3b5e7f9a0c2e4f";

/// Whether this machine can contain an answerer; prints why not.
fn containable() -> bool {
    let userns = std::process::Command::new("unshare")
        .args(["-Urmpn", "--fork", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !userns {
        println!("skipped: unprivileged user namespaces are not available");
        return false;
    }
    // landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION): the ABI, or < 0.
    let abi = std::process::Command::new("python3")
        .args([
            "-c",
            "import ctypes; print(ctypes.CDLL(None).syscall(444, None, 0, 1))",
        ])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<i64>()
                .unwrap_or(-1)
        })
        .unwrap_or(-1);
    if abi < 1 {
        println!("skipped: Landlock is not enabled in this kernel");
        return false;
    }
    true
}

fn ask_config(ns: &Ns, answerer: &str, extra: Value) {
    let mut ask = json!({
        "callerName": "bob", "listenPort": 0,
        "workspace": ns.work.to_string_lossy(),
        "answerCommand": [answerer], "answerReadPaths": [answerer],
        "friendAsksPerMinute": 1000,
        "peers": [{"name": "ada", "host": "127.0.0.1", "token": TOKEN, "mode": "auto"}],
    });
    for (k, v) in extra.as_object().unwrap() {
        ask[k] = v.clone();
    }
    common::ask::ask_config(&ns.home, ask);
}

/// A running `peer ask serve`; killed on drop.
struct Server {
    serve: common::ask::Server,
    port: u16,
}

impl Server {
    fn start(ns: &Ns, answerer: &str, extra: Value) -> Server {
        Server::start_with(ns, answerer, extra, |_| {})
    }

    fn start_with(
        ns: &Ns,
        answerer: &str,
        extra: Value,
        prepare: impl FnOnce(&mut std::process::Command),
    ) -> Server {
        ask_config(ns, answerer, extra);
        let mut cmd = ns.cmd(PEER);
        cmd.args(["--json", "ask", "serve"]);
        prepare(&mut cmd);
        Server::spawn(cmd).0
    }

    /// Starts a prepared server command; also returns its ready line.
    fn spawn(cmd: std::process::Command) -> (Server, Value) {
        let serve = common::ask::Server::spawn(cmd, Stdio::null());
        println!("answerer layers: {}", serve.ready["answerer"]);
        let ready = serve.ready.clone();
        let port = serve.port;
        (Server { serve, port }, ready)
    }

    /// Asks and returns the answer text (or the error, for a failed answer).
    fn ask(&self, question: &str) -> String {
        ask_port(self.port, question)
    }
}

fn ask_port(port: u16, question: &str) -> String {
    let body = json!({"protocolVersion": 1, "caller": "ada", "token": TOKEN, "question": question});
    let r = peerwire::ask::client::post_json("127.0.0.1", port, "/ask", &body, T).unwrap();
    println!("answer ({}): {}", r.status, r.body);
    r.body["answer"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| r.body.to_string())
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn chmod_of_the_key_and_the_workspace_fails() {
    if !containable() {
        return;
    }
    let ns = Ns::new("contain-chmod");
    let key = ns.home.join("ask/keys/bob.key");
    let file = ns.work.join("notes.txt");
    std::fs::write(&file, "mine").unwrap();
    let answerer = script(
        &ns,
        "chmod.sh",
        &format!(
            "cat >/dev/null; chmod 644 {k} 2>&1; chmod 777 {f} 2>&1; touch -d 2001-01-01 {f}; \
             rm -f {f}; echo tried",
            k = key.display(),
            f = file.display()
        ),
    );
    let srv = Server::start(&ns, &answerer, json!({}));
    let before = (mode(&key), mode(&file));
    assert_eq!(before.0, 0o600);
    assert!(srv.ask("please chmod").contains("tried"));
    assert_eq!((mode(&key), mode(&file)), before, "modes changed");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
}

#[test]
fn the_owners_ssh_directory_is_absent() {
    if !containable() {
        return;
    }
    let ns = Ns::new("contain-ssh");
    let home = ns.root.join("owner-home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_test"), "PRIVATE-KEY-MATERIAL").unwrap();
    let answerer = script(
        &ns,
        "ssh.sh",
        "cat >/dev/null; cat \"$HOME/.ssh/id_test\" 2>&1; cat /etc/shadow 2>/dev/null; \
         cat /etc/ssh/ssh_host_*_key 2>/dev/null; echo end",
    );
    let srv = Server::start_with(&ns, &answerer, json!({}), |c| {
        c.env("HOME", &home);
    });
    let answer = srv.ask("cat my key");
    assert!(answer.contains("end"), "{answer}");
    assert!(!answer.contains("PRIVATE-KEY-MATERIAL"), "{answer}");
    // The system's own secrets, readable to a server running as root, stay covered too.
    assert!(!answer.contains("root:"), "/etc/shadow was read: {answer}");
    assert!(
        !answer.contains("PRIVATE KEY"),
        "an ssh host key was read: {answer}"
    );
}

/// The answerer is uid 0 of its user namespace: it must hold no capability there, so that
/// remounting, chown and DAC overrides fail even past the seccomp filter.
#[test]
fn the_answerer_holds_no_capabilities() {
    if !containable() {
        return;
    }
    let ns = Ns::new("contain-caps");
    let answerer = script(
        &ns,
        "caps.sh",
        "cat >/dev/null; grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status; echo end",
    );
    let srv = Server::start(&ns, &answerer, json!({}));
    let answer = srv.ask("what may you do?");
    assert!(answer.contains("end"), "{answer}");
    let sets: Vec<&str> = answer.lines().filter(|l| l.starts_with("Cap")).collect();
    assert_eq!(sets.len(), 5, "{answer}");
    for line in sets {
        let mask = line.split_whitespace().nth(1).unwrap_or("");
        assert!(
            mask.chars().all(|c| c == '0'),
            "the answerer holds capabilities: {line}"
        );
    }
}

#[test]
fn tcp_and_udp_to_a_loopback_listener_do_not_leave() {
    if !containable() {
        return;
    }
    let ns = Ns::new("contain-net");
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let (tp, up) = (
        tcp.local_addr().unwrap().port(),
        udp.local_addr().unwrap().port(),
    );
    // An abstract Unix socket (no file to hide): only the network namespace separates it.
    let name = format!("peerwire-contain-{}", std::process::id());
    let abs = {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
        std::os::unix::net::UnixListener::bind_addr(&addr).unwrap()
    };
    let answerer = script(
        &ns,
        "net.sh",
        &format!(
            "cat >/dev/null; python3 - <<'EOF'\n\
import socket\n\
try:\n    s = socket.create_connection(('127.0.0.1', {tp}), 2); s.sendall(b'leak'); print('tcp-sent')\n\
except Exception as e: print('tcp', e)\n\
try:\n    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.sendto(b'leak', ('127.0.0.1', {up})); print('udp-sent')\n\
except Exception as e: print('udp', e)\n\
try:\n    a = socket.socket(socket.AF_UNIX); a.connect('\\0{name}'); a.sendall(b'leak'); print('abstract-sent')\n\
except Exception as e: print('abstract', e)\n\
EOF\necho end"
        ),
    );
    let srv = Server::start(&ns, &answerer, json!({}));
    let answer = srv.ask("send it out");
    assert!(answer.contains("end"), "{answer}");
    tcp.set_nonblocking(true).unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(tcp.accept().is_err(), "a TCP connection arrived: {answer}");
    let mut buf = [0u8; 16];
    assert!(
        udp.recv(&mut buf).is_err(),
        "a UDP datagram arrived: {answer}"
    );
    abs.set_nonblocking(true).unwrap();
    assert!(
        abs.accept().is_err(),
        "an abstract socket connection arrived: {answer}"
    );
}

#[test]
fn a_signal_to_the_owners_process_does_not_land() {
    if !containable() {
        return;
    }
    let ns = Ns::new("contain-signal");
    let mut sibling = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    let pid = sibling.id();
    let answerer = script(
        &ns,
        "signal.sh",
        &format!("cat >/dev/null; kill -STOP {pid} 2>&1; kill -TERM {pid} 2>&1; echo end"),
    );
    let srv = Server::start(&ns, &answerer, json!({}));
    let answer = srv.ask("stop it");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .map(|(_, r)| r.trim_start().chars().next());
    let _ = sibling.kill();
    let _ = sibling.wait();
    assert!(answer.contains("end"), "{answer}");
    assert_eq!(
        state,
        Some(Some('S')),
        "the owner's process was signalled: {stat}"
    );
}

#[test]
fn daemons_die_with_the_answer() {
    if !containable() {
        return;
    }
    let ns = Ns::new("contain-daemon");
    let marker = format!("{}.{}", 5000 + std::process::id() % 1000, 7);
    let answerer = script(
        &ns,
        "daemon.sh",
        &format!(
            "cat >/dev/null; setsid sleep {marker} </dev/null >/dev/null 2>&1 & \
             ( (sleep {marker} </dev/null >/dev/null 2>&1 &) & ); sleep 0.3; echo started"
        ),
    );
    let srv = Server::start(&ns, &answerer, json!({}));
    let answer = srv.ask("start a daemon");
    assert!(answer.contains("started"), "{answer}");
    let gone = eventually(5, || processes_with(&["sleep", &marker]).is_empty());
    let left = processes_with(&["sleep", &marker]);
    for pid in &left {
        // Clean up what a failed containment left behind (this test's marked sleeps only).
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(gone, "{} daemon(s) outlived the answer", left.len());
}

#[test]
fn answerers_cannot_read_each_others_scratch() {
    if !containable() {
        return;
    }
    let ns = Ns::new("contain-scratch");
    // The server's temporary directory, where scratch directories live without namespaces.
    let tmp = ns.root.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let answerer = script(
        &ns,
        "scratch.sh",
        "q=$(cat); case \"$q\" in *plant*) echo TOP-SECRET > \"$TMPDIR/planted\"; sleep 3; \
         echo planted;; *) cat /tmp/*/planted /tmp/planted \"$TMPDIR\"/../*/planted 2>/dev/null; \
         echo end;; esac",
    );
    let srv = Server::start_with(&ns, &answerer, json!({}), |c| {
        c.env("TMPDIR", &tmp);
    });
    let port = srv.port;
    let planting = std::thread::spawn(move || ask_port(port, "plant it"));
    std::thread::sleep(Duration::from_millis(1200));
    let answer = srv.ask("read it");
    assert!(planting.join().unwrap().contains("planted"));
    assert!(answer.contains("end"), "{answer}");
    assert!(!answer.contains("TOP-SECRET"), "{answer}");
}

#[test]
fn a_live_sessions_control_socket_is_out_of_reach() {
    if !containable() {
        return;
    }
    let ns = Ns::new("contain-socket");
    // The owner's other project: a live session in another namespace.
    let other = Ns::new("contain-other");
    let host = other.host(&["--alias", "victim"]);
    let control = host.field("control");
    let cf = peerwire::runtime::control::read(Path::new(&control)).unwrap();
    let answerer = script(
        &ns,
        "socket.sh",
        &format!(
            "cat >/dev/null; cat {c} 2>/dev/null | head -c 200; python3 - <<'EOF'\n\
import socket\n\
try:\n    s = socket.socket(socket.AF_UNIX); s.connect('{e}'); print('CONNECTED')\n\
except Exception as e: print('refused', e)\n\
EOF\necho end",
            c = control,
            e = cf.endpoint.display()
        ),
    );
    let srv = Server::start(&ns, &answerer, json!({}));
    let answer = srv.ask("message as the owner");
    assert!(answer.contains("end"), "{answer}");
    assert!(!answer.contains("CONNECTED"), "{answer}");
    assert!(!answer.contains(&cf.secret), "{answer}");
    drop(host);
}

/// The owner's interactive shell on a pty, with `peer ask serve` started from it as a
/// background job (so the server and its answerer share the shell's terminal); the answerer
/// pushes a command into the terminal with TIOCSTI.
#[test]
fn tiocsti_cannot_push_a_command_into_the_owners_shell() {
    if !containable() {
        return;
    }
    let ns = Ns::new("contain-tty");
    let pwned = ns.root.join("PWNED");
    let answerer = script(
        &ns,
        "tty.sh",
        &format!(
            "cat >/dev/null; python3 - <<'EOF'\n\
import fcntl, os, termios\n\
done = []\n\
def push(fd):\n    for c in b'touch {p}\\n':\n        fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))\n    done.append(fd)\n\
for flags in (os.O_RDONLY, os.O_RDWR):\n    try: push(os.open('/dev/tty', flags))\n    except Exception as e: print('tty', e)\n\
for fd in (0, 1, 2):\n    try: push(fd)\n    except Exception as e: print(fd, e)\n\
print('pushed', done)\n\
EOF\necho end",
            p = pwned.display()
        ),
    );
    ask_config(&ns, &answerer, json!({}));
    let ready = ns.root.join("ready.json");
    let finished = ns.root.join("finished");
    let driver = ns.root.join("terminal_driver.py");
    std::fs::write(&driver, PTY_DRIVER).unwrap();
    let serve = format!(
        "{PEER} --home {} --json ask serve > {} 2> {} &\n",
        ns.home.display(),
        ready.display(),
        ns.root.join("serve.err").display()
    );
    let mut shell = std::process::Command::new("python3")
        .arg(&driver)
        .arg(&serve)
        .arg(&finished)
        .arg(ns.root.join("pty.log"))
        .current_dir(&ns.work)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(ns.root.join("driver.err")).unwrap())
        .spawn()
        .unwrap();
    let port = {
        let ok = eventually(20, || {
            std::fs::read_to_string(&ready).is_ok_and(|s| s.contains("\"port\""))
        });
        let err = std::fs::read_to_string(ns.root.join("serve.err")).unwrap_or_default()
            + &std::fs::read_to_string(ns.root.join("pty.log")).unwrap_or_default()
            + &std::fs::read_to_string(ns.root.join("driver.err")).unwrap_or_default();
        assert!(ok, "the server on the pty did not start: {err}");
        let v: Value = serde_json::from_str(
            std::fs::read_to_string(&ready)
                .unwrap()
                .lines()
                .next()
                .unwrap(),
        )
        .unwrap();
        v["port"].as_u64().unwrap() as u16
    };
    let answer = ask_port(port, "type into the terminal");
    std::fs::write(&finished, "").unwrap();
    let _ = shell.wait();
    assert!(answer.contains("end"), "{answer}");
    assert!(
        !pwned.exists(),
        "the injected command ran in the owner's shell: {answer}"
    );
}

/// Runs `sh -i` on a new pty, types argv[1] into it (the server as a background job), keeps
/// reading the terminal until the file argv[2] exists, gives anything pushed into the
/// terminal a second to run, then kills the job and ends the shell.
const PTY_DRIVER: &str = r#"
import os, pty, select, sys, time
serve, finished, log = sys.argv[1], sys.argv[2], open(sys.argv[3], "wb")
pid, fd = pty.fork()
if pid == 0:
    os.execvp("sh", ["sh", "-i"])
def pump(until):
    while time.time() < until:
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                log.write(os.read(fd, 4096))
                log.flush()
            except OSError:
                return
os.write(fd, serve.encode())
deadline = time.time() + 60
while not os.path.exists(finished) and time.time() < deadline:
    pump(time.time() + 0.1)
os.write(fd, b"\n")
pump(time.time() + 1.0)
os.write(fd, b"kill %1; exit\n")
pump(time.time() + 1.0)
try:
    os.kill(pid, 9)
except OSError:
    pass
"#;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Prints (never asserts) what containment costs: 20 asks answered through the server with
/// full containment, and the launcher alone with and without the namespaces beside running
/// the answerer bare, all in one run.
#[test]
fn ask_latency_with_and_without_containment_is_printed() {
    if !containable() {
        return;
    }
    let ns = Ns::new("contain-latency");
    let echo = script(&ns, "echo.sh", "cat >/dev/null; echo ok");
    let srv = Server::start(&ns, &echo, json!({}));
    let n = 20;
    let mut asks = Vec::new();
    for _ in 0..n {
        let t = std::time::Instant::now();
        assert_eq!(srv.ask("q"), "ok\n");
        asks.push(t.elapsed());
    }
    drop(srv);
    // The same asks with Landlock and seccomp only (reduced isolation, no namespaces).
    let (srv, _) = serve_without_userns(&ns, &echo, json!({"answerIsolation": "reduced"}));
    let mut reduced_asks = Vec::new();
    for _ in 0..n {
        let t = std::time::Instant::now();
        assert_eq!(srv.ask("q"), "ok\n");
        reduced_asks.push(t.elapsed());
    }
    let scratch = ns.root.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let run = |extra: &[&str], sandboxed: bool| {
        let mut v = Vec::new();
        for _ in 0..n {
            let mut c = if sandboxed {
                let mut c = std::process::Command::new(PEER);
                c.args(["ask", "sandbox-exec", "--scratch"])
                    .arg(&scratch)
                    .arg("--workspace")
                    .arg(&ns.work)
                    .args(["--read", &echo, "--memory-mb", "8192"])
                    .args(["--cpu-seconds", "60", "--processes", "512"])
                    .args(extra)
                    .args(["--", &echo]);
                c
            } else {
                std::process::Command::new(&echo)
            };
            let t = std::time::Instant::now();
            let out = c.stdin(Stdio::null()).output().unwrap();
            v.push(t.elapsed());
            assert_eq!(
                out.stdout,
                b"ok\n",
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        median(v)
    };
    let full = run(&[], true);
    let reduced = run(&["--reduced", "--no-namespaces"], true);
    let bare = run(&[], false);
    println!(
        "ask latency (median of {n}, auto mode, loopback): {:?} with full containment, {:?} \
         with Landlock+seccomp only; launcher alone: full {full:?}, Landlock+seccomp only \
         {reduced:?}, bare answerer {bare:?}",
        median(asks),
        median(reduced_asks)
    );
}

/// `answerNetwork` opens exactly the named destinations, through the server's CONNECT proxy
/// at `HTTPS_PROXY`; another port, and a direct connection, stay closed.
#[test]
fn answer_network_reaches_only_the_named_destinations() {
    if !containable() {
        return;
    }
    let ns = Ns::new("contain-egress");
    let allowed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (ap, op) = (
        allowed.local_addr().unwrap().port(),
        other.local_addr().unwrap().port(),
    );
    let answerer = script(
        &ns,
        "egress.sh",
        &format!(
            "cat >/dev/null; python3 - <<'EOF'\n\
import os, socket\n\
proxy = os.environ.get('HTTPS_PROXY', 'http://127.0.0.1:1').rsplit(':', 1)\n\
def via(port):\n    s = socket.create_connection(('127.0.0.1', int(proxy[1])), 3)\n    s.sendall(b'CONNECT 127.0.0.1:%d HTTP/1.1\\r\\n\\r\\n' % port)\n    r = s.recv(100)\n    if b' 200 ' in r: s.sendall(b'via-proxy')\n    return r.split(b'\\r\\n')[0].decode()\n\
for port in ({ap}, {op}):\n    try: print(port, via(port))\n    except Exception as e: print(port, 'error', e)\n\
try:\n    socket.create_connection(('127.0.0.1', {ap}), 2); print('DIRECT')\n\
except Exception as e: print('direct', e)\n\
EOF\necho end"
        ),
    );
    let srv = Server::start(
        &ns,
        &answerer,
        json!({"answerNetwork": [format!("127.0.0.1:{ap}")]}),
    );
    let answer = srv.ask("reach the model provider");
    assert!(answer.contains("end"), "{answer}");
    assert!(answer.contains(&format!("{ap} HTTP/1.1 200")), "{answer}");
    assert!(answer.contains(&format!("{op} HTTP/1.1 403")), "{answer}");
    assert!(!answer.contains("DIRECT"), "{answer}");
    allowed.set_nonblocking(false).unwrap();
    let (mut conn, _) = allowed.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let _ = std::io::Read::read_to_end(&mut conn, &mut got);
    assert_eq!(got, b"via-proxy");
    other.set_nonblocking(true).unwrap();
    assert!(other.accept().is_err(), "the unnamed port was reached");
}

/// Where the kernel gives no user namespaces (here: a user namespace whose own limit for
/// nested ones is 0), asks are refused unless the owner chose reduced isolation, and the
/// ready line says what is not contained.
#[test]
fn without_user_namespaces_asks_are_refused_unless_isolation_is_reduced() {
    if !containable() {
        return;
    }
    let ns = Ns::new("contain-failsafe");
    let answerer = script(&ns, "ok.sh", "cat >/dev/null; echo ok");
    let start = |extra: Value| serve_without_userns(&ns, &answerer, extra);
    let (srv, ready) = start(json!({}));
    assert_eq!(ready["answererContained"], false, "{ready}");
    assert!(
        !ready["notContained"].as_array().unwrap().is_empty(),
        "{ready}"
    );
    let refused = srv.ask("q");
    assert!(refused.contains("answerIsolation"), "{refused}");
    drop(srv);
    let (srv, ready) = start(json!({"answerIsolation": "reduced"}));
    assert_eq!(ready["answerIsolation"], "reduced");
    assert!(
        ready["notContained"][0]
            .as_str()
            .unwrap()
            .contains("no namespaces")
    );
    assert_eq!(srv.ask("q"), "ok\n");
}

/// `peer ask serve` in a user namespace whose own limit for nested ones is 0, so the
/// answerer's launcher cannot create namespaces; returns the server and its ready line.
fn serve_without_userns(ns: &Ns, answerer: &str, extra: Value) -> (Server, Value) {
    ask_config(ns, answerer, extra);
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["-Ur", "sh", "-c"])
        .arg(format!(
            "echo 0 > /proc/sys/user/max_user_namespaces && exec {PEER} --home {} --json ask serve",
            ns.home.display()
        ))
        .current_dir(&ns.work)
        .env_remove("PEER_HOME")
        .env_remove("PEER_CONTROL");
    Server::spawn(cmd)
}

/// The namespace lies inside a path the owner lets the answerer read: it is covered, and the
/// answerer cannot take the cover off, remount its root writable or enter a new namespace to
/// do so.
#[test]
fn hidden_trees_stay_hidden_and_mounts_cannot_be_undone() {
    if !containable() {
        return;
    }
    let ns = Ns::new("contain-mounts");
    let config = ns.home.join("config.json");
    let file = ns.work.join("notes.txt");
    std::fs::write(&file, "mine").unwrap();
    let answerer = script(
        &ns,
        "mounts.sh",
        &format!(
            "cat >/dev/null; h={h}; w={w}; \
             umount -l $h 2>/dev/null; umount $h 2>/dev/null; \
             mount -o remount,rw / 2>/dev/null; mount -o remount,rw,bind $w 2>/dev/null; \
             unshare -rm sh -c \"umount -l $h; cat $h/config.json\" 2>/dev/null; \
             cat $h/config.json 2>/dev/null; ls -a $h; \
             echo x > $w/notes.txt 2>/dev/null; echo end",
            h = ns.home.display(),
            w = ns.work.display()
        ),
    );
    let srv = Server::start(
        &ns,
        &answerer,
        json!({"answerReadPaths": [answerer.clone(), ns.root.to_string_lossy()]}),
    );
    let answer = srv.ask("undo your mounts");
    assert!(answer.contains("end"), "{answer}");
    assert!(!answer.contains(TOKEN), "the ask config was read: {answer}");
    assert!(!answer.contains("config.json"), "{answer}");
    assert!(config.exists());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
}

/// A server killed outright (no timeout, no cleanup) takes its running answerers with it.
#[test]
fn answerers_die_with_a_killed_server() {
    if !containable() {
        return;
    }
    let ns = Ns::new("contain-orphan");
    let marker = format!("{}.{}", 6000 + std::process::id() % 1000, 3);
    let answerer = script(
        &ns,
        "hang.sh",
        &format!("cat >/dev/null; setsid sleep {marker} & sleep {marker}"),
    );
    let mut srv = Server::start(&ns, &answerer, json!({}));
    let body = json!({"protocolVersion": 1, "caller": "ada", "token": TOKEN,
        "question": "hang", "async": true});
    let r = peerwire::ask::client::post_json("127.0.0.1", srv.port, "/ask", &body, T).unwrap();
    assert_eq!(r.status, 202, "{}", r.body);
    assert!(
        eventually(15, || processes_with(&["sleep", &marker]).len() == 2),
        "the answerer did not start"
    );
    let _ = srv.serve.child.kill();
    let _ = srv.serve.child.wait();
    let gone = eventually(5, || processes_with(&["sleep", &marker]).is_empty());
    let left = processes_with(&["sleep", &marker]);
    for pid in &left {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        gone,
        "{} answerer process(es) outlived the server",
        left.len()
    );
}
