//! `toolgate diff OLD NEW`: what NEW allows that OLD did not, and the reverse, per action,
//! proved with Cedar's symbolic compiler and cvc5; without a solver, the fixtures' calls are
//! compared instead (and the report says so).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use super::{Common, load_or_report};
use crate::policy::{Snapshot, Sources};
use crate::review::diff::{self, Change, Diff, DiffError, Example};
use crate::review::fixtures;

/// Arguments of `toolgate diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    #[command(flatten)]
    common: Common,
    /// The policies directory before the change (e.g. a worktree of main).
    old: PathBuf,
    /// The policies directory after the change.
    new: PathBuf,
    /// Exit 1 on this kind of change (a CI gate).
    #[arg(long, value_enum)]
    fail_on: Option<FailOn>,
    /// Fixtures for the fallback without a solver; default `<NEW>/tests`.
    #[arg(long)]
    fixtures: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// What fails the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FailOn {
    /// NEW allows some request OLD denied.
    Widening,
    /// Any difference at all.
    Change,
}

fn load_set(sources: &Sources, policies: &std::path::Path) -> Option<Snapshot> {
    let sources = Sources {
        policies_dir: policies.to_path_buf(),
        ..sources.clone()
    };
    let snap = load_or_report(&sources);
    if snap.is_none() {
        eprintln!("{} does not load (problems above)", policies.display());
    }
    snap
}

/// The entities file of a policies directory, as sorted canonical lines (entity order and
/// formatting do not count as a difference).
fn entity_lines(policies: &std::path::Path) -> Vec<String> {
    let text =
        std::fs::read_to_string(policies.join(crate::policy::ENTITIES_FILE)).unwrap_or_default();
    let mut lines: Vec<String> = match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(serde_json::Value::Array(items)) => items.iter().map(ToString::to_string).collect(),
        _ => vec![text],
    };
    lines.sort();
    lines
}

/// Runs the subcommand: 0 no failing change, 1 a change `--fail-on` names (or a set that does
/// not load), 2 the comparison could not run.
pub fn run(args: &DiffArgs) -> anyhow::Result<ExitCode> {
    let cfg = args.common.config()?;
    let (Some(old), Some(new)) = (
        load_set(&cfg.sources, &args.old),
        load_set(&cfg.sources, &args.new),
    ) else {
        return Ok(ExitCode::from(1));
    };
    let entities_differ = entity_lines(&args.old) != entity_lines(&args.new);
    let data = crate::review::data::data_changes(&old, &new);
    let templates = diff::template_changes(&old.policies, &new.policies);
    let result = diff::diff(
        &diff::static_policies(&old.policies),
        &diff::static_policies(&new.policies),
        &new.schema,
        Some(&new),
    );
    let (widens, changes) = match result {
        Ok(d) => {
            if args.json {
                let mut v = serde_json::to_value(&d)?;
                if let Some(o) = v.as_object_mut() {
                    o.insert("old_revision".into(), old.revision.clone().into());
                    o.insert("new_revision".into(), new.revision.clone().into());
                    o.insert("entities_differ".into(), entities_differ.into());
                    o.insert("data".into(), serde_json::to_value(&data.lines)?);
                    o.insert("templates".into(), serde_json::to_value(&templates)?);
                    o.insert("method".into(), "symbolic".into());
                }
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print_diff(&d, &old, &new);
            }
            (d.widens(), d.changes())
        }
        Err(DiffError::NoSolver(why)) => {
            eprintln!(
                "warning: no SMT solver ({why}).\n\
                 Install cvc5 (`apt-get install cvc5`) or set CVC5=/path/to/cvc5 for a proof over every request.\n\
                 Falling back to the fixtures: only their calls are compared, and a widening no fixture exercises goes unseen."
            );
            let dir = args
                .fixtures
                .clone()
                .unwrap_or_else(|| args.new.join("tests"));
            fixture_diff(&dir, &old, &new)?
        }
        Err(e) => return Err(e.into()),
    };
    if !data.is_empty() && !args.json {
        println!(
            "\ndeployment data (entities: agents, humans, roles, tools; outside the proof, and any \
             change may widen: a new payee widens an allow-list, a removed domain a deny-list):"
        );
        for line in &data.lines {
            println!("  {line}");
        }
    } else if entities_differ && !args.json {
        println!("\nnote: entities.json differs only in form (order, formatting).");
    }
    if !templates.is_empty() && !args.json {
        let list = |ids: &[String]| {
            if ids.is_empty() {
                "none".to_owned()
            } else {
                ids.join(", ")
            }
        };
        println!(
            "\ntemplates (grants link them; outside the proof): added {}; changed {}; removed {}.\n\
             An added or changed template counts as widening: every grant linking it gives what it now says.",
            list(&templates.added),
            list(&templates.changed),
            list(&templates.removed),
        );
    }
    let failed = match args.fail_on {
        Some(FailOn::Widening) => widens || templates.widens() || !data.is_empty(),
        Some(FailOn::Change) => {
            changes || entities_differ || !data.is_empty() || !templates.is_empty()
        }
        None => false,
    };
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_diff(d: &Diff, old: &Snapshot, new: &Snapshot) {
    println!(
        "OLD ({}) → NEW ({}): {} actions compared symbolically (cvc5)",
        old.revision,
        new.revision,
        d.actions.len()
    );
    for a in &d.actions {
        if a.change == Change::Equal {
            continue;
        }
        println!("\n{:<18} {}", a.change.as_str(), a.action);
        if let Some(ex) = &a.widening {
            print_example("NEW allows, OLD denies", ex);
        }
        if let Some(ex) = &a.narrowing {
            print_example("OLD allows, NEW denies", ex);
        }
    }
    let equal: Vec<&str> = d
        .actions
        .iter()
        .filter(|a| a.change == Change::Equal)
        .map(|a| a.action.as_str())
        .collect();
    if !equal.is_empty() {
        println!("\nequal              {}", equal.join(", "));
    }
    let s = d.summary();
    let n = |c| s.get(&c).copied().unwrap_or(0);
    println!(
        "\nsummary: {} widened, {} narrowed, {} changed both ways, {} equal",
        n(Change::Widened),
        n(Change::Narrowed),
        n(Change::Both),
        n(Change::Equal)
    );
}

fn print_example(what: &str, ex: &Example) {
    println!("  example ({what}):");
    let roles = if ex.principal_in.is_empty() {
        String::new()
    } else {
        format!(" in [{}]", ex.principal_in.join(", "))
    };
    println!("    principal {}{roles}", ex.principal);
    println!("    resource  {} {}", ex.resource, ex.resource_attrs);
    println!("    context   {}", ex.context);
    if !ex.allowed_by.is_empty() {
        println!("    allowed by {}", ex.allowed_by.join(", "));
    }
    match ex.on_your_entities {
        Some(true) => {
            println!("    (re-checked with your entities: the real tool and roles; it holds)")
        }
        Some(false) => println!(
            "    (only with entities unlike yours, e.g. another risk tier or role; with yours this call does not differ)"
        ),
        None => {}
    }
    if !ex.confirmed {
        println!(
            "    NOT CONFIRMED: Cedar's authorizer disagrees with the solver on this example; treat the change as real and report it"
        );
    }
}

/// The fallback: each fixture call decided under both sets; returns (widens, changes).
fn fixture_diff(
    dir: &std::path::Path,
    old: &Snapshot,
    new: &Snapshot,
) -> anyhow::Result<(bool, bool)> {
    use fixtures::Expect;
    let cases = fixtures::read_dir(dir).map_err(|e| anyhow::anyhow!("{e}"))?;
    let rank = |e: Expect| match e {
        Expect::Deny => 0,
        Expect::PendingApproval => 1,
        Expect::Allow => 2,
    };
    let (mut widens, mut changes) = (false, false);
    println!(
        "{} → {}: {} fixture calls from {} compared (no solver)",
        old.revision,
        new.revision,
        cases.len(),
        dir.display()
    );
    for case in &cases {
        let before = fixtures::answer(old, &case.question, None).outcome;
        let after = fixtures::answer(new, &case.question, None).outcome;
        if before == after {
            continue;
        }
        changes = true;
        let word = if rank(after) > rank(before) {
            widens = true;
            "widened"
        } else {
            "narrowed"
        };
        println!(
            "{word:<9} {} › {}: {} → {}",
            case.file.display(),
            case.name,
            before.as_str(),
            after.as_str()
        );
    }
    if !changes {
        println!("no fixture call changed outcome");
    }
    Ok((widens, changes))
}
