//! Private files and directories: 0700/0600 from creation, owner/mode/symlink checks before
//! use, bounded reads, atomic replace with the fsync order of ARCHITECTURE.md ("Which write is
//! durable when"), and short owner-aware file locks.

use crate::error::{Code, Error, Result};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const O_NOFOLLOW: i32 = nix::libc::O_NOFOLLOW;
const O_CLOEXEC: i32 = nix::libc::O_CLOEXEC;

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

fn unsafe_path(path: &Path, why: &str, fix: &str) -> Error {
    Error::new(Code::UnsafePath, format!("{} {why}; {fix}", path.display()))
}

/// Checks metadata taken with `lstat`/`fstat` against our rules for a private object.
fn check_meta(path: &Path, meta: &std::fs::Metadata, want_dir: bool) -> Result<()> {
    if meta.file_type().is_symlink() {
        return Err(unsafe_path(
            path,
            "is a symbolic link",
            "replace it with a real directory or file you own",
        ));
    }
    if want_dir && !meta.is_dir() {
        return Err(unsafe_path(path, "is not a directory", "move it away"));
    }
    if !want_dir && !meta.is_file() {
        return Err(unsafe_path(path, "is not a regular file", "move it away"));
    }
    if meta.uid() != euid() {
        return Err(unsafe_path(
            path,
            &format!(
                "is owned by uid {}, not by you (uid {})",
                meta.uid(),
                euid()
            ),
            "use a namespace you own (--home or PEER_HOME)",
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(unsafe_path(
            path,
            &format!(
                "is group- or world-writable (mode {:o})",
                meta.mode() & 0o7777
            ),
            &format!("run: chmod go-w '{}'", path.display()),
        ));
    }
    Ok(())
}

/// Creates `path` (and missing parents, each 0700) or checks the existing directory: not a
/// symlink, ours, not group/world-writable. Existing directories are tightened to 0700.
pub fn ensure_private_dir(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            check_meta(path, &meta, true)?;
            if meta.mode() & 0o077 != 0 {
                // Readable by others but not writable: safe to tighten, as Autohand does.
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| Error::io("cannot chmod", path, &e))?;
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty() && !p.exists())
            {
                ensure_private_dir(parent)?;
            }
            match std::fs::DirBuilder::new().mode(0o700).create(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::io("cannot create directory", path, &e)),
            }
            let meta =
                std::fs::symlink_metadata(path).map_err(|e| Error::io("cannot stat", path, &e))?;
            check_meta(path, &meta, true)
        }
        Err(e) => Err(Error::io("cannot stat", path, &e)),
    }
}

/// Checks an existing directory without creating or changing it.
pub fn check_private_dir(path: &Path) -> Result<()> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::new(Code::NotFound, format!("{} does not exist", path.display()))
        } else {
            Error::io("cannot stat", path, &e)
        }
    })?;
    check_meta(path, &meta, true)
}

/// Opens an existing private file for reading without following a symlink, and checks it.
pub fn open_private(path: &Path) -> Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(O_NOFOLLOW | O_CLOEXEC)
        .open(path)
        .map_err(|e| open_error(path, &e))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::io("cannot stat", path, &e))?;
    check_meta(path, &meta, false)?;
    Ok(file)
}

fn open_error(path: &Path, e: &std::io::Error) -> Error {
    match e.raw_os_error() {
        Some(nix::libc::ELOOP) => unsafe_path(
            path,
            "is a symbolic link",
            "replace it with a real file you own",
        ),
        _ if e.kind() == std::io::ErrorKind::NotFound => {
            Error::new(Code::NotFound, format!("{} does not exist", path.display()))
        }
        _ => Error::io("cannot open", path, e),
    }
}

/// Reads a whole private file, refusing it before reading when it exceeds `max_bytes`.
pub fn read_private_bounded(path: &Path, max_bytes: u64) -> Result<Vec<u8>> {
    let file = open_private(path)?;
    read_bounded_file(path, file, max_bytes)
}

fn read_bounded_file(path: &Path, file: File, max_bytes: u64) -> Result<Vec<u8>> {
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len > max_bytes {
        return Err(Error::new(
            Code::RecoveryRequired,
            format!(
                "{} is {len} bytes, over the {max_bytes}-byte bound",
                path.display()
            ),
        ));
    }
    let mut buf = Vec::with_capacity(len as usize);
    // A file growing under us is still cut at the bound (+1 to detect it).
    file.take(max_bytes + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io("cannot read", path, &e))?;
    if buf.len() as u64 > max_bytes {
        return Err(Error::new(
            Code::RecoveryRequired,
            format!(
                "{} grew over the {max_bytes}-byte bound while being read",
                path.display()
            ),
        ));
    }
    Ok(buf)
}

/// Creates a new private file (0600, `O_EXCL`, no symlink follow) for writing.
pub fn create_private_new(path: &Path) -> Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(O_NOFOLLOW | O_CLOEXEC)
        .open(path)
        .map_err(|e| Error::io("cannot create", path, &e))
}

/// Opens (creating 0600 if missing) a private file for read and append-style writes, and
/// checks the result.
pub fn open_private_rw(path: &Path) -> Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(O_NOFOLLOW | O_CLOEXEC)
        .open(path)
        .map_err(|e| open_error(path, &e))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::io("cannot stat", path, &e))?;
    check_meta(path, &meta, false)?;
    Ok(file)
}

/// Flushes a directory entry change (create, rename, unlink) to disk.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).map_err(|e| Error::io("cannot open directory", dir, &e))?;
    d.sync_all()
        .map_err(|e| Error::io("cannot fsync directory", dir, &e))
}

/// Whether an atomic replace must reach the disk before it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// temp write, fsync, rename, fsync dir: the new content survives a crash once we return.
    Durable,
    /// temp write, rename: readers never see a torn file; a crash may keep the old content.
    Visible,
}

/// Replaces `path` with `bytes` atomically: a temp file in the same directory whose name does
/// not end in `.json`, written with mode 0600 and `O_EXCL`, then renamed over the target.
pub fn atomic_write(path: &Path, bytes: &[u8], durability: Durability) -> Result<()> {
    atomic_write_with(path, durability, |f| {
        f.write_all(bytes).map_err(|e| e.to_string())
    })
}

/// Like [`atomic_write`], with the content produced by `fill` into the temp file (so a large
/// file need not be built in memory first). `fill`'s error text becomes an IO error.
pub fn atomic_write_with(
    path: &Path,
    durability: Durability,
    fill: impl FnOnce(&mut File) -> std::result::Result<(), String>,
) -> Result<()> {
    let dir = parent_of(path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.{}.{:016x}.tmp",
        std::process::id(),
        crate::identity::random_u64()
    ));
    let result = (|| {
        let mut f = create_private_new(&tmp)?;
        fill(&mut f)
            .map_err(|e| Error::new(Code::Io, format!("cannot write {}: {e}", tmp.display())))?;
        if durability == Durability::Durable {
            f.sync_data()
                .map_err(|e| Error::io("cannot fsync", &tmp, &e))?;
        }
        std::fs::rename(&tmp, path).map_err(|e| Error::io("cannot rename onto", path, &e))?;
        if durability == Durability::Durable {
            fsync_dir(&dir)?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn parent_of(path: &Path) -> Result<PathBuf> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => Ok(p.to_path_buf()),
        _ => Err(Error::new(
            Code::Io,
            format!("{} has no parent directory", path.display()),
        )),
    }
}

/// An exclusive advisory lock (`flock`) on a private lock file. The kernel frees it when the
/// holder dies, so a crashed holder never wedges others; the file records the holder's pid for
/// the timeout message.
#[derive(Debug)]
pub struct FileLock {
    file: File,
}

impl FileLock {
    /// Takes the lock, retrying for at most `wait_ms`; after that the answer is `TIMEOUT`
    /// naming the path and the pid that holds it.
    pub fn acquire(path: &Path, wait_ms: u64) -> Result<FileLock> {
        let mut file = open_private_rw(path)?;
        let deadline = Instant::now() + Duration::from_millis(wait_ms);
        let mut pause = Duration::from_micros(200);
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    if Instant::now() >= deadline {
                        let mut holder = String::new();
                        let _ = (&file).take(32).read_to_string(&mut holder);
                        return Err(Error::new(
                            Code::Timeout,
                            format!(
                                "lock {} is held by pid {} for over {wait_ms} ms",
                                path.display(),
                                crate::sanitize::line(holder.trim(), 20)
                            ),
                        ));
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(Error::io("cannot lock", path, &e));
                }
            }
        }
        let _ = file.set_len(0);
        let _ = file.write_all(std::process::id().to_string().as_bytes());
        Ok(FileLock { file })
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// A private (0700) directory with a unique name under the system temporary directory (or
/// another parent), removed with everything in it when dropped. The one temporary-directory
/// helper of unit tests, integration tests and benchmarks.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// `<temp>/pw-<tag>-<pid>-<random>`; `tag` only helps a person tell leftovers apart.
    pub fn new(tag: &str) -> Result<TempDir> {
        TempDir::new_in(&std::env::temp_dir(), tag)
    }

    /// Like [`TempDir::new`] under `parent`.
    pub fn new_in(parent: &Path, tag: &str) -> Result<TempDir> {
        let tag: String = tag
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .take(40)
            .collect();
        let path = parent.join(format!(
            "pw-{tag}-{}-{:016x}",
            std::process::id(),
            crate::identity::random_u64()
        ));
        ensure_private_dir(&path)?;
        Ok(TempDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `path().join(p)`.
    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.path.join(p)
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> TempDir {
        TempDir::new(&format!("fsutil-{tag}")).unwrap()
    }

    #[test]
    fn private_dir_refuses_symlink_and_world_writable() {
        let base = tmpdir("dir");
        let real = base.join("real");
        ensure_private_dir(&real).unwrap();
        assert_eq!(std::fs::metadata(&real).unwrap().mode() & 0o777, 0o700);
        let link = base.join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = ensure_private_dir(&link).unwrap_err();
        assert_eq!(e.code, Code::UnsafePath);
        assert!(e.message.contains("symbolic link"));
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = ensure_private_dir(&real).unwrap_err();
        assert!(e.message.contains("chmod go-w"), "{}", e.message);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn atomic_write_is_private_and_bounded_read_refuses_big_files() {
        let base = tmpdir("atomic");
        let f = base.join("x.json");
        atomic_write(&f, b"hello", Durability::Durable).unwrap();
        assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o600);
        assert_eq!(read_private_bounded(&f, 5).unwrap(), b"hello");
        assert_eq!(
            read_private_bounded(&f, 4).unwrap_err().code,
            Code::RecoveryRequired
        );
        let link = base.join("l.json");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert_eq!(
            read_private_bounded(&link, 10).unwrap_err().code,
            Code::UnsafePath
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn lock_times_out_while_held() {
        let base = tmpdir("lock");
        let p = base.join("l.lock");
        let held = FileLock::acquire(&p, 100).unwrap();
        let e = FileLock::acquire(&p, 30).unwrap_err();
        assert_eq!(e.code, Code::Timeout);
        drop(held);
        FileLock::acquire(&p, 30).unwrap();
        std::fs::remove_dir_all(&base).unwrap();
    }
}
