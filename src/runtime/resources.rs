//! `coordinate_resource` for the root's callers: maps the tool's arguments onto a typed
//! resource request with the caller as principal and this root's process as holder evidence, and
//! turns resource journal entries into `resource_update` events on the root's bus.

use super::core::{Caller, Core};
use crate::error::{Code, Error, Result};
use crate::resource::core::{Op, Target};
use crate::resource::principal::principal_id;
use crate::resource::{self, EventCursor, Principal};
use crate::toolspec::ResourceArgs;
use crate::toolspec::resource_answer::ResourceAnswer;
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
) -> Result<ResourceAnswer> {
    let principal = Principal {
        id: principal_id(&caller.peer_id),
        display: caller.alias.clone(),
        capabilities: caller.capabilities.to_vec(),
    };
    let evidence = crate::process::Probe::new().own()?;
    let home = core.site.home().to_path_buf();
    let request = request_of(args, core.limits().wait_ms_max)?;
    let cancelled = || cancel.load(Ordering::SeqCst) || core.stopping.load(Ordering::SeqCst);
    resource::coordinate(
        &home,
        core.site.config(),
        &principal,
        request,
        evidence,
        &cancelled,
    )
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
    let evidence = crate::process::Probe::new().own()?;
    resource::release_all(core.site.home(), core.site.config(), &principal, evidence)
}

/// The tool's arguments as a typed coordination request (a request waits at most
/// `wait_ms_max`).
fn request_of(args: ResourceArgs, wait_ms_max: u64) -> Result<resource::Request> {
    let capacity = |c: Option<u64>| {
        c.map(|c| u32::try_from(c).map_err(|_| Error::new(Code::Usage, "capacity is too large")))
            .transpose()
    };
    let (resource, op, wait_ms) = match args {
        ResourceArgs::Status { resource } => (resource, Op::Status, 0),
        ResourceArgs::Request {
            resource,
            capacity: c,
            wait_ms,
            epoch,
        } => (
            Some(resource),
            Op::Request {
                capacity: capacity(c)?,
                epoch,
            },
            wait_ms.map_or(0, |w| w.min(wait_ms_max)),
        ),
        ResourceArgs::Grant {
            resource,
            ticket,
            epoch,
        } => (Some(resource), Op::Grant { ticket, epoch }, 0),
        ResourceArgs::Release {
            resource,
            ticket,
            token,
        } => {
            // A bad name is reported before a contradictory target, as `peer res` does.
            resource::model::canonical_name(&resource)?;
            let target = Target::of_release(ticket, token)?;
            (Some(resource), Op::Release { target }, 0)
        }
        ResourceArgs::CancelRequest { resource, ticket } => {
            (Some(resource), Op::Cancel { ticket }, 0)
        }
        ResourceArgs::SetController {
            resource,
            capacity: c,
            force,
            automatic,
        } => (
            Some(resource),
            Op::SetController {
                capacity: capacity(c)?,
                force,
                automatic,
                ledger: Vec::new(),
            },
            0,
        ),
    };
    Ok(resource::Request {
        resource,
        op,
        wait_ms,
    })
}

/// Polls the resource journals and publishes new `resource_update` events; returns the
/// cursor to pass next time. The first call only positions the cursor.
pub fn publish_events(core: &Core, cursor: Option<EventCursor>) -> Option<EventCursor> {
    let from = cursor.clone().unwrap_or_default();
    match resource::events_since(&core.site.ns().coord, core.limits(), None, &from) {
        Ok((events, next)) => {
            if cursor.is_some() {
                for e in events {
                    core.bus.publish(&e);
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
    let coord = core.site.ns().coord.clone();
    let dir = core.site.ns().resources_dir();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The tool's arguments map onto the typed request `peer res` builds for the same call
    /// (a request's wait capped at the tool bound), and its errors are the same usage errors.
    #[test]
    fn tool_arguments_map_to_typed_requests() {
        let r = |s: &str| s.to_string();
        let want = |resource: Option<&str>, op, wait_ms| resource::Request {
            resource: resource.map(str::to_string),
            op,
            wait_ms,
        };
        let same = [
            (
                ResourceArgs::Status { resource: None },
                want(None, Op::Status, 0),
            ),
            (
                ResourceArgs::Request {
                    resource: r("port:1"),
                    capacity: Some(2),
                    wait_ms: Some(5_000),
                    epoch: Some(3),
                },
                want(
                    Some("port:1"),
                    Op::Request {
                        capacity: Some(2),
                        epoch: Some(3),
                    },
                    1_000,
                ),
            ),
            (
                ResourceArgs::Grant {
                    resource: r("port:1"),
                    ticket: r("t-1"),
                    epoch: None,
                },
                want(
                    Some("port:1"),
                    Op::Grant {
                        ticket: r("t-1"),
                        epoch: None,
                    },
                    0,
                ),
            ),
            (
                ResourceArgs::Release {
                    resource: r(" port:1 "),
                    ticket: None,
                    token: Some(7),
                },
                want(
                    Some("port:1"),
                    Op::Release {
                        target: Target::Token(7),
                    },
                    0,
                ),
            ),
            (
                ResourceArgs::Release {
                    resource: r("port:1"),
                    ticket: None,
                    token: None,
                },
                want(
                    Some("port:1"),
                    Op::Release {
                        target: Target::Mine,
                    },
                    0,
                ),
            ),
            (
                ResourceArgs::CancelRequest {
                    resource: r("port:1"),
                    ticket: r("t-2"),
                },
                want(Some("port:1"), Op::Cancel { ticket: r("t-2") }, 0),
            ),
            (
                ResourceArgs::SetController {
                    resource: r("port:1"),
                    capacity: None,
                    force: true,
                    automatic: false,
                },
                want(
                    Some("port:1"),
                    Op::SetController {
                        capacity: None,
                        force: true,
                        automatic: false,
                        ledger: Vec::new(),
                    },
                    0,
                ),
            ),
        ];
        for (args, expected) in same {
            let mut typed = request_of(args.clone(), 1_000).unwrap();
            typed.resource = typed
                .resource
                .map(|n| crate::resource::model::canonical_name(&n).unwrap());
            assert_eq!(typed, expected, "{args:?}");
        }
        let both = ResourceArgs::Release {
            resource: r("port:1"),
            ticket: Some(r("t")),
            token: Some(1),
        };
        assert_eq!(request_of(both, 1).unwrap_err().code, Code::Usage);
        let big = ResourceArgs::Request {
            resource: r("port:1"),
            capacity: Some(u64::from(u32::MAX) + 1),
            wait_ms: None,
            epoch: None,
        };
        assert_eq!(request_of(big, 1).unwrap_err().code, Code::Usage);
    }
}
