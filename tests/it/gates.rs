//! The gates through HTTP: each gate's default rules, JSON content with sensitive keys,
//! configured rules, audit records that never hold the content, and bad requests.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

async fn gate(app: &axum::Router, name: &str, content: Value) -> (StatusCode, Value) {
    let body = json!({ "content": content }).to_string();
    send(
        app,
        "POST",
        &format!("/v1/gates/{name}"),
        Some(DEV),
        Some(&body),
    )
    .await
}

#[tokio::test]
async fn every_gate_answers_with_its_default_rules() {
    let app = app();
    let text = format!("use {AWS} and mail ops@example.com");
    let expect = [
        // What the user says is reported, not masked: the model may need it for the task.
        ("input", "warn", text.clone()),
        (
            "context",
            "mask",
            "use <redacted:aws-access-key> and mail <redacted:email>".to_owned(),
        ),
        (
            "tool_call",
            "block",
            "use <redacted:aws-access-key> and mail <redacted:email>".to_owned(),
        ),
        (
            "output",
            "mask",
            "use <redacted:aws-access-key> and mail <redacted:email>".to_owned(),
        ),
    ];
    for (name, decision, content) in expect {
        let (s, v) = gate(&app, name, json!(text)).await;
        assert_eq!(s, StatusCode::OK, "{name}: {v}");
        assert_eq!(v["decision"], decision, "{name}: {v}");
        assert_eq!(v["content"], content, "{name}: {v}");
        assert_eq!(v["violations"][0]["kind"], "aws-access-key");
        assert_eq!(v["violations"][0]["span"], json!([4, 24]));
    }
    let (s, v) = gate(&app, "output", json!("nothing to see here")).await;
    assert_eq!((s, v["decision"].as_str()), (StatusCode::OK, Some("allow")));
    assert_eq!(v["violations"], json!([]));
}

#[tokio::test]
async fn json_content_keeps_its_structure_and_masks_sensitive_keys() {
    let app = app();
    let content = json!({
        "user": {"name": "Ann", "api_key": "anything at all", "phone": "+1 415-555-0142"},
        "rows": [{"card": "4111 1111 1111 1111"}, {"note": "fine"}],
        "n": 3
    });
    let (s, v) = gate(&app, "output", content).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["decision"], "mask");
    assert_eq!(
        v["content"],
        json!({
            "user": {"name": "Ann", "api_key": "<redacted:sensitive-key>", "phone": "<redacted:phone>"},
            "rows": [{"card": "<redacted:credit-card>"}, {"note": "fine"}],
            "n": 3
        })
    );
    let paths: Vec<&str> = v["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/user/api_key", "/user/phone", "/rows/0/card"]);
}

#[tokio::test]
async fn findings_are_audited_without_the_content_and_bad_requests_are_refused() {
    let state = shipped_state();
    let app = toolgate::api::router(state.clone());
    let (_, v) = gate(&app, "tool_call", json!(format!("key={AWS}"))).await;
    assert_eq!(v["decision"], "block");
    let (_, v) = gate(&app, "output", json!("plain")).await;
    assert_eq!(v["decision"], "allow");
    // A verdict is recorded without holding up its answer: it lands within milliseconds.
    let mut recorded = recorded_at(&state.audit, "tool_call");
    for _ in 0..200 {
        if !recorded.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        recorded = recorded_at(&state.audit, "tool_call");
    }
    assert_eq!(recorded.len(), 1);
    let entry = &recorded[0].entry;
    assert_eq!(entry.decision, "block");
    assert_eq!(entry.reasons, ["block:aws-access-key"]);
    let stored = serde_json::to_string(&recorded[0]).unwrap();
    assert!(!stored.contains(AWS), "{stored}");
    assert!(recorded_at(&state.audit, "output").is_empty());
    let (_, m) = send_text(&app, "/metrics").await;
    assert!(
        m.contains("toolgate_gate_decisions_total{gate=\"tool_call\",decision=\"block\"} 1"),
        "{m}"
    );

    // Unknown gates, bad bodies, no credential.
    for name in ["tools", "streams", "Input"] {
        let (s, v) = gate(&app, name, json!("x")).await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::NOT_FOUND, Some("unknown_gate"))
        );
    }
    let (s, v) = send(
        &app,
        "POST",
        "/v1/gates/input",
        Some(DEV),
        Some(r#"{"content": "x", "extra": 1}"#),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, _) = send(
        &app,
        "POST",
        "/v1/gates/input",
        None,
        Some(r#"{"content": "x"}"#),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}

#[test]
fn gate_rules_come_from_the_config_and_bad_names_stop_serve() {
    let set = TempSet::new();
    let server = crate::process::start_with(
        &set,
        "[gates.output]\nblock = [\"email\"]\nmask = []\nwarn = [\"secret\"]\n",
    );
    let body = json!({"content": format!("{AWS} a@b.io")});
    let v = crate::process::request(
        server.port,
        "POST",
        "/v1/gates/output",
        Some(DEV),
        Some(&body),
    )
    .unwrap();
    assert_eq!(v["decision"], "block", "{v}");
    assert_eq!(v["content"], format!("{AWS} <redacted:email>"));
    drop(server);

    let err = crate::process::serve_refuses(&set, "[gates.tool_call]\nblock = [\"secrets\"]\n");
    assert!(err.contains("`gates.tool_call` names `secrets`"), "{err}");
}

/// A member number that passes Luhn: `body`, then its check digit.
fn luhn_number(body: &str) -> String {
    crate::corpus::luhn_complete(&mut crate::corpus::Rng(1), body, body.len() + 1)
}

const CUSTOM: &str = r#"
[redaction]
sensitive_keys = ["member_number"]
sensitive_key_suffixes = ["_pin_code"]
preview_bytes = 2048
preview_string_chars = 1000

[[redaction.detectors]]
name = "acme-api-key"
regex = '\bacme_(?:live|test)_([A-Za-z0-9]{24})\b'
group = 1
keywords = ["key"]
placeholders = ["xxxx"]
min_entropy = 3.0

[[redaction.detectors]]
name = "acme-member"
category = "pii"
regex = '\bM-([0-9]{10})\b'
group = 1
validator = "luhn"

[gates.output]
block = ["acme-api-key"]
"#;

#[test]
fn custom_detectors_keys_and_preview_size_come_from_the_config() {
    let set = TempSet::new();
    let server = crate::process::start_with(&set, CUSTOM);
    let good = luhn_number("453957876");
    let mut bad = good.clone();
    let last = bad.pop().unwrap().to_digit(10).unwrap();
    bad.push(char::from_digit((last + 1) % 10, 10).unwrap());
    let key = "Zq8Fh3kLm9Pq2Rs7Tv4Wx1Yb";
    let text = format!(
        "acme key acme_live_{key}, docs acme_test_xxxxxxxxxxxxxxxxxxxxxxxx, member M-{good}, typo M-{bad}, again {key}"
    );
    let v = crate::process::request(
        server.port,
        "POST",
        "/v1/gates/output",
        Some(DEV),
        Some(&json!({ "content": text })),
    )
    .unwrap();
    assert_eq!(v["decision"], "block", "{v}");
    assert_eq!(
        v["content"],
        format!(
            "acme key acme_live_<redacted:acme-api-key>, docs acme_test_xxxxxxxxxxxxxxxxxxxxxxxx, member M-<redacted:acme-member>, typo M-{bad}, again <redacted:acme-api-key>"
        ),
        "{v}"
    );
    // Without the keyword on its line the key is not this detector's (it may still be
    // another's: here the entropy backstop has it).
    let v = crate::process::request(
        server.port,
        "POST",
        "/v1/gates/output",
        Some(DEV),
        Some(&json!({ "content": format!("token acme_live_{key}") })),
    )
    .unwrap();
    assert!(
        v["violations"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["kind"] != "acme-api-key"),
        "{v}"
    );
    // Configured JSON keys are masked whole, any spelling.
    let doc = json!({"MemberNumber": 1234, "card_pin_code": "9911", "name": "Ann"});
    let v = crate::process::request(
        server.port,
        "POST",
        "/v1/gates/context",
        Some(DEV),
        Some(&json!({ "content": doc })),
    )
    .unwrap();
    assert_eq!(
        v["content"],
        json!({"MemberNumber": "<redacted:sensitive-key>", "card_pin_code": "<redacted:sensitive-key>", "name": "Ann"}),
        "{v}"
    );
    // The audit preview keeps up to `preview_bytes` of the redacted arguments.
    let long = "lorem ipsum ".repeat(70);
    let v = crate::process::request(
        server.port,
        "POST",
        "/v1/authorize",
        Some(DEV),
        Some(&json!({"tool": "search_files", "args": {"regex": long}})),
    )
    .unwrap();
    let id = v["decision_id"].as_str().unwrap().to_owned();
    let page = crate::process::request(server.port, "GET", "/v1/audit?limit=50", Some(ALICE), None)
        .unwrap();
    let rec = page["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["entry"]["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{page}"));
    let preview = rec["entry"]["args_preview"].as_str().unwrap();
    assert!(
        preview.len() > 800 && preview.len() <= 2048 + 3,
        "{preview}"
    );
    drop(server);

    // Bad detectors stop serve with what to fix.
    for (extra, want) in [
        (
            "[[redaction.detectors]]\nname = \"email\"\nregex = 'x+'\n",
            "name `email` is already a category, a built-in detector",
        ),
        (
            "[[redaction.detectors]]\nname = \"acme\"\nregex = 'acme_('\n",
            "(`acme`): the regex does not compile",
        ),
        (
            "[[redaction.detectors]]\nname = \"acme\"\nregex = 'acme_x'\ngroup = 1\n",
            "group 1 does not exist",
        ),
        (
            "[[redaction.detectors]]\nname = \"acme\"\nregex = 'a*'\n",
            "matches the empty string",
        ),
        (
            "[[redaction.detectors]]\nname = \"acme\"\nregex = 'acme'\nvalidator = \"crc\"\n",
            "validator `crc` is not one of luhn, iban, us-ssn",
        ),
        (
            "[[redaction.detectors]]\nname = \"acme\"\nregex = 'acme'\nnope = 1\n",
            "unknown field `nope`",
        ),
        ("[redaction]\npreview_bytes = 10\n", "must be 64 to 65536"),
        ("[redaction]\nsensitive_keys = [\"__\"]\n", "is empty once"),
    ] {
        let err = crate::process::serve_refuses(&set, extra);
        assert!(err.contains(want), "{extra}: {err}");
    }
}

/// What the user gives on purpose reaches the model by default (the input gate reports it);
/// a deployment chooses what the model sees (`[gates.input] mask`) and what provenance learns
/// (`[provenance] input`), through `serve`'s config.
#[test]
fn the_input_gate_records_and_masks_only_where_the_deployment_asks() {
    let set = TempSet::new();
    let said = "set my new password to Tr0ub4dor&3-horse-battery";
    let explain = |port: u16, conv: &str| {
        let body = json!({"agent": "dev-agent", "tool": "write_file",
                          "args": {"path": "notes.txt", "content": "Tr0ub4dor&3-horse-battery"},
                          "context": {"conv_id": conv}});
        let e = crate::process::request(
            port,
            "POST",
            "/v1/explain",
            Some("demo-grace-token"),
            Some(&body),
        )
        .unwrap();
        e["inputs"]["provenance"]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    // The shipped rules: reported, not masked; provenance learns it as said.
    let server = crate::process::start_with(&set, "");
    let v = crate::process::request(
        server.port,
        "POST",
        "/v1/gates/input",
        Some(DEV),
        Some(&json!({"content": said, "conv_id": "p1"})),
    )
    .unwrap();
    assert_eq!(v["decision"], "warn", "{v}");
    assert_eq!(v["content"], said, "{v}");
    assert_eq!(explain(server.port, "p1"), "user");
    drop(server);
    // Masked from the model; provenance still learns it as said by default, and as the
    // gate answered with `input = "as_screened"`.
    for (extra, learnt) in [
        ("[gates.input]\nmask = [\"secret\"]\n", "user"),
        (
            "[gates.input]\nmask = [\"secret\"]\n[provenance]\ninput = \"as_screened\"\n",
            "none",
        ),
    ] {
        let server = crate::process::start_with(&set, extra);
        let v = crate::process::request(
            server.port,
            "POST",
            "/v1/gates/input",
            Some(DEV),
            Some(&json!({"content": said, "conv_id": "p2"})),
        )
        .unwrap();
        assert_eq!(v["decision"], "mask", "{v}");
        assert!(!v["content"].as_str().unwrap().contains("Tr0ub4dor"), "{v}");
        assert_eq!(explain(server.port, "p2"), learnt, "{extra}");
        drop(server);
    }
    let err = crate::process::serve_refuses(&set, "[provenance]\ninput = \"masked\"\n");
    assert!(err.contains("`provenance.input` is `masked`"), "{err}");
}

/// The check an outside scorer makes on a masked `out`: neither `value` nor any 8-character
/// piece of it (the whole value, when shorter) is left.
fn no_piece_left(text: &str, value: &str, out: &str) {
    let chars: Vec<char> = value.chars().collect();
    for piece in chars.windows(8.min(chars.len())) {
        let piece: String = piece.iter().collect();
        assert!(!out.contains(&piece), "{text}: {piece:?} left in {out:?}");
    }
}

/// Through the output gate: `text` is masked, and neither `value` nor any 8-character piece
/// of it is left.
async fn masked_whole(app: &axum::Router, text: &str, value: &str) {
    let (s, v) = gate(app, "output", json!(text)).await;
    assert_eq!(s, StatusCode::OK, "{text}: {v}");
    let out = v["content"].as_str().unwrap();
    assert!(out.contains("<redacted:"), "{text}: {out}");
    no_piece_left(text, value, out);
}

/// Through the output gate: nothing in `text` is a finding.
async fn left_alone(app: &axum::Router, text: &str) {
    let (_, v) = gate(app, "output", json!(text)).await;
    assert_eq!(v["violations"], json!([]), "{text}: {v}");
}

/// Personal data by the forms countries and issuers use, through the output gate: SSNs
/// without dashes after a label, E.164 phone numbers, IBANs in dashed groups, card brands by
/// issuer range with Luhn. A number inside an invalid IBAN is neither a phone nor a card, and
/// an empty `KEY=` does not take the next line's name as its value. Wherever something is
/// masked, neither the value nor any 8-character piece of it is left.
#[tokio::test]
async fn personal_data_in_each_countrys_form_is_masked_whole() {
    let app = app();
    let maestro = luhn_number("675964982643845");
    let diners = luhn_number("3056930902590");
    let mir = luhn_number("220012345678901");
    let jcb = luhn_number("353011133330000");
    let unionpay = luhn_number("620000000000000");
    let found: Vec<(String, &str, String)> = vec![
        (
            "SSN: 536221234 on file".into(),
            "us-ssn",
            "536221234".into(),
        ),
        (
            "social security number 536 22 1234".into(),
            "us-ssn",
            "536 22 1234".into(),
        ),
        (
            "call +14155552671 now".into(),
            "phone",
            "+14155552671".into(),
        ),
        (
            "tel +33 1 42 68 53 00".into(),
            "phone",
            "+33 1 42 68 53 00".into(),
        ),
        (
            "office +81-3-1234-5678.".into(),
            "phone",
            "+81-3-1234-5678".into(),
        ),
        (
            "IBAN GB82-WEST-1234-5698-7654-32 please".into(),
            "iban",
            "GB82-WEST-1234-5698-7654-32".into(),
        ),
        (format!("maestro {maestro}"), "credit-card", maestro.clone()),
        (format!("diners {diners}"), "credit-card", diners.clone()),
        (format!("mir {mir}"), "credit-card", mir.clone()),
        (format!("jcb {jcb}"), "credit-card", jcb.clone()),
        (
            format!("unionpay {unionpay}"),
            "credit-card",
            unionpay.clone(),
        ),
    ];
    for (text, kind, value) in &found {
        let (s, v) = gate(&app, "output", json!(text)).await;
        assert_eq!(s, StatusCode::OK, "{text}: {v}");
        let kinds: Vec<&str> = v["violations"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["kind"].as_str())
            .collect();
        assert_eq!(kinds, [*kind], "{text}: {v}");
        let out = v["content"].as_str().unwrap();
        no_piece_left(text, value, out);
    }
    let clean = [
        "order id 536221234 shipped",
        "count +12345678 items",
        // Bad check digits: an account number all the same, not a phone or a card.
        "IBAN DE89 3704 0044 0532 0130 01",
        "IBAN GB82-WEST-1234-5698-7654-33",
        "API_KEY=\nDATABASE_URL_FOR_PRODUCTION_SERVICE=x",
    ];
    for text in clean {
        let (s, v) = gate(&app, "output", json!(text)).await;
        assert_eq!(s, StatusCode::OK, "{text}: {v}");
        assert_eq!(v["violations"], json!([]), "{text}: {v}");
        assert_eq!(v["content"], text);
    }
}

/// Values after a weak word at the end of any name (`StorageKey=`, `myServiceToken:`), in
/// credential stores (`<add key="…Key" value="…"/>`), lowercase and hex included, through the
/// output gate: masked whole, no 8-character piece left. A found key's copy inside a longer
/// word (a commit id that starts with it) is left alone, and plain words after such names are
/// not secrets.
#[tokio::test]
async fn weak_labels_at_the_end_of_names_and_in_credential_stores() {
    let app = app();
    let hex = "9f86d081884c7d659a2feaa0c55ad015";
    let lower = "k3j4h5g6f7d8s9a0q1w2e3r4t5y6u7i8";
    let found = [
        (
            format!("StorageKey={hex}a3bf4f1b"),
            format!("{hex}a3bf4f1b"),
        ),
        (format!("myServiceToken: {lower}"), lower.to_owned()),
        (format!("db.auth.key = {hex}"), hex.to_owned()),
        (
            format!("<add key=\"StorageKey\" value=\"{hex}a3bf4f1b\"/>"),
            format!("{hex}a3bf4f1b"),
        ),
        (
            format!("<setting name=\"AuthKey\">{lower}</setting>"),
            lower.to_owned(),
        ),
    ];
    for (text, value) in &found {
        masked_whole(&app, text, value).await;
    }
    let text = format!("key={hex} user=bob\ncommit {hex}a3bf4f1b\nagain {hex}\n");
    let (_, v) = gate(&app, "output", json!(text)).await;
    assert_eq!(
        v["content"],
        format!(
            "key=<redacted:labelled-token> user=bob\ncommit {hex}a3bf4f1b\n\
             again <redacted:labelled-token>\n"
        ),
        "{v}"
    );
    for text in [
        "monkey: bananas are yellow fruit",
        "primary_key: user_account_identifier_column",
        "<add key=\"CacheKey\" value=\"users_by_region_and_country\"/>",
        // Placeholders people write in samples and tests.
        "password: 'fake-password'",
        "token: 'fake_token_for_testing_only'",
        "PASSWORD=changeit",
        "db_password = 'sample-password'",
        // A name made of words, however often its case switches, is not random.
        "class MyVeryLongIdentifierName2Version3 extends Base",
    ] {
        left_alone(&app, text).await;
    }
}

/// A labelled value holding punctuation its pattern stops at (a quote of the other kind, an
/// escaped quote, `;`, brackets) is masked to its end, through the output gate: no
/// 8-character piece of it is left. Punctuation that ends a value stays.
#[tokio::test]
async fn labelled_values_with_code_punctuation_are_masked_to_their_end() {
    let app = app();
    let cases = [
        ("password='Zx9\"kL2mQ7pR4vB8'", "Zx9\"kL2mQ7pR4vB8"),
        ("api_key: \"Zx9'kL2mQ7pR4vB8\"", "Zx9'kL2mQ7pR4vB8"),
        (
            "\"password\": \"Zx9\\\"kL2mQ7pR4vB8\"",
            "Zx9\\\"kL2mQ7pR4vB8",
        ),
        ("password=Zx9kL;2mQ7pR4vB8 next", "Zx9kL;2mQ7pR4vB8"),
        ("password=Zx9kL(2m)Q7pR4vB8", "Zx9kL(2m)Q7pR4vB8"),
    ];
    for (text, value) in cases {
        let (s, v) = gate(&app, "output", json!(text)).await;
        assert_eq!(s, StatusCode::OK, "{text}: {v}");
        let out = v["content"].as_str().unwrap();
        no_piece_left(text, value, out);
    }
    for (text, masked) in [
        (
            "password=abc12345;",
            "password=<redacted:password-assignment>;",
        ),
        (
            "connect(pwd=abc12345)",
            "connect(pwd=<redacted:short-label-password>)",
        ),
        (
            "password: abc12345, user: bob",
            "password: <redacted:password-assignment>, user: bob",
        ),
    ] {
        let (_, v) = gate(&app, "output", json!(text)).await;
        assert_eq!(v["content"], masked, "{v}");
    }
}

/// Classes the public-data comparison (`benches/secrets/public.py`) found missing, through the
/// output gate: webhook URLs of any path shape, Bundler's per-host credentials, Doppler, Adobe,
/// 42 and Twitter bearer tokens. Each value is masked with no 8-character piece left. And
/// what framework code holds that is not a credential: names that say what they carry
/// (`raw_password`), plain words in a positional pair, constants compared with, format
/// fields, dotted names and short phrases.
#[tokio::test]
async fn webhooks_gem_credentials_and_named_vendor_tokens_and_not_code_names() {
    let app = app();
    let found = [
        (
            "notify: https://hooks.slack.com/services/q6si0pcrqpqs52abyv4koxcyxjlpdwfc3l1xtz5vw4ds",
            "q6si0pcrqpqs52abyv4koxcyxjlpdwfc3l1xtz5vw4ds",
        ),
        (
            "url = \"https://contoso.webhook.office.com/webhookb2/7f3c1a2e-9b4d-4e6f-8a1b-2c3d4e5f6a7b@0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d/IncomingWebhook/9d8c7b6a5f4e3d2c1b0a\"",
            "7f3c1a2e-9b4d-4e6f-8a1b-2c3d4e5f6a7b@0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d/IncomingWebhook/9d8c7b6a5f4e3d2c1b0a",
        ),
        (
            "export BUNDLE_ENTERPRISE__CONTRIBSYS__COM=k7q2w9e4:Xr5t8y1u3i6o",
            "k7q2w9e4:Xr5t8y1u3i6o",
        ),
        (
            "DOPPLER_TOKEN: dp.st.prd.h2rp0rmfu9kkd1ntm8hhx2npk4o3j6p47evccno322z",
            "h2rp0rmfu9kkd1ntm8hhx2npk4o3j6p47evccno322z",
        ),
        (
            "doppler = dp.pt.h2rp0rmfu9kkd1ntm8hhx2npk4o3j6p47evccno322z",
            "dp.pt.h2rp0rmfu9kkd1ntm8hhx2npk4o3j6p47evccno322z",
        ),
        (
            "adobeClient := \"p8e-103d720af511b844f3a5964f0473fe26\"",
            "p8e-103d720af511b844f3a5964f0473fe26",
        ),
        (
            "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",
            "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",
        ),
        (
            "Authorization: Bearer AAAAAAAAAAAAAAAAAAAAAMLheAAAAAAA0%2BuSeid%2BULvsea4JtiGRiSDSJSI%3DEUifiRBkKG5E2XzMDjRfl76ZC9Ub0wnz4XsNiRVBChTYbJcE3F",
            "MLheAAAAAAA0%2BuSeid%2BULvsea4JtiGRiSDSJSI%3DEUifiRBkKG5E2XzMDjRfl76ZC9Ub0wnz4XsNiRVBChTYbJcE3F",
        ),
    ];
    for (text, value) in found {
        masked_whole(&app, text, value).await;
    }
    for text in [
        "https://hooks.slack.com/services/Txxxxxxxx/Bxxxxxxxx/xxxxxxxxxxxxxxxxxxxxxxxx",
        "        self._password = raw_password",
        "    auth_password=None,",
        "INTERNAL_RESET_SESSION_TOKEN = \"_password_reset_token\"",
        "settings_dict = {**settings_dict, \"USER\": user, \"PASSWORD\": password}",
        "Permission = apps.get_model(\"auth\", \"Permission\")",
        "@sensitive_post_parameters('password', 'credit_card')",
        "__slots__ = (\"token\", \"filters\", \"var\", \"is_var\")",
        "if csrf_token == \"NOTPROVIDED\":",
        "IDENTIFIED BY \"%(password)s\"",
        "version=argon2.low_level.ARGON2_VERSION,",
        "                token = \"is not\"",
        "def admin_login(self, username, password, login_url=\"/admin/\"):",
    ] {
        left_alone(&app, text).await;
    }
}

/// Characters drawn from `alphabet` by a fixed xorshift sequence: random-looking, the same
/// on every run.
fn drawn(seed: u64, n: usize, alphabet: &[u8]) -> String {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(alphabet[(x % alphabet.len() as u64) as usize])
        })
        .collect()
}

/// Vendor tokens known by their prefix are found bare, with no label near them, in either
/// case where generators write them so, and masked whole through the output gate.
#[tokio::test]
async fn prefixed_vendor_tokens_are_found_without_a_label() {
    let app = app();
    let alnum = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let lower = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let hex = b"0123456789abcdef";
    let uuid = |seed| {
        format!(
            "{}-{}-{}-{}-{}",
            drawn(seed, 8, hex),
            drawn(seed + 1, 4, hex),
            drawn(seed + 2, 4, hex),
            drawn(seed + 3, 4, hex),
            drawn(seed + 4, 12, hex)
        )
    };
    let tokens = [
        ("vault-token", format!("hvs.{}", drawn(1, 90, alnum))),
        ("grafana-token", format!("glc_{}", drawn(2, 32, alnum))),
        (
            "grafana-token",
            format!("glsa_{}_{}", drawn(3, 32, alnum), drawn(4, 8, hex)),
        ),
        (
            "planetscale-token",
            format!("pscale_pw_{}", drawn(5, 43, alnum)),
        ),
        ("linear-key", format!("lin_api_{}", drawn(6, 40, alnum))),
        ("prefect-token", format!("pnu_{}", drawn(7, 36, alnum))),
        (
            "brevo-key",
            format!("xkeysib-{}-{}", drawn(8, 64, hex), drawn(9, 16, alnum)),
        ),
        ("typeform-token", format!("tfp_{}", drawn(10, 59, alnum))),
        ("frameio-token", format!("fio-u-{}", drawn(11, 64, alnum))),
        ("plaid-token", format!("access-production-{}", uuid(12))),
        (
            "google-oauth-token",
            format!("ya29.{}", drawn(13, 120, alnum)),
        ),
        ("square-token", format!("sq0csp-{}", drawn(14, 43, alnum))),
        (
            "atlassian-token",
            format!("ATATT3{}", drawn(15, 186, alnum)),
        ),
        ("jfrog-key", format!("AKCp{}", drawn(16, 69, alnum))),
        ("clojars-token", format!("CLOJARS_{}", drawn(17, 60, lower))),
        ("groq-key", format!("gsk_{}", drawn(18, 52, alnum))),
        ("xai-key", format!("xai-{}", drawn(19, 80, alnum))),
        ("replicate-token", format!("r8_{}", drawn(20, 37, alnum))),
        ("perplexity-key", format!("pplx-{}", drawn(21, 48, alnum))),
        ("nvidia-key", format!("nvapi-{}", drawn(22, 64, alnum))),
        ("hubspot-token", format!("pat-na1-{}", uuid(23))),
        (
            "onepassword-token",
            format!("ops_eyJ{}", drawn(24, 300, alnum)),
        ),
        (
            "dynatrace-token",
            format!("dt0c01.{}.{}", drawn(25, 24, lower), drawn(26, 64, lower)),
        ),
        (
            "github-fine-grained-pat",
            format!("github_pat_{}", drawn(27, 82, alnum)),
        ),
        ("newrelic-key", format!("NRAK-{}", drawn(28, 27, lower))),
    ];
    for (kind, token) in &tokens {
        let text = format!("the job printed {token} and went on");
        let (s, v) = gate(&app, "output", json!(text)).await;
        assert_eq!(s, StatusCode::OK, "{text}: {v}");
        let out = v["content"].as_str().unwrap();
        assert_eq!(
            out,
            format!("the job printed <redacted:{kind}> and went on"),
            "{kind}: {v}"
        );
    }
}

/// Forms the class corpus and the peer comparison missed, through the output gate: a value
/// with a `;` or `,` after its first characters, a password that begins with `!` outside
/// YAML, typed declarations with Rust references, setters called with a literal,
/// `credentials: user password`, `pw for the vpn is …`, and private keys' DER bodies
/// without PEM armour. Public keys and certificates in DER are not secrets.
#[tokio::test]
async fn punctuated_values_setters_typed_references_and_bare_der_keys() {
    let app = app();
    let alnum = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/";
    let rsa = format!("MIIEpAIBAAKCAQEA{}", drawn(31, 1500, alnum));
    let pkcs8 = format!(
        "MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgw{}",
        drawn(32, 1500, alnum)
    );
    let ec = format!("MHcCAQEEI{}", drawn(33, 150, alnum));
    let found = [
        (
            "password: Zx9;kL2mQ7vB4n".to_owned(),
            "Zx9;kL2mQ7vB4n".to_owned(),
        ),
        (
            "DB_PASSWORD=!Qa2;wS3eD4r".to_owned(),
            "!Qa2;wS3eD4r".to_owned(),
        ),
        (
            "{ \"user\": \"sa\", \"password\": \"!ZT~*@qwB%5#!=JRC_hd\" }".to_owned(),
            "!ZT~*@qwB%5#!=JRC_hd".to_owned(),
        ),
        (
            "const DB_PASS: &str = \"tornado1970\";".to_owned(),
            "tornado1970".to_owned(),
        ),
        (
            "let api_key: &'static str = \"LanternPretzel65$\";".to_owned(),
            "LanternPretzel65$".to_owned(),
        ),
        (
            "conn.set_password(\"PickleKoala74#\")".to_owned(),
            "PickleKoala74#".to_owned(),
        ),
        (
            "client.setApiKey('Sg2Ns4Q9XHh7')".to_owned(),
            "Sg2Ns4Q9XHh7".to_owned(),
        ),
        (
            "credentials: jdoe Wizard2023$".to_owned(),
            "Wizard2023$".to_owned(),
        ),
        (
            "pw for the vpn is Pretzel2000!".to_owned(),
            "Pretzel2000!".to_owned(),
        ),
        ("the password is bkxzmcqm".to_owned(), "bkxzmcqm".to_owned()),
        (format!("RSA_KEY_B64={rsa}"), rsa.clone()),
        (format!("\"private_key\": \"{pkcs8}\""), pkcs8.clone()),
        (format!("EC_KEY={ec}"), ec.clone()),
    ];
    for (text, value) in &found {
        masked_whole(&app, text, value).await;
    }
    for text in [
        format!(
            "PUBLIC_KEY=MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA{}",
            drawn(34, 300, alnum)
        ),
        format!(
            "cert: MIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBa{}",
            drawn(35, 300, alnum)
        ),
        format!(
            "ec_public: MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE{}",
            drawn(36, 88, alnum)
        ),
        "secret: !vault |".to_owned(),
        "password: yes, it works".to_owned(),
        "the password is changed every quarter".to_owned(),
        "credentials: see the vault".to_owned(),
        "user.set_password(raw_password)".to_owned(),
    ] {
        left_alone(&app, &text).await;
    }
}

/// Command lines whose password flag is not named for one, and a Wi-Fi key after its SSID,
/// through the output gate; a flag's documented type and a secret store's path are not
/// values.
#[tokio::test]
async fn tool_specific_password_flags_and_wifi_keys() {
    let app = app();
    let found = [
        (
            "redis-cli -h cache.internal -a usj5p5yb9esk INFO replication",
            "usj5p5yb9esk",
        ),
        (
            "smbclient //db01.internal/share -U dev01%orchid26f",
            "orchid26f",
        ),
        ("net user webapp ramen.1966 /add", "ramen.1966"),
        (
            "restic init --password-command \"echo CloverShadow51#\"",
            "CloverShadow51#",
        ),
        ("SSID: Office-5G  Key: EagleWillow45?", "EagleWillow45?"),
        ("SSID: WeWork-Fl3  Key: dragon1994", "dragon1994"),
    ];
    for (text, value) in found {
        masked_whole(&app, text, value).await;
    }
    for text in [
        "net user webapp /delete",
        "  --api-key string   API key (env: ACME_API_KEY)",
        "vault kv get -field=password secret/prod/db",
        "SSID: Guest  password: provided at reception",
    ] {
        left_alone(&app, text).await;
    }
}
