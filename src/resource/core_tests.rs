//! Unit tests of every coordinator rule, driven through `apply` with a scripted liveness table.

use super::*;
use std::collections::HashMap;

fn ev(pid: u32) -> ProcessEvidence {
    ProcessEvidence {
        pid,
        start_time: 100 + u64::from(pid),
        boot_id: "boot".into(),
    }
}

fn caller(id: &str, pid: u32, caps: &[&str]) -> Caller {
    Caller {
        party: Party {
            principal: id.into(),
            display: id.into(),
            evidence: ev(pid),
        },
        capabilities: caps.iter().map(|c| c.to_string()).collect(),
    }
}

fn user(id: &str, pid: u32) -> Caller {
    caller(id, pid, &[CAP_REQUEST])
}

fn boss(id: &str, pid: u32) -> Caller {
    caller(id, pid, &[CAP_REQUEST, CAP_CONTROL])
}

/// A world: the state, a pid → life table (absent = alive) and the control setting.
struct World {
    state: Option<ResourceState>,
    life: HashMap<u32, Life>,
    allow_control: bool,
    now: u64,
    tickets_max: usize,
}

impl World {
    fn new() -> World {
        World {
            state: None,
            life: HashMap::new(),
            allow_control: true,
            now: 1000,
            tickets_max: 8,
        }
    }

    fn try_op(&mut self, who: &Caller, op: Op) -> Result<Step> {
        self.now += 1;
        let table = self.life.clone();
        let life =
            move |_: &str, e: &ProcessEvidence| table.get(&e.pid).copied().unwrap_or(Life::Alive);
        let env = Env {
            now: self.now,
            history: 16,
            tickets_max: self.tickets_max,
            allow_control: self.allow_control,
            life: &life,
            token_floor: 0,
            epoch_floor: 0,
        };
        let step = apply(self.state.clone(), "port:3000", who, &op, &env)?;
        step.state.validate().unwrap();
        self.state = Some(step.state.clone());
        Ok(step)
    }

    fn op(&mut self, who: &Caller, op: Op) -> Outcome {
        self.try_op(who, op).unwrap().outcome
    }

    fn err(&mut self, who: &Caller, op: Op) -> Code {
        let before = self.state.clone();
        let code = self.try_op(who, op).unwrap_err().code;
        assert_eq!(
            self.state, before,
            "a refused operation must not change the state"
        );
        code
    }

    fn s(&self) -> &ResourceState {
        self.state.as_ref().unwrap()
    }

    fn holders(&self) -> Vec<&str> {
        self.s().holders.iter().map(|h| h.ticket.as_str()).collect()
    }
}

fn req() -> Op {
    Op::Request {
        capacity: None,
        epoch: None,
    }
}

fn release(t: &str) -> Op {
    Op::Release {
        target: Target::Ticket(t.into()),
    }
}

#[test]
fn first_request_is_granted_with_token_one_and_later_ones_queue_in_order() {
    let mut w = World::new();
    assert_eq!(
        w.op(&user("a", 1), req()),
        Outcome::Granted {
            ticket: "t-1".into(),
            token: 1,
            epoch: 1
        }
    );
    assert_eq!(
        w.op(&user("b", 2), req()),
        Outcome::Queued {
            ticket: "t-2".into(),
            position: 1
        }
    );
    assert_eq!(
        w.op(&user("c", 3), req()),
        Outcome::Queued {
            ticket: "t-3".into(),
            position: 2
        }
    );
    assert_eq!(
        w.op(&user("a", 1), release("t-1")),
        Outcome::Released {
            ticket: "t-1".into(),
            token: 1
        }
    );
    assert_eq!(w.holders(), ["t-2"]);
    assert_eq!(w.s().holders[0].token, 2);
    w.op(&user("b", 2), release("t-2"));
    assert_eq!(w.holders(), ["t-3"]);
    assert_eq!(
        w.s().holders[0].token,
        3,
        "fencing tokens strictly increase"
    );
}

#[test]
fn status_of_a_missing_resource_changes_nothing_and_other_ops_are_not_found() {
    let mut w = World::new();
    let step = w.try_op(&user("a", 1), Op::Status).unwrap();
    assert!(!step.changed);
    w.state = None;
    assert_eq!(
        w.try_op(&user("a", 1), release("t-1")).unwrap_err().code,
        Code::NotFound
    );
}

#[test]
fn capacity_two_admits_two_but_not_three_and_no_overtaking() {
    let mut w = World::new();
    let two = Op::Request {
        capacity: Some(2),
        epoch: None,
    };
    assert!(matches!(
        w.op(&user("a", 1), two.clone()),
        Outcome::Granted { .. }
    ));
    assert!(matches!(
        w.op(&user("b", 2), two.clone()),
        Outcome::Granted { .. }
    ));
    assert!(matches!(
        w.op(&user("c", 3), two.clone()),
        Outcome::Queued { position: 1, .. }
    ));
    assert!(matches!(
        w.op(&user("d", 4), req()),
        Outcome::Queued { position: 2, .. }
    ));
    assert_eq!(w.s().occupied(), 2);
    w.op(&user("b", 2), release("t-2"));
    assert_eq!(
        w.holders(),
        ["t-1", "t-3"],
        "the head of the queue is granted first"
    );
}

#[test]
fn a_conflicting_capacity_is_refused_while_in_use_and_reset_when_idle() {
    let mut w = World::new();
    w.op(&user("a", 1), req());
    assert_eq!(
        w.err(
            &user("b", 2),
            Op::Request {
                capacity: Some(3),
                epoch: None
            }
        ),
        Code::InvalidRequest
    );
    w.op(&user("a", 1), release("t-1"));
    w.op(
        &user("b", 2),
        Op::Request {
            capacity: Some(3),
            epoch: None,
        },
    );
    assert_eq!((w.s().policy.capacity, w.s().policy.epoch), (3, 2));
}

#[test]
fn request_needs_the_request_capability_and_the_queue_is_bounded() {
    let mut w = World::new();
    assert_eq!(w.err(&caller("x", 9, &[]), req()), Code::CapabilityDenied);
    w.tickets_max = 2;
    w.op(&user("a", 1), req());
    w.op(&user("b", 2), req());
    w.op(&user("c", 3), req());
    assert_eq!(w.err(&user("d", 4), req()), Code::QueueFull);
}

#[test]
fn gone_holders_and_waiters_are_reclaimed_and_unknown_ones_kept() {
    let mut w = World::new();
    w.op(&user("a", 1), req());
    w.op(&user("b", 2), req());
    w.op(&user("c", 3), req());
    w.life.insert(2, Life::Gone);
    w.life.insert(1, Life::Gone);
    let step = w.try_op(&user("c", 3), Op::Status).unwrap();
    assert!(step.changed);
    assert_eq!(
        w.holders(),
        ["t-3"],
        "the dead waiter t-2 is skipped, not granted"
    );
    let kinds: Vec<_> = step.events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["reclaimed", "reclaimed", "granted"]);
    w.life.insert(3, Life::Unknown);
    let step = w.try_op(&user("d", 4), Op::Status).unwrap();
    assert_eq!(step.uncertain, ["t-3"]);
    assert_eq!(
        w.holders(),
        ["t-3"],
        "uncertain evidence never frees a holder"
    );
    assert_eq!(w.err(&user("d", 4), req()), Code::RecoveryRequired);
}

#[test]
fn release_by_principal_with_two_reservations_is_ambiguous() {
    let mut w = World::new();
    w.op(
        &user("a", 1),
        Op::Request {
            capacity: Some(2),
            epoch: None,
        },
    );
    w.op(&user("a", 1), req());
    let mine = Op::Release {
        target: Target::Mine,
    };
    assert_eq!(w.err(&user("a", 1), mine.clone()), Code::AmbiguousTarget);
    w.op(
        &user("a", 1),
        Op::Release {
            target: Target::Token(2),
        },
    );
    assert_eq!(
        w.op(&user("a", 1), mine.clone()),
        Outcome::Released {
            ticket: "t-1".into(),
            token: 1
        }
    );
    assert_eq!(w.err(&user("a", 1), mine), Code::NotFound);
}

#[test]
fn only_owner_controller_or_operator_releases_and_cancels() {
    let mut w = World::new();
    w.op(&user("a", 1), req());
    w.op(&user("b", 2), req());
    assert_eq!(w.err(&user("c", 3), release("t-1")), Code::CapabilityDenied);
    assert_eq!(
        w.err(
            &user("c", 3),
            Op::Cancel {
                ticket: "t-2".into()
            }
        ),
        Code::CapabilityDenied
    );
    assert_eq!(
        w.err(&user("a", 1), release("t-2")),
        Code::InvalidRequest,
        "a queued ticket is cancelled, not released"
    );
    w.op(&boss("op", 5), release("t-1"));
    assert_eq!(w.holders(), ["t-2"]);
    w.allow_control = false;
    assert_eq!(
        w.err(&boss("op", 5), release("t-2")),
        Code::CapabilityDenied
    );
}

#[test]
fn cancel_removes_a_waiting_ticket_or_an_unused_grant_but_not_a_running_one() {
    let mut w = World::new();
    w.op(&user("a", 1), req());
    w.op(&user("b", 2), req());
    assert_eq!(
        w.op(
            &user("b", 2),
            Op::Cancel {
                ticket: "t-2".into()
            }
        ),
        Outcome::Cancelled {
            ticket: "t-2".into()
        }
    );
    w.op(
        &user("a", 1),
        Op::Admit {
            ticket: "t-1".into(),
            token: 1,
        },
    );
    assert_eq!(
        w.err(
            &user("a", 1),
            Op::Cancel {
                ticket: "t-1".into()
            }
        ),
        Code::InvalidRequest
    );
    w.op(&user("c", 3), req());
    w.op(&user("a", 1), release("t-1"));
    w.op(
        &user("c", 3),
        Op::Cancel {
            ticket: "t-3".into(),
        },
    );
    assert!(w.s().holders.is_empty());
    assert_eq!(
        w.err(
            &user("c", 3),
            Op::Cancel {
                ticket: "t-9".into()
            }
        ),
        Code::NotFound
    );
}

#[test]
fn controller_policy_needs_config_and_capability_and_grants_explicitly() {
    let mut w = World::new();
    w.op(&user("a", 1), req());
    let set = Op::SetController {
        capacity: Some(1),
        force: false,
        automatic: false,
        ledger: vec![],
    };
    assert_eq!(w.err(&user("u", 2), set.clone()), Code::CapabilityDenied);
    w.allow_control = false;
    assert_eq!(w.err(&boss("c", 3), set.clone()), Code::CapabilityDenied);
    w.allow_control = true;
    assert_eq!(
        w.op(&boss("c", 3), set.clone()),
        Outcome::Policy {
            epoch: 2,
            capacity: 1
        }
    );
    assert_eq!(w.s().holders.len(), 0);
    assert_eq!(
        w.s().revoked.len(),
        1,
        "the unused grant of epoch 1 is revoked"
    );
    assert!(
        matches!(w.op(&user("b", 4), req()), Outcome::Queued { .. }),
        "no automatic grant under a controller"
    );
    let grant = Op::Grant {
        ticket: "t-2".into(),
        epoch: Some(2),
    };
    assert_eq!(w.err(&user("b", 4), grant.clone()), Code::CapabilityDenied);
    assert_eq!(
        w.err(
            &boss("c", 3),
            Op::Grant {
                ticket: "t-2".into(),
                epoch: Some(1)
            }
        ),
        Code::StalePolicy
    );
    assert!(matches!(
        w.op(&boss("c", 3), grant),
        Outcome::Granted { token: 2, .. }
    ));
}

#[test]
fn unused_grant_from_an_older_epoch_is_stale_when_used() {
    let mut w = World::new();
    w.op(&user("a", 1), req());
    let set = Op::SetController {
        capacity: None,
        force: false,
        automatic: false,
        ledger: vec![],
    };
    w.op(&boss("c", 3), set);
    assert_eq!(
        w.err(
            &user("a", 1),
            Op::Admit {
                ticket: "t-1".into(),
                token: 1
            }
        ),
        Code::StalePolicy
    );
    assert_eq!(
        w.err(
            &user("a", 1),
            Op::Release {
                target: Target::Token(1)
            }
        ),
        Code::StalePolicy
    );
    assert_eq!(
        w.err(
            &user("a", 1),
            Op::Request {
                capacity: None,
                epoch: Some(1)
            }
        ),
        Code::StalePolicy
    );
}

#[test]
fn admitted_processes_of_an_earlier_epoch_stay_as_blockers_until_they_end() {
    let mut w = World::new();
    w.op(&user("a", 1), req());
    w.op(
        &user("a", 1),
        Op::Admit {
            ticket: "t-1".into(),
            token: 1,
        },
    );
    let extra = Holder {
        ticket: "t-0".into(),
        party: user("z", 7).party,
        token: 1,
        granted_at: 0,
        epoch: 1,
        admitted: true,
    };
    let mut ledger_only = extra.clone();
    ledger_only.ticket = "t-x".into();
    let set = Op::SetController {
        capacity: Some(2),
        force: false,
        automatic: true,
        ledger: vec![
            Launched { holder: extra },
            Launched {
                holder: ledger_only,
            },
        ],
    };
    w.op(&boss("c", 3), set);
    assert_eq!(
        w.s().blockers.len(),
        1,
        "the ledger entry with a known token is not adopted twice"
    );
    assert_eq!(w.s().blockers[0].ticket, "t-1");
    w.op(&user("b", 2), req());
    w.op(&user("d", 4), req());
    assert_eq!(
        w.holders(),
        ["t-2"],
        "the blocker still counts against capacity 2"
    );
    w.life.insert(1, Life::Gone);
    w.op(&user("b", 2), Op::Status);
    assert_eq!(w.holders(), ["t-2", "t-3"]);
    assert!(w.s().blockers.is_empty());
}

#[test]
fn live_controller_is_never_replaced_and_a_dead_one_only_with_force() {
    let mut w = World::new();
    let set = |force| Op::SetController {
        capacity: None,
        force,
        automatic: false,
        ledger: vec![],
    };
    w.op(&boss("c1", 3), set(false));
    w.op(&boss("c1", 3), set(false));
    assert_eq!(
        w.s().policy.epoch,
        3,
        "the controller itself may change its policy"
    );
    assert_eq!(w.err(&boss("c2", 4), set(true)), Code::CapabilityDenied);
    w.life.insert(3, Life::Unknown);
    assert_eq!(w.err(&boss("c2", 4), set(true)), Code::RecoveryRequired);
    w.life.insert(3, Life::Gone);
    assert_eq!(w.err(&boss("c2", 4), set(false)), Code::CapabilityDenied);
    assert_eq!(
        w.op(&boss("c2", 4), set(true)),
        Outcome::Policy {
            epoch: 4,
            capacity: 1
        }
    );
}

#[test]
fn journal_and_revoked_list_are_bounded_and_sequence_is_monotonic() {
    let mut w = World::new();
    for i in 0..20 {
        w.op(&user("a", 1), req());
        w.op(&user("a", 1), release(&format!("t-{}", i + 1)));
    }
    let s = w.s();
    assert_eq!(s.journal.len(), 16);
    assert_eq!(s.journal.last().unwrap().sequence, s.sequence);
    assert!(
        s.journal
            .windows(2)
            .all(|p| p[0].sequence + 1 == p[1].sequence)
    );
    assert_eq!(s.next_token, 21);
}

mod model_check {
    use super::*;
    use proptest::prelude::*;

    fn num(id: &str) -> u64 {
        id.trim_start_matches("t-").parse().unwrap_or(0)
    }

    /// One random step: (operation, principal 0..3, argument).
    fn op_for(kind: u8, arg: u8, w: &World) -> Op {
        let some_ticket = || {
            let s = w.state.as_ref();
            let all: Vec<String> = s
                .map(|s| {
                    s.tickets
                        .iter()
                        .map(|t| t.id.clone())
                        .chain(s.holders.iter().map(|h| h.ticket.clone()))
                        .collect()
                })
                .unwrap_or_default();
            all.get(arg as usize % all.len().max(1))
                .cloned()
                .unwrap_or_else(|| "t-99".into())
        };
        match kind % 8 {
            0 | 1 => Op::Request {
                capacity: arg.is_multiple_of(4).then_some(u32::from(arg % 3) + 1),
                epoch: None,
            },
            2 => Op::Release {
                target: Target::Ticket(some_ticket()),
            },
            3 => Op::Release {
                target: Target::Mine,
            },
            4 => Op::Cancel {
                ticket: some_ticket(),
            },
            5 => Op::Grant {
                ticket: some_ticket(),
                epoch: None,
            },
            6 => Op::Admit {
                ticket: some_ticket(),
                token: u64::from(arg % 6),
            },
            _ => Op::SetController {
                capacity: Some(u32::from(arg % 3) + 1),
                force: arg.is_multiple_of(2),
                automatic: arg.is_multiple_of(3),
                ledger: vec![],
            },
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
        #[test]
        fn random_transactions_keep_every_invariant(steps in proptest::collection::vec((0u8..8, 0u8..3, any::<u8>(), 0u8..10), 1..60)) {
            let mut w = World::new();
            let mut last_token = 0;
            let mut last_seq = 0;
            for (kind, who, arg, death) in steps {
                if death == 0 {
                    w.life.insert(u32::from(arg % 3) + 1, Life::Gone);
                }
                let c = boss(&format!("p{who}"), u32::from(who) + 1);
                if w.life.get(&(u32::from(who) + 1)) == Some(&Life::Gone) {
                    continue; // dead principals act no more
                }
                let op = op_for(kind, arg, &w);
                let Ok(step) = w.try_op(&c, op) else { continue };
                let s = &step.state;
                prop_assert!(s.holders.len() <= s.policy.capacity as usize);
                for e in &step.events {
                    prop_assert!(e.sequence > last_seq);
                    last_seq = e.sequence;
                    if e.kind == "granted" {
                        let t = e.token.unwrap_or(0);
                        prop_assert!(t > last_token, "tokens strictly increase");
                        last_token = t;
                    }
                }
                let ids: Vec<u64> = s.tickets.iter().map(|t| num(&t.id)).collect();
                prop_assert!(ids.windows(2).all(|p| p[0] < p[1]), "queue stays in FIFO order");
                if s.policy.controller.is_none() {
                    prop_assert!(s.tickets.is_empty() || s.occupied() >= s.policy.capacity as usize, "automatic policy never idles a slot while tickets wait");
                }
            }
        }
    }
}
