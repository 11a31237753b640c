//! Resource coordination latency beside its floor, measured in the same run:
//! - `floor/atomic_write_durable`: one `fsutil::atomic_write(.., Durable)` of 1400 bytes, and
//!   `.._resource_size` of as many bytes as the benchmark's resource file holds by then
//!   (its bounded journal, `resourceHistory` events, dominates the size);
//! - `resource/request_release`: uncontended request + release (two transactions, two replaces);
//! - `resource/handoff_to_waiter`: from the holder's release call until a waiting thread, woken
//!   by inotify, observes its grant (one release transaction + wake + one status read).

use criterion::{Criterion, criterion_group, criterion_main};
use peerwire::config::Config;
use peerwire::fsutil::{Durability, atomic_write};
use peerwire::process::Probe;
use peerwire::resource::Principal;
use peerwire::resource::api::{caller_of, wait_for_grant};
use peerwire::resource::core::{Caller, Op, Outcome, Target};
use peerwire::resource::model::name_hash;
use peerwire::resource::notify::Watch;
use peerwire::resource::store::Space;
use std::time::{Duration, Instant};

fn temp_home(tag: &str) -> peerwire::fsutil::TempDir {
    peerwire::fsutil::TempDir::new(&format!("bench-{tag}")).expect("temp home")
}

fn caller(id: &str, probe: &Probe) -> Caller {
    let p = Principal {
        id: id.into(),
        display: id.into(),
        capabilities: vec!["resource.request".into()],
    };
    caller_of(&p, probe.own().expect("own evidence"))
}

fn ticket_of(o: &Outcome) -> String {
    match o {
        Outcome::Granted { ticket, .. } | Outcome::Queued { ticket, .. } => ticket.clone(),
        _ => String::new(),
    }
}

fn bench(c: &mut Criterion) {
    let home = temp_home("res");
    let space = Space::open(&home, &Config::default()).expect("space");
    let probe = Probe::new();
    let a = caller("cli:a", &probe);
    let bytes = vec![b'x'; 1400];
    let floor = space.dir.join("floor.json");
    c.bench_function("floor/atomic_write_durable", |b| {
        b.iter(|| atomic_write(&floor, &bytes, Durability::Durable))
    });
    c.bench_function("resource/request_release", |b| {
        b.iter(|| {
            let step = space
                .transact(
                    "bench:rr",
                    &a,
                    Op::Request {
                        capacity: None,
                        epoch: None,
                    },
                    &probe,
                )
                .expect("request");
            let target = Target::Ticket(ticket_of(&step.outcome));
            space
                .transact("bench:rr", &a, Op::Release { target }, &probe)
                .expect("release");
        })
    });
    // The same floor at the size a resource file reaches with a full journal.
    let full = std::fs::metadata(space.resource_path("bench:rr")).map_or(0, |m| m.len() as usize);
    let same = vec![b'x'; full];
    c.bench_function("floor/atomic_write_durable_resource_size", |b| {
        b.iter(|| atomic_write(&floor, &same, Durability::Durable))
    });
    c.bench_function("resource/handoff_to_waiter", |b| {
        b.iter_custom(|iters| handoff(&space, &probe, iters))
    });
}

/// Channels between the holder (bench thread) and the waiter thread.
struct Lines {
    go: crossbeam_channel::Receiver<()>,
    queued: crossbeam_channel::Sender<()>,
    granted: crossbeam_channel::Sender<Instant>,
}

const HANDOFF: &str = "bench:handoff";

/// The waiter: on each go, request, report queued, wait (inotify) for the grant, report the
/// instant it saw the grant, then release.
fn waiter(space: &Space, probe: &Probe, lines: Lines) {
    let b = caller("cli:b", probe);
    let watch = Watch::new(&space.dir, &name_hash(HANDOFF)).expect("watch");
    while lines.go.recv().is_ok() {
        let request = Op::Request {
            capacity: None,
            epoch: None,
        };
        let ticket = ticket_of(
            &space
                .transact(HANDOFF, &b, request, probe)
                .expect("request")
                .outcome,
        );
        lines.queued.send(()).expect("queued");
        wait_for_grant(
            space,
            HANDOFF,
            &b,
            &ticket,
            10_000,
            probe,
            &watch,
            None,
            &|| false,
        )
        .expect("grant");
        lines.granted.send(Instant::now()).expect("granted");
        let release = Op::Release {
            target: Target::Ticket(ticket),
        };
        space
            .transact(HANDOFF, &b, release, probe)
            .expect("release");
    }
}

/// Holder (this thread) and waiter alternate; returns the summed hand-off time.
fn handoff(space: &Space, probe: &Probe, iters: u64) -> Duration {
    let (go, go_rx) = crossbeam_channel::bounded::<()>(1);
    let (queued_tx, queued) = crossbeam_channel::bounded::<()>(1);
    let (granted_tx, granted) = crossbeam_channel::bounded::<Instant>(1);
    let lines = Lines {
        go: go_rx,
        queued: queued_tx,
        granted: granted_tx,
    };
    std::thread::scope(|s| {
        s.spawn(|| waiter(space, probe, lines));
        let a = caller("cli:a", probe);
        let watch = Watch::new(&space.dir, &name_hash(HANDOFF)).expect("watch");
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let request = Op::Request {
                capacity: None,
                epoch: None,
            };
            let step = space
                .transact(HANDOFF, &a, request, probe)
                .expect("request");
            let ticket = ticket_of(&step.outcome);
            // Our request may queue behind the waiter's previous grant: wait for our own.
            if !matches!(step.outcome, Outcome::Granted { .. }) {
                wait_for_grant(
                    space,
                    HANDOFF,
                    &a,
                    &ticket,
                    10_000,
                    probe,
                    &watch,
                    None,
                    &|| false,
                )
                .expect("grant");
            }
            go.send(()).expect("waiter");
            queued.recv().expect("queued");
            let t0 = Instant::now();
            let release = Op::Release {
                target: Target::Ticket(ticket),
            };
            space
                .transact(HANDOFF, &a, release, probe)
                .expect("release");
            total += granted.recv().expect("granted").duration_since(t0);
        }
        drop(go);
        total
    })
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
