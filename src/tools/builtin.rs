//! The built-in tools toolgate runs itself (a manifest's `"builtin"`): their names and the
//! arguments each understands. The tools' work on the file system is in `files`.

/// A built-in tool, named by a manifest's `"builtin"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Builtin {
    /// Read one UTF-8 text file.
    ReadFile,
    /// List a directory (optionally recursive).
    ListFiles,
    /// Find a pattern in files, with line numbers and snippets.
    SearchFiles,
    /// Count a pattern's matches per file.
    CountMatches,
    /// Create or replace a file atomically.
    WriteFile,
    /// Apply counted, non-overlapping edits atomically.
    EditFile,
    /// Delete one file (never a directory).
    DeleteFile,
}

impl Builtin {
    /// The arguments this tool understands, and which of them it needs. A manifest's
    /// `inputSchema` must offer no others and require these.
    pub fn arguments(self) -> (&'static [&'static str], &'static [&'static str]) {
        match self {
            Builtin::ReadFile => (&["path", "max_bytes"], &["path"]),
            Builtin::ListFiles => (&["path", "recursive", "max_entries", "max_depth"], &[]),
            Builtin::SearchFiles => (
                &["path", "regex", "literal", "recursive", "max_matches"],
                &["regex"],
            ),
            Builtin::CountMatches => (&["path", "regex", "literal", "recursive"], &["regex"]),
            Builtin::WriteFile => (&["path", "content"], &["path", "content"]),
            Builtin::EditFile => (&["path", "edits"], &["path", "edits"]),
            Builtin::DeleteFile => (&["path"], &["path"]),
        }
    }

    /// Whether the tool changes files (so it may not be classified `read`).
    pub fn changes_files(self) -> bool {
        matches!(
            self,
            Builtin::WriteFile | Builtin::EditFile | Builtin::DeleteFile
        )
    }
}
