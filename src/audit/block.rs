//! How the log is laid out in sled: the keys of blocks and index entries, a block's
//! encoding (JSON lines, deflated when large), the index postings of a batch, and the
//! batches the applier merges into one block.

use std::collections::BTreeMap;

use super::apply;
use super::error::StoreError;
use super::record::{Entry, Record};

/// Most records one block (one append) holds: offsets within a block are u16.
pub(super) const MAX_BLOCK: usize = 4096;

/// The first byte of a block stored deflated. Blocks written before compression are bare JSON
/// lines, whose first byte is `{`, so both read back.
pub(super) const DEFLATED: u8 = 0x01;
/// Fastest deflate level: a batch's records share most of their bytes (field names, the
/// principal, the tool, each record's `prev` is the line before's `hash`), so even level 1
/// stores a busy batch in about a fifth of its JSON, at a few µs per record.
pub(super) const DEFLATE_LEVEL: u8 = 1;
/// Largest a stored block may inflate to: far above [`MAX_BLOCK`] real records, and a planted
/// block cannot make a reader allocate without bound.
pub(super) const MAX_INFLATED: usize = 256 * 1024 * 1024;

pub(super) const LOG: u8 = b'L';
pub(super) const INDEX: u8 = b'I';

pub(super) fn log_key(seq: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = LOG;
    k[1..].copy_from_slice(&seq.to_be_bytes());
    k
}

pub(super) fn index_prefix(field: &str, value: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(field.len() + value.len() + 11);
    k.push(INDEX);
    k.extend_from_slice(field.as_bytes());
    k.push(0);
    k.extend_from_slice(value.as_bytes());
    k.push(0);
    k
}

pub(super) fn seq_of(key: &[u8]) -> Option<u64> {
    let tail: [u8; 8] = key.get(key.len().checked_sub(8)?..)?.try_into().ok()?;
    Some(u64::from_be_bytes(tail))
}

/// The indexed fields, most selective first (a query walks the first one it constrains).
pub(super) const INDEXED: [&str; 6] = [
    "conv_id",
    "trace_id",
    "principal",
    "tool",
    "stage",
    "decision",
];

/// An entry's values for [`INDEXED`], in that order.
pub(super) fn indexed(e: &Entry) -> [Option<&str>; 6] {
    [
        e.conv_id.as_deref(),
        e.trace_id.as_deref(),
        e.principal.as_deref(),
        e.tool.as_deref(),
        e.stage.as_deref(),
        Some(e.decision.as_str()),
    ]
}

/// One decoded block: its first sequence number and its records in order.
pub(super) struct Block {
    pub(super) first: u64,
    pub(super) records: Vec<Result<Record, String>>,
}

impl Block {
    pub(super) fn decode(key: &[u8], bytes: &[u8]) -> Block {
        let first = seq_of(key).unwrap_or(0);
        let inflated;
        let lines = match bytes.split_first() {
            Some((&DEFLATED, deflated)) => {
                match miniz_oxide::inflate::decompress_to_vec_with_limit(deflated, MAX_INFLATED) {
                    Ok(v) => {
                        inflated = v;
                        inflated.as_slice()
                    }
                    Err(e) => {
                        return Block {
                            first,
                            records: vec![Err(format!("its block does not inflate ({e})"))],
                        };
                    }
                }
            }
            // Blocks written before compression: JSON lines as they are.
            _ => bytes,
        };
        let records = lines
            .split(|b| *b == b'\n')
            .map(|line| serde_json::from_slice(line).map_err(|e| e.to_string()))
            .collect();
        Block { first, records }
    }

    /// The stored position of the record at `i`.
    pub(super) fn position(&self, i: usize) -> u64 {
        self.first.saturating_add(i as u64)
    }
}

/// The records of `batch` as one block value: one JSON record per line, deflated after the
/// [`DEFLATED`] tag byte when they are at least [`COMPRESS_FROM`] bytes.
pub(super) fn encode_block(batch: &[Record]) -> Result<Vec<u8>, StoreError> {
    let mut lines = Vec::with_capacity(batch.len() * 640);
    for (i, r) in batch.iter().enumerate() {
        if i > 0 {
            lines.push(b'\n');
        }
        serde_json::to_writer(&mut lines, r).map_err(|e| StoreError(e.to_string()))?;
    }
    // A small batch (the one record of a quiet moment) is stored as it is: compressing it
    // saves a few hundred bytes but costs about 0.1 ms on the durable path, which each caller
    // of a quiet sidecar waits for. Busy batches, where the bytes add up, are deflated.
    if lines.len() < COMPRESS_FROM {
        return Ok(lines);
    }
    let mut out = vec![DEFLATED];
    deflate_into(&lines, &mut out)?;
    Ok(out)
}

/// Batches whose JSON lines are at least this long are stored deflated.
pub(super) const COMPRESS_FROM: usize = 4096;

/// Raw deflate of `input` at [`DEFLATE_LEVEL`], appended to `out` (what
/// `miniz_oxide::deflate::compress_to_vec` makes), with the compressor kept per thread: a new
/// one is a few hundred KiB to allocate and zero, which cost more than compressing a small
/// batch.
pub(super) fn deflate_into(mut input: &[u8], out: &mut Vec<u8>) -> Result<(), StoreError> {
    use miniz_oxide::deflate::core::{
        CompressorOxide, TDEFLFlush, TDEFLStatus, compress, create_comp_flags_from_zip_params,
    };
    thread_local! {
        static COMPRESSOR: std::cell::RefCell<Option<Box<CompressorOxide>>> =
            const { std::cell::RefCell::new(None) };
    }
    COMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let compressor = slot.get_or_insert_with(|| {
            Box::new(CompressorOxide::new(create_comp_flags_from_zip_params(
                DEFLATE_LEVEL.into(),
                0,
                0,
            )))
        });
        compressor.reset();
        let start = out.len();
        out.resize(start + (input.len() / 2).max(64), 0);
        let mut at = start;
        loop {
            let (status, used, wrote) = compress(
                compressor,
                input,
                out.get_mut(at..).unwrap_or_default(),
                TDEFLFlush::Finish,
            );
            at += wrote;
            match status {
                TDEFLStatus::Done => {
                    out.truncate(at);
                    return Ok(());
                }
                TDEFLStatus::Okay if used <= input.len() => {
                    input = input.get(used..).unwrap_or_default();
                    if out.len().saturating_sub(at) < 64 {
                        let grown = out.len() * 2;
                        out.resize(grown, 0);
                    }
                }
                other => {
                    return Err(StoreError(format!(
                        "the audit block could not be compressed ({other:?})"
                    )));
                }
            }
        }
    })
}

/// Keys and values for sled, in the order they are inserted.
pub(super) type Puts = Vec<(Vec<u8>, Vec<u8>)>;

/// A batch as the applier takes it: its block (raw JSON lines, which may be merged with its
/// neighbours', or deflated, stored as it is), and its index keys (field and value) with
/// the offsets of the records that carry them.
pub(super) struct BlockWork {
    pub(super) first: u64,
    pub(super) last: u64,
    pub(super) count: usize,
    pub(super) block: Vec<u8>,
    pub(super) index: Vec<(Vec<u8>, Vec<u16>)>,
}

impl apply::Batch for BlockWork {
    fn last(&self) -> u64 {
        self.last
    }
    fn records(&self) -> usize {
        self.count
    }
}

pub(super) fn block_work(first: u64, block: Vec<u8>, batch: &[Record]) -> BlockWork {
    let index = postings(batch)
        .into_iter()
        .map(|((field, value), offsets)| {
            let offsets = offsets
                .chunks_exact(2)
                .filter_map(|b| <[u8; 2]>::try_from(b).ok().map(u16::from_be_bytes))
                .collect();
            (index_prefix(field, value), offsets)
        })
        .collect();
    BlockWork {
        first,
        last: batch.last().map_or(first, |r| r.seq),
        count: batch.len(),
        block,
        index,
    }
}

/// The sled entries of `group` (consecutive batches) stored as one block: its index
/// entries, then the block, in the order they are inserted (sled recovers a prefix of its
/// writes, so a block it recovers has its index entries).
pub(super) fn group_puts(group: Vec<BlockWork>) -> Result<Puts, StoreError> {
    let first = group.first().map_or(0, |w| w.first);
    let mut index: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut base = 0u16;
    let merged = group.len() > 1;
    let mut lines = Vec::new();
    let mut single = None;
    for w in group {
        for (prefix, offsets) in w.index {
            let slot = index.entry(prefix).or_default();
            for o in offsets {
                slot.extend_from_slice(&o.saturating_add(base).to_be_bytes());
            }
        }
        base = base.saturating_add(u16::try_from(w.count).unwrap_or(u16::MAX));
        if merged {
            if !lines.is_empty() {
                lines.push(b'\n');
            }
            lines.extend_from_slice(&w.block);
        } else {
            single = Some(w.block);
        }
    }
    let block = match single {
        Some(block) => block,
        None if lines.len() < COMPRESS_FROM => lines,
        None => {
            let mut out = vec![DEFLATED];
            deflate_into(&lines, &mut out)?;
            out
        }
    };
    let mut puts: Puts = index
        .into_iter()
        .map(|(mut k, v)| {
            k.extend_from_slice(&first.to_be_bytes());
            (k, v)
        })
        .collect();
    puts.push((log_key(first).to_vec(), block));
    Ok(puts)
}

pub(super) fn postings(batch: &[Record]) -> BTreeMap<(&'static str, &str), Vec<u8>> {
    let mut out: BTreeMap<(&'static str, &str), Vec<u8>> = BTreeMap::new();
    for (offset, r) in batch.iter().enumerate() {
        let offset = u16::try_from(offset).unwrap_or(u16::MAX);
        for (field, value) in INDEXED.iter().zip(indexed(&r.entry)) {
            if let Some(value) = value {
                out.entry((field, value))
                    .or_default()
                    .extend_from_slice(&offset.to_be_bytes());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    /// The reused compressor makes what a fresh one makes, batch after batch.
    #[test]
    fn the_kept_compressor_deflates_as_a_new_one() {
        let inputs: Vec<Vec<u8>> = vec![
            Vec::new(),
            b"{\"a\":1}".to_vec(),
            (0..20_000u32)
                .flat_map(|i| (i % 251).to_le_bytes())
                .collect(),
            br#"{"kind":"decision","principal":"Agent::\"x\""}"#.repeat(300),
        ];
        for input in inputs.iter().chain(inputs.iter()) {
            let mut out = Vec::new();
            super::deflate_into(input, &mut out).unwrap();
            assert_eq!(
                out,
                miniz_oxide::deflate::compress_to_vec(input, super::DEFLATE_LEVEL)
            );
        }
    }
}
