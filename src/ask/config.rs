//! The `"ask"` object of `<home>/config.json` (peer-config(5)): dsh-ask-peer's keys plus
//! `answerCommand` and peerwire's bounds. Validation is strict like `sessions.communication`:
//! an unknown key, a wrong type or a number out of bounds is `CONFIG_INVALID` naming the field.

use crate::config::internal::{
    ANSWER_ARGV_MAX, ANSWER_READ_PATHS_MAX, ASK_CARD_URL_CHARS_MAX, ASK_DESCRIPTION_CHARS_MAX,
    ASK_FRIENDS_MAX, ASK_HOST_CHARS_MAX, ASK_NAME_CHARS_MAX, ASK_TAG_CHARS_MAX, ASK_TAGS_MAX,
    ASK_TOKEN_CHARS_MAX, ASK_TOKEN_CHARS_MIN, ASK_TOKEN_DISTINCT_MIN, ASK_TOKEN_HEX_CHARS_MIN,
};
use crate::error::{Code, Error, Result};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// dsh-ask-peer's default port.
pub const DEFAULT_PORT: u16 = 3877;

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
    /// What `peer ask` speaks to this friend (`"protocol"`); the inbound side accepts both.
    pub protocol: Protocol,
    /// `"cardUrl"`: where an A2A friend's agent card is (default
    /// `http://host:port/.well-known/agent-card.json`).
    pub card_url: Option<String>,
}

/// The protocol `peer ask` speaks to a friend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// The dsh-ask-peer HTTP protocol (`POST /ask`).
    Dsh,
    /// A2A 1.0 over JSON-RPC, found through the friend's agent card.
    A2a,
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
    /// `answerIsolation: "reduced"` (or the older `allowUnenforcedSandbox: true`): answer even
    /// where the kernel lacks user namespaces or Landlock, with whatever layers it has.
    pub reduced_isolation: bool,
    /// `answerReadPaths`: absolute paths bound read-only into the answerer's file system.
    pub answer_read_paths: Vec<PathBuf>,
    /// `answerNetwork`: the `host:port` destinations the answerer may reach through the
    /// server's CONNECT proxy (none by default).
    pub answer_network: Vec<String>,
    /// `answerMemoryMb`: the answerer's address space (RLIMIT_AS) and scratch tmpfs size.
    pub answer_memory_mb: u64,
    /// `answerCpuSeconds`: CPU time per answerer process (RLIMIT_CPU).
    pub answer_cpu_seconds: u64,
    /// `answerProcesses`: processes alive at once in the answerer's pid namespace.
    pub answer_processes: u64,
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
    /// Refused credentials a friend's name may draw per minute, across every address.
    pub friend_failures_per_minute: u32,
    /// Authenticated `/ask/status` polls per friend per minute.
    pub friend_status_per_minute: u32,
    /// Connections one source address may hold open at once.
    pub max_connections_per_address: usize,
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
            reduced_isolation: false,
            answer_read_paths: Vec::new(),
            answer_network: Vec::new(),
            answer_memory_mb: 8_192,
            answer_cpu_seconds: 600,
            answer_processes: 512,
            result_ttl_ms: 600_000,
            max_concurrent_asks: 4,
            max_stored_asks: 256,
            max_pending_approvals: 32,
            max_connections: 64,
            max_context_files: 16,
            max_context_file_bytes: 256 * 1024,
            friend_asks_per_minute: 30,
            address_failures_per_minute: 60,
            friend_failures_per_minute: 10,
            friend_status_per_minute: 120,
            max_connections_per_address: 8,
            header_timeout_ms: 5_000,
            body_timeout_ms: 10_000,
        }
    }
}

impl AskConfig {
    /// Loads the `"ask"` object of `<home>/config.json`; a missing file or key gives defaults.
    pub fn load(home: &Path) -> Result<AskConfig> {
        crate::config::load_file(home, AskConfig::parse).map(Option::unwrap_or_default)
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
            if answerer_setting(&mut c, key, f, value)? {
                continue;
            }
            match key.as_str() {
                "callerName" => c.caller_name = name(f, value)?,
                "keyDir" => c.key_dir = Some(absolute(f, value)?),
                "description" => c.description = text(f, value, ASK_DESCRIPTION_CHARS_MAX)?,
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
                "friendFailuresPerMinute" => {
                    c.friend_failures_per_minute = int(f, value, 1, 10_000)? as u32
                }
                "friendStatusPerMinute" => {
                    c.friend_status_per_minute = int(f, value, 1, 10_000)? as u32
                }
                "maxConnectionsPerAddress" => {
                    c.max_connections_per_address = int(f, value, 1, 1_024)? as usize
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

/// The answerer's settings (what it runs and how it is contained); false: not one of them.
fn answerer_setting(c: &mut AskConfig, key: &str, f: &str, value: &Value) -> Result<bool> {
    match key {
        "answerCommand" => c.answer_command = Some(argv(f, value)?),
        "allowUnenforcedSandbox" => c.reduced_isolation = boolean(f, value)?,
        "answerIsolation" => c.reduced_isolation = isolation(f, value)?,
        "answerReadPaths" => c.answer_read_paths = read_paths(f, value)?,
        "answerNetwork" => c.answer_network = destinations(f, value)?,
        "answerMemoryMb" => c.answer_memory_mb = int(f, value, 64, 1_048_576)?,
        "answerCpuSeconds" => c.answer_cpu_seconds = int(f, value, 1, 86_400)?,
        "answerProcesses" => c.answer_processes = int(f, value, 300, 65_536)?,
        _ => return Ok(false),
    }
    Ok(true)
}

fn friends(field: &str, value: &Value) -> Result<Vec<Friend>> {
    let items = value.as_array().ok_or_else(|| bad(field, "an array"))?;
    if items.len() > ASK_FRIENDS_MAX {
        return Err(bad(field, &format!("at most {ASK_FRIENDS_MAX} entries")));
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
        protocol: Protocol::Dsh,
        card_url: None,
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
                let s = text(k, v, ASK_TOKEN_CHARS_MAX)?;
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
            "description" => f.description = Some(text(k, v, ASK_DESCRIPTION_CHARS_MAX)?),
            "tls" => f.tls = Some(boolean(k, v)?),
            "protocol" => f.protocol = protocol(k, v)?,
            "cardUrl" => f.card_url = Some(card_url(k, v)?),
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
    strong_token(field, &f)?;
    check_dsh_signatures(&f, field)?;
    Ok(f)
}

/// A configured token must pass [`token_strength`]; the error names the friend.
fn strong_token(field: &str, f: &Friend) -> Result<()> {
    match f.token.as_deref().map(token_strength) {
        Some(Err(why)) => Err(Error::new(
            Code::ConfigInvalid,
            format!(
                "{field}.token of peer \"{}\" is too weak: {why}; make one with 'peer ask token new'",
                f.name
            ),
        )),
        _ => Ok(()),
    }
}

/// Whether a shared token can carry 128 bits: at least [`ASK_TOKEN_HEX_CHARS_MIN`] characters when
/// it is all hex digits, else at least [`ASK_TOKEN_CHARS_MIN`], with at least
/// [`ASK_TOKEN_DISTINCT_MIN`] distinct characters and not one short block repeated. A rule on the
/// text cannot prove randomness; it refuses the passwords people type, and `peer ask token
/// new` gives 256 random bits.
pub fn token_strength(t: &str) -> std::result::Result<(), String> {
    let chars: Vec<char> = t.chars().collect();
    let hex = chars.iter().all(char::is_ascii_hexdigit);
    let min = if hex {
        ASK_TOKEN_HEX_CHARS_MIN
    } else {
        ASK_TOKEN_CHARS_MIN
    };
    if chars.len() < min {
        let kind = if hex { "hex " } else { "" };
        return Err(format!(
            "a {kind}token needs at least {min} characters (128 bits), this one has {}",
            chars.len()
        ));
    }
    let mut distinct = chars.clone();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < ASK_TOKEN_DISTINCT_MIN {
        return Err(format!(
            "it uses {} distinct characters (at least {ASK_TOKEN_DISTINCT_MIN} needed)",
            distinct.len()
        ));
    }
    let repeats = (1..=chars.len() / 2)
        .any(|p| chars.len().is_multiple_of(p) && chars.chunks(p).all(|c| c == &chars[..p]));
    if repeats {
        return Err("it repeats one short block".into());
    }
    Ok(())
}

/// A fresh shared token: 256 bits from the operating system, base64url (43 characters).
pub fn new_token() -> String {
    let mut b = [0u8; 32];
    crate::identity::random_bytes(&mut b);
    super::canon::b64url(&b)
}

fn token(field: &str, value: &Value) -> Result<String> {
    let t = text(field, value, ASK_TOKEN_CHARS_MAX)?;
    if t.is_empty() {
        return Err(bad(
            field,
            "a non-empty string (an empty token never authenticates)",
        ));
    }
    Ok(t)
}

fn protocol(field: &str, value: &Value) -> Result<Protocol> {
    match value.as_str() {
        Some("dsh") => Ok(Protocol::Dsh),
        Some("a2a") => Ok(Protocol::A2a),
        _ => Err(bad(field, "dsh or a2a")),
    }
}

fn card_url(field: &str, value: &Value) -> Result<String> {
    let u = text(field, value, ASK_CARD_URL_CHARS_MAX)?;
    if !u.starts_with("http://") || u.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad(field, "an http:// URL without spaces"));
    }
    Ok(u)
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
        && s.len() <= ASK_NAME_CHARS_MAX
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
        && s.len() <= ASK_HOST_CHARS_MAX
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
    if items.len() > ASK_TAGS_MAX {
        return Err(bad(field, &format!("at most {ASK_TAGS_MAX} tags")));
    }
    items
        .iter()
        .map(|t| text(field, t, ASK_TAG_CHARS_MAX))
        .collect()
}

/// `"full"` (false) or `"reduced"` (true).
fn isolation(field: &str, value: &Value) -> Result<bool> {
    match value.as_str() {
        Some("full") => Ok(false),
        Some("reduced") => Ok(true),
        _ => Err(bad(field, "\"full\" or \"reduced\"")),
    }
}

fn read_paths(field: &str, value: &Value) -> Result<Vec<PathBuf>> {
    let items = value
        .as_array()
        .filter(|a| a.len() <= ANSWER_READ_PATHS_MAX)
        .ok_or_else(|| {
            bad(
                field,
                &format!("an array of at most {ANSWER_READ_PATHS_MAX} absolute paths"),
            )
        })?;
    items.iter().map(|i| absolute(field, i)).collect()
}

/// `host:port` strings: a host name or address (IPv6 in brackets) and a port 1–65535.
fn destinations(field: &str, value: &Value) -> Result<Vec<String>> {
    let expected = format!("an array of at most {ANSWER_READ_PATHS_MAX} \"host:port\" strings");
    let items = value
        .as_array()
        .filter(|a| a.len() <= ANSWER_READ_PATHS_MAX)
        .ok_or_else(|| bad(field, &expected))?;
    items
        .iter()
        .map(|i| {
            let s = i.as_str().ok_or_else(|| bad(field, &expected))?;
            let ok = s.rsplit_once(':').is_some_and(|(h, p)| {
                !h.is_empty()
                    && h.len() <= ASK_HOST_CHARS_MAX
                    && h.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-.:[]_".contains(c))
                    && p.parse::<u16>().is_ok_and(|p| p > 0)
            });
            if ok {
                Ok(s.to_ascii_lowercase())
            } else {
                Err(bad(field, &expected))
            }
        })
        .collect()
}

fn argv(field: &str, value: &Value) -> Result<Vec<String>> {
    let Some(items) = value
        .as_array()
        .filter(|a| !a.is_empty() && a.len() <= ANSWER_ARGV_MAX)
    else {
        return Err(bad(
            field,
            &format!("a non-empty array of at most {ANSWER_ARGV_MAX} strings"),
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
    fn answerer_containment_settings_parse_with_bounds() {
        let c = parse(serde_json::json!({})).unwrap();
        assert!(!c.reduced_isolation && c.answer_read_paths.is_empty());
        assert_eq!(
            (c.answer_memory_mb, c.answer_cpu_seconds, c.answer_processes),
            (8_192, 600, 512)
        );
        let c = parse(serde_json::json!({"answerIsolation": "reduced",
            "answerReadPaths": ["/opt/agent"], "answerProcesses": 300}))
        .unwrap();
        assert!(c.reduced_isolation);
        let n = parse(serde_json::json!({"answerNetwork": ["API.example.com:443", "[::1]:8080"]}));
        assert_eq!(
            n.unwrap().answer_network,
            ["api.example.com:443", "[::1]:8080"]
        );
        assert_eq!(c.answer_read_paths, vec![PathBuf::from("/opt/agent")]);
        assert!(
            parse(serde_json::json!({"allowUnenforcedSandbox": true}))
                .unwrap()
                .reduced_isolation
        );
        for bad in [
            serde_json::json!({"answerIsolation": "none"}),
            serde_json::json!({"answerReadPaths": ["relative"]}),
            serde_json::json!({"answerProcesses": 299}),
            serde_json::json!({"answerMemoryMb": 1}),
            serde_json::json!({"answerCpuSeconds": 0}),
            serde_json::json!({"answerNetwork": ["api.example.com"]}),
            serde_json::json!({"answerNetwork": ["a b:443"]}),
            serde_json::json!({"answerNetwork": ["host:0"]}),
        ] {
            assert!(parse(bad.clone()).is_err(), "{bad}");
        }
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
            {"name": "bob", "host": "10.0.0.2", "token": "Pz4hX9wLq2Ve7Rb1Nt6Ym3Ks8Jd0Gu5Fa-Wc_Ho3Ee", "mode": "auto"},
            {"name": "ada", "host": "h", "port": 4000, "publicKey": "ed25519:LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0KTUNvd0JRWURLMlZ3QXlFQUE2RUh2L1BPRUw0ZGNOMFk1MHZBbVdmazFqQ2JwUTFmSGR5R1pCSlZNYmc9Ci0tLS0tRU5EIFBVQkxJQyBLRVktLS0tLQo"}
        ]}))
        .unwrap();
        assert_eq!(c.friend("bob").unwrap().mode, Mode::Auto);
        assert_eq!(c.friend("ada").unwrap().port, 4000);
        assert!(c.friend("ada").unwrap().key.is_some());
        assert!(parse(serde_json::json!({"peers": [{"name": "a", "host": "h"}, {"name": "a", "host": "h"}]})).is_err());
    }

    #[test]
    fn tokens_carry_128_bits_and_new_ones_pass() {
        for weak in [
            "s3cret-shared",
            "0123456789abcdef0123456789abcde",
            "abcdefghabcdefghabcdefghabcdefgh",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "abababababababababababab",
        ] {
            assert!(token_strength(weak).is_err(), "{weak}");
        }
        assert!(token_strength("3f9a0c7e1b5d2486aa0c9e7f13b5d246").is_ok());
        assert!(token_strength("q7Vd3kQmxZr2Lp9WfTb6Hn").is_ok());
        let t = new_token();
        assert_eq!(t.len(), 43);
        assert!(token_strength(&t).is_ok());
        assert_ne!(t, new_token());
        let cfg = serde_json::json!({"ask": {"peers": [
            {"name": "ada", "host": "h", "token": "s3cret-shared"}]}});
        let e = AskConfig::parse(cfg.to_string().as_bytes()).unwrap_err();
        assert_eq!(e.code, Code::ConfigInvalid);
        assert!(e.message.contains("peer \"ada\""), "{}", e.message);
    }
}
