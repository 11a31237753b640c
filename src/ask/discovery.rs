//! Discovery between friends' ask servers (dsh-ask-peer's adverts, cards and recommendations):
//! `server` answers the endpoints, `client` calls friends, `views` is what front ends show,
//! `friends` adds a card to `ask.peers`, `model_tools` runs the ask tools for a model. Here:
//! the discovery state of a running server and the owner's decision on a recommendation.

pub mod client;
pub mod friends;
pub mod model_tools;
pub mod server;
pub mod views;

use crate::ask::advertise::{Advert, Roster};
use crate::ask::card;
use crate::ask::config::AskConfig;
use crate::ask::recommend::pending;
use crate::clock;
use crate::config::internal::{CARD_FETCH_MS, RECOMMEND_FORWARD_MS_PER_HOP};
use crate::error::{Code, Error, Result};
use parking_lot::Mutex;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The `purpose` a signed `/recommend` body carries.
pub const RECOMMEND_PURPOSE: &str = "recommend";

/// Discovery state of one running server.
#[derive(Default)]
pub struct State {
    roster: OnceLock<Arc<Roster>>,
    advert: Mutex<Option<(u64, Advert)>>,
}

impl State {
    /// The roster (empty until the server started).
    pub fn roster(&self) -> Option<Arc<Roster>> {
        self.roster.get().cloned()
    }
}

/// The directory of the owner's discovery state (`recommendations.json`, `roster.json`).
pub fn state_dir(home: &Path) -> PathBuf {
    home.join("ask")
}

/// The time one node spends on a request that may still travel `hops`: a parent waits as long
/// for a forwarded request (see `forward`), so every fetch below is clipped to what is left
/// and a request tree never outlives its root's wait.
pub fn node_budget_ms(hops: u64) -> u64 {
    RECOMMEND_FORWARD_MS_PER_HOP * (hops + 1) + CARD_FETCH_MS
}

/// What a decision did: `{recId, decision}`, and for an added friend the config change and
/// `peer: {name, host, port}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decided {
    pub rec_id: String,
    pub decision: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<AddedPeer>,
}

/// The friend a decision added.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AddedPeer {
    pub name: String,
    pub host: String,
    pub port: u16,
}

/// Carries out the owner's decision on a waiting recommendation (`token` on the HTTP path).
/// `add` re-verifies the card and adds it to `ask.peers` (never replacing a friend of the
/// same name with another key unless `replace`).
pub fn decide(
    home: &Path,
    rec_id: &str,
    token: Option<&str>,
    decision: pending::Decision,
    mode: &str,
    replace: bool,
) -> Result<Decided> {
    let store = pending::Store::new(&state_dir(home));
    let now = clock::now_ms();
    store.decide(rec_id, token, now, |p| match decision {
        pending::Decision::Decline => Ok(Decided {
            rec_id: p.rec_id.clone(),
            decision: "declined",
            result: None,
            peer: None,
        }),
        pending::Decision::Add => {
            let c = card::verify(&p.card, now).map_err(|e| {
                Error::new(
                    Code::AuthFailed,
                    format!("the recommended card no longer verifies: {e}"),
                )
            })?;
            let merged = friends::add_to_config(home, &c, mode, replace, |bytes| {
                AskConfig::parse(bytes).map(|_| ())
            })?;
            Ok(Decided {
                rec_id: p.rec_id.clone(),
                decision: "added",
                result: Some(merged.name()),
                peer: Some(AddedPeer {
                    name: c.name,
                    host: c.host,
                    port: c.port,
                }),
            })
        }
    })
}
