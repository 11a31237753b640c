//! Presence v1 records in `<coord>/active-agents/`: Autohand's legacy fields plus our optional
//! `communication` extension, written atomically under an instance-qualified name, read with a
//! size cap and validated without ever deleting anyone's file, and removed only when the file
//! still names our own incarnation.

use crate::config::Limits;
use crate::config::internal::PRESENCE_SCAN_FACTOR;
use crate::error::{Code, Error, Result};
use crate::{clock, fsutil, identity, sanitize};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// Protocol version advertised in the extension.
pub const PROTOCOL_VERSION: u64 = 1;

use crate::config::internal::PRESENCE_FIELD_CHARS_MAX;

/// A child run a root publishes in its advertisement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunAd {
    pub run_id: String,
    pub peer_id: String,
    pub alias: String,
}

/// The `communication` object of a presence record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Advertisement {
    pub protocol_version: u64,
    pub instance_id: String,
    pub peer_id: String,
    /// Relative to the coordination directory, or absolute for a short runtime directory.
    pub endpoint: String,
    /// Base64 DER SPKI of the root's Ed25519 key.
    pub public_key: String,
    pub capabilities: Vec<String>,
    pub scope: String,
    /// Canonical workspace (realpath).
    pub workspace: String,
    /// Repository root when the workspace is inside a git work tree.
    #[serde(default)]
    pub repository: Option<String>,
    pub alias: String,
    #[serde(default)]
    pub runs: Vec<RunAd>,
    /// Start time of the record's `pid` (field 22 of `/proc/PID/stat`), so a reader can prove
    /// the incarnation's process gone even after its pid was reused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_start_time: Option<u64>,
    /// The boot the process started in (`/proc/sys/kernel/random/boot_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// Set when the root can no longer accept messages (its store failed a write): what
    /// happened and how its owner recovers. The directory then lists it without messaging.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
}

impl Advertisement {
    /// Checks the extension on its own; a failure disables messaging for the record only.
    pub fn validate(&self, limits: &Limits) -> std::result::Result<(), String> {
        if self.protocol_version != PROTOCOL_VERSION {
            return Err(format!(
                "unsupported protocol version {}",
                self.protocol_version
            ));
        }
        if !identity::is_valid_id(&self.instance_id) {
            return Err("instanceId is malformed".into());
        }
        if self.peer_id != identity::peer_id(&self.instance_id, None) {
            return Err("peerId does not match instanceId".into());
        }
        if identity::parse_spki_b64(&self.public_key).is_none() {
            return Err("publicKey is not an Ed25519 SPKI".into());
        }
        if self.endpoint.is_empty() || self.endpoint.len() > 512 {
            return Err("endpoint is empty or too long".into());
        }
        if crate::config::Scope::parse(&self.scope).is_none() {
            return Err(format!(
                "scope {:?} is unknown",
                sanitize::line(&self.scope, 20)
            ));
        }
        if identity::validate_alias(&self.alias).is_err() {
            return Err("alias is invalid".into());
        }
        if self
            .degraded
            .as_ref()
            .is_some_and(|d| d.chars().count() > PRESENCE_FIELD_CHARS_MAX)
        {
            return Err("degraded is too long".into());
        }
        if self.capabilities.len() > 16 || self.capabilities.iter().any(|c| c.len() > 40) {
            return Err("capabilities list is too long".into());
        }
        if self.runs.len() as u64 > limits.published_runs {
            return Err("more runs than publishedRuns".into());
        }
        for run in &self.runs {
            if !identity::is_valid_id(&run.run_id)
                || run.peer_id != identity::peer_id(&self.instance_id, Some(&run.run_id))
                || identity::validate_alias(&run.alias).is_err()
            {
                return Err("a published run is malformed".into());
            }
        }
        Ok(())
    }
}

/// The whole record as we write it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub version: u64,
    pub pid: u32,
    pub session_id: String,
    pub workspace_root: String,
    pub project_name: String,
    pub provider: String,
    pub model: String,
    pub mode: String,
    pub status: String,
    pub started_at: String,
    pub updated_at: String,
    pub message_count: u64,
    pub context_percent: u64,
    pub tokens_used: u64,
    pub communication: Advertisement,
}

/// How a listed record stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Liveness {
    Live,
    /// Present but not current: dead pid, old or unparsable `updatedAt`.
    Stale(String),
    /// Not a usable presence v1 record; kept on disk, skipped with this reason.
    Invalid(String),
}

/// One file of the directory as a reader sees it.
#[derive(Clone, Debug)]
pub struct Entry {
    pub file: String,
    pub session_id: String,
    pub pid: i64,
    pub workspace_root: String,
    pub project_name: String,
    pub model: String,
    pub mode: String,
    pub status: String,
    pub updated_at_ms: Option<u64>,
    pub liveness: Liveness,
    pub advert: Option<Advertisement>,
    /// Why the extension was ignored, when it was present but malformed.
    pub advert_error: Option<String>,
}

impl Entry {
    pub fn is_live(&self) -> bool {
        self.liveness == Liveness::Live
    }
    /// Live and reachable for messaging.
    pub fn messaging(&self) -> Option<&Advertisement> {
        if self.is_live() {
            self.advert.as_ref()
        } else {
            None
        }
    }
}

/// The file name of our record: Autohand's sanitized sessionId, qualified by the instance.
pub fn file_name(session_id: &str, instance_id: &str) -> String {
    let clean: String = session_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{clean}.{instance_id}.json")
}

/// Parsed records by file name, reused while the file's mtime and size are unchanged, so a
/// busy root does not re-parse (and re-validate keys of) every record on every send. Liveness
/// is always recomputed.
#[derive(Default)]
pub struct ReadCache {
    entries:
        parking_lot::Mutex<std::collections::HashMap<String, (std::time::SystemTime, u64, Entry)>>,
}

/// Like [`read_all`], reusing `cache` for unchanged files.
pub fn read_all_cached(
    dir: &Path,
    limits: &Limits,
    now_ms: u64,
    cache: &ReadCache,
) -> Result<Vec<Entry>> {
    read_matching_cached(dir, limits, now_ms, cache, |_| true)
}

/// Like [`read_all_cached`], keeping only the entries `keep` accepts; liveness (a `kill(pid,
/// 0)` each) is computed for those alone, so resolving one name among many peers stays cheap.
pub fn read_matching_cached(
    dir: &Path,
    limits: &Limits,
    now_ms: u64,
    cache: &ReadCache,
    keep: impl Fn(&Entry) -> bool,
) -> Result<Vec<Entry>> {
    let names = list_names(dir, limits)?;
    let mut map = cache.entries.lock();
    map.retain(|k, _| names.binary_search(k).is_ok());
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        let stamp = std::fs::symlink_metadata(dir.join(&n))
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())));
        if let (Some((mtime, len)), Some((cm, cl, cached))) = (stamp, map.get(&n))
            && *cm == mtime
            && *cl == len
            && !matches!(cached.liveness, Liveness::Invalid(_))
        {
            if !keep(cached) {
                continue;
            }
            let mut e = cached.clone();
            e.liveness = liveness(e.pid, e.updated_at_ms, limits, now_ms);
            out.push(e);
            continue;
        }
        let e = read_one(dir, &n, limits, now_ms);
        if let Some((mtime, len)) = stamp {
            map.insert(n, (mtime, len, e.clone()));
        }
        if keep(&e) {
            out.push(e);
        }
    }
    Ok(out)
}

/// The record names a reader looks at: at most `presence_files`, the most recently written
/// first, so records that stopped being refreshed (stale or dead) are the ones left out and can
/// never crowd out live ones; returned in name order. Names scanned are bounded too
/// (`PRESENCE_SCAN_FACTOR` × `presence_files`).
fn list_names(dir: &Path, limits: &Limits) -> Result<Vec<String>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("cannot list", dir, &e)),
    };
    let keep = limits.presence_files as usize;
    let scan = keep.saturating_mul(PRESENCE_SCAN_FACTOR);
    let mut names: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json") && !n.starts_with('.'))
        .take(scan)
        .collect();
    if names.len() > keep {
        let mut stamped: Vec<(std::time::SystemTime, String)> = names
            .into_iter()
            .map(|n| {
                let at = std::fs::symlink_metadata(dir.join(&n))
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                (at, n)
            })
            .collect();
        stamped.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        names = stamped.into_iter().take(keep).map(|(_, n)| n).collect();
    }
    names.sort();
    Ok(names)
}

/// Up to `n` record names not written for more than `staleMs`, the longest unwritten first:
/// the candidates a reclaimer looks at (listings may leave exactly these out). Scans at most
/// `PRESENCE_SCAN_FACTOR` × `presence_files` names.
pub fn unrefreshed_names(dir: &Path, limits: &Limits, n: usize) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let scan = (limits.presence_files as usize).saturating_mul(PRESENCE_SCAN_FACTOR);
    let cutoff = std::time::SystemTime::now()
        .checked_sub(std::time::Duration::from_millis(limits.stale_ms))
        .unwrap_or(std::time::UNIX_EPOCH);
    let mut old: Vec<(std::time::SystemTime, String)> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json") && !n.starts_with('.'))
        .take(scan)
        .filter_map(|n| {
            let at = std::fs::symlink_metadata(dir.join(&n))
                .and_then(|m| m.modified())
                .ok()?;
            (at < cutoff).then_some((at, n))
        })
        .collect();
    old.sort();
    old.into_iter().take(n).map(|(_, n)| n).collect()
}

/// Reads every `*.json` in the directory (at most `presence_files` of them), never deleting.
pub fn read_all(dir: &Path, limits: &Limits, now_ms: u64) -> Result<Vec<Entry>> {
    Ok(list_names(dir, limits)?
        .into_iter()
        .map(|n| read_one(dir, &n, limits, now_ms))
        .collect())
}

fn invalid(file: &str, why: String) -> Entry {
    Entry {
        file: file.to_string(),
        session_id: String::new(),
        pid: -1,
        workspace_root: String::new(),
        project_name: String::new(),
        model: String::new(),
        mode: String::new(),
        status: String::new(),
        updated_at_ms: None,
        liveness: Liveness::Invalid(why),
        advert: None,
        advert_error: None,
    }
}

/// Reads and classifies one record file.
pub fn read_one(dir: &Path, file: &str, limits: &Limits, now_ms: u64) -> Entry {
    let path = dir.join(file);
    let bytes = match fsutil::read_private_bounded(&path, limits.presence_file_bytes) {
        Ok(b) => b,
        Err(e) => return invalid(file, e.message),
    };
    let value: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(_) => return invalid(file, "not valid JSON (half-written or garbage)".into()),
    };
    let Some(obj) = value.as_object() else {
        return invalid(file, "not a JSON object".into());
    };
    match classify(file, obj, limits, now_ms) {
        Ok(entry) => entry,
        Err(why) => invalid(file, why),
    }
}

fn field_str(
    obj: &Map<String, Value>,
    key: &str,
    checked: bool,
) -> std::result::Result<String, String> {
    match obj.get(key) {
        Some(Value::String(s)) => Ok(sanitize::clamp(s, PRESENCE_FIELD_CHARS_MAX)),
        None | Some(Value::Null) if !checked => Ok(String::new()),
        _ => Err(format!("field {key} is missing or not a string")),
    }
}

fn classify(
    file: &str,
    obj: &Map<String, Value>,
    limits: &Limits,
    now_ms: u64,
) -> std::result::Result<Entry, String> {
    if obj.get("version").and_then(Value::as_f64) != Some(1.0) {
        return Err("not presence version 1".into());
    }
    for key in ["messageCount", "contextPercent", "tokensUsed"] {
        if !obj.get(key).is_some_and(Value::is_number) {
            return Err(format!("field {key} is missing or not a number"));
        }
    }
    let pid = match obj.get("pid").and_then(Value::as_f64) {
        Some(p) if p.fract() == 0.0 && p >= 0.0 && p <= i32::MAX as f64 => p as i64,
        Some(_) => -1,
        None => return Err("field pid is missing or not a number".into()),
    };
    let mut entry = Entry {
        file: file.to_string(),
        session_id: field_str(obj, "sessionId", true)?,
        pid,
        workspace_root: field_str(obj, "workspaceRoot", true)?,
        project_name: field_str(obj, "projectName", true)?,
        model: field_str(obj, "model", true)?,
        mode: field_str(obj, "mode", false)?,
        status: field_str(obj, "status", false)?,
        updated_at_ms: None,
        liveness: Liveness::Live,
        advert: None,
        advert_error: None,
    };
    field_str(obj, "startedAt", true)?;
    let updated = field_str(obj, "updatedAt", true)?;
    entry.updated_at_ms = clock::parse_iso8601(&updated);
    entry.liveness = liveness(pid, entry.updated_at_ms, limits, now_ms);
    if let Some(comm) = obj.get("communication") {
        match serde_json::from_value::<Advertisement>(comm.clone()) {
            Ok(ad) => match ad.validate(limits) {
                Ok(()) => entry.advert = Some(ad),
                Err(why) => entry.advert_error = Some(why),
            },
            Err(e) => {
                entry.advert_error = Some(format!(
                    "communication block is malformed: {}",
                    sanitize::line(&e.to_string(), 120)
                ))
            }
        }
    }
    Ok(entry)
}

fn liveness(pid: i64, updated: Option<u64>, limits: &Limits, now_ms: u64) -> Liveness {
    let Some(updated) = updated else {
        return Liveness::Stale("updatedAt is not an ISO-8601 UTC time".into());
    };
    if updated > now_ms.saturating_add(limits.stale_ms) {
        return Liveness::Stale("updatedAt is in the future".into());
    }
    let age = now_ms.saturating_sub(updated);
    if age > limits.stale_ms {
        return Liveness::Stale(format!(
            "no heartbeat for {} ms (stale after {} ms)",
            age, limits.stale_ms
        ));
    }
    if !pid_alive(pid) {
        return Liveness::Stale(format!("process {pid} is not running"));
    }
    Liveness::Live
}

/// Why the process behind `entry` provably no longer runs, or None when it runs or nothing can
/// be proven. Proof is the recorded pid + start time + boot id (a different start time or boot,
/// no such pid, a zombie), or, for a record without start-time evidence, no process with that
/// pid at all. The record's age is never evidence: a stopped or suspended process keeps its
/// record stale and is still the same incarnation.
pub fn process_gone(entry: &Entry, probe: &crate::process::Probe) -> Option<String> {
    use crate::process::{Life, ProcessEvidence};
    let pid = u32::try_from(entry.pid).ok().filter(|p| *p > 0)?;
    let ad = entry.advert.as_ref();
    let evidence = ad.and_then(|ad| {
        Some(ProcessEvidence {
            pid,
            start_time: ad.process_start_time?,
            boot_id: ad.boot_id.clone()?,
        })
    });
    match evidence {
        Some(ev) => match probe.life(&ev) {
            Life::Gone => Some(format!(
                "process {pid} (started at tick {}) no longer runs",
                ev.start_time
            )),
            Life::Alive | Life::Unknown => None,
        },
        None if !pid_alive(entry.pid) => Some(format!("process {pid} is not running")),
        None => None,
    }
}

/// `kill(pid, 0)`: alive when it succeeds or fails with EPERM. Non-positive pids are dead.
pub fn pid_alive(pid: i64) -> bool {
    if pid <= 0 || pid > i32::MAX as i64 {
        return false;
    }
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None) {
        Ok(()) => true,
        Err(nix::errno::Errno::EPERM) => true,
        Err(_) => false,
    }
}

/// Our own record on disk: written atomically, refreshed by the heartbeat, removed on exit
/// only while it still names our instance.
pub struct Publisher {
    path: PathBuf,
    record: parking_lot::Mutex<Record>,
}

impl Publisher {
    /// Writes the first version of our record.
    pub fn publish(dir: &Path, record: Record) -> Result<Publisher> {
        let publisher = Publisher::prepare(dir, record);
        publisher.write()?;
        Ok(publisher)
    }

    /// A publisher for `record` that has written nothing yet: the first `refresh` (or
    /// `update`) publishes it. A root prepares its record before its endpoint exists and
    /// publishes it once the endpoint answers.
    pub fn prepare(dir: &Path, mut record: Record) -> Publisher {
        let path = dir.join(file_name(
            &record.session_id,
            &record.communication.instance_id,
        ));
        record.updated_at = clock::iso8601(clock::now_ms());
        Publisher {
            path,
            record: parking_lot::Mutex::new(record),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Applies `change`, stamps `updatedAt` and rewrites the file.
    pub fn update(&self, change: impl FnOnce(&mut Record)) -> Result<()> {
        change(&mut self.record.lock());
        self.write()
    }

    /// Heartbeat: same content, fresh `updatedAt`.
    pub fn refresh(&self) -> Result<()> {
        self.write()
    }

    fn write(&self) -> Result<()> {
        let bytes = {
            let mut r = self.record.lock();
            r.updated_at = clock::iso8601(clock::now_ms());
            let mut b =
                serde_json::to_vec_pretty(&*r).map_err(|e| Error::new(Code::Io, e.to_string()))?;
            b.push(b'\n');
            b
        };
        // A presence record lives seconds and readers skip torn files: visibility, not fsync.
        fsutil::atomic_write(&self.path, &bytes, fsutil::Durability::Visible)
    }

    /// Removes the file if, and only if, it still names our instance. Returns whether it did.
    pub fn remove(&self) -> Result<bool> {
        let ours = self.record.lock().communication.instance_id.clone();
        let bytes = match fsutil::read_private_bounded(&self.path, 1 << 20) {
            Ok(b) => b,
            Err(e) if e.code == Code::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        let on_disk: Option<String> = serde_json::from_slice::<Value>(&bytes).ok().and_then(|v| {
            v.get("communication")?
                .get("instanceId")?
                .as_str()
                .map(str::to_string)
        });
        if on_disk.as_deref() != Some(ours.as_str()) {
            return Ok(false);
        }
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io("cannot remove", &self.path, &e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits::default()
    }

    fn legacy(pid: u32, updated: &str) -> String {
        format!(
            r#"{{"version":1,"pid":{pid},"sessionId":"s-1","workspaceRoot":"/w","projectName":"w","provider":"x","model":"m","mode":"interactive","status":"idle","startedAt":"{updated}","updatedAt":"{updated}","messageCount":0,"contextPercent":100,"tokensUsed":0}}"#
        )
    }

    fn tmp() -> fsutil::TempDir {
        fsutil::TempDir::new("presence").unwrap()
    }

    fn write(dir: &Path, name: &str, body: &[u8]) {
        fsutil::atomic_write(&dir.join(name), body, fsutil::Durability::Visible).unwrap();
    }

    #[test]
    fn classifies_legacy_stale_garbage_and_bad_extension() {
        let d = tmp();
        let now = clock::now_ms();
        let me = std::process::id();
        write(&d, "live.json", legacy(me, &clock::iso8601(now)).as_bytes());
        write(
            &d,
            "old.json",
            legacy(me, &clock::iso8601(now - 60_000)).as_bytes(),
        );
        write(&d, "dead.json", legacy(0, &clock::iso8601(now)).as_bytes());
        write(&d, "garbage.json", &[0xff, 0x00, 0x13]);
        write(&d, "big.json", &vec![b' '; 70 * 1024]);
        write(&d, "v2.json", br#"{"version":2}"#);
        let mut with_bad_ext = legacy(me, &clock::iso8601(now));
        with_bad_ext.pop();
        with_bad_ext.push_str(r#","communication":{"protocolVersion":1}}"#);
        write(&d, "ext.json", with_bad_ext.as_bytes());
        write(&d, "notes.txt", b"ignored");
        let all = read_all(&d, &limits(), now).unwrap();
        let by = |f: &str| all.iter().find(|e| e.file == f).unwrap().clone();
        assert_eq!(all.len(), 7);
        assert!(by("live.json").is_live());
        assert!(
            matches!(by("old.json").liveness, Liveness::Stale(ref r) if r.contains("no heartbeat"))
        );
        assert!(
            matches!(by("dead.json").liveness, Liveness::Stale(ref r) if r.contains("not running"))
        );
        assert!(matches!(by("garbage.json").liveness, Liveness::Invalid(_)));
        assert!(matches!(by("big.json").liveness, Liveness::Invalid(ref r) if r.contains("bound")));
        assert!(matches!(by("v2.json").liveness, Liveness::Invalid(_)));
        let ext = by("ext.json");
        assert!(ext.is_live() && ext.advert.is_none() && ext.advert_error.is_some());
        // Nothing was deleted.
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 8);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn old_records_never_crowd_out_a_current_one() {
        let d = tmp();
        let now = clock::now_ms();
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for n in 0..10 {
            let name = format!("a-old-{n}.json");
            write(
                &d,
                &name,
                legacy(0, &clock::iso8601(now - 3_600_000)).as_bytes(),
            );
            std::fs::File::options()
                .write(true)
                .open(d.join(&name))
                .unwrap()
                .set_modified(hour_ago)
                .unwrap();
        }
        write(
            &d,
            "z-live.json",
            legacy(std::process::id(), &clock::iso8601(now)).as_bytes(),
        );
        let mut limits = limits();
        limits.presence_files = 5;
        let all = read_all(&d, &limits, now).unwrap();
        assert_eq!(all.len(), 5);
        assert!(all.iter().any(|e| e.file == "z-live.json" && e.is_live()));
        // The reclaimer's candidates are the unrefreshed ones, oldest first.
        let old = unrefreshed_names(&d, &limits, 3);
        assert_eq!(old.len(), 3);
        assert!(old.iter().all(|n| n.starts_with("a-old-")));
    }

    #[test]
    fn only_process_evidence_proves_an_incarnation_gone() {
        use crate::process::Probe;
        let probe = Probe::new();
        let Ok(me) = probe.own() else {
            return; // no /proc here: nothing can be proven, which the other cases cover
        };
        let entry = |pid: i64, start: Option<u64>, boot: Option<String>| {
            let mut e = invalid("x.json", String::new());
            e.pid = pid;
            e.liveness = Liveness::Stale("no heartbeat".into());
            e.advert = Some(Advertisement {
                protocol_version: PROTOCOL_VERSION,
                instance_id: "i-1".into(),
                peer_id: identity::peer_id("i-1", None),
                endpoint: "peer-runtime/i-1.sock".into(),
                public_key: String::new(),
                capabilities: Vec::new(),
                scope: "user".into(),
                workspace: "/w".into(),
                repository: None,
                alias: "a".into(),
                runs: Vec::new(),
                process_start_time: start,
                boot_id: boot,
                degraded: None,
            });
            e
        };
        let pid = i64::from(me.pid);
        // This very process, however old its record: not gone.
        assert_eq!(
            process_gone(
                &entry(pid, Some(me.start_time), Some(me.boot_id.clone())),
                &probe
            ),
            None
        );
        assert_eq!(process_gone(&entry(pid, None, None), &probe), None);
        // Same pid, another start time (pid reuse) or another boot: gone.
        assert!(
            process_gone(
                &entry(pid, Some(me.start_time + 1), Some(me.boot_id.clone())),
                &probe
            )
            .is_some()
        );
        assert!(
            process_gone(
                &entry(pid, Some(me.start_time), Some("other-boot".into())),
                &probe
            )
            .is_some()
        );
        // A reaped child: no such process.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = i64::from(child.id());
        child.wait().unwrap();
        assert!(process_gone(&entry(dead, None, None), &probe).is_some());
        // No pid at all proves nothing.
        assert_eq!(process_gone(&entry(0, None, None), &probe), None);
    }

    #[test]
    fn file_names_are_instance_qualified_and_safe() {
        assert_eq!(file_name("a/b c", "i-1"), "a_b_c.i-1.json");
    }
}
