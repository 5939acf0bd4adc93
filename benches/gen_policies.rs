//! `cargo run --release --example gen_policies -- DIR TOOLS PER_TOOL`: writes a synthetic
//! policy set for the load script (see `benches/support/scale.rs`).
#![allow(missing_docs)]

#[path = "support/scale.rs"]
mod scale;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(dir), Some(tools), Some(per_tool)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!("usage: gen_policies DIR TOOLS PER_TOOL");
        std::process::exit(2);
    };
    let tools: usize = tools.parse().map_err(std::io::Error::other)?;
    let per_tool: usize = per_tool.parse().map_err(std::io::Error::other)?;
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    scale::write_scaled_set(&repo, std::path::Path::new(dir), tools, per_tool)?;
    println!(
        "wrote {} policies over {tools} tools to {dir}",
        tools * per_tool
    );
    Ok(())
}
