//! The floor for durable answers: one small append to a file, then `fdatasync`, as the audit
//! ledger does per batch, on the disk of the directory given. Prints p50 and p99 in µs.
//! `cargo run --release --example fdatasync_floor -- DIR [COUNT] [BYTES]`
#![allow(missing_docs)]

use std::io::Write;
use std::time::Instant;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| ".".to_owned()));
    let count: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let bytes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(640);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("fdatasync-floor.bin");
    let mut file = std::fs::File::create(&path)?;
    let record = vec![b'x'; bytes];
    let mut took = Vec::with_capacity(count);
    for _ in 0..count {
        let start = Instant::now();
        file.write_all(&record)?;
        file.sync_data()?;
        took.push(start.elapsed().as_secs_f64() * 1e6);
    }
    drop(file);
    std::fs::remove_file(&path)?;
    took.sort_by(f64::total_cmp);
    let at = |q: f64| {
        took.get(((took.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    println!("{:.0} {:.0}", at(0.5), at(0.99));
    Ok(())
}
