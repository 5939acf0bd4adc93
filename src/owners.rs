//! Owners and modes of the sidecar's own files (the protected set) and of the directories
//! above them, checked at start and whenever the policy files are read, so that no other
//! user of the machine can change them, nor swap them for their own.
//!
//! What is refused (start stops, a reload keeps the last good set), each with the fix:
//! - anything writable by every user, or a directory above it that every user may write
//!   without the sticky bit (anyone could replace the entry below it);
//! - a file of the set owned by the user programs run as (`[exec] run_as`: its programs
//!   could change it);
//! - an entry inside a protected directory owned by someone other than root, toolgate's own
//!   user or the directory's owner (a file planted there);
//! - a regular file with another name (a hard link): the other name is not protected;
//! - a setuid or setgid file.
//!
//! What is repaired instead when toolgate's own user owns it, at start only (`validate` and
//! reloads only report): write bits for every user removed; the data directory's and the
//! audit keyring's missing owner bits restored and their group and other bits removed (a
//! `chmod 000` on the data directory no longer stops the next start); setuid and setgid
//! bits removed. Each repair is logged.
//!
//! Owns: the rules. Does not own: which files are protected (`config`) or the covers that
//! keep tool runs off them (`exec`).

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// Who may own what: toolgate's user, and the user its programs run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Users {
    /// toolgate's effective user.
    pub me: u32,
    /// The user programs run as, when it is another one (a root sidecar's `run_as`).
    pub programs: Option<u32>,
}

impl Users {
    /// This process, with programs running as `programs` (when root).
    pub fn current(programs: Option<u32>) -> Users {
        let me = rustix::process::geteuid().as_raw();
        Users {
            me,
            programs: programs.filter(|p| *p != me),
        }
    }
}

/// How strictly a path is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A file or directory toolgate reads (policies, config, tokens, keys).
    Read,
    /// toolgate's own state, which only its user may open: the data directory and the audit
    /// keyring (mode 0700 / 0600 when repaired).
    Private,
}

/// One thing found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The path it is about.
    pub path: PathBuf,
    /// What is wrong (one line), or what was repaired.
    pub message: String,
    /// What to run to fix it.
    pub help: String,
    /// Repaired already (otherwise it stands, and the caller refuses).
    pub repaired: bool,
}

/// Checks `paths` (canonical, each with its kind; those that do not exist are skipped), the
/// entries directly inside the directories among them, and every directory above them.
/// `repair`: fix what toolgate's own user owns and may fix, instead of reporting it.
pub fn check(paths: &[(PathBuf, Kind)], users: Users, repair: bool) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut above = std::collections::BTreeSet::new();
    for (path, kind) in paths {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            continue;
        };
        for dir in path.ancestors().skip(1) {
            above.insert(dir.to_path_buf());
        }
        if meta.file_type().is_symlink() {
            continue;
        }
        entry(path, &meta, *kind, None, users, repair, &mut out);
        if meta.is_dir()
            && let Ok(list) = std::fs::read_dir(path)
        {
            for e in list.flatten() {
                let inner = e.path();
                if paths.iter().any(|(p, _)| *p == inner) {
                    continue;
                }
                if let Ok(m) = std::fs::symlink_metadata(&inner)
                    && !m.file_type().is_symlink()
                {
                    entry(&inner, &m, *kind, Some(meta.uid()), users, repair, &mut out);
                }
            }
        }
    }
    for dir in above {
        if let Ok(meta) = std::fs::metadata(&dir) {
            open_above(&dir, &meta, users, repair, &mut out);
        }
    }
    out
}

/// The rules for one path of the set, or an entry of a protected directory (`inside`: that
/// directory's owner).
fn entry(
    path: &Path,
    meta: &std::fs::Metadata,
    kind: Kind,
    inside: Option<u32>,
    users: Users,
    repair: bool,
    out: &mut Vec<Finding>,
) {
    let shown = path.display();
    let mode = meta.mode() & 0o7777;
    let mine = meta.uid() == users.me;
    if users.programs == Some(meta.uid()) {
        out.push(stands(
            path,
            format!(
                "`{shown}` is owned by uid {}, the user toolgate's programs run as: they could change it",
                meta.uid()
            ),
            format!("`chown {} {shown}`", users.me),
        ));
    }
    if let Some(dir_owner) = inside
        && ![0, users.me, dir_owner].contains(&meta.uid())
    {
        out.push(stands(
            path,
            format!(
                "`{shown}` is owned by uid {}, not by root, toolgate's user ({}) or its directory's owner ({dir_owner}): another user put it there",
                meta.uid(),
                users.me
            ),
            format!("remove it, or `chown {dir_owner} {shown}` if it is yours"),
        ));
    }
    if meta.is_file() && meta.nlink() > 1 {
        out.push(stands(
            path,
            format!(
                "`{shown}` has {} names (hard links); the others are not protected",
                meta.nlink()
            ),
            format!("replace it with a copy: `cp {shown} {shown}.new && mv {shown}.new {shown}`"),
        ));
    }
    let mut wanted = mode;
    let mut why = Vec::new();
    if mode & 0o002 != 0 {
        wanted &= !0o002;
        why.push("writable by every user");
    }
    if meta.is_file() && mode & 0o6000 != 0 {
        wanted &= !0o6000;
        why.push("setuid or setgid");
    }
    if kind == Kind::Private && mine {
        let owner = if meta.is_dir() { 0o700 } else { 0o600 };
        if mode & 0o700 != owner {
            wanted |= owner;
            why.push("missing its owner's permissions");
        }
        if mode & 0o077 != 0 {
            wanted &= !0o077;
            why.push("open to other users");
        }
    }
    if why.is_empty() {
        return;
    }
    let what = why.join(", ");
    let help = format!("`chmod {wanted:04o} {shown}`");
    if repair
        && mine
        && std::fs::set_permissions(path, std::fs::Permissions::from_mode(wanted)).is_ok()
    {
        out.push(Finding {
            path: path.to_path_buf(),
            message: format!("`{shown}` was {what} (mode {mode:04o}); repaired to {wanted:04o}"),
            help,
            repaired: true,
        });
    } else {
        out.push(stands(
            path,
            format!("`{shown}` is {what} (mode {mode:04o})"),
            help,
        ));
    }
}

/// A directory above the set that every user may write, without the sticky bit.
fn open_above(
    dir: &Path,
    meta: &std::fs::Metadata,
    users: Users,
    repair: bool,
    out: &mut Vec<Finding>,
) {
    let mode = meta.mode() & 0o7777;
    if mode & 0o002 == 0 || mode & 0o1000 != 0 {
        return;
    }
    let shown = dir.display();
    let wanted = mode & !0o002;
    let help = format!("`chmod {wanted:04o} {shown}`");
    if repair
        && meta.uid() == users.me
        && std::fs::set_permissions(dir, std::fs::Permissions::from_mode(wanted)).is_ok()
    {
        out.push(Finding {
            path: dir.to_path_buf(),
            message: format!(
                "`{shown}`, above toolgate's own files, was writable by every user (mode {mode:04o}); repaired to {wanted:04o}"
            ),
            help,
            repaired: true,
        });
    } else {
        out.push(stands(
            dir,
            format!(
                "`{shown}`, above toolgate's own files, is writable by every user without the sticky bit (mode {mode:04o}): anyone could replace what lies below it"
            ),
            help,
        ));
    }
}

fn stands(path: &Path, message: String, help: String) -> Finding {
    Finding {
        path: path.to_path_buf(),
        message,
        help,
        repaired: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn repairs_what_it_owns_and_reports_the_rest() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().canonicalize().unwrap();
        let data = dir.join("data");
        std::fs::create_dir(&data).unwrap();
        let keys = data.join("audit-keys.json");
        std::fs::write(&keys, "{}").unwrap();
        let policies = dir.join("policies");
        std::fs::create_dir(&policies).unwrap();
        std::fs::write(policies.join("a.cedar"), "").unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o000)).unwrap();
        std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&policies, std::fs::Permissions::from_mode(0o777)).unwrap();
        let users = Users::current(None);
        let set = [
            (data.clone(), Kind::Private),
            (keys.clone(), Kind::Private),
            (policies.clone(), Kind::Read),
        ];
        // Reported, not repaired.
        let found = check(&set, users, false);
        assert!(found.iter().all(|f| !f.repaired), "{found:?}");
        assert!(
            found
                .iter()
                .any(|f| f.path == policies && f.message.contains("writable by every user")),
            "{found:?}"
        );
        assert_eq!(mode(&policies), 0o777);
        // Repaired.
        let found = check(&set, users, true);
        assert!(found.iter().all(|f| f.repaired), "{found:?}");
        assert_eq!(mode(&data), 0o700);
        assert_eq!(mode(&keys), 0o600);
        assert_eq!(mode(&policies), 0o775);
        assert!(check(&set, users, false).is_empty());
        // A hard link and a setuid bit.
        std::fs::hard_link(policies.join("a.cedar"), dir.join("other")).unwrap();
        std::fs::set_permissions(
            policies.join("a.cedar"),
            std::fs::Permissions::from_mode(0o4644),
        )
        .unwrap();
        let found = check(&set, users, false);
        assert!(
            found.iter().any(|f| f.message.contains("2 names")),
            "{found:?}"
        );
        assert!(
            found.iter().any(|f| f.message.contains("setuid")),
            "{found:?}"
        );
        // A directory above, open to everyone without the sticky bit.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let found = check(&set, users, false);
        assert!(
            found
                .iter()
                .any(|f| f.path == dir && f.message.contains("above")),
            "{found:?}"
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(!check(&set, users, false).iter().any(|f| f.path == dir));
    }
}
