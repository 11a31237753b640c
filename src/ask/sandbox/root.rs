//! The answerer's file system, assembled bubblewrap-style inside its own mount namespace
//! (by the pid namespace's init, which owns the namespaces): a small tmpfs becomes the new
//! root, holding read-only bind mounts of the system directories an agent runtime needs,
//! the workspace, `answerReadPaths` and the peer executable, each at its own path; a fresh
//! writable tmpfs as `/tmp` (the scratch, private to this answerer); a minimal `/dev` of
//! five devices (no terminals); a new `/proc` for the pid namespace with `/proc/sys`
//! read-only. Anything else, the owner's home and every peerwire namespace, runtime
//! directory and socket included, is simply not there; hidden trees that lie inside a bound
//! directory get an empty read-only tmpfs on top. Then `pivot_root` and the old root is
//! detached. Every bind is read-only, so chmod, chown, utimes, xattrs, rename and unlink fail
//! outside `/tmp`.
//!
//! Binds are not recursive: a mount below a bound directory stays out (rather than being
//! bound writable), which is the safe side.

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sys::statvfs::{FsFlags, statvfs};
use std::path::{Path, PathBuf};

/// System directories bound when present (symbolic links such as `/bin -> usr/bin` are
/// copied as links).
const SYSTEM_DIRS: [&str; 11] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix", "/snap",
];
/// Secrets of the system directories, covered like the hidden trees: readable by a server that
/// runs as root (its answerer is root's uid too), useless to any answer.
const SYSTEM_SECRETS: [&str; 9] = [
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssl/private",
    "/etc/security/opasswd",
];
const DEVICES: [&str; 5] = ["null", "zero", "random", "urandom", "full"];
const NONE: Option<&str> = None;

/// What goes into the new root.
pub struct Layout<'a> {
    /// An empty directory to build the root on (it is covered by a tmpfs first).
    pub mount_point: &'a Path,
    pub workspace: &'a Path,
    pub read: &'a [PathBuf],
    pub hide: &'a [PathBuf],
    pub exe: &'a Path,
    /// The `answerNetwork` proxy's directory, bound at `forward::PROXY_INSIDE`.
    pub proxy: Option<&'a Path>,
    pub scratch_mb: u64,
    /// Processes the pid namespace may hold at once (`pid_max` is one more).
    pub processes: u64,
}

fn err(what: &str, path: &Path, e: impl std::fmt::Display) -> String {
    format!("{what} {}: {e}", path.display())
}

/// `path` as it lies under `root`.
fn under(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

fn tmpfs(target: &Path, flags: MsFlags, data: &str) -> Result<(), String> {
    mount(Some("tmpfs"), target, Some("tmpfs"), flags, Some(data))
        .map_err(|e| err("cannot mount a tmpfs on", target, e))
}

/// Binds `src` at the same path under `root`, creating the mount point (only ever inside
/// the new root's own tmpfs: a source that exists has its path already in a bound parent).
fn bind(root: &Path, src: &Path) -> Result<Option<PathBuf>, String> {
    let Ok(meta) = std::fs::metadata(src) else {
        return Ok(None);
    };
    let target = under(root, src);
    if meta.is_dir() {
        std::fs::create_dir_all(&target).map_err(|e| err("cannot create", &target, e))?;
    } else if !target.exists() {
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| err("cannot create", parent, e))?;
        }
        std::fs::File::create(&target).map_err(|e| err("cannot create", &target, e))?;
    }
    mount(Some(src), &target, NONE, MsFlags::MS_BIND, NONE)
        .map_err(|e| err("cannot bind", src, e))?;
    Ok(Some(target))
}

/// Makes a bind mount read-only (and `nodev` unless it is one of the devices), keeping the
/// flags a user namespace may not drop.
fn read_only(target: &Path) -> Result<(), String> {
    read_only_with(target, MsFlags::MS_NODEV)
}

fn read_only_with(target: &Path, extra: MsFlags) -> Result<(), String> {
    let have = statvfs(target)
        .map_err(|e| err("cannot stat", target, e))?
        .flags();
    let mut flags =
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | extra;
    for (f, m) in [
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if have.contains(f) {
            flags |= m;
        }
    }
    mount(NONE, target, NONE, flags, NONE).map_err(|e| err("cannot make read-only", target, e))
}

/// Builds the new root and pivots into it; the caller's working directory is `/` after.
/// Says whether the process bound holds (the pid namespace's own `pid_max` needs Linux 6.14).
pub fn enter(l: &Layout) -> Result<bool, String> {
    mount(NONE, "/", NONE, MsFlags::MS_REC | MsFlags::MS_PRIVATE, NONE)
        .map_err(|e| format!("cannot make the mounts private: {e}"))?;
    let root = l.mount_point;
    tmpfs(
        root,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        "mode=0755,size=1m",
    )?;
    // The scratch first: a workspace under /tmp is then bound inside it.
    let tmp = under(root, Path::new("/tmp"));
    std::fs::create_dir_all(&tmp).map_err(|e| err("cannot create", &tmp, e))?;
    let size = format!("mode=1777,size={}m", l.scratch_mb);
    tmpfs(&tmp, MsFlags::MS_NOSUID | MsFlags::MS_NODEV, &size)?;
    let mut bound = Vec::new();
    for dir in SYSTEM_DIRS.iter().map(Path::new) {
        match std::fs::symlink_metadata(dir) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(dir).map_err(|e| err("cannot read", dir, e))?;
                std::os::unix::fs::symlink(to, under(root, dir))
                    .map_err(|e| err("cannot link", dir, e))?;
            }
            Ok(_) => bound.extend(bind(root, dir)?),
            Err(_) => {}
        }
    }
    let mut extra: Vec<&Path> = l.read.iter().map(PathBuf::as_path).collect();
    extra.push(l.exe);
    extra.push(l.workspace);
    // Shallow first; a path inside one already bound is visible (read-only) through it, and
    // binding it again would stack a mount that the outer one then hides.
    extra.sort_by_key(|p| p.components().count());
    let mut sources: Vec<&Path> = SYSTEM_DIRS.iter().map(Path::new).collect();
    for p in extra {
        if sources.iter().any(|s| p.starts_with(s)) {
            continue;
        }
        bound.extend(bind(root, p)?);
        sources.push(p);
    }
    if let Some(src) = l.proxy {
        let target = under(root, Path::new(super::forward::PROXY_INSIDE));
        std::fs::create_dir_all(&target).map_err(|e| err("cannot create", &target, e))?;
        mount(Some(src), &target, NONE, MsFlags::MS_BIND, NONE)
            .map_err(|e| err("cannot bind", src, e))?;
        bound.push(target);
    }
    for t in &bound {
        read_only(t)?;
    }
    hide(root, l.hide)?;
    let secrets: Vec<PathBuf> = SYSTEM_SECRETS.iter().map(PathBuf::from).collect();
    hide(root, &secrets)?;
    devices(root)?;
    let bounded = proc(root, l.processes)?;
    pivot(root)?;
    Ok(bounded)
}

/// Covers each hidden directory that is visible in the new root with an empty read-only
/// tmpfs (a file, such as a socket, gets `/dev/null` bound over it).
fn hide(root: &Path, hidden: &[PathBuf]) -> Result<(), String> {
    for h in hidden {
        let t = under(root, h);
        match std::fs::symlink_metadata(&t) {
            Ok(m) if m.is_dir() => tmpfs(
                &t,
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                "mode=0555,size=4k",
            )?,
            Ok(m) if !m.file_type().is_symlink() => {
                mount(Some("/dev/null"), &t, NONE, MsFlags::MS_BIND, NONE)
                    .map_err(|e| err("cannot hide", h, e))?;
                read_only(&t)?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn devices(root: &Path) -> Result<(), String> {
    let dev = under(root, Path::new("/dev"));
    std::fs::create_dir_all(&dev).map_err(|e| err("cannot create", &dev, e))?;
    tmpfs(
        &dev,
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        "mode=0755,size=4k",
    )?;
    for name in DEVICES {
        let host = Path::new("/dev").join(name);
        if host.exists() {
            // A read-only bind still reads and writes the device, but refuses chmod/chown
            // of the host's node.
            let t = dev.join(name);
            std::fs::File::create(&t).map_err(|e| err("cannot create", &t, e))?;
            mount(Some(&host), &t, NONE, MsFlags::MS_BIND, NONE)
                .map_err(|e| err("cannot bind", &host, e))?;
            read_only_with(&t, MsFlags::empty())?;
        }
    }
    for (name, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(to, dev.join(name)).map_err(|e| err("cannot link", &dev, e))?;
    }
    let ro = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
    mount(
        NONE,
        &dev,
        NONE,
        ro | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        NONE,
    )
    .map_err(|e| err("cannot make read-only", &dev, e))
}

/// A new `/proc` (this process is the pid namespace's init), the namespace's own `pid_max`
/// as the process bound (when the kernel has it), then `/proc/sys` read-only.
fn proc(root: &Path, processes: u64) -> Result<bool, String> {
    let p = under(root, Path::new("/proc"));
    std::fs::create_dir_all(&p).map_err(|e| err("cannot create", &p, e))?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(Some("proc"), &p, Some("proc"), flags, NONE).map_err(|e| err("cannot mount", &p, e))?;
    let pid_max = p.join("sys/kernel/pid_max");
    let bounded = std::fs::write(&pid_max, format!("{}\n", processes + 1)).is_ok();
    let sys = p.join("sys");
    mount(Some(&sys), &sys, NONE, MsFlags::MS_BIND, NONE)
        .map_err(|e| err("cannot bind", &sys, e))?;
    read_only(&sys)?;
    Ok(bounded)
}

fn pivot(root: &Path) -> Result<(), String> {
    std::env::set_current_dir(root).map_err(|e| err("cannot enter", root, e))?;
    nix::unistd::pivot_root(".", ".").map_err(|e| format!("pivot_root: {e}"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(|e| format!("cannot detach the old root: {e}"))?;
    std::env::set_current_dir("/").map_err(|e| format!("cannot enter the new root: {e}"))?;
    let ro = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
    mount(
        NONE,
        "/",
        NONE,
        ro | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        NONE,
    )
    .map_err(|e| format!("cannot make the new root read-only: {e}"))
}
