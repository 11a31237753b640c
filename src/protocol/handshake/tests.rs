use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

struct World {
    ikeys: KeyPair,
    rkeys: KeyPair,
    adverts: HashMap<String, [u8; 32]>,
    nonces: RecentNonces,
    secret: [u8; 32],
}

const I: &str = "i-initiator";
const R: &str = "i-responder";

impl World {
    fn new() -> World {
        let ikeys = KeyPair::generate();
        let rkeys = KeyPair::generate();
        let mut adverts = HashMap::new();
        adverts.insert(I.to_string(), ikeys.public());
        adverts.insert(R.to_string(), rkeys.public());
        World {
            ikeys,
            rkeys,
            adverts,
            nonces: RecentNonces::new(8),
            secret: [7; 32],
        }
    }

    fn respond(&mut self, resp: &mut Responder, frame: &[u8]) -> Step {
        let msg = rpc::parse(&frame[..frame.len() - 1]).unwrap();
        let adverts = self.adverts.clone();
        let lookup = move |id: &str| adverts.get(id).copied();
        let nonces = &mut self.nonces;
        let mut remember = |n: &[u8; 32]| nonces.insert(n);
        let mut ctx = ResponderCtx {
            instance_id: R,
            keys: &self.rkeys,
            local_secret: &self.secret,
            run_secret: &|s: &[u8; 32]| (*s == [9; 32]).then(|| "r-1".to_string()),
            advertised_key: &lookup,
            remember_nonce: &mut remember,
        };
        resp.on_message(msg, &mut ctx)
    }

    fn expected(&self) -> Expected {
        Expected {
            instance_id: R.into(),
            public_key: self.rkeys.public(),
        }
    }
}

fn parse_line(frame: &[u8]) -> Incoming {
    rpc::parse(&frame[..frame.len() - 1]).unwrap()
}

fn continue_frame(step: Step) -> Vec<u8> {
    match step {
        Step::Continue(f) => f,
        other => panic!("expected Continue, got {other:?}"),
    }
}

fn refused(step: Step) -> Error {
    match step {
        Step::Refuse { error, reply } => {
            assert!(matches!(
                parse_line(&reply),
                Incoming::Response { result: Err(_), .. }
            ));
            error
        }
        other => panic!("expected Refuse, got {other:?}"),
    }
}

#[test]
fn both_roles_authenticate() {
    let mut w = World::new();
    let (mut init, hello) = Initiator::start(I, Some("r-1"), &w.ikeys, w.expected(), [1; 32]);
    let mut resp = Responder::new([2; 32]);
    let answer = continue_frame(w.respond(&mut resp, &hello));
    let auth = init
        .on_message(parse_line(&answer), &w.ikeys)
        .unwrap()
        .unwrap();
    let Step::Established { reply, channel } = w.respond(&mut resp, &auth) else {
        panic!("not established")
    };
    assert_eq!(
        channel,
        Channel::Peer {
            instance_id: I.into(),
            run_id: Some("r-1".into())
        }
    );
    assert_eq!(init.on_message(parse_line(&reply), &w.ikeys).unwrap(), None);
    assert!(init.is_done());
}

#[test]
fn transcript_layout_is_length_prefixed_fields() {
    let a = Party {
        instance_id: "i-a".into(),
        public_key: [3; 32],
    };
    let b = Party {
        instance_id: "i-b".into(),
        public_key: [4; 32],
    };
    let t = transcript(Role::Initiator, &a, &b, &[5; 32], &[6; 32]);
    assert_eq!(&t[..4], &[0, 0, 0, 21]);
    assert_eq!(&t[4..25], b"peerwire/handshake/v1");
    assert_eq!(&t[25..37], b"\0\0\0\x08peerwire");
    assert_eq!(&t[37..45], &[0, 0, 0, 4, 0, 0, 0, 1]);
    assert_eq!(&t[45..58], b"\0\0\0\x09initiator");
    let len = 25 + 12 + 8 + 13 + 7 + 7 + 2 * 48 + 2 * 36;
    assert_eq!(t.len(), len);
    assert_ne!(t, transcript(Role::Responder, &a, &b, &[5; 32], &[6; 32]));
}

#[test]
fn initiator_key_must_match_its_advertisement() {
    let mut w = World::new();
    w.adverts.insert(I.into(), KeyPair::generate().public());
    let (_, hello) = Initiator::start(I, None, &w.ikeys, w.expected(), [1; 32]);
    let e = refused(w.respond(&mut Responder::new([2; 32]), &hello));
    assert_eq!(e.code, Code::AuthFailed);
    w.adverts.remove(I);
    let (_, hello) = Initiator::start(I, None, &w.ikeys, w.expected(), [9; 32]);
    assert_eq!(
        refused(w.respond(&mut Responder::new([2; 32]), &hello)).code,
        Code::AuthFailed
    );
}

#[test]
fn valid_key_with_the_wrong_instance_id_is_refused() {
    let mut w = World::new();
    // The initiator claims another advertised instance while holding its own key.
    let (_, hello) = Initiator::start(R, None, &w.ikeys, w.expected(), [1; 32]);
    assert_eq!(
        refused(w.respond(&mut Responder::new([2; 32]), &hello)).code,
        Code::AuthFailed
    );
}

#[test]
fn proof_over_another_transcript_is_refused() {
    let mut w = World::new();
    let (_, hello) = Initiator::start(I, None, &w.ikeys, w.expected(), [1; 32]);
    let mut resp = Responder::new([2; 32]);
    let answer = continue_frame(w.respond(&mut resp, &hello));
    let Incoming::Response { result: Ok(v), .. } = parse_line(&answer) else {
        panic!()
    };
    let nr: [u8; 32] = identity::unb64(v["nonce"].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    let i = Party {
        instance_id: I.into(),
        public_key: w.ikeys.public(),
    };
    let r = Party {
        instance_id: R.into(),
        public_key: w.rkeys.public(),
    };
    // Signed as responder (wrong role) instead of initiator.
    let wrong = transcript(Role::Responder, &i, &r, &[1; 32], &nr);
    let auth = rpc::encode_request(
        &Id::Num(2),
        "peer.auth",
        &json!({"proof": identity::b64(&w.ikeys.sign(&wrong))}),
    );
    assert_eq!(refused(w.respond(&mut resp, &auth)).code, Code::AuthFailed);
}

#[test]
fn replayed_nonce_is_refused() {
    let mut w = World::new();
    let (_, hello) = Initiator::start(I, None, &w.ikeys, w.expected(), [1; 32]);
    continue_frame(w.respond(&mut Responder::new([2; 32]), &hello));
    let e = refused(w.respond(&mut Responder::new([3; 32]), &hello));
    assert_eq!(e.code, Code::AuthFailed);
    assert!(e.message.contains("replayed"), "{}", e.message);
}

#[test]
fn stale_incarnation_maps_to_target_ended() {
    let mut w = World::new();
    let old = Expected {
        instance_id: "i-old".into(),
        public_key: w.rkeys.public(),
    };
    let (mut init, hello) = Initiator::start(I, None, &w.ikeys, old, [1; 32]);
    let Step::Refuse { reply, error } = w.respond(&mut Responder::new([2; 32]), &hello) else {
        panic!()
    };
    assert_eq!(error.code, Code::TargetEnded);
    let v: Value = serde_json::from_slice(&reply).unwrap();
    assert_eq!(v["error"]["data"]["code"], json!("AUTH_FAILED"));
    assert_eq!(v["error"]["data"]["reason"], json!(STALE_REASON));
    assert_eq!(
        init.on_message(parse_line(&reply), &w.ikeys)
            .unwrap_err()
            .code,
        Code::TargetEnded
    );
}

#[test]
fn initiator_checks_the_responder() {
    let mut w = World::new();
    // A responder answering with another identity than the advertisement resolved.
    let other = KeyPair::generate();
    let expect_other = Expected {
        instance_id: R.into(),
        public_key: other.public(),
    };
    let (mut init, hello) = Initiator::start(I, None, &w.ikeys, expect_other, [1; 32]);
    let answer = continue_frame(w.respond(&mut Responder::new([2; 32]), &hello));
    assert_eq!(
        init.on_message(parse_line(&answer), &w.ikeys)
            .unwrap_err()
            .code,
        Code::AuthFailed
    );
    // A tampered proof.
    let (mut init, hello) = Initiator::start(I, None, &w.ikeys, w.expected(), [5; 32]);
    let answer = continue_frame(w.respond(&mut Responder::new([2; 32]), &hello));
    let Incoming::Response {
        id,
        result: Ok(mut v),
    } = parse_line(&answer)
    else {
        panic!()
    };
    v["proof"] = json!(identity::b64(&[0u8; 64]));
    let forged = rpc::encode_result(&id.unwrap(), &v);
    assert_eq!(
        init.on_message(parse_line(&forged), &w.ikeys)
            .unwrap_err()
            .code,
        Code::AuthFailed
    );
}

#[test]
fn methods_before_authentication_are_refused() {
    let mut w = World::new();
    let send = rpc::encode_request(&Id::Num(1), "peer.send", &json!({"version": 1}));
    assert_eq!(
        refused(w.respond(&mut Responder::new([2; 32]), &send)).code,
        Code::AuthFailed
    );
    let auth = rpc::encode_request(&Id::Num(2), "peer.auth", &json!({"proof": "AAAA"}));
    assert_eq!(
        refused(w.respond(&mut Responder::new([2; 32]), &auth)).code,
        Code::AuthFailed
    );
    let note = rpc::encode_notification("peer.hello", &json!({}));
    assert_eq!(
        refused(w.respond(&mut Responder::new([2; 32]), &note)).code,
        Code::AuthFailed
    );
}

#[test]
fn local_hello_needs_the_secret() {
    let mut w = World::new();
    let ok = w.respond(&mut Responder::new([2; 32]), &local_hello_frame(&[7; 32]));
    assert!(matches!(
        ok,
        Step::Established {
            channel: Channel::Local,
            ..
        }
    ));
    let bad = w.respond(&mut Responder::new([2; 32]), &local_hello_frame(&[8; 32]));
    assert_eq!(refused(bad).code, Code::AuthFailed);
    // A child run's own secret opens a channel bound to that run, never the root's.
    let run = w.respond(&mut Responder::new([2; 32]), &local_hello_frame(&[9; 32]));
    assert!(
        matches!(&run, Step::Established { channel: Channel::Run { run_id }, .. } if run_id == "r-1"),
        "{run:?}"
    );
    assert!(ct_eq(b"abc", b"abc") && !ct_eq(b"abc", b"abd") && !ct_eq(b"ab", b"abc"));
}

#[test]
fn recent_nonces_are_bounded() {
    let mut n = RecentNonces::new(2);
    assert!(n.insert(&[1; 32]) && n.insert(&[2; 32]));
    assert!(!n.insert(&[1; 32]));
    assert!(n.insert(&[3; 32]));
    assert_eq!(n.len(), 2);
    assert!(n.insert(&[1; 32]), "the oldest nonce left the window");
}

proptest! {
    /// Whatever a client sends first, the responder answers without panicking and only a
    /// correct hello continues.
    #[test]
    fn arbitrary_first_messages_never_panic(
        method in prop_oneof![
            Just("peer.hello".to_string()),
            Just("peer.auth".to_string()),
            Just("local.hello".to_string()),
            "[a-z.]{1,12}".prop_map(String::from),
        ],
        fields in proptest::collection::btree_map(
            prop_oneof![
                Just("version".to_string()),
                Just("protocol".to_string()),
                Just("instanceId".to_string()),
                Just("publicKey".to_string()),
                Just("nonce".to_string()),
                Just("expect".to_string()),
                Just("secret".to_string()),
                Just("proof".to_string()),
            ],
            prop_oneof![
                Just(json!(1)),
                Just(json!(null)),
                Just(json!("peerwire")),
                Just(json!(R)),
                Just(json!(I)),
                "[A-Za-z0-9+/=]{0,90}".prop_map(|s| json!(s)),
            ],
            0..8,
        ),
    ) {
        let mut w = World::new();
        let params: Map<String, Value> = fields.into_iter().collect();
        let frame = rpc::encode_request(&Id::Num(1), &method, &Value::Object(params));
        match w.respond(&mut Responder::new([2; 32]), &frame) {
            Step::Continue(_) => prop_assert_eq!(method.as_str(), "peer.hello"),
            Step::Established { .. } => prop_assert!(false, "established from random fields"),
            Step::Refuse { error, .. } => {
                prop_assert!(matches!(error.code, Code::AuthFailed | Code::TargetEnded));
            }
        }
    }
}
