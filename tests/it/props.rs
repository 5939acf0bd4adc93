//! Property tests of the decision invariants: forbid beats permit; an unknown tool always
//! denies; argument key order never changes a decision (sent as raw JSON over HTTP).

use proptest::prelude::*;
use serde_json::{Value, json};

use toolgate::authz::{Call, Correlation, Outcome, Principal, PrincipalKind, decide};
use toolgate::policy::{Snapshot, load};

use crate::helpers::*;

const TOOLS: [&str; 16] = SHIPPED_TOOLS;
const AGENTS: [&str; 4] = ["dev-agent", "sre-agent", "release-agent", "po-agent"];

fn valid_args(tool: &str, path: &str, n: i64, flag: bool) -> Value {
    match tool {
        "echo" => json!({"message": path}),
        "bash" => json!({"command": format!("cat {path}")}),
        "read_file" => json!({"path": path, "max_bytes": n}),
        "list_files" => json!({"path": path, "recursive": flag, "max_entries": n}),
        "search_files" => json!({"regex": "fn", "path": path, "literal": flag}),
        "git_log" => json!({"max_count": n, "path": path}),
        "git_diff" => json!({"path": path, "staged": flag}),
        "run_tests" => json!({"suite": "unit", "timeout_s": n}),
        "http_fetch" => {
            json!({"url": format!("https://example.com/{path}"), "max_bytes": n * 1000})
        }
        "count_matches" => json!({"regex": "fn", "path": path, "recursive": flag}),
        "edit_file" => {
            json!({"path": path, "edits": [{"operation": "delete", "spec": "x", "count": n}]})
        }
        "delete_file" => json!({"path": path}),
        "write_file" => json!({"path": path, "content": "x"}),
        _ => json!({"remote": "origin", "branch": "feature/x", "force": flag}),
    }
}

fn path_strategy() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "src", "..", ".", "", ".env", ".git", "secrets", "a.pem", "docs", "x.rs",
        ]),
        1..5,
    )
    .prop_map(|segs| segs.join("/"))
}

fn call(tool: &str, args: Value) -> Call {
    Call {
        tool: tool.to_owned(),
        args,
        correlation: Correlation::default(),
    }
}

/// The shipped set plus a forbid-all policy for `tool`, built once per tool.
fn with_forbid(tool: &str) -> &'static Snapshot {
    static SNAPS: std::sync::OnceLock<Vec<Snapshot>> = std::sync::OnceLock::new();
    let snaps = SNAPS.get_or_init(|| TOOLS.iter().map(|t| build_with_forbid(t)).collect());
    let i = TOOLS.iter().position(|t| *t == tool).unwrap();
    &snaps[i]
}

fn build_with_forbid(tool: &str) -> Snapshot {
    let set = TempSet::new();
    set.write(
        "policies/zz-forbid.cedar",
        &format!("@id(\"forbid-all-{tool}\")\nforbid (principal, action == Action::\"{tool}\", resource);\n"),
    );
    load(&set.sources()).unwrap().snapshot
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn forbid_beats_permit(tool_i in 0..TOOLS.len(), agent_i in 0..AGENTS.len(), path in path_strategy(), n in 1_i64..1200, flag: bool) {
        let tool = TOOLS[tool_i];
        let snap = with_forbid(tool);
        let agent = Principal::new(PrincipalKind::Agent, AGENTS[agent_i]);
        let v = decide(snap, &agent, &call(tool, valid_args(tool, &path, n, flag)));
        prop_assert_eq!(v.decision, Outcome::Deny, "{:?}", v);
        // And the same call with everything else unchanged is never allowed via approval either.
        prop_assert!(v.decision != Outcome::PendingApproval);
    }

    #[test]
    fn an_unknown_tool_always_denies(name in "[a-zA-Z0-9_-]{1,40}", agent_i in 0..AGENTS.len(), args in prop::collection::btree_map("[a-z]{1,8}", any::<i64>(), 0..5)) {
        prop_assume!(!TOOLS.contains(&name.as_str()));
        let snap = shared_snapshot();
        let agent = Principal::new(PrincipalKind::Agent, AGENTS[agent_i]);
        let v = decide(snap, &agent, &call(&name, json!(args)));
        prop_assert_eq!(v.decision, Outcome::Deny);
        prop_assert_eq!(v.tool, None);
    }

    #[test]
    fn argument_key_order_never_changes_a_decision(tool_i in 0..TOOLS.len(), path in path_strategy(), n in 1_i64..1200, flag: bool, seed in any::<u64>()) {
        let tool = TOOLS[tool_i];
        let args = valid_args(tool, &path, n, flag);
        let obj = args.as_object().unwrap();
        let mut pairs: Vec<String> = obj.iter().map(|(k, v)| format!("{}:{}", json!(k), v)).collect();
        let forward = format!("{{\"tool\":{},\"args\":{{{}}}}}", json!(tool), pairs.join(","));
        // A deterministic shuffle from the seed.
        let mut s = seed;
        for i in (1..pairs.len()).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            pairs.swap(i, (s >> 33) as usize % (i + 1));
        }
        let shuffled = format!("{{\"args\":{{{}}},\"tool\":{}}}", pairs.join(","), json!(tool));
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let (a, b) = rt.block_on(async {
            let app = shared_app();
            let (_, a) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(&forward)).await;
            let (_, b) = send(&app, "POST", "/v1/authorize", Some(DEV), Some(&shuffled)).await;
            (a, b)
        });
        for key in ["decision", "stage", "reasons", "errors"] {
            prop_assert_eq!(&a[key], &b[key], "{} vs {}", forward, shuffled);
        }
    }
}

fn shared_app() -> axum::Router {
    static APP: std::sync::OnceLock<axum::Router> = std::sync::OnceLock::new();
    APP.get_or_init(app).clone()
}
