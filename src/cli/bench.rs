//! `peer bench` on the command line: its options and help; the benchmark itself is `crate::bench`.

use super::{Ctx, args};
use crate::bench::{Options, parse_senders};
use crate::config::internal::BENCH_MESSAGES_MAX as MESSAGES_MAX;
use crate::error::{Code, Error, Result};
use std::ffi::OsString;
use std::path::PathBuf;

pub const HELP: &str =
    "usage: peer bench [--quick] [--json] [--senders 1,8,64] [--messages N] [--dir DIR] [--keep]

Measures the floors of this machine (Unix socket round trip, append + fdatasync, atomic
replace, spawn, Ed25519, the group-commit ceiling with N writers), then peerwire between real
`peer host` processes and a real `peer mcp` in a fresh namespace under DIR (default: the temp
directory), then the floors again. Reports each figure with median, p99 and N beside its floor
from the same run, as a ratio, with its durability, and a table of the performance targets with
a verdict each (or \"too few samples\": --quick cannot judge most).
--messages N sets the measured warm sends (default 1000, --quick 20); the other phases scale
from it. --senders lists the concurrent sender processes of the throughput runs. Exits 1 only
when a message was lost, duplicated or refused, or a phase failed. See peer(1).
";

/// Parses the arguments after `bench`; `None` for `--help`.
pub fn parse(ctx: &Ctx, argv: Vec<OsString>) -> Result<Option<Options>> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let (mut quick, mut json, mut keep) = (false, ctx.json, false);
    let (mut senders, mut messages, mut dir) = (vec![1, 8, 64], None, None);
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("quick") => quick = true,
            Long("json") => json = true,
            Long("keep") => keep = true,
            Long("senders") => senders = parse_senders(&args::string(&mut p, "--senders")?)?,
            Long("messages") => {
                let n = args::number(&mut p, "--messages")?;
                if !(1..=MESSAGES_MAX).contains(&n) {
                    return Err(Error::new(
                        Code::Usage,
                        format!("--messages takes 1-{MESSAGES_MAX}, got {n}"),
                    ));
                }
                messages = Some(n as usize);
            }
            Long("dir") => dir = Some(PathBuf::from(args::string(&mut p, "--dir")?)),
            Long("help") | Short('h') => return Ok(None),
            other => return Err(args::unexpected(other)),
        }
    }
    let messages = messages.unwrap_or(if quick { 20 } else { 1000 });
    Ok(Some(Options {
        quick,
        json,
        senders,
        messages,
        dir,
        keep,
    }))
}

/// The `peer bench` subcommand.
pub fn cmd(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    let Some(opts) = parse(ctx, argv)? else {
        super::out::text(HELP)?;
        return Ok(0);
    };
    crate::bench::run(&opts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::parse_senders;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn options() {
        let ctx = Ctx::default();
        let o = parse(
            &ctx,
            os(&["--quick", "--senders", "1,4", "--messages", "7"]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (o.quick, o.senders.clone(), o.messages),
            (true, vec![1, 4], 7)
        );
        let d = parse(&ctx, os(&[])).unwrap().unwrap();
        assert_eq!(
            (d.senders, d.messages, d.json),
            (vec![1, 8, 64], 1000, false)
        );
        assert_eq!(parse(&ctx, os(&["--quick"])).unwrap().unwrap().messages, 20);
        assert!(parse(&ctx, os(&["--help"])).unwrap().is_none());
        for bad in [
            &["--senders", "0"][..],
            &["--senders", "1,x"],
            &["--senders", "300"],
            &["--messages", "0"],
            &["--nope"],
        ] {
            assert_eq!(
                parse(&ctx, os(bad)).unwrap_err().code,
                Code::Usage,
                "{bad:?}"
            );
        }
        assert!(parse_senders("1,2,3,4,5,6,7,8,9").is_err());
        assert!(parse_senders("").is_err());
    }
}
