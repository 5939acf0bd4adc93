//! Grants: temporary access without editing files. A grant links a template of the policy
//! files (`?principal` an agent or a role, `?resource` a tool) until it expires; the linked
//! policy is decided by Cedar like any other, so forbids still win.
//!
//! Owns: the grant record ([`Grant`]), its store ([`GrantStore`]), and [`Grants`], which keeps
//! the stored grants, the links in the live policy set and the expiry timer in step. Who may
//! grant is the API's question to Cedar (`Action::"grant"`), asked before anything here runs.

mod store;

pub(crate) use store::SledGrants;
pub use store::{GrantStore, GrantStoreError};

use std::collections::BTreeMap;
use std::sync::Arc;

use cedar_policy::{EntityId, EntityTypeName, EntityUid};
use serde::{Deserialize, Serialize};

use crate::audit::{Audit, Entry};
use crate::policy::{Link, LinkError};
use crate::reload::PolicyStore;

/// Most grants alive at once: every change relinks the whole set.
pub const MAX_GRANTS: usize = 1000;
/// Longest grant, whatever the policies allow: 30 days.
pub const MAX_TTL_S: u64 = 30 * 24 * 3600;

/// An entity as JSON names it: `{"type": "Agent", "id": "dev-agent"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntityRef {
    /// The entity type (`Agent`, `Role`, `Tool`).
    #[serde(rename = "type")]
    pub kind: String,
    /// The entity id.
    pub id: String,
}

impl EntityRef {
    /// The Cedar uid; an error naming the field when the type is not a Cedar type name.
    pub fn uid(&self, field: &'static str) -> Result<EntityUid, GrantError> {
        let kind: EntityTypeName = self.kind.parse().map_err(|_| GrantError::BadEntity {
            field,
            message: format!("`{}` is not an entity type", printable(&self.kind)),
        })?;
        Ok(EntityUid::from_type_name_and_id(
            kind,
            EntityId::new(&self.id),
        ))
    }
}

/// One grant, as stored and listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// `grant-<uuid v7>`: also the id of the linked policy, so decisions name it.
    pub id: String,
    /// The template linked.
    pub template: String,
    /// `?principal`: an agent, or a role (all its members).
    pub principal: EntityRef,
    /// `?resource`: a tool.
    pub resource: EntityRef,
    /// Who granted it (`Human::"alice"`).
    pub granted_by: String,
    /// Why.
    pub reason: Option<String>,
    /// When it was granted (ms since the epoch).
    pub created_ms: u64,
    /// When it ends (ms since the epoch).
    pub expires_ms: u64,
}

impl Grant {
    /// The template link this grant makes.
    pub fn link(&self) -> Result<Link, GrantError> {
        Ok(Link {
            id: self.id.clone(),
            template: self.template.clone(),
            principal: self.principal.uid("principal")?,
            resource: self.resource.uid("resource")?,
        })
    }
}

/// A grant as listed: the record, and whether it is linked into the live set.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    /// The grant.
    #[serde(flatten)]
    pub grant: Grant,
    /// Linked into the policy set being served.
    pub active: bool,
    /// Why not, when it is not (its template was removed or changed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// Why a grant operation did not happen. Nothing changed in any of these cases.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// A slot value that is not an entity.
    #[error("`{field}`: {message}")]
    BadEntity {
        /// The body field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The link cannot be made against the live policy set.
    #[error(transparent)]
    Link(LinkError),
    /// [`MAX_GRANTS`] are alive.
    #[error("{MAX_GRANTS} grants are alive already; revoke some first")]
    TooMany,
    /// No grant with this id.
    #[error("no grant `{0}`")]
    NotFound(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] GrantStoreError),
    /// Recorded and in force on this sidecar, but the fleet's Redis did not take it.
    #[error(
        "recorded and in force on this sidecar; the fleet's Redis did not take it ({0}), so it is sent again until Redis does"
    )]
    NotShared(String),
}

impl From<crate::audit::StoreError> for GrantError {
    fn from(e: crate::audit::StoreError) -> Self {
        GrantError::Store(e.into())
    }
}

/// The grants of one sidecar, kept in step with the live policy set. Every change runs to
/// its end once started (callers spawn it: a client that hangs up mid-revoke must not leave the
/// store and the live set disagreeing).
#[derive(Debug)]
pub struct Grants {
    audit: Arc<Audit>,
    policy: Arc<PolicyStore>,
    /// The stored grants by id; changes are serialized by this lock and written through.
    alive: tokio::sync::Mutex<BTreeMap<String, Grant>>,
    /// Woken on every change, so the expiry timer re-plans.
    changed: tokio::sync::Notify,
    /// Changes begun here that the fleet may not have yet ([`Grants::sharing`]), and a count
    /// of those ended: a fleet read that overlaps one is not adopted.
    in_flight: std::sync::atomic::AtomicU64,
    ended: std::sync::atomic::AtomicU64,
}

/// A change of this sidecar's grants on its way to the fleet; ends when dropped.
#[derive(Debug)]
pub struct Sharing<'a>(&'a Grants);

impl Drop for Sharing<'_> {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering;
        self.0.ended.fetch_add(1, Ordering::AcqRel);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Grants {
    /// The grants of `store`, linked into `policy`. Expired ones are not linked and are
    /// returned: the caller audits them, then [`Grants::forget`]s them (a crash in between
    /// audits them again at the next start rather than never). Blocking: call before serving.
    pub fn start(
        store: Arc<dyn GrantStore>,
        audit: Arc<Audit>,
        policy: Arc<PolicyStore>,
        now_ms: u64,
    ) -> Result<(Grants, Vec<Grant>), GrantStoreError> {
        let mut alive = BTreeMap::new();
        let mut expired = Vec::new();
        for grant in store.all()? {
            if grant.expires_ms <= now_ms {
                expired.push(grant);
            } else {
                alive.insert(grant.id.clone(), grant);
            }
        }
        policy.set_links(links_of(&alive));
        let grants = Grants {
            audit,
            policy,
            alive: tokio::sync::Mutex::new(alive),
            changed: tokio::sync::Notify::new(),
            in_flight: Default::default(),
            ended: Default::default(),
        };
        Ok((grants, expired))
    }

    /// Every grant, soonest to expire first.
    pub async fn list(&self) -> Vec<Listed> {
        let alive = self.alive.lock().await;
        let status = LinkStatus::of(&self.policy);
        let mut out: Vec<Listed> = alive.values().map(|g| status.listed(g.clone())).collect();
        out.sort_by_key(|l| (l.grant.expires_ms, l.grant.id.clone()));
        out
    }

    /// The grant `id`, if alive.
    pub async fn get(&self, id: &str) -> Option<Grant> {
        self.alive.lock().await.get(id).cloned()
    }

    /// Whether `grant` would link into the live set (checked again, under the lock, by
    /// [`Grants::create`]).
    pub fn check(&self, grant: &Grant) -> Result<(), GrantError> {
        self.policy
            .current()
            .check_link(&grant.link()?)
            .map_err(GrantError::Link)
    }

    /// Stores `grant` with `record` (its audit record), then links it; the grant as listed.
    /// A grant that would not link is refused and nothing is stored or recorded.
    pub async fn create(&self, grant: Grant, record: Entry) -> Result<Listed, GrantError> {
        let mut alive = self.alive.lock().await;
        if alive.len() >= MAX_GRANTS {
            return Err(GrantError::TooMany);
        }
        self.check(&grant)?;
        let effect = store::put(&grant)?;
        self.audit.commit(vec![record], vec![effect]).await?;
        alive.insert(grant.id.clone(), grant.clone());
        self.relink(&alive).await?;
        Ok(LinkStatus::of(&self.policy).listed(grant))
    }

    /// Removes the grant `id` from the store with `record` (its audit record), then unlinks
    /// it. If the record cannot be written, nothing changes.
    pub async fn revoke(&self, id: &str, record: Entry) -> Result<Grant, GrantError> {
        let mut alive = self.alive.lock().await;
        if !alive.contains_key(id) {
            return Err(GrantError::NotFound(printable(id)));
        }
        self.audit
            .commit(vec![record], vec![store::remove(id)])
            .await?;
        let gone = alive
            .remove(id)
            .ok_or_else(|| GrantError::NotFound(printable(id)))?;
        self.relink(&alive).await?;
        Ok(gone)
    }

    /// Unlinks every grant expired at `now_ms` and returns them; they stay stored until the
    /// caller has recorded them with [`Grants::forget`].
    pub async fn expire_due(&self, now_ms: u64) -> Vec<Grant> {
        let mut alive = self.alive.lock().await;
        let due: Vec<String> = alive
            .values()
            .filter(|g| g.expires_ms <= now_ms)
            .map(|g| g.id.clone())
            .collect();
        if due.is_empty() {
            return Vec::new();
        }
        let gone: Vec<Grant> = due.iter().filter_map(|id| alive.remove(id)).collect();
        if let Err(e) = self.relink(&alive).await {
            tracing::error!(error = %e, "expired grants could not be unlinked; retrying");
            for g in gone {
                alive.insert(g.id.clone(), g);
            }
            return Vec::new();
        }
        gone
    }

    /// Removes ended grants from the store with `records` (their expiry records), together:
    /// if the records cannot be written, they stay stored and the next start ends them again.
    pub async fn forget(
        &self,
        ended: &[Grant],
        records: Vec<Entry>,
    ) -> Result<(), GrantStoreError> {
        let effects = ended.iter().map(|g| store::remove(&g.id)).collect();
        self.audit.commit(records, effects).await?;
        Ok(())
    }

    /// Marks a change (create, revoke, expiry) as on its way to the fleet until the guard is
    /// dropped, after the fleet has it: fleet reads that overlap it are not adopted, so a read
    /// taken before the change cannot undo it here.
    pub fn sharing(&self) -> Sharing<'_> {
        self.in_flight
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Sharing(self)
    }

    /// A mark for [`Grants::adopt`]: take it before reading the fleet's grants.
    pub fn mark(&self) -> u64 {
        self.ended.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Makes the live grants the fleet's `shared` ones (expired ones left out), unless a
    /// change of this sidecar overlapped the read (`mark`, from [`Grants::mark`]): the next
    /// read brings it. Whether anything changed; `None` when the read was not adopted.
    pub async fn adopt(
        &self,
        shared: Vec<Grant>,
        now_ms: u64,
        mark: u64,
    ) -> Result<Option<bool>, GrantStoreError> {
        use std::sync::atomic::Ordering;
        let mut alive = self.alive.lock().await;
        if self.in_flight.load(Ordering::Acquire) > 0 || self.ended.load(Ordering::Acquire) != mark
        {
            return Ok(None);
        }
        let next: BTreeMap<String, Grant> = shared
            .into_iter()
            .filter(|g| g.expires_ms > now_ms)
            .map(|g| (g.id.clone(), g))
            .collect();
        if *alive == next {
            return Ok(Some(false));
        }
        *alive = next;
        self.relink(&alive).await?;
        Ok(Some(true))
    }

    /// When the next grant expires (ms since the epoch).
    pub async fn next_expiry(&self) -> Option<u64> {
        self.alive.lock().await.values().map(|g| g.expires_ms).min()
    }

    /// Waits until some grant changed.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Links exactly `alive` into the live set (off the async threads: a relink waits for any
    /// reload in progress).
    async fn relink(&self, alive: &BTreeMap<String, Grant>) -> Result<(), GrantStoreError> {
        let links = links_of(alive);
        let policy = self.policy.clone();
        let done = tokio::task::spawn_blocking(move || policy.set_links(links)).await;
        self.changed.notify_one();
        done.map_err(|e| GrantStoreError(format!("relinking the grants failed: {e}")))
    }
}

/// Which grants are linked into the set being served, and why the others are not.
struct LinkStatus {
    linked: std::collections::HashSet<String>,
    problems: BTreeMap<String, String>,
}

impl LinkStatus {
    fn of(policy: &PolicyStore) -> LinkStatus {
        LinkStatus {
            linked: policy.current().links().map(ToString::to_string).collect(),
            problems: policy.link_problems(),
        }
    }

    fn listed(&self, grant: Grant) -> Listed {
        Listed {
            active: self.linked.contains(&grant.id),
            problem: self.problems.get(&grant.id).cloned(),
            grant,
        }
    }
}

fn links_of(alive: &BTreeMap<String, Grant>) -> Vec<Link> {
    alive
        .values()
        .filter_map(|g| match g.link() {
            Ok(link) => Some(link),
            Err(e) => {
                tracing::warn!(grant = g.id, error = %e, "stored grant cannot be linked");
                None
            }
        })
        .collect()
}

/// Ids echoed back are cut short and stripped of control characters.
fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(64).collect()
}
