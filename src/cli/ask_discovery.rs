//! The discovery subcommands of `peer ask`: `peers` (who knows what, how fresh), `card
//! show|verify|add`, `recommend PEER`, and `friends pending|decide`. Everything a friend wrote
//! (advert text, card fields, `via`) is sanitized before it reaches the terminal; decision
//! tokens are never printed.

use super::{Ctx, args, out, print_json};
use crate::ask::config::AskConfig;
use crate::ask::discovery::{self, friends};
use crate::ask::recommend::pending;
use crate::ask::{card, keys};
use crate::error::{Code, Error, Result};
use crate::toolspec::{ToolCall, ToolHost, ToolOutput};
use crate::{clock, sanitize};
use serde_json::{Value, json};
use std::ffi::OsString;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

pub const PEERS_HELP: &str = "usage: peer ask peers [--refresh] [--json]

Lists the configured friends with what they advertise (description, tags, sessions), whether
they were reachable and how long ago. Uses the roster a running ask server keeps; fetches every
friend's advertisement now when there is none or with --refresh.
";

pub const CARD_HELP: &str = "usage: peer ask card show [--host H] [--port N] [--json]
       peer ask card verify CARD|- [--json]
       peer ask card add CARD|- [--mode ask|auto|deny] [--replace] [--json]

show prints this agent's signed friend card (dsh-ask-peer format) and key fingerprint; verify
checks a card's self-signature and expiry; add verifies it and adds the agent to ask.peers.
A friend of the same name with another key is never replaced without --replace.
";

pub const RECOMMEND_HELP: &str =
    "usage: peer ask recommend PEER [--topic T] [--max-hops N] [--json]

Asks friend PEER to recommend one of its friends (through up to N further agents, default 1,
at most 3) who knows topic T. The card is verified and kept for your decision:
'peer ask friends pending', then 'peer ask friends decide RECID add|decline'.
";

pub const FRIENDS_HELP: &str = "usage: peer ask friends pending [--json]
       peer ask friends decide RECID add|decline [--mode ask|auto|deny] [--replace] [--json]

Shows the recommendations waiting for your decision, and carries one out.
";

/// A tool host that runs the six ask tools for the namespace at `home` and passes every other
/// call to `inner` (the session root). `peer mcp` serves through it: the ask tools act for
/// the namespace's owner towards the friends the owner configured.
pub struct WithAskTools<H> {
    pub inner: H,
    pub home: std::path::PathBuf,
    /// Whether `ask.peers` names a friend: the ask tools are offered only then.
    pub friends: bool,
}

/// Whether the namespace at `home` has at least one friend configured (an unreadable
/// configuration counts as none: the ask tools then stay out of the list).
pub fn has_friends(home: &std::path::Path) -> bool {
    AskConfig::load(home).is_ok_and(|c| !c.peers.is_empty())
}

impl<H: ToolHost> ToolHost for WithAskTools<H> {
    fn call(&self, call: ToolCall, call_id: &str, cancel: &Arc<AtomicBool>) -> Result<ToolOutput> {
        match call {
            ToolCall::Ask(a) => crate::ask::discovery::model_tools::execute(&self.home, a, cancel)
                .map(ToolOutput::Value),
            other => self.inner.call(other, call_id, cancel),
        }
    }

    fn after_answer(&self) {
        self.inner.after_answer();
    }

    fn offers_ask_tools(&self) -> bool {
        self.friends
    }
}

/// The discovery subcommands (`peers`, `card`, `recommend`, `friends`), dispatched by name.
pub fn run(ctx: &Ctx, sub: &str, argv: Vec<OsString>) -> Result<i32> {
    match sub {
        "peers" => peers(ctx, argv),
        "card" => card_cmd(ctx, argv),
        "recommend" => recommend_cmd(ctx, argv),
        "friends" => friends_cmd(ctx, argv),
        other => Err(Error::new(
            Code::Usage,
            format!("unknown ask subcommand {:?}", sanitize::line(other, 40)),
        )),
    }
}

/// Flags as given: name without `--`, value when it takes one.
type Flags = Vec<(String, Option<String>)>;

fn positional(argv: Vec<OsString>, help: &str) -> Result<Option<(Vec<String>, Flags)>> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let mut words = Vec::new();
    let mut flags = Vec::new();
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("help") | Short('h') => {
                out::text(help)?;
                return Ok(None);
            }
            Long(flag @ ("refresh" | "replace")) => flags.push((flag.to_string(), None)),
            Long(flag @ ("host" | "port" | "mode" | "topic" | "max-hops")) => {
                let flag = flag.to_string();
                let v = args::string(&mut p, &format!("--{flag}"))?;
                flags.push((flag, Some(v)));
            }
            Value(v) => words.push(
                v.into_string()
                    .map_err(|_| Error::new(Code::Usage, "arguments must be valid UTF-8"))?,
            ),
            other => return Err(args::unexpected(other)),
        }
    }
    Ok(Some((words, flags)))
}

fn flag<'a>(flags: &'a [(String, Option<String>)], name: &str) -> Option<&'a str> {
    flags
        .iter()
        .rev()
        .find(|(f, _)| f == name)
        .map(|(_, v)| v.as_deref().unwrap_or(""))
}

/// Refuses a flag the shared parser took but the flag table does not give `peer ask SUB`.
fn only_flags(flags: &[(String, Option<String>)], sub: &str) -> Result<()> {
    let allowed = super::flags::names("peer", &format!("ask {sub}"));
    match flags.iter().find(|(f, _)| !allowed.contains(&f.as_str())) {
        Some((f, _)) => Err(Error::new(
            Code::Usage,
            format!("peer ask {sub} does not take --{f}"),
        )),
        None => Ok(()),
    }
}

fn load(ctx: &Ctx) -> Result<(std::path::PathBuf, AskConfig)> {
    if std::env::var_os(crate::ask::ANSWERER_ENV).is_some() {
        return Err(Error::new(
            Code::CapabilityDenied,
            "an answering agent cannot use peer ask (no ask loops)",
        ));
    }
    let home = ctx.home()?;
    let cfg = AskConfig::load(&home)?;
    Ok((home, cfg))
}

fn age(now: u64, then: Option<u64>) -> String {
    match then {
        None => "never".into(),
        Some(t) => {
            let s = now.saturating_sub(t) / 1000;
            match s {
                0..=119 => format!("{s}s ago"),
                120..=7199 => format!("{}m ago", s / 60),
                _ => format!("{}h ago", s / 3600),
            }
        }
    }
}

fn peers(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    let Some((words, flags)) = positional(argv, PEERS_HELP)? else {
        return Ok(0);
    };
    only_flags(&flags, "peers")?;
    if !words.is_empty() {
        return Err(Error::new(Code::Usage, "peer ask peers takes no arguments"));
    }
    let (home, cfg) = load(ctx)?;
    let list = discovery::views::peers_listing(&home, &cfg, flag(&flags, "refresh").is_some());
    let list = serde_json::to_value(list).unwrap_or_default();
    let list = list.as_array().cloned().unwrap_or_default();
    if ctx.json {
        print_json(&json!({"peers": list}))?;
        return Ok(0);
    }
    if list.is_empty() {
        out::line("no friends configured (ask.peers in config.json, or 'peer ask card add')")?;
    }
    let now = clock::now_ms();
    for p in &list {
        let s = |k: &str| sanitize::line(p[k].as_str().unwrap_or(""), 120);
        let tags: Vec<String> = p["tags"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(|t| sanitize::line(t, 40))
                    .collect()
            })
            .unwrap_or_default();
        let state = if p["reachable"] == true {
            "reachable"
        } else {
            "unreachable"
        };
        let seen = age(now, p["ageMs"].as_u64().map(|a| now.saturating_sub(a)));
        out::line(&format!(
            "{:<16} {state:<11} seen {seen:<9} {}:{} mode={}{}",
            s("peer"),
            s("host"),
            p["port"],
            s("mode"),
            if p["signed"] == true { " signed" } else { "" }
        ))?;
        if let Some(f) = p["fingerprint"].as_str() {
            out::line(&format!("    key {f}"))?;
        }
        if !s("description").is_empty() {
            out::line(&format!("    {}", s("description")))?;
        }
        if !tags.is_empty() {
            out::line(&format!("    tags: {}", tags.join(", ")))?;
        }
        for session in p["sessions"].as_array().into_iter().flatten().take(8) {
            let f = |k: &str| sanitize::line(session[k].as_str().unwrap_or(""), 60);
            out::line(&format!(
                "    session {} ({}) {}",
                f("id"),
                f("workspace"),
                f("status")
            ))?;
        }
        if let Some(e) = p["error"].as_str() {
            out::line(&format!("    last error: {}", sanitize::line(e, 200)))?;
        }
    }
    Ok(0)
}

/// A card argument, or standard input for `-` (bounded).
fn card_arg(word: Option<&String>) -> Result<String> {
    match word.map(String::as_str) {
        None => Err(Error::new(
            Code::Usage,
            "a card (or - for standard input) is required",
        )),
        Some("-") => {
            let mut s = String::new();
            std::io::stdin()
                .take(crate::config::internal::CARD_CHARS_MAX as u64 + 2)
                .read_to_string(&mut s)
                .map_err(|e| {
                    Error::new(Code::Io, format!("cannot read the card from stdin: {e}"))
                })?;
            Ok(s.trim().to_string())
        }
        Some(c) => Ok(c.to_string()),
    }
}

fn print_card_fields(v: &Value) -> Result<()> {
    let p = &v["peer"];
    let s = |k: &str, n: usize| sanitize::line(p[k].as_str().unwrap_or(""), n);
    out::line(&format!("name:        {}", s("name", 64)))?;
    out::line(&format!("address:     {}:{}", s("host", 253), p["port"]))?;
    out::line(&format!(
        "fingerprint: {}",
        v["fingerprint"].as_str().unwrap_or("")
    ))?;
    if !s("description", 200).is_empty() {
        out::line(&format!("description: {}", s("description", 200)))?;
    }
    if let Some(tags) = p["tags"].as_array() {
        let t: Vec<String> = tags
            .iter()
            .filter_map(Value::as_str)
            .map(|t| sanitize::line(t, 40))
            .collect();
        out::line(&format!("tags:        {}", t.join(", ")))?;
    }
    Ok(())
}

fn card_cmd(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    let Some((words, flags)) = positional(argv, CARD_HELP)? else {
        return Ok(0);
    };
    let (home, cfg) = load(ctx)?;
    match words.first().map(String::as_str) {
        Some("show") => card_show(ctx, &words, &flags, &home, &cfg),
        Some("verify") => card_verify(ctx, &words, &flags),
        Some("add") => card_add(ctx, &words, &flags, &home, &cfg),
        _ => Err(Error::new(
            Code::Usage,
            "peer ask card takes show, verify CARD or add CARD; see --help",
        )),
    }
}

/// `peer ask card show`: this agent's own signed card.
fn card_show(
    ctx: &Ctx,
    words: &[String],
    flags: &Flags,
    home: &std::path::Path,
    cfg: &AskConfig,
) -> Result<i32> {
    only_flags(flags, "card show")?;
    if words.len() > 1 {
        return Err(Error::new(
            Code::Usage,
            "peer ask card show takes no arguments",
        ));
    }
    let host = discovery::server::card_host(cfg, flag(flags, "host"))?;
    let port = match flag(flags, "port") {
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| Error::new(Code::Usage, "--port takes a port number 1-65535"))?,
        None if cfg.listen_port == 0 => {
            return Err(Error::new(
                Code::Usage,
                "ask.listenPort is 0 (any free port): pass --port with the port the server got",
            ));
        }
        None => cfg.listen_port,
    };
    let key = keys::load_or_create(&cfg.key_dir(home), &cfg.caller_name)?;
    warn_loopback_card(&host, flag(flags, "host").is_some());
    let c = discovery::server::own_card(cfg, &key, &host, port, clock::now_ms());
    let view = serde_json::to_value(discovery::views::card_view(&c, &key)).unwrap_or_default();
    if ctx.json {
        print_json(&view)?;
    } else {
        out::line(&c)?;
        out::line(&format!("fingerprint: {}", key.fingerprint()))?;
        out::line(&format!(
            "expires:     {}",
            view["expiresAt"].as_str().unwrap_or("")
        ))?;
    }
    Ok(0)
}

/// Whether `host` is a loopback address (or `localhost`): reachable from this machine only.
/// A card that names loopback only works for a friend on this same machine: say so, unless
/// the owner asked for exactly that host with --host.
fn warn_loopback_card(host: &str, explicit: bool) {
    if explicit || !crate::ask::tls::is_loopback(host) {
        return;
    }
    out::err_line(&format!(
        "peer ask card show: warning: this card names {} (loopback), which a friend on another \
         machine cannot reach; set ask.listenHost (or ask.advertisedHost) to this machine's \
         address, or pass --host",
        sanitize::line(host, 253)
    ));
}

/// A card that moves a configured friend from a reachable address to loopback was most likely
/// issued without ask.listenHost: warn before the owner's asks start failing.
fn warn_moved_to_loopback(cfg: &AskConfig, card: &card::Card) {
    let Some(old) = cfg.friend(&card.name) else {
        return;
    };
    if crate::ask::tls::is_loopback(&old.host) || !crate::ask::tls::is_loopback(&card.host) {
        return;
    }
    out::err_line(&format!(
        "peer ask card add: warning: friend {} moves from {}:{} to {}:{} (loopback, this machine \
         only); their card was probably issued without ask.listenHost; ask them for one made \
         with it set",
        sanitize::line(&card.name, 64),
        sanitize::line(&old.host, 253),
        old.port,
        sanitize::line(&card.host, 253),
        card.port
    ));
}

/// `peer ask card verify CARD`: checks a card's self-signature and bounds.
fn card_verify(ctx: &Ctx, words: &[String], flags: &Flags) -> Result<i32> {
    only_flags(flags, "card verify")?;
    let c = card_arg(words.get(1))?;
    let v = serde_json::to_value(discovery::views::verify_view(&c, clock::now_ms()))
        .unwrap_or_default();
    if v["ok"] != true {
        let reason = v["reason"].as_str().unwrap_or("invalid card").to_string();
        return Err(Error::new(
            Code::AuthFailed,
            format!("card refused: {reason}"),
        ));
    }
    if ctx.json {
        print_json(&v)?;
    } else {
        out::line("card verifies (it proves the key, not that the name belongs to it):")?;
        print_card_fields(&v)?;
    }
    Ok(0)
}

/// `peer ask card add CARD`: adds a verified card to `ask.peers` (never silently replacing).
fn card_add(
    ctx: &Ctx,
    words: &[String],
    flags: &Flags,
    home: &std::path::Path,
    cfg: &AskConfig,
) -> Result<i32> {
    only_flags(flags, "card add")?;
    let c = card_arg(words.get(1))?;
    let verified = card::verify(&c, clock::now_ms())
        .map_err(|e| Error::new(Code::AuthFailed, format!("card refused: {e}")))?;
    let mode = flag(flags, "mode").unwrap_or("ask");
    warn_moved_to_loopback(cfg, &verified);
    let merged = friends::add_to_config(
        home,
        &verified,
        mode,
        flag(flags, "replace").is_some(),
        |bytes| AskConfig::parse(bytes).map(|_| ()),
    )?;
    let view = json!({
        "result": merged.name(),
        "peer": verified.peer_view(),
        "fingerprint": crate::ask::canon::fingerprint(&verified.key),
        "mode": mode,
    });
    if ctx.json {
        print_json(&view)?;
    } else {
        out::line(&format!(
            "{} friend {} ({}:{}, {}), mode {mode}",
            merged.name(),
            sanitize::line(&verified.name, 64),
            sanitize::line(&verified.host, 253),
            verified.port,
            view["fingerprint"].as_str().unwrap_or("")
        ))?;
        // Friendship is configured on both sides: the new friend needs our card too.
        out::line(&format!(
            "for {} to accept your asks, give them your card: peer ask card show",
            sanitize::line(&verified.name, 64)
        ))?;
    }
    Ok(0)
}

/// Human lines for a recommendation view (from `recommend` or `friends pending`).
fn print_recommendation(v: &Value) -> Result<()> {
    let p = &v["recommended"]
        .as_object()
        .map(|_| &v["recommended"])
        .unwrap_or(&v["peer"]);
    let s = |x: &Value, n: usize| sanitize::line(x.as_str().unwrap_or(""), n);
    let via: Vec<String> = v["via"]
        .as_array()
        .map(|a| {
            a.iter()
                .take(crate::config::internal::RECOMMEND_VIA_MAX)
                .map(|x| s(x, crate::config::internal::RECOMMEND_PATH_NAME_CHARS_MAX))
                .collect()
        })
        .unwrap_or_default();
    let chain = if via.is_empty() {
        String::new()
    } else {
        format!(" via {}", via.join(" → "))
    };
    out::line(&format!(
        "{}{} recommends {} at {}:{}{chain}",
        v["recId"]
            .as_str()
            .map(|r| format!("{r}: "))
            .unwrap_or_default(),
        // `from` is the recommended card's own name; the recommender is the friend asked.
        s(&v["peer"], 64),
        s(&p["name"], 64),
        s(&p["host"], 253),
        p["port"]
    ))?;
    if !s(&p["description"], 200).is_empty() {
        out::line(&format!("    {}", s(&p["description"], 200)))?;
    }
    if let Some(f) = v["fingerprint"].as_str() {
        out::line(&format!("    fingerprint {f}"))?;
    }
    Ok(())
}

fn recommend_cmd(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    let Some((words, flags)) = positional(argv, RECOMMEND_HELP)? else {
        return Ok(0);
    };
    only_flags(&flags, "recommend")?;
    let [peer] = words.as_slice() else {
        return Err(Error::new(
            Code::Usage,
            "peer ask recommend takes one friend name",
        ));
    };
    let hops = match flag(&flags, "max-hops") {
        Some(h) => h
            .parse::<u64>()
            .ok()
            .filter(|h| *h <= crate::config::internal::RECOMMEND_HOPS_MAX)
            .ok_or_else(|| Error::new(Code::Usage, "--max-hops takes 0-3"))?,
        None => crate::config::internal::RECOMMEND_HOPS_DEFAULT,
    };
    let topic = flag(&flags, "topic").filter(|t| !t.trim().is_empty());
    if topic.is_some_and(|t| {
        t.chars().count() > crate::config::internal::RECOMMEND_TOPIC_CHARS_MAX
            || t.chars().any(char::is_control)
    }) {
        return Err(Error::new(
            Code::Usage,
            "--topic must be one line of at most 200 characters",
        ));
    }
    let (home, cfg) = load(ctx)?;
    let key = keys::load_or_create(&cfg.key_dir(&home), &cfg.caller_name)?;
    let v = discovery::client::request_recommendation(&home, &cfg, &key, peer, topic, hops)?;
    let v = serde_json::to_value(v).unwrap_or_default();
    if ctx.json {
        print_json(&v)?;
        return Ok(0);
    }
    print_recommendation(&v)?;
    match v["status"].as_str() {
        Some("awaiting_user_approval") => out::line(&format!(
            "    decide with: peer ask friends decide {} add|decline",
            v["recId"].as_str().unwrap_or("")
        ))?,
        Some(other) => out::line(&format!("    ({other}; nothing to decide)"))?,
        None => {}
    }
    Ok(0)
}

fn friends_cmd(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    let Some((words, flags)) = positional(argv, FRIENDS_HELP)? else {
        return Ok(0);
    };
    let (home, _cfg) = load(ctx)?;
    let now = clock::now_ms();
    match words
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["pending"] => {
            only_flags(&flags, "friends pending")?;
            let list = pending::Store::new(&discovery::state_dir(&home)).list(now)?;
            let views: Vec<Value> = list
                .iter()
                .map(|p| {
                    let mut v = serde_json::to_value(p.view(now)).unwrap_or_default();
                    if let Ok(c) = card::parse(&p.card) {
                        v["fingerprint"] = json!(crate::ask::canon::fingerprint(&c.0.key));
                    }
                    v
                })
                .collect();
            if ctx.json {
                print_json(&json!({"pending": views}))?;
            } else if views.is_empty() {
                out::line("no recommendations are waiting")?;
            } else {
                for v in &views {
                    print_recommendation(v)?;
                }
            }
            Ok(0)
        }
        ["decide", rec_id, decision] => {
            only_flags(&flags, "friends decide")?;
            let d = pending::Decision::parse(decision)
                .ok_or_else(|| Error::new(Code::Usage, "the decision is add or decline"))?;
            let v = discovery::decide(
                &home,
                rec_id,
                None,
                d,
                flag(&flags, "mode").unwrap_or("ask"),
                flag(&flags, "replace").is_some(),
            )?;
            if ctx.json {
                print_json(&serde_json::to_value(&v).unwrap_or_default())?;
            } else if let Some(p) = &v.peer {
                out::line(&format!(
                    "{} friend {} ({}:{})",
                    v.result.unwrap_or("added"),
                    sanitize::line(&p.name, 64),
                    sanitize::line(&p.host, 253),
                    p.port
                ))?;
            } else {
                out::line(&format!("declined {}", sanitize::line(rec_id, 40)))?;
            }
            Ok(0)
        }
        _ => Err(Error::new(
            Code::Usage,
            "peer ask friends takes pending, or decide RECID add|decline; see --help",
        )),
    }
}
