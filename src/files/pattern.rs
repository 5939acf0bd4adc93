//! Patterns for `search_files`, `count_matches` and `edit_file`: literal text, or a regular
//! expression compiled by the `regex` crate (finite automata, no backtracking: a scan is
//! linear in the text), with caps on the pattern's length, nesting and compiled size so no
//! pattern can make the sidecar build a huge automaton.

/// Longest pattern accepted, bytes.
pub const MAX_PATTERN_BYTES: usize = 10_000;

/// Compiled-program cap for one regex.
const SIZE_LIMIT: usize = 1 << 20;

/// Lazy-DFA cache cap for one regex.
const DFA_SIZE_LIMIT: usize = 2 << 20;

/// Deepest nesting of groups and repetitions.
const NEST_LIMIT: u32 = 64;

/// Why a pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// Longer than [`MAX_PATTERN_BYTES`].
    #[error("the pattern is longer than {MAX_PATTERN_BYTES} bytes")]
    TooLong,
    /// Not a valid regex, or over the size limits.
    #[error("invalid regular expression: {0}")]
    Invalid(String),
}

/// A compiled pattern.
#[derive(Debug, Clone)]
pub enum Pattern {
    /// Literal text.
    Literal(String),
    /// A regular expression.
    Regex(regex::Regex),
}

impl Pattern {
    /// Literal text.
    pub fn literal(text: &str) -> Result<Pattern, PatternError> {
        if text.len() > MAX_PATTERN_BYTES {
            return Err(PatternError::TooLong);
        }
        Ok(Pattern::Literal(text.to_owned()))
    }

    /// A regular expression, within the limits.
    pub fn regex(source: &str) -> Result<Pattern, PatternError> {
        if source.len() > MAX_PATTERN_BYTES {
            return Err(PatternError::TooLong);
        }
        regex::RegexBuilder::new(source)
            .size_limit(SIZE_LIMIT)
            .dfa_size_limit(DFA_SIZE_LIMIT)
            .nest_limit(NEST_LIMIT)
            .build()
            .map(Pattern::Regex)
            .map_err(|e| {
                // The crate's message spans several lines with a caret diagram; keep it whole
                // but on one line for JSON answers.
                PatternError::Invalid(
                    e.to_string()
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" "),
                )
            })
    }

    /// `literal` picks [`Pattern::literal`], otherwise [`Pattern::regex`].
    pub fn new(source: &str, literal: bool) -> Result<Pattern, PatternError> {
        if literal {
            Pattern::literal(source)
        } else {
            Pattern::regex(source)
        }
    }

    /// Byte ranges of the non-overlapping matches in `text`, leftmost first.
    pub fn find_iter<'a>(&'a self, text: &'a str) -> Box<dyn Iterator<Item = (usize, usize)> + 'a> {
        match self {
            Pattern::Literal(needle) => Box::new(
                text.match_indices(needle.as_str())
                    .map(|(at, m)| (at, at + m.len())),
            ),
            Pattern::Regex(re) => Box::new(re.find_iter(text).map(|m| (m.start(), m.end()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_that_would_blow_up_a_backtracker_run_in_linear_time() {
        let p = Pattern::regex("(a+)+$").unwrap();
        let text = format!("{}!", "a".repeat(100_000));
        // A backtracking engine would need about 2^100000 steps here; this returns at once.
        assert_eq!(p.find_iter(&text).count(), 0);
    }

    #[test]
    fn oversized_and_invalid_patterns_are_refused() {
        assert_eq!(
            Pattern::regex(&"a".repeat(MAX_PATTERN_BYTES + 1)).unwrap_err(),
            PatternError::TooLong
        );
        let huge = Pattern::regex(r"\w{1000}\w{1000}\w{1000}").unwrap_err();
        assert!(matches!(huge, PatternError::Invalid(_)), "{huge:?}");
        let bad = Pattern::regex("(").unwrap_err().to_string();
        assert!(!bad.contains('\n'), "{bad}");
    }

    #[test]
    fn literals_match_as_written() {
        let p = Pattern::new("a.b", true).unwrap();
        assert_eq!(
            p.find_iter("a.b axb a.b").collect::<Vec<_>>(),
            [(0, 3), (8, 11)]
        );
    }
}
