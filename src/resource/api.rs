//! The library surface other modules call: `coordinate` (the `coordinate_resource` tool and
//! `peer res`), waiting for a grant, the description of a resource, and `events_since` for
//! the `resource_update` events of a root's bus. Answers are the typed results of
//! `toolspec::resource_answer`; the front ends encode them.

use super::core::{Caller, Op, Outcome, Step, Target};
use super::model::{Holder, Party, ResourceState, canonical_name, name_hash};
use super::notify::{Wake, Watch};
use super::principal::Principal;
use super::store::{Launch, Skipped, Space};
use crate::config::{Config, Limits};
use crate::error::{Code, Error, Result};
use crate::process::{Life, Probe, ProcessEvidence};
use crate::toolspec::resource_answer::{
    AllStatus, ControllerView, CorruptFile, HolderView, LaunchView, OneStatus, PolicyAnswer,
    QueuedView, ResourceAnswer, ResourceUpdate, ResourceView, TicketAnswer, TicketState,
};
use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// Builds the coordinator's view of a principal acting through `evidence`.
pub fn caller_of(principal: &Principal, evidence: ProcessEvidence) -> Caller {
    Caller {
        party: Party {
            principal: principal.id.clone(),
            display: principal.display.clone(),
            evidence,
        },
        capabilities: principal.capabilities.clone(),
    }
}

/// One typed coordination request: the resource (`None` only for a status of every
/// resource), the operation, and how long a request may wait for its grant (0: do not wait).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub resource: Option<String>,
    pub op: Op,
    pub wait_ms: u64,
}

impl Request {
    /// The operation's name in answers (`"op"`).
    fn kind(&self) -> &'static str {
        match self.op {
            Op::Status => "status",
            Op::Request { .. } => "request",
            Op::Grant { .. } => "grant",
            Op::Admit { .. } => "admit",
            Op::Release { .. } | Op::Override { .. } => "release",
            Op::Cancel { .. } => "cancel_request",
            Op::SetController { .. } => "set_controller",
        }
    }
}

/// Runs one coordination request for `principal`. `evidence` is the process whose life stands
/// for the request (the session root). A request's wait for its grant ends early, with the
/// ticket cancelled and the answer's state `cancelled`, once `cancelled()` says so (checked
/// every tenth of `Limits.heartbeat_ms`): a tool call the client abandoned must not keep a
/// queue slot.
pub fn coordinate(
    home: &Path,
    cfg: &Config,
    principal: &Principal,
    request: Request,
    evidence: ProcessEvidence,
    cancelled: &dyn Fn() -> bool,
) -> Result<ResourceAnswer> {
    let space = Space::open(home, cfg)?;
    let probe = Probe::new();
    let caller = caller_of(principal, evidence);
    let kind = request.kind();
    let resource = request
        .resource
        .as_deref()
        .map(canonical_name)
        .transpose()?;
    let Some(name) = resource else {
        if request.op != Op::Status {
            return Err(usage(&format!("{kind} needs a resource")));
        }
        return status_of_all(&space, &probe).map(ResourceAnswer::All);
    };
    let step = space.transact(&name, &caller, request.op, &probe)?;
    finish(
        &space,
        &name,
        &caller,
        &probe,
        kind,
        step,
        request.wait_ms,
        cancelled,
    )
}

/// `status` of every resource; unreadable resource files and an unreadable launch ledger are
/// listed apart.
fn status_of_all(space: &Space, probe: &Probe) -> Result<AllStatus> {
    let (states, mut skipped) = space.list_checked()?;
    // The launches are shown as `peer-res` shows them; an unreadable ledger is listed apart.
    let launches = match space.read_ledger() {
        Ok(ledger) => ledger.launches,
        Err(error) => {
            skipped.push(Skipped {
                path: space.ledger_path(),
                error,
            });
            Vec::new()
        }
    };
    let now = crate::clock::now_ms();
    Ok(AllStatus {
        corrupt: skipped.iter().map(corrupt_file).collect(),
        ok: true,
        op: "status",
        resources: states
            .iter()
            .map(|s| describe(s, probe, &launches, now))
            .collect(),
    })
}

/// Gives back everything `principal` reserved for itself outside a running command: cancels
/// its queued tickets and releases its grants that no process runs under (a `peer run` gate's
/// admitted grant ends with its process tree instead). For a child run being retired, whose
/// reservations would otherwise live as long as its root. Returns how many were given back;
/// unreadable resource files are skipped (they are reported by `peer-res`).
pub fn release_all(
    home: &Path,
    cfg: &Config,
    principal: &Principal,
    evidence: ProcessEvidence,
) -> Result<usize> {
    let space = Space::open(home, cfg)?;
    let probe = Probe::new();
    let caller = caller_of(principal, evidence);
    let mine = |p: &Party| p.principal == principal.id;
    let mut given = 0;
    for state in space.list_checked()?.0 {
        let queued = state.tickets.iter().filter(|t| mine(&t.party));
        let held = state
            .holders
            .iter()
            .filter(|h| mine(&h.party) && !h.admitted);
        let ops: Vec<Op> = queued
            .map(|t| Op::Cancel {
                ticket: t.id.clone(),
            })
            .chain(held.map(|h| Op::Release {
                target: Target::Ticket(h.ticket.clone()),
            }))
            .collect();
        for op in ops {
            // A ticket that moved on meanwhile (granted, reclaimed) is not an error here.
            if space.transact(&state.name, &caller, op, &probe).is_ok() {
                given += 1;
            }
        }
    }
    Ok(given)
}

/// A resource file that could not be read: its path, the error's code name and message.
pub fn corrupt_file(s: &Skipped) -> CorruptFile {
    CorruptFile {
        code: s.error.code.name(),
        corrupt: s.path.display().to_string(),
        message: s.error.message.clone(),
    }
}

#[allow(clippy::too_many_arguments)]
fn finish(
    space: &Space,
    name: &str,
    caller: &Caller,
    probe: &Probe,
    kind: &'static str,
    step: Step,
    wait_ms: u64,
    cancelled: &dyn Fn() -> bool,
) -> Result<ResourceAnswer> {
    if let (Outcome::Queued { ticket, .. }, true) = (&step.outcome, wait_ms > 0) {
        let watch = Watch::new(&space.dir, &name_hash(name))?;
        let wait = wait_ms.min(space.wait_timeout_ms);
        let got = wait_for_grant(
            space, name, caller, ticket, wait, probe, &watch, None, cancelled,
        )?;
        return Ok(answer_of(kind, name, got, Vec::new()));
    }
    let resources = match step.outcome {
        Outcome::Status => {
            // A corrupt ledger is the same RECOVERY_REQUIRED here as in `peer-res`.
            let launches = space.read_ledger()?.launches;
            let now = crate::clock::now_ms();
            vec![describe(&step.state, probe, &launches, now)]
        }
        _ => Vec::new(),
    };
    Ok(answer_of(kind, name, step.outcome, resources))
}

fn usage(what: &str) -> Error {
    Error::new(Code::Usage, what.to_string())
}

/// The answer for an outcome of operation `kind` on `name`; `resources` is what a status
/// describes.
fn answer_of(
    kind: &'static str,
    name: &str,
    outcome: Outcome,
    resources: Vec<ResourceView>,
) -> ResourceAnswer {
    let resource = name.to_string();
    let ticket = |ticket, state, position, token, epoch| {
        ResourceAnswer::Ticket(TicketAnswer {
            epoch,
            ok: true,
            op: kind,
            position,
            resource: resource.clone(),
            state,
            ticket,
            token,
        })
    };
    match outcome {
        Outcome::Status => ResourceAnswer::One(OneStatus {
            ok: true,
            op: kind,
            resource: resource.clone(),
            resources,
        }),
        Outcome::Queued {
            ticket: t,
            position,
        } => ticket(t, TicketState::Queued, Some(position), None, None),
        Outcome::Granted {
            ticket: t,
            token,
            epoch,
        } => ticket(t, TicketState::Granted, None, Some(token), Some(epoch)),
        Outcome::Admitted {
            ticket: t,
            token,
            epoch,
        } => ticket(t, TicketState::Admitted, None, Some(token), Some(epoch)),
        Outcome::Released { ticket: t, token } => {
            ticket(t, TicketState::Released, None, Some(token), None)
        }
        Outcome::Cancelled { ticket: t } => ticket(t, TicketState::Cancelled, None, None, None),
        Outcome::Policy { epoch, capacity } => ResourceAnswer::Policy(PolicyAnswer {
            capacity,
            epoch,
            ok: true,
            op: kind,
            resource: resource.clone(),
        }),
    }
}

/// Waits for `ticket` to be granted: inotify wake-ups, a fallback re-check every
/// `Limits.heartbeat_ms`, and at most `wait_ms` in all. On timeout the ticket is cancelled and
/// the answer is RESOURCE_WAIT_TIMEOUT: the timeout authorizes nothing. When `extra` becomes
/// readable and `interrupted()` says so, the ticket is cancelled and `Outcome::Cancelled` returned.
/// Without `extra`, `interrupted()` is polled every tenth of `Limits.heartbeat_ms` instead.
#[allow(clippy::too_many_arguments)]
pub fn wait_for_grant(
    space: &Space,
    name: &str,
    caller: &Caller,
    ticket: &str,
    wait_ms: u64,
    probe: &Probe,
    watch: &Watch,
    extra: Option<BorrowedFd<'_>>,
    interrupted: &dyn Fn() -> bool,
) -> Result<Outcome> {
    let deadline = Instant::now() + Duration::from_millis(wait_ms);
    loop {
        watch.drain()?;
        let step = space.transact(name, caller, Op::Status, probe)?;
        if let Some(h) = step.state.holders.iter().find(|h| h.ticket == ticket) {
            return Ok(Outcome::Granted {
                ticket: ticket.to_string(),
                token: h.token,
                epoch: h.epoch,
            });
        }
        if !step.state.tickets.iter().any(|t| t.id == ticket) {
            return Err(Error::new(
                Code::NotFound,
                format!(
                    "ticket {ticket} of {name:?} was cancelled or reclaimed while waiting; nothing was authorized"
                ),
            ));
        }
        let left = deadline
            .saturating_duration_since(Instant::now())
            .as_millis() as u64;
        if left == 0 {
            return Err(timed_out(
                space,
                name,
                caller,
                ticket,
                wait_ms,
                probe,
                &step.state,
            ));
        }
        let slice = match extra {
            Some(_) => space.limits.heartbeat_ms,
            None => (space.limits.heartbeat_ms / 10).max(1),
        };
        let woke = watch.wait(left.min(slice), extra)?;
        let check = woke == Wake::Extra || (extra.is_none() && woke == Wake::Timeout);
        if check && interrupted() {
            let _ = space.transact(
                name,
                caller,
                Op::Cancel {
                    ticket: ticket.to_string(),
                },
                probe,
            );
            return Ok(Outcome::Cancelled {
                ticket: ticket.to_string(),
            });
        }
    }
}

fn timed_out(
    space: &Space,
    name: &str,
    caller: &Caller,
    ticket: &str,
    wait_ms: u64,
    probe: &Probe,
    state: &ResourceState,
) -> Error {
    // A grant that raced the deadline is given back too: the timeout authorizes nothing.
    let _ = space.transact(
        name,
        caller,
        Op::Cancel {
            ticket: ticket.to_string(),
        },
        probe,
    );
    let now = crate::clock::now_ms();
    let held: Vec<String> = state
        .holders
        .iter()
        .chain(&state.blockers)
        .map(|h| {
            format!(
                "{} by {} (token {}, pid {}, {} ms)",
                h.ticket,
                h.party.display,
                h.token,
                h.party.evidence.pid,
                now.saturating_sub(h.granted_at)
            )
        })
        .collect();
    let controller = state
        .policy
        .controller
        .as_ref()
        .map(|c| format!("; controller {}", c.party.display))
        .unwrap_or_default();
    Error::new(
        Code::ResourceWaitTimeout,
        format!(
            "waited {wait_ms} ms for {name:?}: held {}{controller}; ticket {ticket} was cancelled and nothing was authorized; inspect with peer-res",
            if held.is_empty() {
                "by nobody".to_string()
            } else {
                held.join(", ")
            }
        ),
    )
}

fn life_name(l: Life) -> &'static str {
    match l {
        Life::Alive => "alive",
        Life::Gone => "gone",
        Life::Unknown => "unknown",
    }
}

fn holder_view(h: &Holder, probe: &Probe, now: u64) -> HolderView {
    HolderView {
        admitted: h.admitted,
        age_ms: now.saturating_sub(h.granted_at),
        display: h.party.display.clone(),
        epoch: h.epoch,
        granted_at: h.granted_at,
        life: life_name(probe.life(&h.party.evidence)),
        pid: h.party.evidence.pid,
        principal: h.party.principal.clone(),
        ticket: h.ticket.clone(),
        token: h.token,
    }
}

fn launch_view(l: &Launch, now: u64) -> LaunchView {
    LaunchView {
        age_ms: now.saturating_sub(l.started_at),
        cgroup: l.cgroup.clone(),
        child_pid: l.child.as_ref().map(|c| c.pid),
        command: l.command.clone(),
        display: l.display.clone(),
        epoch: l.epoch,
        gate_pid: l.gate.pid,
        groups: l.groups.clone(),
        pgid: l.pgid,
        started_at: l.started_at,
        ticket: l.ticket.clone(),
        token: l.token,
        tracking: if l.cgroup.is_some() {
            "cgroup"
        } else {
            "subreaper+groups"
        },
    }
}

/// One resource: policy, epoch, capacity, controller, holders, blockers, queue and the
/// launches of `launches` that belong to it.
pub fn describe(s: &ResourceState, probe: &Probe, launches: &[Launch], now: u64) -> ResourceView {
    let hash = name_hash(&s.name);
    let controller = s.policy.controller.as_ref().map(|c| ControllerView {
        display: c.party.display.clone(),
        life: life_name(probe.life(&c.party.evidence)),
        pid: c.party.evidence.pid,
        principal: c.party.principal.clone(),
        since: c.since,
    });
    let queue = s.tickets.iter().enumerate().map(|(i, t)| QueuedView {
        age_ms: now.saturating_sub(t.requested_at),
        display: t.party.display.clone(),
        pid: t.party.evidence.pid,
        position: i + 1,
        principal: t.party.principal.clone(),
        requested_at: t.requested_at,
        ticket: t.id.clone(),
    });
    let launches = launches
        .iter()
        .filter(|l| l.hash == hash)
        .map(|l| launch_view(l, now))
        .collect();
    ResourceView {
        blockers: s
            .blockers
            .iter()
            .map(|h| holder_view(h, probe, now))
            .collect(),
        capacity: s.policy.capacity,
        policy: if controller.is_some() {
            "controlled"
        } else {
            "automatic"
        },
        controller,
        epoch: s.policy.epoch,
        hash,
        holders: s
            .holders
            .iter()
            .map(|h| holder_view(h, probe, now))
            .collect(),
        launches,
        next_token: s.next_token,
        queue: queue.collect(),
        resource: s.name.clone(),
        sequence: s.sequence,
    }
}

/// Per-resource journal positions already delivered, keyed by resource hash.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventCursor {
    pub seen: BTreeMap<String, u64>,
}

/// `resource_update` events after `cursor` for one resource (`Some(name)`) or all of them,
/// oldest first, and the cursor after them. Read-only: no lock, no write. An event whose
/// predecessors fell out of the bounded journal carries `"missed": N`.
pub fn events_since(
    coord: &Path,
    limits: &Limits,
    name: Option<&str>,
    cursor: &EventCursor,
) -> Result<(Vec<ResourceUpdate>, EventCursor)> {
    let space = Space {
        dir: crate::paths::resources_dir(coord),
        limits: limits.clone(),
        allow_control: false,
        wait_timeout_ms: 0,
    };
    // A corrupt file has no journal to follow; the others keep their events flowing.
    let states = match name {
        Some(n) => space.read(&canonical_name(n)?)?.into_iter().collect(),
        None => space.list_checked()?.0,
    };
    let mut out = Vec::new();
    let mut next = cursor.clone();
    for s in states {
        let hash = name_hash(&s.name);
        let seen = cursor.seen.get(&hash).copied().unwrap_or(0);
        out.extend(updates_after(&s, seen));
        next.seen.insert(hash, s.sequence.max(seen));
    }
    Ok((out, next))
}

/// The `resource_update` events of `s`'s journal entries after sequence `seen`, oldest first;
/// an entry whose predecessors fell out of the bounded journal says how many it `missed`.
fn updates_after(s: &ResourceState, seen: u64) -> Vec<ResourceUpdate> {
    let mut expected = seen + 1;
    let mut out = Vec::new();
    for e in s.journal.iter().filter(|e| e.sequence > seen) {
        out.push(ResourceUpdate {
            at: e.at,
            epoch: e.epoch,
            event: "resource_update",
            kind: e.kind.clone(),
            missed: (e.sequence > expected).then(|| e.sequence - expected),
            request: e.request.clone(),
            resource: s.name.clone(),
            sequence: e.sequence,
            token: e.token,
        });
        expected = e.sequence + 1;
    }
    out
}

#[cfg(test)]
#[path = "api_tests.rs"]
mod tests;
