//! The launcher: `toolgate exec-child`, the small supervisor every tool process runs under.
//!
//! The sidecar starts the launcher (its own binary) with a cleared environment and writes one
//! [`LaunchSpec`] line to its stdin. The launcher then, in this order:
//! 1. becomes a child subreaper, so a tool's orphaned descendants are re-parented to it and
//!    cannot outlive the call, and joins the call's pids cgroup when there is one;
//! 2. restricts itself with Landlock (file system access to the allowed roots only; no
//!    signals to or abstract sockets of processes outside the sandbox);
//! 3. sets the resource limits (CPU seconds, address space, file size, processes, open files);
//! 4. starts the program in its own process group, with stdin on `/dev/null`, the given
//!    environment only, no shell, and inherits all of the above to it;
//! 5. waits for the program, the deadline, or the sidecar closing the pipe (a cancelled call,
//!    or a sidecar that died): then TERM to every process of the call, KILL after the grace
//!    period, and every one of them reaped;
//! 6. writes an [`Outcome`] line, prefixed by the spec's nonce, as the last line of stderr.
//!
//! Doing this in a separate process keeps `unsafe` `pre_exec` hooks out of the sidecar: the
//! limits and the sandbox are set on the launcher itself and inherited through `exec`.

use std::collections::BTreeSet;
use std::io::{BufRead, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, poll};
use rustix::process::{Pid, Signal, WaitOptions};
use serde::{Deserialize, Serialize};

/// The hidden subcommand that runs [`main`].
pub const SUBCOMMAND: &str = "exec-child";

/// Largest spec line the launcher reads (a sandbox plan that splits large directories lists
/// many paths).
const MAX_SPEC_BYTES: u64 = 16 * 1024 * 1024;

/// Resource limits set on the tool's processes (each one: these are per-process limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rlimits {
    /// CPU seconds (SIGXCPU, then SIGKILL).
    pub cpu_secs: u64,
    /// Address space, bytes.
    pub address_space_bytes: u64,
    /// Largest file the tool may write, bytes.
    pub file_size_bytes: u64,
    /// Processes and threads of the user (RLIMIT_NPROC; not enforced for root, see the
    /// pids cgroup).
    pub processes: u64,
    /// Open file descriptors.
    pub open_files: u64,
}

/// File system access granted under Landlock; everything else is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sandbox {
    /// Read and execute.
    pub read: Vec<PathBuf>,
    /// Read, write, create, remove.
    pub write: Vec<PathBuf>,
    /// List only (the names in a directory, not their contents): directories that hold
    /// something the program may not reach, so it can still walk past them.
    #[serde(default)]
    pub list: Vec<PathBuf>,
    /// Refuse TCP connect and bind (Landlock ABI 4+), beside the network namespace.
    #[serde(default)]
    pub no_tcp: bool,
}

/// The unprivileged user and group a run's program runs as (when the sidecar is root).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunAs {
    /// User id (never 0).
    pub uid: u32,
    /// Group id (never 0).
    pub gid: u32,
}

/// What the sidecar asks the launcher to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchSpec {
    /// Marks the outcome line, so the tool's own stderr cannot forge it.
    pub nonce: String,
    /// Absolute path of the program.
    pub program: PathBuf,
    /// Arguments after the program name.
    pub argv: Vec<String>,
    /// Working directory.
    pub cwd: PathBuf,
    /// The whole environment of the program.
    pub env: Vec<(String, String)>,
    /// Wall-clock limit.
    pub timeout_ms: u64,
    /// Time between TERM and KILL.
    pub grace_ms: u64,
    /// Resource limits.
    pub rlimits: Rlimits,
    /// Landlock rules (`None`: not sandboxed, e.g. switched off in the config).
    pub sandbox: Option<Sandbox>,
    /// A pids cgroup directory made for this call, which the launcher joins.
    pub cgroup: Option<PathBuf>,
    /// A memory cgroup directory made for this call (its limit covers every process of the
    /// run together), which the launcher joins; the same as `cgroup` on cgroup v2.
    #[serde(default)]
    pub memory_cgroup: Option<PathBuf>,
    /// A scratch directory (the program's `HOME` and `TMPDIR`) given a tmpfs of this many
    /// bytes in the run's mount namespace, owned by the program's user: the run's disk quota.
    #[serde(default)]
    pub scratch: Option<(PathBuf, u64)>,
    /// Run the program as this user and group, without supplementary groups.
    #[serde(default)]
    pub run_as: Option<RunAs>,
    /// Give the program a network namespace of its own (no interfaces but a down loopback).
    #[serde(default)]
    pub isolate_network: bool,
    /// Paths covered in the run's own mount namespace (the protected set, canonical): the
    /// program reaches the cover, never the file, whatever it does to the path.
    #[serde(default)]
    pub masks: Vec<PathBuf>,
    /// Give the run a PID namespace of its own (with its own `/proc`) when it gets a mount
    /// namespace; set where the start probe found one can be made.
    #[serde(default)]
    pub own_pids: bool,
    /// Set everything up, start nothing, report (what `/readyz` shows is measured this way).
    #[serde(default)]
    pub probe: bool,
    /// A long-lived program spoken to over its stdin and stdout (an MCP server): the bytes
    /// after the spec line are passed to the program's stdin, its stdout is the launcher's,
    /// there is no deadline, and the end of the launcher's stdin means "stop" (the program
    /// sees end of file, then TERM and KILL after the grace period).
    #[serde(default)]
    pub session: bool,
}

/// How the run ended, as the launcher reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Outcome {
    /// The program's exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Stopped at the deadline.
    pub timed_out: bool,
    /// Stopped because the sidecar closed the pipe (call cancelled).
    pub cancelled: bool,
    /// KILL was needed (TERM was ignored through the grace period).
    pub killed: bool,
    /// Processes still running after the program ended, killed.
    pub stragglers: u32,
    /// CPU time of every process of the call (user + system), ms.
    pub cpu_ms: u64,
    /// Largest resident set of any of them, bytes.
    pub max_rss_bytes: u64,
    /// The kernel stopped a process for passing the run's memory limit (all its processes
    /// together); the launcher then stopped the rest.
    pub memory_exceeded: bool,
    /// The most memory the run's processes used together, bytes (with a memory cgroup).
    pub memory_peak_bytes: Option<u64>,
    /// `full`, `partial` or `none`: how much of the Landlock sandbox the kernel enforced.
    pub landlock: String,
    /// `namespace` (a network namespace of its own) or `host` (the manifest declares the
    /// network, or `[exec] network_namespace = false`).
    pub network: String,
    /// How the protected set's metadata was kept from the program: `namespace` (covered in
    /// the run's mount namespace), `owner` (a root sidecar without a mount namespace:
    /// programs are another user) or `off` (nothing to cover).
    pub protected: String,
    /// What the program saw of other processes: `namespace` (a PID namespace and `/proc` of
    /// the run's own), `hidepid` (its own user's processes only) or `shared` (the host's).
    pub processes: String,
    /// The program could not be started, or the launcher failed: why.
    pub error: Option<String>,
}

/// Entry point of `toolgate exec-child`.
pub fn main() -> ExitCode {
    let mut out = Outcome::default();
    let mut memory = None;
    let nonce = match read_spec() {
        Ok(spec) => {
            let nonce = spec.nonce.clone();
            if let Err(e) = supervise(&spec, &mut out) {
                out.error = Some(e);
            }
            memory = spec.memory_cgroup;
            nonce
        }
        Err(e) => {
            out.error = Some(e);
            String::new()
        }
    };
    usage(&mut out);
    if let Some(dir) = memory {
        let (kills, peak) = super::cgroup::memory_report(&dir);
        out.memory_exceeded |= kills > 0;
        out.memory_peak_bytes = peak;
    }
    let line = serde_json::to_string(&out).unwrap_or_else(|_| "{}".to_owned());
    let mut err = std::io::stderr().lock();
    // The sidecar reads this line; if stderr is gone there is no one to tell.
    let _ = writeln!(err, "\n{nonce} {line}");
    let _ = err.flush();
    ExitCode::SUCCESS
}

fn read_spec() -> Result<LaunchSpec, String> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .take(MAX_SPEC_BYTES)
        .read_line(&mut line)
        .map_err(|e| format!("cannot read the launch spec: {e}"))?;
    serde_json::from_str(&line).map_err(|e| format!("invalid launch spec: {e}"))
}

fn supervise(spec: &LaunchSpec, out: &mut Outcome) -> Result<(), String> {
    let mut me = rustix::process::getpid();
    rustix::process::set_child_subreaper(Some(me))
        .map_err(|e| format!("cannot become a subreaper: {e}"))?;
    for cg in spec.cgroup.iter().chain(
        spec.memory_cgroup
            .iter()
            .filter(|m| Some(*m) != spec.cgroup.as_ref()),
    ) {
        std::fs::write(cg.join("cgroup.procs"), me.as_raw_nonzero().to_string())
            .map_err(|e| format!("cannot join the cgroup `{}`: {e}", cg.display()))?;
    }
    let scratch = spec
        .scratch
        .as_ref()
        .map(|(dir, bytes)| super::masks::Scratch {
            dir: dir.as_path(),
            bytes: *bytes,
            owner: spec.run_as.map_or_else(
                || {
                    (
                        rustix::process::geteuid().as_raw(),
                        rustix::process::getegid().as_raw(),
                    )
                },
                |who| (who.uid, who.gid),
            ),
        });
    let isolation =
        super::masks::isolate(&spec.masks, spec.isolate_network, scratch, spec.own_pids)
            .map_err(|e| e.to_string())?;
    out.network = isolation.network.to_owned();
    out.protected = isolation.protected.to_owned();
    out.processes = isolation.processes.to_owned();
    if isolation.pid_namespace {
        // From here on this is the init of the run's PID namespace (the launcher that
        // started it only waits), and everything below runs in it.
        me = first_process(spec.probe, out)?;
    }
    if out.network == "none" {
        // No namespace: UDP (and TCP where Landlock is older than ABI 4) would be open.
        return Err(
            "cannot give the program a network namespace of its own (needs root or user namespaces); refused (`[exec] network_namespace = false` runs programs on the host's network, TCP still refused by Landlock)"
                .to_owned(),
        );
    }
    out.landlock = match &spec.sandbox {
        Some(sb) => restrict(sb)?,
        None => "off".to_owned(),
    };

    set_limits(&spec.rlimits)?;
    // Last: the filter refuses `chown`, which a root launcher's own setup never needs after
    // this point (the program's user is changed by `setuid`, which stays allowed).
    super::syscalls::apply().map_err(|e| e.to_string())?;
    if spec.probe {
        return Ok(());
    }
    let started = Instant::now();
    let mut command = Command::new(&spec.program);
    if let Some(who) = spec.run_as {
        // std drops the supplementary groups when root changes user.
        command.uid(who.uid).gid(who.gid);
    }
    if spec.sandbox.is_some() {
        // The program gets a Landlock layer of its own that scopes signals and abstract
        // sockets: the launcher then lies outside the program's domain, so the program can
        // neither signal, nor ptrace, nor read `/proc` of its launcher, even as the same
        // user (which would end the deadline and the cleanup).
        #[allow(
            unsafe_code,
            reason = "pre_exec is the only hook between fork and exec for the Landlock layer"
        )]
        // SAFETY: the launcher is single-threaded (`exec-child` is dispatched before anything
        // starts a thread), so the forked child may allocate; the hook only builds a ruleset
        // and makes Landlock's syscalls, and reports failure as an error (no run then).
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                scope_layer().map_err(std::io::Error::other)
            });
        }
    }
    let child = command
        .args(&spec.argv)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.cwd)
        .stdin(if spec.session {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .process_group(0)
        .spawn()
        .map_err(|e| {
            // std reports a failed `chdir` (after the user change) like a failed `exec`.
            let blocked = spec
                .run_as
                .filter(|_| e.kind() == std::io::ErrorKind::PermissionDenied)
                .and_then(|who| unsearchable(&spec.cwd, who).map(|dir| (who, dir)));
            match blocked {
                Some((who, dir)) => format!(
                    "cannot enter the working directory `{}` as {}:{}: `{}` is not searchable by that user; make it searchable (e.g. `chmod o+x`), move `[exec] root`, or set `[exec] run_as`",
                    spec.cwd.display(),
                    who.uid,
                    who.gid,
                    dir.display()
                ),
                None => format!("cannot start `{}`: {e}", spec.program.display()),
            }
        })?;
    let mut child = child;
    let pid = Pid::from_child(&child);
    if spec.session {
        return session(spec, me, pid, child.stdin.take(), out);
    }
    drop(child);
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
        .map_err(|e| format!("cannot watch the program: {e}"))?;
    let deadline = started + Duration::from_millis(spec.timeout_ms);
    let stdin = std::io::stdin();
    let mut reaper = Reaper { pid, status: None };
    loop {
        if ended(spec, me, &mut reaper, out) {
            return Ok(());
        }
        if over_memory(spec, out) {
            break;
        }
        let now = Instant::now();
        if now >= deadline {
            out.timed_out = true;
            break;
        }
        let wait = deadline
            .saturating_duration_since(now)
            .min(Duration::from_secs(1));
        let ts = rustix::event::Timespec {
            tv_sec: i64::try_from(wait.as_secs()).unwrap_or(1),
            tv_nsec: i64::from(wait.subsec_nanos()),
        };
        let mut fds = [
            PollFd::new(&pidfd, PollFlags::IN),
            PollFd::new(&stdin, PollFlags::IN),
        ];
        match poll(&mut fds, Some(&ts)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("poll failed: {e}")),
        }
        let [_, pipe] = &fds;
        // Any activity on the spec pipe after the spec (data or EOF) means: stop.
        if !pipe.revents().is_empty() {
            out.cancelled = true;
            break;
        }
    }
    // Deadline or cancellation.
    stop(spec, me, &mut reaper, out);
    Ok(())
}

/// Forks the init of the run's PID namespace (made by `unshare`, entered by the next child).
/// The parent waits for it and ends with it: it has written the outcome. The child, pid 1
/// there, dies with the parent, mounts the namespace's `/proc` (still holding the
/// capabilities of its user namespace, before Landlock forbids mounts) and returns its pid.
/// A probe that cannot mount it reports `shared`, so runs go on without a PID namespace.
fn first_process(probe: bool, out: &mut Outcome) -> Result<Pid, String> {
    use nix::unistd::{ForkResult, fork};
    #[allow(
        unsafe_code,
        reason = "the PID namespace's first process needs a bare fork, which std does not offer"
    )]
    // SAFETY: the launcher is single-threaded here (`exec-child` is dispatched before
    // anything starts a thread, and the session's thread starts later, in the child).
    let forked = unsafe { fork() };
    match forked {
        Err(e) => Err(format!("cannot start the run's PID namespace: {e}")),
        Ok(ForkResult::Parent { child }) => {
            let pid =
                Pid::from_raw(child.as_raw()).ok_or_else(|| "fork returned no child".to_owned())?;
            let status = loop {
                match rustix::process::waitpid(Some(pid), WaitOptions::empty()) {
                    Ok(Some((_, status))) => break status,
                    Err(rustix::io::Errno::INTR) => {}
                    Ok(None) => {}
                    Err(e) => return Err(format!("cannot wait for the run's init: {e}")),
                }
            };
            if status.exit_status() == Some(0) {
                // The child wrote the outcome; there is nothing to add.
                std::process::exit(0);
            }
            Err(match status.terminating_signal() {
                Some(sig) => format!("the run's init ended by signal {sig} without a report"),
                None => format!(
                    "the run's init ended with status {:?} without a report",
                    status.exit_status()
                ),
            })
        }
        Ok(ForkResult::Child) => {
            // A launcher killed by the sidecar (past its deadline) takes the namespace, and
            // every process in it, with it.
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
                .map_err(|e| format!("cannot tie the run's init to its launcher: {e}"))?;
            match super::masks::own_proc() {
                Ok(()) => out.processes = "namespace".to_owned(),
                Err(_) if probe => out.processes = "shared".to_owned(),
                Err(e) => return Err(format!("{e}; refused")),
            }
            Ok(rustix::process::getpid())
        }
    }
}

/// The first directory on the way to `dir` (itself included) that `who` may not search, by
/// its mode bits (no supplementary groups; ACLs not read: this only explains a failure).
fn unsearchable(dir: &std::path::Path, who: RunAs) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let mut way: Vec<&std::path::Path> = dir.ancestors().collect();
    way.reverse();
    way.into_iter().find_map(|d| {
        let m = std::fs::metadata(d).ok()?;
        let bit = if m.uid() == who.uid {
            0o100
        } else if m.gid() == who.gid {
            0o010
        } else {
            0o001
        };
        (m.mode() & bit == 0).then(|| d.to_path_buf())
    })
}

/// Whether the program has exited: then its status is recorded, and whatever it left
/// running is counted, killed and reaped (by `finish`).
fn ended(spec: &LaunchSpec, me: Pid, reaper: &mut Reaper, out: &mut Outcome) -> bool {
    reaper.reap();
    let Some(status) = reaper.status else {
        return false;
    };
    record(out, status);
    out.stragglers = u32::try_from(members(spec, me).len()).unwrap_or(u32::MAX);
    finish(spec, me, reaper.pid, reaper);
    true
}

/// TERM to every process of the call, KILL after the grace period (by `finish`), every one
/// reaped; the program's status recorded.
fn stop(spec: &LaunchSpec, me: Pid, reaper: &mut Reaper, out: &mut Outcome) {
    let pid = reaper.pid;
    signal(pid, &members(spec, me), Signal::TERM);
    let grace_end = Instant::now() + Duration::from_millis(spec.grace_ms);
    out.killed = true;
    while Instant::now() < grace_end {
        reaper.reap();
        if reaper.status.is_some() && members(spec, me).is_empty() {
            out.killed = false;
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Still running after the grace period: `finish` KILLs.
    finish(spec, me, pid, reaper);
    if let Some(s) = reaper.status {
        record(out, s);
    }
}

/// A session: a thread passes the launcher's stdin on to the program until it ends; the
/// program runs until it exits or, once the stdin has ended, for the grace period.
fn session(
    spec: &LaunchSpec,
    me: Pid,
    pid: Pid,
    pipe: Option<std::process::ChildStdin>,
    out: &mut Outcome,
) -> Result<(), String> {
    let input_ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&input_ended);
    std::thread::spawn(move || {
        let mut pipe = pipe;
        let mut buf = vec![0u8; 64 * 1024];
        // The spec line was read through the same buffer: what followed it comes first.
        let mut input = std::io::stdin().lock();
        loop {
            match input.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let Some(p) = pipe.as_mut() else { break };
                    if p.write_all(buf.get(..n).unwrap_or_default()).is_err() {
                        break;
                    }
                    let _ = p.flush();
                }
            }
        }
        drop(pipe.take());
        flag.store(true, std::sync::atomic::Ordering::Release);
    });
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
        .map_err(|e| format!("cannot watch the program: {e}"))?;
    let mut reaper = Reaper { pid, status: None };
    let mut stop_at: Option<Instant> = None;
    loop {
        if ended(spec, me, &mut reaper, out) {
            return Ok(());
        }
        if over_memory(spec, out) {
            break;
        }
        if stop_at.is_none() && input_ended.load(std::sync::atomic::Ordering::Acquire) {
            out.cancelled = true;
            stop_at = Some(Instant::now() + Duration::from_millis(spec.grace_ms));
        }
        if stop_at.is_some_and(|t| Instant::now() >= t) {
            break;
        }
        let ts = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 50_000_000,
        };
        let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
        match poll(&mut fds, Some(&ts)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("poll failed: {e}")),
        }
    }
    stop(spec, me, &mut reaper, out);
    Ok(())
}

/// Whether the kernel has stopped a process of the run for its memory limit: then the run
/// is over (cgroup v1 kills only the largest process; the rest are stopped with it).
fn over_memory(spec: &LaunchSpec, out: &mut Outcome) -> bool {
    let Some(dir) = &spec.memory_cgroup else {
        return false;
    };
    let (kills, _) = super::cgroup::memory_report(dir);
    if kills > 0 {
        out.memory_exceeded = true;
    }
    out.memory_exceeded
}

/// Reaps every child that has ended (orphans included), remembering the program's status.
struct Reaper {
    pid: Pid,
    status: Option<rustix::process::WaitStatus>,
}

impl Reaper {
    fn reap(&mut self) {
        loop {
            match rustix::process::wait(WaitOptions::NOHANG) {
                Ok(Some((p, status))) => {
                    if p == self.pid {
                        self.status = Some(status);
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                Ok(None) | Err(_) => return,
            }
        }
    }
}

fn record(out: &mut Outcome, status: rustix::process::WaitStatus) {
    out.exit_code = status.exit_status();
    out.signal = status.terminating_signal();
}

/// Kills whatever is left, repeatedly, until no process of the call remains (a fork bomb
/// forks between two sweeps; each sweep takes the new ones), and reaps them all.
fn finish(spec: &LaunchSpec, me: Pid, pid: Pid, reaper: &mut Reaper) {
    for _ in 0..5000 {
        reaper.reap();
        let left = members(spec, me);
        if reaper.status.is_some() && left.is_empty() {
            return;
        }
        signal(pid, &left, Signal::KILL);
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Every process of the call other than the launcher: the cgroup's members when there is a
/// cgroup, otherwise the launcher's descendants (orphans are re-parented to it).
fn members(spec: &LaunchSpec, me: Pid) -> BTreeSet<i32> {
    let mut found = BTreeSet::new();
    if let Some(cg) = &spec.cgroup
        && let Ok(text) = std::fs::read_to_string(cg.join("cgroup.procs"))
    {
        // A process outside the reader's PID namespace (the launcher that started the
        // run's init) is listed as 0.
        found.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
                .filter(|p| *p > 0),
        );
    }
    let me = me.as_raw_nonzero().get();
    let mut stack = vec![me];
    let mut seen = BTreeSet::from([me]);
    while let Some(p) = stack.pop() {
        for child in children(p) {
            if seen.insert(child) {
                found.insert(child);
                stack.push(child);
            }
        }
    }
    found.remove(&me);
    // Gone, or exited and waiting to be reaped: nothing to kill.
    found.retain(|p| !is_zombie(*p));
    found
}

fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    out
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .and_then(|i| s.get(i + 1..))
                .map(|r| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// Sends `sig` to the program's process group and to each of `members`.
fn signal(program: Pid, members: &BTreeSet<i32>, sig: Signal) {
    let _ = rustix::process::kill_process_group(program, sig);
    for &p in members {
        if let Some(pid) = Pid::from_raw(p) {
            let _ = rustix::process::kill_process(pid, sig);
        }
    }
}

fn usage(out: &mut Outcome) {
    use nix::sys::resource::{UsageWho, getrusage};
    if let Ok(u) = getrusage(UsageWho::RUSAGE_CHILDREN) {
        let ms = |t: nix::sys::time::TimeVal| {
            u64::try_from(t.tv_sec()).unwrap_or(0) * 1000
                + u64::try_from(t.tv_usec()).unwrap_or(0) / 1000
        };
        out.cpu_ms = ms(u.user_time()) + ms(u.system_time());
        // Linux reports kilobytes.
        out.max_rss_bytes = u64::try_from(u.max_rss()).unwrap_or(0) * 1024;
    }
}

fn set_limits(l: &Rlimits) -> Result<(), String> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    for (res, name, value) in [
        (Resource::Cpu, "cpu_secs", l.cpu_secs),
        (Resource::As, "address_space", l.address_space_bytes),
        (Resource::Fsize, "file_size", l.file_size_bytes),
        (Resource::Nproc, "processes", l.processes),
        (Resource::Nofile, "open_files", l.open_files),
    ] {
        // `u64::MAX`: leave this limit as it is (a pids cgroup bounds processes instead).
        if value == u64::MAX {
            continue;
        }
        setrlimit(
            res,
            Rlimit {
                current: Some(value),
                maximum: Some(value),
            },
        )
        .map_err(|e| format!("cannot set the {name} limit to {value}: {e}"))?;
    }
    Ok(())
}

/// Applies the Landlock rules to the launcher (and so to everything it starts). Returns how
/// much the kernel enforced.
fn restrict(sb: &Sandbox) -> Result<String, String> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, Ruleset,
        RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
    };
    let abi = ABI::V6;
    let err = |e: landlock::RulesetError| format!("cannot set up the Landlock sandbox: {e}");
    // Without ABI 3 a program could truncate a file it may only read (a policy, the tokens):
    // on such a kernel there is no sandbox, and no run.
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V3))
        .map_err(|e| {
            format!("this kernel's Landlock cannot refuse truncation (ABI 3, Linux 6.2): {e}")
        })?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(err)?;
    if sb.no_tcp {
        // Handled with no rule: every TCP bind and connect is refused.
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(err)?;
    }
    let mut created = ruleset
        .scope(Scope::from_all(abi))
        .map_err(err)?
        .create()
        .map_err(err)?;
    for (paths, access) in [
        (&sb.read, AccessFs::from_read(abi)),
        (&sb.write, AccessFs::from_all(abi)),
        (&sb.list, AccessFs::ReadDir.into()),
    ] {
        for path in paths {
            // A path that is gone, or became a link since the plan, grants nothing.
            let Some((fd, is_file)) = open_rule(path) else {
                continue;
            };
            let access = if is_file {
                access & AccessFs::from_file(abi)
            } else {
                access
            };
            if access.is_empty() {
                continue;
            }
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(err)?;
        }
    }
    let status = created.restrict_self().map_err(err)?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => "full",
        RulesetStatus::PartiallyEnforced => "partial",
        RulesetStatus::NotEnforced => "none",
    }
    .to_owned())
}

/// A Landlock layer that handles no file access, only the signal and abstract-socket scopes
/// (ABI 6; a kernel without them gets nothing, as it does for the launcher's own layer).
fn scope_layer() -> Result<(), String> {
    use landlock::{ABI, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope};
    let abi = ABI::V6;
    let err = |e: landlock::RulesetError| format!("cannot scope the program: {e}");
    // Handling `Refer` and granting it everywhere changes no file access (the launcher's
    // layer still decides) but gives older ABIs a ruleset they accept.
    Ruleset::default()
        .handle_access(AccessFs::Refer)
        .map_err(err)?
        .scope(Scope::from_all(abi))
        .map_err(err)?
        .create()
        .map_err(err)?
        .add_rule(landlock::PathBeneath::new(
            landlock::PathFd::new("/").map_err(|e| format!("cannot scope the program: {e}"))?,
            AccessFs::Refer,
        ))
        .map_err(err)?
        .restrict_self()
        .map_err(err)?;
    Ok(())
}

/// Opens a planned path for a rule without following any symbolic link on the way (the
/// plan never grants one; a link swapped in since would otherwise grant its target), and
/// says whether it is a file rather than a directory.
fn open_rule(path: &std::path::Path) -> Option<(std::os::fd::OwnedFd, bool)> {
    use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
    let fd = rustix::fs::openat2(
        rustix::fs::CWD,
        path,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS,
    )
    .ok()?;
    let stat = rustix::fs::fstat(&fd).ok()?;
    let is_file = FileType::from_raw_mode(stat.st_mode) != FileType::Directory;
    Some((fd, is_file))
}
