//! The path jail: opens files named by tool arguments below a service root (and read-only
//! shared roots beside it), so no path, symlink or race can reach anything else. The one
//! module the executor and the built-in file tools open files through.
//!
//! - The argument is normalized lexically first ([`normalize_path`]): absolute paths, `..`
//!   escapes, NUL bytes and option-like names are refused; percent-encoding is not decoded.
//! - Files are opened with `openat2(2)` relative to the root's directory handle with
//!   `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`: the kernel follows symlinks
//!   only while they stay below the root, refuses `/proc` magic links and mount crossings, and
//!   the check is the open itself, so a symlink swapped in between cannot escape.
//! - The deny list ([`DEFAULT_DENY`] by default: secrets, key material, repository internals;
//!   case-insensitive) is applied to the path as asked and to the path the kernel actually opened (read back
//!   from the descriptor), so a link to `.env` is refused too.
//! - A path that does not exist yet is created through its parent: the parent is opened
//!   through the jail, checked, and the new name is created in it without following links.
//! - A regular file with more than one name (a hard link) is refused: the name the kernel
//!   reports is one of several, and another may be deny-listed or outside the root.
//! - [`Jail::resolve`] answers where a path leads without opening it for use: what the
//!   decision reports to policies (`context.paths.<arg>`), with the checks of the open that
//!   would follow, so a decision and its execution cannot disagree.
//!
//! Linux only (openat2 is Linux 5.6+); elsewhere, or on an older kernel, every open is refused.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

use crate::paths::{PathError, normalize_path};

pub use crate::globs::DEFAULT_DENY;
use crate::globs::{PathGuard, SegmentGlobs};

/// Why a path was refused. Messages name the path as asked, never file contents.
#[derive(Debug, thiserror::Error)]
pub enum JailError {
    /// Lexically invalid (absolute, `..` escape, NUL, option-like).
    #[error("{0}")]
    Invalid(#[from] PathError),
    /// Resolves outside its root, through a magic link, or across a mount.
    #[error("the path resolves outside the allowed roots")]
    Escapes,
    /// A deny-listed name, as asked or as resolved.
    #[error("the path is deny-listed (`{0}`)")]
    Denied(String),
    /// A write to a read-only shared root.
    #[error("`{0}` is a read-only root")]
    ReadOnly(String),
    /// No such file (or parent directory).
    #[error("no such file")]
    NotFound,
    /// Not a regular file (a directory, device, FIFO or socket).
    #[error("not a regular file")]
    NotAFile,
    /// A file with more than one name (or none): what it really is cannot be told.
    #[error(
        "the file has several names (hard links), and another may be outside the root or deny-listed"
    )]
    HardLinked,
    /// Not a directory (where one was asked for).
    #[error("not a directory")]
    NotADirectory,
    /// The kernel cannot confine the open (no openat2): refused.
    #[error("this kernel cannot confine file access (openat2 unavailable); refused")]
    Unsupported,
    /// Another I/O failure.
    #[error("cannot open the path: {0}")]
    Io(std::io::ErrorKind),
}

/// One root: a directory handle and its canonical path.
#[derive(Debug)]
struct Root {
    name: String,
    dir: OwnedFd,
    path: PathBuf,
    writable: bool,
}

/// What a path will be used for, which decides the checks [`Jail::resolve`] applies: those
/// of the open that follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// Read (or handed to a program, or forwarded): links are followed while they stay below
    /// a root and off the deny list; a hard-linked file is refused.
    Read,
    /// Created, replaced or deleted by the file tools: the service root only, no link on the
    /// way (the path resolved is the path asked), never a link or a hard-linked file at the
    /// end.
    Write,
}

/// A file opened through the jail.
#[derive(Debug)]
pub struct Opened {
    /// The open file.
    pub file: File,
    /// The path the kernel opened, relative to its root (with the shared root's name first).
    pub resolved: String,
}

/// A directory opened through the jail, for creating a file in it.
#[derive(Debug)]
pub struct Parent {
    /// The directory.
    pub dir: OwnedFd,
    /// The new file's name in it (no separators, not `.` or `..`).
    pub name: String,
    /// The new file's path relative to the service root.
    pub resolved: String,
}

/// A directory opened through the jail, for listing its entries.
#[derive(Debug)]
pub struct OpenedDir {
    /// The directory, open for reading entries.
    pub dir: OwnedFd,
    /// Its path as the kernel opened it (see [`Opened::resolved`]).
    pub resolved: String,
}

/// The service root, the shared roots and the deny list.
#[derive(Debug)]
pub struct Jail {
    service: Root,
    shared: Vec<Root>,
    /// The deny list and the sidecar's own files below the service root.
    guard: PathGuard,
}

impl Jail {
    /// A jail over `root` (read-write) and `shared` (name → directory, read-only; a path whose
    /// first segment is the name goes there). `deny` entries match one path segment,
    /// case-insensitively (see [`SegmentGlobs`]).
    pub fn new(
        root: &Path,
        shared: &[(String, PathBuf)],
        deny: &SegmentGlobs,
    ) -> std::io::Result<Jail> {
        Ok(Jail {
            service: open_root("", root, true)?,
            shared: shared
                .iter()
                .map(|(name, path)| open_root(name, path, false))
                .collect::<std::io::Result<_>>()?,
            guard: PathGuard {
                deny: deny.clone(),
                own: Vec::new(),
            },
        })
    }

    /// Keeps `paths` (the sidecar's data directory, lock directory, policies, schemas, config
    /// file) out of reach of every tool when they lie below the service root. Paths that do
    /// not exist yet are taken as written.
    /// `paths` are absolute and canonical (see `exec::sandbox::canonical_set`, which also
    /// keeps a link's own name beside its target).
    pub fn protect(&mut self, paths: &[PathBuf]) {
        self.guard.protect_below(&self.service.path, paths);
    }
    /// The root a normalized path belongs to, and the path inside it.
    fn root_for<'a>(&self, clean: &'a str) -> (&Root, &'a str) {
        let (first, rest) = clean.split_once('/').unwrap_or((clean, "."));
        match self.shared.iter().find(|r| r.name == first) {
            Some(r) => (r, rest),
            None => (&self.service, clean),
        }
    }

    /// The first deny-listed segment of `path`, if any, or the sidecar's own file it is in.
    fn denied(&self, path: &str) -> Option<String> {
        self.guard.refuses(path)
    }

    /// Opens an existing regular file for reading.
    pub fn open_read(&self, raw: &str) -> Result<Opened, JailError> {
        let clean = self.normalized(raw)?;
        let (root, inside) = self.root_for(&clean);
        let fd = beneath(
            root,
            inside,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
        )?;
        let resolved = self.resolved(root, &fd)?;
        let stat =
            rustix::fs::fstat(&fd).map_err(|e| JailError::Io(std::io::Error::from(e).kind()))?;
        regular_single(&stat)?;
        Ok(Opened {
            file: File::from(fd),
            resolved,
        })
    }

    /// Opens an existing directory for listing.
    pub fn open_dir(&self, raw: &str) -> Result<OpenedDir, JailError> {
        let clean = self.normalized(raw)?;
        let (root, inside) = self.root_for(&clean);
        let fd = beneath(
            root,
            inside,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        )
        .map_err(|e| match e {
            JailError::NotAFile => JailError::NotADirectory,
            other => other,
        })?;
        let resolved = self.resolved(root, &fd)?;
        Ok(OpenedDir { dir: fd, resolved })
    }

    /// Opens entry `name` of a directory opened through the jail, for walking a tree: never
    /// through a link (a link entry is refused with [`JailError::Escapes`]), never across a
    /// mount, never a deny-listed name. `directory` opens it for listing, otherwise for
    /// reading a regular file.
    pub fn child(&self, dir: &OwnedFd, name: &str, directory: bool) -> Result<OwnedFd, JailError> {
        if name.contains('/') || matches!(name, "" | "." | "..") {
            return Err(JailError::Escapes);
        }
        if let Some(d) = self.denied(name) {
            return Err(JailError::Denied(d));
        }
        let flags = if directory {
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC
        } else {
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK
        };
        let resolve = ResolveFlags::BENEATH
            | ResolveFlags::NO_SYMLINKS
            | ResolveFlags::NO_MAGICLINKS
            | ResolveFlags::NO_XDEV;
        let fd =
            rustix::fs::openat2(dir, name, flags, Mode::empty(), resolve).map_err(open_error)?;
        if !directory {
            // What was listed may have been swapped for a FIFO or device since.
            let stat = rustix::fs::fstat(&fd)
                .map_err(|e| JailError::Io(std::io::Error::from(e).kind()))?;
            regular_single(&stat)?;
        }
        Ok(fd)
    }

    /// Whether a path relative to a root has a deny-listed segment: what listings leave out.
    pub fn is_denied(&self, path: &str) -> bool {
        self.denied(path).is_some()
    }

    /// Opens the parent directory of a file to create (or replace) in the service root.
    pub fn parent_for_write(&self, raw: &str) -> Result<Parent, JailError> {
        let clean = self.normalized(raw)?;
        let (root, inside) = self.root_for(&clean);
        if !root.writable {
            return Err(JailError::ReadOnly(root.name.clone()));
        }
        self.parent(root, inside)
    }

    /// The directory holding `inside` (opened beneath `root`), the last segment's name, and
    /// the path as resolved through the directory, deny-listed or not.
    fn parent(&self, root: &Root, inside: &str) -> Result<Parent, JailError> {
        let (dir_path, name) = inside.rsplit_once('/').unwrap_or((".", inside));
        if matches!(name, "." | "..") {
            return Err(JailError::NotAFile);
        }
        let dir = beneath(
            root,
            dir_path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        )?;
        let parent = self.resolved(root, &dir)?;
        let resolved = if parent == "." {
            name.to_owned()
        } else {
            format!("{parent}/{name}")
        };
        if let Some(d) = self.denied(&resolved) {
            return Err(JailError::Denied(d));
        }
        Ok(Parent {
            dir,
            name: name.to_owned(),
            resolved,
        })
    }

    /// `raw` normalized, refused if deny-listed as asked.
    fn normalized(&self, raw: &str) -> Result<String, JailError> {
        let clean = normalize_path(raw)?;
        match self.denied(&clean) {
            Some(d) => Err(JailError::Denied(d)),
            None => Ok(clean),
        }
    }

    /// Creates (or truncates) a regular file in the service root for writing. The last
    /// segment is never followed if it is a symlink.
    pub fn create(&self, raw: &str) -> Result<Opened, JailError> {
        let parent = self.parent_for_write(raw)?;
        let fd = rustix::fs::openat(
            &parent.dir,
            parent.name.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| match e {
            rustix::io::Errno::LOOP => JailError::Escapes,
            rustix::io::Errno::ISDIR => JailError::NotAFile,
            other => JailError::Io(std::io::Error::from(other).kind()),
        })?;
        Ok(Opened {
            file: File::from(fd),
            resolved: parent.resolved,
        })
    }

    /// Where `raw` leads, relative to the roots (a shared root's name first, `.` for the
    /// service root), with every link resolved, checked as the open for `intent` checks it:
    /// beneath the root, no magic links, no mount crossing, the deny list and the sidecar's
    /// own files as asked and as resolved, no hard-linked file; for [`Intent::Write`] also
    /// no link on the way or at the end, and not a read-only root. A name that does not
    /// exist yet resolves through its directory (as creating it would).
    /// `NotFound` (no directory either), `NotAFile` and `NotADirectory` are what the tool
    /// would answer, not refusals; every other error is one.
    pub fn resolve(&self, raw: &str, intent: Intent) -> Result<String, JailError> {
        match intent {
            Intent::Read => self.resolve_read(raw).map(|(_, rel)| rel),
            Intent::Write => self.resolve_write(raw),
        }
    }

    /// [`Jail::resolve`] for reading: the root, and the path as resolved.
    fn resolve_read(&self, raw: &str) -> Result<(&Root, String), JailError> {
        let clean = self.normalized(raw)?;
        let (root, inside) = self.root_for(&clean);
        let rel = match beneath(root, inside, OFlags::PATH | OFlags::CLOEXEC) {
            Ok(fd) => {
                let rel = self.resolved(root, &fd)?;
                let stat = rustix::fs::fstat(&fd)
                    .map_err(|e| JailError::Io(std::io::Error::from(e).kind()))?;
                if rustix::fs::FileType::from_raw_mode(stat.st_mode)
                    == rustix::fs::FileType::RegularFile
                {
                    regular_single(&stat)?;
                }
                rel
            }
            Err(JailError::NotFound) => self.parent(root, inside)?.resolved,
            Err(e) => return Err(e),
        };
        Ok((root, rel))
    }

    /// [`Jail::resolve`] for the writing file tools: what `files::write` accepts.
    fn resolve_write(&self, raw: &str) -> Result<String, JailError> {
        let clean = self.normalized(raw)?;
        let parent = self.parent_for_write(raw)?;
        if parent.resolved != clean {
            return Err(JailError::Escapes);
        }
        match rustix::fs::statat(
            &parent.dir,
            parent.name.as_str(),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        ) {
            Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(JailError::Io(std::io::Error::from(e).kind())),
            Ok(st) => match rustix::fs::FileType::from_raw_mode(st.st_mode) {
                rustix::fs::FileType::RegularFile => regular_single(&st)?,
                rustix::fs::FileType::Symlink => return Err(JailError::Escapes),
                _ => return Err(JailError::NotAFile),
            },
        }
        Ok(parent.resolved)
    }

    /// Where `raw` points, as an absolute path with every symlink resolved, for handing to a
    /// program: [`Jail::resolve`] for reading, made absolute.
    pub fn locate(&self, raw: &str) -> Result<PathBuf, JailError> {
        let (root, rel) = self.resolve_read(raw)?;
        // `rel` starts with the shared root's name for shared roots.
        let inside_root = if root.name.is_empty() {
            rel.as_str()
        } else {
            rel.strip_prefix(root.name.as_str())
                .map(|r| r.trim_start_matches('/'))
                .unwrap_or(".")
        };
        Ok(if inside_root.is_empty() || inside_root == "." {
            root.path.clone()
        } else {
            root.path.join(inside_root)
        })
    }

    /// The deny list.
    pub fn deny(&self) -> &SegmentGlobs {
        &self.guard.deny
    }

    /// The sidecar's own files below the service root, relative to it.
    pub fn own(&self) -> &[String] {
        &self.guard.own
    }

    /// The service root's canonical path.
    pub fn root(&self) -> &Path {
        &self.service.path
    }

    /// The shared roots' canonical paths.
    pub fn shared(&self) -> impl Iterator<Item = &Path> {
        self.shared.iter().map(|r| r.path.as_path())
    }

    /// The path the kernel opened for `fd`, relative to `root`; refused if it is outside the
    /// root (belt and braces) or deny-listed.
    fn resolved(&self, root: &Root, fd: &OwnedFd) -> Result<String, JailError> {
        let link = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(fd));
        let real = std::fs::read_link(&link).map_err(|e| JailError::Io(e.kind()))?;
        let rel = real
            .strip_prefix(&root.path)
            .map_err(|_| JailError::Escapes)?;
        let rel = rel.to_str().ok_or(JailError::Escapes)?;
        let rel = if rel.is_empty() { "." } else { rel };
        if let Some(d) = self.denied(rel) {
            return Err(JailError::Denied(d));
        }
        Ok(if root.name.is_empty() {
            rel.to_owned()
        } else if rel == "." {
            root.name.clone()
        } else {
            format!("{}/{rel}", root.name)
        })
    }
}

/// Refuses anything but a regular file with one name: a hard link's other name may be
/// outside the root or deny-listed, and the name read back from the descriptor would not say
/// so; an unlinked file (no name) is refused too.
pub fn regular_single(stat: &rustix::fs::Stat) -> Result<(), JailError> {
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(JailError::NotAFile);
    }
    if stat.st_nlink != 1 {
        return Err(JailError::HardLinked);
    }
    Ok(())
}

fn open_root(name: &str, path: &Path, writable: bool) -> std::io::Result<Root> {
    let path = path.canonicalize()?;
    let dir = rustix::fs::open(
        &path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(Root {
        name: name.to_owned(),
        dir,
        path,
        writable,
    })
}

/// `openat2` below `root`: symlinks followed only while they stay beneath it, no magic links,
/// no mount crossing.
fn beneath(root: &Root, inside: &str, flags: OFlags) -> Result<OwnedFd, JailError> {
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_XDEV;
    rustix::fs::openat2(&root.dir, inside, flags, Mode::empty(), resolve).map_err(open_error)
}

fn open_error(e: rustix::io::Errno) -> JailError {
    match e {
        rustix::io::Errno::XDEV | rustix::io::Errno::LOOP => JailError::Escapes,
        rustix::io::Errno::NOENT => JailError::NotFound,
        rustix::io::Errno::NOSYS => JailError::Unsupported,
        rustix::io::Errno::ISDIR | rustix::io::Errno::NOTDIR => JailError::NotAFile,
        other => JailError::Io(std::io::Error::from(other).kind()),
    }
}
