//! `peer host [-- CMD…]`: runs a root for a session until it is told to stop (or until CMD
//! exits), printing the ready line and events, and cleaning up exactly its own records.

use super::signals::Stop;
use super::{Ctx, args, out};
use crate::error::{Code, Error, Result};
use crate::runtime::{Root, RootOptions};
use std::ffi::OsString;
use std::time::Duration;

pub const HELP: &str =
    "usage: peer host [--alias A] [--session-id S] [--workspace DIR] [--json] [-- CMD [ARG…]]

Starts a root for this session: an endpoint, a durable inbox and a presence record. With CMD,
runs it as a child whose peer commands act for this session, and exits with its status.
Without CMD, runs until SIGINT or SIGTERM. See peer(1).
";

struct HostArgs {
    opts: RootOptions,
    command: Vec<OsString>,
}

fn parse(ctx: &Ctx, argv: Vec<OsString>) -> Result<Option<HostArgs>> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let mut opts = RootOptions {
        home: ctx.home.clone(),
        alias: ctx.as_alias.clone(),
        mode: "command",
        ..Default::default()
    };
    let mut command = Vec::new();
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("alias") => opts.alias = Some(args::string(&mut p, "--alias")?),
            Long("session-id") => opts.session_id = Some(args::string(&mut p, "--session-id")?),
            Long("workspace") => opts.workspace = Some(args::string(&mut p, "--workspace")?.into()),
            Long("help") | Short('h') => return Ok(None),
            Value(v) => {
                command.push(v);
                command.extend(p.raw_args().map_err(args::usage)?);
            }
            other => return Err(args::unexpected(other)),
        }
    }
    Ok(Some(HostArgs { opts, command }))
}

pub fn cmd(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    // With a command, peerwire's own failures exit 125 (see `exit`), whatever their code.
    let wraps = argv.iter().any(|a| a == "--");
    let a = match parse(ctx, argv) {
        Ok(a) => a,
        Err(e) if wraps => return Ok(super::exit::wrapper_failed(ctx, &e)),
        Err(e) => return Err(e),
    };
    if let Some(a) = &a
        && !a.command.is_empty()
    {
        return Ok(match host(ctx, a) {
            Ok(status) => status,
            Err(e) => super::exit::wrapper_failed(ctx, &e),
        });
    }
    match a {
        Some(a) => host(ctx, &a),
        None => host_help(),
    }
}

fn host_help() -> Result<i32> {
    out::text(HELP)?;
    Ok(0)
}

fn host(ctx: &Ctx, a: &HostArgs) -> Result<i32> {
    let stop = ctx.stop()?;
    let root = Root::start(&a.opts)?;
    let events = root.bus.subscribe();
    let ready = if ctx.json {
        super::print_json(&root.ready_event())
    } else {
        out::line(&format!(
            "peer host: ready as {} ({}) in {}",
            root.alias,
            root.peer_id,
            crate::sanitize::line(&root.workspace.workspace.to_string_lossy(), 200)
        ))
    };
    // Without CMD, a reader of our output that went away ends the host (quietly, after its
    // cleanup); with CMD, the child owns the session's lifetime and output merely stops.
    let mut output_open = ready.is_ok();
    if a.command.is_empty() {
        ready?;
    }
    let mut drain = || -> Result<()> {
        if let Some(rx) = &events {
            for ev in rx.try_iter() {
                if output_open && print_event(ctx.json, &ev).is_err() {
                    output_open = false;
                }
            }
        }
        if output_open || !a.command.is_empty() {
            Ok(())
        } else {
            Err(out::closed())
        }
    };
    let status = if a.command.is_empty() {
        wait_for_signal(&stop, &mut drain)
    } else {
        run_child(&root, &a.command, &stop, &mut drain)
    };
    root.shutdown();
    status
}

/// Events as NDJSON with `--json`; otherwise one sanitized line per arrival (the `notify`
/// idle behaviour) on stderr, so a hosted command's own stdout stays clean.
fn print_event(json: bool, ev: &serde_json::Value) -> Result<()> {
    if json {
        return super::print_json(ev);
    }
    if ev.get("kind").and_then(serde_json::Value::as_str) == Some("message") {
        let s = |k: &str| {
            ev.get(k)
                .and_then(serde_json::Value::as_str)
                .map(|v| crate::sanitize::line(v, 80))
                .unwrap_or_default()
        };
        out::err_line(&format!(
            "peer host: message {} from {} (peer inbox to read it)",
            s("messageId"),
            s("from")
        ));
    }
    Ok(())
}

fn wait_for_signal(stop: &Stop, drain: &mut dyn FnMut() -> Result<()>) -> Result<i32> {
    while stop.signal().is_none() {
        drain()?;
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(0)
}

fn run_child(
    root: &Root,
    command: &[OsString],
    stop: &Stop,
    drain: &mut dyn FnMut() -> Result<()>,
) -> Result<i32> {
    let spawned = std::process::Command::new(&command[0])
        .args(&command[1..])
        .env("PEER_HOME", &root.ns.home)
        .env("PEER_INSTANCE_ID", &root.instance_id)
        .env("PEER_PEER_ID", &root.peer_id)
        .env("PEER_SESSION_ID", &root.session_id)
        .env("PEER_ALIAS", &root.alias)
        .env(crate::runtime::control::ENV_CONTROL, &root.control_path)
        .env("PEER_HOLDER_PID", std::process::id().to_string())
        .env_remove(crate::runtime::control::ENV_RUN)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return Ok(super::exit::spawn_failed("peer host", &command[0], &e)),
    };
    let mut forwarded = false;
    loop {
        drain()?;
        if let Some(status) = child
            .try_wait()
            .map_err(|e| Error::new(Code::Io, format!("cannot wait for child: {e}")))?
        {
            return Ok(exit_code(status));
        }
        if let Some(sig) = stop.signal()
            && !forwarded
        {
            // Pass the stop request on; the child decides how fast it ends.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::try_from(sig)
                    .unwrap_or(nix::sys::signal::Signal::SIGTERM),
            );
            forwarded = true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The shell convention: the exit code, or 128 + signal number.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}
