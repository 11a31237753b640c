//! The messaging subcommands of `peer`: `send`, `inbox`, `reply`, `consume`, `status`. Each
//! acts for the enclosing session (through its trusted local channel) or, with `--as`, for a
//! short-lived root of its own; all of them go through the same tool implementations as MCP.

use super::session::Session;
use super::{Ctx, args, out, print_json};
use crate::config::internal::{FOLLOW_SLICE_MS, INBOX_PAGES_MAX};
use crate::error::{Code, Error, Result};
use crate::protocol::local::{
    LocalCall, LocalReply, LocalTool, MessageNote, SentMessage, WaitReceipt,
};
use crate::protocol::message::MessageBody;
use crate::sanitize;
use crate::toolspec::{MessagesArgs, SendArgs};
use serde_json::{Value, json};
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
    let mut receipt = session.tool(LocalTool {
        message_id,
        ..LocalTool::new("send_peer_message", args)
    })?;
    if let Some(state) = wait_state {
        let wait = WaitReceipt {
            message_id: receipt
                .get("messageId")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_string(),
            state: Some(state),
            wait_ms: Some(timeout),
        };
        receipt = session.call(LocalCall::WaitReceipt(wait), timeout.saturating_add(5_000))?;
    }
    name_peers(ctx, &mut session, &mut receipt);
    print_receipt(ctx, &receipt)?;
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

/// peerId → alias of the peers this session sees now (itself included); empty when the
/// listing fails (the lines then show peerIds only, as before).
fn aliases(session: &mut Session) -> std::collections::HashMap<String, String> {
    let Ok(page) = session.tool(LocalTool::new("list_peers", json!({}))) else {
        return Default::default();
    };
    page.get("peers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let id = p.get("peerId")?.as_str()?;
            let alias = p.get("alias")?.as_str()?;
            Some((id.to_string(), alias.to_string()))
        })
        .collect()
}

/// Adds the missing `toAlias`/`fromAlias` of a receipt from `names`.
fn add_aliases(names: &std::collections::HashMap<String, String>, r: &mut Value) {
    let Value::Object(m) = r else { return };
    for (id_key, alias_key) in [("toPeerId", "toAlias"), ("fromPeerId", "fromAlias")] {
        let known = m.get(alias_key).is_some_and(Value::is_string);
        let alias = m
            .get(id_key)
            .and_then(Value::as_str)
            .and_then(|id| names.get(id));
        if let (false, Some(alias)) = (known, alias) {
            m.insert(alias_key.into(), Value::from(alias.clone()));
        }
    }
}

/// One naming rule for people: a receipt names its peers by alias, then peerId, whichever
/// command printed it. JSON output is left as the root answered.
fn name_peers(ctx: &Ctx, session: &mut Session, r: &mut Value) {
    if !ctx.json {
        add_aliases(&aliases(session), r);
    }
}

/// [`name_peers`] for the receipts of an inbox page.
fn name_receipts(session: &mut Session, page: &mut Value) {
    let Some(Value::Array(events)) = page.get_mut("events") else {
        return;
    };
    if events.is_empty() {
        return;
    }
    let names = aliases(session);
    events.iter_mut().for_each(|e| add_aliases(&names, e));
}

/// One human line for the receipt of a message this session received (consume): who sent it.
pub fn describe_consumed(r: &Value) -> String {
    let s = |k: &str| {
        r.get(k)
            .and_then(Value::as_str)
            .map(|v| sanitize::line(v, 80))
            .unwrap_or_else(|| "-".into())
    };
    let from = match r.get("fromAlias").and_then(Value::as_str) {
        Some(alias) => format!("{} ({})", sanitize::line(alias, 64), s("fromPeerId")),
        None => s("fromPeerId"),
    };
    let seq = r
        .get("sequence")
        .and_then(Value::as_u64)
        .map(|n| format!(" #{n}"))
        .unwrap_or_default();
    format!(
        "{}: message {}{seq} from {from}",
        s("state"),
        s("messageId")
    )
}

/// One human line for a receipt.
pub fn describe_receipt(r: &Value) -> String {
    let s = |k: &str| {
        r.get(k)
            .and_then(serde_json::Value::as_str)
            .map(|v| sanitize::line(v, 80))
            .unwrap_or_else(|| "-".into())
    };
    let seq = r
        .get("sequence")
        .and_then(serde_json::Value::as_u64)
        .map(|n| format!(" as #{n}"))
        .unwrap_or_default();
    let err = r
        .get("error")
        .and_then(|e| e.get("code"))
        .or_else(|| r.get("code"))
        .and_then(serde_json::Value::as_str)
        .map(|c| format!(" ({c})"))
        .unwrap_or_default();
    let id = if r.get("to").and_then(serde_json::Value::as_str).is_some() {
        s("to")
    } else {
        s("toPeerId")
    };
    let unmarked = r
        .get("markReplied")
        .and_then(|e| e.get("code"))
        .and_then(serde_json::Value::as_str)
        .map(|c| format!(" (the original could not be marked replied: {c})"))
        .unwrap_or_default();
    let reason = r
        .get("reason")
        .and_then(serde_json::Value::as_str)
        .map(|why| format!(" — {}", sanitize::line(why, 300)))
        .unwrap_or_default();
    // People read aliases; the peerId follows for exactness.
    let to = match r.get("toAlias").and_then(serde_json::Value::as_str) {
        Some(alias) => format!("{} ({id})", sanitize::line(alias, 64)),
        None => id,
    };
    format!(
        "{} {to}{seq}: message {} (correlation {}){err}{unmarked}{reason}",
        s("state"),
        s("messageId"),
        s("correlationId")
    )
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
        let mut page = session.tool(LocalTool {
            args: tool_args(&call_args)?,
            ..envelope.clone()
        })?;
        if !ctx.json {
            name_receipts(&mut session, &mut page);
        }
        print_page(ctx, &page, true, all)?;
        if let Some(status) = ctx.stopped_status() {
            session.close();
            return Ok(status);
        }
        if out::reader_gone() {
            session.close();
            return Ok(0);
        }
        if let Some(next) = page.get("cursor").and_then(serde_json::Value::as_u64) {
            q.after = Some(next);
        }
        if let Some(ev) = page.get("eventCursor").and_then(serde_json::Value::as_u64) {
            envelope.events_after = Some(ev);
        }
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
        let page = session.tool(LocalTool {
            args: tool_args(&q)?,
            ..envelope.clone()
        })?;
        let has_messages = page
            .get("messages")
            .and_then(Value::as_array)
            .is_some_and(|m| !m.is_empty());
        if let Some(ms) = wait
            && pages == 0
            && !has_messages
        {
            return Err(Error::new(
                Code::Timeout,
                format!("no message arrived within {ms} ms"),
            ));
        }
        let more = page.get("more").and_then(Value::as_bool) == Some(true);
        if ctx.json {
            print_json(&page)?;
            return Ok(0);
        }
        printed += count(&page, "messages") + count(&page, "events");
        let mut page = page;
        name_receipts(session, &mut page);
        // "(no messages)" only when the whole run printed nothing.
        print_page(ctx, &page, printed > 0 || more, all)?;
        let cursor = page.get("cursor").and_then(Value::as_u64);
        let events = page.get("eventCursor").and_then(Value::as_u64);
        if !more {
            break;
        }
        if pages + 1 >= INBOX_PAGES_MAX {
            out::line(&format!(
                "more: peer inbox --after {} --events-after {}",
                cursor.unwrap_or(0),
                events.unwrap_or(0)
            ))?;
            break;
        }
        // Further pages are read at once: the wait, if any, is over.
        q.wait_ms = 0;
        if let Some(c) = cursor {
            q.after = Some(c);
        }
        if let Some(e) = events {
            envelope.events_after = Some(e);
        }
    }
    Ok(0)
}

fn count(page: &Value, key: &str) -> usize {
    page.get(key).and_then(Value::as_array).map_or(0, Vec::len)
}

fn print_page(ctx: &Ctx, page: &Value, stream: bool, all: bool) -> Result<()> {
    let empty = Vec::new();
    let messages = page
        .get("messages")
        .and_then(serde_json::Value::as_array)
        .unwrap_or(&empty);
    let events = page
        .get("events")
        .and_then(serde_json::Value::as_array)
        .unwrap_or(&empty);
    if ctx.json {
        if stream {
            for m in messages {
                print_json(&json!({"event": "message", "message": m}))?;
            }
            for e in events {
                print_json(&json!({"event": "receipt", "receipt": e}))?;
            }
            return Ok(());
        }
        return print_json(page);
    }
    for m in messages {
        out::line(&describe_message(m))?;
    }
    for e in events {
        out::line(&format!("receipt: {}", describe_receipt(e)))?;
    }
    if !stream && messages.is_empty() && events.is_empty() {
        out::line(if all {
            "(no messages)"
        } else {
            "(no unconsumed messages; peer inbox --all shows consumed ones too)"
        })?;
    }
    Ok(())
}

/// Human rendering of one inbox message: a header line and the sanitized, indented body. The
/// text is peer data, never interpreted.
pub fn describe_message(m: &Value) -> String {
    let s = |k: &str| {
        m.get(k)
            .and_then(serde_json::Value::as_str)
            .map(|v| sanitize::line(v, 80))
            .unwrap_or_else(|| "-".into())
    };
    let seq = m
        .get("sequence")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    let topic = m
        .get("topic")
        .and_then(serde_json::Value::as_str)
        .map(|t| format!(" [{}]", sanitize::line(t, 60)))
        .unwrap_or_default();
    let reply = m
        .get("replyTo")
        .and_then(serde_json::Value::as_str)
        .map(|t| format!(" (reply to {})", sanitize::line(t, 60)))
        .unwrap_or_default();
    let body = sanitize::text(
        m.get("content")
            .and_then(serde_json::Value::as_str)
            .unwrap_or(""),
    );
    let body: Vec<String> = body.lines().map(|l| format!("  | {l}")).collect();
    format!(
        "#{seq} from {} ({}){topic}{reply} — message {} [{}]\n{}",
        s("fromAlias"),
        s("from"),
        s("messageId"),
        s("state"),
        body.join("\n")
    )
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
    let mut receipt = session.call(LocalCall::Reply(reply), 0)?;
    name_peers(ctx, &mut session, &mut receipt);
    print_receipt(ctx, &receipt)?;
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
    let mut receipt = session.call(LocalCall::Consume(consume), 0)?;
    name_peers(ctx, &mut session, &mut receipt);
    if ctx.json {
        print_json(&receipt)?;
    } else {
        out::line(&describe_consumed(&receipt))?;
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
    let info = session.call(LocalCall::Info, 0)?;
    let problems = info
        .get("problems")
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default();
    let Some(id) = id else {
        session.close();
        return print_health(ctx, &info, &problems);
    };
    let mut receipt = session.call(LocalCall::Status(SentMessage { message_id: id }), 0)?;
    name_peers(ctx, &mut session, &mut receipt);
    session.close();
    print_receipt(ctx, &receipt)?;
    if !problems.is_empty() {
        out::err_line(&format!(
            "peer: {} background failure(s) recorded in this session; 'peer status' shows them",
            problems.len()
        ));
    }
    Ok(0)
}

/// `peer status` without a message: the store's state and the recorded background failures.
fn print_health(
    ctx: &Ctx,
    info: &serde_json::Value,
    problems: &[serde_json::Value],
) -> Result<i32> {
    let store = info.get("store").cloned().unwrap_or(json!({}));
    if ctx.json {
        print_json(&json!({"ok": true, "store": store, "problems": problems}))?;
        return Ok(0);
    }
    let text = |v: &serde_json::Value, k: &str| {
        v.get(k)
            .and_then(serde_json::Value::as_str)
            .map(|s| sanitize::line(s, 400))
            .unwrap_or_default()
    };
    let state = match text(&store, "state").as_str() {
        "" => "ok".to_string(),
        s => s.to_string(),
    };
    out::line(&format!("store: {state}"))?;
    if store.get("recovery").is_some_and(|r| !r.is_null()) {
        out::line(&format!("  recovery: {}", text(&store, "recovery")))?;
    }
    let torn = store
        .get("tornTailBytes")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
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
            text(p, "what"),
            text(p, "code"),
            text(p, "message")
        ))?;
    }
    Ok(0)
}

fn print_receipt(ctx: &Ctx, receipt: &serde_json::Value) -> Result<()> {
    if ctx.json {
        print_json(receipt)
    } else {
        out::line(&describe_receipt(receipt))
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
