//! The `peer` command line: global options, subcommand dispatch, and the one place that turns
//! an `Error` into `peer: CODE: message` (or a JSON object) and an exit status.

pub(crate) mod args;
pub(crate) mod bench;
pub(crate) mod chat;
pub mod dir;
pub(crate) mod host;
pub(crate) mod lab;
pub(crate) mod msg;
pub mod res;
pub(crate) mod session;
pub(crate) mod session_cmds;

use crate::error::{Code, Error, Result};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

/// Options that every subcommand accepts before or after its name.
#[derive(Clone, Debug, Default)]
pub struct Ctx {
    /// `--home DIR`; resolved with `config::resolve_home`.
    pub home: Option<PathBuf>,
    /// `--json`: one JSON object per result on stdout, errors as `{"ok":false,"error":…}`.
    pub json: bool,
    /// `--as ALIAS`: act as a short-lived root of its own instead of the enclosing session.
    pub as_alias: Option<String>,
}

impl Ctx {
    pub fn home(&self) -> Result<PathBuf> {
        crate::config::resolve_home(self.home.as_deref())
    }
}

/// A subcommand: it gets the global context and its own remaining arguments, and returns the
/// exit status on success.
pub type Command = fn(&Ctx, Vec<OsString>) -> Result<i32>;

/// The subcommand table: name, one-line summary, implementation.
fn commands() -> Vec<(&'static str, &'static str, Command)> {
    vec![
        (
            "host",
            "run a root for this session (optionally around a command)",
            host::cmd as Command,
        ),
        (
            "dir",
            "list live peers in scope (same as peer-dir)",
            dir::cmd,
        ),
        ("send", "send a message with proof of custody", msg::send),
        (
            "inbox",
            "read this session's messages and receipts",
            msg::inbox,
        ),
        ("reply", "reply to a received message", msg::reply),
        ("consume", "mark a received message consumed", msg::consume),
        ("status", "show the receipt of a sent message", msg::status),
        ("chat", "interactive chat with peers", chat::cmd),
        ("lab", "run the two-session demo", lab::cmd),
        ("mcp", "a root that speaks MCP on stdio", session_cmds::mcp),
        (
            "run-child",
            "run a command as a published child run",
            session_cmds::run_child,
        ),
        (
            "recover",
            "review an earlier incarnation's unread mail",
            session_cmds::recover,
        ),
        (
            "run",
            "run a command while holding a resource (FIFO, fencing token)",
            res::run_cmd,
        ),
        (
            "res",
            "resource status, request, grant, release, cancel, set-controller",
            res::res_cmd,
        ),
        (
            "bench",
            "measure peerwire against this machine's floors (built-in benchmark)",
            bench::cmd,
        ),
    ]
}

/// The subcommand names, for the documentation tests.
pub fn command_names() -> Vec<&'static str> {
    commands().into_iter().map(|(n, _, _)| n).collect()
}

/// Prints one JSON value as one line on stdout.
pub fn print_json(v: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

/// Entry point of the small tool binaries: global options, one command, the same reporting
/// with the tool's name as prefix.
pub fn tool_main(name: &str, cmd: Command) -> i32 {
    let mut ctx = Ctx::default();
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let rest = match parse_globals(&mut ctx, args, false) {
        Ok((_, rest)) => rest,
        Err(e) => return report_as(name, &ctx, &e),
    };
    match cmd(&ctx, rest) {
        Ok(status) => status,
        Err(e) => report_as(name, &ctx, &e),
    }
}

/// Entry point of the `peer` binary; returns the process exit status.
pub fn main(args: Vec<OsString>) -> i32 {
    let mut ctx = Ctx::default();
    let (sub, rest) = match split_globals(&mut ctx, args.into_iter().skip(1).collect()) {
        Ok(v) => v,
        Err(e) => return report(&ctx, &e),
    };
    let Some(sub) = sub else {
        print_help();
        return 0;
    };
    if sub == "help" || sub == "--help" || sub == "-h" {
        print_help();
        return 0;
    }
    if sub == "--version" || sub == "-V" {
        println!("peer {}", env!("CARGO_PKG_VERSION"));
        return 0;
    }
    let Some((_, _, cmd)) = commands().into_iter().find(|(n, _, _)| *n == sub) else {
        let e = Error::new(
            Code::Usage,
            format!(
                "unknown command {:?}; run 'peer --help'",
                crate::sanitize::line(&sub, 40)
            ),
        );
        return report(&ctx, &e);
    };
    match cmd(&ctx, rest) {
        Ok(status) => status,
        Err(e) => report(&ctx, &e),
    }
}

/// Pulls `--home`, `--json` and `--as` out of the argument list (anywhere before `--`), and
/// returns the subcommand name and the arguments left for it.
pub fn split_globals(
    ctx: &mut Ctx,
    args: Vec<OsString>,
) -> Result<(Option<String>, Vec<OsString>)> {
    parse_globals(ctx, args, true)
}

/// The one parser of global options. With `subcommand`, the first non-option word (or
/// `--help`/`--version`) is the subcommand; without it (the `peer-dir`/`peer-res` tools, which
/// have no `--as`), every other argument belongs to the command.
fn parse_globals(
    ctx: &mut Ctx,
    args: Vec<OsString>,
    subcommand: bool,
) -> Result<(Option<String>, Vec<OsString>)> {
    let mut sub = None;
    let mut rest = Vec::new();
    let mut it = args.into_iter();
    let mut passthrough = false;
    while let Some(a) = it.next() {
        if passthrough {
            rest.push(a);
            continue;
        }
        let s = a.to_string_lossy().into_owned();
        match s.as_str() {
            "--" if subcommand => {
                passthrough = true;
                rest.push(a);
            }
            "--json" => ctx.json = true,
            "--home" => ctx.home = Some(PathBuf::from(value_of(&mut it, "--home")?)),
            _ if s.starts_with("--home=") => ctx.home = Some(PathBuf::from(&s[7..])),
            "--as" if subcommand => {
                ctx.as_alias = Some(value_of(&mut it, "--as")?.to_string_lossy().into_owned())
            }
            _ if subcommand && s.starts_with("--as=") => ctx.as_alias = Some(s[5..].to_string()),
            _ if subcommand && sub.is_none() && !s.starts_with('-') => sub = Some(s),
            _ if subcommand
                && sub.is_none()
                && (s == "--help" || s == "-h" || s == "--version" || s == "-V") =>
            {
                sub = Some(s)
            }
            _ => rest.push(a),
        }
    }
    Ok((sub, rest))
}

fn value_of(it: &mut impl Iterator<Item = OsString>, flag: &str) -> Result<OsString> {
    it.next()
        .ok_or_else(|| Error::new(Code::Usage, format!("{flag} needs a value")))
}

/// Prints an error the documented way and returns its exit status.
pub fn report(ctx: &Ctx, e: &Error) -> i32 {
    report_as("peer", ctx, e)
}

fn report_as(name: &str, ctx: &Ctx, e: &Error) -> i32 {
    if ctx.json {
        let v = serde_json::json!({"ok": false, "error": {"code": e.code.name(), "message": e.message}});
        println!("{v}");
    } else {
        let _ = writeln!(
            std::io::stderr(),
            "{name}: {}: {}",
            e.code.name(),
            crate::sanitize::line(&e.message, 2000)
        );
    }
    e.code.exit_status()
}

fn print_help() {
    let mut out = String::from(
        "peer — authenticated, durable messaging between coding-agent sessions\n\n\
         usage: peer [--home DIR] [--json] [--as ALIAS] COMMAND [ARGS…]\n\ncommands:\n",
    );
    for (name, summary, _) in commands() {
        out.push_str(&format!("  {name:<10} {summary}\n"));
    }
    out.push_str("\nRun 'peer COMMAND --help' for a command's options; see peer(1).\n");
    print!("{out}");
}
