//! The `peer` command line: global options, subcommand dispatch, and the one place that turns
//! an `Error` into `peer: CODE: message` (or a JSON object) and an exit status.

pub(crate) mod args;
pub(crate) mod ask;
pub(crate) mod ask_discovery;
pub(crate) mod bench;
pub(crate) mod chat;
pub(crate) mod completions;
pub mod dir;
pub(crate) mod exit;
pub(crate) mod flags;
pub(crate) mod host;
pub(crate) mod keypress;
pub(crate) mod lab;
pub(crate) mod lines;
pub(crate) mod msg;
pub(crate) mod out;
pub mod res;
pub(crate) mod session;
pub(crate) mod session_cmds;
pub(crate) mod signals;

use crate::error::{Code, Error, Result};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// Options that every subcommand accepts before or after its name.
#[derive(Clone, Debug, Default)]
pub struct Ctx {
    /// `--home DIR`; resolved with `config::resolve_home`.
    pub home: Option<PathBuf>,
    /// `--json`: one JSON object per result on stdout, errors as `{"ok":false,"error":…}`.
    pub json: bool,
    /// `--as ALIAS`: act as a short-lived root of its own instead of the enclosing session.
    pub as_alias: Option<String>,
    /// Stop signals, installed by the first command part that owns a root (see `signals`).
    stop: OnceLock<Arc<signals::Stop>>,
}

impl Ctx {
    pub fn home(&self) -> Result<PathBuf> {
        crate::config::resolve_home(self.home.as_deref())
    }

    /// Installs the stop-signal handlers (once) and returns them. Only a command that owns a
    /// root calls this, so the others keep the default "die on SIGINT".
    pub fn stop(&self) -> Result<Arc<signals::Stop>> {
        if let Some(s) = self.stop.get() {
            return Ok(s.clone());
        }
        let installed = Arc::new(signals::Stop::install()?);
        Ok(self.stop.get_or_init(|| installed).clone())
    }

    /// 128 + the signal that stopped this command's root, if one did.
    pub fn stopped_status(&self) -> Option<i32> {
        self.stop.get().and_then(|s| s.exit_status())
    }
}

/// A subcommand: it gets the global context and its own remaining arguments, and returns the
/// exit status on success.
pub type Command = fn(&Ctx, Vec<OsString>) -> Result<i32>;

/// One subcommand: its name, one-line summary and implementation; `peer --help` comes from
/// this list, and its flags, words and help texts from the flag table (`flags`).
pub(crate) struct CommandDef {
    pub name: &'static str,
    pub summary: &'static str,
    pub run: Command,
}

const fn def(name: &'static str, summary: &'static str, run: Command) -> CommandDef {
    CommandDef { name, summary, run }
}

/// The subcommand table.
pub(crate) fn commands() -> Vec<CommandDef> {
    vec![
        def(
            "host",
            "run a root for this session (optionally around a command)",
            host::cmd,
        ),
        def(
            "dir",
            "list live peers in scope (same as peer-dir)",
            dir::cmd,
        ),
        def("send", "send a message with proof of custody", msg::send),
        def(
            "inbox",
            "read this session's messages and receipts",
            msg::inbox,
        ),
        def("reply", "reply to a received message", msg::reply),
        def("consume", "mark a received message consumed", msg::consume),
        def("status", "show the receipt of a sent message", msg::status),
        def("chat", "interactive chat with peers", chat::cmd),
        def("lab", "run the two-session demo", lab::cmd),
        def("mcp", "a root that speaks MCP on stdio", session_cmds::mcp),
        def(
            "run-child",
            "run a command as a published child run",
            session_cmds::run_child,
        ),
        def(
            "recover",
            "review an earlier incarnation's unread mail",
            session_cmds::recover,
        ),
        def(
            "run",
            "run a command while holding a resource (FIFO, fencing token)",
            res::run_cmd,
        ),
        def(
            "res",
            "resource status, request, grant, release, cancel, set-controller",
            res::res_cmd,
        ),
        def(
            "ask",
            "ask a friend's agent on another machine; serve and decide asks",
            ask::cmd,
        ),
        def(
            "bench",
            "measure peerwire against this machine's floors (built-in benchmark)",
            bench::cmd,
        ),
        def(
            "completions",
            "print a bash, zsh or fish completion script",
            completions::cmd,
        ),
    ]
}

/// The subcommand names, for the documentation tests.
pub fn command_names() -> Vec<&'static str> {
    commands().into_iter().map(|c| c.name).collect()
}

/// A root's answer read as the type the root wrote it from.
pub fn decode<T: serde::de::DeserializeOwned>(answer: &serde_json::Value) -> Result<T> {
    T::deserialize(answer)
        .map_err(|e| Error::new(Code::InvalidRequest, format!("unreadable answer: {e}")))
}

/// Prints one JSON value as one line on stdout.
pub fn print_json(v: &serde_json::Value) -> Result<()> {
    out::json(v)
}

/// The status a command ends with: its own, or its error reported (a closed standard output
/// is a quiet success).
fn finish(name: &str, ctx: &Ctx, result: Result<i32>) -> i32 {
    match result {
        Ok(status) => status,
        Err(e) => report_as(name, ctx, &e),
    }
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
    // `--version` as `peer --version` answers it: the tool's name and the package version.
    if matches!(
        rest.first().and_then(|a| a.to_str()),
        Some("--version" | "-V")
    ) {
        let version = format!("{name} {}", env!("CARGO_PKG_VERSION"));
        return finish(name, &ctx, out::line(&version).map(|()| 0));
    }
    let result = cmd(&ctx, rest);
    finish(name, &ctx, result)
}

/// Entry point of the `peer` binary; returns the process exit status.
pub fn main(args: Vec<OsString>) -> i32 {
    let mut ctx = Ctx::default();
    let (sub, rest) = match split_globals(&mut ctx, args.into_iter().skip(1).collect()) {
        Ok(v) => v,
        Err(e) => return report(&ctx, &e),
    };
    let Some(sub) = sub else {
        // No command is a usage error (like git): the usage goes to stderr, status 2.
        out::err_line(help_text().trim_end());
        return Code::Usage.exit_status();
    };
    if sub == "help" || sub == "--help" || sub == "-h" {
        return finish("peer", &ctx, out::text(&help_text()).map(|()| 0));
    }
    if sub == "--version" || sub == "-V" {
        let version = format!("peer {}", env!("CARGO_PKG_VERSION"));
        return finish("peer", &ctx, out::line(&version).map(|()| 0));
    }
    let Some(cmd) = commands()
        .into_iter()
        .find(|c| c.name == sub)
        .map(|c| c.run)
    else {
        let e = Error::new(
            Code::Usage,
            format!(
                "unknown command {:?}; run 'peer --help'",
                crate::sanitize::line(&sub, 40)
            ),
        );
        return report(&ctx, &e);
    };
    let result = cmd(&ctx, rest);
    finish("peer", &ctx, result)
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

pub fn report_as(name: &str, ctx: &Ctx, e: &Error) -> i32 {
    if out::is_closed(e) {
        return 0;
    }
    if ctx.json {
        let v = serde_json::json!({"ok": false, "error": {"code": e.code.name(), "message": e.message}});
        // A reader that is gone cannot be told; the status still says what happened.
        let _ = out::json(&v);
    } else {
        out::err_line(&format!(
            "{name}: {}: {}",
            e.code.name(),
            crate::sanitize::line(&e.message, 2000)
        ));
    }
    e.code.exit_status()
}

fn help_text() -> String {
    let mut out = String::from(
        "peer — authenticated, durable messaging between coding-agent sessions\n\n\
         usage: peer [--home DIR] [--json] [--as ALIAS] COMMAND [ARGS…]\n\ncommands:\n",
    );
    for CommandDef { name, summary, .. } in commands() {
        out.push_str(&format!("  {name:<10} {summary}\n"));
    }
    out.push_str("\nRun 'peer COMMAND --help' for a command's options; see peer(1).\n");
    out
}
