//! The module graph points one way. `src/lib.rs` lists the top-level modules by layer (front
//! ends, pipeline, domain, leaves); every `crate::` path in a module's files (outside its
//! `#[cfg(test)]` part) is an edge. No edge may climb to a higher layer, and no two modules
//! may reach each other, directly or around a loop.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::helpers::repo;

const LAYERS: [&str; 4] = ["front ends", "pipeline", "domain", "leaves"];

/// Module → layer index (0 = front ends), read from the `//! - <layer>: ...` lines of lib.rs.
fn layers(lib: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let mut current = None;
    for line in lib.lines() {
        let Some(doc) = line.strip_prefix("//!") else {
            continue;
        };
        let doc = doc.trim();
        if let Some(item) = doc.strip_prefix("- ") {
            current = LAYERS
                .iter()
                .position(|l| item.starts_with(&format!("{l}:")));
        }
        if let Some(layer) = current {
            for name in doc.split("[`").skip(1).filter_map(|s| s.split('`').next()) {
                out.insert(name.to_owned(), layer);
            }
        }
    }
    out
}

/// The top-level modules `lib.rs` declares.
fn declared(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_owned())
        .collect()
}

/// Every `crate::x` a module's files name (in `use crate::{a, b::c}` groups too).
fn uses(dir: &Path, module: &str) -> BTreeSet<String> {
    let mut files = Vec::new();
    let single = dir.join(format!("{module}.rs"));
    if single.is_file() {
        files.push(single);
    }
    let mut stack = vec![dir.join(module)];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut out = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (i, _) in text.match_indices("crate::") {
            let rest = &text[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let inner = group.split('}').next().unwrap_or_default();
                for item in inner.split(',') {
                    let name: String = item
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    out.insert(name);
                }
            } else {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                out.insert(name);
            }
        }
    }
    out.remove(module);
    out
}

fn graph() -> (BTreeMap<String, BTreeSet<String>>, BTreeMap<String, usize>) {
    let src = repo().join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let mods = declared(&lib);
    let layer = layers(&lib);
    let edges = mods
        .iter()
        .map(|m| {
            let to = uses(&src, m)
                .into_iter()
                .filter(|t| mods.contains(t))
                .collect();
            (m.clone(), to)
        })
        .collect();
    (edges, layer)
}

#[test]
fn every_module_sits_in_one_layer_and_no_edge_climbs() {
    let (edges, layer) = graph();
    let unplaced: Vec<_> = edges.keys().filter(|m| !layer.contains_key(*m)).collect();
    assert!(
        unplaced.is_empty(),
        "lib.rs places no layer on {unplaced:?}"
    );
    let mut climbs = Vec::new();
    for (from, tos) in &edges {
        for to in tos {
            if layer[to] < layer[from] {
                climbs.push(format!(
                    "{from} ({}) uses {to} ({})",
                    LAYERS[layer[from]], LAYERS[layer[to]]
                ));
            }
        }
    }
    assert!(climbs.is_empty(), "edges up the layers: {climbs:#?}");
}

#[test]
fn no_two_top_level_modules_reach_each_other() {
    let (edges, _) = graph();
    // A module on a cycle reaches itself: search from each one.
    let mut cycles = Vec::new();
    for start in edges.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<(String, Vec<String>)> = edges[start]
            .iter()
            .map(|t| (t.clone(), vec![start.clone(), t.clone()]))
            .collect();
        while let Some((at, path)) = stack.pop() {
            if &at == start {
                cycles.push(path.join(" → "));
                break;
            }
            if !seen.insert(at.clone()) {
                continue;
            }
            for next in &edges[&at] {
                let mut p = path.clone();
                p.push(next.clone());
                stack.push((next.clone(), p));
            }
        }
    }
    assert!(cycles.is_empty(), "cycles between modules: {cycles:#?}");
}

/// The checks above see what they claim: a cycle and a climb written into a copy are found.
#[test]
fn the_reader_finds_grouped_and_plain_paths() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.rs"),
        "use crate::{b, c::X};\nfn f() { crate::d::g(); }\n#[cfg(test)]\nuse crate::e;\n",
    )
    .unwrap();
    let got = uses(dir.path(), "a");
    assert_eq!(
        got,
        ["b", "c", "d"].iter().map(|s| (*s).to_owned()).collect()
    );
    let lib = "//! - front ends: [`x`]\n//! - leaves: [`y`],\n//!   [`z`]\npub mod x;\n";
    let l = layers(lib);
    assert_eq!((l["x"], l["y"], l["z"]), (0, 3, 3));
}
