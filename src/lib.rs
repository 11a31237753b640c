//! peerwire: authenticated, durable messaging and resource coordination between AI
//! coding-agent sessions on one machine. See ARCHITECTURE.md for the map.

pub mod bench;
pub mod cli;
pub mod clock;
pub mod config;
pub mod directory;
pub mod error;
pub mod fsutil;
pub mod hardening;
pub mod identity;
pub mod mcp;
pub mod mention;
pub mod messaging;
pub mod paths;
pub mod presence;
pub mod protocol;
pub mod resource;
pub mod runtime;
pub mod sanitize;
pub mod store;
pub mod tools;
pub mod transport;
