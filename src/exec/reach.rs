//! Whether the user programs run as can use the directories a stdio upstream is given: enter
//! its working directory, and write where it declares `writes`. Checked at start and by
//! `toolgate validate`, so that a root sidecar (programs run as `[exec] run_as`, nobody by
//! default) says so before the first approved write fails with EACCES, and names the
//! command that fixes it.
//!
//! The check reads mode bits and owners only (no ACLs, no supplementary groups): it explains
//! and warns; the kernel still decides.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use super::{ExecSettings, NOBODY, RunAs};

/// One directory the program's user cannot use as it needs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unusable {
    /// The directory.
    pub path: PathBuf,
    /// What is missing, e.g. "not writable by 65534:65534".
    pub why: String,
    /// The command that fixes it.
    pub fix: String,
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` is {}; fix: `{}`",
            self.path.display(),
            self.why,
            self.fix
        )
    }
}

/// The user and group programs run as with `settings` in this process: `[exec] run_as`
/// (nobody by default) for a root sidecar, the sidecar's own otherwise.
pub fn program_user(settings: &ExecSettings) -> RunAs {
    if rustix::process::geteuid().is_root() {
        settings.run_as.unwrap_or(NOBODY)
    } else {
        RunAs {
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
        }
    }
}

/// What `who` cannot use of working directory `cwd` and of `writes` (both relative to
/// `root`): every directory on the way must be searchable, `cwd` readable, each of `writes`
/// writable. A declared directory that does not exist yet is made for the run's user at the
/// first run, so only its nearest existing ancestor is checked (it must be writable).
pub fn unusable(root: &Path, who: RunAs, cwd: &str, writes: &[String]) -> Vec<Unusable> {
    let mut out = Vec::new();
    let ids = format!("{}:{}", who.uid, who.gid);
    let cwd = root.join(cwd);
    if let Some(blocked) = unsearchable(&cwd, who) {
        out.push(Unusable {
            why: format!(
                "not searchable by {ids}, so the upstream cannot enter `{}`",
                cwd.display()
            ),
            fix: format!("chmod o+x {}", blocked.display()),
            path: blocked,
        });
    } else if !allows(&cwd, who, 0o4) {
        out.push(Unusable {
            path: cwd.clone(),
            why: format!("the upstream's working directory, not readable by {ids}"),
            fix: format!("chmod o+rx {}", cwd.display()),
        });
    }
    for w in writes {
        let dir = root.join(w);
        let existing = dir
            .ancestors()
            .find(|d| std::fs::symlink_metadata(d).is_ok())
            .map_or_else(|| dir.clone(), Path::to_path_buf);
        if out.iter().any(|u| existing.starts_with(&u.path)) {
            continue;
        }
        if let Some(blocked) = unsearchable(&existing, who) {
            out.push(Unusable {
                why: format!("not searchable by {ids}, so the upstream cannot reach `{w}`"),
                fix: format!("chmod o+x {}", blocked.display()),
                path: blocked,
            });
        } else if !allows(&existing, who, 0o2) {
            let what = if existing == dir {
                format!("declared in `writes` but not writable by {ids}")
            } else {
                format!("where `{w}` (declared in `writes`) would be made, not writable by {ids}")
            };
            out.push(Unusable {
                fix: format!("chown -R {ids} {}", existing.display()),
                path: existing,
                why: what,
            });
        }
    }
    out
}

/// The first directory on the way to `dir` (itself included) that `who` may not search.
fn unsearchable(dir: &Path, who: RunAs) -> Option<PathBuf> {
    let mut way: Vec<&Path> = dir.ancestors().collect();
    way.reverse();
    way.into_iter()
        .filter(|d| std::fs::symlink_metadata(d).is_ok())
        .find(|d| !allows(d, who, 0o1))
        .map(Path::to_path_buf)
}

/// Whether `who` has permission `bit` (4 read, 2 write, 1 search) on `path` by its mode.
fn allows(path: &Path, who: RunAs, bit: u32) -> bool {
    let Ok(m) = std::fs::metadata(path) else {
        return false;
    };
    let shift = if m.uid() == who.uid {
        6
    } else if m.gid() == who.gid {
        3
    } else {
        0
    };
    m.mode() & (bit << shift) != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn a_directory_owned_by_another_user_is_named_with_its_fix() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir(root.join("notes")).unwrap();
        std::fs::set_permissions(root.join("notes"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        // Someone who owns nothing here.
        let who = RunAs {
            uid: 54_321,
            gid: 54_321,
        };
        let found = unusable(root, who, ".", &["notes".to_owned(), "later".to_owned()]);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].path, root.join("notes"));
        assert!(
            found[0].fix.starts_with("chown -R 54321:54321 "),
            "{found:?}"
        );
        // Not there yet: made at the first run, in the root, which must then be writable.
        assert_eq!(found[1].path, root);
        std::fs::set_permissions(root.join("notes"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(unusable(root, who, ".", &["notes".to_owned(), "later".to_owned()]).is_empty());
    }
}
