//! A2A tasks over the ask lifecycle: a task is an async ask (its id is the `askId`), and
//! its state is read from `jobs` each time, so owner approval, the answerer and the stored-asks
//! bounds and lifetime are the ask's own. This file keeps only what A2A adds: the task's
//! `contextId`, who asked, and whether the asker canceled it. Entries whose ask has expired are
//! dropped whenever one is added, so there are never more than `maxStoredAsks` of them.
//!
//! Mapping: pending (waiting for the owner) → `TASK_STATE_SUBMITTED`, running →
//! `TASK_STATE_WORKING`, each with a status message; answered → `TASK_STATE_COMPLETED` with
//! the answer as a text artifact; declined → `TASK_STATE_REJECTED`; failed → `TASK_STATE_FAILED`
//! with the error as the status message; canceled by the asker → `TASK_STATE_CANCELED`.

use super::super::jobs::{Jobs, Viewer};
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::HashMap;

/// The artifact id of an answer.
pub const ANSWER_ARTIFACT: &str = "answer";

struct Entry {
    caller: String,
    context_id: String,
    canceled: bool,
}

/// What A2A adds to stored asks.
pub struct Tasks {
    map: Mutex<HashMap<String, Entry>>,
    max: usize,
}

/// A task's state as A2A names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Submitted,
    Working,
    Completed,
    Rejected,
    Failed,
    Canceled,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Submitted => "TASK_STATE_SUBMITTED",
            State::Working => "TASK_STATE_WORKING",
            State::Completed => "TASK_STATE_COMPLETED",
            State::Rejected => "TASK_STATE_REJECTED",
            State::Failed => "TASK_STATE_FAILED",
            State::Canceled => "TASK_STATE_CANCELED",
        }
    }
    pub fn is_terminal(self) -> bool {
        !matches!(self, State::Submitted | State::Working)
    }
    /// The state of an ask's status word.
    pub fn of_ask(status: &str) -> State {
        match status {
            "pending" => State::Submitted,
            "running" => State::Working,
            "answered" => State::Completed,
            "declined" => State::Rejected,
            _ => State::Failed,
        }
    }
}

/// One task as the A2A client sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub id: String,
    pub context_id: String,
    pub state: State,
    /// The status message (why it waits, failed or was refused).
    pub message: Option<String>,
    /// The answer, when completed.
    pub answer: Option<String>,
}

impl Tasks {
    pub fn new(max: usize) -> Tasks {
        Tasks {
            map: Mutex::new(HashMap::new()),
            max: max.max(1),
        }
    }

    /// Records a new task (its ask already stored in `jobs`).
    pub fn add(&self, id: &str, caller: &str, context_id: &str, jobs: &Jobs) {
        let mut map = self.map.lock();
        if map.len() >= self.max {
            map.retain(|id, e| jobs.view(id, Viewer::Friend(&e.caller)).is_some());
        }
        if map.len() < self.max {
            map.insert(
                id.to_string(),
                Entry {
                    caller: caller.to_string(),
                    context_id: context_id.to_string(),
                    canceled: false,
                },
            );
        }
    }

    /// The task `id` as `caller` may see it; `None` for another caller's or an unknown task.
    pub fn snapshot(&self, id: &str, caller: &str, jobs: &Jobs) -> Option<Snapshot> {
        let (context_id, canceled) = {
            let map = self.map.lock();
            let e = map.get(id).filter(|e| e.caller == caller)?;
            (e.context_id.clone(), e.canceled)
        };
        let view = jobs.view(id, Viewer::Friend(caller))?;
        let status = view.status;
        let (state, message, answer) = match State::of_ask(status) {
            _ if canceled => (State::Canceled, Some("canceled by the asker".into()), None),
            State::Submitted => (
                State::Submitted,
                Some("waiting for the owner's approval".into()),
                None,
            ),
            State::Working => (
                State::Working,
                Some("a contained agent is answering".into()),
                None,
            ),
            State::Completed => (State::Completed, None, view.answer),
            s => (s, view.error, None),
        };
        Some(Snapshot {
            id: id.to_string(),
            context_id,
            state,
            message,
            answer,
        })
    }

    /// Marks a task canceled; `Err(state)` when it already ended, `None` when unknown.
    pub fn cancel(&self, id: &str, caller: &str, jobs: &Jobs) -> Option<Result<(), State>> {
        let snap = self.snapshot(id, caller, jobs)?;
        if snap.state.is_terminal() {
            return Some(Err(snap.state));
        }
        if let Some(e) = self.map.lock().get_mut(id) {
            e.canceled = true;
        }
        Some(Ok(()))
    }
}

impl Snapshot {
    fn status(&self) -> TaskStatus {
        TaskStatus {
            state: self.state.name(),
            timestamp: crate::clock::iso8601(crate::clock::now_ms()),
            message: self.message.as_ref().map(|m| Message {
                message_id: format!("{}-{}", self.id, self.state.name()),
                context_id: self.context_id.clone(),
                task_id: self.id.clone(),
                role: "ROLE_AGENT",
                parts: vec![Part {
                    text: m.clone(),
                    media_type: None,
                }],
            }),
        }
    }

    /// The answer artifact, when there is one.
    pub fn artifact(&self) -> Option<Artifact> {
        self.answer.as_ref().map(|a| Artifact {
            artifact_id: ANSWER_ARTIFACT,
            name: "answer",
            parts: vec![Part {
                text: a.clone(),
                media_type: Some("text/plain"),
            }],
        })
    }

    /// The `Task` object.
    pub fn task(&self) -> Task {
        Task {
            id: self.id.clone(),
            context_id: self.context_id.clone(),
            status: self.status(),
            artifacts: self.artifact().into_iter().collect(),
        }
    }

    /// A `TaskStatusUpdateEvent` for a stream.
    pub fn status_update(&self) -> StreamEvent {
        StreamEvent::StatusUpdate {
            task_id: self.id.clone(),
            context_id: self.context_id.clone(),
            status: self.status(),
        }
    }

    /// A `TaskArtifactUpdateEvent` with the whole answer, when there is one.
    pub fn artifact_update(&self) -> Option<StreamEvent> {
        self.artifact().map(|artifact| StreamEvent::ArtifactUpdate {
            task_id: self.id.clone(),
            context_id: self.context_id.clone(),
            artifact,
            last_chunk: true,
        })
    }
}

/// An A2A 1.0 `Task`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub id: String,
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
}

/// A task's `status`: its state, when it was read, and the agent's message about it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    pub state: &'static str,
    pub timestamp: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
}

/// An agent `Message` about a task.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub message_id: String,
    pub context_id: String,
    pub task_id: String,
    pub role: &'static str,
    pub parts: Vec<Part>,
}

/// A text `Part`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media_type: Option<&'static str>,
}

/// The answer as an `Artifact`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    pub artifact_id: &'static str,
    pub name: &'static str,
    pub parts: Vec<Part>,
}

/// One event of a task stream: `{"statusUpdate": …}` or `{"artifactUpdate": …}`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamEvent {
    #[serde(rename_all = "camelCase")]
    StatusUpdate {
        task_id: String,
        context_id: String,
        status: TaskStatus,
    },
    #[serde(rename_all = "camelCase")]
    ArtifactUpdate {
        task_id: String,
        context_id: String,
        artifact: Artifact,
        last_chunk: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ask::answer::Answer;
    use crate::ask::config::AskConfig;
    use crate::ask::jobs::Status;

    #[test]
    fn asks_map_onto_task_states() {
        let jobs = Jobs::new(&AskConfig::default());
        let tasks = Tasks::new(4);
        for (id, st) in [("p", Status::Pending), ("a", Status::Running)] {
            jobs.create(id, "ada", std::net::IpAddr::from([127, 0, 0, 1]), st)
                .unwrap();
            tasks.add(id, "ada", "ctx", &jobs);
        }
        let p = tasks.snapshot("p", "ada", &jobs).unwrap();
        assert_eq!(p.state, State::Submitted);
        assert!(p.message.unwrap().contains("approval"));
        assert!(tasks.snapshot("p", "eve", &jobs).is_none());
        jobs.finish(
            "a",
            Ok(Answer {
                text: "42".into(),
                truncated: false,
            }),
        );
        let a = tasks.snapshot("a", "ada", &jobs).unwrap();
        assert_eq!(a.state, State::Completed);
        assert_eq!(
            serde_json::to_value(a.task()).unwrap()["artifacts"][0]["parts"][0]["text"],
            "42"
        );
        assert_eq!(tasks.cancel("a", "ada", &jobs), Some(Err(State::Completed)));
        assert_eq!(tasks.cancel("p", "ada", &jobs), Some(Ok(())));
        assert_eq!(
            tasks.snapshot("p", "ada", &jobs).unwrap().state,
            State::Canceled
        );
        assert_eq!(State::of_ask("declined"), State::Rejected);
        assert_eq!(State::of_ask("failed"), State::Failed);
    }
}
