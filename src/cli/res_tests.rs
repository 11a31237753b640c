use super::*;

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

fn req(resource: Option<&str>, op: Op, wait_ms: u64) -> Request {
    Request {
        resource: resource.map(str::to_string),
        op,
        wait_ms,
    }
}

/// Each subcommand's words and options become the typed request the resource layer runs:
/// names canonical, a positional ticket over `--ticket`, `--force` on release the override.
#[test]
fn subcommands_build_typed_requests() {
    let t = |s: &str| s.to_string();
    let cases = [
        (
            words(&["status"]),
            ResOptions::default(),
            req(None, Op::Status, 0),
        ),
        (
            words(&["status", " port:1 "]),
            ResOptions::default(),
            req(Some("port:1"), Op::Status, 0),
        ),
        (
            words(&["request", "port:1"]),
            ResOptions {
                capacity: Some(2),
                wait_ms: 5_000,
                epoch: Some(3),
                ..ResOptions::default()
            },
            req(
                Some("port:1"),
                Op::Request {
                    capacity: Some(2),
                    epoch: Some(3),
                },
                5_000,
            ),
        ),
        (
            words(&["grant", "port:1", "t-1"]),
            ResOptions {
                ticket: Some(t("t-9")),
                ..ResOptions::default()
            },
            req(
                Some("port:1"),
                Op::Grant {
                    ticket: t("t-1"),
                    epoch: None,
                },
                0,
            ),
        ),
        (
            words(&["release", "port:1"]),
            ResOptions::default(),
            req(
                Some("port:1"),
                Op::Release {
                    target: Target::Mine,
                },
                0,
            ),
        ),
        (
            words(&["release", "port:1"]),
            ResOptions {
                token: Some(7),
                force: true,
                ..ResOptions::default()
            },
            req(
                Some("port:1"),
                Op::Override {
                    target: Target::Token(7),
                },
                0,
            ),
        ),
        (
            words(&["release", "port:1"]),
            ResOptions {
                ticket: Some(t("t-2")),
                ..ResOptions::default()
            },
            req(
                Some("port:1"),
                Op::Release {
                    target: Target::Ticket(t("t-2")),
                },
                0,
            ),
        ),
        (
            words(&["cancel", "port:1", "t-2"]),
            ResOptions::default(),
            req(Some("port:1"), Op::Cancel { ticket: t("t-2") }, 0),
        ),
        (
            words(&["set-controller", "port:1"]),
            ResOptions {
                force: true,
                automatic: true,
                capacity: Some(4),
                ..ResOptions::default()
            },
            req(
                Some("port:1"),
                Op::SetController {
                    capacity: Some(4),
                    force: true,
                    automatic: true,
                    ledger: Vec::new(),
                },
                0,
            ),
        ),
    ];
    for (w, o, want) in cases {
        let what = format!("{w:?} {o:?}");
        assert_eq!(build_request(&w, o).unwrap(), want, "{what}");
    }
}

#[test]
fn bad_subcommands_are_usage_errors() {
    let both = ResOptions {
        ticket: Some("t-1".into()),
        token: Some(1),
        ..ResOptions::default()
    };
    let err = build_request(&words(&["release", "r"]), both).unwrap_err();
    assert_eq!(err.code, Code::Usage);
    assert!(err.message.contains("not both"), "{err:?}");
    for w in [
        &[][..],
        &["grab", "r"][..],
        &["request"][..],
        &["grant", "r"][..],
        &["status", "a", "b"][..],
        &["request", "  "][..],
    ] {
        let err = build_request(&words(w), ResOptions::default()).unwrap_err();
        assert_eq!(err.code, Code::Usage, "{w:?}");
    }
}
