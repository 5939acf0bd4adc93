//! Template links on top of a snapshot built from files: the policy half of a grant
//! (the `grants` module). A link fills a template's `?principal` and `?resource` slots; the
//! result is one more policy of the set, decided by Cedar like any other (a grant's permit
//! never outweighs a forbid). Relinking builds a new snapshot with the same revision (the
//! files' hash): links are named in the decision's reasons by their own ids.

use std::collections::HashMap;

use cedar_policy::{Authorizer, EntityUid, PolicyId, PolicySet, SlotId, ValidationMode, Validator};

use super::Snapshot;
use super::slice::Slices;

/// One link: template `template` with `?principal` and `?resource` filled, as policy `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The linked policy's id (a grant's id).
    pub id: String,
    /// The template's id (its `@id` annotation).
    pub template: String,
    /// `?principal`.
    pub principal: EntityUid,
    /// `?resource`.
    pub resource: EntityUid,
}

/// Why a link cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// The policy files have no such template (any more).
    #[error("there is no template `{0}` in the policy files")]
    NoTemplate(String),
    /// Grants fill exactly `?principal` and `?resource`.
    #[error("template `{0}` must have both a ?principal and a ?resource slot to be granted")]
    Slots(String),
    /// Cedar refused the link (e.g. its id is taken).
    #[error("linking `{template}` failed: {message}")]
    Cedar {
        /// The template.
        template: String,
        /// Cedar's message.
        message: String,
    },
    /// The linked policy does not validate against the schema (e.g. a slot of the wrong type).
    #[error("the linked policy does not validate against the schema: {0}")]
    Invalid(String),
}

impl Snapshot {
    /// The ids of the policies linked from templates (active grants).
    pub fn links(&self) -> impl Iterator<Item = &PolicyId> {
        self.policies
            .policies()
            .filter(|p| !p.is_static())
            .map(cedar_policy::Policy::id)
    }

    /// Whether `link` would link into this snapshot's files (without building a set): the
    /// template exists with both slots, the link validates and becomes a static policy, and
    /// its id is free.
    pub fn check_link(&self, link: &Link) -> Result<(), LinkError> {
        let id = PolicyId::new(&link.id);
        if self
            .policies
            .policy(&id)
            .is_some_and(cedar_policy::Policy::is_static)
            || self.policies.template(&id).is_some()
        {
            return Err(LinkError::Cedar {
                template: link.template.clone(),
                message: format!("the id `{}` is taken by a policy of the files", link.id),
            });
        }
        linked_alone(&self.policies, &Validator::new(self.schema.clone()), link).map(|_| ())
    }

    /// A snapshot of the same files with `links` in place of this one's links, and the links
    /// that failed (left out, so fail closed: a broken grant grants nothing).
    pub fn relinked(&self, links: &[Link]) -> (Snapshot, Vec<(String, LinkError)>) {
        let mut set = self.policies.clone();
        let old: Vec<PolicyId> = self.links().cloned().collect();
        for id in old {
            let _ = set.unlink(id);
        }
        let validator = Validator::new(self.schema.clone());
        let mut failed = Vec::new();
        let mut policy_files = self.policy_files.clone();
        policy_files.retain(|_, file| file != GRANT_FILE);
        for link in links {
            match link_one(&mut set, &validator, link) {
                Ok(()) => {
                    policy_files.insert(link.id.clone(), GRANT_FILE.to_owned());
                }
                Err(e) => failed.push((link.id.clone(), e)),
            }
        }
        // The files' policies keep their in-slice copies; only the links are rewritten.
        let mut prepared = self.slices.prepared();
        prepared.retain(|id, _| set.policy(id).is_some_and(cedar_policy::Policy::is_static));
        let slices = Slices::build_prepared(&set, &prepared, &self.entities, self.schema.actions());
        let snapshot = Snapshot {
            revision: self.revision.clone(),
            loaded_at: self.loaded_at,
            policies: set,
            slices,
            schema: self.schema.clone(),
            entities: self.entities.clone(),
            tools: self.tools.clone(),
            policy_files,
            authorizer: Authorizer::new(),
            deny: self.deny.clone(),
        };
        (snapshot, failed)
    }
}

/// What `policy_files` says for a linked policy.
pub const GRANT_FILE: &str = "(grant)";

fn link_one(set: &mut PolicySet, validator: &Validator, link: &Link) -> Result<(), LinkError> {
    let (template_id, values) = linked_alone(set, validator, link)?;
    set.link(template_id, PolicyId::new(&link.id), values)
        .map_err(|e| LinkError::Cedar {
            template: link.template.clone(),
            message: e.to_string(),
        })
}

/// Links `link` into a set of its template alone and validates the result; returns the
/// template id and slot values to link into the real set. A link that does not validate, or
/// whose static copy (what decisions evaluate, see `slice`) cannot be made, never enters a set.
fn linked_alone(
    set: &PolicySet,
    validator: &Validator,
    link: &Link,
) -> Result<(PolicyId, HashMap<SlotId, EntityUid>), LinkError> {
    let template_id = PolicyId::new(&link.template);
    let template = set
        .template(&template_id)
        .ok_or_else(|| LinkError::NoTemplate(link.template.clone()))?
        .clone();
    let slots: Vec<&SlotId> = template.slots().collect();
    if slots.len() != 2
        || !slots.contains(&&SlotId::principal())
        || !slots.contains(&&SlotId::resource())
    {
        return Err(LinkError::Slots(link.template.clone()));
    }
    let values = HashMap::from([
        (SlotId::principal(), link.principal.clone()),
        (SlotId::resource(), link.resource.clone()),
    ]);
    let cedar = |e: cedar_policy::PolicySetError| LinkError::Cedar {
        template: link.template.clone(),
        message: e.to_string(),
    };
    let id = PolicyId::new(&link.id);
    let mut alone = PolicySet::new();
    alone.add_template(template).map_err(cedar)?;
    alone
        .link(template_id.clone(), id.clone(), values.clone())
        .map_err(cedar)?;
    let result = validator.validate(&alone, ValidationMode::Strict);
    if let Some(e) = result.validation_errors().next() {
        return Err(LinkError::Invalid(e.to_string()));
    }
    let static_copy = alone
        .policy(&id)
        .and_then(|p| p.to_json().ok())
        .and_then(|json| cedar_policy::Policy::from_json(Some(id.clone()), json).ok());
    if static_copy.is_none() {
        return Err(LinkError::Invalid(
            "the linked policy has no static form to evaluate".to_owned(),
        ));
    }
    Ok((template_id, values))
}

/// Why `template` may not be granted, if it may not: its action scope must name tool actions
/// (or their groups `read`, `write`, `destructive`) only, so that no grant can give an operator
/// action (`approve`, `grant`, `kill_switch`, …) to the humans of a granted role, nor block one.
pub(super) fn template_scope_problem(
    template: &cedar_policy::Template,
    tool_actions: &std::collections::HashSet<EntityUid>,
) -> Option<String> {
    let named: Vec<EntityUid> = match template.action_constraint() {
        cedar_policy::ActionConstraint::Any => {
            return Some(format!(
                "template `{}` applies to every action; name the tool actions it grants (e.g. `action in [Action::\"read\"]`)",
                template.id()
            ));
        }
        cedar_policy::ActionConstraint::Eq(a) => vec![a],
        cedar_policy::ActionConstraint::In(list) => list,
    };
    named.iter().find(|a| !tool_actions.contains(*a)).map(|a| {
        format!(
            "template `{}` names {a}, which is not a tool action; grants give tool access only",
            template.id()
        )
    })
}
