//! Sandboxed execution of CLI-backed tools: a manifest's `executor` names a fixed program and
//! an argv template; [`Runner::execute`] renders the call's validated arguments into an argv
//! (paths through the [`Jail`], no option injection), runs it under the launcher (no shell,
//! stdin closed, own process group, resource limits, Landlock, a pids cgroup where there is
//! one), caps and strips its output while it streams, and retries exit codes the manifest
//! marks as transient.
//!
//! Owns: the `[exec]` settings, the runner, the launcher protocol ([`launch`]) and the
//! probe of what this machine enforces (shown by `/readyz`). Does not own: the decision, the
//! output gate or the audit record (see `api::execute`).

mod cgroup;
pub mod launch;
mod output;
mod run;
mod spec;

pub use output::{ParseError, Text, parse};
pub use spec::{
    CompileError, DEFAULT_PROGRAMS, Executor, Keep, LimitOverrides, Parser, Program, Programs,
    RawExecutor, RenderError, Retry, Truncate,
};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::jail::Jail;
use crate::tools::{Classification, Tool};
use launch::{LaunchSpec, Outcome, Rlimits, Sandbox};

/// Directories every program may read and execute from (what a dynamically linked program
/// needs: libraries, the loader cache, locale and certificate data), plus `/proc` and `/dev`.
const SYSTEM_READ: [&str; 10] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt", "/proc", "/dev",
];

/// Default resource limits (`[exec.limits]`); CPU seconds default to the tool's timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefaultLimits {
    /// CPU seconds per process (`None`: the tool's timeout, rounded up).
    pub cpu_secs: Option<u64>,
    /// Address space per process, MiB.
    pub address_space_mb: u64,
    /// Largest file written, MiB.
    pub file_size_mb: u64,
    /// Processes of one call (pids cgroup), or of the user (RLIMIT_NPROC).
    pub processes: u64,
    /// Open files per process.
    pub open_files: u64,
}

impl Default for DefaultLimits {
    fn default() -> Self {
        DefaultLimits {
            cpu_secs: None,
            address_space_mb: 4096,
            file_size_mb: 1024,
            processes: 256,
            open_files: 1024,
        }
    }
}

/// The validated `[exec]` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecSettings {
    /// The service root: tools run there and path arguments are jailed to it. `None`:
    /// execution is off.
    pub root: Option<PathBuf>,
    /// Read-only roots beside it (`name` → directory; paths starting `name/` go there).
    pub shared: Vec<(String, PathBuf)>,
    /// Deny-listed path segments (case-insensitive, trailing `*` for prefixes).
    pub deny: Vec<String>,
    /// Executables tools may run.
    pub programs: Programs,
    /// Time between TERM and KILL.
    pub grace_ms: u64,
    /// Resource limits.
    pub limits: DefaultLimits,
    /// Restrict file system access with Landlock where the kernel has it.
    pub landlock: bool,
    /// Use a pids cgroup per call where one can be made.
    pub cgroup: bool,
    /// Further directories tools may read, and write.
    pub read_paths: Vec<PathBuf>,
    /// Further directories tools may write.
    pub write_paths: Vec<PathBuf>,
    /// Runs at once; more are refused with 429.
    pub max_concurrent: usize,
    /// Where the file tools keep their per-file locks (`None`: a directory of this run's
    /// scratch space, so locks do not outlive the process).
    pub lock_dir: Option<PathBuf>,
    /// How long a file tool waits for a file's lock before `ResourceBusy`.
    pub lock_timeout_ms: u64,
    /// Age after which a lock is presumed abandoned and taken over.
    pub stale_lock_ms: u64,
    /// The sidecar's own files (data directory, policies, schemas, config): never reachable
    /// through a tool, even when they lie below the service root.
    pub protected: Vec<PathBuf>,
}

impl Default for ExecSettings {
    fn default() -> Self {
        ExecSettings {
            root: None,
            shared: Vec::new(),
            deny: crate::jail::DEFAULT_DENY
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            programs: Programs::default(),
            grace_ms: 2000,
            limits: DefaultLimits::default(),
            landlock: true,
            cgroup: true,
            read_paths: Vec::new(),
            write_paths: Vec::new(),
            max_concurrent: 4,
            lock_dir: None,
            lock_timeout_ms: 5000,
            stale_lock_ms: 30_000,
            protected: Vec::new(),
        }
    }
}

/// What this machine enforces, measured at start by a launcher probe.
#[derive(Debug, Clone, Serialize)]
pub struct Protections {
    /// The service root.
    pub root: String,
    /// `full`, `partial`, `none` or `off` (switched off in the config).
    pub landlock: String,
    /// How the number of processes is bounded: `cgroup`, `rlimit`, or `none`.
    pub process_limit: &'static str,
    /// Resource limits set (CPU, address space, file size, processes, open files).
    pub rlimits: bool,
    /// Path arguments opened with openat2 beneath the root.
    pub path_jail: bool,
    /// Every process of a call is killed and reaped when it ends (subreaper launcher).
    pub no_orphans: bool,
    /// Why the probe failed, if it did (execution is then refused).
    pub error: Option<String>,
}

/// Why a call could not run.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The arguments cannot become an argv.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// The program is not installed on this machine.
    #[error("`{0}` is not installed on this machine")]
    ProgramMissing(String),
    /// Too many runs at once.
    #[error("too many tool runs at once")]
    Busy,
    /// The sandbox could not be set up (probe failed, or a scratch directory).
    #[error("cannot set up the run: {0}")]
    Setup(String),
}

/// One finished run (the last attempt).
#[derive(Debug)]
pub struct Execution {
    /// The launcher's report (`None`: it died without one).
    pub outcome: Option<Outcome>,
    /// The output text after stripping and truncation.
    pub stdout: Text,
    /// Bytes the program wrote to stdout.
    pub bytes: u64,
    /// The tail of stderr, stripped.
    pub stderr: String,
    /// Wall-clock time of the last attempt.
    pub duration: Duration,
    /// Attempts made.
    pub attempts: u32,
}

/// Runs tools. Shared by every request.
#[derive(Debug)]
pub struct Runner {
    settings: ExecSettings,
    jail: Jail,
    launcher: PathBuf,
    scratch: PathBuf,
    cgroups: Option<cgroup::Cgroups>,
    protections: Protections,
    slots: Arc<tokio::sync::Semaphore>,
    seq: AtomicU64,
    locks: crate::files::Locks,
    /// File tools at once (4× `max_concurrent`); more wait within their time budget.
    file_slots: Arc<tokio::sync::Semaphore>,
}

impl Runner {
    /// Opens the roots, sets up cgroups and probes the launcher at `launcher` (normally this
    /// binary). Fails when `[exec] root` is not set or cannot be opened.
    pub async fn start(settings: ExecSettings, launcher: PathBuf) -> Result<Runner, ExecError> {
        let root = settings
            .root
            .clone()
            .ok_or_else(|| ExecError::Setup("`[exec] root` is not set".to_owned()))?;
        let mut jail = Jail::new(&root, &settings.shared, &settings.deny).map_err(|e| {
            ExecError::Setup(format!(
                "cannot open the service root `{}`: {e}",
                root.display()
            ))
        })?;
        static RUNNERS: AtomicU64 = AtomicU64::new(0);
        let scratch = std::env::temp_dir().join(format!(
            "toolgate-exec-{}-{}",
            std::process::id(),
            RUNNERS.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&scratch)
            .map_err(|e| ExecError::Setup(format!("cannot create `{}`: {e}", scratch.display())))?;
        let lock_dir = settings
            .lock_dir
            .clone()
            .unwrap_or_else(|| scratch.join("locks"));
        let locks = crate::files::Locks::new(
            lock_dir.clone(),
            Duration::from_millis(settings.lock_timeout_ms),
            Duration::from_millis(settings.stale_lock_ms),
        )
        .map_err(|e| {
            ExecError::Setup(format!(
                "cannot create the lock directory `{}`: {e}",
                lock_dir.display()
            ))
        })?;
        jail.protect(std::slice::from_ref(&lock_dir));
        jail.protect(&settings.protected);
        let cgroups = if settings.cgroup {
            cgroup::Cgroups::create()
        } else {
            None
        };
        let max_concurrent = settings.max_concurrent.max(1);
        let mut runner = Runner {
            slots: Arc::new(tokio::sync::Semaphore::new(max_concurrent)),
            protections: Protections {
                root: jail.root().display().to_string(),
                landlock: String::new(),
                process_limit: "none",
                rlimits: false,
                path_jail: true,
                no_orphans: false,
                error: None,
            },
            settings,
            jail,
            launcher,
            scratch,
            cgroups,
            seq: AtomicU64::new(0),
            locks,
            file_slots: Arc::new(tokio::sync::Semaphore::new(
                max_concurrent.saturating_mul(4),
            )),
        };
        runner.protections = runner.probe().await;
        Ok(runner)
    }

    /// What this machine enforces.
    pub fn protections(&self) -> &Protections {
        &self.protections
    }

    /// The path jail (shared with the file tools).
    pub fn jail(&self) -> &Jail {
        &self.jail
    }

    /// Runs a built-in file tool with `args` (validated and allowed) off the async workers,
    /// within the tool's `timeout_ms` and `max_output_bytes`.
    pub async fn files(
        self: &Arc<Self>,
        tool: crate::files::Builtin,
        args: Value,
        limits: &crate::tools::Limits,
    ) -> crate::files::Ran {
        let runner = Arc::clone(self);
        // A writer gives up well before its lock could be judged stale and taken over.
        let budget = if tool.changes_files() {
            limits.timeout_ms.min(self.settings.stale_lock_ms / 2)
        } else {
            limits.timeout_ms
        };
        let deadline = crate::files::Deadline::after_ms(budget);
        let max_output_bytes = limits.max_output_bytes;
        // Bounded like program runs, but waiting (within the budget) instead of refusing:
        // file tools are short, and a refusal would spend an approval.
        let wait = std::time::Duration::from_millis(budget);
        let Ok(Ok(slot)) =
            tokio::time::timeout(wait, Arc::clone(&self.file_slots).acquire_owned()).await
        else {
            return crate::files::Ran {
                result: Err(crate::files::FileError::Timeout(budget)),
                took_over: None,
            };
        };
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let cx = crate::files::Context {
                jail: &runner.jail,
                locks: &runner.locks,
                deadline,
                max_output_bytes,
            };
            crate::files::run(cx, tool, &args)
        })
        .await
        .unwrap_or_else(|e| crate::files::Ran {
            result: Err(crate::files::FileError::Io {
                path: String::new(),
                message: format!("the file tool's task failed: {e}"),
            }),
            took_over: None,
        })
    }

    async fn probe(&self) -> Protections {
        let mut p = self.protections.clone();
        let spec = LaunchSpec {
            nonce: "probe".to_owned(),
            program: PathBuf::new(),
            argv: Vec::new(),
            cwd: self.jail.root().to_path_buf(),
            env: Vec::new(),
            timeout_ms: 1000,
            grace_ms: self.settings.grace_ms,
            rlimits: self.rlimits(1000, LimitOverrides::default()),
            sandbox: self.sandbox(Classification::Read, None),
            cgroup: None,
            probe: true,
        };
        match run::run(&self.launcher, &spec, 0, 0).await {
            Ok(ran) => match ran.outcome {
                Some(o) if o.error.is_none() => {
                    p.landlock = o.landlock;
                    p.rlimits = true;
                    p.no_orphans = true;
                    p.process_limit = if self.cgroups.is_some() {
                        "cgroup"
                    } else if rustix::process::getuid().is_root() {
                        "none"
                    } else {
                        "rlimit"
                    };
                }
                Some(o) => p.error = o.error,
                None => {
                    p.error = Some(format!(
                        "the launcher gave no report: {}",
                        ran.stderr.trim()
                    ))
                }
            },
            Err(e) => p.error = Some(e.to_string()),
        }
        p
    }

    /// The resource limits of a run: the tool's overrides over `[exec.limits]`; CPU seconds
    /// default to the timeout.
    fn rlimits(&self, timeout_ms: u64, o: LimitOverrides) -> Rlimits {
        let d = self.settings.limits;
        let mib = |m: u64| m.saturating_mul(1024 * 1024);
        Rlimits {
            cpu_secs: o
                .cpu_secs
                .or(d.cpu_secs)
                .unwrap_or(timeout_ms.div_ceil(1000) + 1),
            address_space_bytes: mib(o.address_space_mb.unwrap_or(d.address_space_mb)),
            file_size_bytes: mib(o.file_size_mb.unwrap_or(d.file_size_mb)),
            // With a pids cgroup, the cgroup bounds the call; RLIMIT_NPROC would count every
            // process of the user instead.
            processes: if self.cgroups.is_some() {
                u64::MAX
            } else {
                o.processes.unwrap_or(d.processes)
            },
            open_files: o.open_files.unwrap_or(d.open_files),
        }
    }

    /// The Landlock rules of a run (`None` when switched off): system directories, the roots,
    /// the extra paths; writes to the scratch directory, `/dev/null`, and the service root for
    /// tools that are not `read`.
    fn sandbox(&self, class: Classification, scratch: Option<&Path>) -> Option<Sandbox> {
        self.settings.landlock.then(|| {
            let mut read: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
            read.extend(self.jail.shared().map(Path::to_path_buf));
            read.extend(self.settings.read_paths.iter().cloned());
            read.push(self.jail.root().to_path_buf());
            if let Some(cg) = &self.cgroups {
                read.push(cg.base().to_path_buf());
            }
            let mut write = vec![PathBuf::from("/dev/null")];
            write.extend(scratch.map(Path::to_path_buf));
            write.extend(self.settings.write_paths.iter().cloned());
            if class != Classification::Read {
                write.push(self.jail.root().to_path_buf());
            }
            Sandbox { read, write }
        })
    }

    /// Renders and runs `tool` with `args` (validated and allowed), retrying marked exit codes.
    pub async fn execute(
        &self,
        tool: &Tool,
        ex: &Executor,
        args: &Value,
    ) -> Result<Execution, ExecError> {
        if let Some(e) = &self.protections.error {
            return Err(ExecError::Setup(e.clone()));
        }
        let program = ex
            .program
            .path
            .clone()
            .ok_or_else(|| ExecError::ProgramMissing(ex.program.written.clone()))?;
        let argv = ex.render(args, &tool.path_args, &self.jail)?;
        let cwd = self
            .jail
            .locate(&ex.cwd)
            .map_err(|e| ExecError::Setup(format!("working directory `{}`: {e}", ex.cwd)))?;
        let _slot = self
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| ExecError::Busy)?;
        let max = usize::try_from(tool.limits.max_output_bytes).unwrap_or(usize::MAX);
        let (head, tail) = match ex.truncate.keep {
            Keep::Head => (max, 0),
            Keep::Tail => (0, max),
            Keep::Both => (max / 2, max - max / 2),
        };
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let n = self.seq.fetch_add(1, Ordering::Relaxed);
            let scratch = self.scratch.join(n.to_string());
            std::fs::create_dir_all(&scratch)
                .map_err(|e| ExecError::Setup(format!("scratch directory: {e}")))?;
            let cg = match &self.cgroups {
                Some(c) => Some(
                    c.make(
                        n,
                        ex.limits
                            .processes
                            .unwrap_or(self.settings.limits.processes),
                    )
                    .map_err(|e| ExecError::Setup(format!("cgroup: {e}")))?,
                ),
                None => None,
            };
            let spec = LaunchSpec {
                nonce: uuid::Uuid::now_v7().simple().to_string(),
                program: program.clone(),
                argv: argv.clone(),
                cwd: cwd.clone(),
                env: self.env(ex, &scratch),
                timeout_ms: tool.limits.timeout_ms,
                grace_ms: self.settings.grace_ms,
                rlimits: self.rlimits(tool.limits.timeout_ms, ex.limits),
                sandbox: self.sandbox(tool.classification, Some(&scratch)),
                cgroup: cg.clone(),
                probe: false,
            };
            let ran = run::run(&self.launcher, &spec, head, tail).await;
            // Blocking file-system work (and the cgroup's brief retries): off the workers.
            let _ = tokio::task::spawn_blocking(move || {
                if let Some(dir) = cg {
                    cgroup::Cgroups::remove(&dir);
                }
                let _ = std::fs::remove_dir_all(&scratch);
            })
            .await;
            let ran = ran.map_err(|e| ExecError::Setup(e.to_string()))?;
            let code = ran.outcome.as_ref().and_then(|o| o.exit_code);
            let retry = code.is_some_and(|c| ex.retry.exit_codes.contains(&c))
                && attempt <= ex.retry.attempts;
            if retry {
                let wait = ex
                    .retry
                    .backoff_ms
                    .saturating_mul(1 << (attempt - 1).min(10));
                tokio::time::sleep(Duration::from_millis(wait)).await;
                continue;
            }
            return Ok(Execution {
                stdout: output::assemble(&ran.stdout, &ex.truncate),
                bytes: ran.stdout.total,
                stderr: output::clean(ran.stderr.as_bytes()),
                outcome: ran.outcome,
                duration: ran.duration,
                attempts: attempt,
            });
        }
    }

    /// The program's whole environment: the allowlisted variables from the sidecar's, over
    /// `PATH`, `HOME` and `TMPDIR` defaults (the last two a fresh scratch directory).
    fn env(&self, ex: &Executor, scratch: &Path) -> Vec<(String, String)> {
        let scratch = scratch.display().to_string();
        let mut env = vec![
            ("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned()),
            ("HOME".to_owned(), scratch.clone()),
            ("TMPDIR".to_owned(), scratch),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ];
        for name in &ex.env {
            if let Ok(v) = std::env::var(name) {
                env.retain(|(k, _)| k != name);
                env.push((name.clone(), v));
            }
        }
        env
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}
