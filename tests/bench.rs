//! `peer bench --quick --json` end to end with the real binary: every figure carries N, median,
//! p99, a floor from the same run, a ratio and its durability, every performance target is
//! listed with its verdict (quick mode says which it cannot judge), and no message is lost or
//! duplicated. No timing is asserted.

use serde_json::Value;
use std::process::Command;

const FIGURES: [&str; 9] = [
    "warmAccept",
    "coldSend",
    "inboxLatency",
    "mcpSend",
    "throughput1",
    "throughput8",
    "throughput64",
    "warmAcceptCrowded",
    "history",
];
const TARGETS: [&str; 11] = [
    "warmSend",
    "mcpSend",
    "cpuPerMessage8",
    "throughput8",
    "throughput8Scaling",
    "throughput64",
    "historyCpu",
    "senderRss",
    "idleWakeups",
    "idleRss",
    "criticalFsyncs",
];
const FLOORS: [&str; 8] = [
    "udsTrip",
    "fdatasync",
    "writeOut",
    "fdatasyncAppend",
    "atomicReplace",
    "spawn",
    "sign",
    "verify",
];

fn number(v: &Value, what: &str) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}

#[test]
fn quick_bench_reports_every_figure_beside_its_floor_with_nothing_lost() {
    let tmp = peerwire::fsutil::TempDir::new("bench").unwrap();
    let dir = tmp.path().to_path_buf();
    let out = Command::new(env!("CARGO_BIN_EXE_peer"))
        .args(["bench", "--quick", "--json", "--dir"])
        .arg(&dir)
        .env_remove("PEER_CONTROL")
        .output()
        .unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let r: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("not one JSON report ({e}): {stdout} / {stderr}"));
    assert_eq!(r["ok"], Value::Bool(true), "{r:#}\n{stderr}");
    assert!(out.status.success(), "{stderr}");
    // A successful run removes its namespace.
    assert!(leftovers.is_empty(), "{leftovers:?}");

    let figures = r["figures"].as_array().unwrap();
    let keys: Vec<&str> = figures.iter().filter_map(|f| f["key"].as_str()).collect();
    assert_eq!(keys, FIGURES);
    for f in figures {
        let key = f["key"].as_str().unwrap();
        assert!(number(&f["n"], key) >= 1.0, "{key}: {f}");
        number(&f["medianUs"], key);
        number(&f["p99Us"], key);
        number(&f["value"], key);
        assert!(number(&f["floor"]["value"], key) > 0.0, "{key}: {f}");
        assert!(f["floor"]["label"].is_string(), "{key}: {f}");
        assert!(number(&f["ratio"], key) > 0.0, "{key}: {f}");
        assert!(f["durability"].is_string(), "{key}: {f}");
    }
    number(&figures[1]["alsoFloor"]["ratio"], "cold handshake ratio");
    assert!(figures[6]["target"].is_string());
    assert_eq!(figures[0]["livePeers"], 2);
    assert_eq!(figures[7]["livePeers"], 65);
    assert!(number(&figures[3]["n"], "mcp sends") >= 20.0);

    // Every target of the performance goals, judged or said to be unjudgeable: --quick has too
    // few samples for the latency, throughput, history and idle targets.
    let targets = r["targets"].as_array().unwrap();
    let keys: Vec<&str> = targets.iter().filter_map(|t| t["key"].as_str()).collect();
    assert_eq!(keys, TARGETS);
    for t in targets {
        let verdict = t["verdict"].as_str().unwrap();
        assert!(
            ["pass", "fail", "too few samples"].contains(&verdict),
            "{t}"
        );
        number(&t["value"], "target value");
        assert!(t["bound"]["op"].is_string(), "{t}");
    }
    for key in [
        "warmSend",
        "mcpSend",
        "throughput8",
        "historyCpu",
        "idleWakeups",
    ] {
        let t = targets.iter().find(|t| t["key"] == key).unwrap();
        assert_eq!(t["verdict"], "too few samples", "{t}");
    }
    let cpu = r["cpuPerMessage"].as_array().unwrap();
    assert_eq!(cpu.len(), 3, "{cpu:?}");
    for c in cpu {
        assert!(number(&c["totalUs"], "cpu per message") > 0.0, "{c}");
    }

    for when in ["before", "after"] {
        for name in FLOORS {
            let fl = &r["floors"][when][name];
            number(&fl["medianUs"], name);
            number(&fl["p99Us"], name);
            assert!(number(&fl["n"], name) >= 1.0);
        }
        assert!(r["machine"][when]["allCpusIdleOk"].is_boolean());
        let steal = &r["machine"]["stealPercent"];
        assert!(
            steal.as_f64().is_some_and(|p| (0.0..=100.0).contains(&p)),
            "{steal}"
        );
        let ceilings = r["floors"][when]["groupCommit"]["ceilings"]
            .as_array()
            .unwrap();
        assert_eq!(ceilings.len(), 3, "{ceilings:?}");
        for c in ceilings {
            assert!(number(&c["commitsPerSecond"], "group commit") > 0.0);
        }
    }

    let i = &r["integrity"];
    assert_eq!(i["lost"], 0, "{i}");
    assert_eq!(i["duplicates"], 0, "{i}");
    assert_eq!(i["failedSends"], 0, "{i}");
    assert!(number(&i["accepted"], "accepted") >= 6.0);
    assert_eq!(i["phases"].as_array().unwrap().len(), 10);
    assert!(number(&r["idle"]["wakeupsPerSecond"], "idle wakeups") >= 0.0);
    assert!(number(&r["idle"]["preemptionsPerSecond"], "idle preemptions") >= 0.0);
    let fsyncs = r["fsyncsPerMessage"].as_array().unwrap();
    assert_eq!(fsyncs.len(), 4, "{fsyncs:?}");
    // Every accepted message cost the receiver at least one shared fdatasync batch.
    assert!(number(&fsyncs[0]["receiver"], "warm receiver fsyncs") > 0.0);
    assert!(number(&r["idle"]["rssKb"], "idle rss") > 0.0);
    assert!(number(&r["idleAfter"]["wakeupsPerSecond"], "idle wakeups after") >= 0.0);
    assert!(number(&r["idleAfter"]["rssKb"], "idle rss after") > 0.0);
    let h = &r["history"];
    assert_eq!(h["window"], 100, "{h}");
    assert_eq!(h["sentBefore"], 1000, "{h}");
    number(&h["senderCpuUsPerMessage"]["after"], "history cpu");
    assert!(number(&h["senderRssKbAfter"], "history rss") > 0.0);
    assert!(number(&r["process"]["receiver"]["peak"]["rssKb"], "rss") > 0.0);
    assert!(number(&r["process"]["receiver"]["idle"]["threads"], "threads") >= 1.0);
    assert!(number(&r["limitOverrides"]["ratePerSecond"], "rate") > 10.0);
}
