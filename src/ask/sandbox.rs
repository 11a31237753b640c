//! The answerer's sandbox, enforced by the kernel rather than by a prompt. `peer ask serve`
//! starts each answerer through `peer ask sandbox-exec`, a fresh single-threaded process that
//! restricts itself with Landlock and then executes `answerCommand`:
//! - read and execute everywhere except the namespace home and `keyDir` (so the answerer can
//!   read neither the ask configuration with its tokens nor the private key, and so cannot
//!   ask peers itself);
//! - write only in a private scratch directory (and `/dev/null`);
//! - `no_new_privs` (set by the Landlock crate before restricting).
//!
//! The server puts it in its own process group and kills the group on timeout. Where the
//! kernel cannot enforce Landlock, `sandbox-exec` refuses (exit status 125) unless the owner
//! configured `allowUnenforcedSandbox`.

use crate::error::{Code, Error, Result};
use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, path_beneath_rules,
};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Exit status of `sandbox-exec` when it refuses to run without enforcement.
pub const SANDBOX_REFUSED_EXIT: i32 = 125;
/// The Landlock ABI whose filesystem rights we ask for (V3 adds truncate).
const ABI_USED: ABI = ABI::V3;
/// Bounds on the walk that lists readable roots around protected directories.
const WALK_DEPTH_MAX: usize = 32;
const DIR_ENTRIES_MAX: usize = 4_096;

/// Whether this kernel enforces Landlock, probed once at server start.
#[derive(Clone, Copy, Debug)]
pub struct Support {
    pub landlock: bool,
}

impl Support {
    /// Creates (and drops) a ruleset with Landlock as a hard requirement; nothing is
    /// restricted in the calling process.
    pub fn probe() -> Support {
        let created = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(ABI::V1))
            .and_then(|r| r.create());
        Support {
            landlock: created.is_ok(),
        }
    }

    pub fn name(&self) -> &'static str {
        if self.landlock {
            "landlock"
        } else {
            "unavailable"
        }
    }
}

/// The directories to grant read access beneath so that everything is readable except the
/// `protected` trees: `/` itself when nothing is protected, else the siblings along each
/// path down to a protected directory. Symbolic links on those paths are left out (a link
/// could lead back into a protected tree); entries created later stay unreadable.
pub fn read_roots(protected: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    expand(Path::new("/"), protected, &mut out, 0);
    out
}

fn expand(dir: &Path, protected: &[PathBuf], out: &mut Vec<PathBuf>, depth: usize) {
    if protected.iter().any(|p| p == dir) {
        return;
    }
    if !protected.iter().any(|p| p.starts_with(dir)) {
        out.push(dir.to_path_buf());
        return;
    }
    if depth >= WALK_DEPTH_MAX {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten().take(DIR_ENTRIES_MAX) {
        let is_link = entry.file_type().map(|t| t.is_symlink()).unwrap_or(true);
        if !is_link {
            expand(&entry.path(), protected, out, depth + 1);
        }
    }
}

/// Restricts this process and executes `argv`; returns only on failure.
pub fn exec_sandboxed(
    scratch: &Path,
    protected: &[PathBuf],
    allow_unenforced: bool,
    argv: &[OsString],
) -> Result<i32> {
    use std::os::unix::process::CommandExt;
    let Some((program, args)) = argv.split_first() else {
        return Err(Error::new(Code::Usage, "sandbox-exec needs a command"));
    };
    let protected: Vec<PathBuf> = protected
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .collect();
    let status = restrict(scratch, &protected);
    let enforced = matches!(
        status,
        Ok(RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced)
    );
    if !enforced && !allow_unenforced {
        eprintln!("peer ask sandbox-exec: Landlock is not enforced on this kernel; refusing");
        return Ok(SANDBOX_REFUSED_EXIT);
    }
    if !enforced {
        // The weaker mode: at least no privilege gain through set-uid binaries.
        let _ = nix::sys::prctl::set_no_new_privs();
    }
    let err = std::process::Command::new(program).args(args).exec();
    Err(Error::new(
        Code::Io,
        format!(
            "cannot run the answerer {}: {err}",
            crate::sanitize::line(&program.to_string_lossy(), 200)
        ),
    ))
}

fn restrict(
    scratch: &Path,
    protected: &[PathBuf],
) -> std::result::Result<RulesetStatus, landlock::RulesetError> {
    let read = AccessFs::from_read(ABI_USED);
    let all = AccessFs::from_all(ABI_USED);
    let status = Ruleset::default()
        .handle_access(all)?
        .create()?
        .add_rules(path_beneath_rules(read_roots(protected), read))?
        .add_rules(path_beneath_rules([scratch], all))?
        .add_rules(path_beneath_rules(
            ["/dev/null"],
            AccessFs::ReadFile | AccessFs::WriteFile,
        ))?
        .restrict_self()?;
    Ok(status.ruleset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_roots_leave_out_protected_trees() {
        let base = crate::fsutil::TempDir::new("roots").unwrap();
        std::fs::create_dir_all(base.join("home/keys")).unwrap();
        std::fs::create_dir_all(base.join("work/src")).unwrap();
        std::os::unix::fs::symlink(base.join("home"), base.join("link")).unwrap();
        let roots = read_roots(&[base.join("home")]);
        assert!(roots.contains(&base.join("work")));
        assert!(!roots.iter().any(|r| r.starts_with(base.join("home"))));
        assert!(!roots.contains(&base.join("link")));
        assert!(!roots.contains(&PathBuf::from("/")));
        assert!(roots.contains(&PathBuf::from("/usr")) || !Path::new("/usr").exists());
        assert_eq!(read_roots(&[]), vec![PathBuf::from("/")]);
    }
}
