//! A bounded multi-producer, multi-consumer queue whose waits park at once on a condition
//! variable. The MCP server's hand-offs (reader → tool workers → stdout writer) happen once per
//! request; a channel receive would first spin and call `sched_yield` several times before it
//! parks, on every idle thread, for every request.

use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::Arc;

struct State<T> {
    items: VecDeque<T>,
    cap: usize,
    senders: usize,
    receivers: usize,
}

struct Inner<T> {
    state: Mutex<State<T>>,
    not_empty: Condvar,
    not_full: Condvar,
}

/// The sending half; cloneable. When the last one is dropped, receivers drain what is queued
/// and then see the end.
pub(crate) struct Sender<T> {
    inner: Arc<Inner<T>>,
}

/// The receiving half; cloneable. When the last one is dropped, sends fail.
pub(crate) struct Receiver<T> {
    inner: Arc<Inner<T>>,
}

/// Why a [`Sender::try_send`] did not queue its value (returned inside).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TrySendError<T> {
    Full(T),
    Disconnected(T),
}

/// A queue holding at most `cap` (at least 1) values.
pub(crate) fn bounded<T>(cap: usize) -> (Sender<T>, Receiver<T>) {
    let inner = Arc::new(Inner {
        state: Mutex::new(State {
            items: VecDeque::new(),
            cap: cap.max(1),
            senders: 1,
            receivers: 1,
        }),
        not_empty: Condvar::new(),
        not_full: Condvar::new(),
    });
    (
        Sender {
            inner: inner.clone(),
        },
        Receiver { inner },
    )
}

impl<T> Sender<T> {
    /// Queues `v`, waiting while the queue is full; `Err(v)` once every receiver is gone.
    pub fn send(&self, v: T) -> Result<(), T> {
        let mut st = self.inner.state.lock();
        loop {
            if st.receivers == 0 {
                return Err(v);
            }
            if st.items.len() < st.cap {
                st.items.push_back(v);
                drop(st);
                self.inner.not_empty.notify_one();
                return Ok(());
            }
            self.inner.not_full.wait(&mut st);
        }
    }

    /// Queues `v` only if there is room now.
    pub fn try_send(&self, v: T) -> Result<(), TrySendError<T>> {
        let mut st = self.inner.state.lock();
        if st.receivers == 0 {
            return Err(TrySendError::Disconnected(v));
        }
        if st.items.len() >= st.cap {
            return Err(TrySendError::Full(v));
        }
        st.items.push_back(v);
        drop(st);
        self.inner.not_empty.notify_one();
        Ok(())
    }
}

impl<T> Receiver<T> {
    /// The next value, waiting while the queue is empty; `None` once it is empty and every
    /// sender is gone.
    pub fn recv(&self) -> Option<T> {
        let mut st = self.inner.state.lock();
        loop {
            if let Some(v) = st.items.pop_front() {
                drop(st);
                self.inner.not_full.notify_one();
                return Some(v);
            }
            if st.senders == 0 {
                return None;
            }
            self.inner.not_empty.wait(&mut st);
        }
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.inner.state.lock().senders += 1;
        Sender {
            inner: self.inner.clone(),
        }
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        self.inner.state.lock().receivers += 1;
        Receiver {
            inner: self.inner.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut st = self.inner.state.lock();
        st.senders -= 1;
        if st.senders == 0 {
            drop(st);
            self.inner.not_empty.notify_all();
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut st = self.inner.state.lock();
        st.receivers -= 1;
        if st.receivers == 0 {
            // Nobody will take them: free the values and release blocked senders.
            st.items.clear();
            drop(st);
            self.inner.not_full.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_arrive_in_order_and_the_end_after_the_last_sender() {
        let (tx, rx) = bounded(2);
        let tx2 = tx.clone();
        tx.send(1).unwrap();
        tx2.send(2).unwrap();
        assert_eq!(tx.try_send(3), Err(TrySendError::Full(3)));
        drop(tx);
        assert_eq!(rx.recv(), Some(1));
        tx2.send(3).unwrap();
        drop(tx2);
        assert_eq!(rx.recv(), Some(2));
        assert_eq!(rx.recv(), Some(3));
        assert_eq!(rx.recv(), None);
    }

    #[test]
    fn a_full_send_waits_for_a_receiver_and_fails_once_all_are_gone() {
        let (tx, rx) = bounded(1);
        let tx2 = tx.clone();
        tx.send(1).unwrap();
        let t = std::thread::spawn(move || tx.send(2));
        assert_eq!(rx.recv(), Some(1));
        assert_eq!(rx.recv(), Some(2));
        assert_eq!(t.join().unwrap(), Ok(()));
        drop(rx);
        assert_eq!(tx2.send(3), Err(3));
        assert_eq!(tx2.try_send(4), Err(TrySendError::Disconnected(4)));
    }

    #[test]
    fn workers_share_one_queue_and_each_value_is_taken_once() {
        let (tx, rx) = bounded(4);
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let rx = rx.clone();
                std::thread::spawn(move || std::iter::from_fn(|| rx.recv()).collect::<Vec<u32>>())
            })
            .collect();
        drop(rx);
        for i in 0..100 {
            tx.send(i).unwrap();
        }
        drop(tx);
        let mut all: Vec<u32> = workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
    }
}
