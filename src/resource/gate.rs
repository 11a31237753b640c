//! The command gate behind `peer run --resource NAME -- CMD…`: request, wait for the grant,
//! record the launch in the ledger before spawning, run CMD in its own process group under a
//! child subreaper, forward SIGINT/SIGTERM/SIGHUP to that group, reap every descendant, then
//! release the grant and remove the ledger entry, and exit with the command's status.

use super::api::{caller_of, wait_for_grant};
use super::core::{Caller, Op, Outcome};
use super::model::name_hash;
use super::notify::Watch;
use super::principal::Principal;
use super::store::{Launch, Space};
use super::terminal::{Foreground, hand_to};
use crate::config::Config;
use crate::config::internal::{GROUP_SCAN_MS, TRACKED_GROUPS_MAX};
use crate::error::{Code, Error, Result};
use crate::process::{Life, Probe, ProcessEvidence};
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The errno the pre-exec check returns when the gate died before the exec (no allocation
/// between fork and exec, so the reason travels as a number).
const GATE_GONE: nix::errno::Errno = nix::errno::Errno::ESRCH;

/// What `peer run` was asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRequest {
    pub resource: String,
    pub capacity: Option<u32>,
    /// Wait bound; capped by `resourceWaitTimeoutMs`, which is also the default.
    pub wait_ms: Option<u64>,
    /// Use this existing grant (from `peer res request`) instead of requesting a new one.
    pub ticket: Option<String>,
    /// When the command exits, kill what it left running instead of waiting for it.
    pub kill_on_release: bool,
    pub command: Vec<OsString>,
}

/// The signals forwarded to the command's process group.
const FORWARDED: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// Signal flags plus one self-pipe that SIGCHLD and the forwarded signals all write to, so
/// one `poll` waits for "a child changed" or "a signal came" without polling.
struct Signals {
    flags: [Arc<AtomicBool>; 3],
    wake: UnixStream,
}

impl Signals {
    fn install() -> Result<Signals> {
        let (wake, write) = UnixStream::pair()
            .map_err(|e| Error::new(Code::Io, format!("cannot create a signal pipe: {e}")))?;
        wake.set_nonblocking(true)
            .map_err(|e| Error::new(Code::Io, format!("cannot configure the signal pipe: {e}")))?;
        let flags = [(); 3].map(|_| Arc::new(AtomicBool::new(false)));
        let register = |sig: Signal, flag: Option<&Arc<AtomicBool>>| -> std::io::Result<()> {
            if let Some(f) = flag {
                signal_hook::flag::register(sig as i32, Arc::clone(f))?;
            }
            signal_hook::low_level::pipe::register(sig as i32, write.try_clone()?)?;
            Ok(())
        };
        let mut result = register(Signal::SIGCHLD, None);
        for (sig, flag) in FORWARDED.iter().zip(&flags) {
            result = result.and_then(|()| register(*sig, Some(flag)));
        }
        result.map_err(|e| Error::new(Code::Io, format!("cannot install signal handlers: {e}")))?;
        Ok(Signals { flags, wake })
    }

    fn drain(&self) {
        let mut buf = [0u8; 64];
        while matches!((&self.wake).read(&mut buf), Ok(n) if n > 0) {}
    }

    /// Signals that arrived since the last call.
    fn take(&self) -> Vec<Signal> {
        FORWARDED
            .iter()
            .zip(&self.flags)
            .filter(|(_, f)| f.swap(false, Ordering::SeqCst))
            .map(|(s, _)| *s)
            .collect()
    }

    fn any_pending(&self) -> bool {
        self.flags.iter().any(|f| f.load(Ordering::SeqCst))
    }
}

/// Everything the gate knows about its grant.
struct Grant {
    name: String,
    ticket: String,
    token: u64,
    epoch: u64,
}

/// The `--json` line of `peer run`. Fields in alphabetical order: the line is written as the
/// sorted JSON object it has always been.
#[derive(serde::Serialize)]
struct RunLine<'a> {
    epoch: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<RunFailure<'a>>,
    ok: bool,
    op: &'static str,
    resource: &'a str,
    status: i32,
    ticket: &'a str,
    token: u64,
}

/// The gate's own failure after the command ran.
#[derive(serde::Serialize)]
struct RunFailure<'a> {
    code: &'static str,
    message: &'a str,
}

/// How a gated command ended.
#[derive(Debug)]
pub enum RunEnd {
    /// It ran (or the wait was interrupted): this exit status, 128+signal when one ended it.
    Exited(i32),
    /// It could not be started (not found, not executable); the grant was given back.
    NotStarted(std::io::Error),
    /// It ran, but the gate's own bookkeeping after it failed (already reported on stderr and
    /// in the `--json` line): the run's answer is that failure, not the command's status.
    Failed,
}

/// Writes a failure that happened beside the command's own outcome on stderr.
fn report_beside(e: &Error) {
    let _ = writeln!(
        std::io::stderr().lock(),
        "peer: {}: {}",
        e.code.name(),
        crate::sanitize::line(&e.message, 2000)
    );
}

/// Runs `peer run`: the command's end, or the gate's own failure.
pub fn run(
    home: &Path,
    cfg: &Config,
    principal: &Principal,
    req: &RunRequest,
    json: bool,
) -> Result<RunEnd> {
    let Some(program) = req.command.first() else {
        return Err(Error::new(Code::Usage, "peer run needs a command after --"));
    };
    let space = Space::open(home, cfg)?;
    let probe = Probe::new();
    let caller = caller_of(principal, probe.own()?);
    let signals = Signals::install()?;
    let name = super::model::canonical_name(&req.resource)?;
    // Held open for our whole life: its close, even by SIGKILL, wakes the waiters.
    let _live = crate::fsutil::open_private_rw(&space.live_path(&name))?;
    let watch = Watch::new(&space.dir, &name_hash(&name))?;
    let Some(grant) = obtain(&space, &name, &caller, req, &probe, &watch, &signals)? else {
        let sig = signals
            .take()
            .first()
            .map_or(Signal::SIGINT as i32, |s| *s as i32);
        return Ok(RunEnd::Exited(128 + sig));
    };
    // A signal during the request, or a failed admission, gives the unused grant back.
    let interrupted = signals.take().first().map(|s| 128 + *s as i32);
    let admitted = match interrupted {
        Some(_) => Ok(()),
        None => admit(&space, &grant, &caller, program, &probe),
    };
    if interrupted.is_some() || admitted.is_err() {
        let cancel = Op::Cancel {
            ticket: grant.ticket.clone(),
        };
        let _ = space.transact(&name, &caller, cancel, &probe);
        admitted?;
        return Ok(RunEnd::Exited(interrupted.unwrap_or(1)));
    }
    let status = supervise(&space, &grant, req, &probe, &signals);
    finish(&space, &name, &caller, &grant, &probe, status, json)
}

/// After the command: releases the grant and unlists the launch whatever happened, then
/// answers with the command's status, or the release's failure when there was one.
fn finish(
    space: &Space,
    name: &str,
    caller: &Caller,
    grant: &Grant,
    probe: &Probe,
    status: Result<RunEnd>,
    json: bool,
) -> Result<RunEnd> {
    let released = space.transact(
        name,
        caller,
        Op::Release {
            target: super::core::Target::Ticket(grant.ticket.clone()),
        },
        probe,
    );
    let unlisted = space.update_ledger(|l| {
        l.launches
            .retain(|x| !(x.hash == name_hash(name) && x.ticket == grant.ticket));
        Ok(())
    });
    let failures: Vec<Error> = [released.err(), unlisted.err()]
        .into_iter()
        .flatten()
        .collect();
    for e in &failures {
        report_beside(e);
    }
    let status = match status? {
        RunEnd::Exited(s) => s,
        not_started => return Ok(not_started),
    };
    // One failure, one answer: a release that failed is the run's result (the command's own
    // status stays in "status"), never an "ok" with an error beside it. Like env(1), the
    // wrapper's own failure is the reserved status, its code on stderr.
    let failed = failures.first();
    if json {
        print_line(grant, name, status, failed);
    }
    Ok(match failures.into_iter().next() {
        None => RunEnd::Exited(status),
        Some(_) => RunEnd::Failed,
    })
}

/// Writes the `--json` line of a run that ended with `status` (and the gate's own failure).
fn print_line(grant: &Grant, name: &str, status: i32, failed: Option<&Error>) {
    let line = RunLine {
        epoch: grant.epoch,
        error: failed.map(|e| RunFailure {
            code: e.code.name(),
            message: &e.message,
        }),
        ok: failed.is_none(),
        op: "run",
        resource: name,
        status,
        ticket: &grant.ticket,
        token: grant.token,
    };
    // The child has run; a reader that went away does not change its status.
    if let Ok(text) = serde_json::to_string(&line) {
        let _ = writeln!(std::io::stdout().lock(), "{text}");
    }
}

/// One stderr line for a queued request: what it waits for and who holds it now.
fn report_waiting(space: &Space, name: &str, ticket: &str, position: usize) {
    let held: Vec<String> = match space.read(name) {
        Ok(Some(state)) => state
            .holders
            .iter()
            .chain(&state.blockers)
            .take(4)
            .map(|h| crate::sanitize::line(&h.party.display, 80))
            .collect(),
        _ => Vec::new(),
    };
    let by = if held.is_empty() {
        String::new()
    } else {
        format!(", held by {}", held.join(", "))
    };
    let _ = writeln!(
        std::io::stderr().lock(),
        "peer run: waiting for {}{by}; your ticket is {ticket}, number {position} in the queue",
        crate::sanitize::line(name, 200)
    );
}

/// Requests (or reuses) a grant and waits for it; `None` when a signal interrupted the wait.
fn obtain(
    space: &Space,
    name: &str,
    caller: &Caller,
    req: &RunRequest,
    probe: &Probe,
    watch: &Watch,
    signals: &Signals,
) -> Result<Option<Grant>> {
    if let Some(ticket) = &req.ticket {
        return existing_grant(space, name, caller, ticket, probe).map(Some);
    }
    let step = space.transact(
        name,
        caller,
        Op::Request {
            capacity: req.capacity,
            epoch: None,
        },
        probe,
    )?;
    let outcome = match step.outcome {
        Outcome::Queued { ticket, position } => {
            // A person at the terminal sees why nothing happens yet.
            report_waiting(space, name, &ticket, position);
            let wait = req
                .wait_ms
                .unwrap_or(space.wait_timeout_ms)
                .min(space.wait_timeout_ms);
            let extra = Some(signals.wake.as_fd());
            let interrupted = || {
                signals.drain();
                signals.any_pending()
            };
            wait_for_grant(
                space,
                name,
                caller,
                &ticket,
                wait,
                probe,
                watch,
                extra,
                &interrupted,
            )?
        }
        other => other,
    };
    match outcome {
        Outcome::Granted {
            ticket,
            token,
            epoch,
        } => Ok(Some(Grant {
            name: name.to_string(),
            ticket,
            token,
            epoch,
        })),
        _ => Ok(None),
    }
}

/// A grant obtained earlier (`peer res request`) that this gate will use.
fn existing_grant(
    space: &Space,
    name: &str,
    caller: &Caller,
    ticket: &str,
    probe: &Probe,
) -> Result<Grant> {
    let state = space
        .read(name)?
        .ok_or_else(|| Error::new(Code::NotFound, format!("resource {name:?} does not exist")))?;
    let Some(h) = state.holders.iter().find(|h| h.ticket == ticket) else {
        // The coordinator explains why: revoked by a policy change (STALE_POLICY), still
        // waiting, or unknown.
        let admit = Op::Admit {
            ticket: ticket.to_string(),
            token: 0,
        };
        let why = space.transact(name, caller, admit, probe).err();
        return Err(why.unwrap_or_else(|| {
            Error::new(
                Code::NotFound,
                format!("ticket {ticket} holds no grant on {name:?}"),
            )
        }));
    };
    Ok(Grant {
        name: name.to_string(),
        ticket: ticket.to_string(),
        token: h.token,
        epoch: h.epoch,
    })
}

/// Uses the grant (epoch checked: STALE_POLICY for an unused grant of an older policy) and
/// records the launch in the ledger under the same resource lock, before anything is spawned.
fn admit(
    space: &Space,
    g: &Grant,
    caller: &Caller,
    program: &OsString,
    probe: &Probe,
) -> Result<()> {
    let command = crate::sanitize::line(
        &Path::new(program)
            .file_name()
            .unwrap_or(program)
            .to_string_lossy(),
        80,
    );
    let launch = Launch {
        resource: g.name.clone(),
        hash: name_hash(&g.name),
        ticket: g.ticket.clone(),
        token: g.token,
        epoch: g.epoch,
        principal: caller.party.principal.clone(),
        display: caller.party.display.clone(),
        command,
        gate: caller.party.evidence.clone(),
        child: None,
        pgid: None,
        groups: Vec::new(),
        cgroup: None,
        started_at: crate::clock::now_ms(),
    };
    let op = Op::Admit {
        ticket: g.ticket.clone(),
        token: g.token,
    };
    let mut record = |_: &super::core::Step| {
        space.update_ledger(|l| {
            l.launches.retain(|x| still_running(x, probe));
            l.launches.push(launch.clone());
            Ok(())
        })
    };
    space.transact_with(&g.name, caller, op, probe, &mut record)?;
    Ok(())
}

/// Ledger bookkeeping: an entry stays while its gate or anything it started may still run
/// (command, process groups, cgroup). A dropped entry's empty cgroup is removed with it.
fn still_running(l: &Launch, probe: &Probe) -> bool {
    let running =
        probe.life(&l.gate) != Life::Gone || super::store::workload_life(l, probe) != Life::Gone;
    if !running && let Some(path) = &l.cgroup {
        super::cgroup::remove(path);
    }
    running
}

/// Spawns the command and owns its whole process tree until every descendant is reaped.
fn supervise(
    space: &Space,
    g: &Grant,
    req: &RunRequest,
    probe: &Probe,
    signals: &Signals,
) -> Result<RunEnd> {
    nix::sys::prctl::set_child_subreaper(true).map_err(|e| {
        Error::new(
            Code::UnsupportedPlatform,
            format!("cannot become a child subreaper: {e}"),
        )
    })?;
    // The command tree inherits its own open description of the live file (no CLOEXEC): the
    // kernel closes it when the last process of the tree exits, which wakes waiters at once
    // even when the gate itself was killed first.
    let tree_live = open_tree_live(space, g)?;
    let terminal = Foreground::detect();
    let hash = name_hash(&g.name);
    let tag = format!("{}-{}-{}", &hash[..12], g.ticket, std::process::id());
    let cgroup = super::cgroup::create(&tag);
    let procs_fd = cgroup.as_ref().map(|c| c.procs.as_raw_fd());
    let child = spawn(g, req, terminal.is_some(), procs_fd);
    let cgroup_path = cgroup.map(|c| c.path);
    if child.is_err()
        && let Some(path) = &cgroup_path
    {
        super::cgroup::remove(path);
    }
    drop(tree_live);
    let pid = match child {
        Ok(c) => c.id(),
        Err(e) => return not_started(e, terminal),
    };
    if terminal.is_some() {
        // Also from this side, so the hand-over does not depend on which process runs first.
        hand_to(Pid::from_raw(pid as i32));
    }
    record_child(space, g, pid, probe, &cgroup_path);
    let mut tracked: Vec<i32> = Vec::new();
    // In a cgroup every descendant stays tracked; otherwise look for detached groups.
    let mut track = || {
        if cgroup_path.is_none() {
            track_groups(space, g, pid as i32, &mut tracked);
        }
    };
    let kill_rest = || kill_tree(cgroup_path.as_deref(), pid as i32);
    let on_exit: Option<&dyn Fn()> = if req.kill_on_release {
        Some(&kill_rest)
    } else {
        None
    };
    let status = reap_all(
        pid as i32,
        signals,
        space.limits.heartbeat_ms,
        &mut track,
        on_exit,
    );
    if let Some(path) = &cgroup_path {
        super::cgroup::remove(path);
    }
    if let Some(t) = terminal {
        t.restore();
    }
    Ok(RunEnd::Exited(status))
}

/// The command never ran: the terminal is given back, and the caller turns this into
/// env(1)'s 127 or 126.
fn not_started(e: std::io::Error, terminal: Option<Foreground>) -> Result<RunEnd> {
    if let Some(t) = terminal {
        t.restore();
    }
    if e.raw_os_error() == Some(GATE_GONE as i32) {
        return Err(Error::new(
            Code::Io,
            "the gate ended before the command started",
        ));
    }
    Ok(RunEnd::NotStarted(e))
}

/// The command tree's own open description of the resource's live file (see `supervise`).
fn open_tree_live(space: &Space, g: &Grant) -> Result<std::os::fd::OwnedFd> {
    nix::fcntl::open(
        &space.live_path(&g.name),
        nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_NOFOLLOW,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| {
        Error::io(
            "cannot open",
            &space.live_path(&g.name),
            &std::io::Error::from(e),
        )
    })
}

/// Records the started command in the launch ledger (its evidence, group and cgroup), so a
/// later session can see or adopt it; a failure is reported beside the run, not fatal.
fn record_child(
    space: &Space,
    g: &Grant,
    pid: u32,
    probe: &Probe,
    cgroup_path: &Option<std::path::PathBuf>,
) {
    let child_evidence: Option<ProcessEvidence> = probe.evidence(pid).ok();
    let recorded = space.update_ledger(|l| {
        if let Some(x) = l
            .launches
            .iter_mut()
            .find(|x| x.hash == name_hash(&g.name) && x.ticket == g.ticket)
        {
            x.child = child_evidence.clone();
            x.pgid = Some(pid as i32);
            x.cgroup = cgroup_path.clone();
        }
        Ok(())
    });
    if let Err(e) = recorded {
        report_beside(&e);
    }
}

/// Kills what is left of a released command's tree: its cgroup, and also without one the
/// command's group, the groups that detached, and anything re-parented to the gate.
fn kill_tree(cgroup: Option<&Path>, pid: i32) {
    if let Some(path) = cgroup {
        super::cgroup::kill(path);
    }
    let _ = nix::sys::signal::killpg(Pid::from_raw(pid), Signal::SIGKILL);
    for g in crate::process::descendant_groups(std::process::id(), pid).unwrap_or_default() {
        let _ = nix::sys::signal::killpg(Pid::from_raw(g), Signal::SIGKILL);
    }
    for c in crate::process::children_of(std::process::id()) {
        let _ = nix::sys::signal::kill(Pid::from_raw(c), Signal::SIGKILL);
    }
}

fn spawn(
    g: &Grant,
    req: &RunRequest,
    terminal: bool,
    cgroup_procs: Option<std::os::fd::RawFd>,
) -> std::io::Result<std::process::Child> {
    let parent = nix::unistd::getpid();
    let mut cmd = std::process::Command::new(&req.command[0]);
    cmd.args(&req.command[1..])
        .env("PEER_FENCING_TOKEN", g.token.to_string())
        .env("PEER_RESOURCE", &g.name)
        .env("PEER_TICKET", &g.ticket)
        .process_group(0);
    // SAFETY: the closure runs between fork and exec in a threaded process, so it may only
    // make async-signal-safe calls: write (of "0" to the launch cgroup's cgroup.procs, opened
    // by the parent), prctl, getpid, getppid, sigemptyset/sigaddset, pthread_sigmask and
    // tcsetpgrp. It allocates nothing: its errors are bare errno values
    // (`io::Error::from(Errno)` is the allocation-free OS variant) and are worded by the
    // parent after `spawn` returns. A unit test keeps allocating calls out of it. The child
    // dies with the gate, so a SIGKILLed gate does not leave its direct child holding the
    // resource unseen.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = cgroup_procs
                && nix::libc::write(fd, b"0".as_ptr().cast(), 1) != 1
            {
                return Err(std::io::Error::last_os_error());
            }
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            if terminal {
                hand_to(nix::unistd::getpid());
            }
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from(GATE_GONE));
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Records in the launch ledger any new process group (a `setsid` daemon's session) that a
/// descendant of the command created, so that a killed gate does not free the resource while
/// such a daemon still runs. The record can lag a fresh daemon by one scan.
fn track_groups(space: &Space, g: &Grant, command_group: i32, tracked: &mut Vec<i32>) {
    let Some(found) = crate::process::descendant_groups(std::process::id(), command_group) else {
        return;
    };
    let before = tracked.len();
    for group in found {
        if !tracked.contains(&group) && tracked.len() < TRACKED_GROUPS_MAX {
            tracked.push(group);
        }
    }
    if tracked.len() == before {
        return;
    }
    let groups = tracked.clone();
    let recorded = space.update_ledger(|l| {
        if let Some(x) = l
            .launches
            .iter_mut()
            .find(|x| x.hash == name_hash(&g.name) && x.ticket == g.ticket)
        {
            x.groups = groups;
        }
        Ok(())
    });
    if let Err(e) = recorded {
        eprintln!(
            "peer: {}: {}",
            e.code.name(),
            crate::sanitize::line(&e.message, 2000)
        );
    }
}

/// Forwards signals to the group and reaps until no child is left (ECHILD). Returns the direct
/// child's status, 128+signal when a signal killed it.
fn reap_all(
    child: i32,
    signals: &Signals,
    fallback_ms: u64,
    on_tick: &mut dyn FnMut(),
    on_child_exit: Option<&dyn Fn()>,
) -> i32 {
    let mut status = None;
    let mut exit_handled = false;
    loop {
        if status.is_some() && !exit_handled {
            exit_handled = true;
            if let Some(f) = on_child_exit {
                f();
            }
        }
        on_tick();
        loop {
            match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(p, code)) if p.as_raw() == child => status = Some(code),
                Ok(WaitStatus::Signaled(p, sig, _)) if p.as_raw() == child => {
                    status = Some(128 + sig as i32)
                }
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return status.unwrap_or(1),
            }
        }
        for sig in signals.take() {
            let _ = nix::sys::signal::killpg(Pid::from_raw(child), sig);
            // Descendants that left the group (setsid) were re-parented to us: tell them too.
            for pid in crate::process::children_of(std::process::id()) {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), sig);
            }
        }
        let mut fds = [nix::poll::PollFd::new(
            signals.wake.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        let _ = nix::poll::poll(
            &mut fds,
            nix::poll::PollTimeout::from(fallback_ms.min(GROUP_SCAN_MS) as u16),
        );
        signals.drain();
    }
}

#[cfg(test)]
mod tests {
    /// The `--json` line is the sorted object it was when built as a JSON value.
    #[test]
    fn the_json_line_keeps_its_bytes() {
        let failed = super::RunFailure {
            code: "IO",
            message: "disk full",
        };
        let line = super::RunLine {
            epoch: 2,
            error: Some(failed),
            ok: false,
            op: "run",
            resource: "port:1",
            status: 3,
            ticket: "t-1",
            token: 9,
        };
        let old = serde_json::json!({"ok": false, "op": "run", "resource": "port:1",
            "ticket": "t-1", "token": 9, "epoch": 2, "status": 3,
            "error": {"code": "IO", "message": "disk full"}});
        assert_eq!(serde_json::to_string(&line).unwrap(), old.to_string());
        let ok = super::RunLine {
            error: None,
            ok: true,
            ..line
        };
        let old = serde_json::json!({"ok": true, "op": "run", "resource": "port:1",
            "ticket": "t-1", "token": 9, "epoch": 2, "status": 3});
        assert_eq!(serde_json::to_string(&ok).unwrap(), old.to_string());
    }

    /// The text of every closure handed to `pre_exec` in `source`, up to its closing `});`.
    fn pre_exec_bodies(source: &str) -> Vec<&str> {
        let mut out = Vec::new();
        let mut rest = source;
        while let Some(at) = rest.find(".pre_exec(move ||") {
            let body = &rest[at..];
            let end = body.find("\n        });").unwrap_or(body.len());
            out.push(&body[..end]);
            rest = &body[end..];
        }
        out
    }

    #[test]
    fn the_pre_exec_closure_calls_nothing_that_allocates() {
        // Between fork and exec only async-signal-safe calls are allowed: any of these would
        // allocate (or format) in a child that may have inherited a held allocator lock.
        const FORBIDDEN: [&str; 10] = [
            "Error::other",
            "Error::new",
            "format!",
            "vec!",
            "Vec::",
            "String",
            "to_string",
            "to_owned",
            "Box::",
            "println!",
        ];
        let source = include_str!("gate.rs");
        let source = &source[..source.find("#[cfg(test)]").unwrap_or(source.len())];
        let bodies = pre_exec_bodies(source);
        assert_eq!(bodies.len(), 1, "the gate has one pre-exec closure");
        for body in bodies {
            for word in FORBIDDEN {
                assert!(
                    !body.contains(word),
                    "pre-exec closure uses {word}:\n{body}"
                );
            }
        }
        let terminal = include_str!("terminal.rs");
        let hand_to = &terminal[terminal.find("pub fn hand_to").unwrap()..];
        let hand_to = &hand_to[..hand_to.find("\n}\n").unwrap()];
        for word in FORBIDDEN {
            assert!(!hand_to.contains(word), "hand_to uses {word}");
        }
    }
}
