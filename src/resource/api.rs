//! The library surface other modules call: `coordinate` (the `coordinate_resource` tool and
//! `peer res`), waiting for a grant, the JSON description of a resource, and `events_since`
//! for `peer host --json`.

use super::core::{Caller, Op, Outcome, Step, Target};
use super::evidence::Probe;
use super::model::{
    Holder, Life, Party, ProcessEvidence, ResourceState, canonical_name, name_hash,
};
use super::notify::{Wake, Watch};
use super::principal::Principal;
use super::store::{Launch, Skipped, Space};
use crate::config::{Config, Limits};
use crate::error::{Code, Error, Result};
use serde_json::{Value, json};
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

/// Runs one `coordinate_resource` operation, a discriminated object:
/// `{"op":"status","resource"?}`, `{"op":"request","resource","capacity"?,"waitMs"?,"epoch"?}`,
/// `{"op":"grant","resource","ticket","epoch"?}`, `{"op":"release","resource","ticket"?|"token"?}`,
/// `{"op":"cancel_request","resource","ticket"}`,
/// `{"op":"set_controller","resource","capacity"?,"force"?,"automatic"?}`.
/// `evidence` is the process whose life stands for the request (the session root).
pub fn coordinate(
    home: &Path,
    cfg: &Config,
    principal: &Principal,
    op: Value,
    evidence: ProcessEvidence,
) -> Result<Value> {
    coordinate_cancellable(home, cfg, principal, op, evidence, &|| false)
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

/// [`coordinate`] whose wait for a grant ends early, with the ticket cancelled and
/// `"state":"cancelled"`, once `cancelled()` says so (checked every tenth of
/// `Limits.heartbeat_ms`): a tool call the client abandoned must not keep a queue slot.
pub fn coordinate_cancellable(
    home: &Path,
    cfg: &Config,
    principal: &Principal,
    op: Value,
    evidence: ProcessEvidence,
    cancelled: &dyn Fn() -> bool,
) -> Result<Value> {
    let request = parse_request(&op)?;
    coordinate_request(home, cfg, principal, request, evidence, cancelled)
}

/// Runs one typed request (the JSON form is parsed by [`coordinate`]; the model tool maps
/// its arguments straight onto a [`Request`]).
pub fn coordinate_request(
    home: &Path,
    cfg: &Config,
    principal: &Principal,
    request: Request,
    evidence: ProcessEvidence,
    cancelled: &dyn Fn() -> bool,
) -> Result<Value> {
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
        let (states, mut skipped) = space.list_checked()?;
        if let Err(error) = space.read_ledger() {
            skipped.push(Skipped {
                path: space.ledger_path(),
                error,
            });
        }
        let all: Vec<Value> = states
            .iter()
            .map(|s| describe(s, &probe, &[], crate::clock::now_ms()))
            .collect();
        let mut out = json!({"ok": true, "op": "status", "resources": all});
        if !skipped.is_empty() {
            out["corrupt"] = skipped.iter().map(skipped_json).collect();
        }
        return Ok(out);
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

/// The JSON form of a request: `{"op", "resource", …}` with the fields of its operation.
pub(crate) fn parse_request(v: &Value) -> Result<Request> {
    let kind = str_field(v, "op")?.ok_or_else(|| usage("op is required"))?;
    let resource = str_field(v, "resource")?.map(canonical_name).transpose()?;
    if resource.is_none() {
        if kind == "status" {
            return Ok(Request {
                resource: None,
                op: Op::Status,
                wait_ms: 0,
            });
        }
        return Err(usage(&format!("{kind} needs a resource")));
    }
    let (op, wait_ms) = parse_op(kind, v)?;
    Ok(Request {
        resource,
        op,
        wait_ms,
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

/// A resource file that could not be read, as JSON: `{corrupt, code, message}`.
pub fn skipped_json(s: &Skipped) -> Value {
    json!({"corrupt": s.path.display().to_string(), "code": s.error.code.name(),
           "message": s.error.message})
}

/// A parsed operation and the `waitMs` of a request (0: do not wait).
type Parsed = (Op, u64);

#[allow(clippy::too_many_arguments)]
fn finish(
    space: &Space,
    name: &str,
    caller: &Caller,
    probe: &Probe,
    kind: &str,
    step: Step,
    wait_ms: u64,
    cancelled: &dyn Fn() -> bool,
) -> Result<Value> {
    if let (Outcome::Queued { ticket, .. }, true) = (&step.outcome, wait_ms > 0) {
        let watch = Watch::new(&space.dir, &name_hash(name))?;
        let wait = wait_ms.min(space.wait_timeout_ms);
        let got = wait_for_grant(
            space, name, caller, ticket, wait, probe, &watch, None, cancelled,
        )?;
        return Ok(outcome_json(kind, name, &got));
    }
    let mut out = outcome_json(kind, name, &step.outcome);
    if matches!(step.outcome, Outcome::Status) {
        // A corrupt ledger is the same RECOVERY_REQUIRED here as in `peer-res`.
        let launches = space.read_ledger()?.launches;
        out["resources"] = json!([describe(
            &step.state,
            probe,
            &launches,
            crate::clock::now_ms()
        )]);
    }
    Ok(out)
}

fn parse_op(kind: &str, v: &Value) -> Result<Parsed> {
    let capacity = u64_field(v, "capacity")
        .map(|c| u32::try_from(c).map_err(|_| usage("capacity is too large")))
        .transpose()?;
    let epoch = u64_field(v, "epoch");
    let ticket = str_field(v, "ticket")?.map(str::to_string);
    let need_ticket = || {
        ticket
            .clone()
            .ok_or_else(|| usage(&format!("{kind} needs a ticket")))
    };
    let op = match kind {
        "status" => Op::Status,
        "request" => Op::Request { capacity, epoch },
        "grant" => Op::Grant {
            ticket: need_ticket()?,
            epoch,
        },
        "release" => {
            let target = match (ticket.clone(), u64_field(v, "token")) {
                (Some(t), None) => Target::Ticket(t),
                (None, Some(n)) => Target::Token(n),
                (None, None) => Target::Mine,
                (Some(_), Some(_)) => {
                    return Err(usage("release names a ticket or a token, not both"));
                }
            };
            // Only the command line sets this (`peer res release --force`); the model tool's
            // strict arguments have no such field.
            if v.get("override").and_then(Value::as_bool) == Some(true) {
                Op::Override { target }
            } else {
                Op::Release { target }
            }
        }
        "cancel_request" => Op::Cancel {
            ticket: need_ticket()?,
        },
        "set_controller" => Op::SetController {
            capacity,
            force: v.get("force").and_then(Value::as_bool).unwrap_or(false),
            automatic: v.get("automatic").and_then(Value::as_bool).unwrap_or(false),
            ledger: Vec::new(),
        },
        other => {
            return Err(Error::new(
                Code::InvalidRequest,
                format!(
                    "unknown resource op {:?}; use status, request, grant, release, cancel_request or set_controller",
                    crate::sanitize::line(other, 40)
                ),
            ));
        }
    };
    Ok((op, u64_field(v, "waitMs").unwrap_or(0)))
}

fn usage(what: &str) -> Error {
    Error::new(Code::Usage, what.to_string())
}

fn str_field<'a>(v: &'a Value, key: &str) -> Result<Option<&'a str>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(usage(&format!("{key} must be a string"))),
    }
}

fn u64_field(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

/// The JSON answer for an outcome.
pub fn outcome_json(kind: &str, name: &str, outcome: &Outcome) -> Value {
    let mut v = json!({"ok": true, "op": kind, "resource": name});
    let add = |v: &mut Value, pairs: Value| {
        if let (Some(o), Value::Object(p)) = (v.as_object_mut(), pairs) {
            o.extend(p);
        }
    };
    match outcome {
        Outcome::Status => {}
        Outcome::Queued { ticket, position } => add(
            &mut v,
            json!({"ticket": ticket, "state": "queued", "position": position}),
        ),
        Outcome::Granted {
            ticket,
            token,
            epoch,
        } => add(
            &mut v,
            json!({"ticket": ticket, "state": "granted", "token": token, "epoch": epoch}),
        ),
        Outcome::Admitted {
            ticket,
            token,
            epoch,
        } => add(
            &mut v,
            json!({"ticket": ticket, "state": "admitted", "token": token, "epoch": epoch}),
        ),
        Outcome::Released { ticket, token } => add(
            &mut v,
            json!({"ticket": ticket, "state": "released", "token": token}),
        ),
        Outcome::Cancelled { ticket } => {
            add(&mut v, json!({"ticket": ticket, "state": "cancelled"}))
        }
        Outcome::Policy { epoch, capacity } => {
            add(&mut v, json!({"epoch": epoch, "capacity": capacity}))
        }
    }
    v
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

fn holder_json(h: &Holder, probe: &Probe, now: u64) -> Value {
    json!({
        "ticket": h.ticket, "principal": h.party.principal, "display": h.party.display,
        "token": h.token, "epoch": h.epoch, "admitted": h.admitted, "grantedAt": h.granted_at,
        "ageMs": now.saturating_sub(h.granted_at), "pid": h.party.evidence.pid,
        "life": life_name(probe.life(&h.party.evidence)),
    })
}

/// One resource as JSON: policy, epoch, capacity, controller, holders, blockers, queue and
/// the launches of `launches` that belong to it. Strings are the stored (validated) ones;
/// human renderers sanitize again.
pub fn describe(s: &ResourceState, probe: &Probe, launches: &[Launch], now: u64) -> Value {
    let hash = name_hash(&s.name);
    let controller = s.policy.controller.as_ref().map(|c| {
        json!({"principal": c.party.principal, "display": c.party.display, "pid": c.party.evidence.pid,
               "since": c.since, "life": life_name(probe.life(&c.party.evidence))})
    });
    let queue: Vec<Value> = s
        .tickets
        .iter()
        .enumerate()
        .map(|(i, t)| {
            json!({"ticket": t.id, "principal": t.party.principal, "display": t.party.display, "position": i + 1,
                   "requestedAt": t.requested_at, "ageMs": now.saturating_sub(t.requested_at), "pid": t.party.evidence.pid})
        })
        .collect();
    let launches: Vec<Value> = launches
        .iter()
        .filter(|l| l.hash == hash)
        .map(|l| {
            json!({"ticket": l.ticket, "token": l.token, "epoch": l.epoch, "command": l.command, "display": l.display,
                   "gatePid": l.gate.pid, "childPid": l.child.as_ref().map(|c| c.pid), "pgid": l.pgid,
                   "groups": l.groups, "cgroup": l.cgroup,
                   "tracking": if l.cgroup.is_some() { "cgroup" } else { "subreaper+groups" },
                   "startedAt": l.started_at, "ageMs": now.saturating_sub(l.started_at)})
        })
        .collect();
    json!({
        "resource": s.name, "hash": hash, "epoch": s.policy.epoch, "capacity": s.policy.capacity,
        "policy": if s.policy.controller.is_some() { "controlled" } else { "automatic" },
        "controller": controller,
        "holders": s.holders.iter().map(|h| holder_json(h, probe, now)).collect::<Vec<_>>(),
        "blockers": s.blockers.iter().map(|h| holder_json(h, probe, now)).collect::<Vec<_>>(),
        "queue": queue, "launches": launches, "sequence": s.sequence, "nextToken": s.next_token,
    })
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
) -> Result<(Vec<Value>, EventCursor)> {
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
        let mut expected = seen + 1;
        for e in s.journal.iter().filter(|e| e.sequence > seen) {
            let mut v = json!({"event": "resource_update", "resource": s.name, "request": e.request,
                               "epoch": e.epoch, "sequence": e.sequence, "kind": e.kind, "at": e.at});
            if let Some(t) = e.token {
                v["token"] = json!(t);
            }
            if e.sequence > expected {
                v["missed"] = json!(e.sequence - expected);
            }
            expected = e.sequence + 1;
            out.push(v);
        }
        next.seen.insert(hash, s.sequence.max(seen));
    }
    Ok((out, next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::core::CAP_REQUEST;

    #[test]
    fn coordinate_and_events_since_follow_the_journal() {
        let home = crate::fsutil::TempDir::new("api").unwrap();
        let cfg = Config::default();
        let who = Principal {
            id: "cli:a".into(),
            display: "a".into(),
            capabilities: vec![CAP_REQUEST.into()],
        };
        let me = Probe::new().own().unwrap();
        let got = coordinate(
            &home,
            &cfg,
            &who,
            json!({"op": "request", "resource": " r "}),
            me.clone(),
        )
        .unwrap();
        assert_eq!(
            (got["state"].as_str(), got["token"].as_u64()),
            (Some("granted"), Some(1)),
            "{got}"
        );
        let bad = coordinate(
            &home,
            &cfg,
            &who,
            json!({"op": "grab", "resource": "r"}),
            me.clone(),
        )
        .unwrap_err();
        assert_eq!(bad.code, Code::InvalidRequest);
        let bad = coordinate(
            &home,
            &cfg,
            &who,
            json!({"op": "release", "resource": "r", "ticket": "t-1", "token": 1}),
            me.clone(),
        );
        assert_eq!(bad.unwrap_err().code, Code::Usage);
        coordinate(
            &home,
            &cfg,
            &who,
            json!({"op": "release", "resource": "r"}),
            me.clone(),
        )
        .unwrap();
        let (events, cursor) =
            events_since(&home, &cfg.limits, None, &EventCursor::default()).unwrap();
        let kinds: Vec<_> = events
            .iter()
            .map(|e| e["kind"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(kinds, ["requested", "granted", "released"]);
        assert!(
            events.iter().all(|e| e["event"] == "resource_update"
                && e["resource"] == "r"
                && e["epoch"] == 1)
        );
        assert_eq!(events[1]["token"], 1);
        assert_eq!(events[1]["request"], "t-1");
        let (again, _) = events_since(&home, &cfg.limits, Some("r"), &cursor).unwrap();
        assert!(again.is_empty());
        let all = coordinate(&home, &cfg, &who, json!({"op": "status"}), me).unwrap();
        assert_eq!(all["resources"][0]["resource"], "r");
        let _ = std::fs::remove_dir_all(&home);
    }

    #[test]
    fn a_cancelled_wait_gives_its_ticket_back_and_corrupt_files_are_listed_apart() {
        let home = crate::fsutil::TempDir::new("api-c").unwrap();
        let cfg = Config::default();
        let who = |id: &str| Principal {
            id: id.into(),
            display: id.into(),
            capabilities: vec![CAP_REQUEST.into()],
        };
        let me = Probe::new().own().unwrap();
        let req = json!({"op": "request", "resource": "r"});
        coordinate(&home, &cfg, &who("cli:a"), req.clone(), me.clone()).unwrap();
        let mut wait = req.clone();
        wait["waitMs"] = json!(600_000);
        let got =
            coordinate_cancellable(&home, &cfg, &who("cli:b"), wait, me.clone(), &|| true).unwrap();
        assert_eq!(got["state"], "cancelled", "{got}");
        let st = coordinate(
            &home,
            &cfg,
            &who("cli:b"),
            json!({"op": "status", "resource": "r"}),
            me.clone(),
        )
        .unwrap();
        assert_eq!(st["resources"][0]["queue"], json!([]), "{st}");
        coordinate(
            &home,
            &cfg,
            &who("cli:a"),
            json!({"op": "request", "resource": "s"}),
            me.clone(),
        )
        .unwrap();
        let bad = Space::existing(&home, &cfg).resource_path("s");
        std::fs::write(&bad, b"{not json").unwrap();
        let all = coordinate(&home, &cfg, &who("cli:a"), json!({"op": "status"}), me).unwrap();
        assert_eq!(all["resources"].as_array().map(Vec::len), Some(1), "{all}");
        assert_eq!(all["corrupt"][0]["code"], "RECOVERY_REQUIRED", "{all}");
        let (events, _) = events_since(&home, &cfg.limits, None, &EventCursor::default()).unwrap();
        assert!(events.iter().all(|e| e["resource"] == "r"));
        assert_eq!(std::fs::read(&bad).unwrap(), b"{not json", "left as it is");
        let _ = std::fs::remove_dir_all(&home);
    }

    #[test]
    fn release_all_gives_back_a_principals_grants_and_tickets_only() {
        let home = crate::fsutil::TempDir::new("api-r").unwrap();
        let cfg = Config::default();
        let who = |id: &str| Principal {
            id: id.into(),
            display: id.into(),
            capabilities: vec![CAP_REQUEST.into()],
        };
        let me = Probe::new().own().unwrap();
        let ask = |id: &str, r: &str| {
            coordinate(
                &home,
                &cfg,
                &who(id),
                json!({"op": "request", "resource": r}),
                me.clone(),
            )
            .unwrap()
        };
        assert_eq!(ask("peer:run", "a")["state"], "granted");
        assert_eq!(ask("peer:run", "a")["state"], "queued");
        assert_eq!(ask("peer:other", "b")["state"], "granted");
        assert_eq!(ask("peer:run", "b")["state"], "queued");
        let given = release_all(&home, &cfg, &who("peer:run"), me.clone()).unwrap();
        assert_eq!(given, 3);
        let all = coordinate(&home, &cfg, &who("peer:x"), json!({"op": "status"}), me).unwrap();
        let r = &all["resources"];
        assert_eq!(r[0]["holders"], json!([]), "{all}");
        assert_eq!(r[0]["queue"], json!([]), "{all}");
        assert_eq!(r[1]["holders"][0]["principal"], "peer:other", "{all}");
        assert_eq!(r[1]["queue"], json!([]), "{all}");
        let _ = std::fs::remove_dir_all(&home);
    }
}
