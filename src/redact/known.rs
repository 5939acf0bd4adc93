//! Known secrets: the values of configured environment variables and secret files, found
//! verbatim and in the encodings a leak takes: base64 (standard and URL-safe, also inside a
//! longer base64 text at any alignment), hex (either case), URL percent-encoding and JSON
//! escaping. One Aho-Corasick automaton matches every variant of every value in one pass.
//!
//! The values are held only in memory, in the automaton; they are never logged, and
//! [`KnownSecrets`]'s `Debug` shows only how many there are.

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

/// Shortest value accepted: shorter ones would match ordinary text.
pub const MIN_KNOWN_SECRET: usize = 8;

/// Longest value accepted (the stream gate holds back this much).
pub const MAX_KNOWN_SECRET: usize = 16 * 1024;

/// Shortest encoded fragment matched (a base64 fragment at an alignment).
const MIN_VARIANT: usize = 8;

/// Secret values to find, with where each came from (for messages, never the value).
#[derive(Clone, Default, PartialEq)]
pub struct KnownSecrets {
    values: Vec<String>,
}

impl std::fmt::Debug for KnownSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KnownSecrets({} values)", self.values.len())
    }
}

impl KnownSecrets {
    /// Adds a value (trailing newlines dropped, as secret files usually end with one). A value
    /// shorter than [`MIN_KNOWN_SECRET`] or longer than [`MAX_KNOWN_SECRET`] bytes is refused
    /// with its length.
    pub fn add(&mut self, value: &str) -> Result<(), usize> {
        let v = value.trim_end_matches(['\n', '\r']);
        if !(MIN_KNOWN_SECRET..=MAX_KNOWN_SECRET).contains(&v.len()) {
            return Err(v.len());
        }
        if !self.values.iter().any(|x| x == v) {
            self.values.push(v.to_owned());
        }
        Ok(())
    }

    /// How many values.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The automaton over every variant of every value (`None` when there are no values),
    /// and the longest variant's length.
    pub(super) fn automaton(&self) -> Result<(Option<AhoCorasick>, usize), String> {
        if self.values.is_empty() {
            return Ok((None, 0));
        }
        let mut variants: Vec<String> = self.values.iter().flat_map(|v| variants(v)).collect();
        variants.sort();
        variants.dedup();
        let longest = variants.iter().map(String::len).max().unwrap_or(0);
        AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&variants)
            .map(|ac| (Some(ac), longest))
            .map_err(|e| format!("known secrets: {e}"))
    }
}

/// Every form of `value` to look for.
fn variants(value: &str) -> Vec<String> {
    let bytes = value.as_bytes();
    let mut out = vec![value.to_owned()];
    for engine in [&STANDARD, &URL_SAFE] {
        out.push(engine.encode(bytes));
    }
    // Inside a longer base64 text the value starts at one of three alignments; the characters
    // that depend only on the value's bytes are the same whatever surrounds it.
    for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
        for offset in 0..3_usize {
            let mut padded = vec![0_u8; offset];
            padded.extend_from_slice(bytes);
            let encoded = engine.encode(&padded);
            let skip = (offset * 8).div_ceil(6);
            let keep = padded.len() * 8 / 6;
            if let Some(inner) = encoded.get(skip..keep) {
                out.push(inner.to_owned());
            }
        }
    }
    out.push(hex::encode(bytes));
    out.push(hex::encode_upper(bytes));
    // Strict (every non-alphanumeric byte) and RFC 3986 (`-._~` kept) encodings, with
    // upper- and lowercase hex digits, and `+` for spaces as forms encode them.
    const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    for set in [percent_encoding::NON_ALPHANUMERIC, UNRESERVED] {
        let upper = percent_encoding::utf8_percent_encode(value, set).to_string();
        let lower = lower_hex_escapes(&upper);
        for p in [upper, lower] {
            out.push(p.replace("%20", "+"));
            out.push(p);
        }
    }
    if let Ok(json) = serde_json::to_string(value)
        && let Some(inner) = json.get(1..json.len().saturating_sub(1))
    {
        out.push(inner.to_owned());
    }
    out.retain(|v| v.len() >= MIN_VARIANT);
    out
}

/// `%2F` → `%2f`: the two hex digits after each `%` in lowercase.
fn lower_hex_escapes(encoded: &str) -> String {
    let mut out = String::with_capacity(encoded.len());
    let mut after_percent = 0;
    for c in encoded.chars() {
        if after_percent > 0 {
            out.push(c.to_ascii_lowercase());
            after_percent -= 1;
        } else {
            out.push(c);
            if c == '%' {
                after_percent = 2;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_encoding_is_found_and_short_values_are_refused() {
        let mut k = KnownSecrets::default();
        assert_eq!(k.add("short\n"), Err(5));
        assert_eq!(
            k.add(&"x".repeat(MAX_KNOWN_SECRET + 1)),
            Err(MAX_KNOWN_SECRET + 1)
        );
        k.add("s3cr3t value/with+odd=chars\n").unwrap();
        assert_eq!(format!("{k:?}"), "KnownSecrets(1 values)");
        let ac = k.automaton().unwrap().0.unwrap();
        let v = "s3cr3t value/with+odd=chars";
        let mut texts = vec![
            v.to_owned(),
            STANDARD.encode(v),
            URL_SAFE_NO_PAD.encode(v),
            hex::encode(v),
            hex::encode_upper(v),
            percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC)
                .to_string(),
            "s3cr3t+value%2fwith%2bodd%3dchars".to_owned(),
            // As a JSON string inside JSON text (a tool output string holding a document).
            serde_json::to_string(&serde_json::to_string(&format!("key: {v}")).unwrap()).unwrap(),
        ];
        // Inside longer base64 at each alignment.
        for prefix in ["", "a", "ab", "abc"] {
            texts.push(STANDARD.encode(format!("{prefix}user:{v}:tail")));
        }
        for t in &texts {
            assert!(ac.find(t.as_str()).is_some(), "not found in {t}");
        }
        assert!(ac.find("s3cr3t value").is_none());
    }
}
