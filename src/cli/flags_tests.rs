//! The flag table against the parsers (probed in-process, every probe ending in `--help` so no
//! command runs), the global option parser, the `--help` texts and the man pages' synopsis
//! lines. A failure names the command path and the flag that differs.

use super::*;
use crate::cli::{Ctx, commands};
use crate::error::Result;
use std::collections::BTreeSet;
use std::ffi::OsString;

/// Runs one command path's parser on `extra` with standard output muted.
fn probe(spec: &Spec, extra: &[String]) -> Result<i32> {
    let ctx = Ctx::default();
    let mut words = spec.path.split_whitespace();
    let first = words.next().unwrap_or("");
    let mut argv: Vec<OsString> = words.map(OsString::from).collect();
    argv.extend(extra.iter().map(OsString::from));
    let run: crate::cli::Command = match (spec.program, first) {
        ("peer-dir", _) => crate::cli::dir::cmd,
        ("peer-res", _) => crate::cli::res::peer_res,
        // `peer run` and `peer run-child` report their own failures as a wrapper status (125),
        // so the functions under the wrapper are probed.
        ("peer", "run") => crate::cli::res::run_wrapped,
        ("peer", "run-child") => crate::cli::session_cmds::run_child_wrapped,
        _ => commands()
            .into_iter()
            .find(|c| c.name == first)
            .map(|c| c.run)
            .expect("every spec names a command"),
    };
    crate::cli::out::muted(|| run(&ctx, argv))
}

/// The parser's answer to `args` then `--help` (twice: should `--name` wrongly take a value,
/// the first `--help` is eaten as that value and the second still ends the parse, so no
/// command ever runs).
fn answer(spec: &Spec, args: &[String]) -> std::result::Result<(), String> {
    let mut argv = args.to_vec();
    argv.extend(["--help".to_string(), "--help".to_string()]);
    probe(spec, &argv).map(|_| ()).map_err(|e| e.message)
}

/// True when the parser of `spec` takes `--name` at all (any answer but "invalid option").
fn accepts(spec: &Spec, name: &str) -> bool {
    let refused = format!("invalid option '--{name}'");
    answer(spec, &[format!("--{name}=1")]).map_or_else(|m| !m.contains(&refused), |()| true)
}

/// Why the parser of `spec` disagrees with the table about flag `f`, if it does: refuses it,
/// takes a value for a switch or none for a valued flag, or refuses a listed value.
fn disagreement(spec: &Spec, f: &Flag) -> Option<String> {
    let name = f.long;
    let refused = format!("invalid option '--{name}'");
    let no_value = format!("unexpected argument for option '--{name}'");
    let samples: Vec<String> = match f.kind {
        Kind::Switch => vec![String::new()],
        Kind::OneOf(v) => v.iter().map(|v| format!("={v}")).collect(),
        Kind::Number => vec!["=1".to_string()],
        Kind::Path => vec!["=/nonexistent".to_string()],
        Kind::Text => vec!["=t".to_string()],
    };
    for sample in samples {
        match answer(spec, &[format!("--{name}{sample}")]) {
            Err(m) if m.contains(&refused) => return Some("the parser refuses it".into()),
            Err(m) if m.contains(&no_value) => return Some("the parser takes no value".into()),
            Err(m) if matches!(f.kind, Kind::OneOf(_)) => {
                return Some(format!("the parser refuses {sample}: {m}"));
            }
            _ => {}
        }
    }
    if f.kind == Kind::Switch && answer(spec, &[format!("--{name}=1")]).is_ok() {
        return Some("the table says switch, the parser takes a value".into());
    }
    None
}

/// Every `--name` a parser in src/cli matches on, found in the source text.
fn parsed_names() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli");
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_name() == "flags_tests.rs" {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap();
        for part in text.split(concat!("Lo", "ng(")).skip(1) {
            let Some(end) = part.find(") =>") else {
                continue;
            };
            for name in part[..end].split('"').skip(1).step_by(2) {
                out.insert(name.to_string());
            }
        }
    }
    out.remove("help");
    out
}

/// The ask discovery subcommands share one parser and narrow it with `flags::names`.
fn expected_by_parser(spec: &Spec) -> BTreeSet<&'static str> {
    let group = |s: &Spec| {
        let w: Vec<&str> = s.path.split_whitespace().collect();
        w.len() > 1 && w[0] == "ask" && ["peers", "card", "recommend", "friends"].contains(&w[1])
    };
    if spec.program == "peer" && group(spec) {
        SPECS
            .iter()
            .filter(|s| s.program == "peer" && group(s))
            .flat_map(|s| s.flags.iter().map(|f| f.long))
            .collect()
    } else {
        spec.flags.iter().map(|f| f.long).collect()
    }
}

#[test]
fn the_table_names_every_command_once() {
    let mut tops: Vec<&str> = Vec::new();
    for s in SPECS.iter().filter(|s| s.program == "peer") {
        let top = s.path.split_whitespace().next().unwrap();
        if !tops.contains(&top) {
            tops.push(top);
        }
    }
    let names: Vec<&str> = commands().iter().map(|c| c.name).collect();
    assert_eq!(tops, names);
    for (i, a) in SPECS.iter().enumerate() {
        for b in &SPECS[i + 1..] {
            assert!(
                a.program != b.program || a.path != b.path,
                "{} twice",
                a.path
            );
        }
        let mut longs: Vec<&str> = a.flags.iter().map(|f| f.long).collect();
        longs.sort_unstable();
        longs.dedup();
        assert_eq!(longs.len(), a.flags.len(), "a flag twice in {}", a.path);
        assert!(a.hidden || a.flags.iter().all(|f| !f.help.is_empty()));
    }
}

#[test]
fn every_parser_accepts_exactly_its_table_entry() {
    let names = parsed_names();
    let mut all: BTreeSet<String> = names.clone();
    for s in SPECS {
        all.extend(s.flags.iter().map(|f| f.long.to_string()));
    }
    let mut errors = Vec::new();
    for spec in SPECS {
        let expected = expected_by_parser(spec);
        for f in spec.flags {
            if let Some(why) = disagreement(spec, f) {
                errors.push(format!(
                    "{} {}: table has --{}, {why}",
                    spec.program, spec.path, f.long
                ));
            }
        }
        for name in all.iter().filter(|n| !expected.contains(n.as_str())) {
            if accepts(spec, name) {
                errors.push(format!(
                    "{} {}: parser takes --{name}, the table lacks it",
                    spec.program, spec.path
                ));
            }
        }
    }
    for n in &names {
        assert!(all.contains(n));
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

/// The `--flags` a text names (`\-` already unescaped), each once.
fn flags_in(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter_map(|w| w.strip_prefix("--"))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_lowercase()))
        .map(|w| w.trim_end_matches('-').to_string())
        .collect()
}

/// The `--help` text that documents a path.
fn help_of(spec: &Spec) -> &'static str {
    use crate::cli::{ask, ask_discovery as disc, bench, chat, completions, dir, host, lab};
    use crate::cli::{msg, res, session_cmds as sc};
    let first = spec
        .path
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    match (spec.program, first.as_str()) {
        ("peer-dir", _) | ("peer", "dir") => dir::HELP,
        ("peer-res", _) => res::PEER_RES_HELP,
        ("peer", "host") => host::HELP,
        ("peer", "send") => msg::SEND_HELP,
        ("peer", "inbox") => msg::INBOX_HELP,
        ("peer", "reply") => msg::REPLY_HELP,
        ("peer", "consume") => msg::CONSUME_HELP,
        ("peer", "status") => msg::STATUS_HELP,
        ("peer", "chat") => chat::HELP,
        ("peer", "lab") => lab::HELP,
        ("peer", "mcp") => sc::MCP_HELP,
        ("peer", "run-child") => sc::RUN_CHILD_HELP,
        ("peer", "recover") => sc::RECOVER_HELP,
        ("peer", "run") => res::RUN_HELP,
        ("peer", "res") => res::RES_HELP,
        ("peer", "ask answer") => ask::ANSWER_HELP,
        ("peer", "ask peers") => disc::PEERS_HELP,
        ("peer", "ask card") => disc::CARD_HELP,
        ("peer", "ask recommend") => disc::RECOMMEND_HELP,
        ("peer", "ask friends") => disc::FRIENDS_HELP,
        ("peer", a) if a == "ask" || a.starts_with("ask ") => ask::HELP,
        ("peer", "bench") => bench::HELP,
        ("peer", "completions") => completions::HELP,
        other => panic!("no help text for {other:?}"),
    }
}

fn global_names(program: &str) -> BTreeSet<String> {
    globals(program)
        .iter()
        .map(|f| f.long.to_string())
        .collect()
}

fn own_names(spec: &Spec) -> BTreeSet<String> {
    spec.flags.iter().map(|f| f.long.to_string()).collect()
}

#[test]
fn every_help_text_names_exactly_its_table_entries() {
    let mut errors = Vec::new();
    for spec in visible() {
        let help = help_of(spec);
        let named = flags_in(help);
        for f in spec.flags {
            if !named.contains(f.long) {
                errors.push(format!(
                    "{} {}: --help lacks --{}",
                    spec.program, spec.path, f.long
                ));
            }
        }
        // A help text may show its siblings' flags (`peer ask --help` lists every ask form)
        // and those of a command it names ('peer run --resource NAME -- CMD').
        let top = spec.path.split_whitespace().next().unwrap_or("");
        let mut known = global_names(spec.program);
        for s in visible().filter(|s| s.program == spec.program) {
            let named = !s.path.is_empty() && help.contains(&format!("peer {} ", s.path));
            if named || s.path.split_whitespace().next().unwrap_or("") == top {
                known.extend(own_names(s));
            }
        }
        for n in named.difference(&known) {
            errors.push(format!(
                "{} {}: --help names --{n}, the table lacks it",
                spec.program, spec.path
            ));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

/// The synopsis lines of the section-1 pages, as plain text: peer(1)'s `.SS "peer …"`
/// headings and the SYNOPSIS blocks of every page (one block per `.br`).
fn man_synopses() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("man/man1");
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let text = std::fs::read_to_string(e.path())
            .unwrap()
            .replace("\\-", "-");
        let mut in_synopsis = false;
        let mut block = String::new();
        for line in text.lines() {
            if let Some(h) = line.strip_prefix(".SS \"peer ") {
                out.push(format!("peer {}", h.trim_end_matches('"')));
            }
            if line.starts_with(".SH") {
                if in_synopsis && !block.is_empty() {
                    out.push(std::mem::take(&mut block));
                }
                in_synopsis = line == ".SH SYNOPSIS";
                continue;
            }
            if !in_synopsis {
                continue;
            }
            if line == ".br" {
                out.push(std::mem::take(&mut block));
                continue;
            }
            let words = line
                .split_whitespace()
                .skip(usize::from(line.starts_with('.')));
            for w in words {
                block.push_str(w);
                block.push(' ');
            }
        }
    }
    out
}

/// The spec a synopsis line belongs to: its program and the longest table path it starts with.
fn spec_of(line: &str) -> Option<(&'static str, &'static str)> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let program = *words.first()?;
    let mut best: Option<&Spec> = None;
    for s in SPECS.iter().filter(|s| s.program == program) {
        let path: Vec<&str> = s.path.split_whitespace().collect();
        if words.len() > path.len()
            && words[1..=path.len()] == path[..]
            && best.is_none_or(|b| b.path.split_whitespace().count() < path.len())
        {
            best = Some(s);
        }
    }
    match best {
        Some(s) => Some((s.program, s.path)),
        None if program == "peer" => Some(("peer", "")),
        None => None,
    }
}

#[test]
fn every_man_synopsis_names_exactly_its_table_entry() {
    let lines = man_synopses();
    let mut man: Vec<((&str, &str), BTreeSet<String>)> = Vec::new();
    for l in &lines {
        let Some(key) = spec_of(l) else { continue };
        let flags = flags_in(l);
        match man.iter_mut().find(|(k, _)| *k == key) {
            Some((_, have)) => have.extend(flags),
            None => man.push((key, flags)),
        }
    }
    let of = |key: (&str, &str)| man.iter().find(|(k, _)| *k == key).map(|(_, f)| f.clone());
    let mut errors = Vec::new();
    let top: BTreeSet<String> = PEER_GLOBALS
        .iter()
        .filter(|g| !["help", "version"].contains(&g.long))
        .map(|g| g.long.to_string())
        .collect();
    if of(("peer", "")) != Some(top) {
        errors.push(format!("peer(1) SYNOPSIS: {:?}", of(("peer", ""))));
    }
    for spec in visible() {
        // peer(1) refers `peer dir` to peer-dir(1), whose synopsis holds the same flags.
        let key = if (spec.program, spec.path) == ("peer", "dir") {
            ("peer-dir", "")
        } else {
            (spec.program, spec.path)
        };
        let globals = global_names(spec.program);
        let want: BTreeSet<String> = own_names(spec).difference(&globals).cloned().collect();
        let have: Option<BTreeSet<String>> =
            of(key).map(|h| h.difference(&globals).cloned().collect());
        if have.as_ref() != Some(&want) {
            errors.push(format!(
                "{} {}: man {have:?}, table {want:?}",
                spec.program, spec.path
            ));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn the_global_parser_takes_exactly_the_global_table() {
    let split = |args: &[&str]| {
        let mut ctx = Ctx::default();
        let args = args.iter().map(OsString::from).collect();
        crate::cli::split_globals(&mut ctx, args).map(|(sub, rest)| (ctx, sub, rest))
    };
    for g in PEER_GLOBALS {
        let flag = format!("--{}", g.long);
        let (ctx, sub, rest) = match g.kind {
            Kind::Switch => split(&[&flag]),
            _ => split(&[&flag, "v", "send"]),
        }
        .unwrap();
        let taken = match g.long {
            "home" => ctx.home.is_some(),
            "json" => ctx.json,
            "as" => ctx.as_alias.is_some(),
            // `peer --help` and `peer --version` are answered as if they were commands.
            _ => sub.as_deref() == Some(flag.as_str()),
        };
        assert!(taken && rest.is_empty(), "{flag}");
    }
    let mut others: BTreeSet<String> = parsed_names();
    others.extend(
        SPECS
            .iter()
            .flat_map(|s| s.flags.iter().map(|f| f.long.to_string())),
    );
    others.extend(man_synopses().iter().flat_map(|l| flags_in(l)));
    for name in others
        .iter()
        .filter(|n| globals("peer").iter().all(|g| g.long != n.as_str()))
    {
        let flag = format!("--{name}");
        let rest = split(&["send", &flag]).map_or(Vec::new(), |(_, _, rest)| rest);
        assert_eq!(
            rest,
            [OsString::from(&flag)],
            "the global parser took {flag}"
        );
    }
    for g in TOOL_GLOBALS {
        assert!(PEER_GLOBALS.iter().any(|p| p.long == g.long));
    }
}
