//! The messaging subcommands of `peer`: `send`, `inbox`, `reply`, `consume`, `status`. Each
//! acts for the enclosing session (through its trusted local channel) or, with `--as`, for a
//! short-lived root of its own; all of them go through the same tool implementations as MCP.

use super::lines::{ReceiptLine, describe_message};
use super::session::Session;
use super::{Ctx, args, decode, out, print_json};
use crate::config::internal::{FOLLOW_SLICE_MS, INBOX_PAGES_MAX};
use crate::error::{Code, Error, Result};
use crate::protocol::local::{
    LocalCall, LocalReply, LocalTool, MessageNote, SentMessage, WaitReceipt,
};
use crate::protocol::message::{MessageBody, Receipt};
use crate::runtime::handler::{Info, ReplyAnswer};
use crate::sanitize;
use crate::toolspec::answer::{MessagesPage, PeersPage, SendAnswer, SentView};
use crate::toolspec::{MessagesArgs, SendArgs};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Read;

pub const SEND_HELP: &str =
    "usage: peer send TO (TEXT | -) [--topic T] [--reply-to MSGID] [--message-id ID]
                 [--wait-receipt accepted|prepared|consumed|replied] [--timeout MS]

Sends TEXT (or standard input with -) to TO: an @alias, an alias or an exact peerId. Prints the
custody receipt once the recipient has the message on disk. With --wait-receipt, waits up to
--timeout milliseconds (default 30000) for the receipt to reach STATE.
";

pub const INBOX_HELP: &str =
    "usage: peer inbox [--all] [--after N] [--events-after E] [--from PEER] [--reply-to MSGID]
                  [--message-id ID] [--wait MS | --follow]

Prints this session's unconsumed messages (--all: consumed ones too) and the receipts of its
own sent messages, every page of them. --json prints one page: when \"more\" is true, run
again with --after CURSOR --events-after EVENTCURSOR. --wait blocks up to MS milliseconds (at
most 30000) until a message is there (at once when one already is) and exits with TIMEOUT
when none came; --follow keeps streaming (NDJSON with --json) until interrupted. See peer(1).
";

pub const REPLY_HELP: &str = "usage: peer reply MSGID (TEXT | -) [--topic T]

Replies to a message received by this session; the reply keeps its correlation and the
original message's receipt moves to replied.
";

pub const CONSUME_HELP: &str = "usage: peer consume MSGID [--note TEXT]

Records the message as taken into context (prepared) and then consumed; the sender sees the
receipt move forward.
";

pub const STATUS_HELP: &str = "usage: peer status [MSGID]

With MSGID: the custody state of a message this session sent (accepted, prepared, consumed,
replied, refused, expired, or unresolved with the reason), its original target and
correlation. Without: the session's own health: its message store (ok, or failed with how to
recover; a torn tail discarded at start) and the latest background failures (an expiry sweep,
marking a message replied) that had no caller to answer. Either way a line on stderr says
when background failures are recorded.
";

fn read_text(arg: &str, limit: u64) -> Result<String> {
    if arg != "-" {
        return Ok(arg.to_string());
    }
    let mut buf = Vec::new();
    // One byte more than the limit tells "too large" from "exactly at the limit".
    std::io::stdin()
        .take(limit + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::new(Code::Io, format!("cannot read standard input: {e}")))?;
    if buf.len() as u64 > limit {
        return Err(Error::new(
            Code::MessageTooLarge,
            format!("standard input is over the {limit}-byte message limit"),
        ));
    }
    String::from_utf8(buf).map_err(|_| Error::new(Code::Usage, "standard input is not UTF-8 text"))
}

pub fn send(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let (mut to, mut text) = (None, None);
    let mut body = MessageBody::default();
    let mut message_id = None;
    let (mut wait_state, mut timeout) = (None, 30_000u64);
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("topic") => body.topic = Some(args::string(&mut p, "--topic")?),
            Long("reply-to") => body.reply_to = Some(args::string(&mut p, "--reply-to")?),
            Long("message-id") => message_id = Some(args::string(&mut p, "--message-id")?),
            Long("wait-receipt") => wait_state = Some(args::string(&mut p, "--wait-receipt")?),
            Long("timeout") => timeout = args::millis(&mut p, "--timeout")?,
            Long("help") | Short('h') => return help(SEND_HELP),
            Value(v) if to.is_none() => to = Some(v.string().map_err(args::usage)?),
            Value(v) if text.is_none() => text = Some(v.string().map_err(args::usage)?),
            other => return Err(args::unexpected(other)),
        }
    }
    // One argument in the composer's form, "@bob the build is green": the leading mention is
    // the recipient (shared parser with chat and MCP).
    let (to, text) = match (to, text) {
        (Some(line), None) if line.starts_with('@') => {
            let m = crate::mention::parse(&line);
            match m.leading_recipient {
                Some(r) if !m.body.trim().is_empty() => (Some(r), Some(m.body)),
                _ => (Some(line), None),
            }
        }
        other => other,
    };
    let (Some(to), Some(text)) = (to, text) else {
        return Err(Error::new(
            Code::Usage,
            "peer send needs TO and TEXT (or - for standard input)",
        ));
    };
    let mut session = Session::open(ctx)?;
    body.content = read_text(&text, session.limits().message_bytes.max(1))?;
    let args = tool_args(&SendArgs { to, body })?;
    let sent = session.tool(LocalTool {
        message_id,
        ..LocalTool::new("send_peer_message", args)
    })?;
    let answer: SendAnswer = decode(&sent)?;
    let (raw, line) = match wait_state {
        Some(state) => {
            let wait = WaitReceipt {
                message_id: answer.receipt.message_id,
                state: Some(state),
                wait_ms: Some(timeout),
            };
            let raw = session.call(LocalCall::WaitReceipt(wait), timeout.saturating_add(5_000))?;
            let line = decode::<SentView>(&raw)?.into();
            (raw, line)
        }
        None => (sent, answer.into()),
    };
    let line = name_peers(ctx, &mut session, line);
    print_receipt(ctx, &raw, &line)?;
    session.close();
    Ok(0)
}

/// `--wait` over the namespace's `waitMsMax`, said in the CLI's words (the root would name
/// the MCP tool's argument instead).
fn check_wait(wait: Option<u64>, max: u64) -> Result<()> {
    match wait {
        Some(ms) if ms > max => Err(Error::new(
            Code::Usage,
            format!(
                "--wait takes at most {max} ms (waitMsMax in sessions.communication of config.json), not {ms}"
            ),
        )),
        _ => Ok(()),
    }
}

/// `list_peers`: the peers this session sees now (itself included).
pub(super) fn peers(session: &mut Session) -> Result<PeersPage> {
    let list = LocalTool::new("list_peers", serde_json::Map::new().into());
    session.call_as(LocalCall::Tool(list), 0)
}

/// peerId → alias of the peers this session sees now (itself included); empty when the
/// listing fails (the lines then show peerIds only, as before).
fn aliases(session: &mut Session) -> HashMap<String, String> {
    let Ok(page) = peers(session) else {
        return HashMap::new();
    };
    page.peers
        .into_iter()
        .filter_map(|p| Some((p.peer_id?, p.alias?)))
        .collect()
}

/// One naming rule for people: a receipt names its peers by alias, then peerId, whichever
/// command printed it. JSON output is left as the root answered.
fn name_peers(ctx: &Ctx, session: &mut Session, mut line: ReceiptLine) -> ReceiptLine {
    if !ctx.json {
        line.add_aliases(&aliases(session));
    }
    line
}

/// The lines of an inbox page's receipts, named by [`name_peers`]'s rule.
fn receipt_lines(session: &mut Session, events: &[Receipt]) -> Vec<ReceiptLine> {
    if events.is_empty() {
        return Vec::new();
    }
    let names = aliases(session);
    events
        .iter()
        .map(|e| {
            let mut line = ReceiptLine::from(e.clone());
            line.add_aliases(&names);
            line
        })
        .collect()
}

pub fn inbox(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let mut q = MessagesArgs::default();
    let mut envelope = LocalTool::new("peer_messages", serde_json::Value::Null);
    let (mut follow, mut all, mut wait) = (false, false, None);
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("all") => all = true,
            Long("events-after") => {
                envelope.events_after = Some(args::number(&mut p, "--events-after")?)
            }
            Long("after") => q.after = Some(args::number(&mut p, "--after")?),
            Long("from") => q.from = Some(args::string(&mut p, "--from")?),
            Long("reply-to") => q.reply_to = Some(args::string(&mut p, "--reply-to")?),
            Long("message-id") => q.message_id = Some(args::string(&mut p, "--message-id")?),
            Long("wait") => {
                let ms = args::millis(&mut p, "--wait")?;
                wait = Some(ms);
                q.wait_ms = ms;
            }
            Long("follow") => follow = true,
            Long("help") | Short('h') => return help(INBOX_HELP),
            other => return Err(args::unexpected(other)),
        }
    }
    if follow && wait.is_some() {
        return Err(Error::new(Code::Usage, "use --wait or --follow, not both"));
    }
    envelope.unconsumed = !all;
    if wait.is_some() {
        // A wait is for a message; receipt updates alone do not end it.
        envelope.wait_for = Some("message".into());
    }
    let mut session = Session::open(ctx)?;
    check_wait(wait, session.limits().wait_ms_max)?;
    if !follow {
        let status = print_all_pages(ctx, &mut session, q, envelope, wait, all);
        session.close();
        return status;
    }
    follow_pages(ctx, session, q, envelope, all)
}

/// `peer inbox --follow`: pages as they come, until a signal or the reader goes away.
fn follow_pages(
    ctx: &Ctx,
    mut session: Session,
    mut q: MessagesArgs,
    mut envelope: LocalTool,
    all: bool,
) -> Result<i32> {
    // A follower waits in short slices so it notices, between them, a reader that has gone
    // (`| head -1`) even when nothing more arrives.
    let wait_slice = session.limits().wait_ms_max.min(FOLLOW_SLICE_MS);
    loop {
        let call_args = MessagesArgs {
            wait_ms: wait_slice,
            ..q.clone()
        };
        let raw = session.tool(LocalTool {
            args: tool_args(&call_args)?,
            ..envelope.clone()
        })?;
        let page: MessagesPage = decode(&raw)?;
        print_page(ctx, &mut session, (&raw, &page), true, all)?;
        if let Some(status) = ctx.stopped_status() {
            session.close();
            return Ok(status);
        }
        if out::reader_gone() {
            session.close();
            return Ok(0);
        }
        q.after = Some(page.cursor);
        envelope.events_after = Some(page.event_cursor);
    }
}

/// `peer inbox` without `--follow`: a person gets every page (each bounded in bytes by the
/// root); `--json` gets the first page with `more`/`cursor`/`eventCursor` to continue from.
/// A `--wait` that saw no message ends with TIMEOUT.
fn print_all_pages(
    ctx: &Ctx,
    session: &mut Session,
    mut q: MessagesArgs,
    mut envelope: LocalTool,
    wait: Option<u64>,
    all: bool,
) -> Result<i32> {
    let mut printed = 0usize;
    for pages in 0.. {
        let raw = session.tool(LocalTool {
            args: tool_args(&q)?,
            ..envelope.clone()
        })?;
        let page: MessagesPage = decode(&raw)?;
        if let Some(ms) = wait
            && pages == 0
            && page.messages.is_empty()
        {
            return Err(Error::new(
                Code::Timeout,
                format!("no message arrived within {ms} ms"),
            ));
        }
        if ctx.json {
            print_json(&raw)?;
            return Ok(0);
        }
        printed += page.messages.len() + page.events.len();
        // "(no messages)" only when the whole run printed nothing.
        print_page(ctx, session, (&raw, &page), printed > 0 || page.more, all)?;
        if !page.more {
            break;
        }
        if pages + 1 >= INBOX_PAGES_MAX {
            out::line(&format!(
                "more: peer inbox --after {} --events-after {}",
                page.cursor, page.event_cursor
            ))?;
            break;
        }
        // Further pages are read at once: the wait, if any, is over.
        q.wait_ms = 0;
        q.after = Some(page.cursor);
        envelope.events_after = Some(page.event_cursor);
    }
    Ok(0)
}

/// A page's messages and receipt events as the root wrote them, one `--json` line each.
#[derive(Deserialize)]
struct RawPage {
    #[serde(default)]
    messages: Vec<Value>,
    #[serde(default)]
    events: Vec<Value>,
}

/// One page: as the root wrote it (`--json`; `stream`: one line per message and receipt), or
/// as human lines.
fn print_page(
    ctx: &Ctx,
    session: &mut Session,
    (raw, page): (&Value, &MessagesPage),
    stream: bool,
    all: bool,
) -> Result<()> {
    if ctx.json {
        if !stream {
            return print_json(raw);
        }
        let lines: RawPage = decode(raw)?;
        for m in lines.messages {
            print_json(&json!({"event": "message", "message": m}))?;
        }
        for e in lines.events {
            print_json(&json!({"event": "receipt", "receipt": e}))?;
        }
        return Ok(());
    }
    for m in &page.messages {
        out::line(&describe_message(m))?;
    }
    for e in receipt_lines(session, &page.events) {
        out::line(&format!("receipt: {}", e.describe()))?;
    }
    if !stream && page.messages.is_empty() && page.events.is_empty() {
        out::line(if all {
            "(no messages)"
        } else {
            "(no unconsumed messages; peer inbox --all shows consumed ones too)"
        })?;
    }
    Ok(())
}

pub fn reply(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let (mut id, mut text, mut topic) = (None, None, None);
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("topic") => topic = Some(args::string(&mut p, "--topic")?),
            Long("help") | Short('h') => return help(REPLY_HELP),
            Value(v) if id.is_none() => id = Some(v.string().map_err(args::usage)?),
            Value(v) if text.is_none() => text = Some(v.string().map_err(args::usage)?),
            other => return Err(args::unexpected(other)),
        }
    }
    let (Some(id), Some(text)) = (id, text) else {
        return Err(Error::new(
            Code::Usage,
            "peer reply needs MSGID and TEXT (or - for standard input)",
        ));
    };
    let mut session = Session::open(ctx)?;
    let content = read_text(&text, session.limits().message_bytes.max(1))?;
    let reply = LocalReply {
        message_id: id,
        content,
        topic,
        reply_id: None,
    };
    let raw = session.call(LocalCall::Reply(reply), 0)?;
    let line = name_peers(ctx, &mut session, decode::<ReplyAnswer>(&raw)?.into());
    print_receipt(ctx, &raw, &line)?;
    session.close();
    Ok(0)
}

pub fn consume(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let (mut id, mut note) = (None, None);
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("note") => note = Some(args::string(&mut p, "--note")?),
            Long("help") | Short('h') => return help(CONSUME_HELP),
            Value(v) if id.is_none() => id = Some(v.string().map_err(args::usage)?),
            other => return Err(args::unexpected(other)),
        }
    }
    let Some(id) = id else {
        return Err(Error::new(Code::Usage, "peer consume needs MSGID"));
    };
    let mut session = Session::open(ctx)?;
    let consume = MessageNote {
        message_id: id,
        note,
    };
    let raw = session.call(LocalCall::Consume(consume), 0)?;
    let line = name_peers(ctx, &mut session, decode::<Receipt>(&raw)?.into());
    if ctx.json {
        print_json(&raw)?;
    } else {
        out::line(&line.describe_consumed())?;
    }
    session.close();
    Ok(0)
}

pub fn status(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let mut id = None;
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("help") | Short('h') => return help(STATUS_HELP),
            Value(v) if id.is_none() => id = Some(v.string().map_err(args::usage)?),
            other => return Err(args::unexpected(other)),
        }
    }
    let mut session = Session::open(ctx)?;
    let info: Info = session.call_as(LocalCall::Info, 0)?;
    let Some(id) = id else {
        session.close();
        return print_health(ctx, &info);
    };
    let raw = session.call(LocalCall::Status(SentMessage { message_id: id }), 0)?;
    let line = name_peers(ctx, &mut session, decode::<SentView>(&raw)?.into());
    session.close();
    print_receipt(ctx, &raw, &line)?;
    if !info.problems.is_empty() {
        out::err_line(&format!(
            "peer: {} background failure(s) recorded in this session; 'peer status' shows them",
            info.problems.len()
        ));
    }
    Ok(0)
}

/// `peer status` without a message: the store's state and the recorded background failures.
fn print_health(ctx: &Ctx, info: &Info) -> Result<i32> {
    let (store, problems) = (&info.store, &info.problems);
    if ctx.json {
        print_json(&json!({"ok": true, "store": store, "problems": problems}))?;
        return Ok(0);
    }
    let text = |s: &str| sanitize::line(s, 400);
    let state = match text(store.state).as_str() {
        "" => "ok".to_string(),
        s => s.to_string(),
    };
    out::line(&format!("store: {state}"))?;
    if let Some(recovery) = store.recovery {
        out::line(&format!("  recovery: {}", text(recovery)))?;
    }
    let torn = store.torn_tail_bytes;
    if torn > 0 {
        out::line(&format!(
            "  a torn, never-acknowledged tail of {torn} bytes was discarded at start"
        ))?;
    }
    if problems.is_empty() {
        out::line("background failures: none")?;
    }
    for p in problems {
        out::line(&format!(
            "background failure: {} — {}: {}",
            text(&p.what),
            text(p.code),
            text(&p.message)
        ))?;
    }
    Ok(0)
}

/// A receipt as the root answered it (`--json`), or its line.
fn print_receipt(ctx: &Ctx, raw: &Value, line: &ReceiptLine) -> Result<()> {
    if ctx.json {
        print_json(raw)
    } else {
        out::line(&line.describe())
    }
}

/// A tool's arguments object as the root's strict reader reads it.
fn tool_args<T: serde::Serialize>(args: &T) -> Result<Value> {
    serde_json::to_value(args).map_err(|e| Error::new(Code::Io, e.to_string()))
}

fn help(text: &str) -> Result<i32> {
    out::text(text)?;
    Ok(0)
}
