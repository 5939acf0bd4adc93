//! Per-action policy slices, built once per snapshot: for each action, only the policies whose
//! action scope can match it (`action`, `action == A`, or `action in [...]` naming A or one of
//! its groups). A policy that cannot match an action can neither decide nor error for it, so
//! evaluating the slice gives Cedar's decision over the whole set, at a cost that does not grow
//! with policies about other tools.

use std::collections::{HashMap, HashSet};

use cedar_policy::{ActionConstraint, Entities, EntityUid, PolicySet};

/// Action → the policies that can apply to it.
#[derive(Debug, Default)]
pub struct Slices {
    by_action: HashMap<EntityUid, PolicySet>,
}

impl Slices {
    /// Slices `set` for each of `actions` (plus `Action::"approve"`), using the action hierarchy
    /// in `entities` (which holds the schema's action entities).
    pub fn build<'a>(
        set: &PolicySet,
        entities: &Entities,
        actions: impl IntoIterator<Item = &'a EntityUid>,
    ) -> Self {
        let mut by_action = HashMap::new();
        let approve: Option<EntityUid> = r#"Action::"approve""#.parse().ok();
        let mut all: Vec<EntityUid> = actions.into_iter().cloned().collect();
        all.extend(approve);
        for action in &all {
            let mut lineage: HashSet<&EntityUid> = entities
                .ancestors(action)
                .map(Iterator::collect)
                .unwrap_or_default();
            lineage.insert(action);
            let mut slice = PolicySet::new();
            for policy in set.policies() {
                let applies = match policy.action_constraint() {
                    ActionConstraint::Any => true,
                    ActionConstraint::Eq(a) => &a == action,
                    ActionConstraint::In(list) => list.iter().any(|a| lineage.contains(a)),
                };
                // INVARIANT: ids are unique in `set`, so adding to a fresh set cannot fail.
                if applies && slice.add(policy.clone()).is_err() {
                    return Slices::default();
                }
            }
            by_action.insert(action.clone(), slice);
        }
        Slices { by_action }
    }

    /// The slice for `action`, if one was built.
    pub fn get(&self, action: &EntityUid) -> Option<&PolicySet> {
        self.by_action.get(action)
    }
}
