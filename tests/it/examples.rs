//! Everything under `examples/` keeps working: every config loads with the policies it names
//! (`container.toml` in the image's layout, in `container`), and every ready-to-send request
//! gets the decision its file name promises.

use serde_json::Value;

use crate::helpers::*;
use toolgate::auth::Authenticator;
use toolgate::config::Config;
use toolgate::policy::load;

#[test]
fn every_example_config_loads() {
    let mut seen = 0;
    for entry in std::fs::read_dir(repo().join("examples")).unwrap() {
        let path = entry.unwrap().path();
        // The image's config names paths of the image's layout: `container` starts it there.
        if path.ends_with("container.toml") {
            continue;
        }
        if path.extension().is_some_and(|e| e == "toml") {
            let cfg =
                Config::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            load(&cfg.sources).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            Authenticator::from_config(&cfg.auth)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            seen += 1;
        }
    }
    assert!(seen >= 3);
}

/// `hold` is the default; the quickstart applies widening edits on purpose (its comment says
/// why), and says so explicitly.
#[test]
fn widening_changes_are_held_by_default_and_the_quickstart_applies_them_explicitly() {
    use toolgate::reload::Widening;
    assert_eq!(Config::defaults().widening, Widening::Hold);
    let quickstart = repo().join("examples/quickstart.toml");
    assert_eq!(
        Config::from_file(&quickstart).unwrap().widening,
        Widening::Apply
    );
    let text = std::fs::read_to_string(&quickstart).unwrap();
    assert!(text.contains("widening = \"apply\""), "{text}");
}

#[tokio::test]
async fn every_example_request_gets_the_decision_its_name_promises() {
    let app = app();
    let mut seen = 0;
    for entry in std::fs::read_dir(repo().join("examples/requests")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let want = ["allow", "deny", "pending"]
            .into_iter()
            .find(|w| name.ends_with(w))
            .unwrap_or_else(|| {
                panic!("{name}: example request names end in -allow, -deny or -pending")
            });
        let body: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let got = authorize(&app, DEV, &body).await;
        let want = if want == "pending" {
            "pending_approval"
        } else {
            want
        };
        assert_eq!(got["decision"], want, "{name}: {got}");
        seen += 1;
    }
    assert!(seen >= 8);
}
