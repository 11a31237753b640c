//! Resolution: names to exact incarnations (our own runs, the directory through the presence
//! cache, peerIds we exchanged mail with) and what the recipient of a `peer.send` learns about
//! its sender from presence (sessionId, scope, alias).

use super::core::{Core, Reach};
use crate::directory;
use crate::error::{Code, Error, Result};
use crate::messaging::{Principal, TargetRef};
use crate::presence::Advertisement;

impl Core {
    /// Resolves `to` to an exact incarnation: one of our own runs (or ourselves), or a live
    /// peer in the caller's scope.
    pub fn resolve_target(&self, to: &str) -> Result<TargetRef> {
        let name = to.strip_prefix('@').unwrap_or(to);
        if let Some(own) = self.own_run_target(name) {
            return own;
        }
        // Read before resolving: a change after this makes the cached entry invalid. A read
        // reused for a moment (`NAME_RECHECK_MS` says why a restart is still noticed).
        let mtime = self.presence.recent_directory_mtime();
        // Liveness still comes from evidence: a process provably gone is not reused.
        if let Some(t) = self.presence.cached_name(name, mtime)
            && matches!(self.presence.reach_of(&t.instance_id), Reach::Live(_))
        {
            return Ok(t);
        }
        let viewer = self.viewer(None)?;
        match directory::resolve_cached(
            self.site.ns(),
            self.limits(),
            &viewer,
            name,
            self.presence.files(),
        ) {
            Ok(t) => {
                let t = TargetRef {
                    peer_id: t.peer_id,
                    instance_id: t.instance_id,
                    run_id: t.run_id,
                };
                self.presence.remember_name(name, mtime, &t);
                Ok(t)
            }
            Err(e)
                if matches!(e.code, Code::PeerOffline | Code::TargetEnded)
                    && crate::mention::is_peer_id(name) =>
            {
                self.known_incarnation_or_ended(name, e)
            }
            Err(e) => Err(e),
        }
    }

    /// One of our own runs named `name` (or its alias), or `TARGET_ENDED` for a retired run;
    /// `None` when `name` is not one of ours.
    fn own_run_target(&self, name: &str) -> Option<Result<TargetRef>> {
        let runs = self.runs.lock();
        let mine = runs.by_peer_or_alias(name);
        if mine.len() == 1 {
            return Some(Ok(TargetRef {
                peer_id: mine[0].peer_id.clone(),
                instance_id: self.me.instance_id().to_string(),
                run_id: Some(mine[0].run_id.clone()),
            }));
        }
        if runs.is_retired_peer(name) {
            return Some(Err(Error::new(
                Code::TargetEnded,
                format!("run {name} has been retired"),
            )));
        }
        None
    }

    /// A peerId we have exchanged mail with names an exact incarnation even when the
    /// directory no longer lists it: its owning root answers for retired runs, and a vanished
    /// owner means the incarnation ended. Unknown peerIds keep the directory's error `e`.
    fn known_incarnation_or_ended(&self, name: &str, e: Error) -> Result<TargetRef> {
        match self.known_incarnation(name) {
            Some(t) if !matches!(self.presence.reach_of(&t.instance_id), Reach::Gone(_)) => Ok(t),
            Some(_) => Err(Error::new(
                Code::TargetEnded,
                format!("{name} has ended; refresh discovery and pick the current incarnation"),
            )),
            None => Err(e),
        }
    }

    /// The exact incarnation behind a peerId we sent to or received from before.
    fn known_incarnation(&self, peer_id: &str) -> Option<TargetRef> {
        let p = peer_id.to_string();
        self.store
            .query(move |m| {
                let sent = m.state().sent_target(&p);
                sent.or_else(|| {
                    m.state()
                        .inbox()
                        .find(|e| e.from.peer_id == p)
                        .map(|e| TargetRef {
                            peer_id: e.from.peer_id.clone(),
                            instance_id: e.from.instance_id.clone(),
                            run_id: e.from.run_id.clone(),
                        })
                })
            })
            .ok()
            .flatten()
    }

    /// What taking custody of a `peer.send` needs to know about its sender, from one presence
    /// lookup: the sessionId its record states ([`session_of`](Self::session_of)), the scope
    /// check ([`check_sender_scope`](Self::check_sender_scope)) and its alias
    /// ([`alias_of`](Self::alias_of)).
    pub fn sender_facts(&self, who: &Principal) -> Result<(Option<String>, Option<String>)> {
        if self.me.is(&who.instance_id) {
            return Ok((Some(self.me.session_id().to_string()), self.alias_of(who)));
        }
        let (reach, session) = self.presence.reach_and_session(&who.instance_id);
        let ad = match reach {
            super::presence_cache::Reach::Live(ad) => Some(ad),
            _ => None,
        };
        self.scope_admits(who, ad.as_deref())?;
        Ok((
            session,
            ad.and_then(|ad| advertised_alias(&ad, who.run_id.as_deref())),
        ))
    }

    /// The scope check against the sender's live advertisement `ad` (none: refused).
    fn scope_admits(&self, who: &Principal, ad: Option<&Advertisement>) -> Result<()> {
        let viewer = self.viewer(None)?;
        let Some(ad) = ad else {
            return Err(Error::new(
                Code::ScopeDenied,
                format!(
                    "sender {} has no live advertisement to check its scope against",
                    who.peer_id
                ),
            ));
        };
        let repo = ad.repository.as_deref().map(std::path::Path::new);
        if viewer.sees_place(std::path::Path::new(&ad.workspace), repo) {
            return Ok(());
        }
        Err(Error::new(
            Code::ScopeDenied,
            format!(
                "sender {} (workspace {}) is outside the recipient's {} scope; the recipient must set a wider \"scope\" in sessions.communication of its config.json",
                who.peer_id,
                crate::sanitize::line(&ad.workspace, 200),
                viewer.scope.name()
            ),
        ))
    }

    /// The alias a sender states for itself in its advertisement (its run's alias for a child
    /// run); our own roots and runs from our own state. `None` when it advertises none.
    pub fn alias_of(&self, who: &Principal) -> Option<String> {
        if self.me.is(&who.instance_id) {
            return match &who.run_id {
                None => Some(self.me.alias().to_string()),
                Some(run) => self
                    .runs
                    .lock()
                    .live()
                    .find(|r| &r.run_id == run)
                    .map(|r| r.alias.clone()),
            };
        }
        let ad = self.presence.advertisement_of(&who.instance_id)?;
        advertised_alias(&ad, who.run_id.as_deref())
    }
}

/// The alias a root's advertisement states for its root (`run_id` none) or one of its runs.
pub fn advertised_alias(ad: &Advertisement, run_id: Option<&str>) -> Option<String> {
    match run_id {
        None => Some(ad.alias.clone()),
        Some(run) => ad
            .runs
            .iter()
            .find(|r| r.run_id == run)
            .map(|r| r.alias.clone()),
    }
}
