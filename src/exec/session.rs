//! Long-lived sandboxed programs spoken to over stdin and stdout (stdio MCP upstreams): the
//! same launcher, Landlock plan, rlimits, pids cgroup, user and network namespace as a tool
//! run, with no deadline. Ending the session is closing its stdin; the launcher then stops
//! the program (end of file, then TERM and KILL after the grace period) and reports.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};

use super::launch::LaunchSpec;
use super::{ExecError, Runner, cgroup};
use crate::tools::{Access, LimitOverrides};

/// What a session runs.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    /// Absolute path of the program.
    pub program: PathBuf,
    /// Arguments after the program name.
    pub argv: Vec<String>,
    /// Working directory, below the service root (`.`: the root).
    pub cwd: String,
    /// Extra environment (over `PATH`, `HOME`, `TMPDIR` and `LANG`).
    pub env: Vec<(String, String)>,
    /// What it may reach beyond reading the root: writes, deny-listed reads, the network.
    pub access: Access,
    /// Resource limits over `[exec.limits]` (CPU time is unlimited unless set).
    pub limits: LimitOverrides,
}

/// A running session: the launcher's pipes. Dropping it ends the session.
#[derive(Debug)]
pub struct Session {
    /// The launcher (and, under it, the program).
    pub child: Child,
    /// The program's stdin.
    pub stdin: ChildStdin,
    /// The program's stdout.
    pub stdout: ChildStdout,
    /// The program's stderr; its last line is the launcher's outcome, after `nonce`.
    pub stderr: ChildStderr,
    /// Marks the launcher's outcome line on stderr.
    pub nonce: String,
    /// Removes the session's cgroup and scratch directory when dropped.
    pub cleanup: Cleanup,
}

/// A session's cgroup and scratch directory, removed when the session is over.
#[derive(Debug)]
pub struct Cleanup {
    cgroup: Option<super::cgroup::RunGroup>,
    scratch: PathBuf,
}

impl Cleanup {
    /// Removes the cgroup and the scratch directory now (the launcher has exited).
    pub async fn now(mut self) {
        let cg = self.cgroup.take();
        let scratch = std::mem::take(&mut self.scratch);
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(group) = cg {
                cgroup::Cgroups::remove_run(&group);
            }
            let _ = std::fs::remove_dir_all(&scratch);
        })
        .await;
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let cg = self.cgroup.take();
        let scratch = std::mem::take(&mut self.scratch);
        if cg.is_none() && scratch.as_os_str().is_empty() {
            return;
        }
        std::thread::spawn(move || {
            // The launcher may still be stopping the program: let it finish first.
            std::thread::sleep(std::time::Duration::from_secs(5));
            if let Some(group) = cg {
                cgroup::Cgroups::remove_run(&group);
            }
            let _ = std::fs::remove_dir_all(&scratch);
        });
    }
}

impl Runner {
    /// Starts `spec`'s program under the launcher, sandboxed as a tool run is.
    pub async fn session(self: &Arc<Self>, spec: SessionSpec) -> Result<Session, ExecError> {
        if let Some(e) = &self.protections.error {
            return Err(ExecError::Setup(e.clone()));
        }
        let cwd = self
            .jail
            .locate(&spec.cwd)
            .map_err(|e| ExecError::Setup(format!("working directory `{}`: {e}", spec.cwd)))?;
        let sandbox = self.plan(&spec.access).await?;
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let (scratch, cg) = self.room(n, &format!("session-{n}"), spec.limits)?;
        let cleanup = Cleanup {
            cgroup: cg.clone(),
            scratch: scratch.clone(),
        };
        let sandbox = sandbox.map(|mut sb| {
            sb.write.push(scratch.clone());
            sb
        });
        let scratch_text = scratch.display().to_string();
        let mut env = vec![
            ("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned()),
            ("HOME".to_owned(), scratch_text.clone()),
            ("TMPDIR".to_owned(), scratch_text),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ];
        for (k, v) in &spec.env {
            env.retain(|(have, _)| have != k);
            env.push((k.clone(), v.clone()));
        }
        let mut rlimits = self.rlimits(0, spec.limits);
        if spec.limits.cpu_secs.is_none() && self.settings.limits.cpu_secs.is_none() {
            rlimits.cpu_secs = u64::MAX;
        }
        let launch = LaunchSpec {
            nonce: uuid::Uuid::now_v7().simple().to_string(),
            program: spec.program.clone(),
            argv: spec.argv.clone(),
            cwd,
            env,
            timeout_ms: u64::MAX,
            grace_ms: self.settings.grace_ms,
            rlimits,
            sandbox,
            cgroup: cg.as_ref().map(|g| g.pids.clone()),
            memory_cgroup: cg.as_ref().and_then(|g| g.memory.clone()),
            scratch: Some((scratch.clone(), self.scratch_bytes(spec.limits))),
            run_as: self.run_as,
            isolate_network: !spec.access.network && self.settings.network_namespace,
            masks: self.masks.clone(),
            own_pids: self.own_pids,
            probe: false,
            session: true,
        };
        let mut child = super::run::launcher_command(&self.launcher)
            .spawn()
            .map_err(|e| ExecError::Setup(format!("cannot start the launcher: {e}")))?;
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(ExecError::Setup(
                "the launcher's pipes are missing".to_owned(),
            ));
        };
        let mut line = serde_json::to_vec(&launch)
            .map_err(|e| ExecError::Setup(format!("the launch spec: {e}")))?;
        line.push(b'\n');
        stdin
            .write_all(&line)
            .await
            .map_err(|e| ExecError::Setup(format!("the launcher did not take its spec: {e}")))?;
        Ok(Session {
            child,
            stdin,
            stdout,
            stderr,
            nonce: launch.nonce,
            cleanup,
        })
    }
}
