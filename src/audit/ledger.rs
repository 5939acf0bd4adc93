//! The write-ahead ledger: a file that every audit batch, with the state changes it carries
//! ([`Effect`]s), reaches before the sled store does.
//!
//! sled 0.34 flushes with `sync_file_range`, which reaches neither the drive's cache nor the
//! file's metadata, and runs the real `fsync` later, in the background. So an acknowledged
//! record would rest on a promise sled does not keep. Here a batch is one frame written to
//! `<data_dir>/ledger/wal` and made durable with `fdatasync` before anyone is answered; sled
//! then applies it without flushing (a batch with state changes in one transaction). At start,
//! frames sled lacks are applied again, so sled is an index and a cache of state that can
//! always be rebuilt from the ledger's tail. The ledger is emptied once sled is durable past
//! it (`sled flush`, then an `fsync` of each of its files).
//!
//! The file is laid out ahead of need: a header block, then [`PREALLOCATED`] bytes of zeros,
//! written and made durable once. Frames overwrite those zeros, so a frame's `fdatasync`
//! never changes the file's size and depends on no file system metadata (an append's does,
//! and ext4 lost acknowledged appends when it went read-only after a disk error). Emptying
//! writes a new floor into the header instead of cutting the file: frames left from before
//! number their records below it, and are never read again.
//!
//! Header: `TGL0` · floor (u64 LE) · CRC-32 of the floor (u32 LE), in a block of
//! [`HEADER_BYTES`]. Frame: `TGL1` · payload length (u32 LE) · CRC-32 of the payload (u32 LE)
//! · payload, then a zeroed frame header (where a reader stops). The payload is the first and
//! last sequence numbers (u64 LE), the stored block (u32 LE length and bytes) and the effects
//! (u32 LE count; each a tree name, a key and an optional value, every part with a u32 LE
//! length, the value after a 0/1 byte). A torn tail (a crash in the middle of a write) stops
//! the reading there and is cut off. A file from before the header existed (frames from byte
//! 0) is read as it is and laid out anew once emptied.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::error::StoreError;

const MAGIC: &[u8; 4] = b"TGL1";
/// Largest payload a frame may claim: a damaged length cannot make the reader allocate
/// without bound (a batch is at most a few MiB deflated).
const MAX_PAYLOAD: usize = 256 * 1024 * 1024;

/// One state change applied together with the audit record that carries it: `key` in sled
/// tree `tree` set to `value`, or removed when `value` is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    /// The tree (`approvals`, `admin`, `grants`, `policies`).
    pub tree: String,
    /// The key.
    pub key: Vec<u8>,
    /// The new value; `None` removes the key.
    pub value: Option<Vec<u8>>,
}

impl Effect {
    /// Sets `key` in `tree` to `value`.
    pub fn put(tree: &str, key: impl Into<Vec<u8>>, value: Vec<u8>) -> Effect {
        Effect {
            tree: tree.to_owned(),
            key: key.into(),
            value: Some(value),
        }
    }

    /// Removes `key` from `tree`.
    pub fn remove(tree: &str, key: impl Into<Vec<u8>>) -> Effect {
        Effect {
            tree: tree.to_owned(),
            key: key.into(),
            value: None,
        }
    }

    /// Sets `key` in `tree` to `value` as JSON.
    pub fn put_json<T: serde::Serialize>(
        tree: &str,
        key: impl Into<Vec<u8>>,
        value: &T,
    ) -> Result<Effect, StoreError> {
        let bytes = serde_json::to_vec(value)
            .map_err(|e| StoreError(format!("cannot encode a `{tree}` entry: {e}")))?;
        Ok(Effect::put(tree, key, bytes))
    }
}

/// A frame read back: the batch's sequence numbers, its stored block and its effects.
#[derive(Debug)]
pub(crate) struct Frame {
    pub first: u64,
    pub last: u64,
    pub block: Vec<u8>,
    pub effects: Vec<Effect>,
}

/// The open ledger file.
pub(crate) struct Ledger {
    file: File,
    path: PathBuf,
    /// Where the frames start: [`HEADER_BYTES`], or 0 in a file written before the header
    /// existed (read once, then laid out anew when the ledger is emptied).
    base: u64,
    /// Bytes of valid frames: the next frame goes at `base + len`.
    len: u64,
    /// Bytes the file holds, written (zeros past the frames): frames overwrite them, so
    /// making one durable never changes the file's size.
    cap: u64,
    /// `ledger/outage`: [`OUTAGE_BYTES`] allocated at open, so that a note fits on a full disk.
    outage: Option<File>,
}

/// The header block at the start of the file: `TGL0`, the floor (u64 LE: every frame of
/// this generation numbers its records from there on; frames below it are left from before
/// the ledger was last emptied) and a CRC-32 of the floor. Frames follow the block.
const HEADER_MAGIC: &[u8; 4] = b"TGL0";
/// Bytes of the header block.
pub(crate) const HEADER_BYTES: u64 = 4096;
/// Bytes written (zeros) ahead of the frames when the file is laid out: frames overwrite
/// blocks that are already allocated and written, so their `fdatasync` carries no metadata.
/// An outside run showed why: on ext4 gone read-only after a disk error (`errors=remount-ro`),
/// appends acknowledged by `fdatasync` were lost in 10 of 15 runs, and overwrites of
/// written blocks in none (`docs/design-notes.md`).
pub(crate) const PREALLOCATED: u64 = 16 * 1024 * 1024;
/// Size of the frame header (magic, length, CRC): zeroing it makes a frame unreadable.
const FRAME_HEADER: usize = 12;

/// Size of the outage note file (the note is cut to fit).
const OUTAGE_BYTES: usize = 4096;

fn io_err(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    StoreError(format!("ledger {}: {what}: {e}", path.display()))
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), StoreError> {
    let len = u32::try_from(bytes.len())
        .map_err(|_| StoreError("a ledger frame part is over 4 GiB".to_owned()))?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
    Ok(())
}

/// The frame for a batch.
pub(crate) fn encode(
    first: u64,
    last: u64,
    block: &[u8],
    effects: &[Effect],
) -> Result<Vec<u8>, StoreError> {
    let mut payload = Vec::with_capacity(block.len() + 64);
    payload.extend_from_slice(&first.to_le_bytes());
    payload.extend_from_slice(&last.to_le_bytes());
    put_bytes(&mut payload, block)?;
    let count = u32::try_from(effects.len())
        .map_err(|_| StoreError("too many effects in one batch".to_owned()))?;
    payload.extend_from_slice(&count.to_le_bytes());
    for e in effects {
        put_bytes(&mut payload, e.tree.as_bytes())?;
        put_bytes(&mut payload, &e.key)?;
        match &e.value {
            Some(v) => {
                payload.push(1);
                put_bytes(&mut payload, v)?;
            }
            None => payload.push(0),
        }
    }
    let len = u32::try_from(payload.len())
        .map_err(|_| StoreError("a ledger frame is over 4 GiB".to_owned()))?;
    let mut frame = Vec::with_capacity(payload.len() + 12);
    frame.extend_from_slice(MAGIC);
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    frame.extend_from_slice(&payload);
    Ok(frame)
}

/// A cursor over bytes that fails (None) instead of reading past the end.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, tail) = self.0.split_at_checked(n)?;
        self.0 = tail;
        Some(head)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.u32()?).ok()?;
        self.take(n)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1)?.first().copied()
    }
}

fn decode_payload(payload: &[u8]) -> Option<Frame> {
    let mut c = Cursor(payload);
    let first = c.u64()?;
    let last = c.u64()?;
    let block = c.bytes()?.to_vec();
    let count = c.u32()?;
    let mut effects = Vec::new();
    for _ in 0..count {
        let tree = String::from_utf8(c.bytes()?.to_vec()).ok()?;
        let key = c.bytes()?.to_vec();
        let value = match c.u8()? {
            0 => None,
            1 => Some(c.bytes()?.to_vec()),
            _ => return None,
        };
        effects.push(Effect { tree, key, value });
    }
    c.0.is_empty().then_some(Frame {
        first,
        last,
        block,
        effects,
    })
}

/// The frame at the start of `bytes` and its length in bytes, if one is there whole and
/// checks (magic, length, CRC, parts).
fn decode_one(bytes: &[u8]) -> Option<(Frame, usize)> {
    let mut c = Cursor(bytes);
    let (magic, len, crc) = (c.take(4)?, c.u32()?, c.u32()?);
    let len = usize::try_from(len).ok()?;
    if magic != MAGIC || len > MAX_PAYLOAD {
        return None;
    }
    let payload = c.take(len)?;
    if crc32fast::hash(payload) != crc {
        return None;
    }
    Some((decode_payload(payload)?, 12 + len))
}

/// The valid frames at the start of `bytes`, and where they end. Each must number its
/// records past the one before it (the first from `floor` on): a frame left from before the
/// ledger was last emptied numbers below, and ends the run.
fn decode_all(bytes: &[u8], floor: u64) -> (Vec<Frame>, usize) {
    let mut frames: Vec<Frame> = Vec::new();
    let mut at = 0usize;
    while let Some((frame, len)) = bytes.get(at..).and_then(decode_one) {
        let after = frames.last().map_or(floor, |f| f.last.saturating_add(1));
        if frame.first < after || frame.last < frame.first {
            break;
        }
        frames.push(frame);
        at += len;
    }
    (frames, at)
}

/// Damage inside the ledger: a frame that does not check, with valid frames after it. A
/// crash tears only the frame being written, the last one, so this is not a torn write.
#[derive(Debug)]
pub(crate) struct Damage {
    /// Where the bad frame starts (byte offset).
    pub at: u64,
    /// The valid frames found after it, in order.
    pub after: Vec<Frame>,
}

/// The valid frames found in `bytes` past `from` (where the valid run stopped) that number
/// their records from `floor` on, by looking for each frame magic and decoding from there
/// (frames numbered below are left from before the ledger was last emptied).
fn frames_after(bytes: &[u8], from: usize, floor: u64) -> Vec<Frame> {
    let mut found: Vec<Frame> = Vec::new();
    let mut at = from + 1;
    while let Some(rest) = bytes.get(at..) {
        let Some(i) = rest.windows(MAGIC.len()).position(|w| w == MAGIC) else {
            break;
        };
        at += i;
        match bytes.get(at..).and_then(decode_one) {
            Some((frame, len))
                if frame.first >= found.last().map_or(floor, |f| f.last.saturating_add(1)) =>
            {
                found.push(frame);
                at += len;
            }
            _ => at += 1,
        }
    }
    found
}

impl Ledger {
    /// Opens (creating) `<dir>/ledger/wal` and reads its valid frames. A torn tail (the last
    /// frame, cut short or not checking, with no valid frame after it) is cut off (durably)
    /// so that new frames follow the last valid one. A bad frame with valid frames after it is
    /// [`Damage`], returned for the caller to judge, and nothing is cut.
    pub(crate) fn open(
        data_dir: &Path,
    ) -> Result<(Ledger, Vec<Frame>, Option<Damage>), StoreError> {
        let dir = data_dir.join("ledger");
        std::fs::create_dir_all(&dir).map_err(|e| io_err("cannot create", &dir, e))?;
        let path = dir.join("wal");
        let existed = path.exists();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io_err("cannot open", &path, e))?;
        if !existed {
            // The new name must survive a crash too.
            sync_dir(&dir)?;
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| io_err("cannot read", &path, e))?;
        // A file from before the header existed starts with a frame; a new one is empty.
        let (base, floor) = if bytes.starts_with(MAGIC) || bytes.is_empty() {
            (0, 0)
        } else {
            (HEADER_BYTES, read_floor(&bytes))
        };
        let body = bytes.get(base as usize..).unwrap_or_default();
        let (frames, valid_end) = decode_all(body, floor);
        let next = frames.last().map_or(floor, |f| f.last.saturating_add(1));
        // Every frame is written with zeros after its end, so a clean end reads zeros (or the
        // file's end); anything else is a frame cut short, or damage with frames after it.
        let tail = body.get(valid_end..).unwrap_or_default();
        let clean = tail.iter().take(FRAME_HEADER).all(|b| *b == 0);
        let after = if clean {
            Vec::new()
        } else {
            frames_after(body, valid_end, next)
        };
        let mut valid = valid_end as u64;
        let damage = (!after.is_empty()).then_some(Damage {
            at: base + valid,
            after,
        });
        if damage.is_some() {
            // Kept whole: the frames after the damage may be needed, and the caller decides.
            valid = body.len() as u64;
        } else if !clean {
            tracing::warn!(
                ledger = %path.display(),
                kept = valid,
                "the ledger ends in a torn or damaged frame (a crash during a write); it is cut off"
            );
            file.write_all_at(&[0u8; FRAME_HEADER], base + valid)
                .and_then(|()| file.sync_data())
                .map_err(|e| io_err("cannot cut the damaged tail", &path, e))?;
        }
        let cap = bytes.len() as u64;
        let outage = match open_outage(&dir.join("outage")) {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::warn!(error = %e, "no outage note file: an outage cut short by a stop will not be noted after the restart");
                None
            }
        };
        let mut ledger = Ledger {
            file,
            path,
            base,
            len: valid,
            cap,
            outage,
        };
        // Nothing to keep: a new file, or one from before the header existed, is laid out now.
        if frames.is_empty() && damage.is_none() && (base == 0 || cap < HEADER_BYTES + PREALLOCATED)
        {
            ledger.reset(floor)?;
        }
        Ok((ledger, frames, damage))
    }

    /// Keeps `text` (or clears the note): written in place, in blocks allocated at open, so it
    /// works on a full disk.
    pub(crate) fn note_outage(&self, text: Option<&str>) -> Result<(), StoreError> {
        let Some(f) = &self.outage else {
            return Ok(());
        };
        let mut page = vec![0u8; OUTAGE_BYTES];
        if let Some(text) = text {
            let mut end = text.len().min(OUTAGE_BYTES);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            if let (Some(dst), Some(src)) = (page.get_mut(..end), text.as_bytes().get(..end)) {
                dst.copy_from_slice(src);
            }
        }
        f.write_all_at(&page, 0)
            .and_then(|()| f.sync_data())
            .map_err(|e| io_err("cannot write the outage note", &self.path, e))
    }

    /// The outage note, if one is kept.
    pub(crate) fn outage(&self) -> Option<String> {
        let f = self.outage.as_ref()?;
        let mut page = vec![0u8; OUTAGE_BYTES];
        f.read_exact_at(&mut page, 0).ok()?;
        let end = page.iter().position(|b| *b == 0).unwrap_or(page.len());
        let text = String::from_utf8_lossy(page.get(..end)?).into_owned();
        (!text.is_empty()).then_some(text)
    }

    /// The valid frames in the file now.
    pub(crate) fn frames(&self) -> Result<Vec<Frame>, StoreError> {
        let len = usize::try_from(self.len)
            .map_err(|_| StoreError("the ledger is too large to read".to_owned()))?;
        let mut bytes = vec![0u8; len];
        self.file
            .read_exact_at(&mut bytes, self.base)
            .map_err(|e| io_err("cannot read", &self.path, e))?;
        Ok(decode_all(&bytes, 0).0)
    }

    /// Bytes of valid frames (0: empty).
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Writes `frame` after the last one (not yet durable), over blocks already written, with
    /// a zeroed frame header after it (the end a reader stops at). Past the written blocks
    /// the file first grows by zeros, made durable before the frame is written. On failure
    /// the frame is made unreadable again.
    pub(crate) fn append(&mut self, frame: &[u8]) -> Result<(), StoreError> {
        let at = self.base + self.len;
        let end = at + frame.len() as u64 + FRAME_HEADER as u64;
        if end > self.cap {
            self.grow(end)?;
        }
        let injected: Option<std::io::Error> = (|| {
            fail::fail_point!("ledger-append-eio", |_| Some(
                std::io::Error::from_raw_os_error(rustix::io::Errno::IO.raw_os_error())
            ));
            None
        })();
        if let Some(e) = injected {
            return Err(io_err("cannot append", &self.path, e));
        }
        let mut bytes = Vec::with_capacity(frame.len() + FRAME_HEADER);
        bytes.extend_from_slice(frame);
        bytes.extend_from_slice(&[0u8; FRAME_HEADER]);
        if let Err(e) = self.file.write_all_at(&bytes, at) {
            let _ = self.file.write_all_at(&[0u8; FRAME_HEADER], at);
            return Err(io_err("cannot append", &self.path, e));
        }
        self.len += frame.len() as u64;
        Ok(())
    }

    /// Writes zeros from the file's end to at least `end` (a whole [`PREALLOCATED`] more,
    /// so growing is rare), and makes the new size durable.
    fn grow(&mut self, end: u64) -> Result<(), StoreError> {
        let target = end.max(self.cap + PREALLOCATED);
        zero_fill(&self.file, self.cap, target)
            .and_then(|()| self.file.sync_all())
            .map_err(|e| io_err("cannot grow", &self.path, e))?;
        self.cap = target;
        Ok(())
    }

    /// Makes everything appended durable (`fdatasync`).
    pub(crate) fn sync(&self) -> Result<(), StoreError> {
        // A disk that fails its writeback answers `fdatasync` with EIO (tests inject it).
        fail::fail_point!("ledger-sync-eio", |_| Err(io_err(
            "fdatasync failed",
            &self.path,
            std::io::Error::from_raw_os_error(rustix::io::Errno::IO.raw_os_error())
        )));
        self.file
            .sync_data()
            .map_err(|e| io_err("fdatasync failed", &self.path, e))
    }

    /// Cuts the frames back to `len` bytes (a frame that must not count), durably: the frame
    /// header there is zeroed.
    pub(crate) fn truncate(&mut self, len: u64) -> Result<(), StoreError> {
        let at = self.base + len;
        self.file
            .write_all_at(&[0u8; FRAME_HEADER], at)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| io_err("cannot cut back a failed frame", &self.path, e))?;
        self.len = len;
        Ok(())
    }

    /// Empties the ledger (the store holds every frame, durably): the header says that frames
    /// from now on number their records from `floor` on, and the first frame's place is
    /// zeroed, in one durable write. The frames left in the file past it number below `floor`
    /// and are never read again. A file without the header, or shorter than
    /// [`PREALLOCATED`], is laid out first (zeros written, then made durable).
    pub(crate) fn reset(&mut self, floor: u64) -> Result<(), StoreError> {
        let want = HEADER_BYTES + PREALLOCATED;
        if self.base == 0 || self.cap < want {
            zero_fill(&self.file, 0, want.max(self.cap))
                .and_then(|()| self.file.sync_all())
                .map_err(|e| io_err("cannot lay out", &self.path, e))?;
            self.cap = want.max(self.cap);
        }
        let mut block = Vec::with_capacity(HEADER_BYTES as usize + FRAME_HEADER);
        block.extend_from_slice(HEADER_MAGIC);
        block.extend_from_slice(&floor.to_le_bytes());
        block.extend_from_slice(&crc32fast::hash(&floor.to_le_bytes()).to_le_bytes());
        block.resize(HEADER_BYTES as usize + FRAME_HEADER, 0);
        self.file
            .write_all_at(&block, 0)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| io_err("cannot empty", &self.path, e))?;
        self.base = HEADER_BYTES;
        self.len = 0;
        Ok(())
    }

    /// Makes every other file of the data directory durable (sled's, after its flush, which
    /// stops at `sync_file_range`): each regular file and directory below it is `fsync`ed. Not
    /// `syncfs`, which would wait for every other writer on the same disk.
    pub(crate) fn sync_data_dir(&self) -> Result<(), StoreError> {
        let ledger_dir = self.path.parent().unwrap_or(Path::new("."));
        let data_dir = ledger_dir.parent().unwrap_or(Path::new("."));
        sync_tree(data_dir, ledger_dir, 0)
    }

    /// Bytes free to unprivileged writers on the ledger's file system.
    pub(crate) fn free_bytes(&self) -> Option<u64> {
        let st = rustix::fs::fstatvfs(&self.file).ok()?;
        Some(st.f_bavail.saturating_mul(st.f_frsize))
    }
}

/// The floor the header block at the start of `bytes` names; 0 when there is none, or it
/// does not check (every frame is then read, and the store skips those it holds).
fn read_floor(bytes: &[u8]) -> u64 {
    let mut c = Cursor(bytes);
    let (Some(magic), Some(floor), Some(crc)) = (c.take(4), c.u64(), c.u32()) else {
        return 0;
    };
    if magic == HEADER_MAGIC && crc32fast::hash(&floor.to_le_bytes()) == crc {
        floor
    } else {
        0
    }
}

/// Writes zeros over `from..to` of `file`, 1 MiB at a time.
fn zero_fill(file: &File, from: u64, to: u64) -> std::io::Result<()> {
    let chunk = vec![0u8; 1 << 20];
    let mut at = from;
    while at < to {
        let n = (to - at).min(chunk.len() as u64) as usize;
        file.write_all_at(chunk.get(..n).unwrap_or_default(), at)?;
        at += n as u64;
    }
    Ok(())
}

/// Opens the outage note file, allocating its blocks (zeros) when it is new or short.
fn open_outage(path: &Path) -> Result<File, StoreError> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| io_err("cannot open", path, e))?;
    let len = f
        .metadata()
        .map_err(|e| io_err("cannot stat", path, e))?
        .len();
    if len < OUTAGE_BYTES as u64 {
        let mut page = vec![0u8; OUTAGE_BYTES];
        if len > 0 {
            // Keep a note already there.
            let _ = f.read_exact_at(page.get_mut(..len as usize).unwrap_or_default(), 0);
        }
        f.write_all_at(&page, 0)
            .and_then(|()| f.sync_all())
            .map_err(|e| io_err("cannot allocate", path, e))?;
    }
    Ok(f)
}

/// `fsync`s the regular files and directories below `dir` (not into `skip`, nor deeper than a
/// few levels: sled keeps its files at the top and in `blobs/`).
fn sync_tree(dir: &Path, skip: &Path, depth: usize) -> Result<(), StoreError> {
    let entries = std::fs::read_dir(dir).map_err(|e| io_err("cannot list", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_err("cannot list", dir, e))?;
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|e| io_err("cannot stat", &path, e))?;
        if kind.is_dir() && path != skip && depth < 3 {
            sync_tree(&path, skip, depth + 1)?;
        } else if kind.is_file() {
            File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(|e| io_err("cannot fsync", &path, e))?;
        }
    }
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err("cannot sync the directory", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_a_torn_tail_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let effects = vec![
            Effect::put("approvals", b"a1".to_vec(), b"{}".to_vec()),
            Effect::remove("grants", b"g1".to_vec()),
        ];
        {
            let (mut l, frames, _) = Ledger::open(dir.path()).unwrap();
            assert!(frames.is_empty());
            l.append(&encode(1, 3, b"block-1", &effects).unwrap())
                .unwrap();
            l.append(&encode(4, 4, b"block-2", &[]).unwrap()).unwrap();
            l.sync().unwrap();
            // A crash in the middle of a third append.
            let torn = encode(5, 9, b"block-3", &[]).unwrap();
            l.file
                .write_all_at(&torn[..torn.len() / 2], l.base + l.len)
                .unwrap();
        }
        let (l, frames, damage) = Ledger::open(dir.path()).unwrap();
        assert!(damage.is_none(), "a torn tail is not damage");
        assert_eq!(frames.len(), 2);
        assert_eq!((frames[0].first, frames[0].last), (1, 3));
        assert_eq!(frames[0].block, b"block-1");
        assert_eq!(frames[0].effects, effects);
        assert_eq!((frames[1].first, frames[1].last), (4, 4));
        let two = (encode(1, 3, b"block-1", &effects).unwrap().len()
            + encode(4, 4, b"block-2", &[]).unwrap().len()) as u64;
        assert_eq!(l.len(), two);
        // Written in place: the file keeps its laid-out size.
        let on_disk = std::fs::metadata(dir.path().join("ledger/wal"))
            .unwrap()
            .len();
        assert_eq!(on_disk, HEADER_BYTES + PREALLOCATED);
    }

    /// After the ledger is emptied, the frames left in the file are never read again, even
    /// where a new, shorter frame ends exactly where an old one began.
    #[test]
    fn frames_from_before_the_ledger_was_emptied_are_never_read() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut l, _, _) = Ledger::open(dir.path()).unwrap();
            l.append(&encode(1, 1, b"one", &[]).unwrap()).unwrap();
            l.append(&encode(2, 2, b"two", &[]).unwrap()).unwrap();
            l.append(&encode(3, 3, b"three", &[]).unwrap()).unwrap();
            l.sync().unwrap();
            l.reset(4).unwrap();
            // Same length as the old first frame: it ends where the old second began.
            l.append(&encode(4, 4, b"for", &[]).unwrap()).unwrap();
            l.sync().unwrap();
        }
        let (l, frames, damage) = Ledger::open(dir.path()).unwrap();
        assert!(damage.is_none(), "{damage:?}");
        let read: Vec<(u64, u64)> = frames.iter().map(|f| (f.first, f.last)).collect();
        assert_eq!(read, [(4, 4)]);
        assert_eq!(l.len(), encode(4, 4, b"for", &[]).unwrap().len() as u64);
    }

    #[test]
    fn a_flipped_bit_in_the_last_frame_is_a_torn_tail_and_before_it_damage() {
        let dir = tempfile::tempdir().unwrap();
        let flip = |l: &Ledger, at: u64| {
            let mut byte = [0u8];
            l.file.read_exact_at(&mut byte, at).unwrap();
            l.file.write_all_at(&[byte[0] ^ 1], at).unwrap();
        };
        {
            let (mut l, _, _) = Ledger::open(dir.path()).unwrap();
            l.append(&encode(1, 1, b"one", &[]).unwrap()).unwrap();
            let second = l.base + l.len();
            l.append(&encode(2, 2, b"two", &[]).unwrap()).unwrap();
            flip(&l, second + 20);
        }
        let (l, frames, damage) = Ledger::open(dir.path()).unwrap();
        assert_eq!(frames.len(), 1);
        assert!(damage.is_none());
        // The same flip with frames after it: damage, named, with what follows, kept whole.
        let mut l = l;
        let second = l.base + l.len();
        l.append(&encode(2, 2, b"two", &[]).unwrap()).unwrap();
        l.append(&encode(3, 5, b"three", &[]).unwrap()).unwrap();
        l.append(&encode(6, 6, b"six", &[]).unwrap()).unwrap();
        flip(&l, second + 20);
        let size = std::fs::metadata(dir.path().join("ledger/wal"))
            .unwrap()
            .len()
            - l.base;
        drop(l);
        let (l, frames, damage) = Ledger::open(dir.path()).unwrap();
        assert_eq!(frames.len(), 1);
        let damage = damage.expect("damage before valid frames");
        assert_eq!(damage.at, second);
        let after: Vec<(u64, u64)> = damage.after.iter().map(|f| (f.first, f.last)).collect();
        assert_eq!(after, [(3, 5), (6, 6)]);
        assert_eq!(l.len(), size, "nothing is cut");
    }
}
