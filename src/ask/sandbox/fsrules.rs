//! The Landlock layer of the answerer's sandbox: read and execute everywhere it can see,
//! write only in its scratch directory (and `/dev/null`), no device ioctls (ABI 5), and no
//! signals or abstract-socket connections out of its domain (ABI 6 scopes). Inside the
//! namespaces the hidden trees are already absent from its root; without them (reduced
//! isolation) the readable roots leave out the `protected` trees instead.

use crate::config::internal::{SANDBOX_DIR_ENTRIES_MAX, SANDBOX_WALK_DEPTH_MAX};
use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope, path_beneath_rules,
};
use std::path::{Path, PathBuf};

/// The newest ABI whose rights are asked for; older kernels get what they support.
const ABI_USED: ABI = ABI::V6;
/// Devices the answerer may read and write (without ioctls).
const DEVICES_RW: [&str; 3] = ["/dev/null", "/dev/zero", "/dev/full"];

/// The newest Landlock ABI this kernel enforces among those used here (0: none). Creates and
/// drops rulesets; nothing is restricted.
pub fn abi_level() -> u8 {
    let levels = [
        (ABI::V6, 6),
        (ABI::V5, 5),
        (ABI::V4, 4),
        (ABI::V3, 3),
        (ABI::V2, 2),
        (ABI::V1, 1),
    ];
    for (abi, n) in levels {
        let mut r = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(abi));
        if n >= 6 {
            r = r.and_then(|r| r.scope(Scope::from_all(abi)));
        }
        if r.and_then(|r| r.create()).is_ok() {
            return n;
        }
    }
    0
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
    if depth >= SANDBOX_WALK_DEPTH_MAX {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten().take(SANDBOX_DIR_ENTRIES_MAX) {
        let is_link = entry.file_type().map(|t| t.is_symlink()).unwrap_or(true);
        if !is_link {
            expand(&entry.path(), protected, out, depth + 1);
        }
    }
}

/// Restricts the calling process (and what it executes); `Ok(true)` when enforced at least
/// partly by this kernel.
pub fn restrict(scratch: &Path, protected: &[PathBuf]) -> Result<bool, landlock::RulesetError> {
    let read = AccessFs::from_read(ABI_USED);
    let all = AccessFs::from_all(ABI_USED);
    let devices: Vec<&str> = DEVICES_RW
        .into_iter()
        .filter(|d| Path::new(d).exists())
        .collect();
    let status = Ruleset::default()
        .handle_access(all)?
        .scope(Scope::from_all(ABI_USED))?
        .create()?
        .add_rules(path_beneath_rules(read_roots(protected), read))?
        .add_rules(path_beneath_rules([scratch], all))?
        .add_rules(path_beneath_rules(
            devices,
            AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate,
        ))?
        .restrict_self()?;
    Ok(matches!(
        status.ruleset,
        RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced
    ))
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
