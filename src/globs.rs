//! Every glob-shaped setting, compiled once by one implementation (`globset`): deny lists of
//! path segments (case-insensitive), tool-name patterns, and dotted output-field paths. A
//! pattern that cannot be expressed is refused when the setting is read, with the reason.
//!
//! Owns: compiling and matching. Does not own: what a match means (the jail, the anomaly
//! rules and the output field policy decide that).

use std::borrow::Cow;

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use unicode_normalization::UnicodeNormalization as _;

/// Why a pattern was refused: the pattern and a one-line reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pattern `{pattern}`: {reason}")]
pub struct GlobError {
    /// The pattern as written.
    pub pattern: String,
    /// Why it cannot be used.
    pub reason: String,
}

fn refuse(pattern: &str, reason: impl Into<String>) -> GlobError {
    GlobError {
        pattern: pattern.to_owned(),
        reason: reason.into(),
    }
}

/// The deny list used when none is configured: the names the shipped `deny-listed-paths`
/// policy forbids (secrets, key material, repository internals), plus `node_modules`.
pub const DEFAULT_DENY: [&str; 17] = [
    ".env*",
    ".git",
    ".git-credentials",
    ".ssh",
    ".aws",
    "secrets",
    ".netrc",
    ".npmrc",
    ".pypirc",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*id_rsa*",
    "*id_ed25519*",
    "*id_ecdsa*",
    "node_modules",
];

/// Globs over single path segments, matched case-insensitively: `*`, `?`, `[abc]` and
/// `{a,b}` within one segment. An entry with `/` (or `**`) is refused: entries name files
/// and directories wherever they are.
#[derive(Debug, Clone)]
pub struct SegmentGlobs {
    written: Vec<String>,
    set: GlobSet,
}

impl PartialEq for SegmentGlobs {
    fn eq(&self, other: &Self) -> bool {
        self.written == other.written
    }
}

impl Eq for SegmentGlobs {}

impl Default for SegmentGlobs {
    /// [`DEFAULT_DENY`].
    fn default() -> Self {
        // INVARIANT: the default entries compile (a unit test checks it); an empty set is
        // never used in their place silently, since `new` would report which one failed.
        Self::new(DEFAULT_DENY.iter().map(|s| (*s).to_owned())).unwrap_or_else(|_| SegmentGlobs {
            written: Vec::new(),
            set: GlobSet::empty(),
        })
    }
}

impl SegmentGlobs {
    /// Compiles `entries`; the first one that cannot be used is the error.
    pub fn new(entries: impl IntoIterator<Item = String>) -> Result<Self, GlobError> {
        let mut b = GlobSetBuilder::new();
        let mut written = Vec::new();
        for e in entries {
            if e.is_empty() {
                return Err(refuse(&e, "an empty entry matches nothing"));
            }
            if e.contains('/') || e.contains("**") {
                return Err(refuse(
                    &e,
                    "entries match one path segment (a file or directory name anywhere); remove `/` and `**`",
                ));
            }
            if e.contains('\\') {
                return Err(refuse(&e, "`\\` escapes are not supported in entries"));
            }
            // Git's pathspec globs (the excludes of git tools) must read entries the same way.
            if e.contains(['{', '}']) || e.contains("[!") || e.contains("[^") {
                return Err(refuse(
                    &e,
                    "`{a,b}` and negated classes are not supported in entries (git tools could not exclude them alike); list each name",
                ));
            }
            if matches!(e.as_str(), "." | "..") {
                return Err(refuse(&e, "`.` and `..` never appear in a normalized path"));
            }
            b.add(compile(&fold_name(&e), true, true)?);
            written.push(e);
        }
        let set = b
            .build()
            .map_err(|err| refuse(&written.join(", "), err.to_string()))?;
        Ok(SegmentGlobs { written, set })
    }

    /// Whether one segment (a file or directory name) matches an entry, as written or
    /// folded by [`fold_name`]: the one test the decision, the jail, the file tools and the
    /// sandbox plan apply, so none of them is laxer than another on a variant of a name.
    pub fn matches(&self, segment: &str) -> bool {
        if self.set.is_match(segment) {
            return true;
        }
        match fold_name(segment) {
            Cow::Owned(folded) if folded != segment => self.set.is_match(folded.as_str()),
            _ => false,
        }
    }

    /// The first segment of a `/`-separated path that matches an entry.
    pub fn first_match<'a>(&self, path: &'a str) -> Option<&'a str> {
        path.split('/').find(|s| self.matches(s))
    }

    /// The entries as written.
    pub fn entries(&self) -> &[String] {
        &self.written
    }
}

/// The one folding of a file or directory name before the deny list judges it (entries are
/// folded alike when they are compiled): Unicode compatibility composition (NFKC), so
/// full-width letters, ligatures, the Kelvin sign and decomposed accents read as their plain
/// forms; non-ASCII letters lowered (the matcher ignores ASCII case itself); and no trailing
/// dots or spaces, which Windows-family file systems (an SMB share, an NTFS or exFAT mount)
/// drop when they open a name. So `.Env`, `．ＥＮＶ`, `.env.` and `.env ` are all judged as
/// `.env`. A name of dots only is left as it is.
pub fn fold_name(name: &str) -> Cow<'_, str> {
    let composed: Cow<'_, str> = if name.is_ascii() {
        Cow::Borrowed(name)
    } else {
        let nfkc: String = name.nfkc().collect();
        Cow::Owned(nfkc.to_lowercase())
    };
    let trimmed = composed.trim_end_matches(['.', ' ']);
    if trimmed.len() == composed.len() || trimmed.trim_start_matches('.').is_empty() {
        return composed;
    }
    Cow::Owned(trimmed.to_owned())
}

/// What a path relative to the service root may not name: a deny-listed segment, or the
/// sidecar's own files below the root (the protected set). One check for the jail, the file
/// tools and the decision (`context.paths.<arg>.denied`), so they cannot disagree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathGuard {
    /// The deny list.
    pub deny: SegmentGlobs,
    /// Protected paths below the root, relative to it (`/`-separated, no `.`).
    pub own: Vec<String>,
}

impl PathGuard {
    /// Adds the `protected` paths (absolute, canonical) that lie below `root` (canonical),
    /// as paths relative to it. The root itself is never added: that would switch the tools
    /// off, and the runner refuses such a root at start instead.
    pub fn protect_below(&mut self, root: &std::path::Path, protected: &[std::path::PathBuf]) {
        for p in protected {
            if let Ok(rel) = p.strip_prefix(root)
                && let Some(rel) = rel.to_str()
                && !rel.is_empty()
            {
                self.own.push(rel.to_owned());
            }
        }
    }

    /// Why `path` (normalized, relative to the root) is refused: the protected path it is
    /// in, or its first deny-listed segment.
    pub fn refuses(&self, path: &str) -> Option<String> {
        if let Some(own) = self.own.iter().find(|o| {
            path == o.as_str()
                || path
                    .strip_prefix(o.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        }) {
            return Some(format!("{own}: toolgate's own files"));
        }
        self.deny.first_match(path).map(str::to_owned)
    }
}

/// Globs over whole names (tool names): `*`, `?`, `[abc]`, `{a,b}`; case-sensitive.
#[derive(Debug, Clone)]
pub struct NameGlobs {
    set: GlobSet,
}

impl NameGlobs {
    /// Compiles `patterns`; the first one that cannot be used is the error.
    pub fn new<'a>(patterns: impl IntoIterator<Item = &'a String>) -> Result<Self, GlobError> {
        let mut b = GlobSetBuilder::new();
        for p in patterns {
            if p.is_empty() {
                return Err(refuse(p, "an empty pattern matches nothing"));
            }
            b.add(compile(p, false, false)?);
        }
        Ok(NameGlobs {
            set: b.build().map_err(|e| refuse("", e.to_string()))?,
        })
    }

    /// A set that matches nothing.
    pub fn none() -> Self {
        NameGlobs {
            set: GlobSet::empty(),
        }
    }

    /// Whether `name` matches a pattern.
    pub fn matches(&self, name: &str) -> bool {
        self.set.is_match(name)
    }
}

/// A dotted path glob over JSON keys (`customer.*`, `*.email`, `items.**`): `*` is one key or
/// array index, `**` any number of them, other segments are literal keys.
#[derive(Debug, Clone)]
pub struct DottedGlob {
    set: GlobSet,
}

/// Keys may hold `/`, which is the matcher's separator: it stands in for it.
const SLASH_IN_KEY: char = '\u{1}';

impl DottedGlob {
    /// Compiles a dotted glob: non-empty segments, at most one `**`.
    pub fn new(dotted: &str) -> Result<Self, GlobError> {
        if dotted.is_empty() || dotted.split('.').any(str::is_empty) {
            return Err(refuse(
                dotted,
                "a segment is empty; write paths like `customer.email`, `*.email` or `items.**`",
            ));
        }
        if dotted.split('.').filter(|s| *s == "**").count() > 1 {
            return Err(refuse(
                dotted,
                "more than one `**`; use `*` for single levels",
            ));
        }
        let pattern: Vec<String> = dotted
            .split('.')
            .map(|seg| match seg {
                "*" | "**" => seg.to_owned(),
                lit => globset::escape(&lit.replace('/', &SLASH_IN_KEY.to_string())),
            })
            .collect();
        // `**` may stand for no segment at all; globset's `x/**` needs one, so `items.**`
        // also names `items` itself through a second glob.
        let text = pattern.join("/");
        let mut b = GlobSetBuilder::new();
        if let Some(head) = text.strip_suffix("/**") {
            b.add(compile(head, true, false)?);
        }
        b.add(compile(&text, true, false)?);
        Ok(DottedGlob {
            set: b.build().map_err(|e| refuse(dotted, e.to_string()))?,
        })
    }

    /// Whether the keys of `path` match.
    pub fn matches(&self, path: &[String]) -> bool {
        let joined: Vec<String> = path
            .iter()
            .map(|k| k.replace('/', &SLASH_IN_KEY.to_string()))
            .collect();
        // An empty key would read as `//`; it is one segment all the same.
        self.set.is_match(joined.join("/"))
    }
}

fn compile(pattern: &str, literal_separator: bool, icase: bool) -> Result<Glob, GlobError> {
    GlobBuilder::new(pattern)
        .literal_separator(literal_separator)
        .case_insensitive(icase)
        .backslash_escape(true)
        .empty_alternates(true)
        .build()
        .map_err(|e| refuse(pattern, e.kind().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deny(entries: &[&str]) -> SegmentGlobs {
        SegmentGlobs::new(entries.iter().map(|s| (*s).to_owned())).unwrap()
    }

    #[test]
    fn the_default_deny_list_compiles() {
        assert_eq!(SegmentGlobs::default().entries().len(), DEFAULT_DENY.len());
    }

    #[test]
    fn segments_match_case_insensitively_with_inner_stars() {
        let d = deny(&["id_*.pem", ".env*", "*.key", "secrets"]);
        for (seg, m) in [
            ("id_rsa.pem", true),
            ("ID_ED25519.PEM", true),
            ("id_.pem", true),
            ("xid_rsa.pem", false),
            (".ENV", true),
            (".env.local", true),
            ("server.KEY", true),
            ("Secrets", true),
            ("secrets2", false),
        ] {
            assert_eq!(d.matches(seg), m, "{seg}");
        }
        assert_eq!(d.first_match("a/B/.Env/c"), Some(".Env"));
        assert_eq!(d.first_match("a/b"), None);
    }

    #[test]
    fn variants_of_a_deny_listed_name_are_folded_alike() {
        let d = SegmentGlobs::default();
        for seg in [
            ".ENV",
            ".Env",
            ".env.",
            ".env ",
            ".env. . ",
            "\u{ff0e}\u{ff25}\u{ff2e}\u{ff36}",
            "SECRETS",
            "secrets.",
            "\u{17f}ecrets",
            "server.\u{212a}EY",
            "server.key.",
            "node_modules ",
            "secrets\u{3000}",
        ] {
            assert!(d.matches(seg), "{seg:?}");
        }
        for seg in ["env", "secret", "server.keys", "...", "notes.txt."] {
            assert!(!d.matches(seg), "{seg:?}");
        }
        // Composed and decomposed forms of an entry are one name.
        let accented = deny(&["caf\u{e9}"]);
        assert!(accented.matches("cafe\u{301}"));
        assert!(accented.matches("CAF\u{c9}"));
        assert_eq!(fold_name("a.txt"), Cow::Borrowed("a.txt"));
        assert_eq!(fold_name(".."), "..");
    }

    #[test]
    fn unusable_entries_are_refused() {
        for bad in [
            "",
            "a/b",
            "**",
            "[abc",
            "x\\y",
            "..",
            "*.{pem,key}",
            "[!a]x",
            "[^a]x",
        ] {
            assert!(
                SegmentGlobs::new([bad.to_owned()]).is_err(),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn dotted_globs() {
        let p = |s: &str| s.split('.').map(str::to_owned).collect::<Vec<_>>();
        for (g, path, m) in [
            ("customer.*", "customer.name", true),
            ("customer.*", "customer.a.b", false),
            ("*.email", "x.email", true),
            ("items.**", "items", true),
            ("items.**", "items.0.sku", true),
            ("**.ssn", "ssn", true),
            ("**.ssn", "a.b.ssn", true),
            ("a.**.z", "a.z", true),
            ("a.**.z", "a.b.c.z", true),
            ("a.[x]", "a.[x]", true),
            ("a.[x]", "a.x", false),
        ] {
            assert_eq!(
                DottedGlob::new(g).unwrap().matches(&p(path)),
                m,
                "{g} vs {path}"
            );
        }
        let slash = DottedGlob::new("a/b.c").unwrap();
        assert!(slash.matches(&["a/b".to_owned(), "c".to_owned()]));
        assert!(!slash.matches(&["a".to_owned(), "b".to_owned(), "c".to_owned()]));
        assert!(DottedGlob::new("a..b").is_err());
        assert!(DottedGlob::new("**.a.**").is_err());
    }

    #[test]
    fn names() {
        let g = NameGlobs::new(&["vault_*".to_owned(), "a*b*c".to_owned()]).unwrap();
        assert!(g.matches("vault_read"));
        assert!(g.matches("abc"));
        assert!(!g.matches("acb"));
        assert!(!g.matches("http"));
    }
}
