//! The messaging subcommands of `peer`: `send`, `inbox`, `reply`, `consume`, `status`. Each
//! acts for the enclosing session (through its trusted local channel) or, with `--as`, for a
//! short-lived root of its own; all of them go through the same tool implementations as MCP.

use super::session::Session;
use super::{Ctx, args, print_json};
use crate::error::{Code, Error, Result};
use crate::sanitize;
use serde_json::{Map, Value, json};
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
    "usage: peer inbox [--after N] [--from PEER] [--reply-to MSGID] [--message-id ID]
                  [--wait MS] [--follow]

Prints this session's messages after sequence N and the receipts of its own sent messages.
--wait waits up to MS milliseconds (at most 30000) for something new; --follow keeps streaming
(NDJSON with --json) until interrupted.
";

pub const REPLY_HELP: &str = "usage: peer reply MSGID (TEXT | -) [--topic T]

Replies to a message received by this session; the reply keeps its correlation and the
original message's receipt moves to replied.
";

pub const CONSUME_HELP: &str = "usage: peer consume MSGID [--note TEXT]

Records the message as taken into context (prepared) and then consumed; the sender sees the
receipt move forward.
";

pub const STATUS_HELP: &str = "usage: peer status MSGID

Shows the custody state of a message this session sent: accepted, prepared, consumed,
replied, refused or expired, with its original target and correlation.
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
    let mut tool_args = Map::new();
    let mut envelope = Map::new();
    let (mut wait_state, mut timeout) = (None, 30_000u64);
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("topic") => {
                drop(tool_args.insert("topic".into(), json!(args::string(&mut p, "--topic")?)))
            }
            Long("reply-to") => {
                drop(tool_args.insert("replyTo".into(), json!(args::string(&mut p, "--reply-to")?)))
            }
            Long("message-id") => drop(envelope.insert(
                "messageId".into(),
                json!(args::string(&mut p, "--message-id")?),
            )),
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
    let content = read_text(&text, session.limits().message_bytes.max(1))?;
    tool_args.insert("to".into(), json!(to));
    tool_args.insert("content".into(), json!(content));
    let mut receipt = session.tool(
        "send_peer_message",
        serde_json::Value::Object(tool_args),
        envelope,
    )?;
    if let Some(state) = wait_state {
        let message_id = receipt
            .get("messageId")
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        let params = json!({"messageId": message_id, "state": state, "waitMs": timeout});
        receipt = session.call("local.wait_receipt", params, timeout.saturating_add(5_000))?;
    }
    print_receipt(ctx, &receipt);
    session.close();
    Ok(0)
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
    let to = if r.get("to").and_then(serde_json::Value::as_str).is_some() {
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
    let mut tool_args = Map::new();
    let mut follow = false;
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("after") => {
                drop(tool_args.insert("after".into(), json!(args::number(&mut p, "--after")?)))
            }
            Long("from") => {
                drop(tool_args.insert("from".into(), json!(args::string(&mut p, "--from")?)))
            }
            Long("reply-to") => {
                drop(tool_args.insert("replyTo".into(), json!(args::string(&mut p, "--reply-to")?)))
            }
            Long("message-id") => drop(tool_args.insert(
                "messageId".into(),
                json!(args::string(&mut p, "--message-id")?),
            )),
            Long("wait") => {
                drop(tool_args.insert("waitMs".into(), json!(args::millis(&mut p, "--wait")?)))
            }
            Long("follow") => follow = true,
            Long("help") | Short('h') => return help(INBOX_HELP),
            other => return Err(args::unexpected(other)),
        }
    }
    let mut session = Session::open(ctx)?;
    let wait_max = session.limits().wait_ms_max;
    let mut envelope = Map::new();
    loop {
        let mut call_args = tool_args.clone();
        if follow {
            call_args.insert("waitMs".into(), json!(wait_max));
        }
        let page = session.tool(
            "peer_messages",
            serde_json::Value::Object(call_args),
            envelope.clone(),
        )?;
        print_page(ctx, &page, follow);
        if !follow {
            break;
        }
        if let Some(next) = page.get("cursor").and_then(serde_json::Value::as_u64) {
            tool_args.insert("after".into(), json!(next));
        }
        if let Some(ev) = page.get("eventCursor").cloned() {
            envelope.insert("eventsAfter".into(), ev);
        }
    }
    session.close();
    Ok(0)
}

fn print_page(ctx: &Ctx, page: &Value, stream: bool) {
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
                print_json(&json!({"event": "message", "message": m}));
            }
            for e in events {
                print_json(&json!({"event": "receipt", "receipt": e}));
            }
        } else {
            print_json(page);
        }
        return;
    }
    for m in messages {
        println!("{}", describe_message(m));
    }
    for e in events {
        println!("receipt: {}", describe_receipt(e));
    }
    if !stream && messages.is_empty() && events.is_empty() {
        println!("(no new messages)");
    }
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
    let receipt = session.call(
        "local.reply",
        json!({"messageId": id, "content": content, "topic": topic}),
        0,
    )?;
    print_receipt(ctx, &receipt);
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
    let receipt = session.call("local.consume", json!({"messageId": id, "note": note}), 0)?;
    print_receipt(ctx, &receipt);
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
    let Some(id) = id else {
        return Err(Error::new(Code::Usage, "peer status needs MSGID"));
    };
    let mut session = Session::open(ctx)?;
    let receipt = session.call("local.status", json!({"messageId": id}), 0)?;
    print_receipt(ctx, &receipt);
    session.close();
    Ok(0)
}

fn print_receipt(ctx: &Ctx, receipt: &serde_json::Value) {
    if ctx.json {
        print_json(receipt);
    } else {
        println!("{}", describe_receipt(receipt));
    }
}

fn help(text: &str) -> Result<i32> {
    print!("{text}");
    Ok(0)
}
