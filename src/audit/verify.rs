//! Walks the chain and names the first broken link: a changed byte, a deleted, reordered or
//! replaced record, or (given a head exported earlier) a truncated tail.

use serde::Serialize;

use super::record::{Chain, GENESIS};
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
    let mut expected_seq = 1u64;
    let mut prev = GENESIS.to_owned();
    let mut anchored = anchor.is_none_or(|a| a.seq == 0);
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
            prev = r.hash;
            expected_seq += 1;
        }
        if last_key == u64::MAX {
            break;
        }
    }
    let records = expected_seq - 1;
    if !anchored && let Some(a) = anchor {
        return Ok(Verdict::Broken {
            seq: records + 1,
            why: format!(
                "the log ends at record {records} but the exported head is record {}: truncated",
                a.seq
            ),
        });
    }
    Ok(Verdict::Intact {
        records,
        head: Head {
            seq: records,
            hash: prev,
        },
    })
}
