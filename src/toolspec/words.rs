//! Reading back the fixed words an answer writes as `&'static str` (a state, a status, an
//! error code's name): each field takes only the words its writer can write, so a decoded
//! answer is the typed value the root built and nothing is allocated or leaked for it.

use crate::error::Code;
use crate::protocol::message::ReceiptState;
use serde::Deserialize;
use serde::de::value::StrDeserializer;
use serde::de::{Deserializer, Error as _, IntoDeserializer};

/// A fixed word. Spelt as an alias because serde takes a field written `&'static str` as
/// borrowed from its input, and an answer must decode from any input.
pub type Word = &'static str;

/// The word of `table` that `d` holds.
pub fn one_of<'de, D: Deserializer<'de>>(
    d: D,
    table: &[&'static str],
) -> Result<&'static str, D::Error> {
    let word = String::deserialize(d)?;
    table
        .iter()
        .copied()
        .find(|w| *w == word)
        .ok_or_else(|| D::Error::custom(format!("unknown word {word:?}")))
}

/// An error code's name (`QUEUE_FULL`).
pub fn code<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    let name = String::deserialize(d)?;
    Code::from_name(&name)
        .map(Code::name)
        .ok_or_else(|| D::Error::custom(format!("unknown error code {name:?}")))
}

/// A receipt state's name (`accepted` … `expired`).
pub fn receipt_state<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    ReceiptState::deserialize(d).map(ReceiptState::name)
}

/// A sent message's state: a receipt state, or `unresolved` before any custody answer.
pub fn sent_state<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    let word = String::deserialize(d)?;
    if word == "unresolved" {
        return Ok("unresolved");
    }
    let de: StrDeserializer<'_, D::Error> = word.as_str().into_deserializer();
    ReceiptState::deserialize(de).map(ReceiptState::name)
}

/// A listed peer's activity.
pub fn peer_status<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    one_of(d, &["working", "idle"])
}

/// A listed peer's liveness.
pub fn peer_state<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    one_of(d, &["live", "stale", "invalid"])
}
