//! Plans the Landlock ruleset of one run: which directories and files a program may read and
//! which it may write, so that the protected set and deny-listed names are never granted,
//! even when they lie below a granted directory.
//!
//! Landlock only allows: a rule on a directory grants everything beneath it. So a directory
//! that holds something excluded is never granted itself; its entries are granted one by one
//! instead (and so on down to the excluded entry, which is skipped). Symbolic links are never
//! granted (a rule on a link would grant its target); a program following one reaches only
//! what the target's own place grants. The service root and the shared roots are walked in
//! full, since a deny-listed name may be anywhere; system directories are split only along
//! the way to an excluded path.
//!
//! Landlock rules hold inodes, not names: a rule on a file grants every name of it. So no
//! regular file with more than one name (a hard link) is granted below the walked roots
//! (its directory is split instead), whatever its other names are: one may be deny-listed,
//! protected or outside the root, and a walk cannot see every name. The jail refuses such
//! files to the file tools and to path arguments alike. Another name of a protected file is
//! never granted anywhere, by device and inode number.
//!
//! Owns: the plan. Does not own: applying it (the launcher) or what a tool declares (its
//! manifest's `executor.sandbox`).

use std::path::{Path, PathBuf};

use crate::globs::SegmentGlobs;

/// Directories every program may read and execute from (what a dynamically linked program
/// needs: libraries, the loader cache, locale and certificate data), and `/proc`. Home
/// directories (`/home`, `/root`) and the rest of `/` are not among them.
pub const SYSTEM_READ: [&str; 9] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt", "/proc",
];

/// Devices a program may read (`/dev/null` it may also write).
pub const DEVICES: [&str; 5] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Files below the system directories that no program reads: password hashes, sudo rules,
/// host keys, TLS private keys, credentials.
pub const SYSTEM_SECRETS: [&str; 12] = [
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
    "/etc/security/opasswd",
    "/etc/credstore",
    "/etc/credstore.encrypted",
    "/etc/.pwd.lock",
];

/// Entries the walk of one run looks at, at most; past it the run is refused.
pub const MAX_ENTRIES: usize = 200_000;

/// Why a plan could not be made (the run is refused: fail closed).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The tree is too large to walk for every run.
    #[error(
        "the sandbox walk passed {MAX_ENTRIES} entries below `{0}`; narrow `[exec] root` or deny-list the large directories"
    )]
    TooLarge(String),
    /// A directory that must be split could not be listed.
    #[error("cannot list `{path}` to plan the sandbox: {message}")]
    Io {
        /// The directory.
        path: String,
        /// Why.
        message: String,
    },
}

/// Where a walk may not go, and what it may not grant.
#[derive(Debug)]
pub struct Exclusions<'a> {
    /// Absolute paths never granted, nor anything beneath them (the protected set, system
    /// secrets); canonical where they exist.
    pub paths: &'a [PathBuf],
    /// Names never granted below the roots (the deny list).
    pub deny: &'a SegmentGlobs,
    /// Absolute paths below a root granted whole although deny-listed (the tool's `reads`).
    pub exempt: &'a [PathBuf],
    /// The protected files' inodes: another name of one (a hard link) is not granted either.
    pub inodes: &'a Inodes,
    /// Listings kept from earlier plans (`None`: list every directory).
    pub cache: Option<&'a DirCache>,
}

/// The paths to grant.
#[derive(Debug, Default)]
pub struct Plan {
    /// Entries to grant, each with everything beneath it.
    pub grants: Vec<PathBuf>,
    /// Directories that were split: their names may be listed, nothing more, so a program
    /// can still walk past what it may not reach.
    pub split: Vec<PathBuf>,
    /// Entries looked at.
    pub walked: usize,
}

impl Plan {
    /// Grants `top` minus the exclusions. `walk_all`: look for deny-listed names everywhere
    /// below (roots); otherwise descend only towards excluded paths (system directories).
    /// A `top` that does not exist grants nothing.
    pub fn add(&mut self, top: &Path, ex: &Exclusions, walk_all: bool) -> Result<(), PlanError> {
        let meta = match std::fs::symlink_metadata(top) {
            Ok(m) => m,
            Err(_) => return Ok(()),
        };
        if meta.file_type().is_symlink() || excluded(top, ex.paths) {
            return Ok(());
        }
        if !meta.is_dir() {
            self.grants.push(top.to_path_buf());
            return Ok(());
        }
        let mut found = Vec::new();
        if self.cover(top, ex, walk_all, &mut found)? {
            self.grants.push(top.to_path_buf());
        } else {
            self.grants.extend(found);
        }
        Ok(())
    }

    /// Whether `dir` can be granted whole; if not, what below it is granted (in `out`).
    fn cover(
        &mut self,
        dir: &Path,
        ex: &Exclusions,
        walk_all: bool,
        out: &mut Vec<PathBuf>,
    ) -> Result<bool, PlanError> {
        self.cover_in(dir, ex, (walk_all, false), out)
    }

    /// [`Plan::cover`]; `exempt`: `dir` lies in a path the tool declared it reads, so the
    /// deny list does not apply below it (hard links and the protected set still do).
    fn cover_in(
        &mut self,
        dir: &Path,
        ex: &Exclusions,
        (walk_all, exempt): (bool, bool),
        out: &mut Vec<PathBuf>,
    ) -> Result<bool, PlanError> {
        let exempt = exempt || ex.exempt.iter().any(|e| e == dir);
        if !walk_all && !holds_excluded(dir, ex.paths) {
            return Ok(true);
        }
        let Some(listing) = list(dir, ex) else {
            // Unreadable here (permissions): granted nothing, so nothing unseen is granted.
            return Ok(false);
        };
        // Only excluded and exempt paths inside this directory can match its entries (the
        // directory itself is neither): looked up once here, not per entry.
        let near: Vec<&PathBuf> = ex.paths.iter().filter(|p| p.starts_with(dir)).collect();
        let near_exempt: Vec<&PathBuf> = ex.exempt.iter().filter(|p| p.starts_with(dir)).collect();
        let mut whole = true;
        let mut granted = Vec::new();
        // Opened the first time an entry must be looked at: each look is then one `fstatat`
        // of one name, not a walk of the whole path.
        let mut at: Option<Option<std::os::fd::OwnedFd>> = None;
        for entry in &listing.entries {
            self.walked += 1;
            if self.walked > MAX_ENTRIES {
                return Err(PlanError::TooLarge(dir.display().to_string()));
            }
            let path = dir.join(&entry.name);
            if entry.kind == Kind::Other
                && !grantable((&mut at, dir), &entry.name, entry.ino, ex, walk_all)
            {
                whole = false;
                continue;
            }
            let denied =
                walk_all && entry.denied && !exempt && !near_exempt.iter().any(|e| **e == path);
            if denied || entry.kind == Kind::Unknown || near.iter().any(|p| **p == path) {
                whole = false;
                continue;
            }
            match entry.kind {
                // Not granted: whatever it points to is granted (or not) where it lies.
                Kind::Link | Kind::Unknown => {}
                Kind::Dir => {
                    let mut below = Vec::new();
                    if self.cover_in(&path, ex, (walk_all, exempt), &mut below)? {
                        granted.push(path);
                    } else {
                        whole = false;
                        granted.extend(below);
                    }
                }
                Kind::Other => granted.push(path),
            }
        }
        if !whole {
            out.extend(granted);
            self.split.push(dir.to_path_buf());
        }
        Ok(whole)
    }
}

/// Whether a file, device, FIFO or socket entry `name` of `dir` may be granted: not another
/// name of a protected file, and below a walked root (`walk_all`) not a regular file with
/// more than one name. Looked at afresh for every plan (a new name elsewhere changes no
/// listing here), through `dir`'s descriptor in `at` (opened on first use, without following
/// a link); an entry that cannot be looked at is not granted.
fn grantable(
    (at, dir): (&mut Option<Option<std::os::fd::OwnedFd>>, &Path),
    name: &std::ffi::OsStr,
    ino: u64,
    ex: &Exclusions,
    walk_all: bool,
) -> bool {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    if !walk_all && !ex.inodes.may_hold(ino) {
        return true;
    }
    let fd = at.get_or_insert_with(|| {
        rustix::fs::open(
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()
    });
    let Some(fd) = fd.as_ref() else {
        return false;
    };
    let Ok(st) = rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
        return false;
    };
    if ex.inodes.holds(st.st_dev, st.st_ino) {
        return false;
    }
    let is_file = FileType::from_raw_mode(st.st_mode) == FileType::RegularFile;
    !(walk_all && is_file && st.st_nlink > 1)
}

/// The protected files' inodes, by device and inode number.
#[derive(Debug, Default)]
pub struct Inodes {
    both: std::collections::HashSet<(u64, u64)>,
    /// The inode numbers alone: an entry's listing gives no device, so an entry whose
    /// number is here is looked at before it is granted.
    numbers: std::collections::HashSet<u64>,
}

impl Inodes {
    /// Whether `(dev, ino)` is a protected file's inode.
    pub fn holds(&self, dev: u64, ino: u64) -> bool {
        self.both.contains(&(dev, ino))
    }

    /// Whether some protected file has inode number `ino` (on some device).
    pub fn may_hold(&self, ino: u64) -> bool {
        self.numbers.contains(&ino)
    }
}

/// What a directory held when it was listed.
#[derive(Debug)]
struct Listing {
    entries: Vec<Entry>,
}

#[derive(Debug)]
struct Entry {
    name: std::ffi::OsString,
    kind: Kind,
    ino: u64,
    /// The name matches the deny list (or is not UTF-8).
    denied: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    Link,
    /// A file, device, FIFO or socket: granted as itself.
    Other,
    /// Its type could not be read: granted nothing.
    Unknown,
}

/// Listings of directories below the roots, kept between runs: a directory whose inode and
/// change times are those of its listing is not read again. Its entries cannot have changed
/// then (creating, removing or renaming an entry updates them). A directory changed within
/// the last two seconds is listed afresh every time, so a change within the clock's
/// granularity is never missed.
#[derive(Debug, Default)]
pub struct DirCache {
    map: std::sync::Mutex<std::collections::HashMap<PathBuf, (Stamp, std::sync::Arc<Listing>)>>,
}

/// A directory's identity and change times, nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

/// Listings kept at most (beyond, the cache starts over).
const MAX_CACHED_DIRS: usize = 100_000;

fn stamp(meta: &std::fs::Metadata) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    Stamp {
        dev: meta.dev(),
        ino: meta.ino(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
    }
}

/// The entries of `dir`, from the cache when it still holds them; `None`: unreadable.
fn list(dir: &Path, ex: &Exclusions) -> Option<std::sync::Arc<Listing>> {
    let meta = std::fs::symlink_metadata(dir).ok()?;
    let now = stamp(&meta);
    if let Some(cache) = ex.cache
        && let Ok(map) = cache.map.lock()
        && let Some((seen, listing)) = map.get(dir)
        && *seen == now
    {
        return Some(std::sync::Arc::clone(listing));
    }
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).ok()? {
        let entry = entry.ok()?;
        let name = entry.file_name();
        let kind = match entry.file_type() {
            Ok(t) if t.is_symlink() => Kind::Link,
            Ok(t) if t.is_dir() => Kind::Dir,
            Ok(_) => Kind::Other,
            Err(_) => Kind::Unknown,
        };
        entries.push(Entry {
            denied: name.to_str().is_none_or(|n| ex.deny.matches(n)),
            ino: std::os::unix::fs::DirEntryExt::ino(&entry),
            kind,
            name,
        });
    }
    let listing = std::sync::Arc::new(Listing { entries });
    let settled = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
        .is_ok_and(|t| t - now.mtime_ns.max(now.ctime_ns) > 2_000_000_000);
    if settled
        && let Some(cache) = ex.cache
        && let Ok(mut map) = cache.map.lock()
    {
        if map.len() >= MAX_CACHED_DIRS {
            map.clear();
        }
        map.insert(dir.to_path_buf(), (now, std::sync::Arc::clone(&listing)));
    }
    Some(listing)
}

/// Whether `path` is an excluded path or lies beneath one.
fn excluded(path: &Path, paths: &[PathBuf]) -> bool {
    paths.iter().any(|p| path.starts_with(p))
}

/// Whether an excluded path lies strictly beneath `dir`, or is `dir` itself.
fn holds_excluded(dir: &Path, paths: &[PathBuf]) -> bool {
    paths.iter().any(|p| p.starts_with(dir))
}

/// The inodes of the regular files in `paths` and below them (at most `MAX_ENTRIES`
/// looked at), so that another name of one is never granted.
pub fn inodes(paths: &[PathBuf]) -> Inodes {
    use std::os::unix::fs::MetadataExt;
    let mut out = Inodes::default();
    let mut stack: Vec<PathBuf> = paths.to_vec();
    let mut seen = 0usize;
    while let Some(p) = stack.pop() {
        seen += 1;
        if seen > MAX_ENTRIES {
            break;
        }
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(rd) = std::fs::read_dir(&p) {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
        } else if meta.is_file() {
            out.both.insert((meta.dev(), meta.ino()));
            out.numbers.insert(meta.ino());
        }
    }
    out
}

/// The absolute, canonical form of each path (as written, made absolute, where it does not
/// exist yet), and for a symbolic link also the link itself.
pub fn canonical_set(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in paths {
        let abs = std::path::absolute(p).unwrap_or_else(|_| p.clone());
        // The link itself, in its canonical directory, when the path names a link.
        let is_link = std::fs::symlink_metadata(&abs).is_ok_and(|m| m.file_type().is_symlink());
        if is_link
            && let (Some(dir), Some(name)) = (abs.parent(), abs.file_name())
            && let Ok(dir) = dir.canonicalize()
        {
            out.push(dir.join(name));
        }
        match abs.canonicalize() {
            Ok(c) => out.push(c),
            // Not there yet: its parent's canonical form, and the name as written.
            Err(_) => out.push(match (abs.parent(), abs.file_name()) {
                (Some(dir), Some(name)) => dir
                    .canonicalize()
                    .map_or_else(|_| abs.clone(), |d| d.join(name)),
                _ => abs.clone(),
            }),
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_listings_never_hide_a_change() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/x.txt"), "x").unwrap();
        let deny = SegmentGlobs::default();
        let inodes = Inodes::default();
        let cache = DirCache::default();
        let ex = Exclusions {
            paths: &[],
            deny: &deny,
            exempt: &[],
            inodes: &inodes,
            cache: Some(&cache),
        };
        let plan = |ex: &Exclusions| {
            let mut p = Plan::default();
            p.add(&root, ex, true).unwrap();
            p.grants
        };
        // Settled (older than the clock's granularity allowance): listed once, then kept.
        std::thread::sleep(std::time::Duration::from_millis(2100));
        assert_eq!(plan(&ex), std::slice::from_ref(&root));
        assert_eq!(cache.map.lock().unwrap().len(), 3);
        // A secret appears deep down: its directory changed, so it is listed again.
        std::fs::write(root.join("a/b/.env"), "S").unwrap();
        assert_eq!(plan(&ex), [root.join("a/b/x.txt")]);
    }

    #[test]
    fn excluded_entries_split_their_ancestors_only() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        for d in ["a/b", "a/c", "d", "e/.git/objects", "node_modules/x"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in [
            "a/b/keep.txt",
            "a/b/secret.pem",
            "a/c/x",
            "d/y",
            "top.txt",
            ".env",
        ] {
            std::fs::write(root.join(f), "x").unwrap();
        }
        std::os::unix::fs::symlink("/etc/shadow", root.join("d/link")).unwrap();
        let protected = vec![root.join("a/c")];
        let deny = SegmentGlobs::default();
        let exempt = vec![root.join("node_modules")];
        let inodes = Inodes::default();
        let ex = Exclusions {
            paths: &protected,
            deny: &deny,
            exempt: &exempt,
            inodes: &inodes,
            cache: None,
        };
        // The grants of a plan over the root, relative to it, sorted.
        let granted = |walk_all: bool| {
            let mut plan = Plan::default();
            plan.add(&root, &ex, walk_all).unwrap();
            let mut got: Vec<String> = plan
                .grants
                .iter()
                .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
                .collect();
            got.sort();
            got
        };
        assert_eq!(
            granted(true),
            ["a/b/keep.txt", "d", "node_modules", "top.txt"]
        );
        // `e` holds `.git`: split, and `.git` left out.
        let mut plan = Plan::default();
        plan.add(&root.join("e"), &ex, true).unwrap();
        assert!(plan.grants.is_empty(), "{:?}", plan.grants);
        // Without walking, only the way to an excluded path is split.
        assert_eq!(
            granted(false),
            [".env", "a/b", "d", "e", "node_modules", "top.txt"]
        );
    }

    #[test]
    fn no_name_of_a_hard_linked_file_is_granted_below_a_root() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().canonicalize().unwrap();
        let root = base.join("root");
        let outside = base.join("outside");
        for d in [&root.join("a"), &root.join("b"), &outside] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(root.join(".env"), "S").unwrap();
        std::fs::hard_link(root.join(".env"), root.join("a/innocent")).unwrap();
        std::fs::write(outside.join("secret"), "S").unwrap();
        std::fs::hard_link(outside.join("secret"), root.join("b/copy")).unwrap();
        std::fs::write(root.join("b/plain"), "x").unwrap();
        std::fs::write(root.join("top"), "x").unwrap();
        let protected = vec![base.join("prot")];
        std::fs::write(&protected[0], "P").unwrap();
        std::fs::hard_link(&protected[0], base.join("sys_copy")).unwrap();
        let deny = SegmentGlobs::default();
        let inodes = inodes(&protected);
        let ex = Exclusions {
            paths: &protected,
            deny: &deny,
            exempt: &[],
            inodes: &inodes,
            cache: None,
        };
        let mut plan = Plan::default();
        plan.add(&root, &ex, true).unwrap();
        let mut got: Vec<String> = plan
            .grants
            .iter()
            .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
            .collect();
        got.sort();
        assert_eq!(got, ["b/plain", "top"]);
        assert!(plan.split.contains(&root.join("a")) && plan.split.contains(&root.join("b")));
        // Outside the roots, only another name of a protected file is held back (by device
        // and inode); other hard links of system directories are granted as they are.
        let mut plan = Plan::default();
        plan.add(&base, &ex, false).unwrap();
        assert!(
            !plan.grants.contains(&base.join("sys_copy")),
            "{:?}",
            plan.grants
        );
        assert!(
            plan.grants.contains(&base.join("outside")),
            "{:?}",
            plan.grants
        );
    }
}
