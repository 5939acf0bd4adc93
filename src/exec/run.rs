//! The sidecar's side of one run: starts the launcher, hands it the spec, reads the tool's
//! output while it streams (keeping at most the configured head and tail, counting the rest),
//! and reads the launcher's outcome line. Memory per run is bounded by the caps, whatever the
//! tool writes.

use std::collections::VecDeque;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::launch::{LaunchSpec, Outcome, SUBCOMMAND};

/// Bytes of stderr kept (its tail: where errors and the outcome line are).
const STDERR_KEEP: usize = 16 * 1024;
/// Extra time the launcher gets past the deadline and grace period before it is killed too.
const LAUNCHER_SLACK: Duration = Duration::from_secs(5);

/// Bytes kept from a stream: the first `head` and the last `tail`, and how many there were.
#[derive(Debug, Default)]
pub struct Capture {
    head: Vec<u8>,
    head_cap: usize,
    tail: VecDeque<u8>,
    tail_cap: usize,
    /// Bytes the stream carried in all.
    pub total: u64,
}

impl Capture {
    /// Keeps up to `head` leading and `tail` trailing bytes.
    pub fn new(head: usize, tail: usize) -> Self {
        Capture {
            head: Vec::with_capacity(head.min(64 * 1024)),
            head_cap: head,
            tail: VecDeque::with_capacity(tail.min(64 * 1024)),
            tail_cap: tail,
            total: 0,
        }
    }

    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.head_cap.saturating_sub(self.head.len());
        if room > 0 {
            let (now, rest) = bytes.split_at(room.min(bytes.len()));
            self.head.extend_from_slice(now);
            bytes = rest;
        }
        if self.tail_cap == 0 || bytes.is_empty() {
            return;
        }
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            let from = bytes.len() - self.tail_cap;
            self.tail.extend(bytes.get(from..).unwrap_or_default());
            return;
        }
        let over = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..over.min(self.tail.len()));
        self.tail.extend(bytes);
    }

    /// Whether bytes were dropped between head and tail.
    pub fn cut(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// The kept head and tail.
    pub fn parts(&self) -> (&[u8], Vec<u8>) {
        (&self.head, self.tail.iter().copied().collect())
    }
}

/// What a run produced.
#[derive(Debug)]
pub struct Ran {
    /// Standard output, capped.
    pub stdout: Capture,
    /// The tail of standard error, without the outcome line.
    pub stderr: String,
    /// The launcher's report (`None`: the launcher died without one).
    pub outcome: Option<Outcome>,
    /// Wall-clock time.
    pub duration: Duration,
}

/// Why a run could not even start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The launcher (this binary) could not be started.
    #[error("cannot start the launcher `{path}`: {source}")]
    Launcher {
        /// The launcher binary.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// The launcher at `launcher`, as every run and session starts it: a cleared environment,
/// the three pipes, a process group of its own.
pub(super) fn launcher_command(launcher: &Path) -> Command {
    let mut c = Command::new(launcher);
    c.arg(SUBCOMMAND)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // Never killed on drop: a SIGKILLed launcher cannot clean up. Closing its stdin is
        // what tells it to stop, and it then ends the run itself.
        .kill_on_drop(false);
    c
}

/// Runs `spec` under the launcher at `launcher`, keeping `head`/`tail` bytes of stdout. When
/// `cancel` resolves, the spec pipe is closed, which tells the launcher to stop the run; its
/// outcome is still awaited, so the run is over (every process reaped) when this returns.
pub async fn run(
    launcher: &Path,
    spec: &LaunchSpec,
    head: usize,
    tail: usize,
    cancel: impl std::future::Future<Output = ()>,
) -> Result<Ran, RunError> {
    let started = Instant::now();
    let mut child = launcher_command(launcher)
        .spawn()
        .map_err(|source| RunError::Launcher {
            path: launcher.display().to_string(),
            source,
        })?;
    let mut stdin = child.stdin.take();
    if let Some(pipe) = stdin.as_mut() {
        let mut line = serde_json::to_vec(spec).unwrap_or_default();
        line.push(b'\n');
        // A launcher that died at once is reported through its missing outcome.
        let _ = pipe.write_all(&line).await;
        let _ = pipe.flush().await;
    }
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let limit =
        Duration::from_millis(spec.timeout_ms.saturating_add(spec.grace_ms)) + LAUNCHER_SLACK;
    let reading = async {
        let out = drain(stdout, Capture::new(head, tail));
        let err = drain(stderr, Capture::new(0, STDERR_KEEP));
        let (out, err) = tokio::join!(out, err);
        let _ = child.wait().await;
        (out, err)
    };
    let until_done = async {
        let mut cancel = std::pin::pin!(cancel);
        let mut reading = std::pin::pin!(reading);
        loop {
            tokio::select! {
                done = &mut reading => break done,
                () = &mut cancel, if stdin.is_some() => {
                    // Closing the pipe means "stop": the launcher ends the run and reports.
                    stdin = None;
                }
            }
        }
    };
    let (out, err) = match tokio::time::timeout(limit, until_done).await {
        Ok(done) => done,
        Err(_) => {
            tracing::error!("launcher overran its deadline; killing it");
            let _ = child.start_kill();
            let _ = child.wait().await;
            (Capture::new(0, 0), Capture::new(0, 0))
        }
    };
    // Keep the pipe open until the launcher is done: closing it means "stop".
    drop(stdin);
    let (_, tail_bytes) = err.parts();
    let (stderr, outcome) = split_outcome(&tail_bytes, &spec.nonce);
    Ok(Ran {
        stdout: out,
        stderr,
        outcome,
        duration: started.elapsed(),
    })
}

async fn drain<R: AsyncRead + Unpin>(pipe: Option<R>, mut cap: Capture) -> Capture {
    let Some(mut pipe) = pipe else {
        return cap;
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return cap,
            Ok(n) => cap.push(buf.get(..n).unwrap_or_default()),
        }
    }
}

/// Splits the launcher's outcome line (the last line starting with the nonce) off stderr.
fn split_outcome(stderr: &[u8], nonce: &str) -> (String, Option<Outcome>) {
    let text = String::from_utf8_lossy(stderr);
    let marker = format!("\n{nonce} ");
    match text.rfind(&marker) {
        Some(at) => {
            let line = text.get(at + marker.len()..).unwrap_or("").trim_end();
            let outcome = serde_json::from_str(line).ok();
            (text.get(..at).unwrap_or("").to_owned(), outcome)
        }
        None => (text.into_owned(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_keeps_head_and_tail_and_counts_everything() {
        let mut c = Capture::new(4, 3);
        for chunk in [&b"ab"[..], b"cdef", b"ghij", b"k"] {
            c.push(chunk);
        }
        let (head, tail) = c.parts();
        assert_eq!(head, b"abcd");
        assert_eq!(tail, b"ijk");
        assert_eq!(c.total, 11);
        assert_eq!(c.cut(), 4);
        let mut c = Capture::new(0, 3);
        c.push(b"0123456789");
        assert_eq!(c.parts().1, b"789");
    }

    #[test]
    fn the_outcome_is_the_last_nonce_line() {
        let (rest, o) = split_outcome(
            b"oops\nN {\"exit_code\":9}\nmore\nN {\"exit_code\":3,\"landlock\":\"full\"}\n",
            "N",
        );
        assert_eq!(o.map(|o| o.exit_code), Some(Some(3)));
        assert_eq!(rest, "oops\nN {\"exit_code\":9}\nmore");
    }
}
