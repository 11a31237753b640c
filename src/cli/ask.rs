//! `peer ask`: ask a friend on another machine, run the ask server, and decide pending asks.
//! `peer ask peers|card|recommend` belong to `ask_discovery`. See peer-ask(1).

use super::{Ctx, args, out};
use crate::ask::api::{self, AskOutcome};
use crate::ask::config::AskConfig;
use crate::error::{Code, Error, Result};
use serde_json::json;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

pub const HELP: &str = "usage:
  peer ask PEER QUESTION [--context-file F]... [--async] [--json]
  peer ask status PEER ASKID [--json]
  peer ask serve [--listen HOST:PORT] [--json]
  peer ask pending [--json]
  peer ask decide ASKID approve|decline [--json]
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
        "peers" | "card" | "recommend" | "friends" => super::ask_discovery::run(ctx, first, rest),
        _ => ask(ctx, argv),
    }
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

/// How long a synchronous ask runs before the asker is told it is waiting.
const WAIT_NOTICE_AFTER: Duration = Duration::from_millis(1500);

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
        let items: Vec<_> = list.iter().map(|p| p.to_json()).collect();
        super::print_json(&json!({"ok": true, "pending": items}))?;
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
    crate::ask::approval::decide_local(&home, &pos[0], &pos[1])?;
    if ctx.json {
        super::print_json(&json!({"ok": true, "askId": pos[0], "decision": pos[1]}))?;
    } else {
        out::line(&format!("{}: {}", pos[0], pos[1]))?;
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
    let (home, config) = load(ctx)?;
    let server = crate::ask::server::start(&home, config, bind)?;
    let st = &server.state;
    subscribe_owner_notices(st, ctx.json);
    if ctx.json {
        super::print_json(&json!({
            "ok": true, "listen": st.listen.to_string(), "port": st.listen.port(),
            "peer": st.config.caller_name, "publicKey": st.key.sign_string(),
            "fingerprint": st.key.fingerprint(), "sandbox": st.sandbox.name(),
            "workspace": st.workspace.to_string_lossy(), "pid": std::process::id(),
        }))?;
    } else {
        out::line(&format!(
            "peer ask serve: {} listening on {} (key {}, sandbox {})",
            st.config.caller_name,
            st.listen,
            st.key.fingerprint(),
            st.sandbox.name()
        ))?;
    }
    stop.wait();
    server.stop();
    Ok(0)
}

/// Tells the owner in this terminal when an ask waits for them: a line on stderr, or with
/// `--json` an `ask_pending` event on stdout beside the start line.
fn subscribe_owner_notices(st: &crate::ask::ServerState, json: bool) {
    st.notify.subscribe(Box::new(move |n| {
        if json {
            let _ = super::print_json(&n.to_json());
        } else {
            out::err_line(&format!("peer ask serve: {}", n.line()));
        }
    }));
}

/// `peer ask sandbox-exec --scratch DIR [--protect DIR]... [--allow-unenforced] -- CMD…`:
/// the answerer's launcher (internal; started by the ask server).
fn sandbox_exec(argv: Vec<OsString>) -> Result<i32> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let mut scratch = None;
    let mut protect = Vec::new();
    let mut allow = false;
    let mut command = Vec::new();
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("scratch") => scratch = Some(PathBuf::from(p.value().map_err(args::usage)?)),
            Long("protect") => protect.push(PathBuf::from(p.value().map_err(args::usage)?)),
            Long("allow-unenforced") => allow = true,
            Value(v) => {
                command.push(v);
                command.extend(p.raw_args().map_err(args::usage)?);
            }
            other => return Err(args::unexpected(other)),
        }
    }
    let scratch = scratch.ok_or_else(|| Error::new(Code::Usage, "--scratch is required"))?;
    crate::ask::sandbox::exec_sandboxed(&scratch, &protect, allow, &command)
}
