//! The namespaces of one run, and the protected set hidden inside its mount namespace.
//!
//! Landlock keeps a program from reading and writing the sidecar's own files, but has no
//! right for `chmod`, `utime`, `chown` or extended attributes: a program running as the
//! owner of those files (a non-root sidecar runs programs as itself) could change them by
//! path. So the launcher gives the run a mount namespace of its own in which every path of
//! the protected set is covered: a directory by an empty read-only tmpfs (mode 000), any
//! other file by a read-only bind of `/dev/null`. Whatever a program does to such a path
//! (change its mode, times, attributes or owner, open, rename or remove it) reaches the
//! cover, which refuses, never the file beneath.
//!
//! - **Non-root sidecar:** a user namespace first (the run's ids map to the sidecar's own,
//!   one to one), then the mount namespace (and the network namespace) inside it. The
//!   program starts as a non-zero id there, so it holds no capability and cannot unmount a
//!   cover; mounts it could make in a namespace of its own inherit the covers locked.
//!   Where user namespaces are not allowed, runs are refused: nothing else would keep a
//!   program off the sidecar's files' metadata.
//! - **Root sidecar:** the mount namespace directly. Programs run as `[exec] run_as`,
//!   another user, whom the kernel already refuses metadata changes on files it does not
//!   own; the covers are a second line, and where no mount namespace can be made (a
//!   container without `CAP_SYS_ADMIN`) runs go on without them, reported as `owner`.
//!
//! Every mount is made private first, so nothing made here propagates to the host.
//!
//! Where the machine allows it (measured by the start probe), the run also gets a PID
//! namespace of its own: the launcher's first child is its init, mounts a fresh `/proc`
//! there, and starts the program, which then sees the run's processes only (not the
//! sidecar's, nor any other process's command line), whatever its user. Where it does not
//! (a container whose `/proc` has masked paths refuses a new `/proc` to a user namespace), a
//! root sidecar's runs get a `/proc` mounted with `hidepid=2` instead (programs are another
//! user), and a non-root sidecar's runs share the host's.
//!
//! Owns: creating the namespaces and the covers. Does not own: what is protected (the
//! runner's protected set) or the program's uid (the launcher).

use std::path::{Path, PathBuf};

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};

/// A run's scratch directory (its `HOME` and `TMPDIR`), given a tmpfs of its own.
#[derive(Debug, Clone, Copy)]
pub struct Scratch<'a> {
    /// The directory.
    pub dir: &'a Path,
    /// The tmpfs's size: the run's disk quota there (its pages count against the run's
    /// memory limit too).
    pub bytes: u64,
    /// The program's user and group, who own it.
    pub owner: (u32, u32),
}

/// What the launcher set up: reported on the run's outcome and on `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Isolation {
    /// `namespace` (the run's own network), `host`, or `none` (asked for, not possible).
    pub network: &'static str,
    /// `namespace` (the protected set covered in the run's own mount namespace), `owner`
    /// (root sidecar without a mount namespace: programs are another user), or `off`
    /// (nothing to cover).
    pub protected: &'static str,
    /// A PID namespace was made: the launcher's next child is its init, which mounts the
    /// run's `/proc` ([`own_proc`]) before anything else.
    pub pid_namespace: bool,
    /// What the run's programs see of other processes: `namespace` (once [`own_proc`] is
    /// mounted), `hidepid` (their own user's only) or `shared` (the host's `/proc`).
    pub processes: &'static str,
}

/// Why the namespaces could not be made (the run is refused).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct IsolationError(String);

/// Makes the run's namespaces and covers `masks` (absolute paths) in its mount namespace,
/// where `scratch` gets its tmpfs. `network`: give the run a network namespace of its own.
/// `own_pids`: and a PID namespace, when a mount namespace is made (its `/proc` needs one).
pub fn isolate(
    masks: &[PathBuf],
    network: bool,
    scratch: Option<Scratch<'_>>,
    own_pids: bool,
) -> Result<Isolation, IsolationError> {
    let root = rustix::process::geteuid().is_root();
    let mut flags = CloneFlags::empty();
    if network {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    let cover = !masks.is_empty();
    if cover || scratch.is_some() {
        flags |= CloneFlags::CLONE_NEWNS;
        if own_pids {
            flags |= CloneFlags::CLONE_NEWPID;
        }
    }
    let pid_namespace = flags.contains(CloneFlags::CLONE_NEWPID);
    if flags.is_empty() {
        return Ok(Isolation {
            network: "host",
            protected: "off",
            pid_namespace: false,
            processes: "shared",
        });
    }
    if root {
        if unshare(flags).is_ok() {
            mounts(masks, scratch)?;
            let processes = if pid_namespace {
                "namespace"
            } else if flags.contains(CloneFlags::CLONE_NEWNS) {
                own_processes_only()?;
                "hidepid"
            } else {
                "shared"
            };
            return Ok(Isolation {
                network: if network { "namespace" } else { "host" },
                protected: if cover { "namespace" } else { "off" },
                pid_namespace,
                processes,
            });
        }
        // No mount namespace here: programs are another user, which the kernel already
        // keeps off root's files. The network is still required when asked for.
        let net = network && unshare(CloneFlags::CLONE_NEWNET).is_ok();
        return Ok(Isolation {
            network: match (network, net) {
                (false, _) => "host",
                (true, true) => "namespace",
                (true, false) => "none",
            },
            protected: if cover { "owner" } else { "off" },
            pid_namespace: false,
            processes: "shared",
        });
    }
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    if let Err(e) = unshare(CloneFlags::CLONE_NEWUSER | flags) {
        if cover {
            return Err(IsolationError(format!(
                "a non-root sidecar runs programs as its own user, and keeps them off its own files' modes, times and attributes in a user and mount namespace, which this system refuses ({e}); allow unprivileged user namespaces (in a container: a seccomp profile that permits `unshare`), or run toolgate as root so that programs run as `[exec] run_as`"
            )));
        }
        return Ok(Isolation {
            network: "none",
            protected: "off",
            pid_namespace: false,
            processes: "shared",
        });
    }
    map_ids(uid, gid)?;
    mounts(masks, scratch)?;
    Ok(Isolation {
        network: if network { "namespace" } else { "host" },
        protected: if cover { "namespace" } else { "off" },
        pid_namespace,
        processes: if pid_namespace { "namespace" } else { "shared" },
    })
}

/// Mounts the run's own `/proc`: called by the init of the run's PID namespace (the
/// launcher's first child there), before Landlock, which forbids mounts. It shows the
/// namespace's processes only.
pub fn own_proc() -> Result<(), IsolationError> {
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| {
        IsolationError(format!(
            "cannot mount the run's own /proc in its PID namespace ({e})"
        ))
    })
}

/// Maps the new user namespace's `uid` and `gid` to the same ids outside, one to one (all
/// an unprivileged process may map), so files keep their owners and the program is no one
/// with privileges there.
fn map_ids(uid: u32, gid: u32) -> Result<(), IsolationError> {
    let write = |file: &str, text: String| {
        std::fs::write(format!("/proc/self/{file}"), text)
            .map_err(|e| IsolationError(format!("cannot write /proc/self/{file}: {e}")))
    };
    write("uid_map", format!("{uid} {uid} 1\n"))?;
    // An unprivileged process may map its group only after giving up setgroups(2).
    write("setgroups", "deny\n".to_owned())?;
    write("gid_map", format!("{gid} {gid} 1\n"))?;
    Ok(())
}

/// The run's mounts, all private: the covers, then the scratch tmpfs.
fn mounts(masks: &[PathBuf], scratch: Option<Scratch<'_>>) -> Result<(), IsolationError> {
    if masks.is_empty() && scratch.is_none() {
        return Ok(());
    }
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| {
        IsolationError(format!(
            "cannot make the run's mounts private ({e}); refused"
        ))
    })?;
    cover_all(masks)?;
    if let Some(s) = scratch {
        let (uid, gid) = s.owner;
        mount(
            Some("toolgate-scratch"),
            s.dir,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(format!("size={},mode=0700,uid={uid},gid={gid}", s.bytes.max(4096)).as_str()),
        )
        .map_err(|e| {
            IsolationError(format!(
                "cannot give the scratch directory `{}` its tmpfs ({e}); refused",
                s.dir.display()
            ))
        })?;
    }
    Ok(())
}

/// Where no PID namespace is made, a root sidecar's programs (another user) get a `/proc`
/// mounted with `hidepid=2`: it shows them their own user's processes only (not the
/// sidecar's, nor any other user's command lines).
fn own_processes_only() -> Result<(), IsolationError> {
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("hidepid=2"),
    )
    .map_err(|e| {
        IsolationError(format!(
            "cannot give the run a /proc of its own ({e}); refused"
        ))
    })
}

/// Covers every path of `masks` that exists, deepest first (so a cover over a directory
/// does not hide a path still to be covered beneath it). Symbolic links are left alone: a
/// link has no mode of its own, and its target is in the set too.
fn cover_all(masks: &[PathBuf]) -> Result<(), IsolationError> {
    let fail = |what: &str, path: &Path, e: nix::Error| {
        // A user namespace that may not mount (Ubuntu's AppArmor restriction on unprivileged
        // user namespaces, a seccomp profile that refuses `mount`): say what to change.
        let hint = if e == nix::Error::EPERM {
            "; the system lets this user make namespaces but not mount in them: allow mounts in unprivileged user namespaces (on Ubuntu, an AppArmor profile for toolgate with `userns,`; in a container, a seccomp profile that permits `mount`), or run toolgate as root so that programs run as `[exec] run_as`"
        } else {
            ""
        };
        IsolationError(format!(
            "cannot hide `{}` from the run ({what}: {e}){hint}; refused",
            path.display()
        ))
    };
    let mut paths: Vec<&PathBuf> = masks.iter().collect();
    paths.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    paths.dedup();
    let sealed = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    for path in paths {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            continue;
        }
        if meta.is_dir() {
            mount(
                Some("toolgate-protected"),
                path.as_path(),
                Some("tmpfs"),
                sealed | MsFlags::MS_RDONLY,
                Some("size=4k,nr_inodes=1,mode=000"),
            )
            .map_err(|e| fail("cover it with an empty tmpfs", path, e))?;
        } else {
            mount(
                Some("/dev/null"),
                path.as_path(),
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .map_err(|e| fail("cover it with /dev/null", path, e))?;
            // A bind is made read-only by remounting it; flags the mount below it locks (its
            // access-time mode, say) are kept as they are.
            let kept = kept_flags(path);
            mount(
                None::<&str>,
                path.as_path(),
                None::<&str>,
                MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | sealed | kept,
                None::<&str>,
            )
            .map_err(|e| fail("make its cover read-only", path, e))?;
        }
    }
    Ok(())
}

/// The access-time and sync flags of the mount at `path`, to keep across a remount.
fn kept_flags(path: &Path) -> MsFlags {
    use rustix::fs::StatVfsMountFlags as F;
    let Ok(vfs) = rustix::fs::statvfs(path) else {
        return MsFlags::empty();
    };
    let mut out = MsFlags::empty();
    for (have, keep) in [
        (F::NOATIME, MsFlags::MS_NOATIME),
        (F::NODIRATIME, MsFlags::MS_NODIRATIME),
        (F::RELATIME, MsFlags::MS_RELATIME),
        (F::SYNCHRONOUS, MsFlags::MS_SYNCHRONOUS),
    ] {
        if vfs.f_flag.contains(have) {
            out |= keep;
        }
    }
    out
}
