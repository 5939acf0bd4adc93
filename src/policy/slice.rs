//! Per-action policy slices, built once per snapshot: for each action, only the policies whose
//! action scope can match it (`action`, `action == A`, or `action in [...]` naming A or one of
//! its groups). A policy that cannot match an action can neither decide nor error for it, so
//! evaluating the slice gives Cedar's decision over the whole set, at a cost that does not grow
//! with policies about other tools.
//!
//! Inside a slice every policy's action scope is already known to match, so the copy placed in
//! the slice has its action scope removed: Cedar would otherwise rebuild the `action in [...]`
//! set and walk the action hierarchy for every policy on every request (about a fifth of a
//! decision's cost over the shipped policies). Ids and annotations are kept, so reasons and
//! errors name the policy as written.

use std::collections::{HashMap, HashSet};

use cedar_policy::{ActionConstraint, Entities, EntityUid, Policy, PolicyId, PolicySet};

/// Action → the policies that can apply to it.
#[derive(Debug, Default)]
pub struct Slices {
    by_action: HashMap<EntityUid, PolicySet>,
}

impl Slices {
    /// Slices `set` for each of `actions` (a load passes every action of the schema, tools,
    /// groups and `approve` alike), using the action hierarchy
    /// in `entities` (which holds the schema's action entities). One pass over the policies:
    /// each goes to the actions its scope names, directly or through a group.
    pub fn build<'a>(
        set: &PolicySet,
        entities: &Entities,
        actions: impl IntoIterator<Item = &'a EntityUid>,
    ) -> Self {
        Self::build_prepared(set, &HashMap::new(), entities, actions)
    }

    /// [`Slices::build`], taking each policy's in-slice copy from `prepared` when there (a load
    /// keeps them per file, so a reload rewrites only the policies of changed files).
    pub fn build_prepared<'a>(
        set: &PolicySet,
        prepared: &HashMap<PolicyId, Policy>,
        entities: &Entities,
        actions: impl IntoIterator<Item = &'a EntityUid>,
    ) -> Self {
        let all: Vec<EntityUid> = actions.into_iter().cloned().collect();
        let index: HashMap<&EntityUid, usize> =
            all.iter().enumerate().map(|(i, a)| (a, i)).collect();
        // Each action and group → the actions it covers (itself, or its members).
        let mut covers: HashMap<EntityUid, Vec<usize>> = HashMap::new();
        for (i, action) in all.iter().enumerate() {
            covers.entry(action.clone()).or_default().push(i);
            for group in entities.ancestors(action).into_iter().flatten() {
                covers.entry(group.clone()).or_default().push(i);
            }
        }
        let mut slices: Vec<PolicySet> = all.iter().map(|_| PolicySet::new()).collect();
        for original in set.policies() {
            let policy = prepared
                .get(original.id())
                .cloned()
                .unwrap_or_else(|| without_action_scope(original));
            let targets: HashSet<usize> = match original.action_constraint() {
                ActionConstraint::Any => (0..all.len()).collect(),
                ActionConstraint::Eq(a) => index.get(&a).copied().into_iter().collect(),
                ActionConstraint::In(list) => list
                    .iter()
                    .filter_map(|a| covers.get(a))
                    .flatten()
                    .copied()
                    .collect(),
            };
            for i in targets {
                // INVARIANT: ids are unique in `set`, so adding to a fresh set cannot fail;
                // only a link whose static copy could not be made would (logged, left out).
                if let Some(slice) = slices.get_mut(i)
                    && let Err(e) = slice.add(policy.clone())
                {
                    tracing::error!(policy = %original.id(), error = %e, "policy left out of a slice");
                }
            }
        }
        Slices {
            by_action: all.into_iter().zip(slices).collect(),
        }
    }

    /// Each policy's in-slice copy, by id: what [`Slices::build_prepared`] takes, so a set
    /// rebuilt from this one (relinking grants) rewrites only the policies it adds.
    pub fn prepared(&self) -> HashMap<PolicyId, Policy> {
        let mut out = HashMap::new();
        for slice in self.by_action.values() {
            for policy in slice.policies() {
                out.entry(policy.id().clone())
                    .or_insert_with(|| policy.clone());
            }
        }
        out
    }

    /// The slice for `action`, if one was built.
    pub fn get(&self, action: &EntityUid) -> Option<&PolicySet> {
        self.by_action.get(action)
    }
}

/// `policy` with its action scope widened to `action`; the policy itself when it already is, or
/// when the rewrite fails (it cannot for a static policy; keeping the original is always correct).
///
/// A template-linked policy (a grant) always comes back static, with its slots filled: a
/// policy set takes links only through `link`, so a linked copy could not enter a slice.
pub(super) fn without_action_scope(policy: &Policy) -> Policy {
    if policy.is_static() && matches!(policy.action_constraint(), ActionConstraint::Any) {
        return policy.clone();
    }
    let rewritten = policy.to_json().ok().and_then(|mut json| {
        let scope = json.get_mut("action")?;
        *scope = serde_json::json!({"op": "All"});
        Policy::from_json(Some(policy.id().clone()), json).ok()
    });
    rewritten.unwrap_or_else(|| policy.clone())
}
