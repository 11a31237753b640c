//! Documentation is part of the feature: every man page passes the groff lint, every error
//! code's exit status, every limit and every subcommand is documented where users look.

use peerwire::error::Code;
use std::process::Command;

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn man_pages_pass_the_groff_lint() {
    let mut pages: Vec<_> = std::fs::read_dir("man")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    pages.retain(|p| {
        p.extension().is_some_and(|x| {
            x.len() == 1 && x.to_string_lossy().chars().all(|c| c.is_ascii_digit())
        })
    });
    for required in [
        "man/peer.1",
        "man/peer-dir.1",
        "man/peer-res.1",
        "man/peer-config.5",
        "man/peer-protocol.7",
    ] {
        assert!(
            std::path::Path::new(required).exists(),
            "{required} is missing"
        );
    }
    for page in pages {
        let out = Command::new("groff")
            .args(["-man", "-ww", "-z"])
            .arg(&page)
            .env("LC_ALL", "C")
            .output()
            .expect("groff is installed by tests/run.sh");
        let msg = String::from_utf8_lossy(&out.stderr);
        assert!(
            msg.trim().is_empty() && out.status.success(),
            "{}: {msg}",
            page.display()
        );
    }
}

#[test]
fn every_error_code_has_its_documented_exit_status() {
    let page = read("man/peer.1");
    for code in Code::ALL {
        let row = format!(".B {}\n.B {}\n", code.exit_status(), code.name());
        assert!(
            page.contains(&row),
            "peer(1) EXIT STATUS lacks {} = {}",
            code.name(),
            code.exit_status()
        );
    }
}

/// peer-config(5)'s LIMITS section is exactly the rows generated from the limits table
/// (`config::LIMITS`): name, default, accepted range and description, each defined once.
#[test]
fn peer_config_5_limits_are_the_limits_table() {
    let page = read("man/peer-config.5");
    let start = page
        .find(".SH LIMITS\n")
        .expect("peer-config(5) has a LIMITS section")
        + 11;
    let end = start + page[start..].find(".PP\n").expect("LIMITS ends with .PP");
    let want = peerwire::config::limits_man_rows();
    assert!(
        page[start..end] == want,
        "peer-config(5) LIMITS differs from config::LIMITS; the section should read:\n{want}"
    );
}

#[test]
fn every_subcommand_has_a_section_in_peer_1() {
    let page = read("man/peer.1").replace("\\-", "-");
    for name in peerwire::cli::command_names() {
        assert!(
            page.contains(&format!(".SS \"peer {name}")),
            "peer(1) lacks a section for 'peer {name}'"
        );
    }
}
