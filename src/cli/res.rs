//! Command-line front ends: `peer run`, `peer res …` (both via `crate::cli`'s table) and the
//! `peer-res` viewer. Argument parsing with lexopt, human output by default, one JSON object
//! per result with `--json`; every stored string is sanitized before it reaches a terminal.

use super::{Ctx, out};
use crate::config::Config;
use crate::error::{Code, Error, Result};
use crate::process::Probe;
use crate::resource::api::{Request, coordinate, corrupt_file, describe};
use crate::resource::core::{CAP_REQUEST, Op, Target};
use crate::resource::gate::{self, RunRequest};
use crate::resource::model::canonical_name;
use crate::resource::principal::{
    Principal, default_capabilities, principal_id, restrict, session_holder,
};
use crate::resource::store::Space;
use crate::sanitize::line;
use crate::toolspec::resource_answer::{ResourceAnswer, ResourceView, TicketAnswer, TicketState};
use lexopt::Arg::{self, Long, Short};
use serde_json::Value;
use std::ffi::OsString;

pub(crate) const RUN_HELP: &str = "\
usage: peer run --resource NAME [--capacity N] [--wait MS] [--ticket T] [--kill-on-release]
                [--json] -- CMD [ARGS…]

Waits for a grant on NAME (FIFO), records the launch, runs CMD in its own process group with
PEER_RESOURCE, PEER_TICKET and PEER_FENCING_TOKEN set, forwards SIGINT/SIGTERM/SIGHUP, waits for
every descendant, releases the grant and exits with CMD's status (128+N when killed by signal N).

  --resource NAME  resource to hold (e.g. port:3000)
  --capacity N     capacity when this request creates the resource (default 1)
  --wait MS        give up after MS ms (default and maximum: resourceWaitTimeoutMs)
  --ticket T       run under an existing grant T (from 'peer res request') instead of requesting
  --kill-on-release  when CMD exits, kill what it left running (its cgroup, or its process
                   groups) instead of waiting for it
";

pub(crate) const RES_HELP: &str = "\
usage: peer res status [NAME]
       peer res request NAME [--capacity N] [--wait MS] [--epoch E]
       peer res grant NAME TICKET [--epoch E]
       peer res release NAME [--ticket T | --token N] [--force]
       peer res cancel NAME TICKET
       peer res set-controller NAME [--capacity N] [--force] [--automatic]

request and set-controller act for the enclosing session: they need PEER_HOLDER_PID (set by the
session root) so the grant or controller lives as long as that process; it must be this
command, its descendant, a process of its session or its session's root. For one command, use
'peer run --resource NAME -- CMD'. release --force (with --ticket or --token) is the operator's
override for any holder; it is logged. With --json each result is one JSON object.
";

pub const PEER_RES_HELP: &str = "\
usage: peer-res [NAME] [--json] [--home DIR]

Shows each resource's policy, epoch, capacity, controller, holders (tokens, ages), queue and
managed launches. Read-only. See peer-res(1).
";

fn usage(e: impl std::fmt::Display) -> Error {
    Error::new(Code::Usage, format!("{e}; see --help"))
}

fn string(v: OsString) -> Result<String> {
    v.into_string()
        .map_err(|_| usage("arguments must be valid UTF-8"))
}

fn number<T: std::str::FromStr>(v: OsString, flag: &str) -> Result<T> {
    string(v)?
        .trim()
        .parse()
        .map_err(|_| usage(format!("{flag} needs a positive integer")))
}

/// `peer run`.
pub fn run_cmd(ctx: &Ctx, args: Vec<OsString>) -> Result<i32> {
    // A wrapper: the command's status, or 125 for peerwire's own failure (`cli::exit`).
    Ok(match run_wrapped(ctx, args) {
        Ok(status) => status,
        Err(e) => crate::cli::exit::wrapper_failed(ctx, &e),
    })
}

pub(crate) fn run_wrapped(ctx: &Ctx, args: Vec<OsString>) -> Result<i32> {
    let mut p = lexopt::Parser::from_args(args);
    let mut req = RunRequest {
        resource: String::new(),
        capacity: None,
        wait_ms: None,
        ticket: None,
        kill_on_release: false,
        command: Vec::new(),
    };
    while let Some(arg) = p.next().map_err(usage)? {
        match arg {
            Long("resource") => req.resource = string(p.value().map_err(usage)?)?,
            Long("capacity") => {
                req.capacity = Some(number(p.value().map_err(usage)?, "--capacity")?)
            }
            Long("wait") => req.wait_ms = Some(number(p.value().map_err(usage)?, "--wait")?),
            Long("ticket") => req.ticket = Some(string(p.value().map_err(usage)?)?),
            Long("kill-on-release") => req.kill_on_release = true,
            Long("help") | Short('h') => {
                out::text(RUN_HELP)?;
                return Ok(0);
            }
            Arg::Value(first) => {
                req.command.push(first);
                req.command.extend(p.raw_args().map_err(usage)?);
            }
            other => return Err(usage(other.unexpected())),
        }
    }
    if req.resource.is_empty() {
        return Err(usage("peer run needs --resource NAME"));
    }
    if req.command.is_empty() {
        return Err(usage("peer run needs a command after --"));
    }
    if let Err(e) = super::exit::find_program(&req.command[0]) {
        return Ok(super::exit::spawn_failed("peer run", &req.command[0], &e));
    }
    let home = ctx.home()?;
    let cfg = Config::load(&home)?;
    let principal = cli_principal(ctx.as_alias.as_deref(), &cfg);
    Ok(match gate::run(&home, &cfg, &principal, &req, ctx.json)? {
        gate::RunEnd::Exited(status) => status,
        gate::RunEnd::NotStarted(e) => super::exit::spawn_failed("peer run", &req.command[0], &e),
        gate::RunEnd::Failed => super::exit::WRAPPER_FAILED,
    })
}

/// The options of `peer res`, collected before the subcommand's words decide which apply.
#[derive(Debug, Default)]
struct ResOptions {
    capacity: Option<u32>,
    wait_ms: u64,
    epoch: Option<u64>,
    token: Option<u64>,
    ticket: Option<String>,
    force: bool,
    automatic: bool,
}

/// The words and options of `peer res`; `None` once `--help` was printed.
fn res_args(args: Vec<OsString>) -> Result<Option<(Vec<String>, ResOptions)>> {
    let mut p = lexopt::Parser::from_args(args);
    let mut words: Vec<String> = Vec::new();
    let mut o = ResOptions::default();
    while let Some(arg) = p.next().map_err(usage)? {
        match arg {
            Long("capacity") => o.capacity = Some(number(p.value().map_err(usage)?, "--capacity")?),
            Long("wait") => o.wait_ms = number(p.value().map_err(usage)?, "--wait")?,
            Long("epoch") => o.epoch = Some(number(p.value().map_err(usage)?, "--epoch")?),
            Long("token") => o.token = Some(number(p.value().map_err(usage)?, "--token")?),
            Long("ticket") => o.ticket = Some(string(p.value().map_err(usage)?)?),
            Long("force") => o.force = true,
            Long("automatic") => o.automatic = true,
            Long("help") | Short('h') => {
                out::text(RES_HELP)?;
                return Ok(None);
            }
            Arg::Value(v) => words.push(string(v)?),
            other => return Err(usage(other.unexpected())),
        }
    }
    Ok(Some((words, o)))
}

/// `peer res SUBCOMMAND …`.
pub fn res_cmd(ctx: &Ctx, args: Vec<OsString>) -> Result<i32> {
    let Some((words, options)) = res_args(args)? else {
        return Ok(0);
    };
    let request = build_request(&words, options)?;
    let forced = matches!(request.op, Op::Override { .. });
    let home = ctx.home()?;
    let cfg = Config::load(&home)?;
    let principal = cli_principal(ctx.as_alias.as_deref(), &cfg);
    let probe = Probe::new();
    let evidence = match request.op {
        Op::Request { .. } => session_holder(&probe, "peer res request", enclosing_root_pid)?,
        Op::SetController { .. } => {
            session_holder(&probe, "peer res set-controller", enclosing_root_pid)?
        }
        _ => probe.own()?,
    };
    let answer = coordinate(&home, &cfg, &principal, request, evidence, &|| false)?;
    if let (true, ResourceAnswer::Ticket(t)) = (forced, &answer) {
        // The durable record is the resource journal's released_by_override event; this line
        // is for whoever watches the operator's terminal or logs.
        out::err_line(&format!(
            "peer: override: {} released ticket {} (token {}) of {} regardless of its holder",
            line(&principal.id, 120),
            line(&t.ticket, 120),
            num(t.token),
            line(&t.resource, 120),
        ));
    }
    if ctx.json {
        out::json(&encode(&answer)?)?;
    } else {
        out::text(&human_outcome(&answer))?;
    }
    // `status` of everything shows the healthy resources and names the unreadable files.
    let corrupt = match &answer {
        ResourceAnswer::All(all) => all.corrupt.as_slice(),
        _ => &[],
    };
    for c in corrupt {
        out::err_line(&format!("peer: {}: {}", c.code, line(&c.message, 120)));
    }
    Ok(if corrupt.is_empty() {
        0
    } else {
        Code::RecoveryRequired.exit_status()
    })
}

/// Maps positional words and collected options to a typed coordination request, checked the
/// way the tool's arguments are: a bad resource name before a release's contradictory target.
fn build_request(words: &[String], o: ResOptions) -> Result<Request> {
    let (sub, rest) = words
        .split_first()
        .ok_or_else(|| usage("peer res needs a subcommand"))?;
    let want = match sub.as_str() {
        "status" => 0..=1,
        "request" | "release" | "set-controller" => 1..=1,
        "grant" | "cancel" => 2..=2,
        other => {
            return Err(usage(format!(
                "unknown res subcommand {:?}",
                line(other, 40)
            )));
        }
    };
    if !want.contains(&rest.len()) {
        return Err(usage(format!(
            "peer res {sub} takes {} argument(s)",
            want.end()
        )));
    }
    let resource = rest.first().map(|r| canonical_name(r)).transpose()?;
    // A ticket named by position wins over `--ticket`.
    let ticket = rest.get(1).cloned().or(o.ticket);
    let op = match sub.as_str() {
        "status" => Op::Status,
        "request" => Op::Request {
            capacity: o.capacity,
            epoch: o.epoch,
        },
        "grant" => Op::Grant {
            ticket: ticket.unwrap_or_default(),
            epoch: o.epoch,
        },
        "release" => release_op(ticket, o.token, o.force)?,
        "cancel" => Op::Cancel {
            ticket: ticket.unwrap_or_default(),
        },
        _ => Op::SetController {
            capacity: o.capacity,
            force: o.force,
            automatic: o.automatic,
            ledger: Vec::new(),
        },
    };
    Ok(Request {
        resource,
        op,
        wait_ms: o.wait_ms,
    })
}

/// `release`: of a ticket, a token or the caller's own grant; `--force` (with a ticket or a
/// token) is the operator's override for any holder.
fn release_op(ticket: Option<String>, token: Option<u64>, force: bool) -> Result<Op> {
    let target = Target::of_release(ticket, token)?;
    Ok(if force {
        Op::Override { target }
    } else {
        Op::Release { target }
    })
}

/// A typed resource answer as the JSON object `--json` prints and the human renderers read.
fn encode<T: serde::Serialize>(answer: &T) -> Result<Value> {
    serde_json::to_value(answer).map_err(|e| Error::new(Code::Io, e.to_string()))
}

/// A number, or `-` for an absent one.
fn num<T: std::fmt::Display>(n: Option<T>) -> String {
    n.map_or_else(|| "-".into(), |n| n.to_string())
}

/// The human lines of one answer of `peer res`.
fn human_outcome(answer: &ResourceAnswer) -> String {
    let resources = match answer {
        ResourceAnswer::All(all) => &all.resources,
        ResourceAnswer::One(one) => &one.resources,
        ResourceAnswer::Ticket(a) => return human_ticket(a),
        ResourceAnswer::Policy(p) => {
            return format!(
                "{}: policy epoch {}, capacity {}\n",
                line(&p.resource, 120),
                p.epoch,
                p.capacity
            );
        }
    };
    if resources.is_empty() {
        return "no resources\n".into();
    }
    resources.iter().map(human_resource).collect()
}

fn human_ticket(a: &TicketAnswer) -> String {
    let (r, t) = (line(&a.resource, 120), line(&a.ticket, 120));
    match a.state {
        TicketState::Granted => format!(
            "{t} granted on {r} (token {}, epoch {})\n",
            num(a.token),
            num(a.epoch)
        ),
        TicketState::Queued => format!("{t} queued on {r} at position {}\n", num(a.position)),
        TicketState::Released => format!("{t} released on {r} (token {})\n", num(a.token)),
        TicketState::Cancelled => format!("{t} cancelled on {r}\n"),
        // A gate's own admission; no command of `peer res` answers it.
        TicketState::Admitted => format!("{r}: policy epoch {}, capacity -\n", num(a.epoch)),
    }
}

fn age(ms: u64) -> String {
    if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60)
    }
}

/// The human table of one resource.
pub fn human_resource(r: &ResourceView) -> String {
    let mut o = format!(
        "{}  {}  epoch {}  capacity {}  sequence {}\n",
        line(&r.resource, 120),
        r.policy,
        r.epoch,
        r.capacity,
        r.sequence
    );
    match &r.controller {
        Some(c) => o.push_str(&format!(
            "  controller  {} ({})  pid {}  {}\n",
            line(&c.display, 120),
            line(&c.principal, 120),
            c.pid,
            c.life
        )),
        None => o.push_str("  controller  none\n"),
    }
    for (title, list) in [("holder", &r.holders), ("blocker", &r.blockers)] {
        for h in list {
            let used = if h.admitted { "running" } else { "granted" };
            o.push_str(&format!(
                "  {title:<10}  {}  token {}  {}  {}  {used}  epoch {}  {}\n",
                line(&h.ticket, 120),
                h.token,
                who(&h.display, h.pid),
                h.life,
                h.epoch,
                age(h.age_ms)
            ));
        }
    }
    o.push_str(&waiting_lines(r));
    o
}

/// A holder or a waiter: its display name and process.
fn who(display: &str, pid: u32) -> String {
    format!("{}  pid {pid}", line(display, 120))
}

/// The queue and launch lines of one resource's status.
fn waiting_lines(r: &ResourceView) -> String {
    let mut o = String::new();
    for q in &r.queue {
        o.push_str(&format!(
            "  queue {:<4}  {}  {}  waiting {}\n",
            q.position.to_string(),
            line(&q.ticket, 120),
            who(&q.display, q.pid),
            age(q.age_ms)
        ));
    }
    for l in &r.launches {
        o.push_str(&format!(
            "  launch      {}  token {}  {}  gate {}  child {}  {}\n",
            line(&l.ticket, 120),
            l.token,
            line(&l.command, 120),
            l.gate_pid,
            num(l.child_pid),
            age(l.age_ms)
        ));
    }
    o
}

/// The `peer-res` binary: returns its exit status.
/// The `peer-res` viewer (`tool_main` handles `--home` and `--json`, and reports errors the
/// way `peer` does: a JSON object with `--json`).
pub fn peer_res(ctx: &Ctx, args: Vec<OsString>) -> Result<i32> {
    let mut p = lexopt::Parser::from_args(args);
    let (json_out, mut name) = (ctx.json, None);
    while let Some(arg) = p.next().map_err(usage)? {
        match arg {
            Long("help") | Short('h') => {
                out::text(PEER_RES_HELP)?;
                return Ok(0);
            }
            Arg::Value(v) if name.is_none() => {
                name = Some(crate::resource::model::canonical_name(&string(v)?)?)
            }
            other => return Err(usage(other.unexpected())),
        }
    }
    let home = ctx.home()?;
    let cfg = Config::load(&home)?;
    let space = Space::existing(&home, &cfg);
    let (states, skipped) = match &name {
        Some(n) => (space.read(n)?.into_iter().collect(), Vec::new()),
        None => space.list_checked()?,
    };
    let launches = space.read_ledger()?.launches;
    let probe = Probe::new();
    let now = crate::clock::now_ms();
    if states.is_empty() && skipped.is_empty() && !json_out {
        out::line("no resources")?;
    }
    for st in &states {
        let view = describe(st, &probe, &launches, now);
        if json_out {
            out::json(&encode(&view)?)?;
        } else {
            out::text(&human_resource(&view))?;
        }
    }
    report_skipped(&skipped, json_out)
}

/// Lists the resource files that could not be read after the healthy ones; any makes the
/// exit status RECOVERY_REQUIRED so scripts notice while people still see everything else.
fn report_skipped(skipped: &[crate::resource::store::Skipped], json_out: bool) -> Result<i32> {
    for sk in skipped {
        if json_out {
            out::json(&encode(&corrupt_file(sk))?)?;
        } else {
            out::line(&format!(
                "corrupt  {}  {}",
                line(&sk.path.display().to_string(), 400),
                sk.error.code.name()
            ))?;
        }
        out::err_line(&format!(
            "peer-res: {}: {}",
            sk.error.code.name(),
            line(&sk.error.message, 2000)
        ));
    }
    Ok(if skipped.is_empty() {
        0
    } else {
        Code::RecoveryRequired.exit_status()
    })
}

/// The pid of the enclosing session's root, proven by the kernel (SO_PEERCRED) on the root's
/// socket after `local.hello` succeeded with the control file's secret.
fn enclosing_root_pid() -> Option<u32> {
    let cf = crate::runtime::control::from_env().ok()??;
    let limits = crate::config::Limits::default();
    let client =
        crate::transport::LocalClient::connect(&cf.endpoint, cf.secret_bytes().ok()?, &limits)
            .ok()?;
    client.root_pid()
}

/// The principal of a `peer` command-line invocation.
fn cli_principal(alias: Option<&str>, cfg: &Config) -> Principal {
    let control = std::env::var("PEER_CONTROL").ok().filter(|v| !v.is_empty());
    let mut granted: Option<Vec<String>> = None;
    let (id, display) = match (alias, control) {
        (Some(a), _) => (format!("cli:{a}"), a.to_string()),
        (None, Some(c)) => match crate::runtime::control::read(std::path::Path::new(&c)) {
            // The same id the session's own tools use, so the CLI, MCP and the gate agree
            // on who holds what.
            Ok(cf) => {
                // A run's own control file decides the run; the variable only for the root.
                let run = cf.run_id.clone().or_else(|| {
                    std::env::var(crate::runtime::control::ENV_RUN)
                        .ok()
                        .filter(|r| !r.is_empty())
                });
                let peer = crate::identity::peer_id(&cf.instance_id, run.as_deref());
                if let Some(r) = &run {
                    // A child run has only what its root gave it; unknown means less.
                    granted = Some(run_capabilities(&cf, r, &cfg.limits).unwrap_or_default());
                }
                let alias = std::env::var("PEER_ALIAS").unwrap_or_else(|_| peer.clone());
                (principal_id(&peer), alias)
            }
            Err(_) => {
                let c = crate::sanitize::line(&c, 120);
                (format!("session:{c}"), c)
            }
        },
        (None, None) => {
            let pid = std::process::id();
            (format!("cli:pid-{pid}"), format!("pid-{pid}"))
        }
    };
    let keep = std::env::var("PEER_CAPABILITIES").ok();
    let mut capabilities = restrict(default_capabilities(cfg), keep.as_deref());
    if let Some(g) = granted {
        capabilities.retain(|c| c == CAP_REQUEST || g.contains(c));
    }
    Principal {
        id,
        display: crate::sanitize::line(&display, 120),
        capabilities,
    }
}

/// The capabilities the root behind `cf` gave child run `run` (`local.info`).
fn run_capabilities(
    cf: &crate::runtime::control::ControlFile,
    run: &str,
    limits: &crate::config::Limits,
) -> Result<Vec<String>> {
    let mut client =
        crate::transport::LocalClient::connect(&cf.endpoint, cf.secret_bytes()?, limits)?;
    let info: crate::runtime::handler::Info = client.call(
        &crate::protocol::local::LocalRequest {
            run_id: Some(run.to_string()),
            auto: None,
            call: crate::protocol::local::LocalCall::Info,
        },
        limits.acknowledgement_ms,
    )?;
    Ok(info.capabilities)
}

#[cfg(test)]
#[path = "res_tests.rs"]
mod tests;
