//! The trusted local control channel's credentials: a per-root secret in a 0600 file next to
//! the socket, handed to children through `PEER_CONTROL` (the file's path), so that the secret
//! never appears in a command line or an environment dump. A child run gets a file of its own
//! (`<instanceId>.<runId>.ctl`) with the run's secret: a command holding it can act only as
//! that run, with the run's capabilities, whatever variables it changes.

use crate::error::{Code, Error, Result};
use crate::{fsutil, identity};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Environment variable naming the control file of the enclosing session.
pub const ENV_CONTROL: &str = "PEER_CONTROL";
/// Environment variable naming the child run a command acts as.
pub const ENV_RUN: &str = "PEER_RUN_ID";

/// What a trusted adapter needs to reach its root.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ControlFile {
    pub version: u64,
    pub endpoint: PathBuf,
    pub secret: String,
    pub instance_id: String,
    pub peer_id: String,
    pub home: PathBuf,
    /// Set in a child run's file: the run its secret speaks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// The secret's text is wiped when a control file value is dropped.
impl Drop for ControlFile {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.secret);
    }
}

impl ControlFile {
    pub fn secret_bytes(&self) -> Result<[u8; 32]> {
        identity::unb64(&self.secret)
            .and_then(|b| <[u8; 32]>::try_from(b.as_slice()).ok())
            .ok_or_else(|| Error::new(Code::AuthFailed, "the control file's secret is malformed"))
    }
}

/// A fresh 32-byte secret.
pub fn new_secret() -> [u8; 32] {
    let mut s = [0u8; 32];
    identity::random_bytes(&mut s);
    s
}

/// Where the control file of `instance_id` (or of its run `run_id`) lives in `dir`.
pub fn path_in(dir: &Path, instance_id: &str, run_id: Option<&str>) -> PathBuf {
    match run_id {
        Some(r) => dir.join(format!("{instance_id}.{r}.ctl")),
        None => dir.join(format!("{instance_id}.ctl")),
    }
}

/// Writes the control file (0600, new) and returns its path.
pub fn write(dir: &Path, cf: &ControlFile) -> Result<PathBuf> {
    let path = path_in(dir, &cf.instance_id, cf.run_id.as_deref());
    let bytes = serde_json::to_vec(cf).map_err(|e| Error::new(Code::Io, e.to_string()))?;
    fsutil::atomic_write(&path, &bytes, fsutil::Durability::Visible)?;
    Ok(path)
}

/// Reads and checks a control file (private, bounded, well-formed).
pub fn read(path: &Path) -> Result<ControlFile> {
    let bytes =
        fsutil::read_private_bounded(path, crate::config::internal::CONTROL_FILE_BYTES_MAX)?;
    let cf: ControlFile = serde_json::from_slice(&bytes).map_err(|_| {
        Error::new(
            Code::RecoveryRequired,
            format!("{} is not a peerwire control file", path.display()),
        )
    })?;
    if cf.version != 1
        || !identity::is_valid_id(&cf.instance_id)
        || cf
            .run_id
            .as_deref()
            .is_some_and(|r| !identity::is_valid_id(r))
    {
        return Err(Error::new(
            Code::RecoveryRequired,
            format!("{} has an unknown version", path.display()),
        ));
    }
    Ok(cf)
}

/// The enclosing session's control file, when this process runs inside one.
pub fn from_env() -> Result<Option<ControlFile>> {
    match std::env::var_os(ENV_CONTROL).filter(|v| !v.is_empty()) {
        Some(p) => read(Path::new(&p)).map(Some).map_err(|e| {
            Error::new(
                if e.code == Code::NotFound { Code::TargetEnded } else { e.code },
                format!("the enclosing peer session is gone or unreadable ({}); restart it or unset {ENV_CONTROL}", e.message),
            )
        }),
        None => Ok(None),
    }
}

/// Removes our control file if it still names our instance.
pub fn remove(path: &Path, instance_id: &str) {
    if read(path).is_ok_and(|cf| cf.instance_id == instance_id) {
        let _ = std::fs::remove_file(path);
    }
}
