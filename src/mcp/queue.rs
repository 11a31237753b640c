//! A bounded multi-producer, multi-consumer queue whose receive parks at once on a condition
//! variable; a send never waits (it fails when the queue is full). The MCP server hands every
//! tool call from its reader to the tool workers over it; a channel receive would first spin
//! and call `sched_yield` several times before it parks, on every idle worker, per request.

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
    });
    (
        Sender {
            inner: inner.clone(),
        },
        Receiver { inner },
    )
}

impl<T> Sender<T> {
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
            // Nobody will take them.
            st.items.clear();
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
        tx.try_send(1).unwrap();
        tx2.try_send(2).unwrap();
        assert_eq!(tx.try_send(3), Err(TrySendError::Full(3)));
        drop(tx);
        assert_eq!(rx.recv(), Some(1));
        tx2.try_send(3).unwrap();
        drop(tx2);
        assert_eq!(rx.recv(), Some(2));
        assert_eq!(rx.recv(), Some(3));
        assert_eq!(rx.recv(), None);
    }

    #[test]
    fn sends_fail_once_every_receiver_is_gone() {
        let (tx, rx) = bounded(1);
        let rx2 = rx.clone();
        drop(rx);
        tx.try_send(1).unwrap();
        assert_eq!(rx2.recv(), Some(1));
        drop(rx2);
        assert_eq!(tx.try_send(2), Err(TrySendError::Disconnected(2)));
    }

    #[test]
    fn workers_share_one_queue_and_each_value_is_taken_once() {
        let (tx, rx) = bounded(100);
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let rx = rx.clone();
                std::thread::spawn(move || std::iter::from_fn(|| rx.recv()).collect::<Vec<u32>>())
            })
            .collect();
        drop(rx);
        for i in 0..100 {
            tx.try_send(i).unwrap();
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
