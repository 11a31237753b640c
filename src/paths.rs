//! The namespace layout: where presence, endpoints, message stores and resources live, and the
//! choice of a short private runtime directory when a socket path would exceed `sun_path`.

use crate::config::Config;
use crate::error::{Code, Error, Result};
use crate::fsutil;
use std::path::{Path, PathBuf};

pub use crate::config::internal::SOCKET_PATH_BYTES_MAX;

/// `PATH` with the running binary's directory first, so `peer` inside a session (a `peer host`
/// command, an `autoCommand`) is this very peer, the one that started the root and knows its
/// control file format, even when it is not installed. `None` when the binary's path is
/// unknown.
pub fn path_with_own_dir() -> Option<std::ffi::OsString> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?.to_path_buf();
    let mut paths = vec![dir.clone()];
    if let Some(p) = std::env::var_os("PATH") {
        paths.extend(std::env::split_paths(&p).filter(|d| *d != dir));
    }
    std::env::join_paths(paths).ok()
}

/// `<home>/peer-messages/<instanceId>`: one incarnation's message store.
pub fn messages_dir(home: &Path, instance_id: &str) -> PathBuf {
    home.join("peer-messages").join(instance_id)
}

/// `<coord>/peer-resources`: the resource files and the launch ledger.
pub fn resources_dir(coord: &Path) -> PathBuf {
    coord.join("peer-resources")
}

/// The two roots of a namespace: `home` holds config and private inboxes; `coord` (the
/// configured coordination directory, else `home`) holds what sessions share.
#[derive(Clone, Debug)]
pub struct Namespace {
    pub home: PathBuf,
    pub coord: PathBuf,
}

impl Namespace {
    pub fn new(home: PathBuf, config: &Config) -> Namespace {
        let coord = config
            .coordination_directory
            .clone()
            .unwrap_or_else(|| home.clone());
        Namespace { home, coord }
    }

    pub fn active_agents(&self) -> PathBuf {
        self.coord.join("active-agents")
    }
    pub fn runtime_dir(&self) -> PathBuf {
        self.coord.join("peer-runtime")
    }
    pub fn messages_dir(&self, instance_id: &str) -> PathBuf {
        messages_dir(&self.home, instance_id)
    }
    pub fn resources_dir(&self) -> PathBuf {
        resources_dir(&self.coord)
    }

    /// Checks (and creates when missing) the namespace roots and the shared directories.
    pub fn prepare(&self) -> Result<()> {
        fsutil::ensure_private_dir(&self.home)?;
        fsutil::ensure_private_dir(&self.coord)?;
        fsutil::ensure_private_dir(&self.active_agents())?;
        fsutil::ensure_private_dir(&self.runtime_dir())
    }

    /// Turns an advertised endpoint (relative to `coord`, or absolute) into a path, refusing
    /// anything that climbs out with `..`.
    pub fn endpoint_path(&self, advertised: &str) -> Result<PathBuf> {
        let p = Path::new(advertised);
        if p.components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
            || advertised.is_empty()
        {
            return Err(Error::new(
                Code::InvalidRequest,
                "advertised endpoint is not a plain path",
            ));
        }
        Ok(if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.coord.join(p)
        })
    }
}

/// Where a root binds its socket, and how the presence record advertises it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SocketPlace {
    pub path: PathBuf,
    pub advertised: String,
}

/// `<coord>/peer-runtime/<instance>.sock` when it fits in `sun_path`; otherwise a verified
/// private directory under `$XDG_RUNTIME_DIR` or `/tmp/peerwire-<uid>`, named by a hash of the
/// namespace so that two namespaces never share one.
pub fn socket_place(ns: &Namespace, instance_id: &str) -> Result<SocketPlace> {
    let uid = nix::unistd::geteuid().as_raw();
    let mut bases = Vec::new();
    if let Some(xdg) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        bases.push(PathBuf::from(xdg).join("peerwire"));
    }
    bases.push(PathBuf::from(format!("/tmp/peerwire-{uid}")));
    socket_place_in(ns, instance_id, &bases)
}

/// [`socket_place`] with the candidate short base directories given.
fn socket_place_in(ns: &Namespace, instance_id: &str, bases: &[PathBuf]) -> Result<SocketPlace> {
    let name = format!("{instance_id}.sock");
    let primary = ns.runtime_dir().join(&name);
    if primary.as_os_str().len() <= SOCKET_PATH_BYTES_MAX {
        return Ok(SocketPlace {
            path: primary,
            advertised: format!("peer-runtime/{name}"),
        });
    }
    let tag = &crate::identity::sha256_hex(&[ns.coord.as_os_str().as_encoded_bytes()])[..12];
    let mut last_err = None;
    for base in bases {
        let dir = base.join(tag);
        let path = dir.join(&name);
        if path.as_os_str().len() > SOCKET_PATH_BYTES_MAX {
            continue;
        }
        // Both levels must be ours, 0700, and not links: /tmp is shared with other users.
        match fsutil::ensure_private_dir(base).and_then(|_| fsutil::ensure_private_dir(&dir)) {
            Ok(()) => {
                let advertised = path.to_string_lossy().into_owned();
                return Ok(SocketPlace { path, advertised });
            }
            Err(e) => last_err = Some(fallback_refused(&primary, base, e)),
        }
    }
    Err(last_err.unwrap_or_else(|| {
        Error::new(
            Code::UnsafePath,
            format!(
                "{} is too long for a Unix socket and no short private runtime directory is usable",
                primary.display()
            ),
        )
    }))
}

/// Explains a refused short fallback directory: why a fallback was needed, which directory,
/// who owns it, and what to do, instead of the generic "use a namespace you own".
fn fallback_refused(primary: &Path, base: &Path, e: Error) -> Error {
    use std::os::unix::fs::MetadataExt;
    if e.code != Code::UnsafePath {
        return e;
    }
    let why = format!(
        "the socket path {} is {} bytes, over the {SOCKET_PATH_BYTES_MAX} a Unix socket allows, so peerwire needs a short private directory",
        primary.display(),
        primary.as_os_str().len()
    );
    let fix = "set XDG_RUNTIME_DIR to a private directory you own, or use a shorter --home or coordinationDirectory";
    let Ok(meta) = std::fs::symlink_metadata(base) else {
        return Error::new(Code::UnsafePath, format!("{why}; {}; {fix}", e.message));
    };
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() == me {
        return Error::new(Code::UnsafePath, format!("{why}; {}; {fix}", e.message));
    }
    let owner = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(meta.uid()))
        .ok()
        .flatten()
        .map_or_else(
            || format!("uid {}", meta.uid()),
            |u| format!("{} (uid {})", u.name, meta.uid()),
        );
    Error::new(
        Code::UnsafePath,
        format!(
            "{why}; {} belongs to {owner}, not to you (uid {me}), so it was not used: another user created it before you, possibly to watch or intercept your sockets; have it removed (as {owner} or root: rm -r '{}'), or {fix}",
            base.display(),
            base.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_namespaces_get_a_short_private_socket_dir() {
        let tmp = crate::fsutil::TempDir::new("paths").unwrap();
        let home = tmp.join("x".repeat(120));
        let ns = Namespace {
            home: home.clone(),
            coord: home.clone(),
        };
        let place = socket_place(&ns, "i-0123456789abcdef").unwrap();
        assert!(place.path.as_os_str().len() <= SOCKET_PATH_BYTES_MAX);
        assert!(Path::new(&place.advertised).is_absolute());
        assert_eq!(ns.endpoint_path(&place.advertised).unwrap(), place.path);
        let short = Namespace {
            home: PathBuf::from("/tmp/a"),
            coord: PathBuf::from("/tmp/a"),
        };
        let p = socket_place(&short, "i-1").unwrap();
        assert_eq!(p.advertised, "peer-runtime/i-1.sock");
        assert!(ns.endpoint_path("../x").is_err());
    }

    #[test]
    fn a_foreign_fallback_directory_is_named_with_its_owner_and_the_fix() {
        // Changing a directory's owner needs root; without it there is nothing to stage.
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let tmp = crate::fsutil::TempDir::new("paths-foreign").unwrap();
        let base = tmp.join("peerwire-x");
        std::fs::create_dir(&base).unwrap();
        nix::unistd::chown(&base, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let home = tmp.join("y".repeat(120));
        let ns = Namespace {
            home: home.clone(),
            coord: home,
        };
        let e =
            socket_place_in(&ns, "i-0123456789abcdef", std::slice::from_ref(&base)).unwrap_err();
        assert_eq!(e.code, Code::UnsafePath);
        let base_text = base.display().to_string();
        for needle in [
            base_text.as_str(),
            "uid 65534",
            "not to you",
            "XDG_RUNTIME_DIR",
            "rm -r",
            "over the 107",
        ] {
            assert!(
                e.message.contains(needle),
                "{needle:?} missing: {}",
                e.message
            );
        }
        assert!(
            !e.message.contains("use a namespace you own"),
            "{}",
            e.message
        );
    }
}
