//! `toolgate test [DIR]`: runs the policy fixtures in DIR (default `<policies>/tests`) against
//! the policy set, as the server decides, and reports failures and coverage.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::{Common, load_or_report};
use crate::review::fixtures::{self, CaseResult, Report};

/// Arguments of `toolgate test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    #[command(flatten)]
    common: Common,
    /// A fixture directory (every `*.json` in it) or one fixture file; default
    /// `<policies>/tests`.
    dir: Option<PathBuf>,
    /// Fail (exit 1) when a policy determined no case.
    #[arg(long)]
    require_coverage: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// List passing cases too.
    #[arg(long, short)]
    verbose: bool,
}

/// Runs the subcommand: 0 all passed, 1 a case failed (or coverage, when required), 2 the
/// fixtures could not be read.
pub fn run(args: &TestArgs) -> anyhow::Result<ExitCode> {
    let cfg = args.common.config()?;
    let Some(snap) = load_or_report(&cfg.sources) else {
        return Ok(ExitCode::from(1));
    };
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| cfg.sources.policies_dir.join("tests"));
    let cases = fixtures::read_dir(&dir).map_err(|e| anyhow::anyhow!("{e}"))?;
    // Arguments are scanned with the configured detectors and rules, as the server does.
    let gates = crate::redact::Gates::new(&cfg.redaction, cfg.gate_rules.clone())
        .map_err(|e| anyhow::anyhow!("the redaction detectors: {e}"))?;
    let report = fixtures::run(&snap, &cases, Some(&gates));
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report, &dir, args.verbose, &snap.policy_files);
    }
    let failed = report.failures() > 0 || (args.require_coverage && !report.uncovered.is_empty());
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_text(
    report: &Report,
    dir: &std::path::Path,
    verbose: bool,
    files: &std::collections::BTreeMap<String, String>,
) {
    println!(
        "{} cases from {} against revision {}",
        report.results.len(),
        dir.display(),
        report.revision
    );
    for r in &report.results {
        if !r.passed {
            print_failure(r);
        } else if verbose {
            println!("ok   {} › {}", r.file, r.name);
        }
    }
    let failed = report.failures();
    println!(
        "\n{} passed, {} failed",
        report.results.len() - failed,
        failed
    );
    let covered = report.policy_count - report.uncovered.len();
    println!(
        "coverage: {covered} of {} policies determined at least one case",
        report.policy_count
    );
    if !report.uncovered.is_empty() {
        println!("not covered (no case is decided by them):");
        for id in &report.uncovered {
            let file = files.get(id).map(String::as_str).unwrap_or("?");
            println!("  {id}  ({file})");
        }
    }
    if let Some(rates) = &report.rates {
        println!("labelled calls: {}", rates.summary());
        for r in &report.results {
            let unattended = r.got.outcome == fixtures::Expect::Allow
                && r.got.stage != crate::authz::Stage::Approval;
            match r.label {
                Some(fixtures::Label::Attack) if unattended => {
                    let what = if r.changes_state {
                        "state-changing"
                    } else {
                        "read-only"
                    };
                    println!(
                        "  attack allowed unattended ({what}): {} › {}",
                        r.file, r.name
                    );
                }
                Some(fixtures::Label::Legit) if r.got.outcome != fixtures::Expect::Allow => {
                    println!(
                        "  legitimate call {}: {} › {}",
                        r.got.outcome.as_str(),
                        r.file,
                        r.name
                    );
                }
                _ => {}
            }
        }
    }
}

fn print_failure(r: &CaseResult) {
    println!("FAIL {} › {}", r.file, r.name);
    let policies = if r.got.policies.is_empty() {
        "no policy".to_owned()
    } else {
        r.got.policies.join(", ")
    };
    if r.got.outcome == r.expect {
        println!(
            "     outcome {} as expected, but decided by: {policies}",
            r.expect.as_str()
        );
    } else {
        println!(
            "     expected {}, got {} (stage {})",
            r.expect.as_str(),
            r.got.outcome.as_str(),
            r.got.stage.as_str()
        );
        println!("     decided by: {policies}");
    }
    if let Some(want) = &r.expect_policies {
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        if want.is_empty() {
            println!("     expected policies: none");
        } else {
            println!("     expected policies: {}", want.join(", "));
        }
    }
    for e in &r.got.errors {
        println!("     why: {e}");
    }
}
