//! Store benchmarks: durable accept latency through `StoreHandle` beside the floor measured in
//! the same run (append 4 KiB + fdatasync on the same filesystem), and accept throughput with
//! 1, 8 and 64 concurrent senders using group commit.
//!
//! Raised limits (so the bench measures custody, not refusals): inboxMessages 2^40,
//! ratePerSecond / rateBurst 2^30, storageBytes 2^40, journalBytes 2^30 (no compaction during
//! a measurement). commitBatch keeps its default (1,024). Content is 200 bytes.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use peerwire::config::Limits;
use peerwire::messaging::{InboundSend, MessageBody, Principal};
use peerwire::store::{Store, StoreHandle};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const ME: &str = "p-bench";

fn temp_home(tag: &str) -> peerwire::fsutil::TempDir {
    peerwire::fsutil::TempDir::new(&format!("bench-{tag}")).expect("temp home")
}

fn bench_limits() -> Limits {
    Limits {
        inbox_messages: 1 << 40,
        rate_per_second: 1 << 30,
        rate_burst: 1 << 30,
        storage_bytes: 1 << 40,
        journal_bytes: 1 << 30,
        acknowledgement_ms: 30_000,
        ..Limits::default()
    }
}

struct Bench {
    /// Removed after the store closes (fields drop after `Drop::drop`).
    _home: peerwire::fsutil::TempDir,
    store: Option<Store>,
    next: Arc<AtomicU64>,
}

impl Bench {
    fn new(tag: &str) -> Bench {
        let home = temp_home(tag);
        let store = Store::open(&home, "i-00000000000000b1", "s-bench", &bench_limits())
            .expect("open store");
        store.handle().set_live(ME);
        Bench {
            _home: home,
            store: Some(store),
            next: Arc::new(AtomicU64::new(0)),
        }
    }
    fn handle(&self) -> StoreHandle {
        self.store.as_ref().map(|s| s.handle()).expect("store open")
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Some(s) = self.store.take() {
            let st = s.handle().stats();
            eprintln!(
                "    store stats: jobs {} syncs {} mean batch {:.1} max batch {}",
                st.jobs,
                st.syncs,
                st.jobs as f64 / st.syncs.max(1) as f64,
                st.max_batch
            );
            let _ = s.close();
        }
    }
}

fn accept_one(h: &StoreHandle, thread: u64, n: u64, content: &str) {
    let from = Principal {
        instance_id: format!("i-sender{thread}"),
        run_id: None,
        peer_id: format!("p-sender{thread}"),
    };
    let send = InboundSend {
        origin: None,
        to_peer_id: ME.into(),
        message_id: format!("m-{n}"),
        body: MessageBody {
            content: content.to_string(),
            topic: None,
            reply_to: None,
        },
        correlation_id: None,
        expires_at_ms: None,
        from_alias: None,
    };
    h.accept(from, send).expect("accept");
}

fn floor_before(c: &mut Criterion) {
    floor_append_fdatasync(c, "before");
}

fn floor_after(c: &mut Criterion) {
    floor_append_fdatasync(c, "after");
}

fn floor_append_fdatasync(c: &mut Criterion, when: &str) {
    let home = temp_home("floor");
    let path = home.join("floor.log");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .expect("floor file");
    let block = vec![b'x'; 4096];
    c.bench_function(&format!("floor/append_4KiB_fdatasync_{when}"), |b| {
        b.iter(|| {
            f.write_all(&block).expect("write");
            f.sync_data().expect("fdatasync");
        })
    });
}

fn accept_latency(c: &mut Criterion) {
    let bench = Bench::new("latency");
    let h = bench.handle();
    let content = "x".repeat(200);
    c.bench_function("store/accept_durable_1_thread", |b| {
        b.iter(|| accept_one(&h, 0, bench.next.fetch_add(1, Ordering::Relaxed), &content))
    });
}

fn accept_throughput(c: &mut Criterion) {
    let mut g = c.benchmark_group("store/accept_throughput");
    g.throughput(Throughput::Elements(1));
    for threads in [1u64, 8, 64] {
        let bench = Bench::new(&format!("tp{threads}"));
        let content = Arc::new("x".repeat(200));
        g.bench_function(format!("{threads}_senders"), |b| {
            b.iter_custom(|iters| {
                let per = iters.div_ceil(threads);
                let barrier = Arc::new(Barrier::new(threads as usize + 1));
                let workers: Vec<_> = (0..threads)
                    .map(|t| {
                        let (h, barrier, next, content) = (
                            bench.handle(),
                            barrier.clone(),
                            bench.next.clone(),
                            content.clone(),
                        );
                        std::thread::spawn(move || {
                            barrier.wait();
                            for _ in 0..per {
                                accept_one(&h, t, next.fetch_add(1, Ordering::Relaxed), &content);
                            }
                        })
                    })
                    .collect();
                barrier.wait();
                let start = Instant::now();
                for w in workers {
                    w.join().expect("worker");
                }
                // Scale to the requested iteration count (per × threads ≥ iters).
                start
                    .elapsed()
                    .mul_f64(iters as f64 / (per * threads) as f64)
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    targets = floor_before, accept_latency, accept_throughput, floor_after
}
criterion_main!(benches);
