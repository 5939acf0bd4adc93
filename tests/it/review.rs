//! The policy author's tools through the `toolgate` binary: `test` (fixtures and coverage).

use crate::helpers::*;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn shipped_fixtures_pass_and_cover_every_shipped_policy() {
    let out = in_repo(&["test", "--require-coverage"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains(" 0 failed"), "{text}");
    assert!(
        text.contains("coverage: 30 of 30 policies"),
        "every shipped policy determines a case: {text}"
    );
}

#[test]
fn a_failing_case_names_itself_expected_got_and_the_deciding_policies() {
    let set = TempSet::new();
    // A policy edit that breaks an expectation: product owners may now run tests.
    set.append("policies/roles.cedar", PO_RUNS_TESTS);
    set.write(
        "policies/tests/extra.json",
        r#"{"cases": [
          {"name": "product owners do not run tests", "agent": "po-agent", "tool": "run_tests",
           "expect": "deny"},
          {"name": "writes wait", "agent": "dev-agent", "tool": "write_file",
           "args": {"path": "a.txt", "content": "x"}, "expect": "pending_approval",
           "policies": ["some-other-policy"]}
        ]}"#,
    );
    let out = on(&set, "test").output().unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("FAIL ")
            && text.contains("extra.json › product owners do not run tests")
            && text.contains("expected deny, got allow (stage policy)")
            && text.contains("decided by: po-run-tests"),
        "{text}"
    );
    assert!(
        text.contains(
            "outcome pending_approval as expected, but decided by: tier-high-needs-approval"
        ) && text.contains("expected policies: some-other-policy"),
        "{text}"
    );
    // The shipped fixture for token roles catches the same widening.
    assert!(text.contains("3 failed"), "{text}");
}

#[test]
fn coverage_lists_policies_no_case_exercises_and_can_gate() {
    let set = TempSet::new();
    set.append(
        "policies/elevated.cedar",
        "\n@id(\"no-pushes-on-fridays\")\nforbid (principal, action == Action::\"git_push\", resource)\nwhen { context.args.branch == \"friday\" };\n",
    );
    let out = on(&set, "test").output().unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "coverage alone does not fail: {text}");
    assert!(
        text.contains("coverage: 30 of 31 policies")
            && text.contains("no-pushes-on-fridays  (")
            && text.contains("elevated.cedar)"),
        "{text}"
    );
    let out = on(&set, "test").arg("--require-coverage").output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    // JSON for tools.
    let out = on(&set, "test").arg("--json").output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["uncovered"],
        serde_json::json!(["no-pushes-on-fridays"])
    );
    assert_eq!(json["results"].as_array().unwrap().len(), 71);
}

#[test]
fn a_broken_fixture_is_an_error_naming_file_and_line() {
    let set = TempSet::new();
    set.write(
        "policies/tests/bad.json",
        "{\"cases\": [\n  {\"name\": \"x\", \"agent\": \"dev-agent\", \"tool\": \"read_file\", \"expect\": \"allow\", \"argz\": {}}\n]}",
    );
    let out = on(&set, "test").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("bad.json:2:") && err.contains("argz"), "{err}");
}

// `toolgate diff`: pairs of policy sets with known answers.

/// cvc5 is needed for the symbolic diff. `.ci/run` installs it and sets
/// `TOOLGATE_REQUIRE_CVC5=1`, so CI cannot skip these; elsewhere they say loudly that they
/// did not run.
fn solver() -> bool {
    if toolgate::review::diff::find_solver().is_ok() {
        return true;
    }
    assert!(
        std::env::var_os("TOOLGATE_REQUIRE_CVC5").is_none(),
        "TOOLGATE_REQUIRE_CVC5 is set but cvc5 is not installed (apt-get install cvc5)"
    );
    eprintln!(
        "SKIPPED: cvc5 not installed (apt-get install cvc5); the symbolic diff was not tested"
    );
    false
}

/// `toolgate diff OLD NEW --json` over two temp sets sharing OLD's schemas.
fn diff(old: &TempSet, new: &TempSet, extra: &[&str]) -> (i32, serde_json::Value) {
    let out = toolgate()
        .arg("diff")
        .arg(old.policies())
        .arg(new.policies())
        .arg("--schemas")
        .arg(old.dir.path().join("schemas"))
        .arg("--json")
        .args(extra)
        .output()
        .unwrap();
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), json)
}

fn change_of<'a>(d: &'a serde_json::Value, action: &str) -> &'a serde_json::Value {
    d["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["action"] == action)
        .unwrap_or_else(|| panic!("no action {action} in {d}"))
}

fn only_changed(d: &serde_json::Value) -> Vec<(String, String)> {
    d["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["change"] != "equal")
        .map(|a| {
            (
                a["action"].as_str().unwrap().to_owned(),
                a["change"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn diff_added_permit_is_a_widening_with_a_confirmed_example_and_fails_the_gate() {
    if !solver() {
        return;
    }
    let (old, new) = (TempSet::new(), TempSet::new());
    new.append("policies/roles.cedar", PO_RUNS_TESTS);
    let (code, d) = diff(&old, &new, &["--fail-on", "widening"]);
    assert_eq!(code, 1, "{d}");
    assert_eq!(
        only_changed(&d),
        [("run_tests".to_owned(), "widened".to_owned())]
    );
    let ex = &change_of(&d, "run_tests")["widening"];
    assert_eq!(ex["confirmed"], true, "{ex}");
    assert_eq!(ex["on_your_entities"], true, "{ex}");
    assert_eq!(ex["allowed_by"], serde_json::json!(["po-run-tests"]));
    assert!(
        ex["principal_in"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r == "Role::\"product_owner\""),
        "{ex}"
    );
}

#[test]
fn diff_added_forbid_is_a_narrowing_and_passes_the_widening_gate() {
    if !solver() {
        return;
    }
    let (old, new) = (TempSet::new(), TempSet::new());
    new.append(
        "policies/elevated.cedar",
        "\n@id(\"no-git-log\")\nforbid (principal, action == Action::\"git_log\", resource);\n",
    );
    let (code, d) = diff(&old, &new, &["--fail-on", "widening"]);
    assert_eq!(code, 0, "{d}");
    assert_eq!(
        only_changed(&d),
        [("git_log".to_owned(), "narrowed".to_owned())]
    );
    assert_eq!(change_of(&d, "git_log")["narrowing"]["confirmed"], true);
    let (code, _) = diff(&old, &new, &["--fail-on", "change"]);
    assert_eq!(code, 1);
}

#[test]
fn diff_of_a_reordered_and_moved_set_is_equal() {
    if !solver() {
        return;
    }
    let (old, new) = (TempSet::new(), TempSet::new());
    // Reverse the order of the policies in roles.cedar and move one to a new file.
    let text = std::fs::read_to_string(old.policies().join("roles.cedar")).unwrap();
    let mut chunks: Vec<&str> = text.split("\n\n").collect();
    let moved = chunks.pop().unwrap();
    chunks.reverse();
    new.write("policies/roles.cedar", &chunks.join("\n\n"));
    new.write("policies/zz-moved.cedar", moved);
    let (code, d) = diff(&old, &new, &["--fail-on", "change"]);
    assert_eq!(code, 0, "{d}");
    assert!(only_changed(&d).is_empty(), "{d}");
    assert_ne!(d["old_revision"], d["new_revision"], "the files did change");
}

#[test]
fn diff_of_a_changed_condition_shows_a_call_in_the_gap() {
    if !solver() {
        return;
    }
    let (old, new) = (TempSet::new(), TempSet::new());
    let tiers = std::fs::read_to_string(old.policies().join("tiers.cedar")).unwrap();
    assert!(tiers.contains("context.args.timeout_s > 600"));
    new.write(
        "policies/tiers.cedar",
        &tiers.replace(
            "context.args.timeout_s > 600",
            "context.args.timeout_s > 1200",
        ),
    );
    let (_, d) = diff(&old, &new, &[]);
    assert_eq!(
        only_changed(&d),
        [("run_tests".to_owned(), "widened".to_owned())]
    );
    let ex = &change_of(&d, "run_tests")["widening"];
    let t = ex["context"]["args"]["timeout_s"].as_i64().unwrap();
    assert!(
        (601..=1200).contains(&t),
        "the example sits in the gap: {ex}"
    );
    assert_eq!(ex["context"]["approval"]["granted"], false, "{ex}");
    assert_eq!(ex["confirmed"], true);
}

#[test]
fn diff_without_a_solver_says_so_and_compares_the_fixtures() {
    let (old, new) = (TempSet::new(), TempSet::new());
    new.append("policies/roles.cedar", PO_RUNS_TESTS);
    let out = toolgate()
        .env("CVC5", "/nonexistent/cvc5")
        .arg("diff")
        .arg(old.policies())
        .arg(new.policies())
        .arg("--schemas")
        .arg(old.dir.path().join("schemas"))
        .args(["--fail-on", "widening"])
        .output()
        .unwrap();
    let (text, err) = (stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{text}{err}");
    assert!(
        err.contains("no SMT solver") && err.contains("apt-get install cvc5"),
        "{err}"
    );
    assert!(
        text.contains("widened") && text.contains("roles from a verified token"),
        "{text}"
    );
}

/// Templates are outside the proof: a changed or added one fails the widening gate (every grant
/// linking it changes with it), a removed one only the change gate; a reload under `hold`
/// holds a changed template like any widening.
#[test]
fn diff_treats_a_changed_template_as_widening() {
    let (old, new) = (TempSet::new(), TempSet::new());
    new.write(
        "policies/grants.cedar",
        "@id(\"grant-tool-access\")\npermit (principal in ?principal, action in [Action::\"read\", Action::\"write\", Action::\"destructive\"], resource == ?resource)\nwhen { context.usage.calls_last_minute < 1000 };\n",
    );
    let out = toolgate()
        .arg("diff")
        .arg(old.policies())
        .arg(new.policies())
        .arg("--schemas")
        .arg(old.dir.path().join("schemas"))
        .args(["--fail-on", "widening"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("changed grant-tool-access"), "{text}");

    std::fs::remove_file(new.policies().join("grants.cedar")).unwrap();
    let run = |fail_on: &str| {
        toolgate()
            .arg("diff")
            .arg(old.policies())
            .arg(new.policies())
            .arg("--schemas")
            .arg(old.dir.path().join("schemas"))
            .args(["--fail-on", fail_on, "--json"])
            .output()
            .unwrap()
    };
    let out = run("widening");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if solver() {
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            v["templates"]["removed"],
            serde_json::json!(["grant-tool-access"])
        );
    }
    assert_eq!(run("change").status.code(), Some(1));

    // A reload under hold holds it.
    let set = TempSet::new();
    let data = tempfile::tempdir().unwrap();
    let stores = toolgate::storage::Stores::open(data.path()).unwrap();
    let options = toolgate::reload::StoreOptions {
        remember: Some(stores.policies.clone()),
        widening: toolgate::reload::Widening::Hold,
    };
    let (store, _, _) = toolgate::reload::PolicyStore::start(set.sources(), options).unwrap();
    set.write(
        "policies/grants.cedar",
        "@id(\"grant-tool-access\")\npermit (principal in ?principal, action in [Action::\"read\", Action::\"write\", Action::\"destructive\"], resource == ?resource)\nwhen { context.usage.calls_last_minute < 1000 };\n",
    );
    match store.reload(false) {
        toolgate::reload::ReloadOutcome::Held { review, .. } => {
            assert!(
                review
                    .widened
                    .contains(&"template grant-tool-access".to_owned()),
                "{review:?}"
            )
        }
        other => panic!("a changed template must be held: {other:?}"),
    }
}
