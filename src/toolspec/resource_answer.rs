//! What resource coordination answers, as typed results: the answer to one
//! `coordinate_resource` operation (also `peer res`), the description of one resource (also a
//! `peer-res` line), a resource file that could not be read, and the `resource_update` event.
//! The resource layer builds them; the front ends (MCP, the local channel, `--json` output, the
//! event bus) encode them as the JSON objects they have always been. Fields are declared in the
//! sorted order those objects have always had, `null` where an absent value was `null`, left
//! out where it was left out.

use serde::Serialize;
use std::path::PathBuf;

/// The answer of one coordination operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ResourceAnswer {
    /// `status` of every resource.
    All(AllStatus),
    /// `status` of one resource.
    One(OneStatus),
    /// A ticket's new state (`request`, `grant`, `release`, `cancel_request`).
    Ticket(TicketAnswer),
    /// A controller policy change (`set_controller`).
    Policy(PolicyAnswer),
}

/// `status` of every resource: the readable ones, and the files that could not be read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AllStatus {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub corrupt: Vec<CorruptFile>,
    pub ok: bool,
    pub op: &'static str,
    pub resources: Vec<ResourceView>,
}

/// `status` of one resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OneStatus {
    pub ok: bool,
    pub op: &'static str,
    pub resource: String,
    pub resources: Vec<ResourceView>,
}

/// Where a ticket stands after an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TicketState {
    Queued,
    Granted,
    /// Granted to a `peer run` gate that runs its command under it.
    Admitted,
    Released,
    Cancelled,
}

/// A ticket's new state: its queue position while queued, its fencing token and epoch once
/// granted, the token it gave back once released.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TicketAnswer {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    pub ok: bool,
    pub op: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<usize>,
    pub resource: String,
    pub state: TicketState,
    pub ticket: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
}

/// The policy a `set_controller` left.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PolicyAnswer {
    pub capacity: u32,
    pub epoch: u64,
    pub ok: bool,
    pub op: &'static str,
    pub resource: String,
}

/// A resource file that could not be read: its path, the error's code name and message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CorruptFile {
    pub code: &'static str,
    pub corrupt: String,
    pub message: String,
}

/// One resource: policy, epoch, capacity, controller, holders, blockers, queue and its
/// launches. Strings are the stored (validated) ones; human renderers sanitize again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceView {
    /// Grants revoked by a policy change whose holders still run.
    pub blockers: Vec<HolderView>,
    pub capacity: u32,
    pub controller: Option<ControllerView>,
    pub epoch: u64,
    pub hash: String,
    pub holders: Vec<HolderView>,
    pub launches: Vec<LaunchView>,
    pub next_token: u64,
    /// `controlled` or `automatic`.
    pub policy: &'static str,
    pub queue: Vec<QueuedView>,
    pub resource: String,
    pub sequence: u64,
}

/// A holder (or blocker) of a resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HolderView {
    pub admitted: bool,
    pub age_ms: u64,
    pub display: String,
    pub epoch: u64,
    pub granted_at: u64,
    /// `alive`, `gone` or `unknown`: the verdict of the holder's process evidence.
    pub life: &'static str,
    pub pid: u32,
    pub principal: String,
    pub ticket: String,
    pub token: u64,
}

/// The controller of a controlled resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ControllerView {
    pub display: String,
    /// `alive`, `gone` or `unknown`.
    pub life: &'static str,
    pub pid: u32,
    pub principal: String,
    pub since: u64,
}

/// A queued ticket, `position` counting from 1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuedView {
    pub age_ms: u64,
    pub display: String,
    pub pid: u32,
    pub position: usize,
    pub principal: String,
    pub requested_at: u64,
    pub ticket: String,
}

/// A command `peer run` launched under a grant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchView {
    pub age_ms: u64,
    pub cgroup: Option<PathBuf>,
    pub child_pid: Option<u32>,
    pub command: String,
    pub display: String,
    pub epoch: u64,
    pub gate_pid: u32,
    pub groups: Vec<i32>,
    pub pgid: Option<i32>,
    pub started_at: u64,
    pub ticket: String,
    pub token: u64,
    /// `cgroup` or `subreaper+groups`: how the launch's processes are followed.
    pub tracking: &'static str,
}

/// A `resource_update` event: one resource journal entry. `missed` counts the entries before it
/// that fell out of the bounded journal unseen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ResourceUpdate {
    pub at: u64,
    pub epoch: u64,
    /// Always `resource_update`.
    pub event: &'static str,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missed: Option<u64>,
    pub request: Option<String>,
    pub resource: String,
    pub sequence: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
}
