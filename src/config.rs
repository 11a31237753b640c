//! `sessions.communication` in `<ns>/config.json`: every field and limit of the seed with its
//! default, validated once at start-up, plus namespace resolution.

use crate::error::{Code, Error, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Largest config file we read; anything bigger is refused before parsing.
pub const CONFIG_FILE_BYTES_MAX: u64 = 1 << 20;

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

/// Every bound of the runtime. The first block is the seed's table with its defaults; the
/// second holds peerwire's own bounds, documented in `peer-config(5)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    pub frame_bytes: u64,
    pub message_bytes: u64,
    pub inbox_messages: u64,
    pub pending_requests: u64,
    pub connections: u64,
    pub storage_bytes: u64,
    pub rate_per_second: u64,
    pub rate_burst: u64,
    pub handshake_ms: u64,
    pub acknowledgement_ms: u64,
    pub expiry_ms: u64,
    pub max_expiry_ms: u64,
    pub retention_ms: u64,
    pub automatic_replies: u64,
    pub directory_page_size: u64,
    pub published_runs: u64,
    // peerwire's own bounds.
    pub heartbeat_ms: u64,
    pub stale_ms: u64,
    pub inbound_connections: u64,
    pub wait_ms_max: u64,
    pub presence_file_bytes: u64,
    pub presence_files: u64,
    pub outgoing_frames: u64,
    pub write_ms: u64,
    pub idle_ms: u64,
    pub recent_nonces: u64,
    pub journal_bytes: u64,
    pub commit_batch: u64,
    pub route_retries: u64,
    pub resource_file_bytes: u64,
    pub resource_history: u64,
    pub resource_tickets: u64,
    pub lock_ms: u64,
}

/// The limit names as they appear in JSON, in the order of [`Limits`]' fields.
pub const LIMIT_NAMES: [&str; 33] = [
    "frameBytes",
    "messageBytes",
    "inboxMessages",
    "pendingRequests",
    "connections",
    "storageBytes",
    "ratePerSecond",
    "rateBurst",
    "handshakeMs",
    "acknowledgementMs",
    "expiryMs",
    "maxExpiryMs",
    "retentionMs",
    "automaticReplies",
    "directoryPageSize",
    "publishedRuns",
    "heartbeatMs",
    "staleMs",
    "inboundConnections",
    "waitMsMax",
    "presenceFileBytes",
    "presenceFiles",
    "outgoingFrames",
    "writeMs",
    "idleMs",
    "recentNonces",
    "journalBytes",
    "commitBatch",
    "routeRetries",
    "resourceFileBytes",
    "resourceHistory",
    "resourceTickets",
    "lockMs",
];

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            frame_bytes: 65_536,
            message_bytes: 8_000,
            inbox_messages: 32,
            pending_requests: 32,
            connections: 16,
            storage_bytes: 10 * 1024 * 1024,
            rate_per_second: 10,
            rate_burst: 20,
            handshake_ms: 2_000,
            acknowledgement_ms: 2_000,
            expiry_ms: 10 * 60 * 1000,
            max_expiry_ms: 60 * 60 * 1000,
            retention_ms: 24 * 60 * 60 * 1000,
            automatic_replies: 8,
            directory_page_size: 50,
            published_runs: 64,
            heartbeat_ms: 5_000,
            stale_ms: 15_000,
            inbound_connections: 64,
            wait_ms_max: 30_000,
            presence_file_bytes: 64 * 1024,
            presence_files: 4_096,
            outgoing_frames: 64,
            write_ms: 2_000,
            idle_ms: 10 * 60 * 1000,
            recent_nonces: 4_096,
            journal_bytes: 4 * 1024 * 1024,
            commit_batch: 1_024,
            route_retries: 5,
            resource_file_bytes: 1024 * 1024,
            resource_history: 256,
            resource_tickets: 1_024,
            lock_ms: 5_000,
        }
    }
}

impl Limits {
    fn slot(&mut self, name: &str) -> Option<&mut u64> {
        let i = LIMIT_NAMES.iter().position(|n| *n == name)?;
        let fields: [&mut u64; 33] = [
            &mut self.frame_bytes,
            &mut self.message_bytes,
            &mut self.inbox_messages,
            &mut self.pending_requests,
            &mut self.connections,
            &mut self.storage_bytes,
            &mut self.rate_per_second,
            &mut self.rate_burst,
            &mut self.handshake_ms,
            &mut self.acknowledgement_ms,
            &mut self.expiry_ms,
            &mut self.max_expiry_ms,
            &mut self.retention_ms,
            &mut self.automatic_replies,
            &mut self.directory_page_size,
            &mut self.published_runs,
            &mut self.heartbeat_ms,
            &mut self.stale_ms,
            &mut self.inbound_connections,
            &mut self.wait_ms_max,
            &mut self.presence_file_bytes,
            &mut self.presence_files,
            &mut self.outgoing_frames,
            &mut self.write_ms,
            &mut self.idle_ms,
            &mut self.recent_nonces,
            &mut self.journal_bytes,
            &mut self.commit_batch,
            &mut self.route_retries,
            &mut self.resource_file_bytes,
            &mut self.resource_history,
            &mut self.resource_tickets,
            &mut self.lock_ms,
        ];
        fields.into_iter().nth(i)
    }

    /// Reads one limit by its JSON name (for reports and tests).
    pub fn get(&self, name: &str) -> Option<u64> {
        let mut copy = self.clone();
        copy.slot(name).map(|v| *v)
    }

    /// Sets one limit by its JSON name, validating it as a positive integer.
    pub fn set(&mut self, name: &str, value: &Value) -> Result<()> {
        let slot = self.slot(name).ok_or_else(|| {
            Error::new(
                Code::ConfigInvalid,
                format!(
                    "sessions.communication.limits.{name} is not a known limit (see peer-config(5))"
                ),
            )
        })?;
        *slot = positive_integer(&format!("sessions.communication.limits.{name}"), value)?;
        Ok(())
    }

    /// The cross-field rules of the seed.
    pub fn validate(&self) -> Result<()> {
        if self.message_bytes > self.frame_bytes {
            return Err(Error::new(
                Code::ConfigInvalid,
                format!(
                    "sessions.communication.limits.messageBytes ({}) must not exceed frameBytes ({})",
                    self.message_bytes, self.frame_bytes
                ),
            ));
        }
        if self.expiry_ms > self.max_expiry_ms {
            return Err(Error::new(
                Code::ConfigInvalid,
                format!(
                    "sessions.communication.limits.expiryMs ({}) must not exceed maxExpiryMs ({})",
                    self.expiry_ms, self.max_expiry_ms
                ),
            ));
        }
        if self.heartbeat_ms >= self.stale_ms {
            return Err(Error::new(
                Code::ConfigInvalid,
                format!(
                    "sessions.communication.limits.heartbeatMs ({}) must be below staleMs ({})",
                    self.heartbeat_ms, self.stale_ms
                ),
            ));
        }
        // A frame must hold the largest message plus its JSON-RPC envelope and escaping.
        if self.frame_bytes < 1024 {
            return Err(Error::new(
                Code::ConfigInvalid,
                "sessions.communication.limits.frameBytes must be at least 1024",
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
        let path = home.join("config.json");
        let bytes = match crate::fsutil::read_private_bounded(&path, CONFIG_FILE_BYTES_MAX) {
            Ok(bytes) => bytes,
            Err(e) if e.code == Code::NotFound => return Ok(Config::default()),
            Err(e) => return Err(e),
        };
        Config::parse(&bytes)
            .map_err(|e| Error::new(e.code, format!("{}: {}", path.display(), e.message)))
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
            let field = format!("sessions.communication.{key}");
            match key.as_str() {
                "enabled" => cfg.enabled = Some(boolean(&field, value)?),
                "scope" => {
                    cfg.scope = string(&field, value).and_then(|s| {
                        Scope::parse(s)
                            .ok_or_else(|| bad(&field, "workspace, repository or machine"))
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
                    cfg.resource_wait_timeout_ms = positive_integer(&field, value)?
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
        }
        cfg.limits.validate()?;
        Ok(cfg)
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
    fn defaults_match_the_seed() {
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
    fn every_limit_name_is_settable() {
        let mut l = Limits::default();
        for name in LIMIT_NAMES {
            l.set(name, &serde_json::json!(123_456)).unwrap();
            assert_eq!(l.get(name), Some(123_456));
        }
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
