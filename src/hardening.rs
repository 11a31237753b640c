//! Process hardening for roots that hold secrets (the per-root control secret, run secrets,
//! the Ed25519 signing key): no core dumps and no same-uid ptrace or `/proc/PID/mem` reads,
//! through `PR_SET_DUMPABLE 0`. Secrets themselves are wiped on drop (`zeroize`) where they
//! live (`runtime::runs`, `transport::endpoint`, `identity::KeyPair` via ed25519-dalek).

use crate::error::{Code, Error, Result};

/// Marks this process non-dumpable: a crash or `kill -ABRT` writes no core holding secrets,
/// and other processes of the same uid can no longer ptrace it or read its memory.
pub fn no_core_dumps() -> Result<()> {
    nix::sys::prctl::set_dumpable(false).map_err(|e| {
        Error::new(
            Code::Io,
            format!("cannot mark the process non-dumpable (prctl PR_SET_DUMPABLE): {e}"),
        )
    })
}

/// Whether this process may currently dump core (PR_GET_DUMPABLE).
pub fn is_dumpable() -> bool {
    nix::sys::prctl::get_dumpable().unwrap_or(true)
}
