//! The container image, without a container engine. The Dockerfile's runtime stage is read
//! (its COPY, ENV, USER, WORKDIR, VOLUME, EXPOSE, HEALTHCHECK, ENTRYPOINT and CMD lines), its
//! layout is rebuilt in a temp dir, and `serve` is started there as the image's non-root user
//! with the config directory read-only and as shipped (the one change is `TOOLGATE_LISTEN`, a
//! loopback port, set the way a container runtime's `-e` would): a Dockerfile that drifts
//! from what starts fails here.
//! Also: a data directory the runtime user cannot write is reported as such, with the fix.
//!
//! As root, the server runs as the image's uid and gid; otherwise as the current user, with
//! the same directories made read-only by mode.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::{DEV, TempSet, copy_dir, free_port, repo};
use crate::process::exchange;

/// Debian's default `PATH`, which the image inherits.
const IMAGE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// One `COPY` of the runtime stage.
#[derive(Debug)]
struct Copy {
    /// `--from=STAGE`, when it copies from another stage.
    from: Option<String>,
    sources: Vec<String>,
    dest: String,
}

/// What the runtime stage says, as far as starting the sidecar goes.
#[derive(Debug, Default)]
struct Stage {
    copies: Vec<Copy>,
    env: Vec<(String, String)>,
    user: Option<(u32, u32)>,
    workdir: Option<String>,
    volumes: Vec<String>,
    expose: Vec<u16>,
    healthcheck: Option<String>,
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    runs: Vec<String>,
}

/// The instructions of the Dockerfile's last stage, continuation lines joined, comments gone.
fn runtime_stage(text: &str) -> Stage {
    let mut instructions: Vec<String> = Vec::new();
    let mut open = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && open.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                open.push_str(head);
                open.push(' ');
            }
            None => {
                open.push_str(trimmed);
                instructions.push(std::mem::take(&mut open));
            }
        }
    }
    let last_from = instructions
        .iter()
        .rposition(|i| keyword(i).0 == "FROM")
        .expect("a FROM line");
    let mut stage = Stage::default();
    for instruction in &instructions[last_from + 1..] {
        let (word, rest) = keyword(instruction);
        match word.as_str() {
            "COPY" => {
                let mut from = None;
                let mut paths = Vec::new();
                for token in rest.split_whitespace() {
                    match token.strip_prefix("--from=") {
                        Some(stage) => from = Some(stage.to_owned()),
                        None if token.starts_with("--") => panic!(
                            "COPY flag `{token}` is not reproduced by this test; teach it here: {instruction}"
                        ),
                        None => paths.push(token.to_owned()),
                    }
                }
                let dest = paths.pop().expect("COPY has a destination");
                assert!(!paths.is_empty(), "COPY without a source: {instruction}");
                stage.copies.push(Copy {
                    from,
                    sources: paths,
                    dest,
                });
            }
            "ENV" => {
                for pair in rest.split_whitespace() {
                    let (k, v) = pair
                        .split_once('=')
                        .unwrap_or_else(|| panic!("write ENV as KEY=VALUE: {instruction}"));
                    stage
                        .env
                        .push((k.to_owned(), v.trim_matches('"').to_owned()));
                }
            }
            "USER" => {
                let (u, g) = rest.split_once(':').unwrap_or((rest, rest));
                stage.user = Some((
                    u.parse().unwrap_or_else(|_| {
                        panic!("USER must be a numeric uid:gid: {instruction}")
                    }),
                    g.parse().unwrap_or_else(|_| {
                        panic!("USER must be a numeric uid:gid: {instruction}")
                    }),
                ));
            }
            "WORKDIR" => stage.workdir = Some(rest.to_owned()),
            "VOLUME" => match serde_json::from_str::<Vec<String>>(rest) {
                Ok(list) => stage.volumes.extend(list),
                Err(_) => stage
                    .volumes
                    .extend(rest.split_whitespace().map(str::to_owned)),
            },
            "EXPOSE" => stage.expose.extend(rest.split_whitespace().map(|p| {
                p.trim_end_matches("/tcp")
                    .parse::<u16>()
                    .unwrap_or_else(|_| panic!("EXPOSE a TCP port: {instruction}"))
            })),
            "HEALTHCHECK" => stage.healthcheck = Some(rest.to_owned()),
            "ENTRYPOINT" => stage.entrypoint = exec_form(rest, instruction),
            "CMD" => stage.cmd = exec_form(rest, instruction),
            "RUN" => stage.runs.push(rest.to_owned()),
            _ => {}
        }
    }
    stage
}

/// The first word of an instruction, upper-cased, and the rest.
fn keyword(instruction: &str) -> (String, &str) {
    let (word, rest) = instruction
        .split_once(char::is_whitespace)
        .unwrap_or((instruction, ""));
    (word.to_ascii_uppercase(), rest.trim())
}

/// An exec-form (JSON array) ENTRYPOINT or CMD: the shell form would run through `/bin/sh`,
/// which the image does not need and signals would not reach `toolgate` through.
fn exec_form(rest: &str, instruction: &str) -> Vec<String> {
    serde_json::from_str(rest)
        .unwrap_or_else(|_| panic!("use the exec (JSON array) form: {instruction}"))
}

/// `path` (absolute, in the image) below the temp root.
fn inside(root: &Path, path: &str) -> PathBuf {
    assert!(path.starts_with('/'), "not an absolute path: {path}");
    root.join(path.trim_start_matches('/'))
}

/// Whether the tests run as root (then the server is started as the image's user).
fn root_runs_tests() -> bool {
    rustix::process::getuid().is_root()
}

/// Who the server runs as here: `image` (uid, gid) when the tests run as root, else the
/// current user.
fn runtime_ids(image: (u32, u32)) -> (u32, u32) {
    if root_runs_tests() {
        image
    } else {
        (
            rustix::process::getuid().as_raw(),
            rustix::process::getgid().as_raw(),
        )
    }
}

/// Runs `cmd` as `ids` when the tests run as root (it is the current user otherwise).
fn as_user(cmd: &mut Command, ids: (u32, u32)) {
    if root_runs_tests() {
        cmd.uid(ids.0).gid(ids.1);
    }
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

fn chown(path: &Path, ids: (u32, u32)) {
    std::os::unix::fs::chown(path, Some(ids.0), Some(ids.1))
        .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
}

/// Every entry below `dir`, directories included.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(tree(&path));
        }
        found.push(path);
    }
    found.sort();
    found
}

/// Takes write permission away from everything under `dir` (directories 0555, files 0444);
/// gives the owner's back on drop, so that the temp dir can be removed.
struct ReadOnly(PathBuf);

impl ReadOnly {
    fn make(dir: &Path) -> ReadOnly {
        for path in tree(dir) {
            chmod(&path, if path.is_dir() { 0o555 } else { 0o444 });
        }
        chmod(dir, 0o555);
        ReadOnly(dir.to_owned())
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        let _ = std::fs::set_permissions(&self.0, std::fs::Permissions::from_mode(0o755));
        for path in tree(&self.0) {
            if path.is_dir() {
                let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755));
            }
        }
    }
}

/// The built binary at `to`: a hard link when the file system allows, else a copy.
fn place_binary(to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    let built = Path::new(env!("CARGO_BIN_EXE_toolgate"));
    if std::fs::hard_link(built, to).is_err() {
        std::fs::copy(built, to).unwrap();
    }
}

/// A temp dir that other users can enter (the server may run as another uid).
fn open_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o755);
    dir
}

/// A server started in the image's layout; SIGKILLed on drop if still running.
struct Running {
    child: Child,
    log: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The real uid of process `pid`.
fn uid_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn the_image_layout_starts_as_the_non_root_user_with_a_read_only_config_dir() {
    let dockerfile = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    let stage = runtime_stage(&dockerfile);
    let image_ids = stage.user.expect("the runtime stage sets USER");
    assert_ne!(image_ids.0, 0, "the image must not run as root");
    // The runtime user exists in the image under the same ids, and cvc5 is installed.
    let runs = stage.runs.join("\n");
    assert!(
        runs.contains(&format!("--uid {}", image_ids.0))
            && runs.contains(&format!("--gid {}", image_ids.1)),
        "no user {image_ids:?} is created: {runs}"
    );
    assert!(runs.contains("cvc5"), "cvc5 is not installed: {runs}");

    let temp = open_tempdir();
    let root = temp.path().join("image");
    let logs = temp.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();

    // The COPY lines: the binary from the build stage, the rest from the repository.
    for copy in &stage.copies {
        let dest = inside(&root, &copy.dest);
        match &copy.from {
            Some(_) => {
                assert_eq!(copy.sources.len(), 1, "{copy:?}");
                assert!(
                    copy.sources[0].ends_with("/target/release/toolgate"),
                    "the build stage's binary: {copy:?}"
                );
                place_binary(&dest);
            }
            None => {
                for source in &copy.sources {
                    let from = repo().join(source);
                    let to = if copy.dest.ends_with('/') {
                        dest.join(from.file_name().unwrap())
                    } else {
                        dest.clone()
                    };
                    if from.is_dir() {
                        copy_dir(&from, &to);
                    } else {
                        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                        std::fs::copy(&from, &to).unwrap_or_else(|e| {
                            panic!("COPY {source}: {e} (is it in the repository?)")
                        });
                    }
                }
            }
        }
    }

    // The data directory: the image's one VOLUME, created for the runtime user.
    let [volume] = stage.volumes.as_slice() else {
        panic!("one VOLUME (the data directory): {:?}", stage.volumes);
    };
    assert!(
        runs.contains(&format!(
            "install -d -o {} -g {} -m 0700 {volume}",
            image_ids.0, image_ids.1
        )),
        "{volume} is not created for {image_ids:?}: {runs}"
    );
    let ids = runtime_ids(image_ids);
    let data = inside(&root, volume);
    std::fs::create_dir_all(&data).unwrap();
    chmod(&data, 0o700);
    chown(&data, ids);
    let workdir = inside(&root, stage.workdir.as_deref().expect("a WORKDIR"));
    std::fs::create_dir_all(&workdir).unwrap();

    // The config the image names, as shipped.
    let image_env = |name: &str| {
        stage
            .env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let config_path = image_env("TOOLGATE_CONFIG").expect("ENV TOOLGATE_CONFIG");
    let config_file = inside(&root, &config_path);
    let shipped = std::fs::read_to_string(&config_file)
        .unwrap_or_else(|e| panic!("TOOLGATE_CONFIG={config_path} is not copied in: {e}"));
    let table: toml::Table = toml::from_str(&shipped).unwrap();
    // Where the image listens: its TOOLGATE_LISTEN, else the config's `listen`.
    let listen_text = image_env("TOOLGATE_LISTEN")
        .or_else(|| table.get("listen")?.as_str().map(str::to_owned))
        .expect("the image sets TOOLGATE_LISTEN or its config sets `listen`");
    let listen: std::net::SocketAddr = listen_text.parse().unwrap();
    let [exposed] = stage.expose.as_slice() else {
        panic!("one EXPOSE: {:?}", stage.expose);
    };
    assert_eq!(
        listen.port(),
        *exposed,
        "the image listens off the EXPOSEd port"
    );
    let health = stage.healthcheck.as_deref().expect("a HEALTHCHECK");
    let probe = format!("http://127.0.0.1:{exposed}/readyz");
    assert!(
        health.contains(&probe),
        "HEALTHCHECK does not probe {probe}: {health}"
    );
    // The data directory is the image's: TOOLGATE_DATA_DIR names the VOLUME, whatever config
    // is mounted (the environment beats the file).
    assert_eq!(
        image_env("TOOLGATE_DATA_DIR").as_deref(),
        Some(volume.as_str()),
        "ENV TOOLGATE_DATA_DIR is not the VOLUME"
    );
    assert!(
        !table.contains_key("data_dir"),
        "the shipped config sets `data_dir`, which the image's TOOLGATE_DATA_DIR overrides: leave it out"
    );

    // Everything in the config's directory is read-only to the server.
    let config_dir = config_file.parent().unwrap().to_owned();
    let _read_only = ReadOnly::make(&config_dir);
    let before = tree(&config_dir);

    // ENTRYPOINT + CMD, the program found on the image's PATH.
    let argv: Vec<&String> = stage.entrypoint.iter().chain(&stage.cmd).collect();
    let (program, args) = argv.split_first().expect("an ENTRYPOINT");
    assert_eq!(args, ["serve"], "the image serves by default");
    let binary = IMAGE_PATH
        .split(':')
        .map(|dir| inside(&root, &format!("{dir}/{program}")))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("`{program}` is not on the image's PATH"));
    let log = logs.join("serve.log");
    let mut cmd = Command::new(&binary);
    cmd.args(args)
        .current_dir(&workdir)
        .env_clear()
        .env("PATH", IMAGE_PATH)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    for (k, v) in &stage.env {
        let value = if v.starts_with('/') {
            inside(&root, v).display().to_string()
        } else {
            v.clone()
        };
        cmd.env(k, value);
    }
    // As `docker run -e TOOLGATE_LISTEN=…` would: a free loopback port instead of the image's
    // every-interface one. The config file stays as shipped.
    let port = free_port();
    cmd.env("TOOLGATE_LISTEN", format!("127.0.0.1:{port}"));
    as_user(&mut cmd, ids);
    let mut server = Running {
        child: cmd.spawn().unwrap(),
        log,
    };

    // Ready, as the HEALTHCHECK sees it.
    let start = Instant::now();
    let ready = loop {
        if let Some((200, body)) = exchange(port, "GET", "/readyz", None, None) {
            break body;
        }
        let exited = server.child.try_wait().unwrap();
        assert!(
            exited.is_none(),
            "serve exited ({exited:?}):\n{}",
            server.log()
        );
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not ready within 30 s:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(ready["ready"], true, "{ready}");
    assert_eq!(ready["policy_origin"], "files", "{ready}");
    assert_eq!(uid_of(server.child.id()), ids.0, "the server's uid");

    // A demo token is answered.
    let (status, answer) = exchange(
        port,
        "POST",
        "/v1/authorize",
        Some(DEV),
        Some(&json!({"tool": "echo", "args": {"message": "hi"}})),
    )
    .expect("an answer to /v1/authorize");
    assert_eq!(status, 200, "{answer}\n{}", server.log());
    assert_eq!(answer["decision"], "allow", "{answer}");

    // The data went to the data directory, owned by the runtime user; the config directory
    // is as it was.
    let conf = data.join("conf");
    assert!(conf.is_file(), "no sled database in {}", data.display());
    assert_eq!(std::fs::metadata(&conf).unwrap().uid(), ids.0);
    assert_eq!(tree(&config_dir), before);
    drop(server);

    // With a workspace mounted and named (`[exec] root`, as the shipped config's comment
    // says), the image's non-root user runs tools, its own files covered in each run.
    let workspace = temp.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("notes.txt"), "n").unwrap();
    chown(&workspace, ids);
    let with_exec = temp.path().join("with-exec.toml");
    std::fs::write(
        &with_exec,
        format!(
            "{}\n[exec]\nroot = \"{}\"\n",
            shipped
                .replace(
                    "\"policies\"",
                    &format!("\"{}\"", config_dir.join("policies").display())
                )
                .replace(
                    "\"schemas\"",
                    &format!("\"{}\"", config_dir.join("schemas").display())
                )
                .replace(
                    "\"demo-tokens.json\"",
                    &format!("\"{}\"", config_dir.join("demo-tokens.json").display())
                ),
            workspace.display()
        ),
    )
    .unwrap();
    let port = free_port();
    cmd.env("TOOLGATE_CONFIG", &with_exec)
        .env("TOOLGATE_LISTEN", format!("127.0.0.1:{port}"))
        .stderr(std::fs::File::create(logs.join("exec.log")).unwrap());
    let server = Running {
        child: cmd.spawn().unwrap(),
        log: logs.join("exec.log"),
    };
    let start = Instant::now();
    let ready = loop {
        if let Some((200, body)) = exchange(port, "GET", "/readyz", None, None) {
            break body;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not ready with [exec]:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let exec = &ready["execution"];
    assert!(exec["error"].is_null(), "{ready}");
    assert_eq!(exec["metadata"], "namespace", "{ready}");
    let (status, ran) = exchange(
        port,
        "POST",
        "/v1/execute",
        Some(DEV),
        Some(&json!({"tool": "echo", "args": {"message": "from the image"}})),
    )
    .unwrap();
    assert_eq!(status, 200, "{ran}\n{}", server.log());
    assert_eq!(ran["data"], "from the image", "{ran}");
    drop(server);
}

/// `toolgate serve --config CONFIG` as `ids`; waits (at most 30 s) for it to exit.
fn serve_once(binary: &Path, config: &Path, ids: (u32, u32)) -> Output {
    let mut cmd = Command::new(binary);
    cmd.args(["serve", "--config"])
        .arg(config)
        .env_remove("TOOLGATE_CONFIG")
        .env_remove("TOOLGATE_LISTEN")
        .env_remove("TOOLGATE_DATA_DIR")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    as_user(&mut cmd, ids);
    let mut child = cmd.spawn().unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!(
                "`serve` still running after 30 s: {:?}",
                child.wait_with_output()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A shipped set, the demo tokens and the binary in a dir any user can read, with a config
/// whose data directory is `data` (relative to the set).
fn readable_set(data: &str) -> (TempSet, PathBuf, PathBuf) {
    let set = TempSet::new();
    chmod(set.dir.path(), 0o755);
    std::fs::copy(
        repo().join("examples/demo-tokens.json"),
        set.dir.path().join("demo-tokens.json"),
    )
    .unwrap();
    // Not `toolgate.toml`, which `process::start` writes.
    let config = set.dir.path().join("runtime.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{}\"\ndata_dir = \"{data}\"\n[auth]\ntokens_file = \"demo-tokens.json\"\n",
            free_port()
        ),
    )
    .unwrap();
    let binary = set.dir.path().join("bin/toolgate");
    place_binary(&binary);
    chmod(&set.dir.path().join("bin"), 0o755);
    (set, config, binary)
}

/// What `serve` printed when it refused to start.
fn refused(out: &Output) -> String {
    assert!(!out.status.success(), "serve started: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_data_dir_the_runtime_user_cannot_write_is_reported_with_its_owner_and_the_fix() {
    let ids = runtime_ids((10001, 10001));
    let (uid, gid) = ids;

    // The directory exists but belongs to someone else (as root: root's; otherwise: ours,
    // without write permission).
    let (set, config, binary) = readable_set("data");
    let data = set.dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    chmod(&data, if root_runs_tests() { 0o755 } else { 0o555 });
    let err = refused(&serve_once(&binary, &config, ids));
    assert!(
        err.contains(&format!("permission denied on {}", data.display())),
        "{err}"
    );
    assert!(
        err.contains(&format!("toolgate runs as {uid}:{gid}")),
        "{err}"
    );
    assert!(
        err.contains(&format!("chown -R {uid}:{gid} {}", data.display())),
        "{err}"
    );
    assert!(!err.contains("another toolgate"), "{err}");
    chmod(&data, 0o755);

    // It does not exist, and its parent cannot be written: the Dockerfile's old layout (a
    // data directory inside a root-owned working directory).
    let (set, config, binary) = readable_set("ro/data");
    let parent = set.dir.path().join("ro");
    std::fs::create_dir(&parent).unwrap();
    chmod(&parent, 0o555);
    let err = refused(&serve_once(&binary, &config, ids));
    assert!(
        err.contains(&format!("permission denied on {}", parent.display())),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "install -d -o {uid} -g {gid} -m 700 {}",
            parent.join("data").display()
        )),
        "{err}"
    );
    assert!(!err.contains("another toolgate"), "{err}");
    chmod(&parent, 0o755);

    // It is the user's, but the files in it are not: a first run as root, say. The message
    // names a file inside.
    let (set, config, binary) = readable_set("data");
    let data = set.dir.path().join("data");
    {
        let first = crate::process::start(&set);
        drop(first);
    }
    assert!(data.join("conf").is_file());
    chown(&data, ids);
    if !root_runs_tests() {
        for path in tree(&data) {
            if path.is_file() {
                chmod(&path, 0o444);
            }
        }
    }
    let err = refused(&serve_once(&binary, &config, ids));
    let prefix = format!("permission denied on {}/", data.display());
    assert!(err.contains(&prefix), "{err}");
    assert!(
        err.contains(&format!("chown -R {uid}:{gid} {}", data.display())),
        "{err}"
    );
    assert!(!err.contains("another toolgate"), "{err}");
    for path in tree(&data) {
        chmod(&path, if path.is_dir() { 0o755 } else { 0o644 });
    }
}

/// The "another toolgate" hint is kept for the case it fits: the lock is held.
#[test]
fn a_data_dir_in_use_by_a_running_toolgate_still_says_so() {
    let set = TempSet::new();
    let running = crate::process::start(&set);
    // The same user and config: only the lock stands in the way.
    let me = (
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    );
    let binary = Path::new(env!("CARGO_BIN_EXE_toolgate"));
    let err = refused(&serve_once(
        binary,
        &set.dir.path().join("toolgate.toml"),
        me,
    ));
    assert!(err.contains("another toolgate"), "{err}");
    assert!(!err.contains("permission denied"), "{err}");
    assert_eq!(
        exchange(running.port, "GET", "/healthz", None, None).map(|(s, _)| s),
        Some(200)
    );
}
