//! Issue 39, item 1: a tool run cannot change the modes, times, owners or extended attributes
//! of the sidecar's own files, cannot leave a setuid file behind or open a directory to other
//! users, and the sidecar starts again after every such attempt. Through the real binary,
//! as root (programs run as nobody) and as a non-root user that owns every file of its own
//! (the container image's case, where programs run as that same user).

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{DEV, TempSet, repo};
use crate::process::{Server, exchange, request};

/// The uid and gid the non-root sidecar runs as when the tests run as root (the image's).
const IMAGE_IDS: (u32, u32) = (10001, 10001);

/// Each attempt: a label and a shell command; the program prints `YES:label` when it
/// succeeded. Every one of them must fail, in every layout.
const ATTEMPTS: [(&str, &str); 16] = [
    ("chmod_keyring", "chmod 0644 data/audit-keys.json"),
    ("chmod_policies", "chmod 0777 policies"),
    ("chmod_policy_file", "chmod 0666 policies/roles.cedar"),
    ("chmod_tokens", "chmod 0777 tokens.json"),
    ("chmod_config", "chmod 0666 toolgate.toml"),
    ("chmod_data_000", "chmod 000 data"),
    ("chmod_root_world_writable", "chmod 0777 ."),
    ("utime_tokens", "touch -d 2001-01-01 tokens.json"),
    ("utime_policies", "touch -d 2001-01-01 policies"),
    (
        "setxattr_tokens",
        "python3 -c \"import os; os.setxattr('tokens.json', 'user.planted', b'1')\"",
    ),
    (
        "acl_keyring",
        "python3 -c \"import os; os.setxattr('data/audit-keys.json', 'system.posix_acl_access', bytes.fromhex('0200000001000600ffffffff04000400ffffffff10000600ffffffff20000400ffffffff'))\"",
    ),
    (
        "chgrp_tokens",
        "chgrp $(id -g) tokens.json && chgrp 0 tokens.json",
    ),
    ("setuid_copy", "cp /bin/sh out/sh && chmod 4755 out/sh"),
    (
        "setuid_create",
        "python3 -c \"import os; os.close(os.open('out/created', os.O_CREAT | os.O_WRONLY, 0o6755))\" && test -u out/created",
    ),
    ("setgid_dir", "mkdir -p out/d && chmod 2775 out/d"),
    ("hard_link_keyring", "ln data/audit-keys.json out/keys"),
];

/// What the program may still do: ordinary modes on its own files.
const CONTROLS: [(&str, &str); 2] = [
    (
        "chmod_own_file",
        "printf 'echo hi' > out/run.sh && chmod 0755 out/run.sh",
    ),
    ("touch_own_file", "touch -d @978307200 out/run.sh"),
];

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Mode, owner, times and extended attributes of a path (what the attempts would change).
fn state(path: &Path) -> (u32, u32, u32, i64, i64, Vec<String>) {
    let m = std::fs::symlink_metadata(path).unwrap();
    let mut buf = vec![0u8; 4096];
    let names = match rustix::fs::llistxattr(path, &mut buf) {
        Ok(n) => buf[..n]
            .split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    (m.mode(), m.uid(), m.gid(), m.mtime(), m.mtime_nsec(), names)
}

/// The sidecar's own files in the layout below.
fn own_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = [
        "data",
        "data/audit-keys.json",
        "policies",
        "policies/roles.cedar",
        "schemas",
        "tokens.json",
        "toolgate.toml",
        ".",
    ]
    .iter()
    .map(|p| dir.join(p))
    .collect();
    out.sort();
    out
}

/// A quickstart-like layout in a fresh temp set: the exec root is the set itself, holding
/// the policies, schemas, data, config and tokens; `out` is the one writable directory.
/// `owner`: the ids every file is given (the non-root sidecar's own).
fn layout(owner: Option<(u32, u32)>) -> TempSet {
    let set = TempSet::new();
    let dir = set.dir.path();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::copy(
        repo().join("examples/demo-tokens.json"),
        dir.join("tokens.json"),
    )
    .unwrap();
    std::fs::create_dir(dir.join("out")).unwrap();
    let mut script = String::new();
    for (label, cmd) in ATTEMPTS.iter().chain(&CONTROLS) {
        script.push_str(&format!(
            "if ( {cmd} ) >/dev/null 2>&1; then echo YES:{label}; else echo NO:{label}; fi; "
        ));
    }
    script.push_str("echo UID:$(id -u); echo PROCS:$(ls /proc | grep -c '^[0-9]'); echo PID1:$(tr '\\0' ' ' < /proc/1/cmdline)");
    let script = script.replace('{', "{{").replace('}', "}}");
    let manifest = json!({
        "name": "attempt",
        "description": "tries to change the sidecar's own files' metadata",
        "inputSchema": {"type": "object", "properties": {}, "additionalProperties": false},
        "risk": "low",
        "classification": "write",
        "limits": {"timeout_ms": 20000, "max_output_bytes": 65536},
        "executor": {"program": "sh", "argv": ["-c", script],
                     "sandbox": {"writes": ["out"]}},
    });
    set.write("schemas/tools/attempt.json", &manifest.to_string());
    set.regenerate_schema();
    std::fs::write(
        dir.join("toolgate.toml"),
        "data_dir = \"data\"\npolicies_dir = \"policies\"\nschemas_dir = \"schemas\"\n\
         [auth]\ntokens_file = \"tokens.json\"\n\
         [exec]\nroot = \".\"\nprograms = [\"sh\", \"git\", \"printf\", \"npm\"]\ngrace_ms = 300\n\
         [reload]\nwatch = false\npoll_ms = 0\n",
    )
    .unwrap();
    match owner {
        Some((uid, gid)) => chown_tree(dir, uid, gid),
        // Root's programs are nobody: the writable directory must be theirs.
        None => std::os::unix::fs::chown(dir.join("out"), Some(65534), Some(65534)).unwrap(),
    }
    set
}

fn chown_tree(dir: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(dir, Some(uid), Some(gid)).unwrap();
    if std::fs::symlink_metadata(dir).unwrap().is_dir() {
        for e in std::fs::read_dir(dir).unwrap() {
            chown_tree(&e.unwrap().path(), uid, gid);
        }
    }
}

/// `toolgate serve` over the layout, as `ids` when given (the tests run as root then).
fn serve(set: &TempSet, ids: Option<(u32, u32)>) -> Server {
    serve_with(set, ids, &[])
}

/// Like [`serve`], with more arguments.
fn serve_with(set: &TempSet, ids: Option<(u32, u32)>, args: &[&str]) -> Server {
    let port = crate::helpers::free_port();
    let dir = set.dir.path();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.current_dir(dir)
        .args(["serve", "--config", "toolgate.toml"])
        .args(args)
        .env("TOOLGATE_LISTEN", format!("127.0.0.1:{port}"))
        .env_remove("TOOLGATE_DATA_DIR")
        .env_remove("TOOLGATE_KILL_SWITCH")
        .env_remove("RUST_MIN_STACK")
        .stdout(Stdio::null())
        .stderr(
            std::fs::File::create(std::env::temp_dir().join(format!("metadata-{port}.log")))
                .unwrap(),
        );
    if let Some((uid, gid)) = ids {
        cmd.uid(uid).gid(gid);
    }
    let child = cmd.spawn().unwrap();
    let mut server = Server { child, port };
    let start = Instant::now();
    while request(port, "GET", "/healthz", None, None).is_none() {
        let exited = server.child.try_wait().unwrap();
        if exited.is_some() || start.elapsed() > Duration::from_secs(20) {
            let log =
                std::fs::read_to_string(std::env::temp_dir().join(format!("metadata-{port}.log")))
                    .unwrap_or_default();
            panic!("toolgate serve did not come up ({exited:?}):\n{log}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

fn attempt(server: &Server) -> String {
    let (s, v) = exchange(
        server.port,
        "POST",
        "/v1/execute",
        Some(DEV),
        Some(&json!({"tool": "attempt", "args": {}})),
    )
    .unwrap();
    assert_eq!(s, 200, "{v}");
    v["data"].as_str().unwrap_or_default().to_owned()
}

/// One layout, one sidecar (as `ids`, or as the test's own user), every attempt refused,
/// nothing changed, and the sidecar starts again.
fn attempts_change_nothing(ids: Option<(u32, u32)>, expect_uid: u32) {
    let owner = ids.or_else(|| {
        (!is_root()).then(|| {
            (
                rustix::process::geteuid().as_raw(),
                rustix::process::getegid().as_raw(),
            )
        })
    });
    let set = layout(owner);
    let dir = set.dir.path().to_path_buf();
    let server = serve(&set, ids);
    let (_, ready) = exchange(server.port, "GET", "/readyz", None, None).unwrap();
    assert_eq!(ready["ready"], true, "{ready}");
    assert_eq!(ready["execution"]["metadata"], "namespace", "{ready}");
    assert_eq!(ready["execution"]["processes"], "namespace", "{ready}");
    assert!(ready["execution"]["error"].is_null(), "{ready}");
    let before: Vec<_> = own_files(&dir).iter().map(|p| state(p)).collect();

    let out = attempt(&server);
    assert!(out.contains(&format!("UID:{expect_uid}")), "{out}");
    // Root or not, a run's programs see the run's processes only (a PID namespace of its
    // own): the launcher's init, the shell and its command substitution.
    let procs: usize = out
        .split("PROCS:")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(procs <= 6, "{procs} processes visible: {out}");
    let init = out.split("PID1:").nth(1).unwrap_or_default();
    assert!(
        init.contains("exec-child"),
        "pid 1 is not the run's init: {out}"
    );
    for (label, _) in ATTEMPTS {
        assert!(
            out.contains(&format!("NO:{label}")),
            "{label} succeeded: {out}"
        );
    }
    for (label, _) in CONTROLS {
        assert!(
            out.contains(&format!("YES:{label}")),
            "{label} failed: {out}"
        );
    }
    let after: Vec<_> = own_files(&dir).iter().map(|p| state(p)).collect();
    for ((path, b), a) in own_files(&dir).iter().zip(&before).zip(&after) {
        if path.ends_with("data") {
            // The sidecar itself writes there: its mode, owner and attributes still hold.
            assert_eq!(
                (b.0, b.1, b.2, &b.5),
                (a.0, a.1, a.2, &a.5),
                "{}",
                path.display()
            );
        } else {
            assert_eq!(b, a, "{} changed", path.display());
        }
    }
    // Nothing setuid, setgid or writable by others was left behind.
    for entry in std::fs::read_dir(dir.join("out")).unwrap() {
        let m = entry.unwrap().metadata().unwrap();
        assert_eq!(m.mode() & 0o6022, 0, "{:o}", m.mode());
    }
    assert_eq!(
        std::fs::metadata(dir.join("out/run.sh")).unwrap().mtime(),
        978307200
    );

    // The sidecar starts again on the same files.
    drop(server);
    let server = serve(&set, ids);
    let (_, ready) = exchange(server.port, "GET", "/readyz", None, None).unwrap();
    assert_eq!(ready["ready"], true, "{ready}");
    let _: Value = ready;
}

#[test]
fn a_non_root_sidecars_runs_cannot_change_its_files_metadata() {
    if is_root() {
        attempts_change_nothing(Some(IMAGE_IDS), IMAGE_IDS.0);
    } else {
        attempts_change_nothing(None, rustix::process::geteuid().as_raw());
    }
}

#[test]
fn a_root_sidecars_runs_cannot_change_its_files_metadata() {
    if !is_root() {
        eprintln!("skipped: needs root (CI runs as root)");
        return;
    }
    attempts_change_nothing(None, 65534);
}

/// What another user (or a run before this fix) left behind is repaired at start when the
/// sidecar's user owns it, and a policy file planted by another user is refused: the sidecar
/// serves the last good set it remembered, and says why.
#[test]
fn own_files_are_repaired_or_refused_at_start() {
    let ids = if is_root() { Some(IMAGE_IDS) } else { None };
    let owner = ids.unwrap_or((
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    ));
    let set = layout(Some(owner));
    let dir = set.dir.path().to_path_buf();
    drop(serve(&set, ids));
    let mode = |p: &str| std::fs::metadata(dir.join(p)).unwrap().mode() & 0o7777;
    let chmod = |p: &str, m: u32| {
        std::fs::set_permissions(dir.join(p), std::fs::Permissions::from_mode(m)).unwrap()
    };
    chmod("data/audit-keys.json", 0o644);
    chmod("tokens.json", 0o777);
    chmod("data", 0o000);

    let server = serve(&set, ids);
    let (_, ready) = exchange(server.port, "GET", "/readyz", None, None).unwrap();
    assert_eq!(ready["ready"], true, "{ready}");
    assert_eq!(mode("data"), 0o700);
    assert_eq!(mode("data/audit-keys.json"), 0o600);
    assert_eq!(mode("tokens.json"), 0o775);
    drop(server);

    if !is_root() {
        return;
    }
    // Another local user plants a policy in a directory it could write.
    chmod("policies", 0o777);
    std::fs::write(
        dir.join("policies/zz-planted.cedar"),
        "permit (principal, action, resource);",
    )
    .unwrap();
    std::os::unix::fs::chown(
        dir.join("policies/zz-planted.cedar"),
        Some(10002),
        Some(10002),
    )
    .unwrap();
    // The directory is repaired (toolgate's user owns it); the planted file is refused.
    let server = serve(&set, ids);
    assert_eq!(mode("policies"), 0o775);
    let (_, ready) = exchange(server.port, "GET", "/readyz", None, None).unwrap();
    assert_eq!(ready["policy_origin"], "remembered", "{ready}");
    assert_eq!(ready["stale"], true, "{ready}");
    let log =
        std::fs::read_to_string(std::env::temp_dir().join(format!("metadata-{}.log", server.port)))
            .unwrap();
    assert!(log.contains("another user put it there"), "{log}");
}

/// Policies and schemas named on the command line, and an audit ship file below the root,
/// are the sidecar's own files like the config's: no tool reads or writes them, and the
/// decision says so.
#[test]
fn command_line_sources_and_the_ship_file_are_protected() {
    let set = layout(None);
    let dir = set.dir.path().to_path_buf();
    crate::helpers::copy_dir(&dir.join("policies"), &dir.join("alt-policies"));
    crate::helpers::copy_dir(&dir.join("schemas"), &dir.join("alt-schemas"));
    let mut config = std::fs::read_to_string(dir.join("toolgate.toml")).unwrap();
    config = config.replace("[auth]", "[audit]\nship_file = \"audit.jsonl\"\n[auth]");
    std::fs::write(dir.join("toolgate.toml"), config).unwrap();
    let server = serve_with(
        &set,
        None,
        &["--policies", "alt-policies", "--schemas", "alt-schemas"],
    );
    let (_, ready) = exchange(server.port, "GET", "/readyz", None, None).unwrap();
    let protected: Vec<String> = ready["execution"]["protected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect();
    let canon = dir.canonicalize().unwrap();
    for p in [
        "alt-policies",
        "alt-schemas",
        "audit.jsonl",
        "audit.jsonl.1",
    ] {
        let want = canon.join(p).display().to_string();
        assert!(protected.contains(&want), "{want} not in {protected:?}");
    }
    for path in [
        "alt-policies/roles.cedar",
        "alt-schemas/toolgate.cedarschema",
        "audit.jsonl",
    ] {
        let (_, v) = exchange(
            server.port,
            "POST",
            "/v1/authorize",
            Some(DEV),
            Some(&json!({"tool": "read_file", "args": {"path": path}})),
        )
        .unwrap();
        assert_eq!(v["decision"], "deny", "{path}: {v}");
    }
}
