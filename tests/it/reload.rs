//! The reload matrix: every way a policy directory changes in the field, each in a temp dir,
//! noticed by file-system events alone (polling off unless the case is about polling). Each
//! case checks the revision in force and a decision that depends on the change.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use toolgate::api::router;
use toolgate::gateway::Gateway;
use toolgate::policy::{Sources, read_inputs};
use toolgate::reload::{PolicyStore, PolicyWatcher, StoreOptions, WatchOptions, Widening};

use crate::helpers::*;

const NO_ECHO: &str =
    "\n@id(\"no-echo\")\nforbid (principal, action == Action::\"echo\", resource);\n";

struct Live {
    store: Arc<PolicyStore>,
    app: axum::Router,
    sources: Sources,
    _watcher: PolicyWatcher,
}

fn events_only() -> WatchOptions {
    WatchOptions {
        events: true,
        debounce: Duration::from_millis(30),
        poll: None,
    }
}

/// A store that applies every change, widening ones too: this matrix is about noticing
/// changes, and most of its edits (a file deleted, a forbid appended without a solver to
/// prove it narrows) would be held under the default `hold` (see tests/it/lifecycle.rs and
/// tests/it/reload_entries.rs for holding).
fn start(sources: Sources, opts: WatchOptions) -> Live {
    let store = PolicyStore::open(sources.clone()).unwrap().0;
    let store = Arc::new(store.with_options(StoreOptions {
        widening: Widening::Apply,
        ..StoreOptions::default()
    }));
    let app = router(Gateway::with_store(store.clone(), demo_auth(), 64 * 1024).unwrap());
    let watcher = PolicyWatcher::spawn(store.clone(), opts);
    Live {
        store,
        app,
        sources,
        _watcher: watcher,
    }
}

impl Live {
    /// Reloads that read the files' contents (unchanged or applied).
    fn reads(&self) -> u64 {
        self.store.stats.unchanged.load(Ordering::Relaxed)
            + self.store.stats.applied.load(Ordering::Relaxed)
    }
    fn revision(&self) -> String {
        self.store.current().revision.clone()
    }
    /// The revision the files on disk hash to now.
    fn on_disk(&self) -> String {
        read_inputs(&self.sources).revision
    }
    async fn wait_for(&self, revision: &str) {
        let start = Instant::now();
        while self.revision() != revision {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "revision {revision} never went live"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    async fn wait_for_error(&self) {
        let start = Instant::now();
        while self.store.last_error().is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the failed reload was never noticed"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    async fn echo(&self) -> Value {
        authorize(
            &self.app,
            DEV,
            &json!({"tool": "echo", "args": {"message": "hi"}}),
        )
        .await
    }
}

async fn settle() {
    // Longer than the debounce, so a watcher that missed nothing has acted.
    tokio::time::sleep(Duration::from_millis(300)).await;
}

fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("cedar.swp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn tiers(set: &TempSet) -> PathBuf {
    set.policies().join("tiers.cedar")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editor_writing_a_temp_file_and_renaming_it_over_the_original() {
    let set = TempSet::new();
    let live = start(set.sources(), events_only());
    assert_eq!(live.echo().await["decision"], "allow");
    let text = std::fs::read_to_string(tiers(&set)).unwrap() + NO_ECHO;
    write_atomically(&tiers(&set), &text);
    live.wait_for(&live.on_disk()).await;
    let got = live.echo().await;
    assert_eq!(got["decision"], "deny");
    assert_eq!(got["reasons"], json!(["no-echo"]));
    assert_eq!(got["policy_revision"], live.revision());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_then_write() {
    use std::io::Write as _;
    let set = TempSet::new();
    let live = start(set.sources(), events_only());
    let text = std::fs::read_to_string(tiers(&set)).unwrap() + NO_ECHO;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(tiers(&set))
        .unwrap();
    f.flush().unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    f.write_all(text.as_bytes()).unwrap();
    drop(f);
    live.wait_for(&live.on_disk()).await;
    assert_eq!(live.echo().await["decision"], "deny");
    assert!(live.store.last_error().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_write_keeps_the_last_good_set_and_reports_the_line_until_the_rest_arrives() {
    use std::io::Write as _;
    let set = TempSet::new();
    let live = start(set.sources(), events_only());
    let good = live.revision();
    let text = std::fs::read_to_string(tiers(&set)).unwrap() + NO_ECHO;
    let cut = text.len() - 20;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(tiers(&set))
        .unwrap();
    f.write_all(&text.as_bytes()[..cut]).unwrap();
    f.flush().unwrap();
    live.wait_for_error().await;
    assert_eq!(
        live.revision(),
        good,
        "a half-written file must not replace the last good set"
    );
    assert_eq!(live.echo().await["decision"], "allow");

    let (_, status) = send(&live.app, "GET", "/v1/policies", Some(ALICE), None).await;
    let problem = &status["last_reload_error"]["problems"][0];
    assert!(
        problem["file"].as_str().unwrap().ends_with("tiers.cedar"),
        "{status}"
    );
    assert!(problem["line"].as_u64().unwrap() > 1, "{status}");
    let (_, ready) = send(&live.app, "GET", "/readyz", None, None).await;
    assert_eq!(
        (ready["ready"].as_bool(), ready["degraded"].as_bool()),
        (Some(true), Some(true)),
        "{ready}"
    );
    assert!(
        ready["last_reload_error_at"]
            .as_str()
            .unwrap()
            .contains("tiers.cedar:"),
        "{ready}"
    );
    let metrics = metrics_text(&live.app).await;
    assert!(
        metrics.contains("toolgate_policy_reload_failing 1"),
        "{metrics}"
    );

    f.write_all(&text.as_bytes()[cut..]).unwrap();
    drop(f);
    live.wait_for(&live.on_disk()).await;
    assert_eq!(live.echo().await["decision"], "deny");
    assert!(live.store.last_error().is_none());
    assert!(
        metrics_text(&live.app)
            .await
            .contains("toolgate_policy_reload_failing 0")
    );
}

async fn metrics_text(app: &axum::Router) -> String {
    use axum::body::Body;
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let resp = app
        .clone()
        .oneshot(
            axum::http::Request::get("/metrics")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    String::from_utf8(
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_deleted_and_recreated() {
    let set = TempSet::new();
    let live = start(set.sources(), events_only());
    let original = live.revision();
    let text = std::fs::read_to_string(tiers(&set)).unwrap();
    std::fs::remove_file(tiers(&set)).unwrap();
    // Without tiers.cedar the set is valid but has no approval rule for writes.
    live.wait_for(&live.on_disk()).await;
    let got = authorize(
        &live.app,
        DEV,
        &json!({"tool": "write_file", "args": {"path": "a", "content": "x"}}),
    )
    .await;
    assert_eq!(got["decision"], "allow", "{got}");
    std::fs::write(tiers(&set), text).unwrap();
    live.wait_for(&original).await;
    let got = authorize(
        &live.app,
        DEV,
        &json!({"tool": "write_file", "args": {"path": "a", "content": "x"}}),
    )
    .await;
    assert_eq!(got["decision"], "pending_approval");
}

/// Lays out `dir` as Kubernetes mounts a ConfigMap: files are symlinks through `..data`, which
/// points at a timestamped directory.
fn configmap(dir: &Path, from: &Path, stamp: &str) {
    let data = dir.join(stamp);
    std::fs::create_dir_all(&data).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            continue; // policies/tests: fixtures, not policy inputs
        }
        std::fs::copy(e.path(), data.join(e.file_name())).unwrap();
        let link = dir.join(e.file_name());
        if !link.exists() {
            std::os::unix::fs::symlink(Path::new("..data").join(e.file_name()), link).unwrap();
        }
    }
}

fn swap_symlink(link: &Path, target: &str) {
    let tmp = link.with_file_name("..tmp_link");
    std::os::unix::fs::symlink(target, &tmp).unwrap();
    std::fs::rename(&tmp, link).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_data_symlink_swap() {
    let set = TempSet::new();
    let cm = set.dir.path().join("cm");
    configmap(&cm, &set.policies(), "..2026_01_01_00_00_00.1");
    std::os::unix::fs::symlink("..2026_01_01_00_00_00.1", cm.join("..data")).unwrap();
    let sources = Sources::new(cm.clone(), set.dir.path().join("schemas"));
    let live = start(sources, events_only());
    assert_eq!(live.echo().await["decision"], "allow");

    set.append("policies/tiers.cedar", NO_ECHO);
    configmap(&cm, &set.policies(), "..2026_01_01_00_05_00.2");
    swap_symlink(&cm.join("..data"), "..2026_01_01_00_05_00.2");
    std::fs::remove_dir_all(cm.join("..2026_01_01_00_00_00.1")).unwrap();
    live.wait_for(&live.on_disk()).await;
    assert_eq!(live.echo().await["decision"], "deny");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_retargeted_to_a_directory_not_watched_before() {
    let set = TempSet::new();
    let root = set.dir.path();
    std::fs::rename(set.policies(), root.join("v1")).unwrap();
    std::os::unix::fs::symlink("v1", root.join("policies")).unwrap();
    let live = start(set.sources(), events_only());
    assert_eq!(live.echo().await["decision"], "allow");

    // v2 is created after the watcher started: nothing watches it yet.
    copy_dir(&root.join("v1"), &root.join("v2"));
    let mut t = std::fs::read_to_string(root.join("v2/tiers.cedar")).unwrap();
    t.push_str(NO_ECHO);
    std::fs::write(root.join("v2/tiers.cedar"), t).unwrap();
    swap_symlink(&root.join("policies"), "v2");
    live.wait_for(&live.on_disk()).await;
    assert_eq!(live.echo().await["decision"], "deny");

    // And the new target is watched now: edit it in place.
    std::fs::remove_file(root.join("v2/tiers.cedar")).unwrap();
    live.wait_for(&live.on_disk()).await;
    assert_eq!(live.echo().await["decision"], "allow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_1000_writes_ends_on_the_final_content_and_no_request_sees_a_partial_set() {
    let set = TempSet::new();
    let live = Arc::new(start(set.sources(), events_only()));
    let base = std::fs::read_to_string(tiers(&set)).unwrap();
    let mut complete = std::collections::HashSet::from([live.revision()]);

    let stop = Arc::new(AtomicBool::new(false));
    let looper = {
        let (live, stop) = (live.clone(), stop.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let got = live.echo().await;
                seen.push(got["policy_revision"].as_str().unwrap().to_owned());
                tokio::task::yield_now().await;
            }
            seen
        })
    };
    for i in 0..1000 {
        let extra = if i % 2 == 0 { NO_ECHO } else { "" };
        write_atomically(&tiers(&set), &format!("{base}\n// version {i}\n{extra}"));
        complete.insert(live.on_disk());
    }
    let last = live.on_disk();
    live.wait_for(&last).await;
    settle().await;
    stop.store(true, Ordering::Relaxed);
    let seen = looper.await.unwrap();
    assert!(
        seen.len() > 10,
        "the request loop ran only {} times",
        seen.len()
    );
    for rev in &seen {
        assert!(
            complete.contains(rev),
            "a request was decided under {rev}, which is not a complete set"
        );
    }
    assert_eq!(live.revision(), last, "the final content must win");
    // Version 999 is odd: no `no-echo` policy.
    assert_eq!(live.echo().await["decision"], "allow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_syntax_error_a_schema_invalid_policy_and_an_empty_file_each_keep_the_last_good_set() {
    let cases = [
        (
            "tiers.cedar",
            "permit (principal, action, resource) when { true && };\n",
            "tiers.cedar",
        ),
        (
            "tiers.cedar",
            "permit (principal, action == Action::\"read_file\", resource) when { context.args.pth == \"x\" };\n",
            "tiers.cedar",
        ),
        ("new.cedar", "", "new.cedar"),
    ];
    for (file, text, names) in cases {
        let set = TempSet::new();
        let live = start(set.sources(), events_only());
        let good = live.revision();
        let path = set.policies().join(file);
        let mut content = if file == "tiers.cedar" {
            std::fs::read_to_string(&path).unwrap()
        } else {
            String::new()
        };
        content.push_str(text);
        std::fs::write(&path, content).unwrap();
        live.wait_for_error().await;
        assert_eq!(live.revision(), good, "{file}: {text}");
        assert_eq!(live.echo().await["policy_revision"], good);
        let err = live.store.last_error().unwrap();
        assert!(err.first().unwrap().file.ends_with(names), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_directory_deleted_and_recreated() {
    let set = TempSet::new();
    let live = start(set.sources(), events_only());
    let good = live.revision();
    let backup = set.dir.path().join("backup");
    std::fs::rename(set.policies(), &backup).unwrap();
    live.wait_for_error().await;
    assert_eq!(
        live.revision(),
        good,
        "a missing directory must not empty the policy set"
    );
    assert_eq!(live.echo().await["decision"], "allow");

    std::fs::create_dir(set.policies()).unwrap();
    for e in std::fs::read_dir(&backup).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            continue; // policies/tests: fixtures, not policy inputs
        }
        let mut text = std::fs::read_to_string(e.path()).unwrap();
        if e.file_name() == "tiers.cedar" {
            text.push_str(NO_ECHO);
        }
        std::fs::write(set.policies().join(e.file_name()), text).unwrap();
    }
    live.wait_for(&live.on_disk()).await;
    assert_eq!(live.echo().await["decision"], "deny");
    assert!(live.store.last_error().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_alone_notices_a_change() {
    let set = TempSet::new();
    let live = start(
        set.sources(),
        WatchOptions {
            events: false,
            debounce: Duration::from_millis(30),
            poll: Some(Duration::from_millis(100)),
        },
    );
    set.append("policies/tiers.cedar", NO_ECHO);
    live.wait_for(&live.on_disk()).await;
    assert_eq!(live.echo().await["decision"], "deny");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_content_is_not_parsed_again() {
    let set = TempSet::new();
    let live = start(set.sources(), events_only());
    let before = live.store.stats.applied.load(Ordering::Relaxed);
    // Touch a file without changing it.
    let text = std::fs::read_to_string(tiers(&set)).unwrap();
    write_atomically(&tiers(&set), &text);
    // The watcher's look at the touched file (10 s at most on a loaded machine).
    let start = std::time::Instant::now();
    while live.store.stats.unchanged.load(Ordering::Relaxed) == 0
        && start.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    settle().await;
    assert_eq!(live.store.stats.applied.load(Ordering::Relaxed), before);
    assert!(live.store.stats.unchanged.load(Ordering::Relaxed) >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_polling_only_looks_at_metadata() {
    let set = TempSet::new();
    let live = start(
        set.sources(),
        WatchOptions {
            events: false,
            debounce: Duration::from_millis(10),
            poll: Some(Duration::from_millis(20)),
        },
    );
    // Startup reads the files (the re-check, and possibly the first poll tick); then idle.
    settle().await;
    let after_startup = live.reads();
    tokio::time::sleep(Duration::from_millis(600)).await;
    // About 30 polls, none of which may read contents.
    assert_eq!(
        live.reads(),
        after_startup,
        "content reads while nothing changed"
    );
    set.append("policies/tiers.cedar", NO_ECHO);
    live.wait_for(&live.on_disk()).await;
}

/// Regression: reading the policy files produced open/close events that triggered the next
/// reload, forever (40 reloads in 10 s on an idle server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_the_files_does_not_trigger_another_reload() {
    let set = TempSet::new();
    let live = start(set.sources(), events_only());
    // One real change, so the watcher reads the files at least once.
    set.append("policies/tiers.cedar", NO_ECHO);
    live.wait_for(&live.on_disk()).await;
    settle().await;
    let before = live.reads();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        live.reads(),
        before,
        "the watcher kept reloading an unchanged set"
    );
}
