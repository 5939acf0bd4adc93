//! `[exec]` and `[exec.limits]` → [`ExecSettings`]: the service root, shared read-only roots,
//! the deny list, the allowlist of executables and the sandbox's limits. Relative paths are
//! resolved against the config file's directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::exec::{DefaultLimits, ExecSettings};
use crate::tools::Programs;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExec {
    root: Option<PathBuf>,
    #[serde(default)]
    shared: BTreeMap<String, PathBuf>,
    deny: Option<Vec<String>>,
    programs: Option<Vec<String>>,
    grace_ms: Option<u64>,
    landlock: Option<bool>,
    network_namespace: Option<bool>,
    cgroup: Option<bool>,
    #[serde(default)]
    read_paths: Vec<PathBuf>,
    #[serde(default)]
    write_paths: Vec<PathBuf>,
    max_concurrent: Option<usize>,
    lock_dir: Option<PathBuf>,
    lock_timeout_ms: Option<u64>,
    #[serde(default)]
    limits: RawLimits,
    run_as: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    cpu_secs: Option<u64>,
    address_space_mb: Option<u64>,
    file_size_mb: Option<u64>,
    processes: Option<u64>,
    open_files: Option<u64>,
    memory_mb: Option<u64>,
    scratch_mb: Option<u64>,
}

/// Validates `[exec]`. The lock directory defaults to `<data_dir>/locks`, so every sidecar of
/// one data directory, before and after a restart, sees the same locks.
pub(super) fn settings(
    raw: RawExec,
    base: &Path,
    data_dir: &Path,
) -> Result<ExecSettings, Vec<(String, String)>> {
    let d = ExecSettings::default();
    let mut problems: Vec<(String, String)> = Vec::new();
    let dl = DefaultLimits::default();
    for name in raw.shared.keys() {
        let ok = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            && !name.starts_with('.');
        if !ok {
            problems.push((
                format!("`exec.shared`: `{name}` is not a usable root name"),
                "names are one path segment of letters, digits, `_`, `-` and `.`".to_owned(),
            ));
        }
    }
    if let Some(programs) = &raw.programs
        && let Some(bad) = programs
            .iter()
            .find(|p| p.is_empty() || (p.contains('/') && !p.starts_with('/')))
    {
        problems.push((
            format!("`exec.programs`: `{bad}` must be an absolute path or a bare name"),
            "e.g. `programs = [\"git\", \"/usr/bin/printf\"]`".to_owned(),
        ));
    }
    let l = raw.limits;
    let limits = DefaultLimits {
        cpu_secs: l.cpu_secs,
        address_space_mb: l.address_space_mb.unwrap_or(dl.address_space_mb),
        file_size_mb: l.file_size_mb.unwrap_or(dl.file_size_mb),
        processes: l.processes.unwrap_or(dl.processes),
        open_files: l.open_files.unwrap_or(dl.open_files),
        memory_mb: l.memory_mb.unwrap_or(dl.memory_mb),
        scratch_mb: l.scratch_mb.unwrap_or(dl.scratch_mb),
    };
    let zero = [
        ("cpu_secs", limits.cpu_secs.unwrap_or(1)),
        ("address_space_mb", limits.address_space_mb),
        ("file_size_mb", limits.file_size_mb),
        ("processes", limits.processes),
        ("open_files", limits.open_files),
        ("memory_mb", limits.memory_mb),
        ("scratch_mb", limits.scratch_mb),
    ]
    .into_iter()
    .find(|(_, v)| *v == 0);
    if let Some((name, _)) = zero {
        problems.push((
            format!("`exec.limits.{name}` must be at least 1"),
            "omit it for the default".to_owned(),
        ));
    }
    if raw.max_concurrent == Some(0) {
        problems.push((
            "`exec.max_concurrent` must be at least 1".to_owned(),
            "omit it for the default (4)".to_owned(),
        ));
    }
    let lock_timeout_ms = raw.lock_timeout_ms.unwrap_or(d.lock_timeout_ms);
    if lock_timeout_ms == 0 {
        problems.push((
            "`exec.lock_timeout_ms` must be at least 1".to_owned(),
            "omit it for the default (5000)".to_owned(),
        ));
    }
    let run_as = match raw.run_as.as_deref() {
        None => None,
        Some(text) => {
            let parsed = run_as(text);
            if parsed.is_none() {
                problems.push((
                    format!("`exec.run_as` = `{text}` is not `uid:gid` of an unprivileged user"),
                    "e.g. `run_as = \"65534:65534\"` (nobody); 0 is refused: programs never run as root when the sidecar does".to_owned(),
                ));
            }
            parsed
        }
    };
    let deny = match raw.deny {
        None => d.deny,
        Some(entries) => match crate::globs::SegmentGlobs::new(entries) {
            Ok(deny) => deny,
            Err(e) => {
                problems.push((
                    format!("`exec.deny`: {e}"),
                    "entries are globs over one file or directory name, matched case-insensitively: e.g. `.env*`, `id_*.pem`, `secrets`".to_owned(),
                ));
                d.deny
            }
        },
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(ExecSettings {
        root: raw.root.map(|p| base.join(p)),
        shared: raw
            .shared
            .into_iter()
            .map(|(k, v)| (k, base.join(v)))
            .collect(),
        deny,
        programs: raw.programs.map_or(d.programs, Programs::resolve),
        grace_ms: raw.grace_ms.unwrap_or(d.grace_ms),
        limits,
        landlock: raw.landlock.unwrap_or(d.landlock),
        network_namespace: raw.network_namespace.unwrap_or(d.network_namespace),
        cgroup: raw.cgroup.unwrap_or(d.cgroup),
        read_paths: raw.read_paths.into_iter().map(|p| base.join(p)).collect(),
        write_paths: raw.write_paths.into_iter().map(|p| base.join(p)).collect(),
        max_concurrent: raw.max_concurrent.unwrap_or(d.max_concurrent),
        lock_dir: Some(
            raw.lock_dir
                .map_or_else(|| data_dir.join("locks"), |p| base.join(p)),
        ),
        lock_timeout_ms,
        protected: vec![data_dir.to_path_buf()],
        run_as,
    })
}

/// `uid:gid`, both numbers other than 0.
fn run_as(text: &str) -> Option<crate::exec::RunAs> {
    let (u, g) = text.split_once(':')?;
    let uid: u32 = u.trim().parse().ok()?;
    let gid: u32 = g.trim().parse().ok()?;
    (uid != 0 && gid != 0).then_some(crate::exec::RunAs { uid, gid })
}
