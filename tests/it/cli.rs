//! The `toolgate` binary: `validate` (file:line diagnostics, exit codes), `schema --check`,
//! `authorize` offline, and `serve` refusing a broken set before binding.

use serde_json::Value;

use crate::helpers::*;

fn validate(set: &TempSet) -> (i32, String) {
    let out = on(set, "validate").output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn validate_accepts_the_shipped_policies() {
    let out = in_repo(&["validate"]);
    assert_ok(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok: 30 policies, 1 template, 16 tools"));
}

#[test]
fn validate_rejects_a_policy_reading_a_non_existent_argument_with_file_line_and_hint() {
    let set = TempSet::new();
    set.append(
        "policies/elevated.cedar",
        "\n@id(\"typo\")\nforbid (principal, action == Action::\"read_file\", resource)\nwhen { context.args.pth like \"*.key\" };\n",
    );
    let lines = std::fs::read_to_string(set.policies().join("elevated.cedar"))
        .unwrap()
        .lines()
        .count();
    let (code, err) = validate(&set);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("elevated.cedar:{lines}:8")), "{err}");
    assert!(err.contains("did you mean `path`?"), "{err}");
}

/// Deliberately broken twins of the shipped set: each must be refused, naming the file (and
/// the line where there is one).
#[test]
fn validate_rejects_broken_twins_of_the_shipped_policies() {
    let twins: [(&str, &str, &str, &str); 9] = [
        (
            "policies/tiers.cedar",
            "\npermit (principal, action, resource) when { true && };\n",
            "tiers.cedar:",
            "unexpected token",
        ),
        (
            "policies/roles.cedar",
            "\npermit (principal, action == Action::\"read_file\", resource) when { context.args.max_bytes == \"big\" };\n",
            "roles.cedar:",
            "type",
        ),
        (
            "policies/roles.cedar",
            "\npermit (principal, action == Action::\"rm_rf\", resource);\n",
            "roles.cedar:",
            "rm_rf",
        ),
        (
            "policies/roles.cedar",
            "\npermit (principal in Team::\"x\", action, resource);\n",
            "roles.cedar:",
            "Team",
        ),
        (
            "policies/roles.cedar",
            "\n@id(\"developers-read-write\")\npermit (principal, action, resource);\n",
            "roles.cedar:",
            "duplicate policy id",
        ),
        (
            "policies/roles.cedar",
            "\npermit (principal, action in Action::\"read\", resource) when { context.args.path == \"x\" };\n",
            "roles.cedar:",
            "path",
        ),
        (
            "policies/roles.cedar",
            "\npermit (principal, action == Action::\"read_file\", resource) when { context.args.max_bytes > 1 };\n",
            "roles.cedar:",
            "max_bytes",
        ),
        (
            "policies/entities.json",
            "[{\"uid\": {\"type\": \"Agent\", \"id\": \"x\"}, \"attrs\": {\"owner\": 3}, \"parents\": []}]",
            "entities.json",
            "entity deserialization",
        ),
        (
            "schemas/tools/echo.json",
            "{\"name\": \"echo\"}",
            "echo.json",
            "missing field",
        ),
    ];
    for (file, text, location, fragment) in twins {
        let set = TempSet::new();
        if file.ends_with(".cedar") {
            set.append(file, text);
        } else {
            set.write(file, text);
        }
        let (code, err) = validate(&set);
        assert_eq!(code, 1, "{file} {text}: {err}");
        assert!(err.contains(location), "{file}: want {location} in {err}");
        assert!(err.contains(fragment), "{file}: want {fragment} in {err}");
    }
}

#[test]
fn validate_reports_every_problem_at_once_and_refuses_empty_files() {
    let set = TempSet::new();
    set.write("policies/empty.cedar", "  \n");
    set.append(
        "policies/tiers.cedar",
        "\npermit (principal, action, resource) when { };\n",
    );
    set.append(
        "policies/roles.cedar",
        "\npermit (principal, action == Action::\"nope\", resource);\n",
    );
    let (code, err) = validate(&set);
    assert_eq!(code, 1);
    // Three problems, five errors: Cedar also warns twice about the unknown action's policy
    // (no applicable action, impossible), and warnings are errors.
    assert!(err.contains("5 errors"), "{err}");
    assert!(err.contains("empty.cedar: the file is empty"), "{err}");
}

#[test]
fn schema_check_passes_on_the_shipped_set_and_fails_when_a_manifest_changes() {
    let out = in_repo(&["schema", "--check"]);
    assert_ok(&out);

    let set = TempSet::new();
    set.edit_manifest("echo", |m| {
        m["inputSchema"]["properties"]["loud"] = serde_json::json!({"type": "boolean"});
    });
    let schemas = set.sources().schemas_dir;
    let out = toolgate()
        .args(["schema", "--check", "--schemas"])
        .arg(&schemas)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("stale"));
    // The server's loader refuses the stale schema too.
    let (code, err) = validate(&set);
    assert_eq!(code, 1);
    assert!(err.contains("does not match the tool manifests"), "{err}");
    // Regenerating fixes it, and the new argument is typed for policies.
    let out = toolgate()
        .args(["schema", "--schemas"])
        .arg(&schemas)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = std::fs::read_to_string(schemas.join("toolgate.cedarschema")).unwrap();
    assert!(text.contains("loud?: Bool"), "{text}");
    assert_eq!(validate(&set).0, 0);
}

#[test]
fn authorize_decides_offline_like_the_server() {
    let out = in_repo(&[
        "authorize",
        "--agent",
        "dev-agent",
        "examples/requests/write-file-pending.json",
    ]);
    assert_ok(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["decision"], "pending_approval");
    assert_eq!(v["reasons"][0], "tier-high-needs-approval");

    let out = in_repo(&[
        "authorize",
        "--approver",
        "bob",
        "--requester",
        "release-agent",
        "--tool",
        "git_push",
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["decision"], "deny",
        "critical calls are approved by directors only"
    );
}

#[test]
fn serve_reports_a_broken_set_and_refuses_a_config_without_auth() {
    // A broken set no longer stops `serve` (it serves the remembered set, or denies all and
    // is not ready; see tests/it/lifecycle.rs). A config without authentication still stops
    // it, before the data directory is opened.
    let set = TempSet::new();
    set.append(
        "policies/tiers.cedar",
        "\nforbid (principal, action, resource) when { context.nope };\n",
    );
    let out = on(&set, "serve")
        .current_dir(set.dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "no auth configured: {err}");
    assert!(err.contains("no authentication is configured"), "{err}");
    assert!(!set.dir.path().join("data").exists(), "nothing was opened");

    let out = in_repo(&["serve"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no authentication is configured"));
}

/// `toolgate redact` with `stdin`, from a temp dir holding `config` as `tg.toml`.
fn redact(config: &str, args: &[&str], stdin: &str) -> std::process::Output {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tg.toml"), config).unwrap();
    let mut child = toolgate()
        .current_dir(dir.path())
        .args(["redact", "--config", "tg.toml"])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn redact_masks_stdin_with_the_configured_detectors() {
    let config = "[[redaction.detectors]]\nname = \"acme-api-key\"\nregex = 'acme_([A-Za-z0-9]{20})'\ngroup = 1\n";
    let text = format!("k acme_Zq8Fh3kLm9Pq2Rs7Tv4W and {AWS}\npassword: Tr0ub4dor&3x\n");
    let out = redact(config, &[], &text);
    assert_ok(&out);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "k acme_<redacted:acme-api-key> and <redacted:aws-access-key>\npassword: <redacted:password-assignment>\n"
    );
    let out = redact(
        config,
        &["--jsonl"],
        "\"acme_Zq8Fh3kLm9Pq2Rs7Tv4W\"\n\"plain\"\n",
    );
    assert_ok(&out);
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["masked"], "acme_<redacted:acme-api-key>");
    assert_eq!(lines[0]["findings"][0]["kind"], "acme-api-key");
    assert_eq!(lines[0]["findings"][0]["start"], 5);
    assert_eq!(lines[1]["findings"], serde_json::json!([]));
    // Bad input and bad config: exit 2 with what to fix.
    let out = redact(config, &["--jsonl"], "\"ok\"\nnot json\n");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("stdin line 2: not a JSON string"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = redact(
        "[[redaction.detectors]]\nname = \"x\"\nregex = '(['\n",
        &[],
        "x",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the regex does not compile"));
}
