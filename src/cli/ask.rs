//! `peer ask`: ask a friend on another machine, run the ask server, and decide pending asks.
//! `peer ask peers|card|recommend` belong to `ask_discovery`. See peer-ask(1).

use super::{Ctx, args, out};
use crate::ask::api::{self, AskOutcome};
use crate::ask::config::AskConfig;
use crate::config::internal::ASK_WAIT_NOTICE_AFTER as WAIT_NOTICE_AFTER;
use crate::error::{Code, Error, Result};
use serde_json::json;
use std::ffi::OsString;
use std::path::PathBuf;

pub const HELP: &str = "usage:
  peer ask PEER QUESTION [--context-file F]... [--async] [--json]
  peer ask status PEER ASKID [--json]
  peer ask serve [--listen HOST:PORT] [--json]
  peer ask pending [--json]
  peer ask decide ASKID approve|decline [--json]
  peer ask answer --from-workspace [--max-matches N]
  peer ask token new [--json]
  peer ask peers|card|recommend|friends ...

Asks a friend's agent on another machine (configured under \"ask\" in config.json), serves
this machine's ask server, and lets the owner approve or decline asks waiting for consent.
See peer-ask(1).
";

pub fn cmd(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    let first = argv.first().and_then(|a| a.to_str()).unwrap_or("--help");
    let rest = argv.iter().skip(1).cloned().collect::<Vec<_>>();
    if first == "sandbox-exec" {
        return sandbox_exec(rest);
    }
    // The shipped answerer runs as an answerer: it asks nobody, so the loop guard below does
    // not apply to it.
    if first == "answer" {
        return answer_cmd(rest);
    }
    if std::env::var_os(crate::ask::ANSWERER_ENV).is_some() {
        return Err(Error::new(
            Code::CapabilityDenied,
            "an answerer cannot use peer ask (no ask loops)",
        ));
    }
    match first {
        "--help" | "-h" | "help" => {
            out::text(HELP)?;
            Ok(0)
        }
        "serve" => serve(ctx, rest),
        "status" => status(ctx, rest),
        "pending" => pending(ctx, rest),
        "decide" => decide(ctx, rest),
        "token" => token(ctx, rest),
        "peers" | "card" | "recommend" | "friends" => super::ask_discovery::run(ctx, first, rest),
        _ => ask(ctx, argv),
    }
}

pub const ANSWER_HELP: &str = "usage: peer ask answer --from-workspace [--max-matches N]

The answerer that ships with peer, for ask.answerCommand (no model needed): reads the
answerer's JSON document on stdin and answers from the workspace it runs in, printing the
lines that mention the question's terms as file:line excerpts (context files first, then the
tree; bounded; .git, target, node_modules and binary files skipped). See peer-ask(1) for
adapters that answer with a coding agent instead.
";

/// `peer ask answer --from-workspace`: the shipped answerer (`ask::workspace_answer`).
fn answer_cmd(argv: Vec<OsString>) -> Result<i32> {
    use lexopt::prelude::*;
    use std::io::Read;
    let mut p = args::parser(argv);
    let mut bounds = crate::ask::workspace_answer::Bounds::default();
    let mut from_workspace = false;
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("from-workspace") => from_workspace = true,
            Long("max-matches") => {
                let v = args::string(&mut p, "--max-matches")?;
                bounds.matches = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .ok_or_else(|| Error::new(Code::Usage, "--max-matches takes 1-1000"))?;
            }
            Long("help") | Short('h') => {
                out::text(ANSWER_HELP)?;
                return Ok(0);
            }
            other => return Err(args::unexpected(other)),
        }
    }
    if !from_workspace {
        return Err(Error::new(
            Code::Usage,
            "peer ask answer needs --from-workspace (the one answerer built in)",
        ));
    }
    let mut input = Vec::new();
    let limit = crate::config::internal::WORKSPACE_ANSWER_INPUT_BYTES_MAX as u64;
    std::io::stdin()
        .take(limit + 1)
        .read_to_end(&mut input)
        .map_err(|e| Error::new(Code::Io, format!("cannot read standard input: {e}")))?;
    if input.len() as u64 > limit {
        return Err(Error::new(
            Code::MessageTooLarge,
            format!("the answerer's document is over {limit} bytes"),
        ));
    }
    let cwd = std::env::current_dir()
        .map_err(|e| Error::new(Code::Io, format!("cannot read the current directory: {e}")))?;
    let text = crate::ask::workspace_answer::answer(&input, &cwd, &bounds)?;
    out::text(&text)?;
    Ok(0)
}

/// An `answerCommand` that starts with the bare name `peer` means this very peer: the running
/// executable's path replaces it, so the built-in answerer works where `peer` is not on the
/// server's `PATH` and inside a sandbox that maps only the running executable.
fn own_peer_as_answerer(config: &mut AskConfig) {
    let Some(first) = config.answer_command.as_mut().and_then(|a| a.first_mut()) else {
        return;
    };
    if first == "peer"
        && let Some(exe) = std::env::current_exe()
            .ok()
            .and_then(|p| p.into_os_string().into_string().ok())
    {
        *first = exe;
    }
}

/// `peer ask serve`'s check of `answerCommand` before it listens: a missing or
/// non-executable program is refused now instead of failing every approved ask later, and a
/// missing answerCommand is warned about.
fn check_answer_command(config: &AskConfig) -> Result<()> {
    let Some(program) = config.answer_command.as_ref().and_then(|a| a.first()) else {
        out::err_line(
            "peer ask serve: warning: ask.answerCommand is not set, so every approved ask fails; \
             the built-in answerer is [\"peer\", \"ask\", \"answer\", \"--from-workspace\"]",
        );
        return Ok(());
    };
    super::exit::find_program(std::ffi::OsStr::new(program)).map_err(|e| {
        Error::new(
            Code::ConfigInvalid,
            format!(
                "ask.answerCommand {:?} cannot be run ({e}); give an executable path, or use the \
                 built-in answerer: [\"peer\", \"ask\", \"answer\", \"--from-workspace\"]",
                crate::sanitize::line(program, 200)
            ),
        )
    })
}

fn load(ctx: &Ctx) -> Result<(PathBuf, AskConfig)> {
    let home = ctx.home()?;
    let config = AskConfig::load(&home)?;
    Ok((home, config))
}

/// Positional arguments only (plus `--help`).
fn positionals(argv: Vec<OsString>, want: usize, what: &str) -> Result<Option<Vec<String>>> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let mut out = Vec::new();
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("help") | Short('h') => return Ok(None),
            Value(v) => out.push(
                v.into_string()
                    .map_err(|_| Error::new(Code::Usage, "arguments must be UTF-8"))?,
            ),
            other => return Err(args::unexpected(other)),
        }
    }
    if out.len() != want {
        return Err(Error::new(Code::Usage, format!("usage: peer ask {what}")));
    }
    Ok(Some(out))
}

fn ask(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let mut pos = Vec::new();
    let mut files = Vec::new();
    let mut is_async = false;
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("context-file") => files.push(args::string(&mut p, "--context-file")?),
            Long("async") => is_async = true,
            Long("help") | Short('h') => {
                out::text(HELP)?;
                return Ok(0);
            }
            Value(v) => pos.push(
                v.into_string()
                    .map_err(|_| Error::new(Code::Usage, "arguments must be UTF-8"))?,
            ),
            other => return Err(args::unexpected(other)),
        }
    }
    let [peer, question] = <[String; 2]>::try_from(pos).map_err(|_| {
        Error::new(
            Code::Usage,
            "usage: peer ask PEER QUESTION [--context-file F]... [--async]",
        )
    })?;
    let (home, config) = load(ctx)?;
    let notice = (!is_async).then(|| wait_notice(&peer, config.timeout_ms));
    let outcome = api::ask(&home, &config, &peer, &question, &files, is_async);
    drop(notice);
    match outcome? {
        AskOutcome::Answered { answer, truncated } => {
            if ctx.json {
                super::print_json(
                    &json!({"ok": true, "peer": peer, "answer": answer, "truncated": truncated}),
                )?;
            } else {
                out::line(&crate::sanitize::text(&answer))?;
                if truncated {
                    out::err_line("peer ask: the answer was cut at the peer's maxAnswerChars");
                }
            }
        }
        AskOutcome::Queued { ask_id } => {
            if ctx.json {
                super::print_json(
                    &json!({"ok": true, "peer": peer, "askId": ask_id, "status": "queued"}),
                )?;
            } else {
                out::line(&ask_id)?;
            }
        }
    }
    Ok(0)
}

/// Says `waiting for PEER's approval (up to N s)` on stderr when a synchronous ask has not
/// been answered after [`WAIT_NOTICE_AFTER`]. The protocol (dsh-ask-peer's, which ours keeps)
/// holds a synchronous ask open without any word while the friend's owner decides, so the
/// asker cannot tell approval from a slow answer: a pause is taken as the approval wait (as
/// peer-ask(1) says). Dropping the returned sender ends the wait silently.
fn wait_notice(peer: &str, timeout_ms: u64) -> std::sync::mpsc::Sender<()> {
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let line = format!(
        "peer ask: waiting for {}'s approval (up to {} s)",
        crate::sanitize::line(peer, 64),
        (timeout_ms / 1000).saturating_add(5)
    );
    let _ = std::thread::Builder::new()
        .name("ask-wait-notice".into())
        .spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                wait.recv_timeout(WAIT_NOTICE_AFTER)
            {
                out::err_line(&line);
            }
        });
    done
}

fn status(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    let Some(pos) = positionals(argv, 2, "status PEER ASKID")? else {
        out::text(HELP)?;
        return Ok(0);
    };
    let (home, config) = load(ctx)?;
    let s = api::status(&home, &config, &pos[0], &pos[1])?;
    if ctx.json {
        let mut v = json!({"ok": true, "peer": pos[0], "askId": pos[1], "status": s.status});
        if let Some(a) = &s.answer {
            v["answer"] = json!(a);
            v["truncated"] = json!(s.truncated);
        }
        if let Some(e) = &s.error {
            v["error"] = json!(e);
        }
        super::print_json(&v)?;
    } else {
        out::line(&crate::sanitize::line(&s.status, 20))?;
        if let Some(a) = &s.answer {
            out::line(&crate::sanitize::text(a))?;
        }
        if let Some(e) = &s.error {
            out::line(&format!("error: {}", crate::sanitize::line(e, 400)))?;
        }
    }
    Ok(0)
}

fn pending(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    if positionals(argv, 0, "pending")?.is_none() {
        out::text(HELP)?;
        return Ok(0);
    }
    let home = ctx.home()?;
    let list = crate::ask::approval::list_pending(&home)?;
    if ctx.json {
        super::print_json(&json!({"ok": true, "pending": list}))?;
    } else if list.is_empty() {
        out::line("no asks are waiting for a decision")?;
    } else {
        for p in &list {
            out::line(&format!(
                "{}  from {}  until {}  {}",
                p.ask_id,
                crate::sanitize::line(&p.caller, 64),
                p.expires_at,
                crate::sanitize::line(&p.question, 200)
            ))?;
        }
    }
    Ok(0)
}

fn decide(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    let Some(pos) = positionals(argv, 2, "decide ASKID approve|decline")? else {
        out::text(HELP)?;
        return Ok(0);
    };
    let home = ctx.home()?;
    let id = crate::ask::approval::decide_local(&home, &pos[0], &pos[1])?;
    if ctx.json {
        super::print_json(&json!({"ok": true, "askId": id, "decision": pos[1]}))?;
    } else {
        out::line(&format!("{id}: {}", pos[1]))?;
    }
    Ok(0)
}

/// `peer ask token new`: a fresh shared token for a friend entry (256 random bits).
fn token(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    let Some(pos) = positionals(argv, 1, "token new")? else {
        out::text(HELP)?;
        return Ok(0);
    };
    if pos[0] != "new" {
        return Err(Error::new(Code::Usage, "usage: peer ask token new"));
    }
    let t = crate::ask::config::new_token();
    if ctx.json {
        super::print_json(&json!({"ok": true, "token": t}))?;
    } else {
        out::line(&t)?;
    }
    Ok(0)
}

fn serve(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let mut bind = None;
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("listen") => {
                let s = args::string(&mut p, "--listen")?;
                bind = Some(s.parse().map_err(|_| {
                    Error::new(Code::Usage, "--listen takes HOST:PORT with an IP address")
                })?);
            }
            Long("help") | Short('h') => {
                out::text(HELP)?;
                return Ok(0);
            }
            other => return Err(args::unexpected(other)),
        }
    }
    let stop = ctx.stop()?;
    let (home, mut config) = load(ctx)?;
    own_peer_as_answerer(&mut config);
    check_answer_command(&config)?;
    let server = crate::ask::server::start(&home, config, bind)?;
    let st = &server.state;
    subscribe_owner_notices(st, ctx.json);
    if ctx.json {
        super::print_json(&json!({
            "ok": true, "listen": st.listen.to_string(), "port": st.listen.port(),
            "peer": st.config.caller_name, "publicKey": st.key.sign_string(),
            "fingerprint": st.key.fingerprint(),
            "sandbox": if st.sandbox.landlock > 0 { "landlock" } else { "unavailable" },
            "answerer": st.sandbox.describe(), "answererContained": st.sandbox.contained(),
            "answerIsolation": if st.config.reduced_isolation { "reduced" } else { "full" },
            "notContained": st.sandbox.missing(),
            "workspace": st.workspace.to_string_lossy(), "pid": std::process::id(),
        }))?;
    } else {
        out::line(&format!(
            "peer ask serve: {} listening on {} (key {})",
            st.config.caller_name,
            st.listen,
            st.key.fingerprint(),
        ))?;
    }
    containment_notice(&st.sandbox, st.config.reduced_isolation);
    owner_page_notice(st);
    stop.wait();
    server.stop();
    Ok(0)
}

/// The owner page's URL with its secret, on stderr only (never in `--json` output or a log).
fn owner_page_notice(st: &crate::ask::ServerState) {
    match st.owner.url(st.reachable_addr()) {
        Some(url) => out::err_line(&format!("owner page: {url}")),
        None => out::err_line(&format!(
            "owner page: not served ({} is not a loopback address); use 'peer ask pending'",
            st.listen
        )),
    }
}

/// The answerer's layers on stderr at every start, and what is not contained.
fn containment_notice(layers: &crate::ask::sandbox::Layers, reduced: bool) {
    out::err_line(&format!("answerer: {}", layers.describe()));
    let missing = layers.missing();
    if layers.contained() && missing.is_empty() {
        return;
    }
    if !layers.contained() && !reduced {
        out::err_line(
            "answerer: cannot be contained on this machine; asks are refused until \
             ask.answerIsolation is \"reduced\"",
        );
    } else if !layers.contained() {
        out::err_line("answerer: answerIsolation is \"reduced\"; NOT contained:");
    }
    for m in missing {
        out::err_line(&format!("answerer:   - {m}"));
    }
}

/// Tells the owner in this terminal when an ask waits for them: a line on stderr, or with
/// `--json` an `ask_pending` event on stdout beside the start line.
fn subscribe_owner_notices(st: &crate::ask::ServerState, json: bool) {
    st.notify.subscribe(Box::new(move |n| {
        if json {
            let _ = super::print_json(&serde_json::to_value(n).unwrap_or_default());
        } else {
            out::err_line(&format!("peer ask serve: {}", n.line()));
        }
    }));
}

/// `peer ask sandbox-exec --scratch DIR --workspace DIR [--read P]... [--hide P]... [--proxy DIR]
/// [--server PID] [--memory-mb N] [--cpu-seconds N] [--processes N] [--reduced] [--no-namespaces] [--probe]
/// -- CMD…`: the answerer's launcher (internal; started by the ask server).
fn sandbox_exec(argv: Vec<OsString>) -> Result<i32> {
    use crate::ask::sandbox::Plan;
    use lexopt::prelude::*;
    let mut p = args::parser(argv.clone());
    let d = AskConfig::default();
    let mut plan = Plan {
        memory_mb: d.answer_memory_mb,
        cpu_seconds: d.answer_cpu_seconds,
        processes: d.answer_processes,
        ..Plan::default()
    };
    let mut command = Vec::new();
    let num = |p: &mut lexopt::Parser, flag: &str| -> Result<u64> {
        args::string(p, flag)?
            .parse()
            .map_err(|_| Error::new(Code::Usage, format!("{flag} takes a number")))
    };
    while let Some(arg) = p.next().map_err(args::usage)? {
        let path = |p: &mut lexopt::Parser| p.value().map(PathBuf::from).map_err(args::usage);
        match arg {
            Long("scratch") => plan.scratch = path(&mut p)?,
            Long("workspace") => plan.workspace = path(&mut p)?,
            Long("read") => plan.read.push(path(&mut p)?),
            Long("hide") => plan.hide.push(path(&mut p)?),
            Long("proxy") => plan.proxy = Some(path(&mut p)?),
            Long("memory-mb") => plan.memory_mb = num(&mut p, "--memory-mb")?,
            Long("cpu-seconds") => plan.cpu_seconds = num(&mut p, "--cpu-seconds")?,
            Long("processes") => plan.processes = num(&mut p, "--processes")?,
            Long("reduced") | Long("allow-unenforced") => plan.reduced = true,
            Long("no-namespaces") => plan.no_namespaces = true,
            Long("probe") => plan.probe = true,
            Long("init") => plan.init = true,
            Long("launcher") => plan.launcher = Some(num(&mut p, "--launcher")? as u32),
            Long("server") => plan.server = Some(num(&mut p, "--server")? as u32),
            Value(v) => {
                command.push(v);
                command.extend(p.raw_args().map_err(args::usage)?);
            }
            other => return Err(args::unexpected(other)),
        }
    }
    if plan.scratch.as_os_str().is_empty() || plan.workspace.as_os_str().is_empty() {
        return Err(Error::new(
            Code::Usage,
            "--scratch and --workspace are required",
        ));
    }
    // Handed on to init, which gets `--init` in front of them.
    crate::ask::sandbox::exec(&plan, &argv, &command)
}
