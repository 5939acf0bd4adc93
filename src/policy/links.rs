//! Template links on top of a snapshot built from files: the policy half of a grant
//! ([`crate::grants`]). A link fills a template's `?principal` and `?resource` slots; the
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

    /// Whether `links` would all link into this snapshot's files; the first failure otherwise.
    pub fn check_links(&self, links: &[Link]) -> Result<(), (String, LinkError)> {
        match self.relinked(links).1.into_iter().next() {
            Some(failed) => Err(failed),
            None => Ok(()),
        }
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
        let slices = Slices::build(&set, &self.entities, self.schema.actions());
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
        };
        (snapshot, failed)
    }
}

/// What `policy_files` says for a linked policy.
pub const GRANT_FILE: &str = "(grant)";

fn link_one(set: &mut PolicySet, validator: &Validator, link: &Link) -> Result<(), LinkError> {
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
    // Validated alone first, so a link that does not validate never enters the set.
    let mut alone = PolicySet::new();
    alone.add_template(template).map_err(cedar)?;
    alone
        .link(template_id.clone(), PolicyId::new(&link.id), values.clone())
        .map_err(cedar)?;
    let result = validator.validate(&alone, ValidationMode::Strict);
    if let Some(e) = result.validation_errors().next() {
        return Err(LinkError::Invalid(e.to_string()));
    }
    set.link(template_id, PolicyId::new(&link.id), values)
        .map_err(cedar)
}
