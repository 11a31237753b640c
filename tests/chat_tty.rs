//! `peer chat` under a real pseudo-terminal (util-linux `script`): typing a line with a leading
//! @mention sends it, and a message that arrives while a line is being typed is printed above
//! the prompt, sanitized, with the half-typed line redrawn intact.

use crate::common;

use common::*;
use serde_json::json;
use std::io::{Read, Write};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

#[test]
fn chat_in_a_terminal_sends_and_shows_arrivals_without_losing_the_typed_line() {
    let ns = Ns::new("chattty");
    let alice = ns.host(&["--alias", "alice"]);
    let bob = ns.host(&["--alias", "bob"]);
    let peer = std::path::Path::new(PEER).display().to_string();
    let cmd = format!("'{peer}' --home '{}' chat", ns.home.display());
    let mut child = std::process::Command::new("script")
        .args(["-q", "-e", "-c", &cmd, "/dev/null"])
        .current_dir(&ns.work)
        .env("PEER_CONTROL", alice.field("control"))
        .env("PATH", path_with_peer())
        .env("TERM", "dumb")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("util-linux script is installed");
    let screen = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let screen = screen.clone();
        let mut out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                screen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    let shown = |needle: &str| String::from_utf8_lossy(&screen.lock().unwrap()).contains(needle);
    let mut input = child.stdin.take().unwrap();
    assert!(eventually(20, || shown("peer> ")), "no prompt");
    input.write_all(b"@bob hello from the terminal\r").unwrap();
    input.flush().unwrap();
    assert!(
        eventually(20, || {
            let v = json_of(&peer_as(&ns, &bob, &["--json", "inbox"]));
            v["messages"][0]["content"] == json!("hello from the terminal")
        }),
        "bob never got the typed line"
    );
    // Half a line typed, then a message arrives with escape sequences in it.
    input.write_all(b"half typ").unwrap();
    input.flush().unwrap();
    assert!(
        eventually(20, || shown("half typ")),
        "typed text not echoed"
    );
    let o = peer_as(
        &ns,
        &bob,
        &["send", "@alice", "incoming \u{1b}]0;pwned\u{7}news"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        eventually(20, || shown("incoming news")),
        "arrival not shown"
    );
    let text = String::from_utf8_lossy(&screen.lock().unwrap()).to_string();
    let after = &text[text.rfind("incoming news").unwrap()..];
    assert!(
        after.contains("@bob> half typ"),
        "the typed line was not redrawn after the arrival: {after:?}"
    );
    assert!(
        !text.contains("pwned"),
        "an escape sequence from a peer reached the terminal"
    );
    // Finish the line and leave; the finished line goes to bob as one message.
    input.write_all(b"ed\r/quit\r").unwrap();
    input.flush().unwrap();
    assert!(
        eventually(20, || {
            let v = json_of(&peer_as(&ns, &bob, &["--json", "inbox"]));
            v["messages"]
                .as_array()
                .is_some_and(|m| m.iter().any(|x| x["content"] == json!("half typed")))
        }),
        "the finished line was not sent"
    );
    drop(input);
    let status = child.wait().unwrap();
    reader.join().unwrap();
    assert!(status.success(), "chat exited with {status}");
}
