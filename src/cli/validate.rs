//! `toolgate validate`: the exact loader `serve` uses, every problem at once.

use std::process::ExitCode;

use super::{Common, render, report_load_error};
use crate::policy::load;

/// Runs the subcommand.
pub fn run(common: &Common) -> anyhow::Result<ExitCode> {
    let cfg = common.config()?;
    // Upstreams whose directories the programs' user cannot use: their writes would fail.
    for (name, found) in crate::app::upstream_reach(&cfg.exec, &cfg.mcp) {
        eprintln!("warning: MCP upstream `{name}`: {found}");
    }
    match load(&cfg.sources) {
        Ok(loaded) => {
            for w in &loaded.warnings {
                eprintln!("{}", render(w));
            }
            let s = &loaded.snapshot;
            // Provenance reads text: say which arguments it cannot trace.
            let untraced: Vec<String> = s
                .tools
                .values()
                .flat_map(|t| {
                    t.untraced_args()
                        .into_iter()
                        .map(move |a| format!("{}.{a}", t.name))
                })
                .collect();
            if !untraced.is_empty() {
                eprintln!(
                    "note: context.provenance does not trace {} argument{} that hold only numbers or booleans ({}): a policy cannot tell whether the user or tool output gave their values; bound them with deployment data (limits) instead",
                    untraced.len(),
                    if untraced.len() == 1 { "" } else { "s" },
                    untraced.join(", ")
                );
            }
            println!(
                "ok: {} policies, {} tools, revision {}{}",
                s.policy_count(),
                match s.policies.templates().count() {
                    0 => format!("{}", s.tools.len()),
                    1 => format!("1 template, {}", s.tools.len()),
                    n => format!("{n} templates, {}", s.tools.len()),
                },
                s.revision,
                if loaded.warnings.is_empty() {
                    String::new()
                } else {
                    format!(", {} warnings", loaded.warnings.len())
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            report_load_error(&e);
            Ok(ExitCode::from(1))
        }
    }
}
