//! Exports a toolgate policy set in cedar-agent's formats, so the load script can compare the
//! two on the same policies and entities: `policies.json` (`[{id, content}]`) and `data.json`
//! (every entity toolgate evaluates with, tool and action entities included).
//! `cargo run --release --example cedar_agent_data -- OUTDIR [POLICIES_DIR SCHEMAS_DIR]`
#![allow(missing_docs)]

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let out = PathBuf::from(
        args.get(1)
            .ok_or("usage: cedar_agent_data OUTDIR [POLICIES_DIR SCHEMAS_DIR]")?,
    );
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let sources = toolgate::policy::Sources::new(
        args.get(2)
            .map_or_else(|| repo.join("policies"), PathBuf::from),
        args.get(3)
            .map_or_else(|| repo.join("schemas"), PathBuf::from),
    );
    let snap = toolgate::policy::load(&sources)?.snapshot;
    let policies: Vec<serde_json::Value> = snap
        .policies
        .policies()
        .map(|p| serde_json::json!({"id": p.id().to_string(), "content": p.to_string()}))
        .collect();
    std::fs::create_dir_all(&out)?;
    std::fs::write(
        out.join("policies.json"),
        serde_json::to_string_pretty(&policies)?,
    )?;
    std::fs::write(
        out.join("data.json"),
        serde_json::to_string_pretty(&snap.entities.to_json_value()?)?,
    )?;
    println!(
        "wrote {} policies and the entities to {}",
        policies.len(),
        out.display()
    );
    Ok(())
}
