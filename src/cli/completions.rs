//! `peer completions bash|zsh|fish`: completion scripts generated from the subcommand table
//! and each subcommand's `--help` text (its `--flags`, and the words of `peer res ACTION`), so
//! they cannot drift from what `--help` shows.

use super::{Ctx, args, commands, out};
use crate::error::{Code, Error, Result};
use std::ffi::OsString;

pub const HELP: &str = "usage: peer completions bash|zsh|fish

Prints a completion script for the shell, generated from the same table as --help:
  bash:  source <(peer completions bash)        (or save it in ~/.local/share/bash-completion/completions/peer)
  zsh:   peer completions zsh > ~/.zfunc/_peer   (with fpath+=(~/.zfunc); autoload -U compinit; compinit)
  fish:  peer completions fish > ~/.config/fish/completions/peer.fish
";

/// The global options every subcommand accepts.
const GLOBALS: [&str; 5] = ["--home", "--json", "--as", "--help", "--version"];
/// The global options of the `peer-dir` and `peer-res` tools (no `--as`).
const TOOL_GLOBALS: [&str; 4] = ["--home", "--json", "--help", "--version"];

pub fn cmd(_ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let mut shell = None;
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("help") | Short('h') => {
                out::text(HELP)?;
                return Ok(0);
            }
            Value(v) if shell.is_none() => shell = Some(v.string().map_err(args::usage)?),
            other => return Err(args::unexpected(other)),
        }
    }
    let script = match shell.as_deref() {
        Some("bash") => bash(),
        Some("zsh") => format!(
            "#compdef peer peer-dir peer-res\nautoload -U bashcompinit && bashcompinit\n{}",
            bash()
        ),
        Some("fish") => fish(),
        _ => {
            return Err(Error::new(
                Code::Usage,
                "peer completions needs a shell: bash, zsh or fish",
            ));
        }
    };
    out::text(&script)?;
    Ok(0)
}

/// Everything a subcommand's help says, its own subcommands' help texts included (`peer ask
/// card --help` names flags `peer ask --help` does not).
pub(crate) fn full_help(name: &str, help: &str) -> String {
    let extra: &[&str] = match name {
        "ask" => &[
            super::ask::ANSWER_HELP,
            super::ask_discovery::PEERS_HELP,
            super::ask_discovery::CARD_HELP,
            super::ask_discovery::RECOMMEND_HELP,
            super::ask_discovery::FRIENDS_HELP,
        ],
        _ => &[],
    };
    std::iter::once(help)
        .chain(extra.iter().copied())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `--flags` a help text names, in order of first appearance.
pub(crate) fn flags_of(help: &str) -> Vec<String> {
    let mut flags: Vec<String> = Vec::new();
    for word in help.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
        let name = word.trim_end_matches('-');
        if name.len() > 2
            && name.starts_with("--")
            && name[2..].starts_with(|c: char| c.is_ascii_lowercase())
            && !flags.iter().any(|f| f == name)
        {
            flags.push(name.to_string());
        }
    }
    flags
}

/// The values a help text lists for a flag (`--notify bell|stderr|none`), by flag.
pub(crate) fn values_of(help: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let words: Vec<&str> = help
        .split(|c: char| c.is_whitespace() || "[]".contains(c))
        .filter(|w| !w.is_empty())
        .collect();
    for pair in words.windows(2) {
        let (flag, list) = (pair[0], pair[1]);
        let values: Vec<String> = list.split('|').map(str::to_string).collect();
        let plain =
            |v: &String| !v.is_empty() && v.chars().all(|c| c.is_ascii_lowercase() || c == '-');
        if flag.len() > 2
            && flag.starts_with("--")
            && values.len() > 1
            && values.iter().all(plain)
            && !out.iter().any(|(f, _)| f == flag)
        {
            out.push((flag.to_string(), values));
        }
    }
    out
}

/// The action words of a help text's `usage:` lines (`peer res status …` gives `status`,
/// `peer ask peers|card …` gives `peers` and `card`).
fn actions_of(name: &str, help: &str) -> Vec<String> {
    let prefix = format!("peer {name} ");
    let mut words: Vec<String> = Vec::new();
    for line in help.lines() {
        let rest = line.trim().trim_start_matches("usage:").trim();
        let Some(first) = rest
            .strip_prefix(&prefix)
            .and_then(|r| r.split_whitespace().next())
        else {
            continue;
        };
        for w in first.split('|') {
            if !w.is_empty()
                && w.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                && !words.iter().any(|x| x == w)
            {
                words.push(w.to_string());
            }
        }
    }
    if words.len() > 1 { words } else { Vec::new() }
}

/// Words listed once, in order.
fn unique(words: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in words {
        if !out.contains(&w) {
            out.push(w);
        }
    }
    out
}

/// The completion words after `peer NAME`: its actions, its flags, the global options.
fn words_of(name: &str, help: &str) -> Vec<String> {
    let help = full_help(name, help);
    let globals = GLOBALS.iter().map(|g| g.to_string());
    unique(
        actions_of(name, &help)
            .into_iter()
            .chain(flags_of(&help))
            .chain(globals),
    )
}

/// The bash `case` arms that complete a flag's listed values.
fn bash_value_arms(helps: &[String]) -> String {
    let mut all: Vec<(String, Vec<String>)> = Vec::new();
    for h in helps {
        for (flag, values) in values_of(h) {
            match all.iter_mut().find(|(f, _)| *f == flag) {
                Some((_, have)) => *have = unique(have.drain(..).chain(values)),
                None => all.push((flag, values)),
            }
        }
    }
    all.iter()
        .map(|(f, v)| {
            format!(
                "    {f}) COMPREPLY=($(compgen -W \"{}\" -- \"$cur\")); return 0 ;;\n",
                v.join(" ")
            )
        })
        .collect()
}

/// The `peer-dir` and `peer-res` tools: (name, help).
fn tools() -> [(&'static str, &'static str); 2] {
    [
        ("peer-dir", super::dir::HELP),
        ("peer-res", super::res::PEER_RES_HELP),
    ]
}

fn bash() -> String {
    let defs = commands();
    let names: Vec<&str> = defs.iter().map(|c| c.name).collect();
    let mut cases = String::new();
    let mut helps: Vec<String> = Vec::new();
    for c in &defs {
        cases.push_str(&format!(
            "    {}) words=\"{}\" ;;\n",
            c.name,
            words_of(c.name, c.help).join(" ")
        ));
        helps.push(full_help(c.name, c.help));
    }
    let mut tool_cases = String::new();
    for (name, help) in tools() {
        let words = unique(
            flags_of(help)
                .into_iter()
                .chain(TOOL_GLOBALS.iter().map(|g| g.to_string())),
        );
        tool_cases.push_str(&format!("    {name}) words=\"{}\" ;;\n", words.join(" ")));
        helps.push(help.to_string());
    }
    let values = bash_value_arms(&helps);
    format!(
        r#"# bash completion for peer, peer-dir and peer-res, generated by 'peer completions bash'
_peer() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} sub= i words
  case $prev in
{values}  esac
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${{COMP_WORDS[i]}} in
      --home|--as) ((i++)) ;;
      --) return 0 ;;
      -*) ;;
      *) sub=${{COMP_WORDS[i]}}; break ;;
    esac
  done
  case $sub in
    "") words="{} {}" ;;
{cases}    *) return 0 ;;
  esac
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _peer peer
_peer_tools() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} words
  case $prev in
{values}  esac
  case ${{COMP_WORDS[0]##*/}} in
{tool_cases}    *) return 0 ;;
  esac
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _peer_tools peer-dir peer-res
"#,
        names.join(" "),
        GLOBALS.join(" ")
    )
}

/// Text inside a fish single-quoted string.
fn fish_quote(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\'', "\\'")
}

/// The fish lines for the flags of one help text; `cond` limits them to a subcommand.
fn fish_flags(s: &mut String, program: &str, cond: &str, help: &str, skip: &[&str]) {
    let values = values_of(help);
    for f in flags_of(help)
        .iter()
        .filter(|f| !skip.contains(&f.as_str()))
    {
        let listed = values.iter().find(|(v, _)| v == f);
        let tail = listed.map_or(String::new(), |(_, v)| format!(" -xa '{}'", v.join(" ")));
        s.push_str(&format!(
            "complete -c {program}{cond} -l {}{tail}\n",
            &f[2..]
        ));
    }
}

fn fish() -> String {
    let defs = commands();
    let mut s = String::from(
        "# fish completion for peer, peer-dir and peer-res, generated by 'peer completions fish'\n",
    );
    s.push_str("complete -c peer -f\n");
    for g in GLOBALS {
        s.push_str(&format!("complete -c peer -l {}\n", &g[2..]));
    }
    for c in &defs {
        s.push_str(&format!(
            "complete -c peer -n '__fish_use_subcommand' -a {} -d '{}'\n",
            c.name,
            fish_quote(c.summary)
        ));
        let help = full_help(c.name, c.help);
        let cond = format!(" -n '__fish_seen_subcommand_from {}'", c.name);
        for a in actions_of(c.name, &help) {
            s.push_str(&format!("complete -c peer{cond} -a {a}\n"));
        }
        fish_flags(&mut s, "peer", &cond, &help, &GLOBALS);
    }
    for (name, help) in tools() {
        s.push_str(&format!("complete -c {name} -f\n"));
        for g in TOOL_GLOBALS {
            s.push_str(&format!("complete -c {name} -l {}\n", &g[2..]));
        }
        fish_flags(&mut s, name, "", help, &TOOL_GLOBALS);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_of_every_help_is_completed() {
        let script = bash();
        for c in commands() {
            assert!(
                script.contains(&format!("    {}) words=", c.name)),
                "{}",
                c.name
            );
            for f in flags_of(c.help) {
                assert!(script.contains(&f), "{} {f}", c.name);
                assert!(
                    fish().contains(&format!("-l {}", &f[2..])),
                    "{} {f}",
                    c.name
                );
            }
        }
        let host = commands().into_iter().find(|c| c.name == "host").unwrap();
        assert!(flags_of(host.help).contains(&"--notify".to_string()));
        let res = commands().into_iter().find(|c| c.name == "res").unwrap();
        assert_eq!(
            actions_of("res", res.help),
            [
                "status",
                "request",
                "grant",
                "release",
                "cancel",
                "set-controller"
            ]
        );
    }
}
