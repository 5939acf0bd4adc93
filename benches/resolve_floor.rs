//! What `Jail::resolve` costs per path argument (issue 39): the file system work the decision
//! path now does before Cedar, without HTTP, Cedar or the audit log around it. Prints the
//! median of `ROUNDS` (3) rounds of each round's p50 over `N` (20,000) calls, for a plain file,
//! a link inside the root, a path three directories deep, a name that does not exist yet, a
//! refused link out of the root and a write's resolution, next to the lexical check alone.
//!
//! Usage: cargo run --release --example resolve_floor

use std::time::Instant;

use toolgate::globs::SegmentGlobs;
use toolgate::jail::{Intent, Jail};

fn p50(n: usize, mut f: impl FnMut()) -> f64 {
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f();
        lat.push(t.elapsed().as_nanos());
    }
    lat.sort_unstable();
    lat.get(n / 2).copied().unwrap_or(0) as f64 / 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (rounds, n) = (env("ROUNDS", 3), env("N", 20_000));
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    std::fs::create_dir_all(root.join("a/b/c"))?;
    std::fs::write(root.join("ok.txt"), "fine")?;
    std::fs::write(root.join("a/b/c/deep.txt"), "deep")?;
    std::os::unix::fs::symlink("ok.txt", root.join("link.txt"))?;
    std::os::unix::fs::symlink("/etc/passwd", root.join("out.txt"))?;
    let deny = SegmentGlobs::default();
    let jail = Jail::new(root, &[], &deny)?;
    let guard = toolgate::globs::PathGuard {
        deny: deny.clone(),
        own: Vec::new(),
    };
    println!("{:32} {:>8}", "case", "p50 us");
    let lexical = median(
        (0..rounds)
            .map(|_| {
                p50(n, || {
                    std::hint::black_box(guard.refuses("a/b/c/deep.txt"));
                })
            })
            .collect(),
    );
    println!("{:32} {:8.2}", "lexical deny list only", lexical);
    for (label, path, intent) in [
        ("read ok.txt", "ok.txt", Intent::Read),
        ("read link.txt", "link.txt", Intent::Read),
        ("read a/b/c/deep.txt", "a/b/c/deep.txt", Intent::Read),
        ("read new.txt (not there yet)", "new.txt", Intent::Read),
        ("read out.txt (refused)", "out.txt", Intent::Read),
        ("write ok.txt", "ok.txt", Intent::Write),
    ] {
        let t = median(
            (0..rounds)
                .map(|_| {
                    p50(n, || {
                        let _ = std::hint::black_box(jail.resolve(path, intent));
                    })
                })
                .collect(),
        );
        println!("{label:32} {t:8.2}");
    }
    Ok(())
}
