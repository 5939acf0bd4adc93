//! The redaction engine: finds secrets, personal data and prompt-injection signals in text and
//! JSON, and masks them as `<redacted:KIND>`. One ruleset for every place content flows: the
//! gates API, the tool_call gate on every call, reported tool output, streams, and the audit
//! and approval previews.
//!
//! - Named detectors (the table in `patterns.rs`): one pass of a `RegexSet` over the bytes says which
//!   detectors can match at all; only those run again to find their spans (a labelled value is
//!   read out of its match by `extract.rs`). The `regex` crate runs in linear time, so no input
//!   can make a pattern backtrack (ReDoS-safe).
//! - Known secrets (`known.rs`): configured values and their encodings, one Aho-Corasick pass.
//! - High-entropy tokens: runs of key-like characters that no named detector claimed, with
//!   mixed case and digits and Shannon entropy over a threshold; hex-only runs (hashes, git
//!   SHAs, UUIDs) and `base64,` data are left alone.
//! - JSON: every string is scanned, and the value of a sensitive key (`password`, `token`,
//!   `api_key`, `authorization`, `cookie`, `private_key`, …, matched case- and
//!   separator-insensitively) is masked whole, keeping the structure.

mod custom;
mod entropy;
mod extract;
mod gates;
mod json;
mod known;
mod patterns;
mod search;
mod stream;
mod structure;
mod validate;

pub use custom::{CustomDetector, MAX_DETECTORS, RawDetector, Validator};
pub use gates::{Action, Gate, GateRules, MAX_VIOLATIONS, Screened, Violation, labels};
pub use json::{JsonFinding, sensitive_key};
pub use known::{KnownSecrets, MAX_KNOWN_SECRET, MIN_KNOWN_SECRET};
pub use patterns::Category;

/// Every name a gate rule may use: the categories, every detector's kind (including the
/// optional ones), the configured-secret kind, `sensitive-key` and `high-entropy`.
pub fn known_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Category::ALL.iter().map(|c| c.as_str()).collect();
    names.extend(patterns::PATTERNS.iter().map(|p| p.kind));
    names.extend([KNOWN_SECRET, TABLE_SECRET, "sensitive-key", "high-entropy"]);
    names
}
pub use stream::{ChunkScreened, HOLD, MAX_CHUNK, MAX_HOLD, StreamError, StreamState, Streams};

use regex::bytes::RegexBuilder;

use patterns::PATTERNS;

/// The kind of a configured secret value's finding.
pub const KNOWN_SECRET: &str = "known-secret";
/// The kind of a cell in a Markdown table's password or token column.
pub const TABLE_SECRET: &str = "table-secret";

/// One finding in a text: byte offsets of the sensitive part.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// `aws-access-key`, `email`, `high-entropy`, …
    pub kind: &'static str,
    /// secret, pii or entropy.
    pub category: Category,
    /// Start, in bytes (a char boundary).
    pub start: usize,
    /// End, exclusive, in bytes (a char boundary).
    pub end: usize,
}

/// Which optional detectors run, and the entropy thresholds.
#[derive(Debug, Clone, PartialEq)]
pub struct RedactConfig {
    /// IPv4 and IPv6 addresses (off by default: noisy in code and logs).
    pub ip_addresses: bool,
    /// High-entropy tokens (`None`: off): shortest token and bits per character.
    pub entropy: Option<(usize, f64)>,
    /// Values found verbatim and encoded (kind `known-secret`).
    pub known: KnownSecrets,
    /// Detectors from config, run ahead of the built-in ones.
    pub detectors: Vec<CustomDetector>,
    /// JSON keys whose values are masked whole, beyond the built-in list (normalized:
    /// lowercase, without `_`, `-`, `.` and spaces).
    pub sensitive_keys: Vec<String>,
    /// Key endings that make a key sensitive, beyond the built-in list (normalized).
    pub sensitive_key_suffixes: Vec<String>,
    /// How much of a call's redacted arguments audit records and approvals keep.
    pub preview: PreviewLimits,
}

/// The size of the redacted argument previews in audit records and approvals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreviewLimits {
    /// Longest preview, in bytes of canonical JSON.
    pub bytes: usize,
    /// Longest string inside a preview, in characters.
    pub string_chars: usize,
}

impl Default for PreviewLimits {
    fn default() -> Self {
        PreviewLimits {
            bytes: 512,
            string_chars: 200,
        }
    }
}

impl Default for RedactConfig {
    fn default() -> Self {
        RedactConfig {
            ip_addresses: false,
            entropy: Some((24, 4.0)),
            known: KnownSecrets::default(),
            detectors: Vec::new(),
            sensitive_keys: Vec::new(),
            sensitive_key_suffixes: Vec::new(),
            preview: PreviewLimits::default(),
        }
    }
}

/// A JSON key in the form the sensitive-key lists hold: lowercase, without `_`, `-`, `.` and
/// spaces.
pub fn normalize_key(key: &str) -> String {
    crate::fold::folded(key)
        .chars()
        .filter(|c| !matches!(c, '_' | '-' | '.' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

/// The kind of the invisible-text detector (run on the original text, not the folded one).
const HIDDEN_UNICODE: &str = "hidden-unicode";

/// Why the detectors could not be built (a pattern over the size limit: a bug, not input).
#[derive(Debug, thiserror::Error)]
#[error("redaction detectors: {0}")]
pub struct RedactError(String);

/// Where a candidate is cut, relative to where it starts: the accepted span's offset and length
/// (`None`: not accepted).
type Cut = Option<(isize, usize)>;

/// One compiled detector: a built-in row or one from config.
struct Row {
    kind: &'static str,
    category: Category,
    /// Reads a built-in row's value out of its match.
    extract: Option<patterns::Extract>,
    /// A check the value must pass.
    check: Option<fn(&str) -> bool>,
    /// A detector from config (its filters).
    custom: Option<CustomDetector>,
    /// A built-in secret read after a label (`password: <value>`): the value is widened over
    /// the code punctuation its pattern stops at ([`structure::widen_value`]).
    labelled: bool,
}

/// The compiled detectors.
pub struct Redactor {
    search: search::Searcher,
    rows: Vec<Row>,
    /// How many of `rows` (the first ones) come from config.
    detectors: usize,
    /// Configured sensitive JSON keys and endings (normalized).
    extra_keys: Vec<String>,
    extra_suffixes: Vec<String>,
    preview: PreviewLimits,
    entropy: Option<(usize, f64)>,
    known: Option<aho_corasick::AhoCorasick>,
    /// The longest known-secret form (the stream gate holds back at least this much).
    longest_known: usize,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("detectors", &self.rows.len())
            .finish_non_exhaustive()
    }
}

/// Most distinct found values looked for again in the same text.
const MAX_REPEATED: usize = 32;
/// Texts from this size on look for repeated values with one automaton pass.
const REPEAT_AUTOMATON_BYTES: usize = 64 * 1024;
/// Longest found value put in the automaton; longer ones are searched for one by one.
const MAX_AUTOMATON_VALUE: usize = 512;
/// Shortest found value looked for again (shorter ones would match ordinary text).
const MIN_REPEATED: usize = 6;

/// Every other occurrence of a secret found in `text` (the labelled `password: X` and the bare
/// `X` on the next line), added with the finding's kind, so masking leaves no copy in clear.
fn repeats(text: &str, kept: &mut std::collections::BTreeMap<usize, Finding>) {
    let mut values: Vec<(&str, &'static str, Category)> = Vec::new();
    for f in kept.values() {
        if !matches!(f.category, Category::Secret | Category::Entropy)
            || values.len() >= MAX_REPEATED
        {
            continue;
        }
        if let Some(v) = text.get(f.start..f.end)
            && v.len() >= MIN_REPEATED
            && !values.iter().any(|(x, _, _)| *x == v)
        {
            values.push((v, f.kind, f.category));
        }
    }
    if values.is_empty() {
        return;
    }
    // Short texts, and long values (a key block), are searched for one by one; in a long
    // text the short values go through one automaton pass, leftmost-longest so that a value
    // holding another is found whole (building it costs more than it saves below a few pages,
    // and over long values more than the scan).
    let automaton = text.len() >= REPEAT_AUTOMATON_BYTES;
    let mut hits: Vec<(usize, usize, usize)> = Vec::new();
    let mut short: Vec<(usize, &str)> = Vec::new();
    for (i, (v, _, _)) in values.iter().enumerate() {
        if automaton && v.len() <= MAX_AUTOMATON_VALUE {
            short.push((i, v));
        } else {
            hits.extend(text.match_indices(v).map(|(s, m)| (i, s, s + m.len())));
        }
    }
    if !short.is_empty()
        && let Ok(ac) = aho_corasick::AhoCorasick::builder()
            .match_kind(aho_corasick::MatchKind::LeftmostLongest)
            // Built for this text only: a DFA's build (the default for a few values) took
            // ~0.6 ms, a fifth of a dense 64 KiB body's scan; the NFA builds in microseconds
            // and searches with the same SIMD prefilter.
            .kind(Some(aho_corasick::AhoCorasickKind::ContiguousNFA))
            .build(short.iter().map(|(_, v)| v))
    {
        hits.extend(ac.find_iter(text).filter_map(|m| {
            let (i, _) = short.get(m.pattern().as_usize())?;
            Some((*i, m.start(), m.end()))
        }));
    }
    // A copy inside a longer word is not the value: a 32-character key is the start of a
    // 40-character commit id, which must be neither masked in part nor taken for the key.
    let bytes = text.as_bytes();
    let joined = |a: Option<&u8>, b: Option<&u8>| {
        a.is_some_and(u8::is_ascii_alphanumeric) && b.is_some_and(u8::is_ascii_alphanumeric)
    };
    let inside = |s: usize, e: usize| {
        s > 0 && joined(bytes.get(s - 1), bytes.get(s))
            || e > 0 && joined(bytes.get(e - 1), bytes.get(e))
    };
    hits.retain(|&(_, s, e)| !inside(s, e));
    // By position, the longer value first where two start together (a value that is the
    // prefix of another must not take its place).
    hits.sort_by_key(|(_, s, e)| (*s, usize::MAX - e));
    for (i, start, end) in hits {
        let Some(&(_, kind, category)) = values.get(i) else {
            continue;
        };
        let taken = kept
            .range(..end)
            .next_back()
            .is_some_and(|(_, k)| k.end > start);
        if !taken {
            kept.insert(
                start,
                Finding {
                    kind,
                    category,
                    start,
                    end,
                },
            );
        }
    }
}

/// ASCII-only classes and word boundaries: the DFA engines handle any input, also non-ASCII
/// text, without falling back to slower ones.
fn builder(pattern: &str) -> RegexBuilder {
    let mut b = RegexBuilder::new(pattern);
    b.unicode(false).size_limit(4 << 20);
    b
}

impl Redactor {
    /// Compiles the detectors `config` turns on.
    pub fn new(config: &RedactConfig) -> Result<Redactor, RedactError> {
        let mut rows = Vec::new();
        let mut sources: Vec<(&str, usize)> = Vec::new();
        // Configured detectors first: on overlap the earlier row wins, and an operator's
        // detector is the more specific one.
        for d in &config.detectors {
            custom::compile(&d.regex).map_err(|e| RedactError(format!("{}: {e}", d.name)))?;
            sources.push((&d.regex, d.group));
            rows.push(Row {
                kind: d.name,
                category: d.category,
                extract: None,
                check: d.validator.map(Validator::check),
                custom: Some(d.clone()),
                labelled: false,
            });
        }
        for p in PATTERNS
            .iter()
            .filter(|p| !p.optional || config.ip_addresses)
        {
            let group = if p.extract.is_some() { 0 } else { p.group };
            sources.push((p.regex, group));
            rows.push(Row {
                kind: p.kind,
                category: p.category,
                extract: p.extract,
                check: p.check,
                custom: None,
                labelled: p.category == Category::Secret && (p.extract.is_some() || p.group != 0),
            });
        }
        let search = search::Searcher::new(&sources)?;
        let (known, longest_known) = config.known.automaton().map_err(RedactError)?;
        Ok(Redactor {
            search,
            rows,
            detectors: config.detectors.len(),
            extra_keys: config.sensitive_keys.clone(),
            extra_suffixes: config.sensitive_key_suffixes.clone(),
            preview: config.preview,
            entropy: config.entropy,
            known,
            longest_known,
        })
    }

    /// How much of a call's redacted arguments previews keep.
    pub fn preview_limits(&self) -> PreviewLimits {
        self.preview
    }

    /// Bytes of the longest known-secret form (0 without known secrets).
    pub fn longest_known(&self) -> usize {
        self.longest_known
    }

    /// Kinds the named detectors know (for docs and config checks).
    pub fn kinds(&self) -> impl Iterator<Item = (&'static str, Category)> + '_ {
        self.rows.iter().map(|r| (r.kind, r.category)).chain([
            (KNOWN_SECRET, Category::Secret),
            (TABLE_SECRET, Category::Secret),
        ])
    }

    /// Every finding in `text`, in order, without overlaps. On overlap a secret beats personal
    /// data (an AWS key inside an email-shaped string is a key), then the more specific
    /// detector, then the longer span.
    ///
    /// Detectors read the text's canonical form ([`crate::fold`]: no invisible characters,
    /// compatibility forms and ASCII look-alikes folded), and each finding spans the original
    /// characters it came from: a key with a zero-width space inside is found, and masked
    /// whole. Invisible text itself (`hidden-unicode`) is found in the original.
    pub fn scan(&self, text: &str) -> Vec<Finding> {
        let Some(folded) = crate::fold::fold(text) else {
            return self.scan_canonical(text);
        };
        let mut out: Vec<Finding> = Vec::new();
        for mut f in self.scan_canonical(&folded.text) {
            (f.start, f.end) = folded.original(f.start, f.end);
            // Two findings of one layer in one original character (a ligature split): the
            // first keeps it.
            let layer = f.category.sensitive();
            if out
                .iter()
                .rev()
                .find(|o| o.category.sensitive() == layer)
                .is_some_and(|last| last.end > f.start)
                || f.start >= f.end
            {
                continue;
            }
            out.push(f);
        }
        if let Some((i, row)) = self
            .rows
            .iter()
            .enumerate()
            .find(|(_, r)| r.kind == HIDDEN_UNICODE)
        {
            let mut hidden: Vec<Finding> = self
                .search
                .find_all(i, text.as_bytes())
                .into_iter()
                .map(|(_, start, end)| Finding {
                    kind: row.kind,
                    category: row.category,
                    start,
                    end,
                })
                .filter(|h| {
                    !out.iter().any(|f| {
                        (f.category.sensitive() || f.kind == HIDDEN_UNICODE)
                            && f.start < h.end
                            && h.start < f.end
                    })
                })
                .collect();
            if !hidden.is_empty() {
                out.append(&mut hidden);
                out.sort_by_key(|f| f.start);
            }
        }
        out
    }

    /// [`Redactor::scan`] of text in canonical form.
    fn scan_canonical(&self, text: &str) -> Vec<Finding> {
        // Detection reads a copy where the escapes `\n`, `\r`, `\t` are two spaces (same
        // offsets), so a key right after an escaped newline still starts at a word boundary.
        let unescaped = unescape_whitespace(text);
        let bytes = unescaped.as_bytes();
        let mut found: Vec<(usize, Finding)> = Vec::new();
        // A configured value is the most specific finding there is: rank 0.
        // On the text as it is: a known value may itself hold `\n` escapes.
        if let Some(known) = &self.known {
            for m in known.find_iter(text.as_bytes()) {
                let (start, end) = char_bounds(text, m.start(), m.end());
                let f = Finding {
                    kind: KNOWN_SECRET,
                    category: Category::Secret,
                    start,
                    end,
                };
                found.push((0, f));
            }
        }
        let mut not_secret = std::collections::HashMap::new();
        self.search.scan(bytes, |i, matches| {
            let Some(row) = self.rows.get(i) else {
                return;
            };
            // A labelled row's sensitive part is read out of the match by its extractor; a
            // configured one's is its capture group (the search reports it).
            let spans = matches
                .into_iter()
                .filter_map(|(m_start, start, end)| match row.extract {
                    None => Some((m_start, start, end)),
                    Some(extract) => bytes
                        .get(start..end)
                        .and_then(extract)
                        .map(|(s, e)| (m_start, start + s, start + e)),
                });
            // A value seen before in this text gets the same verdict (logs repeat a line).
            let mut seen: Option<(usize, usize, Cut)> = None;
            for (match_start, start, end) in spans {
                if row
                    .custom
                    .as_ref()
                    .is_some_and(|c| !c.passes(text, match_start, start, end))
                {
                    continue;
                }
                let same = seen.is_some_and(|(s, e, _)| text.get(s..e) == text.get(start..end));
                let verdict = match seen {
                    Some((_, _, cut)) if same => cut.map(|(from, len)| {
                        let s = start.saturating_add_signed(from);
                        (s, s + len)
                    }),
                    _ => {
                        let v = self.accept(row, text, (start, end), &mut not_secret);
                        let cut = v.map(|(s, e)| (s as isize - start as isize, e - s));
                        seen = Some((start, end, cut));
                        v
                    }
                };
                if let Some((start, end)) = verdict {
                    // After the verdict, which may be another copy's: what follows differs.
                    let end = if row.labelled {
                        structure::widen_value(bytes, start, end)
                    } else {
                        end
                    };
                    let f = Finding {
                        kind: row.kind,
                        category: row.category,
                        start,
                        end,
                    };
                    found.push((i + 1, f));
                }
            }
        });
        structure::extend_key_blocks(text, &mut found);
        let table_rank = self.rows.len() + 1;
        for (start, end) in structure::table_secrets(text) {
            let f = Finding {
                kind: TABLE_SECRET,
                category: Category::Secret,
                start,
                end,
            };
            found.push((table_rank, f));
        }
        // Secrets first, then personal data, entropy and signals; within a category,
        // configured values and detectors first: on overlap an operator's finding wins over a
        // built-in one of its category (`acme_live_…` is `acme-api-key`, not
        // `labelled-token`), and never hides a secret.
        let configured = self.detectors + 1;
        found.sort_by_key(|(rank, f)| {
            (
                f.category,
                *rank >= configured,
                f.start,
                *rank,
                usize::MAX - f.end,
            )
        });
        // Accepted spans by start; a candidate is kept when it overlaps none of them.
        // Sensitive findings and injection signals are two layers: a signal spans a sentence
        // and may hold an address or a key, which is still found (and masked) on its own.
        let mut kept: std::collections::BTreeMap<usize, Finding> =
            std::collections::BTreeMap::new();
        let mut signals: std::collections::BTreeMap<usize, Finding> =
            std::collections::BTreeMap::new();
        for (_, f) in found {
            let layer = if f.category.sensitive() {
                &mut kept
            } else {
                &mut signals
            };
            let before = layer.range(..f.end).next_back();
            if before.is_some_and(|(_, k)| k.end > f.start) {
                continue;
            }
            layer.insert(f.start, f);
        }
        repeats(text, &mut kept);
        let mut out: Vec<Finding> = kept.into_values().collect();
        if let Some((min_len, bits)) = self.entropy {
            entropy::high_entropy(text, min_len, bits, &mut out);
        }
        if !signals.is_empty() {
            out.extend(signals.into_values());
            out.sort_by_key(|f| (f.start, f.end));
        }
        out
    }

    /// The span a candidate match stands for, if it passes its row's check and is not a
    /// placeholder. A checked candidate that fails may pass with trailing groups cut off
    /// (`4111 1111 1111 1111 12/29` → the card without the date).
    fn accept(
        &self,
        row: &Row,
        text: &str,
        (start, end): (usize, usize),
        not_secret: &mut std::collections::HashMap<(usize, usize), bool>,
    ) -> Option<(usize, usize)> {
        let (start, mut end) = char_bounds(text, start, end);
        // A number inside an account number written in groups is that account number's.
        if matches!(row.kind, "phone" | "credit-card")
            && row.custom.is_none()
            && validate::inside_iban(text, start)
        {
            return None;
        }
        loop {
            if start >= end {
                return None;
            }
            let value = text.get(start..end)?;
            let passes = row.check.is_none_or(|check| check(value))
                && !(row.labelled && validate::prose_after(text.as_bytes(), start, end));
            if passes {
                // Documentation placeholders and committed ciphertext are not credentials.
                // Several rows often find the same value: judged once per span.
                if row.category == Category::Secret
                    && *not_secret.entry((start, end)).or_insert_with(|| {
                        validate::placeholder(value)
                            || validate::ciphertext(value)
                            || validate::public_id(value)
                    })
                {
                    return None;
                }
                return Some((start, end));
            }
            row.check?;
            // Personal data only: cut the last separator-delimited group and try again (a
            // secret that fails its check is not a secret with a suffix).
            if row.category != Category::Pii {
                return None;
            }
            let cut = value.rfind([' ', '-'])?;
            end = start + cut;
        }
    }

    /// `text` with the findings that `keep` selects replaced by `<redacted:KIND>`.
    pub fn mask(text: &str, findings: &[Finding], keep: impl Fn(&Finding) -> bool) -> String {
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for f in findings.iter().filter(|f| keep(f)) {
            // Overlapping findings (a masked signal over an address) mask their union.
            if f.start < at {
                at = at.max(f.end);
                continue;
            }
            out.push_str(text.get(at..f.start).unwrap_or(""));
            out.push_str("<redacted:");
            out.push_str(f.kind);
            out.push('>');
            at = f.end;
        }
        out.push_str(text.get(at..).unwrap_or(""));
        out
    }

    /// `text` with every sensitive finding masked (secrets, personal data, high-entropy
    /// tokens; injection signals are not sensitive and stay).
    pub fn redact(&self, text: &str) -> String {
        Redactor::mask(text, &self.scan(text), |f| f.category.sensitive())
    }

    /// `value` with every sensitive finding masked, for what is stored or shown (audit and
    /// approval previews).
    pub fn redact_json(&self, value: &serde_json::Value) -> serde_json::Value {
        self.mask_json(value, &|_, _, category| category.sensitive())
    }
}

/// The detectors and every gate's rules, checked against each other.
pub struct Gates {
    redactor: Redactor,
    /// By gate, in [`Gate::ALL`] order.
    rules: [GateRules; Gate::ALL.len()],
}

impl std::fmt::Debug for Gates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gates").finish_non_exhaustive()
    }
}

impl Gates {
    /// Builds the detectors and checks that every name in `rules` is a category or a kind.
    pub fn new(config: &RedactConfig, rules: Vec<(Gate, GateRules)>) -> Result<Gates, RedactError> {
        let redactor = Redactor::new(config)?;
        for (gate, r) in &rules {
            if let Some(name) = r.unknown_names(&redactor).next() {
                let mut kinds: Vec<&str> = redactor.kinds().map(|(k, _)| k).collect();
                kinds.extend(["sensitive-key", "high-entropy"]);
                return Err(RedactError(format!(
                    "`gates.{}` names `{name}`, which is neither a category (secret, pii, entropy) nor a detector kind ({})",
                    gate.as_str(),
                    kinds.join(", ")
                )));
            }
        }
        // Every gate has rules: a gate the list leaves out keeps its defaults.
        let rules = Gate::ALL.map(|gate| {
            rules
                .iter()
                .find(|(g, _)| *g == gate)
                .map_or_else(|| GateRules::default_for(gate), |(_, r)| r.clone())
        });
        Ok(Gates { redactor, rules })
    }

    /// The shipped detectors and rules.
    pub fn builtin() -> Result<Gates, RedactError> {
        Gates::new(&RedactConfig::default(), Vec::new())
    }

    /// The detectors.
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// `gate`'s rules.
    pub fn rules_for(&self, gate: Gate) -> &GateRules {
        let [input, context, tool_call, output, stream] = &self.rules;
        match gate {
            Gate::Input => input,
            Gate::Context => context,
            Gate::ToolCall => tool_call,
            Gate::Output => output,
            Gate::Stream => stream,
        }
    }

    /// `gate`'s verdict on `content`.
    pub fn screen(&self, gate: Gate, content: &serde_json::Value) -> Screened {
        self.redactor.screen(self.rules_for(gate), content)
    }
}

/// `text` with each `\n`, `\r` and `\t` escape replaced by two spaces (offsets unchanged).
fn unescape_whitespace(text: &str) -> std::borrow::Cow<'_, str> {
    let bytes = text.as_bytes();
    let escape = |w: &[u8]| matches!(w, [b'\\', b'n' | b'r' | b't']);
    let escaped = |i: usize| bytes.get(i..i + 2).is_some_and(escape);
    if !memchr::memchr_iter(b'\\', bytes).any(escaped) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = bytes.to_vec();
    let mut i = 0;
    while i + 1 < out.len() {
        if out.get(i..i + 2).is_some_and(escape) {
            if let Some(pair) = out.get_mut(i..i + 2) {
                pair.copy_from_slice(b"  ");
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    // ASCII replaced by ASCII: still UTF-8; if not, detection reads the text as it is.
    String::from_utf8(out).map_or(std::borrow::Cow::Borrowed(text), std::borrow::Cow::Owned)
}

/// Widens a byte range to char boundaries (byte-level patterns may stop inside a character).
fn char_bounds(text: &str, start: usize, end: usize) -> (usize, usize) {
    (
        text.floor_char_boundary(start),
        text.ceil_char_boundary(end),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_detectors_without_a_literal_run_as_a_set() {
        let r = Redactor::new(&RedactConfig::default()).unwrap();
        let rest: Vec<&str> = r
            .search
            .untriggered()
            .iter()
            .filter_map(|&i| r.rows.get(i).map(|row| row.kind))
            .collect();
        // Addresses, numbers, injection phrasing and a few label forms; every vendor format
        // and most labels start from a literal.
        assert!(rest.len() <= 12, "{rest:?}");
        assert!(
            rest.contains(&"email") && !rest.contains(&"github-pat"),
            "{rest:?}"
        );
    }

    use super::*;

    fn kinds(text: &str) -> Vec<&'static str> {
        let r = Redactor::new(&RedactConfig::default()).unwrap();
        r.scan(text).into_iter().map(|f| f.kind).collect()
    }

    #[test]
    fn named_detectors_win_over_entropy_and_mask_in_place() {
        let r = Redactor::new(&RedactConfig::default()).unwrap();
        let text = "key AKIAIOSFODNN7EXAMPLQ and mail bob@example.org, café ✓";
        let found = r.scan(text);
        assert_eq!(
            found.iter().map(|f| f.kind).collect::<Vec<_>>(),
            ["aws-access-key", "email"]
        );
        assert_eq!(
            r.redact(text),
            "key <redacted:aws-access-key> and mail <redacted:email>, café ✓"
        );
    }

    #[test]
    fn only_the_sensitive_group_is_masked() {
        let r = Redactor::new(&RedactConfig::default()).unwrap();
        assert_eq!(
            r.redact("postgres://app:s3cr3t-pw@db:5432/x"),
            "postgres://app:<redacted:database-url>@db:5432/x"
        );
        assert_eq!(
            r.redact("password=hunter22!"),
            "password=<redacted:password-assignment>"
        );
    }

    #[test]
    fn the_token_loop_equals_its_regex() {
        let re = regex::bytes::Regex::new(
            r"[A-Za-z0-9+/_\-]+(?:[.|][A-Za-z0-9+/_\-]+|%[0-9A-Fa-f]{2}[A-Za-z0-9+/_\-]*)*",
        )
        .unwrap();
        for text in [
            "",
            "short tokens only here",
            "abcdefghijklmnop",
            "abcdefghijklmno",
            "key=QWErty1234567890abcd== next=zzzzzzzzzzzzzzzzzzzz===x",
            "a/b+c_d-e0123456789ABCDEF;aaaaaaaaaaaaaaaa=\u{e9}aaaaaaaaaaaaaaaaaaaa",
            "éabcdefghijklmnopqé",
            "glptt-0123456789abcdefABCD.01.abcdefgh end. tok|abc|Zq8Fh3kLm9Pq2Rs7Tv4W",
            "Bearer eyJhbGciOi%2BJIUzI1NiIsInR5cCI6%3D%3D and a.b. x%zz 100%25",
        ] {
            let b = text.as_bytes();
            let want: Vec<(usize, usize)> = re
                .find_iter(b)
                .filter(|m| m.len() >= 16)
                .map(|m| {
                    let pad = b[m.end()..]
                        .iter()
                        .take(2)
                        .take_while(|&&c| c == b'=')
                        .count();
                    (m.start(), m.end() + pad)
                })
                .collect();
            assert_eq!(
                entropy::tokens(text.as_bytes()).collect::<Vec<_>>(),
                want,
                "{text}"
            );
        }
        // A colon joins between two non-digits only (not `file.rs:12:` or a clock time).
        let spans = |t: &'static str| -> Vec<&'static str> {
            entropy::tokens(t.as_bytes())
                .map(|(a, b)| &t[a..b])
                .collect()
        };
        assert_eq!(
            spans("tok:Zq8Fh3kLm9Pq2Rs7Tv4W src/app.rs:144:Zq8Fh3kLm9Pq2Rs7Tv4W 10:30:00"),
            ["tok:Zq8Fh3kLm9Pq2Rs7Tv4W", "Zq8Fh3kLm9Pq2Rs7Tv4W"]
        );
    }

    #[test]
    fn hashes_and_uuids_are_not_secrets() {
        for text in [
            "commit 9fceb02d0ae598e95dc970b74767f19372d61af8",
            "id 123e4567-e89b-12d3-a456-426614174000",
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "version 1.2.3.4 released",
        ] {
            assert!(kinds(text).is_empty(), "{text}: {:?}", kinds(text));
        }
    }

    #[test]
    fn a_found_value_inside_a_longer_word_is_not_a_repeat() {
        let r = Redactor::new(&RedactConfig::default()).unwrap();
        let key = "9f86d081884c7d659a2feaa0c55ad015";
        let text = format!("key={key} user=bob\ncommit {key}a3bf4f1b\nagain {key}\n");
        assert_eq!(
            r.redact(&text),
            format!(
                "key=<redacted:labelled-token> user=bob\ncommit {key}a3bf4f1b\n\
                 again <redacted:labelled-token>\n"
            )
        );
    }

    #[test]
    fn sql_command_line_repeats_and_card_codes_are_masked_whole() {
        let r = Redactor::new(&RedactConfig::default()).unwrap();
        let text = "password: Tr0ub4dor-3x\nthen log in with Tr0ub4dor-3x again\n\
            CREATE USER 'app'@'%' IDENTIFIED BY 'Zq8-mysql-pw';\n\
            ALTER ROLE app WITH LOGIN PASSWORD 'pg-s3cret-77';\n\
            mysql --password=hunter2x -h db\n\
            curl -u \"admin:Zq8-pass\" https://x.example/\n\
            deploy --password $DEPLOY_PASSWORD\n\
            the password-file option";
        let out = r.redact(text);
        for secret in [
            "Tr0ub4dor-3x",
            "Zq8-mysql-pw",
            "pg-s3cret-77",
            "hunter2x",
            "Zq8-pass",
        ] {
            assert!(!out.contains(secret), "{secret} left in:\n{out}");
        }
        assert!(out.contains("$DEPLOY_PASSWORD"), "{out}");
        assert!(out.contains("password-file option"), "{out}");
        let doc = serde_json::json!({"card": {"cvv": "123", "pin": 4321}, "pin": true,
                                     "gpio": {"pin": 13}, "auth": {"bearer": "abc.def"}});
        let masked = r.redact_json(&doc);
        assert_eq!(
            masked["card"]["cvv"], "<redacted:sensitive-key>",
            "{masked}"
        );
        assert_eq!(
            masked["card"]["pin"], "<redacted:sensitive-key>",
            "{masked}"
        );
        assert_eq!(masked["pin"], true);
        assert_eq!(masked["gpio"]["pin"], 13);
        assert_eq!(
            masked["auth"]["bearer"], "<redacted:sensitive-key>",
            "{masked}"
        );
    }

    #[test]
    fn vendor_formats_are_named() {
        let r = Redactor::new(&RedactConfig::default()).unwrap();
        let samples = [
            ("newrelic-key", "NRAK-UJZDE8GXD6NCF10EPF91DHODZDO"),
            (
                "supabase-token",
                "sbp_149d439536b3216fdaeeb975729fae923d5a4fd1",
            ),
            (
                "sonarqube-token",
                "squ_2aabfe228f219e9cb0eb53f16947ccf25ec84d8d",
            ),
            (
                "sentry-token",
                "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",
            ),
            (
                "dynatrace-token",
                "dt0c01.4K7BN7XJ8B7TFQ7XKWO886VO.MPZOM75WBBR4QMW2WXFOGO4MVN4A4WFHYM4L1VFZ3ZFKKIBJ3J4WJ99IBAG7I1MN",
            ),
            ("databricks-token", "dapi08697a8d41bed440e50454f31af31768"),
            (
                "docker-swarm-token",
                "SWMTKN-1-cg629be2u66mr26846p7q9m2i0hz2uep1enthjxjqi3ogz5kok-16zv0mwufxbv932byv7s6ehog",
            ),
            (
                "postman-key",
                "PMAK-2881584d8c4fa2815d280282-7283e0ad84173581569969e58b081006f7",
            ),
            (
                "nuget-key",
                "oy22g158z6tnovmizwdiaeq1kdfy6spsc3lkr2aqxv9upc",
            ),
            ("alibaba-access-key", "LTAI94TNWLAVYFeRgpMP"),
            (
                "rubygems-key",
                "rubygems_02824c1c099724caf4941d4072014b3ce107f80e222f8287",
            ),
            ("akamai-token", "akab-no35ye4scmejvqti-a4d5rgn5s7s333h9"),
            ("gitlab-token", "glimt-MTF7eBSdE0g9cRYN687NElFJv"),
            ("twilio-key", "SK8B483B7FFC050FEC94DBCA3A0AAC3609"),
        ];
        for (kind, value) in samples {
            let text = format!("config: {value} (rotated)");
            let found = r.scan(&text);
            assert!(
                found
                    .iter()
                    .any(|f| f.kind == kind && text.get(f.start..f.end) == Some(value)),
                "{kind}: {found:?}"
            );
        }
        let text = "Cookie: _gitlab_session=8b2cc2bd818319478da6bd0c621de49f; path=/";
        assert!(!r.redact(text).contains("8b2cc2bd818319478da6bd0c621de49f"));
    }

    #[test]
    fn short_labels_and_code_forms_mask_the_value_not_the_type() {
        let r = Redactor::new(&RedactConfig::default()).unwrap();
        let text = "ID:alice PW:Zq8pw-7\n\
            user=bob,pass=hunter22\n\
            $pass => 'S3cret-x';\n\
            def login(passwd: str = \"Tr0ub4dor3\"):\n\
            val password: String = \"kotlin-pw-9\"\n\
            if (token === 'abc123xyz') {}\n\
            #define DB_PASSWORD \"c-macro-pw1\"\n";
        let out = r.redact(text);
        for secret in [
            "Zq8pw-7",
            "hunter22",
            "S3cret-x",
            "Tr0ub4dor3",
            "kotlin-pw-9",
            "abc123xyz",
            "c-macro-pw1",
        ] {
            assert!(!out.contains(secret), "{secret} left in:\n{out}");
        }
        // The declaration's type stays; only the literal is masked.
        assert!(out.contains("val password: String = "), "{out}");
        for harmless in [
            "pass: 100%",
            "password: String",
            "tests pass: 12 of 12",
            "pw: ${PW}",
        ] {
            assert!(
                r.scan(harmless)
                    .iter()
                    .all(|f| f.category != Category::Secret),
                "{harmless}: {:?}",
                r.scan(harmless)
            );
        }
    }

    #[test]
    fn key_blocks_tokens_tables_and_public_material() {
        let r = Redactor::new(&RedactConfig::default()).unwrap();
        // A key concatenated in code: the whole block, its last line and END line included.
        let body: Vec<String> = (0..4)
            .map(|i| {
                format!("MIIEpAIBAAKCAQEA{i}x7Qb9Zq2Lm5Np8Rs1Tv4Wx6Yz0Ab3Cd5Ef7Gh9Jk2Lm4No6Pq8RsT")
            })
            .collect();
        let code = format!(
            "key = \"-----BEGIN RSA PRIVATE KEY-----\\n\" +\n{}\n  \"-----END RSA PRIVATE KEY-----\";",
            body.iter()
                .map(|l| format!("  \"{l}\\n\" +"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        let out = r.redact(&code);
        assert!(body.iter().all(|l| !out.contains(l.as_str())), "{out}");
        assert!(!out.contains("END RSA"), "{out}");
        // Many headers and no END line (a scan stays linear: `benches/decision.rs` times it):
        // all of it is masked.
        let many = "-----BEGIN RSA PRIVATE KEY-----\nabc\n".repeat(2000);
        let found = r.scan(&many);
        assert_eq!(
            (found.first().map(|f| f.start), found.last().map(|f| f.end)),
            (Some(0), Some(many.len()))
        );
        // A dotted token and a URL-encoded one are masked whole.
        for token in [
            "glptt-Zq8Fh3kLm9Pq2Rs7Tv4W.01.Xb6Yc2Kd",
            "eyZq8Fh3kLm9Pq2Rs7Tv4W%2BXb6Yc2Kd9Qz%3D%3D",
        ] {
            let out = r.redact(&format!("sent {token} along"));
            assert!(!out.contains(token) && !out.contains("Xb6Yc2Kd"), "{out}");
        }
        // A Markdown table's password column.
        let table = "| host | user | password |\n|---|---|---|\n| db1 | app | Zq8-Fh3k!Lm |\n";
        assert!(!r.redact(table).contains("Zq8-Fh3k!Lm"));
        // Not secrets: a certificate body, an SSH public key, SOPS and Vault transit values,
        // a path, base64 of prose.
        for text in [
            "-----BEGIN CERTIFICATE-----\nMIIDxTCCAq2gAwIBAgIUAKo/CeiIsYehI6pdvqVeUqg9Nn4DUVsclnEDjsIc8z7d\n-----END CERTIFICATE-----",
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHq7Zq8Fh3kLm9Pq2Rs7Tv4WXb6Yc2Kd9Qz ann@host",
            "user: ENC[AES256_GCM,data:drdySHAOyf1oR/vTh7bAU79dkI9BqWhfwYAaAlOG1FzK=,type:str]",
            "db: vault:v1:xf5kbjMMk+fMAohSYUqq0muOM1uL0eLE5D0e/xcnv4wQpTV/VXBB",
            "/usr/lib/x86_64-linux-gnu/libQt5Core.so.5.15.2",
            "VGhlIHF1aWNrIGJyb3duIGZveCBqdW1wcyBvdmVyIHRoZSBsYXp5IGRvZw==",
        ] {
            assert!(
                r.scan(text)
                    .iter()
                    .all(|f| !matches!(f.category, Category::Secret | Category::Entropy)),
                "{text}: {:?}",
                r.scan(text)
            );
        }
    }

    #[test]
    fn weak_passwords_and_overlaps_are_not_dropped() {
        let r = Redactor::new(&RedactConfig::default()).unwrap();
        for (text, secret) in [
            ("DB_PASSWORD=Welcome123456", "Welcome123456"),
            ("API_KEY=prod_Xk9#mQ2v77", "prod_Xk9#mQ2v77"),
            (
                "curl https://api.telegram.org/bot711353476:AAiczOUWGUPh9GNYY0nawHyEAR5NlVFWcIH/sendMessage",
                "711353476:AAiczOUWGUPh9GNYY0nawHyEAR5NlVFWcIH",
            ),
            (
                "<property name=\"hibernate.connection.password\">rp4qf8uow6</property>",
                "rp4qf8uow6",
            ),
        ] {
            let out = r.redact(text);
            assert!(!out.contains(secret), "{text} -> {out}");
        }
        // A configured signal over a built-in secret never hides the secret.
        let detector = CustomDetector::parse(
            RawDetector {
                name: "note-marker".to_owned(),
                category: Some("injection".to_owned()),
                regex: "password: [A-Za-z0-9]+".to_owned(),
                ..RawDetector::default()
            },
            0,
            &std::collections::BTreeSet::new(),
        )
        .unwrap();
        let r = Redactor::new(&RedactConfig {
            detectors: vec![detector],
            ..RedactConfig::default()
        })
        .unwrap();
        assert!(!r.redact("password: Zq8Fh3kLm9").contains("Zq8Fh3kLm9"));
    }
}
