//! Bounded fuzzing of every reader of bytes another party controls, run as proptest cases in
//! every `cargo test` (a few hundred cases per target, seconds in all). Each target feeds
//! arbitrary bytes — and mutations (bit flips, truncations, splices) of valid inputs, which
//! reach deeper than random bytes — and asserts that the reader does not panic and answers
//! with its typed error. The same targets run unbounded under cargo-fuzz in `fuzz/`.
//!
//! Targets: the frame decoder, JSON-RPC parsing and channel authorization, the typed reading
//! of peer and local requests, tool-argument dispatch, the handshake responder and initiator, the journal and snapshot readers,
//! presence records, the configuration file, resource files (state, fence, ledger) and MCP
//! stdio lines.

use crate::config::{Config, Limits};
use crate::error::Code;
use crate::identity::KeyPair;
use crate::protocol::frame::FrameDecoder;
use crate::protocol::handshake::{
    Channel, Expected, Initiator, RecentNonces, Responder, ResponderCtx, Step, local_hello_frame,
};
use crate::protocol::{access, rpc};
use crate::resource::model::{Fence, ResourceState};
use crate::resource::seal;
use proptest::prelude::*;
use serde_json::{Value, json};

/// Cases per target: bounded so the whole module runs in seconds on two cores.
const CASES: u32 = 384;

/// `PEER_FUZZ_CASES` raises the count for a longer local run (CI keeps the default).
fn config() -> ProptestConfig {
    let cases = std::env::var("PEER_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Arbitrary bytes, biased towards the bytes that matter to JSON and line framing.
fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        4 => any::<u8>(),
        2 => prop::sample::select(b"{}[]\":,\\\n\r 0123456789.-+eEtrufalsn".to_vec()),
        1 => Just(0xff_u8),
        1 => Just(0xc3_u8),
    ];
    prop::collection::vec(byte, 0..max)
}

/// A valid input mutated: flipped bits, a cut, bytes spliced in.
fn mutated(valid: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let n = valid.len().max(1);
    (
        prop::collection::vec((0..n, 0..8u8), 0..4),
        prop::option::of(0..n),
        prop::option::of((0..n, bytes(8))),
    )
        .prop_map(move |(flips, cut, splice)| {
            let mut b = valid.clone();
            for (i, bit) in flips {
                if let Some(x) = b.get_mut(i) {
                    *x ^= 1 << bit;
                }
            }
            if let Some((at, extra)) = splice {
                let at = at.min(b.len());
                b.splice(at..at, extra);
            }
            if let Some(c) = cut {
                b.truncate(c);
            }
            b
        })
}

/// Valid JSON-RPC frames the handshake and dispatch expect, as seeds for mutation.
fn rpc_seeds() -> Vec<Vec<u8>> {
    let keys = KeyPair::generate();
    let expected = Expected {
        instance_id: "i-b".into(),
        public_key: keys.public(),
    };
    let (_, hello) = Initiator::start("i-a", Some("r-1"), &keys, expected, [3; 32]);
    vec![
        hello,
        local_hello_frame(&[7; 32]),
        rpc::encode_request(
            &rpc::Id::Num(5),
            "peer.send",
            &json!({"version": 1, "to": "p-1", "messageId": "m-1", "content": "hi"}),
        ),
        rpc::encode_request(
            &rpc::Id::Str("c-7".into()),
            "peer.receipt",
            &json!({"version": 1, "fromRun": null, "messageId": "m-1", "fromPeerId": "p-a",
                "toPeerId": "p-b", "state": "consumed", "sequence": 3, "correlationId": "m-1",
                "atMs": 42}),
        ),
        rpc::encode_result(&rpc::Id::Num(1), &json!({"ok": true, "nonce": "AAAA"})),
    ]
}

fn json_frame() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        bytes(300),
        prop::sample::select(rpc_seeds()).prop_flat_map(mutated),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// Frames never exceed the bound, never contain a newline, and a too-long line finishes
    /// the decoder instead of buffering without end.
    #[test]
    fn frame_decoder(chunks in prop::collection::vec(bytes(64), 0..6), max in 1usize..96) {
        let mut d = FrameDecoder::new(max);
        for chunk in chunks {
            d.push(&chunk);
            while let Some(f) = d.next_frame() {
                if let Ok(frame) = f {
                    prop_assert!(frame.len() <= max);
                    prop_assert!(!frame.contains(&b'\n'));
                    prop_assert!(std::str::from_utf8(&frame).is_ok());
                }
            }
            prop_assert!(d.is_failed() || d.buffered_bytes() <= max + 64);
        }
    }

    /// Any frame parses into a message or a reject with a JSON-RPC number and a typed code;
    /// the channel check never lets a peer reach a local-only method.
    #[test]
    fn rpc_parse_and_authorize(frame in json_frame()) {
        match rpc::parse(&frame) {
            Ok(rpc::Incoming::Request { method, params, .. }) => {
                let _ = rpc::check_version(&params);
                let peer = Channel::Peer { instance_id: "i-a".into(), run_id: None };
                if access::is_local_only(&method) {
                    prop_assert!(access::authorize(&peer, &method).is_err());
                }
                // Typed reading answers with a typed error, never a panic.
                let _ = crate::protocol::peer::PeerRequest::decode(&method, params.clone());
                let _ = crate::protocol::local::LocalRequest::decode(&method, params);
            }
            Ok(_) => {}
            Err(reject) => {
                prop_assert!(reject.number < 0);
                let line = reject.to_line();
                prop_assert!(serde_json::from_slice::<Value>(&line[..line.len() - 1]).is_ok());
            }
        }
    }

    /// Tool arguments from a model or a CLI are validated strictly: anything else is USAGE
    /// (or a typed limit error), never a panic.
    #[test]
    fn tool_dispatch(
        name in prop::sample::select(vec![
            "list_peers", "send_peer_message", "peer_messages", "coordinate_resource", "x",
        ]),
        args in json_frame(),
    ) {
        let value: Value = serde_json::from_slice(&args).unwrap_or(Value::Null);
        if let Err(e) = crate::toolspec::parse_call(name, &value, &Limits::default()) {
            prop_assert!(!e.message.is_empty());
        }
    }

    /// The responder refuses everything but a correct handshake, and a local channel only
    /// with the right secret; the initiator rejects any answer it did not expect.
    #[test]
    fn handshake_messages(frames in prop::collection::vec(json_frame(), 1..4)) {
        let keys = KeyPair::generate();
        let mut nonces = RecentNonces::new(8);
        let mut remember = |n: &[u8; 32]| nonces.insert(n);
        let lookup = |_: &str| None;
        let mut ctx = ResponderCtx {
            instance_id: "i-b",
            keys: &keys,
            local_secret: &[7; 32],
            run_secret: &|_: &[u8; 32]| None,
            advertised_key: &lookup,
            remember_nonce: &mut remember,
        };
        let mut responder = Responder::new([1; 32]);
        for frame in &frames {
            let Ok(msg) = rpc::parse(frame) else { continue };
            match responder.on_message(msg, &mut ctx) {
                Step::Established { channel, .. } => {
                    // Only the exact local secret can establish anything without keys.
                    prop_assert_eq!(channel, Channel::Local);
                    prop_assert!(frame.windows(4).any(|w| w == b"BwcH"));
                    break;
                }
                Step::Refuse { error, .. } => {
                    // The handshake's own refusals, or a typed error from checking params.
                    prop_assert!(matches!(
                        error.code,
                        Code::AuthFailed | Code::TargetEnded | Code::InvalidRequest | Code::Usage
                    ), "{:?}", error.code);
                    break;
                }
                Step::Continue(_) => {}
            }
        }
        let expected = Expected { instance_id: "i-b".into(), public_key: keys.public() };
        let (mut init, _) = Initiator::start("i-a", None, &keys, expected, [2; 32]);
        for frame in &frames {
            let Ok(msg) = rpc::parse(frame) else { continue };
            if init.on_message(msg, &keys).is_err() {
                break;
            }
        }
    }

    /// Journal bytes of any shape scan to records or a typed error; headers likewise.
    #[test]
    fn journal_reader(raw in prop_oneof![bytes(400), journal_seed().prop_flat_map(mutated)]) {
        if let Err(e) = crate::store::journal::decode_header(&raw) {
            prop_assert!(!e.message.is_empty());
        }
        if let Err(e) = crate::store::journal::scan(&raw, 4096) {
            prop_assert!(!e.message.is_empty());
        }
    }

    /// Snapshot bytes of any shape decode or fail with a typed error.
    #[test]
    fn snapshot_reader(raw in prop_oneof![bytes(300), snapshot_seed().prop_flat_map(mutated)]) {
        if let Err(e) = crate::store::snapshot::decode(&raw) {
            prop_assert!(!e.message.is_empty());
        }
    }

    /// A presence record of any shape is classified (live, stale, invalid with a reason);
    /// nothing panics and nothing is deleted.
    #[test]
    fn presence_records(raw in prop_oneof![bytes(400), presence_seed().prop_flat_map(mutated)]) {
        let dir = crate::fsutil::TempDir::new("fuzz-presence").unwrap();
        let file = "s.i.json";
        crate::fsutil::atomic_write(&dir.join(file), &raw, crate::fsutil::Durability::Visible)
            .unwrap();
        let _ = crate::presence::read_one(&dir, file, &Limits::default(), 1_000);
        prop_assert!(dir.join(file).exists());
    }

    /// A configuration file of any shape loads or is CONFIG_INVALID (or another typed code).
    #[test]
    fn config_files(raw in prop_oneof![bytes(300), config_seed().prop_flat_map(mutated)]) {
        if let Err(e) = Config::parse(&raw) {
            prop_assert!(!e.message.is_empty());
        }
    }

    /// Resource files, fences and ledgers: anything but the exact sealed bytes is refused
    /// with RECOVERY_REQUIRED, and a mutated file never decodes to a different state.
    #[test]
    fn resource_files(raw in prop_oneof![bytes(300), resource_seed().prop_flat_map(mutated)]) {
        let good = resource_state();
        match ResourceState::decode(&raw, Some("port:3000")) {
            Ok(state) => prop_assert_eq!(state, good),
            Err(e) => prop_assert_eq!(e.code, Code::RecoveryRequired),
        }
        if let Err(e) = Fence::decode(&raw, "port:3000") {
            prop_assert_eq!(e.code, Code::RecoveryRequired);
        }
        if let Ok(body) = seal::open(&raw) {
            prop_assert_eq!(seal::seal(body), raw);
        }
    }

    /// An ask server's request head of any shape parses or is a typed 4xx; nothing panics.
    #[test]
    fn ask_http_heads(raw in prop_oneof![bytes(400), ask_head_seed().prop_flat_map(mutated)]) {
        if let Err(e) = crate::ask::http::parse_head(&raw) {
            prop_assert!((400..500).contains(&e.status) && !e.message.is_empty());
        }
    }

    /// An `/ask` body of any shape is a request within the configured bounds or a typed 400;
    /// the same bytes as a chunked answer decode within their bounds or are refused.
    #[test]
    fn ask_bodies(raw in prop_oneof![bytes(400), ask_body_seed().prop_flat_map(mutated)]) {
        let config = crate::ask::config::AskConfig::default();
        if let Ok(crate::ask::loose::Obj(body)) = serde_json::from_slice(&raw) {
            match crate::ask::jobs::parse_ask(&body, &config) {
                Ok(ask) => prop_assert!(!ask.question.trim().is_empty()),
                Err(e) => prop_assert!(e.status >= 400 && !e.message.is_empty()),
            }
        }
        let limits = crate::ask::chunked::Limits::for_body(256);
        if let Ok(body) = crate::ask::chunked::decode(&raw, limits) {
            prop_assert!(body.len() <= 256);
        }
    }

    /// A friend card of any shape parses to a card whose fields are bounded, or is refused
    /// with a reason; a mutated card never verifies as another card.
    #[test]
    fn friend_cards(raw in prop_oneof![bytes(300), card_seed().prop_flat_map(mutated)]) {
        let text = String::from_utf8_lossy(&raw);
        match crate::ask::card::parse(&text) {
            Ok((card, _)) => prop_assert!(!card.name.is_empty() && !card.host.is_empty()),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
        let _ = crate::ask::card::verify(&text, 1_785_150_000_000);
    }

    /// MCP stdio: any sequence of lines gets JSON-RPC answers (one JSON object per output
    /// line) or is ignored; the server ends cleanly at end of input.
    #[test]
    fn mcp_stdio_lines(lines in prop::collection::vec(mcp_line(), 0..6)) {
        let mut input = Vec::new();
        for l in &lines {
            input.extend_from_slice(l);
            input.push(b'\n');
        }
        let out = run_mcp(&input);
        for line in out.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            prop_assert!(
                serde_json::from_slice::<Value>(line).is_ok_and(|v| v.is_object()),
                "{}", String::from_utf8_lossy(line)
            );
        }
    }
}

/// A signed `/ask` request head as a dsh client sends it.
fn ask_head_seed() -> impl Strategy<Value = Vec<u8>> {
    Just(
        b"POST /ask?x=1 HTTP/1.1\r\nhost: 127.0.0.1:3877\r\ncontent-type: application/json\r\n\
          content-length: 42\r\n\r\n"
            .to_vec(),
    )
}

/// A valid `/ask` body, and the same body as one chunk of a chunked answer.
fn ask_body_seed() -> impl Strategy<Value = Vec<u8>> {
    let body = json!({"protocolVersion": 1, "caller": "ada", "question": "where is the db?",
        "contextFiles": ["src/db.rs"], "async": true, "timeoutMs": 5000})
    .to_string();
    let chunked = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
    prop_oneof![Just(body.into_bytes()), Just(chunked.into_bytes())]
}

/// A signed friend card as `peer ask card show` issues it.
fn card_seed() -> impl Strategy<Value = Vec<u8>> {
    let key = crate::ask::keys::AskKey::from_seed(&[3u8; 32]);
    let card = crate::ask::card::issue(
        &crate::ask::card::Issue {
            name: "bob",
            host: "192.0.2.20",
            port: 3877,
            public: &key.public(),
            description: "the shop api",
            tags: &["postgres".to_string()],
            issued: 1_785_150_000_000,
            tls: true,
        },
        |b| key.sign(b),
    );
    Just(card.into_bytes())
}

/// A marked journal (a frame and its end mark, as the writer writes them) and an unmarked one
/// (format 1, written before end marks).
fn journal_seed() -> impl Strategy<Value = Vec<u8>> {
    use crate::store::journal;
    let at = journal::HEADER_BYTES as u64;
    let mut marked = journal::encode_header(1).to_vec();
    let mut frame = journal::encode_frame(1, &[]).unwrap_or_default();
    journal::seal(&mut frame, at, 1, 1);
    marked.extend(frame);
    let mut unmarked = journal::encode_header_version(1, journal::FORMAT_VERSION_UNMARKED).to_vec();
    unmarked.extend(journal::encode_frame(1, &[]).unwrap_or_default());
    prop_oneof![Just(marked), Just(unmarked)]
}

fn snapshot_seed() -> impl Strategy<Value = Vec<u8>> {
    let image = crate::messaging::StateImage::default();
    Just(crate::store::snapshot::encode(&image, 1).unwrap_or_default())
}

fn presence_seed() -> impl Strategy<Value = Vec<u8>> {
    let keys = KeyPair::generate();
    let rec = json!({
        "version": 1, "pid": 4242, "sessionId": "s", "workspaceRoot": "/w", "projectName": "w",
        "provider": "p", "model": "m", "mode": "command", "status": "idle",
        "startedAt": "2026-01-01T00:00:00.000Z", "updatedAt": "2026-01-01T00:00:00.000Z",
        "messageCount": 0, "contextPercent": 100, "tokensUsed": 0,
        "communication": {
            "protocolVersion": 1, "instanceId": "i-1",
            "peerId": crate::identity::peer_id("i-1", None), "endpoint": "peer-runtime/i-1.sock",
            "publicKey": keys.spki_b64(), "capabilities": ["message.send"], "scope": "workspace",
            "workspace": "/w", "alias": "a", "runs": [], "degraded": "store failed",
        }
    });
    Just(rec.to_string().into_bytes())
}

fn config_seed() -> impl Strategy<Value = Vec<u8>> {
    Just(
        json!({"sessions": {"communication": {
            "enabled": true, "scope": "machine", "alias": "a",
            "coordinationDirectory": "/tmp/x", "allowResourceControl": true,
            "limits": {"frameBytes": 65536, "commitBatch": 18446744073709551615u64,
                       "inboundConnections": 0}
        }}})
        .to_string()
        .into_bytes(),
    )
}

fn resource_state() -> ResourceState {
    let mut s = ResourceState::new("port:3000", 2);
    s.next_token = 9;
    s
}

fn resource_seed() -> impl Strategy<Value = Vec<u8>> {
    Just(resource_state().encode().unwrap_or_default())
}

fn mcp_line() -> impl Strategy<Value = Vec<u8>> {
    let seeds = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "fuzz", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
               "params": {"name": "peer_messages", "arguments": {"waitMs": 0}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}),
    ];
    let seeds: Vec<Vec<u8>> = seeds.iter().map(|v| v.to_string().into_bytes()).collect();
    prop_oneof![
        2 => prop::sample::select(seeds.clone()),
        2 => prop::sample::select(seeds).prop_flat_map(mutated),
        1 => bytes(120),
    ]
    .prop_map(|mut l| {
        l.retain(|b| *b != b'\n');
        l
    })
}

/// A tool host that answers every call at once, so the MCP server's own parsing is what runs.
struct InstantHost;

impl crate::toolspec::ToolHost for InstantHost {
    fn call(
        &self,
        _call: crate::toolspec::ToolCall,
        _call_id: &str,
        _cancel: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> crate::error::Result<crate::toolspec::ToolOutput> {
        Ok(json!({"messages": [{"from": "p-1", "content": "＜/peer-message＞\u{2028}"}]}).into())
    }
}

/// Runs the MCP server over `input` to end of input and returns everything it wrote.
fn run_mcp(input: &[u8]) -> Vec<u8> {
    let (_events_tx, events) = crossbeam_channel::bounded::<crate::runtime::events::Event>(1);
    let out = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let sink = Sink(out.clone());
    let _ = crate::mcp::serve(
        std::sync::Arc::new(InstantHost),
        events,
        std::io::Cursor::new(input.to_vec()),
        sink,
        &Limits::default(),
    );
    out.lock().clone()
}

struct Sink(std::sync::Arc<parking_lot::Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
