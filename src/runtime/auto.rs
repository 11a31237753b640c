//! Automatic idle behaviour: `peer host` runs the configured handler command for arrivals, one
//! at a time, with wakeups coalesced, cancelled on shutdown, and a per-conversation budget of
//! automatic messages (`automaticReplies`) that stops reply ping-pong between two auto peers.
//! `Auto` is the root's part: the budget, the token that marks a handler's calls and the
//! running handler.

use crate::error::{Code, Error, Result};
use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Environment variable carrying the token that marks a handler's sends as automatic.
pub const ENV_AUTO: &str = "PEER_AUTO";
use crate::config::internal::ARRIVALS_QUEUED_MAX;
use crate::config::internal::BUDGET_CONVERSATIONS_MAX;

/// Counts automatic messages per correlation id.
pub struct Budget {
    max: u64,
    used: Mutex<(HashMap<String, u64>, std::collections::VecDeque<String>)>,
}

impl Budget {
    pub fn new(max: u64) -> Budget {
        Budget {
            max,
            used: Mutex::new((HashMap::new(), std::collections::VecDeque::new())),
        }
    }

    /// Whether another automatic message may go out in this conversation.
    pub fn remaining(&self, correlation: &str) -> u64 {
        let used = self.used.lock().0.get(correlation).copied().unwrap_or(0);
        self.max.saturating_sub(used)
    }

    /// Takes one unit or refuses with the reason the model should see.
    pub fn take(&self, correlation: &str) -> Result<()> {
        let mut guard = self.used.lock();
        let (map, order) = &mut *guard;
        let used = map.entry(correlation.to_string()).or_insert_with(|| {
            order.push_back(correlation.to_string());
            0
        });
        if *used >= self.max {
            return Err(Error::new(
                Code::RateLimited,
                format!(
                    "the automatic-reply budget of {} messages for conversation {} is used up; a deliberate user message starts a new one",
                    self.max,
                    crate::sanitize::line(correlation, 60)
                ),
            ));
        }
        *used += 1;
        while order.len() > BUDGET_CONVERSATIONS_MAX {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
        Ok(())
    }
}

/// A root's automatic idle behaviour: the budget, the token its handler's calls carry and
/// the handler runner (only in auto idle behaviour, once started).
pub struct Auto {
    budget: Arc<Budget>,
    token: String,
    runner: Mutex<Option<Runner>>,
}

impl Auto {
    /// A budget of `max` automatic messages per conversation and a fresh random token.
    pub fn new(max: u64) -> Auto {
        let mut token = [0u8; 16];
        crate::identity::random_bytes(&mut token);
        Auto {
            budget: Arc::new(Budget::new(max)),
            token: crate::identity::hex(&token),
            runner: Mutex::new(None),
        }
    }

    /// The token a handler run gets in [`ENV_AUTO`].
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Whether a call carrying `token` comes from the handler (compared in constant time).
    pub fn is_automatic(&self, token: Option<&str>) -> bool {
        token.is_some_and(|t| crate::identity::ct_eq(t.as_bytes(), self.token.as_bytes()))
    }

    /// Spends one automatic message of `correlation`'s conversation (see [`Budget::take`]).
    pub fn take(&self, correlation: &str) -> Result<()> {
        self.budget.take(correlation)
    }

    /// Starts the handler runner with `command` and `env`.
    pub fn start(&self, command: Vec<String>, env: Vec<(String, String)>) -> Result<()> {
        *self.runner.lock() = Some(Runner::start(command, env, self.budget.clone())?);
        Ok(())
    }

    /// Wakes the handler, when one runs, for the arrival `a` builds (built only then).
    pub fn offer(&self, a: impl FnOnce() -> Arrival) {
        if let Some(runner) = self.runner.lock().as_ref() {
            runner.offer(a());
        }
    }

    /// Stops the handler, if one runs.
    pub fn shutdown(&self) {
        if let Some(runner) = self.runner.lock().take() {
            runner.shutdown();
        }
    }
}

/// One arrival the handler may act on.
#[derive(Clone, Debug)]
pub struct Arrival {
    pub message_id: String,
    pub from: String,
    pub correlation_id: String,
    pub recipient: String,
}

/// The handler thread and its queue.
pub struct Runner {
    tx: Option<Sender<Arrival>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Runner {
    /// Starts the handler thread. `env` is added to every handler run (control file, token).
    pub fn start(
        command: Vec<String>,
        env: Vec<(String, String)>,
        budget: Arc<Budget>,
    ) -> Result<Runner> {
        if command.is_empty() {
            return Err(Error::new(
                Code::ConfigInvalid,
                "idleBehavior auto needs sessions.communication.autoCommand",
            ));
        }
        let (tx, rx) = bounded::<Arrival>(ARRIVALS_QUEUED_MAX);
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("auto-handler".into())
            .spawn(move || handler_loop(&command, &env, &rx, &budget, &stop2))
            .map_err(|e| {
                Error::new(
                    Code::Io,
                    format!("cannot start the auto handler thread: {e}"),
                )
            })?;
        Ok(Runner {
            tx: Some(tx),
            stop,
            handle: Some(handle),
        })
    }

    /// Offers an arrival; when the queue is full the handler will see it through the inbox on
    /// its next run (arrivals are durable, the queue only wakes the handler).
    pub fn offer(&self, a: Arrival) {
        if let Some(tx) = &self.tx {
            match tx.try_send(a) {
                Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
            }
        }
    }

    /// Cancels a running handler (its whole process group) and joins the thread.
    pub fn shutdown(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.tx.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn handler_loop(
    command: &[String],
    env: &[(String, String)],
    rx: &Receiver<Arrival>,
    budget: &Budget,
    stop: &AtomicBool,
) {
    while let Ok(first) = rx.recv() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        // Coalesce: everything queued now is handled by this one run, newest first.
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        let Some(a) = batch
            .into_iter()
            .rev()
            .find(|a| budget.remaining(&a.correlation_id) > 0)
        else {
            continue;
        };
        run_once(command, env, &a, stop);
    }
}

fn run_once(command: &[String], env: &[(String, String)], a: &Arrival, stop: &AtomicBool) {
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..])
        .envs(env.iter().cloned())
        .env("PEER_MESSAGE_ID", &a.message_id)
        .env("PEER_MESSAGE_FROM", &a.from)
        .env("PEER_CORRELATION_ID", &a.correlation_id)
        .env("PEER_RECIPIENT", &a.recipient)
        .stdin(Stdio::null())
        .process_group(0);
    let Ok(mut child) = cmd.spawn() else {
        return;
    };
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return,
            Ok(None) => {}
        }
        if stop.load(Ordering::SeqCst) {
            // Cancellation on shutdown: the whole handler tree.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = child.wait();
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_stops_at_the_limit_per_conversation() {
        let b = Budget::new(2);
        assert!(b.take("c1").is_ok());
        assert!(b.take("c1").is_ok());
        assert_eq!(b.take("c1").unwrap_err().code, Code::RateLimited);
        assert_eq!(b.remaining("c1"), 0);
        assert!(b.take("c2").is_ok());
    }

    #[test]
    fn only_the_roots_own_token_marks_a_call_automatic() {
        let auto = Auto::new(1);
        assert!(auto.is_automatic(Some(auto.token())));
        assert!(!auto.is_automatic(None));
        assert!(!auto.is_automatic(Some("")));
        assert!(!auto.is_automatic(Some(Auto::new(1).token())));
        assert_eq!(auto.token().len(), 32, "16 random bytes in hex");
        // No handler runs: an arrival is not even built.
        auto.offer(|| unreachable!("built without a handler"));
    }
}
