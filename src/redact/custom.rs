//! Detectors an operator adds in config (`[[redaction.detectors]]`): a regex with an optional
//! capture group for the value, and filters a candidate must pass (keywords on its line, an
//! entropy floor, a checksum, a placeholder list). Checked once when the config loads; the
//! redactor runs them like the built-in rows, ahead of them.

use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock, PoisonError};

use regex::bytes::Regex;

use super::{Category, validate};

/// Most custom detectors in one config.
pub const MAX_DETECTORS: usize = 256;
/// Longest custom detector name.
const MAX_NAME: usize = 64;
/// Bytes before a match searched for its keywords (on the same line).
const KEYWORD_WINDOW: usize = 256;

/// A checksum or shape a candidate must pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validator {
    /// Luhn (payment cards, IMEI, many account numbers).
    Luhn,
    /// IBAN mod-97.
    Iban,
    /// US SSN ranges.
    UsSsn,
}

impl Validator {
    /// Every validator's config name.
    pub const NAMES: [&'static str; 3] = ["luhn", "iban", "us-ssn"];

    /// The validator a config name stands for.
    pub fn parse(name: &str) -> Option<Validator> {
        match name {
            "luhn" => Some(Validator::Luhn),
            "iban" => Some(Validator::Iban),
            "us-ssn" => Some(Validator::UsSsn),
            _ => None,
        }
    }

    pub(super) fn check(self) -> fn(&str) -> bool {
        match self {
            Validator::Luhn => validate::luhn_digits,
            Validator::Iban => validate::iban,
            Validator::UsSsn => validate::ssn,
        }
    }
}

/// One detector from config, checked: a valid name and category, a regex that compiles, a
/// capture group that exists.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomDetector {
    /// The finding's kind (`acme-api-key`).
    pub name: &'static str,
    /// `secret` or `pii` (masked), or `injection` (reported, never masked).
    pub category: Category,
    /// The pattern (Rust `regex` syntax, linear time).
    pub regex: String,
    /// The capture group holding the value (0: the whole match).
    pub group: usize,
    /// Lowercase words one of which must be on the value's line, before it or inside the
    /// match (empty: none needed).
    pub keywords: Vec<String>,
    /// Shannon entropy the value must reach, in bits per character.
    pub min_entropy: Option<f64>,
    /// A checksum the value must pass.
    pub validator: Option<Validator>,
    /// Lowercase strings whose presence in a value makes it a placeholder, not a secret.
    pub placeholders: Vec<String>,
}

/// What is wrong with a detector in config: the message and a hint.
pub type Problem = (String, &'static str);

/// The raw fields of one `[[redaction.detectors]]` table, as the config is read.
#[derive(Debug, Default, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDetector {
    /// `name`.
    pub name: String,
    /// `category` (default `secret`).
    pub category: Option<String>,
    /// `regex`.
    pub regex: String,
    /// `group`.
    pub group: Option<usize>,
    /// `keywords`.
    #[serde(default)]
    pub keywords: Vec<String>,
    /// `min_entropy`.
    pub min_entropy: Option<f64>,
    /// `validator`.
    pub validator: Option<String>,
    /// `placeholders`.
    #[serde(default)]
    pub placeholders: Vec<String>,
}

/// The compiled form of a detector's regex, with the limits every detector gets.
pub(super) fn compile(regex: &str) -> Result<Regex, regex::Error> {
    super::builder(regex).build()
}

impl CustomDetector {
    /// Checks one raw detector; `taken` holds the names already in use (built-in kinds,
    /// categories and earlier detectors).
    pub fn parse(
        raw: RawDetector,
        index: usize,
        taken: &BTreeSet<String>,
    ) -> Result<CustomDetector, Problem> {
        let at = format!("`redaction.detectors[{index}]`");
        let name = raw.name.trim();
        let name_ok = !name.is_empty()
            && name.len() <= MAX_NAME
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && name.bytes().next().is_some_and(|b| b.is_ascii_lowercase());
        if !name_ok {
            return Err((
                format!(
                    "{at}: name `{name}` must be 1 to {MAX_NAME} characters of a-z, 0-9 and `-`, starting with a letter"
                ),
                "names become finding kinds (`<redacted:NAME>`) and gate rule names",
            ));
        }
        if taken.contains(name) {
            return Err((
                format!(
                    "{at}: name `{name}` is already a category, a built-in detector or an earlier detector"
                ),
                "pick a name of your own (prefix it with your organisation, e.g. `acme-api-key`)",
            ));
        }
        let category = match raw.category.as_deref().unwrap_or("secret") {
            "secret" => Category::Secret,
            "pii" => Category::Pii,
            "injection" => Category::Injection,
            other => {
                return Err((
                    format!("{at} (`{name}`): category `{other}` is not secret, pii or injection"),
                    "secret and pii findings are masked; injection findings are reported only",
                ));
            }
        };
        let compiled = compile(&raw.regex).map_err(|e| {
            (
                format!("{at} (`{name}`): the regex does not compile: {e}"),
                "Rust `regex` syntax: no look-around or back-references; escape `\\` in TOML basic strings or use a literal string ('…')",
            )
        })?;
        let group = raw.group.unwrap_or(0);
        if group >= compiled.captures_len() {
            return Err((
                format!(
                    "{at} (`{name}`): group {group} does not exist; the regex has {} capture group(s)",
                    compiled.captures_len() - 1
                ),
                "0 masks the whole match; N masks the Nth `( … )` group",
            ));
        }
        if compiled.is_match(b"") {
            return Err((
                format!("{at} (`{name}`): the regex matches the empty string"),
                "a detector must match at least one character (use `+` rather than `*`)",
            ));
        }
        if let Some(bits) = raw.min_entropy
            && !(bits.is_finite() && (0.0..=8.0).contains(&bits))
        {
            return Err((
                format!(
                    "{at} (`{name}`): min_entropy = {bits} must be 0.0 to 8.0 (bits per character)"
                ),
                "3.0 keeps most random tokens and drops words; 4.0 suits base64 keys",
            ));
        }
        let validator = match raw.validator.as_deref() {
            None => None,
            Some(v) => Some(Validator::parse(v).ok_or_else(|| {
                (
                    format!(
                        "{at} (`{name}`): validator `{v}` is not one of {}",
                        Validator::NAMES.join(", ")
                    ),
                    "leave it out to accept every match",
                )
            })?),
        };
        let lower = |list: Vec<String>, what: &str| -> Result<Vec<String>, Problem> {
            list.into_iter()
                .map(|k| {
                    let k = k.trim().to_ascii_lowercase();
                    if k.is_empty() || k.len() > 128 {
                        Err((
                            format!("{at} (`{name}`): every entry of `{what}` must be 1 to 128 characters"),
                            "remove the empty entry",
                        ))
                    } else {
                        Ok(k)
                    }
                })
                .collect()
        };
        Ok(CustomDetector {
            name: intern(name),
            category,
            regex: raw.regex,
            group,
            keywords: lower(raw.keywords, "keywords")?,
            min_entropy: raw.min_entropy,
            validator,
            placeholders: lower(raw.placeholders, "placeholders")?,
        })
    }

    /// Whether a candidate value (at `start..end` of `text`) passes the detector's filters
    /// other than the validator: keywords on its line, the entropy floor, the placeholders.
    pub(super) fn passes(&self, text: &str, match_start: usize, start: usize, end: usize) -> bool {
        let Some(value) = text.get(start..end) else {
            return false;
        };
        if let Some(bits) = self.min_entropy
            && validate::entropy(value) < bits
        {
            return false;
        }
        if !self.placeholders.is_empty() {
            let v = value.to_ascii_lowercase();
            if self.placeholders.iter().any(|p| v.contains(p.as_str())) {
                return false;
            }
        }
        if self.keywords.is_empty() {
            return true;
        }
        let bytes = text.as_bytes();
        let from = match_start.saturating_sub(KEYWORD_WINDOW);
        let line_start = bytes
            .get(from..match_start)
            .and_then(|b| b.iter().rposition(|&c| c == b'\n'))
            .map_or(from, |i| from + i + 1);
        let window = bytes.get(line_start..end).unwrap_or_default();
        let window = window.to_ascii_lowercase();
        self.keywords
            .iter()
            .any(|k| window.windows(k.len()).any(|w| w == k.as_bytes()))
    }
}

/// `name` as a `&'static str`, leaked once per distinct name for the life of the process
/// (findings carry their kind by reference; a reload with the same names leaks nothing).
fn intern(name: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<BTreeSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = names.get(name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}
