//! The `"ask"` object of `<home>/config.json` (peer-config(5)): dsh-ask-peer's keys plus
//! `answerCommand` and peerwire's bounds. Validation is strict like `sessions.communication`:
//! an unknown key, a wrong type or a number out of bounds is `CONFIG_INVALID` naming the field.

use crate::error::{Code, Error, Result};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// dsh-ask-peer's default port.
pub const DEFAULT_PORT: u16 = 3877;
const PEERS_MAX: usize = 256;
const TAGS_MAX: usize = 32;
const TAG_CHARS_MAX: usize = 64;
const DESCRIPTION_CHARS_MAX: usize = 1000;
const TOKEN_CHARS_MAX: usize = 512;
const HOST_CHARS_MAX: usize = 255;
const NAME_CHARS_MAX: usize = 64;
const ARGV_MAX: usize = 64;

/// Per-friend inbound policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The owner approves or declines each ask (default).
    Ask,
    /// Answered without asking the owner.
    Auto,
    /// Refused with 403.
    Deny,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Ask => "ask",
            Mode::Auto => "auto",
            Mode::Deny => "deny",
        }
    }
}

/// One `peers[]` entry: a friend we may ask, and the inbound allowlist entry for that name.
#[derive(Clone, Debug)]
pub struct Friend {
    pub name: String,
    pub host: String,
    pub port: u16,
    /// Shared secret; never empty when present.
    pub token: Option<String>,
    /// The friend's sign as configured, and the key it decodes to.
    pub public_key: Option<String>,
    pub key: Option<[u8; 32]>,
    pub mode: Mode,
    pub description: Option<String>,
    /// `"tls"` as configured: `Some(false)` forces plain HTTP, `Some(true)` requires TLS (and
    /// a pinned key), `None` is TLS exactly when a key is pinned (see `ask::tls::transport`).
    pub tls: Option<bool>,
    /// `"acceptDshSignatures"`: also accept dsh-ask-peer's replayable signatures (no
    /// timestamp or nonce) from this keyed friend, only together with its token.
    pub accept_dsh_signatures: bool,
}

/// The validated `"ask"` object.
#[derive(Clone, Debug)]
pub struct AskConfig {
    pub caller_name: String,
    /// `None`: `<home>/ask/keys`.
    pub key_dir: Option<PathBuf>,
    pub description: String,
    pub tags: Vec<String>,
    pub roster_refresh_ms: u64,
    pub listen: bool,
    pub listen_host: String,
    pub listen_port: u16,
    /// The address friends reach this server at, named in friend cards; unset, `listenHost`
    /// is used unless it is a wildcard (then cards are refused rather than made unreachable).
    pub advertised_host: Option<String>,
    pub peers: Vec<Friend>,
    pub require_token: bool,
    /// `None`: the server's working directory.
    pub workspace: Option<PathBuf>,
    pub timeout_ms: u64,
    pub max_answer_chars: usize,
    pub approval_timeout_ms: u64,
    pub answer_command: Option<Vec<String>>,
    /// Answer even where the kernel cannot enforce Landlock (weaker: no-new-privileges,
    /// process group and timeout only).
    pub allow_unenforced_sandbox: bool,
    /// How long a finished async result stays readable (at most the protocol's 10 minutes).
    pub result_ttl_ms: u64,
    pub max_concurrent_asks: usize,
    pub max_stored_asks: usize,
    pub max_pending_approvals: usize,
    pub max_connections: usize,
    pub max_context_files: usize,
    pub max_context_file_bytes: u64,
    pub friend_asks_per_minute: u32,
    pub address_failures_per_minute: u32,
    pub header_timeout_ms: u64,
    pub body_timeout_ms: u64,
}

impl Default for AskConfig {
    fn default() -> AskConfig {
        AskConfig {
            caller_name: "local".into(),
            key_dir: None,
            description: String::new(),
            tags: Vec::new(),
            roster_refresh_ms: 60_000,
            listen: false,
            listen_host: "127.0.0.1".into(),
            listen_port: DEFAULT_PORT,
            advertised_host: None,
            peers: Vec::new(),
            require_token: true,
            workspace: None,
            timeout_ms: 120_000,
            max_answer_chars: 48_000,
            approval_timeout_ms: 120_000,
            answer_command: None,
            allow_unenforced_sandbox: false,
            result_ttl_ms: 600_000,
            max_concurrent_asks: 4,
            max_stored_asks: 256,
            max_pending_approvals: 32,
            max_connections: 64,
            max_context_files: 16,
            max_context_file_bytes: 256 * 1024,
            friend_asks_per_minute: 30,
            address_failures_per_minute: 60,
            header_timeout_ms: 5_000,
            body_timeout_ms: 10_000,
        }
    }
}

impl AskConfig {
    /// Loads the `"ask"` object of `<home>/config.json`; a missing file or key gives defaults.
    pub fn load(home: &Path) -> Result<AskConfig> {
        let path = home.join("config.json");
        let bytes = match crate::fsutil::read_private_bounded(
            &path,
            crate::config::CONFIG_FILE_BYTES_MAX,
        ) {
            Ok(bytes) => bytes,
            Err(e) if e.code == Code::NotFound => return Ok(AskConfig::default()),
            Err(e) => return Err(e),
        };
        AskConfig::parse(&bytes)
            .map_err(|e| Error::new(e.code, format!("{}: {}", path.display(), e.message)))
    }

    /// Parses the whole config file's bytes and validates its `"ask"` object.
    pub fn parse(bytes: &[u8]) -> Result<AskConfig> {
        let root: Value = serde_json::from_slice(bytes)
            .map_err(|e| Error::new(Code::ConfigInvalid, format!("not valid JSON ({e})")))?;
        match root.get("ask") {
            None => Ok(AskConfig::default()),
            Some(Value::Object(obj)) => AskConfig::from_object(obj),
            Some(_) => Err(bad("ask", "an object")),
        }
    }

    /// The key directory: `keyDir`, else `<home>/ask/keys`.
    pub fn key_dir(&self, home: &Path) -> PathBuf {
        self.key_dir
            .clone()
            .unwrap_or_else(|| home.join("ask").join("keys"))
    }

    /// The friend with this exact name.
    pub fn friend(&self, name: &str) -> Option<&Friend> {
        self.peers.iter().find(|f| f.name == name)
    }

    pub fn from_object(obj: &Map<String, Value>) -> Result<AskConfig> {
        let mut c = AskConfig::default();
        for (key, value) in obj {
            let f = format!("ask.{key}");
            let f = f.as_str();
            match key.as_str() {
                "callerName" => c.caller_name = name(f, value)?,
                "keyDir" => c.key_dir = Some(absolute(f, value)?),
                "description" => c.description = text(f, value, DESCRIPTION_CHARS_MAX)?,
                "tags" => c.tags = tags(f, value)?,
                "rosterRefreshMs" => {
                    c.roster_refresh_ms = int_or_zero(f, value, 1_000, 86_400_000)?
                }
                "listen" => c.listen = boolean(f, value)?,
                "listenHost" => c.listen_host = host(f, value)?,
                "listenPort" => c.listen_port = int(f, value, 0, 65_535)? as u16,
                "advertisedHost" => c.advertised_host = Some(host(f, value)?),
                "peers" => c.peers = friends(f, value)?,
                "requireToken" => c.require_token = boolean(f, value)?,
                "workspace" => c.workspace = Some(absolute(f, value)?),
                "timeoutMs" => c.timeout_ms = int(f, value, 100, 600_000)?,
                "maxAnswerChars" => c.max_answer_chars = int(f, value, 1, 1_000_000)? as usize,
                "approvalTimeoutMs" => c.approval_timeout_ms = int(f, value, 100, 3_600_000)?,
                "allowExecution" => {
                    if boolean(f, value)? {
                        return Err(bad(f, "false: answers are always read-only"));
                    }
                }
                "answerCommand" => c.answer_command = Some(argv(f, value)?),
                "allowUnenforcedSandbox" => c.allow_unenforced_sandbox = boolean(f, value)?,
                "resultTtlMs" => c.result_ttl_ms = int(f, value, 100, 600_000)?,
                "maxConcurrentAsks" => c.max_concurrent_asks = int(f, value, 1, 64)? as usize,
                "maxStoredAsks" => c.max_stored_asks = int(f, value, 1, 4_096)? as usize,
                "maxPendingApprovals" => {
                    c.max_pending_approvals = int(f, value, 1, 1_024)? as usize
                }
                "maxConnections" => c.max_connections = int(f, value, 1, 1_024)? as usize,
                "maxContextFiles" => c.max_context_files = int(f, value, 0, 64)? as usize,
                "maxContextFileBytes" => c.max_context_file_bytes = int(f, value, 1, 1 << 20)?,
                "friendAsksPerMinute" => {
                    c.friend_asks_per_minute = int(f, value, 1, 10_000)? as u32
                }
                "addressFailuresPerMinute" => {
                    c.address_failures_per_minute = int(f, value, 1, 100_000)? as u32
                }
                "headerTimeoutMs" => c.header_timeout_ms = int(f, value, 100, 60_000)?,
                "bodyTimeoutMs" => c.body_timeout_ms = int(f, value, 100, 120_000)?,
                _ => {
                    return Err(Error::new(
                        Code::ConfigInvalid,
                        format!("{f} is not a known setting (see peer-config(5))"),
                    ));
                }
            }
        }
        Ok(c)
    }
}

fn friends(field: &str, value: &Value) -> Result<Vec<Friend>> {
    let items = value.as_array().ok_or_else(|| bad(field, "an array"))?;
    if items.len() > PEERS_MAX {
        return Err(bad(field, &format!("at most {PEERS_MAX} entries")));
    }
    let mut out: Vec<Friend> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let friend = friend(&format!("{field}[{i}]"), item)?;
        if out.iter().any(|f| f.name == friend.name) {
            return Err(bad(&format!("{field}[{i}].name"), "unique among peers"));
        }
        out.push(friend);
    }
    Ok(out)
}

fn friend(field: &str, value: &Value) -> Result<Friend> {
    let obj = value.as_object().ok_or_else(|| bad(field, "an object"))?;
    let mut f = Friend {
        name: String::new(),
        host: String::new(),
        port: DEFAULT_PORT,
        token: None,
        public_key: None,
        key: None,
        mode: Mode::Ask,
        description: None,
        tls: None,
        accept_dsh_signatures: false,
    };
    for (key, v) in obj {
        let k = format!("{field}.{key}");
        let k = k.as_str();
        match key.as_str() {
            "name" => f.name = name(k, v)?,
            "host" => f.host = host(k, v)?,
            "port" => f.port = int(k, v, 1, 65_535)? as u16,
            "token" => f.token = Some(token(k, v)?),
            "publicKey" => {
                let s = text(k, v, TOKEN_CHARS_MAX)?;
                let key = super::canon::parse_sign(&s)
                    .map_err(|e| Error::new(Code::ConfigInvalid, format!("{k}: {}", e.message)))?;
                f.key = Some(key);
                f.public_key = Some(s);
            }
            "mode" => {
                f.mode = match v.as_str() {
                    Some("ask") => Mode::Ask,
                    Some("auto") => Mode::Auto,
                    Some("deny") => Mode::Deny,
                    _ => return Err(bad(k, "ask, auto or deny")),
                }
            }
            "description" => f.description = Some(text(k, v, DESCRIPTION_CHARS_MAX)?),
            "tls" => f.tls = Some(boolean(k, v)?),
            "acceptDshSignatures" => f.accept_dsh_signatures = boolean(k, v)?,
            _ => {
                return Err(Error::new(
                    Code::ConfigInvalid,
                    format!("{k} is not a known setting (see peer-config(5))"),
                ));
            }
        }
    }
    if f.name.is_empty() {
        return Err(bad(&format!("{field}.name"), "present"));
    }
    if f.host.is_empty() {
        return Err(bad(&format!("{field}.host"), "present"));
    }
    if f.tls == Some(true) && f.key.is_none() {
        return Err(bad(
            &format!("{field}.tls"),
            "false or absent unless publicKey is set (TLS verifies the server by that key)",
        ));
    }
    check_dsh_signatures(&f, field)?;
    Ok(f)
}

/// A friend's shared token: a non-empty string within the bound.
fn token(k: &str, v: &Value) -> Result<String> {
    let t = text(k, v, TOKEN_CHARS_MAX)?;
    if t.is_empty() {
        return Err(bad(
            k,
            "a non-empty string (an empty token never authenticates)",
        ));
    }
    Ok(t)
}

/// `acceptDshSignatures` is only meaningful, and only allowed, beside the pinned key the
/// signatures are checked against and the token they must come with.
fn check_dsh_signatures(f: &Friend, field: &str) -> Result<()> {
    if f.accept_dsh_signatures && (f.key.is_none() || f.token.is_none()) {
        return Err(bad(
            &format!("{field}.acceptDshSignatures"),
            "false or absent unless both publicKey and token are set (a replayable dsh \
             signature is accepted only together with the friend's token)",
        ));
    }
    Ok(())
}

fn bad(field: &str, expected: &str) -> Error {
    Error::new(Code::ConfigInvalid, format!("{field} must be {expected}"))
}

fn boolean(field: &str, value: &Value) -> Result<bool> {
    value.as_bool().ok_or_else(|| bad(field, "true or false"))
}

fn text(field: &str, value: &Value, max_chars: usize) -> Result<String> {
    let s = value.as_str().ok_or_else(|| bad(field, "a string"))?;
    if s.chars().count() > max_chars {
        return Err(bad(field, &format!("at most {max_chars} characters")));
    }
    Ok(s.to_string())
}

/// A name that is also safe as a file name (`<name>.key`): letters, digits, `.`, `_`, `-`,
/// not starting with `.`, 1–64 characters.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= NAME_CHARS_MAX
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn name(field: &str, value: &Value) -> Result<String> {
    let s = value.as_str().ok_or_else(|| bad(field, "a string"))?;
    if !valid_name(s) {
        return Err(bad(
            field,
            "1-64 letters, digits, '.', '_' or '-', not starting with '.'",
        ));
    }
    Ok(s.to_string())
}

fn host(field: &str, value: &Value) -> Result<String> {
    let s = value.as_str().ok_or_else(|| bad(field, "a string"))?;
    let ok = !s.is_empty()
        && s.len() <= HOST_CHARS_MAX
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'_'));
    if !ok {
        return Err(bad(field, "a host name or IP address"));
    }
    Ok(s.to_string())
}

fn absolute(field: &str, value: &Value) -> Result<PathBuf> {
    let s = value.as_str().ok_or_else(|| bad(field, "a string"))?;
    if !Path::new(s).is_absolute() {
        return Err(bad(field, "an absolute path"));
    }
    Ok(PathBuf::from(s))
}

fn tags(field: &str, value: &Value) -> Result<Vec<String>> {
    let items = value
        .as_array()
        .ok_or_else(|| bad(field, "an array of strings"))?;
    if items.len() > TAGS_MAX {
        return Err(bad(field, &format!("at most {TAGS_MAX} tags")));
    }
    items
        .iter()
        .map(|t| text(field, t, TAG_CHARS_MAX))
        .collect()
}

fn argv(field: &str, value: &Value) -> Result<Vec<String>> {
    let Some(items) = value
        .as_array()
        .filter(|a| !a.is_empty() && a.len() <= ARGV_MAX)
    else {
        return Err(bad(
            field,
            &format!("a non-empty array of at most {ARGV_MAX} strings"),
        ));
    };
    items.iter().map(|i| text(field, i, 4096)).collect()
}

/// An integer in `min..=max`; fractions, strings and negatives are refused.
fn int(field: &str, value: &Value, min: u64, max: u64) -> Result<u64> {
    match value.as_u64() {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(bad(field, &format!("an integer from {min} to {max}"))),
    }
}

/// 0 (meaning "off") or an integer in `min..=max`.
fn int_or_zero(field: &str, value: &Value, min: u64, max: u64) -> Result<u64> {
    match value.as_u64() {
        Some(0) => Ok(0),
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(bad(field, &format!("0 or an integer from {min} to {max}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(ask: Value) -> Result<AskConfig> {
        AskConfig::parse(serde_json::json!({ "ask": ask }).to_string().as_bytes())
    }

    #[test]
    fn defaults_match_dsh() {
        let c = parse(serde_json::json!({})).unwrap();
        assert_eq!(c.caller_name, "local");
        assert_eq!(c.listen_port, 3877);
        assert!(c.require_token);
        assert_eq!(c.max_answer_chars, 48_000);
        assert!(AskConfig::parse(b"{}").is_ok());
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (serde_json::json!({"bogus": 1}), "ask.bogus"),
            (serde_json::json!({"listen": "yes"}), "ask.listen"),
            (serde_json::json!({"timeoutMs": 0}), "ask.timeoutMs"),
            (
                serde_json::json!({"maxAnswerChars": 1.5}),
                "ask.maxAnswerChars",
            ),
            (
                serde_json::json!({"peers": [{"name": "bob"}]}),
                "ask.peers[0].host",
            ),
            (
                serde_json::json!({"peers": [{"name": "b", "host": "h", "token": ""}]}),
                "ask.peers[0].token",
            ),
            (
                serde_json::json!({"peers": [{"name": "b", "host": "h", "mode": "yes"}]}),
                "ask.peers[0].mode",
            ),
            (
                serde_json::json!({"peers": [{"name": "b", "host": "h", "publicKey": "ed25519:AAAA"}]}),
                "ask.peers[0].publicKey",
            ),
            (
                serde_json::json!({"peers": [{"name": "b", "host": "h", "x": 1}]}),
                "ask.peers[0].x",
            ),
            (serde_json::json!({"callerName": "../x"}), "ask.callerName"),
            (serde_json::json!({"workspace": "rel"}), "ask.workspace"),
            (
                serde_json::json!({"allowExecution": true}),
                "ask.allowExecution",
            ),
            (
                serde_json::json!({"answerCommand": []}),
                "ask.answerCommand",
            ),
        ];
        for (value, field) in cases {
            let e = parse(value.clone()).unwrap_err();
            assert_eq!(e.code, Code::ConfigInvalid, "{value}");
            assert!(e.message.contains(field), "{value}: {}", e.message);
        }
    }

    #[test]
    fn friends_parse() {
        let c = parse(serde_json::json!({"peers": [
            {"name": "bob", "host": "10.0.0.2", "token": "s3cret", "mode": "auto"},
            {"name": "ada", "host": "h", "port": 4000, "publicKey": "ed25519:LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0KTUNvd0JRWURLMlZ3QXlFQUE2RUh2L1BPRUw0ZGNOMFk1MHZBbVdmazFqQ2JwUTFmSGR5R1pCSlZNYmc9Ci0tLS0tRU5EIFBVQkxJQyBLRVktLS0tLQo"}
        ]}))
        .unwrap();
        assert_eq!(c.friend("bob").unwrap().mode, Mode::Auto);
        assert_eq!(c.friend("ada").unwrap().port, 4000);
        assert!(c.friend("ada").unwrap().key.is_some());
        assert!(parse(serde_json::json!({"peers": [{"name": "a", "host": "h"}, {"name": "a", "host": "h"}]})).is_err());
    }
}
