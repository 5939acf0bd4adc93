//! Walks the chain and names the first broken link: a changed byte, a deleted, reordered,
//! duplicated or replaced record, a record stored outside the chain's range, or (given a head
//! exported earlier) a truncated tail. After retention the walk starts at the checkpoint,
//! whose seal must hold and which a retention record in the chain must attest (so removing
//! old records by hand is caught too).

use serde::Serialize;

use super::error::StoreError;
use super::record::{Chain, Checkpoint, EntryKind, GENESIS, Head, fault_words};
use super::store::AuditStore;

/// Records read per page.
const PAGE: usize = 4096;

/// What a walk found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum ChainVerdict {
    /// Every link holds.
    Intact {
        /// Records checked.
        records: u64,
        /// The first record checked (after a retention cut, the one after the checkpoint).
        first: u64,
        /// The newest record.
        head: Head,
        /// Records checked that carry no key id (plain links, or a legacy keyed chain).
        unlabelled: u64,
        /// Records checked under a keyring key.
        keyed: u64,
    },
    /// The first link that does not hold.
    Broken {
        /// Where (the sequence number expected there).
        seq: u64,
        /// What is wrong, in words.
        why: String,
    },
}

/// Checks every record of `store` under `chain`, and that the log reaches `anchor` (a head
/// exported earlier) with the same hash there.
pub fn verify(
    store: &dyn AuditStore,
    chain: &Chain,
    anchor: Option<&Head>,
) -> Result<ChainVerdict, StoreError> {
    walk(store, chain, anchor, None)
}

/// Checks the records from the start of the log (or the checkpoint) through `through` only:
/// what retention is about to remove must be intact before it is sealed into a checkpoint.
pub fn verify_through(
    store: &dyn AuditStore,
    chain: &Chain,
    through: u64,
) -> Result<ChainVerdict, StoreError> {
    walk(store, chain, None, Some(through))
}

fn broken(seq: u64, why: String) -> Result<ChainVerdict, StoreError> {
    Ok(ChainVerdict::Broken { seq, why })
}

fn walk(
    store: &dyn AuditStore,
    chain: &Chain,
    anchor: Option<&Head>,
    stop: Option<u64>,
) -> Result<ChainVerdict, StoreError> {
    let checkpoint = store.checkpoint()?;
    let (first, mut prev) = match &checkpoint {
        Some(cp) if !chain.checkpoint_holds(cp) => {
            return broken(
                cp.seq,
                format!(
                    "the retention checkpoint at record {} does not hold: altered, or written without the chain's key",
                    cp.seq
                ),
            );
        }
        Some(cp) => match cp.seq.checked_add(1) {
            Some(first) => (first, cp.hash.clone()),
            None => {
                return broken(
                    cp.seq,
                    "the retention checkpoint is out of range".to_owned(),
                );
            }
        },
        None => (1, GENESIS.to_owned()),
    };
    let mut expected_seq = first;
    let (mut unlabelled, mut keyed) = (0u64, 0u64);
    let mut attested = checkpoint.is_none() || stop.is_some();
    let mut anchored = match anchor {
        None => true,
        Some(a) => anchored_before(a, checkpoint.as_ref(), chain)?,
    };
    // Read every stored unit from key 0, so a record stored before the chain's start, or a
    // unit planted inside another's range, is seen too.
    let mut from = 0;
    'pages: loop {
        let page = store.scan(from, PAGE)?;
        let Some(last_unit) = page.last().map(|s| s.unit) else {
            break;
        };
        for stored in page {
            if stop.is_some_and(|s| expected_seq > s) {
                break 'pages;
            }
            if stored.key_seq < expected_seq {
                return broken(
                    expected_seq,
                    if stored.key_seq < first {
                        format!(
                            "a record is stored at position {}, before the chain's first record {first}: inserted, or left behind by a cut",
                            stored.key_seq
                        )
                    } else {
                        format!(
                            "position {} is stored twice (overlapping blocks): inserted",
                            stored.key_seq
                        )
                    },
                );
            }
            if stored.key_seq > expected_seq {
                return broken(
                    expected_seq,
                    format!(
                        "record {expected_seq} is missing (the next stored is {}): deleted",
                        stored.key_seq
                    ),
                );
            }
            let r = match stored.record {
                Ok(r) => r,
                Err(e) => {
                    return broken(
                        expected_seq,
                        format!("record {expected_seq} is corrupt: {e}"),
                    );
                }
            };
            if r.seq != expected_seq {
                return broken(
                    expected_seq,
                    format!(
                        "record stored at {expected_seq} says it is {}: reordered or moved",
                        r.seq
                    ),
                );
            }
            if r.prev != prev {
                return broken(
                    expected_seq,
                    format!(
                        "record {expected_seq} does not follow record {}: its previous hash differs (reordered, replaced or a record before it was deleted)",
                        expected_seq - 1
                    ),
                );
            }
            if let Err(fault) = chain.check(&r) {
                return broken(expected_seq, fault_words(expected_seq, &fault));
            }
            if r.key.is_some() {
                keyed += 1;
            } else {
                unlabelled += 1;
            }
            if let Some(a) = anchor
                && a.seq == r.seq
            {
                if a.hash != r.hash {
                    return broken(
                        expected_seq,
                        format!("record {expected_seq} differs from the exported head: replaced"),
                    );
                }
                anchored = true;
            }
            if let Some(cp) = &checkpoint
                && r.entry.kind == EntryKind::Admin
                && r.entry.detail.as_deref() == Some(cp.attestation().as_str())
            {
                attested = true;
            }
            prev = r.hash;
            expected_seq += 1;
        }
        match last_unit.checked_add(1) {
            Some(next) => from = next,
            None => break,
        }
    }
    let last = expected_seq - 1;
    if let Some(s) = stop
        && last < s
    {
        return broken(
            expected_seq,
            format!("the log ends at record {last}, before record {s}"),
        );
    }
    if !attested && let Some(cp) = &checkpoint {
        return broken(
            first,
            format!(
                "records up to {} were removed, but no retention record in the chain attests that cut: removed outside toolgate",
                cp.seq
            ),
        );
    }
    if !anchored && let Some(a) = anchor {
        return broken(
            last + 1,
            format!(
                "the log ends at record {last} but the exported head is record {}: truncated",
                a.seq
            ),
        );
    }
    if stop.is_none()
        && let Some(k) = chain.ring_keys().iter().find(|k| k.from_seq > last + 1)
    {
        return broken(
            last + 1,
            format!(
                "the keyring says key `{}` seals records from {} on, but the log ends at record {last}: truncated (or the sidecar stopped before recording the key; start it once)",
                k.id, k.from_seq
            ),
        );
    }
    Ok(ChainVerdict::Intact {
        unlabelled,
        keyed,
        records: last + 1 - first,
        first,
        head: Head {
            seq: last,
            hash: prev,
        },
    })
}

/// Whether `anchor` is settled before the walk: it is empty, or it lies at or before the
/// retention checkpoint. A head older than the cut can be confirmed only at the cut itself,
/// and trusted past it only when the chain is keyed (without a key, a checkpoint and its
/// attestation could be forged together).
fn anchored_before(
    anchor: &Head,
    checkpoint: Option<&Checkpoint>,
    chain: &Chain,
) -> Result<bool, StoreError> {
    if anchor.seq == 0 {
        return Ok(true);
    }
    let Some(cp) = checkpoint else {
        return Ok(false);
    };
    if anchor.seq > cp.seq {
        return Ok(false);
    }
    if anchor.seq == cp.seq {
        return Ok(anchor.hash == cp.hash);
    }
    if chain.is_keyed() {
        return Ok(true);
    }
    Err(StoreError(format!(
        "the exported head (record {}) predates the retention checkpoint (record {}), and plain links cannot prove what was cut; export a newer head, or key the chain (audit.hmac_key_file)",
        anchor.seq, cp.seq
    )))
}
