//! The answerer's containment, enforced by the kernel rather than by a prompt. The answerer
//! is assumed hostile (a prompt-injected agent does what the friend's question says).
//! `peer ask serve` starts each answerer through `peer ask sandbox-exec`, a fresh
//! single-threaded re-exec of the peer binary, which stacks these layers before it executes
//! `answerCommand`:
//! - a new session (`setsid`): no controlling terminal; stdin is the JSON pipe, stderr
//!   `/dev/null`;
//! - namespaces (`ns`): user, mount, pid, network, ipc; a new read-only root holding only
//!   the system directories, the workspace, `answerReadPaths` and the peer executable, a
//!   private tmpfs `/tmp` as scratch, a minimal `/dev`, an empty network (`root`); the pid
//!   namespace's init kills everything the answerer left when it ends;
//! - limits: address space, CPU time, processes (the pid namespace's `pid_max`);
//! - Landlock (`fsrules`): write only in the scratch, no device ioctls, no signals or
//!   abstract sockets out of the domain;
//! - seccomp (`filter`): no `TIOCSTI`/`TIOCLINUX`, mounts, `setns`, `ptrace`, keyrings, BPF.
//!
//! Without user namespaces or Landlock it refuses (exit status 125) unless the owner set
//! `answerIsolation: "reduced"`; then it runs with what the kernel has (`Layers::missing`
//! says what is not contained), and the server prints that at every start.

mod filter;
mod forward;
mod fsrules;
mod ns;
mod root;

use crate::config::internal::SANDBOX_PROBE_OUTPUT_MAX;

use crate::error::{Code, Error, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub use fsrules::read_roots;

/// Exit status of `sandbox-exec` when it refuses to run the answerer.
pub const SANDBOX_REFUSED_EXIT: i32 = 125;
/// Exit status when `answerCommand` could not be executed (as a shell says "not found").
pub const COMMAND_NOT_RUN_EXIT: i32 = 127;

/// What `sandbox-exec` is told (its command line; see `peer ask sandbox-exec`).
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// A private, empty directory: the writable scratch without namespaces, the mount point
    /// of the new root with them.
    pub scratch: PathBuf,
    pub workspace: PathBuf,
    pub read: Vec<PathBuf>,
    /// Trees the answerer must not see: the namespace home, keyDir, runtime directories.
    pub hide: Vec<PathBuf>,
    pub reduced: bool,
    /// Skip the namespaces (the start-up probe found them unusable).
    pub no_namespaces: bool,
    /// The directory of this answerer's `answerNetwork` proxy socket (`egress`), if any.
    pub proxy: Option<PathBuf>,
    pub memory_mb: u64,
    pub cpu_seconds: u64,
    pub processes: u64,
    /// Report the layers this kernel gives (one line on stdout) instead of running anything.
    pub probe: bool,
    /// This process is the pid namespace's init (internal).
    pub init: bool,
    /// The server's pid: the launcher ends at once if the server is already gone.
    pub server: Option<u32>,
    /// The launcher's pid, as init is told it (internal).
    pub launcher: Option<u32>,
}

/// The layers in force for an answerer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layers {
    pub namespaces: bool,
    /// The pid namespace's own `pid_max` bounds the processes (Linux 6.14 and later).
    pub process_limit: bool,
    /// The Landlock ABI whose rights are enforced (0: none).
    pub landlock: u8,
    pub seccomp: bool,
}

impl Layers {
    /// Namespaces and Landlock: what full isolation needs.
    pub fn contained(&self) -> bool {
        self.namespaces && self.landlock > 0
    }

    /// The probe's line.
    pub fn encode(&self) -> String {
        format!(
            "ns={} pidmax={} landlock={} seccomp={}",
            u8::from(self.namespaces),
            u8::from(self.process_limit),
            self.landlock,
            u8::from(self.seccomp)
        )
    }

    pub fn decode(line: &str) -> Option<Layers> {
        let mut out = Layers::default();
        let mut seen = 0;
        for word in line.split_whitespace() {
            let (k, v) = word.split_once('=')?;
            match k {
                "ns" => out.namespaces = v == "1",
                "pidmax" => out.process_limit = v == "1",
                "landlock" => out.landlock = v.parse().ok()?,
                "seccomp" => out.seccomp = v == "1",
                _ => return None,
            }
            seen += 1;
        }
        (seen == 4).then_some(out)
    }

    /// e.g. `userns+mountns+pidns+netns+ipcns, pid_max, landlock ABI 6, seccomp`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.namespaces {
            parts.push("userns+mountns+pidns+netns+ipcns".to_string());
        }
        if self.process_limit {
            parts.push("pid_max".into());
        }
        if self.landlock > 0 {
            parts.push(format!("landlock ABI {}", self.landlock));
        }
        if self.seccomp {
            parts.push("seccomp".into());
        }
        if parts.is_empty() {
            return "no containment".into();
        }
        parts.join(", ")
    }

    /// What is not contained, one phrase per missing layer.
    pub fn missing(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if !self.namespaces {
            out.push(
                "no namespaces: the answerer sees the owner's whole file system (less the \
                 namespace and keyDir when Landlock holds), can chmod and touch what the owner \
                 owns, reaches the network and abstract sockets, and daemons it starts outlive \
                 the answer; no process limit",
            );
        }
        if self.namespaces && !self.process_limit {
            out.push(
                "no process limit: this kernel's pid namespaces have no pid_max of their own \
                 (Linux 6.14 and later)",
            );
        }
        if self.landlock == 0 {
            out.push(
                "no Landlock: the answerer can read the namespace and keyDir and write \
                 wherever the owner can, unless the namespaces hide it",
            );
        } else if self.landlock < 5 {
            out.push("Landlock below ABI 5: device ioctls are not refused by Landlock");
        } else if self.landlock < 6 {
            out.push("Landlock below ABI 6: signals and abstract sockets are not scoped");
        }
        if !self.seccomp {
            out.push("no seccomp: terminal ioctls (TIOCSTI) and mount calls are not refused");
        }
        out
    }

    /// Why an answer must be refused, if it must.
    pub fn refusal(&self, reduced: bool) -> Option<String> {
        if self.contained() || reduced {
            return None;
        }
        Some(format!(
            "this machine cannot contain the answerer ({}); set ask.answerIsolation to \
             \"reduced\" to answer anyway",
            self.missing().join("; ")
        ))
    }
}

/// Says why on stderr (the server's `/dev/null` for real runs, visible when run by hand) and
/// gives the refusal exit status.
fn refuse(why: &str) -> i32 {
    eprintln!("peer ask sandbox-exec: {why}; refusing");
    SANDBOX_REFUSED_EXIT
}

/// Restricts the calling process with Landlock (readable: everything but `protected`;
/// writable: `scratch`) and seccomp; says what held.
fn restrict(scratch: &Path, protected: &[PathBuf]) -> Layers {
    let abi = fsrules::abi_level();
    let landlock = match fsrules::restrict(scratch, protected) {
        Ok(true) => abi,
        _ => 0,
    };
    Layers {
        namespaces: false,
        process_limit: false,
        landlock,
        seccomp: filter::apply().is_ok(),
    }
}

/// `sandbox-exec`: contains this process and executes `argv`; returns only when it does not
/// (with the answerer's status when it ran under an init). `raw_args` are this command's
/// own arguments, handed on to init.
pub fn exec(plan: &Plan, raw_args: &[OsString], argv: &[OsString]) -> Result<i32> {
    if plan.init {
        return ns::init(plan, argv);
    }
    // The answerer dies with the server's thread that waits for it; a server that died before
    // this was set has left this process to another parent.
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    let parent = nix::unistd::getppid().as_raw();
    if plan
        .server
        .is_some_and(|s| i64::from(s) != i64::from(parent))
    {
        return Ok(refuse("the server is gone"));
    }
    // Fails only for a group leader, which the server never makes this process.
    let _ = nix::unistd::setsid();
    if !plan.no_namespaces {
        match ns::outer(raw_args) {
            Ok(code) if !plan.probe || code == 0 => return Ok(code),
            Ok(_) => {}
            Err(e) if !plan.reduced && !plan.probe => return Ok(refuse(&e)),
            Err(_) => {}
        }
    }
    without_namespaces(plan, argv)
}

fn without_namespaces(plan: &Plan, argv: &[OsString]) -> Result<i32> {
    use std::os::unix::process::CommandExt;
    ns::limits(plan);
    let layers = restrict(&plan.scratch, &plan.hide);
    if plan.probe {
        println!("{}", layers.encode());
        return Ok(0);
    }
    if let Some(why) = layers.refusal(plan.reduced) {
        return Ok(refuse(&why));
    }
    let Some((program, args)) = argv.split_first() else {
        return Err(Error::new(Code::Usage, "sandbox-exec needs a command"));
    };
    let err = std::process::Command::new(program).args(args).exec();
    Err(Error::new(
        Code::Io,
        format!(
            "cannot run the answerer {}: {err}",
            crate::sanitize::line(&program.to_string_lossy(), 200)
        ),
    ))
}

/// The command line `sandbox-exec` understands for `plan` (without the answerer's argv).
pub fn plan_args(plan: &Plan) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec!["--scratch".into(), plan.scratch.clone().into()];
    a.extend(["--workspace".into(), plan.workspace.clone().into()]);
    for p in &plan.read {
        a.extend(["--read".into(), p.clone().into()]);
    }
    for p in &plan.hide {
        a.extend(["--hide".into(), p.clone().into()]);
    }
    if let Some(p) = &plan.proxy {
        a.extend(["--proxy".into(), p.clone().into()]);
    }
    if let Some(pid) = plan.server {
        a.extend(["--server".into(), pid.to_string().into()]);
    }
    for (flag, n) in [
        ("--memory-mb", plan.memory_mb),
        ("--cpu-seconds", plan.cpu_seconds),
        ("--processes", plan.processes),
    ] {
        a.extend([flag.into(), n.to_string().into()]);
    }
    for (flag, on) in [
        ("--reduced", plan.reduced),
        ("--no-namespaces", plan.no_namespaces),
        ("--probe", plan.probe),
    ] {
        if on {
            a.push(flag.into());
        }
    }
    a
}

/// Runs `sandbox-exec --probe` for `plan` (at server start) and reads the layers it got.
pub fn probe(plan: &Plan) -> Layers {
    use std::io::Read;
    let fallback = Layers {
        namespaces: false,
        process_limit: false,
        landlock: fsrules::abi_level(),
        seccomp: false,
    };
    let Ok(exe) = std::env::current_exe() else {
        return fallback;
    };
    let plan = Plan {
        probe: true,
        ..plan.clone()
    };
    let child = std::process::Command::new(exe)
        .args(["ask", "sandbox-exec"])
        .args(plan_args(&plan))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return fallback;
    };
    let mut out = Vec::new();
    if let Some(s) = child.stdout.take() {
        let _ = s
            .take(SANDBOX_PROBE_OUTPUT_MAX as u64)
            .read_to_end(&mut out);
    }
    let _ = child.wait();
    let text = String::from_utf8_lossy(&out);
    text.lines()
        .last()
        .and_then(Layers::decode)
        .unwrap_or(fallback)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_round_trip_and_name_what_is_missing() {
        let full = Layers {
            namespaces: true,
            process_limit: true,
            landlock: 6,
            seccomp: true,
        };
        assert_eq!(Layers::decode(&full.encode()), Some(full));
        assert_eq!(Layers::decode("ns=1 pidmax=1 landlock=x seccomp=1"), None);
        assert_eq!(Layers::decode("ns=1"), None);
        assert!(full.missing().is_empty() && full.refusal(false).is_none());
        assert_eq!(
            full.describe(),
            "userns+mountns+pidns+netns+ipcns, pid_max, landlock ABI 6, seccomp"
        );
        let bare = Layers::default();
        assert_eq!(bare.missing().len(), 3);
        assert!(bare.refusal(false).unwrap().contains("answerIsolation"));
        assert!(bare.refusal(true).is_none());
    }
}
