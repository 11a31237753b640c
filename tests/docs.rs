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

/// The bounds table as peer-config(5) shows it, read from the text of `src/config/internal.rs`:
/// a `.SS` per group (a `// Group.` line followed by a blank line) and per constant its name,
/// its value as written (a `Duration` in ms or s) and its one-line `///` doc.
fn internal_bounds_man_rows(source: &str) -> String {
    let roff = |s: &str| s.replace('\\', "\\e").replace('-', "\\-").replace('`', "");
    let lines: Vec<&str> = source.lines().collect();
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        let next = lines.get(i + 1).copied().unwrap_or("");
        if let Some(group) = line.strip_prefix("// ")
            && next.is_empty()
        {
            out += &format!(".SS \"{}\"\n", roff(group.trim_end_matches('.')));
        } else if let Some(decl) = line.strip_prefix("pub const ") {
            let (name, rest) = decl.split_once(':').expect("pub const NAME: T = V;");
            let value = rest.split_once('=').expect("a value").1;
            let value = value.trim().trim_end_matches(';');
            // Digit separators are for the code's reader: `60_000` reads 60000 on the page.
            let chars: Vec<char> = value.chars().collect();
            let value: String = (0..chars.len())
                .filter(|&k| {
                    let digit = |j: Option<usize>| {
                        j.and_then(|j| chars.get(j))
                            .is_some_and(char::is_ascii_digit)
                    };
                    chars[k] != '_' || !(digit(k.checked_sub(1)) && digit(Some(k + 1)))
                })
                .map(|k| chars[k])
                .collect();
            let value = match value.strip_prefix("Duration::from_") {
                Some(d) => {
                    let (unit, n) = d.trim_end_matches(')').split_once('(').unwrap();
                    format!("{n} {}", if unit == "secs" { "s" } else { "ms" })
                }
                None => value.to_string(),
            };
            let doc = i
                .checked_sub(1)
                .and_then(|d| lines[d].strip_prefix("/// "))
                .unwrap_or_else(|| panic!("{name} has no one-line /// doc"));
            assert!(
                i < 2 || !lines[i - 2].starts_with("///"),
                "{name}: the /// doc is one line (reasons go in // comments above it)"
            );
            out += &format!(".TP\n.B {name}\nValue {}. {}\n", roff(&value), roff(doc));
        }
    }
    out
}

/// peer-config(5)'s INTERNAL BOUNDS section lists exactly the constants of
/// `src/config/internal.rs`, grouped as there, with their values and docs.
#[test]
fn peer_config_5_internal_bounds_are_the_bounds_table() {
    let page = read("man/man5/peer-config.5");
    let section = page
        .find(".SH INTERNAL BOUNDS\n")
        .expect("peer-config(5) has an INTERNAL BOUNDS section");
    let start = section + page[section..].find(".SS ").expect("a group");
    let end = start + page[start..].find(".SH ").unwrap_or(page.len() - start);
    let want = internal_bounds_man_rows(&read("src/config/internal.rs"));
    assert!(
        page[start..end] == want,
        "peer-config(5) INTERNAL BOUNDS differs from src/config/internal.rs; the groups \
         should read:\n{want}"
    );
    let sample = "//! x\n\n// Files.\n\n// Why 4 KiB.\n/// Largest `a-b` file.\n\
                  pub const A_MAX: u64 = 4 * 1_024;\n/// Quiet time.\n\
                  pub const Q: Duration = Duration::from_millis(10);\n";
    assert_eq!(
        internal_bounds_man_rows(sample),
        ".SS \"Files\"\n.TP\n.B A_MAX\nValue 4 * 1024. Largest a\\-b file.\n\
         .TP\n.B Q\nValue 10 ms. Quiet time.\n"
    );
}
