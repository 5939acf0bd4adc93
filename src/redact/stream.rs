//! The stream gate: screens a text stream chunk by chunk, holding back the tail that could
//! still be the start of a secret, so a secret split across chunks (at any byte) is caught and
//! no emitted chunk ever completes one.
//!
//! Per stream the gate keeps the text it has not emitted yet (`held`) and a little of the text
//! it has (`context`, so a label such as `password:` that was emitted still gives meaning to a
//! value that arrives later). Each chunk is appended to `held`, and `context + held` is
//! scanned. What is emitted ends at a cut that:
//! - leaves at least [`HOLD`] bytes held (every bounded detector's match is shorter);
//! - falls at a separator (whitespace), so a long token (a JWT, an entropy token) is held
//!   whole until the text after it arrives;
//! - never falls inside a finding: a finding that reaches past the cut (a private key whose
//!   end has not arrived) moves the cut to its start.
//!
//! Memory is bounded: a stream holding more than [`MAX_HOLD`] bytes is cut regardless, and
//! then a finding that reaches past the cut is masked up to it (fail closed). Streams live in
//! [`Streams`], keyed by principal and stream id, with a cap on their number and an idle
//! expiry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{Action, Finding, Gate, Gates, Redactor, Violation};

/// Bytes always held back from the end of the text.
pub const HOLD: usize = 256;
/// A stream never holds more than this: past it, the cut is forced.
pub const MAX_HOLD: usize = 64 * 1024;
/// Emitted text kept as left context for the next scan.
const CONTEXT: usize = 128;
/// Largest chunk one request may carry.
pub const MAX_CHUNK: usize = 1024 * 1024;

/// One stream's state.
#[derive(Debug, Default)]
pub struct StreamState {
    /// The tail of the emitted text (raw), at most [`CONTEXT`] bytes.
    context: String,
    /// Received, not yet emitted (raw).
    held: String,
    /// Bytes emitted so far: the stream offset of `held`'s first byte.
    emitted: usize,
    /// Whether a chunk was blocked (the stream is closed for good).
    blocked: bool,
    /// Last use, unix ms (for expiry).
    last_ms: u64,
}

/// The gate's answer to one chunk.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ChunkScreened {
    /// The most severe action among the violations in the emitted text.
    pub decision: Action,
    /// The text to pass on now, masked (empty on block).
    pub content: String,
    /// Violations in the emitted text; spans are byte offsets in the whole stream.
    pub violations: Vec<Violation>,
    /// How many violations there were in all.
    pub found: usize,
    /// Bytes received but held back until more text (or the final chunk) arrives.
    pub held: usize,
    /// Whether the stream is finished: its final chunk, or a block.
    pub closed: bool,
}

/// Why a chunk was refused before it was screened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// Too many open streams (in all, or for this principal).
    #[error("too many open streams (at most {0}); finish streams with `\"final\": true`")]
    TooMany(usize),
    /// The stream was blocked earlier.
    #[error("this stream was blocked by an earlier chunk; start a new stream")]
    Blocked,
}

/// Where to cut `held` (scanned as `scan_text[base..]`, `found` in `scan_text` offsets),
/// holding back at least `hold` bytes, and whether the cut was forced.
fn safe_cut(held: &str, base: usize, found: &[Finding], hold: usize) -> (usize, bool) {
    if held.len() <= hold {
        return (0, false);
    }
    let limit = held.floor_char_boundary(held.len() - hold);
    // The whitespace run at or before the limit: cut at its start, so the run is held with
    // what follows it and a label just before it stays in the context (labels and values may
    // be separated by any amount of whitespace).
    let head = held.get(..limit).unwrap_or("");
    let mut cut = head
        .rfind(|c: char| c.is_ascii_whitespace())
        .map_or(0, |i| {
            head.get(..i)
                .and_then(|h| h.rfind(|c: char| !c.is_ascii_whitespace()))
                .map_or(0, |j| j + 1)
        });
    if let Some(f) = found
        .iter()
        .find(|f| f.start < base + cut && f.end > base + cut)
    {
        cut = f.start.saturating_sub(base);
    }
    // Whatever stays held is bounded: past MAX_HOLD the cut is forced to the limit.
    if held.len() - cut > MAX_HOLD {
        return (limit, true);
    }
    (cut, false)
}

impl Gates {
    /// Screens the next chunk of a stream. `last` flushes everything held.
    pub fn screen_chunk(
        &self,
        state: &mut StreamState,
        chunk: &str,
        last: bool,
    ) -> Result<ChunkScreened, StreamError> {
        if state.blocked {
            return Err(StreamError::Blocked);
        }
        let rules = self.rules_for(Gate::Stream);
        let hide = |f: &Finding| rules.action(f.kind, f.category) >= Action::Mask;
        state.held.push_str(chunk);
        let base = state.context.len();
        let text = format!("{}{}", state.context, state.held);
        let found = self.redactor().scan(&text);
        let (cut, forced) = if last {
            (state.held.len(), false)
        } else {
            safe_cut(
                &state.held,
                base,
                &found,
                HOLD.max(self.redactor().longest_known() + 1),
            )
        };
        let end = base + cut;
        // Findings in the emitted part: clipped to it (a forced cut masks a finding's head),
        // and to the held text (what lies in the context was emitted already).
        let emitted: Vec<Finding> = found
            .into_iter()
            .filter(|f| f.end > base && f.start < end && (f.end <= end || forced || last))
            .map(|f| Finding {
                start: f.start.max(base),
                end: f.end.min(end),
                ..f
            })
            .collect();
        let offset = state.emitted.saturating_sub(base);
        let (decision, violations, found) = super::gates::verdict(
            emitted
                .iter()
                .map(|f| Violation {
                    kind: f.kind,
                    category: f.category,
                    action: rules.action(f.kind, f.category),
                    path: None,
                    span: Some([f.start + offset, f.end + offset]),
                    in_key: false,
                })
                .collect(),
        );
        let out = text.get(..end).unwrap_or("");
        let masked = Redactor::mask(out, &emitted, hide);
        let content = masked
            .get(base.min(masked.len())..)
            .unwrap_or("")
            .to_owned();
        // Keep the tail of the emitted raw text as context.
        let ctx_from = out.floor_char_boundary(out.len().saturating_sub(CONTEXT));
        state.context = out.get(ctx_from..).unwrap_or("").to_owned();
        state.held = text.get(end..).unwrap_or("").to_owned();
        state.emitted += cut;
        if decision == Action::Block {
            state.blocked = true;
            state.held.clear();
            state.context.clear();
            return Ok(ChunkScreened {
                decision,
                content: String::new(),
                violations,
                found,
                held: 0,
                closed: true,
            });
        }
        Ok(ChunkScreened {
            decision,
            content,
            violations,
            found,
            held: state.held.len(),
            closed: last,
        })
    }
}

/// A stream's state, shared between the table and the request screening its chunk.
pub type StreamSlot = Arc<Mutex<StreamState>>;

/// Open streams, by (principal, stream id).
#[derive(Debug)]
pub struct Streams {
    open: Mutex<HashMap<(String, String), StreamSlot>>,
    max_streams: usize,
    per_principal: usize,
    idle_ms: u64,
}

impl Streams {
    /// At most `max_streams` open at once, `per_principal` of them for one principal; a
    /// stream idle for `idle_ms` is dropped when room is needed.
    pub fn new(max_streams: usize, per_principal: usize, idle_ms: u64) -> Streams {
        Streams {
            open: Mutex::new(HashMap::new()),
            max_streams,
            per_principal,
            idle_ms,
        }
    }

    /// The state of `principal`'s stream `id`, opened if new. Expired streams are dropped
    /// first when the table is full.
    pub fn get(&self, principal: &str, id: &str, now_ms: u64) -> Result<StreamSlot, StreamError> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let key = (principal.to_owned(), id.to_owned());
        if let Some(s) = open.get(&key) {
            return Ok(Arc::clone(s));
        }
        let mine = open.keys().filter(|(p, _)| p == principal).count();
        if mine >= self.per_principal {
            return Err(StreamError::TooMany(self.per_principal));
        }
        if open.len() >= self.max_streams {
            let idle = self.idle_ms;
            // A stream in use (locked) is kept; only idle ones go.
            open.retain(|_, s| {
                s.try_lock()
                    .map(|s| now_ms.saturating_sub(s.last_ms) < idle)
                    .unwrap_or(true)
            });
            if open.len() >= self.max_streams {
                return Err(StreamError::TooMany(self.max_streams));
            }
        }
        let state = Arc::new(Mutex::new(StreamState {
            last_ms: now_ms,
            ..StreamState::default()
        }));
        open.insert(key, Arc::clone(&state));
        Ok(state)
    }

    /// Forgets a finished stream (a blocked one stays, so later chunks are refused, until it
    /// expires).
    pub fn finish(&self, principal: &str, id: &str) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.remove(&(principal.to_owned(), id.to_owned()));
    }

    /// Open streams.
    pub fn len(&self) -> usize {
        self.open.lock().map(|o| o.len()).unwrap_or(0)
    }

    /// Whether no stream is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl StreamState {
    /// Marks the state used at `now_ms`.
    pub fn touch(&mut self, now_ms: u64) {
        self.last_ms = now_ms;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(gates: &Gates, chunks: &[&str]) -> String {
        let mut state = StreamState::default();
        let mut out = String::new();
        for (i, c) in chunks.iter().enumerate() {
            let r = gates
                .screen_chunk(&mut state, c, i + 1 == chunks.len())
                .unwrap();
            out.push_str(&r.content);
        }
        out
    }

    #[test]
    fn a_secret_split_at_every_byte_is_masked() {
        let gates = Gates::builtin().unwrap();
        let filler = "the quick brown fox jumps over the lazy dog ".repeat(12);
        let secret = "AKIAQWERTYUIOPASDFGH";
        let text = format!("{filler}key {secret} then {filler}");
        let whole = run(&gates, &[&text]);
        assert!(whole.contains("<redacted:aws-access-key>"));
        for i in 0..=text.len() {
            let (a, b) = text.split_at(i);
            let out = run(&gates, &[a, b]);
            assert_eq!(out, whole, "split at {i}");
        }
        // Byte-sized chunks.
        let bytes: Vec<String> = text.chars().map(String::from).collect();
        let refs: Vec<&str> = bytes.iter().map(String::as_str).collect();
        assert_eq!(run(&gates, &refs), whole);
    }

    #[test]
    fn a_label_emitted_earlier_still_marks_its_value() {
        let gates = Gates::builtin().unwrap();
        let filler = "word ".repeat(80);
        let text = format!("{filler}password: hunter22xyz {filler}");
        let whole = run(&gates, &[&text]);
        assert!(whole.contains("<redacted:password-assignment>"), "{whole}");
        for i in 0..=text.len() {
            let (a, b) = text.split_at(i);
            assert_eq!(run(&gates, &[a, b]), whole, "split at {i}");
        }
    }

    #[test]
    fn whitespace_between_label_and_value_is_held_and_held_text_is_bounded() {
        let gates = Gates::builtin().unwrap();
        let spaces = " ".repeat(500);
        let text = format!("password:{spaces}hunter22xyz done");
        let whole = run(&gates, &[&text]);
        assert!(whole.contains("<redacted:password-assignment>"), "{whole}");
        let split = format!("password:{spaces}");
        assert_eq!(run(&gates, &[&split, "hunter22xyz done"]), whole);
        // A space early, then a long run: still bounded.
        let mut state = StreamState::default();
        let r = gates
            .screen_chunk(
                &mut state,
                &format!("x {}", "A".repeat(3 * MAX_HOLD)),
                false,
            )
            .unwrap();
        assert!(r.held <= MAX_HOLD, "{}", r.held);
    }

    #[test]
    fn a_long_run_is_held_and_memory_is_bounded() {
        let gates = Gates::builtin().unwrap();
        let mut state = StreamState::default();
        let r = gates
            .screen_chunk(&mut state, &"a".repeat(1000), false)
            .unwrap();
        assert_eq!((r.content.len(), r.held), (0, 1000));
        let r = gates
            .screen_chunk(&mut state, &"b".repeat(MAX_HOLD), false)
            .unwrap();
        assert!(r.held <= HOLD + 4 && !r.content.is_empty());
    }
}
