//! peerwire: authenticated, durable messaging and resource coordination between AI
//! coding-agent sessions on one machine. See ARCHITECTURE.md for the map.

pub mod cli;
pub mod clock;
pub mod config;
pub mod error;
pub mod fsutil;
pub mod identity;
pub mod resource;
pub mod sanitize;
