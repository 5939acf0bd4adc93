//! The data directory: one sled database holding the audit log, the approvals, the kill
//! switch, the last good policy set and the grants, behind the audit write-ahead ledger
//! (`ledger/wal`, applied again at open where sled lacks it); opened once and handed out only
//! as the store traits (no sled type leaves this module).
//!
//! Every change to approvals, grants, the kill switch, quarantine and the remembered policy
//! set is written through the audit writer ([`crate::audit::Audit::commit`]) as an effect of
//! the record that attests it; the stores here read.
//!
//! sled keeps a page cache of its own, 1 GiB unless told otherwise; every directory opened
//! here gets a configured one ([`DEFAULT_CACHE_BYTES`], `[audit] cache_mb`), so the sidecar's
//! memory has a bound someone chose.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::admin::{AdminStore, SledAdmin};
use crate::approvals::{ApprovalStore, SledApprovals};
use crate::audit::{AuditStore, SledAudit, SledCell, lock_held, sled_config};
use crate::grants::{GrantStore, SledGrants};
use crate::reload::{GoodSets, SledGoodSets};

/// Why the data directory could not be opened or one of its stores started. The message
/// names the directory or the store (`grant store: …`) and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StorageError(pub String);

macro_rules! said_as_is {
    ($($from:ty),*) => {$(
        impl From<$from> for StorageError {
            fn from(e: $from) -> Self {
                StorageError(e.to_string())
            }
        }
    )*};
}
said_as_is!(
    crate::audit::StoreError,
    crate::admin::AdminStoreError,
    crate::approvals::ApprovalStoreError,
    crate::grants::GrantStoreError,
    crate::reload::RememberError
);

/// The page cache a data directory gets unless `[audit] cache_mb` says otherwise: 64 MiB.
/// sled's own default is 1 GiB, which the cache fills under sustained load (the outside run
/// saw RSS climb past 600 MB). The working set is the newest audit blocks and index keys,
/// the approvals and the grants; older blocks are read back only by queries and `verify`.
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// Free space the store leaves on the data directory's disk unless `[audit] reserve_mb` says
/// otherwise: 32 MiB. Below it nothing is written (every decision is denied, 503) until space
/// returns; sled never meets a full disk, which it cannot recover from while open.
pub const DEFAULT_RESERVE_BYTES: u64 = 32 * 1024 * 1024;

/// The stores of one data directory.
pub struct Stores {
    /// The audit log.
    pub audit: Arc<dyn AuditStore>,
    /// The approvals.
    pub approvals: Arc<dyn ApprovalStore>,
    /// Administrative state (the kill switch).
    pub admin: Arc<dyn AdminStore>,
    /// The last good policy set.
    pub policies: Arc<dyn GoodSets>,
    /// Grants (template links with an expiry).
    pub grants: Arc<dyn GrantStore>,
    /// Where provenance keeps its conversations across restarts (tree `conversations`).
    pub conversations: Arc<dyn crate::provenance::Shelf>,
    /// The page cache sled was opened with, in bytes (read back from sled's configuration).
    cache_bytes: u64,
    /// The database, for the state check's reading of whole trees.
    cell: Arc<SledCell>,
}

impl Stores {
    /// Opens (creating if needed) the data directory `dir` with the default page cache. Only
    /// one process may hold it.
    pub fn open(dir: &Path) -> Result<Stores, StorageError> {
        Self::open_with_cache(dir, DEFAULT_CACHE_BYTES)
    }

    /// Opens (creating if needed) the data directory `dir` with a page cache of
    /// `cache_bytes`. Only one process may hold it.
    pub fn open_with_cache(dir: &Path, cache_bytes: u64) -> Result<Stores, StorageError> {
        Self::open_configured(dir, cache_bytes, DEFAULT_RESERVE_BYTES)
    }

    /// Opens (creating if needed) the data directory `dir` with a page cache of
    /// `cache_bytes`, keeping `reserve_bytes` free on its disk. Only one process may hold it.
    pub fn open_configured(
        dir: &Path,
        cache_bytes: u64,
        reserve_bytes: u64,
    ) -> Result<Stores, StorageError> {
        Self::open_keyed(dir, cache_bytes, reserve_bytes, &[])
    }

    /// [`Stores::open_configured`], with HMAC keys (`audit.hmac_key_file`) whose secrets the
    /// data directory's keyring does not hold: the frames of the audit ledger that sled
    /// lacks are applied only once their records' seals check under them.
    pub fn open_keyed(
        dir: &Path,
        cache_bytes: u64,
        reserve_bytes: u64,
        keys: &[Vec<u8>],
    ) -> Result<Stores, StorageError> {
        std::fs::create_dir_all(dir).map_err(|e| {
            StorageError(
                access_problem(dir, &e).unwrap_or_else(|| {
                    format!("cannot create data directory {}: {e}", dir.display())
                }),
            )
        })?;
        let config = sled_config(dir, cache_bytes);
        let db = open_waiting(&config, dir)?;
        let cell = SledCell::new(db, Some((dir.to_path_buf(), config.cache_capacity)));
        let audit = SledAudit::with_ledger(cell.clone(), dir, reserve_bytes, keys)?;
        let shelf = SledShelf {
            cell: cell.clone(),
            reserve: Some((dir.to_path_buf(), reserve_bytes)),
        };
        Self::from_parts(&cell, audit, config.cache_capacity, shelf)
    }

    /// Opens an existing data directory (for offline tools: a missing one is an error, not a
    /// new empty log).
    pub fn open_existing(dir: &Path, cache_bytes: u64) -> Result<Stores, StorageError> {
        Self::open_existing_keyed(dir, cache_bytes, &[])
    }

    /// [`Stores::open_existing`] with HMAC keys besides the keyring's (see
    /// [`Stores::open_keyed`]).
    pub fn open_existing_keyed(
        dir: &Path,
        cache_bytes: u64,
        keys: &[Vec<u8>],
    ) -> Result<Stores, StorageError> {
        if !dir.join("conf").is_file() {
            return Err(StorageError(format!(
                "{} is not a toolgate data directory (no sled database there); pass --data-dir or --config",
                dir.display()
            )));
        }
        Self::open_keyed(dir, cache_bytes, DEFAULT_RESERVE_BYTES, keys)
    }

    /// Stores in a temporary directory removed on drop (tests, `toolgate authorize`).
    pub fn temporary() -> Result<Stores, StorageError> {
        let config = sled::Config::new()
            .cache_capacity(DEFAULT_CACHE_BYTES)
            .temporary(true);
        let db = config
            .open()
            .map_err(|e| StorageError(format!("cannot open a temporary store: {e}")))?;
        let cell = SledCell::new(db, None);
        let audit = SledAudit::new(cell.clone())?;
        let shelf = SledShelf {
            cell: cell.clone(),
            reserve: None,
        };
        Self::from_parts(&cell, audit, config.cache_capacity, shelf)
    }

    /// The page cache the directory was opened with, in bytes.
    pub fn cache_bytes(&self) -> u64 {
        self.cache_bytes
    }

    fn from_parts(
        cell: &Arc<SledCell>,
        audit: SledAudit,
        cache_bytes: u64,
        shelf: SledShelf,
    ) -> Result<Stores, StorageError> {
        Ok(Stores {
            cell: cell.clone(),
            conversations: Arc::new(shelf),
            cache_bytes,
            approvals: Arc::new(SledApprovals::new(cell.clone())?),
            admin: Arc::new(SledAdmin::new(cell.clone())?),
            policies: Arc::new(SledGoodSets::new(cell.clone())?),
            grants: Arc::new(SledGrants::new(cell.clone())?),
            audit: Arc::new(audit),
        })
    }
}

/// The sled tree provenance keeps its conversations in.
const CONVERSATIONS: &str = "conversations";

/// Provenance's shelf: tree [`CONVERSATIONS`], written apart from the audit log (it is a
/// memory, not a record: nothing in it takes effect), flushed on every store, and never
/// below the reserve the audit store keeps free.
#[derive(Debug)]
struct SledShelf {
    cell: Arc<SledCell>,
    /// The data directory and the free space to leave on its disk (`None`: temporary).
    reserve: Option<(PathBuf, u64)>,
}

impl crate::provenance::Shelf for SledShelf {
    fn load(&self) -> Result<crate::provenance::Entries, crate::provenance::ShelfError> {
        let tree = self.cell.tree(CONVERSATIONS).map_err(shelf_err)?;
        tree.iter()
            .map(|kv| kv.map(|(k, v)| (k.to_vec(), v.to_vec())).map_err(shelf_err))
            .collect()
    }

    fn store(
        &self,
        puts: crate::provenance::Entries,
        removes: Vec<Vec<u8>>,
    ) -> Result<(), crate::provenance::ShelfError> {
        // Removals alone free space: they go through a disk short of its reserve.
        if let Some((dir, reserve)) = &self.reserve
            && !puts.is_empty()
            && let Ok(st) = rustix::fs::statvfs(dir)
            && st.f_bavail.saturating_mul(st.f_frsize) < *reserve
        {
            return Err(crate::provenance::ShelfError(format!(
                "the data directory's disk has less than the {} MiB the store keeps in reserve; conversations not saved (tried again once space returns)",
                reserve / (1024 * 1024)
            )));
        }
        let mut batch = sled::Batch::default();
        for k in removes {
            batch.remove(k);
        }
        for (k, v) in puts {
            batch.insert(k, v);
        }
        self.cell
            .tree(CONVERSATIONS)
            .map_err(shelf_err)?
            .apply_batch(batch)
            .map_err(shelf_err)?;
        self.cell
            .db()
            .map_err(shelf_err)?
            .flush()
            .map_err(shelf_err)?;
        Ok(())
    }
}

fn shelf_err(e: impl std::fmt::Display) -> crate::provenance::ShelfError {
    crate::provenance::ShelfError(e.to_string())
}

/// Why sled could not open the data directory `dir`. Only a held lock suggests another
/// toolgate; a permission problem names the path that refused and what to change.
/// How long an open waits for another holder of the data directory's lock to let go: a
/// process that is stopping (a restart), or a store just dropped whose threads are ending.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Opens the database, waiting up to [`LOCK_WAIT`] while its lock is held.
fn open_waiting(config: &sled::Config, dir: &Path) -> Result<sled::Db, StorageError> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    let mut cleared = false;
    loop {
        match config.open() {
            Ok(db) => return Ok(db),
            Err(e) if lock_held(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            // A snapshot a full disk or a crash cut short: cleared once, then opened again.
            Err(e)
                if !lock_held(&e)
                    && !cleared
                    && !crate::audit::clear_snapshot_debris(dir).is_empty() =>
            {
                cleared = true;
            }
            Err(e) => return Err(open_failed(dir, &e)),
        }
    }
}

fn open_failed(dir: &Path, e: &sled::Error) -> StorageError {
    if lock_held(e) {
        return StorageError(format!(
            "cannot open data directory {} ({e}); is another toolgate using it?",
            dir.display()
        ));
    }
    if let sled::Error::Io(io) = e
        && let Some(why) = access_problem(dir, io)
    {
        return StorageError(why);
    }
    StorageError(format!("cannot open data directory {}: {e}", dir.display()))
}

/// What to fix when `e` is a permission error or a read-only file system under the data
/// directory `dir`; `None` for any other error.
fn access_problem(dir: &Path, e: &std::io::Error) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    match e.kind() {
        std::io::ErrorKind::ReadOnlyFilesystem => Some(format!(
            "data directory {} is on a read-only file system ({e}); mount a writable volume there, or point `data_dir` (or --data-dir, TOOLGATE_DATA_DIR) at a writable directory",
            dir.display()
        )),
        std::io::ErrorKind::PermissionDenied => {
            let uid = rustix::process::getuid().as_raw();
            let gid = rustix::process::getgid().as_raw();
            let refused = refusing_path(dir);
            let owner = std::fs::metadata(&refused)
                .map(|m| {
                    format!(
                        " (owner {}:{}, mode {:04o})",
                        m.uid(),
                        m.gid(),
                        m.mode() & 0o7777
                    )
                })
                .unwrap_or_default();
            let d = dir.display();
            let fix = if dir.exists() {
                format!("fix its owner and mode (`chown -R {uid}:{gid} {d}` and `chmod 700 {d}`)")
            } else {
                format!("create it for this user (`install -d -o {uid} -g {gid} -m 700 {d}`)")
            };
            Some(format!(
                "permission denied on {}{owner}: toolgate runs as {uid}:{gid} and must be able to write its data directory {d}; {fix}, or point `data_dir` (or --data-dir, TOOLGATE_DATA_DIR) at a directory this user owns",
                refused.display(),
            ))
        }
        _ => None,
    }
}

/// The path that refused this process: the nearest existing ancestor when `dir` is missing,
/// `dir` when it cannot be written, else the first entry below it (two levels down: sled's
/// files and the ledger's) that cannot be. `dir` when nothing is found (e.g. as root).
fn refusing_path(dir: &Path) -> PathBuf {
    if !dir.exists() {
        let mut at = dir;
        while let Some(parent) = at.parent() {
            if parent.exists() {
                return parent.to_path_buf();
            }
            at = parent;
        }
        return dir.to_path_buf();
    }
    if !usable(dir, true) {
        return dir.to_path_buf();
    }
    first_refused(dir, 1).unwrap_or_else(|| dir.to_path_buf())
}

/// The first entry below `dir`, `depth` levels further down at most, this process cannot use.
fn first_refused(dir: &Path, depth: u8) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if !usable(&path, is_dir) {
            return Some(path);
        }
        if is_dir
            && depth > 0
            && let Some(found) = first_refused(&path, depth - 1)
        {
            return Some(found);
        }
    }
    None
}

/// Whether this process may write `path` (and, for a directory, enter it).
fn usable(path: &Path, is_dir: bool) -> bool {
    use rustix::fs::{Access, access};
    let want = if is_dir {
        Access::WRITE_OK | Access::EXEC_OK
    } else {
        Access::READ_OK | Access::WRITE_OK
    };
    access(path, want).is_ok()
}

/// A piece of stored state that the audit log does not produce: what it is, what is stored,
/// and the record it contradicts (or that no record backs it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contradiction {
    /// What: `approval <id>`, `kill switch`.
    pub what: String,
    /// Why it contradicts the log, naming the record (`record 812 says …`) or its absence.
    pub why: String,
}

impl std::fmt::Display for Contradiction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.why)
    }
}

/// What [`Stores::check_state`] found.
#[derive(Debug, Clone, Default)]
pub struct StateCheck {
    /// Stored keys held to the record that set them.
    pub checked: usize,
    /// Stored keys no record since the retention cut names (a log written before records
    /// named their state changes, or retention removed the last `state_checked` record):
    /// approvals and the kill switch among them were held to their own records instead.
    pub unverifiable: usize,
    /// Records walked from the newest `state_checked` record (or the retention cut).
    pub walked: u64,
    /// The `state_checked` record the walk started from.
    pub baseline: Option<u64>,
    /// Records on the walk sealed by a key not available here: their seals were not
    /// checked.
    pub unsealed: u64,
    /// State the log does not produce.
    pub contradictions: Vec<Contradiction>,
    /// The whole state as stored, when a new `state_checked` record should name it (no
    /// contradiction, and something changed since the last one).
    pub to_record: Option<Vec<crate::audit::Attest>>,
}

/// Most records one page of the state check reads.
const STATE_PAGE: usize = 1000;

/// Names a stored key for a person: `approval <id>`, `grant <id>`, `kill switch`,
/// `quarantine of <agent>`, else the tree and the key.
fn what_key(tree: &str, key: &str) -> String {
    match (tree, key) {
        ("approvals", id) => format!("approval {id}"),
        ("grants", id) => format!("grant {id}"),
        ("admin", "kill_switch") => "kill switch".to_owned(),
        ("admin", k) => match k.strip_prefix("quarantine/") {
            Some(agent) => format!("quarantine of {agent}"),
            None => match k.strip_prefix("descriptor/") {
                Some(tool) => format!("approved descriptor of {tool}"),
                None => format!("`{tree}` key `{key}`"),
            },
        },
        _ => format!("`{tree}` key `{key}`"),
    }
}

impl Stores {
    /// Every key of the trees the audit log attests, as stored, in order.
    pub fn current_state(&self) -> Result<Vec<crate::audit::Attest>, StorageError> {
        let mut out = Vec::new();
        for name in crate::audit::ATTESTED_TREES {
            let tree = self.cell.tree(name)?;
            for kv in tree.iter() {
                let (k, v) =
                    kv.map_err(|e| StorageError(format!("cannot read the `{name}` tree: {e}")))?;
                out.push(crate::audit::Attest::of(name, &k, Some(&v)));
            }
        }
        Ok(out)
    }

    /// Checks that the stored state is the state the audit log produces. The chain is
    /// walked, each link checked under `chain`, from the newest `state_checked` record (the
    /// whole state found at a start) to the head, each record's named state changes laid
    /// over it; every key of approvals, grants, quarantines, the kill switch and approved
    /// descriptors must then hold the value its last record set. A value written without
    /// its record, a removed key and a value rolled back to an earlier one all show up,
    /// naming the record contradicted. Keys no record names (a log from before records named
    /// their changes) fall back to [`Stores::check_records`].
    pub fn check_state(
        &self,
        now_ms: u64,
        chain: &crate::audit::Chain,
    ) -> Result<StateCheck, StorageError> {
        let expected = crate::audit::expected_state(&*self.audit, chain)?;
        let mut out = StateCheck {
            walked: expected.walked,
            baseline: expected.baseline,
            unsealed: expected.unsealed,
            ..StateCheck::default()
        };
        if let Some((seq, why)) = &expected.broken {
            out.contradictions.push(Contradiction {
                what: "audit log".to_owned(),
                why: format!(
                    "the chain breaks at record {seq} ({why}), so the state cannot be held to the records after it"
                ),
            });
            return Ok(out);
        }
        let state = self.current_state()?;
        let mut unattested = 0usize;
        let mut seen = std::collections::BTreeSet::new();
        for a in &state {
            let k = (a.tree.clone(), a.key.clone());
            let what = what_key(&a.tree, &a.key);
            let mut say = |why: String| {
                out.contradictions.push(Contradiction {
                    what: what.clone(),
                    why,
                })
            };
            match expected.keys.get(&k) {
                Some(said) => match &said.sha256 {
                    Some(h) if Some(h) == a.sha256.as_ref() => out.checked += 1,
                    Some(_) => say(format!(
                        "the stored value is not the one record {} set",
                        said.seq
                    )),
                    None => say(format!("stored, but record {} removed it", said.seq)),
                },
                None => match expected.baseline {
                    Some(b) => say(format!(
                        "stored, but neither the state check at record {b} nor any record after it sets it"
                    )),
                    None => unattested += 1,
                },
            }
            seen.insert(k);
        }
        for ((tree, key), said) in &expected.keys {
            if said.sha256.is_some() && !seen.contains(&(tree.clone(), key.clone())) {
                out.contradictions.push(Contradiction {
                    what: what_key(tree, key),
                    why: format!(
                        "record {} set it, but it is not stored (removed without a record)",
                        said.seq
                    ),
                });
            }
        }
        if unattested > 0 {
            let legacy = self.check_records(now_ms)?;
            out.unverifiable = unattested;
            out.contradictions.extend(legacy.contradictions);
        }
        if out.contradictions.is_empty() && (expected.changed || expected.baseline.is_none()) {
            out.to_record = Some(state);
        }
        Ok(out)
    }

    /// Checks approvals and the kill switch against the records that made them, for state
    /// no record names (written before records named their changes):
    /// every live approved approval has the `approved` record of its approver (same tool,
    /// arguments and requester), every pending one the `pending_approval` decision that
    /// opened it, and the kill switch is as its newest record set it.
    pub fn check_records(&self, now_ms: u64) -> Result<StateCheck, StorageError> {
        use crate::approvals::Status;
        let mut out = StateCheck::default();
        let cut_ms = self.audit.checkpoint()?.map_or(0, |cp| cp.at_ms);
        let live: Vec<_> = self
            .approvals
            .all()?
            .into_iter()
            .filter(|a| matches!(a.status_at(now_ms), Status::Pending | Status::Approved))
            .collect();
        let (checkable, cut): (Vec<_>, Vec<_>) =
            live.into_iter().partition(|a| a.created_ms > cut_ms);
        out.unverifiable = cut.len();
        out.checked = checkable.len();
        if let Some(since) = checkable.iter().map(|a| a.created_ms).min() {
            let approved = self.records_since("approved", since)?;
            let opened = self.records_since("pending_approval", since)?;
            for a in &checkable {
                let what = format!("approval {}", a.id);
                let mut say = |why: String| {
                    out.contradictions.push(Contradiction {
                        what: what.clone(),
                        why,
                    })
                };
                match opened.get(&a.decision_id) {
                    None => say(format!(
                        "stored {} for {} on `{}`, but no pending_approval decision {} opened it",
                        format!("{:?}", a.status).to_lowercase(),
                        a.principal,
                        a.tool,
                        a.decision_id
                    )),
                    Some(r)
                        if r.entry.args_sha256.as_deref() != Some(a.args_sha256.as_str())
                            || r.entry.tool.as_deref() != Some(a.tool.as_str())
                            || r.entry.principal.as_deref() != Some(a.principal.as_str()) =>
                    {
                        say(format!(
                            "record {} opened it for other arguments, tool or requester than stored",
                            r.seq
                        ));
                    }
                    Some(_) => {}
                }
                if a.status == Status::Approved {
                    match approved.get(&a.id) {
                        None => say("stored approved, but no `approved` record exists".to_owned()),
                        Some(r)
                            if r.entry.args_sha256.as_deref() != Some(a.args_sha256.as_str())
                                || r.entry.principal.as_deref() != a.decided_by.as_deref() =>
                        {
                            say(format!(
                                "record {} approved other arguments or another approver than stored",
                                r.seq
                            ));
                        }
                        Some(_) => {}
                    }
                }
            }
        }
        // The kill switch: as the newest record that turned it on or off said.
        if let Some(stored) = self.admin.load_kill_switch()? {
            let newest = |word: &str| -> Result<Option<crate::audit::Record>, StorageError> {
                let q = crate::audit::Query {
                    decision: Some(word.to_owned()),
                    limit: 1,
                    ..crate::audit::Query::default()
                };
                Ok(self.audit.query(&q)?.into_iter().next())
            };
            let said = match (newest("kill_switch_on")?, newest("kill_switch_off")?) {
                (Some(on), Some(off)) => Some((on.seq > off.seq, on.seq.max(off.seq))),
                (Some(on), None) => Some((true, on.seq)),
                (None, Some(off)) => Some((false, off.seq)),
                (None, None) => None,
            };
            if let Some((on, seq)) = said
                && on != stored.on
            {
                out.contradictions.push(Contradiction {
                    what: "kill switch".to_owned(),
                    why: format!(
                        "stored {}, but record {seq} turned it {}",
                        if stored.on { "on" } else { "off" },
                        if on { "on" } else { "off" }
                    ),
                });
            }
        }
        Ok(out)
    }

    /// Records whose `decision` is `word`, at or after `since_ms`, by entry id (newest kept).
    fn records_since(
        &self,
        word: &str,
        since_ms: u64,
    ) -> Result<std::collections::HashMap<String, crate::audit::Record>, StorageError> {
        let mut by_id = std::collections::HashMap::new();
        let mut before_seq = None;
        loop {
            let q = crate::audit::Query {
                decision: Some(word.to_owned()),
                since_ms: Some(since_ms),
                before_seq,
                limit: STATE_PAGE,
                ..crate::audit::Query::default()
            };
            let page = self.audit.query(&q)?;
            let Some(last) = page.last() else {
                break;
            };
            before_seq = Some(last.seq);
            let full = page.len() == STATE_PAGE;
            for r in page {
                by_id.entry(r.entry.id.clone()).or_insert(r);
            }
            if !full {
                break;
            }
        }
        Ok(by_id)
    }
}
