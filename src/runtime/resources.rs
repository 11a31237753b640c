//! `coordinate_resource` for the root's callers: maps the tool's arguments onto the resource
//! coordinator with the caller as principal and this root's process as holder evidence.

use super::core::{Caller, Core};
use crate::error::{Code, Error, Result};
use crate::tools::ResourceArgs;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

pub fn coordinate(
    core: &Arc<Core>,
    caller: &Caller,
    args: ResourceArgs,
    cancel: &AtomicBool,
) -> Result<Value> {
    let _ = (core, caller, args, cancel);
    Err(Error::new(
        Code::UnsupportedPlatform,
        "resource coordination is being wired",
    ))
}
