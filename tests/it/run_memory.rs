//! Issue 39, item 5: a run's processes together are held to `memory_mb` (a memory cgroup, no
//! swap), and a run that passes it is stopped and recorded as such; a run's scratch
//! directory (`HOME`, `TMPDIR`) holds at most `scratch_mb`. Through the real binary.

use std::os::unix::fs::PermissionsExt as _;

use serde_json::{Value, json};

use crate::helpers::{DEV, TempSet};
use crate::process::{exchange, start_with};

fn manifest(name: &str, script: &str) -> Value {
    json!({
        "name": name,
        "description": format!("test tool {name}"),
        "inputSchema": {"type": "object", "properties": {}, "additionalProperties": false},
        "risk": "low",
        "classification": "write",
        "limits": {"timeout_ms": 30000, "max_output_bytes": 65536},
        "executor": {"program": "sh", "argv": ["-c", script]},
    })
}

#[test]
fn a_run_past_its_memory_limit_across_processes_is_stopped_and_recorded() {
    let set = TempSet::new();
    let root = set.dir.path();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Three processes of 60 MiB each (every page written): 180 MiB against 100 MiB, while
    // each stays far below its own address-space limit.
    let hog = "for i in 1 2 3; do python3 -c 'import time; b = b\"x\" * (60 << 20); time.sleep(20)' & done; wait; echo SURVIVED";
    // 40 MiB into the scratch directory against 16 MiB.
    let fill = "head -c 41943040 /dev/zero > \"$TMPDIR/fill\" && echo WROTE; ls -l \"$TMPDIR\"";
    // Within both limits: 20 MiB in one process, 4 MiB of scratch.
    let fits = "python3 -c 'b = b\"x\" * (20 << 20); print(\"FITS\")' && head -c 4194304 /dev/zero > \"$HOME/f\" && echo WROTE";
    for m in [
        manifest("hog", hog),
        manifest("fill", fill),
        manifest("fits", fits),
    ] {
        set.write(
            &format!("schemas/tools/{}.json", m["name"].as_str().unwrap()),
            &m.to_string(),
        );
    }
    set.regenerate_schema();
    let server = start_with(
        &set,
        "[exec]\nroot = \".\"\nprograms = [\"sh\", \"git\", \"printf\", \"npm\"]\ngrace_ms = 300\n[exec.limits]\nmemory_mb = 100\nscratch_mb = 16\n",
    );
    let (_, ready) = exchange(server.port, "GET", "/readyz", None, None).unwrap();
    if ready["execution"]["memory_limit"] != "cgroup" {
        assert!(
            std::env::var_os("TOOLGATE_REQUIRE_ROOT_TESTS").is_none(),
            "no memory cgroup here: {ready}"
        );
        eprintln!("skipped: no memory cgroup on this machine ({ready})");
        return;
    }
    let run = |tool: &str| {
        exchange(
            server.port,
            "POST",
            "/v1/execute",
            Some(DEV),
            Some(&json!({"tool": tool, "args": {}})),
        )
        .unwrap()
    };

    let (s, v) = run("hog");
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["status"], "error", "{v}");
    assert_eq!(v["metadata"]["memory_exceeded"], true, "{v}");
    assert_eq!(v["error"]["code"], "killed", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("memory limit"),
        "{v}"
    );
    assert!(
        !v["data"].as_str().unwrap_or("").contains("SURVIVED"),
        "{v}"
    );
    let peak = v["metadata"]["memory_peak_bytes"].as_u64().unwrap();
    assert!(peak <= 101 << 20, "peak {peak}");
    // The record says so.
    let (_, page) = exchange(
        server.port,
        "GET",
        "/v1/audit?limit=1000",
        Some("demo-bob-token"),
        None,
    )
    .unwrap();
    let recorded = page["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["entry"]["kind"] == "execution")
        .filter_map(|r| r["entry"]["detail"].as_str())
        .any(|d| d.contains("memory_exceeded=true"));
    assert!(recorded, "{page}");

    let (s, v) = run("fill");
    assert_eq!(s, 200, "{v}");
    let out = v["data"].as_str().unwrap_or("");
    assert!(!out.contains("WROTE"), "{v}");
    assert!(
        v["metadata"]["memory_exceeded"] == false,
        "the quota, not the memory limit: {v}"
    );

    let (s, v) = run("fits");
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["status"], "success", "{v}");
    let out = v["data"].as_str().unwrap_or("");
    assert!(out.contains("FITS") && out.contains("WROTE"), "{v}");
    assert_eq!(v["metadata"]["memory_exceeded"], false, "{v}");
}
