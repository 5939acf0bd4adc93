//! The tools that change files: `write_file`, `edit_file`, `delete_file`. Each takes the
//! file's lock, works through the parent directory's handle (a last segment that is a link is
//! never followed), and changes the file in one step: new content goes to a temporary file
//! in the same directory, is synced, and is renamed over the old one, so a reader (or a crash)
//! sees the old file or the new one, never a torn one.

use std::io::Write as _;
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, Mode, OFlags};
use serde::Deserialize;
use serde_json::json;

use super::edit::{Edit, EditError};
use super::{Context, Done, FileError, Held, read_text};
use crate::jail::{JailError, Parent};

/// Largest file `edit_file` works on.
const EDIT_MAX: u64 = 10_000_000;
/// Most edits in one call.
const MAX_EDITS: usize = 100;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EditArgs {
    path: String,
    edits: Vec<Edit>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeleteArgs {
    path: String,
}

/// What is at a parent's name now.
enum Existing {
    Missing,
    File { mode: u32, size: u64 },
}

/// The parent directory of `raw` (writable root only) and what its entry is now: a regular
/// file or nothing. A link, directory or other kind is refused.
fn target(cx: Context<'_>, raw: &str) -> Result<(Parent, Existing), FileError> {
    let parent = cx
        .jail
        .parent_for_write(raw)
        .map_err(|e| FileError::jail(raw, e))?;
    let existing =
        match rustix::fs::statat(&parent.dir, parent.name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Err(rustix::io::Errno::NOENT) => Existing::Missing,
            Err(e) => return Err(FileError::io(&parent.resolved, e)),
            Ok(st) => match rustix::fs::FileType::from_raw_mode(st.st_mode) {
                rustix::fs::FileType::RegularFile => Existing::File {
                    mode: st.st_mode & 0o7777,
                    size: u64::try_from(st.st_size).unwrap_or(0),
                },
                rustix::fs::FileType::Symlink => {
                    return Err(FileError::PathDenied {
                        path: raw.to_owned(),
                        why: JailError::Escapes,
                    });
                }
                _ => return Err(FileError::NotAFile(parent.resolved.clone())),
            },
        };
    Ok((parent, existing))
}

fn lock(cx: Context<'_>, parent: &Parent) -> Result<Held, FileError> {
    cx.locks
        .acquire(&parent.resolved)
        .map_err(|e| FileError::ResourceBusy {
            path: parent.resolved.clone(),
            why: e.to_string(),
        })
}

pub(super) fn write_file(cx: Context<'_>, a: WriteArgs) -> Result<Done, FileError> {
    let (parent, _) = target(cx, &a.path)?;
    let held = lock(cx, &parent)?;
    // Looked at again under the lock: another call may have made or removed it meanwhile.
    let (parent, existing) = target(cx, &a.path)?;
    let (created, mode) = match existing {
        Existing::Missing => (true, 0o644),
        Existing::File { mode, .. } => (false, mode),
    };
    replace(cx, &parent, a.content.as_bytes(), mode, &held)?;
    Ok(Done {
        data: json!({"path": parent.resolved, "bytes": a.content.len(), "created": created}),
        took_over: held.took_over.clone(),
    })
}

pub(super) fn edit_file(cx: Context<'_>, a: EditArgs) -> Result<Done, FileError> {
    if a.edits.is_empty() || a.edits.len() > MAX_EDITS {
        return Err(FileError::InvalidEdit(EditError::Invalid {
            index: 0,
            message: format!("send 1 to {MAX_EDITS} edits"),
        }));
    }
    let (parent, _) = target(cx, &a.path)?;
    let held = lock(cx, &parent)?;
    let (parent, existing) = target(cx, &a.path)?;
    let Existing::File { mode, .. } = existing else {
        return Err(FileError::FileNotFound(parent.resolved));
    };
    let fd = rustix::fs::openat(
        &parent.dir,
        parent.name.as_str(),
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| FileError::io(&parent.resolved, e))?;
    let before = read_text(&parent.resolved, std::fs::File::from(fd), EDIT_MAX)?;
    let (after, applied) = super::edit::apply(&before, &a.edits, &|| cx.deadline.in_time())
        .map_err(|e| match e {
            EditError::MatchCountMismatch(_) => FileError::MatchCountMismatch(e),
            EditError::Overlapping { .. } => FileError::OverlappingEdits(e),
            EditError::Invalid { .. } => FileError::InvalidEdit(e),
            EditError::OutOfTime => FileError::Timeout(cx.deadline.budget_ms),
        })?;
    let changed = after != before;
    if changed {
        replace(cx, &parent, after.as_bytes(), mode, &held)?;
    }
    Ok(Done {
        data: json!({
            "path": parent.resolved,
            "bytes_before": before.len(),
            "bytes": after.len(),
            "changed": changed,
            "edits": applied,
        }),
        took_over: held.took_over.clone(),
    })
}

pub(super) fn delete_file(cx: Context<'_>, a: DeleteArgs) -> Result<Done, FileError> {
    let (parent, _) = target(cx, &a.path)?;
    let held = lock(cx, &parent)?;
    let (parent, existing) = target(cx, &a.path)?;
    let Existing::File { size, .. } = existing else {
        return Err(FileError::FileNotFound(parent.resolved));
    };
    commit_check(cx, &parent, &held)?;
    // Flags without AT_REMOVEDIR: the kernel refuses a directory even if one took its place.
    rustix::fs::unlinkat(&parent.dir, parent.name.as_str(), AtFlags::empty()).map_err(
        |e| match e {
            rustix::io::Errno::ISDIR => FileError::NotAFile(parent.resolved.clone()),
            other => FileError::io(&parent.resolved, other),
        },
    )?;
    sync_dir(&parent.dir);
    Ok(Done {
        data: json!({"path": parent.resolved, "bytes": size, "deleted": true}),
        took_over: held.took_over.clone(),
    })
}

/// Refuses to change the file when time is up or the lock was taken over as stale.
fn commit_check(cx: Context<'_>, parent: &Parent, held: &Held) -> Result<(), FileError> {
    cx.deadline.check()?;
    if held.still_held() {
        Ok(())
    } else {
        Err(FileError::ResourceBusy {
            path: parent.resolved.clone(),
            why: "this call's lock was taken over as stale before it could write".to_owned(),
        })
    }
}

/// Replaces the parent's entry with `bytes` atomically: temporary file, fsync, rename,
/// directory fsync. The temporary file is removed on any failure.
fn replace(
    cx: Context<'_>,
    parent: &Parent,
    bytes: &[u8],
    mode: u32,
    held: &Held,
) -> Result<(), FileError> {
    let stem = parent
        .name
        .get(..parent.name.floor_char_boundary(200))
        .unwrap_or("");
    let tmp = format!(".{stem}.toolgate-{}.tmp", uuid::Uuid::new_v4().simple());
    let fd = rustix::fs::openat(
        &parent.dir,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| FileError::io(&parent.resolved, e))?;
    let written = fill(fd, bytes, mode)
        .map_err(|e| FileError::io(&parent.resolved, e))
        .and_then(|()| commit_check(cx, parent, held))
        .and_then(|()| {
            rustix::fs::renameat(&parent.dir, tmp.as_str(), &parent.dir, parent.name.as_str())
                .map_err(|e| FileError::io(&parent.resolved, e))
        });
    if written.is_err() {
        let _ = rustix::fs::unlinkat(&parent.dir, tmp.as_str(), AtFlags::empty());
    }
    written?;
    sync_dir(&parent.dir);
    Ok(())
}

fn fill(fd: OwnedFd, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    file.sync_all()
}

/// Makes a rename or unlink in `dir` durable. Best effort: the change itself has happened.
fn sync_dir(dir: &OwnedFd) {
    if let Ok(fd) = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        let _ = rustix::fs::fsync(&fd);
    }
}
