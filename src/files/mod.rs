//! The built-in file tools, run by toolgate itself (a manifest's `"builtin"`): `read_file`,
//! `list_files`, `search_files`, `count_matches`, `write_file`, `edit_file`, `delete_file`.
//! Every path goes through the one [`Jail`]: opened relative to a directory handle, below the
//! service root (or a read-only shared root), never through an escaping link or across a
//! mount, never a deny-listed name.
//!
//! Owns: the tools' arguments, their work on the file system, their error codes
//! ([`FileError::code`]) and suggestions, atomic replacement and the per-file locks
//! ([`Locks`]). Does not own: the decision, the output gate or the audit record (see
//! `gateway::execute`), which treat these tools like any other.

pub mod edit;
mod lock;
pub mod pattern;
mod read;
mod write;

pub use lock::{Held, LockError, Locks};

use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::codes::Code;
use crate::jail::{Jail, JailError};
pub use crate::tools::Builtin;

/// Why a file tool failed. [`FileError::code`] is the code an agent acts on.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The jail refused the path.
    #[error("`{path}`: {why}")]
    PathDenied {
        /// The path as asked.
        path: String,
        /// Why.
        why: JailError,
    },
    /// No such file or directory.
    #[error("`{0}` does not exist")]
    FileNotFound(String),
    /// A directory (or device, FIFO, socket) where a file was needed.
    #[error("`{0}` is not a regular file")]
    NotAFile(String),
    /// A file where a directory was needed.
    #[error("`{0}` is not a directory")]
    NotADirectory(String),
    /// Binary or not UTF-8.
    #[error("`{path}` is not UTF-8 text ({why})")]
    NotText {
        /// The path.
        path: String,
        /// What gave it away.
        why: String,
    },
    /// Larger than the limit.
    #[error("`{path}` is {size} bytes, over the limit of {limit}")]
    TooLarge {
        /// The path.
        path: String,
        /// Its size.
        size: u64,
        /// The limit that applied.
        limit: u64,
    },
    /// An edit list refused by the edit engine: a count mismatch, overlapping edits, or an
    /// edit that cannot run as written (its code says which).
    #[error("{0}; nothing was changed")]
    Edit(edit::EditError),
    /// A pattern refused.
    #[error("{0}")]
    InvalidPattern(pattern::PatternError),
    /// Another call holds the file's lock.
    #[error("`{path}`: {why}; nothing was changed")]
    ResourceBusy {
        /// The path.
        path: String,
        /// Why.
        why: String,
    },
    /// The time budget ran out before the work was done.
    #[error("ran out of its time budget ({0} ms); nothing was changed")]
    Timeout(u64),
    /// Arguments the tool cannot use (a manifest that allows more than the tool knows).
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// Another I/O failure.
    #[error("`{path}`: {message}")]
    Io {
        /// The path.
        path: String,
        /// What failed.
        message: String,
    },
}

impl FileError {
    /// The stable code an agent acts on.
    pub fn code(&self) -> Code {
        match self {
            FileError::PathDenied { .. } => Code::PathDenied,
            FileError::FileNotFound(_) => Code::FileNotFound,
            FileError::NotAFile(_) => Code::NotAFile,
            FileError::NotADirectory(_) => Code::NotADirectory,
            FileError::NotText { .. } => Code::NotText,
            FileError::TooLarge { .. } => Code::TooLarge,
            FileError::Edit(edit::EditError::MatchCountMismatch(_)) => Code::MatchCountMismatch,
            FileError::Edit(edit::EditError::Overlapping { .. }) => Code::OverlappingEdits,
            FileError::Edit(edit::EditError::OutOfTime) => Code::Timeout,
            FileError::Edit(edit::EditError::TooLarge(_)) => Code::TooLarge,
            FileError::Edit(edit::EditError::Invalid { .. }) => Code::InvalidEdit,
            FileError::InvalidPattern(_) => Code::InvalidPattern,
            FileError::ResourceBusy { .. } => Code::ResourceBusy,
            FileError::Timeout(_) => Code::Timeout,
            FileError::InvalidArguments(_) => Code::InvalidArguments,
            FileError::Io { .. } => Code::IoError,
        }
    }

    /// What the agent can do about it.
    pub fn suggestion(&self) -> String {
        match self {
            FileError::PathDenied { .. } => "name a path below the service root that is not deny-listed and does not go through a link (for writes: name the file itself, not a link to it or through a linked directory); list_files shows what may be used".to_owned(),
            FileError::FileNotFound(_) => "check the path with list_files (paths are relative to the service root); write_file creates new files".to_owned(),
            FileError::NotAFile(_) => "name a file; use list_files for a directory".to_owned(),
            FileError::NotADirectory(_) => "name a directory, or read the file with read_file".to_owned(),
            FileError::NotText { .. } => "only UTF-8 text files can be read or edited; binary files are not served".to_owned(),
            FileError::TooLarge { limit, .. } => format!("read less: raise `max_bytes` (up to the tool's maximum), or find the part you need with search_files (limit here: {limit} bytes)"),
            FileError::Edit(edit::EditError::MatchCountMismatch(_)) => "make `spec` match exactly the intended text (include a neighbouring line), or set `count` to the number found; count_matches checks before editing".to_owned(),
            FileError::Edit(edit::EditError::Overlapping { .. }) => "merge the overlapping edits into one, or target disjoint text".to_owned(),
            FileError::Edit(edit::EditError::OutOfTime) => "ask for less: fewer edits, or exact specs instead of broad patterns".to_owned(),
            FileError::Edit(edit::EditError::TooLarge(_)) => "split the change into several calls, or write the file whole with write_file".to_owned(),
            FileError::Edit(edit::EditError::Invalid { .. }) => "fix the named edit: a non-empty `spec`, `content` for replace/append_after/prepend_before, none for delete, `count` of at least 1".to_owned(),
            FileError::InvalidPattern(_) => "fix the pattern (Rust regex syntax, no look-around or back-references), or set `literal` to search for the text as written".to_owned(),
            FileError::ResourceBusy { .. } => "another call is changing this file: retry in a moment, and read it again before editing".to_owned(),
            FileError::Timeout(_) => "ask for less: a narrower `path`, `recursive: false`, or a more specific pattern".to_owned(),
            FileError::InvalidArguments(_) => "operators: the tool's manifest allows arguments the built-in does not know".to_owned(),
            FileError::Io { .. } => "retry; operators: see the sidecar's logs".to_owned(),
        }
    }

    fn jail(path: &str, why: JailError) -> FileError {
        match why {
            JailError::NotFound => FileError::FileNotFound(path.to_owned()),
            JailError::NotAFile => FileError::NotAFile(path.to_owned()),
            JailError::NotADirectory => FileError::NotADirectory(path.to_owned()),
            JailError::Io(kind) => FileError::Io {
                path: path.to_owned(),
                message: std::io::Error::from(kind).to_string(),
            },
            why => FileError::PathDenied {
                path: path.to_owned(),
                why,
            },
        }
    }

    fn io(path: &str, e: impl Into<std::io::Error>) -> FileError {
        let e: std::io::Error = e.into();
        match e.kind() {
            std::io::ErrorKind::NotFound => FileError::FileNotFound(path.to_owned()),
            _ => FileError::Io {
                path: path.to_owned(),
                message: e.to_string(),
            },
        }
    }
}

/// When a call's time is up: the tool's `limits.timeout_ms` from the start.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    at: Instant,
    budget_ms: u64,
}

impl Deadline {
    /// `budget_ms` from now (at most a day).
    pub fn after_ms(budget_ms: u64) -> Deadline {
        let budget_ms = budget_ms.min(86_400_000);
        let now = Instant::now();
        Deadline {
            at: now
                .checked_add(Duration::from_millis(budget_ms))
                .unwrap_or(now),
            budget_ms,
        }
    }

    /// Time is left.
    pub fn in_time(&self) -> bool {
        Instant::now() < self.at
    }

    fn check(&self) -> Result<(), FileError> {
        if self.in_time() {
            Ok(())
        } else {
            Err(FileError::Timeout(self.budget_ms))
        }
    }
}

/// What the file tools work with.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The path jail.
    pub jail: &'a Jail,
    /// The per-file locks.
    pub locks: &'a Locks,
    /// The call's time budget.
    pub deadline: Deadline,
    /// The tool's `limits.max_output_bytes`: how much a listing or search may gather.
    pub max_output_bytes: u64,
}

/// Runs `tool` with `args` (validated and allowed): the result (`data` of the standard
/// result, before the output gate), or why not. Blocking: call it off the async workers.
pub fn run(cx: Context<'_>, tool: Builtin, args: &Value) -> Result<Value, FileError> {
    match tool {
        Builtin::ReadFile => parse(args).and_then(|a| read::read_file(cx, a)),
        Builtin::ListFiles => parse(args).and_then(|a| read::list_files(cx, a)),
        Builtin::SearchFiles => parse(args).and_then(|a| read::search_files(cx, a)),
        Builtin::CountMatches => parse(args).and_then(|a| read::count_matches(cx, a)),
        Builtin::WriteFile => parse(args).and_then(|a| write::write_file(cx, a)),
        Builtin::EditFile => parse(args).and_then(|a| write::edit_file(cx, a)),
        Builtin::DeleteFile => parse(args).and_then(|a| write::delete_file(cx, a)),
    }
}

fn parse<T: DeserializeOwned>(args: &Value) -> Result<T, FileError> {
    T::deserialize(args).map_err(|e| FileError::InvalidArguments(e.to_string()))
}

/// Reads all of `file` as UTF-8 text of at most `limit` bytes.
fn read_text(path: &str, file: std::fs::File, limit: u64) -> Result<String, FileError> {
    use std::io::Read as _;
    let size = file.metadata().map_err(|e| FileError::io(path, e))?.len();
    if size > limit {
        return Err(FileError::TooLarge {
            path: path.to_owned(),
            size,
            limit,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    // One byte more than the limit tells a file that grew since the stat.
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| FileError::io(path, e))?;
    let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if read > limit {
        return Err(FileError::TooLarge {
            path: path.to_owned(),
            size: read,
            limit,
        });
    }
    text(path, bytes)
}

/// `bytes` as text, or [`FileError::NotText`]: a NUL byte marks a binary file.
fn text(path: &str, bytes: Vec<u8>) -> Result<String, FileError> {
    if let Some(at) = bytes.iter().position(|&b| b == 0) {
        return Err(FileError::NotText {
            path: path.to_owned(),
            why: format!("a NUL byte at offset {at}: a binary file"),
        });
    }
    String::from_utf8(bytes).map_err(|e| FileError::NotText {
        path: path.to_owned(),
        why: format!("invalid UTF-8 at offset {}", e.utf8_error().valid_up_to()),
    })
}
