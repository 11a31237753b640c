//! The one error type of peerwire: a protocol error code, a one-line message, and the mappings of
//! each code to a JSON-RPC error number and a CLI exit status.

use std::fmt;

/// Every failure a caller can see. The names are the wire names (`data.code`) and the CLI's
/// `peer: CODE: message` prefix; each has its own exit status (see `peer(1)`, EXIT STATUS).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Code {
    /// Bad command line or tool arguments.
    Usage,
    /// `sessions.communication.enabled` is false for this namespace.
    CommunicationDisabled,
    /// The target is outside the caller's authorized scope.
    ScopeDenied,
    /// No live advertisement matches the target.
    PeerOffline,
    /// The target incarnation or run has ended.
    TargetEnded,
    /// An alias or reservation matched more than one candidate.
    AmbiguousTarget,
    /// `replyTo` does not name a message received from that exact peer incarnation.
    InvalidReply,
    /// Inbox, storage or pending-request capacity is exhausted.
    QueueFull,
    /// A resource request waited its full time; nothing was authorized.
    ResourceWaitTimeout,
    /// A grant or policy from an older epoch was used.
    StalePolicy,
    /// Stored state is corrupt or uncertain; an operator must look before anything moves.
    RecoveryRequired,
    /// This platform has no safe adapter.
    UnsupportedPlatform,
    /// The same message identity was reused with different content.
    MessageIdConflict,
    /// The handshake failed, or a method came before it.
    AuthFailed,
    /// The sender exceeded its token bucket.
    RateLimited,
    /// A frame exceeded `frameBytes`.
    FrameTooLarge,
    /// Message content exceeded `messageBytes`.
    MessageTooLarge,
    /// The message expired before it was accepted, or expiry exceeds `maxExpiryMs`.
    Expired,
    /// The caller lacks the capability the operation needs.
    CapabilityDenied,
    /// A wait or acknowledgement deadline passed.
    Timeout,
    /// A private path failed its owner, mode or symlink check.
    UnsafePath,
    /// The configuration file or an override is invalid.
    ConfigInvalid,
    /// The named message, receipt, run or resource does not exist.
    NotFound,
    /// Malformed frame or JSON-RPC request (also used for unknown methods).
    InvalidRequest,
    /// Unknown JSON-RPC method or tool.
    MethodNotFound,
    /// The connection closed before an answer came.
    Disconnected,
    /// An operating-system call failed.
    Io,
    /// The friend's owner declined the ask.
    AskDeclined,
    /// No owner decision came within `approvalTimeoutMs`; the ask failed closed.
    ApprovalUnavailable,
    /// The answerer failed: it exited with an error, timed out, printed nothing, or its
    /// sandbox could not be enforced.
    AskFailed,
    /// A friend knew nobody to recommend.
    NoRecommendation,
}

impl Code {
    /// All codes, in exit-status order; used by the docs test and `peer(1)`.
    pub const ALL: [Code; 31] = [
        Code::Usage,
        Code::CommunicationDisabled,
        Code::ScopeDenied,
        Code::PeerOffline,
        Code::TargetEnded,
        Code::AmbiguousTarget,
        Code::InvalidReply,
        Code::QueueFull,
        Code::ResourceWaitTimeout,
        Code::StalePolicy,
        Code::RecoveryRequired,
        Code::UnsupportedPlatform,
        Code::MessageIdConflict,
        Code::AuthFailed,
        Code::RateLimited,
        Code::FrameTooLarge,
        Code::MessageTooLarge,
        Code::Expired,
        Code::CapabilityDenied,
        Code::Timeout,
        Code::UnsafePath,
        Code::ConfigInvalid,
        Code::NotFound,
        Code::InvalidRequest,
        Code::MethodNotFound,
        Code::Disconnected,
        Code::Io,
        Code::AskDeclined,
        Code::ApprovalUnavailable,
        Code::AskFailed,
        Code::NoRecommendation,
    ];

    /// The wire and CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Code::Usage => "USAGE",
            Code::CommunicationDisabled => "COMMUNICATION_DISABLED",
            Code::ScopeDenied => "SCOPE_DENIED",
            Code::PeerOffline => "PEER_OFFLINE",
            Code::TargetEnded => "TARGET_ENDED",
            Code::AmbiguousTarget => "AMBIGUOUS_TARGET",
            Code::InvalidReply => "INVALID_REPLY",
            Code::QueueFull => "QUEUE_FULL",
            Code::ResourceWaitTimeout => "RESOURCE_WAIT_TIMEOUT",
            Code::StalePolicy => "STALE_POLICY",
            Code::RecoveryRequired => "RECOVERY_REQUIRED",
            Code::UnsupportedPlatform => "UNSUPPORTED_PLATFORM",
            Code::MessageIdConflict => "MESSAGE_ID_CONFLICT",
            Code::AuthFailed => "AUTH_FAILED",
            Code::RateLimited => "RATE_LIMITED",
            Code::FrameTooLarge => "FRAME_TOO_LARGE",
            Code::MessageTooLarge => "MESSAGE_TOO_LARGE",
            Code::Expired => "EXPIRED",
            Code::CapabilityDenied => "CAPABILITY_DENIED",
            Code::Timeout => "TIMEOUT",
            Code::UnsafePath => "UNSAFE_PATH",
            Code::ConfigInvalid => "CONFIG_INVALID",
            Code::NotFound => "NOT_FOUND",
            Code::InvalidRequest => "INVALID_REQUEST",
            Code::MethodNotFound => "METHOD_NOT_FOUND",
            Code::Disconnected => "DISCONNECTED",
            Code::Io => "IO_ERROR",
            Code::AskDeclined => "ASK_DECLINED",
            Code::ApprovalUnavailable => "APPROVAL_UNAVAILABLE",
            Code::AskFailed => "ASK_FAILED",
            Code::NoRecommendation => "NO_RECOMMENDATION",
        }
    }

    /// Parses a wire name back into a code.
    pub fn from_name(name: &str) -> Option<Code> {
        Code::ALL.iter().copied().find(|c| c.name() == name)
    }

    /// The CLI exit status: 2 for usage, 10 + position for the rest, so each code is distinct.
    pub fn exit_status(self) -> i32 {
        match self {
            Code::Usage => 2,
            other => {
                let pos = Code::ALL.iter().position(|c| *c == other).unwrap_or(0);
                9 + pos as i32
            }
        }
    }

    /// The JSON-RPC `error.code` number. The standard numbers are used where JSON-RPC defines
    /// one; application codes are -32000 minus the exit status so they never collide.
    pub fn rpc_number(self) -> i64 {
        match self {
            Code::InvalidRequest => -32600,
            Code::MethodNotFound => -32601,
            Code::Usage => -32602,
            other => -32000 - i64::from(other.exit_status()),
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The message of [`Error::stdout_closed`].
const STDOUT_CLOSED: &str = "standard output was closed by its reader";

/// A failure: its code and a one-line message that names what failed and, where there is
/// one, the fix. Messages never contain secrets or raw peer text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub code: Code,
    pub message: String,
}

impl Error {
    pub fn new(code: Code, message: impl Into<String>) -> Error {
        let mut message = message.into();
        // One line, always: a message is printed after `peer: CODE: `.
        if message.contains('\n') {
            message = message.replace('\n', " ");
        }
        Error { code, message }
    }

    /// An I/O failure on a named path.
    pub fn io(what: &str, path: &std::path::Path, err: &std::io::Error) -> Error {
        Error::new(Code::Io, format!("{what} {}: {err}", path.display()))
    }

    /// A write to standard output failed: a reader that went away (EPIPE) gives
    /// [`Error::stdout_closed`], anything else `IO_ERROR`.
    pub fn stdout_write(e: &std::io::Error) -> Error {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Error::stdout_closed()
        } else {
            Error::new(Code::Io, format!("cannot write to standard output: {e}"))
        }
    }

    /// Standard output's reader went away: not a failure, every entry point ends quietly
    /// with status 0 (after a root's normal cleanup, which a panic or SIGPIPE would skip).
    pub fn stdout_closed() -> Error {
        Error::new(Code::Io, STDOUT_CLOSED)
    }

    /// True for [`Error::stdout_closed`].
    pub fn is_stdout_closed(&self) -> bool {
        self.code == Code::Io && self.message == STDOUT_CLOSED
    }

    /// The JSON-RPC error object for the wire: `{"code":N,"message":…,"data":{"code":NAME}}`.
    pub fn to_rpc(&self) -> serde_json::Value {
        serde_json::json!({
            "code": self.code.rpc_number(),
            "message": self.message,
            "data": { "code": self.code.name() },
        })
    }

    /// Rebuilds an error from a JSON-RPC error object; unknown names become `Io`.
    pub fn from_rpc(value: &serde_json::Value) -> Error {
        let name = value
            .get("data")
            .and_then(|d| d.get("code"))
            .and_then(|c| c.as_str())
            .unwrap_or("");
        let message = value
            .get("message")
            .and_then(|m| m.as_str())
            .unwrap_or("peer returned an error without a message");
        let code =
            Code::from_name(name).unwrap_or(match value.get("code").and_then(|c| c.as_i64()) {
                Some(-32600) | Some(-32700) => Code::InvalidRequest,
                Some(-32601) => Code::MethodNotFound,
                Some(-32602) => Code::Usage,
                _ => Code::Io,
            });
        Error::new(code, crate::sanitize::line(message, 400))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_exit_statuses_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for code in Code::ALL {
            assert_eq!(Code::from_name(code.name()), Some(code));
            assert!(
                seen.insert(code.exit_status()),
                "duplicate exit status for {code}"
            );
            assert!(
                code.exit_status() < 126,
                "exit status must stay below shell-reserved range"
            );
        }
    }

    #[test]
    fn rpc_error_round_trips() {
        let err = Error::new(Code::QueueFull, "inbox holds 32 unconsumed messages");
        assert_eq!(Error::from_rpc(&err.to_rpc()), err);
    }
}
