use super::*;
use serde_json::json;

fn parse(name: &str, args: Value) -> Result<ToolCall> {
    parse_call(name, &args, &Limits::default())
}

/// Asserts a USAGE error whose message contains every fragment.
fn usage_err(name: &str, args: Value, fragments: &[&str]) {
    let err = parse(name, args.clone()).expect_err(&format!("{name} {args} must fail"));
    assert_eq!(err.code, Code::Usage, "{err}");
    for f in fragments {
        assert!(err.message.contains(f), "{:?} lacks {f:?}", err.message);
    }
    assert!(!err.message.contains('\n'));
}

#[test]
fn valid_calls_parse_into_typed_args() {
    assert_eq!(
        parse("list_peers", Value::Null).unwrap(),
        ToolCall::ListPeers(ListPeersArgs {
            scope: None,
            query: None,
            cursor: None
        })
    );
    assert_eq!(
        parse("list_peers", json!({"scope": "machine", "query": "build"})).unwrap(),
        ToolCall::ListPeers(ListPeersArgs {
            scope: Some(Scope::Machine),
            query: Some("build".into()),
            cursor: None
        })
    );
    assert_eq!(
        parse(
            "send_peer_message",
            json!({"to": "@bob", "content": "hi", "replyTo": "m-1"})
        )
        .unwrap(),
        ToolCall::Send(SendArgs {
            to: "bob".into(),
            body: MessageBody {
                content: "hi".into(),
                topic: None,
                reply_to: Some("m-1".into())
            }
        })
    );
    assert_eq!(
        parse(
            "peer_messages",
            json!({"after": 7, "waitMs": 30000.0, "from": "p-0123456789abcdef01234567"})
        )
        .unwrap(),
        ToolCall::Messages(MessagesArgs {
            after: Some(7),
            from: Some("p-0123456789abcdef01234567".into()),
            reply_to: None,
            message_id: None,
            wait_ms: 30_000
        })
    );
    assert_eq!(
        parse(
            "coordinate_resource",
            json!({"op": "release", "resource": "port:3000", "token": 7})
        )
        .unwrap(),
        ToolCall::Resource(ResourceArgs::Release {
            resource: "port:3000".into(),
            ticket: None,
            token: Some(7)
        })
    );
    // The number as a string is the same token; anything else is refused.
    assert_eq!(
        parse(
            "coordinate_resource",
            json!({"op": "release", "resource": "port:3000", "token": "7"})
        )
        .unwrap(),
        ToolCall::Resource(ResourceArgs::Release {
            resource: "port:3000".into(),
            ticket: None,
            token: Some(7)
        })
    );
    for bad in [json!("t"), json!(0), json!(-1), json!(1.5)] {
        let args = json!({"op": "release", "resource": "port:3000", "token": bad});
        assert!(parse("coordinate_resource", args).is_err(), "{bad}");
    }
    assert_eq!(
        parse(
            "coordinate_resource",
            json!({"op": "set_controller", "resource": "gpu", "force": true})
        )
        .unwrap(),
        ToolCall::Resource(ResourceArgs::SetController {
            resource: "gpu".into(),
            capacity: None,
            force: true,
            automatic: false
        })
    );
    assert_eq!(
        parse("coordinate_resource", json!({"op": "status"})).unwrap(),
        ToolCall::Resource(ResourceArgs::Status { resource: None })
    );
}

#[test]
fn unknown_tool_is_method_not_found() {
    let err = parse("rm_rf", json!({})).unwrap_err();
    assert_eq!(err.code, Code::MethodNotFound);
    assert!(err.message.contains("list_peers"));
}

#[test]
fn bad_arguments_name_the_argument_and_type() {
    usage_err(
        "send_peer_message",
        json!({"content": "x"}),
        &["`to`", "required"],
    );
    usage_err(
        "send_peer_message",
        json!({"to": "bob"}),
        &["`content`", "required"],
    );
    usage_err(
        "send_peer_message",
        json!({"to": "bob", "content": "  "}),
        &["`content`", "empty"],
    );
    usage_err(
        "send_peer_message",
        json!({"to": "bob", "content": 5}),
        &["`content`", "string", "number"],
    );
    usage_err(
        "send_peer_message",
        json!({"to": 5, "content": "x"}),
        &["`to`", "string"],
    );
    usage_err(
        "send_peer_message",
        json!({"to": "-bad", "content": "x"}),
        &["`to`", "alias"],
    );
    usage_err(
        "send_peer_message",
        json!({"to": "b", "content": "x", "from": "me"}),
        &["unknown argument `from`"],
    );
    usage_err(
        "send_peer_message",
        json!({"to": "b", "content": "x", "topic": "a\nb"}),
        &["`topic`", "one line"],
    );
    usage_err(
        "list_peers",
        json!({"scope": "galaxy"}),
        &["`scope`", "workspace|repository|machine"],
    );
    usage_err(
        "list_peers",
        json!({"query": "q".repeat(201)}),
        &["`query`", "200"],
    );
    usage_err(
        "list_peers",
        json!([1]),
        &["arguments must be a JSON object"],
    );
    usage_err(
        "peer_messages",
        json!({"waitMs": 30001}),
        &["`waitMs`", "0..=30000", "30001"],
    );
    usage_err("peer_messages", json!({"waitMs": -1}), &["`waitMs`"]);
    usage_err(
        "peer_messages",
        json!({"after": "3"}),
        &["`after`", "integer"],
    );
    usage_err("peer_messages", json!({"after": 1.5}), &["`after`"]);
    usage_err(
        "peer_messages",
        json!({"after": 1u64 << 53}),
        &["`after`", "0..=9007199254740991"],
    );
    usage_err("coordinate_resource", json!({}), &["`op`", "required"]);
    usage_err(
        "coordinate_resource",
        json!({"op": "grant", "resource": "r"}),
        &["op=grant", "`ticket`"],
    );
    usage_err(
        "coordinate_resource",
        json!({"op": "status", "ticket": "t"}),
        &["op=status", "unknown argument `ticket`"],
    );
    usage_err(
        "coordinate_resource",
        json!({"op": "request", "resource": "r", "waitMs": 30001}),
        &["`waitMs`"],
    );
    usage_err(
        "coordinate_resource",
        json!({"op": "request", "resource": "r", "capacity": 0}),
        &["`capacity`"],
    );
    usage_err(
        "coordinate_resource",
        json!({"op": "release", "resource": "r", "ticket": "a", "token": 2}),
        &["not both"],
    );
    usage_err(
        "coordinate_resource",
        json!({"op": "set_controller", "resource": "r", "force": "yes"}),
        &["`force`", "boolean"],
    );
}

#[test]
fn wait_bound_follows_limits() {
    let limits = Limits {
        wait_ms_max: 100,
        ..Limits::default()
    };
    assert!(parse_call("peer_messages", &json!({"waitMs": 100}), &limits).is_ok());
    assert!(parse_call("peer_messages", &json!({"waitMs": 101}), &limits).is_err());
}

#[test]
fn capabilities_per_call() {
    let caps = |c: &[&str]| c.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let list = parse("list_peers", json!({})).unwrap();
    assert!(check_capability(&list, &[]).is_ok());
    let wait = parse("peer_messages", json!({"waitMs": 5})).unwrap();
    assert!(check_capability(&wait, &caps(&["message.receive", "message.wait"])).is_ok());
    let err = check_capability(&wait, &caps(&["message.receive"])).unwrap_err();
    assert_eq!(err.code, Code::CapabilityDenied);
    assert!(err.message.contains("message.wait"));
    let read = parse("peer_messages", json!({})).unwrap();
    assert!(check_capability(&read, &caps(&["message.receive"])).is_ok());
    let grant = parse(
        "coordinate_resource",
        json!({"op": "grant", "resource": "r", "ticket": "t"}),
    )
    .unwrap();
    assert!(check_capability(&grant, &caps(&["resource.request"])).is_err());
    assert!(check_capability(&grant, &caps(&["resource.request", "resource.control"])).is_ok());
    let send = parse("send_peer_message", json!({"to": "b", "content": "x"})).unwrap();
    assert!(check_capability(&send, &caps(&["message.receive"])).is_err());
}

#[test]
fn schemas_are_closed_objects_matching_the_parser() {
    let tools = tool_list(&Limits::default());
    let tools = tools.as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, TOOL_NAMES);
    for t in tools {
        let schema = &t["inputSchema"];
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["additionalProperties"], false);
        assert!(t["description"].as_str().unwrap().len() > 40);
        assert!(t["title"].is_string() && t["annotations"].is_object());
        // Every declared property is accepted by the parser's allow-list: an unknown one
        // would be refused with "unknown argument".
        for prop in schema["properties"].as_object().unwrap().keys() {
            let args = json!({ prop: Value::Null });
            if let Err(e) = parse(t["name"].as_str().unwrap(), args) {
                assert!(!e.message.contains("unknown argument"), "{prop}: {e}");
            }
        }
    }
    assert_eq!(
        tools[2]["inputSchema"]["properties"]["waitMs"]["maximum"],
        30_000
    );
}

#[test]
fn ask_tools_parse_strictly() {
    use super::ask::{AskCall, Question};
    let q = |question: &str| Question {
        question: question.into(),
        context_files: vec![],
        timeout_ms: None,
    };
    assert_eq!(
        parse(
            "ask_peer",
            json!({"peer": "bob", "question": "where is the db url?"})
        )
        .unwrap(),
        ToolCall::Ask(AskCall::Ask {
            peer: "bob".into(),
            q: q("where is the db url?"),
            async_: false
        })
    );
    let ToolCall::Ask(AskCall::Ask { q: got, async_, .. }) = parse(
        "ask_peer_async",
        json!({"peer": "bob", "question": "q", "contextFiles": ["a/b.rs"], "timeoutMs": 5000}),
    )
    .unwrap() else {
        panic!("not an ask")
    };
    assert!(async_);
    assert_eq!(
        (got.context_files, got.timeout_ms),
        (vec!["a/b.rs".to_string()], Some(5000))
    );
    assert_eq!(
        parse("ask_result", json!({"peer": "bob", "askId": "a-1"})).unwrap(),
        ToolCall::Ask(AskCall::Result {
            peer: "bob".into(),
            ask_id: "a-1".into(),
            wait_ms: crate::config::internal::ASK_RESULT_WAIT_MS_DEFAULT
        })
    );
    assert_eq!(
        parse(
            "recommend_peer",
            json!({"peer": "bob", "topic": "postgres"})
        )
        .unwrap(),
        ToolCall::Ask(AskCall::Recommend {
            peer: "bob".into(),
            topic: Some("postgres".into()),
            max_hops: 1
        })
    );
    assert_eq!(
        parse("peers_list", Value::Null).unwrap(),
        ToolCall::Ask(AskCall::PeersList { refresh: false })
    );
    usage_err(
        "ask_peer",
        json!({"peer": "bob"}),
        &["question", "required"],
    );
    usage_err(
        "ask_peer",
        json!({"peer": "bob", "question": "  "}),
        &["question", "empty"],
    );
    usage_err(
        "ask_peer",
        json!({"peer": "bob", "question": "q", "x": 1}),
        &["unknown argument `x`"],
    );
    usage_err(
        "ask_peer",
        json!({"peer": "bob", "question": "q", "timeoutMs": 5}),
        &["timeoutMs"],
    );
    usage_err(
        "ask_peer",
        json!({"peer": "bob", "question": "q", "contextFiles": "a"}),
        &["contextFiles"],
    );
    usage_err(
        "ask_peers",
        json!({"peers": [], "question": "q"}),
        &["peers"],
    );
    usage_err(
        "ask_peers",
        json!({"peers": ["a", "a"], "question": "q"}),
        &["distinct"],
    );
    usage_err(
        "ask_peers",
        json!({"peers": vec!["a"; 9], "question": "q"}),
        &["peers"],
    );
    usage_err(
        "recommend_peer",
        json!({"peer": "bob", "maxHops": 4}),
        &["maxHops"],
    );
    usage_err("ask_result", json!({"peer": "bob"}), &["askId"]);
    usage_err(
        "peers_list",
        json!({"refresh": "yes"}),
        &["refresh", "boolean"],
    );
}

/// The typed arguments the CLI builds serialize to what `parse_call` reads back unchanged.
#[test]
fn typed_arguments_round_trip_through_the_strict_reader() {
    let send = SendArgs {
        to: "bob".into(),
        body: MessageBody {
            content: "hi".into(),
            topic: Some("build".into()),
            reply_to: None,
        },
    };
    let v = serde_json::to_value(&send).unwrap();
    assert_eq!(parse("send_peer_message", v).unwrap(), ToolCall::Send(send));
    let msgs = MessagesArgs {
        after: Some(3),
        from: Some("bob".into()),
        reply_to: None,
        message_id: Some("m-1".into()),
        wait_ms: 0,
    };
    let v = serde_json::to_value(&msgs).unwrap();
    assert_eq!(v, json!({"after": 3, "from": "bob", "messageId": "m-1"}));
    assert_eq!(parse("peer_messages", v).unwrap(), ToolCall::Messages(msgs));
    let empty = serde_json::to_value(MessagesArgs::default()).unwrap();
    assert_eq!(empty, json!({}));
}
