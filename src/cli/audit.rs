//! `toolgate audit verify|export` (offline, on a data directory the sidecar is not holding)
//! and `toolgate audit query|tail` (online, through a running sidecar's API).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::Value;

use super::client::{Client, Remote, encode, field};
use crate::audit::{Chain, ChainVerdict, Head, verify};
use crate::config::Config;
use crate::storage::Stores;

/// Arguments of `toolgate audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    command: AuditCommand,
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Walk the hash chain of a data directory and name the first broken link (exit 1).
    Verify {
        #[command(flatten)]
        data: DataDir,
        /// A head exported earlier (the JSON of `GET /v1/audit/head`): the log must still
        /// reach it with the same hash, so a truncated tail is caught too.
        #[arg(long)]
        head: Option<PathBuf>,
    },
    /// Write the records of a data directory as JSON lines, oldest first.
    Export {
        #[command(flatten)]
        data: DataDir,
        /// First sequence number to export.
        #[arg(long, default_value_t = 1)]
        from: u64,
        /// Output file (default: standard output).
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
    /// Records matching filters, newest first, as JSON lines (from a running sidecar).
    Query {
        #[command(flatten)]
        filters: Filters,
        /// Most records.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Continue after this sequence number (the `next_cursor` printed by the last page).
        #[arg(long)]
        cursor: Option<u64>,
        #[command(flatten)]
        remote: Remote,
    },
    /// The newest records, oldest first; `--follow` keeps printing new ones.
    Tail {
        /// How many to show first.
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: usize,
        /// Keep polling for new records.
        #[arg(long, short)]
        follow: bool,
        /// Poll interval with `--follow`, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        #[command(flatten)]
        filters: Filters,
        #[command(flatten)]
        remote: Remote,
    },
}

/// Where the data directory is.
#[derive(Debug, Args)]
struct DataDir {
    /// The sidecar's config: its `data_dir` and `audit.hmac_key_file` are used.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// The data directory (overrides the config; default ./data).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// HMAC key file the chain was written with (overrides the config).
    #[arg(long)]
    hmac_key_file: Option<PathBuf>,
}

impl DataDir {
    /// Opens the stores (read by this process alone) and the chain to check them with.
    fn open(&self) -> anyhow::Result<(Stores, Chain)> {
        let cfg = match &self.config {
            Some(path) => {
                Config::from_file(path).map_err(|e| anyhow::anyhow!(super::render(&e)))?
            }
            None => Config::defaults(),
        };
        let dir = self.data_dir.clone().unwrap_or(cfg.data_dir);
        let key_file = self.hmac_key_file.clone().or(cfg.audit_hmac_key_file);
        let stores = Stores::open_existing(&dir, cfg.store_cache_bytes)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let chain = match key_file {
            Some(path) => Chain::keyed(
                std::fs::read(&path)
                    .with_context(|| format!("cannot read the HMAC key file {}", path.display()))?,
            ),
            None => Chain::plain(),
        };
        Ok((stores, chain))
    }
}

/// Filters of `query` and `tail`.
#[derive(Debug, Args)]
struct Filters {
    /// Principal, e.g. `Agent::"dev-agent"`.
    #[arg(long)]
    principal: Option<String>,
    /// Tool name.
    #[arg(long)]
    tool: Option<String>,
    /// allow, deny, pending_approval, or an approval or reload event.
    #[arg(long)]
    decision: Option<String>,
    /// Deciding stage.
    #[arg(long)]
    stage: Option<String>,
    /// Conversation id.
    #[arg(long)]
    conv_id: Option<String>,
    /// Trace id.
    #[arg(long)]
    trace_id: Option<String>,
    /// Records at or after this time (unix ms).
    #[arg(long)]
    since: Option<u64>,
    /// Records before this time (unix ms).
    #[arg(long)]
    until: Option<u64>,
}

impl Filters {
    fn query_string(&self) -> String {
        let text = [
            ("principal", self.principal.clone()),
            ("tool", self.tool.clone()),
            ("decision", self.decision.clone()),
            ("stage", self.stage.clone()),
            ("conv_id", self.conv_id.clone()),
            ("trace_id", self.trace_id.clone()),
            ("since", self.since.map(|v| v.to_string())),
            ("until", self.until.map(|v| v.to_string())),
        ];
        text.iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("&{k}={}", encode(v))))
            .collect()
    }
}

/// Runs the subcommand.
pub fn run(args: &AuditArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        AuditCommand::Verify { data, head } => verify_cmd(data, head.as_ref()),
        AuditCommand::Export { data, from, out } => export(data, *from, out.as_ref()),
        AuditCommand::Query {
            filters,
            limit,
            cursor,
            remote,
        } => {
            let client = Client::new(remote, Duration::from_secs(30));
            let page = client.get(&page_path(*limit, &filters.query_string(), *cursor))?;
            for r in records(&page) {
                println!("{r}");
            }
            if let Some(next) = field(&page, "next_cursor").as_u64() {
                eprintln!("more: --cursor {next}");
            }
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Tail {
            lines,
            follow,
            interval_ms,
            filters,
            remote,
        } => tail(
            &Client::new(remote, Duration::from_secs(30)),
            *lines,
            follow.then(|| Duration::from_millis((*interval_ms).max(50))),
            &filters.query_string(),
        ),
    }
}

/// `GET /v1/audit` for one page: `filters` is a `&k=v…` string, `cursor` the last page's end.
fn page_path(limit: usize, filters: &str, cursor: Option<u64>) -> String {
    let mut path = format!("/v1/audit?limit={limit}{filters}");
    if let Some(c) = cursor {
        path.push_str(&format!("&cursor={c}"));
    }
    path
}

fn records(page: &Value) -> &[Value] {
    field(page, "records").as_array().map_or(&[], Vec::as_slice)
}

fn verify_cmd(data: &DataDir, head: Option<&PathBuf>) -> anyhow::Result<ExitCode> {
    let anchor: Option<Head> = match head {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the exported head {}", path.display()))?;
            Some(serde_json::from_str(&text).with_context(|| {
                format!(
                    "{} is not a head: expected {{\"seq\": N, \"hash\": \"…\"}} as from GET /v1/audit/head",
                    path.display()
                )
            })?)
        }
        None => None,
    };
    let (stores, chain) = data.open()?;
    match verify(stores.audit.as_ref(), &chain, anchor.as_ref())
        .map_err(|e| anyhow::anyhow!("{e}"))?
    {
        ChainVerdict::Intact {
            records,
            first,
            head,
        } => {
            let cut = if first > 1 {
                format!(" (records before {first} removed by retention; the checkpoint holds)")
            } else {
                String::new()
            };
            let links = if chain.is_keyed() {
                "HMAC links"
            } else {
                "plain SHA-256 links: anyone who can write the store could re-chain it"
            };
            println!(
                "ok: {records} records, chain intact{cut}; head {} {} ({links})",
                head.seq, head.hash
            );
            Ok(ExitCode::SUCCESS)
        }
        ChainVerdict::Broken { seq, why } => {
            println!("BROKEN at record {seq}: {why}");
            if !chain.is_keyed() && why.contains("altered") {
                println!(
                    "(if the log was written with audit.hmac_key_file, pass --config or --hmac-key-file)"
                );
            }
            Ok(ExitCode::from(1))
        }
    }
}

fn export(data: &DataDir, from: u64, out: Option<&PathBuf>) -> anyhow::Result<ExitCode> {
    let (stores, _) = data.open()?;
    let mut sink: Box<dyn Write> = match out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let from = from.max(1);
    let mut next_unit = 0;
    let mut written = 0u64;
    loop {
        let page = stores
            .audit
            .scan(next_unit, 4096)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let Some(last) = page.last().map(|s| s.unit) else {
            break;
        };
        for stored in page.into_iter().filter(|s| s.key_seq >= from) {
            match stored.record {
                Ok(r) => {
                    serde_json::to_writer(&mut sink, &r)?;
                    sink.write_all(b"\n")?;
                    written += 1;
                }
                Err(e) => {
                    sink.flush()?;
                    eprintln!(
                        "error: record stored at {} does not parse ({e}); run `toolgate audit verify`",
                        stored.key_seq
                    );
                    return Ok(ExitCode::from(1));
                }
            }
        }
        match last.checked_add(1) {
            Some(n) => next_unit = n,
            None => break,
        }
    }
    sink.flush()?;
    eprintln!("exported {written} records");
    Ok(ExitCode::SUCCESS)
}

fn tail(
    client: &Client,
    lines: usize,
    follow: Option<Duration>,
    filters: &str,
) -> anyhow::Result<ExitCode> {
    let first = client.get(&page_path(lines.clamp(1, 1000), filters, None))?;
    let mut seen = 0u64;
    for r in records(&first).iter().rev() {
        println!("{r}");
        seen = seen.max(field(r, "seq").as_u64().unwrap_or(0));
    }
    let Some(interval) = follow else {
        return Ok(ExitCode::SUCCESS);
    };
    loop {
        std::thread::sleep(interval);
        // Newest first, page by page, down to the last record already printed.
        let mut fresh = Vec::new();
        let mut cursor: Option<u64> = None;
        'pages: loop {
            let page = client.get(&page_path(1000, filters, cursor))?;
            for r in records(&page) {
                if field(r, "seq").as_u64().unwrap_or(0) <= seen {
                    break 'pages;
                }
                fresh.push(r.clone());
            }
            match field(&page, "next_cursor").as_u64() {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        for r in fresh.iter().rev() {
            println!("{r}");
            seen = seen.max(field(r, "seq").as_u64().unwrap_or(0));
        }
        std::io::stdout().flush()?;
    }
}
