//! Approver eligibility (`Action::"approve"`) over the shipped policies: tiers, the director
//! rule for critical tools, and separation of duties.

use toolgate::authz::{Outcome, Principal, PrincipalKind, may_approve};

use crate::helpers::shipped_snapshot;

#[test]
fn who_may_approve_what() {
    let snap = shipped_snapshot();
    let human = |id: &str| Principal::new(PrincipalKind::Human, id);
    let agent = |id: &str| Principal::new(PrincipalKind::Agent, id);
    let cases = [
        // approvers handle medium and high
        ("bob", "write_file", "dev-agent", Outcome::Allow),
        ("dave", "run_tests", "dev-agent", Outcome::Allow),
        // critical only by directors
        ("bob", "git_push", "release-agent", Outcome::Deny),
        ("frank", "git_push", "release-agent", Outcome::Allow),
        // separation of duties: alice owns release-agent; bob owns sre-agent
        ("alice", "git_push", "release-agent", Outcome::Deny),
        ("bob", "write_file", "sre-agent", Outcome::Deny),
        // not approvers at all
        ("carol", "write_file", "dev-agent", Outcome::Deny),
        ("erin", "write_file", "dev-agent", Outcome::Deny),
    ];
    for (approver, tool, requester, want) in cases {
        let v = may_approve(&snap, &human(approver), tool, &agent(requester));
        assert_eq!(
            v.decision, want,
            "{approver} approving {tool} for {requester}: {v:?}"
        );
    }
    let own = may_approve(&snap, &human("alice"), "git_push", &agent("release-agent"));
    assert_eq!(own.reasons, ["no-approving-your-own-agent"]);
    let unknown = may_approve(&snap, &human("alice"), "nope", &agent("dev-agent"));
    assert_eq!(unknown.decision, Outcome::Deny);
}
