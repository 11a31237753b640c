//! End-to-end transport tests: real `peer host` processes driven through their sockets by raw
//! `UnixStream`s (hostile bytes, hand-made handshakes) and by the crate's own `Pool` and
//! `LocalClient`. Every hostile case is followed by a check that the host still serves a good
//! client.

use crate::common;

use common::{Host, Ns, PEER, eventually};
use peerwire::config::Limits;
use peerwire::error::{Code, Error};
use peerwire::identity::{self, KeyPair};
use peerwire::presence::{Publisher, Record};
use peerwire::protocol::handshake::{Expected, Initiator, Party, Role, transcript};
use peerwire::protocol::local::LocalRequest;
use peerwire::protocol::message::ReceiptPush;
use peerwire::protocol::peer::PeerRequest;
use peerwire::protocol::rpc::{self, Incoming};
use peerwire::transport::{
    Answer, Endpoint, Handler, LocalClient, LocalIdentity, NotificationSink, Notifier, PeerInfo,
    Pool, Target, Verifier,
};
use serde_json::{Map, Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How long a raw read may block before the test gives up (a hang, not a timing assertion).
const READ_LIMIT: Duration = Duration::from_secs(15);

/// What a client needs to know about a running host.
struct Remote {
    instance_id: String,
    peer_id: String,
    endpoint: PathBuf,
    control: PathBuf,
    public_key: [u8; 32],
    pid: i32,
}

fn remote(host: &Host) -> Remote {
    let presence = std::fs::read(host.field("presence")).unwrap();
    let rec: Value = serde_json::from_slice(&presence).unwrap();
    let key = rec["communication"]["publicKey"].as_str().unwrap();
    Remote {
        instance_id: host.field("instanceId"),
        peer_id: host.field("peerId"),
        endpoint: PathBuf::from(host.field("endpoint")),
        control: PathBuf::from(host.field("control")),
        public_key: identity::parse_spki_b64(key).unwrap(),
        pid: host.pid(),
    }
}

impl Remote {
    fn target(&self) -> Target {
        Target {
            instance_id: self.instance_id.clone(),
            endpoint: self.endpoint.clone(),
            public_key: self.public_key,
        }
    }
    fn expected(&self) -> Expected {
        Expected {
            instance_id: self.instance_id.clone(),
            public_key: self.public_key,
        }
    }
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }
}

/// A peer root played by the test process: its own key and a live presence record, so the
/// host's Verifier finds the key it proves.
struct Client {
    instance_id: String,
    peer_id: String,
    keys: Arc<KeyPair>,
    _presence: Publisher,
}

impl Client {
    /// Publishes a presence record modelled on `host`'s, with our own identity and pid.
    fn publish(host: &Host) -> Client {
        let bytes = std::fs::read(host.field("presence")).unwrap();
        let mut rec: Record = serde_json::from_slice(&bytes).unwrap();
        let keys = KeyPair::generate();
        let instance_id = identity::new_instance_id();
        let peer_id = identity::peer_id(&instance_id, None);
        rec.pid = std::process::id();
        rec.session_id = identity::new_session_id();
        rec.communication.instance_id = instance_id.clone();
        rec.communication.peer_id = peer_id.clone();
        rec.communication.public_key = keys.spki_b64();
        rec.communication.endpoint = format!("peer-runtime/{instance_id}.sock");
        rec.communication.alias = format!("tester-{}", &instance_id[instance_id.len() - 4..]);
        rec.communication.runs = Vec::new();
        let dir = Path::new(&host.field("presence"))
            .parent()
            .unwrap()
            .to_path_buf();
        let presence = Publisher::publish(&dir, rec).unwrap();
        Client {
            instance_id,
            peer_id,
            keys: Arc::new(keys),
            _presence: presence,
        }
    }

    fn identity(&self) -> LocalIdentity {
        LocalIdentity {
            instance_id: self.instance_id.clone(),
            keys: self.keys.clone(),
        }
    }

    fn pool(&self) -> Pool {
        self.pool_with_sink(Arc::new(|_, _| {}))
    }

    fn pool_with_sink(&self, sink: NotificationSink) -> Pool {
        Pool::new(self.identity(), &Limits::default(), sink)
    }

    /// Listens at the endpoint our presence record advertises, so the host's durable
    /// `peer.receipt` requests reach us; returns the endpoint and what it received.
    fn listen(&self, host: &Remote) -> (Endpoint, Received) {
        let path = host
            .endpoint
            .parent()
            .unwrap()
            .join(format!("{}.sock", self.instance_id));
        let got = Received::default();
        let handler = Arc::new(Recorder(got.clone()));
        let verifier = Arc::new(KnownKey(host.instance_id.clone(), host.public_key));
        let mut secret = [0u8; 32];
        identity::random_bytes(&mut secret);
        let ep = Endpoint::bind(
            &path,
            self.identity(),
            &Limits::default(),
            secret,
            handler,
            verifier,
        )
        .unwrap();
        (ep, got)
    }

    fn party(&self) -> Party {
        Party {
            instance_id: self.instance_id.clone(),
            public_key: self.keys.public(),
        }
    }
}

type Received = Arc<parking_lot::Mutex<Vec<(String, String, Map<String, Value>)>>>;

/// (sender instance, decoded `peer.receipt`) of each notification a pool's sink received.
type Pushed = Arc<parking_lot::Mutex<Vec<(String, ReceiptPush)>>>;

/// Records every peer request as (authenticated instance, method, params).
struct Recorder(Received);

impl Handler for Recorder {
    fn peer_request(
        &self,
        from: &PeerInfo,
        req: PeerRequest,
        _notify: &Notifier,
    ) -> peerwire::error::Result<Answer> {
        let (method, params) = wire_form(&req);
        let state = params.get("state").cloned();
        let answer = if method == "peer.send" {
            // Custody as a minimal recipient: the receipt the runtime expects back.
            let id = params.get("messageId").cloned().unwrap_or_default();
            let run = params.get("fromRun").and_then(Value::as_str);
            json!({
                "messageId": id,
                "fromPeerId": identity::peer_id(&from.instance_id, run),
                "toPeerId": params.get("to").cloned().unwrap_or_default(),
                "state": "accepted",
                "sequence": 1,
                "correlationId": params.get("correlationId").filter(|c| !c.is_null()).unwrap_or(&id),
                "atMs": peerwire::clock::now_ms(),
            })
        } else {
            json!({"ok": true, "state": state})
        };
        self.0
            .lock()
            .push((from.instance_id.clone(), method.to_string(), params));
        Answer::of(&answer)
    }
    fn local_request(
        &self,
        _run_id: Option<&str>,
        req: LocalRequest,
        _notify: &Notifier,
    ) -> peerwire::error::Result<Answer> {
        Err(Error::new(
            Code::MethodNotFound,
            req.call.method().to_string(),
        ))
    }
}

/// A typed peer request as the method and params object the sender's encoder wrote: what
/// the recorder keeps, so the assertions read the fields a peer put on the wire.
fn wire_form(req: &PeerRequest) -> (&'static str, Map<String, Value>) {
    let (method, params) = match req {
        PeerRequest::Send(send) => ("peer.send", serde_json::to_value(send).unwrap()),
        PeerRequest::Status(q) => ("peer.status", q.encode()),
        PeerRequest::Subscribe(q) => ("peer.subscribe", q.encode()),
        PeerRequest::Receipt(push) => ("peer.receipt", serde_json::to_value(push).unwrap()),
        PeerRequest::Directory => ("peer.directory", json!({})),
    };
    match params {
        Value::Object(map) => (method, map),
        other => panic!("{method} params are not an object: {other}"),
    }
}

/// The one peer this test endpoint accepts.
struct KnownKey(String, [u8; 32]);

impl Verifier for KnownKey {
    fn advertised_key(&self, instance_id: &str) -> Option<[u8; 32]> {
        (instance_id == self.0).then_some(self.1)
    }
}

/// A raw socket with line reads bounded by [`READ_LIMIT`].
struct Raw {
    stream: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Raw {
    fn connect(path: &Path) -> Raw {
        let stream = UnixStream::connect(path).unwrap();
        stream.set_read_timeout(Some(READ_LIMIT)).unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        Raw { stream, reader }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// The next line as JSON; `None` at end of stream (or a reset).
    fn line(&mut self) -> Option<Value> {
        let mut buf = Vec::new();
        match self.reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_slice(&buf).expect("host sent a non-JSON line")),
        }
    }

    fn incoming(&mut self) -> Incoming {
        let v = self.line().expect("host closed the connection");
        rpc::parse(v.to_string().as_bytes()).unwrap_or_else(|r| panic!("{}", r.error))
    }

    /// True when the host closes the connection without sending anything more.
    fn closed(&mut self) -> bool {
        let mut rest = Vec::new();
        self.reader.read_to_end(&mut rest).is_ok() && rest.is_empty()
    }
}

fn code_of(line: &Value) -> Code {
    Error::from_rpc(&line["error"]).code
}

fn nonce() -> [u8; 32] {
    let mut n = [0u8; 32];
    identity::random_bytes(&mut n);
    n
}

/// A raw connection authenticated as `client`.
fn raw_peer(r: &Remote, client: &Client) -> Raw {
    let mut raw = Raw::connect(&r.endpoint);
    let (mut init, hello) = Initiator::start(
        &client.instance_id,
        None,
        &client.keys,
        r.expected(),
        nonce(),
    );
    raw.send(&hello);
    let auth = init
        .on_message(raw.incoming(), &client.keys)
        .unwrap()
        .expect("peer.auth frame");
    raw.send(&auth);
    assert!(
        init.on_message(raw.incoming(), &client.keys)
            .unwrap()
            .is_none()
    );
    raw
}

fn request(id: u64, method: &str, params: Value) -> Vec<u8> {
    let mut b =
        serde_json::to_vec(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}))
            .unwrap();
    b.push(b'\n');
    b
}

/// The host still authenticates a fresh client and answers it.
fn assert_serves(r: &Remote, client: &Client) {
    let ok = eventually(20, || {
        client
            .pool()
            .request_raw(&r.target(), "peer.directory", json!({"version": 1}), 0)
            .is_ok()
    });
    assert!(ok, "the host no longer serves a good client");
}

fn send_params(to: &str, id: &str, content: &str) -> Value {
    json!({"version":1,"messageId":id,"to":to,"fromRun":null,"content":content})
}

/// Runs `peer --json ARGS` inside `host`'s session.
fn peer_in(ns: &Ns, host: &Remote, args: &[&str]) -> std::process::Output {
    ns.cmd(PEER)
        .env("PEER_CONTROL", &host.control)
        .arg("--json")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

fn json_out(o: &std::process::Output) -> Value {
    assert!(o.status.success(), "{}", common::stderr(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn two_hosts_and_a_pool_client_exchange_authenticated_requests() {
    let ns = Ns::new("tr-pair");
    let (ha, hb) = (
        ns.host(&["--alias", "alpha"]),
        ns.host(&["--alias", "beta"]),
    );
    let (a, b) = (remote(&ha), remote(&hb));

    // Host A's session sends to host B over their mutual handshake.
    let receipt = json_out(&peer_in(&ns, &a, &["send", &b.peer_id, "hello beta"]));
    assert_eq!(receipt["state"], "accepted", "{receipt}");
    assert_eq!(receipt["toPeerId"], json!(b.peer_id), "{receipt}");

    // A Pool client with its own presence record and endpoint (a complete peer root).
    let client = Client::publish(&hb);
    let (_endpoint, durable) = client.listen(&b);
    let pushed = Pushed::default();
    let seen = pushed.clone();
    let pool = client.pool_with_sink(Arc::new(move |from, push| {
        seen.lock().push((from.instance_id.clone(), push))
    }));
    let t = b.target();
    let sent = pool
        .request_raw(
            &t,
            "peer.send",
            send_params(&b.peer_id, "m-1", "from the test"),
            0,
        )
        .unwrap();
    assert_eq!(sent["state"], "accepted", "{sent}");
    assert_eq!(sent["fromPeerId"], json!(client.peer_id), "{sent}");
    assert_eq!(sent["toPeerId"], json!(b.peer_id), "{sent}");
    assert!(sent["atMs"].as_u64().is_some(), "{sent}");
    let again = pool
        .request_raw(
            &t,
            "peer.send",
            send_params(&b.peer_id, "m-1", "from the test"),
            0,
        )
        .unwrap();
    assert_eq!(
        again["sequence"], sent["sequence"],
        "a retry is the same receipt"
    );
    let conflict = pool
        .request_raw(
            &t,
            "peer.send",
            send_params(&b.peer_id, "m-1", "different"),
            0,
        )
        .unwrap_err();
    assert_eq!(conflict.code, Code::MessageIdConflict);

    let status = pool
        .request_raw(
            &t,
            "peer.status",
            json!({"version":1,"messageId":"m-1","to":b.peer_id}),
            0,
        )
        .unwrap();
    assert_eq!(status["state"], "accepted");
    let dir = pool
        .request_raw(&t, "peer.directory", json!({"version": 1}), 0)
        .unwrap();
    assert_eq!(dir["runs"], json!([]), "{dir}");
    assert_eq!(dir["cursor"], Value::Null);

    // A receipt may only be recorded by the message's recipient: we are its sender.
    let mut forged = status.clone();
    forged["state"] = json!("consumed");
    forged["version"] = json!(1);
    let refused = pool.request_raw(&t, "peer.receipt", forged, 0).unwrap_err();
    assert_eq!(refused.code, Code::InvalidRequest, "{refused}");

    // Subscribe, then let B's root consume through its trusted local channel: the change is
    // pushed to us as a peer.receipt notification on the same connection.
    let sub = pool
        .request_raw(
            &t,
            "peer.subscribe",
            json!({"version":1,"messageId":"m-1","to":b.peer_id}),
            0,
        )
        .unwrap();
    assert_eq!(sub["state"], "accepted");
    let cf = peerwire::runtime::control::read(&b.control).unwrap();
    let mut local =
        LocalClient::connect(&cf.endpoint, cf.secret_bytes().unwrap(), &Limits::default()).unwrap();
    let info = local
        .call_raw("local.info", &json!({"version": 1}), 0)
        .unwrap();
    assert_eq!(info["instanceId"], json!(b.instance_id));
    let consumed = local
        .call_raw("local.consume", &json!({"version":1,"messageId":"m-1"}), 0)
        .unwrap();
    assert!(consumed.is_object(), "{consumed}");
    assert!(
        eventually(20, || pushed.lock().iter().any(|(from, push)| from
            == &b.instance_id
            && push.receipt.state.name() == "consumed")),
        "no peer.receipt notification reached the subscriber: {:?}",
        pushed.lock()
    );
    let states: Vec<Value> = pushed
        .lock()
        .iter()
        .map(|(_, push)| json!(push.receipt.state.name()))
        .collect();
    assert_eq!(
        states,
        [json!("prepared"), json!("consumed")],
        "one push per change"
    );
    // The durable copies reached our endpoint as peer.receipt requests.
    assert!(eventually(20, || durable.lock().iter().any(|(_, m, p)| m
        == "peer.receipt"
        && p["state"] == "consumed")));
    let status = pool
        .request_raw(
            &t,
            "peer.status",
            json!({"version":1,"messageId":"m-1","to":b.peer_id}),
            0,
        )
        .unwrap();
    assert_eq!(status["state"], "consumed", "{status}");

    // The other direction: B consumes A's message and pushes the receipt to A's endpoint.
    let from_a = receipt["messageId"].as_str().unwrap();
    local
        .call_raw("local.consume", &json!({"version":1,"messageId":from_a}), 0)
        .unwrap();
    assert!(
        eventually(20, || {
            let o = peer_in(&ns, &a, &["status", from_a]);
            o.status.success() && json_out(&o)["state"] == "consumed"
        }),
        "A never learned that B consumed its message"
    );
}

#[test]
fn only_the_recipient_may_record_a_receipt_at_the_sender() {
    let ns = Ns::new("tr-rcpt");
    let hb = ns.host(&["--alias", "beta"]);
    let b = remote(&hb);
    let client = Client::publish(&hb);
    let (_endpoint, got) = client.listen(&b);

    // B's session sends to us: our endpoint takes custody and answers with a receipt.
    let receipt = json_out(&peer_in(
        &ns,
        &b,
        &["send", &client.peer_id, "to the tester"],
    ));
    assert_eq!(receipt["state"], "accepted", "{receipt}");
    let sends: Vec<Map<String, Value>> = got
        .lock()
        .iter()
        .filter(|(from, m, _)| from == &b.instance_id && m == "peer.send")
        .map(|(_, _, p)| p.clone())
        .collect();
    assert_eq!(sends.len(), 1, "{sends:?}");
    let sent = &sends[0];
    assert_eq!(sent["to"], json!(client.peer_id));
    assert_eq!(sent["content"], "to the tester");
    assert_eq!(sent["version"], 1);
    assert_eq!(sent["fromRun"], Value::Null);

    let mut consumed = receipt.clone();
    consumed["state"] = json!("consumed");
    consumed["atMs"] = json!(peerwire::clock::now_ms());
    consumed["version"] = json!(1);
    consumed["fromRun"] = Value::Null;
    for key in [
        "to",
        "error",
        "createdAtMs",
        "updatedAtMs",
        "toInstanceId",
        "toRunId",
    ] {
        consumed.as_object_mut().unwrap().remove(key);
    }

    // Another authenticated root, or we speaking for a run that is not the recipient, is
    // refused and changes nothing.
    let intruder = Client::publish(&hb);
    let e = intruder
        .pool()
        .request_raw(&b.target(), "peer.receipt", consumed.clone(), 0)
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidRequest, "{e}");
    let mut as_run = consumed.clone();
    as_run["fromRun"] = json!("r-not-the-recipient");
    let e = client
        .pool()
        .request_raw(&b.target(), "peer.receipt", as_run, 0)
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidRequest, "{e}");
    let id = receipt["messageId"].as_str().unwrap();
    let status = json_out(&peer_in(&ns, &b, &["status", id]));
    assert_eq!(status["state"], "accepted", "{status}");

    // The recipient records it; a later regression to prepared is ignored.
    let ok = client
        .pool()
        .request_raw(&b.target(), "peer.receipt", consumed.clone(), 0)
        .unwrap();
    assert_eq!(ok, json!({"ok": true, "state": "consumed"}));
    let mut older = consumed.clone();
    older["state"] = json!("prepared");
    let ok = client
        .pool()
        .request_raw(&b.target(), "peer.receipt", older, 0)
        .unwrap();
    assert_eq!(ok["state"], "consumed", "receipts never regress: {ok}");
    let status = json_out(&peer_in(&ns, &b, &["status", id]));
    assert_eq!(status["state"], "consumed", "{status}");
}

#[test]
fn oversize_invalid_and_premature_frames_are_refused_and_the_host_keeps_serving() {
    let ns = Ns::new("tr-bad");
    let hb = ns.host(&["--alias", "beta"]);
    let b = remote(&hb);
    let client = Client::publish(&hb);
    let frame_bytes = Limits::default().frame_bytes as usize;

    // Oversize with a newline, before and after authentication.
    for authed in [false, true] {
        let mut raw = if authed {
            raw_peer(&b, &client)
        } else {
            Raw::connect(&b.endpoint)
        };
        let mut big = vec![b'x'; frame_bytes + 10];
        big.push(b'\n');
        raw.send(&big);
        let line = raw.line().expect("an error line");
        assert_eq!(code_of(&line), Code::FrameTooLarge, "{line}");
        assert!(raw.closed());
        assert_serves(&b, &client);
    }
    // Oversize without a newline: refused as soon as the bound is passed.
    let mut raw = Raw::connect(&b.endpoint);
    raw.send(&vec![b'{'; frame_bytes + 1]);
    let line = raw.line().expect("an error line");
    assert_eq!(code_of(&line), Code::FrameTooLarge, "{line}");
    assert!(raw.closed());
    assert_serves(&b, &client);

    // Invalid UTF-8: an error line; before authentication the connection closes, after it the
    // connection keeps working.
    let mut raw = Raw::connect(&b.endpoint);
    raw.send(b"{\"jsonrpc\":\"2.0\",\xff\xfe}\n");
    let line = raw.line().expect("an error line");
    assert!(line["error"].is_object(), "{line}");
    assert!(raw.closed());
    let mut raw = raw_peer(&b, &client);
    raw.send(b"\xc3\x28\n");
    let line = raw.line().expect("an error line");
    assert!(line["error"].is_object(), "{line}");
    raw.send(&request(9, "peer.directory", json!({"version": 1})));
    assert_eq!(raw.line().unwrap()["id"], 9);

    // Deeply nested JSON within frameBytes: a parse error, no crash.
    let depth = frame_bytes / 2 - 8;
    let mut nested = "[".repeat(depth).into_bytes();
    nested.extend("]".repeat(depth).bytes());
    nested.push(b'\n');
    raw.send(&nested);
    let line = raw.line().expect("an error line");
    assert!(line["error"].is_object(), "{line}");
    raw.send(&request(10, "peer.directory", json!({"version": 1})));
    assert_eq!(raw.line().unwrap()["id"], 10);
    let mut pre = Raw::connect(&b.endpoint);
    pre.send(&nested);
    assert!(pre.line().expect("an error line")["error"].is_object());
    assert!(pre.closed());

    // A method before the handshake: AUTH_FAILED, then close.
    let mut raw = Raw::connect(&b.endpoint);
    raw.send(&request(
        1,
        "peer.send",
        send_params(&b.peer_id, "early", "x"),
    ));
    let line = raw.line().expect("an error line");
    assert_eq!(code_of(&line), Code::AuthFailed, "{line}");
    assert!(raw.closed());
    assert_serves(&b, &client);
}

#[test]
fn forged_replayed_and_slow_handshakes_are_refused() {
    let ns = Ns::new("tr-hs");
    ns.config(json!({"limits": {"handshakeMs": 300}}));
    let hb = ns.host(&["--alias", "beta"]);
    let b = remote(&hb);
    let client = Client::publish(&hb);
    let other = Client::publish(&hb);

    // A valid handshake delivered one byte at a time.
    let mut raw = Raw::connect(&b.endpoint);
    let (mut init, hello) = Initiator::start(
        &client.instance_id,
        None,
        &client.keys,
        b.expected(),
        nonce(),
    );
    for byte in &hello {
        raw.send(std::slice::from_ref(byte));
    }
    let auth = init
        .on_message(raw.incoming(), &client.keys)
        .unwrap()
        .unwrap();
    for byte in &auth {
        raw.send(std::slice::from_ref(byte));
    }
    assert!(
        init.on_message(raw.incoming(), &client.keys)
            .unwrap()
            .is_none()
    );
    drop(raw);

    // A proof over a different transcript (the responder's role instead of ours).
    let mut raw = Raw::connect(&b.endpoint);
    let ni = nonce();
    let (_, hello) = Initiator::start(&client.instance_id, None, &client.keys, b.expected(), ni);
    raw.send(&hello);
    let answer = raw.line().unwrap();
    let nr: [u8; 32] = identity::unb64(answer["result"]["nonce"].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    let responder = Party {
        instance_id: b.instance_id.clone(),
        public_key: b.public_key,
    };
    let wrong = transcript(Role::Responder, &client.party(), &responder, &ni, &nr);
    let proof = identity::b64(&client.keys.sign(&wrong));
    raw.send(&request(2, "peer.auth", json!({"proof": proof})));
    let line = raw.line().unwrap();
    assert_eq!(code_of(&line), Code::AuthFailed, "{line}");
    assert!(raw.closed());

    // A replayed nonce: the same hello again is refused.
    let mut raw = Raw::connect(&b.endpoint);
    raw.send(&hello);
    let line = raw.line().unwrap();
    assert_eq!(code_of(&line), Code::AuthFailed, "{line}");
    assert!(raw.closed());

    // A valid key claiming another live instance's id, and an id nobody advertises.
    for claimed in [other.instance_id.clone(), identity::new_instance_id()] {
        let mut raw = Raw::connect(&b.endpoint);
        let (_, hello) = Initiator::start(&claimed, None, &client.keys, b.expected(), nonce());
        raw.send(&hello);
        let line = raw.line().unwrap();
        assert_eq!(code_of(&line), Code::AuthFailed, "{line}");
        assert!(raw.closed());
    }

    // Slowloris: connect and send nothing; the host closes at handshakeMs with AUTH_FAILED.
    let mut idle = Raw::connect(&b.endpoint);
    let line = idle
        .line()
        .expect("the host answers a silent client before closing");
    assert_eq!(code_of(&line), Code::AuthFailed, "{line}");
    assert!(idle.closed());
    assert_serves(&b, &client);
}

#[test]
fn floods_are_bounded_and_the_host_keeps_serving() {
    let ns = Ns::new("tr-flood");
    let hb = ns.host(&["--alias", "beta"]);
    let b = remote(&hb);
    let client = Client::publish(&hb);
    assert_serves(&b, &client);
    let before = b.rss_kib();

    // 1,000 requests coalesced in one write: 1,000 answers, in order.
    let mut raw = raw_peer(&b, &client);
    let mut batch = Vec::new();
    for id in 1..=1000u64 {
        batch.extend(request(id, "peer.directory", json!({"version": 1})));
    }
    let mut writer = raw.stream.try_clone().unwrap();
    let w = std::thread::spawn(move || writer.write_all(&batch).is_ok());
    for id in 1..=1000u64 {
        let line = raw.line().expect("an answer");
        assert_eq!(line["id"], id, "{line}");
        assert!(line["result"]["runs"].is_array(), "{line}");
    }
    assert!(w.join().unwrap());
    drop(raw);

    // 200 connections at once: the excess gets one JSON-RPC error line (QUEUE_FULL, id null)
    // and is closed; each admitted one gets AUTH_FAILED at handshakeMs, since it never speaks.
    let bound = Limits::default().inbound_connections as usize;
    let mut conns: Vec<Raw> = (0..200).map(|_| Raw::connect(&b.endpoint)).collect();
    let (mut refused, mut timed_out) = (0, 0);
    for c in &mut conns {
        let line = c.line().expect("every connection gets exactly one answer");
        assert_eq!(line["id"], Value::Null, "{line}");
        match code_of(&line) {
            Code::QueueFull => refused += 1,
            Code::AuthFailed => timed_out += 1,
            other => panic!("unexpected {other}: {line}"),
        }
        assert!(c.closed(), "the connection is closed after its answer");
    }
    assert_eq!(refused + timed_out, 200);
    assert!(
        timed_out <= bound,
        "{timed_out} admitted with inboundConnections {bound}"
    );
    drop(conns);
    assert_serves(&b, &client);

    // Many short handshakes do not leak either.
    for _ in 0..100 {
        drop(raw_peer(&b, &client));
    }
    assert_serves(&b, &client);
    let after = b.rss_kib();
    eprintln!("host VmRSS {before} KiB before the floods, {after} KiB after");
    assert!(
        after < before + 64 * 1024,
        "host RSS grew from {before} KiB to {after} KiB"
    );
}

#[test]
fn local_only_methods_are_denied_to_peers_and_the_local_channel_needs_its_secret() {
    let ns = Ns::new("tr-cap");
    let hb = ns.host(&["--alias", "beta"]);
    let b = remote(&hb);
    let client = Client::publish(&hb);
    let pool = client.pool();
    for method in ["peer.read", "local.info", "local.tool", "resource.request"] {
        let e = pool
            .request_raw(&b.target(), method, json!({"version": 1}), 0)
            .unwrap_err();
        assert_eq!(e.code, Code::CapabilityDenied, "{method}: {e}");
    }
    let e = pool
        .request_raw(&b.target(), "peer.nonexistent", json!({"version": 1}), 0)
        .unwrap_err();
    assert_eq!(e.code, Code::MethodNotFound);

    let cf = peerwire::runtime::control::read(&b.control).unwrap();
    let mut wrong = cf.secret_bytes().unwrap();
    wrong[0] ^= 1;
    let e = LocalClient::connect(&cf.endpoint, wrong, &Limits::default())
        .err()
        .expect("a wrong secret is refused");
    assert_eq!(e.code, Code::AuthFailed, "{e}");
    // The right one works.
    let mut ok =
        LocalClient::connect(&cf.endpoint, cf.secret_bytes().unwrap(), &Limits::default()).unwrap();
    assert_eq!(
        ok.call_raw("local.info", &json!({"version": 1}), 0)
            .unwrap()["peerId"],
        json!(b.peer_id)
    );
    assert_serves(&b, &client);
}

#[test]
fn a_restarted_host_is_a_new_incarnation_and_the_old_route_ends() {
    let ns = Ns::new("tr-stale");
    let ha = ns.host(&["--alias", "alpha"]);
    let mut hb = ns.host(&["--alias", "beta", "--session-id", "beta-session"]);
    let (a, old) = (remote(&ha), remote(&hb));
    // B's session sends to A, so A holds a message from B's exact incarnation.
    let receipt = json_out(&peer_in(&ns, &old, &["send", &a.peer_id, "from old beta"]));
    assert_eq!(receipt["state"], "accepted", "{receipt}");
    let message_id = receipt["messageId"].as_str().unwrap().to_string();

    hb.signal(nix::sys::signal::Signal::SIGTERM);
    hb.wait();
    let hb2 = ns.host(&["--alias", "beta", "--session-id", "beta-session"]);
    let new = remote(&hb2);
    assert_ne!(new.instance_id, old.instance_id);

    // A's reply goes to the old incarnation only: TARGET_ENDED, never the new one.
    let o = peer_in(&ns, &a, &["reply", &message_id, "too late"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stdout).into_owned() + &common::stderr(&o);
    assert!(err.contains("TARGET_ENDED"), "{err}");

    // At the transport: expecting the old instance at the new endpoint is a stale incarnation.
    let client = Client::publish(&hb2);
    let stale = Target {
        instance_id: old.instance_id.clone(),
        endpoint: new.endpoint.clone(),
        public_key: old.public_key,
    };
    let e = client
        .pool()
        .request_raw(&stale, "peer.directory", json!({"version": 1}), 0)
        .unwrap_err();
    assert_eq!(e.code, Code::TargetEnded, "{e}");
    // The old endpoint is gone.
    let e = client
        .pool()
        .request_raw(&old.target(), "peer.directory", json!({"version": 1}), 0)
        .unwrap_err();
    assert_eq!(e.code, Code::PeerOffline, "{e}");
    assert_serves(&new, &client);
}

/// A send by alias reaches a target that restarted under that alias: the sender reuses a
/// name's resolution only while the presence directory is unchanged, and reads the
/// directory's mtime at most every `NAME_RECHECK_MS` (50 ms), so a send made later than that
/// after the restart resolves the name afresh instead of aiming at the ended incarnation.
#[test]
fn a_send_by_alias_after_the_target_restarted_reaches_the_new_incarnation() {
    let ns = Ns::new("tr-realias");
    let ha = ns.host(&["--alias", "alpha"]);
    let mut hb = ns.host(&["--alias", "beta"]);
    let (a, old) = (remote(&ha), remote(&hb));
    // A directory mtime younger than 100 ms is not trusted: let it settle so that alpha
    // remembers the name and reuses it for the sends below.
    std::thread::sleep(Duration::from_millis(200));
    for i in 0..3 {
        let r = json_out(&peer_in(
            &ns,
            &a,
            &["send", "@beta", &format!("before {i}")],
        ));
        assert_eq!(r["state"], "accepted", "{r}");
        assert_eq!(r["to"], json!(old.peer_id), "{r}");
    }

    hb.signal(nix::sys::signal::Signal::SIGTERM);
    hb.wait();
    let hb2 = ns.host(&["--alias", "beta"]);
    let new = remote(&hb2);
    assert_ne!(new.instance_id, old.instance_id);
    assert_ne!(new.peer_id, old.peer_id);
    // Longer than NAME_RECHECK_MS, however fast the restart was.
    std::thread::sleep(Duration::from_millis(100));

    let r = json_out(&peer_in(&ns, &a, &["send", "@beta", "after the restart"]));
    assert_eq!(r["state"], "accepted", "{r}");
    assert_eq!(r["to"], json!(new.peer_id), "{r}");
}

/// The `.EX` lines of the page's EXAMPLE section, unescaped.
fn manpage_example() -> Vec<String> {
    let page = include_str!("../man/man7/peer-protocol.7");
    let mut out = Vec::new();
    let (mut section, mut ex) = (false, false);
    for line in page.lines() {
        if let Some(h) = line.strip_prefix(".SH ") {
            section = h.trim() == "EXAMPLE";
        } else if line == ".EX" {
            ex = true;
        } else if line == ".EE" {
            ex = false;
        } else if section && ex {
            out.push(line.replace("\\-", "-").replace("\\e", "\\"));
        }
    }
    out
}

#[test]
fn the_manpage_example_is_answered_by_a_real_host_as_documented() {
    let ns = Ns::new("tr-man");
    let hb = ns.host(&["--alias", "beta"]);
    let b = remote(&hb);
    let client = Client::publish(&hb);
    // A complete peer root: the host's durable receipt pushes reach our own endpoint.
    let (_endpoint, received) = client.listen(&b);
    let lines = manpage_example();
    let page = |i: usize| serde_json::from_str::<Value>(&lines[i]).unwrap();

    // The documented hello, with our identity and the real target in place of the page's.
    let mut hello = page(0);
    let ni = nonce();
    hello["params"]["instanceId"] = json!(client.instance_id);
    hello["params"]["publicKey"] = json!(client.keys.spki_b64());
    hello["params"]["nonce"] = json!(identity::b64(&ni));
    hello["params"]["expect"] = json!(b.instance_id);
    let mut raw = Raw::connect(&b.endpoint);
    raw.send(format!("{hello}\n").as_bytes());
    let answer = raw.line().unwrap();
    let documented = page(1);
    assert_eq!(answer["id"], documented["id"]);
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&answer["result"]), keys(&documented["result"]));
    assert_eq!(answer["result"]["instanceId"], json!(b.instance_id));
    let nr: [u8; 32] = identity::unb64(answer["result"]["nonce"].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    let responder = Party {
        instance_id: b.instance_id.clone(),
        public_key: b.public_key,
    };
    let signed_r = transcript(Role::Responder, &client.party(), &responder, &ni, &nr);
    let proof_r = identity::unb64(answer["result"]["proof"].as_str().unwrap()).unwrap();
    assert!(identity::verify(&b.public_key, &signed_r, &proof_r));

    let mut auth = page(2);
    let signed_i = transcript(Role::Initiator, &client.party(), &responder, &ni, &nr);
    auth["params"]["proof"] = json!(identity::b64(&client.keys.sign(&signed_i)));
    raw.send(format!("{auth}\n").as_bytes());
    assert_eq!(raw.line().unwrap(), page(3));

    let mut send = page(4);
    send["params"]["to"] = json!(b.peer_id);
    raw.send(format!("{send}\n").as_bytes());
    let got = raw.line().unwrap();
    let want = page(5);
    assert_eq!(got["id"], want["id"]);
    // `flushedDevice` is optional (a recipient on a qualifying ext4 journal states it; see
    // peer.send in the man page): the documented example, from no particular filesystem,
    // leaves it out.
    let stated = &got["result"]["flushedDevice"];
    assert!(stated.is_null() || stated.is_u64(), "{got}");
    let mut got_keys = keys(&got["result"]);
    got_keys.retain(|k| k != "flushedDevice");
    assert_eq!(got_keys, keys(&want["result"]), "{got}");
    assert_eq!(got["result"]["toPeerId"], json!(b.peer_id));
    assert_eq!(got["result"]["fromPeerId"], json!(client.peer_id));
    assert_eq!(got["result"]["state"], want["result"]["state"]);
    assert_eq!(got["result"]["messageId"], want["result"]["messageId"]);
    assert_eq!(
        got["result"]["correlationId"],
        want["result"]["correlationId"]
    );

    // Subscribe, consume locally, and receive the documented notification shape.
    let mut sub = page(6);
    sub["params"]["to"] = json!(b.peer_id);
    raw.send(format!("{sub}\n").as_bytes());
    let got = raw.line().unwrap();
    let want = page(7);
    assert_eq!(got["id"], want["id"]);
    assert_eq!(keys(&got["result"]), keys(&want["result"]), "{got}");
    assert_eq!(got["result"]["state"], "accepted");
    let cf = peerwire::runtime::control::read(&b.control).unwrap();
    let mut local =
        LocalClient::connect(&cf.endpoint, cf.secret_bytes().unwrap(), &Limits::default()).unwrap();
    local
        .call_raw(
            "local.consume",
            &json!({"version":1,"messageId":got["result"]["messageId"]}),
            0,
        )
        .unwrap();
    // Each change is pushed (prepared, then consumed), in that order, each in the page's shape.
    let documented = page(8);
    let mut states = Vec::new();
    while states.last().map(String::as_str) != Some("consumed") && states.len() < 4 {
        let note = raw.line().expect("a pushed receipt");
        assert_eq!(note["method"], documented["method"], "{note}");
        assert!(note.get("id").is_none());
        assert_eq!(keys(&note["params"]), keys(&documented["params"]), "{note}");
        states.push(note["params"]["state"].as_str().unwrap().to_string());
    }
    assert_eq!(states, ["prepared", "consumed"]);
    // The durable copies arrived as peer.receipt requests from the authenticated recipient.
    assert!(eventually(20, || received
        .lock()
        .iter()
        .any(|(_, _, p)| p["state"] == "consumed")));
    for (from, method, params) in received.lock().iter() {
        assert_eq!(from, &b.instance_id);
        assert_eq!(method, "peer.receipt");
        assert_eq!(
            keys(&Value::Object(params.clone())),
            keys(&documented["params"])
        );
    }
}

#[test]
fn peer_requests_are_validated_and_each_sender_sees_only_its_own_messages() {
    let ns = Ns::new("tr-valid");
    let hb = ns.host(&["--alias", "beta"]);
    let b = remote(&hb);
    let (client, intruder) = (Client::publish(&hb), Client::publish(&hb));
    let (t, pool) = (b.target(), client.pool());
    let send = |p: Value| pool.request_raw(&t, "peer.send", p, 0).map_err(|e| e.code);
    let with = |id: &str, k: &str, v: Value| {
        let mut p = send_params(&b.peer_id, id, "x");
        p[k] = v;
        p
    };
    assert_eq!(send(with("e-1", "expiresAt", json!(1))), Err(Code::Expired));
    assert_eq!(
        send(with("e-2", "version", json!(2))),
        Err(Code::InvalidRequest)
    );
    assert_eq!(send(with("e-3", "content", json!(5))), Err(Code::Usage));
    assert_eq!(
        send(with("e-4", "replyTo", json!("m-unknown"))),
        Err(Code::InvalidReply)
    );
    assert_eq!(send(with("bad id!", "topic", json!("t"))), Err(Code::Usage));
    let big = "x".repeat(Limits::default().message_bytes as usize + 1);
    assert_eq!(
        send(with("e-5", "content", json!(big))),
        Err(Code::MessageTooLarge)
    );
    let e = pool
        .request_raw(&t, "peer.directory", json!([1]), 0)
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidRequest);

    // Another authenticated sender cannot observe or subscribe to our message.
    assert!(send(send_params(&b.peer_id, "mine", "x")).is_ok());
    let ask = json!({"version":1,"messageId":"mine","to":b.peer_id});
    for method in ["peer.status", "peer.subscribe"] {
        let e = intruder
            .pool()
            .request_raw(&t, method, ask.clone(), 0)
            .unwrap_err();
        assert_eq!(e.code, Code::NotFound, "{method}: {e}");
        assert_eq!(
            pool.request_raw(&t, method, ask.clone(), 0).unwrap()["state"],
            "accepted"
        );
    }
    // The same messageId from another sender is another message.
    let theirs = intruder
        .pool()
        .request_raw(&t, "peer.send", send_params(&b.peer_id, "mine", "other"), 0)
        .unwrap();
    assert_eq!(theirs["fromPeerId"], json!(intruder.peer_id));
    assert_serves(&b, &client);
}

#[test]
fn idle_unauthenticated_connections_cannot_lock_the_sessions_own_cli_out() {
    let ns = Ns::new("prehandshake");
    let host = ns.host(&["--alias", "busy"]);
    let r = remote(&host);
    for round in 0..2 {
        // 80 same-uid connections that never say hello, more than inboundConnections (64).
        let idle: Vec<Raw> = (0..80).map(|_| Raw::connect(&r.endpoint)).collect();
        let out = peer_in(&ns, &r, &["inbox"]);
        let v = json_out(&out);
        assert!(v["messages"].is_array(), "round {round}: {v}");
        drop(idle);
    }
}
