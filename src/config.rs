//! `sessions.communication` in `<ns>/config.json`: every field and limit of the protocol with its
//! default, validated once at start-up, plus namespace resolution.
#![forbid(unsafe_code)]

use crate::config::internal::{FRAME_ENVELOPE_BYTES, RESOURCE_WAIT_TIMEOUT_MS_MAX};
use crate::error::{Code, Error, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};

pub mod internal;

pub use internal::CONFIG_FILE_BYTES_MAX;

/// How far a root's authority reaches when listing and messaging.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    Workspace,
    Repository,
    Machine,
}

impl Scope {
    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "workspace" => Some(Scope::Workspace),
            "repository" => Some(Scope::Repository),
            "machine" => Some(Scope::Machine),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Scope::Workspace => "workspace",
            Scope::Repository => "repository",
            Scope::Machine => "machine",
        }
    }
}

/// What a root does when a message arrives while it is idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleBehavior {
    Notify,
    Auto,
}

/// One bound of [`Limits`]: its JSON name, default, accepted range and the sentence
/// peer-config(5) prints for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitDef {
    pub name: &'static str,
    pub default: u64,
    pub min: u64,
    pub max: u64,
    pub doc: &'static str,
}

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// Defines [`Limits`] (fields, defaults, lookup by JSON name) and [`LIMITS`] (names, ranges and
/// documentation) from one table, so a limit is written down exactly once.
macro_rules! limits {
    ($($field:ident, $json:literal, $default:expr, $min:literal..=$max:expr, $doc:literal;)*) => {
        /// Every bound of the runtime that `sessions.communication.limits` may change. Each is
        /// defined once in the table below: field, JSON name, default, accepted range and the
        /// peer-config(5) sentence.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct Limits {
            $(#[doc = $doc] pub $field: u64,)*
        }

        impl Default for Limits {
            fn default() -> Limits {
                Limits { $($field: $default,)* }
            }
        }

        /// The table of limits, in the order of [`Limits`]' fields and of peer-config(5).
        pub const LIMITS: &[LimitDef] = &[
            $(LimitDef { name: $json, default: $default, min: $min, max: $max, doc: $doc },)*
        ];

        impl Limits {
            fn slot(&mut self, name: &str) -> Option<&mut u64> {
                match name {
                    $($json => Some(&mut self.$field),)*
                    _ => None,
                }
            }

            /// Reads one limit by its JSON name (for reports and tests).
            pub fn get(&self, name: &str) -> Option<u64> {
                match name {
                    $($json => Some(self.$field),)*
                    _ => None,
                }
            }
        }
    };
}

limits! {
    frame_bytes, "frameBytes", 65_536, 1_024..=16 << 20,
        "Largest frame on a socket, in bytes, checked before any JSON parsing. An oversize frame is answered with FRAME_TOO_LARGE and the connection is closed.";
    message_bytes, "messageBytes", 8_000, 1..=2 << 20,
        "Largest message content in UTF-8 bytes (MESSAGE_TOO_LARGE). The largest message, escaped, must fit one frame (see the rules below).";
    inbox_messages, "inboxMessages", 32, 1..=10_000_000,
        "Unconsumed messages per recipient; beyond it a send gets QUEUE_FULL and nothing accepted is dropped.";
    pending_requests, "pendingRequests", 32, 1..=65_536,
        "Requests in flight on one connection.";
    connections, "connections", 16, 1..=4_096,
        "Cached outbound authenticated connections; the least recently used is closed first.";
    storage_bytes, "storageBytes", 10 << 20, 1..=1 << 40,
        "Bytes of one instance's message store (snapshot and journal). Must hold at least one largest message with its bookkeeping.";
    rate_per_second, "ratePerSecond", 10, 1..=10_000_000,
        "Token-bucket refill rate of accepted messages per sender.";
    rate_burst, "rateBurst", 20, 1..=10_000_000,
        "Token-bucket size per sender (RATE_LIMITED beyond).";
    handshake_ms, "handshakeMs", 2_000, 1..=600_000,
        "Time a connection has to finish the handshake; silent clients are dropped then.";
    acknowledgement_ms, "acknowledgementMs", 2_000, 1..=600_000,
        "Deadline of one request on an authenticated connection (TIMEOUT).";
    expiry_ms, "expiryMs", 600_000, 1..=DAY_MS * 365,
        "Default lifetime of an unconsumed message. Must not exceed maxExpiryMs.";
    max_expiry_ms, "maxExpiryMs", 3_600_000, 1..=DAY_MS * 365,
        "Longest lifetime a sender may ask for.";
    retention_ms, "retentionMs", DAY_MS, 1..=DAY_MS * 365,
        "Age after which terminal records (consumed, replied, refused, expired) are removed.";
    automatic_replies, "automaticReplies", 8, 1..=1_000,
        "Automatic messages per conversation in auto idle behaviour.";
    directory_page_size, "directoryPageSize", 50, 1..=10_000,
        "Peers per directory page.";
    published_runs, "publishedRuns", 64, 1..=4_096,
        "Live child runs a root may publish.";
    heartbeat_ms, "heartbeatMs", 5_000, 1..=3_600_000,
        "Presence refresh interval (peerwire extension). Must be below staleMs.";
    stale_ms, "staleMs", 15_000, 1..=DAY_MS,
        "Age after which readers treat a presence record as stale (peerwire extension).";
    inbound_connections, "inboundConnections", 64, 1..=65_536,
        "Concurrent authenticated connections (one thread each), the last eighth reserved for the root's own local adapters; excess ones get one QUEUE_FULL line and are closed. Connections still in the handshake have their own budget (a quarter, at least 8): when it is full the oldest is answered QUEUE_FULL and closed.";
    wait_ms_max, "waitMsMax", 30_000, 1..=DAY_MS,
        "Longest wait a read may ask for (waitMs).";
    presence_file_bytes, "presenceFileBytes", 64 * 1024, 1_024..=16 << 20,
        "Largest presence record read; bigger files are skipped, never deleted.";
    presence_files, "presenceFiles", 4_096, 1..=1_000_000,
        "Presence files read per listing: the most recently written ones (of at most 16 times as many names), so records that stopped being refreshed are the ones left out. Roots remove the records, sockets and control files of peerwire roots whose process is provably gone (pid plus process start time); other programs' records are never deleted.";
    outgoing_frames, "outgoingFrames", 64, 1..=65_536,
        "Frames queued for writing on one connection.";
    write_ms, "writeMs", 2_000, 1..=600_000,
        "Deadline of one blocking socket write; a peer that never reads is disconnected.";
    idle_ms, "idleMs", 600_000, 1..=DAY_MS * 7,
        "Idle authenticated connections are closed after this.";
    recent_nonces, "recentNonces", 4_096, 1..=10_000_000,
        "Handshake nonces remembered to refuse replays.";
    journal_bytes, "journalBytes", 4 << 20, 1..=1 << 40,
        "Journal size that triggers compaction into the snapshot. When the snapshot is larger, compaction waits until the journal holds as many bytes as the snapshot (within storageBytes), so rewriting it costs at most about one byte per journal byte.";
    commit_batch, "commitBatch", 1_024, 1..=65_536,
        "Most store operations made durable by one group commit.";
    route_retries, "routeRetries", 5, 1..=1_000,
        "Attempts for the head message of a route before it is reported unresolved.";
    resource_file_bytes, "resourceFileBytes", 1 << 20, 4_096..=64 << 20,
        "Largest resource file read.";
    resource_history, "resourceHistory", 256, 1..=1_000_000,
        "Events kept in a resource's journal.";
    resource_tickets, "resourceTickets", 1_024, 1..=1_000_000,
        "Tickets (queued and held) per resource.";
    lock_ms, "lockMs", 5_000, 1..=600_000,
        "Longest wait for a short metadata lock (TIMEOUT).";
}

/// The JSON names of all limits, in table order.
pub fn limit_names() -> impl Iterator<Item = &'static str> {
    LIMITS.iter().map(|d| d.name)
}

/// peer-config(5)'s LIMITS rows, generated from [`LIMITS`] (roff; `tests/docs.rs` checks the
/// page against it).
pub fn limits_man_rows() -> String {
    let mut s = String::new();
    for d in LIMITS {
        s += &format!(
            ".TP\n.B {}\nDefault {}, accepted {} to {}. {}\n",
            d.name,
            d.default,
            d.min,
            d.max,
            d.doc.replace('-', "\\-")
        );
    }
    s
}

/// Worst-case growth of content under JSON escaping (a control character becomes `\u00XX`).
pub const JSON_ESCAPE_FACTOR: u64 = 6;

impl Limits {
    /// Sets one limit by its JSON name, validating it as an integer within the limit's range.
    pub fn set(&mut self, name: &str, value: &Value) -> Result<()> {
        let field = format!("sessions.communication.limits.{name}");
        let def = LIMITS.iter().find(|d| d.name == name);
        let (Some(def), Some(slot)) = (def, self.slot(name)) else {
            return Err(Error::new(
                Code::ConfigInvalid,
                format!("{field} is not a known limit (see peer-config(5))"),
            ));
        };
        let n = positive_integer(&field, value)?;
        if !(def.min..=def.max).contains(&n) {
            return Err(Error::new(
                Code::ConfigInvalid,
                format!("{field} must be {} to {}, got {n}", def.min, def.max),
            ));
        }
        *slot = n;
        Ok(())
    }

    /// The cross-field rules: each names the field it refuses.
    pub fn validate(&self) -> Result<()> {
        let invalid = |m: String| Err(Error::new(Code::ConfigInvalid, m));
        for d in LIMITS {
            let v = self.get(d.name).unwrap_or(d.default);
            if !(d.min..=d.max).contains(&v) {
                return invalid(format!(
                    "sessions.communication.limits.{} must be {} to {}, got {v}",
                    d.name, d.min, d.max
                ));
            }
        }
        if self.message_bytes > self.frame_bytes {
            return invalid(format!(
                "sessions.communication.limits.messageBytes ({}) must not exceed frameBytes ({})",
                self.message_bytes, self.frame_bytes
            ));
        }
        // The largest message, escaped, plus the rest of its request must fit one frame, or a
        // send the sender's own checks accept could never be delivered.
        let needed = self.message_bytes * JSON_ESCAPE_FACTOR + FRAME_ENVELOPE_BYTES;
        if needed > self.frame_bytes {
            return invalid(format!(
                "sessions.communication.limits.messageBytes ({}) is too large for frameBytes ({}): a frame must hold {JSON_ESCAPE_FACTOR} × messageBytes + {FRAME_ENVELOPE_BYTES} = {needed} bytes",
                self.message_bytes, self.frame_bytes
            ));
        }
        let one_entry =
            self.message_bytes + internal::ENTRY_OVERHEAD_BYTES + internal::RECEIPT_RESERVE_BYTES;
        if self.storage_bytes < one_entry {
            return invalid(format!(
                "sessions.communication.limits.storageBytes ({}) must hold one largest message with its records ({one_entry} bytes)",
                self.storage_bytes
            ));
        }
        if self.expiry_ms > self.max_expiry_ms {
            return invalid(format!(
                "sessions.communication.limits.expiryMs ({}) must not exceed maxExpiryMs ({})",
                self.expiry_ms, self.max_expiry_ms
            ));
        }
        if self.heartbeat_ms >= self.stale_ms {
            return invalid(format!(
                "sessions.communication.limits.heartbeatMs ({}) must be below staleMs ({})",
                self.heartbeat_ms, self.stale_ms
            ));
        }
        Ok(())
    }
}

/// The validated `sessions.communication` object.
#[derive(Clone, Debug)]
pub struct Config {
    /// `None` when the file does not say; explicit `peer host`/`peer mcp` then enables.
    pub enabled: Option<bool>,
    pub scope: Scope,
    pub idle_behavior: IdleBehavior,
    pub alias: Option<String>,
    pub coordination_directory: Option<PathBuf>,
    pub allow_resource_control: bool,
    pub resource_wait_timeout_ms: u64,
    /// Handler command run per arrival when `idleBehavior` is `auto` (peerwire extension).
    pub auto_command: Option<Vec<String>>,
    pub limits: Limits,
}

/// The coordination file of the namespace at `home`.
pub fn file_path(home: &Path) -> PathBuf {
    home.join("config.json")
}

/// The one reader of `<home>/config.json`: private, at most [`CONFIG_FILE_BYTES_MAX`] bytes,
/// parsed by `parse` (each unit reads its own part of the file); `None` when there is no file.
/// A parse error names the file.
pub fn load_file<T>(home: &Path, parse: impl FnOnce(&[u8]) -> Result<T>) -> Result<Option<T>> {
    let path = file_path(home);
    let bytes = match crate::fsutil::read_private_bounded(&path, CONFIG_FILE_BYTES_MAX) {
        Ok(bytes) => bytes,
        Err(e) if e.code == Code::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    parse(&bytes)
        .map(Some)
        .map_err(|e| Error::new(e.code, format!("{}: {}", path.display(), e.message)))
}

impl Default for Config {
    fn default() -> Config {
        Config {
            enabled: None,
            scope: Scope::Workspace,
            idle_behavior: IdleBehavior::Notify,
            alias: None,
            coordination_directory: None,
            allow_resource_control: false,
            resource_wait_timeout_ms: 300_000,
            auto_command: None,
            limits: Limits::default(),
        }
    }
}

impl Config {
    /// Loads `<home>/config.json`; a missing file gives the defaults.
    pub fn load(home: &Path) -> Result<Config> {
        load_file(home, Config::parse).map(Option::unwrap_or_default)
    }

    /// Parses the whole config file's bytes.
    pub fn parse(bytes: &[u8]) -> Result<Config> {
        let root: Value = serde_json::from_slice(bytes)
            .map_err(|e| Error::new(Code::ConfigInvalid, format!("not valid JSON ({e})")))?;
        let Some(root) = root.as_object() else {
            return Err(Error::new(
                Code::ConfigInvalid,
                "the top level must be a JSON object",
            ));
        };
        let comm = match root.get("sessions") {
            None => return Ok(Config::default()),
            Some(Value::Object(s)) => match s.get("communication") {
                None => return Ok(Config::default()),
                Some(c) => c,
            },
            Some(_) => {
                return Err(Error::new(
                    Code::ConfigInvalid,
                    "sessions must be an object",
                ));
            }
        };
        Config::from_communication(comm)
    }

    fn from_communication(comm: &Value) -> Result<Config> {
        let Some(obj) = comm.as_object() else {
            return Err(Error::new(
                Code::ConfigInvalid,
                "sessions.communication must be an object",
            ));
        };
        let mut cfg = Config::default();
        for (key, value) in obj {
            cfg.set(key, value)?;
        }
        cfg.limits.validate()?;
        Ok(cfg)
    }

    /// Sets one `sessions.communication` field from its JSON value, validating it.
    fn set(&mut self, key: &str, value: &Value) -> Result<()> {
        let cfg = self;
        let field = format!("sessions.communication.{key}");
        match key {
            "enabled" => cfg.enabled = Some(boolean(&field, value)?),
            "scope" => {
                cfg.scope = string(&field, value).and_then(|s| {
                    Scope::parse(s).ok_or_else(|| bad(&field, "workspace, repository or machine"))
                })?
            }
            "idleBehavior" => {
                cfg.idle_behavior = match string(&field, value)? {
                    "notify" => IdleBehavior::Notify,
                    "auto" => IdleBehavior::Auto,
                    _ => return Err(bad(&field, "notify or auto")),
                }
            }
            "alias" => {
                let alias = string(&field, value)?;
                crate::identity::validate_alias(alias).map_err(|e| {
                    Error::new(Code::ConfigInvalid, format!("{field}: {}", e.message))
                })?;
                cfg.alias = Some(alias.to_string());
            }
            "coordinationDirectory" => {
                let dir = string(&field, value)?;
                if !Path::new(dir).is_absolute() {
                    return Err(bad(&field, "an absolute path"));
                }
                cfg.coordination_directory = Some(PathBuf::from(dir));
            }
            "allowResourceControl" => cfg.allow_resource_control = boolean(&field, value)?,
            "resourceWaitTimeoutMs" => {
                let n = positive_integer(&field, value)?;
                if n > RESOURCE_WAIT_TIMEOUT_MS_MAX {
                    return Err(bad(
                        &field,
                        &format!("at most {RESOURCE_WAIT_TIMEOUT_MS_MAX}, got {n}"),
                    ));
                }
                cfg.resource_wait_timeout_ms = n
            }
            "autoCommand" => {
                let Some(items) = value.as_array().filter(|a| !a.is_empty()) else {
                    return Err(bad(&field, "a non-empty array of strings"));
                };
                let mut argv = Vec::with_capacity(items.len());
                for item in items {
                    argv.push(string(&field, item)?.to_string());
                }
                cfg.auto_command = Some(argv);
            }
            "limits" => {
                let Some(limits) = value.as_object() else {
                    return Err(bad(&field, "an object"));
                };
                for (name, v) in limits {
                    cfg.limits.set(name, v)?;
                }
            }
            _ => {
                return Err(Error::new(
                    Code::ConfigInvalid,
                    format!("{field} is not a known setting (see peer-config(5))"),
                ));
            }
        }
        Ok(())
    }
}
fn bad(field: &str, expected: &str) -> Error {
    Error::new(Code::ConfigInvalid, format!("{field} must be {expected}"))
}

fn boolean(field: &str, value: &Value) -> Result<bool> {
    value.as_bool().ok_or_else(|| bad(field, "true or false"))
}

fn string<'a>(field: &str, value: &'a Value) -> Result<&'a str> {
    value.as_str().ok_or_else(|| bad(field, "a string"))
}

/// A positive integer that fits in u64; negatives, zero, fractions and strings are refused.
pub fn positive_integer(field: &str, value: &Value) -> Result<u64> {
    match value.as_u64() {
        Some(n) if n > 0 => Ok(n),
        _ => Err(Error::new(
            Code::ConfigInvalid,
            format!(
                "{field} must be a positive integer, got {}",
                crate::sanitize::line(&value.to_string(), 40)
            ),
        )),
    }
}

/// Where the namespace lives: `--home`, then `$PEER_HOME`, `$AUTOHAND_HOME` (when non-empty),
/// then `~/.autohand`.
pub fn resolve_home(flag: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = flag {
        return absolute(p);
    }
    for var in ["PEER_HOME", "AUTOHAND_HOME"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            return absolute(Path::new(&v));
        }
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".autohand")),
        None => Err(Error::new(
            Code::ConfigInvalid,
            "cannot find the namespace: set --home, PEER_HOME or HOME",
        )),
    }
}

fn absolute(p: &Path) -> Result<PathBuf> {
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    std::env::current_dir()
        .map(|cwd| cwd.join(p))
        .map_err(|e| Error::new(Code::Io, format!("cannot read the current directory: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Config> {
        Config::parse(s.as_bytes())
    }

    #[test]
    fn defaults_match_the_protocol() {
        let c = parse("{}").unwrap();
        assert_eq!(c.enabled, None);
        assert_eq!(c.scope, Scope::Workspace);
        assert_eq!(c.resource_wait_timeout_ms, 300_000);
        let l = &c.limits;
        assert_eq!(
            (l.frame_bytes, l.message_bytes, l.inbox_messages),
            (65_536, 8_000, 32)
        );
        assert_eq!(
            (l.pending_requests, l.connections, l.storage_bytes),
            (32, 16, 10 << 20)
        );
        assert_eq!(
            (
                l.rate_per_second,
                l.rate_burst,
                l.handshake_ms,
                l.acknowledgement_ms
            ),
            (10, 20, 2000, 2000)
        );
        assert_eq!(
            (l.expiry_ms, l.max_expiry_ms, l.retention_ms),
            (600_000, 3_600_000, 86_400_000)
        );
        assert_eq!(
            (l.automatic_replies, l.directory_page_size, l.published_runs),
            (8, 50, 64)
        );
        assert_eq!((l.heartbeat_ms, l.stale_ms), (5_000, 15_000));
    }

    #[test]
    fn every_limit_is_settable_within_its_range_and_refused_outside_it() {
        let mut l = Limits::default();
        for d in LIMITS {
            assert!(d.min <= d.default && d.default <= d.max, "{}", d.name);
            assert_eq!(l.get(d.name), Some(d.default));
            for ok in [d.min, d.max] {
                l.set(d.name, &serde_json::json!(ok)).unwrap();
                assert_eq!(l.get(d.name), Some(ok));
            }
            for bad in [d.min - 1, d.max + 1] {
                let e = l.set(d.name, &serde_json::json!(bad)).unwrap_err();
                assert_eq!(e.code, Code::ConfigInvalid);
                assert!(e.message.contains(d.name), "{}", e.message);
            }
        }
        assert_eq!(limit_names().count(), LIMITS.len());
        Limits::default().validate().unwrap();
    }

    /// Values that used to pass validation and then panicked a root (a queue of 2^64 slots, a
    /// frame of 2^64 bytes) are refused at load, naming the field.
    #[test]
    fn extreme_values_are_refused_at_load_naming_the_field() {
        for (name, value) in [
            ("commitBatch", "18446744073709551615"),
            ("outgoingFrames", "18446744073709551615"),
            ("outgoingFrames", "1000000000"),
            ("frameBytes", "18446744073709551615"),
            ("pendingRequests", "18446744073709551615"),
            ("inboundConnections", "18446744073709551615"),
            ("recentNonces", "18446744073709551615"),
            ("waitMsMax", "18446744073709551615"),
        ] {
            let e = parse(&format!(
                r#"{{"sessions":{{"communication":{{"limits":{{"{name}":{value}}}}}}}}}"#
            ))
            .unwrap_err();
            assert_eq!(e.code, Code::ConfigInvalid, "{name}");
            assert!(
                e.message.contains(&format!("limits.{name} must be")),
                "{name}: {}",
                e.message
            );
        }
        // Cross-field rules name the field too.
        let e = parse(r#"{"sessions":{"communication":{"limits":{"messageBytes":20000}}}}"#)
            .unwrap_err();
        assert!(
            e.message.contains("messageBytes (20000) is too large"),
            "{}",
            e.message
        );
        let e =
            parse(r#"{"sessions":{"communication":{"resourceWaitTimeoutMs":1e300}}}"#).unwrap_err();
        assert!(e.message.contains("resourceWaitTimeoutMs"), "{}", e.message);
        let e = parse(
            r#"{"sessions":{"communication":{"resourceWaitTimeoutMs":18446744073709551615}}}"#,
        )
        .unwrap_err();
        assert!(
            e.message.contains("resourceWaitTimeoutMs must be at most"),
            "{}",
            e.message
        );
        let e = parse(r#"{"sessions":{"communication":{"limits":{"storageBytes":1000}}}}"#)
            .unwrap_err();
        assert!(
            e.message.contains("limits.storageBytes (1000)"),
            "{}",
            e.message
        );
    }

    #[test]
    fn bad_values_name_the_field() {
        let e =
            parse(r#"{"sessions":{"communication":{"limits":{"inboxMessages":-1}}}}"#).unwrap_err();
        assert_eq!(e.code, Code::ConfigInvalid);
        assert!(
            e.message
                .contains("limits.inboxMessages must be a positive integer"),
            "{}",
            e.message
        );
        for bad in ["0", "1.5", "\"3\"", "null"] {
            let e = parse(&format!(
                r#"{{"sessions":{{"communication":{{"limits":{{"frameBytes":{bad}}}}}}}}}"#
            ))
            .unwrap_err();
            assert!(e.message.contains("frameBytes"), "{}", e.message);
        }
        let e = parse(r#"{"sessions":{"communication":{"limits":{"messageBytes":70000}}}}"#)
            .unwrap_err();
        assert!(
            e.message
                .contains("messageBytes (70000) must not exceed frameBytes"),
            "{}",
            e.message
        );
        let e =
            parse(r#"{"sessions":{"communication":{"limits":{"expiryMs":4000000}}}}"#).unwrap_err();
        assert!(e.message.contains("expiryMs"), "{}", e.message);
        let e = parse(r#"{"sessions":{"communication":{"scope":"galaxy"}}}"#).unwrap_err();
        assert!(
            e.message.contains("sessions.communication.scope"),
            "{}",
            e.message
        );
        let e = parse(r#"{"sessions":{"communication":{"limits":{"frameByte":1}}}}"#).unwrap_err();
        assert!(
            e.message.contains("frameByte is not a known limit"),
            "{}",
            e.message
        );
        assert!(
            parse("{not json")
                .unwrap_err()
                .message
                .contains("not valid JSON")
        );
    }

    #[test]
    fn enabled_false_is_kept() {
        let c = parse(r#"{"sessions":{"communication":{"enabled":false}}}"#).unwrap();
        assert_eq!(c.enabled, Some(false));
    }
}
