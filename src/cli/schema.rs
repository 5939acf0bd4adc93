//! `toolgate schema [--check]`: writes the Cedar schema generated from the manifests, or
//! fails when the checked-in file differs from it.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::report_load_error;
use crate::policy::schema_gen;

/// Arguments of `toolgate schema`.
#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// Schemas directory (holds `tools/*.json`, `attributes.json` and the generated schema).
    #[arg(long, default_value = "schemas", conflicts_with = "config")]
    schemas: PathBuf,
    /// Take the schemas directory from this config file's `schemas_dir` instead.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Do not write: exit 1 if the file is missing or stale.
    #[arg(long)]
    check: bool,
}

/// Runs the subcommand.
pub fn run(args: &SchemaArgs) -> anyhow::Result<ExitCode> {
    let schemas = match &args.config {
        None => args.schemas.clone(),
        Some(path) => {
            crate::config::Config::load(Some(path), &crate::config::Overrides::default())
                .map_err(|e| anyhow::anyhow!(super::render(&e)))?
                .sources
                .schemas_dir
        }
    };
    let (text, tools) = match crate::policy::schema_text(&schemas) {
        Ok(t) => t,
        Err(e) => {
            report_load_error(&e);
            return Ok(ExitCode::from(1));
        }
    };
    // What the schema leaves out, as `validate` reports it: policies cannot read these.
    for tool in tools.values() {
        for (message, help) in tool.blind_spots() {
            eprintln!("warning: {message}\n  help: {help}");
        }
    }
    let path = schemas.join(schema_gen::SCHEMA_FILE);
    let current = std::fs::read_to_string(&path).ok();
    if args.check {
        if current.as_deref() == Some(text.as_str()) {
            println!(
                "ok: {} is up to date ({} tools)",
                path.display(),
                tools.len()
            );
            return Ok(ExitCode::SUCCESS);
        }
        eprintln!(
            "error: {} is stale: it does not match the tool manifests",
            path.display()
        );
        eprintln!(
            "  help: run `toolgate schema --schemas {}` and commit the result",
            schemas.display()
        );
        return Ok(ExitCode::from(1));
    }
    if current.as_deref() != Some(text.as_str()) {
        std::fs::write(&path, &text)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    println!("wrote {} ({} tools)", path.display(), tools.len());
    Ok(ExitCode::SUCCESS)
}
