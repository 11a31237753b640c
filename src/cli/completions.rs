//! `peer completions bash|zsh|fish`: completion scripts generated from the flag table
//! (`cli::flags`): command paths, their words, flags and the values of one-of flags. The
//! table's tests hold `--help`, the parsers and the man pages to the same table.

use super::flags::{self, Flag, Kind, Spec};
use super::{Ctx, args, commands, out};
use crate::error::{Code, Error, Result};
use std::ffi::OsString;

pub const HELP: &str = "usage: peer completions bash|zsh|fish

Prints a completion script for the shell, generated from the flag table that --help, the
parsers and the man pages are tested against:
  bash:  source <(peer completions bash)        (or save it in ~/.local/share/bash-completion/completions/peer)
  zsh:   peer completions zsh > ~/.zfunc/_peer   (with fpath+=(~/.zfunc); autoload -U compinit; compinit)
  fish:  peer completions fish > ~/.config/fish/completions/peer.fish
";

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

/// Words listed once, in order.
fn unique<'a>(words: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for w in words {
        if !out.contains(&w) {
            out.push(w);
        }
    }
    out
}

/// The visible specs of one program.
fn specs_of(program: &str) -> Vec<&'static Spec> {
    flags::visible().filter(|s| s.program == program).collect()
}

/// Every path prefix of a program's specs ("" first, then "ask", "ask card", …), longest last.
fn nodes(program: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    for s in specs_of(program) {
        let words: Vec<&str> = s.path.split_whitespace().collect();
        for n in 1..=words.len() {
            let p = words[..n].join(" ");
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// The words completed after a path: the next words of longer paths, the spec's own words.
fn words_after(program: &str, node: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    for s in specs_of(program) {
        let rest = if node.is_empty() {
            Some(s.path)
        } else {
            s.path.strip_prefix(node).and_then(|r| r.strip_prefix(' '))
        };
        if let Some(next) = rest.and_then(|r| r.split_whitespace().next()) {
            out.push(next);
        }
        if s.path == node {
            out.extend(s.words.iter().copied());
        }
    }
    unique(out)
}

/// The flags of exactly this path (its own spec), then the program's global options.
fn flags_at(program: &str, node: &str) -> Vec<&'static Flag> {
    let own = specs_of(program)
        .into_iter()
        .filter(|s| s.path == node)
        .flat_map(|s| s.flags.iter());
    let mut out: Vec<&Flag> = Vec::new();
    for f in own.chain(flags::globals(program)) {
        if !out.iter().any(|g| g.long == f.long) {
            out.push(f);
        }
    }
    out
}

/// Every flag a program's specs name, globals included, each once (by name).
fn all_flags(program: &str) -> Vec<&'static Flag> {
    let mut out: Vec<&Flag> = Vec::new();
    let every = specs_of(program).into_iter().flat_map(|s| s.flags.iter());
    for f in flags::globals(program).iter().chain(every) {
        if !out.iter().any(|g| g.long == f.long) {
            out.push(f);
        }
    }
    out
}

/// The bash `case` arms that complete the values of one-of flags.
fn bash_value_arms() -> String {
    let mut all: Vec<(&str, Vec<&str>)> = Vec::new();
    for s in flags::visible() {
        for f in s.flags {
            let Kind::OneOf(values) = f.kind else {
                continue;
            };
            match all.iter_mut().find(|(n, _)| *n == f.long) {
                Some((_, have)) => *have = unique(have.drain(..).chain(values.iter().copied())),
                None => all.push((f.long, values.to_vec())),
            }
        }
    }
    all.iter()
        .map(|(f, v)| {
            format!(
                "    --{f}) COMPREPLY=($(compgen -W \"{}\" -- \"$cur\")); return 0 ;;\n",
                v.join(" ")
            )
        })
        .collect()
}

/// The flags of a program that take a value, as a bash pattern (`--home|--as|…`).
fn value_flags(program: &str) -> String {
    all_flags(program)
        .iter()
        .filter(|f| f.kind != Kind::Switch)
        .map(|f| format!("--{}", f.long))
        .collect::<Vec<_>>()
        .join("|")
}

/// The completion words at one path: next words, then flags.
fn node_words(program: &str, node: &str) -> String {
    let flags = flags_at(program, node);
    let flag_words: Vec<String> = flags.iter().map(|f| format!("--{}", f.long)).collect();
    let mut words: Vec<&str> = words_after(program, node);
    words.extend(flag_words.iter().map(String::as_str));
    unique(words).join(" ")
}

fn bash() -> String {
    let mut cases = String::new();
    let mut peer_nodes = nodes("peer");
    // Longest paths first: bash takes the first matching pattern.
    peer_nodes.sort_by_key(|n| std::cmp::Reverse(n.split_whitespace().count()));
    for n in &peer_nodes {
        let pattern = if n.is_empty() {
            "\"\"".to_string()
        } else {
            format!("\"{n} \"*")
        };
        cases.push_str(&format!(
            "    {pattern}) words=\"{}\" ;;\n",
            node_words("peer", n)
        ));
    }
    let mut tool_cases = String::new();
    for name in ["peer-dir", "peer-res"] {
        tool_cases.push_str(&format!(
            "    {name}) words=\"{}\" ;;\n",
            node_words(name, "")
        ));
    }
    let values = bash_value_arms();
    let skip = value_flags("peer");
    // The typed path is kept in `cmdpath`, not `path`: under zsh's bashcompinit `path` is the
    // array tied to PATH.
    format!(
        r#"# bash completion for peer, peer-dir and peer-res, generated by 'peer completions bash'
_peer() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} cmdpath= i words
  case $prev in
{values}  esac
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${{COMP_WORDS[i]}} in
      {skip}) ((i++)) ;;
      --) return 0 ;;
      -*) ;;
      *) cmdpath+="${{COMP_WORDS[i]}} " ;;
    esac
  done
  case $cmdpath in
{cases}  esac
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
"#
    )
}

/// Text inside a fish single-quoted string.
fn fish_quote(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\'', "\\'")
}

/// One fish line for a flag; `cond` limits it to a path.
fn fish_flag(s: &mut String, program: &str, cond: &str, f: &Flag) {
    let tail = match f.kind {
        Kind::Switch => String::new(),
        Kind::Path => " -rF".to_string(),
        Kind::Number | Kind::Text => " -x".to_string(),
        Kind::OneOf(v) => format!(" -xa '{}'", v.join(" ")),
    };
    s.push_str(&format!(
        "complete -c {program}{cond} -l {}{tail} -d '{}'\n",
        f.long,
        fish_quote(f.help)
    ));
}

/// The fish condition that a path's words were all typed.
fn fish_cond(node: &str) -> String {
    let parts: Vec<String> = node
        .split_whitespace()
        .map(|w| format!("__fish_seen_subcommand_from {w}"))
        .collect();
    format!(" -n '{}'", parts.join("; and "))
}

fn fish() -> String {
    let mut s = String::from(
        "# fish completion for peer, peer-dir and peer-res, generated by 'peer completions fish'\n",
    );
    s.push_str("complete -c peer -f\n");
    for g in flags::PEER_GLOBALS {
        fish_flag(&mut s, "peer", "", g);
    }
    for c in commands() {
        s.push_str(&format!(
            "complete -c peer -n '__fish_use_subcommand' -a {} -d '{}'\n",
            c.name,
            fish_quote(c.summary)
        ));
    }
    for n in nodes("peer").iter().filter(|n| !n.is_empty()) {
        let cond = fish_cond(n);
        for w in words_after("peer", n) {
            s.push_str(&format!("complete -c peer{cond} -a {w}\n"));
        }
        for spec in specs_of("peer")
            .into_iter()
            .filter(|x| x.path == n.as_str())
        {
            for f in spec.flags {
                fish_flag(&mut s, "peer", &cond, f);
            }
        }
    }
    for name in ["peer-dir", "peer-res"] {
        s.push_str(&format!("complete -c {name} -f\n"));
        for f in flags_at(name, "") {
            fish_flag(&mut s, name, "", f);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_flag_and_word_is_completed() {
        let (bash, fish) = (bash(), fish());
        for spec in flags::visible() {
            for f in spec.flags {
                let flag = format!("--{}", f.long);
                assert!(
                    bash.split(|c: char| c.is_whitespace() || c == '"')
                        .any(|w| w == flag),
                    "{} {flag}",
                    spec.path
                );
                assert!(
                    fish.contains(&format!("-l {} ", f.long)),
                    "{} --{}",
                    spec.path,
                    f.long
                );
            }
        }
        assert!(bash.contains("    \"ask \"*) words=\"status serve pending decide answer token peers card recommend friends "), "{bash}");
        assert!(
            bash.contains("    \"ask card \"*) words=\"show verify add "),
            "{bash}"
        );
        assert!(
            bash.contains("    \"completions \"*) words=\"bash zsh fish "),
            "{bash}"
        );
        assert!(bash.contains("--notify) COMPREPLY=($(compgen -W \"bell stderr none\""));
        assert!(fish.contains("-l notify -xa 'bell stderr none'"));
        assert!(!bash.contains("sandbox-exec") && !fish.contains("sandbox-exec"));
    }
}
