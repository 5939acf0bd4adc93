//! Slicing never changes a decision: for random policy sets and calls, evaluating only the
//! action's slice gives Cedar's decision over the whole set, with the same determining
//! policies and the same erroring policies.

use std::collections::BTreeSet;

use cedar_policy::{
    Authorizer, Context, EntityUid, PolicySet, Request, Response, RestrictedExpression,
};
use proptest::prelude::*;

use toolgate::policy::Slices;

use crate::helpers::{SHIPPED_TOOLS, shared_snapshot};

/// The shipped tools' actions, and `approve`.
fn actions() -> Vec<&'static str> {
    SHIPPED_TOOLS.iter().copied().chain(["approve"]).collect()
}
const GROUPS: [&str; 3] = ["read", "write", "destructive"];
const PRINCIPALS: [&str; 6] = [
    r#"Agent::"dev-agent""#,
    r#"Agent::"sre-agent""#,
    r#"Agent::"release-agent""#,
    r#"Agent::"po-agent""#,
    r#"Human::"alice""#,
    r#"Agent::"stranger""#,
];

fn policy() -> impl Strategy<Value = String> {
    let effect = prop::sample::select(vec!["permit", "forbid"]);
    let principal = prop::sample::select(vec![
        "principal".to_owned(),
        r#"principal in Role::"developer""#.to_owned(),
        r#"principal in Role::"sre""#.to_owned(),
        r#"principal == Agent::"dev-agent""#.to_owned(),
    ]);
    let action = prop_oneof![
        Just("action".to_owned()),
        prop::sample::select(actions()).prop_map(|a| format!(r#"action == Action::"{a}""#)),
        prop::sample::select(GROUPS.to_vec()).prop_map(|g| format!(r#"action in Action::"{g}""#)),
        (
            prop::sample::select(GROUPS.to_vec()),
            prop::sample::select(actions())
        )
            .prop_map(|(g, a)| format!(r#"action in [Action::"{g}", Action::"{a}"]"#)),
    ];
    let condition = prop::sample::select(vec![
        "true",
        r#"resource.risk == "high""#,
        r#"resource.classification == "read""#,
        "context.approval.granted",
        r#"context has args && context.args has path && context.args.path like "*.env*""#,
        r#"resource.risk == "low" && 9223372036854775807 + 1 > 0"#,
    ]);
    (effect, principal, action, condition)
        .prop_map(|(e, p, a, c)| format!("{e} ({p}, {a}, resource) when {{ {c} }};"))
}

fn uid(s: &str) -> EntityUid {
    s.parse().unwrap()
}

fn request(principal: &str, action: &str, tool: &str, path: &str, granted: bool) -> Request {
    let args = RestrictedExpression::new_record([(
        "path".to_owned(),
        RestrictedExpression::new_string(path.to_owned()),
    )])
    .unwrap();
    let approval = RestrictedExpression::new_record([(
        "granted".to_owned(),
        RestrictedExpression::new_bool(granted),
    )])
    .unwrap();
    let ctx = Context::from_pairs([("args".to_owned(), args), ("approval".to_owned(), approval)])
        .unwrap();
    Request::new(
        uid(principal),
        uid(&format!(r#"Action::"{action}""#)),
        uid(&format!(r#"Tool::"{tool}""#)),
        ctx,
        None,
    )
    .unwrap()
}

fn summary(r: &Response) -> (cedar_policy::Decision, BTreeSet<String>, BTreeSet<String>) {
    let reasons = r.diagnostics().reason().map(ToString::to_string).collect();
    let errors = r
        .diagnostics()
        .errors()
        .map(|e| {
            let cedar_policy::AuthorizationError::PolicyEvaluationError(e) = e;
            e.policy_id().to_string()
        })
        .collect();
    (r.decision(), reasons, errors)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn slicing_never_changes_a_decision(
        policies in prop::collection::vec(policy(), 1..16),
        calls in prop::collection::vec((0..PRINCIPALS.len(), 0..actions().len(), 0..SHIPPED_TOOLS.len(), any::<bool>(), prop::sample::select(vec!["a/.env", "src/x"])), 1..8),
    ) {
        let snap = shared_snapshot();
        let whole: PolicySet = policies.join("\n").parse().unwrap();
        let action_names = actions();
        let actions: Vec<EntityUid> = action_names.iter().map(|a| uid(&format!(r#"Action::"{a}""#))).collect();
        let slices = Slices::build(&whole, &snap.entities, actions.iter());
        let authorizer = Authorizer::new();
        for (p, a, t, granted, path) in calls {
            let req = request(PRINCIPALS[p], action_names[a], SHIPPED_TOOLS[t], path, granted);
            let slice = slices.get(&actions[a]).unwrap();
            prop_assert!(slice.policies().count() <= whole.policies().count());
            let full = summary(&authorizer.is_authorized(&req, &whole, &snap.entities));
            let sliced = summary(&authorizer.is_authorized(&req, slice, &snap.entities));
            prop_assert_eq!(&full, &sliced, "{} {} {}\n{}", PRINCIPALS[p], action_names[a], SHIPPED_TOOLS[t], policies.join("\n"));
        }
    }
}

#[test]
fn a_slice_holds_only_the_policies_that_can_apply() {
    let snap = shared_snapshot();
    let count = |a: &str| {
        snap.policies_for(&uid(&format!(r#"Action::"{a}""#)))
            .policies()
            .count()
    };
    assert_eq!(snap.policy_count(), 30);
    // read_file: 4 role grants, 2 tier forbids over the groups, the deny list, the sequence stop.
    assert_eq!(count("read_file"), 8);
    // approve: only the 3 approval policies.
    assert_eq!(count("approve"), 3);
    // kill_switch: only the admin policy.
    assert_eq!(count("kill_switch"), 1);
    // quarantine: the two quarantine policies.
    assert_eq!(count("quarantine"), 2);
    assert!(count("git_push") < snap.policy_count());
    // Inside a slice the action scope is known to match, so it is not evaluated again.
    let slice = snap.policies_for(&uid(r#"Action::"read_file""#));
    assert!(
        slice
            .policies()
            .all(|p| matches!(p.action_constraint(), cedar_policy::ActionConstraint::Any))
    );
    let original = snap
        .policies
        .policy(&cedar_policy::PolicyId::new("developers-read-write"))
        .unwrap();
    assert!(!matches!(
        original.action_constraint(),
        cedar_policy::ActionConstraint::Any
    ));
}
