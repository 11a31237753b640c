//! Faults and adversaries that need privileges to stage: a full disk under a running root (a
//! tmpfs in a private mount namespace), another uid (`setpriv` to 65534) trying to read or
//! reach a root, and planted symlinks, foreign directories and forged presence records. Each test says "skipped" and returns when the machine
//! cannot stage it (not root, or no `unshare -m`), so the suite stays green everywhere and
//! bites in CI, which runs as root.

use crate::common::*;
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};

/// True when this process may create mount namespaces and mount a tmpfs in them.
fn can_stage_mounts() -> bool {
    nix::unistd::geteuid().is_root()
        && Command::new("unshare")
            .args(["-m", "true"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// A namespace whose coordination directory is shared and whose home (the message store)
/// can be placed on a small tmpfs of its own.
fn shared_coord_config(home: &Path, coord: &Path) {
    peerwire::fsutil::ensure_private_dir(home).unwrap();
    let v = json!({"sessions": {"communication": {"coordinationDirectory": coord}}});
    peerwire::fsutil::atomic_write(
        &home.join("config.json"),
        v.to_string().as_bytes(),
        peerwire::fsutil::Durability::Durable,
    )
    .unwrap();
}

#[test]
fn a_store_that_failed_a_write_advertises_it_and_says_how_to_recover() {
    if !can_stage_mounts() {
        eprintln!("skipped: needs root and unshare -m");
        return;
    }
    let ns = Ns::new("fulldisk");
    let coord = ns.root.join("coord");
    peerwire::fsutil::ensure_private_dir(&coord).unwrap();
    shared_coord_config(&ns.home, &coord);
    let small = ns.root.join("small");
    std::fs::create_dir(&small).unwrap();
    // journalBytes 64 KiB: the journal's preallocated room (zeros written when the store
    // opened, before the disk filled up) is a 16 KiB chunk, so a few sends use it up.
    let config = json!({"sessions": {"communication": {
        "coordinationDirectory": coord,
        "limits": {"journalBytes": 65_536},
    }}});
    // Inside a private mount namespace: a 512 KiB tmpfs becomes the root's home; once the
    // root runs, its command fills the disk.
    let inner = format!(
        "dd if=/dev/zero of={small}/fill bs=4096 >/dev/null 2>&1; touch {coord}/filled; \
         while [ ! -f {coord}/stop ]; do sleep 0.05; done",
        small = small.display(),
        coord = coord.display(),
    );
    let script = format!(
        "mount -t tmpfs -o size=512k,mode=0700 tmpfs '{small}' && printf '%s' '{config}' > '{small}/config.json' \
         && chmod 600 '{small}/config.json' && exec '{PEER}' --home '{small}' --json host --alias full -- sh -c \"{inner}\"",
        small = small.display(),
    );
    let mut full = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .current_dir(&ns.work)
        .env_remove("PEER_CONTROL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        eventually(20, || coord.join("filled").exists()),
        "the full-disk root never started"
    );
    let sender = ns.host(&["--alias", "sender"]);
    // The sends reach the full root, whose store fails the write once the journal's
    // preallocated room and its last allocated page are used up (tmpfs allocates whole
    // pages; more room cannot be added on a full disk).
    let big = "x".repeat(6000);
    let mut answers = Vec::new();
    for _ in 0..8 {
        let out = peer_as(&ns, &sender, &["--json", "send", "@full", &big]);
        answers.push(json_of(&out));
        if answers
            .last()
            .is_some_and(|a| a["state"] != json!("accepted"))
        {
            break;
        }
    }
    assert!(
        answers.iter().any(|a| a["state"] != json!("accepted")),
        "a full disk accepted everything: {answers:?}"
    );
    let degraded = |v: &Value| {
        v["alias"] == json!("full")
            && v["messaging"] == json!(false)
            && v["messagingError"]
                .as_str()
                .is_some_and(|e| e.contains("failed a write") && e.contains("restart"))
    };
    assert!(
        eventually(20, || ns
            .listing(&["--scope", "machine"])
            .iter()
            .any(degraded)),
        "the directory never showed the degraded store: {:?}",
        ns.listing(&["--scope", "machine"])
    );
    let control = std::fs::read_dir(coord.join("peer-runtime"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.extension().is_some_and(|x| x == "ctl")
                && peerwire::runtime::control::read(p)
                    .is_ok_and(|cf| cf.instance_id != sender.field("instanceId"))
        })
        .expect("the full root's control file");
    let info = ns
        .cmd(PEER)
        .env("PEER_CONTROL", &control)
        .args(["--json", "inbox"])
        .output()
        .unwrap();
    assert!(!info.status.success(), "a failed store answers no reads");
    assert!(
        String::from_utf8_lossy(&info.stdout).contains("restart the root"),
        "{}",
        String::from_utf8_lossy(&info.stdout)
    );
    std::fs::write(coord.join("stop"), "").unwrap();
    let _ = full.wait();
}

/// Runs `sh -c script` as uid/gid 65534 (nobody) with no supplementary groups.
fn as_other_uid(script: &str) -> std::process::Output {
    Command::new("setpriv")
        .args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .env_remove("PEER_CONTROL")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn another_uid_can_neither_read_nor_reach_a_root() {
    let staged = nix::unistd::geteuid().is_root()
        && Command::new("setpriv")
            .args([
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                "true",
            ])
            .status()
            .is_ok_and(|s| s.success());
    if !staged {
        eprintln!("skipped: needs root and setpriv");
        return;
    }
    let ns = Ns::new("otheruid");
    // Everything above the namespace is traversable, so only peerwire's own modes protect it.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ns.root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let host = ns.host(&["--alias", "guarded"]);
    let control = host.field("control");
    let presence = host.field("presence");
    let endpoint = host.field("endpoint");
    for (what, script) in [
        ("read the control file", format!("cat '{control}'")),
        ("read the presence record", format!("cat '{presence}'")),
        (
            "list the message stores",
            format!("ls '{}/peer-messages'", ns.home.display()),
        ),
        (
            "use the session as its adapter",
            format!(
                "PEER_CONTROL='{control}' '{PEER}' --home '{}' inbox",
                ns.home.display()
            ),
        ),
        ("see the socket", format!("test -e '{endpoint}'")),
        (
            "list the directory",
            format!("'{PEER}' --home '{}' dir", ns.home.display()),
        ),
    ] {
        let out = as_other_uid(&script);
        assert!(
            !out.status.success(),
            "uid 65534 could {what}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("secret"),
            "{what} leaked the secret"
        );
    }
    // The owner is unaffected.
    let out = peer_as(&ns, &host, &["--json", "inbox"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let _: Value = json_of(&out);
}

#[test]
fn planted_symlinks_foreign_directories_and_records_are_refused_not_followed() {
    let ns = Ns::new("planted");
    let elsewhere = ns.root.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    peerwire::fsutil::ensure_private_dir(&ns.home).unwrap();
    // A symlink where the runtime directory belongs: the root refuses to start, names the
    // path, and writes nothing through the link.
    std::os::unix::fs::symlink(&elsewhere, ns.home.join("peer-runtime")).unwrap();
    let out = ns.peer(&["--json", "host", "--alias", "victim", "--", "true"]);
    // A wrapper's own failure is the reserved status 125, the code beside the message.
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let said = format!("{}{}", stderr(&out), String::from_utf8_lossy(&out.stdout));
    assert!(
        said.contains("UNSAFE_PATH")
            && said.contains("peer-runtime")
            && said.contains("symbolic link"),
        "{said}"
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    std::fs::remove_file(ns.home.join("peer-runtime")).unwrap();
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped the foreign-owner cases: needs root");
        return;
    }
    let nobody = Some(nix::unistd::Uid::from_raw(65534));
    // A runtime directory pre-created by another uid.
    std::fs::create_dir(ns.home.join("peer-runtime")).unwrap();
    nix::unistd::chown(&ns.home.join("peer-runtime"), nobody, None).unwrap();
    let out = ns.peer(&["--json", "host", "--alias", "victim", "--", "true"]);
    let said = format!("{}{}", stderr(&out), String::from_utf8_lossy(&out.stdout));
    assert_eq!(out.status.code(), Some(125), "{said}");
    assert!(
        said.contains("UNSAFE_PATH") && said.contains("uid 65534"),
        "{said}"
    );
    std::fs::remove_dir(ns.home.join("peer-runtime")).unwrap();
    // A presence record planted by another uid is listed as invalid, never used.
    let host = ns.host(&["--alias", "real"]);
    let agents = Path::new(&host.field("presence"))
        .parent()
        .unwrap()
        .to_path_buf();
    let planted = agents.join("forged.i-forged.json");
    let mut forged: Value =
        serde_json::from_slice(&std::fs::read(host.field("presence")).unwrap()).unwrap();
    forged["communication"]["alias"] = json!("impostor");
    std::fs::write(&planted, forged.to_string()).unwrap();
    nix::unistd::chown(&planted, nobody, None).unwrap();
    let listing = ns.listing(&["--all"]);
    assert!(
        listing.iter().any(|p| p["alias"] == json!("real")),
        "{listing:?}"
    );
    assert!(
        !listing
            .iter()
            .any(|p| p["alias"] == json!("impostor") && p["messaging"] == json!(true)),
        "{listing:?}"
    );
    let out = peer_as(&ns, &host, &["--json", "send", "@impostor", "hi"]);
    assert!(
        !out.status.success(),
        "a planted record was used as a target"
    );
}
