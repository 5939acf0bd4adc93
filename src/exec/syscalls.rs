//! The seccomp filter every tool run gets: the metadata changes Landlock does not cover.
//!
//! Landlock decides which files a program may read and write, but has no right for a file's
//! mode, owner or extended attributes. A program running as the owner of a file may
//! `chmod` it even where it may not open it. The launcher hides the protected set from the
//! program (see `masks`), and this filter closes the rest, for every run, as root or not:
//! - **setuid and setgid files:** `chmod` of any kind, file creation (`open`, `openat`,
//!   `creat`, `mknod`) with either bit is refused (EPERM), so a run cannot leave behind a
//!   program that gives another user its uid. (`no_new_privs`, set by the launcher, already
//!   keeps setuid programs from elevating inside the run.)
//! - **group or other write bits:** `chmod` that would make anything writable by group or
//!   others is refused (EPERM), so a run cannot open a directory above the sidecar's files
//!   (the service root, say) to another local user, who could then swap them.
//! - **owners:** every `chown` is refused (EPERM): an unprivileged run can only give a file to
//!   one of its own groups, which would share it.
//! - **extended attributes** (ACLs among them): every `setxattr` and `removexattr` is
//!   refused (ENOTSUP, which programs that copy attributes treat as "not supported here").
//! - **`openat2`** (its mode sits in a structure the filter cannot read) and **io_uring**
//!   (whose operations bypass seccomp) answer ENOSYS, so callers fall back to `openat`.
//! - **x32 system calls** (x86_64 only: the same calls under other numbers) answer ENOSYS.
//!
//! Owns: the filter and applying it. Does not own: when it is applied (the launcher, after
//! Landlock, before the program starts).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// `setxattrat(2)` and `removexattrat(2)` (Linux 6.13; the numbers are the same on every
/// architecture, and newer than the `libc` crate's tables).
const SYS_SETXATTRAT: i64 = 463;
const SYS_REMOVEXATTRAT: i64 = 466;

/// Mode bits a run may never set with `chmod`.
const CHMOD_REFUSED: [u64; 4] = [
    libc::S_ISUID as u64,
    libc::S_ISGID as u64,
    libc::S_IWGRP as u64,
    libc::S_IWOTH as u64,
];

/// Mode bits a run may never create a file with.
const CREATE_REFUSED: [u64; 2] = [libc::S_ISUID as u64, libc::S_ISGID as u64];

/// Open flags that create a file (`O_TMPFILE` includes `O_DIRECTORY`; its own bit is enough).
const CREATING: [u64; 2] = [
    libc::O_CREAT as u64,
    (libc::O_TMPFILE & !libc::O_DIRECTORY) as u64,
];

/// Why the filter could not be built or applied (the run is then refused).
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the system call filter: {0}")]
pub struct FilterError(String);

/// Applies the filters to the calling thread (and so to everything it starts). Sets
/// `no_new_privs` on the way.
pub fn apply() -> Result<(), FilterError> {
    for program in programs()? {
        seccompiler::apply_filter(&program).map_err(|e| FilterError(e.to_string()))?;
    }
    Ok(())
}

/// The BPF programs, in the order they are applied.
fn programs() -> Result<Vec<BpfProgram>, FilterError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| FilterError(format!("no filter for this architecture: {e}")))?;
    let err = |e: seccompiler::BackendError| FilterError(e.to_string());
    let errno = |code: i32| SeccompAction::Errno(u32::try_from(code).unwrap_or(1));
    let mut out = Vec::new();
    for (rules, code) in [
        (refused_modes().map_err(err)?, libc::EPERM),
        (always(&owners()), libc::EPERM),
        (always(&attributes()), libc::ENOTSUP),
        (always(&unfilterable()), libc::ENOSYS),
    ] {
        let filter =
            SeccompFilter::new(rules, SeccompAction::Allow, errno(code), arch).map_err(err)?;
        out.push(BpfProgram::try_from(filter).map_err(err)?);
    }
    if arch == TargetArch::x86_64 {
        out.push(no_x32());
    }
    Ok(out)
}

/// Each call refused whatever its arguments.
fn always(calls: &[i64]) -> BTreeMap<i64, Vec<SeccompRule>> {
    calls.iter().map(|&c| (c, Vec::new())).collect()
}

/// A rule that matches when argument `arg` has `bit` set (and every `also` holds).
fn bit_set(
    arg: u8,
    bit: u64,
    also: Option<(u8, u64)>,
) -> Result<SeccompRule, seccompiler::BackendError> {
    let mut conditions = vec![SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(bit),
        bit,
    )?];
    if let Some((arg, bit)) = also {
        conditions.push(SeccompCondition::new(
            arg,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(bit),
            bit,
        )?);
    }
    SeccompRule::new(conditions)
}

/// `chmod` with a refused bit, and file creation with setuid or setgid.
fn refused_modes() -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    // (call, index of its mode argument)
    let mut chmods = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (libc::SYS_fchmodat2, 2),
    ];
    #[cfg(target_arch = "x86_64")]
    chmods.push((libc::SYS_chmod, 1));
    for (call, arg) in chmods {
        for bit in CHMOD_REFUSED {
            rules
                .entry(call)
                .or_default()
                .push(bit_set(arg, bit, None)?);
        }
    }
    // Calls that create with a mode whatever their flags: (call, mode argument).
    let mut makes = vec![(libc::SYS_mknodat, 2)];
    #[cfg(target_arch = "x86_64")]
    makes.extend([(libc::SYS_mknod, 1), (libc::SYS_creat, 1)]);
    for (call, arg) in makes {
        for bit in CREATE_REFUSED {
            rules
                .entry(call)
                .or_default()
                .push(bit_set(arg, bit, None)?);
        }
    }
    // Opens create only with `O_CREAT` or `O_TMPFILE`: (call, flags argument, mode argument).
    let mut opens = vec![(libc::SYS_openat, 2, 3)];
    #[cfg(target_arch = "x86_64")]
    opens.push((libc::SYS_open, 1, 2));
    for (call, flags, mode) in opens {
        for creating in CREATING {
            for bit in CREATE_REFUSED {
                rules
                    .entry(call)
                    .or_default()
                    .push(bit_set(mode, bit, Some((flags, creating)))?);
            }
        }
    }
    Ok(rules)
}

fn owners() -> Vec<i64> {
    let mut calls = vec![libc::SYS_fchown, libc::SYS_fchownat];
    #[cfg(target_arch = "x86_64")]
    calls.extend([libc::SYS_chown, libc::SYS_lchown]);
    calls
}

fn attributes() -> Vec<i64> {
    vec![
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_fsetxattr,
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        libc::SYS_fremovexattr,
        SYS_SETXATTRAT,
        SYS_REMOVEXATTRAT,
    ]
}

fn unfilterable() -> Vec<i64> {
    vec![
        libc::SYS_openat2,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ]
}

/// x86_64's x32 calls carry bit 30 in their number and would match none of the rules above:
/// they answer ENOSYS. (The architecture itself is checked by every other filter.)
fn no_x32() -> BpfProgram {
    use seccompiler::sock_filter;
    const LD_W_ABS: u16 = 0x20;
    const JGE_K: u16 = 0x35;
    const RET_K: u16 = 0x06;
    const X32_BIT: u32 = 0x4000_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    const RET_ALLOW: u32 = 0x7fff_0000;
    let enosys = u32::try_from(libc::ENOSYS).unwrap_or(38);
    vec![
        // The call's number is the first field of `seccomp_data`.
        sock_filter {
            code: LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        sock_filter {
            code: JGE_K,
            jt: 0,
            jf: 1,
            k: X32_BIT,
        },
        sock_filter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: RET_ERRNO | enosys,
        },
        sock_filter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: RET_ALLOW,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_filter_compiles_for_this_machine() {
        let programs = programs().unwrap();
        assert!(programs.len() >= 4);
        assert!(programs.iter().all(|p| !p.is_empty()));
    }
}
