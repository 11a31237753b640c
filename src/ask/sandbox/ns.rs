//! The namespace layer of the answerer's sandbox. `sandbox-exec` (already in a session of
//! its own, so without a controlling terminal) enters new user, mount, pid, network and ipc
//! namespaces, maps the owner's uid and gid to 0 in them, and starts `sandbox-exec --init`:
//! the pid namespace's init. Init assembles the answerer's root (`root`), sets the limits,
//! restricts itself with Landlock and seccomp (inherited by the answerer), starts
//! `answerCommand` and reaps until it ends; then init exits and the kernel kills every
//! process left in the namespace, `setsid`'d and double-forked daemons included. Init stays
//! in the server's process group, so the server's timeout kill reaches it (and through it
//! the whole namespace); `sandbox-exec` dying kills init too (parent-death signal).
//!
//! The network namespace is empty (its loopback is down): no TCP, UDP or abstract sockets
//! reach anything outside.

use super::{Layers, Plan, SANDBOX_REFUSED_EXIT, refuse};
use crate::error::Result;
use nix::sched::{CloneFlags, unshare};
use nix::sys::resource::{Resource, setrlimit};
use nix::sys::wait::{WaitStatus, waitpid};
use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

/// Enters the namespaces and runs init in them; returns init's exit status. `Err` text when
/// the kernel would not create them.
pub fn outer(raw_args: &[OsString]) -> std::result::Result<i32, String> {
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid();
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the peer binary: {e}"))?;
    unshare(
        CloneFlags::CLONE_NEWUSER
            | CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWPID
            | CloneFlags::CLONE_NEWNET
            | CloneFlags::CLONE_NEWIPC,
    )
    .map_err(|e| format!("cannot create namespaces: {e}"))?;
    let write = |f: &str, v: String| {
        std::fs::write(Path::new("/proc/self").join(f), v).map_err(|e| format!("{f}: {e}"))
    };
    write("setgroups", "deny".into())?;
    write("uid_map", format!("0 {uid} 1\n"))?;
    write("gid_map", format!("0 {gid} 1\n"))?;
    let me = std::process::id().to_string();
    let status = Command::new(exe)
        .args(["ask", "sandbox-exec", "--init", "--launcher", &me])
        .args(raw_args)
        .status()
        .map_err(|e| format!("cannot start the sandbox's init: {e}"))?;
    use std::os::unix::process::ExitStatusExt;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// The pid namespace's init: builds the root, restricts, runs the answerer, reaps.
pub fn init(plan: &Plan, argv: &[OsString]) -> Result<i32> {
    // Only ever the first process of a fresh pid namespace: run anywhere else (by hand, as
    // root) it would rebuild the caller's own mounts.
    if nix::unistd::getpid().as_raw() != 1 {
        return Ok(refuse("--init runs only as a new pid namespace's init"));
    }
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    // The parent-death signal only covers a launcher that dies after it was set: look once
    // (the host's /proc is still mounted here) whether it already has.
    if plan.launcher.is_some_and(gone) {
        return Ok(refuse("the launcher is gone"));
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return Ok(refuse(&format!("cannot find the peer binary: {e}"))),
    };
    let layout = super::root::Layout {
        mount_point: &plan.scratch,
        workspace: &plan.workspace,
        read: &plan.read,
        hide: &plan.hide,
        exe: &exe,
        proxy: plan.proxy.as_deref(),
        scratch_mb: plan.memory_mb,
        processes: plan.processes,
    };
    let process_limit = match super::root::enter(&layout) {
        Ok(bounded) => bounded,
        Err(e) => return Ok(refuse(&e)),
    };
    let _ = std::env::set_current_dir(&plan.workspace);
    limits(plan);
    let layers = super::restrict(Path::new("/tmp"), &[]);
    let layers = Layers {
        namespaces: true,
        process_limit,
        ..layers
    };
    if plan.probe {
        println!("{}", layers.encode());
        return Ok(0);
    }
    if let Some(missing) = layers.refusal(plan.reduced) {
        return Ok(refuse(&missing));
    }
    let Some((program, args)) = argv.split_first() else {
        return Ok(refuse("sandbox-exec needs a command"));
    };
    let mut cmd = match answerer_command(plan, program, args) {
        Ok(c) => c,
        Err(e) => return Ok(refuse(&e)),
    };
    if let Err(e) = drop_capabilities() {
        return Ok(refuse(&e));
    }
    let child = cmd.spawn();
    match child {
        Ok(c) => Ok(reap(c.id() as i32)),
        Err(e) => {
            eprintln!(
                "peer ask sandbox-exec: cannot run the answerer {}: {e}",
                crate::sanitize::line(&program.to_string_lossy(), 200)
            );
            Ok(super::COMMAND_NOT_RUN_EXIT)
        }
    }
}

/// `answerCommand` with its scratch as `TMPDIR` and, for `answerNetwork`, the forwarder
/// started and named in `HTTPS_PROXY` (any proxy variables of the owner's are dropped).
fn answerer_command(
    plan: &Plan,
    program: &OsString,
    args: &[OsString],
) -> std::result::Result<Command, String> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("TMPDIR", "/tmp")
        .env("XDG_CACHE_HOME", "/tmp");
    for var in [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
    ] {
        cmd.env_remove(var);
    }
    if plan.proxy.is_some() {
        let url = format!("http://127.0.0.1:{}", super::forward::start()?);
        cmd.env("HTTPS_PROXY", &url).env("https_proxy", &url);
    }
    Ok(cmd)
}

/// Empties the bounding, inheritable and ambient capability sets before the answerer is
/// started. Init is uid 0 of the user namespace, so an answerer executed as is would hold
/// every capability there (`CAP_SYS_ADMIN` to remount its read-only binds, `CAP_CHOWN`,
/// `CAP_DAC_OVERRIDE`); with an empty bounding set an exec grants none, so the read-only
/// root does not rest on the seccomp filter alone. Init keeps its own (it only reaps).
fn drop_capabilities() -> std::result::Result<(), String> {
    use caps::CapSet;
    for set in [CapSet::Ambient, CapSet::Inheritable, CapSet::Bounding] {
        caps::clear(None, set).map_err(|e| format!("cannot drop capabilities ({set:?}): {e}"))?;
    }
    Ok(())
}

/// Whether the process `pid` (in the parent pid namespace) has ended.
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_none_or(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => true,
    }
}

/// Reaps every child (orphans are re-parented to init) until the answerer itself ends.
fn reap(answerer: i32) -> i32 {
    loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(p, code)) if p.as_raw() == answerer => return code,
            Ok(WaitStatus::Signaled(p, sig, _)) if p.as_raw() == answerer => {
                return 128 + sig as i32;
            }
            Err(nix::errno::Errno::EINTR) | Ok(_) => {}
            Err(_) => return SANDBOX_REFUSED_EXIT,
        }
    }
}

/// Address space and CPU time for init and everything it starts (the process count is the
/// pid namespace's `pid_max`, set while building the root).
pub fn limits(plan: &Plan) {
    let bytes = plan.memory_mb.saturating_mul(1 << 20);
    let _ = setrlimit(Resource::RLIMIT_AS, bytes, bytes);
    let _ = setrlimit(Resource::RLIMIT_CPU, plan.cpu_seconds, plan.cpu_seconds);
    let _ = setrlimit(Resource::RLIMIT_CORE, 0, 0);
}
