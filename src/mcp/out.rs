//! The MCP server's stdout, shared by every thread that answers (the reader, the tool workers,
//! the event forwarder) without a writer thread: a message is queued (bounded by
//! `outgoingFrames`; a sender waits while it is full), and whoever queued it writes the queue
//! out unless another thread is writing already, which then writes it too. A tool answer thus
//! leaves from the worker that made it, with no hand-off to another thread (a wake-up on
//! another CPU) per request, and a slow client still holds at most the bound. A message is
//! queued as its finished line, serialised by the thread that made it before any lock is
//! taken.

use parking_lot::{Condvar, Mutex};
use serde_json::Value;
use std::collections::VecDeque;
use std::io::Write;

struct Queue {
    /// Complete lines, each ending in `\n`.
    items: VecDeque<Vec<u8>>,
    cap: usize,
    /// A write failed (stdout is gone): nothing more is queued or written.
    closed: bool,
}

/// Shared stdout; see the module comment.
pub(crate) struct Output<W> {
    queue: Mutex<Queue>,
    space: Condvar,
    writer: Mutex<W>,
}

/// Stdout failed: the message was not written and nothing later will be.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Closed;

impl<W: Write> Output<W> {
    /// Queues at most `cap` (at least 1) messages while one thread writes.
    pub fn new(writer: W, cap: usize) -> Output<W> {
        Output {
            queue: Mutex::new(Queue {
                items: VecDeque::new(),
                cap: cap.max(1),
                closed: false,
            }),
            space: Condvar::new(),
            writer: Mutex::new(writer),
        }
    }

    /// Queues `msg` as one line (waiting while the queue is full) and writes the queue out
    /// unless another thread is writing. Errors once stdout has failed.
    pub fn send(&self, msg: &Value) -> Result<(), Closed> {
        // serde_json escapes every control character, so one message is one line.
        let mut line = serde_json::to_vec(msg).unwrap_or_default();
        line.push(b'\n');
        self.send_line(line)
    }

    /// [`send`](Self::send) for a message already written as JSON text: `line` is one
    /// compact JSON object followed by `\n`.
    pub fn send_line(&self, line: Vec<u8>) -> Result<(), Closed> {
        debug_assert_eq!(line.iter().position(|&b| b == b'\n'), Some(line.len() - 1));
        {
            let mut q = self.queue.lock();
            loop {
                if q.closed {
                    return Err(Closed);
                }
                if q.items.len() < q.cap {
                    q.items.push_back(line);
                    break;
                }
                self.space.wait(&mut q);
            }
        }
        self.drain();
        Ok(())
    }

    /// Writes queued messages until none is left. Whoever holds the writer drains; a message
    /// queued just before that holder let go is seen by its re-check after letting go.
    fn drain(&self) {
        loop {
            let Some(mut w) = self.writer.try_lock() else {
                return;
            };
            loop {
                let Some(line) = self.queue.lock().items.pop_front() else {
                    break;
                };
                self.space.notify_one();
                if w.write_all(&line).and_then(|()| w.flush()).is_err() {
                    let mut q = self.queue.lock();
                    q.closed = true;
                    q.items.clear();
                    drop(q);
                    self.space.notify_all();
                    return;
                }
            }
            drop(w);
            if self.queue.lock().items.is_empty() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    /// A writer that fails after `ok` writes.
    struct Failing {
        lines: Arc<Mutex<Vec<u8>>>,
        ok: usize,
    }

    impl Write for Failing {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.ok == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
            }
            self.ok -= 1;
            self.lines.lock().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_message_from_every_thread_is_written_once_as_one_line() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = Output::new(
            Failing {
                lines: lines.clone(),
                ok: usize::MAX,
            },
            2,
        );
        std::thread::scope(|s| {
            for t in 0..4 {
                let out = &out;
                s.spawn(move || {
                    for i in 0..50 {
                        out.send(&json!({"t": t, "i": i})).unwrap();
                    }
                });
            }
        });
        let text = String::from_utf8(lines.lock().clone()).unwrap();
        let mut seen: Vec<(u64, u64)> = text
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (v["t"].as_u64().unwrap(), v["i"].as_u64().unwrap())
            })
            .collect();
        seen.sort_unstable();
        let want: Vec<(u64, u64)> = (0..4).flat_map(|t| (0..50).map(move |i| (t, i))).collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn a_failed_write_closes_the_output() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = Output::new(
            Failing {
                lines: lines.clone(),
                ok: 1,
            },
            4,
        );
        assert_eq!(out.send(&json!(1)), Ok(()));
        // Queued, then its write fails: the output closes.
        assert_eq!(out.send(&json!(2)), Ok(()));
        assert_eq!(out.send_line(b"3\n".to_vec()), Err(Closed));
        assert_eq!(lines.lock().as_slice(), b"1\n");
    }
}
