//! Subcommands that manage a session's shape rather than its messages: `peer mcp` (a root that
//! speaks MCP on stdio), `peer run-child` (a published child run around a command) and
//! `peer recover` (read-only review of an earlier incarnation's unread mail).

use super::lines::{ReceiptLine, describe_message};
use super::session::Session;
use super::{Ctx, args, out, print_json};
use crate::error::{Code, Error, Result};
use crate::protocol::local::{LocalCall, RunPublish, RunRetire};
use crate::runtime::dispatch::RootTools;
use crate::runtime::handler::{Info, RunPublished};
use crate::runtime::model_tools::message_view;
use crate::runtime::{Root, RootOptions, control};
use crate::toolspec::answer::SentView;
use serde_json::json;
use std::ffi::OsString;
use std::sync::Arc;

pub const MCP_HELP: &str = "usage: peer mcp [--alias A] [--workspace DIR] [--session-id S]

Runs a root that speaks the Model Context Protocol (revision 2025-11-25) on standard input and
output, with the tools list_peers, send_peer_message, peer_messages and coordinate_resource,
and the cross-machine ask tools ask_peer, peers_list, ask_peers, ask_peer_async, ask_result and
recommend_peer (listed only when ask.peers names at least one friend; with ask.listen true the
ask server runs beside it). Add it to an MCP client as the command 'peer mcp', without --alias:
a fixed alias in a client configuration gives every session of that client the same name, and
sends to it fail with AMBIGUOUS_TARGET. Each session gets its own generated alias instead.
";

pub const RUN_CHILD_HELP: &str =
    "usage: peer run-child [--alias A] [--delegate-control] -- CMD [ARG…]

Inside a peer host session: publishes a child run (own runId and peerId, routed through this
session's endpoint), runs CMD with PEER_RUN_ID set, and retires the run when CMD exits.
";

pub const RECOVER_HELP: &str = "usage: peer recover --instance ID [--session-id S]

Shows the unconsumed messages of an earlier incarnation of this session for review. Nothing is
moved or deleted; a damaged store answers RECOVERY_REQUIRED and stays as it is.
";

pub fn mcp(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let mut opts = RootOptions {
        home: ctx.home.clone(),
        alias: ctx.as_alias.clone(),
        mode: "rpc",
        purpose: Some("mcp".into()),
        ..Default::default()
    };
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("alias") => opts.alias = Some(args::string(&mut p, "--alias")?),
            Long("workspace") => opts.workspace = Some(args::string(&mut p, "--workspace")?.into()),
            Long("session-id") => opts.session_id = Some(args::string(&mut p, "--session-id")?),
            Long("help") | Short('h') => {
                out::text(MCP_HELP)?;
                return Ok(0);
            }
            other => return Err(args::unexpected(other)),
        }
    }
    // MCP clients stop a server with SIGTERM (or close stdin): both end the same way, through
    // the root's shutdown, which removes its presence record, socket and control file.
    let stop = ctx.stop()?;
    let input = super::signals::StopAwareInput::stdin(stop)?;
    let root = Root::start(&opts)?;
    super::host::warn_shared_alias(&root, "peer mcp");
    let ask = super::host::ask_beside(&root)?;
    let events = root
        .core
        .bus
        .subscribe()
        .ok_or_else(|| Error::new(Code::QueueFull, "no event subscription left"))?;
    let limits = root.core.limits().clone();
    let host = Arc::new(super::ask_discovery::WithAskTools {
        inner: RootTools(root.core.clone()),
        home: root.core.site.home().to_path_buf(),
        friends: super::ask_discovery::has_friends(root.core.site.home()),
    });
    let result = crate::mcp::serve(
        host,
        events,
        std::io::BufReader::new(input),
        std::io::stdout(),
        &limits,
    );
    if let Some(h) = ask {
        h.stop();
    }
    root.shutdown();
    result.map(|_| 0)
}

pub fn run_child(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    // A wrapper: the command's status, or 125 for peerwire's own failure (`exit`).
    Ok(match run_child_wrapped(ctx, argv) {
        Ok(status) => status,
        Err(e) => super::exit::wrapper_failed(ctx, &e),
    })
}

pub(crate) fn run_child_wrapped(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    let Some(RunChildArgs {
        alias,
        delegate,
        command,
    }) = run_child_args(argv)?
    else {
        return Ok(0);
    };
    if ctx.as_alias.is_some() || std::env::var_os(control::ENV_CONTROL).is_none() {
        return Err(Error::new(
            Code::Usage,
            "peer run-child only works inside a 'peer host -- CMD' session",
        ));
    }
    let mut session = Session::open(ctx)?;
    let alias =
        alias.unwrap_or_else(|| format!("run-{:04x}", crate::identity::random_u64() & 0xffff));
    let publish = RunPublish {
        alias,
        delegate_control: delegate,
    };
    let run = session.call(LocalCall::RunPublish(publish), 0)?;
    let RunPublished {
        run_id,
        control: run_control,
        ..
    } = super::decode(&run)?;
    if ctx.json {
        print_json(&json!({"event": "run", "state": "published", "run": run}))?;
    }
    // The command gets the run's own control file, never the root's: what it may do is bound
    // to the run by the secret it holds.
    let status = std::process::Command::new(&command[0])
        .args(&command[1..])
        .env(control::ENV_CONTROL, &run_control)
        .env(control::ENV_RUN, &run_id)
        .status();
    // Retire whatever happened to the command: later sends to the run get TARGET_ENDED.
    let retired = session.call(
        LocalCall::RunRetire(RunRetire {
            run: run_id.clone(),
        }),
        0,
    );
    session.close();
    let code = match status {
        Ok(s) => super::host::exit_code(s),
        Err(e) => super::exit::spawn_failed("peer run-child", &command[0], &e),
    };
    // The command ran: its status stands; a failed retirement is reported beside it.
    if let Err(e) = retired {
        super::report(ctx, &e);
    }
    Ok(code)
}

/// `peer run-child`'s parsed command line.
struct RunChildArgs {
    alias: Option<String>,
    delegate: bool,
    command: Vec<OsString>,
}

/// Parses `peer run-child [--alias A] [--delegate-control] -- CMD`; `None` after `--help`.
fn run_child_args(argv: Vec<OsString>) -> Result<Option<RunChildArgs>> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let mut alias = None;
    let mut delegate = false;
    let mut command: Vec<OsString> = Vec::new();
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("alias") => alias = Some(args::string(&mut p, "--alias")?),
            Long("delegate-control") => delegate = true,
            Long("help") | Short('h') => {
                out::text(RUN_CHILD_HELP)?;
                return Ok(None);
            }
            Value(v) => {
                command.push(v);
                command.extend(p.raw_args().map_err(args::usage)?);
            }
            other => return Err(args::unexpected(other)),
        }
    }
    if command.is_empty() {
        return Err(Error::new(Code::Usage, "peer run-child needs -- CMD"));
    }
    Ok(Some(RunChildArgs {
        alias,
        delegate,
        command,
    }))
}

pub fn recover(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let (mut instance, mut session_id) = (None, None);
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("instance") => instance = Some(args::string(&mut p, "--instance")?),
            Long("session-id") => session_id = Some(args::string(&mut p, "--session-id")?),
            Long("help") | Short('h') => {
                out::text(RECOVER_HELP)?;
                return Ok(0);
            }
            other => return Err(args::unexpected(other)),
        }
    }
    let instance =
        instance.ok_or_else(|| Error::new(Code::Usage, "peer recover needs --instance ID"))?;
    let session_id = recover_session_id(ctx, session_id)?;
    let home = ctx.home()?;
    let config = crate::config::Config::load(&home)?;
    let review = crate::store::review(&home, &instance, &session_id, &config.limits)?;
    print_review(ctx, &review, &instance, &session_id)?;
    Ok(0)
}

/// The session whose earlier incarnation `peer recover` reviews: `--session-id`, or inside
/// a session the one its root states.
fn recover_session_id(ctx: &Ctx, given: Option<String>) -> Result<String> {
    Ok(match given {
        Some(s) => s,
        None if std::env::var_os(control::ENV_CONTROL).is_some() => {
            let mut s = Session::open(&Ctx {
                as_alias: None,
                ..ctx.clone()
            })?;
            let info: Info = s.call_as(LocalCall::Info, 0)?;
            s.close();
            info.session_id
        }
        None => {
            return Err(Error::new(
                Code::Usage,
                "outside a session, peer recover needs --session-id S",
            ));
        }
    })
}

/// The review as JSON or as lines: unread mail, sends without an answer, a torn tail.
fn print_review(
    ctx: &Ctx,
    review: &crate::store::Review,
    instance: &str,
    session_id: &str,
) -> Result<()> {
    let unread = &review.unread;
    let unresolved: Vec<SentView> = review
        .unresolved
        .iter()
        .map(|e| SentView {
            reason: Some("sent by this earlier incarnation; no custody answer was recorded".into()),
            ..crate::runtime::model_tools::outbox_view(e)
        })
        .collect();
    let torn = json!({"bytes": review.torn_tail_bytes, "batches": review.torn_tail_batches});
    if ctx.json {
        let msgs: Vec<_> = unread.iter().map(|e| message_view(e, None)).collect();
        print_json(&json!({
            "instanceId": instance,
            "sessionId": session_id,
            "unread": msgs,
            "unresolved": unresolved,
            "tornTail": torn,
        }))?;
    } else {
        out::line(&format!(
            "{} unread message(s) of {instance} (review only; nothing was moved):",
            unread.len()
        ))?;
        for e in unread {
            out::line(&describe_message(&message_view(e, None)))?;
        }
        if !unresolved.is_empty() {
            out::line(&format!(
                "{} sent message(s) without a custody answer:",
                unresolved.len()
            ))?;
            for v in &unresolved {
                out::line(&ReceiptLine::from(v.clone()).describe())?;
            }
        }
        if review.torn_tail_bytes > 0 {
            out::line(&format!(
                "a recovery would discard a torn, never-acknowledged tail of {} bytes ({} partial batch)",
                review.torn_tail_bytes, review.torn_tail_batches
            ))?;
        }
    }
    Ok(())
}
