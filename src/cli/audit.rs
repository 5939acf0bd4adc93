//! `toolgate audit verify|export|rotate-key|checkpoint` (offline, on a data directory the
//! sidecar is not holding), `toolgate audit keygen`,
//! and `toolgate audit query|tail` (online, through a running sidecar's API).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::Value;

use super::client::{Client, Remote, encode, field};
use crate::audit::{Chain, ChainVerdict, Head, Link, keys, verify};
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
    /// Walk the hash chain of a data directory and name the first broken link (exit 1); say
    /// what the mode it ran in can and cannot detect.
    Verify {
        #[command(flatten)]
        data: DataDir,
        /// A head exported earlier (the JSON of `GET /v1/audit/head`): the log must still
        /// reach it with the same hash, so a truncated tail is caught too.
        #[arg(long, conflicts_with = "checkpoint")]
        head: Option<PathBuf>,
        /// A signed checkpoint (from `toolgate audit checkpoint`): like --head, once its
        /// Ed25519 signature holds under --public-key.
        #[arg(long, requires = "public_key")]
        checkpoint: Option<PathBuf>,
        /// The Ed25519 public key (hex) the checkpoint must be signed with.
        #[arg(long, requires = "checkpoint")]
        public_key: Option<PathBuf>,
        /// Also check the stored state against the log: every live approval and the kill
        /// switch must be what their records made them (exit 1 naming each that is not).
        #[arg(long)]
        state: bool,
    },
    /// Add a new generated HMAC key to the data directory's keyring: it seals every record
    /// after the newest one. Run while the sidecar is stopped; older keys stay, so older
    /// records still verify, and the next start records the rotation.
    RotateKey {
        #[command(flatten)]
        data: DataDir,
    },
    /// Generate an Ed25519 key pair for signed checkpoints: the signing key (hex, mode 0600)
    /// at OUT and the public key at OUT.pub. Existing files are never overwritten.
    Keygen {
        /// Where to write the signing key.
        #[arg(long, short)]
        out: PathBuf,
    },
    /// Sign the newest record of a data directory (after verifying the chain) or an exported
    /// head, with an Ed25519 key: a checkpoint to publish away from the sidecar.
    Checkpoint {
        #[command(flatten)]
        data: DataDir,
        /// The Ed25519 signing key (from `toolgate audit keygen`).
        #[arg(long)]
        signing_key: PathBuf,
        /// Sign this exported head (`GET /v1/audit/head`) instead of reading the data
        /// directory (works while the sidecar runs).
        #[arg(long)]
        head: Option<PathBuf>,
        /// Output file (default: standard output).
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
    /// Write the records of a data directory as JSON lines, oldest first; with `--online`,
    /// those of a running sidecar, through its API (`GET /v1/audit/export`, the newest
    /// 100,000 at most).
    Export {
        #[command(flatten)]
        data: DataDir,
        /// First sequence number to export.
        #[arg(long, default_value_t = 1)]
        from: u64,
        /// Output file (default: standard output).
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// Export from a running sidecar (`--url`, `TOOLGATE_TOKEN` of a human) instead of
        /// reading its data directory.
        #[arg(long)]
        online: bool,
        #[command(flatten)]
        remote: Remote,
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
    #[arg(long, short, env = "TOOLGATE_CONFIG")]
    config: Option<PathBuf>,
    /// The data directory (overrides the config; relative to the working directory; without
    /// either, ./data).
    #[arg(long, env = "TOOLGATE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// HMAC key file the chain was written with, besides the data directory's keyring (may
    /// be repeated: each key is used for the records it sealed).
    #[arg(long)]
    hmac_key_file: Vec<PathBuf>,
}

/// A data directory opened offline, with the chain to check it with.
struct Opened {
    stores: Stores,
    chain: Chain,
    dir: PathBuf,
    /// Whether the data directory has a keyring.
    ring: bool,
    /// `audit.hmac_key_file` from the config.
    configured: Option<PathBuf>,
}

impl DataDir {
    /// Opens the stores (read by this process alone) and the chain to check them with: the
    /// keyring in the data directory, plus any key files given.
    fn open(&self) -> anyhow::Result<Opened> {
        let cfg = match &self.config {
            Some(path) => {
                Config::from_file(path).map_err(|e| anyhow::anyhow!(super::render(&e)))?
            }
            None => Config::defaults(),
        };
        let dir = self.data_dir.clone().unwrap_or(cfg.data_dir);
        let mut extra = Vec::new();
        for path in self.hmac_key_file.iter().chain(&cfg.audit_hmac_key_file) {
            extra.push(keys::read_key_file(path).map_err(|e| anyhow::anyhow!("{e}"))?);
        }
        let stores = Stores::open_existing_keyed(&dir, cfg.store_cache_bytes, &extra)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let (chain, ring) =
            keys::chain_for_verify(&dir, &extra).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(Opened {
            stores,
            chain,
            dir,
            ring,
            configured: cfg.audit_hmac_key_file,
        })
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
        AuditCommand::Verify {
            data,
            head,
            checkpoint,
            public_key,
            state,
        } => {
            let anchor = match (head, checkpoint, public_key) {
                (Some(path), _, _) => Some(Anchor::Head(read_head(path)?)),
                (None, Some(cp), Some(pk)) => {
                    let text = std::fs::read_to_string(cp).with_context(|| {
                        format!("cannot read the signed checkpoint {}", cp.display())
                    })?;
                    let signed: keys::SignedCheckpoint = serde_json::from_str(&text)
                        .with_context(|| format!("{} is not a signed checkpoint", cp.display()))?;
                    let head =
                        keys::check_checkpoint(&signed, pk).map_err(|e| anyhow::anyhow!("{e}"))?;
                    Some(Anchor::Signed(head))
                }
                _ => None,
            };
            verify_cmd(data, anchor, *state)
        }
        AuditCommand::RotateKey { data } => {
            let opened = data.open()?;
            let head = opened
                .stores
                .audit
                .last()
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let started = keys::rotate(&opened.dir, opened.configured.as_deref(), head.as_ref())
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            println!(
                "key {} seals records from {} on{}; the next start records the rotation",
                started.id,
                started.from_seq,
                started
                    .previous
                    .map(|p| format!(" (key {p} kept for older records)"))
                    .unwrap_or_default()
            );
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Keygen { out } => {
            let mut public = out.clone().into_os_string();
            public.push(".pub");
            let public = PathBuf::from(public);
            let key =
                keys::generate_signing_key(out, &public).map_err(|e| anyhow::anyhow!("{e}"))?;
            println!(
                "signing key {} (keep it away from the sidecar); public key {} {key}",
                out.display(),
                public.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Checkpoint {
            data,
            signing_key,
            head,
            out,
        } => checkpoint_cmd(data, signing_key, head.as_ref(), out.as_ref()),
        AuditCommand::Export {
            online: true,
            from,
            out,
            remote,
            ..
        } => export_online(
            &Client::new(remote, Duration::from_secs(600)),
            *from,
            out.as_ref(),
        ),
        AuditCommand::Export {
            data, from, out, ..
        } => export(data, *from, out.as_ref()),
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

/// What `verify` checks the log against, besides its own links.
enum Anchor {
    /// A head exported earlier (`--head`).
    Head(Head),
    /// A signed checkpoint whose signature held (`--checkpoint`).
    Signed(Head),
}

impl Anchor {
    fn head(&self) -> &Head {
        match self {
            Anchor::Head(h) | Anchor::Signed(h) => h,
        }
    }
}

fn read_head(path: &PathBuf) -> anyhow::Result<Head> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the exported head {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a head: expected {{\"seq\": N, \"hash\": \"…\"}} as from GET /v1/audit/head",
            path.display()
        )
    })
}

/// The lines `verify` prints after its verdict: how the links were checked, and what that
/// mode can and cannot detect.
fn coverage(
    chain: &Chain,
    ring: bool,
    unlabelled: u64,
    keyed: u64,
    anchor: Option<&Anchor>,
) -> Vec<String> {
    let mut lines = Vec::new();
    let unlabelled_mode = match chain.unlabelled() {
        Link::Plain => "plain SHA-256",
        Link::Keyed(_) | Link::Missing(_) => "HMAC-SHA-256 (legacy key, no key id)",
    };
    let ids: Vec<String> = chain
        .ring_keys()
        .iter()
        .map(|k| format!("{} from record {}", k.id, k.from_seq))
        .collect();
    if keyed > 0 {
        lines.push(format!(
            "mode: keyed: {keyed} records under HMAC-SHA-256 keys ({}){}",
            ids.join(", "),
            if unlabelled > 0 {
                format!("; {unlabelled} older records with {unlabelled_mode} links, covered by the first keyed record's link")
            } else {
                String::new()
            }
        ));
    } else if chain.is_keyed() && !matches!(chain.unlabelled(), Link::Plain) {
        lines.push(format!(
            "mode: keyed: {unlabelled} records under one legacy HMAC-SHA-256 key (no key ids)"
        ));
    } else {
        lines.push(format!(
            "mode: unkeyed: {unlabelled} records with plain SHA-256 links{}",
            if ring {
                ""
            } else {
                " (no keyring in the data directory: written before HMAC links were on by default)"
            }
        ));
    }
    let keyed_log = keyed > 0 || (chain.is_keyed() && !matches!(chain.unlabelled(), Link::Plain));
    if keyed_log {
        lines.push(
            "detects: any edit, insertion, deletion or reordering of records, and any record forged, appended or re-chained by someone without the HMAC key".to_owned(),
        );
        lines.push(
            "cannot detect: a forgery by someone who holds the key (it is in the data directory's audit-keys.json, or audit.hmac_key_file); a signed checkpoint published elsewhere covers that up to its record".to_owned(),
        );
    } else {
        lines.push(
            "detects: an edit, insertion, deletion or reordering that breaks a link".to_owned(),
        );
        lines.push(
            "cannot detect: a tail rewritten or records appended and re-chained with plain SHA-256 by anyone who can write the store".to_owned(),
        );
    }
    match anchor {
        Some(Anchor::Head(h)) => lines.push(format!(
            "truncation: detected up to record {} (--head); records after it are vouched for only by their links",
            h.seq
        )),
        Some(Anchor::Signed(h)) => lines.push(format!(
            "truncation and forgery up to record {}: detected (signed checkpoint, Ed25519 signature holds)",
            h.seq
        )),
        None => lines.push(
            "cannot detect: records cut from the end of the log (pass --head, or --checkpoint with --public-key)".to_owned(),
        ),
    }
    lines
}

fn verify_cmd(data: &DataDir, anchor: Option<Anchor>, state: bool) -> anyhow::Result<ExitCode> {
    let Opened {
        stores,
        chain,
        ring,
        ..
    } = data.open()?;
    let chain_code = verify_chain(&stores, &chain, ring, anchor)?;
    if !state {
        return Ok(chain_code);
    }
    let check = stores
        .check_state(crate::clock::now_ms(), &chain)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if check.contradictions.is_empty() {
        let from = match check.baseline {
            Some(b) => format!("the state check at record {b}"),
            None => "the log's start".to_owned(),
        };
        println!(
            "ok: state matches the log ({} stored keys held to their records; {} records walked from {from})",
            check.checked, check.walked
        );
        if check.unverifiable > 0 {
            println!(
                "not checkable: {} stored keys no record since the retention cut names (approvals and the kill switch among them were held to their own records)",
                check.unverifiable
            );
        }
        if check.unsealed > 0 {
            println!(
                "not checkable: the seals of {} records under a key not given (--hmac-key-file)",
                check.unsealed
            );
        }
        return Ok(chain_code);
    }
    for c in &check.contradictions {
        println!("STATE CONTRADICTS THE LOG: {c}");
    }
    Ok(ExitCode::from(1))
}

fn verify_chain(
    stores: &crate::storage::Stores,
    chain: &crate::audit::Chain,
    ring: bool,
    anchor: Option<Anchor>,
) -> anyhow::Result<ExitCode> {
    let chain = chain.clone();
    match verify(
        stores.audit.as_ref(),
        &chain,
        anchor.as_ref().map(Anchor::head),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?
    {
        ChainVerdict::Intact {
            records,
            first,
            head,
            unlabelled,
            keyed,
        } => {
            let cut = if first > 1 {
                format!(" (records before {first} removed by retention; the checkpoint holds)")
            } else {
                String::new()
            };
            println!(
                "ok: {records} records, chain intact{cut}; head {} {}",
                head.seq, head.hash
            );
            for line in coverage(&chain, ring, unlabelled, keyed, anchor.as_ref()) {
                println!("{line}");
            }
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

fn checkpoint_cmd(
    data: &DataDir,
    signing_key: &std::path::Path,
    head: Option<&PathBuf>,
    out: Option<&PathBuf>,
) -> anyhow::Result<ExitCode> {
    let head = match head {
        Some(path) => read_head(path)?,
        None => {
            let Opened { stores, chain, .. } = data.open()?;
            match verify(stores.audit.as_ref(), &chain, None).map_err(|e| anyhow::anyhow!("{e}"))? {
                ChainVerdict::Intact { head, .. } => head,
                ChainVerdict::Broken { seq, why } => {
                    eprintln!("error: not signing a broken chain: record {seq}: {why}");
                    return Ok(ExitCode::from(1));
                }
            }
        }
    };
    let signed = keys::sign_checkpoint(&head, signing_key).map_err(|e| anyhow::anyhow!("{e}"))?;
    let text = serde_json::to_string(&signed)?;
    match out {
        Some(path) => std::fs::write(path, format!("{text}\n"))
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => println!("{text}"),
    }
    eprintln!("signed record {} {}", signed.seq, signed.hash);
    Ok(ExitCode::SUCCESS)
}

/// Where exported lines go: the file, or standard output.
fn sink_for(out: Option<&PathBuf>) -> anyhow::Result<Box<dyn Write>> {
    Ok(match out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    })
}

fn export_online(client: &Client, from: u64, out: Option<&PathBuf>) -> anyhow::Result<ExitCode> {
    let text = client.get_text("/v1/audit/export")?;
    let mut sink = sink_for(out)?;
    let mut written = 0u64;
    for line in text.lines() {
        let seq = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v.get("seq").and_then(serde_json::Value::as_u64))
            .with_context(|| "the sidecar's export holds a line that is not a record")?;
        if seq >= from {
            sink.write_all(line.as_bytes())?;
            sink.write_all(b"\n")?;
            written += 1;
        }
    }
    sink.flush()?;
    eprintln!("exported {written} records");
    Ok(ExitCode::SUCCESS)
}

fn export(data: &DataDir, from: u64, out: Option<&PathBuf>) -> anyhow::Result<ExitCode> {
    let Opened { stores, .. } = data.open()?;
    let mut sink = sink_for(out)?;
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
