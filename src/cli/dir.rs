//! `peer-dir` (and `peer dir`): lists live peers in scope as a table or one JSON object per
//! peer, without starting a root or touching anyone's files.

use super::{Ctx, args};
use crate::config::{Config, Scope};
use crate::directory::{self, ListOptions, Viewer};
use crate::error::{Code, Error, Result};
use crate::paths::Namespace;
use crate::toolspec::answer::PeerView;
use std::ffi::OsString;

pub const HELP: &str =
    "usage: peer-dir [--home DIR] [--scope workspace|repository|machine] [--query TEXT]
               [--workspace DIR] [--cursor C] [--all] [--json]

Lists live peers in scope. --all adds stale, invalid and out-of-scope records with the reason.
See peer-dir(1).
";

pub fn cmd(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    let mut opts = ListOptions::default();
    let mut scope = None;
    let mut workspace = None;
    while let Some(arg) = p.next().map_err(args::usage)? {
        match arg {
            Long("scope") => {
                let s = args::string(&mut p, "--scope")?;
                scope = Some(Scope::parse(&s).ok_or_else(|| {
                    Error::new(
                        Code::Usage,
                        "--scope must be workspace, repository or machine",
                    )
                })?);
            }
            Long("query") => opts.query = Some(args::string(&mut p, "--query")?),
            Long("cursor") => opts.cursor = Some(args::string(&mut p, "--cursor")?),
            Long("workspace") => {
                workspace = Some(std::path::PathBuf::from(args::string(
                    &mut p,
                    "--workspace",
                )?))
            }
            Long("all") => opts.all = true,
            Long("help") | Short('h') => {
                super::out::text(HELP)?;
                return Ok(0);
            }
            other => return Err(args::unexpected(other)),
        }
    }
    let home = ctx.home()?;
    let config = Config::load(&home)?;
    let ns = Namespace::new(home, &config);
    let cwd = match workspace {
        Some(w) => w,
        None => std::env::current_dir()
            .map_err(|e| Error::new(Code::Io, format!("cannot read the current directory: {e}")))?,
    };
    let viewer = Viewer {
        ws: directory::canonical_workspace(&cwd)?,
        scope: scope.unwrap_or(config.scope),
        self_instance: std::env::var("PEER_INSTANCE_ID").ok(),
    };
    let page = directory::list(&ns, &config.limits, &viewer, &opts)?;
    if ctx.json {
        for peer in &page.peers {
            super::print_json(&serde_json::json!(peer))?;
        }
        if let Some(c) = &page.cursor {
            super::print_json(&serde_json::json!({"cursor": c}))?;
        }
    } else {
        super::out::text(&table(&page.peers, page.cursor.as_deref()))?;
        if page.peers.is_empty() && !opts.all {
            hint_out_of_scope(&ns, &config, &viewer, &opts)?;
        }
    }
    Ok(0)
}

/// An empty list while peers are live outside the viewer's scope says so on stderr, with the
/// two ways to see them, instead of looking like nobody is there.
fn hint_out_of_scope(
    ns: &Namespace,
    config: &Config,
    viewer: &Viewer,
    opts: &ListOptions,
) -> Result<()> {
    let all = ListOptions {
        all: true,
        cursor: None,
        ..opts.clone()
    };
    let page = directory::list(ns, &config.limits, viewer, &all)?;
    let outside = page
        .peers
        .iter()
        .filter(|p| p.state == "live" && !p.in_scope)
        .count();
    if outside > 0 {
        super::out::err_line(&format!(
            "peer-dir: no live peer in your {} scope ({}); {outside} live peer(s) elsewhere: \
             'peer-dir --all' shows them, '--scope machine' lists them",
            viewer.scope.name(),
            crate::sanitize::line(&viewer.ws.workspace.to_string_lossy(), 200)
        ));
    }
    Ok(())
}

fn cell(v: Option<&str>) -> String {
    v.unwrap_or("-").to_string()
}

fn table(peers: &[PeerView], cursor: Option<&str>) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:<28} {:<8} {:<8} {:<7} {:<9} WORKSPACE",
        "ALIAS", "PEER-ID", "PID", "AGE", "STATUS", "MESSAGING"
    );
    for p in peers {
        let age = p
            .age_ms
            .map_or("-".to_string(), |ms| format!("{:.1}s", ms as f64 / 1000.0));
        let mut alias = cell(p.alias.as_deref());
        if p.is_self {
            alias.push_str(" (you)");
        }
        let messaging = if p.messaging { "yes" } else { "no" };
        let status = if p.state != "live" { p.state } else { p.status };
        let _ = writeln!(
            out,
            "{:<20} {:<28} {:<8} {:<8} {:<7} {:<9} {}",
            alias,
            cell(p.peer_id.as_deref()),
            p.pid,
            age,
            status,
            messaging,
            p.workspace
        );
        if let Some(reason) = &p.reason {
            let _ = writeln!(out, "    {}: {}", p.state, reason);
        }
        if let Some(why) = &p.messaging_error {
            println!("    messaging: {why}");
        }
    }
    if let Some(c) = cursor {
        let _ = writeln!(out, "more: peer-dir --cursor {c}");
    }
    out
}
