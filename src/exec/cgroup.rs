//! A pids cgroup per run, where the machine lets the sidecar make one: `pids.max` bounds the
//! processes of one call (RLIMIT_NPROC counts all of the user's, and root is exempt from it),
//! and the launcher lists the cgroup's members to kill, so a process that left the process
//! group (setsid) is still found. Beside it, where the memory controller is there too, a
//! memory cgroup per run: one limit for all of the run's processes together (RLIMIT_AS is
//! per process), swap off for the group, and the kernel's OOM kills counted so the run is
//! reported as stopped for memory.
//!
//! Layout: `<hierarchy>/<the sidecar's own cgroup>/toolgate-<pid>-<runner>/<run>`; cgroup v1
//! (a `pids` and a `memory` hierarchy) or v2 (when the sidecar's cgroup delegates `pids`,
//! and `memory` for the memory limit). Directories of sidecars that are gone are removed at
//! start.

use std::path::{Path, PathBuf};

/// The sidecar's cgroup directory for runs.
#[derive(Debug)]
pub struct Cgroups {
    base: PathBuf,
    /// The base directory in the memory hierarchy (v1), or `base` itself (v2), where the
    /// memory controller can be used.
    memory: Option<PathBuf>,
}

/// The cgroups of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunGroup {
    /// The pids cgroup (its members are the run's processes).
    pub pids: PathBuf,
    /// The memory cgroup, when there is one (the same directory on cgroup v2).
    pub memory: Option<PathBuf>,
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
        let memory = memory_base(&base, n);
        Some(Cgroups { base, memory })
    }

    /// Whether runs get a memory limit across their processes.
    pub fn limits_memory(&self) -> bool {
        self.memory.is_some()
    }

    /// The base directories (the launcher reads its runs' members and memory counts below
    /// them).
    pub fn bases(&self) -> Vec<PathBuf> {
        let mut out = vec![self.base.clone()];
        out.extend(self.memory.iter().filter(|m| **m != self.base).cloned());
        out
    }

    /// The cgroups for run `n`: at most `max` processes, and `memory_bytes` for all of them
    /// together (without swap) where there is a memory controller.
    pub fn make(&self, n: u64, max: u64, memory_bytes: u64) -> std::io::Result<RunGroup> {
        let dir = self.base.join(n.to_string());
        std::fs::create_dir(&dir)?;
        if let Err(e) = std::fs::write(dir.join("pids.max"), max.to_string()) {
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
        let memory = match &self.memory {
            None => None,
            Some(base) => match limit_memory(base, &dir, n, memory_bytes) {
                Ok(m) => Some(m),
                Err(e) => {
                    let _ = std::fs::remove_dir(&dir);
                    return Err(e);
                }
            },
        };
        Ok(RunGroup { pids: dir, memory })
    }

    /// Removes a run's cgroups (see [`Cgroups::remove`]).
    pub fn remove_run(group: &RunGroup) {
        Self::remove(&group.pids);
        if let Some(m) = group.memory.as_ref().filter(|m| **m != group.pids) {
            Self::remove(m);
        }
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
        if let Some(m) = self.memory.as_ref().filter(|m| **m != self.base) {
            remove_tree(m);
        }
    }
}

/// The memory base beside the pids base `pids_base`: the same directory on cgroup v2 when
/// the memory controller can be enabled below it, else a directory in the v1 memory
/// hierarchy. `None` where neither can be used.
fn memory_base(pids_base: &Path, n: u32) -> Option<PathBuf> {
    if pids_base.join("cgroup.controllers").exists() {
        // v2: the controller must be offered to this directory, then enabled below it.
        let offered = std::fs::read_to_string(pids_base.join("cgroup.controllers")).ok()?;
        if !offered.split_whitespace().any(|c| c == "memory") {
            return None;
        }
        std::fs::write(pids_base.join("cgroup.subtree_control"), "+memory +pids").ok()?;
        return Some(pids_base.to_path_buf());
    }
    let (mount, own) = hierarchy("memory")?;
    let parent = mount.join(own.trim_start_matches('/'));
    sweep(&parent);
    let base = parent.join(format!("toolgate-{}-{n}", std::process::id()));
    if std::fs::create_dir(&base).is_err() && !base.is_dir() {
        return None;
    }
    if !base.join("memory.limit_in_bytes").exists() {
        let _ = std::fs::remove_dir(&base);
        return None;
    }
    Some(base)
}

/// Sets run `n`'s memory limit: in `pids_dir` itself on v2, else in a directory of its own
/// below `base` (v1). Swap is off for the group; on v2 an OOM kill ends the whole group.
fn limit_memory(base: &Path, pids_dir: &Path, n: u64, bytes: u64) -> std::io::Result<PathBuf> {
    if base == pids_dir.parent().unwrap_or(base) && pids_dir.join("memory.max").exists() {
        std::fs::write(pids_dir.join("memory.max"), bytes.to_string())?;
        // Absent without swap accounting: there is no swap to turn off then.
        let _ = std::fs::write(pids_dir.join("memory.swap.max"), "0");
        let _ = std::fs::write(pids_dir.join("memory.oom.group"), "1");
        return Ok(pids_dir.to_path_buf());
    }
    let dir = base.join(n.to_string());
    std::fs::create_dir(&dir)?;
    let set = || -> std::io::Result<()> {
        std::fs::write(dir.join("memory.limit_in_bytes"), bytes.to_string())?;
        // With swap accounting, memory and swap together may not pass the same limit.
        let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), bytes.to_string());
        let _ = std::fs::write(dir.join("memory.swappiness"), "0");
        Ok(())
    };
    if let Err(e) = set() {
        let _ = std::fs::remove_dir(&dir);
        return Err(e);
    }
    Ok(dir)
}

/// What the kernel counted for the memory cgroup at `dir`: OOM kills, and the peak usage
/// in bytes where it is recorded.
pub fn memory_report(dir: &Path) -> (u64, Option<u64>) {
    let count = |file: &str| {
        std::fs::read_to_string(dir.join(file)).ok().and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("oom_kill ")
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
        })
    };
    // v2 counts in `memory.events`; v1 (Linux 4.13+) in `memory.oom_control`.
    let kills = count("memory.events")
        .or_else(|| count("memory.oom_control"))
        .unwrap_or(0);
    let peak = ["memory.peak", "memory.max_usage_in_bytes"]
        .iter()
        .find_map(|f| std::fs::read_to_string(dir.join(f)).ok())
        .and_then(|t| t.trim().parse::<u64>().ok());
    (kills, peak)
}

/// The pids hierarchy's mount point and the sidecar's cgroup path in it.
fn pids_hierarchy() -> Option<(PathBuf, String)> {
    hierarchy("pids")
}

/// The mount point of the hierarchy with `controller` (v1), or of the unified one (v2), and
/// the sidecar's cgroup path in it.
fn hierarchy(controller: &str) -> Option<(PathBuf, String)> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(point), Some(kind), Some(opts)) = (f.get(1), f.get(2), f.get(3)) else {
            continue;
        };
        let v1 = *kind == "cgroup" && opts.split(',').any(|o| o == controller);
        let v2 = *kind == "cgroup2";
        if !(v1 || v2) {
            continue;
        }
        let own = cgroups.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
            let matches = if v1 {
                ctrl.split(',').any(|c| c == controller)
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
