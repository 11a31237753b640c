//! The README's demo: `peer lab` runs green from a fresh temporary namespace.

use crate::common;

use common::*;

#[test]
fn peer_lab_runs_every_step_green() {
    let ns = Ns::new("lab");
    let out = ns.cmd(PEER).arg("lab").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "lab failed:\n{text}\n{}",
        stderr(&out)
    );
    assert!(text.contains("alice and bob see each other"), "{text}");
    assert!(text.contains("alice sees replied"), "{text}");
    assert!(text.contains("never two holders at once"), "{text}");
    // The README's ask, with the answerer that ships, on loopback.
    assert!(
        text.contains("bob's answer cites docker-compose.yml:4"),
        "{text}"
    );
    assert!(text.contains("all 6 steps passed"), "{text}");
    // The lab cleans up after itself: its namespace is gone.
    let ns_line = text
        .lines()
        .find(|l| l.starts_with("peer lab: namespace "))
        .unwrap();
    let dir = std::path::Path::new(ns_line.trim_start_matches("peer lab: namespace "));
    assert!(!dir.exists(), "lab left {dir:?} behind");
}
