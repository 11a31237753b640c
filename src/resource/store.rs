//! The I/O shell of the coordinator: resource files and the launch ledger under
//! `<coord>/peer-resources/`. Every change is one transaction: owner-aware lock, bounded read,
//! validation, the pure decision of `core::apply`, then an atomic durable replace. A file that
//! fails validation is RECOVERY_REQUIRED and stays byte-for-byte as it was.

use super::core::{self, Caller, Env, Launched, Op, Step};
use super::model::{Fence, Holder, Party, ResourceState, canonical_name, name_hash};
use super::seal;
use crate::config::{Config, Limits};
use crate::error::{Code, Error, Result};
use crate::fsutil::{self, Durability, FileLock};
use crate::paths::Namespace;
use crate::process::{Life, Probe, ProcessEvidence, group_life};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::path::{Path, PathBuf};

/// Launch ledger format version.
pub const LEDGER_FORMAT: u32 = 1;

/// One managed command admitted by the gate, recorded before it is spawned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    pub resource: String,
    pub hash: String,
    pub ticket: String,
    pub token: u64,
    pub epoch: u64,
    pub principal: String,
    pub display: String,
    /// The program name only (no arguments, which may hold secrets), sanitized.
    pub command: String,
    pub gate: ProcessEvidence,
    pub child: Option<ProcessEvidence>,
    pub pgid: Option<i32>,
    /// Process groups (a detached session's group is its session) that descendants of the
    /// command created, recorded by the gate as it finds them: the launch lives while any of
    /// them runs, even after the gate was killed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<i32>,
    /// The launch's own cgroup v2, when the gate could create one: it holds every
    /// descendant, and the launch lives while it is populated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<PathBuf>,
    pub started_at: u64,
}

/// `launches.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    pub version: u32,
    pub launches: Vec<Launch>,
}

/// A resource file [`Space::list_checked`] could not use, and why; it was left as it is.
#[derive(Debug)]
pub struct Skipped {
    pub path: PathBuf,
    pub error: Error,
}

/// One coordination namespace: where the files are and the bounds that apply.
#[derive(Clone, Debug)]
pub struct Space {
    pub dir: PathBuf,
    pub limits: Limits,
    pub allow_control: bool,
    pub wait_timeout_ms: u64,
}

impl Space {
    /// `<coord>/peer-resources` for a loaded config; creates it private.
    pub fn open(home: &Path, cfg: &Config) -> Result<Space> {
        let dir = Namespace::new(home.to_path_buf(), cfg).resources_dir();
        fsutil::ensure_private_dir(&dir)?;
        Ok(Space {
            dir,
            limits: cfg.limits.clone(),
            allow_control: cfg.allow_resource_control,
            wait_timeout_ms: cfg.resource_wait_timeout_ms,
        })
    }

    /// The same namespace without creating anything (read-only viewers).
    pub fn existing(home: &Path, cfg: &Config) -> Space {
        Space {
            dir: Namespace::new(home.to_path_buf(), cfg).resources_dir(),
            limits: cfg.limits.clone(),
            allow_control: cfg.allow_resource_control,
            wait_timeout_ms: cfg.resource_wait_timeout_ms,
        }
    }

    pub fn resource_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{}.json", name_hash(name)))
    }

    /// The file holders and waiters keep open for writing: its close (even by SIGKILL) is an
    /// inotify event that wakes waiters at once.
    pub fn live_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{}.live", name_hash(name)))
    }

    /// The resource's fence: its high-water marks, which outlive the resource file.
    pub fn fence_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{}.fence", name_hash(name)))
    }

    /// Reads the fence of `name`; missing is `None`, anything unusable is RECOVERY_REQUIRED.
    pub fn read_fence(&self, name: &str) -> Result<Option<Fence>> {
        let path = self.fence_path(name);
        match fsutil::read_private_bounded(&path, self.limits.resource_file_bytes) {
            Ok(bytes) => Fence::decode(&bytes, name)
                .map(Some)
                .map_err(|e| Error::new(e.code, format!("{}: {}", path.display(), e.message))),
            Err(e) if e.code == Code::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn ledger_path(&self) -> PathBuf {
        self.dir.join("launches.json")
    }

    /// Reads one resource without locking (atomic replace makes every read whole).
    pub fn read(&self, name: &str) -> Result<Option<ResourceState>> {
        read_state(
            &self.resource_path(name),
            Some(name),
            self.limits.resource_file_bytes,
        )
    }

    /// Reads every resource file, at most `Limits.resource_tickets` of them, sorted by name;
    /// fails with the first unreadable file's error (see [`Space::list_checked`]).
    pub fn list(&self) -> Result<Vec<ResourceState>> {
        let (states, mut skipped) = self.list_checked()?;
        match skipped.drain(..).next() {
            Some(s) => Err(s.error),
            None => Ok(states),
        }
    }

    /// Like [`Space::list`], but one corrupt, oversized or unreadable resource file does not
    /// hide the others: it is returned in the second list with its error and left as it is.
    /// Fails only when the directory itself cannot be read.
    pub fn list_checked(&self) -> Result<(Vec<ResourceState>, Vec<Skipped>)> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok((Vec::new(), Vec::new()));
            }
            Err(e) => return Err(Error::io("cannot list", &self.dir, &e)),
        };
        let bound = self.limits.resource_tickets as usize;
        let (mut out, mut skipped) = (Vec::new(), Vec::new());
        for entry in entries.flatten().take(bound * 4) {
            let file = entry.file_name().to_string_lossy().into_owned();
            let is_resource = file.len() == 37
                && file.ends_with(".json")
                && file
                    .as_bytes()
                    .iter()
                    .take(32)
                    .all(|b| b.is_ascii_hexdigit());
            if !is_resource || out.len() + skipped.len() >= bound {
                continue;
            }
            let path = entry.path();
            match read_state(&path, None, self.limits.resource_file_bytes) {
                // A file must sit under the hash of the name it holds.
                Ok(Some(state)) if !file.starts_with(&name_hash(&state.name)) => {
                    let error = Error::new(
                        Code::RecoveryRequired,
                        format!(
                            "{} holds another resource's name; it was left as is",
                            path.display()
                        ),
                    );
                    skipped.push(Skipped { path, error });
                }
                Ok(Some(state)) => out.push(state),
                Ok(None) => {}
                Err(error) => skipped.push(Skipped { path, error }),
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        skipped.sort_by(|a, b| a.path.cmp(&b.path));
        Ok((out, skipped))
    }

    /// Runs one coordinator transaction on resource `name`.
    pub fn transact(&self, name: &str, caller: &Caller, op: Op, probe: &Probe) -> Result<Step> {
        self.transact_with(name, caller, op, probe, &mut |_| Ok(()))
    }

    /// Like [`Space::transact`], running `before_write` under the resource lock after the
    /// decision and before the resource file is replaced; its failure aborts the write.
    pub fn transact_with(
        &self,
        name: &str,
        caller: &Caller,
        op: Op,
        probe: &Probe,
        before_write: &mut dyn FnMut(&Step) -> Result<()>,
    ) -> Result<Step> {
        let name = canonical_name(name)?;
        fsutil::ensure_private_dir(&self.dir)?;
        let path = self.resource_path(&name);
        let _lock = FileLock::acquire(
            &self.dir.join(format!("{}.lock", name_hash(&name))),
            self.limits.lock_ms,
        )?;
        let state = self.read(&name)?;
        // The fence is read before the decision; a missing one (a resource written before
        // fences existed) starts from the file's own marks.
        let fence = match self.read_fence(&name)? {
            Some(f) => f,
            None => state.as_ref().map(Fence::of).unwrap_or_default(),
        };
        let op = self.with_ledger(&name, op)?;
        let ledger = RefCell::new(None);
        let life = |ticket: &str, e: &ProcessEvidence| self.life(&name, ticket, e, probe, &ledger);
        let env = Env {
            now: crate::clock::now_ms(),
            history: self.limits.resource_history as usize,
            tickets_max: self.limits.resource_tickets as usize,
            allow_control: self.allow_control,
            life: &life,
            token_floor: fence.next_token,
            epoch_floor: fence.epoch,
        };
        let step = core::apply(state, &name, caller, &op, &env)?;
        before_write(&step)?;
        if step.changed {
            let bytes = step.state.encode()?;
            if fence.is_passed_by(&step.state) {
                // Durable before the file that uses the new marks: a crash between the two
                // leaves a fence ahead of the file, which only skips numbers.
                let next = Fence::of(&step.state).encode()?;
                fsutil::atomic_write(&self.fence_path(&name), &next, Durability::Durable)?;
            }
            if bytes.len() as u64 > self.limits.resource_file_bytes {
                return Err(Error::new(
                    Code::QueueFull,
                    format!(
                        "resource {name:?} would exceed resourceFileBytes; let its queue drain"
                    ),
                ));
            }
            fsutil::atomic_write(&path, &bytes, Durability::Durable)?;
        }
        Ok(step)
    }

    /// `SetController` decides with the launches it may adopt, read under the caller's lock.
    fn with_ledger(&self, name: &str, op: Op) -> Result<Op> {
        Ok(match op {
            Op::SetController {
                capacity,
                force,
                automatic,
                ..
            } => Op::SetController {
                capacity,
                force,
                automatic,
                ledger: self.adoptable(name)?,
            },
            other => other,
        })
    }

    /// Liveness of a recorded process; a gone gate whose launched group still runs is alive.
    fn life(
        &self,
        name: &str,
        ticket: &str,
        e: &ProcessEvidence,
        probe: &Probe,
        cache: &RefCell<Option<Result<Ledger>>>,
    ) -> Life {
        let verdict = probe.life(e);
        if verdict != Life::Gone || ticket.is_empty() {
            return verdict;
        }
        let mut cache = cache.borrow_mut();
        let ledger = cache.get_or_insert_with(|| self.read_ledger());
        let Ok(ledger) = ledger else {
            return Life::Unknown;
        };
        let hash = name_hash(name);
        let Some(launch) = ledger
            .launches
            .iter()
            .find(|l| l.hash == hash && l.ticket == ticket)
        else {
            return Life::Gone;
        };
        workload_life(launch, probe)
    }

    /// Ledger entries of `name`, as holders a policy change must adopt.
    fn adoptable(&self, name: &str) -> Result<Vec<Launched>> {
        let hash = name_hash(name);
        let ledger = self.read_ledger()?;
        Ok(ledger
            .launches
            .into_iter()
            .filter(|l| l.hash == hash)
            .map(|l| Launched {
                holder: Holder {
                    ticket: l.ticket,
                    party: Party {
                        principal: l.principal,
                        display: l.display,
                        evidence: l.gate,
                    },
                    token: l.token,
                    granted_at: l.started_at,
                    epoch: l.epoch,
                    admitted: true,
                },
            })
            .collect())
    }

    /// Reads `launches.json`; missing is empty, unparsable is RECOVERY_REQUIRED.
    pub fn read_ledger(&self) -> Result<Ledger> {
        let path = self.ledger_path();
        let bytes = match fsutil::read_private_bounded(&path, self.limits.resource_file_bytes) {
            Ok(b) => b,
            Err(e) if e.code == Code::NotFound => {
                return Ok(Ledger {
                    version: LEDGER_FORMAT,
                    launches: Vec::new(),
                });
            }
            Err(e) => return Err(e),
        };
        let body = seal::open(&bytes).map_err(|b| {
            Error::new(
                Code::RecoveryRequired,
                format!("{} {}; it was left as is", path.display(), b.describe()),
            )
        })?;
        let ledger: Ledger = serde_json::from_slice(body).map_err(|e| {
            Error::new(
                Code::RecoveryRequired,
                format!(
                    "{} is not a valid launch ledger ({e}); it was left as is",
                    path.display()
                ),
            )
        })?;
        if ledger.version != LEDGER_FORMAT {
            return Err(Error::new(
                Code::RecoveryRequired,
                format!("{} has an unknown version", path.display()),
            ));
        }
        Ok(ledger)
    }

    /// One ledger transaction. Lock order: a resource lock may be held while taking this one,
    /// never the reverse.
    pub fn update_ledger(&self, change: impl FnOnce(&mut Ledger) -> Result<()>) -> Result<()> {
        let _lock = FileLock::acquire(&self.dir.join("launches.json.lock"), self.limits.lock_ms)?;
        let mut ledger = self.read_ledger()?;
        change(&mut ledger)?;
        if ledger.launches.len() as u64 > self.limits.resource_tickets {
            return Err(Error::new(
                Code::QueueFull,
                "the launch ledger is full (resourceTickets); let managed commands finish",
            ));
        }
        let bytes = serde_json::to_vec(&ledger)
            .map(|body| seal::seal(&body))
            .map_err(|e| Error::new(Code::Io, format!("cannot encode the ledger: {e}")))?;
        if bytes.len() as u64 > self.limits.resource_file_bytes {
            return Err(Error::new(
                Code::QueueFull,
                "the launch ledger would exceed resourceFileBytes",
            ));
        }
        fsutil::atomic_write(&self.ledger_path(), &bytes, Durability::Durable)
    }
}

/// Liveness of what a launch started: its command, its process group, the groups of
/// descendants that detached, and its cgroup; alive when any of them is.
pub fn workload_life(launch: &Launch, probe: &Probe) -> Life {
    let child = launch.child.as_ref().map_or(Life::Gone, |c| probe.life(c));
    let groups = launch
        .pgid
        .iter()
        .chain(&launch.groups)
        .map(|g| group_life(*g));
    let cgroup = launch.cgroup.as_deref().map(super::cgroup::life);
    let all: Vec<Life> = std::iter::once(child).chain(groups).chain(cgroup).collect();
    if all.contains(&Life::Alive) {
        Life::Alive
    } else if all.contains(&Life::Unknown) {
        Life::Unknown
    } else {
        Life::Gone
    }
}

fn read_state(path: &Path, name: Option<&str>, max: u64) -> Result<Option<ResourceState>> {
    match fsutil::read_private_bounded(path, max) {
        Ok(bytes) => ResourceState::decode(&bytes, name)
            .map(Some)
            .map_err(|e| Error::new(e.code, format!("{}: {}", path.display(), e.message))),
        Err(e) if e.code == Code::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::core::{CAP_REQUEST, Outcome};
    use std::os::unix::process::CommandExt;

    fn space(tag: &str) -> (crate::fsutil::TempDir, Space) {
        let home = crate::fsutil::TempDir::new(&format!("res-{tag}")).unwrap();
        let space = Space::open(&home, &Config::default()).unwrap();
        (home, space)
    }

    fn me(probe: &Probe) -> Caller {
        let party = Party {
            principal: "cli:t".into(),
            display: "t".into(),
            evidence: probe.own().unwrap(),
        };
        Caller {
            party,
            capabilities: vec![CAP_REQUEST.into()],
        }
    }

    #[test]
    fn transaction_round_trip_and_corrupt_file_is_left_alone() {
        let (_home, s) = space("tx");
        let probe = Probe::new();
        let step = s
            .transact(
                "port:1",
                &me(&probe),
                Op::Request {
                    capacity: None,
                    epoch: None,
                },
                &probe,
            )
            .unwrap();
        assert!(matches!(step.outcome, Outcome::Granted { token: 1, .. }));
        assert_eq!(s.read("port:1").unwrap().unwrap().holders.len(), 1);
        let path = s.resource_path("port:1");
        std::fs::write(&path, b"{\"version\":1,").unwrap();
        let e = s
            .transact("port:1", &me(&probe), Op::Status, &probe)
            .unwrap_err();
        assert_eq!(e.code, Code::RecoveryRequired);
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"version\":1,");
        let _ = std::fs::remove_dir_all(s.dir.parent().unwrap());
    }

    fn request(s: &Space, probe: &Probe) -> u64 {
        let step = s
            .transact(
                "db",
                &me(probe),
                Op::Request {
                    capacity: None,
                    epoch: None,
                },
                probe,
            )
            .unwrap();
        match step.outcome {
            Outcome::Granted { token, .. } => token,
            other => panic!("not granted: {other:?}"),
        }
    }

    fn release_all_of(s: &Space, probe: &Probe) {
        let mut state = s.read("db").unwrap().unwrap();
        state.holders.clear();
        std::fs::write(s.resource_path("db"), state.encode().unwrap()).unwrap();
        let _ = probe;
    }

    #[test]
    fn every_flipped_byte_of_a_resource_file_is_refused_and_left_alone() {
        let (_home, s) = space("flip");
        let probe = Probe::new();
        request(&s, &probe);
        let path = s.resource_path("db");
        let good = std::fs::read(&path).unwrap();
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 1 << (i % 8);
            std::fs::write(&path, &bad).unwrap();
            let e = s
                .transact("db", &me(&probe), Op::Status, &probe)
                .unwrap_err();
            assert_eq!(e.code, Code::RecoveryRequired, "byte {i}: {e}");
            assert_eq!(std::fs::read(&path).unwrap(), bad, "byte {i} rewritten");
        }
        std::fs::write(&path, &good).unwrap();
        let ledger_path = s.ledger_path();
        s.update_ledger(|_| Ok(())).unwrap();
        let ledger = std::fs::read(&ledger_path).unwrap();
        for i in 0..ledger.len() {
            let mut bad = ledger.clone();
            bad[i] ^= 1 << (i % 8);
            std::fs::write(&ledger_path, &bad).unwrap();
            assert_eq!(s.read_ledger().unwrap_err().code, Code::RecoveryRequired);
            assert_eq!(
                s.update_ledger(|_| Ok(())).unwrap_err().code,
                Code::RecoveryRequired
            );
            assert_eq!(std::fs::read(&ledger_path).unwrap(), bad);
        }
    }

    #[test]
    fn fencing_tokens_never_go_backwards_across_restored_or_removed_files() {
        let (_home, s) = space("fence");
        let probe = Probe::new();
        assert_eq!(request(&s, &probe), 1);
        let path = s.resource_path("db");
        let backup = std::fs::read(&path).unwrap();
        release_all_of(&s, &probe);
        assert_eq!(request(&s, &probe), 2);
        release_all_of(&s, &probe);
        // next_token edited backwards without the checksum: refused.
        let text = String::from_utf8(std::fs::read(&path).unwrap()).unwrap();
        let edited = text.replace("\"next_token\":3", "\"next_token\":2");
        assert_ne!(edited, text);
        std::fs::write(&path, &edited).unwrap();
        assert_eq!(
            s.transact("db", &me(&probe), Op::Status, &probe)
                .unwrap_err()
                .code,
            Code::RecoveryRequired
        );
        // An older, validly sealed copy restored: the fence keeps the count.
        std::fs::write(&path, &backup).unwrap();
        let mut state = s.read("db").unwrap().unwrap();
        state.holders.clear();
        std::fs::write(&path, state.encode().unwrap()).unwrap();
        assert_eq!(request(&s, &probe), 3, "a restored file reissued a token");
        release_all_of(&s, &probe);
        // The file moved aside: a recreated resource continues above every issued token.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(request(&s, &probe), 4);
        // A damaged fence stops everything, byte for byte as it was.
        let fence = s.fence_path("db");
        let mut bad = std::fs::read(&fence).unwrap();
        let last = bad.len() - 3;
        bad[last] ^= 1;
        std::fs::write(&fence, &bad).unwrap();
        let e = s
            .transact("db", &me(&probe), Op::Status, &probe)
            .unwrap_err();
        assert_eq!(e.code, Code::RecoveryRequired);
        assert!(e.message.contains("fence"), "{e}");
        assert_eq!(std::fs::read(&fence).unwrap(), bad);
    }

    #[test]
    fn a_gone_gate_with_a_live_launch_group_keeps_its_grant() {
        let (_home, s) = space("group");
        let probe = Probe::new();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .process_group(0)
            .spawn()
            .unwrap();
        let ghost = ProcessEvidence {
            start_time: 1,
            ..probe.own().unwrap()
        };
        let launch = Launch {
            resource: "r".into(),
            hash: name_hash("r"),
            ticket: "t-1".into(),
            token: 1,
            epoch: 1,
            principal: "p".into(),
            display: "p".into(),
            command: "sleep".into(),
            gate: ghost.clone(),
            child: None,
            pgid: Some(child.id() as i32),
            groups: Vec::new(),
            cgroup: None,
            started_at: 0,
        };
        s.update_ledger(|l| {
            l.launches.push(launch);
            Ok(())
        })
        .unwrap();
        let cache = RefCell::new(None);
        assert_eq!(s.life("r", "t-1", &ghost, &probe, &cache), Life::Alive);
        child.kill().unwrap();
        child.wait().unwrap();
        let cache = RefCell::new(None);
        assert_eq!(s.life("r", "t-1", &ghost, &probe, &cache), Life::Gone);
        assert_eq!(s.life("r", "t-2", &ghost, &probe, &cache), Life::Gone);
        let _ = std::fs::remove_dir_all(s.dir.parent().unwrap());
    }
}
