use super::*;
use crate::resource::core::CAP_REQUEST;
use crate::resource::model::{Controller, Event, Ticket};
use serde_json::{Value, json};

fn request(resource: Option<&str>, op: Op, wait_ms: u64) -> Request {
    Request {
        resource: resource.map(str::to_string),
        op,
        wait_ms,
    }
}

fn request_r(resource: &str) -> Request {
    request(
        Some(resource),
        Op::Request {
            capacity: None,
            epoch: None,
        },
        0,
    )
}

/// A principal allowed to request resources, displayed as its id.
fn who(id: &str) -> Principal {
    Principal {
        id: id.into(),
        display: id.into(),
        capabilities: vec![CAP_REQUEST.into()],
    }
}

/// The answer as the JSON object a front end encodes.
fn run(
    home: &Path,
    cfg: &Config,
    who: &Principal,
    req: Request,
    me: &ProcessEvidence,
    cancelled: &dyn Fn() -> bool,
) -> Result<Value> {
    coordinate(home, cfg, who, req, me.clone(), cancelled).map(|a| serde_json::to_value(a).unwrap())
}

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
    let no = &|| false;
    let got = run(&home, &cfg, &who, request_r(" r "), &me, no).unwrap();
    assert_eq!(
        (got["state"].as_str(), got["token"].as_u64()),
        (Some("granted"), Some(1)),
        "{got}"
    );
    let mine = Op::Release {
        target: Target::Mine,
    };
    let bad = run(&home, &cfg, &who, request(None, mine.clone(), 0), &me, no);
    assert_eq!(
        bad.unwrap_err().code,
        Code::Usage,
        "release needs a resource"
    );
    run(&home, &cfg, &who, request(Some("r"), mine, 0), &me, no).unwrap();
    let (events, cursor) = events_since(&home, &cfg.limits, None, &EventCursor::default()).unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["requested", "granted", "released"]);
    assert!(
        events
            .iter()
            .all(|e| e.event == "resource_update" && e.resource == "r" && e.epoch == 1)
    );
    assert_eq!(events[1].token, Some(1));
    assert_eq!(events[1].request.as_deref(), Some("t-1"));
    let (again, _) = events_since(&home, &cfg.limits, Some("r"), &cursor).unwrap();
    assert!(again.is_empty());
    let all = run(&home, &cfg, &who, request(None, Op::Status, 0), &me, no).unwrap();
    assert_eq!(all["resources"][0]["resource"], "r");
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn a_cancelled_wait_gives_its_ticket_back_and_corrupt_files_are_listed_apart() {
    let home = crate::fsutil::TempDir::new("api-c").unwrap();
    let cfg = Config::default();
    let me = Probe::new().own().unwrap();
    let no = &|| false;
    run(&home, &cfg, &who("cli:a"), request_r("r"), &me, no).unwrap();
    let mut wait = request_r("r");
    wait.wait_ms = 600_000;
    let got = run(&home, &cfg, &who("cli:b"), wait, &me, &|| true).unwrap();
    assert_eq!(got["state"], "cancelled", "{got}");
    let one = request(Some("r"), Op::Status, 0);
    let st = run(&home, &cfg, &who("cli:b"), one, &me, no).unwrap();
    assert_eq!(st["resources"][0]["queue"], json!([]), "{st}");
    run(&home, &cfg, &who("cli:a"), request_r("s"), &me, no).unwrap();
    let bad = Space::existing(&home, &cfg).resource_path("s");
    std::fs::write(&bad, b"{not json").unwrap();
    let all = run(
        &home,
        &cfg,
        &who("cli:a"),
        request(None, Op::Status, 0),
        &me,
        no,
    )
    .unwrap();
    assert_eq!(all["resources"].as_array().map(Vec::len), Some(1), "{all}");
    assert_eq!(all["corrupt"][0]["code"], "RECOVERY_REQUIRED", "{all}");
    let (events, _) = events_since(&home, &cfg.limits, None, &EventCursor::default()).unwrap();
    assert!(events.iter().all(|e| e.resource == "r"));
    assert_eq!(std::fs::read(&bad).unwrap(), b"{not json", "left as it is");
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn release_all_gives_back_a_principals_grants_and_tickets_only() {
    let home = crate::fsutil::TempDir::new("api-r").unwrap();
    let cfg = Config::default();
    let me = Probe::new().own().unwrap();
    let ask = |id: &str, r: &str| run(&home, &cfg, &who(id), request_r(r), &me, &|| false).unwrap();
    assert_eq!(ask("peer:run", "a")["state"], "granted");
    assert_eq!(ask("peer:run", "a")["state"], "queued");
    assert_eq!(ask("peer:other", "b")["state"], "granted");
    assert_eq!(ask("peer:run", "b")["state"], "queued");
    let given = release_all(&home, &cfg, &who("peer:run"), me.clone()).unwrap();
    assert_eq!(given, 3);
    let status = request(None, Op::Status, 0);
    let all = run(&home, &cfg, &who("peer:x"), status, &me, &|| false).unwrap();
    let r = &all["resources"];
    assert_eq!(r[0]["holders"], json!([]), "{all}");
    assert_eq!(r[0]["queue"], json!([]), "{all}");
    assert_eq!(r[1]["holders"][0]["principal"], "peer:other", "{all}");
    assert_eq!(r[1]["queue"], json!([]), "{all}");
    let _ = std::fs::remove_dir_all(&home);
}

// The hand-built JSON objects the resource answers were before they were typed: the typed
// answers must encode to exactly these bytes.

fn old_outcome_json(kind: &str, name: &str, outcome: &Outcome) -> Value {
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

fn old_holder_json(h: &Holder, probe: &Probe, now: u64) -> Value {
    json!({
        "ticket": h.ticket, "principal": h.party.principal, "display": h.party.display,
        "token": h.token, "epoch": h.epoch, "admitted": h.admitted, "grantedAt": h.granted_at,
        "ageMs": now.saturating_sub(h.granted_at), "pid": h.party.evidence.pid,
        "life": life_name(probe.life(&h.party.evidence)),
    })
}

fn old_describe(s: &ResourceState, probe: &Probe, launches: &[Launch], now: u64) -> Value {
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
        "holders": s.holders.iter().map(|h| old_holder_json(h, probe, now)).collect::<Vec<_>>(),
        "blockers": s.blockers.iter().map(|h| old_holder_json(h, probe, now)).collect::<Vec<_>>(),
        "queue": queue, "launches": launches, "sequence": s.sequence, "nextToken": s.next_token,
    })
}

fn old_skipped_json(s: &Skipped) -> Value {
    json!({"corrupt": s.path.display().to_string(), "code": s.error.code.name(),
           "message": s.error.message})
}

fn old_events(s: &ResourceState, seen: u64) -> Vec<Value> {
    let mut out = Vec::new();
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
    out
}

/// The typed value encodes to the old object byte for byte, whether a front end encodes it
/// directly or through a JSON value.
fn same_bytes<T: serde::Serialize + std::fmt::Debug>(typed: &T, old: &Value) {
    let direct = serde_json::to_string(typed).unwrap();
    let via_value = serde_json::to_value(typed).unwrap().to_string();
    assert_eq!(direct, old.to_string(), "{typed:?}");
    assert_eq!(via_value, old.to_string(), "{typed:?}");
}

fn party(principal: &str, pid: u32) -> Party {
    Party {
        principal: principal.into(),
        display: format!("{principal} \u{1b}[31m"),
        evidence: ProcessEvidence {
            pid,
            start_time: if pid == 0 { 0 } else { 7 },
            boot_id: "boot".into(),
        },
    }
}

fn holder(ticket: &str, token: u64, admitted: bool) -> Holder {
    Holder {
        ticket: ticket.into(),
        party: party("peer:h", 4_000_000),
        token,
        granted_at: 1_000,
        epoch: 2,
        admitted,
    }
}

/// A resource with every part a description shows: a controller, holders, a blocker, a queue.
fn full_state() -> ResourceState {
    let mut s = ResourceState::new("port:3000", 2);
    s.policy.epoch = 2;
    s.policy.controller = Some(Controller {
        party: party("peer:c", 0),
        since: 900,
    });
    s.holders = vec![holder("t-1", 1, true), holder("t-2", 2, false)];
    s.blockers = vec![holder("t-0", 0, true)];
    s.tickets = (3..5)
        .map(|i| Ticket {
            id: format!("t-{i}"),
            party: party("peer:q", std::process::id()),
            requested_at: 1_500 + i,
            epoch: 2,
        })
        .collect();
    s.next_token = 3;
    s.sequence = 9;
    s
}

fn launch(resource: &str, cgroup: bool, child: bool) -> Launch {
    Launch {
        resource: resource.into(),
        hash: name_hash(resource),
        ticket: "t-1".into(),
        token: 1,
        epoch: 2,
        principal: "peer:h".into(),
        display: "h".into(),
        command: "make".into(),
        gate: party("peer:h", 4_000_001).evidence,
        child: child.then(|| party("peer:h", 4_000_002).evidence),
        pgid: child.then_some(4_000_002),
        groups: if cgroup { Vec::new() } else { vec![5, 6] },
        cgroup: cgroup.then(|| "/sys/fs/cgroup/peer/l-1".into()),
        started_at: 1_200,
    }
}

#[test]
fn descriptions_encode_as_the_objects_they_always_were() {
    let probe = Probe::new();
    let launches = [
        launch("port:3000", true, true),
        launch("port:3000", false, false),
        launch("port:4000", false, true),
    ];
    let full = full_state();
    same_bytes(
        &describe(&full, &probe, &launches, 2_000),
        &old_describe(&full, &probe, &launches, 2_000),
    );
    let bare = ResourceState::new("r", 1);
    same_bytes(
        &describe(&bare, &probe, &[], 0),
        &old_describe(&bare, &probe, &[], 0),
    );
}

#[test]
fn answers_encode_as_the_objects_they_always_were() {
    let t = || "t-7".to_string();
    let outcomes = [
        (
            "request",
            Outcome::Queued {
                ticket: t(),
                position: 3,
            },
        ),
        (
            "request",
            Outcome::Granted {
                ticket: t(),
                token: 4,
                epoch: 2,
            },
        ),
        (
            "grant",
            Outcome::Admitted {
                ticket: t(),
                token: 4,
                epoch: 2,
            },
        ),
        (
            "release",
            Outcome::Released {
                ticket: t(),
                token: 4,
            },
        ),
        ("cancel_request", Outcome::Cancelled { ticket: t() }),
        (
            "set_controller",
            Outcome::Policy {
                epoch: 3,
                capacity: 2,
            },
        ),
    ];
    for (kind, outcome) in outcomes {
        let old = old_outcome_json(kind, "port:3000", &outcome);
        same_bytes(&answer_of(kind, "port:3000", outcome, Vec::new()), &old);
    }
    let probe = Probe::new();
    let full = full_state();
    let mut old = old_outcome_json("status", "port:3000", &Outcome::Status);
    old["resources"] = json!([old_describe(&full, &probe, &[], 5)]);
    let view = vec![describe(&full, &probe, &[], 5)];
    same_bytes(
        &answer_of("status", "port:3000", Outcome::Status, view),
        &old,
    );
}

#[test]
fn a_status_of_everything_encodes_as_it_always_did() {
    let probe = Probe::new();
    let states = [full_state(), ResourceState::new("r", 1)];
    let resources: Vec<Value> = states
        .iter()
        .map(|s| old_describe(s, &probe, &[], 5))
        .collect();
    let skipped = [Skipped {
        path: "/tmp/x/peer-resources/ab.json".into(),
        error: Error::new(Code::RecoveryRequired, "bad checksum"),
    }];
    let typed = |corrupt: &[Skipped]| {
        ResourceAnswer::All(AllStatus {
            corrupt: corrupt.iter().map(corrupt_file).collect(),
            ok: true,
            op: "status",
            resources: states.iter().map(|s| describe(s, &probe, &[], 5)).collect(),
        })
    };
    let old = json!({"ok": true, "op": "status", "resources": resources});
    same_bytes(&typed(&[]), &old);
    let mut old = old;
    old["corrupt"] = skipped.iter().map(old_skipped_json).collect();
    same_bytes(&typed(&skipped), &old);
    same_bytes(&corrupt_file(&skipped[0]), &old_skipped_json(&skipped[0]));
    let none = ResourceAnswer::All(AllStatus {
        corrupt: Vec::new(),
        ok: true,
        op: "status",
        resources: Vec::new(),
    });
    same_bytes(&none, &json!({"ok": true, "op": "status", "resources": []}));
}

#[test]
fn resource_updates_encode_as_they_always_did() {
    let mut s = ResourceState::new("port:3000", 1);
    let event = |sequence, request: Option<&str>, token| Event {
        sequence,
        kind: "granted".into(),
        request: request.map(str::to_string),
        epoch: 1,
        token,
        at: 100 + sequence,
        by: Some("operator".into()),
    };
    // Entries 1 and 2 fell out of the bounded journal, and 5 was never written.
    s.journal = vec![
        event(3, Some("t-1"), Some(1)),
        event(4, None, None),
        event(6, Some("t-2"), None),
    ];
    s.sequence = 6;
    for seen in [0, 3, 4, 6] {
        let typed = updates_after(&s, seen);
        let old = old_events(&s, seen);
        assert_eq!(typed.len(), old.len());
        for (t, o) in typed.iter().zip(&old) {
            same_bytes(t, o);
        }
    }
    assert_eq!(updates_after(&s, 0)[0].missed, Some(2));
}
