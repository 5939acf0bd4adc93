//! `POST /v1/execute`: the sidecar runs the tool itself. Same body as `/v1/authorize`; the
//! call is decided on the same path (and recorded), then:
//! - deny: 403 with the decision;
//! - pending approval: 202 with the approval id (re-send the call with it once approved);
//! - allow: the arguments (masked ones under `apply_mask`) are rendered into the argv, the
//!   program runs under the launcher, its output is parsed, checked against the
//!   `outputSchema`, filtered, screened by the output gate and capped, the run is recorded
//!   (kind `execution`, with its resource usage), and a standard result is answered.
//!
//! Refusals before the decision (execution off, a tool without executor or program) change
//! nothing and record nothing: no decision was made.

use serde_json::Value;
use tracing::Instrument as _;

use super::body::{ExecAnswer, ExecFailure, Metadata, Progress, RawCall};
use super::decide::{Credential, caller, decide_for, record_or_refuse};
use super::error::Refusal;
use super::output::{MARKER_ROOM, outcome_on_record, screen_output};
use super::{Error, Gateway};
use crate::audit::{Event, ExecutionEvent};
use crate::authz::Outcome;
use crate::codes::Code;
use crate::exec::{ExecError, Execution};
use crate::telemetry::spans;
use crate::tools::RenderError;

/// Largest piece of stderr answered.
const STDERR_ANSWERED: usize = 4096;

fn unavailable(code: Code, message: String, suggestion: &str) -> Error {
    Error::Execution(
        Refusal::Unavailable,
        Box::new(ExecAnswer::refused(
            String::new(),
            code,
            message,
            suggestion,
        )),
    )
}

/// How toolgate runs a tool.
#[derive(Debug, Clone, Copy)]
enum Run<'a> {
    /// A program, under the launcher.
    Program(&'a crate::tools::Executor),
    /// A built-in file tool, in process.
    Builtin(crate::tools::Builtin),
    /// A tool of an MCP upstream, forwarded.
    Mcp(&'a crate::tools::McpBinding),
}

/// How toolgate runs the tool, or why it cannot: no executor (409), or its program is not
/// installed on this machine (503).
fn runnable(tool: &crate::tools::Tool) -> Result<Run<'_>, Error> {
    if let Some(builtin) = tool.builtin {
        return Ok(Run::Builtin(builtin));
    }
    if let Some(b) = &tool.mcp {
        return Ok(Run::Mcp(b));
    }
    match &tool.executor {
        None => Err(Error::Execution(
            Refusal::NotExecutable,
            Box::new(ExecAnswer::refused(
                String::new(),
                Code::NotExecutable,
                format!("`{}` has no executor: toolgate does not run it", tool.name),
                "authorize it with /v1/authorize, run it yourself, report the output to /v1/results",
            )),
        )),
        Some(ex) if ex.program.path.is_none() => Err(unavailable(
            Code::ProgramMissing,
            format!("`{}` is not installed on this machine", ex.program.written),
            "operators: install it (or give its absolute path in the manifest)",
        )),
        Some(ex) => Ok(Run::Program(ex)),
    }
}

/// Decides `raw` and, when allowed, runs the tool (`POST /v1/execute`).
/// The caller is checked first: an unknown caller gets the decision path's 401 (recorded),
/// whatever its body says; then a body that cannot be read is refused.
pub async fn execute(
    state: &Gateway,
    credential: Credential<'_>,
    body: Result<RawCall, Error>,
) -> Result<(Progress, ExecAnswer), Error> {
    let known = caller(state, credential).await?;
    execute_for(state, known, body, crate::upstream::CallHooks::default()).await
}

/// [`execute`] for a caller [`caller`] knows; an MCP upstream's progress and the caller's
/// cancellation go through `hooks`.
pub async fn execute_for(
    state: &Gateway,
    known: super::decide::Caller,
    body: Result<RawCall, Error>,
    hooks: crate::upstream::CallHooks,
) -> Result<(Progress, ExecAnswer), Error> {
    // The metrics label: a registered tool's name, never a caller's free text.
    let tool = body.as_ref().ok().map_or_else(
        || crate::metrics::UNREGISTERED.to_owned(),
        |raw| {
            let name = raw.tool_name();
            if state.policy.current().tools.contains_key(name) {
                name.to_owned()
            } else {
                crate::metrics::UNREGISTERED.to_owned()
            }
        },
    );
    let result = run_call(state, known, body, hooks).await;
    count_run(state, &tool, &result);
    result
}

/// Counts what became of a run for `/metrics` (decisions that stopped it are counted as
/// decisions, not here).
fn count_run(state: &Gateway, tool: &str, result: &Result<(Progress, ExecAnswer), Error>) {
    match result {
        Ok((_, answer)) if answer.status != "pending" => {
            let m = &answer.metadata;
            let ended = if m.timed_out {
                "timeout"
            } else if m.memory_exceeded {
                "memory"
            } else if m.signal.is_some() {
                "signal"
            } else if answer.status == "success" {
                "success"
            } else if m.exit_code.is_some_and(|c| c != 0) {
                "exit_nonzero"
            } else {
                "error"
            };
            let took = m.duration_ms.map(std::time::Duration::from_millis);
            state.metrics.tool_run(tool, ended, took, m.truncated);
        }
        Err(Error::Execution(refusal, answer)) if *refusal != Refusal::Denied => {
            let code = answer.error.as_ref().map_or(refusal.code(), |e| e.code);
            state.metrics.tool_refused(tool, code.as_str());
        }
        _ => {}
    }
}

async fn run_call(
    state: &Gateway,
    known: super::decide::Caller,
    body: Result<RawCall, Error>,
    hooks: crate::upstream::CallHooks,
) -> Result<(Progress, ExecAnswer), Error> {
    let raw = body?;
    // Refused before deciding (nothing to record): a tool toolgate cannot run here. An
    // unknown tool goes on to the registry deny.
    let forwarded = match state.policy.current().tools.get(raw.tool_name()) {
        Some(tool) => matches!(runnable(tool)?, Run::Mcp(_)),
        None => false,
    };
    let runner = match (state.exec.clone(), forwarded) {
        (Some(r), _) => Some(r),
        (None, true) => None,
        (None, false) => {
            return Err(unavailable(
                Code::ExecutionOff,
                "this sidecar does not run tools".to_owned(),
                "operators: set `[exec] root` in the config; agents: run the tool yourself and report it to /v1/results",
            ));
        }
    };
    let decided = decide_for(state, known, Ok(raw)).await?;
    let mut body = decided.body;
    let decision_id = body.decision_id.clone();
    match body.decision {
        Outcome::Allow => {}
        Outcome::PendingApproval => {
            let answer = ExecAnswer {
                status: "pending",
                approval_id: body.approval_id.clone(),
                metadata: Metadata {
                    decision_id,
                    ..Metadata::default()
                },
                data: Value::Null,
                error: None,
                decision: Some(body),
                output: None,
                stderr: String::new(),
            };
            return Ok((Progress::Pending, answer));
        }
        Outcome::Deny => {
            let (code, message, suggestion) = body
                .errors
                .first()
                .map(|a| (a.code, a.message.clone(), a.suggestion.clone()))
                .unwrap_or((
                    Code::Denied,
                    "the call was denied".to_owned(),
                    String::new(),
                ));
            let mut answer = ExecAnswer::refused(decision_id, code, message, &suggestion);
            answer.decision = Some(body);
            return Err(Error::Execution(Refusal::Denied, Box::new(answer)));
        }
    }
    let Some(call) = decided.call else {
        return Err(unavailable(
            Code::ExecutionFailed,
            "the allowed call was not available to run".to_owned(),
            "retry the call",
        ));
    };
    // The snapshot the call was decided under: an allow names a registered tool in it.
    let snap = decided.snap;
    let Some(tool) = snap.tools.get(&call.tool) else {
        return Err(unavailable(
            Code::ExecutionFailed,
            "the allowed tool is not in the policy snapshot".to_owned(),
            "retry the call",
        ));
    };
    let how = runnable(tool)?;
    // Execution receives what the policy allowed: the masked arguments under `apply_mask`.
    let args = body.arguments.take().unwrap_or(call.args);
    let execution_id = uuid::Uuid::now_v7().to_string();
    let mut entry = ExecutionEvent {
        id: execution_id.clone(),
        at_ms: crate::clock::now_ms(),
        tool: tool.name.clone(),
        risk: tool.risk.as_str().to_owned(),
        revision: snap.revision.clone(),
        principal: decided.principal,
        otel_trace_id: crate::telemetry::current().map(|t| t.trace_id),
        ..ExecutionEvent::default()
    };
    let runner = match (how, runner) {
        (Run::Mcp(b), _) => {
            let ids = (decision_id, execution_id);
            return super::mcp::run_mcp(state, tool, b, args, ids, entry, hooks).await;
        }
        (_, Some(runner)) => runner,
        (_, None) => {
            return Err(unavailable(
                Code::ExecutionOff,
                "this sidecar does not run tools".to_owned(),
                "operators: set `[exec] root` in the config",
            ));
        }
    };
    let ex = match how {
        Run::Program(ex) => ex,
        Run::Mcp(_) => {
            return Err(unavailable(
                Code::ExecutionFailed,
                "internal: an MCP tool reached the program runner".to_owned(),
                "report a bug",
            ));
        }
        Run::Builtin(builtin) => {
            let run = BuiltinRun {
                tool,
                builtin,
                decision_id,
                execution_id,
            };
            return run_builtin(state, &runner, run, args, entry).await;
        }
    };
    let exec_span = spans::stage("execution");
    let run = runner
        .execute(tool, ex, &args)
        .instrument(exec_span.clone())
        .await;
    let ran = match run {
        Ok(ran) => {
            spans::exit_code(&exec_span, ran.outcome.as_ref().and_then(|o| o.exit_code));
            ran
        }
        Err(e) => {
            let (refusal, code, suggestion) = match &e {
                ExecError::Render(RenderError::Path { .. }) => (
                    Refusal::Arguments,
                    Code::PathDenied,
                    "name a file below the service root that is not deny-listed",
                ),
                ExecError::Render(RenderError::OptionLike(_)) => (
                    Refusal::Arguments,
                    Code::OptionInjection,
                    "values may not start with `-`; prefix a path with `./`",
                ),
                ExecError::Render(RenderError::Nul(_)) => (
                    Refusal::Arguments,
                    Code::InvalidArgument,
                    "remove NUL bytes from the arguments",
                ),
                ExecError::Revision(_) => (
                    Refusal::Arguments,
                    Code::InvalidRevision,
                    "name a commit of this repository (a branch, a tag, a hash, `HEAD~1`); ranges are not revisions",
                ),
                ExecError::NotAWorkTree => (
                    Refusal::Unavailable,
                    Code::NotAWorkTree,
                    "operators: git tools need `[exec] root` to be the top of a git work tree",
                ),
                ExecError::Busy => (
                    Refusal::Busy,
                    Code::ExecutionsBusy,
                    "retry shortly; operators: `[exec] max_concurrent`",
                ),
                ExecError::ProgramMissing(_) | ExecError::Setup(_) => (
                    Refusal::Unavailable,
                    Code::ExecutionFailed,
                    "operators: see /readyz `execution` and the logs",
                ),
            };
            spans::failed(&exec_span, code.as_str());
            entry.outcome = "refused".to_owned();
            entry.reasons = vec![code.to_string()];
            entry.detail = Some(format!("decision_id={decision_id}"));
            record_or_refuse(state, Event::Execution(entry).into(), "execution").await?;
            let mut answer = ExecAnswer::refused(decision_id, code, e.to_string(), suggestion);
            answer.metadata.execution_id = Some(execution_id);
            return Err(Error::Execution(refusal, Box::new(answer)));
        }
    };
    let answer = finish(state, tool, ex, ran, decision_id, execution_id, &mut entry).await?;
    record_or_refuse(state, Event::Execution(entry).into(), "execution").await?;
    Ok((Progress::Done, answer))
}

/// A built-in tool's call, allowed.
struct BuiltinRun<'a> {
    tool: &'a crate::tools::Tool,
    builtin: crate::tools::Builtin,
    decision_id: String,
    execution_id: String,
}

/// Runs a built-in file tool, screens its result like any tool's output and records it. A
/// path the jail refuses is 422 (nothing ran); every other outcome is a standard result.
async fn run_builtin(
    state: &Gateway,
    runner: &std::sync::Arc<crate::exec::Runner>,
    run: BuiltinRun<'_>,
    args: Value,
    mut entry: ExecutionEvent,
) -> Result<(Progress, ExecAnswer), Error> {
    let BuiltinRun {
        tool,
        builtin,
        decision_id,
        execution_id,
    } = run;
    let started = std::time::Instant::now();
    let span = spans::stage("execution");
    let ran = runner
        .files(builtin, args, &tool.limits)
        .instrument(span.clone())
        .await;
    if let Err(e) = &ran {
        spans::failed(&span, e.code().as_str());
    }
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let metadata = Metadata {
        decision_id: decision_id.clone(),
        execution_id: Some(execution_id),
        duration_ms: Some(duration_ms),
        attempts: 1,
        ..Metadata::default()
    };
    let detail = format!("decision_id={decision_id} duration_ms={duration_ms}");
    let data = match ran {
        Ok(data) => data,
        Err(e) => {
            let refused = matches!(e, crate::files::FileError::PathDenied { .. });
            entry.outcome = if refused { "refused" } else { "error" }.to_owned();
            entry.reasons = vec![e.code().to_string()];
            entry.detail = Some(detail);
            record_or_refuse(state, Event::Execution(entry).into(), "execution").await?;
            let mut answer =
                ExecAnswer::refused(decision_id, e.code(), e.to_string(), &e.suggestion());
            answer.metadata = metadata;
            return if refused {
                Err(Error::Execution(Refusal::Arguments, Box::new(answer)))
            } else {
                Ok((Progress::Done, answer))
            };
        }
    };
    super::remember_output(state, &decision_id, &entry.principal, &data).await;
    let cap = usize::try_from(tool.limits.max_output_bytes).unwrap_or(usize::MAX);
    let schema_errors = tool.check_output(&data);
    let fields = tool.output_fields.clone();
    let (verdict, _) = screen_output(
        state,
        (&decision_id, &entry.principal),
        data,
        schema_errors,
        fields,
        cap,
        None,
    )
    .await?;
    let status = outcome_on_record(&mut entry, verdict.failure.as_ref(), &verdict.report);
    entry.detail = Some(detail);
    record_or_refuse(state, Event::Execution(entry).into(), "execution").await?;
    Ok((
        Progress::Done,
        ExecAnswer::screened(status, verdict, metadata),
    ))
}

/// Parses and screens a run's output, and fills in its audit record.
async fn finish(
    state: &Gateway,
    tool: &crate::tools::Tool,
    ex: &crate::tools::Executor,
    ran: Execution,
    decision_id: String,
    execution_id: String,
    entry: &mut ExecutionEvent,
) -> Result<ExecAnswer, Error> {
    let outcome = ran.outcome.clone().unwrap_or_default();
    let mut failure = run_failure(&ran, tool.limits.timeout_ms);
    let parsed = crate::exec::parse(ex.parser, &ran.stdout);
    // What the program printed is tool output of the call's conversation (provenance).
    let printed = match &parsed {
        Ok(v) => v.clone(),
        Err(_) => Value::String(ran.stdout.text.clone()),
    };
    super::remember_output(state, &decision_id, &entry.principal, &printed).await;
    // The run's output is already cut to `max_output_bytes`; room for the marker it carries.
    let cap = usize::try_from(tool.limits.max_output_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(MARKER_ROOM);
    // Unparsable output is a failure and screens as nothing; stderr is screened either way.
    let (value, schema_errors, fields) = match parsed {
        Ok(value) => {
            let errors = tool.check_output(&value);
            (value, errors, tool.output_fields.clone())
        }
        Err(e) => {
            failure.get_or_insert(ExecFailure {
                code: Code::OutputUnparsable,
                message: e.to_string(),
                suggestion: "the tool's output did not match its parser; see stderr".to_owned(),
            });
            (Value::Null, Vec::new(), None)
        }
    };
    let stderr = Some(tail(&ran.stderr, STDERR_ANSWERED).to_owned());
    let (mut verdict, stderr) = screen_output(
        state,
        (&decision_id, &entry.principal),
        value,
        schema_errors,
        fields,
        cap,
        stderr,
    )
    .await?;
    failure = failure.or(verdict.failure.take());
    let metadata = Metadata {
        decision_id: decision_id.clone(),
        execution_id: Some(execution_id),
        duration_ms: Some(u64::try_from(ran.duration.as_millis()).unwrap_or(u64::MAX)),
        exit_code: outcome.exit_code,
        signal: outcome.signal,
        timed_out: outcome.timed_out,
        truncated: ran.stdout.truncated || verdict.truncated,
        bytes: ran.bytes,
        cpu_ms: ran.outcome.as_ref().map(|o| o.cpu_ms),
        max_rss_bytes: ran.outcome.as_ref().map(|o| o.max_rss_bytes),
        memory_exceeded: outcome.memory_exceeded,
        memory_peak_bytes: outcome.memory_peak_bytes,
        attempts: ran.attempts,
        landlock: outcome.landlock.clone(),
    };
    let status = outcome_on_record(entry, failure.as_ref(), &verdict.report);
    entry.detail = Some(format!(
        "decision_id={decision_id} exit_code={} signal={} timed_out={} duration_ms={} cpu_ms={} max_rss_bytes={} memory_peak_bytes={} memory_exceeded={} bytes={} truncated={} attempts={} stragglers={} landlock={}",
        opt(metadata.exit_code),
        opt(metadata.signal),
        metadata.timed_out,
        opt(metadata.duration_ms),
        opt(metadata.cpu_ms),
        opt(metadata.max_rss_bytes),
        opt(metadata.memory_peak_bytes),
        metadata.memory_exceeded,
        metadata.bytes,
        metadata.truncated,
        metadata.attempts,
        outcome.stragglers,
        if metadata.landlock.is_empty() {
            "-"
        } else {
            &metadata.landlock
        },
    ));
    Ok(ExecAnswer {
        status,
        data: verdict.data,
        error: failure,
        metadata,
        approval_id: None,
        decision: None,
        output: Some(verdict.report),
        stderr,
    })
}

/// The run's own failure, if any: no report, timeout, a signal, a non-zero exit.
fn run_failure(ran: &Execution, manifest_ms: u64) -> Option<ExecFailure> {
    let fail = |code: Code, message: String, suggestion: &str| {
        Some(ExecFailure {
            code,
            message,
            suggestion: suggestion.to_owned(),
        })
    };
    let (timeout_ms, time_from) = &ran.time_limit;
    let Some(o) = &ran.outcome else {
        return fail(
            Code::LauncherFailed,
            "the launcher ended without a report".to_owned(),
            "operators: see the sidecar's logs",
        );
    };
    if let Some(e) = &o.error {
        return fail(
            Code::LaunchFailed,
            e.clone(),
            "operators: see /readyz `execution`",
        );
    }
    if o.timed_out {
        return fail(
            Code::Timeout,
            format!(
                "stopped after {timeout_ms} ms, the limit {}{}",
                match time_from {
                    Some(arg) => format!("its `{arg}` argument asked for"),
                    None => "of the manifest's `limits.timeout_ms`".to_owned(),
                },
                if o.killed {
                    " (killed: it ignored SIGTERM)"
                } else {
                    ""
                }
            ),
            &match time_from {
                Some(arg) => format!(
                    "ask for less work, or a larger `{arg}` (up to the manifest's {manifest_ms} ms)"
                ),
                None => {
                    "ask for less work, or raise `limits.timeout_ms` in the manifest".to_owned()
                }
            },
        );
    }
    if o.memory_exceeded {
        return fail(
            Code::Killed,
            "stopped: its processes together passed the run's memory limit".to_owned(),
            "ask for less work, or raise `limits.memory_mb` in the manifest (or `[exec.limits] memory_mb`)",
        );
    }
    if let Some(sig) = o.signal {
        return fail(
            Code::Killed,
            format!("ended by signal {sig} (a resource limit, or killed)"),
            "the tool hit a limit; see `[exec.limits]`",
        );
    }
    match o.exit_code {
        Some(0) => None,
        Some(code) => fail(
            Code::ExitNonzero,
            format!("exited with code {code}"),
            "read `data` and `stderr` for why",
        ),
        None => fail(
            Code::LauncherFailed,
            "no exit status".to_owned(),
            "operators: see the sidecar's logs",
        ),
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// The last `max` bytes of `s`, at a character boundary.
fn tail(s: &str, max: usize) -> &str {
    s.get(s.ceil_char_boundary(s.len().saturating_sub(max))..)
        .unwrap_or("")
}
