//! `peer host [-- CMD…]`: runs a root for a session until it is told to stop (or until CMD
//! exits), printing the ready line and events, and cleaning up exactly its own records.
//!
//! While CMD runs it owns the terminal: the host writes nothing into it unless asked to with
//! `--notify bell|stderr`. Arrivals reach the session through `peer inbox [--follow]`, the
//! MCP notification, or `--json` events on a stdout that is not a terminal.

use super::signals::Stop;
use super::{Ctx, args, out};
use crate::config::internal::HOST_EVENT_GATHER as EVENT_GATHER;
use crate::error::{Code, Error, Result};
use crate::runtime::events::Event;
use crate::runtime::{Root, RootOptions};
use std::ffi::OsString;
use std::io::IsTerminal;
use std::sync::Arc;

pub const HELP: &str = "usage: peer host [--alias A] [--session-id S] [--workspace DIR]
                 [--notify bell|stderr|none] [--json] [-- CMD [ARG…]]

Starts a root for this session: an endpoint, a durable inbox and a presence record. With CMD,
runs it as a child whose peer commands act for this session (the running peer's directory
first in its PATH), and exits with its status. Without CMD, runs until SIGINT, SIGTERM or
SIGHUP. --notify says how an arrival is announced: a terminal bell, a line on stderr, or
nothing (the default while CMD has the terminal; stderr without CMD). With ask.listen true in
config.json, the ask server for friends on other machines runs beside it (peer-ask(1)).
See peer(1).
";

/// How the host announces an arriving message to a person.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Notify {
    /// A BEL on stderr: audible or visible per terminal, never text inside CMD's screen.
    Bell,
    /// One sanitized line on stderr.
    Stderr,
    /// Nothing: `peer inbox`, `--follow` and MCP notifications carry arrivals.
    None,
}

impl Notify {
    fn parse(s: &str) -> Result<Notify> {
        match s {
            "bell" => Ok(Notify::Bell),
            "stderr" => Ok(Notify::Stderr),
            "none" => Ok(Notify::None),
            _ => Err(Error::new(
                Code::Usage,
                "--notify takes bell, stderr or none",
            )),
        }
    }
}

struct HostArgs {
    opts: RootOptions,
    command: Vec<OsString>,
    notify: Option<Notify>,
}

fn parse(ctx: &Ctx, argv: Vec<OsString>) -> Result<Option<HostArgs>> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let mut opts = RootOptions {
        home: ctx.home.clone(),
        alias: ctx.as_alias.clone(),
        mode: "command",
        ..Default::default()
    };
    let mut command = Vec::new();
    let mut notify = None;
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("notify") => notify = Some(Notify::parse(&args::string(&mut p, "--notify")?)?),
            Long("alias") => opts.alias = Some(args::string(&mut p, "--alias")?),
            Long("session-id") => opts.session_id = Some(args::string(&mut p, "--session-id")?),
            Long("workspace") => opts.workspace = Some(args::string(&mut p, "--workspace")?.into()),
            Long("help") | Short('h') => return Ok(None),
            Value(v) => {
                command.push(v);
                command.extend(p.raw_args().map_err(args::usage)?);
            }
            other => return Err(args::unexpected(other)),
        }
    }
    // Presence shows what the session runs: the command's file name, or the host itself.
    opts.purpose = Some(match command.first() {
        Some(c) => std::path::Path::new(c)
            .file_name()
            .unwrap_or(c.as_os_str())
            .to_string_lossy()
            .into_owned(),
        None => "peer host".into(),
    });
    Ok(Some(HostArgs {
        opts,
        command,
        notify,
    }))
}

pub fn cmd(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    // With a command, peerwire's own failures exit 125 (see `exit`), whatever their code.
    let wraps = argv.iter().any(|a| a == "--");
    let a = match parse(ctx, argv) {
        Ok(a) => a,
        Err(e) if wraps => return Ok(super::exit::wrapper_failed(ctx, &e)),
        Err(e) => return Err(e),
    };
    if let Some(a) = &a
        && !a.command.is_empty()
    {
        return Ok(match host(ctx, a) {
            Ok(status) => status,
            Err(e) => super::exit::wrapper_failed(ctx, &e),
        });
    }
    match a {
        Some(a) => host(ctx, &a),
        None => host_help(),
    }
}

fn host_help() -> Result<i32> {
    out::text(HELP)?;
    Ok(0)
}

fn host(ctx: &Ctx, a: &HostArgs) -> Result<i32> {
    let stop = ctx.stop()?;
    let root = Root::start(&a.opts)?;
    warn_shared_alias(&root, "peer host");
    let ask = ask_beside(&root)?;
    let shows = Shows::of(ctx, a);
    // A host that shows nothing subscribes to nothing: arrivals then neither queue events
    // nor wake this thread.
    let (bell, events) = subscribe(&root, shows.json || shows.notify != Notify::None);
    let ready = if ctx.json {
        let mut ready = serde_json::json!(root.ready_event());
        if let Some(h) = &ask {
            ready["ask"] = serde_json::to_value(crate::ask::discovery::views::server_view(h))
                .unwrap_or_default();
        }
        super::print_json(&ready)
    } else {
        out::line(&format!(
            "peer host: ready as {} ({}) in {}",
            root.core.me.alias(),
            root.core.me.peer_id(),
            crate::sanitize::line(&root.core.site.workspace().workspace.to_string_lossy(), 200)
        ))
        .and_then(|()| match &ask {
            Some(h) => out::line(&format!(
                "peer host: ask server listening on {}",
                h.state.listen
            )),
            None => Ok(()),
        })
    };
    // Without CMD, a reader of our output that went away ends the host (quietly, after its
    // cleanup); with CMD, the child owns the session's lifetime and output merely stops.
    let mut output_open = ready.is_ok();
    if a.command.is_empty() {
        ready?;
    }
    // Whether events were drained (so more are likely to follow: see `Wake::gather`).
    let mut drain = || -> Result<bool> {
        let drained = events
            .as_ref()
            .is_some_and(|rx| show_events(rx, &shows, &mut output_open));
        if output_open || !a.command.is_empty() {
            Ok(drained)
        } else {
            Err(out::closed())
        }
    };
    let wake = Wake::new(&stop, events.clone(), bell)?;
    let status = if a.command.is_empty() {
        wait_for_signal(&stop, &wake, &mut drain)
    } else {
        run_child(&root, &a.command, &stop, &wake, &mut drain)
    };
    if let Some(h) = ask {
        h.stop();
    }
    root.shutdown();
    status
}

/// The cross-machine ask server a session root (`peer host`, `peer mcp`) runs beside itself
/// when `ask.listen` is true (it writes nothing to stdout). On an error the caller returns and
/// its `Root` stops as it drops.
pub(super) fn ask_beside(root: &Root) -> Result<Option<crate::ask::server::ServerHandle>> {
    let h = crate::ask::discovery::server::serve_beside_root(
        root.core.site.home(),
        &root.core.site.workspace().workspace,
    )?;
    if let Some(h) = &h {
        publish_ask_notices(root, h);
    }
    Ok(h)
}

/// An ask waiting for the owner, as a root's bus event: `peer host --json` prints it,
/// `--notify` announces it, `peer mcp` forwards it to the owner's own model as a
/// `notifications/message`. It names no decide command: the model may tell the owner, but
/// deciding is the owner's (`peer ask decide`, shown on the host's stderr line); the ask tools
/// have no decide tool.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct AskPending {
    event: &'static str,
    kind: &'static str,
    ask_id: String,
    short_id: String,
    caller: String,
    preview: String,
    wait_seconds: u64,
    note: &'static str,
}

impl crate::runtime::events::Encode for AskPending {
    fn encode(&self, bus_sequence: u64) -> serde_json::Result<String> {
        crate::runtime::events::by_value(self, bus_sequence)
    }
}

/// Publishes each of the ask server's approval notices on the root's bus (held weakly: the
/// server never keeps a stopped root alive).
fn publish_ask_notices(root: &Root, h: &crate::ask::server::ServerHandle) {
    let core = Arc::downgrade(&root.core);
    h.state.notify.subscribe(Box::new(move |n| {
        let Some(core) = core.upgrade() else {
            return;
        };
        core.bus.publish(&AskPending {
            event: "peer_update",
            kind: "ask_pending",
            ask_id: n.ask_id.clone(),
            short_id: n.short_id.clone(),
            caller: n.caller.clone(),
            preview: n.preview.clone(),
            wait_seconds: n.wait_s,
            note: "an ask from a friend waits for the owner's decision; only the owner decides",
        });
    }));
}

/// The `--notify stderr` line for an `ask_pending` event (the exact command included: this
/// line is for the owner's eyes, on the host's stderr).
fn ask_pending_line(ev: &Announced, home: Option<&std::path::Path>) -> Option<String> {
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    let wait = ev.wait_seconds?;
    let home = home?;
    let (id, caller, preview) = (s(&ev.ask_id), s(&ev.caller), s(&ev.preview));
    let n = crate::ask::notify::Notice::new(home, &id, &caller, &preview, wait * 1000);
    Some(format!("peer host: {}\n", n.line()))
}

/// The fields `--notify` reads of a bus event: an arrival (`events::MessageArrived`) or an ask
/// waiting for the owner ([`AskPending`]).
#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Announced {
    kind: Option<String>,
    message_id: Option<String>,
    from: Option<String>,
    from_alias: Option<String>,
    ask_id: Option<String>,
    caller: Option<String>,
    preview: Option<String>,
    wait_seconds: Option<u64>,
}

/// Warns on stderr when another live peer in scope already answers to this root's alias:
/// sends to it would fail with AMBIGUOUS_TARGET until one of them leaves.
pub(super) fn warn_shared_alias(root: &Root, program: &str) {
    let others: Vec<String> = match root.core.resolve_target(root.core.me.alias()) {
        Ok(t) if t.instance_id != root.core.me.instance_id() => vec![t.peer_id],
        // The error names every match, this root included.
        Err(e) if e.code == Code::AmbiguousTarget => e
            .message
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|w| w.starts_with("p-") && *w != root.core.me.peer_id())
            .map(str::to_string)
            .collect(),
        _ => return,
    };
    if others.is_empty() {
        return;
    }
    out::err_line(&format!(
        "{program}: warning: alias {} is also used by {} in this scope; sends to @{} fail with AMBIGUOUS_TARGET until one leaves. Pick another --alias, or omit it for a unique generated one.",
        crate::sanitize::line(root.core.me.alias(), 64),
        others.join(", "),
        crate::sanitize::line(root.core.me.alias(), 64)
    ));
}

/// What the host prints for events.
struct Shows {
    /// Every event as NDJSON on stdout.
    json: bool,
    /// How an arriving message is announced (besides `json`).
    notify: Notify,
    /// The namespace, named in the decide command of an ask notice.
    home: Option<std::path::PathBuf>,
}

/// Shows everything queued since the last look, in one write per stream (bounded: the
/// subscription's queue holds at most SUBSCRIBER_QUEUE events); a failed write to stdout
/// clears `output_open`. True when there was anything.
fn show_events(
    rx: &crossbeam_channel::Receiver<Event>,
    shows: &Shows,
    output_open: &mut bool,
) -> bool {
    let mut drained = false;
    let mut shown = Shown::default();
    for ev in rx.try_iter() {
        drained = true;
        if *output_open {
            render_event(shows, &ev, &mut shown);
        }
    }
    if *output_open && shown.flush().is_err() {
        *output_open = false;
    }
    drained
}

/// What a batch of events prints: NDJSON for stdout, bells and lines for stderr.
#[derive(Default)]
struct Shown {
    stdout: Vec<u8>,
    stderr: String,
}

impl Shown {
    /// Writes stdout's part in one write (its failure is returned) and stderr's in another.
    fn flush(&self) -> Result<()> {
        if !self.stderr.is_empty() {
            out::err_text(&self.stderr);
        }
        if self.stdout.is_empty() {
            return Ok(());
        }
        out::bytes(&self.stdout)
    }
}

impl Shows {
    fn of(ctx: &Ctx, a: &HostArgs) -> Shows {
        Shows {
            // A terminal on stdout belongs to CMD while it runs: no NDJSON into it either.
            json: ctx.json && (a.command.is_empty() || !std::io::stdout().is_terminal()),
            // By default a line on stderr only for a host of its own in a terminal (no CMD,
            // no --json); never into a terminal CMD owns.
            notify: a.notify.unwrap_or(if a.command.is_empty() && !ctx.json {
                Notify::Stderr
            } else {
                Notify::None
            }),
            home: ctx.home().ok(),
        }
    }
}

/// Events as NDJSON when asked for; an arrival announced as `--notify` says (on stderr, so a
/// hosted command's own stdout stays clean).
fn render_event(shows: &Shows, text: &str, shown: &mut Shown) {
    // The bus encoded the event once: NDJSON is its text as it is.
    if shows.json {
        // With its newline in the same reservation: a push past an exact fit reallocates.
        shown.stdout.reserve(text.len() + 1);
        shown.stdout.extend_from_slice(text.as_bytes());
        shown.stdout.push(b'\n');
    }
    // Only an announcement needs the fields (a `--json` host announces nothing by default).
    if shows.notify == Notify::None {
        return;
    }
    let Ok(ev) = serde_json::from_str::<Announced>(text) else {
        return;
    };
    let kind = ev.kind.as_deref();
    if kind == Some("ask_pending") {
        if shows.notify == Notify::Bell {
            shown.stderr.push('\u{7}');
        }
        if shows.notify == Notify::Stderr
            && let Some(line) = ask_pending_line(&ev, shows.home.as_deref())
        {
            shown.stderr.push_str(&line);
        }
        return;
    }
    if kind != Some("message") {
        return;
    }
    if shows.notify == Notify::Bell {
        shown.stderr.push('\u{7}');
    }
    if shows.notify == Notify::Stderr {
        let s = |v: &Option<String>| {
            v.as_deref()
                .map(|v| crate::sanitize::line(v, 80))
                .unwrap_or_default()
        };
        let from = match &ev.from_alias {
            Some(alias) => format!("{} ({})", crate::sanitize::line(alias, 64), s(&ev.from)),
            None => s(&ev.from),
        };
        shown.stderr.push_str(&format!(
            "peer host: message {} from {from} (peer inbox to read it)\n",
            s(&ev.message_id)
        ));
    }
}

/// The host's event subscription (none when it `listens` to nothing), ringing the bell the
/// main thread sleeps on.
fn subscribe(
    root: &Root,
    listens: bool,
) -> (Arc<Bell>, Option<crossbeam_channel::Receiver<Event>>) {
    let bell = Arc::new(Bell::default());
    let ring = bell.clone();
    let events = listens
        .then(|| {
            root.core
                .bus
                .subscribe_notified(Some(Arc::new(move || ring.ring())))
        })
        .flatten();
    (bell, events)
}

/// A flag and a condition variable every source of a host wake-up rings after it queued
/// something: the main thread sleeps on it (one futex wait) instead of a channel select, which
/// spins and calls `sched_yield` before it parks — on every message event of a busy host.
/// Only the first ring after the main thread looked takes the lock and wakes it: the main
/// thread drains every queue once it sees the flag, so later rings (connection threads
/// announcing a group commit's arrivals together) cost an atomic swap, not a queue on a lock.
#[derive(Default)]
struct Bell {
    rung: std::sync::atomic::AtomicBool,
    lock: parking_lot::Mutex<()>,
    cv: parking_lot::Condvar,
}

impl Bell {
    fn ring(&self) {
        if !self.rung.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let _held = self.lock.lock();
            self.cv.notify_one();
        }
    }
}

/// What the host's main thread sleeps on between events: an event on the bus, a stop signal,
/// the hosted command's end. Blocking on these (no polling) keeps an idle host asleep.
struct Wake {
    events: Option<crossbeam_channel::Receiver<Event>>,
    stopped: crossbeam_channel::Receiver<()>,
    bell: Arc<Bell>,
}

impl Wake {
    fn new(
        stop: &Arc<Stop>,
        events: Option<crossbeam_channel::Receiver<Event>>,
        bell: Arc<Bell>,
    ) -> Result<Wake> {
        let (tx, stopped) = crossbeam_channel::bounded(1);
        let ring = bell.clone();
        stop.on_stop(move || {
            let _ = tx.send(());
            ring.ring();
        })?;
        Ok(Wake {
            events,
            stopped,
            bell,
        })
    }

    /// Blocks until an event is queued, a stop signal came (unless `stop_seen`), or `child`
    /// has ended; consumes nothing. Every source queues before it rings, and the queues are
    /// checked under the bell's lock, so nothing queued is slept through.
    fn wait(&self, stop_seen: bool, child: Option<&crossbeam_channel::Receiver<()>>) {
        let mut held = self.bell.lock.lock();
        loop {
            let ready = self.events.as_ref().is_some_and(|e| !e.is_empty())
                || (!stop_seen && !self.stopped.is_empty())
                || child.is_some_and(|c| !c.is_empty());
            // The flag is cleared under the lock a first ring takes, so a ring either is seen
            // here or wakes the wait below.
            let rung = self
                .bell
                .rung
                .swap(false, std::sync::atomic::Ordering::SeqCst);
            if ready || rung {
                return;
            }
            self.bell.cv.wait(&mut held);
        }
    }

    /// After a look that found events (a busy host: arrivals come in bursts, one per group
    /// commit): sleeps `EVENT_GATHER` with the bell's flag left set, so the events arriving
    /// meanwhile cost their publishers an atomic swap instead of a futex wake each, and they
    /// leave together at the next look. A stop or the command's end (which ring too) is seen
    /// at that look, within `EVENT_GATHER`; the flag makes the next `wait` return at once. An
    /// idle host is not affected: it gathers only after finding events.
    fn gather(&self) {
        self.bell
            .rung
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let mut held = self.bell.lock.lock();
        let _ = self.bell.cv.wait_for(&mut held, EVENT_GATHER);
    }
}

fn wait_for_signal(
    stop: &Stop,
    wake: &Wake,
    drain: &mut dyn FnMut() -> Result<bool>,
) -> Result<i32> {
    loop {
        let drained = drain()?;
        if stop.signal().is_some() {
            return Ok(0);
        }
        if drained {
            wake.gather();
        } else {
            wake.wait(false, None);
        }
    }
}

fn run_child(
    root: &Root,
    command: &[OsString],
    stop: &Stop,
    wake: &Wake,
    drain: &mut dyn FnMut() -> Result<bool>,
) -> Result<i32> {
    let mut child_cmd = std::process::Command::new(&command[0]);
    if let Some(path) = crate::paths::path_with_own_dir() {
        child_cmd.env("PATH", path);
    }
    let spawned = child_cmd
        .args(&command[1..])
        .env("PEER_HOME", root.core.site.home())
        .env("PEER_INSTANCE_ID", root.core.me.instance_id())
        .env("PEER_PEER_ID", root.core.me.peer_id())
        .env("PEER_SESSION_ID", root.core.me.session_id())
        .env("PEER_ALIAS", root.core.me.alias())
        .env(crate::runtime::control::ENV_CONTROL, &root.control_path)
        .env("PEER_HOLDER_PID", std::process::id().to_string())
        .env_remove(crate::runtime::control::ENV_RUN)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return Ok(super::exit::spawn_failed("peer host", &command[0], &e)),
    };
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    // A thread blocks in waitid(2) until the command ends, without reaping it (WNOWAIT): the
    // main thread sleeps on events meanwhile, and the pid stays the command's until the main
    // thread reaps it below, so a forwarded signal can never reach a reused pid.
    let (done_tx, done) = crossbeam_channel::bounded(1);
    let bell = wake.bell.clone();
    std::thread::Builder::new()
        .name("host-child".into())
        .spawn(move || {
            use nix::sys::wait::{Id, WaitPidFlag, waitid};
            while let Err(nix::errno::Errno::EINTR) =
                waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT)
            {}
            let _ = done_tx.send(());
            bell.ring();
        })
        .map_err(|e| Error::new(Code::Io, format!("cannot wait for the command: {e}")))?;
    let mut forwarded = false;
    loop {
        let drained = drain()?;
        if done.try_recv().is_ok() {
            let status = child
                .wait()
                .map_err(|e| Error::new(Code::Io, format!("cannot wait for child: {e}")))?;
            return Ok(exit_code(status));
        }
        if let Some(sig) = stop.signal()
            && !forwarded
        {
            // Pass the stop request on; the child decides how fast it ends.
            let _ = nix::sys::signal::kill(
                pid,
                nix::sys::signal::Signal::try_from(sig)
                    .unwrap_or(nix::sys::signal::Signal::SIGTERM),
            );
            forwarded = true;
        }
        if drained {
            wake.gather();
        } else {
            wake.wait(forwarded, Some(&done));
        }
    }
}

/// The shell convention: the exit code, or 128 + signal number.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch of events renders as one NDJSON block for stdout and, for arrivals only, one
    /// announcement per message for stderr; a host that shows nothing renders nothing.
    #[test]
    fn a_batch_of_events_renders_into_one_block_per_stream() {
        let arrival = serde_json::json!({"event": "peer_update", "kind": "message",
            "messageId": "m-1", "from": "p-a", "fromAlias": "ann", "busSequence": 1})
        .to_string();
        let receipt = serde_json::json!({"event": "peer_update", "kind": "receipt",
            "messageId": "m-0", "busSequence": 2})
        .to_string();
        let both = Shows {
            json: true,
            notify: Notify::Stderr,
            home: None,
        };
        let mut shown = Shown::default();
        for ev in [&arrival, &receipt] {
            render_event(&both, ev, &mut shown);
        }
        assert_eq!(shown.stdout, format!("{arrival}\n{receipt}\n").into_bytes());
        assert_eq!(
            shown.stderr,
            "peer host: message m-1 from ann (p-a) (peer inbox to read it)\n"
        );
        let bell = Shows {
            json: false,
            notify: Notify::Bell,
            home: None,
        };
        let mut shown = Shown::default();
        for ev in [&arrival, &receipt, &arrival] {
            render_event(&bell, ev, &mut shown);
        }
        assert_eq!(
            (shown.stdout.len(), shown.stderr.as_str()),
            (0, "\u{7}\u{7}")
        );
        let silent = Shows {
            json: false,
            notify: Notify::None,
            home: None,
        };
        let mut shown = Shown::default();
        render_event(&silent, &arrival, &mut shown);
        assert!(shown.stdout.is_empty() && shown.stderr.is_empty());
        let ask = serde_json::json!({"event": "peer_update", "kind": "ask_pending",
            "askId": "0123456789", "caller": "ada", "preview": "why?", "waitSeconds": 120,
            "busSequence": 3})
        .to_string();
        let owner = Shows {
            json: false,
            notify: Notify::Stderr,
            home: Some("/tmp/h".into()),
        };
        let mut shown = Shown::default();
        render_event(&owner, &ask, &mut shown);
        assert!(
            shown.stderr.starts_with("peer host: ask 01234567 from ada")
                && shown
                    .stderr
                    .contains("peer --home /tmp/h ask decide 0123456789 approve|decline"),
            "{}",
            shown.stderr
        );
    }

    /// A main thread's wake-up with no event stream, its stop channel's sender and its bell.
    fn quiet_wake() -> (crossbeam_channel::Sender<()>, Wake, Arc<Bell>) {
        let (tx, stopped) = crossbeam_channel::bounded(1);
        let bell = Arc::new(Bell::default());
        let wake = Wake {
            events: None,
            stopped,
            bell: bell.clone(),
        };
        (tx, wake, bell)
    }

    /// While the main thread gathers, a ring neither wakes it nor is lost: the flag stays
    /// set, so the wait after the gathering returns at once, and the one after that sleeps.
    #[test]
    fn rings_while_gathering_are_kept_for_the_next_look() {
        let (_tx, wake, bell) = quiet_wake();
        let b = bell.clone();
        let ringer = std::thread::spawn(move || {
            for _ in 0..100 {
                b.ring();
            }
        });
        wake.gather();
        ringer.join().unwrap();
        assert!(bell.rung.load(std::sync::atomic::Ordering::SeqCst));
        wake.wait(false, None);
        assert!(!bell.rung.load(std::sync::atomic::Ordering::SeqCst));
    }

    /// Rings coalesce into one wake-up until the main thread looks, and a ring from another
    /// thread while it sleeps is never lost (each `wait` here returns only because of one).
    #[test]
    fn rings_coalesce_and_none_is_lost() {
        let (_tx, wake, bell) = quiet_wake();
        bell.ring();
        bell.ring();
        wake.wait(false, None);
        assert!(!bell.rung.load(std::sync::atomic::Ordering::SeqCst));
        for round in 0..50u64 {
            let b = bell.clone();
            let t = std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_micros(round * 20));
                b.ring();
                b.ring();
            });
            wake.wait(false, None);
            t.join().unwrap();
            // The second ring of the round may land after the wait returned: look once more.
            if bell.rung.load(std::sync::atomic::Ordering::SeqCst) {
                wake.wait(false, None);
            }
        }
    }
}
