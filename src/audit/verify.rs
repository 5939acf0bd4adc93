//! Walks the chain and names the first broken link: a changed byte, a deleted, reordered or
//! replaced record, or (given a head exported earlier) a truncated tail. After retention the
//! walk starts at the checkpoint, whose seal must hold and which a retention record in the
//! chain must attest (so removing old records by hand is caught too).

use serde::Serialize;

use super::record::{Chain, EntryKind, GENESIS};
use super::store::{AuditStore, StoreError};
use super::writer::Head;

/// Records read per page.
const PAGE: usize = 4096;

/// What a walk found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Verdict {
    /// Every link holds.
    Intact {
        /// Records checked.
        records: u64,
        /// The first record checked (after a retention cut, the one after the checkpoint).
        first: u64,
        /// The newest record.
        head: Head,
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
) -> Result<Verdict, StoreError> {
    let checkpoint = store.checkpoint()?;
    let (mut expected_seq, mut prev) = match &checkpoint {
        Some(cp) if !chain.checkpoint_holds(cp) => {
            return Ok(Verdict::Broken {
                seq: cp.seq,
                why: format!(
                    "the retention checkpoint at record {} does not hold: altered, or written without the chain's key",
                    cp.seq
                ),
            });
        }
        Some(cp) => (cp.seq + 1, cp.hash.clone()),
        None => (1, GENESIS.to_owned()),
    };
    let first = expected_seq;
    let mut attested = checkpoint.is_none();
    // A head exported before the cut can only be matched at the cut itself.
    let mut anchored = anchor.is_none_or(|a| {
        a.seq == 0
            || checkpoint
                .as_ref()
                .is_some_and(|cp| a.seq < cp.seq || (a.seq == cp.seq && a.hash == cp.hash))
    });
    loop {
        let page = store.scan(expected_seq, PAGE)?;
        let Some(last_key) = page.last().map(|s| s.key_seq) else {
            break;
        };
        for stored in page {
            let broken = |why: String| {
                Ok(Verdict::Broken {
                    seq: expected_seq,
                    why,
                })
            };
            if stored.key_seq != expected_seq {
                return broken(format!(
                    "record {expected_seq} is missing (the next stored is {}): deleted",
                    stored.key_seq
                ));
            }
            let r = match stored.record {
                Ok(r) => r,
                Err(e) => return broken(format!("record {expected_seq} is corrupt: {e}")),
            };
            if r.seq != expected_seq {
                return broken(format!(
                    "record stored at {expected_seq} says it is {}: reordered or moved",
                    r.seq
                ));
            }
            if r.prev != prev {
                return broken(format!(
                    "record {expected_seq} does not follow record {}: its previous hash differs (reordered, replaced or a record before it was deleted)",
                    expected_seq - 1
                ));
            }
            if chain.link(&prev, r.seq, &r.entry) != r.hash {
                return broken(format!(
                    "record {expected_seq} was altered: its content does not match its hash"
                ));
            }
            if let Some(a) = anchor
                && a.seq == r.seq
            {
                if a.hash != r.hash {
                    return broken(format!(
                        "record {expected_seq} differs from the exported head: replaced"
                    ));
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
        if last_key == u64::MAX {
            break;
        }
    }
    let last = expected_seq - 1;
    if !attested && let Some(cp) = &checkpoint {
        return Ok(Verdict::Broken {
            seq: first,
            why: format!(
                "records up to {} were removed, but no retention record in the chain attests that cut: removed outside toolgate",
                cp.seq
            ),
        });
    }
    if !anchored && let Some(a) = anchor {
        return Ok(Verdict::Broken {
            seq: last + 1,
            why: format!(
                "the log ends at record {last} but the exported head is record {}: truncated",
                a.seq
            ),
        });
    }
    Ok(Verdict::Intact {
        records: last + 1 - first,
        first,
        head: Head {
            seq: last,
            hash: prev,
        },
    })
}
