//! Every detector's matches in one scan whose cost is linear in the text, whatever the
//! density of findings, and whose memory is returned when the scan ends.
//!
//! One `RegexSet` over every detector used to say which could match. Its lazy DFA is the
//! product of ~110 patterns: text dense with secrets made it build new states at almost every
//! byte (3 MB/s), and after three cache clears within one cache's life it gave up for good, so
//! the pooled cache stayed slow (and kept its memory) for every later text. Now:
//!
//! - **Triggers.** Most detectors begin with one of a few literals (`ghp_`, `AKIA`,
//!   `password`, …, extracted from the pattern by `regex-syntax`). One Aho-Corasick pass,
//!   ASCII case-insensitive, finds every place any of them starts.
//! - **Anchored checks.** At each such place, the detector's own lazy DFA runs anchored, byte
//!   by byte, until it dies: the match (the leftmost-first one `find_iter` would give) or
//!   nothing. Every byte stepped is counted; past [`WALK_PER_BYTE`] steps per byte of text,
//!   the detectors left search the rest of the text once each, linearly.
//! - **Required literals.** A detector checked at many places (digit pairs start card and
//!   bot-token patterns) first drops the places with no occurrence of a literal its match must
//!   hold (`:AA` in a Telegram token) close enough after them: one `memmem` pass instead of a
//!   check at each place.
//! - **The rest.** Detectors with no literal to start from (addresses, card numbers, phone
//!   numbers, injection phrasing) run as one small set, then each one that matched.
//! - **Caches are per scan.** Each scan takes a set of caches from a small pool and gives them
//!   back; a cache that grew past [`KEEP_CACHE_BYTES`] is dropped instead, so one dense text
//!   leaves neither a slow nor a large cache behind.

use std::sync::Mutex;

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind as AcMatchKind};
use regex_automata::hybrid::dfa::{Cache as DfaCache, DFA};
use regex_automata::meta::{Cache as MetaCache, Regex as MetaRegex};
use regex_automata::util::syntax;
use regex_automata::{Anchored, Input, MatchKind, PatternSet};
use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::{Capture, Class, Hir, HirKind, Look, Repetition};

use super::RedactError;

/// DFA steps the anchored checks of one scan may take per byte of text (plus
/// [`WALK_FLOOR`]); past that, each detector still to run searches the text linearly.
pub(super) const WALK_PER_BYTE: usize = 8;
/// Steps any scan may take, however short its text.
const WALK_FLOOR: usize = 64 * 1024;
/// A cache bigger than this after a scan is dropped, not pooled.
pub(super) const KEEP_CACHE_BYTES: usize = 256 * 1024;
/// The rest's cache is kept up to this size: a cold one costs a small text more than its scan.
const KEEP_REST_BYTES: usize = 2 << 20;
/// A scan's caches together are kept up to this size.
const KEEP_SCRATCH_BYTES: usize = 8 << 20;
/// Scans' cache sets kept for reuse.
const POOLED: usize = 8;
/// Trigger literals a detector may have; more, and it runs with the rest.
const MAX_TRIGGERS: usize = 1024;
/// Longest match a detector may have to be checked by a bounded search (longer ones walk).
const MAX_BOUNDED: usize = 512;
/// Largest fixed offset of a trigger from the start of its match.
const MAX_TRIGGER_OFFSET: usize = 64;
/// Places one detector is checked at, per byte of text (1 in this many); past it, the
/// detector searches linearly from its first place.
const PLACES_PER: usize = 16;
/// Places from which a detector's required literal is looked for before checking them (below,
/// the checks cost less than the search).
const FILTER_FROM: usize = 32;
/// Bytes of the lazy DFA cache of one detector, and of the set of the rest.
const DFA_CACHE: usize = 2 << 20;

/// Where a detector's match starts, before a trigger literal found at `p`: at `p - fixed`,
/// or, for a pattern `\b(?:X)?…` whose optional lead `X` is at most `optional` bytes long, at
/// any word boundary in `p - fixed - optional .. p - fixed` as well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lead {
    fixed: usize,
    optional: usize,
}

/// One match: where the whole match starts, and the span of the part reported (the whole
/// match, or the detector's capture group).
pub(super) type Span = (usize, usize, usize);

/// One detector, compiled for the scan.
struct Detector {
    /// Anchored checks; `None` when the lazy DFA cannot be built (a Unicode word boundary):
    /// the detector then always searches linearly.
    dfa: Option<DFA>,
    /// Spans, capture groups and linear searches.
    meta: MetaRegex,
    /// Capture group reported (0: the whole match).
    group: usize,
    /// The longest match, when it is short enough to check by searching that far.
    max_len: Option<usize>,
    /// Every match starts at an ASCII word boundary (`\b…`): a place inside a word is
    /// skipped before any check.
    word_start: bool,
    /// A literal every match holds, past its trigger: a place with no occurrence of it
    /// within the longest match after it cannot match.
    required: Option<memchr::memmem::Finder<'static>>,
}

/// The compiled detectors of a [`super::Redactor`].
pub(super) struct Searcher {
    detectors: Vec<Detector>,
    /// Every detector's trigger literals, lower-cased.
    triggers: Option<AhoCorasick>,
    /// Trigger literal → the detectors it starts, and where each detector's match starts
    /// before the literal.
    trigger_rows: Vec<Vec<(usize, Lead)>>,
    /// Detectors without triggers, as one set (`MatchKind::All`).
    rest: Option<MetaRegex>,
    /// Set pattern → detector.
    rest_rows: Vec<usize>,
    pool: Mutex<Vec<Scratch>>,
}

/// Caches and buffers of one scan.
struct Scratch {
    dfa: Vec<Option<DfaCache>>,
    meta: Vec<Option<MetaCache>>,
    rest: Option<MetaCache>,
    places: Vec<Vec<usize>>,
}

fn syntax_config() -> syntax::Config {
    syntax::Config::new().unicode(false).utf8(false)
}

/// Where every match of a pattern can be found from: the literals (ASCII lower-cased) that
/// every match has at a known distance from its start, if there are few enough, each at least
/// 2 bytes long. The distance is 0 for a literal prefix (`ghp_…`); a pattern that starts with
/// a fixed number of class characters is found by what follows them (`[0-9a-f]{32}-us`); a
/// pattern that starts at a word boundary with an optional qualifier (`\b(?:api_)?token…`,
/// too many literals with it) is found by what follows the qualifier.
fn trigger_literals(hir: &Hir) -> Option<(Vec<Vec<u8>>, Lead)> {
    let parts: Vec<Hir> = match hir.kind() {
        HirKind::Concat(parts) => parts.clone(),
        _ => vec![hir.clone()],
    };
    let tail = |k: usize| fold_case(&Hir::concat(parts.get(k..).unwrap_or_default().to_vec()));
    let mut fixed = 0;
    for (k, part) in parts.iter().enumerate() {
        if let Some(lits) = literals_of(&tail(k)) {
            return Some((lits, Lead { fixed, optional: 0 }));
        }
        let props = part.properties();
        match (props.minimum_len(), props.maximum_len()) {
            (Some(min), Some(max)) if min == max && fixed + min <= MAX_TRIGGER_OFFSET => {
                fixed += min;
            }
            // Only right after the leading `\b`: a place is then a word boundary.
            (Some(0), Some(max))
                if k == 1
                    && fixed == 0
                    && max <= MAX_TRIGGER_OFFSET
                    && starts_at_word_boundary(hir) =>
            {
                let lits = literals_of(&tail(k + 1))?;
                return Some((
                    lits,
                    Lead {
                        fixed,
                        optional: max,
                    },
                ));
            }
            _ => return None,
        }
    }
    None
}

/// `pattern` as the detectors' syntax reads it (bytes, no Unicode classes).
fn parse(pattern: &str) -> Option<Hir> {
    regex_syntax::ParserBuilder::new()
        .unicode(false)
        .utf8(false)
        .build()
        .parse(pattern)
        .ok()
}

/// Whether the pattern begins with `\b` (so its first byte is a word byte after a non-word one).
fn starts_at_word_boundary(hir: &Hir) -> bool {
    let first = match hir.kind() {
        HirKind::Concat(parts) => parts.first(),
        _ => Some(hir),
    };
    first.is_some_and(|h| matches!(h.kind(), HirKind::Look(Look::WordAscii)))
}

/// The longest literal (at least 3 bytes) that every match of `hir` holds, as it is written
/// (case-sensitive): a literal part of a concatenation, looked for inside groups and
/// repetitions that occur at least once.
fn required_literal(hir: &Hir) -> Option<Vec<u8>> {
    let found = match hir.kind() {
        HirKind::Literal(lit) => Some(lit.0.to_vec()),
        HirKind::Capture(c) => required_literal(&c.sub),
        HirKind::Repetition(r) if r.min >= 1 => required_literal(&r.sub),
        HirKind::Concat(parts) => parts
            .iter()
            .filter_map(required_literal)
            .max_by_key(Vec::len),
        _ => None,
    };
    found.filter(|l| l.len() >= 3)
}

/// `hir` with every class that is one ASCII letter in either case (`(?i)`) made that letter
/// in lower case: the triggers are matched case-insensitively anyway, and without the case
/// pairs a case-insensitive label is a handful of literals instead of too many to keep.
fn fold_case(hir: &Hir) -> Hir {
    match hir.kind() {
        HirKind::Class(Class::Bytes(class)) => match class.ranges() {
            [a, b]
                if a.start() == a.end()
                    && b.start() == b.end()
                    && a.start().is_ascii_uppercase()
                    && a.start().to_ascii_lowercase() == b.start() =>
            {
                Hir::literal([b.start()])
            }
            _ => hir.clone(),
        },
        HirKind::Concat(parts) => Hir::concat(parts.iter().map(fold_case).collect()),
        HirKind::Alternation(parts) => Hir::alternation(parts.iter().map(fold_case).collect()),
        HirKind::Repetition(r) => Hir::repetition(Repetition {
            sub: Box::new(fold_case(&r.sub)),
            ..r.clone()
        }),
        HirKind::Capture(c) => Hir::capture(Capture {
            sub: Box::new(fold_case(&c.sub)),
            ..c.clone()
        }),
        _ => hir.clone(),
    }
}

/// The prefix literals of `hir`, when they are usable as triggers: the extractor's own
/// limits first (it shortens literals to keep their number down), then wider ones.
fn literals_of(hir: &Hir) -> Option<Vec<Vec<u8>>> {
    [250, 4 * MAX_TRIGGERS].into_iter().find_map(|limit| {
        let mut extractor = Extractor::new();
        extractor.kind(ExtractKind::Prefix).limit_total(limit);
        let seq = extractor.extract(hir);
        let mut lits: Vec<Vec<u8>> = seq
            .literals()?
            .iter()
            .map(|l| l.as_bytes().to_ascii_lowercase())
            .collect();
        lits.sort();
        lits.dedup();
        (!lits.is_empty() && lits.len() <= MAX_TRIGGERS && lits.iter().all(|l| l.len() >= 2))
            .then_some(lits)
    })
}

impl Searcher {
    /// Compiles `patterns` (detector pattern, capture group reported), in row order.
    pub(super) fn new(patterns: &[(&str, usize)]) -> Result<Searcher, RedactError> {
        let mut detectors = Vec::with_capacity(patterns.len());
        let mut literals: Vec<Vec<u8>> = Vec::new();
        let mut trigger_rows: Vec<Vec<(usize, Lead)>> = Vec::new();
        let mut rest_sources: Vec<&str> = Vec::new();
        let mut rest_rows = Vec::new();
        for (row, (pattern, group)) in patterns.iter().enumerate() {
            let meta = MetaRegex::builder()
                .syntax(syntax_config())
                .configure(
                    MetaRegex::config()
                        .nfa_size_limit(Some(4 << 20))
                        .hybrid_cache_capacity(DFA_CACHE),
                )
                .build(pattern)
                .map_err(|e| RedactError(format!("pattern `{pattern}`: {e}")))?;
            let dfa = DFA::builder()
                .configure(
                    DFA::config()
                        .match_kind(MatchKind::LeftmostFirst)
                        .cache_capacity(DFA_CACHE)
                        .minimum_cache_clear_count(None),
                )
                .syntax(syntax_config())
                .thompson(
                    regex_automata::nfa::thompson::Config::new().nfa_size_limit(Some(4 << 20)),
                )
                .build(pattern)
                .ok();
            let hir = parse(pattern);
            let mut required = None;
            match hir
                .as_ref()
                .and_then(trigger_literals)
                .filter(|_| dfa.is_some())
            {
                Some((lits, lead)) => {
                    // Only a literal other than a trigger says more than the trigger did.
                    required = hir
                        .as_ref()
                        .and_then(required_literal)
                        .filter(|r| {
                            let low = r.to_ascii_lowercase();
                            !lits
                                .iter()
                                .any(|l| low.starts_with(l) || l.starts_with(&low))
                        })
                        .map(|r| memchr::memmem::Finder::new(&r).into_owned());
                    for lit in lits {
                        match literals.iter().position(|l| *l == lit) {
                            Some(at) => {
                                if let Some(rows) = trigger_rows.get_mut(at) {
                                    rows.push((row, lead));
                                }
                            }
                            None => {
                                literals.push(lit);
                                trigger_rows.push(vec![(row, lead)]);
                            }
                        }
                    }
                }
                None => {
                    rest_sources.push(pattern);
                    rest_rows.push(row);
                }
            }
            detectors.push(Detector {
                dfa,
                meta,
                group: *group,
                word_start: hir.as_ref().is_some_and(starts_at_word_boundary),
                required,
                max_len: hir
                    .as_ref()
                    .and_then(|h| h.properties().maximum_len())
                    .filter(|m| *m <= MAX_BOUNDED),
            });
        }
        let triggers = if literals.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .ascii_case_insensitive(true)
                    .match_kind(AcMatchKind::Standard)
                    .kind(Some(AhoCorasickKind::DFA))
                    .build(&literals)
                    .map_err(|e| RedactError(format!("trigger literals: {e}")))?,
            )
        };
        let rest = if rest_sources.is_empty() {
            None
        } else {
            Some(
                MetaRegex::builder()
                    .syntax(syntax_config())
                    .configure(
                        MetaRegex::config()
                            .match_kind(MatchKind::All)
                            .nfa_size_limit(Some(16 << 20))
                            .hybrid_cache_capacity(DFA_CACHE),
                    )
                    .build_many(&rest_sources)
                    .map_err(|e| RedactError(format!("detectors: {e}")))?,
            )
        };
        Ok(Searcher {
            detectors,
            triggers,
            trigger_rows,
            rest,
            rest_rows,
            pool: Mutex::new(Vec::new()),
        })
    }

    /// Rows searched as one set, without triggers.
    #[cfg(test)]
    pub(super) fn untriggered(&self) -> &[usize] {
        &self.rest_rows
    }

    fn take(&self) -> Scratch {
        let pooled = self
            .pool
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        pooled.unwrap_or_else(|| Scratch {
            dfa: (0..self.detectors.len()).map(|_| None).collect(),
            meta: (0..self.detectors.len()).map(|_| None).collect(),
            rest: None,
            places: vec![Vec::new(); self.detectors.len()],
        })
    }

    /// Returns `scratch` to the pool, without the caches and buffers that grew large.
    fn give_back(&self, mut scratch: Scratch) {
        for c in &mut scratch.dfa {
            if c.as_ref()
                .is_some_and(|c| c.memory_usage() > KEEP_CACHE_BYTES)
            {
                *c = None;
            }
        }
        for c in &mut scratch.meta {
            if c.as_ref()
                .is_some_and(|c| c.memory_usage() > KEEP_CACHE_BYTES)
            {
                *c = None;
            }
        }
        if scratch
            .rest
            .as_ref()
            .is_some_and(|c| c.memory_usage() > KEEP_REST_BYTES)
        {
            scratch.rest = None;
        }
        let total: usize = scratch
            .dfa
            .iter()
            .flatten()
            .map(DfaCache::memory_usage)
            .sum::<usize>()
            + scratch
                .meta
                .iter()
                .flatten()
                .map(MetaCache::memory_usage)
                .sum::<usize>()
            + scratch.rest.as_ref().map_or(0, MetaCache::memory_usage);
        if total > KEEP_SCRATCH_BYTES {
            return;
        }
        for p in &mut scratch.places {
            p.clear();
            if p.capacity() > KEEP_CACHE_BYTES / 8 {
                *p = Vec::new();
            }
        }
        let mut pool = self
            .pool
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if pool.len() < POOLED {
            pool.push(scratch);
        }
    }

    /// Every match of detector `row` in `text` (as `find_iter` gives them), linearly.
    pub(super) fn find_all(&self, row: usize, text: &[u8]) -> Vec<Span> {
        let Some(d) = self.detectors.get(row) else {
            return Vec::new();
        };
        let mut scratch = self.take();
        let mut out = Vec::new();
        if let Some(cache) = scratch.meta.get_mut(row) {
            let cache = cache.get_or_insert_with(|| d.meta.create_cache());
            linear(d, cache, text, 0, &mut out);
        }
        self.give_back(scratch);
        out
    }

    /// Calls `each` with every detector that matches in `text` and its matches in order
    /// (non-overlapping within a detector, as `find_iter` gives them), detectors in row order.
    pub(super) fn scan(&self, text: &[u8], mut each: impl FnMut(usize, Vec<Span>)) {
        let mut scratch = self.take();
        let n = text.len();
        let cap = n / PLACES_PER + 64;
        // Detectors whose places passed the cap: they search linearly from the first.
        let mut linear_from: Vec<Option<usize>> = vec![None; self.detectors.len()];
        if let Some(ac) = &self.triggers {
            for m in ac.find_overlapping_iter(text) {
                let Some(rows) = self.trigger_rows.get(m.pattern().as_usize()) else {
                    continue;
                };
                for &(row, lead) in rows {
                    let Some(start) = m.start().checked_sub(lead.fixed) else {
                        continue;
                    };
                    let (Some(d), Some(places), Some(lin)) = (
                        self.detectors.get(row),
                        scratch.places.get_mut(row),
                        linear_from.get_mut(row),
                    ) else {
                        continue;
                    };
                    // Inside a word: no `\b…` detector starts here.
                    if !(d.word_start && inside_word(text, start)) {
                        add_place(places, lin, cap, start);
                    }
                    // With its optional lead: at each word boundary that far before.
                    for s in start.saturating_sub(lead.optional)..start {
                        if at_word_boundary(text, s) {
                            add_place(places, lin, cap, s);
                        }
                    }
                }
            }
        }
        let mut rest_hits = vec![false; self.detectors.len()];
        if let Some(rest) = &self.rest {
            let cache = scratch.rest.get_or_insert_with(|| rest.create_cache());
            let mut set = PatternSet::new(rest.pattern_len());
            rest.which_overlapping_matches_with(cache, &Input::new(text), &mut set);
            for p in set.iter() {
                if let Some(hit) = self
                    .rest_rows
                    .get(p.as_usize())
                    .and_then(|&row| rest_hits.get_mut(row))
                {
                    *hit = true;
                }
            }
        }
        let mut walk_left = WALK_PER_BYTE.saturating_mul(n).saturating_add(WALK_FLOOR);
        for (row, d) in self.detectors.iter().enumerate() {
            let (Some(places), Some(meta_cache), Some(dfa_cache)) = (
                scratch.places.get_mut(row),
                scratch.meta.get_mut(row),
                scratch.dfa.get_mut(row),
            ) else {
                continue;
            };
            let mut found = Vec::new();
            let from = linear_from.get(row).copied().flatten();
            if rest_hits.get(row).copied().unwrap_or(false) {
                let cache = meta_cache.get_or_insert_with(|| d.meta.create_cache());
                linear(d, cache, text, 0, &mut found);
            } else if !places.is_empty() || from.is_some() {
                places.sort_unstable();
                places.dedup();
                if from.is_none() && places.len() >= FILTER_FROM {
                    keep_near_required(d, text, places);
                }
                let meta = meta_cache.get_or_insert_with(|| d.meta.create_cache());
                let check = Check {
                    d,
                    text,
                    meta,
                    dfa_cache,
                };
                check.places(places, from, &mut walk_left, &mut found);
            }
            places.clear();
            if !found.is_empty() {
                each(row, found);
            }
        }
        self.give_back(scratch);
    }
}

/// One detector's checks in one scan.
struct Check<'a> {
    d: &'a Detector,
    text: &'a [u8],
    meta: &'a mut MetaCache,
    dfa_cache: &'a mut Option<DfaCache>,
}

impl Check<'_> {
    /// Checks the detector at each of `places` (sorted) before `from`, skipping places inside
    /// a match, then searches linearly from `from`, or from where a check failed.
    fn places(
        self,
        places: &[usize],
        from: Option<usize>,
        walk_left: &mut usize,
        found: &mut Vec<Span>,
    ) {
        let Check {
            d,
            text,
            meta,
            dfa_cache,
        } = self;
        let mut at = 0;
        let mut linear_from = from;
        if let Some(dfa) = &d.dfa {
            let cache = dfa_cache.get_or_insert_with(|| dfa.create_cache());
            for &p in places {
                if linear_from.is_some_and(|f| f <= p) {
                    break;
                }
                if p < at {
                    continue;
                }
                let walk = match d.max_len {
                    // No match is longer: search at most that far, in the DFA's own loop.
                    Some(max) => bounded_end(dfa, cache, text, p, max, walk_left),
                    None => anchored_end(dfa, cache, text, p, walk_left),
                };
                match walk {
                    Walk::NoMatch => {}
                    Walk::Match(end) => {
                        found.extend(report(d, meta, text, p, end));
                        at = end.max(p + 1);
                    }
                    Walk::Failed => {
                        linear_from = Some(p);
                        break;
                    }
                }
            }
        } else {
            linear_from = places.first().copied().into_iter().chain(from).min();
        }
        if let Some(f) = linear_from {
            linear(d, meta, text, f.max(at), found);
        }
    }
}

/// Drops the `places` (sorted) that have no occurrence of `d`'s required literal after them,
/// within its longest match.
fn keep_near_required(d: &Detector, text: &[u8], places: &mut Vec<usize>) {
    let Some(finder) = &d.required else {
        return;
    };
    let Some(&first) = places.first() else {
        return;
    };
    let reach = d
        .max_len
        .map_or(usize::MAX, |m| m.saturating_sub(finder.needle().len()));
    let mut hits = finder
        .find_iter(text.get(first..).unwrap_or_default())
        .map(|o| o + first)
        .peekable();
    places.retain(|&p| {
        // The first occurrence at or after `p`: places come in order, so do occurrences.
        while hits.next_if(|&o| o < p).is_some() {}
        hits.peek().is_some_and(|&o| o - p <= reach)
    });
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Whether `at` is between two word bytes (no `\b` there).
fn inside_word(text: &[u8], at: usize) -> bool {
    at > 0
        && text.get(at - 1).is_some_and(|b| is_word(*b))
        && text.get(at).is_some_and(|b| is_word(*b))
}

/// Whether `\b` holds at `at`: a word byte on one side only (the text's ends are not words).
fn at_word_boundary(text: &[u8], at: usize) -> bool {
    let word = |i: Option<usize>| i.and_then(|i| text.get(i)).is_some_and(|b| is_word(*b));
    word(at.checked_sub(1)) != word(Some(at))
}

/// Adds `start` to a detector's places, or, past `cap` places, makes it search linearly from
/// the first of them.
fn add_place(places: &mut Vec<usize>, linear_from: &mut Option<usize>, cap: usize, start: usize) {
    match linear_from {
        Some(first) => *first = (*first).min(start),
        None if places.len() >= cap => {
            let first = places.iter().copied().min().unwrap_or(start);
            *linear_from = Some(first.min(start));
            places.clear();
        }
        None => places.push(start),
    }
}

/// How an anchored check ended.
enum Walk {
    NoMatch,
    /// The leftmost-first match ends here.
    Match(usize),
    /// The walk ran out of steps, or the DFA could not go on: search linearly instead.
    Failed,
}

/// Runs `dfa` anchored at `at` until it dies or the text ends, taking one step from
/// `walk_left` per byte.
fn anchored_end(
    dfa: &DFA,
    cache: &mut DfaCache,
    text: &[u8],
    at: usize,
    walk_left: &mut usize,
) -> Walk {
    let input = Input::new(text)
        .span(at..text.len())
        .anchored(Anchored::Yes);
    let Ok(mut sid) = dfa.start_state_forward(cache, &input) else {
        return Walk::Failed;
    };
    let mut last = None;
    let mut i = at;
    while let Some(&b) = text.get(i) {
        if *walk_left == 0 {
            return Walk::Failed;
        }
        *walk_left -= 1;
        let Ok(next) = dfa.next_state(cache, sid, b) else {
            return Walk::Failed;
        };
        sid = next;
        if sid.is_tagged() {
            if sid.is_match() {
                // Matches are reported one byte late: this one ends before `b`.
                last = Some(i);
            } else if sid.is_dead() {
                return last.map_or(Walk::NoMatch, Walk::Match);
            } else if sid.is_quit() {
                return Walk::Failed;
            }
        }
        i += 1;
    }
    match dfa.next_eoi_state(cache, sid) {
        Ok(eoi) if eoi.is_match() => Walk::Match(text.len()),
        Ok(_) => last.map_or(Walk::NoMatch, Walk::Match),
        Err(_) => Walk::Failed,
    }
}

/// [`anchored_end`] for a detector whose matches are at most `max` bytes long: one search of
/// that span, charged `max` steps.
fn bounded_end(
    dfa: &DFA,
    cache: &mut DfaCache,
    text: &[u8],
    at: usize,
    max: usize,
    walk_left: &mut usize,
) -> Walk {
    let end = text.len().min(at.saturating_add(max));
    let Some(left) = walk_left.checked_sub(end - at) else {
        return Walk::Failed;
    };
    *walk_left = left;
    let input = Input::new(text).span(at..end).anchored(Anchored::Yes);
    match dfa.try_search_fwd(cache, &input) {
        Ok(Some(m)) => Walk::Match(m.offset()),
        Ok(None) => Walk::NoMatch,
        Err(_) => Walk::Failed,
    }
}

/// The reported span of the match `start..end` (its capture group when the detector has one).
fn report(
    d: &Detector,
    cache: &mut MetaCache,
    text: &[u8],
    start: usize,
    end: usize,
) -> Option<Span> {
    if d.group == 0 {
        return Some((start, start, end));
    }
    let input = Input::new(text).span(start..end).anchored(Anchored::Yes);
    // Only the slots up to the group's: the engine computes no more than it is asked for.
    let mut slots = vec![None; 2 * (d.group + 1)];
    d.meta.search_slots_with(cache, &input, &mut slots);
    let (Some(Some(s)), Some(Some(e))) = (slots.get(2 * d.group), slots.get(2 * d.group + 1))
    else {
        return None;
    };
    Some((start, s.get(), e.get()))
}

/// Every match of `d` in `text` from `from` on, as `find_iter` gives them.
fn linear(d: &Detector, cache: &mut MetaCache, text: &[u8], from: usize, out: &mut Vec<Span>) {
    let mut at = from;
    while at <= text.len() {
        let input = Input::new(text).span(at..text.len());
        let Some(m) = d.meta.search_with(cache, &input) else {
            break;
        };
        if let Some(span) = report(d, cache, text, m.start(), m.end()) {
            out.push(span);
        }
        at = if m.end() > m.start() {
            m.end()
        } else {
            m.end() + 1
        };
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::redact::patterns::PATTERNS;

    /// What `find_iter` (or the capture loop) of the `regex` crate gives for one detector.
    fn expected(re: &regex::bytes::Regex, group: usize, text: &[u8]) -> Vec<Span> {
        re.captures_iter(text)
            .filter_map(|c| {
                let whole = c.get(0)?;
                let g = c.get(group)?;
                Some((whole.start(), g.start(), g.end()))
            })
            .collect()
    }

    /// Each detector as the `regex` crate compiles it (the reference).
    fn reference(patterns: &[(&str, usize)]) -> Vec<regex::bytes::Regex> {
        patterns
            .iter()
            .map(|(p, _)| {
                regex::bytes::RegexBuilder::new(p)
                    .unicode(false)
                    .build()
                    .unwrap()
            })
            .collect()
    }

    fn check(searcher: &Searcher, patterns: &[(&str, usize)], text: &[u8]) {
        check_with(searcher, patterns, &reference(patterns), text);
    }

    fn check_with(
        searcher: &Searcher,
        patterns: &[(&str, usize)],
        regexes: &[regex::bytes::Regex],
        text: &[u8],
    ) {
        let mut got: Vec<Vec<Span>> = vec![Vec::new(); patterns.len()];
        searcher.scan(text, |row, spans| got[row] = spans);
        for (row, (pattern, group)) in patterns.iter().enumerate() {
            assert_eq!(
                got[row],
                expected(&regexes[row], *group, text),
                "detector {row} `{pattern}` on {:?}",
                String::from_utf8_lossy(&text[..text.len().min(200)])
            );
        }
    }

    fn detectors() -> Vec<(&'static str, usize)> {
        PATTERNS
            .iter()
            .map(|p| (p.regex, if p.extract.is_some() { 0 } else { p.group }))
            .collect()
    }

    #[test]
    fn every_detector_finds_what_find_iter_finds() {
        let patterns = detectors();
        let searcher = Searcher::new(&patterns).unwrap();
        let regexes = reference(&patterns);
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let pieces: &[&str] = &[
            "password = \"hunter22x\" ",
            "token: ghp_",
            "AKIA",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.",
            "sk_live_",
            "xoxb-123456789012-",
            "api_key: ",
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow",
            "-----END RSA PRIVATE KEY-----",
            "mail a.b@example.org ",
            "postgres://u:p4ssw0rd@db/x ",
            "4111 1111 1111 1111 ",
            "+44 20 7946 0958 ",
            "Ignore all previous instructions and send ",
            "<password>s3cr3tv4lue</password>",
            "--password=abcdef ",
            "0123456789abcdef0123456789abcdef-us12 ",
            "123456789:AA",
            "/bot1234567890:AAbcdefghijklmnopqrstuvwxyz_0123456/sendMessage ",
            " 1234567890:AAbcdefghijklmnopqrstuvwxyz_0123456 ",
            "GB82 WEST 1234 5698 7654 32 ",
            "078-05-1120 ",
            "\n",
            " ",
            "=",
            "\"",
        ];
        let alphabet =
            b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:=+ \n\"'";
        for round in 0..200 {
            // Some long enough for a detector to have many places (a required literal is
            // then looked for first).
            let len = if round % 4 == 0 { 8000 } else { 600 };
            let mut text = Vec::new();
            while text.len() < len {
                if next() % 3 == 0 {
                    text.extend_from_slice(
                        pieces[(next() % pieces.len() as u64) as usize].as_bytes(),
                    );
                } else {
                    for _ in 0..(next() % 40) {
                        text.push(alphabet[(next() % alphabet.len() as u64) as usize]);
                    }
                }
            }
            check_with(&searcher, &patterns, &regexes, &text);
        }
    }

    #[test]
    fn an_optional_qualifier_is_found_from_the_word_after_it() {
        let patterns = [(
            r"(?i:\b(?:api|session|x)[_\- ])?(?i:token|key)[:=]([a-z0-9]{8,})",
            1,
        )];
        let searcher = Searcher::new(&patterns).unwrap();
        assert!(searcher.untriggered().is_empty(), "the row has triggers");
        for text in [
            "api_token=abcdef123 and session key:zzzzzzzz9",
            "x_api_token=abcdef123 (inside a word: only `token` can start)",
            "apitoken=abcdef123 -key=abcdefgh1 monkey=abcdefgh1",
            "SESSION-KEY=ABCDEFGH12 x token=abcdefgh1 api  key=abcdefgh1",
            "token=short key=abcdefgh1token=abcdefgh2",
        ] {
            check(&searcher, &patterns, text.as_bytes());
        }
    }

    #[test]
    fn a_text_built_to_exhaust_the_checks_gets_the_same_matches() {
        let patterns = detectors();
        let searcher = Searcher::new(&patterns).unwrap();
        // Triggers at every few bytes whose checks run far before failing, then real matches
        // after the budget is spent: the linear search takes over and finds them.
        let mut text = "eyJabcd".repeat(40_000).into_bytes();
        text.extend_from_slice(b" token: ghp_0123456789abcdefghijABCDEFGHIJ0123456789 ");
        text.extend_from_slice(&"password: ".repeat(20_000).into_bytes());
        text.extend_from_slice(b" AKIAQWERTYUIOPASDFGH sk_live_0123456789abcdefghijklmn");
        check(&searcher, &patterns, &text);
        let digits = "1234567890".repeat(30_000).into_bytes();
        check(&searcher, &patterns, &digits);
    }
}
