//! `toolgate redact`: the configured detectors (built-in and `[[redaction.detectors]]`) over
//! stdin, offline, as the gates find and mask: to try a custom detector before deploying it,
//! to clean a log file, or to score a corpus.

use std::io::{BufRead, Read, Write};
use std::process::ExitCode;

use clap::Args;

use super::Common;
use crate::redact::{Finding, Redactor};

/// Arguments of `toolgate redact`.
#[derive(Debug, Args)]
pub struct RedactArgs {
    #[command(flatten)]
    common: Common,
    /// Print `{"masked": …, "findings": […]}` for the whole input instead of the masked text.
    #[arg(long, conflicts_with = "jsonl")]
    json: bool,
    /// Every input line is a JSON string, scanned on its own; print one
    /// `{"masked": …, "findings": […]}` line per input line.
    #[arg(long)]
    jsonl: bool,
}

#[derive(serde::Serialize)]
struct Scanned<'a> {
    masked: String,
    findings: &'a [Finding],
}

fn scanned(redactor: &Redactor, text: &str) -> anyhow::Result<String> {
    let findings = redactor.scan(text);
    let masked = Redactor::mask(text, &findings, |f| f.category.sensitive());
    Ok(serde_json::to_string(&Scanned {
        masked,
        findings: &findings,
    })?)
}

/// Runs the subcommand: 0 done (findings or not), 2 the config or the input is bad.
pub fn run(args: &RedactArgs) -> anyhow::Result<ExitCode> {
    let cfg = args.common.config()?;
    let redactor = Redactor::new(&cfg.redaction)
        .map_err(|e| anyhow::anyhow!("the redaction detectors: {e}"))?;
    let stdin = std::io::stdin();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.jsonl {
        // Every line is checked before anything is written: a bad line gives no partial output.
        let mut answers = Vec::new();
        for (i, line) in stdin.lock().lines().enumerate() {
            let line = line.map_err(|e| anyhow::anyhow!("stdin line {}: {e}", i + 1))?;
            if line.trim().is_empty() {
                continue;
            }
            let text: String = serde_json::from_str(&line).map_err(|e| {
                anyhow::anyhow!(
                    "stdin line {}: not a JSON string ({e}); with --jsonl every line is one JSON string",
                    i + 1
                )
            })?;
            answers.push(scanned(&redactor, &text)?);
        }
        for answer in answers {
            writeln!(out, "{answer}")?;
        }
    } else {
        let mut bytes = Vec::new();
        stdin.lock().read_to_end(&mut bytes)?;
        let text = String::from_utf8(bytes).map_err(|e| {
            anyhow::anyhow!(
                "stdin is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            )
        })?;
        if args.json {
            writeln!(out, "{}", scanned(&redactor, &text)?)?;
        } else {
            out.write_all(redactor.redact(&text).as_bytes())?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
