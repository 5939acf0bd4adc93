//! Lexical normalization of path arguments, so a policy's `like "*.env*"` cannot be dodged
//! with `src/../.env` and no path can name anything outside the service root.
//!
//! Owns: the pure string transformation. Does not touch the file system: resolving symlinks
//! belongs to the executor that opens files.

/// Why a path argument was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path starts at the file-system root or a drive.
    #[error("absolute paths are not allowed")]
    Absolute,
    /// Following `..` segments would leave the service root.
    #[error("the path leaves the service root")]
    Escapes,
    /// NUL bytes never name a real file and truncate C strings.
    #[error("the path contains a NUL byte")]
    Nul,
    /// A path starting with `-` can be read as an option by the program it is passed to.
    #[error("the path starts with `-` and could be taken for an option")]
    OptionLike,
}

/// Normalizes a path relative to the service root: `\` is a separator, repeated separators and
/// `.` segments vanish, `..` removes the previous segment. Percent-encoding is *not* decoded:
/// `%2e%2e` is an ordinary file name. The result uses `/` and is `.` for the root itself.
pub fn normalize_path(raw: &str) -> Result<String, PathError> {
    if raw.contains('\0') {
        return Err(PathError::Nul);
    }
    if raw.starts_with('-') {
        return Err(PathError::OptionLike);
    }
    if raw.starts_with('/') || raw.starts_with('\\') || has_drive_prefix(raw) {
        return Err(PathError::Absolute);
    }
    let mut parts: Vec<&str> = Vec::new();
    for segment in raw.split(['/', '\\']) {
        match segment {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(PathError::Escapes);
                }
            }
            other => parts.push(other),
        }
    }
    if parts.first().is_some_and(|p| p.starts_with('-')) {
        return Err(PathError::OptionLike);
    }
    if parts.is_empty() {
        Ok(".".to_owned())
    } else {
        Ok(parts.join("/"))
    }
}

/// What policies see about a normalized path: its segments, its last segment and that
/// segment's extension. Lets a deny list match whole names (`.git`, `secrets`) with set
/// operations instead of many `like` patterns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathFacts {
    /// Every segment (`a/b/c.txt` → `a`, `b`, `c.txt`); empty for the root.
    pub segments: Vec<String>,
    /// The last segment (`.` for the root).
    pub name: String,
    /// Text after the last `.` of `name`, unless that `.` starts it (`.env` has none).
    pub ext: String,
}

/// Facts about a path already returned by [`normalize_path`].
pub fn path_facts(normalized: &str) -> PathFacts {
    let segments: Vec<String> = normalized
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .map(str::to_owned)
        .collect();
    let name = segments.last().cloned().unwrap_or_else(|| ".".to_owned());
    let ext = match name.rfind('.') {
        Some(i) if i > 0 => name.get(i + 1..).unwrap_or_default().to_owned(),
        _ => String::new(),
    };
    PathFacts {
        segments,
        name,
        ext,
    }
}

/// `C:` or `c:\`-style prefixes are absolute on Windows hosts and in many tools' eyes.
fn has_drive_prefix(raw: &str) -> bool {
    let mut chars = raw.chars();
    matches!((chars.next(), chars.next()), (Some(c), Some(':')) if c.is_ascii_alphabetic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_dots_and_separators() {
        let cases = [
            ("src/main.rs", "src/main.rs"),
            ("./src//main.rs", "src/main.rs"),
            ("src/../.env", ".env"),
            ("src\\..\\secrets\\k", "secrets/k"),
            ("a/b/../../c", "c"),
            ("", "."),
            (".", "."),
            ("a/./b/", "a/b"),
            ("%2e%2e/x", "%2e%2e/x"),
        ];
        for (raw, want) in cases {
            assert_eq!(normalize_path(raw).as_deref(), Ok(want), "{raw}");
        }
    }

    #[test]
    fn facts_name_the_segments_the_name_and_the_extension() {
        let f = path_facts("src/keys/server.pem");
        assert_eq!(f.segments, ["src", "keys", "server.pem"]);
        assert_eq!((f.name.as_str(), f.ext.as_str()), ("server.pem", "pem"));
        assert_eq!(path_facts(".env").ext, "");
        assert_eq!(path_facts("a.tar.gz").ext, "gz");
        let root = path_facts(".");
        assert!(root.segments.is_empty());
        assert_eq!(root.name, ".");
    }

    #[test]
    fn refuses_escapes_and_absolutes() {
        assert_eq!(normalize_path(".."), Err(PathError::Escapes));
        assert_eq!(
            normalize_path("a/../../etc/passwd"),
            Err(PathError::Escapes)
        );
        assert_eq!(normalize_path("..\\x"), Err(PathError::Escapes));
        assert_eq!(normalize_path("/etc/passwd"), Err(PathError::Absolute));
        assert_eq!(
            normalize_path("\\\\server\\share"),
            Err(PathError::Absolute)
        );
        assert_eq!(normalize_path("C:\\Windows"), Err(PathError::Absolute));
        assert_eq!(normalize_path("a\0b"), Err(PathError::Nul));
        assert_eq!(normalize_path("--output=x"), Err(PathError::OptionLike));
        assert_eq!(normalize_path("./-rf"), Err(PathError::OptionLike));
        assert_eq!(normalize_path("a/../--pre=sh"), Err(PathError::OptionLike));
        assert_eq!(normalize_path("src/-x").as_deref(), Ok("src/-x"));
    }
}
