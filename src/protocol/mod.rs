//! The peer wire protocol without any I/O: newline-delimited frame decoding with bounds checked
//! before parsing, JSON-RPC 2.0 message shapes, the mutual Ed25519 handshake and the rules for
//! which methods each channel may call; the typed params and answers of the messaging methods
//! (`message`), every peer request and answer as one typed value (`peer`) and the trusted
//! local methods (`local`). `transport` drives these over
//! sockets; `peer-protocol(7)` is the byte-exact specification.
#![forbid(unsafe_code)]

pub mod access;
pub mod frame;
pub mod handshake;
pub mod local;
pub mod message;
pub mod peer;
pub mod rpc;

#[cfg(test)]
mod manpage_tests;
#[cfg(test)]
pub(crate) mod strategies;
#[cfg(test)]
mod wire_tests;

/// The application protocol version carried in `params.version` (not JSON-RPC's "2.0").
pub const PROTOCOL_VERSION: u64 = 1;

/// The protocol name carried in `peer.hello` and in the handshake transcript.
pub const PROTOCOL_NAME: &str = "peerwire";
