//! Presence, directory, `peer host` and `peer-dir` between real processes, and each
//! bad input of the foundation refused with its message.

use crate::common;

use common::*;
use nix::sys::signal::Signal;
use peerwire::error::Code;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;

fn aliases(list: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = list
        .iter()
        .filter_map(|p| p.get("alias").and_then(Value::as_str).map(str::to_string))
        .collect();
    v.sort();
    v
}

#[test]
fn two_hosts_list_each_other_and_sigterm_removes_only_its_own_record() {
    let ns = Ns::new("two");
    let mut a = ns.host(&["--alias", "alice"]);
    let b = ns.host(&["--alias", "bob"]);
    let list = ns.listing(&[]);
    assert_eq!(aliases(&list), ["alice", "bob"]);
    assert!(
        list.iter()
            .all(|p| p["messaging"] == json!(true) && p["state"] == json!("live"))
    );
    let agents = ns.home.join("active-agents");
    assert_eq!(files_in(&agents).len(), 2);
    a.signal(Signal::SIGTERM);
    assert_eq!(a.wait(), Some(0));
    let left = files_in(&agents);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].contains(&b.field("instanceId")));
    assert_eq!(aliases(&ns.listing(&[])), ["bob"]);
}

#[test]
fn hosts_sharing_a_session_id_never_remove_each_other() {
    let ns = Ns::new("same");
    let mut a = ns.host(&["--alias", "one", "--session-id", "shared-session"]);
    let b = ns.host(&["--alias", "two", "--session-id", "shared-session"]);
    assert_ne!(a.field("instanceId"), b.field("instanceId"));
    a.signal(Signal::SIGINT);
    assert_eq!(a.wait(), Some(0));
    let list = ns.listing(&[]);
    assert_eq!(aliases(&list), ["two"]);
    assert_eq!(list[0]["sessionId"], json!("shared-session"));
}

#[test]
fn autohand_legacy_record_is_listed_without_messaging() {
    let ns = Ns::new("legacy");
    let h = ns.host(&["--alias", "modern"]);
    let work = std::fs::canonicalize(&ns.work).unwrap();
    let now = peerwire::clock::iso8601(peerwire::clock::now_ms());
    let legacy = json!({
        "version": 1, "pid": std::process::id(), "sessionId": "9b2f6c1e-4d7a-4f0b-8e3c-5a1d2b3c4d5e-1786003200123",
        "workspaceRoot": work.to_string_lossy(), "projectName": "work", "provider": "anthropic",
        "model": "claude", "mode": "interactive", "status": "working", "startedAt": now, "updatedAt": now,
        "messageCount": 3, "contextPercent": 80, "tokensUsed": 1000,
        "activity": {"phase": "editing", "pathsWritten": ["src/a.rs"]}
    });
    let path = ns
        .home
        .join("active-agents/9b2f6c1e-4d7a-4f0b-8e3c-5a1d2b3c4d5e-1786003200123.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&legacy).unwrap()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let list = ns.listing(&[]);
    assert_eq!(list.len(), 2, "{list:?}");
    let l = list
        .iter()
        .find(|p| p["peerId"].is_null())
        .expect("legacy record listed");
    assert_eq!(l["messaging"], json!(false));
    assert_eq!(l["status"], json!("working"));
    assert_eq!(l["project"], json!("work"));
    drop(h);
}

#[test]
fn sigkill_leaves_a_record_readers_treat_as_stale_and_heartbeat_gaps_go_stale() {
    let ns = Ns::new("stale");
    ns.config(json!({"limits": {"heartbeatMs": 100, "staleMs": 400}}));
    let mut killed = ns.host(&["--alias", "victim"]);
    let paused = ns.host(&["--alias", "sleeper"]);
    killed.signal(Signal::SIGKILL);
    killed.wait();
    // The file stays (nobody deletes another's record) but it is no longer listed as live.
    assert_eq!(files_in(&ns.home.join("active-agents")).len(), 2);
    assert_eq!(aliases(&ns.listing(&[])), ["sleeper"]);
    let all = ns.listing(&["--all"]);
    let v = all.iter().find(|p| p["alias"] == json!("victim")).unwrap();
    assert_eq!(v["state"], json!("stale"));
    // A stopped process keeps its pid but stops heartbeating: stale after staleMs.
    paused.signal(Signal::SIGSTOP);
    assert!(
        eventually(10, || ns.listing(&[]).is_empty()),
        "stopped host never went stale"
    );
    let all = ns.listing(&["--all"]);
    let s = all.iter().find(|p| p["alias"] == json!("sleeper")).unwrap();
    assert!(
        s["reason"].as_str().unwrap().contains("no heartbeat"),
        "{s}"
    );
    paused.signal(Signal::SIGCONT);
    assert!(
        eventually(10, || aliases(&ns.listing(&[])) == ["sleeper"]),
        "resumed host never came back"
    );
}

#[test]
fn garbage_huge_and_bad_extension_records_are_skipped_with_reasons_and_kept() {
    let ns = Ns::new("garbage");
    let h = ns.host(&["--alias", "ok"]);
    let agents = ns.home.join("active-agents");
    let put = |name: &str, bytes: &[u8]| {
        let p = agents.join(name);
        std::fs::write(&p, bytes).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    put("garbage.json", &[0xde, 0xad, 0xbe, 0xef, 0x00, 0xff]);
    put("huge.json", &vec![b'{'; 10 * 1024 * 1024]);
    let mut rec: Value =
        serde_json::from_slice(&std::fs::read(h.field("presence")).unwrap()).unwrap();
    rec["communication"]["publicKey"] = json!("not-a-key");
    rec["communication"]["alias"] = json!("broken");
    put("badext.i-x.json", rec.to_string().as_bytes());
    let live = ns.listing(&[]);
    assert_eq!(live.len(), 2, "{live:?}");
    let broken = live
        .iter()
        .find(|p| p["alias"].is_null() && p["messaging"] == json!(false))
        .expect("legacy view of the bad-extension record");
    assert!(
        broken["messagingError"]
            .as_str()
            .unwrap()
            .contains("publicKey")
    );
    let all = ns.listing(&["--all"]);
    let reasons: Vec<String> = all
        .iter()
        .filter(|p| p["state"] == json!("invalid"))
        .map(|p| p["reason"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(reasons.len(), 2, "{all:?}");
    assert!(reasons.iter().any(|r| r.contains("bound")), "{reasons:?}");
    assert!(
        reasons.iter().any(|r| r.contains("not valid JSON")),
        "{reasons:?}"
    );
    assert_eq!(files_in(&agents).len(), 4, "a reader deleted a file");
}

#[test]
fn bad_configs_and_unsafe_namespaces_are_refused_with_their_messages() {
    let ns = Ns::new("badcfg");
    std::fs::create_dir_all(&ns.home).unwrap();
    std::fs::set_permissions(&ns.home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let cfg = ns.home.join("config.json");
    let write_cfg = |s: &str| {
        std::fs::write(&cfg, s).unwrap();
        std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    write_cfg("{ this is not json");
    let o = ns.peer(&["host"]);
    assert_eq!(o.status.code(), Some(exit_of(Code::ConfigInvalid)));
    assert!(
        stderr(&o).contains("peer: CONFIG_INVALID:") && stderr(&o).contains("not valid JSON"),
        "{}",
        stderr(&o)
    );

    write_cfg(r#"{"sessions":{"communication":{"limits":{"inboxMessages":-5}}}}"#);
    let o = ns.peer(&["host"]);
    assert_eq!(o.status.code(), Some(exit_of(Code::ConfigInvalid)));
    assert!(
        stderr(&o).contains("limits.inboxMessages must be a positive integer"),
        "{}",
        stderr(&o)
    );

    write_cfg(r#"{"sessions":{"communication":{"enabled":false}}}"#);
    let o = ns.peer(&["host"]);
    assert_eq!(o.status.code(), Some(exit_of(Code::CommunicationDisabled)));
    assert!(
        stderr(&o).contains("COMMUNICATION_DISABLED"),
        "{}",
        stderr(&o)
    );

    // --json errors are one object on stdout.
    let o = ns.peer(&["--json", "host"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], json!(false));
    assert_eq!(v["error"]["code"], json!("COMMUNICATION_DISABLED"));

    write_cfg("{}");
    let runtime = ns.home.join("peer-runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = ns.peer(&["host"]);
    assert_eq!(o.status.code(), Some(exit_of(Code::UnsafePath)));
    assert!(
        stderr(&o).contains("peer-runtime") && stderr(&o).contains("chmod go-w"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::metadata(&runtime).unwrap().permissions().mode() & 0o777,
        0o777,
        "the unsafe dir was altered"
    );

    let link = ns.root.join("linked-ns");
    std::os::unix::fs::symlink(&ns.home, &link).unwrap();
    let o = ns
        .cmd(PEER)
        .arg("--home")
        .arg(&link)
        .arg("host")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(exit_of(Code::UnsafePath)));
    assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
}

#[test]
fn host_runs_a_command_with_its_session_in_the_environment_and_exits_with_its_status() {
    let ns = Ns::new("child");
    let o = ns.peer(&[
        "--json",
        "host",
        "--alias",
        "wrapper",
        "--",
        "sh",
        "-c",
        "peer_dir=$0; test -n \"$PEER_INSTANCE_ID\" && exit 7",
    ]);
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    assert!(
        files_in(&ns.home.join("active-agents")).is_empty(),
        "record left behind"
    );
}

/// A limit far beyond its range used to reach the root and panic it (a queue of 2^64 slots);
/// now `peer host` refuses the configuration before starting, naming the field.
#[test]
fn an_extreme_limit_is_refused_before_a_root_starts() {
    for name in ["commitBatch", "outgoingFrames", "frameBytes"] {
        let ns = Ns::new("extreme");
        ns.config(serde_json::json!({"limits": {name: u64::MAX}}));
        let o = ns.peer(&["host", "--alias", "x", "--", "true"]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        // `peer host -- CMD` is a wrapper: its own failure is 125 with the code on stderr.
        assert_eq!(o.status.code(), Some(125), "{name}: {stderr}");
        assert!(stderr.starts_with("peer: CONFIG_INVALID: "), "{stderr}");
        assert!(
            stderr.contains(&format!("limits.{name} must be")),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
