//! The command line: one file per subcommand. This layer turns library errors into messages
//! and exit codes (0 ok, 1 the check failed, 2 the command could not run).

mod approvals;
mod audit;
mod authorize;
mod client;
mod connect;
mod diff;
mod explain;
mod mcp;
mod redact;
mod schema;
mod serve;
mod test;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::Config;
use crate::policy::LoadError;

/// Cedar-governed gate for LLM agents' tool calls.
#[derive(Debug, Parser)]
#[command(name = "toolgate", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "TOOLGATE_LOG_FORMAT")]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the sidecar.
    Serve(Common),
    /// Run the sidecar with an MCP session on stdio (what an MCP client launches), or
    /// `mcp sync`: write the manifests of the configured MCP upstreams' tools.
    Mcp(mcp::McpArgs),
    /// Add toolgate to an MCP client's config (Claude Desktop, Claude Code, Cursor, VS Code),
    /// keeping its other entries; `--dry-run` shows the diff.
    Connect(connect::ConnectArgs),
    /// Load policies, schema, entities and manifests exactly as `serve` does; report every problem.
    Validate(Common),
    /// Decide one call offline, from a JSON file, as the server would.
    Authorize(authorize::AuthorizeArgs),
    /// Generate the Cedar schema from the tool manifests (or `--check` that it is current).
    Schema(schema::SchemaArgs),
    /// Verify or export the audit log (offline), or query and tail it (online).
    Audit(audit::AuditArgs),
    /// List, show, approve or deny pending calls (online, with a human's token).
    Approvals(approvals::ApprovalsArgs),
    /// Run policy fixtures (expected outcomes of calls) and report failures and coverage.
    Test(test::TestArgs),
    /// Compare two policy directories: per action equal, narrowed, widened or both, with
    /// example calls (proved with cvc5 when installed).
    Diff(diff::DiffArgs),
    /// Explain how the policies decide one call: every policy of its action, satisfied or
    /// not, and who may approve it (asks the sidecar, or `--offline` on the files here).
    Explain(explain::ExplainArgs),
    /// Find and mask secrets and personal data in stdin with the configured detectors
    /// (offline), as the gates do.
    Redact(redact::RedactArgs),
}

/// Options every subcommand shares.
#[derive(Debug, Args, Clone)]
pub struct Common {
    /// Config file (TOML). Without it: ./policies, ./schemas, ./data, 127.0.0.1:8181, no auth.
    #[arg(long, short, env = "TOOLGATE_CONFIG")]
    config: Option<PathBuf>,
    /// Override the policies directory.
    #[arg(long)]
    policies: Option<PathBuf>,
    /// Override the schemas directory.
    #[arg(long)]
    schemas: Option<PathBuf>,
    /// Override `listen` (e.g. `0.0.0.0:8181` in a container).
    #[arg(long, env = "TOOLGATE_LISTEN")]
    listen: Option<String>,
    /// Override `data_dir` (relative to the working directory).
    #[arg(long, env = "TOOLGATE_DATA_DIR")]
    data_dir: Option<PathBuf>,
}

impl Common {
    fn config(&self) -> anyhow::Result<Config> {
        let overrides = crate::config::Overrides {
            listen: self.listen.clone(),
            data_dir: self.data_dir.clone(),
            policies_dir: self.policies.clone(),
            schemas_dir: self.schemas.clone(),
        };
        Config::load(self.config.as_deref(), &overrides).map_err(|e| anyhow::anyhow!(render(&e)))
    }
}

/// Entry point for the binary.
pub fn main() -> ExitCode {
    // The launcher (hidden, internal): started by the sidecar for every tool run.
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(crate::exec::launch::SUBCOMMAND))
    {
        return crate::exec::launch::main();
    }
    let cli = Cli::parse();
    let traces =
        telemetry(&cli.command).and_then(|otel| init_tracing(cli.log_format, otel.as_ref()));
    // Kept to the end: dropping it flushes the spans still queued.
    let _exporter = match traces {
        Ok(exporter) => exporter,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Serve(c) => serve::run(&c),
        Command::Mcp(m) => mcp::run(&m),
        Command::Connect(c) => connect::run(&c),
        Command::Validate(c) => validate::run(&c),
        Command::Authorize(a) => authorize::run(&a),
        Command::Schema(s) => schema::run(&s),
        Command::Audit(a) => audit::run(&a),
        Command::Approvals(a) => approvals::run(&a),
        Command::Test(t) => test::run(&t),
        Command::Diff(d) => diff::run(&d),
        Command::Explain(e) => explain::run(&e),
        Command::Redact(r) => redact::run(&r),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// `[telemetry]` of the config a sidecar-running command (`serve`, `mcp` on stdio) loads;
/// `None` for every other command, which export no traces.
fn telemetry(command: &Command) -> anyhow::Result<Option<crate::telemetry::Settings>> {
    let common = match command {
        Command::Serve(c) => c,
        Command::Mcp(m) => match m.serving() {
            Some(c) => c,
            None => return Ok(None),
        },
        _ => return Ok(None),
    };
    Config::telemetry_only(common.config.as_deref()).map_err(|e| anyhow::anyhow!(render(&e)))
}

/// Logs to stderr (filtered by `RUST_LOG`, default `info,rmcp=warn`), and, when `otel` is
/// set, OpenTelemetry spans to its receiver. The exporter returned must live until the
/// process ends (dropping it flushes what is queued).
fn init_tracing(
    format: LogFormat,
    otel: Option<&crate::telemetry::Settings>,
) -> anyhow::Result<Option<crate::telemetry::Exporter>> {
    use tracing_subscriber::util::SubscriberInitExt as _;
    let (subscriber, exporter) = subscriber(format, otel)?;
    let _ = subscriber.try_init();
    if let Some(settings) = otel {
        tracing::info!(
            endpoint = settings.endpoint,
            protocol = settings.protocol.as_str(),
            sample_ratio = settings.sample_ratio,
            "exporting traces over OTLP"
        );
    }
    Ok(exporter)
}

/// What [`init_tracing`] installs: the log layer, which never sees the trace spans, and the
/// span layer only when `otel` is set, so that with traces off no layer wants those spans
/// and each is disabled where it is opened.
fn subscriber(
    format: LogFormat,
    otel: Option<&crate::telemetry::Settings>,
) -> anyhow::Result<(
    Box<dyn tracing::Subscriber + Send + Sync>,
    Option<crate::telemetry::Exporter>,
)> {
    use tracing_subscriber::filter::{FilterExt as _, filter_fn};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::{EnvFilter, Layer as _, Registry};
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn"));
    // Colour only for a terminal: log files and collectors get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let logs: Box<dyn tracing_subscriber::Layer<Registry> + Send + Sync> = match format {
        LogFormat::Text => logs.boxed(),
        LogFormat::Json => logs.json().boxed(),
    };
    let logs = logs.with_filter(filter.and(filter_fn(|m| !crate::telemetry::is_ours(m))));
    let Some(settings) = otel else {
        return Ok((Box::new(tracing_subscriber::registry().with(logs)), None));
    };
    let (spans, exporter) = crate::telemetry::install(settings)?;
    Ok((
        Box::new(tracing_subscriber::registry().with(logs).with(spans)),
        Some(exporter),
    ))
}

/// Renders a diagnostic for a terminal, with source snippets where there are some.
pub(crate) fn render(diag: &dyn miette::Diagnostic) -> String {
    let mut out = String::new();
    let handler =
        miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode_nocolor());
    if handler.render_report(&mut out, diag).is_err() {
        return diag.to_string();
    }
    out
}

/// Loads `sources` as `serve` would, or prints every problem (the caller exits 1).
pub(crate) fn load_or_report(sources: &crate::policy::Sources) -> Option<crate::policy::Snapshot> {
    match crate::policy::load(sources) {
        Ok(l) => Some(l.snapshot),
        Err(e) => {
            report_load_error(&e);
            None
        }
    }
}

/// Prints every problem of a failed load to stderr.
pub(crate) fn report_load_error(err: &LoadError) {
    for p in &err.problems {
        eprintln!("{}", render(p));
    }
    eprintln!("{err}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_traces_off_the_trace_spans_are_disabled_where_they_are_opened() {
        for format in [LogFormat::Text, LogFormat::Json] {
            let (subscriber, exporter) = subscriber(format, None).unwrap();
            assert!(exporter.is_none());
            tracing::subscriber::with_default(subscriber, || {
                let root = crate::telemetry::spans::request("toolgate.authorize");
                let _in = root.enter();
                assert!(root.is_disabled());
                assert!(crate::telemetry::spans::stage("policy").is_disabled());
                assert!(crate::telemetry::spans::guardrail("tool_call").is_disabled());
                assert_eq!(crate::telemetry::current(), None);
                // Log lines are as they were: an event is still enabled.
                assert!(tracing::enabled!(tracing::Level::ERROR));
            });
        }
    }
}
