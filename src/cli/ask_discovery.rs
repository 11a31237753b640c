//! `peer ask peers|card|recommend`: the discovery side of the ask CLI. Not available yet.

use super::Ctx;
use crate::error::{Code, Error, Result};
use std::ffi::OsString;

/// Runs `peer ask SUB ARGS…` for `peers`, `card` and `recommend`.
pub fn run(_ctx: &Ctx, sub: &str, _args: Vec<OsString>) -> Result<i32> {
    Err(Error::new(
        Code::MethodNotFound,
        format!("peer ask {sub} is not available yet"),
    ))
}
