//! Documentation is part of the feature: every man page passes the groff lint, every error
//! code's exit status, every limit and every subcommand is documented where users look.

use peerwire::error::Code;
use std::process::Command;

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn man_pages_pass_the_groff_lint() {
    let mut pages: Vec<_> = ["man/man1", "man/man5", "man/man7"]
        .iter()
        .flat_map(|d| std::fs::read_dir(d).unwrap())
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    pages.retain(|p| {
        p.extension().is_some_and(|x| {
            x.len() == 1 && x.to_string_lossy().chars().all(|c| c.is_ascii_digit())
        })
    });
    for required in [
        "man/man1/peer.1",
        "man/man1/peer-dir.1",
        "man/man1/peer-res.1",
        "man/man1/peer-ask.1",
        "man/man5/peer-config.5",
        "man/man7/peer-protocol.7",
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
    let page = read("man/man1/peer.1");
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
    let page = read("man/man5/peer-config.5");
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
    let page = read("man/man1/peer.1").replace("\\-", "-");
    for name in peerwire::cli::command_names() {
        assert!(
            page.contains(&format!(".SS \"peer {name}")),
            "peer(1) lacks a section for 'peer {name}'"
        );
    }
}

/// The README's set-up line must make `man peer` work: man-db looks in `man1/`, `man5/` and
/// `man7/` under each MANPATH entry, so a flat `man/` directory is never searched.
#[test]
fn readme_manpath_line_finds_every_page() {
    if Command::new("man").arg("-w").arg("man").output().is_err() {
        println!("skipped: man (man-db) is not installed");
        return;
    }
    let readme = read("README.md");
    let line = readme
        .lines()
        .find(|l| l.trim_start().starts_with("export MANPATH="))
        .expect("README sets MANPATH");
    let cwd = std::env::current_dir().unwrap();
    for page in [
        "peer",
        "peer-dir",
        "peer-res",
        "peer-ask",
        "peer-config",
        "peer-protocol",
    ] {
        let script = format!("{line}\nman -w {page}");
        let out = Command::new("sh")
            .args(["-c", &script])
            .current_dir(&cwd)
            .env("PWD", &cwd)
            .output()
            .unwrap();
        let found = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success()
                && found
                    .trim()
                    .starts_with(&*cwd.join("man").to_string_lossy()),
            "`man -w {page}` after the README's MANPATH line: {found} {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
