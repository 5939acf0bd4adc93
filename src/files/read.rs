//! The reading tools: `read_file`, `list_files`, `search_files`, `count_matches`. Trees are
//! walked through the jail one directory handle per level: links are shown but never
//! followed, mounts never crossed, deny-listed names neither shown nor searched.

use std::os::fd::OwnedFd;

use serde::Deserialize;
use serde_json::{Value, json};

use super::pattern::Pattern;
use super::{Context, FileError, read_text};

/// `read_file`'s limit when `max_bytes` is not given.
const READ_DEFAULT: u64 = 100_000;
/// The largest `max_bytes`.
const READ_MAX: u64 = 10_000_000;
/// Files larger than this are skipped by searches (and counted as skipped).
const SEARCH_FILE_MAX: u64 = 4 * 1024 * 1024;
/// Entries read from one directory at most.
const DIR_MAX: usize = 100_000;
/// Snippet length around a match's start, bytes.
const SNIPPET: usize = 240;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadArgs {
    path: String,
    max_bytes: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListArgs {
    path: Option<String>,
    #[serde(default)]
    recursive: bool,
    max_entries: Option<usize>,
    max_depth: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SearchArgs {
    path: Option<String>,
    regex: String,
    #[serde(default)]
    literal: bool,
    recursive: Option<bool>,
    max_matches: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CountArgs {
    path: Option<String>,
    regex: String,
    #[serde(default)]
    literal: bool,
    recursive: Option<bool>,
}

pub(super) fn read_file(cx: Context<'_>, a: ReadArgs) -> Result<Value, FileError> {
    let limit = a.max_bytes.unwrap_or(READ_DEFAULT).clamp(1, READ_MAX);
    let opened = cx
        .jail
        .open_read(&a.path)
        .map_err(|e| FileError::jail(&a.path, e))?;
    let content = read_text(&opened.resolved, opened.file, limit)?;
    Ok(json!({
        "path": opened.resolved,
        "bytes": content.len(),
        "lines": content.lines().count(),
        "content": content,
    }))
}

/// One directory entry met by a walk.
struct Entry<'a> {
    /// The directory holding it.
    dir: &'a OwnedFd,
    /// Its name there.
    name: &'a str,
    /// Its path below the root (with a shared root's name first).
    path: String,
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    File,
    Dir,
    Link,
    Other,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Dir => "dir",
            Kind::Link => "symlink",
            Kind::Other => "other",
        }
    }
}

/// Whether a walk goes on.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Go,
    Stop,
}

/// Walks the directory `dir` (at `path`), names sorted, depth-first, down to `max_depth`
/// levels below it (0: its own entries only). Deny-listed names are skipped; links are
/// visited as links and never followed.
fn walk(
    cx: Context<'_>,
    dir: &OwnedFd,
    path: &str,
    depth: usize,
    max_depth: usize,
    visit: &mut dyn FnMut(&Entry<'_>) -> Result<Flow, FileError>,
) -> Result<Flow, FileError> {
    let mut names: Vec<(String, Kind)> = Vec::new();
    let listing = rustix::fs::Dir::read_from(dir).map_err(|e| FileError::io(path, e))?;
    for item in listing {
        let item = item.map_err(|e| FileError::io(path, e))?;
        // A huge directory is read within the time budget and a bounded count.
        if names.len() >= DIR_MAX {
            return Err(FileError::TooLarge {
                path: path.to_owned(),
                size: u64::try_from(names.len()).unwrap_or(u64::MAX),
                limit: u64::try_from(DIR_MAX).unwrap_or(u64::MAX),
            });
        }
        if names.len() % 1024 == 1023 {
            cx.deadline.check()?;
        }
        let Ok(name) = item.file_name().to_str() else {
            continue; // names that are not UTF-8 cannot be named back in a call
        };
        if matches!(name, "." | "..") || cx.jail.is_denied(&join(path, name)) {
            continue;
        }
        let kind = match item.file_type() {
            rustix::fs::FileType::RegularFile => Kind::File,
            rustix::fs::FileType::Directory => Kind::Dir,
            rustix::fs::FileType::Symlink => Kind::Link,
            rustix::fs::FileType::Unknown => stat_kind(dir, name),
            _ => Kind::Other,
        };
        names.push((name.to_owned(), kind));
    }
    names.sort();
    for (name, kind) in &names {
        cx.deadline.check()?;
        let entry = Entry {
            dir,
            name,
            path: join(path, name),
            kind: *kind,
        };
        if visit(&entry)? == Flow::Stop {
            return Ok(Flow::Stop);
        }
        if *kind == Kind::Dir && depth < max_depth {
            // A mount point or a name swapped for a link meanwhile is not entered.
            let Ok(sub) = cx.jail.child(dir, name, true) else {
                continue;
            };
            if walk(cx, &sub, &entry.path, depth + 1, max_depth, visit)? == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
    }
    Ok(Flow::Go)
}

/// `name` in the directory at `path`.
fn join(path: &str, name: &str) -> String {
    if path == "." {
        name.to_owned()
    } else {
        format!("{path}/{name}")
    }
}

fn stat_kind(dir: &OwnedFd, name: &str) -> Kind {
    match rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => match rustix::fs::FileType::from_raw_mode(st.st_mode) {
            rustix::fs::FileType::RegularFile => Kind::File,
            rustix::fs::FileType::Directory => Kind::Dir,
            rustix::fs::FileType::Symlink => Kind::Link,
            _ => Kind::Other,
        },
        Err(_) => Kind::Other,
    }
}

pub(super) fn list_files(cx: Context<'_>, a: ListArgs) -> Result<Value, FileError> {
    let path = a.path.as_deref().unwrap_or(".");
    let max_entries = a.max_entries.unwrap_or(1000).clamp(1, 10_000);
    let max_depth = if a.recursive {
        a.max_depth.unwrap_or(8).clamp(1, 32)
    } else {
        0
    };
    let opened = cx
        .jail
        .open_dir(path)
        .map_err(|e| FileError::jail(path, e))?;
    let mut entries = Vec::new();
    let mut truncated = false;
    walk(cx, &opened.dir, &opened.resolved, 0, max_depth, &mut |e| {
        if entries.len() >= max_entries {
            truncated = true;
            return Ok(Flow::Stop);
        }
        let size = (e.kind == Kind::File)
            .then(|| rustix::fs::statat(e.dir, e.name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW))
            .and_then(Result::ok)
            .map(|st| st.st_size);
        let mut item = json!({"path": e.path, "type": e.kind.as_str()});
        if let (Some(size), Some(obj)) = (size, item.as_object_mut()) {
            obj.insert("size".to_owned(), json!(size));
        }
        entries.push(item);
        Ok(Flow::Go)
    })?;
    Ok(json!({
        "path": opened.resolved,
        "entries": entries,
        "truncated": truncated,
    }))
}

/// Files searched and skipped, and why the walk stopped early.
#[derive(Debug, Default)]
struct Tally {
    searched: usize,
    skipped: usize,
    stopped: Option<&'static str>,
}

/// Runs `each` on the text of every searchable file at `path` (a file, or a directory walked
/// to depth 32 when `recursive`). Files over 4 MiB, binary files and links are skipped.
fn each_text(
    cx: Context<'_>,
    path: &str,
    recursive: bool,
    each: &mut dyn FnMut(&str, &str) -> Flow,
) -> Result<Tally, FileError> {
    let mut tally = Tally::default();
    match cx.jail.open_dir(path) {
        Ok(opened) => {
            let walked = walk(
                cx,
                &opened.dir,
                &opened.resolved,
                0,
                if recursive { 32 } else { 0 },
                &mut |e| {
                    if e.kind != Kind::File {
                        return Ok(Flow::Go);
                    }
                    let Ok(fd) = cx.jail.child(e.dir, e.name, false) else {
                        tally.skipped += 1;
                        return Ok(Flow::Go);
                    };
                    match read_text(&e.path, std::fs::File::from(fd), SEARCH_FILE_MAX) {
                        Ok(text) => {
                            tally.searched += 1;
                            Ok(each(&e.path, &text))
                        }
                        Err(_) => {
                            tally.skipped += 1;
                            Ok(Flow::Go)
                        }
                    }
                },
            );
            match walked {
                Ok(_) => {}
                Err(FileError::Timeout(_)) => tally.stopped = Some("time_budget"),
                Err(e) => return Err(e),
            }
        }
        Err(crate::jail::JailError::NotADirectory) => {
            let opened = cx
                .jail
                .open_read(path)
                .map_err(|e| FileError::jail(path, e))?;
            let text = read_text(&opened.resolved, opened.file, SEARCH_FILE_MAX)?;
            tally.searched = 1;
            each(&opened.resolved, &text);
        }
        Err(e) => return Err(FileError::jail(path, e)),
    }
    Ok(tally)
}

pub(super) fn search_files(cx: Context<'_>, a: SearchArgs) -> Result<Value, FileError> {
    let pattern = Pattern::new(&a.regex, a.literal).map_err(FileError::InvalidPattern)?;
    let max_matches = a.max_matches.unwrap_or(100).clamp(1, 1000);
    let max_bytes = usize::try_from(cx.max_output_bytes).unwrap_or(usize::MAX);
    let mut matches = Vec::new();
    let mut bytes = 0usize;
    let mut stopped = None;
    let path = a.path.as_deref().unwrap_or(".");
    let tally = each_text(cx, path, a.recursive.unwrap_or(true), &mut |file, text| {
        let mut lines = LineIndex::new(text);
        for (start, _) in pattern.find_iter(text) {
            if !cx.deadline.in_time() {
                stopped = Some("time_budget");
                return Flow::Stop;
            }
            if matches.len() >= max_matches {
                stopped = Some("max_matches");
                return Flow::Stop;
            }
            let (line, line_start) = lines.at(start);
            let snippet = snippet(text, line_start, start);
            bytes = bytes.saturating_add(snippet.len() + file.len() + 32);
            if bytes > max_bytes {
                stopped = Some("max_bytes");
                return Flow::Stop;
            }
            matches.push(json!({
                "path": file,
                "line": line,
                "column": text.get(line_start..start).map_or(1, |s| s.chars().count() + 1),
                "text": snippet,
            }));
        }
        Flow::Go
    });
    let tally = tally?;
    // Out of time, what was found so far is answered, marked as cut.
    let stopped = stopped.or(tally.stopped);
    Ok(json!({
        "matches": matches,
        "files_searched": tally.searched,
        "files_skipped": tally.skipped,
        "truncated": stopped.is_some(),
        "stopped": stopped,
    }))
}

pub(super) fn count_matches(cx: Context<'_>, a: CountArgs) -> Result<Value, FileError> {
    let pattern = Pattern::new(&a.regex, a.literal).map_err(FileError::InvalidPattern)?;
    let mut files = Vec::new();
    let mut total = 0usize;
    let mut out_of_time = false;
    let path = a.path.as_deref().unwrap_or(".");
    let tally = each_text(cx, path, a.recursive.unwrap_or(true), &mut |file, text| {
        let mut n = 0usize;
        for _ in pattern.find_iter(text) {
            if !cx.deadline.in_time() {
                out_of_time = true;
                return Flow::Stop;
            }
            n += 1;
        }
        if n > 0 {
            total += n;
            files.push(json!({"path": file, "count": n}));
        }
        Flow::Go
    });
    // A count is only useful whole: running out of time is an error, not a smaller number.
    let tally = tally?;
    if out_of_time || tally.stopped.is_some() {
        return Err(FileError::Timeout(cx.deadline.budget_ms));
    }
    Ok(json!({
        "total": total,
        "files": files,
        "files_searched": tally.searched,
        "files_skipped": tally.skipped,
    }))
}

/// Line numbers of byte offsets, for offsets asked in increasing order.
struct LineIndex<'a> {
    text: &'a str,
    /// Line number and start of the line holding `at`.
    line: usize,
    line_start: usize,
    at: usize,
}

impl<'a> LineIndex<'a> {
    fn new(text: &'a str) -> Self {
        LineIndex {
            text,
            line: 1,
            line_start: 0,
            at: 0,
        }
    }

    /// The 1-based line of `offset` and where that line starts.
    fn at(&mut self, offset: usize) -> (usize, usize) {
        if let Some(between) = self.text.get(self.at..offset) {
            for (i, b) in between.bytes().enumerate() {
                if b == b'\n' {
                    self.line += 1;
                    self.line_start = self.at + i + 1;
                }
            }
            self.at = offset;
        }
        (self.line, self.line_start)
    }
}

/// The line holding `start`, cut to [`SNIPPET`] bytes around the match.
fn snippet(text: &str, line_start: usize, start: usize) -> String {
    let rest = text.get(line_start..).unwrap_or("");
    let line = rest.split('\n').next().unwrap_or("").trim_end_matches('\r');
    if line.len() <= SNIPPET {
        return line.to_owned();
    }
    let at = start.saturating_sub(line_start);
    let from = line.floor_char_boundary(at.saturating_sub(SNIPPET / 4));
    let to = line.floor_char_boundary(from.saturating_add(SNIPPET));
    line.get(from..to).unwrap_or("").to_owned()
}
