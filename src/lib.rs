//! peerwire: authenticated, durable messaging and resource coordination between AI
//! coding-agent sessions on one machine. See ARCHITECTURE.md for the map.

pub mod ask;
pub(crate) mod bench;
pub mod cli;
pub mod clock;
pub mod config;
pub(crate) mod directory;
pub mod error;
pub mod fsutil;
pub mod hardening;
pub mod identity;
pub(crate) mod mcp;
pub(crate) mod mention;
pub mod messaging;
pub(crate) mod paths;
pub mod presence;
pub mod process;
pub mod protocol;
pub mod resource;
pub mod runtime;
pub(crate) mod sanitize;
pub mod store;
pub(crate) mod toolspec;
pub mod transport;

#[cfg(test)]
mod fuzz_tests;
