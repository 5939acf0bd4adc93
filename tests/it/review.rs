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
        text.contains("coverage: 23 of 23 policies"),
        "every shipped policy determines a case: {text}"
    );
}

#[test]
fn a_failing_case_names_itself_expected_got_and_the_deciding_policies() {
    let set = TempSet::new();
    // A policy edit that breaks an expectation: product owners may now run tests.
    set.append(
        "policies/roles.cedar",
        "\n@id(\"po-run-tests\")\npermit (principal in Role::\"product_owner\", action == Action::\"run_tests\", resource);\n",
    );
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
        text.contains("coverage: 23 of 24 policies")
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
    assert_eq!(json["results"].as_array().unwrap().len(), 42);
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
