//! Transport benchmarks: frame decode + dispatch per message, the in-memory handshake (both
//! roles: 2 signs + 2 verifies is the floor), and a warm request round trip through Pool →
//! Endpoint next to a plain UnixStream echo round trip measured in the same run, and a custom
//! interleaved loop that prints the issue-4 ratios (warm/echo and (warm - json)/echo) from
//! medians measured back to back in one process.

use criterion::{Criterion, criterion_group, criterion_main};
use peerwire::config::Limits;
use peerwire::error::Result;
use peerwire::identity::{self, KeyPair};
use peerwire::protocol::access;
use peerwire::protocol::frame::FrameDecoder;
use peerwire::protocol::handshake::{
    Channel, Expected, Initiator, RecentNonces, Responder, ResponderCtx, Step,
};
use peerwire::protocol::local::LocalRequest;
use peerwire::protocol::peer::PeerRequest;
use peerwire::protocol::rpc::{self, Id, Incoming};
use peerwire::transport::{
    Answer, Endpoint, Handler, LocalIdentity, Notifier, PeerInfo, Pool, Target, Verifier,
};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn send_frame() -> Vec<u8> {
    let params = json!({"version": 1, "messageId": "message-stable-across-retry", "to": "p-5d0c8e1f2a3b4c5d6e7f8091",
        "content": "The build is ready for review. Please look at the failing integration test first."});
    rpc::encode_request(&Id::Str("rpc-attempt-1".into()), "peer.send", &params)
}

fn decode_dispatch(c: &mut Criterion) {
    let frame = send_frame();
    let channel = Channel::Peer {
        instance_id: "i-1".into(),
        run_id: None,
    };
    let mut decoder = FrameDecoder::new(65_536);
    c.bench_function("frame decode + parse + authorize + encode answer", |b| {
        b.iter(|| {
            decoder.push(black_box(&frame));
            let Some(Ok(line)) = decoder.next_frame() else {
                unreachable!()
            };
            let Ok(Incoming::Request { id, method, params }) = rpc::parse(&line) else {
                unreachable!()
            };
            access::authorize(&channel, &method).ok();
            black_box(rpc::encode_result(
                &id,
                &json!({"messageId": params.get("messageId"), "state": "accepted"}),
            ))
        })
    });
}

fn handshake(c: &mut Criterion) {
    let ikeys = KeyPair::generate();
    let rkeys = KeyPair::generate();
    let adverts: HashMap<String, [u8; 32]> = [("i-a".to_string(), ikeys.public())].into();
    let lookup = move |id: &str| adverts.get(id).copied();
    let mut nonces = RecentNonces::new(4096);
    let secret = [0u8; 32];
    let parse = |f: &[u8]| rpc::parse(&f[..f.len() - 1]).unwrap_or_else(|_| unreachable!());
    c.bench_function("handshake both roles in memory", |b| {
        b.iter(|| {
            let (mut ni, mut nr) = ([0u8; 32], [0u8; 32]);
            identity::random_bytes(&mut ni);
            identity::random_bytes(&mut nr);
            let expected = Expected {
                instance_id: "i-b".into(),
                public_key: rkeys.public(),
            };
            let (mut init, hello) = Initiator::start("i-a", None, &ikeys, expected, ni);
            let mut remember = |n: &[u8; 32]| nonces.insert(n);
            let mut ctx = ResponderCtx {
                instance_id: "i-b",
                keys: &rkeys,
                local_secret: &secret,
                run_secret: &|_: &[u8; 32]| None,
                advertised_key: &lookup,
                remember_nonce: &mut remember,
            };
            let mut resp = Responder::new(nr);
            let Step::Continue(answer) = resp.on_message(parse(&hello), &mut ctx) else {
                unreachable!()
            };
            let Ok(Some(auth)) = init.on_message(parse(&answer), &ikeys) else {
                unreachable!()
            };
            let Step::Established { reply, .. } = resp.on_message(parse(&auth), &mut ctx) else {
                unreachable!()
            };
            black_box(init.on_message(parse(&reply), &ikeys).is_ok())
        })
    });
}

/// The handshake's cryptographic floor measured in the same run: 2 signs + 2 verify_strict
/// over a transcript-sized message.
fn crypto_floor(c: &mut Criterion) {
    let (ka, kb) = (KeyPair::generate(), KeyPair::generate());
    let msg = [7u8; 268];
    c.bench_function("floor: 2 sign + 2 verify_strict", |b| {
        b.iter(|| {
            let (sa, sb) = (ka.sign(black_box(&msg)), kb.sign(black_box(&msg)));
            black_box(
                identity::verify(&ka.public(), &msg, &sa)
                    && identity::verify(&kb.public(), &msg, &sb),
            )
        })
    });
}

/// Answers a `peer.send` with its own params as the sender's encoder wrote them.
struct Echo;
impl Handler for Echo {
    fn peer_request(&self, _: &PeerInfo, req: PeerRequest, _: &Notifier) -> Result<Answer> {
        match req {
            PeerRequest::Send(send) => Answer::of(&send),
            _ => Answer::of(&()),
        }
    }
    fn local_request(&self, _: Option<&str>, _: LocalRequest, _: &Notifier) -> Result<Answer> {
        Answer::of(&())
    }
}

struct Adverts(HashMap<String, [u8; 32]>);
impl Verifier for Adverts {
    fn advertised_key(&self, id: &str) -> Option<[u8; 32]> {
        self.0.get(id).copied()
    }
}

/// A bound endpoint and a pool with one warm authenticated connection to it.
fn warm_pair() -> (peerwire::fsutil::TempDir, Endpoint, Pool, Target) {
    let dir = peerwire::fsutil::TempDir::new("bench-transport").expect("temp dir");
    let limits = Limits::default();
    let a = LocalIdentity {
        instance_id: identity::new_instance_id(),
        keys: Arc::new(KeyPair::generate()),
    };
    let b = LocalIdentity {
        instance_id: identity::new_instance_id(),
        keys: Arc::new(KeyPair::generate()),
    };
    let adverts = Arc::new(Adverts(
        [
            (a.instance_id.clone(), a.keys.public()),
            (b.instance_id.clone(), b.keys.public()),
        ]
        .into(),
    ));
    let path = dir.join("b.sock");
    let endpoint = Endpoint::bind(&path, b.clone(), &limits, [1; 32], Arc::new(Echo), adverts)
        .unwrap_or_else(|e| panic!("{e}"));
    let pool = Pool::new(a, &limits, Arc::new(|_: &PeerInfo, _| {}));
    let target = Target {
        instance_id: b.instance_id.clone(),
        endpoint: path,
        public_key: b.keys.public(),
    };
    pool.request_raw(&target, "peer.send", payload(), 0)
        .unwrap_or_else(|e| panic!("{e}"));
    (dir, endpoint, pool, target)
}

fn round_trips(c: &mut Criterion) {
    let (_dir, endpoint, pool, target) = warm_pair();
    let params = payload();
    let mut group = c.benchmark_group("round trip");
    group.bench_function("Pool -> Endpoint echo (authenticated, warm)", |bch| {
        bch.iter(|| {
            black_box(
                pool.request_raw(&target, "peer.send", params.clone(), 0)
                    .is_ok(),
            )
        })
    });
    group.finish();
    endpoint.shutdown();
}

/// The same request payload for both round trips.
fn payload() -> Value {
    json!({"version": 1, "messageId": "m-1", "to": "p-bench", "content": "x".repeat(200)})
}

/// The floor for the Pool round trip: one line echoed by a thread over a socket pair.
fn plain_echo(c: &mut Criterion) {
    let params = payload();
    let mut group = c.benchmark_group("round trip");
    let mut echo = echo_pair();
    let line = rpc::encode_request(&Id::Num(3), "peer.send", &params);
    let mut buf = Vec::new();
    group.bench_function("plain UnixStream line echo (same payload)", |bch| {
        bch.iter(|| {
            echo.client.write_all(&line).ok();
            buf.clear();
            black_box(echo.reader.read_until(b'\n', &mut buf).ok())
        })
    });
    group.finish();
    drop(echo.client);
    drop(echo.reader);
    let _ = echo.thread.join();
}

/// Trips per kind per block and blocks: the kinds alternate block by block so drift in machine
/// load hits all three alike; 20 blocks x 1 000 = 20 000 samples per kind.
const RATIO_BLOCK: usize = 1_000;
const RATIO_BLOCKS: usize = 20;

/// A plain line-echo thread over a socket pair; the client side of it.
struct EchoPair {
    client: UnixStream,
    reader: BufReader<UnixStream>,
    thread: std::thread::JoinHandle<()>,
}

fn echo_pair() -> EchoPair {
    let (client, server) = UnixStream::pair().unwrap_or_else(|e| panic!("{e}"));
    let thread = std::thread::spawn(move || {
        let mut reader = BufReader::new(server.try_clone().unwrap_or_else(|e| panic!("{e}")));
        let mut writer = server;
        let mut line = Vec::new();
        while reader
            .read_until(b'\n', &mut line)
            .map(|n| n > 0)
            .unwrap_or(false)
        {
            if writer.write_all(&line).is_err() {
                break;
            }
            line.clear();
        }
    });
    let reader = BufReader::new(client.try_clone().unwrap_or_else(|e| panic!("{e}")));
    EchoPair {
        client,
        reader,
        thread,
    }
}

/// The JSON work of one warm trip done in-process: the client encodes the request, the
/// endpoint parses it and encodes the echoed result, the client parses that answer.
fn json_trip(params: &Value) -> bool {
    let request = rpc::encode_request(&Id::Num(3), "peer.send", params);
    let Ok(Incoming::Request { id, params, .. }) = rpc::parse(&request[..request.len() - 1]) else {
        return false;
    };
    let answer = rpc::encode_result(&id, &Value::Object(params));
    rpc::parse(&answer[..answer.len() - 1]).is_ok()
}

fn median_us(samples: &mut [u64]) -> f64 {
    samples.sort_unstable();
    samples.get(samples.len() / 2).copied().unwrap_or(0) as f64 / 1_000.0
}

fn percentile_us(samples: &[u64], p: usize) -> f64 {
    let i = (samples.len() * p / 100).min(samples.len().saturating_sub(1));
    samples.get(i).copied().unwrap_or(0) as f64 / 1_000.0
}

fn time_block(out: &mut Vec<u64>, mut trip: impl FnMut() -> bool) {
    for _ in 0..RATIO_BLOCK {
        let t = Instant::now();
        black_box(trip());
        out.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
}

/// The transport's warm-path target, measured honestly: echo, warm Pool -> Endpoint and the JSON work are
/// timed trip by trip in alternating blocks of the same run, then compared by medians.
fn ratio(_: &mut Criterion) {
    let (_dir, endpoint, pool, target) = warm_pair();
    let params = payload();
    let mut echo = echo_pair();
    let line = rpc::encode_request(&Id::Num(3), "peer.send", &params);
    let mut buf = Vec::new();
    let mut echo_trip = || {
        buf.clear();
        echo.client.write_all(&line).is_ok() && echo.reader.read_until(b'\n', &mut buf).is_ok()
    };
    let warm_trip = || {
        pool.request_raw(&target, "peer.send", params.clone(), 0)
            .is_ok()
    };
    let json = || json_trip(&params);
    for _ in 0..RATIO_BLOCK {
        black_box((echo_trip(), warm_trip(), json()));
    }
    let n = RATIO_BLOCK * RATIO_BLOCKS;
    let (mut e, mut w, mut j) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for _ in 0..RATIO_BLOCKS {
        time_block(&mut e, &mut echo_trip);
        time_block(&mut w, warm_trip);
        time_block(&mut j, json);
    }
    let (me, mw, mj) = (median_us(&mut e), median_us(&mut w), median_us(&mut j));
    println!("ratio run: {n} trips each, interleaved blocks of {RATIO_BLOCK}");
    for (name, m, s) in [("echo", me, &e), ("warm", mw, &w), ("json", mj, &j)] {
        println!(
            "  {name:<5} median {m:.2} us  p10 {:.2}  p90 {:.2}  p99 {:.2}",
            percentile_us(s, 10),
            percentile_us(s, 90),
            percentile_us(s, 99)
        );
    }
    println!("warm/echo = {:.2}", mw / me);
    println!("(warm - json)/echo = {:.2}", (mw - mj) / me);
    drop(echo.client);
    drop(echo.reader);
    let _ = echo.thread.join();
    endpoint.shutdown();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500)).sample_size(30);
    targets = ratio, decode_dispatch, crypto_floor, handshake, round_trips, plain_echo
}
criterion_main!(benches);
