//! The sans-IO resource coordinator: `apply(state, caller, op, env)` decides one transaction
//! (FIFO queueing, grants, fencing tokens, epochs, reclamation from process evidence,
//! controller authority) without touching files, clocks or processes. The I/O shell in
//! `store` feeds it the current file, the time and a liveness probe, and writes the result.
#![forbid(unsafe_code)]

use super::model::{Controller, Event, Holder, Party, ResourceState, Revoked, Ticket};
use crate::error::{Code, Error, Result};
use crate::process::{Life, ProcessEvidence};

/// Capability needed to queue for a resource.
pub const CAP_REQUEST: &str = "resource.request";
/// Capability needed to install or replace a controller policy.
pub const CAP_CONTROL: &str = "resource.control";

/// Who is acting, with the process whose life stands for the request.
#[derive(Clone, Debug)]
pub struct Caller {
    pub party: Party,
    pub capabilities: Vec<String>,
}

impl Caller {
    fn can(&self, cap: &str) -> bool {
        self.capabilities.iter().any(|c| c == cap)
    }
}

/// Everything outside the state a decision may depend on.
pub struct Env<'a> {
    pub now: u64,
    /// `Limits.resource_history`: journal entries and revoked grants kept.
    pub history: usize,
    /// `Limits.resource_tickets`: waiting tickets allowed.
    pub tickets_max: usize,
    /// `allowResourceControl` of the namespace.
    pub allow_control: bool,
    /// Liveness of a recorded process; the ticket id lets the shell consult the launch ledger.
    pub life: &'a dyn Fn(&str, &ProcessEvidence) -> Life,
    /// The resource's fence: `next_token` and the policy epoch never start below these, even
    /// when the file was restored from an older copy or recreated.
    pub token_floor: u64,
    pub epoch_floor: u64,
}

/// How a release names its reservation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Ticket(String),
    Token(u64),
    /// The caller's only reservation; two or more is AMBIGUOUS_TARGET.
    Mine,
}

impl Target {
    /// The target a release names with an optional ticket and an optional token: the caller's
    /// own reservation when neither is given, a usage error when both are.
    pub fn of_release(ticket: Option<String>, token: Option<u64>) -> Result<Target> {
        match (ticket, token) {
            (Some(t), None) => Ok(Target::Ticket(t)),
            (None, Some(n)) => Ok(Target::Token(n)),
            (None, None) => Ok(Target::Mine),
            (Some(_), Some(_)) => Err(Error::new(
                Code::Usage,
                "release names a ticket or a token, not both",
            )),
        }
    }
}

/// A process from the launch ledger that a policy change must not overlook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launched {
    pub holder: Holder,
}

/// One coordinator operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Status,
    Request {
        capacity: Option<u32>,
        epoch: Option<u64>,
    },
    Grant {
        ticket: String,
        epoch: Option<u64>,
    },
    /// Uses a grant: a process is about to run under it (the command gate).
    Admit {
        ticket: String,
        token: u64,
    },
    Release {
        target: Target,
    },
    /// An operator's explicit release of someone else's grant (`peer res release --force`):
    /// allowed to any principal of the namespace's uid, which could edit the files anyway,
    /// but only by ticket or token, and recorded in the journal with who did it.
    Override {
        target: Target,
    },
    Cancel {
        ticket: String,
    },
    SetController {
        capacity: Option<u32>,
        force: bool,
        automatic: bool,
        ledger: Vec<Launched>,
    },
}

/// What the operation achieved for the caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Status,
    Queued {
        ticket: String,
        position: usize,
    },
    Granted {
        ticket: String,
        token: u64,
        epoch: u64,
    },
    Admitted {
        ticket: String,
        token: u64,
        epoch: u64,
    },
    Released {
        ticket: String,
        token: u64,
    },
    Cancelled {
        ticket: String,
    },
    Policy {
        epoch: u64,
        capacity: u32,
    },
}

/// The result of one transaction.
#[derive(Clone, Debug)]
pub struct Step {
    pub state: ResourceState,
    pub outcome: Outcome,
    /// Events appended by this transaction (also in `state.journal`).
    pub events: Vec<Event>,
    /// Whether the state differs from the input (the shell skips the write otherwise).
    pub changed: bool,
    /// Tickets whose process evidence could not be decided: an operator must look.
    pub uncertain: Vec<String>,
}

/// Decides one transaction. `state` is `None` when no file exists yet.
pub fn apply(
    state: Option<ResourceState>,
    name: &str,
    caller: &Caller,
    op: &Op,
    env: &Env,
) -> Result<Step> {
    let existed = state.is_some();
    let before = state.clone();
    let mut tx = Tx {
        state: state.unwrap_or_else(|| ResourceState::new(name, 1)),
        events: Vec::new(),
        env,
    };
    tx.state.next_token = tx.state.next_token.max(env.token_floor);
    tx.state.policy.epoch = tx.state.policy.epoch.max(env.epoch_floor);
    if !existed
        && !matches!(
            op,
            Op::Status | Op::Request { .. } | Op::SetController { .. }
        )
    {
        return Err(Error::new(
            Code::NotFound,
            format!("resource {name:?} has no tickets or policy; request it first"),
        ));
    }
    let uncertain = tx.sweep();
    tx.promote();
    let outcome = tx.run(caller, op, &uncertain)?;
    tx.trim();
    let changed =
        existed && before.as_ref() != Some(&tx.state) || !existed && !matches!(op, Op::Status);
    Ok(Step {
        state: tx.state,
        outcome,
        events: tx.events,
        changed,
        uncertain,
    })
}

struct Tx<'a, 'b> {
    state: ResourceState,
    events: Vec<Event>,
    env: &'a Env<'b>,
}

impl Tx<'_, '_> {
    fn run(&mut self, caller: &Caller, op: &Op, uncertain: &[String]) -> Result<Outcome> {
        match op {
            Op::Status => Ok(Outcome::Status),
            Op::Request { capacity, epoch } => self.request(caller, *capacity, *epoch, uncertain),
            Op::Grant { ticket, epoch } => self.grant(caller, ticket, *epoch),
            Op::Admit { ticket, token } => self.admit(caller, ticket, *token),
            Op::Release { target } => self.release(caller, target),
            Op::Override { target } => self.override_release(caller, target),
            Op::Cancel { ticket } => self.cancel(caller, ticket),
            Op::SetController {
                capacity,
                force,
                automatic,
                ledger,
            } => self.set_controller(caller, *capacity, *force, *automatic, ledger),
        }
    }

    fn emit(&mut self, kind: &str, request: Option<&str>, token: Option<u64>) {
        self.state.sequence += 1;
        let event = Event {
            sequence: self.state.sequence,
            kind: kind.to_string(),
            request: request.map(str::to_string),
            epoch: self.state.policy.epoch,
            token,
            at: self.env.now,
            by: None,
        };
        self.state.journal.push(event.clone());
        self.events.push(event);
    }

    /// Reclaims tickets and grants whose process is provably gone; returns undecidable ones.
    fn sweep(&mut self) -> Vec<String> {
        let life = self.env.life;
        let mut uncertain = Vec::new();
        let mut gone = Vec::new();
        self.state
            .tickets
            .retain(|t| match life(&t.id, &t.party.evidence) {
                Life::Gone => {
                    gone.push((t.id.clone(), None));
                    false
                }
                _ => true,
            });
        for list in [&mut self.state.holders, &mut self.state.blockers] {
            list.retain(|h| match life(&h.ticket, &h.party.evidence) {
                Life::Alive => true,
                Life::Unknown => {
                    uncertain.push(h.ticket.clone());
                    true
                }
                Life::Gone => {
                    gone.push((h.ticket.clone(), Some(h.token)));
                    false
                }
            });
        }
        for (ticket, token) in gone {
            self.emit("reclaimed", Some(&ticket), token);
        }
        uncertain
    }

    /// Automatic policy: grants the head of the FIFO while capacity allows (no overtaking).
    fn promote(&mut self) {
        if self.state.policy.controller.is_some() {
            return;
        }
        while self.state.occupied() < self.state.policy.capacity as usize
            && !self.state.tickets.is_empty()
        {
            let ticket = self.state.tickets.remove(0);
            self.grant_ticket(ticket);
        }
    }

    fn grant_ticket(&mut self, ticket: Ticket) -> u64 {
        let token = self.state.next_token;
        self.state.next_token += 1;
        let id = ticket.id.clone();
        self.state.holders.push(Holder {
            ticket: ticket.id,
            party: ticket.party,
            token,
            granted_at: self.env.now,
            epoch: self.state.policy.epoch,
            admitted: false,
        });
        self.emit("granted", Some(&id), Some(token));
        token
    }

    fn check_epoch(&self, epoch: Option<u64>) -> Result<()> {
        match epoch {
            Some(e) if e != self.state.policy.epoch => Err(Error::new(
                Code::StalePolicy,
                format!(
                    "resource {:?} is at policy epoch {}, not {e}; refresh its status and request again",
                    self.state.name, self.state.policy.epoch
                ),
            )),
            _ => Ok(()),
        }
    }

    fn request(
        &mut self,
        caller: &Caller,
        capacity: Option<u32>,
        epoch: Option<u64>,
        uncertain: &[String],
    ) -> Result<Outcome> {
        if !caller.can(CAP_REQUEST) {
            return Err(denied(&format!(
                "{} lacks the resource.request capability",
                caller.party.display
            )));
        }
        self.check_epoch(epoch)?;
        self.settle_capacity(capacity)?;
        let full = self.state.occupied() >= self.state.policy.capacity as usize;
        if full && !uncertain.is_empty() {
            return Err(Error::new(
                Code::RecoveryRequired,
                format!(
                    "resource {:?} is held by {} whose process evidence is missing or unreadable; verify that process, then release it by ticket",
                    self.state.name,
                    uncertain.join(", ")
                ),
            ));
        }
        if self.state.tickets.len() >= self.env.tickets_max {
            return Err(Error::new(
                Code::QueueFull,
                format!(
                    "resource {:?} already has {} waiting tickets; let the queue drain",
                    self.state.name,
                    self.state.tickets.len()
                ),
            ));
        }
        let id = format!("t-{}", self.state.next_ticket);
        self.state.next_ticket += 1;
        let epoch = self.state.policy.epoch;
        let ticket = Ticket {
            id: id.clone(),
            party: caller.party.clone(),
            requested_at: self.env.now,
            epoch,
        };
        self.state.tickets.push(ticket);
        self.emit("requested", Some(&id), None);
        self.promote();
        Ok(self.ticket_outcome(&id))
    }

    /// The first request of an idle, uncontrolled resource sets its capacity; later requests
    /// must agree with it.
    fn settle_capacity(&mut self, capacity: Option<u32>) -> Result<()> {
        let Some(want) = capacity.filter(|c| *c != self.state.policy.capacity) else {
            return Ok(());
        };
        if want == 0 {
            return Err(Error::new(
                Code::Usage,
                "capacity must be a positive integer",
            ));
        }
        let s = &self.state;
        let idle = s.tickets.is_empty() && s.occupied() == 0 && s.policy.controller.is_none();
        if !idle {
            return Err(Error::new(
                Code::InvalidRequest,
                format!(
                    "resource {:?} has capacity {} at epoch {} while in use; request without a capacity or ask its controller",
                    s.name, s.policy.capacity, s.policy.epoch
                ),
            ));
        }
        self.state.policy.capacity = want;
        self.state.policy.epoch += 1;
        self.emit("policy", None, None);
        Ok(())
    }

    fn ticket_outcome(&self, id: &str) -> Outcome {
        if let Some(h) = self.state.holders.iter().find(|h| h.ticket == id) {
            return Outcome::Granted {
                ticket: id.to_string(),
                token: h.token,
                epoch: h.epoch,
            };
        }
        let position = self
            .state
            .tickets
            .iter()
            .position(|t| t.id == id)
            .map_or(0, |p| p + 1);
        Outcome::Queued {
            ticket: id.to_string(),
            position,
        }
    }

    fn grant(&mut self, caller: &Caller, ticket: &str, epoch: Option<u64>) -> Result<Outcome> {
        let Some(controller) = &self.state.policy.controller else {
            return Err(Error::new(
                Code::InvalidRequest,
                format!(
                    "resource {:?} has no controller; its grants follow the FIFO queue",
                    self.state.name
                ),
            ));
        };
        if controller.party.principal != caller.party.principal {
            return Err(denied(&format!(
                "only the controller {} grants tickets on {:?}",
                controller.party.display, self.state.name
            )));
        }
        self.check_epoch(epoch)?;
        if self.state.holders.iter().any(|h| h.ticket == ticket) {
            return Ok(self.ticket_outcome(ticket));
        }
        let Some(pos) = self.state.tickets.iter().position(|t| t.id == ticket) else {
            return Err(self.missing(ticket));
        };
        if self.state.occupied() >= self.state.policy.capacity as usize {
            return Err(Error::new(
                Code::QueueFull,
                format!(
                    "resource {:?} is at its capacity {}; wait for a release",
                    self.state.name, self.state.policy.capacity
                ),
            ));
        }
        let t = self.state.tickets.remove(pos);
        let token = self.grant_ticket(t);
        Ok(Outcome::Granted {
            ticket: ticket.to_string(),
            token,
            epoch: self.state.policy.epoch,
        })
    }

    /// The error for a ticket that is neither queued nor granted.
    fn missing(&self, ticket: &str) -> Error {
        if self.state.revoked.iter().any(|r| r.ticket == ticket) {
            return Error::new(
                Code::StalePolicy,
                format!(
                    "ticket {ticket} was granted under an earlier policy of {:?} (now epoch {}); request admission again",
                    self.state.name, self.state.policy.epoch
                ),
            );
        }
        Error::new(
            Code::NotFound,
            format!(
                "resource {:?} has no ticket {ticket}; see its status",
                self.state.name
            ),
        )
    }

    fn admit(&mut self, caller: &Caller, ticket: &str, token: u64) -> Result<Outcome> {
        let epoch = self.state.policy.epoch;
        let Some(i) = self.state.holders.iter().position(|h| h.ticket == ticket) else {
            return Err(if self.state.tickets.iter().any(|t| t.id == ticket) {
                Error::new(
                    Code::InvalidRequest,
                    format!("ticket {ticket} is still waiting for a grant"),
                )
            } else {
                self.missing(ticket)
            });
        };
        let h = &self.state.holders[i];
        if h.party.principal != caller.party.principal || h.token != token {
            return Err(denied(&format!(
                "ticket {ticket} with token {token} is not a grant of {}",
                caller.party.display
            )));
        }
        if h.epoch != epoch && !h.admitted {
            let h = self.state.holders.remove(i);
            self.revoke(h);
            self.promote();
            return Err(self.missing(ticket));
        }
        let h = &mut self.state.holders[i];
        h.admitted = true;
        h.party.evidence = caller.party.evidence.clone();
        let epoch = h.epoch;
        self.emit("admitted", Some(ticket), Some(token));
        Ok(Outcome::Admitted {
            ticket: ticket.to_string(),
            token,
            epoch,
        })
    }

    fn revoke(&mut self, h: Holder) {
        self.emit("revoked", Some(&h.ticket), Some(h.token));
        self.state.revoked.push(Revoked {
            ticket: h.ticket,
            token: h.token,
            epoch: h.epoch,
        });
    }

    /// Owner, controller, or an operator with control authority may act on a reservation.
    fn authorize(&self, caller: &Caller, owner: &str, what: &str) -> Result<()> {
        let is_controller = self
            .state
            .policy
            .controller
            .as_ref()
            .is_some_and(|c| c.party.principal == caller.party.principal);
        let operator = self.env.allow_control && caller.can(CAP_CONTROL);
        if owner == caller.party.principal || is_controller || operator {
            return Ok(());
        }
        Err(denied(&format!(
            "{what} belongs to another principal; ask its owner or the resource's controller"
        )))
    }

    fn release(&mut self, caller: &Caller, target: &Target) -> Result<Outcome> {
        let found = self.find_grant(caller, target)?;
        let (blocker, i) = found;
        let list = if blocker {
            &self.state.blockers
        } else {
            &self.state.holders
        };
        let owner = list[i].party.principal.clone();
        self.authorize(caller, &owner, &format!("ticket {}", list[i].ticket))?;
        let h = if blocker {
            self.state.blockers.remove(i)
        } else {
            self.state.holders.remove(i)
        };
        self.emit("released", Some(&h.ticket), Some(h.token));
        self.promote();
        Ok(Outcome::Released {
            ticket: h.ticket,
            token: h.token,
        })
    }

    fn override_release(&mut self, caller: &Caller, target: &Target) -> Result<Outcome> {
        if *target == Target::Mine {
            return Err(Error::new(
                Code::Usage,
                "a forced release must name the ticket or token it overrides",
            ));
        }
        let (blocker, i) = self.find_grant(caller, target)?;
        let h = if blocker {
            self.state.blockers.remove(i)
        } else {
            self.state.holders.remove(i)
        };
        self.emit("released_by_override", Some(&h.ticket), Some(h.token));
        if let Some(e) = self.state.journal.last_mut() {
            e.by = Some(caller.party.principal.clone());
        }
        if let Some(e) = self.events.last_mut() {
            e.by = Some(caller.party.principal.clone());
        }
        self.promote();
        Ok(Outcome::Released {
            ticket: h.ticket,
            token: h.token,
        })
    }

    /// Locates a grant or adopted blocker: `(is_blocker, index)`.
    fn find_grant(&self, caller: &Caller, target: &Target) -> Result<(bool, usize)> {
        let s = &self.state;
        let all = || {
            s.holders
                .iter()
                .map(|h| (false, h))
                .chain(s.blockers.iter().map(|h| (true, h)))
        };
        let pick = |hit: Option<(bool, &Holder)>| {
            hit.map(|(b, h)| {
                let list = if b { &s.blockers } else { &s.holders };
                (
                    b,
                    list.iter().position(|x| x.ticket == h.ticket).unwrap_or(0),
                )
            })
        };
        match target {
            Target::Ticket(t) => {
                pick(all().find(|(_, h)| &h.ticket == t)).ok_or_else(|| self.not_granted(t))
            }
            Target::Token(n) => pick(all().find(|(_, h)| h.token == *n)).ok_or_else(|| {
                match s.revoked.iter().find(|r| r.token == *n) {
                    Some(r) => self.missing(&r.ticket),
                    None => Error::new(
                        Code::NotFound,
                        format!("resource {:?} has no grant with token {n}", s.name),
                    ),
                }
            }),
            Target::Mine => {
                let mine: Vec<_> = all()
                    .filter(|(_, h)| h.party.principal == caller.party.principal)
                    .collect();
                match mine.as_slice() {
                    [one] => pick(Some(*one)).ok_or_else(|| self.not_granted("")),
                    [] => Err(Error::new(
                        Code::NotFound,
                        format!("{} holds nothing on {:?}", caller.party.display, s.name),
                    )),
                    many => Err(Error::new(
                        Code::AmbiguousTarget,
                        format!(
                            "{} holds {} reservations on {:?} ({}); name one by ticket or token",
                            caller.party.display,
                            many.len(),
                            s.name,
                            many.iter()
                                .map(|(_, h)| h.ticket.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )),
                }
            }
        }
    }

    fn not_granted(&self, ticket: &str) -> Error {
        if self.state.tickets.iter().any(|t| t.id == ticket) {
            return Error::new(
                Code::InvalidRequest,
                format!("ticket {ticket} is still waiting; cancel it instead"),
            );
        }
        self.missing(ticket)
    }

    fn cancel(&mut self, caller: &Caller, ticket: &str) -> Result<Outcome> {
        if let Some(i) = self.state.tickets.iter().position(|t| t.id == ticket) {
            self.authorize(
                caller,
                &self.state.tickets[i].party.principal.clone(),
                &format!("ticket {ticket}"),
            )?;
            self.state.tickets.remove(i);
            self.emit("cancelled", Some(ticket), None);
            self.promote();
            return Ok(Outcome::Cancelled {
                ticket: ticket.to_string(),
            });
        }
        let Some(i) = self.state.holders.iter().position(|h| h.ticket == ticket) else {
            return Err(self.missing(ticket));
        };
        self.authorize(
            caller,
            &self.state.holders[i].party.principal.clone(),
            &format!("ticket {ticket}"),
        )?;
        if self.state.holders[i].admitted {
            return Err(Error::new(
                Code::InvalidRequest,
                format!(
                    "ticket {ticket} has a running process; it is released when that process ends"
                ),
            ));
        }
        let h = self.state.holders.remove(i);
        self.emit("cancelled", Some(ticket), Some(h.token));
        self.promote();
        Ok(Outcome::Cancelled {
            ticket: ticket.to_string(),
        })
    }

    fn set_controller(
        &mut self,
        caller: &Caller,
        capacity: Option<u32>,
        force: bool,
        automatic: bool,
        ledger: &[Launched],
    ) -> Result<Outcome> {
        if !self.env.allow_control {
            return Err(denied(
                "allowResourceControl is false in this namespace's configuration",
            ));
        }
        if !caller.can(CAP_CONTROL) {
            return Err(denied(&format!(
                "{} lacks the resource.control capability",
                caller.party.display
            )));
        }
        self.check_replace(caller, force)?;
        if capacity == Some(0) {
            return Err(Error::new(
                Code::Usage,
                "capacity must be a positive integer",
            ));
        }
        let s = &mut self.state;
        s.policy.epoch += 1;
        s.policy.capacity = capacity.unwrap_or(s.policy.capacity);
        s.policy.controller = (!automatic).then(|| Controller {
            party: caller.party.clone(),
            since: self.env.now,
        });
        self.adopt(ledger);
        self.emit("policy", None, None);
        self.promote();
        Ok(Outcome::Policy {
            epoch: self.state.policy.epoch,
            capacity: self.state.policy.capacity,
        })
    }

    /// A live controller is never replaced; a dead one only with an explicit force.
    fn check_replace(&self, caller: &Caller, force: bool) -> Result<()> {
        let Some(c) = &self.state.policy.controller else {
            return Ok(());
        };
        if c.party.principal == caller.party.principal {
            return Ok(());
        }
        match (self.env.life)("", &c.party.evidence) {
            Life::Alive => Err(denied(&format!(
                "resource {:?} is controlled by {} (pid {}, alive); only that controller changes its policy",
                self.state.name, c.party.display, c.party.evidence.pid
            ))),
            Life::Unknown => Err(Error::new(
                Code::RecoveryRequired,
                format!(
                    "the controller of {:?} has no decidable process evidence; verify it first",
                    self.state.name
                ),
            )),
            Life::Gone if !force => Err(denied(&format!(
                "the controller {} of {:?} is gone; replacing it must be explicitly forced by an authorized principal",
                c.party.display, self.state.name
            ))),
            Life::Gone => Ok(()),
        }
    }

    /// A policy change revokes unused grants and adopts every admitted process as a blocker,
    /// including launch-ledger entries the resource file does not list.
    fn adopt(&mut self, ledger: &[Launched]) {
        let holders = std::mem::take(&mut self.state.holders);
        for h in holders {
            if h.admitted {
                self.emit("adopted", Some(&h.ticket), Some(h.token));
                self.state.blockers.push(h);
            } else {
                self.revoke(h);
            }
        }
        for l in ledger {
            let known = self
                .state
                .blockers
                .iter()
                .any(|b| b.ticket == l.holder.ticket || b.token == l.holder.token);
            let alive = (self.env.life)(&l.holder.ticket, &l.holder.party.evidence) != Life::Gone;
            if !known && alive && l.holder.token < self.state.next_token && l.holder.token > 0 {
                self.emit("adopted", Some(&l.holder.ticket), Some(l.holder.token));
                self.state.blockers.push(l.holder.clone());
            }
        }
    }

    fn trim(&mut self) {
        for (len, cut) in [(self.state.journal.len(), 0), (self.state.revoked.len(), 1)] {
            let excess = len.saturating_sub(self.env.history);
            if excess > 0 {
                if cut == 0 {
                    self.state.journal.drain(..excess);
                } else {
                    self.state.revoked.drain(..excess);
                }
            }
        }
    }
}

fn denied(what: &str) -> Error {
    Error::new(Code::CapabilityDenied, what.to_string())
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
