//! Stores written by earlier builds load unchanged. `tests/fixtures/store-v1/` is a store
//! directory (snapshot, journal after it, sync point, identity) written before message bodies
//! became one `MessageBody`: it must open (the snapshot's checksum covers its re-encoding, so
//! this also proves every record re-encodes to the same bytes) and hold what was written.
//! `write_fixture` wrote it; it is ignored and only rerun to make a new fixture on purpose.

use super::*;
use crate::messaging::*;

const INSTANCE: &str = "i-00000000000000aa";
const SESSION: &str = "s-1";
const ME: &str = "p-me";
const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/store-v1");

fn limits() -> Limits {
    Limits {
        journal_bytes: 2_048,
        ..Limits::default()
    }
}

fn peer() -> Principal {
    Principal {
        instance_id: "i-s1".into(),
        run_id: None,
        peer_id: "p-s1".into(),
    }
}

fn target() -> TargetRef {
    TargetRef {
        peer_id: "p-s1".into(),
        instance_id: "i-s1".into(),
        run_id: None,
    }
}

fn inbound(id: &str, topic: Option<&str>) -> InboundSend {
    InboundSend {
        origin: Some("s-peer".into()),
        to_peer_id: ME.into(),
        message_id: id.into(),
        body: MessageBody {
            content: format!("question {id}"),
            topic: topic.map(str::to_string),
            reply_to: None,
        },
        correlation_id: None,
        expires_at_ms: None,
        from_alias: Some("alice".into()),
    }
}

fn outbound(id: &str, content: String, topic: &str, reply_to: Option<&str>) -> OutboundSend {
    OutboundSend {
        from_peer_id: ME.into(),
        to: target(),
        message_id: id.into(),
        body: MessageBody {
            content,
            topic: Some(topic.into()),
            reply_to: reply_to.map(str::to_string),
        },
        correlation_id: None,
        expires_at_ms: None,
    }
}

fn copy_dir(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let name = e.file_name();
        if name != paths::LOCK {
            let mut f = fsutil::create_private_new(&to.join(&name)).unwrap();
            std::io::Write::write_all(&mut f, &std::fs::read(e.path()).unwrap()).unwrap();
        }
    }
}

/// Writes the fixture: inbox and outbox entries with topics and replies, a resolved outbox
/// entry whose body was replaced by its digest, a snapshot, and journal records after it.
#[test]
#[ignore = "writes tests/fixtures/store-v1; run on purpose only"]
fn write_fixture() {
    let home = fsutil::TempDir::new("store-fixture").unwrap();
    let s = Store::open(&home, INSTANCE, SESSION, &limits()).unwrap();
    let h = s.handle();
    h.set_live(ME);
    h.accept(peer(), inbound("q1", Some("build"))).unwrap();
    let long = "a reply long enough to be replaced by its digest once resolved ".repeat(3);
    let r1 = h
        .outbox_intent(outbound("r1", long, "re", Some("q1")))
        .unwrap();
    let receipt = Receipt {
        message_id: "r1".into(),
        from_peer_id: ME.into(),
        to_peer_id: "p-s1".into(),
        state: ReceiptState::Accepted,
        sequence: 7,
        correlation_id: r1.correlation_id.clone(),
        at_ms: r1.created_at_ms,
        reply_message_id: None,
        code: None,
    };
    h.outbox_result("p-s1", "r1", Ok(receipt)).unwrap();
    h.outbox_intent(outbound("u1", "still queued".into(), "plan", None))
        .unwrap();
    let mut n = 0;
    // A compaction writes the snapshot; what follows stays in the journal.
    while h.stats().compactions == 0 {
        h.accept(peer(), inbound(&format!("f{n}"), None)).unwrap();
        h.query(|_| ()).unwrap();
        n += 1;
        assert!(n < 100, "compaction never ran");
    }
    h.accept(peer(), inbound("q2", Some("deploy"))).unwrap();
    h.outbox_intent(outbound("u2", "answer to q2".into(), "deploy", Some("q2")))
        .unwrap();
    h.mark(ME, MessageRef::Id("q1".into()), ReceiptState::Consumed)
        .unwrap();
    s.close().unwrap();
    let out = Path::new(FIXTURE);
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).unwrap();
    copy_dir(&paths::store_dir(&home, INSTANCE), out);
}

#[test]
fn a_store_written_before_message_bodies_were_shared_loads_unchanged() {
    let home = fsutil::TempDir::new("store-compat").unwrap();
    let dir = paths::store_dir(&home, INSTANCE);
    fsutil::ensure_private_dir(dir.parent().unwrap()).unwrap();
    fsutil::ensure_private_dir(&dir).unwrap();
    copy_dir(Path::new(FIXTURE), &dir);
    let snapshot_before = std::fs::read(dir.join(paths::SNAPSHOT)).unwrap();
    let s = Store::open(&home, INSTANCE, SESSION, &limits()).expect("the old store opens");
    let h = s.handle();
    let img = h.query(|m| m.state().image()).unwrap();
    let inbox = |id: &str| {
        img.inbox
            .iter()
            .find(|e| e.message_id == id)
            .unwrap_or_else(|| panic!("{id} is in the inbox"))
    };
    let q1 = inbox("q1");
    assert_eq!(q1.body.content, "question q1");
    assert_eq!(q1.body.topic.as_deref(), Some("build"));
    assert_eq!(q1.state, ReceiptState::Replied, "r1 answered it");
    assert_eq!(q1.from_alias.as_deref(), Some("alice"));
    assert_eq!(inbox("q2").body.topic.as_deref(), Some("deploy"));
    let outbox = |id: &str| {
        img.outbox
            .iter()
            .find(|e| e.message_id == id)
            .unwrap_or_else(|| panic!("{id} is in the outbox"))
    };
    let r1 = outbox("r1");
    assert!(r1.body.content.is_empty() && r1.content_digest.is_some());
    assert_eq!(r1.body.reply_to.as_deref(), Some("q1"));
    assert_eq!(r1.body.topic.as_deref(), Some("re"));
    assert_eq!(r1.receipt.as_ref().map(|r| r.sequence), Some(7));
    let u1 = outbox("u1");
    assert_eq!(
        (u1.body.content.as_str(), u1.receipt.is_none()),
        ("still queued", true)
    );
    assert_eq!(outbox("u2").body.reply_to.as_deref(), Some("q2"));
    assert!(
        img.inbox.iter().any(|e| e.message_id == "f0"),
        "journal replayed"
    );
    // The old journal (format 1, no end marks) is never appended to: the open wrote its
    // records into a snapshot covering its generation and started a marked generation 3.
    let journal = std::fs::read(dir.join(paths::JOURNAL)).unwrap();
    let scan = journal::scan(&journal, 1 << 20).unwrap();
    assert!(scan.marked, "replaced by a marked journal");
    assert_eq!((scan.generation, scan.batches.len()), (3, 0));
    assert_ne!(
        std::fs::read(dir.join(paths::SNAPSHOT)).unwrap(),
        snapshot_before,
        "the snapshot now covers the old journal"
    );
    h.set_live(ME);
    h.accept(peer(), inbound("q3", None)).unwrap();
    h.query(|_| ()).unwrap();
    let after = h.query(|m| m.state().image()).unwrap();
    assert_eq!(h.stats().generation, 3);
    s.close().unwrap();
    let s = Store::open(&home, INSTANCE, SESSION, &limits()).unwrap();
    assert_eq!(s.handle().query(|m| m.state().image()).unwrap(), after);
    assert_eq!(s.handle().stats().generation, 3, "migrated once");
    s.close().unwrap();
    // The same bytes come out of the new types, record by record.
    let old = String::from_utf8(snapshot_before).unwrap();
    let state = &old[old.find("\"state\":").unwrap() + 8..old.len() - 1];
    let image: StateImage = serde_json::from_str(state).unwrap();
    assert_eq!(serde_json::to_string(&image).unwrap(), state);
}
