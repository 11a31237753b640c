//! Where and under which configuration a root runs (`Site`): its namespace, its endpoint's
//! socket, the loaded configuration and the canonical workspace, fixed for its lifetime; and
//! what they imply (the limits, the control directory, the directory viewer).

use crate::config::{Config, Limits, Scope};
use crate::directory::{Viewer, WorkspaceId};
use crate::error::{Code, Error, Result};
use crate::paths::Namespace;
use std::path::{Path, PathBuf};

pub struct Site {
    ns: Namespace,
    /// The endpoint's socket; control files live in its directory.
    socket_path: PathBuf,
    config: Config,
    workspace: WorkspaceId,
}

impl Site {
    pub fn new(
        ns: Namespace,
        socket_path: PathBuf,
        config: Config,
        workspace: WorkspaceId,
    ) -> Site {
        Site {
            ns,
            socket_path,
            config,
            workspace,
        }
    }

    pub fn ns(&self) -> &Namespace {
        &self.ns
    }

    /// The namespace's home directory (`--home`).
    pub fn home(&self) -> &Path {
        &self.ns.home
    }

    pub fn socket_path(&self) -> &Path {
        &self.socket_path
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn limits(&self) -> &Limits {
        &self.config.limits
    }

    pub fn workspace(&self) -> &WorkspaceId {
        &self.workspace
    }

    /// The directory holding this root's control file and its runs' control files.
    pub fn control_dir(&self) -> PathBuf {
        self.socket_path
            .parent()
            .map(PathBuf::from)
            .unwrap_or_else(|| self.ns.runtime_dir())
    }

    /// The viewer for directory queries made by the root `self_instance`.
    pub fn viewer(&self, scope: Option<Scope>, self_instance: &str) -> Result<Viewer> {
        let max = self.config.scope;
        let scope = scope.unwrap_or(max);
        if scope > max {
            return Err(Error::new(
                Code::ScopeDenied,
                format!(
                    "scope {} exceeds the configured maximum {}; raise \"scope\" in sessions.communication of {} and restart",
                    scope.name(),
                    max.name(),
                    self.ns.home.join("config.json").display()
                ),
            ));
        }
        Ok(Viewer {
            ws: self.workspace.clone(),
            scope,
            self_instance: Some(self_instance.to_string()),
        })
    }
}
