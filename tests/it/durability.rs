//! Durability with the real binary: under `sync = "group"` each answer waits for an
//! `fdatasync` of the ledger that covers its record (checked with strace), buffered mode
//! stores what it answered when stopped with SIGTERM, and a full disk is recovered from
//! without a restart, leaving a note in the log (after a restart, too).

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::*;
use crate::process::{Server, exchange, metrics, start_with, start_wrapped};

fn allow_call(n: usize) -> Value {
    json!({"tool": "read_file", "args": {"path": format!("src/f{n}.rs")}})
}

fn deny_call(n: usize) -> Value {
    json!({"tool": "read_file", "args": {"path": format!("/etc/f{n}")}})
}

/// One syscall seen by strace: who, what, on which descriptor, when it started and ended,
/// and what it returned.
#[derive(Debug, Clone)]
struct Call {
    name: String,
    fd: String,
    start: f64,
    end: f64,
    ret: i64,
    /// The data shown is an authorize request or a decision answer.
    authorize: bool,
}

/// Parses `strace -f -ttt -T -yy` output, joining `<unfinished ...>` with `<... resumed>`.
fn parse_trace(text: &str) -> Vec<Call> {
    let mut open: HashMap<String, (String, String, f64)> = HashMap::new();
    let mut calls = Vec::new();
    for line in text.lines() {
        // `pid ts rest`: strace pads the pid to 5 columns, so a short pid has two spaces.
        let Some((pid, tail)) = line.trim_start().split_once(' ') else {
            continue;
        };
        let Some((ts, rest)) = tail.trim_start().split_once(' ') else {
            continue;
        };
        let Ok(ts) = ts.parse::<f64>() else { continue };
        let duration = rest
            .rsplit_once('<')
            .and_then(|(_, d)| d.strip_suffix('>'))
            .and_then(|d| d.parse::<f64>().ok());
        let ret = rest
            .rsplit_once(" = ")
            .and_then(|(_, r)| r.split_whitespace().next())
            .and_then(|r| r.parse::<i64>().ok())
            .unwrap_or(-1);
        if let Some(resumed) = rest.strip_prefix("<... ") {
            let name = resumed.split_whitespace().next().unwrap_or_default();
            if let Some((open_name, fd, start)) = open.remove(pid)
                && open_name == name
            {
                calls.push(Call {
                    name: open_name,
                    fd,
                    start,
                    end: duration.map_or(ts, |d| start + d),
                    ret,
                    authorize: rest.contains("/v1/authorize") || rest.contains("decision_id"),
                });
            }
            continue;
        }
        let Some((name, args)) = rest.split_once('(') else {
            continue;
        };
        // `fd<path>` or `fd<TCP:[a->b]>`: the annotation ends at the `>` before `,`, `)` or
        // a space (a socket's own `->` is followed by a digit).
        let fd = args
            .split_once('<')
            .and_then(|(_, r)| {
                let bytes = r.as_bytes();
                (0..bytes.len())
                    .find(|&i| {
                        bytes[i] == b'>'
                            && matches!(bytes.get(i + 1), Some(b',' | b')' | b' ') | None)
                    })
                    .map(|i| r[..i].to_owned())
            })
            .unwrap_or_default();
        if rest.ends_with("<unfinished ...>") {
            open.insert(pid.to_owned(), (name.to_owned(), fd, ts));
            continue;
        }
        calls.push(Call {
            name: name.to_owned(),
            fd,
            start: ts,
            end: duration.map_or(ts, |d| ts + d),
            ret,
            authorize: rest.contains("/v1/authorize") || rest.contains("decision_id"),
        });
    }
    // A call still unfinished when the server was killed (strace under load can lag behind
    // the kill): its start is known, which is all an answer's write needs; it never counts
    // as a finished fdatasync (its return is unknown).
    for (_, (name, fd, start)) in open {
        calls.push(Call {
            name,
            fd,
            start,
            end: start,
            ret: -1,
            authorize: false,
        });
    }
    calls
}

/// The pid strace started (the first line's pid), killed so no server outlives the test.
fn kill_traced(trace: &Path) {
    // strace flushes its first lines at once: the start-up's reads and writes fill its buffer.
    let text = std::fs::read_to_string(trace).unwrap_or_default();
    if let Some(pid) = text.split_whitespace().next() {
        let _ = Command::new("kill").args(["-9", pid]).status();
    }
}

#[test]
fn each_durable_answer_is_written_after_an_fdatasync_of_its_record() {
    assert!(
        Command::new("strace").arg("-V").output().is_ok(),
        "strace is needed for this test (apt-get install strace; .ci/run installs it)"
    );
    let set = TempSet::new();
    let trace = set.dir.path().join("trace.txt");
    let trace_arg = trace.display().to_string();
    let server = start_wrapped(
        &set,
        "",
        &[],
        &[
            "strace",
            "-f",
            "-qq",
            "-ttt",
            "-T",
            "-yy",
            "-e",
            "trace=fdatasync,fsync,sync_file_range,read,recvfrom,write,writev,sendto,sendmsg",
            "-o",
            &trace_arg,
        ],
    );
    let n = 20;
    for i in 0..n {
        let call = if i % 2 == 0 {
            allow_call(i)
        } else {
            deny_call(i)
        };
        let (status, d) =
            exchange(server.port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
        assert_eq!(status, 200, "{d}");
    }
    // strace prints a call when it has handled it, which may lag behind the answers: wait
    // until every request is in the trace, then stop the traced server (strace then exits).
    let seen = || {
        std::fs::read_to_string(&trace)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("decision_id") && l.contains("TCP:["))
            .count()
    };
    let waiting = Instant::now();
    while seen() < n && waiting.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut server = server;
    kill_traced(&trace);
    let stopping = Instant::now();
    while server.child.try_wait().unwrap().is_none() {
        assert!(
            stopping.elapsed() < Duration::from_secs(20),
            "strace did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let server_port = server.port;
    drop(server);
    let _ = std::fs::copy(
        &trace,
        std::env::temp_dir().join("toolgate-fdatasync-trace.txt"),
    );
    let calls = parse_trace(&std::fs::read_to_string(&trace).unwrap());
    let syncs: Vec<&Call> = calls
        .iter()
        .filter(|c| {
            matches!(c.name.as_str(), "fdatasync" | "fsync") && c.fd.ends_with("ledger/wal")
        })
        .filter(|c| c.ret == 0)
        .collect();
    let port = format!("127.0.0.1:{server_port}->");
    // Per authorize connection: when its request had arrived, and when its answer began.
    let authorize: std::collections::HashSet<&str> = calls
        .iter()
        .filter(|c| c.authorize && c.fd.starts_with("TCP:[") && c.fd.contains(&port))
        .map(|c| c.fd.as_str())
        .collect();
    let mut conns: HashMap<&str, (Option<f64>, Option<f64>)> = HashMap::new();
    for c in &calls {
        if !authorize.contains(c.fd.as_str()) {
            continue;
        }
        let slot = conns.entry(c.fd.as_str()).or_default();
        match c.name.as_str() {
            // A request may arrive in pieces: it is complete at the last read before the answer.
            "read" | "recvfrom" if c.ret > 0 && slot.1.is_none() => slot.0 = Some(c.end),
            "write" | "writev" | "sendto" | "sendmsg" if slot.1.is_none() => slot.1 = Some(c.start),
            _ => {}
        }
    }
    let answered: Vec<(f64, f64)> = conns
        .values()
        .filter_map(|(asked, answer)| Some(((*asked)?, (*answer)?)))
        .collect();
    assert_eq!(
        answered.len(),
        n,
        "not every answer was seen in the trace (kept as {}): {conns:?}",
        std::env::temp_dir()
            .join("toolgate-fdatasync-trace.txt")
            .display()
    );
    for (asked, answer) in answered {
        let covered = syncs.iter().any(|s| s.start >= asked && s.end <= answer);
        assert!(
            covered,
            "an answer was written at {answer:.6} with no fdatasync of the ledger since its request at {asked:.6} (syncs: {:?})",
            syncs.iter().map(|s| (s.start, s.end)).collect::<Vec<_>>()
        );
    }
}

pub(crate) fn sigterm_and_wait(mut server: Server) {
    let pid = server.child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let start = Instant::now();
    while server.child.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no stop after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn buffered_mode_keeps_every_answered_decision_through_a_sigterm() {
    let set = TempSet::new();
    for round in 0..5 {
        let server = start_with(&set, "[audit]\nsync = \"buffered\"");
        let mut ids = Vec::new();
        for i in 0..20 {
            let (status, d) = exchange(
                server.port,
                "POST",
                "/v1/authorize",
                Some(DEV),
                Some(&allow_call(round * 100 + i)),
            )
            .unwrap();
            assert_eq!(status, 200, "{d}");
            ids.push(d["decision_id"].as_str().unwrap().to_owned());
        }
        // At once: well within the 2 ms the writer lets entries gather, and sled's 500 ms.
        sigterm_and_wait(server);
        let logged = logged_ids(&set.dir.path().join("data"));
        let lost: Vec<&String> = ids.iter().filter(|id| !logged.contains(id)).collect();
        assert!(
            lost.is_empty(),
            "round {round}: answered, not stored: {lost:?}"
        );
    }
}

/// `toolgate audit verify --data-dir data EXTRA…` on a stopped sidecar's directory: whether
/// it passed, and all it printed.
pub(crate) fn verify_offline(set: &TempSet, extra: &[&str]) -> (bool, String) {
    let out = toolgate()
        .current_dir(set.dir.path())
        .args(["audit", "verify", "--data-dir", "data"])
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Says that a test is skipped because `what` cannot be mounted (it needs `needs`), or fails
/// when `TOOLGATE_REQUIRE_ROOT_TESTS` is set (CI runs as root: such tests must run there).
fn skipped(what: &str, needs: &str) {
    eprintln!("SKIPPED: cannot mount {what} (needs {needs})");
    assert!(
        std::env::var_os("TOOLGATE_REQUIRE_ROOT_TESTS").is_none(),
        "TOOLGATE_REQUIRE_ROOT_TESTS is set but {what} could not be mounted"
    );
}

/// A small file system for the data directory (tmpfs, so root is needed to mount it).
pub(crate) struct SmallDisk {
    dir: std::path::PathBuf,
}

impl SmallDisk {
    pub(crate) fn mount(at: &Path, mib: u64) -> Option<SmallDisk> {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| SmallDisk {
            dir: at.to_path_buf(),
        })
    }

    /// Fills the disk until `leave` bytes are free.
    pub(crate) fn fill(&self, leave: u64) {
        // The sidecar writes to the same disk meanwhile: a filler that no longer fits is
        // measured and written again.
        for _ in 0..5 {
            let free = rustix::fs::statvfs(&self.dir).unwrap();
            let avail = free.f_bavail * free.f_frsize;
            let size = avail.saturating_sub(leave);
            match std::fs::write(self.dir.join("filler"), vec![0u8; size as usize]) {
                Ok(()) => return,
                Err(e) if e.raw_os_error() == Some(28) => {
                    let _ = std::fs::remove_file(self.dir.join("filler"));
                }
                Err(e) => panic!("filling the disk: {e}"),
            }
        }
        panic!("the disk could not be filled to {leave} bytes free");
    }

    /// [`SmallDisk::mount`], or `None` after saying the test is skipped (mounting needs
    /// root, which CI has; `TOOLGATE_REQUIRE_ROOT_TESTS` turns the skip into a failure).
    pub(crate) fn mount_or_skip(at: &Path, mib: u64) -> Option<SmallDisk> {
        let disk = SmallDisk::mount(at, mib);
        if disk.is_none() {
            skipped(&format!("a tmpfs at {}", at.display()), "root");
        }
        disk
    }

    /// Takes every free byte, as another process writing until ENOSPC would.
    pub(crate) fn fill_up(&self) {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("filler"))
            .unwrap();
        for chunk in [1 << 20, 4096, 1] {
            let bytes = vec![0u8; chunk];
            while f.write_all(&bytes).is_ok() {}
        }
    }

    pub(crate) fn free(&self) {
        std::fs::remove_file(self.dir.join("filler")).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

fn ready(port: u16) -> Value {
    exchange(port, "GET", "/readyz", None, None)
        .map(|(_, v)| v)
        .unwrap_or(Value::Null)
}

fn until(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_full_disk_is_survived_and_recovered_from_without_a_restart() {
    // Below the reserve (refused before anything is written), and with no reserve at all,
    // down to the last byte (the ledger's write fails with ENOSPC and is cut back).
    full_disk(8, 4 * 1024 * 1024, "reserve");
    full_disk(0, 0, "space");
}

fn full_disk(reserve_mb: u64, leave: u64, why: &str) {
    let set = TempSet::new();
    let data = set.dir.path().join("data");
    let Some(disk) = SmallDisk::mount_or_skip(&data, 64) else {
        return;
    };
    let config = format!("[audit]\nreserve_mb = {reserve_mb}");
    let config = config.as_str();
    let server = start_with(&set, config);
    let port = server.port;
    let decide = |n: usize| {
        exchange(
            port,
            "POST",
            "/v1/authorize",
            Some(DEV),
            Some(&allow_call(n)),
        )
    };
    assert_eq!(decide(0).unwrap().0, 200);

    // Full (below the reserve): every call is refused, readiness and the metric say why.
    disk.fill(leave);
    // Below the reserve, the first refusal comes at once. With no reserve, the ledger still
    // overwrites the space it laid out ahead, so records it takes are durable; the refusal
    // comes when sled next writes its buffer (every 512 KiB of changes: a few hundred
    // records) and fails.
    let refused = (1..5000).find(|i| decide(*i).unwrap().0 == 503);
    assert!(refused.is_some(), "a full disk never refused a decision");
    assert_eq!(ready(port)["ready"], false);
    assert!(
        ready(port)["audit_error"]
            .as_str()
            .is_some_and(|e| e.contains(why)),
        "{}",
        ready(port)
    );
    assert!(
        metrics(port).contains("toolgate_audit_store_failing 1"),
        "{}",
        metrics(port)
    );
    for i in 2..20 {
        assert_eq!(decide(i).unwrap().0, 503);
    }

    // Space returns: it recovers by itself, with no request needed to wake it.
    disk.free();
    let freed = Instant::now();
    until(
        "readiness did not come back",
        Duration::from_secs(10),
        || ready(port)["ready"] == true,
    );
    eprintln!(
        "reserve {reserve_mb} MiB: ready again {:?} after space returned",
        freed.elapsed()
    );
    assert!(metrics(port).contains("toolgate_audit_store_failing 0"));
    let (status, d) = decide(30).unwrap();
    assert_eq!(status, 200, "{d}");
    let log = exchange(
        port,
        "GET",
        "/v1/audit?decision=audit_failure",
        Some(ALICE),
        None,
    )
    .unwrap()
    .1;
    let notes = log["records"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{log}");
    assert!(
        notes[0]["entry"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("failed to store")),
        "{log}"
    );

    // An outage cut short by a stop is noted after the restart.
    disk.fill(leave);
    assert!((40..5000).any(|i| decide(i).unwrap().0 == 503));
    drop(server); // SIGKILL, while failing
    disk.free();
    let server = start_with(&set, config);
    let port = server.port;
    until("no note after the restart", Duration::from_secs(10), || {
        exchange(
            port,
            "GET",
            "/v1/audit?decision=audit_failure",
            Some(ALICE),
            None,
        )
        .is_some_and(|(_, log)| log["records"].as_array().is_some_and(|r| r.len() == 2))
    });
    let log = exchange(
        port,
        "GET",
        "/v1/audit?decision=audit_failure",
        Some(ALICE),
        None,
    )
    .unwrap()
    .1;
    let newest = log["records"][0]["entry"]["detail"]
        .as_str()
        .unwrap_or_default();
    assert!(newest.contains("stopped during that outage"), "{log}");
    assert_eq!(ready(port)["ready"], true);
    drop(server);
    drop(disk);
}

/// A snapshot sled did not finish (an empty `snap.*.generating`, as a full disk during a
/// snapshot leaves) no longer keeps the data directory shut: the offline `audit verify` and
/// `serve` remove it, say so, and open the store with every record in it.
#[test]
fn an_unfinished_sled_snapshot_does_not_keep_the_store_shut() {
    let set = TempSet::new();
    let server = start_with(&set, "");
    let (status, d) = exchange(
        server.port,
        "POST",
        "/v1/authorize",
        Some(DEV),
        Some(&allow_call(1)),
    )
    .unwrap();
    assert_eq!(status, 200, "{d}");
    sigterm_and_wait(server);
    let data = set.dir.path().join("data");
    let debris = data.join("snap.7FFFFFFFFFFFFFFF.generating");
    std::fs::write(&debris, b"").unwrap();
    // sled itself refuses the directory as it is.
    assert!(
        sled::Config::new().path(&data).open().is_err(),
        "sled opened a directory with an empty unfinished snapshot"
    );
    let (ok, said) = verify_offline(&set, &[]);
    assert!(ok, "{said}");
    assert!(said.contains("unfinished sled snapshot"), "{said}");
    assert!(!debris.exists());
    // And serve, the same.
    std::fs::write(&debris, b"").unwrap();
    let server = start_with(&set, "");
    let log = std::fs::read_to_string(set.dir.path().join("serve.log")).unwrap();
    assert!(log.contains("unfinished sled snapshot"), "{log}");
    let (status, page) = exchange(
        server.port,
        "GET",
        "/v1/audit?decision=allow",
        Some(ALICE),
        None,
    )
    .unwrap();
    assert_eq!(status, 200, "{page}");
    assert!(
        page["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["entry"]["id"] == d["decision_id"]),
        "{page}"
    );
}

/// One damaged byte in the middle of the ledger is not a torn tail. With the store lacking
/// the records after it (a kill -9 before sled's flush), `serve` refuses to start and
/// `audit verify` names the byte; nothing is cut. A torn last frame is still cut off with a
/// warning, and the sidecar starts.
#[test]
fn a_damaged_ledger_frame_is_refused_and_named_but_a_torn_tail_is_cut() {
    let set = TempSet::new();
    let server = start_with(&set, "");
    for i in 0..20 {
        let (status, d) = exchange(
            server.port,
            "POST",
            "/v1/authorize",
            Some(DEV),
            Some(&allow_call(i)),
        )
        .unwrap();
        assert_eq!(status, 200, "{d}");
    }
    drop(server); // SIGKILL: the records are in the ledger, not yet in sled's files
    let wal = set.dir.path().join("data/ledger/wal");
    let original = std::fs::read(&wal).unwrap();
    // Frames follow the header block, written over zeros laid out ahead of them.
    assert_eq!(&original[..4], b"TGL0", "the ledger has no header block");
    let base = 4096;
    let frame_len =
        |at: usize| 12 + u32::from_le_bytes(original[at + 4..at + 8].try_into().unwrap()) as usize;
    let mut ends = vec![base];
    while original[*ends.last().unwrap()..].starts_with(b"TGL1") {
        let at = *ends.last().unwrap();
        ends.push(at + frame_len(at));
    }
    assert!(ends.len() > 3, "too few frames in the ledger");
    let second = ends[1];
    let mut damaged = original.clone();
    damaged[second + 20] ^= 0x01;
    std::fs::write(&wal, &damaged).unwrap();

    let (ok, said) = verify_offline(&set, &[]);
    assert!(!ok, "verify passed a damaged ledger: {said}");
    assert!(
        said.contains(&format!("damaged at byte {second}")),
        "{said}"
    );
    let refused = crate::process::serve_refuses(&set, "");
    assert!(
        refused.contains(&format!("damaged at byte {second}")),
        "{refused}"
    );
    assert_eq!(
        std::fs::read(&wal).unwrap(),
        damaged,
        "the damaged ledger was changed"
    );

    // A torn last frame (a crash in the middle of a write) is cut, and the rest applied.
    let mut torn = original.clone();
    let end = *ends.last().unwrap();
    torn[end - 20..end].fill(0);
    std::fs::write(&wal, &torn).unwrap();
    let server = start_with(&set, "");
    let log = std::fs::read_to_string(set.dir.path().join("serve.log")).unwrap();
    assert!(log.contains("torn or damaged frame"), "{log}");
    let (status, page) = exchange(
        server.port,
        "GET",
        "/v1/audit?decision=allow&limit=100",
        Some(ALICE),
        None,
    )
    .unwrap();
    assert_eq!(status, 200, "{page}");
    assert!(page["records"].as_array().unwrap().len() >= 19, "{page}");
}

/// A ledger frame as the sidecar writes one (`TGL1`, length, CRC-32, then the batch's
/// sequence numbers, its block of JSON lines and its effects): what a forger with write
/// access to the data directory, but not the HMAC key, can make.
fn frame(seq: u64, block: &[u8], effects: &[(&str, &[u8], &[u8])]) -> Vec<u8> {
    let part = |out: &mut Vec<u8>, b: &[u8]| {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    };
    let mut payload = Vec::new();
    payload.extend_from_slice(&seq.to_le_bytes());
    payload.extend_from_slice(&seq.to_le_bytes());
    part(&mut payload, block);
    payload.extend_from_slice(&(effects.len() as u32).to_le_bytes());
    for (tree, key, value) in effects {
        part(&mut payload, tree.as_bytes());
        part(&mut payload, key);
        payload.push(1);
        part(&mut payload, value);
    }
    let mut out = b"TGL1".to_vec();
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

/// A frame appended to the ledger by someone without the HMAC key (it checks, and it
/// continues the stored log, but its record's seal is made up) is refused at start and by
/// `audit verify`, naming the record; nothing in it takes effect: the approval it would
/// approve stays pending.
#[test]
fn a_forged_ledger_frame_is_refused_and_nothing_in_it_takes_effect() {
    let set = TempSet::new();
    let server = start_with(&set, "");
    let (status, d) = exchange(
        server.port,
        "POST",
        "/v1/authorize",
        Some(DEV),
        Some(&json!({"tool": "write_file", "args": {"path": "src/lib.rs", "content": "x"}})),
    )
    .unwrap();
    assert_eq!(d["decision"], "pending_approval", "{status} {d}");
    let id = d["approval_id"].as_str().unwrap().to_owned();
    sigterm_and_wait(server);
    let data = set.dir.path().join("data");
    let (head, stored) = {
        let stores =
            toolgate::storage::Stores::open_existing(&data, toolgate::storage::DEFAULT_CACHE_BYTES)
                .unwrap();
        let head = stores.audit.last().unwrap().unwrap();
        let a = stores.approvals.all().unwrap();
        (head, serde_json::to_value(&a[0]).unwrap())
    };
    assert_eq!(stored["status"], "pending");
    let mut approved = stored.clone();
    approved["status"] = json!("approved");
    approved["decided_by"] = json!("Human::\"bob\"");
    let record = json!({
        "seq": head.seq + 1,
        "prev": head.hash,
        "hash": "ab".repeat(32),
        "key": head.key,
        "entry": {"at_ms": 1, "decision": "approved", "id": id, "kind": "approval",
                  "principal": "Human::\"bob\""},
    });
    let wal = data.join("ledger/wal");
    let forged = frame(
        head.seq + 1,
        &serde_json::to_vec(&record).unwrap(),
        &[(
            "approvals",
            id.as_bytes(),
            &serde_json::to_vec(&approved).unwrap(),
        )],
    );
    std::fs::write(&wal, &forged).unwrap();

    let refused = crate::process::serve_refuses(&set, "");
    let named = format!("holds record {} that the chain does not seal", head.seq + 1);
    assert!(refused.contains(&named), "{refused}");
    let (ok, said) = verify_offline(&set, &[]);
    assert!(!ok, "verify passed a forged frame: {said}");
    assert!(said.contains(&named), "{said}");
    assert_eq!(
        std::fs::read(&wal).unwrap(),
        forged,
        "the ledger was changed"
    );
    let db = sled::Config::new().path(&data).open().unwrap();
    let now: Value = serde_json::from_slice(
        &db.open_tree("approvals")
            .unwrap()
            .get(id.as_bytes())
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(now["status"], "pending", "the forged approval took effect");
}

/// The data directory on its own ext4 file system (a loop device, so root is needed), to
/// make it go read-only the way a disk error does: `errors=remount-ro`, then an error the
/// kernel is told of. Unlike `mount -o remount,ro`, which the kernel refuses while files are
/// open for writing, this takes effect under a running sidecar.
pub(crate) struct Ext4Disk {
    dir: std::path::PathBuf,
    image: std::path::PathBuf,
}

impl Ext4Disk {
    /// A new `mib` MiB ext4 file system in `image`, mounted at `at`; `None` after saying the
    /// test is skipped (no root or no loop device; `TOOLGATE_REQUIRE_ROOT_TESTS` turns the
    /// skip into a failure).
    pub(crate) fn mount_or_skip(at: &Path, image: &Path, mib: u64) -> Option<Ext4Disk> {
        std::fs::create_dir_all(at).unwrap();
        let made = std::fs::File::create(image)
            .and_then(|f| f.set_len(mib << 20))
            .is_ok()
            && Command::new("mkfs.ext4")
                .args(["-q", "-F"])
                .arg(image)
                .status()
                .is_ok_and(|s| s.success());
        let disk = Ext4Disk {
            dir: at.to_path_buf(),
            image: image.to_path_buf(),
        };
        if made && disk.mount() {
            return Some(disk);
        }
        std::mem::forget(disk);
        skipped(
            &format!("an ext4 loop device at {}", at.display()),
            "root and mkfs.ext4",
        );
        None
    }

    fn mount(&self) -> bool {
        Command::new("mount")
            .args(["-o", "loop,errors=remount-ro"])
            .arg(&self.image)
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The file system turns read-only under whoever is writing, as after a disk error.
    pub(crate) fn go_read_only(&self) {
        let out = Command::new("findmnt")
            .args(["-n", "-o", "SOURCE"])
            .arg(&self.dir)
            .output()
            .unwrap();
        let source = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let dev = source.rsplit('/').next().unwrap().to_owned();
        std::fs::write(format!("/sys/fs/ext4/{dev}/trigger_fs_error"), "1").unwrap();
        let probe = std::fs::write(self.dir.join("probe"), b"x");
        assert!(probe.is_err(), "the file system did not go read-only");
    }

    /// What an operator does after the error (the sidecar is gone): unmount, `e2fsck`, and
    /// mount again read-write.
    pub(crate) fn repair(&self) {
        assert!(
            Command::new("umount")
                .arg(&self.dir)
                .status()
                .unwrap()
                .success()
        );
        let fsck = Command::new("e2fsck")
            .args(["-f", "-y"])
            .arg(&self.image)
            .output()
            .unwrap();
        // 0: clean; 1: errors corrected.
        assert!(
            matches!(fsck.status.code(), Some(0 | 1)),
            "e2fsck: {}",
            String::from_utf8_lossy(&fsck.stdout)
        );
        assert!(self.mount(), "the repaired file system does not mount");
    }
}

impl Drop for Ext4Disk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}
