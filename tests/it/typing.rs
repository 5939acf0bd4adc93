//! Arguments as real agent frameworks write their schemas reach Cedar typed: optional fields as
//! Pydantic emits them (`anyOf [X, null]`, `type: [X, "null"]`), JSON numbers (as `decimal`),
//! and local `$ref`s; a number Cedar's decimal cannot hold is refused, not rounded; the
//! official `cedar validate` accepts policies that read them; `toolgate schema` names what it
//! cannot type and why.

use serde_json::{Value, json};

use super::helpers::{TempSet, app_with, authorize, demo_auth, toolgate};

/// A payment tool whose schema is what Pydantic writes for
/// `pay(amount: float, payee: Payee, cc: list[str] | None = None, memo: str | None = None)`.
fn pay() -> Value {
    json!({
        "name": "pay",
        "description": "Pays a payee.",
        "inputSchema": {
            "type": "object",
            "$defs": {"Payee": {"type": "object", "additionalProperties": false,
                      "properties": {"iban": {"type": "string"}}, "required": ["iban"]}},
            "properties": {
                "amount": {"type": "number"},
                "payee": {"$ref": "#/$defs/Payee"},
                "cc": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}], "default": null},
                "memo": {"type": ["string", "null"]},
                "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]}
            },
            "required": ["amount", "payee"],
            "additionalProperties": false
        },
        "risk": "medium",
        "classification": "write"
    })
}

const POLICY: &str = r#"
@id("pay-over-100-needs-approval")
forbid (principal, action == Action::"pay", resource)
when { context.args.amount.greaterThan(decimal("100.00")) }
unless { context.approval.granted };

@id("pay-no-cc-outside")
forbid (principal, action == Action::"pay", resource)
when { context.args has cc && context.args.cc.contains("boss@evil.example") };

@id("pay-only-de")
forbid (principal, action == Action::"pay", resource)
when { !(context.args.payee.iban like "DE*") };
"#;

fn set() -> TempSet {
    let set = TempSet::new();
    set.write("schemas/tools/pay.json", &pay().to_string());
    set.regenerate_schema();
    set.write("policies/pay.cedar", POLICY);
    set
}

#[tokio::test]
async fn optional_numbers_and_refs_reach_policies() {
    let set = set();
    let snap = toolgate::policy::load(&set.sources())
        .expect("the set loads")
        .snapshot;
    let app = app_with(snap, demo_auth());
    let call = |args: Value| json!({"tool": "pay", "args": args});
    let de = json!({"iban": "DE89370400440532013000"});
    let d = authorize(
        &app,
        "demo-dev-token",
        &call(json!({"amount": 42.5, "payee": de})),
    )
    .await;
    assert_eq!(d["decision"], "allow", "{d}");
    // Nullable fields given as null are absent; given, policies read them.
    let d = authorize(
        &app,
        "demo-dev-token",
        &call(json!({"amount": 1, "payee": de, "cc": null, "memo": null})),
    )
    .await;
    assert_eq!(d["decision"], "allow", "{d}");
    let d = authorize(
        &app,
        "demo-dev-token",
        &call(json!({"amount": 1, "payee": de, "cc": ["me@corp.example", "boss@evil.example"]})),
    )
    .await;
    assert_eq!(d["decision"], "deny", "{d}");
    assert_eq!(d["reasons"], json!(["pay-no-cc-outside"]), "{d}");
    // The amount is capped: over 100 waits for a human.
    let d = authorize(
        &app,
        "demo-dev-token",
        &call(json!({"amount": 100.01, "payee": de})),
    )
    .await;
    assert_eq!(d["decision"], "pending_approval", "{d}");
    // A `$ref`'d object is typed.
    let fr = json!({"iban": "FR7630006000011234567890189"});
    let d = authorize(
        &app,
        "demo-dev-token",
        &call(json!({"amount": 5, "payee": fr})),
    )
    .await;
    assert_eq!(d["reasons"], json!(["pay-only-de"]), "{d}");
    // A number Cedar's decimal cannot hold is refused with why, never rounded.
    for amount in [json!(99.123_45), json!(1e300)] {
        let d = authorize(
            &app,
            "demo-dev-token",
            &call(json!({"amount": amount, "payee": de})),
        )
        .await;
        assert_eq!(d["decision"], "deny", "{d}");
        assert_eq!(d["stage"], "validation", "{d}");
        let msg = d["errors"][0]["message"].as_str().unwrap();
        assert!(msg.contains("decimal"), "{msg}");
    }
}

#[test]
fn the_schema_types_them_and_says_what_it_cannot() {
    let set = set();
    let schema =
        std::fs::read_to_string(set.dir.path().join("schemas/toolgate.cedarschema")).unwrap();
    for line in [
        "amount: decimal,",
        "cc?: Set<String>,",
        "memo?: String,",
        "iban: String,",
    ] {
        assert!(schema.contains(line), "`{line}` missing:\n{schema}");
    }
    // The union is not in `context.args`; `context.provenance` still traces its strings.
    assert_eq!(schema.matches("either").count(), 1, "{schema}");
    let provenance = &schema[schema.find("provenance: {").unwrap()..];
    assert!(provenance.contains("either?: String"), "{schema}");
    let out = toolgate()
        .args(["schema", "--schemas"])
        .arg(set.dir.path().join("schemas"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("argument `either` of `pay` is untyped for policies: it is a union (`anyOf`)"),
        "{err}"
    );
    // The official CLI accepts the policies that read them.
    if let Some(out) = set.cedar_validate("pay.cedar") {
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn reading_an_untyped_argument_says_it_is_untyped() {
    let set = set();
    set.write(
        "policies/either.cedar",
        "@id(\"reads-either\")\nforbid (principal, action == Action::\"pay\", resource) when { context.args.either == \"x\" };\n",
    );
    let out = super::helpers::on(&set, "validate").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("`either` is an argument of `pay`, but untyped for policies: it is a union"),
        "{err}"
    );
    assert!(!err.contains("did you mean"), "{err}");
}

#[test]
fn an_entity_error_names_the_entity_the_attribute_and_the_line() {
    let set = TempSet::new();
    let path = set.policies().join("entities.json");
    let mut entities: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for e in entities.as_array_mut().unwrap() {
        if e["uid"] == json!({"type": "Agent", "id": "dev-agent"}) {
            e["attrs"]["contacts"] = json!(["a@corp.example"]);
        }
    }
    std::fs::write(&path, serde_json::to_string_pretty(&entities).unwrap()).unwrap();
    let out = super::helpers::on(&set, "validate").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("attribute `contacts` on `Agent::\"dev-agent\"`"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains("entities.json:"), "no line: {line}");
}
