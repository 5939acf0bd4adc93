//! The hostile path tree of the execution tests against every built-in file tool: links to
//! `/`, to parents, chains, dangling and absolute links, a link to a directory outside, an
//! innocently named link to a key, deny-listed names in any case. Nothing outside the root is
//! read, listed, searched, written or deleted, and nothing deny-listed inside is either.

use std::path::Path;

use serde_json::json;
use toolgate::policy::Snapshot;

use super::files::{exec, rig_with};
use crate::helpers::*;

fn link(target: &str, at: &Path) {
    std::os::unix::fs::symlink(target, at).unwrap();
}

/// The shipped set with the writing tools at low risk, so the jail (not an approval) is what
/// stands between each call and the file system.
fn unattended_writes() -> (TempSet, Snapshot) {
    let set = TempSet::new();
    for t in ["write_file", "edit_file", "delete_file"] {
        set.edit_manifest(t, |m| m["risk"] = json!("low"));
    }
    set.regenerate_schema();
    let snap = toolgate::policy::load(&set.sources()).unwrap().snapshot;
    (set, snap)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_file_tool_reaches_outside_the_root() {
    let (_set, snap) = unattended_writes();
    let r = rig_with(snap, 2000, 30_000).await;
    let outside = tempfile::tempdir().unwrap();
    let out = outside.path();
    let root = r.root.path();
    std::fs::write(out.join("canary"), "CANARY-OUTSIDE").unwrap();
    std::fs::write(root.join("ok.txt"), "fine").unwrap();
    std::fs::write(root.join(".ENV"), "CANARY-ENV").unwrap();
    std::fs::create_dir_all(root.join(".ssh")).unwrap();
    std::fs::write(root.join(".ssh/id_rsa"), "CANARY-KEY").unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    link("/", &root.join("to_root"));
    link("..", &root.join("sub/up"));
    link(out.join("canary").to_str().unwrap(), &root.join("abs"));
    link("sub/up/../x", &root.join("chain1"));
    link("chain1", &root.join("chain2"));
    link(out.join("nope").to_str().unwrap(), &root.join("dangling"));
    link(".ENV", &root.join("env_link"));
    link(".ssh/id_rsa", &root.join("innocent.txt"));
    link(out.to_str().unwrap(), &root.join("out_dir"));
    let canary_rel = format!("../{}/canary", out.file_name().unwrap().to_str().unwrap());
    let attempts = [
        "to_root/etc/passwd".to_owned(),
        "sub/up/../../etc/passwd".to_owned(),
        "abs".to_owned(),
        "chain2".to_owned(),
        "dangling".to_owned(),
        ".ENV".to_owned(),
        ".env".to_owned(),
        "env_link".to_owned(),
        "innocent.txt".to_owned(),
        ".ssh/id_rsa".to_owned(),
        "out_dir/canary".to_owned(),
        "out_dir".to_owned(),
        canary_rel,
        out.join("canary").display().to_string(),
        "/proc/self/root/etc/passwd".to_owned(),
        "-rf".to_owned(),
    ];
    let calls = |p: &str| {
        [
            ("read_file", json!({"path": p})),
            ("list_files", json!({"path": p, "recursive": true})),
            ("search_files", json!({"path": p, "regex": "CANARY|root:"})),
            ("count_matches", json!({"path": p, "regex": "CANARY|root:"})),
            ("write_file", json!({"path": p, "content": "pwned"})),
            (
                "edit_file",
                json!({"path": p, "edits": [{"operation": "replace", "match_mode": "regex", "spec": "(?s).+", "content": "pwned"}]}),
            ),
            ("delete_file", json!({"path": p})),
        ]
    };
    for a in &attempts {
        for (tool, args) in calls(a) {
            let (s, v) = exec(&r.app, SRE, tool, args).await;
            let text = v.to_string();
            assert!(
                !text.contains("CANARY") && !text.contains("root:x:0:0"),
                "{tool} {a}: {text}"
            );
            assert_ne!(v["status"], "success", "{tool} {a}: {s} {v}");
        }
    }
    // Whole-tree walks never list or search what the jail refuses.
    let (_, v) = exec(&r.app, DEV, "search_files", json!({"regex": "CANARY"})).await;
    assert_eq!(v["data"]["matches"], json!([]), "{v}");
    let (_, v) = exec(&r.app, DEV, "list_files", json!({"recursive": true})).await;
    let listed = v["data"]["entries"].to_string();
    assert!(
        !listed.contains(".ENV") && !listed.contains(".ssh") && !listed.contains("canary"),
        "{listed}"
    );
    // Nothing outside changed, nothing inside was replaced.
    let mut names: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["canary"]);
    assert_eq!(
        std::fs::read_to_string(out.join("canary")).unwrap(),
        "CANARY-OUTSIDE"
    );
    assert_eq!(
        std::fs::read_to_string(root.join(".ENV")).unwrap(),
        "CANARY-ENV"
    );
    assert_eq!(
        std::fs::read_to_string(root.join(".ssh/id_rsa")).unwrap(),
        "CANARY-KEY"
    );
    assert!(
        std::fs::symlink_metadata(root.join("innocent.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // And the ordinary paths still work.
    let (_, v) = exec(&r.app, DEV, "read_file", json!({"path": "sub/../ok.txt"})).await;
    assert_eq!(v["data"]["content"], "fine", "{v}");
}
