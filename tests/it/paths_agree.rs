//! Issue 39: `/v1/authorize` and `/v1/execute` agree on where a path leads. A generated tree
//! (links inside the root, out of it, into the sidecar's own files and deny-listed names,
//! chains, dangling links, linked directories, hard links, case and Unicode variants of
//! deny-listed names) is asked about through the real binary's HTTP API: whatever authorize
//! allows, the file tools run; whatever it denies, they refuse. And hard links to deny-listed
//! or outside files read nothing, through a program run under the sandbox or a file tool.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::helpers::*;
use crate::process::{Server, exchange, start_with};

/// `POST route` with `{tool, args}` as the dev agent: status and body.
fn call(server: &Server, route: &str, tool: &str, args: Value) -> (u16, Value) {
    exchange(
        server.port,
        "POST",
        route,
        Some(DEV),
        Some(&json!({"tool": tool, "args": args})),
    )
    .unwrap()
}

/// Whether an execution was refused for its path: denied by policy (403), or refused by the
/// jail (`path_denied`).
fn refused(status: u16, v: &Value) -> bool {
    status == 403 || v.to_string().contains("\"path_denied\"")
}

/// `../` up to `/` from `root`, then `abs`: a relative link target leaving the root.
fn up_to(root: &Path, abs: &Path) -> String {
    let depth = root.components().count().saturating_sub(1);
    format!(
        "{}{}",
        "../".repeat(depth),
        abs.display().to_string().trim_start_matches('/')
    )
}

/// Builds the tree in `root` and answers every path to ask about, and which of them name
/// something that must be refused (outside, deny-listed, protected, hard-linked).
fn generate(root: &Path, outside: &Path) -> (Vec<String>, Vec<String>) {
    let plain_inside = [
        "ok.txt",
        "dir/inner.txt",
        "cafe\u{301}.txt",
        "caf\u{e9}.txt",
    ];
    let secret_inside = [
        ".env",
        ".Env",
        ".ENV.",
        ".env ",
        "\u{ff0e}\u{ff25}\u{ff2e}\u{ff36}",
        "SECRETS/s.txt",
        "\u{17f}ecrets/s.txt",
        "keys/server.\u{212a}ey",
        "keys/ID_RSA",
        "policies/roles.cedar",
        "toolgate.toml",
    ];
    for d in ["dir", "SECRETS", "\u{17f}ecrets", "keys"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    for f in plain_inside {
        std::fs::write(root.join(f), "fine").unwrap();
    }
    for f in secret_inside {
        if !root.join(f).exists() {
            std::fs::write(root.join(f), "CANARY-INSIDE").unwrap();
        }
    }
    std::fs::write(outside.join("canary"), "CANARY-OUTSIDE").unwrap();
    let tokens = repo().join("examples/demo-tokens.json");
    let outside_targets: Vec<PathBuf> =
        vec![outside.join("canary"), PathBuf::from("/etc/passwd"), tokens];
    let mut paths: Vec<String> = Vec::new();
    let mut must_refuse: Vec<String> = Vec::new();
    let mut ways = |i: usize, target: &Path, name: &str, bad: bool| {
        let mut made = Vec::new();
        // Inside the root, links are relative (the jail refuses absolute ones, which leave
        // the root to come back); outside, absolute and relative.
        let inside = target.strip_prefix(root).ok();
        let (to_target, to_parent) = match inside {
            Some(rel) => (
                rel.to_str().unwrap().to_owned(),
                rel.parent()
                    .map(|p| p.to_str().unwrap())
                    .filter(|p| !p.is_empty())
                    .unwrap_or(".")
                    .to_owned(),
            ),
            None => (
                target.to_str().unwrap().to_owned(),
                target.parent().unwrap().to_str().unwrap().to_owned(),
            ),
        };
        let ls = format!("ls_{i}");
        link(&to_target, &root.join(&ls));
        made.push(ls.clone());
        let la = format!("la_{i}");
        link(target.to_str().unwrap(), &root.join(&la));
        paths.push(la.clone());
        must_refuse.push(la);
        let lr = format!("lr_{i}");
        link(&up_to(root, target), &root.join(&lr));
        paths.push(lr.clone());
        must_refuse.push(lr);
        let lc = format!("lc_{i}");
        link(&ls, &root.join(&lc));
        let lc3 = format!("lc3_{i}");
        link(&lc, &root.join(&lc3));
        made.extend([lc, lc3]);
        let ld = format!("ld_{i}");
        link(&to_parent, &root.join(&ld));
        made.push(format!("ld_{i}/{name}"));
        let dg = format!("dg_{i}");
        link(&format!("{to_target}.missing"), &root.join(&dg));
        // A dangling link: refused when it leaves the root; inside, there is nothing to
        // open (a read finds nothing, a write refuses a link).
        if inside.is_some() {
            paths.push(dg);
        } else {
            made.push(dg);
        }
        // A second name makes both refused: plain targets keep one name here, and a file
        // of its own below has two.
        let hl = format!("hl_{i}");
        // Never a second name for a file other tests use (the repository's demo tokens): a
        // sidecar refuses to start while its tokens file has one.
        if bad && !target.starts_with(repo()) && std::fs::hard_link(target, root.join(&hl)).is_ok()
        {
            paths.push(hl.clone());
            must_refuse.push(hl);
        }
        if bad {
            must_refuse.extend(made.iter().cloned());
        }
        paths.extend(made);
        if target.starts_with(root) {
            // Through a linked directory, a name that does not exist yet.
            paths.push(format!("ld_{i}/new-file.txt"));
        }
    };
    let mut i = 0;
    for f in plain_inside {
        let t = root.join(f);
        let name = t.file_name().unwrap().to_str().unwrap().to_owned();
        ways(i, &t, &name, false);
        i += 1;
    }
    for f in secret_inside {
        let t = root.join(f);
        let name = t.file_name().unwrap().to_str().unwrap().to_owned();
        ways(i, &t, &name, true);
        i += 1;
    }
    for t in &outside_targets {
        let name = t.file_name().unwrap().to_str().unwrap().to_owned();
        ways(i, t, &name, true);
        i += 1;
    }
    // The names themselves, as asked and in variants of case and form.
    paths.extend(plain_inside.iter().map(|s| (*s).to_owned()));
    let asked_secrets = [
        ".env",
        ".ENV",
        ".eNv",
        ".env.",
        ".Env ",
        "\u{ff0e}\u{ff25}\u{ff2e}\u{ff36}",
        "secrets/s.txt",
        "\u{17f}ecrets/s.txt",
        "SECRETS/s.txt",
        "keys/server.\u{212a}ey",
        "keys/server.KEY",
        "keys/ID_RSA",
        "keys/id_rsa.",
        "policies/roles.cedar",
        "POLICIES/../policies/roles.cedar",
        "toolgate.toml",
        "data",
    ];
    for s in asked_secrets {
        paths.push(s.to_owned());
        must_refuse.push(s.to_owned());
    }
    // A plain file with two names: neither is read.
    std::fs::write(root.join("dir/twice.txt"), "twice").unwrap();
    std::fs::hard_link(root.join("dir/twice.txt"), root.join("twice-too.txt")).unwrap();
    link("dir/twice.txt", &root.join("to_twice"));
    for p in ["dir/twice.txt", "twice-too.txt", "to_twice"] {
        paths.push(p.to_owned());
        must_refuse.push(p.to_owned());
    }
    // A link named like a secret, to a plain file: refused as asked.
    link("ok.txt", &root.join(".env.local"));
    link("/", &root.join("to_root"));
    link("..", &root.join("dir/up"));
    for (p, bad) in [
        (".env.local", true),
        ("to_root/etc/passwd", true),
        ("dir/up/ok.txt", false),
        ("dir/../ok.txt", false),
        ("nope.txt", false),
        ("dir/new.txt", false),
        ("nodir/new.txt", false),
    ] {
        paths.push(p.to_owned());
        if bad {
            must_refuse.push(p.to_owned());
        }
    }
    (paths, must_refuse)
}

/// The sidecar over a set whose directory is the exec root (policies, schemas, data and
/// config below it, as in the quickstart), with the writing tools at low risk and a policy
/// that reads the resolved path.
fn sidecar() -> (TempSet, Server) {
    let set = TempSet::new();
    std::fs::set_permissions(set.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for t in ["write_file", "edit_file", "delete_file"] {
        set.edit_manifest(t, |m| m["risk"] = json!("low"));
    }
    set.regenerate_schema();
    set.append(
        "policies/zz-resolved.cedar",
        "\n@id(\"no-inner-by-any-name\")\nforbid (principal, action == Action::\"read_file\", resource)\nwhen { context.paths.path.resolved == \"dir/inner.txt\" };\n",
    );
    let server = start_with(
        &set,
        "[exec]\nroot = \".\"\nprograms = [\"sh\", \"cat\", \"git\", \"printf\", \"npm\"]\ngrace_ms = 300\n[anomaly]\nenabled = false\n",
    );
    (set, server)
}

#[test]
fn authorize_and_execute_agree_on_every_generated_path() {
    let (set, server) = sidecar();
    let root = set.dir.path().canonicalize().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let (paths, must_refuse) = generate(&root, outside.path());
    assert!(paths.len() > 120, "{}", paths.len());
    let mut allowed = 0;
    for p in &paths {
        let (_, a) = call(&server, "/v1/authorize", "read_file", json!({"path": p}));
        let (s, e) = call(&server, "/v1/execute", "read_file", json!({"path": p}));
        let text = e.to_string();
        assert!(
            !text.contains("CANARY") && !text.contains("root:x:0:0") && !text.contains("demo-"),
            "{p:?} read a secret: {text}"
        );
        let auth_allows = a["decision"] == "allow";
        assert_eq!(
            auth_allows,
            !refused(s, &e),
            "{p:?}: authorize {a}\nexecute {s} {e}"
        );
        if must_refuse.contains(p) {
            assert!(!auth_allows, "{p:?} allowed: {a}");
        }
        allowed += usize::from(auth_allows);
    }
    let (_, sample) = call(
        &server,
        "/v1/authorize",
        "read_file",
        json!({"path": "ok.txt"}),
    );
    assert!(allowed >= 20, "only {allowed} allowed: {sample}");
    // The policy that reads `resolved` sees the file under every name that leads to it.
    for p in [
        "dir/inner.txt",
        "ls_1",
        "lc3_1",
        "ld_1/inner.txt",
        "dir/up/dir/inner.txt",
    ] {
        let (_, a) = call(&server, "/v1/authorize", "read_file", json!({"path": p}));
        assert_eq!(a["decision"], "deny", "{p}: {a}");
        assert!(a.to_string().contains("no-inner-by-any-name"), "{p}: {a}");
    }
    // Writes: no link on the way or at the end, no hard-linked file, no read-only place.
    let mut wrote = 0;
    for p in &paths {
        let args = json!({"path": p, "content": "w"});
        let (_, a) = call(&server, "/v1/authorize", "write_file", args.clone());
        let (s, e) = call(&server, "/v1/execute", "write_file", args);
        let auth_allows = a["decision"] == "allow";
        assert_eq!(
            auth_allows,
            !refused(s, &e),
            "write {p:?}: authorize {a}\nexecute {s} {e}"
        );
        wrote += usize::from(auth_allows && e["status"] == "success");
    }
    assert!(wrote >= 5, "only {wrote} written");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("canary")).unwrap(),
        "CANARY-OUTSIDE"
    );
}

/// A test tool: `program` with `argv`, path arguments as declared.
fn exec_tool(name: &str, props: Value, path_args: &[&str], executor: Value) -> Value {
    json!({
        "name": name,
        "description": format!("test tool {name}"),
        "inputSchema": {"type": "object", "properties": props, "additionalProperties": false},
        "risk": "low",
        "classification": "read",
        "path_args": path_args,
        "limits": {"timeout_ms": 20000, "max_output_bytes": 65536},
        "executor": executor,
    })
}

#[test]
fn hard_links_to_deny_listed_or_outside_files_read_nothing() {
    let set = TempSet::new();
    let root = set.dir.path().canonicalize().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let out = outside.path().canonicalize().unwrap();
    for d in [root.as_path(), out.as_path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // Readable by anyone (programs run as nobody under a root sidecar): only the sandbox
    // and the jail stand in the way.
    for (path, text) in [
        (root.join(".env"), "CANARY-ENV"),
        (out.join("secret"), "CANARY-OUTSIDE"),
        (root.join("notes.txt"), "plain"),
    ] {
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    std::fs::hard_link(root.join(".env"), root.join("beside-env.txt")).unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::set_permissions(root.join("sub"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let same_device = std::fs::hard_link(out.join("secret"), root.join("sub/copy.txt")).is_ok();
    for (name, schema, path_args, executor) in [
        (
            "read_path",
            json!({"path": {"type": "string"}}),
            &["path"][..],
            json!({"program": "cat", "argv": ["--", "{path}"]}),
        ),
        (
            "probe_links",
            json!({}),
            &[][..],
            json!({"program": "sh", "argv": ["-c", format!(
                "for f in notes.txt beside-env.txt sub/copy.txt {0}; do if cat \"$f\" >/dev/null 2>&1; then echo \"YES:$f\"; else echo \"NO:$f\"; fi; done",
                out.join("secret").display()
            )]}),
        ),
    ] {
        let m = exec_tool(name, schema, path_args, executor);
        set.write(&format!("schemas/tools/{name}.json"), &m.to_string());
    }
    set.regenerate_schema();
    let server = start_with(
        &set,
        "[exec]\nroot = \".\"\nprograms = [\"sh\", \"cat\", \"git\", \"printf\", \"npm\"]\ngrace_ms = 300\n[anomaly]\nenabled = false\n",
    );

    // A program of its own choosing, under the sandbox: only the plain file.
    let (s, v) = call(&server, "/v1/execute", "probe_links", json!({}));
    assert_eq!(s, 200, "{v}");
    let said = v["data"].as_str().unwrap_or_default();
    assert!(said.contains("YES:notes.txt"), "{v}");
    for f in ["beside-env.txt", "sub/copy.txt"] {
        assert!(said.contains(&format!("NO:{f}")), "{f}: {v}");
    }
    assert!(
        said.contains(&format!("NO:{}", out.join("secret").display())),
        "{v}"
    );
    assert!(!said.contains("CANARY"), "{v}");

    // A path argument naming a hard link: denied by authorize, refused by execution.
    let mut linked = vec!["beside-env.txt"];
    if same_device {
        linked.push("sub/copy.txt");
    }
    for p in linked {
        let args = json!({"path": p});
        let (_, a) = call(&server, "/v1/authorize", "read_path", args.clone());
        assert_eq!(a["decision"], "deny", "{p}: {a}");
        for tool in ["read_path", "read_file"] {
            let (s, e) = call(&server, "/v1/execute", tool, args.clone());
            assert!(refused(s, &e), "{tool} {p}: {s} {e}");
            assert!(!e.to_string().contains("CANARY"), "{tool} {p}: {e}");
        }
    }
    // The control: the plain file is read by both.
    for tool in ["read_path", "read_file"] {
        let (s, e) = call(&server, "/v1/execute", tool, json!({"path": "notes.txt"}));
        assert_eq!(s, 200, "{tool}: {e}");
        assert!(e.to_string().contains("plain"), "{tool}: {e}");
    }
}

/// The pure decision on what the pipeline resolved: the facts describe the target, a refusal
/// denies, and a resolution of another value (a re-decision on masked arguments) is not used
/// for this one: denied, never judged as asked.
#[test]
fn the_decision_uses_a_resolution_only_for_the_value_it_was_made_for() {
    use toolgate::authz::{self, Call, Principal, PrincipalKind, Signals};
    use toolgate::tools::Resolution;
    let snap = shipped_snapshot();
    let who = Principal::new(PrincipalKind::Agent, "dev-agent");
    let call = Call {
        tool: "read_file".to_owned(),
        args: json!({"path": "notes.txt"}),
        correlation: Default::default(),
    };
    let decide = |asked: &str, outcome: Result<&str, &str>| {
        let signals = Signals {
            paths: Some(vec![Resolution {
                arg: "path".to_owned(),
                asked: asked.to_owned(),
                outcome: outcome.map(str::to_owned).map_err(str::to_owned),
            }]),
            ..Signals::default()
        };
        authz::decide_with(&snap, &who, &call, &signals)
    };
    assert_eq!(authz::decide(&snap, &who, &call).decision.as_str(), "allow");
    assert_eq!(
        decide("notes.txt", Ok("docs/notes.txt")).decision.as_str(),
        "allow"
    );
    for verdict in [
        decide(
            "notes.txt",
            Err("the path resolves outside the allowed roots"),
        ),
        decide("other.txt", Ok("other.txt")),
    ] {
        assert_eq!(verdict.decision.as_str(), "deny");
        assert_eq!(verdict.reasons, ["deny-listed-paths"]);
    }
    // A present argument the pipeline left unresolved: denied too.
    let none = Signals {
        paths: Some(Vec::new()),
        ..Signals::default()
    };
    assert_eq!(
        authz::decide_with(&snap, &who, &call, &none)
            .decision
            .as_str(),
        "deny"
    );
}
