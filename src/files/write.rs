//! The tools that change files: `write_file`, `edit_file`, `delete_file`. Each takes the
//! file's lock, works through the parent directory's handle (a last segment that is a link is
//! never followed), and changes the file in one step: new content goes to a temporary file
//! in the same directory, is synced, and is renamed over the old one, so a reader (or a crash)
//! sees the old file or the new one, never a torn one.

use std::io::Write as _;
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, Mode, OFlags};
use serde::Deserialize;
use serde_json::{Value, json};

use super::edit::{Edit, EditError};
use super::{Context, FileError, Held, read_text};
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
    File {
        /// Whose it is, kept when it is replaced.
        owner: Owner,
        size: u64,
    },
}

/// Who a file belongs to and its permission bits.
struct Owner {
    /// Permission bits only: no setuid, setgid or sticky bit is ever carried over.
    mode: u32,
    /// The old file's owner and group, kept where the sidecar may (as root); `None` for a new
    /// file.
    ids: Option<(u32, u32)>,
}

impl Owner {
    /// A file the sidecar creates.
    const NEW: Owner = Owner {
        mode: 0o644,
        ids: None,
    };
}

/// The parent directory of `raw` (writable root only) and what its entry is now: a regular
/// file with one name, or nothing. A link, a hard-linked file, a directory or another kind is
/// refused, and so is a path that reaches its file through a linked directory: policies
/// decided on the path as asked (`asked`, normalized), so the path written must be that path.
fn target(cx: Context<'_>, raw: &str, asked: &str) -> Result<(Parent, Existing), FileError> {
    let parent = cx
        .jail
        .parent_for_write(raw)
        .map_err(|e| FileError::jail(raw, e))?;
    if parent.resolved != asked {
        return Err(FileError::PathDenied {
            path: raw.to_owned(),
            why: JailError::Escapes,
        });
    }
    let stat = rustix::fs::statat(&parent.dir, parent.name.as_str(), AtFlags::SYMLINK_NOFOLLOW);
    let existing = match stat {
        Err(rustix::io::Errno::NOENT) => Existing::Missing,
        Err(e) => return Err(FileError::io(&parent.resolved, e)),
        Ok(st) => match rustix::fs::FileType::from_raw_mode(st.st_mode) {
            rustix::fs::FileType::RegularFile => {
                crate::jail::regular_single(&st).map_err(|e| FileError::jail(raw, e))?;
                Existing::File {
                    owner: Owner {
                        mode: st.st_mode & 0o777,
                        ids: Some((st.st_uid, st.st_gid)),
                    },
                    size: u64::try_from(st.st_size).unwrap_or(0),
                }
            }
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

/// Takes the file's lock, then looks at the file under it. The lock is keyed on the path as
/// asked, normalized: [`target`] refuses any other path, so that is the file written. The
/// caller keeps the lock until it has changed the file.
fn locked(cx: Context<'_>, raw: &str) -> Result<(Held, Parent, Existing), FileError> {
    let asked =
        crate::paths::normalize_path(raw).map_err(|e| FileError::jail(raw, JailError::from(e)))?;
    let held = cx
        .locks
        .acquire(&asked)
        .map_err(|e| FileError::ResourceBusy {
            path: asked.clone(),
            why: e.to_string(),
        })?;
    let (parent, existing) = target(cx, raw, &asked)?;
    Ok((held, parent, existing))
}

pub(super) fn write_file(cx: Context<'_>, a: WriteArgs) -> Result<Value, FileError> {
    let (_held, parent, existing) = locked(cx, &a.path)?;
    let (created, owner) = match existing {
        Existing::Missing => (true, Owner::NEW),
        Existing::File { owner, .. } => (false, owner),
    };
    replace(cx, &parent, a.content.as_bytes(), owner)?;
    Ok(json!({"path": parent.resolved, "bytes": a.content.len(), "created": created}))
}

pub(super) fn edit_file(cx: Context<'_>, a: EditArgs) -> Result<Value, FileError> {
    if a.edits.is_empty() || a.edits.len() > MAX_EDITS {
        return Err(FileError::Edit(EditError::Invalid {
            index: 0,
            message: format!("send 1 to {MAX_EDITS} edits"),
        }));
    }
    let (_held, parent, existing) = locked(cx, &a.path)?;
    let Existing::File { owner, .. } = existing else {
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
    let limit = usize::try_from(EDIT_MAX).unwrap_or(usize::MAX);
    let (after, applied) = super::edit::apply(&before, &a.edits, limit, &|| cx.deadline.in_time())
        .map_err(FileError::Edit)?;
    let changed = after != before;
    if changed {
        replace(cx, &parent, after.as_bytes(), owner)?;
    }
    Ok(json!({
        "path": parent.resolved,
        "bytes_before": before.len(),
        "bytes": after.len(),
        "changed": changed,
        "edits": applied,
    }))
}

pub(super) fn delete_file(cx: Context<'_>, a: DeleteArgs) -> Result<Value, FileError> {
    let (_held, parent, existing) = locked(cx, &a.path)?;
    let Existing::File { size, .. } = existing else {
        return Err(FileError::FileNotFound(parent.resolved));
    };
    cx.deadline.check()?;
    // Flags without AT_REMOVEDIR: the kernel refuses a directory even if one took its place.
    rustix::fs::unlinkat(&parent.dir, parent.name.as_str(), AtFlags::empty()).map_err(
        |e| match e {
            rustix::io::Errno::ISDIR => FileError::NotAFile(parent.resolved.clone()),
            other => FileError::io(&parent.resolved, other),
        },
    )?;
    sync_dir(&parent.dir);
    Ok(json!({"path": parent.resolved, "bytes": size, "deleted": true}))
}

/// Replaces the parent's entry with `bytes` atomically: temporary file, fsync, rename,
/// directory fsync, unless time ran out meanwhile. The temporary file is removed on any
/// failure.
fn replace(cx: Context<'_>, parent: &Parent, bytes: &[u8], owner: Owner) -> Result<(), FileError> {
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
    let written = fill(fd, bytes, &owner)
        .map_err(|e| FileError::io(&parent.resolved, e))
        .and_then(|()| cx.deadline.check())
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

fn fill(fd: OwnedFd, bytes: &[u8], owner: &Owner) -> std::io::Result<()> {
    if let Some((uid, gid)) = owner.ids {
        // Only root may give a file away; otherwise the new file is the sidecar user's, as
        // any file it writes. Best effort: failing here changes no permission.
        let _ = rustix::fs::fchown(
            &fd,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
        );
    }
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(owner.mode))?;
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
