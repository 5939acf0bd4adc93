//! Startup as a library and as a command: `App::build` + `App::serve` in process (what
//! `toolgate serve` runs), the default data directory beside the config file, the `--listen`
//! and `TOOLGATE_*` overrides a container sets, and every config problem reported at once.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::*;
use crate::process::exchange;
use toolgate::app::App;
use toolgate::config::Config;

/// A config over `set`'s policies with the demo tokens; `extra` goes on top.
fn write_config(set: &TempSet, extra: &str) -> std::path::PathBuf {
    let config = set.dir.path().join("toolgate.toml");
    std::fs::write(
        &config,
        format!(
            "policies_dir = \"policies\"\nschemas_dir = \"schemas\"\n{extra}\n[auth]\ntokens_file = \"{}\"\n[reload]\nwatch = false\npoll_ms = 0\n",
            repo().join("examples/demo-tokens.json").display()
        ),
    )
    .unwrap();
    config
}

/// Waits (10 s at most) until `/readyz` answers on `port`.
fn wait_ready(port: u16, child: &mut std::process::Child, log: &Path) {
    let start = Instant::now();
    while exchange(port, "GET", "/readyz", None, None).is_none() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "serve exited ({status}): {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(start.elapsed() < Duration::from_secs(10), "not ready");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_built_from_a_config_serves_decides_and_records_until_shutdown() {
    let set = TempSet::new();
    // A small page cache: this test shares its process (and its RSS) with the others.
    let config = write_config(&set, "[audit]\ncache_mb = 4");
    let cfg = Config::from_file(&config).unwrap();
    let data = cfg.data_dir.clone();
    let app = App::build(cfg).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(app.serve(listener, async move {
        let _ = stopped.await;
    }));
    let (ready, decided) = tokio::task::spawn_blocking(move || {
        let ready = exchange(port, "GET", "/readyz", None, None).unwrap();
        let call = json!({"tool": "read_file", "args": {"path": "src/lib.rs"}});
        let decided = exchange(port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
        (ready, decided)
    })
    .await
    .unwrap();
    assert_eq!(ready.0, 200, "{}", ready.1);
    assert_eq!(decided.0, 200, "{}", decided.1);
    assert_eq!(decided.1["decision"], "allow", "{}", decided.1);
    let id = decided.1["decision_id"].as_str().unwrap().to_owned();
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), serving)
        .await
        .expect("serve did not stop after shutdown")
        .unwrap()
        .unwrap();
    assert!(
        logged_ids(&data).contains(&id),
        "the decision is not in the log"
    );
}

#[test]
fn the_default_data_dir_is_beside_the_config_file_wherever_serve_starts() {
    let set = TempSet::new();
    let port = free_port();
    let config = write_config(&set, &format!("listen = \"127.0.0.1:{port}\""));
    let elsewhere = tempfile::tempdir().unwrap();
    let log = set.dir.path().join("serve.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--config"])
        .arg(&config)
        .current_dir(elsewhere.path())
        .env_remove("TOOLGATE_DATA_DIR")
        .env_remove("TOOLGATE_LISTEN")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_ready(port, &mut child, &log);
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        set.dir.path().join("data").is_dir(),
        "no data dir beside the config file"
    );
    assert!(
        !elsewhere.path().join("data").exists(),
        "a data dir was made in the working directory"
    );
}

#[test]
fn listen_and_data_dir_come_from_flags_and_the_environment_over_the_file() {
    let set = TempSet::new();
    // The file says one port and data dir; the command line and the environment win.
    let config = write_config(
        &set,
        &format!(
            "listen = \"127.0.0.1:{}\"\ndata_dir = \"file-data\"",
            free_port()
        ),
    );
    let elsewhere = tempfile::tempdir().unwrap();
    for by_flag in [true, false] {
        let port = free_port();
        let data = if by_flag { "flag-data" } else { "env-data" };
        let log = set.dir.path().join(format!("serve-{data}.log"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
        cmd.args(["serve", "--config"])
            .arg(&config)
            .current_dir(elsewhere.path())
            .env_remove("TOOLGATE_DATA_DIR")
            .env_remove("TOOLGATE_LISTEN")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let listen = format!("127.0.0.1:{port}");
        if by_flag {
            cmd.args(["--listen", &listen, "--data-dir", data]);
        } else {
            cmd.env("TOOLGATE_LISTEN", &listen)
                .env("TOOLGATE_DATA_DIR", data)
                .env("TOOLGATE_LOG_FORMAT", "json");
        }
        let mut child = cmd.spawn().unwrap();
        wait_ready(port, &mut child, &log);
        let _ = child.kill();
        let _ = child.wait();
        // A relative override is relative to where the command ran.
        assert!(elsewhere.path().join(data).is_dir(), "{data} not made");
        // The published demo tokens are accepted here, and the log says so at start.
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains("DEMO TOKENS") && text.contains("Human::\\\"alice\\\""),
            "{text}"
        );
        if !by_flag {
            let text = std::fs::read_to_string(&log).unwrap();
            let first = text.lines().next().unwrap_or_default();
            assert!(
                serde_json::from_str::<serde_json::Value>(first).is_ok(),
                "TOOLGATE_LOG_FORMAT=json did not give JSON logs: {first}"
            );
        }
    }
    assert!(!set.dir.path().join("file-data").exists());
}

#[test]
fn every_config_problem_is_reported_at_once_each_naming_its_key() {
    let set = TempSet::new();
    let config = write_config(
        &set,
        "listen = \"nowhere\"\nmax_body_bytes = 1\n[audit]\nsync = \"sometimes\"\ncache_mb = 1\n[server]\nheader_timeout_ms = 1\nbody_timeout_ms = 1\n[exec]\nmax_concurrent = 0\nlock_timeout_ms = 0\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["validate", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for key in [
        "`listen`",
        "`max_body_bytes`",
        "`audit.sync`",
        "`audit.cache_mb`",
        "`server.header_timeout_ms`",
        "`server.body_timeout_ms`",
        "`exec.max_concurrent`",
        "`exec.lock_timeout_ms`",
    ] {
        assert!(err.contains(key), "{key} missing from: {err}");
    }
    assert!(err.contains("8 problems"), "{err}");
    // A bad flag is checked like the file's own value.
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["validate", "--listen", "nowhere:x", "--config"])
        .arg(write_config(&set, ""))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`listen` = `nowhere:x` (from --listen or TOOLGATE_LISTEN)"),
        "{err}"
    );
}

#[test]
fn a_log_at_the_old_default_data_dir_is_not_left_behind_silently() {
    let set = TempSet::new();
    let config = write_config(&set, "");
    // A data directory where the old default put it: `data` in the working directory.
    let elsewhere = tempfile::tempdir().unwrap();
    drop(toolgate::storage::Stores::open(&elsewhere.path().join("data")).unwrap());
    let run = |dir: &Path| {
        Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["validate", "--config"])
            .arg(&config)
            .current_dir(dir)
            .env_remove("TOOLGATE_DATA_DIR")
            .output()
            .unwrap()
    };
    let out = run(elsewhere.path());
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`data_dir` is not set") && err.contains("--data-dir"),
        "{err}"
    );
    // Started from anywhere else (no old log there), the default beside the file is fine.
    let out = run(set.dir.path());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
