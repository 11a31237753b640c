//! The seccomp layer of the answerer's sandbox, compiled by `seccompiler`: everything is
//! allowed except terminal injection (`ioctl` `TIOCSTI`, `TIOCLINUX`) and the calls that
//! would change the answerer's view of the system (mounts, `pivot_root`, `setns`), trace
//! other processes or reach kernel keyrings and BPF. Those fail with `EPERM`.

use nix::libc;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

/// System calls refused whatever their arguments.
const DENIED: [i64; 15] = [
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_mount_setattr,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_setns,
    libc::SYS_ptrace,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
];

fn program() -> Result<BpfProgram, seccompiler::BackendError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
    // The kernel reads the request as a 32-bit int: compare only those bits, so that junk in
    // the upper half cannot slip a TIOCSTI past the filter.
    // `Ioctl` is `c_ulong` here and `c_int` on other libcs: the cast is the portable spelling.
    #[allow(clippy::unnecessary_cast)]
    let requests = [libc::TIOCSTI as u64, libc::TIOCLINUX as u64];
    let ioctl = requests
        .into_iter()
        .map(|req| {
            SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, req)
                .and_then(|c| SeccompRule::new(vec![c]))
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_ioctl, ioctl);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )?;
    filter.try_into()
}

/// Installs the filter on the calling thread (it sets `no_new_privs` first); it is inherited
/// across fork and exec.
pub fn apply() -> Result<(), String> {
    let prog = program().map_err(|e| format!("seccomp filter: {e}"))?;
    seccompiler::apply_filter(&prog).map_err(|e| format!("seccomp: {e}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_filter_compiles_for_this_machine() {
        assert!(!super::program().unwrap().is_empty());
    }
}
