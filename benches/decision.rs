//! In-process decision cost over the shipped policies, next to one bare Cedar `is_authorized`
//! over the same policy set and entities (the floor toolgate's decision is measured against).
//!
//! Run: `cargo bench --bench decision`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use cedar_policy::{Context, EntityUid, Request, RestrictedExpression};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

use toolgate::authz::{Call, Correlation, Principal, PrincipalKind, decide};
use toolgate::policy::{Sources, load};

fn bench(c: &mut Criterion) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let sources = Sources {
        policies_dir: root.join("policies"),
        schemas_dir: root.join("schemas"),
    };
    let snap = load(&sources).unwrap().snapshot;
    let agent = Principal::new(PrincipalKind::Agent, "dev-agent");
    let call = Call {
        tool: "read_file".to_owned(),
        args: json!({"path": "src/main.rs", "max_bytes": 4096}),
        correlation: Correlation::default(),
    };
    let pending = Call {
        tool: "write_file".to_owned(),
        args: json!({"path": "src/lib.rs", "content": "x"}),
        correlation: Correlation::default(),
    };

    let mut g = c.benchmark_group("decision");
    g.bench_function("toolgate_allow_read_file", |b| {
        b.iter(|| decide(&snap, &agent, &call))
    });
    g.bench_function("toolgate_pending_write_file", |b| {
        b.iter(|| decide(&snap, &agent, &pending))
    });

    // The floor: the same question asked of Cedar directly, request prebuilt.
    let principal: EntityUid = r#"Agent::"dev-agent""#.parse().unwrap();
    let action: EntityUid = r#"Action::"read_file""#.parse().unwrap();
    let resource: EntityUid = r#"Tool::"read_file""#.parse().unwrap();
    let args = RestrictedExpression::new_record([
        (
            "path".to_owned(),
            RestrictedExpression::new_string("src/main.rs".to_owned()),
        ),
        ("max_bytes".to_owned(), RestrictedExpression::new_long(4096)),
    ])
    .unwrap();
    let approval = RestrictedExpression::new_record([(
        "granted".to_owned(),
        RestrictedExpression::new_bool(false),
    )])
    .unwrap();
    let ctx = Context::from_pairs([("args".to_owned(), args), ("approval".to_owned(), approval)])
        .unwrap();
    let request = Request::new(principal, action, resource, ctx, None).unwrap();
    g.bench_function("bare_cedar_is_authorized", |b| {
        b.iter(|| {
            snap.authorizer
                .is_authorized(&request, &snap.policies, &snap.entities)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
