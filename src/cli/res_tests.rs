use super::*;
use crate::toolspec::resource_answer::{
    AllStatus, ControllerView, CorruptFile, HolderView, LaunchView, OneStatus, PolicyAnswer,
    QueuedView,
};

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

fn req(resource: Option<&str>, op: Op, wait_ms: u64) -> Request {
    Request {
        resource: resource.map(str::to_string),
        op,
        wait_ms,
    }
}

/// Each subcommand's words and options become the typed request the resource layer runs:
/// names canonical, a positional ticket over `--ticket`, `--force` on release the override.
#[test]
fn subcommands_build_typed_requests() {
    let t = |s: &str| s.to_string();
    let cases = [
        (
            words(&["status"]),
            ResOptions::default(),
            req(None, Op::Status, 0),
        ),
        (
            words(&["status", " port:1 "]),
            ResOptions::default(),
            req(Some("port:1"), Op::Status, 0),
        ),
        (
            words(&["request", "port:1"]),
            ResOptions {
                capacity: Some(2),
                wait_ms: 5_000,
                epoch: Some(3),
                ..ResOptions::default()
            },
            req(
                Some("port:1"),
                Op::Request {
                    capacity: Some(2),
                    epoch: Some(3),
                },
                5_000,
            ),
        ),
        (
            words(&["grant", "port:1", "t-1"]),
            ResOptions {
                ticket: Some(t("t-9")),
                ..ResOptions::default()
            },
            req(
                Some("port:1"),
                Op::Grant {
                    ticket: t("t-1"),
                    epoch: None,
                },
                0,
            ),
        ),
        (
            words(&["release", "port:1"]),
            ResOptions::default(),
            req(
                Some("port:1"),
                Op::Release {
                    target: Target::Mine,
                },
                0,
            ),
        ),
        (
            words(&["release", "port:1"]),
            ResOptions {
                token: Some(7),
                force: true,
                ..ResOptions::default()
            },
            req(
                Some("port:1"),
                Op::Override {
                    target: Target::Token(7),
                },
                0,
            ),
        ),
        (
            words(&["release", "port:1"]),
            ResOptions {
                ticket: Some(t("t-2")),
                ..ResOptions::default()
            },
            req(
                Some("port:1"),
                Op::Release {
                    target: Target::Ticket(t("t-2")),
                },
                0,
            ),
        ),
        (
            words(&["cancel", "port:1", "t-2"]),
            ResOptions::default(),
            req(Some("port:1"), Op::Cancel { ticket: t("t-2") }, 0),
        ),
        (
            words(&["set-controller", "port:1"]),
            ResOptions {
                force: true,
                automatic: true,
                capacity: Some(4),
                ..ResOptions::default()
            },
            req(
                Some("port:1"),
                Op::SetController {
                    capacity: Some(4),
                    force: true,
                    automatic: true,
                    ledger: Vec::new(),
                },
                0,
            ),
        ),
    ];
    for (w, o, want) in cases {
        let what = format!("{w:?} {o:?}");
        assert_eq!(build_request(&w, o).unwrap(), want, "{what}");
    }
}

#[test]
fn bad_subcommands_are_usage_errors() {
    let both = ResOptions {
        ticket: Some("t-1".into()),
        token: Some(1),
        ..ResOptions::default()
    };
    let err = build_request(&words(&["release", "r"]), both).unwrap_err();
    assert_eq!(err.code, Code::Usage);
    assert!(err.message.contains("not both"), "{err:?}");
    for w in [
        &[][..],
        &["grab", "r"][..],
        &["request"][..],
        &["grant", "r"][..],
        &["status", "a", "b"][..],
        &["request", "  "][..],
    ] {
        let err = build_request(&words(w), ResOptions::default()).unwrap_err();
        assert_eq!(err.code, Code::Usage, "{w:?}");
    }
}

// The human renderers as they were, reading the JSON object: the typed renderers must print
// exactly the same text.

fn s(v: &Value, key: &str) -> String {
    match v.get(key) {
        Some(Value::String(x)) => line(x, 120),
        Some(Value::Null) | None => "-".into(),
        Some(other) => line(&other.to_string(), 120),
    }
}

fn old_human_outcome(out: &Value) -> String {
    if let Some(all) = out.get("resources").and_then(Value::as_array) {
        if all.is_empty() {
            return "no resources\n".into();
        }
        return all.iter().map(old_human_resource).collect();
    }
    let (r, t) = (s(out, "resource"), s(out, "ticket"));
    match out.get("state").and_then(Value::as_str) {
        Some("granted") => format!(
            "{t} granted on {r} (token {}, epoch {})\n",
            s(out, "token"),
            s(out, "epoch")
        ),
        Some("queued") => format!("{t} queued on {r} at position {}\n", s(out, "position")),
        Some("released") => format!("{t} released on {r} (token {})\n", s(out, "token")),
        Some("cancelled") => format!("{t} cancelled on {r}\n"),
        _ => format!(
            "{r}: policy epoch {}, capacity {}\n",
            s(out, "epoch"),
            s(out, "capacity")
        ),
    }
}

fn old_age(v: &Value) -> String {
    let ms = v.get("ageMs").and_then(Value::as_u64).unwrap_or(0);
    if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60)
    }
}

/// The human table of one `describe` object.
fn old_human_resource(r: &Value) -> String {
    let mut o = format!(
        "{}  {}  epoch {}  capacity {}  sequence {}\n",
        s(r, "resource"),
        s(r, "policy"),
        s(r, "epoch"),
        s(r, "capacity"),
        s(r, "sequence")
    );
    match r.get("controller").filter(|c| !c.is_null()) {
        Some(c) => o.push_str(&format!(
            "  controller  {} ({})  pid {}  {}\n",
            s(c, "display"),
            s(c, "principal"),
            s(c, "pid"),
            s(c, "life")
        )),
        None => o.push_str("  controller  none\n"),
    }
    for (title, key) in [("holder", "holders"), ("blocker", "blockers")] {
        for h in r.get(key).and_then(Value::as_array).into_iter().flatten() {
            let used = if h.get("admitted").and_then(Value::as_bool) == Some(true) {
                "running"
            } else {
                "granted"
            };
            o.push_str(&format!(
                "  {title:<10}  {}  token {}  {}  pid {}  {}  {used}  epoch {}  {}\n",
                s(h, "ticket"),
                s(h, "token"),
                s(h, "display"),
                s(h, "pid"),
                s(h, "life"),
                s(h, "epoch"),
                old_age(h)
            ));
        }
    }
    for q in r
        .get("queue")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        o.push_str(&format!(
            "  queue {:<4}  {}  {}  pid {}  waiting {}\n",
            s(q, "position"),
            s(q, "ticket"),
            s(q, "display"),
            s(q, "pid"),
            old_age(q)
        ));
    }
    for l in r
        .get("launches")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        o.push_str(&format!(
            "  launch      {}  token {}  {}  gate {}  child {}  {}\n",
            s(l, "ticket"),
            s(l, "token"),
            s(l, "command"),
            s(l, "gatePid"),
            s(l, "childPid"),
            old_age(l)
        ));
    }
    o
}

fn views() -> Vec<ResourceView> {
    let long = "x".repeat(300);
    let holder = |ticket: &str, admitted, age_ms| HolderView {
        admitted,
        age_ms,
        display: "h \u{1b}[31mred".into(),
        epoch: 2,
        granted_at: 5,
        life: "alive",
        pid: 42,
        principal: "peer:h".into(),
        ticket: ticket.into(),
        token: 3,
    };
    let launch = |child: Option<u32>, cgroup: bool| LaunchView {
        age_ms: 3_725_000,
        cgroup: cgroup.then(|| "/sys/fs/cgroup/l".into()),
        child_pid: child,
        command: long.clone(),
        display: "h".into(),
        epoch: 2,
        gate_pid: 7,
        groups: vec![8],
        pgid: child.map(|c| c as i32),
        started_at: 1,
        ticket: "t-1".into(),
        token: 3,
        tracking: if cgroup { "cgroup" } else { "subreaper+groups" },
    };
    let full = ResourceView {
        blockers: vec![holder("t-0", true, 61_500)],
        capacity: 2,
        controller: Some(ControllerView {
            display: long.clone(),
            life: "gone",
            pid: 9,
            principal: "peer:c\n".into(),
            since: 1,
        }),
        epoch: 2,
        hash: "ab".into(),
        holders: vec![holder("t-1", true, 1_234), holder("t-2", false, 0)],
        launches: vec![launch(Some(11), true), launch(None, false)],
        next_token: 4,
        policy: "controlled",
        queue: (1..=11)
            .map(|position| QueuedView {
                age_ms: 59_999,
                display: "q".into(),
                pid: 12,
                position,
                principal: "peer:q".into(),
                requested_at: 2,
                ticket: format!("t-{position}"),
            })
            .collect(),
        resource: "port:3000".into(),
        sequence: 17,
    };
    let bare = ResourceView {
        blockers: Vec::new(),
        capacity: 1,
        controller: None,
        epoch: 1,
        hash: "cd".into(),
        holders: Vec::new(),
        launches: Vec::new(),
        next_token: 1,
        policy: "automatic",
        queue: Vec::new(),
        resource: "r".into(),
        sequence: 0,
    };
    vec![full, bare]
}

#[test]
fn human_output_is_the_text_it_always_was() {
    for view in views() {
        let v = encode(&view).unwrap();
        assert_eq!(human_resource(&view), old_human_resource(&v));
    }
    let ticket = |state, position, token, epoch| {
        ResourceAnswer::Ticket(TicketAnswer {
            epoch,
            ok: true,
            op: "request",
            position,
            resource: "port:\u{7}1".into(),
            state,
            ticket: "t-1".into(),
            token,
        })
    };
    let answers = [
        ticket(TicketState::Queued, Some(12), None, None),
        ticket(TicketState::Granted, None, Some(3), Some(2)),
        ticket(TicketState::Admitted, None, Some(3), Some(2)),
        ticket(TicketState::Released, None, Some(3), None),
        ticket(TicketState::Cancelled, None, None, None),
        ResourceAnswer::Policy(PolicyAnswer {
            capacity: 3,
            epoch: 4,
            ok: true,
            op: "set_controller",
            resource: "r".into(),
        }),
        ResourceAnswer::One(OneStatus {
            ok: true,
            op: "status",
            resource: "port:3000".into(),
            resources: views()[..1].to_vec(),
        }),
        ResourceAnswer::All(AllStatus {
            corrupt: Vec::new(),
            ok: true,
            op: "status",
            resources: views(),
        }),
        ResourceAnswer::All(AllStatus {
            corrupt: vec![CorruptFile {
                code: "RECOVERY_REQUIRED",
                corrupt: "/x".into(),
                message: "bad".into(),
            }],
            ok: true,
            op: "status",
            resources: Vec::new(),
        }),
    ];
    for a in answers {
        assert_eq!(
            human_outcome(&a),
            old_human_outcome(&encode(&a).unwrap()),
            "{a:?}"
        );
    }
}
