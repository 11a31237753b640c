//! `peer host [-- CMD…]`: runs a root for a session until it is told to stop (or until CMD
//! exits), printing the ready line and events, and cleaning up exactly its own records.

use super::{Ctx, args};
use crate::error::{Code, Error, Result};
use crate::runtime::{Root, RootOptions};
use crossbeam_channel::Receiver;
use std::ffi::OsString;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    let Some(a) = parse(ctx, argv)? else {
        print!("{HELP}");
        return Ok(0);
    };
    let signal = Arc::new(AtomicUsize::new(0));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register_usize(sig, signal.clone(), sig as usize)
            .map_err(|e| Error::new(Code::Io, format!("cannot install signal handler: {e}")))?;
    }
    let signalled = signal_channel()?;
    let root = Root::start(&a.opts)?;
    let events = root.core.bus.subscribe();
    if ctx.json {
        super::print_json(&root.ready_event());
    } else {
        println!(
            "peer host: ready as {} ({}) in {}",
            root.core.alias,
            root.core.peer_id,
            crate::sanitize::line(&root.core.workspace.workspace.to_string_lossy(), 200)
        );
    }
    let show = |ev: serde_json::Value| print_event(ctx.json, &ev);
    let drain = || {
        if let Some(rx) = &events {
            rx.try_iter().for_each(show);
        }
    };
    let status = if a.command.is_empty() {
        wait_for_signal(&signal, events.as_ref(), &signalled, &show)
    } else {
        run_child(&root, &a.command, &signal, &drain)?
    };
    root.shutdown();
    Ok(status)
}

/// Events as NDJSON with `--json`; otherwise one sanitized line per arrival (the `notify`
/// idle behaviour) on stderr, so a hosted command's own stdout stays clean.
fn print_event(json: bool, ev: &serde_json::Value) {
    if json {
        super::print_json(ev);
        return;
    }
    if ev.get("kind").and_then(serde_json::Value::as_str) == Some("message") {
        let s = |k: &str| {
            ev.get(k)
                .and_then(serde_json::Value::as_str)
                .map(|v| crate::sanitize::line(v, 80))
                .unwrap_or_default()
        };
        eprintln!(
            "peer host: message {} from {} (peer inbox to read it)",
            s("messageId"),
            s("from")
        );
    }
}

/// Blocks until a stop signal, printing events as they arrive: no periodic wake-up.
fn wait_for_signal(
    signal: &AtomicUsize,
    events: Option<&Receiver<serde_json::Value>>,
    signalled: &Receiver<()>,
    show: &dyn Fn(serde_json::Value),
) -> i32 {
    let never = crossbeam_channel::never();
    let mut events = events.unwrap_or(&never);
    while signal.load(Ordering::SeqCst) == 0 {
        crossbeam_channel::select! {
            recv(events) -> ev => match ev {
                Ok(ev) => show(ev),
                // The bus is gone: only a signal can end the wait now.
                Err(_) => events = &never,
            },
            recv(signalled) -> _ => {}
        }
    }
    0
}

/// A channel that receives one message per stop signal (SIGINT, SIGTERM, SIGHUP): the signal
/// handler writes to a socket that a small thread blocks on.
fn signal_channel() -> Result<Receiver<()>> {
    use std::io::Read;
    let io =
        |e: std::io::Error| Error::new(Code::Io, format!("cannot install signal handler: {e}"));
    let (mut read, write) = std::os::unix::net::UnixStream::pair().map_err(io)?;
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::low_level::pipe::register(sig, write.try_clone().map_err(io)?).map_err(io)?;
    }
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut buf = [0u8; 16];
            while matches!(read.read(&mut buf), Ok(n) if n > 0) {
                let _ = tx.try_send(());
            }
        })
        .map_err(io)?;
    Ok(rx)
}

fn run_child(
    root: &Root,
    command: &[OsString],
    signal: &AtomicUsize,
    drain: &dyn Fn(),
) -> Result<i32> {
    let mut child = std::process::Command::new(&command[0])
        .args(&command[1..])
        .env("PEER_HOME", &root.core.ns.home)
        .env("PEER_INSTANCE_ID", &root.core.instance_id)
        .env("PEER_PEER_ID", &root.core.peer_id)
        .env("PEER_SESSION_ID", &root.core.session_id)
        .env("PEER_ALIAS", &root.core.alias)
        .env(crate::runtime::control::ENV_CONTROL, &root.control_path)
        .env("PEER_HOLDER_PID", std::process::id().to_string())
        .env_remove(crate::runtime::control::ENV_RUN)
        .spawn()
        .map_err(|e| {
            Error::new(
                Code::Io,
                format!("cannot start {}: {e}", command[0].to_string_lossy()),
            )
        })?;
    let mut forwarded = false;
    loop {
        drain();
        if let Some(status) = child
            .try_wait()
            .map_err(|e| Error::new(Code::Io, format!("cannot wait for child: {e}")))?
        {
            return Ok(exit_code(status));
        }
        let sig = signal.load(Ordering::SeqCst);
        if sig != 0 && !forwarded {
            // Pass the stop request on; the child decides how fast it ends.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::try_from(sig as i32)
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
