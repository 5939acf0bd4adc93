//! The output gate's redaction cost in process, by density of findings, and whether dense text
//! leaves the engine slower or bigger for the clean text after it (issue 43).
//!
//! Run: `cargo run --release --example redact_cost` (`RUNS=5` by default). Prints, next to the
//! clean-text floor measured in the same run:
//! - MB/s for clean 1 MiB text, dense 1 MiB and 64 KiB text (a finding every ~150 bytes,
//!   every body distinct), and 1,000 distinct dense 1 KiB bodies;
//! - a clean 1 MiB body's cost before and after 20 dense 1 MiB bodies, and the RSS then.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing
)]

use std::time::Instant;

use toolgate::redact::{RedactConfig, Redactor};

/// A small xorshift generator: the same bodies every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, from: &'a [&'a str]) -> &'a str {
        from[(self.next() % from.len() as u64) as usize]
    }
    fn chars(&mut self, n: usize, alphabet: &[u8]) -> String {
        (0..n)
            .map(|_| alphabet[(self.next() % alphabet.len() as u64) as usize] as char)
            .collect()
    }
}

const WORDS: &[&str] = &[
    "the",
    "request",
    "server",
    "build",
    "deploy",
    "user",
    "info",
    "warn",
    "cache",
    "retry",
    "connection",
    "timeout",
    "handler",
    "queue",
    "worker",
    "started",
    "finished",
    "ok",
];
const UPPER: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const HEX: &[u8] = b"0123456789abcdef";

fn clean(r: &mut Rng, bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 64);
    while s.len() < bytes {
        s.push_str(r.pick(WORDS));
        s.push(if r.next().is_multiple_of(12) {
            '\n'
        } else {
            ' '
        });
    }
    s
}

/// Text with a distinct finding about every 150 bytes, of several kinds.
fn dense(r: &mut Rng, bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 256);
    while s.len() < bytes {
        for _ in 0..(r.next() % 12 + 8) {
            s.push_str(r.pick(WORDS));
            s.push(' ');
        }
        let secret = match r.next() % 8 {
            0 => format!("aws_access_key_id=AKIA{}", r.chars(16, UPPER)),
            1 => format!("token: ghp_{}", r.chars(36, ALNUM)),
            2 => format!(
                "mail {}.{}@example.org",
                r.chars(6, b"abcdefgh"),
                r.chars(5, b"xyz")
            ),
            3 => format!("password = \"{}\"", r.chars(14, ALNUM)),
            4 => format!("sk_live_{}", r.chars(24, ALNUM)),
            5 => format!(
                "Authorization: Bearer eyJ{}.eyJ{}.{}",
                r.chars(20, ALNUM),
                r.chars(30, ALNUM),
                r.chars(43, ALNUM)
            ),
            6 => format!("api_key: {}", r.chars(32, HEX)),
            _ => format!("xoxb-{}-{}", r.chars(12, b"0123456789"), r.chars(24, ALNUM)),
        };
        s.push_str(&secret);
        s.push('\n');
    }
    s
}

fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Seconds to redact `text`.
fn cost(r: &Redactor, text: &str) -> f64 {
    let t = Instant::now();
    let out = r.redact(text);
    std::hint::black_box(out);
    t.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let redactor = Redactor::new(&RedactConfig::default()).expect("the default detectors");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mib = 1 << 20;
    let clean_mib = clean(&mut rng, mib);
    // `PROFILE=clean` or `PROFILE=dense`: redact that kind of 1 MiB body for ten seconds and
    // stop, for a profiler to attach to; `PROFILE=gate`: the output gate on dense 64 KiB JSON
    // bodies.
    if let Ok(kind) = std::env::var("PROFILE") {
        // `ROUNDS=N`: stop after about N bodies instead (a fixed amount of work, for counting
        // instructions).
        let rounds: usize = std::env::var("ROUNDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(usize::MAX);
        if kind == "gate" {
            let gates = toolgate::redact::Gates::builtin().expect("the default gates");
            let bodies: Vec<serde_json::Value> = (0..20)
                .map(|_| serde_json::json!({ "content": dense(&mut rng, 64 * 1024) }))
                .collect();
            let t = Instant::now();
            let mut n = 0usize;
            while t.elapsed().as_secs() < 10 && n < rounds {
                for b in &bodies {
                    let s = gates.screen(toolgate::redact::Gate::Output, b);
                    std::hint::black_box(serde_json::to_vec(&s).map(|v| v.len()).unwrap_or(0));
                    n += 1;
                }
            }
            println!(
                "gate: {:.2} ms per 64 KiB body",
                t.elapsed().as_secs_f64() * 1e3 / n as f64
            );
            return;
        }
        let bodies: Vec<String> = match kind.as_str() {
            "dense" => (0..20).map(|_| dense(&mut rng, mib)).collect(),
            _ => vec![clean_mib],
        };
        let t = Instant::now();
        let mut n = 0usize;
        while t.elapsed().as_secs() < 10 && n < rounds {
            for b in &bodies {
                std::hint::black_box(redactor.redact(b));
                n += 1;
            }
        }
        println!(
            "{kind}: {:.1} ms per MiB",
            t.elapsed().as_secs_f64() * 1e3 / n as f64
        );
        return;
    }
    let rss_start = rss_mb();
    // Warm: the first clean pass builds what any clean text needs.
    cost(&redactor, &clean_mib);
    let before = median((0..runs).map(|_| cost(&redactor, &clean_mib)).collect());
    let rss_before = rss_mb();

    let dense_mibs: Vec<String> = (0..20).map(|_| dense(&mut rng, mib)).collect();
    let dense_times: Vec<f64> = dense_mibs.iter().map(|t| cost(&redactor, t)).collect();
    let after = median((0..runs).map(|_| cost(&redactor, &clean_mib)).collect());
    let rss_after = rss_mb();

    let dense_64k: Vec<String> = (0..runs.max(3) * 4)
        .map(|_| dense(&mut rng, 64 * 1024))
        .collect();
    let t64: Vec<f64> = dense_64k.iter().map(|t| cost(&redactor, t)).collect();
    // The output gate on the same bodies as `POST /v1/gates/output` gets them
    // (`{"content": …}`): the scan, the masked copy and the violations, without the transport.
    let gates = toolgate::redact::Gates::builtin().expect("the default gates");
    let bodies: Vec<serde_json::Value> = dense_64k
        .iter()
        .map(|t| serde_json::json!({ "content": t }))
        .collect();
    let tgate: Vec<f64> = bodies
        .iter()
        .map(|b| {
            let t = Instant::now();
            let screened = gates.screen(toolgate::redact::Gate::Output, b);
            std::hint::black_box(serde_json::to_vec(&screened).map(|v| v.len()).unwrap_or(0));
            t.elapsed().as_secs_f64()
        })
        .collect();
    let dense_1k: Vec<String> = (0..1000).map(|_| dense(&mut rng, 1024)).collect();
    let t = Instant::now();
    for b in &dense_1k {
        std::hint::black_box(redactor.redact(b));
    }
    let t1k = t.elapsed().as_secs_f64();
    let bytes_1k: usize = dense_1k.iter().map(String::len).sum();

    let mbps = |bytes: usize, secs: f64| bytes as f64 / secs / 1e6;
    println!(
        "clean 1 MiB (floor):        {:8.1} MB/s  ({:.1} ms)",
        mbps(mib, before),
        before * 1e3
    );
    println!(
        "dense 1 MiB, 20 distinct:   {:8.1} MB/s  (median {:.1} ms, spread {:.1}–{:.1})",
        mbps(mib, median(dense_times.clone())),
        median(dense_times.clone()) * 1e3,
        dense_times.iter().cloned().fold(f64::MAX, f64::min) * 1e3,
        dense_times.iter().cloned().fold(0.0, f64::max) * 1e3,
    );
    println!(
        "dense 64 KiB, distinct:     {:8.1} MB/s  (median {:.2} ms)",
        mbps(64 * 1024, median(t64.clone())),
        median(t64) * 1e3
    );
    println!(
        "dense 64 KiB, output gate:  {:8.1} MB/s  (median {:.2} ms, with the answer's JSON)",
        mbps(64 * 1024, median(tgate.clone())),
        median(tgate) * 1e3
    );
    println!(
        "dense 1 KiB × 1,000:        {:8.1} MB/s  ({:.1} µs each)",
        mbps(bytes_1k, t1k),
        t1k * 1e6 / 1000.0
    );
    println!(
        "clean 1 MiB after dense:    {:8.1} MB/s  ({:.1} ms) = {:.2}× before",
        mbps(mib, after),
        after * 1e3,
        after / before
    );
    println!(
        "RSS: start {rss_start:.0} MB, after clean {rss_before:.0} MB, after 20 dense MiB {rss_after:.0} MB ({:.2}×)",
        rss_after / rss_before
    );
}
