//! `coordinate_resource` for the root's callers: maps the tool's arguments onto the resource
//! coordinator with the caller as principal and this root's process as holder evidence, and
//! turns resource journal entries into `resource_update` events on the root's bus.

use super::core::{Caller, Core};
use crate::error::{Code, Error, Result};
use crate::resource::principal::principal_id;
use crate::resource::{self, EventCursor, Principal};
use crate::tools::ResourceArgs;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Runs one `coordinate_resource` call for `caller`. A request's wait is capped at
/// `Limits.wait_ms_max` (the tool bound; `peer run` has its own, `resourceWaitTimeoutMs`) and
/// ends, with its ticket cancelled, when `cancel` is set (client cancellation or shutdown).
pub fn coordinate(
    core: &Arc<Core>,
    caller: &Caller,
    args: ResourceArgs,
    cancel: &AtomicBool,
) -> Result<Value> {
    let principal = Principal {
        id: principal_id(&caller.peer_id),
        display: caller.alias.clone(),
        capabilities: caller.capabilities.clone(),
    };
    let evidence = resource::evidence::Probe::new().own()?;
    let home = core.ns.home.clone();
    let op = op_json(args, core.limits().wait_ms_max)?;
    let cancelled = || cancel.load(Ordering::SeqCst) || core.stopping.load(Ordering::SeqCst);
    resource::coordinate_cancellable(&home, &core.config, &principal, op, evidence, &cancelled)
}

/// Gives back what a retiring child run (`peer_id`) still reserves: its queued tickets and its
/// grants no command runs under. Call from `local.run.retire`; without it they stay held until
/// the root process ends, because the root's life is their evidence.
pub fn release_run(core: &Core, peer_id: &str) -> Result<usize> {
    let principal = Principal {
        id: principal_id(peer_id),
        display: peer_id.to_string(),
        capabilities: vec![resource::core::CAP_REQUEST.to_string()],
    };
    let evidence = resource::evidence::Probe::new().own()?;
    resource::release_all(&core.ns.home, &core.config, &principal, evidence)
}

fn op_json(args: ResourceArgs, wait_ms_max: u64) -> Result<Value> {
    let mut m = Map::new();
    let mut put = |k: &str, v: Value| {
        if !v.is_null() {
            m.insert(k.to_string(), v);
        }
    };
    match args {
        ResourceArgs::Status { resource } => {
            put("op", json!("status"));
            put("resource", json!(resource));
        }
        ResourceArgs::Request {
            resource,
            capacity,
            wait_ms,
            epoch,
        } => {
            put("op", json!("request"));
            put("epoch", json!(epoch));
            put("resource", json!(resource));
            put("capacity", json!(capacity));
            put("waitMs", json!(wait_ms.map(|w| w.min(wait_ms_max))));
        }
        ResourceArgs::Grant {
            resource,
            ticket,
            epoch,
        } => {
            put("op", json!("grant"));
            put("epoch", json!(epoch));
            put("resource", json!(resource));
            put("ticket", json!(ticket));
        }
        ResourceArgs::Release {
            resource,
            ticket,
            token,
        } => {
            put("op", json!("release"));
            put("resource", json!(resource));
            put("ticket", json!(ticket));
            if let Some(t) = token {
                let n: u64 = t.parse().map_err(|_| {
                    Error::new(
                        Code::Usage,
                        "coordinate_resource: token must be a fencing token number",
                    )
                })?;
                put("token", json!(n));
            }
        }
        ResourceArgs::CancelRequest { resource, ticket } => {
            put("op", json!("cancel_request"));
            put("resource", json!(resource));
            put("ticket", json!(ticket));
        }
        ResourceArgs::SetController {
            resource,
            capacity,
            force,
            automatic,
        } => {
            put("op", json!("set_controller"));
            put("automatic", json!(automatic));
            put("resource", json!(resource));
            put("capacity", json!(capacity));
            put("force", json!(force));
        }
    }
    Ok(Value::Object(m))
}

/// Polls the resource journals and publishes new `resource_update` events; returns the
/// cursor to pass next time. The first call only positions the cursor.
pub fn publish_events(core: &Core, cursor: Option<EventCursor>) -> Option<EventCursor> {
    let from = cursor.clone().unwrap_or_default();
    match resource::events_since(&core.ns.coord, core.limits(), None, &from) {
        Ok((events, next)) => {
            if cursor.is_some() {
                for e in events {
                    core.bus.publish(e);
                }
            }
            Some(next)
        }
        Err(_) => cursor,
    }
}

/// The thread that turns resource journal changes into `resource_update` events. It sleeps in
/// `poll` on an inotify watch of the resources directory (every change to a resource file is a
/// rename onto it) and on `stop`'s peer, which the root drops to end it; a fallback re-read
/// every `heartbeatMs` covers what inotify cannot report. An idle root is not woken otherwise.
pub fn spawn_events(
    core: Arc<Core>,
    mut cursor: Option<EventCursor>,
) -> Result<(std::os::unix::net::UnixStream, std::thread::JoinHandle<()>)> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    use std::os::fd::AsFd;
    let (stop, stopped) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| Error::new(Code::Io, format!("cannot create a socket pair: {e}")))?;
    let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok();
    let watch = move |inotify: &Inotify, dir: &std::path::Path, flags| {
        inotify
            .add_watch(dir, flags | AddWatchFlags::IN_ONLYDIR)
            .is_ok()
    };
    let coord = core.ns.coord.clone();
    let dir = core.ns.resources_dir();
    let handle = std::thread::Builder::new()
        .name("resource-events".into())
        .spawn(move || {
            let fallback = core.limits().heartbeat_ms;
            let mut watching = false;
            // The directory may appear later: its creation in `coord` wakes us too.
            let coord_watched = inotify.as_ref().is_some_and(|i| {
                watch(
                    i,
                    &coord,
                    AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO,
                )
            });
            loop {
                if !watching && let Some(i) = &inotify {
                    watching = watch(i, &dir, AddWatchFlags::IN_MOVED_TO);
                    // Whatever changed before the watch existed is read below.
                    cursor = publish_events(&core, cursor);
                }
                let wait = if watching || coord_watched {
                    fallback
                } else {
                    crate::config::internal::WORKER_TICK_MS
                };
                let mut fds = vec![PollFd::new(stopped.as_fd(), PollFlags::POLLIN)];
                if let Some(i) = &inotify {
                    fds.push(PollFd::new(i.as_fd(), PollFlags::POLLIN));
                }
                let timeout = PollTimeout::from(wait.min(u64::from(u16::MAX)) as u16);
                match poll(&mut fds, timeout) {
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(wait)),
                }
                if fds[0].revents().is_some_and(|r| !r.is_empty())
                    || core.stopping.load(Ordering::SeqCst)
                {
                    return;
                }
                if let Some(i) = &inotify {
                    // Drain: one re-read covers every queued change.
                    while matches!(i.read_events(), Ok(ev) if !ev.is_empty()) {}
                }
                cursor = publish_events(&core, cursor);
            }
        })
        .map_err(|e| {
            Error::new(
                Code::Io,
                format!("cannot start the resource events thread: {e}"),
            )
        })?;
    Ok((stop, handle))
}
