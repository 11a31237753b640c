//! What a root could not hand to any caller (`Problems`): the latest background failures
//! (sweeps, reply bookkeeping, takeovers) and the predecessor stores that did not verify at
//! start, both shown by `local.info`.

use super::events::{Bus, ProblemRecorded};
use crate::clock;
use crate::error::Error;
use parking_lot::Mutex;
use std::collections::VecDeque;

/// One failure the root could not hand to a caller.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    pub at_ms: u64,
    /// What was being done (`sweep`, `mark replied`).
    pub what: String,
    #[serde(deserialize_with = "crate::toolspec::words::code")]
    pub code: crate::toolspec::words::Word,
    pub message: String,
}

/// A predecessor store adoption refused to touch: where it is and how to review it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnverifiedStore {
    pub instance_id: String,
    pub path: String,
    /// The command that reviews it read-only.
    pub recover: String,
    #[serde(deserialize_with = "crate::toolspec::words::code")]
    pub code: crate::toolspec::words::Word,
    pub message: String,
}

/// Background failures remembered for `local.info`.
use crate::config::internal::PROBLEMS_MAX;

#[derive(Default)]
pub struct Problems {
    /// The latest background failures, newest last; each is also logged on stderr and
    /// published as an event.
    recent: Mutex<VecDeque<Problem>>,
    /// Predecessor stores of this session that did not verify at start and were left as they
    /// were (at most the stores one start scans).
    unverified: Mutex<Vec<UnverifiedStore>>,
}

impl Problems {
    /// Makes a failure that has no caller to answer visible: stderr (the root's log), the
    /// event `bus` and `local.info` (the latest few).
    pub fn report(&self, bus: &Bus, what: &str, e: &Error) {
        let p = Problem {
            at_ms: clock::now_ms(),
            what: what.to_string(),
            code: e.code.name(),
            message: e.message.clone(),
        };
        let mut problems = self.recent.lock();
        // A failure that repeats (a poisoned store fails every sweep) is logged once.
        if let Some(last) = problems.back_mut()
            && (last.what.as_str(), last.code, last.message.as_str())
                == (p.what.as_str(), p.code, p.message.as_str())
        {
            last.at_ms = p.at_ms;
            return;
        }
        eprintln!(
            "peer: warning: {what} failed: {}: {}",
            p.code,
            crate::sanitize::line(&p.message, 300)
        );
        bus.publish(&ProblemRecorded::of(&p.what, p.code, &p.message));
        if problems.len() >= PROBLEMS_MAX {
            problems.pop_front();
        }
        problems.push_back(p);
    }

    /// The remembered background failures, oldest first.
    pub fn recent(&self) -> Vec<Problem> {
        self.recent.lock().iter().cloned().collect()
    }

    /// Remembers a predecessor store left as it was.
    pub fn add_unverified(&self, store: UnverifiedStore) {
        self.unverified.lock().push(store);
    }

    /// The predecessor stores left as they were, in the order found.
    pub fn unverified(&self) -> Vec<UnverifiedStore> {
        self.unverified.lock().clone()
    }

    /// Whether a store set aside at start matches `is_it`.
    pub fn set_aside(&self, is_it: impl Fn(&UnverifiedStore) -> bool) -> bool {
        self.unverified.lock().iter().any(is_it)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;

    #[test]
    fn a_repeated_problem_is_kept_once_and_the_latest_few_are_remembered() {
        let (p, bus) = (Problems::default(), Bus::default());
        let events = bus.subscribe().unwrap();
        let full = Error::new(Code::Io, "disk full");
        p.report(&bus, "sweep", &full);
        p.report(&bus, "sweep", &full);
        assert_eq!(p.recent().len(), 1, "a repeat only moves the time");
        assert_eq!(events.try_iter().count(), 1, "and is published once");
        for i in 0..PROBLEMS_MAX + 3 {
            p.report(&bus, &format!("pass {i}"), &full);
        }
        let recent = p.recent();
        assert_eq!(recent.len(), PROBLEMS_MAX);
        assert_eq!(
            recent[PROBLEMS_MAX - 1].what,
            format!("pass {}", PROBLEMS_MAX + 2)
        );
    }
}
