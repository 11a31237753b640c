//! The mutual Ed25519 handshake as two sans-IO state machines, one per role, plus the local
//! control channel's secret hello. Each side signs a domain-separated, length-prefixed
//! transcript binding protocol, role, both instance ids, both SPKI keys and both fresh nonces;
//! the layout is specified byte-exactly in `peer-protocol(7)`. The machines only consume parsed
//! messages and produce frames; sockets, clocks and deadlines belong to `transport`.

use super::rpc::{self, Id, Incoming};
use super::{PROTOCOL_NAME, PROTOCOL_VERSION};
use crate::error::{Code, Error, Result};
use crate::identity::{self, KeyPair};
use serde_json::{Map, Value, json};
use std::collections::{HashSet, VecDeque};

/// Domain separation string, the transcript's first field.
pub const DOMAIN: &str = "peerwire/handshake/v1";
/// Nonce and local-secret length in bytes.
pub const NONCE_BYTES: usize = 32;
/// JSON-RPC ids the initiator uses for its two handshake requests.
pub const HELLO_ID: i64 = 1;
pub const AUTH_ID: i64 = 2;
/// `error.data.reason` of the refusal sent when `expect` names another incarnation.
pub const STALE_REASON: &str = "stale-incarnation";

/// Which side signs a transcript.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Initiator,
    Responder,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Initiator => "initiator",
            Role::Responder => "responder",
        }
    }
}

/// One side's identity as the transcript sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Party {
    pub instance_id: String,
    pub public_key: [u8; 32],
}

/// The signed bytes: ten fields, each a u32 big-endian length followed by the field's bytes.
/// The version field is the u32 big-endian encoding of [`PROTOCOL_VERSION`].
pub fn transcript(
    signer: Role,
    initiator: &Party,
    responder: &Party,
    ni: &[u8; 32],
    nr: &[u8; 32],
) -> Vec<u8> {
    let version = u32::try_from(PROTOCOL_VERSION)
        .unwrap_or(u32::MAX)
        .to_be_bytes();
    let i_spki = identity::spki_der(&initiator.public_key);
    let r_spki = identity::spki_der(&responder.public_key);
    let fields: [&[u8]; 10] = [
        DOMAIN.as_bytes(),
        PROTOCOL_NAME.as_bytes(),
        &version,
        signer.name().as_bytes(),
        initiator.instance_id.as_bytes(),
        responder.instance_id.as_bytes(),
        &i_spki,
        &r_spki,
        ni,
        nr,
    ];
    let mut out = Vec::with_capacity(fields.iter().map(|f| f.len() + 4).sum());
    for field in fields {
        // Every field is far below 4 GiB: ids are bounded by `is_valid_id`, the rest are fixed.
        out.extend_from_slice(&u32::try_from(field.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(field);
    }
    out
}

pub use crate::identity::ct_eq;

/// Initiator nonces seen recently by a responder, so a replayed hello is refused. Bounded:
/// the oldest entry leaves when `capacity` is reached.
pub struct RecentNonces {
    capacity: usize,
    set: HashSet<[u8; 32]>,
    order: VecDeque<[u8; 32]>,
}

impl RecentNonces {
    pub fn new(capacity: usize) -> RecentNonces {
        RecentNonces {
            capacity: capacity.max(1),
            set: HashSet::new(),
            order: VecDeque::new(),
        }
    }

    /// Records `nonce`; false when it was already recorded (a replay).
    pub fn insert(&mut self, nonce: &[u8; 32]) -> bool {
        if self.set.contains(nonce) {
            return false;
        }
        if self.order.len() >= self.capacity
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        self.set.insert(*nonce);
        self.order.push_back(*nonce);
        true
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

fn auth_failed(message: impl Into<String>) -> Error {
    Error::new(Code::AuthFailed, message)
}

fn b64_field<const N: usize>(params: &Map<String, Value>, name: &str) -> Result<[u8; N]> {
    params
        .get(name)
        .and_then(Value::as_str)
        .filter(|s| s.len() <= N * 2)
        .and_then(identity::unb64)
        .and_then(|v| <[u8; N]>::try_from(v).ok())
        .ok_or_else(|| auth_failed(format!("{name} must be base64 of exactly {N} bytes")))
}

fn id_field(params: &Map<String, Value>, name: &str) -> Result<String> {
    match params.get(name).and_then(Value::as_str) {
        Some(s) if identity::is_valid_id(s) => Ok(s.to_string()),
        _ => Err(auth_failed(format!("{name} must be a valid instance id"))),
    }
}

fn key_field(params: &Map<String, Value>) -> Result<[u8; 32]> {
    params
        .get("publicKey")
        .and_then(Value::as_str)
        .and_then(identity::parse_spki_b64)
        .ok_or_else(|| auth_failed("publicKey must be base64 of an Ed25519 SPKI DER key"))
}

fn check_version_field(params: &Map<String, Value>) -> Result<()> {
    if params.get("version").and_then(Value::as_u64) != Some(PROTOCOL_VERSION) {
        return Err(auth_failed("version must be 1; upgrade the older peer"));
    }
    Ok(())
}

/// What the initiator expects to reach: the advertisement it resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    pub instance_id: String,
    pub public_key: [u8; 32],
}

enum InitState {
    AwaitHello,
    AwaitAuth,
    Done,
    Failed,
}

/// The connecting side. `start` gives the `peer.hello` frame; feed each answer to
/// [`Initiator::on_message`] until [`Initiator::is_done`].
pub struct Initiator {
    me: Party,
    expected: Expected,
    nonce: [u8; 32],
    state: InitState,
}

impl Initiator {
    pub fn start(
        me_id: &str,
        run_id: Option<&str>,
        keys: &KeyPair,
        expected: Expected,
        nonce: [u8; 32],
    ) -> (Initiator, Vec<u8>) {
        let me = Party {
            instance_id: me_id.to_string(),
            public_key: keys.public(),
        };
        let params = json!({
            "version": PROTOCOL_VERSION,
            "protocol": PROTOCOL_NAME,
            "instanceId": me_id,
            "runId": run_id,
            "publicKey": keys.spki_b64(),
            "nonce": identity::b64(&nonce),
            "expect": expected.instance_id,
        });
        let frame = rpc::encode_request(&Id::Num(HELLO_ID), "peer.hello", &params);
        let init = Initiator {
            me,
            expected,
            nonce,
            state: InitState::AwaitHello,
        };
        (init, frame)
    }

    pub fn is_done(&self) -> bool {
        matches!(self.state, InitState::Done)
    }

    /// Consumes one answer. `Ok(Some(frame))`: send it and wait for the next answer;
    /// `Ok(None)`: authenticated. Any error is final: close the connection.
    pub fn on_message(&mut self, msg: Incoming, keys: &KeyPair) -> Result<Option<Vec<u8>>> {
        let state = std::mem::replace(&mut self.state, InitState::Failed);
        let (want_id, result) = match (&state, msg) {
            (InitState::AwaitHello, Incoming::Response { id, result }) => (HELLO_ID, (id, result)),
            (InitState::AwaitAuth, Incoming::Response { id, result }) => (AUTH_ID, (id, result)),
            _ => return Err(auth_failed("unexpected message during the handshake")),
        };
        let value = match result {
            (_, Err(obj)) => return Err(map_refusal(&obj)),
            (Some(Id::Num(n)), Ok(v)) if n == want_id => v,
            _ => return Err(auth_failed("handshake answer carries the wrong id")),
        };
        if want_id == HELLO_ID {
            let frame = self.on_hello_result(&value, keys)?;
            self.state = InitState::AwaitAuth;
            return Ok(Some(frame));
        }
        if value.get("ok") != Some(&Value::Bool(true)) {
            return Err(auth_failed("peer.auth was not acknowledged with ok:true"));
        }
        self.state = InitState::Done;
        Ok(None)
    }

    fn on_hello_result(&self, value: &Value, keys: &KeyPair) -> Result<Vec<u8>> {
        let Some(params) = value.as_object() else {
            return Err(auth_failed("peer.hello result must be an object"));
        };
        check_version_field(params)?;
        let r_id = id_field(params, "instanceId")?;
        if r_id != self.expected.instance_id {
            return Err(Error::new(
                Code::TargetEnded,
                format!(
                    "the endpoint now serves instance {r_id}, not {}; refresh discovery",
                    self.expected.instance_id
                ),
            ));
        }
        if key_field(params)? != self.expected.public_key {
            return Err(auth_failed(
                "the responder's key differs from its advertisement",
            ));
        }
        let nr = b64_field::<NONCE_BYTES>(params, "nonce")?;
        let proof = b64_field::<64>(params, "proof")?;
        let responder = Party {
            instance_id: r_id,
            public_key: self.expected.public_key,
        };
        let signed = transcript(Role::Responder, &self.me, &responder, &self.nonce, &nr);
        if !identity::verify(&responder.public_key, &signed, &proof) {
            return Err(auth_failed("the responder's proof does not verify"));
        }
        let mine = transcript(Role::Initiator, &self.me, &responder, &self.nonce, &nr);
        let params = json!({ "proof": identity::b64(&keys.sign(&mine)) });
        Ok(rpc::encode_request(&Id::Num(AUTH_ID), "peer.auth", &params))
    }
}

/// Maps a responder's refusal: a stale incarnation means the target ended.
fn map_refusal(obj: &Value) -> Error {
    let err = Error::from_rpc(obj);
    let stale = obj
        .get("data")
        .and_then(|d| d.get("reason"))
        .and_then(Value::as_str)
        == Some(STALE_REASON);
    if stale {
        return Error::new(
            Code::TargetEnded,
            format!("target incarnation ended ({})", err.message),
        );
    }
    err
}

/// An authenticated channel, as the responder established it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Channel {
    /// A peer root; `instance_id` is proven by its key, `run_id` is that root's claim.
    Peer {
        instance_id: String,
        run_id: Option<String>,
    },
    /// A trusted local adapter that presented the root's secret.
    Local,
    /// A command of one child run that presented that run's own secret: it speaks for the run
    /// only, with the run's capabilities, whatever its parameters claim.
    Run { run_id: String },
}

/// What the responder needs from its surroundings.
pub struct ResponderCtx<'a> {
    pub instance_id: &'a str,
    pub keys: &'a KeyPair,
    pub local_secret: &'a [u8; 32],
    /// The live child run whose secret this is (compared in constant time by the owner).
    pub run_secret: &'a dyn Fn(&[u8; 32]) -> Option<String>,
    /// The key the initiator's own advertisement publishes (presence lookup).
    pub advertised_key: &'a dyn Fn(&str) -> Option<[u8; 32]>,
    /// Records an initiator nonce; false when it was seen before.
    pub remember_nonce: &'a mut dyn FnMut(&[u8; 32]) -> bool,
}

/// One responder step.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Send the frame and keep reading handshake messages.
    Continue(Vec<u8>),
    /// Send the frame; the channel is authenticated.
    Established { reply: Vec<u8>, channel: Channel },
    /// Send the frame, then close.
    Refuse { reply: Vec<u8>, error: Error },
}

enum RespState {
    AwaitHello,
    AwaitAuth {
        initiator: Party,
        run_id: Option<String>,
        ni: [u8; 32],
    },
    Finished,
}

/// The accepting side: admits either a peer (`peer.hello` then `peer.auth`) or a local adapter
/// (`local.hello`). Anything else first is refused with `AUTH_FAILED`.
pub struct Responder {
    nonce: [u8; 32],
    state: RespState,
}

impl Responder {
    pub fn new(nonce: [u8; 32]) -> Responder {
        Responder {
            nonce,
            state: RespState::AwaitHello,
        }
    }

    pub fn on_message(&mut self, msg: Incoming, ctx: &mut ResponderCtx<'_>) -> Step {
        let state = std::mem::replace(&mut self.state, RespState::Finished);
        let (id, method, params) = match msg {
            Incoming::Request { id, method, params } => (id, method, params),
            _ => {
                return refuse(
                    None,
                    auth_failed("authenticate first: send peer.hello or local.hello"),
                );
            }
        };
        let step = match (state, method.as_str()) {
            (RespState::AwaitHello, "local.hello") => local_hello(&id, &params, ctx),
            (RespState::AwaitHello, "peer.hello") => self.hello(&id, &params, ctx),
            (
                RespState::AwaitAuth {
                    initiator,
                    run_id,
                    ni,
                },
                "peer.auth",
            ) => self.auth(&id, &params, ctx, initiator, run_id, &ni),
            _ => Err(auth_failed(format!(
                "{} is not allowed before authentication completes",
                crate::sanitize::line(&method, crate::config::internal::ECHO_CHARS_MAX)
            ))),
        };
        match step {
            Ok(step) => step,
            Err(error) if error.code == Code::TargetEnded => {
                let mut obj = auth_failed(error.message.clone()).to_rpc();
                obj["data"]["reason"] = json!(STALE_REASON);
                Step::Refuse {
                    reply: rpc::encode_error_object(Some(&id), &obj),
                    error,
                }
            }
            Err(error) => refuse(Some(&id), error),
        }
    }

    fn hello(
        &mut self,
        id: &Id,
        params: &Map<String, Value>,
        ctx: &mut ResponderCtx<'_>,
    ) -> Result<Step> {
        check_version_field(params)?;
        if params.get("protocol").and_then(Value::as_str) != Some(PROTOCOL_NAME) {
            return Err(auth_failed("protocol must be \"peerwire\""));
        }
        let i_id = id_field(params, "instanceId")?;
        let run_id = match params.get("runId") {
            None | Some(Value::Null) => None,
            Some(_) => Some(id_field(params, "runId")?),
        };
        let i_key = key_field(params)?;
        let ni = b64_field::<NONCE_BYTES>(params, "nonce")?;
        let expect = params.get("expect").and_then(Value::as_str).unwrap_or("");
        if expect != ctx.instance_id {
            return Err(Error::new(
                Code::TargetEnded,
                format!(
                    "stale incarnation: this endpoint serves instance {}",
                    ctx.instance_id
                ),
            ));
        }
        match (ctx.advertised_key)(&i_id) {
            Some(k) if k == i_key => {}
            Some(_) => return Err(auth_failed("your key differs from your advertisement")),
            None => {
                return Err(auth_failed(format!(
                    "no live advertisement for instance {i_id}"
                )));
            }
        }
        if !(ctx.remember_nonce)(&ni) {
            return Err(auth_failed("replayed handshake nonce"));
        }
        let initiator = Party {
            instance_id: i_id,
            public_key: i_key,
        };
        let me = Party {
            instance_id: ctx.instance_id.to_string(),
            public_key: ctx.keys.public(),
        };
        let signed = transcript(Role::Responder, &initiator, &me, &ni, &self.nonce);
        let result = json!({
            "version": PROTOCOL_VERSION,
            "instanceId": ctx.instance_id,
            "publicKey": ctx.keys.spki_b64(),
            "nonce": identity::b64(&self.nonce),
            "proof": identity::b64(&ctx.keys.sign(&signed)),
        });
        self.state = RespState::AwaitAuth {
            initiator,
            run_id,
            ni,
        };
        Ok(Step::Continue(rpc::encode_result(id, &result)))
    }

    fn auth(
        &mut self,
        id: &Id,
        params: &Map<String, Value>,
        ctx: &ResponderCtx<'_>,
        initiator: Party,
        run_id: Option<String>,
        ni: &[u8; 32],
    ) -> Result<Step> {
        let proof = b64_field::<64>(params, "proof")?;
        let me = Party {
            instance_id: ctx.instance_id.to_string(),
            public_key: ctx.keys.public(),
        };
        let signed = transcript(Role::Initiator, &initiator, &me, ni, &self.nonce);
        if !identity::verify(&initiator.public_key, &signed, &proof) {
            return Err(auth_failed("the initiator's proof does not verify"));
        }
        Ok(Step::Established {
            reply: rpc::encode_result(id, &json!({"ok": true})),
            channel: Channel::Peer {
                instance_id: initiator.instance_id,
                run_id,
            },
        })
    }
}

fn refuse(id: Option<&Id>, error: Error) -> Step {
    Step::Refuse {
        reply: rpc::encode_error(id, &error),
        error,
    }
}

fn local_hello(id: &Id, params: &Map<String, Value>, ctx: &ResponderCtx<'_>) -> Result<Step> {
    check_version_field(params)?;
    let secret = b64_field::<NONCE_BYTES>(params, "secret")?;
    let channel = if ct_eq(&secret, ctx.local_secret) {
        Channel::Local
    } else if let Some(run_id) = (ctx.run_secret)(&secret) {
        Channel::Run { run_id }
    } else {
        return Err(auth_failed(
            "wrong local secret; use the address and secret this root gave you",
        ));
    };
    let result = json!({"ok": true, "version": PROTOCOL_VERSION, "instanceId": ctx.instance_id});
    Ok(Step::Established {
        reply: rpc::encode_result(id, &result),
        channel,
    })
}

/// The `local.hello` frame a trusted adapter sends first.
pub fn local_hello_frame(secret: &[u8; 32]) -> Vec<u8> {
    let params = json!({"version": PROTOCOL_VERSION, "secret": identity::b64(secret)});
    rpc::encode_request(&Id::Num(HELLO_ID), "local.hello", &params)
}

#[cfg(test)]
mod tests;
