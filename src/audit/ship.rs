//! Audit shipping: every committed record, in order, appended to a JSON Lines file for log
//! shippers (Fluent Bit, Vector, Filebeat), with size-based rotation. Each line is the record
//! as stored (`seq`, `prev`, `hash`, `entry`), so a receiver can check that the chain is
//! continuous across lines, files and restarts.
//!
//! The shipper is its own thread and reads only what is durable (up to the log's head), so
//! it never delays a decision. It keeps no state of its own: on start it reads the last
//! complete line of the file (or of the newest rotated one), drops a torn line a crash left,
//! and goes on from the next record. So a `kill -9` at any point leaves no gap and no
//! duplicate. The file is flushed with `fdatasync` at most once a second (and before each
//! rotation): after a power loss the lines not yet flushed are written again from the log,
//! which is durable, so nothing is lost; a receiver that already read them sees their `seq`
//! again.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::block::MAX_BLOCK;
use super::writer::{Audit, ShipStats};

/// Records read per pass.
const PAGE: usize = 1024;
/// How often the head is looked at when nothing is new.
const POLL: Duration = Duration::from_millis(200);
/// Wait after a failure (a full disk, a store error) before trying again.
const BACKOFF: Duration = Duration::from_secs(1);
/// Longest time written lines wait for `fdatasync`.
const SYNC_EVERY: Duration = Duration::from_secs(1);

/// `[audit] ship_file` and its rotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShipSettings {
    /// The file lines are appended to.
    pub path: PathBuf,
    /// Rotate once the file reaches this many bytes.
    pub rotate_bytes: u64,
    /// Rotated files kept (`<file>.1` is the newest).
    pub keep: usize,
}

impl ShipSettings {
    /// The file and every rotated copy it may have: what no tool may reach.
    pub fn files(&self) -> Vec<PathBuf> {
        std::iter::once(self.path.clone())
            .chain((1..=self.keep).map(|n| rotated(&self.path, n)))
            .collect()
    }
}

/// Starts the shipper's thread over `audit`.
pub fn start(audit: Arc<Audit>, settings: ShipSettings) -> std::io::Result<Arc<ShipStats>> {
    let stats = Arc::new(ShipStats::default());
    let mut sink = Sink::open(settings)?;
    stats
        .shipped_seq
        .store(sink.cursor.shipped, Ordering::Relaxed);
    tracing::info!(file = %sink.settings.path.display(), from = sink.cursor.shipped + 1, "audit shipping on");
    let thread_stats = stats.clone();
    std::thread::Builder::new()
        .name("toolgate-audit-ship".to_owned())
        .spawn(move || {
            loop {
                match sink.pass(&audit, &thread_stats) {
                    Ok(true) => {}
                    Ok(false) => std::thread::sleep(POLL),
                    Err(e) => {
                        thread_stats.failures.fetch_add(1, Ordering::Relaxed);
                        thread_stats.failing.store(true, Ordering::Relaxed);
                        tracing::error!(error = %e, file = %sink.settings.path.display(), "audit shipping failed; retrying");
                        sink.recover();
                        std::thread::sleep(BACKOFF);
                    }
                }
            }
        })?;
    Ok(stats)
}

struct Sink {
    settings: ShipSettings,
    file: File,
    /// Bytes of whole lines in the file.
    len: u64,
    /// What was shipped, and where to read next.
    cursor: Cursor,
    /// Written since the last `fdatasync`, and when that was.
    unsynced: bool,
    synced_at: std::time::Instant,
}

/// The `seq` of the last complete line of `path`, and the length up to the end of that line
/// (a torn line after it is not counted). `(0, 0)` for a missing or empty file.
fn last_line(path: &Path) -> std::io::Result<(u64, u64)> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, 0)),
        Err(e) => return Err(e),
    };
    let size = file.metadata()?.len();
    // Records are a few KiB at most; read back far enough for two whole lines.
    let mut back = 64 * 1024u64;
    loop {
        let start = size.saturating_sub(back);
        file.seek(SeekFrom::Start(start))?;
        let mut tail = Vec::new();
        std::io::Read::by_ref(&mut file)
            .take(size - start)
            .read_to_end(&mut tail)?;
        let Some(end) = tail.iter().rposition(|b| *b == b'\n') else {
            if start == 0 {
                return Ok((0, 0));
            }
            back = back.saturating_mul(4);
            continue;
        };
        let before = tail.get(..end).unwrap_or_default();
        let begin = before
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        if begin == 0 && start > 0 {
            back = back.saturating_mul(4);
            continue;
        }
        let line = before.get(begin..).unwrap_or_default();
        let seq = serde_json::from_slice::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v.get("seq").and_then(serde_json::Value::as_u64))
            .ok_or_else(|| {
                std::io::Error::other(format!(
                    "{}: its last line is not an audit record; move the file away to start shipping afresh",
                    path.display()
                ))
            })?;
        return Ok((seq, start + end as u64 + 1));
    }
}

/// Where a sink stands in the log: the last record it shipped, and where the next scan
/// starts. Shared by the file and the OTLP sinks.
pub(super) struct Cursor {
    /// The last record shipped (0: none).
    pub(super) shipped: u64,
    /// A storage unit at or before the next record.
    next_unit: u64,
}

/// Records read by one [`Cursor::read`]: durable, in order, past the cursor.
pub(super) struct Batch {
    /// The records (may be empty when only retention gaps or not-yet-durable records were
    /// read).
    pub(super) records: Vec<super::Record>,
    /// Where the scan after this batch starts.
    next_unit: u64,
    /// A full page was read and more records are durable.
    more: bool,
}

impl Cursor {
    /// A cursor after record `shipped`.
    pub(super) fn after(shipped: u64) -> Cursor {
        Cursor {
            shipped,
            next_unit: shipped.saturating_sub(MAX_BLOCK as u64),
        }
    }

    /// The next durable records past the cursor, up to a page; `None` when there are none.
    /// Records retention removed before they were shipped are counted in `stats`.
    pub(super) fn read(&self, audit: &Audit, stats: &ShipStats) -> std::io::Result<Option<Batch>> {
        let head = audit.head().seq;
        if head <= self.shipped {
            return Ok(None);
        }
        let page = audit
            .store()
            .scan(self.next_unit, PAGE)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let full = page.len() >= PAGE;
        let Some(last_unit) = page.last().map(|s| s.unit) else {
            return Ok(None);
        };
        let mut records = Vec::new();
        let mut shipped = self.shipped;
        // The block holding the first record past the durable head is read again next time.
        let mut again = None;
        for stored in page {
            if stored.key_seq <= shipped {
                continue;
            }
            if stored.key_seq > head {
                again = Some(stored.unit);
                break;
            }
            let record = stored.record.map_err(|e| {
                std::io::Error::other(format!(
                    "record {} does not parse ({e}); run `toolgate audit verify`",
                    stored.key_seq
                ))
            })?;
            if record.seq != shipped + 1 && shipped > 0 {
                let missing = record.seq.saturating_sub(shipped + 1);
                stats.skipped.fetch_add(missing, Ordering::Relaxed);
                tracing::error!(
                    from = shipped + 1,
                    to = record.seq - 1,
                    "audit shipping: records were removed by retention before they were shipped"
                );
            }
            shipped = record.seq;
            records.push(record);
        }
        Ok(Some(Batch {
            records,
            // Blocks are written whole and never change: the next scan starts after the last
            // one read, or at the one not finished.
            next_unit: again.unwrap_or_else(|| last_unit.saturating_add(1)),
            more: full && shipped < head,
        }))
    }

    /// Moves past `batch` (shipped); whether more records wait.
    pub(super) fn advance(&mut self, batch: &Batch, stats: &ShipStats) -> bool {
        if let Some(last) = batch.records.last() {
            stats
                .lines
                .fetch_add(last.seq.saturating_sub(self.shipped), Ordering::Relaxed);
            self.shipped = last.seq;
            stats.shipped_seq.store(last.seq, Ordering::Relaxed);
        }
        self.next_unit = batch.next_unit;
        batch.more
    }
}

fn rotated(path: &Path, n: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

fn sync_dir(path: &Path) -> std::io::Result<()> {
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => File::open(dir)?.sync_all(),
        None => File::open(".")?.sync_all(),
    }
}

impl Sink {
    fn open(settings: ShipSettings) -> std::io::Result<Sink> {
        if let Some(dir) = settings.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let (mut shipped, len) = last_line(&settings.path)?;
        if shipped == 0 && len == 0 {
            // Just rotated, or never written: the newest rotated file says where we were.
            shipped = last_line(&rotated(&settings.path, 1))?.0;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&settings.path)?;
        let size = file.metadata()?.len();
        if size > len {
            tracing::warn!(file = %settings.path.display(), bytes = size - len, "dropping a torn last line (a crash while writing)");
            file.set_len(len)?;
            file.sync_data()?;
        }
        Ok(Sink {
            unsynced: false,
            synced_at: std::time::Instant::now(),
            cursor: Cursor::after(shipped),
            settings,
            file,
            len,
        })
    }

    /// Puts the file back to its whole lines after a failed write.
    fn recover(&mut self) {
        if let Err(e) = self.file.set_len(self.len) {
            tracing::error!(error = %e, "audit shipping: could not drop a partly written batch");
        }
    }

    /// Flushes written lines when they have waited [`SYNC_EVERY`] (or `now` is set).
    fn sync(&mut self, now: bool) -> std::io::Result<()> {
        if self.unsynced && (now || self.synced_at.elapsed() >= SYNC_EVERY) {
            self.file.sync_data()?;
            self.unsynced = false;
            self.synced_at = std::time::Instant::now();
        }
        Ok(())
    }

    /// Ships what is durable and not shipped yet; whether a full page was read (more may be
    /// waiting: go on at once; otherwise the caller waits and lets a batch build up).
    fn pass(&mut self, audit: &Audit, stats: &ShipStats) -> std::io::Result<bool> {
        let Some(batch) = self.cursor.read(audit, stats)? else {
            self.sync(false)?;
            stats.failing.store(false, Ordering::Relaxed);
            return Ok(false);
        };
        let mut out = Vec::new();
        for record in &batch.records {
            serde_json::to_writer(&mut out, record)?;
            out.push(b'\n');
        }
        if !out.is_empty() {
            self.file.seek(SeekFrom::Start(self.len))?;
            self.file.write_all(&out)?;
            self.unsynced = true;
            self.sync(false)?;
            self.len += out.len() as u64;
        }
        let more = self.cursor.advance(&batch, stats);
        stats.failing.store(false, Ordering::Relaxed);
        if self.len >= self.settings.rotate_bytes {
            self.rotate()?;
            stats.rotations.fetch_add(1, Ordering::Relaxed);
        }
        Ok(more)
    }

    /// `<file>` → `<file>.1` → … → `<file>.<keep>` (the oldest is removed), then a new file.
    fn rotate(&mut self) -> std::io::Result<()> {
        self.sync(true)?;
        let path = self.settings.path.clone();
        let keep = self.settings.keep.max(1);
        match std::fs::remove_file(rotated(&path, keep)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        for n in (1..keep).rev() {
            match std::fs::rename(rotated(&path, n), rotated(&path, n + 1)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        std::fs::rename(&path, rotated(&path, 1))?;
        self.file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        sync_dir(&path)?;
        self.len = 0;
        Ok(())
    }
}

impl Audit {
    /// Starts shipping committed records to a JSON Lines file (`[audit] ship_file`).
    pub fn ship(self: &Arc<Self>, settings: ShipSettings) -> std::io::Result<()> {
        let stats = start(self.clone(), settings)?;
        let _ = self.shipping.set(stats);
        Ok(())
    }
}
