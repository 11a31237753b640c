//! Scoped discovery over presence: canonical workspace identity, the viewer's scope, bounded
//! pages of safe descriptors with a continuation cursor, and alias → exact target resolution.

use crate::config::{Limits, Scope};
use crate::error::{Code, Error, Result};
use crate::paths::Namespace;
use crate::presence::{self, Advertisement, Entry, Liveness};
use crate::toolspec::answer::PeerView;
use crate::{clock, identity, sanitize};
use std::path::{Path, PathBuf};

/// Where a session works, canonically: realpath, and the enclosing git work tree if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkspaceId {
    pub workspace: PathBuf,
    pub repository: Option<PathBuf>,
}

/// Resolves symlinks; inside a git work tree the workspace is the work tree's root (the
/// nearest ancestor holding `.git`), so sessions in `repo/a` and `repo/b` share it. The
/// repository is the main work tree of the repository it belongs to: the same root, or for a
/// linked work tree (`git worktree add`, `.git` a file) the root its common git directory
/// belongs to, so the `repository` scope joins the work trees of one repository.
pub fn canonical_workspace(dir: &Path) -> Result<WorkspaceId> {
    let real =
        std::fs::canonicalize(dir).map_err(|e| Error::io("cannot resolve workspace", dir, &e))?;
    let root = real
        .ancestors()
        .take(crate::config::internal::REPOSITORY_DEPTH_MAX)
        .find(|a| a.join(".git").exists())
        .map(Path::to_path_buf);
    let Some(root) = root else {
        return Ok(WorkspaceId {
            workspace: real,
            repository: None,
        });
    };
    let repository = main_work_tree(&root).unwrap_or_else(|| root.clone());
    Ok(WorkspaceId {
        workspace: root,
        repository: Some(repository),
    })
}

/// For a linked work tree (`.git` is a file `gitdir: <repo>/.git/worktrees/<name>`), the main
/// work tree: the parent of the common git directory named by `<gitdir>/commondir`. `None`
/// for an ordinary repository or anything unreadable (each file read is bounded).
fn main_work_tree(root: &Path) -> Option<PathBuf> {
    let dot_git = root.join(".git");
    if !std::fs::symlink_metadata(&dot_git).ok()?.is_file() {
        return None;
    }
    let read = |p: &Path| -> Option<String> {
        use std::io::Read;
        let mut s = String::new();
        std::fs::File::open(p)
            .ok()?
            .take(crate::config::internal::GIT_POINTER_BYTES_MAX)
            .read_to_string(&mut s)
            .ok()?;
        Some(s.trim().to_string())
    };
    let gitdir = read(&dot_git)?;
    let gitdir = root.join(gitdir.strip_prefix("gitdir:")?.trim());
    let common = gitdir.join(read(&gitdir.join("commondir"))?);
    let common = std::fs::canonicalize(common).ok()?;
    common.parent().map(Path::to_path_buf)
}

/// Who is looking, and how far they may see.
#[derive(Clone, Debug)]
pub struct Viewer {
    pub ws: WorkspaceId,
    pub scope: Scope,
    pub self_instance: Option<String>,
}

impl Viewer {
    /// Whether an entry falls inside the viewer's scope.
    pub fn sees(&self, e: &Entry) -> bool {
        let (their_ws, their_repo) = match &e.advert {
            Some(ad) => (
                PathBuf::from(&ad.workspace),
                ad.repository.as_ref().map(PathBuf::from),
            ),
            None => {
                // Autohand compares path.resolve strings; we also resolve links when we can.
                let raw = PathBuf::from(&e.workspace_root);
                match canonical_workspace(&raw) {
                    Ok(id) => (id.workspace, id.repository),
                    Err(_) => (raw, None),
                }
            }
        };
        self.sees_place(&their_ws, their_repo.as_deref())
    }

    /// Whether a party that advertises this canonical workspace and repository is in scope
    /// (also the recipient's check of a `peer.send`, from the sender's advertisement).
    pub fn sees_place(&self, their_ws: &Path, their_repo: Option<&Path>) -> bool {
        match self.scope {
            Scope::Machine => true,
            Scope::Workspace => their_ws == self.ws.workspace,
            Scope::Repository => match (&self.ws.repository, their_repo) {
                (Some(a), Some(b)) => a == b,
                _ => their_ws == self.ws.workspace,
            },
        }
    }
}

/// A resolved, exact messaging target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub peer_id: String,
    pub instance_id: String,
    pub run_id: Option<String>,
    pub alias: String,
    pub endpoint: String,
    pub public_key: [u8; 32],
}

/// One listed peer and the key the listing is sorted and paged by.
#[derive(Clone, Debug)]
pub struct Descriptor {
    pub key: String,
    pub value: PeerView,
}

/// A page of descriptors and the cursor for the next one.
#[derive(Clone, Debug)]
pub struct Page {
    pub peers: Vec<PeerView>,
    pub cursor: Option<String>,
}

/// Options of a listing.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    pub query: Option<String>,
    pub cursor: Option<String>,
    /// Include stale, invalid and out-of-scope records with their reasons.
    pub all: bool,
    pub page_size: Option<u64>,
}

fn descriptors(entry: &Entry, viewer: &Viewer, now_ms: u64) -> Vec<Descriptor> {
    let age_ms = entry.updated_at_ms.map(|u| now_ms.saturating_sub(u));
    let (state, reason) = match &entry.liveness {
        // Listed by --all although live: say why it is not in the viewer's list.
        Liveness::Live if !viewer.sees(entry) => (
            "live",
            Some(format!("outside your {} scope", viewer.scope.name())),
        ),
        Liveness::Live => ("live", None),
        Liveness::Stale(r) => ("stale", Some(r.clone())),
        Liveness::Invalid(r) => ("invalid", Some(r.clone())),
    };
    let common = |peer_id: Option<&str>, alias: Option<&str>, run_of: Option<&str>| PeerView {
        peer_id: peer_id.map(str::to_string),
        alias: alias.map(|a| sanitize::line(a, 60)),
        run_of: run_of.map(str::to_string),
        session_id: sanitize::line(&entry.session_id, 80),
        project: sanitize::line(&entry.project_name, 80),
        workspace: sanitize::line(&entry.workspace_root, 300),
        pid: entry.pid,
        mode: sanitize::line(&entry.mode, 20),
        status: if entry.status == "working" {
            "working"
        } else {
            "idle"
        },
        age_ms,
        state,
        reason: reason.as_deref().map(|r| sanitize::line(r, 200)),
        messaging: entry.advert.as_ref().is_some_and(|a| a.degraded.is_none()) && entry.is_live(),
        messaging_error: entry
            .advert_error
            .as_deref()
            .or(entry.advert.as_ref().and_then(|a| a.degraded.as_deref()))
            .map(|r| sanitize::line(r, 400)),
        is_self: entry
            .advert
            .as_ref()
            .is_some_and(|a| Some(&a.instance_id) == viewer.self_instance.as_ref()),
        in_scope: viewer.sees(entry),
        capabilities: None,
        scope: None,
    };
    match &entry.advert {
        Some(ad) => {
            let mut out = vec![Descriptor {
                key: ad.peer_id.clone(),
                value: PeerView {
                    capabilities: Some(ad.capabilities.clone()),
                    scope: Some(ad.scope.clone()),
                    ..common(Some(&ad.peer_id), Some(&ad.alias), None)
                },
            }];
            for run in &ad.runs {
                out.push(Descriptor {
                    key: run.peer_id.clone(),
                    value: common(Some(&run.peer_id), Some(&run.alias), Some(&ad.peer_id)),
                });
            }
            out
        }
        None => vec![Descriptor {
            key: format!("legacy:{}", entry.file),
            value: common(None, None, None),
        }],
    }
}

/// Lists peers visible to `viewer`, sorted by key, one bounded page after `cursor`.
pub fn list(ns: &Namespace, limits: &Limits, viewer: &Viewer, opts: &ListOptions) -> Result<Page> {
    list_cached(ns, limits, viewer, opts, &presence::ReadCache::default())
}

/// [`list`] with a presence cache kept by a long-lived root.
pub fn list_cached(
    ns: &Namespace,
    limits: &Limits,
    viewer: &Viewer,
    opts: &ListOptions,
    cache: &presence::ReadCache,
) -> Result<Page> {
    let now = clock::now_ms();
    let entries = presence::read_all_cached(&ns.active_agents(), limits, now, cache)?;
    let after = match &opts.cursor {
        Some(c) => Some(decode_cursor(c)?),
        None => None,
    };
    let mut all: Vec<Descriptor> = entries
        .iter()
        .filter(|e| opts.all || (e.is_live() && viewer.sees(e)))
        .flat_map(|e| descriptors(e, viewer, now))
        .filter(|d| {
            opts.query
                .as_deref()
                .is_none_or(|q| d.value.matches(&q.to_lowercase()))
        })
        .filter(|d| after.as_deref().is_none_or(|a| d.key.as_str() > a))
        .collect();
    all.sort_by(|a, b| a.key.cmp(&b.key));
    let page = opts
        .page_size
        .unwrap_or(limits.directory_page_size)
        .min(limits.directory_page_size)
        .max(1) as usize;
    let cursor = if all.len() > page {
        all.get(page - 1).map(|d| identity::b64(d.key.as_bytes()))
    } else {
        None
    };
    all.truncate(page);
    Ok(Page {
        peers: all.into_iter().map(|d| d.value).collect(),
        cursor,
    })
}

fn decode_cursor(c: &str) -> Result<String> {
    identity::unb64(c)
        .and_then(|b| String::from_utf8(b).ok())
        .filter(|s| s.len() <= crate::config::internal::CURSOR_KEY_BYTES_MAX)
        .ok_or_else(|| Error::new(Code::Usage, "cursor is not one this directory issued"))
}

fn target_of(ad: &Advertisement, run: Option<&presence::RunAd>) -> Result<Target> {
    let public_key = identity::parse_spki_b64(&ad.public_key)
        .ok_or_else(|| Error::new(Code::AuthFailed, "advertised public key is malformed"))?;
    Ok(Target {
        peer_id: run.map_or(ad.peer_id.clone(), |r| r.peer_id.clone()),
        instance_id: ad.instance_id.clone(),
        run_id: run.map(|r| r.run_id.clone()),
        alias: run.map_or(ad.alias.clone(), |r| r.alias.clone()),
        endpoint: ad.endpoint.clone(),
        public_key,
    })
}

/// True when [`candidates`] of `e` for `name` is not empty.
fn answers_to(e: &Entry, name: &str) -> bool {
    e.advert.as_ref().is_some_and(|ad| {
        ad.peer_id == name
            || ad.alias == name
            || ad.runs.iter().any(|r| r.peer_id == name || r.alias == name)
    })
}

/// Every (advertisement, run) pair of an entry that answers to `name` as alias or peerId.
fn candidates<'a>(
    e: &'a Entry,
    name: &str,
) -> Vec<(&'a Advertisement, Option<&'a presence::RunAd>)> {
    let Some(ad) = &e.advert else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if ad.peer_id == name || ad.alias == name {
        out.push((ad, None));
    }
    for run in &ad.runs {
        if run.peer_id == name || run.alias == name {
            out.push((ad, Some(run)));
        }
    }
    out
}

/// `SCOPE_DENIED` for a target only peers outside the viewer's scope answer to, with the fix.
fn out_of_scope_error(viewer: &Viewer, shown: &str) -> Error {
    Error::new(
        Code::ScopeDenied,
        format!(
            "{shown} is outside your {} scope ({}); to reach it, set \"scope\": \"{}\" in sessions.communication of the namespace's config.json on both sides and restart, or run both sessions in one workspace (a git work tree counts as one)",
            viewer.scope.name(),
            crate::sanitize::line(&viewer.ws.workspace.to_string_lossy(), 200),
            if viewer.scope == Scope::Workspace {
                "repository\" or \"machine"
            } else {
                "machine"
            }
        ),
    )
}

/// Resolves `@alias`, `alias` or an exact peerId to one live target in scope, reading
/// presence through the long-lived root's `cache`.
/// None → `PEER_OFFLINE` (or `TARGET_ENDED` for a peerId whose record is stale, `SCOPE_DENIED`
/// when only out-of-scope peers match); several → `AMBIGUOUS_TARGET`.
pub fn resolve_cached(
    ns: &Namespace,
    limits: &Limits,
    viewer: &Viewer,
    target: &str,
    cache: &presence::ReadCache,
) -> Result<Target> {
    let name = target.strip_prefix('@').unwrap_or(target);
    if name.is_empty() || name.len() > crate::config::internal::TARGET_NAME_CHARS_MAX {
        return Err(Error::new(
            Code::Usage,
            "target must be an alias or a peerId",
        ));
    }
    // Only entries that answer to `name` matter below.
    let entries =
        presence::read_matching_cached(&ns.active_agents(), limits, clock::now_ms(), cache, |e| {
            answers_to(e, name)
        })?;
    let shown = sanitize::line(name, 60);
    let mut live = Vec::new();
    let (mut stale, mut out_of_scope) = (false, false);
    for e in &entries {
        for c in candidates(e, name) {
            if !e.is_live() {
                stale = true;
            } else if !viewer.sees(e) {
                out_of_scope = true;
            } else {
                live.push(c);
            }
        }
    }
    match live.len() {
        1 => target_of(live[0].0, live[0].1),
        0 if out_of_scope => Err(out_of_scope_error(viewer, &shown)),
        0 if stale && name.starts_with("p-") => Err(Error::new(
            Code::TargetEnded,
            format!("{shown} has ended; refresh discovery and pick the current incarnation"),
        )),
        0 => Err(Error::new(
            Code::PeerOffline,
            format!("no live peer {shown} in {} scope", viewer.scope.name()),
        )),
        n => {
            let ids: Vec<String> = live
                .iter()
                .map(|(a, r)| r.map_or(a.peer_id.clone(), |r| r.peer_id.clone()))
                .collect();
            Err(Error::new(
                Code::AmbiguousTarget,
                format!(
                    "{shown} matches {n} live peers ({}); use a peerId",
                    ids.join(", ")
                ),
            ))
        }
    }
}
