//! One fresh, short-lived answerer per approved ask. `answerCommand` runs in `workspace`
//! contained by `peer ask sandbox-exec` (see `sandbox`: a session and process group of its
//! own, namespaces, limits, Landlock, seccomp), with one JSON document on stdin:
//!
//! `{"askId", "caller", "question", "workspace", "contextFiles":[{"path","content"}],
//!   "messages":[]}`
//!
//! `messages` is the slot for the targeted session's recent peer messages. It is empty in this
//! version on purpose: peer messages of local sessions are not handed to an answer that leaves
//! the machine (dsh-ask-peer copies 60 messages of any advertised session into every answer,
//! an exfiltration path); the answerer reads what it needs from the workspace itself. Its stdout is the
//! answer, read up to a byte bound and cut at `maxAnswerChars` (`truncated: true`); the group
//! (and with it the pid namespace's init, whose end kills every process of the answerer) is
//! killed at the timeout. `contextFiles` are resolved inside the workspace only: absolute
//! paths, `..` and symbolic links that leave it are refused, as are the namespace home and
//! `keyDir`, and each file is size-bounded.

use super::ServerState;
use super::config::{AskConfig, Mode};
use super::http::ApiError;
use super::sandbox::{self, Layers, Plan};
use crate::config::internal::{
    ANSWER_EXIT_POLL, ANSWER_OUTPUT_BYTES_MAX, ANSWER_OUTPUT_GRACE, ANSWER_PATH_CHARS_MAX,
};
use parking_lot::Mutex;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An answer and whether it was cut at `maxAnswerChars`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub text: String,
    pub truncated: bool,
}

/// A context file as the answerer receives it.
#[derive(Clone, Debug)]
pub struct ContextFile {
    pub path: String,
    pub content: String,
}

/// What one approved ask hands to its answerer.
#[derive(Clone, Debug)]
pub struct Work {
    pub ask_id: String,
    pub caller: String,
    pub mode: Mode,
    pub question: String,
    pub context_paths: Vec<String>,
    pub files: Vec<ContextFile>,
    pub timeout_ms: u64,
}

/// Cuts an answer at `max_chars` characters (pure).
pub fn cap_answer(raw: &str, max_chars: usize) -> Answer {
    match raw.char_indices().nth(max_chars) {
        Some((cut, _)) => Answer {
            text: raw[..cut].to_string(),
            truncated: true,
        },
        None => Answer {
            text: raw.to_string(),
            truncated: false,
        },
    }
}

/// Checks the shape of a requested path (pure): relative, no `..`, no NUL, bounded.
pub fn check_shape(rel: &str) -> Result<(), ApiError> {
    let shown = crate::sanitize::line(rel, 120);
    if rel.is_empty() || rel.len() > ANSWER_PATH_CHARS_MAX || rel.contains('\0') {
        return Err(ApiError::bad_request(format!(
            "contextFiles entry \"{shown}\" is not a usable path"
        )));
    }
    let p = Path::new(rel);
    if p.is_absolute()
        || p.components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(ApiError::forbidden(format!(
            "contextFiles entry \"{shown}\" leaves the workspace (absolute or ..)"
        )));
    }
    Ok(())
}

/// Resolves a requested path inside `workspace` (canonical), following symbolic links only
/// while they stay inside it and outside the `protected` trees.
pub fn resolve(workspace: &Path, rel: &str, protected: &[PathBuf]) -> Result<PathBuf, ApiError> {
    check_shape(rel)?;
    let shown = crate::sanitize::line(rel, 120);
    let real = std::fs::canonicalize(workspace.join(rel)).map_err(|_| {
        ApiError::bad_request(format!("contextFiles entry \"{shown}\" does not exist"))
    })?;
    if !real.starts_with(workspace) || protected.iter().any(|p| real.starts_with(p)) {
        return Err(ApiError::forbidden(format!(
            "contextFiles entry \"{shown}\" leaves the workspace"
        )));
    }
    Ok(real)
}

fn read_one(path: &Path, rel: &str, max_bytes: u64) -> Result<String, ApiError> {
    let shown = crate::sanitize::line(rel, 120);
    let unreadable = || {
        ApiError::bad_request(format!(
            "contextFiles entry \"{shown}\" is not a readable file"
        ))
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC | nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|_| unreadable())?;
    let meta = file.metadata().map_err(|_| unreadable())?;
    if !meta.is_file() {
        return Err(unreadable());
    }
    if meta.len() > max_bytes {
        return Err(ApiError::bad_request(format!(
            "contextFiles entry \"{shown}\" exceeds {max_bytes} bytes"
        )));
    }
    let mut buf = Vec::new();
    file.take(max_bytes + 1)
        .read_to_end(&mut buf)
        .map_err(|_| unreadable())?;
    if buf.len() as u64 > max_bytes {
        return Err(ApiError::bad_request(format!(
            "contextFiles entry \"{shown}\" exceeds {max_bytes} bytes"
        )));
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// The trees no answerer and no context file may read: the namespace home and `keyDir`.
pub fn protected_dirs(state: &ServerState) -> Vec<PathBuf> {
    canonical([state.home.clone(), state.config.key_dir(&state.home)])
}

fn canonical(dirs: impl IntoIterator<Item = PathBuf>) -> Vec<PathBuf> {
    dirs.into_iter()
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
        .collect()
}

/// Reads the requested context files, refusing any that leave the workspace.
pub fn read_context(state: &ServerState, paths: &[String]) -> Result<Vec<ContextFile>, ApiError> {
    let protected = protected_dirs(state);
    paths
        .iter()
        .map(|rel| {
            let real = resolve(&state.workspace, rel, &protected)?;
            Ok(ContextFile {
                path: rel.clone(),
                content: read_one(&real, rel, state.config.max_context_file_bytes)?,
            })
        })
        .collect()
}

/// Whether this server can answer at all, checked before the owner is asked to approve.
pub fn ready(state: &ServerState) -> Result<&[String], ApiError> {
    let Some(argv) = state.config.answer_command.as_deref() else {
        return Err(ApiError::ask_failed(
            "this server has no ask.answerCommand configured",
        ));
    };
    if let Some(why) = state.sandbox.refusal(state.config.reduced_isolation) {
        return Err(ApiError::ask_failed(why));
    }
    Ok(argv)
}

/// Runs the answerer for one approved ask. A failure names the answerCommand, to the asker
/// (the error) and to the owner (a line on the server's stderr).
pub fn run(state: &ServerState, work: &Work) -> Result<Answer, ApiError> {
    let argv = ready(state)?;
    run_named(state, work, argv).map_err(|e| name_failure(e, argv, work))
}

/// The answerer's failure with its command named, also reported on the server's stderr.
fn name_failure(mut e: ApiError, argv: &[String], work: &Work) -> ApiError {
    let program = crate::sanitize::line(argv.first().map_or("", String::as_str), 200);
    e.message = format!("answerCommand {program:?}: {}", e.message);
    eprintln!(
        "peer ask serve: ask {} from {}: {}",
        crate::sanitize::line(&work.ask_id, 64),
        crate::sanitize::line(&work.caller, 64),
        crate::sanitize::line(&e.message, 400)
    );
    e
}

fn run_named(state: &ServerState, work: &Work, argv: &[String]) -> Result<Answer, ApiError> {
    // A private scratch directory, the only place the answerer may write; removed on drop.
    let scratch = crate::fsutil::TempDir::new("ask-scratch")
        .map_err(|e| ApiError::internal(format!("scratch directory: {}", e.message)))?;
    // The CONNECT proxy to `answerNetwork`, only where the namespaces give the answerer a
    // network of its own (without them its network is not contained anyway).
    let egress = if !state.config.answer_network.is_empty() && state.sandbox.namespaces {
        Some(
            super::egress::Egress::start(&state.config.answer_network)
                .map_err(|e| ApiError::internal(format!("answerNetwork proxy: {e}")))?,
        )
    } else {
        None
    };
    let proxy = egress.as_ref().map(|e| e.dir());
    let result = spawn_and_collect(state, work, argv, scratch.path(), proxy);
    drop(egress);
    drop(scratch);
    let raw = result?;
    if raw.trim().is_empty() {
        return Err(ApiError::ask_failed("the answerer printed no answer"));
    }
    Ok(cap_answer(&raw, state.config.max_answer_chars))
}

/// The trees an answerer must not see: [`protected_dirs`], the coordination directory and
/// the short socket directories peerwire falls back to (`$XDG_RUNTIME_DIR/peerwire`,
/// `/tmp/peerwire-UID`).
pub fn hidden_dirs(home: &Path, config: &AskConfig) -> Vec<PathBuf> {
    let mut out = vec![home.to_path_buf(), config.key_dir(home)];
    if let Ok(main) = crate::config::Config::load(home)
        && let Some(coord) = main.coordination_directory
    {
        out.push(coord);
    }
    if let Some(xdg) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        out.push(PathBuf::from(xdg).join("peerwire"));
    }
    out.push(PathBuf::from(format!(
        "/tmp/peerwire-{}",
        nix::unistd::geteuid().as_raw()
    )));
    canonical(out)
}

/// The sandbox plan for an answerer (or the start-up probe) of this server.
pub fn plan(
    home: &Path,
    config: &AskConfig,
    workspace: &Path,
    scratch: &Path,
    no_namespaces: bool,
) -> Plan {
    Plan {
        scratch: scratch.to_path_buf(),
        workspace: workspace.to_path_buf(),
        read: canonical(config.answer_read_paths.iter().cloned()),
        hide: hidden_dirs(home, config),
        reduced: config.reduced_isolation,
        no_namespaces,
        memory_mb: config.answer_memory_mb,
        cpu_seconds: config.answer_cpu_seconds,
        processes: config.answer_processes,
        proxy: None,
        probe: false,
        init: false,
        server: None,
        launcher: None,
    }
}

/// Probes, at server start, which layers an answerer of this server would get.
pub fn probe_layers(home: &Path, config: &AskConfig, workspace: &Path) -> Layers {
    match crate::fsutil::TempDir::new("ask-probe") {
        Ok(dir) => sandbox::probe(&plan(home, config, workspace, dir.path(), false)),
        Err(_) => Layers::default(),
    }
}

/// `peer ask sandbox-exec PLAN -- answerCommand…` in the workspace; it puts itself in a
/// session (and process group) of its own.
fn answerer_command(
    state: &ServerState,
    argv: &[String],
    scratch: &Path,
    proxy: Option<PathBuf>,
) -> Result<Command, ApiError> {
    let exe = std::env::current_exe()
        .map_err(|e| ApiError::internal(format!("cannot find the peer binary: {e}")))?;
    let no_ns = !state.sandbox.namespaces;
    let plan = Plan {
        proxy,
        server: Some(std::process::id()),
        ..plan(&state.home, &state.config, &state.workspace, scratch, no_ns)
    };
    let mut cmd = Command::new(exe);
    cmd.args(["ask", "sandbox-exec"])
        .args(sandbox::plan_args(&plan))
        .arg("--")
        .args(argv);
    for var in ["PEER_HOME", "PEER_CONTROL", "PEER_RUN_ID", "AUTOHAND_HOME"] {
        cmd.env_remove(var);
    }
    cmd.env(super::ANSWERER_ENV, "1")
        .env("TMPDIR", scratch)
        .env("XDG_CACHE_HOME", scratch)
        .current_dir(&state.workspace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    Ok(cmd)
}

/// Reads up to `cap` bytes of the answerer's output on a detached thread; the channel says
/// when it stopped and whether the bound was reached.
fn read_output(
    stdout: Option<std::process::ChildStdout>,
    cap: usize,
) -> (Arc<Mutex<Vec<u8>>>, crossbeam_channel::Receiver<bool>) {
    let output = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = crossbeam_channel::bounded(1);
    let out = output.clone();
    std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        let mut full = false;
        if let Some(mut s) = stdout {
            loop {
                match s.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => {
                        let mut buf = out.lock();
                        let room = cap.saturating_sub(buf.len()).min(n);
                        buf.extend_from_slice(&chunk[..room]);
                        if buf.len() >= cap {
                            full = true;
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        }
        let _ = tx.send(full);
    });
    (output, rx)
}

/// What the answerer reads on stdin (dsh-ask-peer's answerer input): members in key order, as
/// the JSON has them; `messages` is the conversation so far, which an ask does not have.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct AnswererInput<'a> {
    ask_id: &'a str,
    caller: &'a str,
    context_files: Vec<InputFile<'a>>,
    messages: [(); 0],
    question: &'a str,
    workspace: std::borrow::Cow<'a, str>,
}

/// One context file of [`AnswererInput`].
#[derive(serde::Serialize)]
struct InputFile<'a> {
    content: &'a str,
    path: &'a str,
}

fn spawn_and_collect(
    state: &ServerState,
    work: &Work,
    argv: &[String],
    scratch: &Path,
    proxy: Option<PathBuf>,
) -> Result<String, ApiError> {
    let mut child = answerer_command(state, argv, scratch, proxy)?
        .spawn()
        .map_err(|e| ApiError::ask_failed(format!("cannot start the answerer: {e}")))?;
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    let input = AnswererInput {
        ask_id: &work.ask_id,
        caller: &work.caller,
        context_files: work
            .files
            .iter()
            .map(|f| InputFile {
                content: &f.content,
                path: &f.path,
            })
            .collect(),
        messages: [],
        question: &work.question,
        workspace: state.workspace.to_string_lossy(),
    };
    let input = serde_json::to_vec(&input).unwrap_or_default();
    let stdin = child.stdin.take();
    // Detached: it ends when the answerer's stdin closes, which the group kill guarantees for
    // every process that stayed in the group.
    std::thread::spawn(move || {
        if let Some(mut s) = stdin {
            // An answerer that ignores stdin closes it early; that is not an error.
            let _ = s.write_all(&input);
        }
    });
    let cap = (state.config.max_answer_chars.saturating_mul(4) + 4).min(ANSWER_OUTPUT_BYTES_MAX);
    let (output, rx) = read_output(child.stdout.take(), cap);
    let deadline = Instant::now() + Duration::from_millis(work.timeout_ms);
    let (end, mut output_done) = wait_exit(pgid, &rx, deadline, &state.stopping);
    // Kill the whole group (stragglers included) before reaping, so the group id cannot have
    // been reused.
    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    // Before `sandbox-exec` made its own group the group kill finds nothing.
    let _ = nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGKILL);
    let status = child.wait().ok().and_then(|s| s.code());
    if !output_done {
        // A process that left the group could hold the pipe open: wait briefly, then give up
        // on the rest of the output rather than on the thread.
        output_done = rx.recv_timeout(ANSWER_OUTPUT_GRACE).is_ok();
    }
    let text = String::from_utf8_lossy(&output.lock()).into_owned();
    outcome(end, output_done, status, work.timeout_ms).map(|()| text)
}

/// How an answerer run ended, as the ask's result (pure).
fn outcome(
    end: End,
    output_done: bool,
    status: Option<i32>,
    timeout_ms: u64,
) -> Result<(), ApiError> {
    match end {
        End::TimedOut => Err(ApiError::ask_failed(format!(
            "the answerer did not finish within {timeout_ms} ms"
        ))),
        // More output than any answer may hold: it is cut anyway.
        End::OutputFull => Ok(()),
        End::Exited if !output_done => Err(ApiError::ask_failed(
            "the answerer left a process holding its output open",
        )),
        End::Exited => match status {
            Some(0) => Ok(()),
            Some(super::sandbox::SANDBOX_REFUSED_EXIT) => Err(ApiError::ask_failed(
                "the answerer's sandbox could not be enforced",
            )),
            Some(super::sandbox::COMMAND_NOT_RUN_EXIT) => Err(ApiError::ask_failed(
                "the answerer could not be started in its sandbox (answerCommand must lie in \
                 the workspace, a system directory or answerReadPaths)",
            )),
            Some(n) => Err(ApiError::ask_failed(format!(
                "the answerer exited with status {n}"
            ))),
            None => Err(ApiError::ask_failed("the answerer was killed by a signal")),
        },
    }
}

enum End {
    Exited,
    OutputFull,
    TimedOut,
}

/// Waits until the answerer has exited (without reaping it), its output reached the bound,
/// or the deadline passed; also says whether the output reader has finished.
fn wait_exit(
    pid: nix::unistd::Pid,
    output_done: &crossbeam_channel::Receiver<bool>,
    deadline: Instant,
    stopping: &std::sync::atomic::AtomicBool,
) -> (End, bool) {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let mut output_closed = false;
    loop {
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
        match waitid(Id::Pid(pid), flags) {
            Ok(WaitStatus::StillAlive) => {}
            _ => return (End::Exited, output_closed),
        }
        let now = Instant::now();
        if now >= deadline || stopping.load(std::sync::atomic::Ordering::SeqCst) {
            return (End::TimedOut, output_closed);
        }
        if output_closed {
            std::thread::sleep(ANSWER_EXIT_POLL.min(deadline - now));
            continue;
        }
        match output_done.recv_timeout(ANSWER_EXIT_POLL.min(deadline - now)) {
            Ok(true) => return (End::OutputFull, true),
            Ok(false) | Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                output_closed = true
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_endings_map_to_results() {
        assert!(outcome(End::Exited, true, Some(0), 1).is_ok());
        assert!(outcome(End::OutputFull, false, None, 1).is_ok());
        let msg = |r: Result<(), ApiError>| r.unwrap_err().message;
        assert!(msg(outcome(End::TimedOut, true, Some(0), 7)).contains("within 7 ms"));
        assert!(msg(outcome(End::Exited, false, Some(0), 1)).contains("holding its output"));
        assert!(msg(outcome(End::Exited, true, Some(125), 1)).contains("sandbox"));
        assert!(msg(outcome(End::Exited, true, Some(127), 1)).contains("answerReadPaths"));
        assert!(msg(outcome(End::Exited, true, Some(3), 1)).contains("status 3"));
        assert!(msg(outcome(End::Exited, true, None, 1)).contains("signal"));
    }

    #[test]
    fn answers_are_capped_by_characters() {
        assert_eq!(
            cap_answer("héllo", 3),
            Answer {
                text: "hél".into(),
                truncated: true
            }
        );
        assert_eq!(
            cap_answer("héllo", 5),
            Answer {
                text: "héllo".into(),
                truncated: false
            }
        );
        assert!(!cap_answer("", 1).truncated);
    }

    #[test]
    fn shapes_that_leave_the_workspace_are_refused() {
        for bad in ["/etc/passwd", "../x", "a/../../x", "a/.."] {
            assert_eq!(check_shape(bad).unwrap_err().status, 403, "{bad}");
        }
        assert_eq!(check_shape("").unwrap_err().status, 400);
        assert_eq!(check_shape("a\0b").unwrap_err().status, 400);
        assert!(check_shape("src/./main.rs").is_ok());
    }

    #[test]
    fn symlinks_out_of_the_workspace_are_refused() {
        let base = crate::fsutil::TempDir::new("ctx").unwrap();
        let ws = base.join("ws");
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::create_dir_all(base.join("secret")).unwrap();
        std::fs::write(base.join("secret/key"), "k").unwrap();
        std::fs::write(ws.join("sub/a.txt"), "a").unwrap();
        std::os::unix::fs::symlink(base.join("secret/key"), ws.join("out")).unwrap();
        std::os::unix::fs::symlink("sub/a.txt", ws.join("in")).unwrap();
        let ws = std::fs::canonicalize(&ws).unwrap();
        assert!(resolve(&ws, "in", &[]).is_ok());
        assert!(resolve(&ws, "sub/a.txt", &[]).is_ok());
        assert_eq!(resolve(&ws, "out", &[]).unwrap_err().status, 403);
        assert_eq!(
            resolve(&ws, "sub", &[ws.join("sub")]).unwrap_err().status,
            403
        );
        assert_eq!(resolve(&ws, "missing", &[]).unwrap_err().status, 400);
    }
}
