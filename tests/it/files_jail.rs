//! The hostile path tree of the execution tests against every built-in file tool: links to
//! `/`, to parents, chains, dangling and absolute links, a link to a directory outside, an
//! innocently named link to a key, deny-listed names in any case. Nothing outside the root is
//! read, listed, searched, written or deleted, and nothing deny-listed inside is either.

use serde_json::json;
use toolgate::policy::Snapshot;

use super::files::rig_with;
use crate::helpers::*;

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
    let r = rig_with(snap, 2000).await;
    let outside = tempfile::tempdir().unwrap();
    let out = outside.path();
    let root = r.root.path();
    let mut attempts = hostile_tree(root, out);
    // And for file tools: a key under an innocent name, a directory outside, an option.
    std::fs::create_dir_all(root.join(".ssh")).unwrap();
    std::fs::write(root.join(".ssh/id_rsa"), "CANARY-KEY").unwrap();
    link(".ssh/id_rsa", &root.join("innocent.txt"));
    link(out.to_str().unwrap(), &root.join("out_dir"));
    attempts.extend(
        [
            "innocent.txt",
            ".ssh/id_rsa",
            "out_dir/canary",
            "out_dir",
            "-rf",
        ]
        .map(str::to_owned),
    );
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
            let (s, v) = execute(&r.app, SRE, tool, args).await;
            let text = v.to_string();
            assert!(
                !text.contains("CANARY") && !text.contains("root:x:0:0"),
                "{tool} {a}: {text}"
            );
            assert_ne!(v["status"], "success", "{tool} {a}: {s} {v}");
        }
    }
    // Whole-tree walks never list or search what the jail refuses.
    let (_, v) = execute(&r.app, DEV, "search_files", json!({"regex": "CANARY"})).await;
    assert_eq!(v["data"]["matches"], json!([]), "{v}");
    let (_, v) = execute(&r.app, DEV, "list_files", json!({"recursive": true})).await;
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
    let (_, v) = execute(&r.app, DEV, "read_file", json!({"path": "sub/../ok.txt"})).await;
    assert_eq!(v["data"]["content"], "fine", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hard_links_linked_directories_and_the_sidecars_own_files_are_refused() {
    let (_set, snap) = unattended_writes();
    let r = rig_with(snap, 2000).await;
    let root = r.root.path();
    std::fs::create_dir_all(root.join(".github/workflows")).unwrap();
    std::fs::write(root.join(".github/workflows/ci.yml"), "on: push\n").unwrap();
    std::fs::create_dir_all(root.join("policies")).unwrap();
    std::fs::write(
        root.join("policies/roles.cedar"),
        "permit(principal, action, resource);\n",
    )
    .unwrap();
    std::fs::create_dir_all(root.join("toolgate-data")).unwrap();
    std::fs::write(root.join("toolgate-data/audit"), "records").unwrap();
    std::fs::create_dir(root.join(".ssh")).unwrap();
    std::fs::write(root.join(".ssh/id_ed25519"), "CANARY-KEY").unwrap();
    // A hard link to a key under an innocent name: same file, other name.
    std::fs::hard_link(root.join(".ssh/id_ed25519"), root.join("notes.txt")).unwrap();
    // A linked directory would dodge the policy that CI files need approval.
    link(".github", &root.join("gh"));
    let edit = json!([{"operation": "replace", "spec": "push", "content": "pwned"}]);
    for (tool, args) in [
        ("read_file", json!({"path": "notes.txt"})),
        (
            "search_files",
            json!({"path": "notes.txt", "regex": "CANARY"}),
        ),
        (
            "edit_file",
            json!({"path": "notes.txt", "edits": [{"operation": "delete", "spec": "CANARY"}]}),
        ),
        ("write_file", json!({"path": "notes.txt", "content": "x"})),
        (
            "edit_file",
            json!({"path": "gh/workflows/ci.yml", "edits": edit}),
        ),
        (
            "write_file",
            json!({"path": "gh/workflows/ci.yml", "content": "x"}),
        ),
        ("read_file", json!({"path": "policies/roles.cedar"})),
        (
            "write_file",
            json!({"path": "policies/extra.cedar", "content": "permit(principal, action, resource);"}),
        ),
        ("delete_file", json!({"path": "policies/roles.cedar"})),
        ("list_files", json!({"path": "toolgate-data"})),
        ("read_file", json!({"path": "toolgate-data/audit"})),
    ] {
        // The decision resolves the path as the jail does (issue 39): denied before the
        // tool runs, by the policy that reads `context.paths.path.denied`.
        let (s, v) = execute(&r.app, SRE, tool, args.clone()).await;
        assert_eq!(s, axum::http::StatusCode::FORBIDDEN, "{tool} {args}: {v}");
        assert_eq!(
            v["decision"]["reasons"],
            json!(["deny-listed-paths"]),
            "{tool} {args}: {v}"
        );
        assert!(!v.to_string().contains("CANARY"), "{v}");
    }
    let (_, v) = execute(
        &r.app,
        DEV,
        "search_files",
        json!({"regex": "CANARY|permit|records"}),
    )
    .await;
    assert_eq!(v["data"]["matches"], json!([]), "{v}");
    let (_, v) = execute(&r.app, DEV, "list_files", json!({"recursive": true})).await;
    let listed = v["data"]["entries"].to_string();
    assert!(
        !listed.contains("policies") && !listed.contains("toolgate-data"),
        "{listed}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join(".github/workflows/ci.yml")).unwrap(),
        "on: push\n"
    );
    assert!(!root.join("policies/extra.cedar").exists());
    assert_eq!(
        std::fs::read_to_string(root.join(".ssh/id_ed25519")).unwrap(),
        "CANARY-KEY"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_file_never_gains_a_setuid_bit_and_edits_cannot_balloon() {
    use std::os::unix::fs::PermissionsExt as _;
    let (_set, snap) = unattended_writes();
    let r = rig_with(snap, 2000).await;
    let root = r.root.path();
    std::fs::write(root.join("tool.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(
        root.join("tool.sh"),
        std::fs::Permissions::from_mode(0o4755),
    )
    .unwrap();
    let (_, v) = execute(
        &r.app,
        SRE,
        "write_file",
        json!({"path": "tool.sh", "content": "#!/bin/sh\nid\n"}),
    )
    .await;
    assert_eq!(v["status"], "success", "{v}");
    let mode = std::fs::metadata(root.join("tool.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
    // 100 one-byte matches, each replaced by 200 KB: 20 MB, over the 10 MB an edit may make.
    std::fs::write(root.join("x.txt"), "x".repeat(100)).unwrap();
    let edits = json!([{"operation": "replace", "spec": "x", "count": 100, "content": "y".repeat(200_000)}]);
    let (_, v) = execute(
        &r.app,
        SRE,
        "edit_file",
        json!({"path": "x.txt", "edits": edits}),
    )
    .await;
    assert_eq!(v["error"]["code"], "too_large", "{v}");
    assert_eq!(
        std::fs::read_to_string(root.join("x.txt")).unwrap(),
        "x".repeat(100)
    );
}
