//! Sandboxed execution of CLI-backed tools: a manifest's `executor` names a fixed program and
//! an argv template; [`Runner::execute`] renders the call's validated arguments into an argv
//! (paths through the [`Jail`], no option injection), runs it under the launcher (no shell,
//! stdin closed, own process group, resource limits, Landlock, a pids cgroup where there is
//! one), caps and strips its output while it streams, and retries exit codes the manifest
//! marks as transient.
//!
//! Owns: the `[exec]` settings, the runner, the launcher protocol ([`launch`]) and the
//! probe of what this machine enforces (shown by `/readyz`). Does not own: the decision, the
//! output gate or the audit record (see `gateway::execute`).

mod cgroup;
pub mod launch;
mod masks;
mod output;
pub mod reach;
mod run;
pub mod sandbox;
mod session;
mod syscalls;

use crate::tools::{Access, Executor, Keep, LimitOverrides, Programs, RenderError};
pub use launch::{Outcome, RunAs};
pub use output::{ParseError, Text, parse};
pub use session::{Cleanup, Session, SessionSpec};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::jail::Jail;
use crate::tools::Tool;
use launch::{LaunchSpec, Rlimits, Sandbox};

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
    /// Memory of all of a run's processes together, MiB (a memory cgroup where one can be
    /// made; swap off for it).
    pub memory_mb: u64,
    /// Size of a run's scratch directory (`HOME`, `TMPDIR`), MiB: a tmpfs in the run's own
    /// mount namespace, whose pages count against `memory_mb`.
    pub scratch_mb: u64,
}

impl Default for DefaultLimits {
    fn default() -> Self {
        DefaultLimits {
            cpu_secs: None,
            address_space_mb: 4096,
            file_size_mb: 1024,
            processes: 256,
            open_files: 1024,
            memory_mb: 4096,
            scratch_mb: 1024,
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
    /// Deny-listed path segments (case-insensitive globs).
    pub deny: crate::globs::SegmentGlobs,
    /// Executables tools may run.
    pub programs: Programs,
    /// Time between TERM and KILL.
    pub grace_ms: u64,
    /// Resource limits.
    pub limits: DefaultLimits,
    /// Restrict file system access with Landlock where the kernel has it.
    pub landlock: bool,
    /// Give each program a network namespace of its own unless its manifest declares the
    /// network (`false`: every program keeps the host's network; for containers that allow
    /// no namespaces).
    pub network_namespace: bool,
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
    /// The sidecar's own files (the protected set: data directory, policies, schemas,
    /// config, tokens, keys, secrets files; the lock directory is added at start): never
    /// reachable through a tool or an executed program, even below the service root.
    pub protected: Vec<PathBuf>,
    /// The user and group programs run as when the sidecar runs as root (`None`: 65534,
    /// `nobody`). Ignored otherwise: an unprivileged sidecar cannot change user.
    pub run_as: Option<RunAs>,
}

impl Default for ExecSettings {
    fn default() -> Self {
        ExecSettings {
            root: None,
            shared: Vec::new(),
            deny: crate::globs::SegmentGlobs::default(),
            programs: Programs::default(),
            grace_ms: 2000,
            limits: DefaultLimits::default(),
            landlock: true,
            network_namespace: true,
            cgroup: true,
            read_paths: Vec::new(),
            write_paths: Vec::new(),
            max_concurrent: 4,
            lock_dir: None,
            lock_timeout_ms: 5000,
            protected: Vec::new(),
            run_as: None,
        }
    }
}

/// The user programs run as when the sidecar is root and `[exec] run_as` is not set.
pub const NOBODY: RunAs = RunAs {
    uid: 65534,
    gid: 65534,
};

/// What this machine enforces, measured at start by a launcher probe.
#[derive(Debug, Clone, Serialize)]
pub struct Protections {
    /// The service root.
    pub root: String,
    /// `full`, `partial`, `none` or `off` (switched off in the config).
    pub landlock: String,
    /// How the number of processes is bounded: `cgroup`, `rlimit`, or `none`.
    pub process_limit: &'static str,
    /// How a run's memory is bounded: `cgroup` (all its processes together, no swap) or
    /// `rlimit` (each process's address space only).
    pub memory_limit: &'static str,
    /// Resource limits set (CPU, address space, file size, processes, open files).
    pub rlimits: bool,
    /// Path arguments opened with openat2 beneath the root.
    pub path_jail: bool,
    /// Every process of a call is killed and reaped when it ends (subreaper launcher).
    pub no_orphans: bool,
    /// How programs are kept off the network unless their manifest declares it:
    /// `namespace` (one per run; where none can be made, runs are refused).
    pub network: String,
    /// The user programs run as (`uid:gid`), when the sidecar is root.
    pub run_as: Option<String>,
    /// The protected set: never readable or writable by a tool or a program.
    pub protected: Vec<String>,
    /// How programs are kept off the protected set's modes, times and attributes:
    /// `namespace` (covered in each run's mount namespace) or `owner` (a root sidecar where
    /// no mount namespace can be made: programs are `run_as`, who owns none of it).
    pub metadata: String,
    /// What a program sees of other processes: `namespace` (a PID namespace and `/proc` of
    /// each run's own), `hidepid` (a root sidecar where no PID namespace can be made: its own
    /// user's processes only) or `shared` (the host's `/proc`).
    pub processes: String,
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
    /// A git tool, but the service root is not the top of a git work tree.
    #[error(
        "the service root is not a git work tree (no `.git` directory at its top); git tools run only there"
    )]
    NotAWorkTree,
    /// A revision argument that does not name a commit.
    #[error("argument `{0}` does not name a commit in this repository")]
    Revision(String),
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
    /// The time limit the run had, ms, and the argument that set it when one did (shorter
    /// than the manifest's `limits.timeout_ms`).
    pub time_limit: (u64, Option<String>),
}

/// Runs tools. Shared by every request.
#[derive(Debug)]
pub struct Runner {
    settings: ExecSettings,
    jail: Jail,
    /// `/proc/self/fd/N` of `launcher_file`.
    launcher: PathBuf,
    /// The launcher binary, opened at start and kept open for `launcher` to name.
    _launcher_file: std::fs::File,
    scratch: PathBuf,
    cgroups: Option<cgroup::Cgroups>,
    protections: Protections,
    /// Never granted to a program: the protected set (canonical) and the system's secrets.
    excluded: Vec<PathBuf>,
    /// Covered in every run's mount namespace: the protected set (canonical).
    masks: Vec<PathBuf>,
    /// Runs get a PID namespace of their own (the start probe could make one).
    own_pids: bool,
    /// Who programs run as (set when the sidecar is root).
    run_as: Option<RunAs>,
    /// Directory listings below the roots, kept between plans.
    dir_cache: Arc<sandbox::DirCache>,
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
        // A fresh name nobody could have made in advance (create_dir fails if it exists).
        let scratch = std::env::temp_dir().join(format!(
            "toolgate-exec-{}-{}-{}",
            std::process::id(),
            RUNNERS.fetch_add(1, Ordering::Relaxed),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir(&scratch)
            .and_then(|()| {
                use std::os::unix::fs::PermissionsExt;
                // Runs' users may pass through to their own directories, not list others.
                std::fs::set_permissions(&scratch, std::fs::Permissions::from_mode(0o711))
            })
            .map_err(|e| ExecError::Setup(format!("cannot create `{}`: {e}", scratch.display())))?;
        // The launcher runs unconfined: it is executed through a descriptor opened now, so
        // replacing the file later changes nothing, and the file joins the protected set.
        let launcher_file = std::fs::File::open(&launcher).map_err(|e| {
            ExecError::Setup(format!(
                "cannot open the launcher `{}`: {e}",
                launcher.display()
            ))
        })?;
        let launcher_fd = PathBuf::from(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&launcher_file)
        ));
        let lock_dir = settings
            .lock_dir
            .clone()
            .unwrap_or_else(|| scratch.join("locks"));
        let locks = crate::files::Locks::new(
            lock_dir.clone(),
            Duration::from_millis(settings.lock_timeout_ms),
        )
        .map_err(|e| {
            ExecError::Setup(format!(
                "cannot create the lock directory `{}`: {e}",
                lock_dir.display()
            ))
        })?;
        let mut protected = settings.protected.clone();
        protected.push(lock_dir.clone());
        protected.push(launcher.clone());
        let protected = sandbox::canonical_set(&protected);
        jail.protect(&protected);
        if let Some(p) = protected.iter().find(|p| jail.root().starts_with(p)) {
            return Err(ExecError::Setup(format!(
                "the service root `{}` lies in the protected set (`{}`): tools would reach the sidecar's own files",
                jail.root().display(),
                p.display()
            )));
        }
        let mut excluded = protected.clone();
        let secrets: Vec<PathBuf> = sandbox::SYSTEM_SECRETS.iter().map(PathBuf::from).collect();
        excluded.extend(sandbox::canonical_set(&secrets));
        let run_as = rustix::process::geteuid()
            .is_root()
            .then(|| settings.run_as.unwrap_or(NOBODY));
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
                memory_limit: "rlimit",
                rlimits: false,
                path_jail: true,
                no_orphans: false,
                network: "none".to_owned(),
                run_as: run_as.map(|r| format!("{}:{}", r.uid, r.gid)),
                protected: protected.iter().map(|p| p.display().to_string()).collect(),
                metadata: String::new(),
                processes: "shared".to_owned(),
                error: None,
            },
            masks: protected,
            own_pids: false,
            excluded,
            run_as,
            dir_cache: Arc::default(),
            settings,
            jail,
            launcher: launcher_fd,
            _launcher_file: launcher_file,
            scratch,
            cgroups,
            seq: AtomicU64::new(0),
            locks,
            file_slots: Arc::new(tokio::sync::Semaphore::new(
                max_concurrent.saturating_mul(4),
            )),
        };
        runner.protections = runner.probe().await;
        runner.own_pids = runner.protections.processes == "namespace";
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
        tool: crate::tools::Builtin,
        args: Value,
        limits: &crate::tools::Limits,
    ) -> Result<Value, crate::files::FileError> {
        let runner = Arc::clone(self);
        let budget = limits.timeout_ms;
        let deadline = crate::files::Deadline::after_ms(budget);
        let max_output_bytes = limits.max_output_bytes;
        // Bounded like program runs, but waiting (within the budget) instead of refusing:
        // file tools are short, and a refusal would spend an approval.
        let wait = std::time::Duration::from_millis(budget);
        let Ok(Ok(slot)) =
            tokio::time::timeout(wait, Arc::clone(&self.file_slots).acquire_owned()).await
        else {
            return Err(crate::files::FileError::Timeout(budget));
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
        .unwrap_or_else(|e| {
            Err(crate::files::FileError::Io {
                path: String::new(),
                message: format!("the file tool's task failed: {e}"),
            })
        })
    }

    async fn probe(&self) -> Protections {
        let mut p = self.protections.clone();
        let sandbox = match self.plan(&Access::default()).await {
            Ok(sb) => sb,
            Err(e) => {
                p.error = Some(e.to_string());
                return p;
            }
        };
        let spec = LaunchSpec {
            nonce: "probe".to_owned(),
            program: PathBuf::new(),
            argv: Vec::new(),
            cwd: self.jail.root().to_path_buf(),
            env: Vec::new(),
            timeout_ms: 1000,
            grace_ms: self.settings.grace_ms,
            rlimits: self.rlimits(1000, LimitOverrides::default()),
            sandbox,
            cgroup: None,
            memory_cgroup: None,
            scratch: None,
            run_as: self.run_as,
            isolate_network: self.settings.network_namespace,
            masks: self.masks.clone(),
            own_pids: true,
            probe: true,
            session: false,
        };
        match run::run(&self.launcher, &spec, 0, 0, std::future::pending::<()>()).await {
            Ok(ran) => match ran.outcome {
                Some(o) if o.error.is_none() && o.landlock == "none" => {
                    // Without Landlock nothing keeps a program off the protected set.
                    p.landlock = o.landlock;
                    p.error = Some(
                        "this kernel does not enforce Landlock, so programs could reach the sidecar's own files; set `[exec] landlock = false` to run them unconfined anyway".to_owned(),
                    );
                }
                Some(o) if o.error.is_none() => {
                    p.landlock = o.landlock;
                    p.network = o.network;
                    p.metadata = o.protected;
                    p.processes = o.processes;
                    p.rlimits = true;
                    p.no_orphans = true;
                    if self.cgroups.as_ref().is_some_and(|c| c.limits_memory()) {
                        p.memory_limit = "cgroup";
                    }
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

    /// The Landlock rules of a run (`None` when switched off), planned off the async
    /// workers (it walks the roots): read the system directories, the devices, the roots and
    /// `read_paths`; write `/dev/null`, `write_paths` and what the manifest declares. Never the
    /// protected set, the system's secrets or a deny-listed name the manifest does not name.
    async fn plan(&self, access: &Access) -> Result<Option<Sandbox>, ExecError> {
        if !self.settings.landlock {
            return Ok(None);
        }
        let root = self.jail.root().to_path_buf();
        let declared = |rel: &String| declared(&root, rel);
        // `reads` alone exempts from the deny list; `writes` are walked like the root.
        let exempt: Vec<PathBuf> = access.reads.iter().filter_map(declared).collect();
        let writes: Vec<PathBuf> = access.writes.iter().filter_map(declared).collect();
        let excluded = self.excluded.clone();
        let deny = self.jail.deny().clone();
        let shared: Vec<PathBuf> = self.jail.shared().map(Path::to_path_buf).collect();
        let read_paths = self.settings.read_paths.clone();
        let write_paths = self.settings.write_paths.clone();
        let cgroups = self
            .cgroups
            .as_ref()
            .map(cgroup::Cgroups::bases)
            .unwrap_or_default();
        let network = access.network;
        let run_as = self.run_as;
        let cache = Arc::clone(&self.dir_cache);
        tokio::task::spawn_blocking(move || {
            // A declared directory that is not there yet is made, for the run's user.
            for dir in &writes {
                if std::fs::symlink_metadata(dir).is_err()
                    && std::fs::create_dir(dir).is_ok()
                    && let Some(who) = run_as
                {
                    let _ = std::os::unix::fs::chown(dir, Some(who.uid), Some(who.gid));
                }
            }
            let inodes = sandbox::inodes(&excluded);
            let ex = sandbox::Exclusions {
                paths: &excluded,
                deny: &deny,
                exempt: &exempt,
                inodes: &inodes,
                cache: Some(&cache),
            };
            let mut read = sandbox::Plan::default();
            for dir in sandbox::SYSTEM_READ.iter().chain(&sandbox::DEVICES) {
                read.add(Path::new(dir), &ex, false)?;
            }
            if network {
                // Name resolution: `/etc/resolv.conf` often links below `/run`.
                if let Ok(conf) = Path::new("/etc/resolv.conf").canonicalize() {
                    read.add(&conf, &ex, false)?;
                }
            }
            for dir in &read_paths {
                read.add(dir, &ex, false)?;
            }
            for dir in shared.iter().chain(std::iter::once(&root)) {
                read.add(dir, &ex, true)?;
            }
            for cg in &cgroups {
                read.add(cg, &ex, false)?;
            }
            let mut write = sandbox::Plan::default();
            write.add(Path::new("/dev/null"), &ex, false)?;
            for dir in &write_paths {
                write.add(dir, &ex, false)?;
            }
            for dir in &writes {
                write.add(dir, &ex, true)?;
            }
            Ok::<_, sandbox::PlanError>(Some(Sandbox {
                read: read.grants,
                write: write.grants,
                list: read.split,
                no_tcp: !network,
            }))
        })
        .await
        .map_err(|e| ExecError::Setup(format!("the sandbox plan failed: {e}")))?
        .map_err(|e| ExecError::Setup(e.to_string()))
    }

    /// Renders and runs `tool` with `args` (validated and allowed), retrying marked exit
    /// codes. The run is a task of its own: if the caller goes away (a client hanging up),
    /// the launcher is told to stop, and the task still waits until every process of the run
    /// is gone and its cgroup and scratch directory are removed.
    pub async fn execute(
        self: &Arc<Self>,
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
        if ex.git.is_some() {
            let dot_git = self.jail.root().join(".git");
            if !std::fs::symlink_metadata(&dot_git).is_ok_and(|m| m.is_dir()) {
                return Err(ExecError::NotAWorkTree);
            }
        }
        let argv = ex.render(args, &tool.path_args, &self.jail)?;
        let cwd = self
            .jail
            .locate(&ex.cwd)
            .map_err(|e| ExecError::Setup(format!("working directory `{}`: {e}", ex.cwd)))?;
        // An argument naming a limit is applied, capped by the manifest's.
        let asked = ex
            .timeout_arg
            .as_ref()
            .and_then(|name| Some((name, args.get(name)?.as_u64()?.saturating_mul(1000))))
            .filter(|(_, ms)| *ms < tool.limits.timeout_ms);
        let timeout_ms = asked.map_or(tool.limits.timeout_ms, |(_, ms)| ms);
        let time_from = asked.map(|(name, _)| name.clone());
        let revisions: Vec<(String, String)> = ex
            .git
            .iter()
            .flat_map(|g| &g.revisions)
            .filter_map(|name| {
                args.get(name)
                    .and_then(Value::as_str)
                    .map(|v| (name.clone(), v.to_owned()))
            })
            .collect();
        let slot = self
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| ExecError::Busy)?;
        let sandbox = self.plan(&ex.access).await?;
        let job = Job {
            program,
            argv,
            cwd,
            timeout_ms,
            time_from,
            max_output_bytes: tool.limits.max_output_bytes,
            ex: ex.clone(),
            sandbox,
            revisions,
            trace: crate::telemetry::current(),
        };
        let cancel = Arc::new(Cancel::default());
        let _on_drop = CancelOnDrop(Arc::clone(&cancel));
        let runner = Arc::clone(self);
        tokio::spawn(async move {
            let _slot = slot;
            runner.attempts(job, &cancel).await
        })
        .await
        .map_err(|e| ExecError::Setup(format!("the run's task failed: {e}")))?
    }

    /// The attempts of one run (the first, and retries of marked exit codes); for git tools,
    /// each revision is verified first, in the same sandbox.
    async fn attempts(&self, job: Job, cancel: &Cancel) -> Result<Execution, ExecError> {
        let ex = &job.ex;
        let max = usize::try_from(job.max_output_bytes).unwrap_or(usize::MAX);
        let (head, tail) = match ex.truncate.keep {
            Keep::Head => (max, 0),
            Keep::Tail => (0, max),
            Keep::Both => (max / 2, max - max / 2),
        };
        if ex.git.is_some() {
            // `.git` could be anything (an empty directory makes git compare plain files):
            // git itself must agree that this is a work tree.
            let argv = vec!["rev-parse".to_owned(), "--is-inside-work-tree".to_owned()];
            let ran = self.attempt(&job, argv, 10_000, (64, 0), cancel).await?;
            let yes = ran.outcome.as_ref().and_then(|o| o.exit_code) == Some(0)
                && ran.stdout.parts().0.starts_with(b"true");
            if !yes {
                return Err(ExecError::NotAWorkTree);
            }
        }
        for (name, value) in &job.revisions {
            let argv = vec![
                "rev-parse".to_owned(),
                "--verify".to_owned(),
                "--quiet".to_owned(),
                "--end-of-options".to_owned(),
                format!("{value}^{{commit}}"),
            ];
            let ran = self.attempt(&job, argv, 10_000, (0, 0), cancel).await?;
            if ran.outcome.as_ref().and_then(|o| o.exit_code) != Some(0) {
                return Err(ExecError::Revision(name.clone()));
            }
        }
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let ran = self
                .attempt(&job, job.argv.clone(), job.timeout_ms, (head, tail), cancel)
                .await?;
            let code = ran.outcome.as_ref().and_then(|o| o.exit_code);
            let retry = code.is_some_and(|c| ex.retry.exit_codes.contains(&c))
                && attempt <= ex.retry.attempts
                && !cancel.is_cancelled();
            if retry {
                let wait = ex
                    .retry
                    .backoff_ms
                    .saturating_mul(1 << (attempt - 1).min(10));
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(wait)) => {}
                    // Hung up during the backoff: no further attempt.
                    () = cancel.cancelled() => {}
                }
                if !cancel.is_cancelled() {
                    continue;
                }
            }
            return Ok(Execution {
                stdout: output::assemble(&ran.stdout, &ex.truncate),
                bytes: ran.stdout.total,
                stderr: output::clean(ran.stderr.as_bytes()),
                outcome: ran.outcome,
                duration: ran.duration,
                attempts: attempt,
                time_limit: (job.timeout_ms, job.time_from.clone()),
            });
        }
    }

    /// One launch of `job`'s program with `argv`: a fresh scratch directory (owned by the
    /// run's user) and cgroup, removed when the launcher is gone.
    async fn attempt(
        &self,
        job: &Job,
        argv: Vec<String>,
        timeout_ms: u64,
        (head, tail): (usize, usize),
        cancel: &Cancel,
    ) -> Result<run::Ran, ExecError> {
        let ex = &job.ex;
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let (scratch, cg) = self.room(n, &n.to_string(), ex.limits)?;
        let sandbox = job.sandbox.clone().map(|mut sb| {
            sb.write.push(scratch.clone());
            sb
        });
        let spec = LaunchSpec {
            nonce: uuid::Uuid::now_v7().simple().to_string(),
            program: job.program.clone(),
            argv,
            cwd: job.cwd.clone(),
            env: self.env(ex, &scratch, job.trace.as_ref()),
            timeout_ms,
            grace_ms: self.settings.grace_ms,
            rlimits: self.rlimits(timeout_ms, ex.limits),
            sandbox,
            cgroup: cg.as_ref().map(|g| g.pids.clone()),
            memory_cgroup: cg.as_ref().and_then(|g| g.memory.clone()),
            scratch: Some((scratch.clone(), self.scratch_bytes(ex.limits))),
            run_as: self.run_as,
            isolate_network: !ex.access.network && self.settings.network_namespace,
            masks: self.masks.clone(),
            own_pids: self.own_pids,
            probe: false,
            session: false,
        };
        let ran = run::run(&self.launcher, &spec, head, tail, cancel.cancelled()).await;
        // Blocking file-system work (and the cgroup's brief retries): off the workers.
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(group) = cg {
                cgroup::Cgroups::remove_run(&group);
            }
            let _ = std::fs::remove_dir_all(&scratch);
        })
        .await;
        ran.map_err(|e| ExecError::Setup(e.to_string()))
    }

    /// A fresh scratch directory (`name`, owned by the run's user) and, where cgroups can be
    /// made, cgroups `n` bounded to the tool's processes and memory (else `[exec.limits]`).
    fn room(
        &self,
        n: u64,
        name: &str,
        limits: LimitOverrides,
    ) -> Result<(PathBuf, Option<cgroup::RunGroup>), ExecError> {
        let d = self.settings.limits;
        let processes = limits.processes.unwrap_or(d.processes);
        let memory = limits
            .memory_mb
            .unwrap_or(d.memory_mb)
            .saturating_mul(1024 * 1024);
        let scratch = self.scratch.join(name);
        std::fs::create_dir_all(&scratch)
            .map_err(|e| ExecError::Setup(format!("scratch directory: {e}")))?;
        if let Some(who) = self.run_as {
            std::os::unix::fs::chown(&scratch, Some(who.uid), Some(who.gid))
                .map_err(|e| ExecError::Setup(format!("scratch directory: {e}")))?;
        }
        let cg = match &self.cgroups {
            Some(c) => Some(
                c.make(n, processes, memory)
                    .map_err(|e| ExecError::Setup(format!("cgroup: {e}")))?,
            ),
            None => None,
        };
        Ok((scratch, cg))
    }

    /// The size of a run's scratch tmpfs, bytes.
    fn scratch_bytes(&self, limits: LimitOverrides) -> u64 {
        limits
            .scratch_mb
            .unwrap_or(self.settings.limits.scratch_mb)
            .saturating_mul(1024 * 1024)
    }

    /// The program's whole environment: the allowlisted variables from the sidecar's, over
    /// `PATH`, `HOME` and `TMPDIR` defaults (the last two a fresh scratch directory). Git
    /// tools are pinned to the root's own repository: no discovery above it, no system or
    /// global config, no optional locks. The caller's trace context, when there is one, is
    /// `TRACEPARENT` (and `TRACESTATE`), over any allowlisted variables of those names.
    fn env(
        &self,
        ex: &Executor,
        scratch: &Path,
        trace: Option<&crate::telemetry::TraceContext>,
    ) -> Vec<(String, String)> {
        let scratch = scratch.display().to_string();
        let mut env = vec![
            ("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned()),
            ("HOME".to_owned(), scratch.clone()),
            ("TMPDIR".to_owned(), scratch),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ];
        if ex.git.is_some() {
            let root = self.jail.root();
            let ceiling = root.parent().unwrap_or(root);
            for (k, v) in [
                ("GIT_DIR", root.join(".git").display().to_string()),
                ("GIT_WORK_TREE", root.display().to_string()),
                ("GIT_CEILING_DIRECTORIES", ceiling.display().to_string()),
                ("GIT_CONFIG_NOSYSTEM", "1".to_owned()),
                ("GIT_CONFIG_GLOBAL", "/dev/null".to_owned()),
                ("GIT_OPTIONAL_LOCKS", "0".to_owned()),
                ("GIT_NO_REPLACE_OBJECTS", "1".to_owned()),
                ("GIT_TERMINAL_PROMPT", "0".to_owned()),
                ("GIT_ATTR_NOSYSTEM", "1".to_owned()),
                // Programs may run as another user than the repository's owner.
                ("GIT_CONFIG_COUNT", "1".to_owned()),
                ("GIT_CONFIG_KEY_0", "safe.directory".to_owned()),
                ("GIT_CONFIG_VALUE_0", root.display().to_string()),
            ] {
                env.push((k.to_owned(), v));
            }
        }
        for name in &ex.env {
            if name.starts_with("GIT_") && ex.git.is_some() {
                continue;
            }
            if let Ok(v) = std::env::var(name) {
                env.retain(|(k, _)| k != name);
                env.push((name.clone(), v));
            }
        }
        if let Some(t) = trace {
            env.retain(|(k, _)| k != "TRACEPARENT" && k != "TRACESTATE");
            env.push(("TRACEPARENT".to_owned(), t.traceparent.clone()));
            if let Some(state) = &t.tracestate {
                env.push(("TRACESTATE".to_owned(), state.clone()));
            }
        }
        env
    }
}

/// `rel` (a manifest's `sandbox` entry) below `root`, if it is reached without a link: its
/// canonical form must be itself, or, when it does not exist yet, its parent's must be.
/// Anything else is granted nothing.
fn declared(root: &Path, rel: &String) -> Option<PathBuf> {
    if rel == "." {
        return None;
    }
    let p = root.join(rel);
    let exact = |q: &Path| q.canonicalize().is_ok_and(|c| c == q);
    match std::fs::symlink_metadata(&p) {
        Ok(_) => exact(&p).then_some(p),
        Err(_) => p.parent().is_some_and(exact).then_some(p),
    }
}

/// What one call runs, prepared before its task starts.
struct Job {
    program: PathBuf,
    argv: Vec<String>,
    cwd: PathBuf,
    timeout_ms: u64,
    /// The argument that set `timeout_ms`, when one did.
    time_from: Option<String>,
    max_output_bytes: u64,
    ex: Executor,
    sandbox: Option<Sandbox>,
    revisions: Vec<(String, String)>,
    /// The caller's trace context, read before the run's task starts (the task has no span):
    /// the program gets it as `TRACEPARENT` and `TRACESTATE`.
    trace: Option<crate::telemetry::TraceContext>,
}

/// Set when the caller of a run went away.
#[derive(Debug, Default)]
struct Cancel {
    flag: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl Cancel {
    fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Resolves once cancelled.
    async fn cancelled(&self) {
        loop {
            let woken = self.notify.notified();
            if self.is_cancelled() {
                return;
            }
            woken.await;
        }
    }
}

/// Cancels the run when the caller's future is dropped (or done: the run is over by then).
struct CancelOnDrop(Arc<Cancel>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.flag.store(true, Ordering::Release);
        self.0.notify.notify_waiters();
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}
