//! A pids cgroup per run, where the machine lets the sidecar make one: `pids.max` bounds the
//! processes of one call (RLIMIT_NPROC counts all of the user's, and root is exempt from it),
//! and the launcher lists the cgroup's members to kill, so a process that left the process
//! group (setsid) is still found.
//!
//! Layout: `<pids hierarchy>/<the sidecar's own cgroup>/toolgate-<pid>-<runner>/<run>`; cgroup v1 (a
//! `pids` hierarchy) or v2 (when the sidecar's cgroup delegates `pids`). Directories of
//! sidecars that are gone are removed at start.

use std::path::{Path, PathBuf};

/// The sidecar's cgroup directory for runs.
#[derive(Debug)]
pub struct Cgroups {
    base: PathBuf,
}

impl Cgroups {
    /// Makes the base directory, or `None` where no pids cgroup can be made.
    pub fn create() -> Option<Cgroups> {
        let (mount, own) = pids_hierarchy()?;
        let parent = mount.join(own.trim_start_matches('/'));
        sweep(&parent);
        static RUNNERS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = RUNNERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let base = parent.join(format!("toolgate-{}-{n}", std::process::id()));
        if std::fs::create_dir(&base).is_err() && !base.is_dir() {
            return None;
        }
        if !base.join("pids.max").exists() {
            let _ = std::fs::remove_dir(&base);
            return None;
        }
        Some(Cgroups { base })
    }

    /// The base directory (the launcher reads its runs' members below it).
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// A cgroup for run `n` with at most `max` processes.
    pub fn make(&self, n: u64, max: u64) -> std::io::Result<PathBuf> {
        let dir = self.base.join(n.to_string());
        std::fs::create_dir(&dir)?;
        if let Err(e) = std::fs::write(dir.join("pids.max"), max.to_string()) {
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
        Ok(dir)
    }

    /// Removes a run's cgroup (empty once the launcher is gone; retried briefly, so call it
    /// off the async workers).
    pub fn remove(dir: &Path) {
        for i in 0..50 {
            if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                return;
            }
            if i == 10 {
                // Still populated (a launcher that was itself killed): the run owns its
                // cgroup until it is empty, so end whatever is left in it.
                kill_members(dir);
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        tracing::warn!(cgroup = %dir.display(), "run cgroup not removed");
    }
}

/// Kills every process in the cgroup at `dir`: `cgroup.kill` on v2, each listed member on v1.
fn kill_members(dir: &Path) {
    if std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
        return;
    }
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        for pid in text
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        remove_tree(&self.base);
    }
}

/// The pids hierarchy's mount point and the sidecar's cgroup path in it.
fn pids_hierarchy() -> Option<(PathBuf, String)> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(point), Some(kind), Some(opts)) = (f.get(1), f.get(2), f.get(3)) else {
            continue;
        };
        let v1 = *kind == "cgroup" && opts.split(',').any(|o| o == "pids");
        let v2 = *kind == "cgroup2";
        if !(v1 || v2) {
            continue;
        }
        let own = cgroups.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
            let matches = if v1 {
                ctrl.split(',').any(|c| c == "pids")
            } else {
                ctrl.is_empty()
            };
            matches.then(|| path.to_owned())
        });
        if let Some(own) = own {
            if v2 && !Path::new(point).join("cgroup.controllers").exists() {
                continue;
            }
            return Some((PathBuf::from(point), own));
        }
    }
    None
}

/// Removes `toolgate-<pid>` directories of sidecars no longer running.
fn sweep(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("toolgate-"))
            .and_then(|p| p.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            remove_tree(&e.path());
        }
    }
}

fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                // A run of a sidecar that died may still have processes: end them first.
                if std::fs::remove_dir(e.path()).is_err() {
                    kill_members(&e.path());
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                let _ = std::fs::remove_dir(e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}
