//! The floor for durable answers: one small write to a file, then `fdatasync`, as the audit
//! ledger does per batch, on the disk of the directory given. Prints p50 and p99 in µs.
//!
//! Two layouts:
//! - `append`: each record is appended, so each `fdatasync` also commits the new file size
//!   (a journal commit on ext4, which flushes other files' ordered data with it);
//! - `overwrite` (the ledger's layout): the file is written with zeros and made durable
//!   once, ahead of the timing, and each record overwrites the next zeros, so an
//!   `fdatasync` carries data only.
//!
//! `cargo run --release --example fdatasync_floor -- DIR [COUNT] [BYTES] [append|overwrite]`
#![allow(missing_docs)]

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::Instant;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| ".".to_owned()));
    let count: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let bytes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(640);
    let overwrite = match args.next().as_deref() {
        None | Some("append") => false,
        Some("overwrite") => true,
        Some(other) => {
            eprintln!("unknown layout `{other}`: say `append` or `overwrite`");
            std::process::exit(2);
        }
    };
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("fdatasync-floor.bin");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    // The ledger writes a zeroed frame header after each frame: the same bytes here.
    let record = vec![b'x'; bytes];
    let tail = [0u8; 12];
    if overwrite {
        let zeros = vec![0u8; 1 << 20];
        let want = (count * (bytes + tail.len())).div_ceil(zeros.len()) + 1;
        for _ in 0..want {
            file.write_all(&zeros)?;
        }
        file.sync_all()?;
    }
    let mut took = Vec::with_capacity(count);
    let mut at = 0u64;
    for _ in 0..count {
        let start = Instant::now();
        if overwrite {
            let mut frame = Vec::with_capacity(bytes + tail.len());
            frame.extend_from_slice(&record);
            frame.extend_from_slice(&tail);
            file.write_all_at(&frame, at)?;
            at += bytes as u64;
        } else {
            file.write_all(&record)?;
        }
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
