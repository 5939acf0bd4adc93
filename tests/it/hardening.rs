//! Issue 20, the attack run's findings, each pinned: executed programs cannot reach the
//! sidecar's own files, secrets, home directories or the network (real binary); git tools
//! stay in the root's work tree and out of deny-listed files; a cancelled run leaves no
//! process (real binary, 100 races); an argument naming a time limit is applied; the
//! decision matches deny-listed names the way execution does; deny entries are real globs.

use std::io::Write as _;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::{Value, json};
use toolgate::api::router;
use toolgate::exec::{ExecSettings, Runner};
use toolgate::gateway::Gateway;
use toolgate::policy::load;
use toolgate::tools::Programs;

use crate::helpers::*;
use crate::process::*;

/// The programs the shipped tools run, and `sh` for the test tools.
fn shipped_programs() -> Programs {
    Programs::resolve(["git", "printf", "npm", "sh"].map(str::to_owned))
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn manifest(name: &str, props: Value, executor: Value) -> Value {
    json!({
        "name": name,
        "description": format!("test tool {name}"),
        "inputSchema": {"type": "object", "properties": props, "additionalProperties": false},
        "risk": "low",
        "classification": "write",
        "limits": {"timeout_ms": 20000, "max_output_bytes": 65536},
        "executor": executor,
    })
}

fn add_tools(set: &TempSet, tools: &[Value]) {
    for t in tools {
        set.write(
            &format!("schemas/tools/{}.json", t["name"].as_str().unwrap()),
            &t.to_string(),
        );
    }
    set.regenerate_schema();
}

/// Each probe: a label and a shell command; the program prints `YES:label` or `NO:label`.
const PROBES: [(&str, &str); 18] = [
    ("read_plain", "cat notes.txt"),
    ("write_declared", "echo x > out/result.txt"),
    ("list_root", "ls ."),
    ("read_policy", "cat policies/roles.cedar"),
    (
        "write_via_declared_link",
        "echo 'permit (principal, action, resource);' > linkout/zz-evil.cedar",
    ),
    ("read_hard_link", "cat innocent.txt"),
    (
        "write_policy",
        "echo 'permit (principal, action, resource);' > policies/zz-evil.cedar",
    ),
    ("read_schema", "cat schemas/toolgate.cedarschema"),
    ("read_config", "cat toolgate.toml"),
    ("read_tokens", "cat TOKENS"),
    ("read_env", "cat .env"),
    ("read_key", "cat keys/ID_RSA.pem"),
    ("read_shadow", "cat /etc/shadow"),
    ("list_root_home", "ls /root"),
    ("write_root", "echo x > planted.txt"),
    ("overwrite_plain", "echo x > notes.txt"),
    ("read_dot_git_config", "cat .git/config"),
    (
        "network",
        "bash -c 'exec 3<>/dev/tcp/127.0.0.1/'$(cat port.txt)",
    ),
];

/// What the attack run did through `run_tests`, and more, against the real binary over a
/// quickstart-like layout: the exec root holds the policies, schemas, data and config.
#[test]
fn programs_reach_only_what_their_manifest_declares() {
    let set = TempSet::new();
    let root = set.dir.path();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(root.join("notes.txt"), "plain").unwrap();
    std::fs::write(root.join(".env"), "DB_PASS=hunter2").unwrap();
    std::fs::create_dir(root.join("keys")).unwrap();
    std::fs::write(root.join("keys/ID_RSA.pem"), "PRIVATE").unwrap();
    std::fs::create_dir(root.join(".git")).unwrap();
    std::fs::write(root.join(".git/config"), "[core]").unwrap();
    std::fs::create_dir(root.join("out")).unwrap();
    std::fs::set_permissions(root.join("out"), std::fs::Permissions::from_mode(0o777)).unwrap();
    // The demo tokens file the harness configures (outside the root, protected all the same).
    let tokens = repo().join("examples/demo-tokens.json");
    let mut script = String::new();
    for (label, cmd) in PROBES {
        let cmd = cmd.replace("TOKENS", &tokens.display().to_string());
        script.push_str(&format!(
            "if ( {cmd} ) >/dev/null 2>&1; then echo YES:{label}; else echo NO:{label}; fi; "
        ));
    }
    script.push_str("echo UID:$(id -u)");
    // The port is known only once the server is up: the script reads it from `port.txt`.
    let script = script.replace('{', "{{").replace('}', "}}");
    add_tools(
        &set,
        &[
            manifest(
                "probe",
                json!({}),
                json!({"program": "sh", "argv": ["-c", script],
                       "sandbox": {"writes": ["out", "linkout"]}}),
            ),
            manifest(
                "probe_net",
                json!({}),
                json!({"program": "bash", "argv": ["-c",
                    "exec 3<>/dev/tcp/127.0.0.1/$(cat port.txt) && echo CONNECTED"],
                       "sandbox": {"network": true}}),
            ),
        ],
    );
    let server = start_with(
        &set,
        "[exec]\nroot = \".\"\nprograms = [\"sh\", \"bash\", \"git\", \"printf\", \"npm\"]\ngrace_ms = 300\n",
    );
    std::fs::write(root.join("port.txt"), server.port.to_string()).unwrap();
    // A declared writable path that is a link into the protected set, and another name (a
    // hard link) of a protected file.
    std::os::unix::fs::symlink(set.policies(), root.join("linkout")).unwrap();
    std::fs::write(root.join("data/secret.txt"), "SECRET").unwrap();
    std::fs::hard_link(root.join("data/secret.txt"), root.join("innocent.txt")).unwrap();
    let before: Vec<_> = std::fs::read_dir(set.policies())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();

    let (s, v) = run_tool(&server, "probe", json!({}));
    assert_eq!(s, 200, "{v}");
    let out = v["data"].as_str().unwrap_or_default().to_owned();
    for (label, _) in PROBES {
        let expected = if matches!(label, "read_plain" | "write_declared" | "list_root") {
            format!("YES:{label}")
        } else {
            format!("NO:{label}")
        };
        assert!(out.contains(&expected), "{label}: {out}\n{v}");
    }
    if is_root() {
        assert!(
            out.contains("UID:65534"),
            "root runs programs as nobody: {out}"
        );
    }
    // Nothing was planted, and the policy set is what it was.
    assert!(!root.join("planted.txt").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("notes.txt")).unwrap(),
        "plain"
    );
    let after: Vec<_> = std::fs::read_dir(set.policies())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(before, after);
    assert_eq!(
        std::fs::read_to_string(root.join("out/result.txt")).unwrap(),
        "x\n"
    );

    // The decision agrees with execution on the sidecar's own files below the root.
    for (path, expected) in [
        ("policies/roles.cedar", "deny"),
        ("toolgate.toml", "deny"),
        ("data/secret.txt", "deny"),
        ("notes.txt", "allow"),
    ] {
        let (_, v) = exchange(
            server.port,
            "POST",
            "/v1/authorize",
            Some(DEV),
            Some(&json!({"tool": "read_file", "args": {"path": path}})),
        )
        .unwrap();
        assert_eq!(v["decision"], expected, "{path}: {v}");
    }

    // A tool that declares the network has it (the control for the probe above).
    let (s, v) = run_tool(&server, "probe_net", json!({}));
    assert_eq!(s, 200, "{v}");
    assert!(
        v["data"].as_str().unwrap_or_default().contains("CONNECTED"),
        "{v}"
    );

    // /readyz shows the protected set, the network isolation and who programs run as.
    let (_, ready) = exchange(server.port, "GET", "/readyz", None, None).unwrap();
    let exec = &ready["execution"];
    assert_eq!(exec["network"], "namespace", "{ready}");
    let protected: Vec<&str> = exec["protected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    let canon = |p: &Path| p.canonicalize().unwrap().display().to_string();
    for p in [
        canon(&set.policies()),
        canon(&root.join("schemas")),
        canon(&root.join("toolgate.toml")),
        canon(&tokens),
    ] {
        assert!(protected.contains(&p.as_str()), "{p} not in {protected:?}");
    }
    // The tool listing says which tools keep the network.
    let (_, tools) = exchange(server.port, "GET", "/v1/tools", Some(DEV), None).unwrap();
    assert_eq!(tools["governance"]["probe_net"]["network"], true, "{tools}");
    assert_eq!(tools["governance"]["probe"]["network"], false, "{tools}");
}

/// A git work tree with a tracked `.env` and `.ENV`-style secrets, committed twice.
fn git_repo(root: &Path) {
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .current_dir(root)
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["config", "user.email", "t@example.com"]);
    git(&["config", "user.name", "t"]);
    std::fs::write(root.join("readme.md"), "hello\n").unwrap();
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "one"]);
    std::fs::write(root.join(".env"), "DB_PASS=s3cret-env\n").unwrap();
    std::fs::create_dir(root.join("conf")).unwrap();
    std::fs::write(root.join("conf/.ENV.prod"), "DB_PASS=s3cret-upper\n").unwrap();
    std::fs::write(root.join("readme.md"), "hello again\n").unwrap();
    git(&["add", "-f", "."]);
    git(&["commit", "-q", "-m", "two"]);
}

/// The real binary serving the shipped tools over `root`.
fn serve_over(root: &Path) -> (TempSet, Server) {
    let set = TempSet::new();
    let server = start_with(
        &set,
        &format!(
            "[exec]\nroot = \"{}\"\nprograms = [\"git\", \"printf\", \"npm\"]\ngrace_ms = 300\n",
            root.display()
        ),
    );
    (set, server)
}

fn run_tool(server: &Server, tool: &str, args: Value) -> (u16, Value) {
    exchange(
        server.port,
        "POST",
        "/v1/execute",
        Some(DEV),
        Some(&json!({"tool": tool, "args": args})),
    )
    .unwrap()
}

#[test]
fn git_tools_stay_in_the_work_tree_and_off_deny_listed_files() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("repo");
    std::fs::create_dir(&root).unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    git_repo(&root);
    let (_set, server) = serve_over(&root);

    // The change to readme.md is shown; the tracked secrets are not, in any case of name.
    for args in [
        json!({"rev": "HEAD~1"}),
        json!({"rev": "HEAD~1", "path": "."}),
        json!({"rev": "HEAD~1", "path": "conf"}),
    ] {
        let (s, v) = run_tool(&server, "git_diff", args.clone());
        assert_eq!(s, 200, "{args}: {v}");
        let text = v["data"].as_str().unwrap_or_default();
        assert!(!text.contains("s3cret"), "{args}: {text}");
        if args.get("path").is_none() {
            assert!(text.contains("hello again"), "{args}: {v}");
        }
    }
    let (s, v) = run_tool(&server, "git_log", json!({"rev": "HEAD"}));
    assert_eq!(s, 200, "{v}");
    assert!(
        v["data"].as_str().unwrap_or_default().contains(" two"),
        "{v}"
    );
    // An untracked file at the top is seen (the root is split around `.git`, not hidden).
    std::fs::write(root.join("new.txt"), "n").unwrap();
    let (s, v) = run_tool(&server, "git_status", json!({}));
    assert_eq!(s, 200, "{v}");
    assert!(
        v["data"]
            .as_str()
            .unwrap_or_default()
            .contains("?? new.txt"),
        "{v}"
    );
    // A revision that is not a commit (the empty tree, a file, garbage) is refused.
    for rev in ["4b825dc642cb6eb9a060e54bf8d69288fbee4904", "nope", "HEAD~9"] {
        let (s, v) = run_tool(&server, "git_diff", json!({"rev": rev}));
        assert_eq!(s, 422, "{rev}: {v}");
        assert_eq!(v["error"]["code"], "invalid_revision", "{rev}: {v}");
    }

    // Outside a work tree git would compare plain files (no-index): refused, whatever the
    // root holds, also when a repository lies above the root or `.git` is empty.
    let empty_git = t.path().join("empty-git");
    std::fs::create_dir_all(empty_git.join(".git")).unwrap();
    for plain in [t.path().join("plain"), root.join("conf"), empty_git] {
        std::fs::create_dir_all(&plain).unwrap();
        std::fs::write(plain.join("a.txt"), "a").unwrap();
        let (_set, server) = serve_over(&plain);
        let (s, v) = run_tool(&server, "git_diff", json!({"path": "a.txt"}));
        assert_eq!(s, 503, "{v}");
        assert_eq!(v["error"]["code"], "not_a_work_tree", "{v}");
        let (_, v) = run_tool(&server, "git_status", json!({}));
        assert_eq!(v["error"]["code"], "not_a_work_tree", "{v}");
    }
}

/// A client that hangs up mid-run: every process of the run is gone soon after, every time.
#[test]
fn a_cancelled_run_leaves_no_process_behind() {
    let set = TempSet::new();
    let marker = "31.4159";
    add_tools(
        &set,
        &[manifest(
            "lingers",
            json!({}),
            json!({"program": "sh", "argv": ["-c",
                format!("sleep {marker} & sleep {marker} & echo started; wait")]}),
        )],
    );
    let server = start_with(
        &set,
        "[exec]\nroot = \".\"\nprograms = [\"sh\", \"git\", \"printf\", \"npm\"]\ngrace_ms = 200\nmax_concurrent = 64\n",
    );
    let body = json!({"tool": "lingers", "args": {}}).to_string();
    let request = format!(
        "POST /v1/execute HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {DEV}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..100 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        // Hang up at a random moment: before the launcher starts, while it sets up, or while
        // the program runs.
        std::thread::sleep(Duration::from_micros(seed % 40_000));
        drop(s);
    }
    let until = Instant::now() + Duration::from_secs(15);
    let mut left = survivors(marker);
    while !left.is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
        left = survivors(marker);
    }
    assert!(left.is_empty(), "processes left behind: {left:?}");
    // The server still serves runs afterwards.
    let (s, v) = exchange(server.port, "GET", "/healthz", None, None).unwrap();
    assert_eq!(s, 200, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argument_naming_a_time_limit_is_applied_within_the_manifests() {
    let set = TempSet::new();
    add_tools(
        &set,
        &[manifest(
            "slow",
            json!({"timeout_s": {"type": "integer", "minimum": 1, "maximum": 3600}}),
            json!({"program": "sh", "argv": ["-c", "sleep 8"], "timeout_arg": "timeout_s"}),
        )],
    );
    let mut sources = set.sources();
    sources.programs = shipped_programs();
    let snap = load(&sources).unwrap().snapshot;
    let root = tempfile::tempdir().unwrap();
    let settings = ExecSettings {
        root: Some(root.path().to_path_buf()),
        programs: sources.programs.clone(),
        grace_ms: 200,
        ..ExecSettings::default()
    };
    let runner = Runner::start(settings, env!("CARGO_BIN_EXE_toolgate").into())
        .await
        .unwrap();
    let app = router(
        Gateway::new(snap, demo_auth(), 64 * 1024)
            .unwrap()
            .with_exec(runner),
    );
    let started = Instant::now();
    let (s, v) = execute(&app, DEV, "slow", json!({"timeout_s": 1})).await;
    let took = started.elapsed();
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["metadata"]["timed_out"], true, "{v}");
    assert!(
        took < Duration::from_secs(5),
        "ran {took:?} with timeout_s 1"
    );
    // The answer names the limit that stopped it: the argument's, not the manifest's.
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("stopped after 1000 ms") && message.contains("`timeout_s`"),
        "{v}"
    );
    assert!(
        v["error"]["suggestion"]
            .as_str()
            .unwrap_or_default()
            .contains("larger `timeout_s`"),
        "{v}"
    );
    // A larger value is capped by the manifest's 20 s: the 8 s sleep finishes.
    let (s, v) = execute(&app, DEV, "slow", json!({"timeout_s": 3600})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["metadata"]["timed_out"], false, "{v}");
    // A manifest naming a non-integer argument does not load.
    let bad = TempSet::new();
    bad.write(
        "schemas/tools/bad.json",
        &manifest(
            "bad",
            json!({"t": {"type": "string"}}),
            json!({"program": "sh", "argv": ["-c", "true"], "timeout_arg": "t"}),
        )
        .to_string(),
    );
    let mut sources = bad.sources();
    sources.programs = shipped_programs();
    let err = load(&sources).unwrap_err().to_string();
    assert!(err.contains("timeout_arg"), "{err}");
}

#[tokio::test]
async fn authorize_matches_deny_listed_names_as_execution_does() {
    let app = app();
    for path in [
        ".ENV",
        "config/.Env.local",
        ".GIT/config",
        "keys/ID_RSA",
        "certs/server.PEM",
        "NODE_MODULES/x/index.js",
    ] {
        let v = authorize(
            &app,
            DEV,
            &json!({"tool": "read_file", "args": {"path": path}}),
        )
        .await;
        assert_eq!(v["decision"], "deny", "{path}: {v}");
        assert_eq!(v["reasons"], json!(["deny-listed-paths"]), "{path}: {v}");
    }
    let v = authorize(
        &app,
        DEV,
        &json!({"tool": "read_file", "args": {"path": "docs/env.md"}}),
    )
    .await;
    assert_eq!(v["decision"], "allow", "{v}");
}

#[test]
fn deny_entries_are_globs_and_unusable_ones_are_refused_naming_the_key() {
    let set = TempSet::new();
    for (entry, needle) in [
        ("a/b", "exec.deny"),
        ("[x", "exec.deny"),
        ("**", "exec.deny"),
    ] {
        let err = serve_refuses(&set, &format!("[exec]\ndeny = [\"{entry}\"]\n"));
        assert!(err.contains(needle), "{entry}: {err}");
    }
    let err = serve_refuses(
        &set,
        "[anomaly]\n[[anomaly.sequences]]\nname = \"x\"\nfirst = [\"[a\"]\nthen = [\"b\"]\nwithin_secs = 5\n",
    );
    assert!(err.contains("anomaly.sequences[0].first"), "{err}");
    let err = serve_refuses(&set, "[exec]\nrun_as = \"0:0\"\n");
    assert!(err.contains("exec.run_as"), "{err}");
}

#[test]
fn an_inner_star_in_a_deny_entry_matches() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    std::fs::write(root.join("id_work.pem"), "KEY").unwrap();
    std::fs::write(root.join("ok.txt"), "fine").unwrap();
    let deny = toolgate::globs::SegmentGlobs::new(["id_*.pem".to_owned()]).unwrap();
    let jail = toolgate::jail::Jail::new(root, &[], &deny).unwrap();
    assert!(matches!(
        jail.open_read("ID_WORK.PEM"),
        Err(toolgate::jail::JailError::Denied(_))
    ));
    assert!(matches!(
        jail.open_read("id_work.pem"),
        Err(toolgate::jail::JailError::Denied(_))
    ));
    assert!(jail.open_read("ok.txt").is_ok());
}

/// Every credential and key file a config names joins the protected set, and the file tools
/// refuse them even when they lie below the service root (the quickstart keeps its tokens
/// file there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_protected_set_holds_every_file_the_config_names() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    for f in [
        "tokens.json",
        "audit.hmac",
        "hook.secret",
        "known.txt",
        "jwt.secret",
        "jwks.json",
    ] {
        std::fs::write(root.join(f), "0123456789abcdef0123456789abcdef").unwrap();
    }
    std::fs::write(root.join("plain.txt"), "fine").unwrap();
    let config = root.join("toolgate.toml");
    std::fs::write(
        &config,
        "policies_dir = \"policies\"\nschemas_dir = \"schemas\"\ndata_dir = \"data\"\n\
         [auth]\ntokens_file = \"tokens.json\"\n\
         [auth.jwt]\nissuer = \"i\"\naudience = \"a\"\nhs256_secret_file = \"jwt.secret\"\njwks_file = \"jwks.json\"\n\
         [audit]\nhmac_key_file = \"audit.hmac\"\n\
         [approvals]\nwebhook_url = \"http://127.0.0.1:9/hook\"\nwebhook_secret_file = \"hook.secret\"\n\
         [redaction]\nknown_secrets_files = [\"known.txt\"]\n\
         [exec]\nroot = \".\"\n",
    )
    .unwrap();
    let cfg = toolgate::config::Config::from_file(&config).unwrap();
    let runner = Runner::start(cfg.exec, env!("CARGO_BIN_EXE_toolgate").into())
        .await
        .unwrap();
    let listed = runner.protections().protected.clone();
    let app = router(
        Gateway::new(shipped_snapshot(), demo_auth(), 64 * 1024)
            .unwrap()
            .with_exec(runner),
    );
    for f in [
        "tokens.json",
        "audit.hmac",
        "hook.secret",
        "known.txt",
        "jwt.secret",
        "jwks.json",
        "toolgate.toml",
    ] {
        let canon = root.join(f).canonicalize().unwrap().display().to_string();
        assert!(listed.contains(&canon), "{f} not in {listed:?}");
        // Denied by the decision, which resolves paths as the jail does (issue 39).
        let (s, v) = execute(&app, DEV, "read_file", json!({"path": f})).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{f}: {v}");
        assert_eq!(
            v["decision"]["reasons"],
            json!(["deny-listed-paths"]),
            "{f}: {v}"
        );
    }
    let (s, v) = execute(&app, DEV, "read_file", json!({"path": "plain.txt"})).await;
    assert_eq!(
        (s, v["data"]["content"].clone()),
        (StatusCode::OK, json!("fine")),
        "{v}"
    );
}

/// The launcher as the sidecar starts it, with no other user to hide behind (`run_as`
/// unset): the program it starts cannot kill it, so the deadline and the cleanup hold.
#[test]
fn a_program_cannot_signal_its_launcher() {
    use std::io::Read as _;
    let spec = json!({
        "nonce": "n0nce",
        "program": "/bin/sh",
        "argv": ["-c", "kill -9 $PPID && echo KILLED || echo REFUSED"],
        "cwd": "/tmp",
        "env": [["PATH", "/usr/bin:/bin"]],
        "timeout_ms": 5000,
        "grace_ms": 200,
        "rlimits": {"cpu_secs": 5, "address_space_bytes": 4_294_967_296u64,
                    "file_size_bytes": 1_048_576, "processes": u64::MAX, "open_files": 256},
        "sandbox": {"read": ["/usr", "/lib", "/lib64", "/etc", "/tmp", "/proc"], "write": ["/dev/null"]},
        "cgroup": null,
        "run_as": null,
        "isolate_network": false,
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("exec-child")
        .env_clear()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{spec}").unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    drop(stdin);
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(out.trim(), "REFUSED", "stderr: {err}");
    assert!(status.success(), "the launcher survived: {status:?} {err}");
    assert!(err.contains("n0nce {"), "the launcher reported: {err}");
}

/// Without network namespaces (`[exec] network_namespace = false`, for containers that
/// allow none), a program that does not declare the network still cannot open TCP.
#[test]
fn without_a_namespace_landlock_still_refuses_tcp() {
    let set = TempSet::new();
    let root = set.dir.path();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    add_tools(
        &set,
        &[manifest(
            "dial",
            json!({}),
            json!({"program": "bash", "argv": ["-c",
                "exec 3<>/dev/tcp/127.0.0.1/$(cat port.txt) && echo CONNECTED || echo REFUSED"]}),
        )],
    );
    let server = start_with(
        &set,
        "[exec]\nroot = \".\"\nprograms = [\"bash\", \"git\", \"printf\", \"npm\"]\nnetwork_namespace = false\n",
    );
    std::fs::write(root.join("port.txt"), server.port.to_string()).unwrap();
    let (_, ready) = exchange(server.port, "GET", "/readyz", None, None).unwrap();
    assert_eq!(ready["execution"]["network"], "host", "{ready}");
    let (s, v) = run_tool(&server, "dial", json!({}));
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["data"].as_str().unwrap_or_default().trim(),
        "REFUSED",
        "{v}"
    );
}

/// A service root the run's user cannot enter (a 0700 directory of root's, with programs run
/// as nobody) is named in the error, with what to do; not blamed on the program, which is
/// what the operating system's error alone would suggest.
#[test]
fn a_root_the_run_user_cannot_enter_is_named() {
    if !is_root() {
        assert!(
            std::env::var_os("TOOLGATE_REQUIRE_ROOT_TESTS").is_none(),
            "TOOLGATE_REQUIRE_ROOT_TESTS is set but the tests do not run as root"
        );
        eprintln!("skipped: programs run as another user only when the sidecar is root");
        return;
    }
    let set = TempSet::new();
    let root = set.dir.path();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700)).unwrap();
    let server = start_with(
        &set,
        "[exec]\nroot = \".\"\nprograms = [\"git\", \"printf\", \"npm\"]\n",
    );
    let (_, v) = run_tool(&server, "echo", json!({"message": "hi"}));
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("cannot enter the working directory")
            && message.contains(&format!("`{}`", root.display()))
            && message.contains("65534:65534")
            && message.contains("chmod o+x"),
        "{v}"
    );
}
