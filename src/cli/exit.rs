//! Exit statuses of the wrapping commands (`peer host -- CMD`, `peer run`, `peer run-child`),
//! following env(1) and timeout(1): the command's own status when it ran, 126 when it was
//! found but could not be executed, 127 when it was not found, and one reserved status, 125,
//! for peerwire's own failure — with the error's code on stderr — so a command's `exit 17`
//! never reads as RESOURCE_WAIT_TIMEOUT.

use super::{Ctx, out};
use crate::error::Error;
use std::ffi::OsStr;

/// peerwire itself failed around the command (the code is on stderr).
pub const WRAPPER_FAILED: i32 = 125;
/// The command was found but could not be executed.
pub const CANNOT_EXECUTE: i32 = 126;
/// The command was not found.
pub const NOT_FOUND: i32 = 127;

/// Reports peerwire's own failure in a wrapper the documented way and returns 125.
pub fn wrapper_failed(ctx: &Ctx, e: &Error) -> i32 {
    if out::is_closed(e) {
        return 0;
    }
    super::report(ctx, e);
    WRAPPER_FAILED
}

/// The status for a command that could not be started, with one line on stderr naming it.
/// It has the form of every other error line, `peer: CODE: message`.
pub fn spawn_failed(name: &str, program: &OsStr, e: &std::io::Error) -> i32 {
    let status = spawn_status(e);
    let code = if status == NOT_FOUND {
        crate::error::Code::NotFound
    } else {
        crate::error::Code::Io
    };
    out::err_line(&format!(
        "peer: {}: {name}: cannot run {:?}: {}",
        code.name(),
        crate::sanitize::line(&program.to_string_lossy(), 200),
        crate::sanitize::line(&e.to_string(), 200)
    ));
    status
}

/// Whether `program` could be started: a path must name an executable file, a bare name one
/// in a `PATH` directory. Checked before a wrapper queues or starts anything, so a typo is
/// reported at once instead of after a wait; spawning still reports what changes meanwhile.
pub fn find_program(program: &OsStr) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let path = std::path::Path::new(program);
    if program.as_encoded_bytes().contains(&b'/') {
        return match std::fs::metadata(path) {
            Err(e) => Err(e),
            Ok(_) if runnable(path) => Ok(()),
            Ok(_) => Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied)),
        };
    }
    let dirs = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&dirs).any(|d| runnable(&d.join(program))) {
        return Ok(());
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        "not found in any PATH directory",
    ))
}

/// 127 for "not found", 126 for everything else that prevented execution.
pub fn spawn_status(e: &std::io::Error) -> i32 {
    if e.kind() == std::io::ErrorKind::NotFound {
        NOT_FOUND
    } else {
        CANNOT_EXECUTE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_statuses_do_not_collide_with_any_code() {
        for code in crate::error::Code::ALL {
            let s = code.exit_status();
            assert!(s < WRAPPER_FAILED, "{code} exits {s}");
        }
        let nf = std::io::Error::from(std::io::ErrorKind::NotFound);
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert_eq!(spawn_status(&nf), NOT_FOUND);
        assert_eq!(spawn_status(&denied), CANNOT_EXECUTE);
    }
}
