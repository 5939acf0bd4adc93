//! What the audit log says the stored state is: every record that commits state changes names
//! them ([`Attest`]: tree, key, SHA-256 of the value), and a `state_checked` record names the
//! whole state at a start. Walking the chain from the newest such record, each record's link
//! checked, gives the state the log produces; [`expected_state`] does that walk, so a value
//! written into the store without its record, a removed key, or a value rolled back to an
//! earlier one shows up as a difference.

use std::collections::BTreeMap;

use super::error::StoreError;
use super::ledger::Effect;
use super::record::{Attest, Chain, Entry, GENESIS, LinkFault, Record};
use super::store::{AuditStore, Query};

/// The decision word of the record that names the whole state found at a start.
pub const STATE_CHECKED: &str = "state_checked";

/// The trees whose every key a record attests: approvals, the kill switch, quarantines and
/// approved MCP descriptors (`admin`), and grants. (The remembered policy set is saved at
/// each applied reload and checked against its own digest; provenance's conversations decide
/// nothing alone.)
pub const ATTESTED_TREES: [&str; 3] = ["admin", "approvals", "grants"];

/// A key's value as the log last set it: the record that did, and the value's SHA-256
/// (`None`: removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    /// The record.
    pub seq: u64,
    /// The value's SHA-256, or `None` when the record removed the key.
    pub sha256: Option<String>,
}

/// The state the log produces, by (tree, key).
#[derive(Debug, Default)]
pub struct Expected {
    /// Each attested key's last value.
    pub keys: BTreeMap<(String, String), Said>,
    /// The `state_checked` record the walk started from, when there is one; without one
    /// (a log written before records named their effects, or retention removed it) keys
    /// the walk did not meet cannot be told from forged ones.
    pub baseline: Option<u64>,
    /// Records walked.
    pub walked: u64,
    /// Records walked sealed by a key not available here (a retired `audit.hmac_key_file`):
    /// their links were followed, their seals not checked.
    pub unsealed: u64,
    /// Whether a record after the baseline (or, without one, any record) changed state.
    pub changed: bool,
    /// A link that does not hold on the way: the record and why. Nothing the walk found can
    /// be trusted past it.
    pub broken: Option<(u64, String)>,
}

/// Records read per page of the walk.
const PAGE: usize = 4096;

/// Walks the chain from the newest `state_checked` record (or the log's start after the
/// retention cut when there is none) to its head, checking each record's link under `chain`,
/// and returns the state the records produce.
pub fn expected_state(store: &dyn AuditStore, chain: &Chain) -> Result<Expected, StoreError> {
    let newest = store
        .query(&Query {
            decision: Some(STATE_CHECKED.to_owned()),
            limit: 1,
            ..Query::default()
        })?
        .into_iter()
        .next();
    let mut out = Expected::default();
    let (first, mut prev) = match &newest {
        Some(r) => (r.seq, r.prev.clone()),
        None => match store.checkpoint()? {
            Some(cp) => (cp.seq.saturating_add(1), cp.hash.clone()),
            None => (1, GENESIS.to_owned()),
        },
    };
    let mut next = first;
    // The block holding `first` starts at or before it.
    let mut from = first.saturating_sub(super::block::MAX_BLOCK as u64);
    'pages: loop {
        let page = store.scan(from, PAGE)?;
        let Some(last_unit) = page.last().map(|s| s.unit) else {
            break;
        };
        for stored in page {
            if stored.key_seq < next {
                continue;
            }
            let r = match stored.record {
                Ok(r) if r.seq == next => r,
                Ok(r) => {
                    out.broken = Some((next, format!("record {next} is stored as {}", r.seq)));
                    break 'pages;
                }
                Err(e) => {
                    out.broken = Some((next, format!("record {next} does not parse: {e}")));
                    break 'pages;
                }
            };
            if r.prev != prev {
                out.broken = Some((
                    r.seq,
                    format!(
                        "record {} does not follow the record before it (its previous hash differs)",
                        r.seq
                    ),
                ));
                break 'pages;
            }
            match chain.check(&r) {
                Ok(()) => {}
                Err(LinkFault::NoKey(_)) => out.unsealed += 1,
                Err(f) => {
                    out.broken = Some((r.seq, super::record::fault_words(r.seq, &f)));
                    break 'pages;
                }
            }
            take(&mut out, &r);
            prev = r.hash;
            next = next.saturating_add(1);
        }
        match last_unit.checked_add(1) {
            Some(n) => from = n,
            None => break,
        }
    }
    Ok(out)
}

fn take(out: &mut Expected, r: &Record) {
    out.walked += 1;
    let Some(list) = &r.entry.effects else {
        return;
    };
    if r.entry.decision == STATE_CHECKED {
        out.keys.clear();
        out.baseline = Some(r.seq);
        out.changed = false;
    } else {
        out.changed = true;
    }
    // Other trees' changes (the remembered policy set) are named, but not held to.
    for a in list
        .iter()
        .filter(|a| ATTESTED_TREES.contains(&a.tree.as_str()))
    {
        out.keys.insert(
            (a.tree.clone(), a.key.clone()),
            Said {
                seq: r.seq,
                sha256: a.sha256.clone(),
            },
        );
    }
}

/// The record that names the whole state found at a start (`state`, every key of the
/// [`ATTESTED_TREES`]).
pub fn state_checked(revision: &str, state: Vec<Attest>) -> Entry {
    let mut trees: BTreeMap<&str, usize> = BTreeMap::new();
    for a in &state {
        *trees.entry(a.tree.as_str()).or_default() += 1;
    }
    let counts: Vec<String> = trees.iter().map(|(t, n)| format!("{t}: {n}")).collect();
    let mut e = super::Operator::by(super::EntryKind::Admin, "start", "toolgate", revision).entry(
        STATE_CHECKED,
        Vec::new(),
        format!(
            "the stored state matches the audit log ({} keys{}{})",
            state.len(),
            if counts.is_empty() { "" } else { "; " },
            counts.join(", ")
        ),
    );
    e.effects = Some(state);
    e
}

/// Names `effects` on the first of `entries`, which commits them.
pub(crate) fn attach(entries: &mut [Entry], effects: &[Effect]) {
    if let Some(first) = entries.first_mut()
        && !effects.is_empty()
    {
        first
            .effects
            .get_or_insert_with(Vec::new)
            .extend(effects.iter().map(Attest::effect));
    }
}
