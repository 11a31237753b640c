//! A one-shot answer slot: the store writer hands one value to one waiting thread. The waiter
//! sleeps on a condition variable (one futex wait, one wake) instead of a channel receive,
//! which spins and calls `sched_yield` several times before it parks — costly when every
//! answer follows an fdatasync or a socket trip anyway.

use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::{Duration, Instant};

enum State<T> {
    Waiting,
    Answered(T),
    /// The answering side was dropped without answering.
    Dropped,
    Taken,
}

struct Slot<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
}

/// The answering half; dropping it unanswered wakes the waiter with [`Gone`].
pub(crate) struct Answer<T> {
    slot: Option<Arc<Slot<T>>>,
}

/// The waiting half.
pub(crate) struct Waiter<T> {
    slot: Arc<Slot<T>>,
}

/// Why no value arrived.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Gone {
    TimedOut,
    Dropped,
}

pub(crate) fn slot<T>() -> (Answer<T>, Waiter<T>) {
    let slot = Arc::new(Slot {
        state: Mutex::new(State::Waiting),
        ready: Condvar::new(),
    });
    (
        Answer {
            slot: Some(slot.clone()),
        },
        Waiter { slot },
    )
}

impl<T> Answer<T> {
    pub fn send(mut self, value: T) {
        if let Some(slot) = self.slot.take() {
            *slot.state.lock() = State::Answered(value);
            slot.ready.notify_one();
        }
    }
}

impl<T> Drop for Answer<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            let mut st = slot.state.lock();
            if matches!(*st, State::Waiting) {
                *st = State::Dropped;
            }
            drop(st);
            slot.ready.notify_one();
        }
    }
}

impl<T> Waiter<T> {
    /// Whether the answer (or the answering half's drop) has arrived: a wait would not block.
    pub fn is_answered(&self) -> bool {
        !matches!(*self.slot.state.lock(), State::Waiting)
    }

    /// Sleeps until the answer arrives, the answering half is dropped, or `wait` passes.
    pub fn recv_timeout(self, wait: Duration) -> Result<T, Gone> {
        let deadline = Instant::now() + wait;
        let mut st = self.slot.state.lock();
        loop {
            match std::mem::replace(&mut *st, State::Taken) {
                State::Answered(v) => return Ok(v),
                State::Dropped => return Err(Gone::Dropped),
                State::Waiting | State::Taken => *st = State::Waiting,
            }
            if self.slot.ready.wait_until(&mut st, deadline).timed_out() {
                return match std::mem::replace(&mut *st, State::Taken) {
                    State::Answered(v) => Ok(v),
                    State::Dropped => Err(Gone::Dropped),
                    State::Waiting | State::Taken => Err(Gone::TimedOut),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_across_threads_once() {
        let (a, w) = slot::<u32>();
        let t = std::thread::spawn(move || a.send(7));
        assert_eq!(w.recv_timeout(Duration::from_secs(10)), Ok(7));
        t.join().unwrap();
    }

    #[test]
    fn an_answer_sent_before_the_wait_is_kept() {
        let (a, w) = slot::<&str>();
        a.send("done");
        assert_eq!(w.recv_timeout(Duration::from_millis(1)), Ok("done"));
    }

    #[test]
    fn dropping_the_answer_wakes_the_waiter() {
        let (a, w) = slot::<u32>();
        let t = std::thread::spawn(move || drop(a));
        assert_eq!(w.recv_timeout(Duration::from_secs(10)), Err(Gone::Dropped));
        t.join().unwrap();
    }

    #[test]
    fn no_answer_times_out() {
        let (_a, w) = slot::<u32>();
        assert_eq!(
            w.recv_timeout(Duration::from_millis(5)),
            Err(Gone::TimedOut)
        );
    }
}
