//! The cross-machine ask: a small HTTP/1.1 JSON protocol, wire compatible with dsh-ask-peer,
//! through which one machine's agent asks a trusted friend's agent a question about the
//! friend's workspace. Every machine is both a client and a server; friends are configured
//! addresses. See peer-ask(1) and the "HTTP ask protocol" section of peer-protocol(7).
//!
//! Layout (one job per module):
//! - `canon` — canonical JSON, the `ed25519:` key form, fingerprints, signatures (pure).
//! - `keys` — this agent's Ed25519 key pair in `keyDir`.
//! - `config` — the `"ask"` object of `<home>/config.json`, strictly validated.
//! - `http` — bounded HTTP/1.1 request reading and response writing (heads via `httparse`).
//! - `client` — a small blocking HTTP client with deadlines and bounded responses.
//! - `server` — listener, bounded connection threads, `Request`/`Response`, routing.
//! - `auth` — allowlist, tokens, signatures with timestamp, nonce and replay set; rate limits.
//! - `approval` — per-friend modes and the owner's pending decisions.
//! - `jobs` — async asks and their lifecycle.
//! - `answer`, `sandbox` — one fresh, sandboxed answerer process per approved ask.
//! - `api` — what front ends call: `ask`, `status`.
//! - `card`, `advertise`, `recommend`, `discovery` — friend cards, adverts, recommendations.

pub mod advertise;
pub mod answer;
pub mod api;
pub mod approval;
pub mod auth;
pub mod canon;
pub mod card;
pub mod client;
pub mod config;
pub mod discovery;
pub mod http;
pub mod jobs;
pub mod keys;
pub mod recommend;
pub mod sandbox;
pub mod server;

/// The only protocol version dsh-ask-peer speaks; required exactly on `/ask` and `/recommend`.
pub const PROTOCOL_VERSION: u64 = 1;

/// The environment marker every answerer process gets. `peer ask` refuses to run under it,
/// so an answer cannot trigger another ask. It is a courtesy check; the enforcement is that the
/// answerer's sandbox cannot read the namespace that holds the ask configuration and keys.
pub const ANSWERER_ENV: &str = "PEER_ASK_ANSWERER";
