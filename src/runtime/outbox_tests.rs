//! Route tests against real stores: what a route reads while its own writes are still queued.

use super::Route;
use crate::messaging::*;
use crate::store::Store;
use crate::store::tests::{INSTANCE, ME, SESSION, TempHome, hold_writer, limits, open};

/// A sender's copy of a receipt is queued without waiting; its route must not read the entry
/// as unresolved (and send it again) while that record waits behind other jobs. The writer is
/// held inside a read job so the receipt stays queued, deterministically.
#[test]
fn a_route_never_resends_an_entry_whose_receipt_is_queued_but_not_applied() {
    let (ha, hb) = (TempHome::new("queued-a"), TempHome::new("queued-b"));
    let l = limits();
    let sa = open(&ha, &l).unwrap();
    let sb = Store::open(&hb.0, "i-b", SESSION, &l).unwrap();
    let (a, b) = (sa.handle(), sb.handle());
    b.set_live("p-b");
    let entry = a
        .outbox_intent(OutboundSend {
            from_peer_id: ME.into(),
            to: TargetRef {
                peer_id: "p-b".into(),
                instance_id: "i-b".into(),
                run_id: None,
            },
            message_id: new_message_id(),
            body: MessageBody {
                content: "queued receipt".into(),
                topic: None,
                reply_to: None,
            },
            correlation_id: None,
            expires_at_ms: None,
        })
        .unwrap();
    let me = Principal {
        instance_id: INSTANCE.into(),
        run_id: None,
        peer_id: ME.into(),
    };
    let receipt = b
        .accept(
            me,
            InboundSend {
                origin: None,
                to_peer_id: "p-b".into(),
                message_id: entry.message_id.clone(),
                body: entry.body.clone(),
                correlation_id: Some(entry.correlation_id.clone()),
                expires_at_ms: Some(entry.expires_at_ms),
                from_alias: None,
            },
        )
        .unwrap();
    // Hold the writer in a read job until the gate opens (also when an assertion fails, so
    // the stores can close).
    let held = hold_writer(&a);
    let ticket = a
        .outbox_receipt_queued("p-b", &entry.message_id, receipt)
        .unwrap();
    assert!(!ticket.is_done(), "the writer is held: nothing is applied");
    // The window: a plain read of applied state still lists the entry.
    assert_eq!(a.route_pending(ME, "p-b").unwrap().len(), 1);
    let mut route = Route {
        receipt: Some(ticket),
        ..Route::default()
    };
    let (tx, rx) = crossbeam_channel::bounded(1);
    let reader = {
        let a = a.clone();
        std::thread::spawn(move || {
            let view = route
                .settled_view(&a, ME, "p-b", Some(&entry.message_id))
                .unwrap();
            let decision = route.queue.next(view.head.as_ref(), &limits(), 0);
            tx.send((view.head.is_some() || view.want_pending, decision))
                .unwrap();
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(
        rx.try_recv().is_err(),
        "the route read its entries before its queued receipt was applied"
    );
    assert!(held.release());
    let (pending, decision) = rx.recv().unwrap();
    assert!(!pending, "the entry its receipt resolved is not pending");
    assert_eq!(decision, RouteDecision::Idle, "nothing is sent again");
    reader.join().unwrap();
    // Nobody waited for the receipt's durability; a close still makes it durable.
    sa.close().unwrap();
    let sa = open(&ha, &l).unwrap();
    assert!(sa.handle().route_pending(ME, "p-b").unwrap().is_empty());
}
