//! Resource coordination (the protocol's ResourceCoordinator and CommandCoordinationGate): named
//! capacity-N resources with a strict FIFO queue, fencing tokens, versioned controller
//! policies with epochs, reclamation from process-start evidence, and the `peer run` gate
//! that owns a command's whole process tree. No daemon: processes coordinate through private
//! files under `<coord>/peer-resources/`.
//!
//! - `model`: the resource file's shape and validation; the fence (high-water marks).
//! - `seal`: the checksummed envelope of every file under `peer-resources/`.
//! - `core`: the pure decision of one transaction (`apply`).
//! - `store`: locked, validated, atomic transactions on resource files and `launches.json`.
//! - `notify`: inotify wake-ups for waiters, with a bounded fallback poll.
//! - `principal`: who acts from the command line, and with which capabilities.
//! - `api`: `coordinate`, `wait_for_grant`, `describe`, `events_since`, building the typed
//!   answers of `toolspec::resource_answer`.
//! - `gate`: `peer run`.
//! - `cgroup`: a cgroup v2 per launch, when writable.
//! - `terminal`: terminal foreground hand-over for interactive commands under `peer run`.

pub mod api;
pub(crate) mod cgroup;
pub mod core;
pub(crate) mod gate;
pub mod model;
pub mod notify;
pub(crate) mod principal;
pub mod seal;
pub mod store;
pub(crate) mod terminal;

pub use api::{EventCursor, Request, coordinate, events_since, release_all};
pub use model::ResourceState;
pub use principal::Principal;
